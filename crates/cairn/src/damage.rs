//! [`Damage`]: one damaged place in a store's files, as found while opening, sealing or
//! verifying.

use std::path::PathBuf;

use serde::Serialize;

/// A damaged place in the store.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Damage {
    /// The damaged file.
    pub path: PathBuf,
    /// Byte offset of the damage, where known.
    pub offset: Option<u64>,
    /// What is wrong.
    pub detail: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.offset {
            Some(o) => write!(f, "{} at offset {o}: {}", self.path.display(), self.detail),
            None => write!(f, "{}: {}", self.path.display(), self.detail),
        }
    }
}
