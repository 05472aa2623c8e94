//! Timestamps: the clock, access times under the `relatime` rule, and the deferred
//! directory times (see `Fs::dir_cache`).

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use super::errno::{Errno, FsResult};
use super::inode::{Inode, Tx};
use super::layout::inode_key;
use super::store::Batch;
use super::Fs;

/// Nanoseconds since the epoch, now.
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// A directory inode as last changed, and how many changes of its times since its
/// row was last written.
#[derive(Clone)]
pub(super) struct CachedDir {
    pub(super) inode: Inode,
    pub(super) unwritten: u32,
}

/// Most directory inodes kept in `dir_cache`.
pub(super) const DIR_CACHE_MAX: usize = 4096;
/// A directory's row is written at least once per this many changes of its times.
pub(super) const DIR_TIMES_EVERY: u32 = 64;

impl Drop for Fs {
    /// Writes the deferred directory times before the store closes; an error can only
    /// be logged here ([`Fs::close`] returns it).
    fn drop(&mut self) {
        if let Err(e) = self.write_dir_times() {
            log::warn!("writing directory times at close: {e}");
        }
    }
}

impl Fs {
    /// Sets the access time of `seen` (as just read) to now if the `relatime` rule asks
    /// for it (see the documentation of `fs`).
    pub(super) fn touch_atime(&self, seen: &Inode) -> FsResult<()> {
        let stale = super::rules::relatime_due;
        if !stale(&seen.attr, now_ns()) {
            return Ok(());
        }
        let _g = self.lock.lock();
        let mut tx = Tx::new();
        let mut i = match self.tx_get(&mut tx, seen.attr.ino) {
            Ok(i) => i,
            // Removed meanwhile: nothing to record.
            Err(Errno(libc::ENOENT)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let now = now_ns();
        if !stale(&i.attr, now) {
            return Ok(());
        }
        i.attr.atime = now;
        self.tx_put(&mut tx, i);
        self.commit(tx)
    }

    /// The cached directories with unwritten time changes, marked written.
    pub(super) fn take_unwritten(cache: &mut HashMap<u64, CachedDir>) -> Vec<Inode> {
        cache
            .values_mut()
            .filter(|d| d.unwritten > 0)
            .map(|d| {
                d.unwritten = 0;
                d.inode.clone()
            })
            .collect()
    }

    pub(super) fn write_inodes(&self, inodes: Vec<Inode>) -> FsResult<()> {
        if inodes.is_empty() {
            return Ok(());
        }
        let mut b = Batch::new();
        for i in &inodes {
            b.put(&inode_key(i.attr.ino), &i.encode());
        }
        self.rows.write(b, true)?;
        Ok(())
    }

    /// Writes the rows of directories whose time changes were deferred.
    pub(super) fn write_dir_times(&self) -> FsResult<()> {
        let dirty = Self::take_unwritten(&mut self.dir_cache.lock());
        self.write_inodes(dirty)
    }

    /// Closes the file system: writes the deferred directory times, then closes the
    /// store it is on ([`cairn::Db::close`]: everything durable, hint files written),
    /// returning the first error — which a drop could only log. The store is closed for
    /// every handle to it.
    pub fn close(self) -> FsResult<()> {
        self.write_dir_times()?;
        let db = self.db().clone();
        drop(self);
        db.close()?;
        Ok(())
    }
}
