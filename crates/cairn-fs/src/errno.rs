//! Errno values, the errors of every operation.

/// An errno value (`libc::ENOENT` and so on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

impl std::error::Error for Errno {}

impl From<cairn::Error> for Errno {
    fn from(e: cairn::Error) -> Errno {
        match e {
            cairn::Error::StorageFull(_) => Errno(libc::ENOSPC),
            cairn::Error::KeyTooLarge { .. } => Errno(libc::ENAMETOOLONG),
            cairn::Error::KeyExists { .. } => Errno(libc::EEXIST),
            _ => {
                log::error!("fs: store error: {e}");
                Errno(libc::EIO)
            }
        }
    }
}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> std::io::Error {
        std::io::Error::from_raw_os_error(e.0)
    }
}

/// Result of file system operations.
pub type FsResult<T> = std::result::Result<T, Errno>;

pub(super) fn err<T>(e: i32) -> FsResult<T> {
    Err(Errno(e))
}
