//! Dropping a store's files from the kernel's page cache, so that the reads after it
//! reach the disk: what benchmarks and tests of cold reads need without root (as root,
//! `echo 3 > /proc/sys/vm/drop_caches` drops everything instead).

use std::path::Path;

use crate::{Error, Result};

/// Asks the kernel to drop the cached pages of every file under `dir` (recursively),
/// with `posix_fadvise(POSIX_FADV_DONTNEED)` after an `fsync` of each (dirty pages are
/// not dropped); returns the bytes of the files it went through.
///
/// Pages that a process has mapped stay cached: call it on a store that is closed, or
/// before the store reads through its maps (a store just opened has touched none).
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let db = cairn::Db::open(dir.path())?;
/// db.put("k", vec![7u8; 100_000])?;
/// db.close()?;
/// assert!(cairn::evict_page_cache(dir.path())? >= 100_000);
/// # Ok::<(), cairn::Error>(())
/// ```
pub fn evict_page_cache(dir: impl AsRef<Path>) -> Result<u64> {
    let dir = dir.as_ref();
    let mut total = 0;
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in rd {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        let ty = entry.file_type().map_err(|e| Error::io(&path, e))?;
        if ty.is_dir() {
            total += evict_page_cache(&path)?;
        } else if ty.is_file() {
            let f = match std::fs::File::open(&path) {
                Ok(f) => f,
                // Removed meanwhile (compaction): nothing to drop.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(&path, e)),
            };
            f.sync_data().map_err(|e| Error::io(&path, e))?;
            total += f.metadata().map_err(|e| Error::io(&path, e))?.len();
            drop_pages(&f);
        }
    }
    Ok(total)
}

#[cfg(target_os = "linux")]
fn drop_pages(f: &std::fs::File) {
    use std::os::unix::io::AsRawFd;
    // SAFETY: an advisory system call on a descriptor `f` keeps open.
    unsafe {
        libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
    }
}

#[cfg(not(target_os = "linux"))]
fn drop_pages(_f: &std::fs::File) {}
