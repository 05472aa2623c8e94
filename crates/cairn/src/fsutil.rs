//! The file-system seam: every write, sync, create, rename, removal, truncation and
//! directory creation of the store goes through a [`FileOps`] (the plain system calls,
//! [`OsFiles`], in production), wrapped by [`Fs`] so that errors carry their path. Tests
//! put other implementations in its place (feature `test-hooks`): the fault injector
//! (`fault::FaultInjector`, which makes chosen calls fail) and the power-loss simulator
//! (`powerloss::PowerLoss`, which records what a power cut could still lose). Reads go
//! straight to the files: none of them intercepts reads.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::{Error, Result};

/// The file-system calls of the store that an implementation may intercept.
pub(crate) trait FileOps: Send + Sync {
    /// Writes all of `buf` at `off` (`pwrite`).
    fn write_at(&self, file: &File, path: &Path, buf: &[u8], off: u64) -> io::Result<()>;
    /// `fdatasync` of a file.
    fn sync_data(&self, file: &File, path: &Path) -> io::Result<()>;
    /// `fsync` of a file (content and metadata).
    fn sync_all(&self, file: &File, path: &Path) -> io::Result<()>;
    /// `fsync` of a directory: its entries are durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Creates a new file for reading and writing; fails if it exists.
    fn create_new(&self, path: &Path) -> io::Result<File>;
    /// `ftruncate`.
    fn set_len(&self, file: &File, path: &Path, len: u64) -> io::Result<()>;
    /// Creates one directory (its parent must exist).
    fn create_dir(&self, dir: &Path) -> io::Result<()>;
    /// Renames `from` to `to`, replacing `to` if it exists.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes `dst` a new name of the file at `src` (`link`).
    fn hard_link(&self, src: &Path, dst: &Path) -> io::Result<()>;
    /// Copies `len` bytes of `src` from offset 0 to `dst` (at offset 0), returning how
    /// many it copied (fewer when `src` is shorter). By default through a buffer and
    /// [`FileOps::write_at`], so that an implementation that watches writes sees them.
    fn copy_range(&self, src: &File, dst: &File, dst_path: &Path, len: u64) -> io::Result<u64> {
        copy_through_buffer(src, |buf, off| self.write_at(dst, dst_path, buf, off), len)
    }
    /// Whether shards create their next active segment ahead of time (the maintenance
    /// thread makes a spare). An implementation whose callers count its calls (the
    /// fault injector: a fault "after n writes") says no, so that the same operations
    /// meet the same faults every run whatever the threads' timing.
    fn spares_ahead(&self) -> bool {
        true
    }
}

/// The plain system calls.
pub(crate) struct OsFiles;

impl FileOps for OsFiles {
    fn write_at(&self, file: &File, _: &Path, buf: &[u8], off: u64) -> io::Result<()> {
        file.write_all_at(buf, off)
    }

    fn sync_data(&self, file: &File, _: &Path) -> io::Result<()> {
        file.sync_data()
    }

    fn sync_all(&self, file: &File, _: &Path) -> io::Result<()> {
        file.sync_all()
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir).and_then(|d| d.sync_all())
    }

    fn create_new(&self, path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
    }

    fn set_len(&self, file: &File, _: &Path, len: u64) -> io::Result<()> {
        file.set_len(len)
    }

    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir(dir)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn hard_link(&self, src: &Path, dst: &Path) -> io::Result<()> {
        fs::hard_link(src, dst)
    }

    /// `copy_file_range`, which shares blocks on file systems that can (a reflink on
    /// XFS or Btrfs) and copies inside the kernel elsewhere; through a buffer where the
    /// kernel refuses it (an older kernel, or two file systems it cannot copy between).
    fn copy_range(&self, src: &File, dst: &File, _: &Path, len: u64) -> io::Result<u64> {
        let mut done = 0u64;
        while done < len {
            let (mut off_in, mut off_out) = (done as libc::loff_t, done as libc::loff_t);
            let want = (len - done).min(1 << 30) as usize;
            // SAFETY: both descriptors are open files owned by the caller for the whole
            // call, and the offsets are locals the kernel updates in place.
            let n = unsafe {
                libc::copy_file_range(
                    src.as_raw_fd(),
                    &mut off_in,
                    dst.as_raw_fd(),
                    &mut off_out,
                    want,
                    0,
                )
            };
            match n {
                0 => break,
                n if n > 0 => done += n as u64,
                _ => {
                    let e = io::Error::last_os_error();
                    let refused = [libc::EXDEV, libc::ENOSYS, libc::EINVAL, libc::EOPNOTSUPP];
                    match e.raw_os_error() {
                        Some(c) if done == 0 && refused.contains(&c) => {
                            return copy_through_buffer(
                                src,
                                |buf, off| dst.write_all_at(buf, off),
                                len,
                            );
                        }
                        Some(libc::EINTR) => {}
                        _ => return Err(e),
                    }
                }
            }
        }
        Ok(done)
    }
}

/// Copies up to `len` bytes of `src` from offset 0 through a buffer, handing each piece
/// to `write` with its offset; returns how many bytes `src` had (at most `len`).
pub(crate) fn copy_through_buffer(
    src: &File,
    mut write: impl FnMut(&[u8], u64) -> io::Result<()>,
    len: u64,
) -> io::Result<u64> {
    let mut buf = vec![0u8; (1 << 20).min(len as usize)];
    let mut done = 0u64;
    while done < len {
        let want = (len - done).min(buf.len() as u64) as usize;
        let n = match src.read_at(&mut buf[..want], done) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        write(&buf[..n], done)?;
        done += n as u64;
    }
    Ok(done)
}

/// The store's file-system access: a [`FileOps`], its errors carrying their path.
#[derive(Clone)]
pub(crate) struct Fs {
    ops: Arc<dyn FileOps>,
}

impl Default for Fs {
    fn default() -> Fs {
        Fs::new(Arc::new(OsFiles))
    }
}

impl Fs {
    pub fn new(ops: Arc<dyn FileOps>) -> Fs {
        Fs { ops }
    }

    /// Whether shards create spare segments ahead of time ([`FileOps::spares_ahead`]).
    pub fn spares_ahead(&self) -> bool {
        self.ops.spares_ahead()
    }

    /// Writes all of `buf` at `off`.
    pub fn write_at(&self, file: &File, path: &Path, buf: &[u8], off: u64) -> Result<()> {
        self.ops
            .write_at(file, path, buf, off)
            .map_err(|e| Error::io(path, e))
    }

    /// fdatasync.
    pub fn sync_data(&self, file: &File, path: &Path) -> Result<()> {
        self.ops
            .sync_data(file, path)
            .map_err(|e| Error::io(path, e))
    }

    /// fsync of a directory, so that creates, renames and removes in it are durable.
    pub fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.ops.sync_dir(dir).map_err(|e| Error::io(dir, e))
    }

    /// Creates a new file for reading and writing; fails if it exists.
    pub fn create_new(&self, path: &Path) -> Result<File> {
        self.ops.create_new(path).map_err(|e| Error::io(path, e))
    }

    /// Truncates (or extends) a file to `len` bytes; not durable until synced.
    pub fn set_len(&self, file: &File, path: &Path, len: u64) -> Result<()> {
        self.ops
            .set_len(file, path, len)
            .map_err(|e| Error::io(path, e))
    }

    /// Creates `dir` and its missing ancestors; returns the directories that got a new
    /// entry (the parents of those created, outermost first), which the caller fsyncs
    /// to make the new directories durable.
    pub fn create_dirs(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let mut missing = Vec::new();
        let mut d = dir;
        while !d.as_os_str().is_empty() && !d.is_dir() {
            missing.push(d);
            match d.parent() {
                Some(p) => d = p,
                None => break,
            }
        }
        let mut parents = Vec::new();
        for d in missing.into_iter().rev() {
            match self.ops.create_dir(d) {
                Ok(()) => parents.push(parent(d).to_owned()),
                // Created meanwhile by someone else: not ours to sync.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && d.is_dir() => {}
                Err(e) => return Err(Error::io(d, e)),
            }
        }
        Ok(parents)
    }

    /// Writes `bytes` to `path` atomically: a temporary file, fsync, rename, fsync of
    /// the directory. A crash leaves either the old or the new content.
    pub fn write_atomic(&self, path: &Path, bytes: &[u8]) -> Result<()> {
        let tmp = tmp_path(path);
        let _ = self.remove(&tmp);
        let f = self.create_new(&tmp)?;
        let res = self
            .write_at(&f, &tmp, bytes, 0)
            .and_then(|_| self.ops.sync_all(&f, &tmp).map_err(|e| Error::io(&tmp, e)))
            .and_then(|_| self.ops.rename(&tmp, path).map_err(|e| Error::io(path, e)));
        if res.is_err() {
            let _ = self.remove(&tmp);
        }
        res?;
        self.sync_dir(parent(path))
    }

    /// Renames `from` to `to` (in one directory), replacing `to` if it exists.
    pub fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.ops.rename(from, to).map_err(|e| Error::io(to, e))
    }

    /// Makes `dst` a new name of the file at `src`.
    pub fn hard_link(&self, src: &Path, dst: &Path) -> Result<()> {
        self.ops.hard_link(src, dst).map_err(|e| Error::io(dst, e))
    }

    /// Copies the first `len` bytes of `src` into `dst`; returns how many `src` had.
    pub fn copy_range(&self, src: &File, dst: &File, dst_path: &Path, len: u64) -> Result<u64> {
        self.ops
            .copy_range(src, dst, dst_path, len)
            .map_err(|e| Error::io(dst_path, e))
    }

    /// Removes a file; a missing file is not an error.
    pub fn remove(&self, path: &Path) -> Result<()> {
        match self.ops.remove(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(path, e)),
        }
    }
}

/// The directory containing `path` (or "." for a bare name).
pub(crate) fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// `path` with ".tmp" appended.
pub(crate) fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

/// Reads a whole (small) file.
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut v))
        .map_err(|e| Error::io(path, e))?;
    Ok(v)
}

/// Reads exactly `len` bytes at `off`.
pub(crate) fn read_exact_at(file: &File, path: &Path, off: u64, len: usize) -> Result<Vec<u8>> {
    let mut v = vec![0u8; len];
    file.read_exact_at(&mut v, off).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            Error::corruption(
                path,
                format!("file ends before {} bytes at offset {off}", len),
            )
        } else {
            Error::io(path, e)
        }
    })?;
    Ok(v)
}
