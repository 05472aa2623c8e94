//! Thin wrappers over file-system calls: every write, sync, create, rename, removal,
//! truncation and directory creation goes through here, so errors carry their path and
//! tests can inject faults ([`FaultInjector`]) and simulate power loss ([`PowerLoss`]).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::fault::{FaultInjector, IoOp};
use crate::powerloss::PowerLoss;
use crate::{Error, Result};

/// File-system access with optional fault injection and power-loss simulation (both
/// test hooks; with neither, every call is the plain system call).
#[derive(Clone, Default)]
pub(crate) struct Fs {
    fault: Option<Arc<FaultInjector>>,
    power: Option<Arc<PowerLoss>>,
}

impl Fs {
    pub fn new(fault: Option<Arc<FaultInjector>>, power: Option<Arc<PowerLoss>>) -> Fs {
        Fs { fault, power }
    }

    fn check(&self, op: IoOp, path: &Path) -> Result<()> {
        match &self.fault {
            Some(f) => f.check(op).map_err(|e| Error::io(path, e)),
            None => Ok(()),
        }
    }

    /// Writes all of `buf` at `off`.
    pub fn write_at(&self, file: &File, path: &Path, buf: &[u8], off: u64) -> Result<()> {
        self.check(IoOp::Write, path)?;
        match &self.power {
            Some(p) => p.write_at(file, path, buf, off),
            None => file.write_all_at(buf, off),
        }
        .map_err(|e| Error::io(path, e))
    }

    /// fdatasync.
    pub fn sync_data(&self, file: &File, path: &Path) -> Result<()> {
        self.check(IoOp::Sync, path)?;
        match &self.power {
            Some(p) => p.sync_file(file, path),
            None => file.sync_data(),
        }
        .map_err(|e| Error::io(path, e))
    }

    /// fsync of a directory, so that creates, renames and removes in it are durable.
    pub fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.check(IoOp::Sync, dir)?;
        match &self.power {
            Some(p) => p.sync_dir(dir),
            None => File::open(dir).and_then(|d| d.sync_all()),
        }
        .map_err(|e| Error::io(dir, e))
    }

    /// Creates a new file for reading and writing; fails if it exists.
    pub fn create_new(&self, path: &Path) -> Result<File> {
        self.check(IoOp::Create, path)?;
        match &self.power {
            Some(p) => p.create_new(path),
            None => OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(path),
        }
        .map_err(|e| Error::io(path, e))
    }

    /// Truncates (or extends) a file to `len` bytes; not durable until synced.
    pub fn set_len(&self, file: &File, path: &Path, len: u64) -> Result<()> {
        match &self.power {
            Some(p) => p.set_len(file, path, len),
            None => file.set_len(len),
        }
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
            let res = match &self.power {
                Some(p) => p.create_dir(d),
                None => fs::create_dir(d),
            };
            match res {
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
            .and_then(|_| self.check(IoOp::Sync, &tmp))
            .and_then(|_| {
                match &self.power {
                    Some(p) => p.sync_file(&f, &tmp),
                    None => f.sync_all(),
                }
                .map_err(|e| Error::io(&tmp, e))
            })
            .and_then(|_| self.check(IoOp::Create, path))
            .and_then(|_| {
                match &self.power {
                    Some(p) => p.rename(&tmp, path),
                    None => fs::rename(&tmp, path),
                }
                .map_err(|e| Error::io(path, e))
            });
        if res.is_err() {
            let _ = self.remove(&tmp);
        }
        res?;
        self.sync_dir(parent(path))
    }

    /// Removes a file; a missing file is not an error.
    pub fn remove(&self, path: &Path) -> Result<()> {
        let res = match &self.power {
            Some(p) => p.remove(path),
            None => fs::remove_file(path),
        };
        match res {
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
