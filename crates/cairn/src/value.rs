//! The value type returned by reads.

use std::ops::Deref;
use std::sync::Arc;

use crate::segment::SegmentFile;

/// A value read from the store. Dereferences to `[u8]`. A value read from a sealed
/// segment points straight into the segment's memory map (no copy); holding it keeps
/// that segment file readable until the value is dropped.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let db = cairn::Db::open(dir.path())?;
/// db.put("k", "hello")?;
/// let v = db.get("k")?.unwrap();
/// assert_eq!(&*v, b"hello");
/// assert_eq!(v.into_vec(), b"hello".to_vec());
/// # Ok::<(), cairn::Error>(())
/// ```
#[derive(Clone)]
pub struct Value {
    repr: Repr,
    start: usize,
    end: usize,
}

#[derive(Clone)]
enum Repr {
    /// The record's bytes, copied out of a buffer or read with `pread`.
    Owned(Vec<u8>),
    /// A sealed segment whose map holds the value at `start..end`.
    Mapped(Arc<SegmentFile>),
}

impl Value {
    /// The bytes `start..` of a record read into `buf`.
    pub(crate) fn new(buf: Vec<u8>, start: usize) -> Value {
        let end = buf.len();
        Value {
            repr: Repr::Owned(buf),
            start,
            end,
        }
    }

    /// The bytes `start..end` of the map of `file` (which must cover them).
    pub(crate) fn mapped(file: Arc<SegmentFile>, start: usize, end: usize) -> Value {
        debug_assert!(file.mapped().is_some_and(|m| m.len() >= end));
        Value {
            repr: Repr::Mapped(file),
            start,
            end,
        }
    }

    /// The value as an owned vector.
    pub fn into_vec(self) -> Vec<u8> {
        match self.repr {
            Repr::Owned(mut buf) if self.start == 0 => {
                buf.truncate(self.end);
                buf
            }
            Repr::Owned(mut buf) => {
                buf.truncate(self.end);
                buf.split_off(self.start)
            }
            Repr::Mapped(_) => self.deref().to_vec(),
        }
    }
}

impl Deref for Value {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.repr {
            Repr::Owned(buf) => &buf[self.start..self.end],
            Repr::Mapped(f) => f.mapped().map_or(&[][..], |m| &m[self.start..self.end]),
        }
    }
}

impl AsRef<[u8]> for Value {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Value({:?})", self.deref().escape_ascii().to_string())
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        **self == **other
    }
}

impl PartialEq<[u8]> for Value {
    fn eq(&self, other: &[u8]) -> bool {
        &**self == other
    }
}

impl Eq for Value {}
