//! The one error type of cairn.

use std::io;
use std::path::PathBuf;

/// Result alias used throughout cairn.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in cairn.
///
/// Library code never panics on bad input or I/O failure; it returns one of these.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key is longer than [`crate::MAX_KEY_LEN`]. Nothing was written.
    #[error("key of {len} bytes exceeds the limit of {max} bytes")]
    KeyTooLarge {
        /// Length of the rejected key.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The value is longer than [`crate::MAX_VALUE_LEN`]. Nothing was written.
    #[error("value of {len} bytes exceeds the limit of {max} bytes")]
    ValueTooLarge {
        /// Length of the rejected value.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The write would make the store larger than its `max_size`, or the disk is full
    /// (`ENOSPC`). Refused by `max_size`, the write was not applied; deletes and
    /// compaction free space. A durable write (`SyncPolicy::Always`, or
    /// `Db::sync_written` after deferred ones) whose commit-log write or sync met a full
    /// disk is in memory already — readers see it — and its outcome is unknown: it is
    /// written with the next durable write once the disk has room, and gone at the
    /// next open if it never is. No write acknowledged after it is lost either way.
    #[error("storage full: {0}")]
    StorageFull(String),
    /// Another handle (in this or another process) has the store open (the open
    /// waited a quarter of a second for it to close first).
    #[error("store at {0} is locked by another open handle")]
    Locked(PathBuf),
    /// Stored data failed its checksum or is structurally damaged.
    #[error("corruption in {path}: {detail}")]
    Corruption {
        /// The damaged file.
        path: PathBuf,
        /// What is wrong, including the offset where known.
        detail: String,
    },
    /// The directory holds a store of another format version, or is not a cairn store.
    #[error("format error in {path}: {detail}")]
    Format {
        /// The offending file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A batch required a key to have no value ([`crate::WriteBatch::put_new`]) and it
    /// had one when the batch was applied. Nothing of the batch was written.
    #[error("key already exists ({len} bytes)")]
    KeyExists {
        /// Length of the key (its bytes are the caller's).
        len: usize,
    },
    /// A transaction's commit found that something it read — a key, or a range it
    /// scanned — was written after its snapshot was taken ([`crate::Transaction`]).
    /// Nothing of the transaction was written; run it again ([`crate::Db::transact`]
    /// does).
    #[error("transaction conflict: something it read was written since its snapshot")]
    Conflict,
    /// An option or argument is invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An fsync failed earlier, so the store refuses writes until it is reopened (the
    /// kernel may have dropped the unsynced pages; reopening recovers what is on disk).
    /// Reads keep working.
    #[error("store is read-only after an earlier I/O failure: {0}")]
    ReadOnly(String),
    /// The handle was opened with [`crate::Options::read_only`]: it reads the store
    /// (and follows its writer with [`crate::Db::catch_up`]) but takes no writes.
    /// Nothing was written.
    #[error("the store at {0} is open read-only (a snapshot that follows its writer): writes are refused")]
    OpenedReadOnly(PathBuf),
    /// The store was closed ([`crate::Db::close`]) while this handle was still in
    /// use: writes are refused.
    #[error("the store is closed")]
    Closed,
    /// An operating-system I/O error.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// Wraps an I/O error with the path it happened on. `ENOSPC` becomes
    /// [`Error::StorageFull`].
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> Error {
        let path = path.into();
        if source.raw_os_error() == Some(libc::ENOSPC)
            || source.kind() == io::ErrorKind::StorageFull
        {
            return Error::StorageFull(format!(
                "no space left on device writing {}",
                path.display()
            ));
        }
        Error::Io { path, source }
    }

    /// Damage found in `path` (a checksum mismatch, a structure that cannot be).
    pub fn corruption(path: impl Into<PathBuf>, detail: impl Into<String>) -> Error {
        Error::Corruption {
            path: path.into(),
            detail: detail.into(),
        }
    }

    /// `path` is not in a format this build reads.
    pub fn format(path: impl Into<PathBuf>, detail: impl Into<String>) -> Error {
        Error::Format {
            path: path.into(),
            detail: detail.into(),
        }
    }
}
