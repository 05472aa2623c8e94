//! The file systems `cairn fs-bench` measures: the cairn library in this process
//! ([`Lib`]) and a directory reached through the kernel ([`Posix`]: the FUSE mount or a
//! kernel file system), behind one [`Target`] interface; and the names and the random
//! order the phases use.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use cairn_fs::{Cred, Fs};

/// One file system under test.
pub(super) trait Target {
    fn create(&mut self, name: &str) -> Result<()>;
    fn stat(&mut self, name: &str) -> Result<()>;
    fn list(&mut self) -> Result<u64>;
    fn unlink(&mut self, name: &str) -> Result<()>;
    /// The process serving the target: `None` for the kernel, `Some(None)` for this
    /// one, `Some(Some(pid))` for a child.
    fn process(&self) -> Option<Option<i32>> {
        None
    }
    /// The serving store's index, bytes, where the target can tell.
    fn index_bytes(&self) -> Option<u64> {
        None
    }
    /// Closes the store and opens it again: the seconds of each, where the target has
    /// a store of its own to reopen.
    fn reopen(&mut self) -> Result<Option<(Duration, Duration)>> {
        Ok(None)
    }
}

pub(super) struct Lib {
    pub(super) fs: Fs,
    pub(super) dir: u64,
    /// The store's directory.
    pub(super) path: PathBuf,
    /// How the binary opens a store (the reopen is timed through it).
    pub(super) open_with: super::OpenWith,
}

pub(super) const ME: Cred = Cred::ROOT;

impl Target for Lib {
    fn process(&self) -> Option<Option<i32>> {
        Some(None)
    }
    fn index_bytes(&self) -> Option<u64> {
        Some(self.fs.db().stats().total.index_bytes)
    }
    fn reopen(&mut self) -> Result<Option<(Duration, Duration)>> {
        // An empty store stands in while the measured one closes and opens again.
        let spare = self.path.with_extension("reopen-spare");
        let stand_in = Fs::open(&spare).map_err(std::io::Error::from)?;
        let t0 = Instant::now();
        let old = std::mem::replace(&mut self.fs, stand_in);
        old.close()
            .map_err(std::io::Error::from)
            .context("lib: closing the store")?;
        let close = t0.elapsed();
        let mut opened = None;
        let t0 = Instant::now();
        (self.open_with)(&mut || opened = Some(Fs::open(&self.path)));
        let open = t0.elapsed();
        let fs = opened
            .context("lib: the binary's open wrapper did not run the open")?
            .map_err(std::io::Error::from)?;
        let spare_fs = std::mem::replace(&mut self.fs, fs);
        drop(spare_fs);
        let _ = std::fs::remove_dir_all(&spare);
        Ok(Some((close, open)))
    }

    fn create(&mut self, name: &str) -> Result<()> {
        self.fs.create(&ME, self.dir, name.as_bytes(), 0o644)?;
        Ok(())
    }
    fn stat(&mut self, name: &str) -> Result<()> {
        self.fs.lookup(&ME, self.dir, name.as_bytes())?;
        Ok(())
    }
    fn list(&mut self) -> Result<u64> {
        let mut n = 0;
        let mut cursor: Option<Vec<u8>> = None;
        loop {
            let page = self.fs.readdir(self.dir, cursor.as_deref(), 1024)?;
            let Some(last) = page.last() else { break };
            cursor = Some(last.name.clone());
            n += page.len() as u64;
        }
        Ok(n)
    }
    fn unlink(&mut self, name: &str) -> Result<()> {
        self.fs.unlink(&ME, self.dir, name.as_bytes())?;
        Ok(())
    }
}

/// A directory reached through the kernel (the FUSE mount or a plain directory).
pub(super) struct Posix {
    pub(super) dir: PathBuf,
    /// The process serving it (the FUSE mount's), if not the kernel.
    pub(super) server: Option<i32>,
}

impl Target for Posix {
    fn process(&self) -> Option<Option<i32>> {
        self.server.map(Some)
    }
    fn create(&mut self, name: &str) -> Result<()> {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.dir.join(name))?;
        Ok(())
    }
    fn stat(&mut self, name: &str) -> Result<()> {
        std::fs::symlink_metadata(self.dir.join(name))?;
        Ok(())
    }
    fn list(&mut self) -> Result<u64> {
        let mut n = 0;
        for e in std::fs::read_dir(&self.dir)? {
            e?;
            n += 1;
        }
        Ok(n)
    }
    fn unlink(&mut self, name: &str) -> Result<()> {
        std::fs::remove_file(self.dir.join(name))?;
        Ok(())
    }
}

pub(super) fn name(i: u64) -> String {
    format!("f{i:010}")
}

/// Fisher-Yates with xorshift64*: a random order without a dependency.
pub(super) fn shuffled(n: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in (1..v.len()).rev() {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
        v.swap(i, (r % (i as u64 + 1)) as usize);
    }
    v
}
