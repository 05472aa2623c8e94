//! The open store's shared state: the [`StoreCtx`] and the shards, with the operations
//! that span shards — routing a key to its shard, the write path (single writes and
//! atomic batches, in `write`), group commit over all shards, flush and close. The
//! handle ([`crate::Db`]), the keyspaces, iterators, compaction and the background
//! threads sit above it.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fs::File;
use std::ops::Deref;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::commitlog::CommitLog;
use crate::ctx::StoreCtx;
use crate::damage::Damage;
use crate::manifest;
use crate::route::Router;
use crate::shard::Shard;
use crate::value::Value;
use crate::wake::Request;
use crate::{Error, Result};

mod write;

pub(crate) use write::{Check, KeyList, Range};

/// State that layers above the engine attach to an open store (see
/// [`crate::Db::extension`]), one value per type.
pub(crate) type Extensions = Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>;

/// The open store: the context every shard shares, the shards, and what the store keeps
/// beside them.
pub(crate) struct Core {
    pub ctx: StoreCtx,
    pub shards: Vec<Shard>,
    /// Which shard a key lives in (as the manifest says).
    pub router: Router,
    pub open_damage: Vec<Damage>,
    /// The commit log of durable writes (`SyncPolicy::Always` with a log size).
    pub log: Option<CommitLog>,
    /// State of the layers above, by type.
    pub extensions: Extensions,
    /// The store's `LOCK`, held while the store is open for writing (`None` when
    /// opened read-only, which takes no lock).
    pub _lock: Option<File>,
    /// What a store opened read-only knows of the files it follows (`None` when it is
    /// open for writing).
    pub follower: Option<crate::readonly::Follower>,
}

impl Deref for Core {
    type Target = StoreCtx;
    fn deref(&self) -> &StoreCtx {
        &self.ctx
    }
}

impl Core {
    /// The shard of internal key `key`.
    #[inline]
    pub fn shard_of(&self, key: &[u8]) -> usize {
        self.router.shard_of(key)
    }

    /// The error a write meets once the store refuses writes: it was closed, or opened
    /// read-only.
    #[cold]
    pub(crate) fn refusal(&self) -> Error {
        match self.follower {
            Some(_) => Error::OpenedReadOnly(self.dir.clone()),
            None => Error::Closed,
        }
    }

    /// Creates the spare segments shards asked for.
    pub(crate) fn make_spares(&self) {
        if self.take_request(Request::Spare) {
            for s in &self.shards {
                s.make_spare(self);
            }
        }
    }

    /// Makes every write numbered so far durable and raises the durable mark to it.
    pub fn flush(&self) -> Result<()> {
        // After a failed sync (of a shard or of the commit log) what was acknowledged
        // may not be on disk: no flush can say it is.
        if let Some(f) = self.failure() {
            return Err(Error::ReadOnly(f));
        }
        let upto = self.seqs.last_assigned();
        for s in &self.shards {
            s.flush(self, true)?;
        }
        self.seqs.mark_durable(upto);
        Ok(())
    }

    /// The end of a clean close (`Db::close` does the steps before it: everything
    /// durable, then the space of dead records given back where that is cheap): a hint
    /// file for every active segment (so the next open reads no data), and the batch
    /// watermark recorded. Writes are refused by then.
    pub(crate) fn finish_close(&self) -> Result<()> {
        for s in &self.shards {
            s.drop_spare(self)?;
            s.hint_active(self)?;
        }
        self.persist_watermark(self.durable_seq())?;
        // Every logged record is durable in its shard (the close flushed): the next
        // open reads no frame.
        match &self.log {
            Some(log) => log.new_generations(),
            None => Ok(()),
        }
    }

    /// Frees a commit log file that appends moved away from: makes every shard
    /// durable, after which each of its records is in its segment. Returns whether
    /// there was one. Run by the maintenance thread.
    pub(crate) fn checkpoint_log(&self) -> Result<bool> {
        let Some(log) = &self.log else {
            return Ok(false);
        };
        self.take_request(Request::Checkpoint);
        let Some(i) = log.full_file() else {
            return Ok(false);
        };
        // Every record framed in file `i` was appended to its shard before appends
        // moved away from it, so this flush covers them.
        self.flush()?;
        log.freed(i);
        Ok(true)
    }

    /// Ensures `SEQSTATE` records a watermark of at least `seq`, flushing first if the
    /// durable mark is behind. Compaction calls this before it may drop or
    /// rewrite any record up to `seq`.
    pub fn persist_watermark(&self, seq: u64) -> Result<()> {
        if self.durable_seq() < seq {
            self.flush()?;
        }
        if self.seqs.watermark() >= seq {
            return Ok(());
        }
        self.raise_watermark(self.durable_seq(), &[])
    }

    /// Records a watermark of at least `seq` in `SEQSTATE`, and counts every write up to
    /// it as durable. The caller has made every record numbered up to `seq` durable in
    /// every shard, but for records of segments it is dropping whole, whose successors
    /// are durable. `dropping` (`(shard, segment, created_seq)`) lists those of them that
    /// are not sealed, which may be partly on disk: the same `SEQSTATE` records them
    /// (`SeqState::dropped`), so that open removes them if their unlink is lost, and
    /// every later one too until [`Core::dropped`] says their unlink is durable. This is
    /// the one place that writes `SEQSTATE` while the store is open.
    pub(crate) fn raise_watermark(&self, seq: u64, dropping: &[(u32, u32, u64)]) -> Result<()> {
        self.seqs.raise_watermark(seq, dropping, |next| {
            manifest::write_seqstate(&self.fs, &self.dir, next)
        })
    }

    /// Segment `seg` of shard `shard`, listed by [`Core::raise_watermark`], is durably
    /// unlinked: later `SEQSTATE`s leave it out.
    pub fn dropped(&self, shard: u32, seg: u32) {
        self.seqs.dropped(shard, seg);
    }

    /// Reads the value of an internal key.
    pub fn get(&self, ikey: &[u8]) -> Result<Option<Value>> {
        self.shards[self.shard_of(ikey)].get(ikey)
    }

    /// Asks the kernel to start reading the record of an internal key into the page
    /// cache, without waiting (a no-op if the key is absent or its record is still in
    /// memory). Lets a streaming reader (the file store) keep several reads in flight.
    pub fn prefetch(&self, ikey: &[u8]) {
        let src = {
            let st = self.shards[self.shard_of(ikey)].state.read();
            st.index
                .get(ikey)
                .and_then(|loc| st.source(loc).ok().map(|s| (loc, s)))
        };
        if let Some((loc, crate::shard::Source::File(f))) = src {
            f.will_need(loc.off as u64, loc.len as u64);
        }
    }

    /// Starts writing shard `shard`'s written-but-unsynced data of its active segment
    /// to disk without waiting (`sync_file_range(SYNC_FILE_RANGE_WRITE)`), so that a
    /// later sync finds less to do. A streaming writer (the file store) calls this as it
    /// goes, so that the sync at its commit overlaps with the streaming.
    pub fn start_writeback(&self, shard: usize) {
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::io::AsRawFd;
            let file = self.shards[shard].state.read().active.file.clone();
            // SAFETY: an advisory system call on a descriptor that `file` keeps open.
            unsafe {
                libc::sync_file_range(file.file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = shard;
    }

    /// Whether an internal key has a value: the index's hash side answers "absent"
    /// with one bucket read (a create's check that its name is free), the ordered side
    /// confirms "present".
    pub fn contains(&self, ikey: &[u8]) -> bool {
        self.shards[self.shard_of(ikey)]
            .state
            .read()
            .index
            .contains(ikey)
    }

    /// Registers a snapshot of every write numbered so far; returns its number. Never
    /// waits for a writer.
    pub fn take_snapshot(&self) -> u64 {
        self.snaps.take(&self.seqs)
    }

    /// Lets go of a snapshot taken at `seq`; when the oldest live one moved up, prunes
    /// the old versions of the shards where that frees segments, all of a shard's
    /// notes, or many of them (the others are pruned by their next write, or by
    /// [`Core::prune_versions`]).
    pub fn release_snapshot(&self, seq: u64) {
        let Some(oldest) = self.snaps.release(seq) else {
            return;
        };
        for sh in &self.shards {
            if sh.notes.worth_pruning(oldest) {
                self.prune_shard_versions(sh, true);
            }
        }
    }

    /// Prunes every shard's old versions that no live snapshot needs (the compaction
    /// thread, when idle).
    pub fn prune_versions(&self) {
        let oldest = self.snaps.oldest();
        for sh in &self.shards {
            if sh.notes.prunable(oldest) {
                self.prune_shard_versions(sh, true);
            }
        }
    }

    fn prune_shard_versions(&self, sh: &Shard, force: bool) {
        let released = {
            let mut st = sh.state.write();
            // Read under the lock: a snapshot taken meanwhile lowered it.
            let r = st.prune_versions(self.snaps.oldest(), force);
            sh.notes.publish(&st.versions);
            r
        };
        self.sub_disk_used(released.bytes);
    }

    /// Seals the queued segments now (used by `compact` and the background thread).
    pub fn seal_queued(&self) -> Result<()> {
        self.seal_queued_with(|| {})
    }

    /// Like [`Core::seal_queued`], running `between` before each seal.
    pub(crate) fn seal_queued_with(&self, between: impl Fn()) -> Result<()> {
        loop {
            between();
            let Some((shard, seg)) = self.next_to_seal() else {
                return Ok(());
            };
            if let Err(e) = self.shards[shard as usize].seal(self, seg) {
                // Leave it queued for a later try.
                self.requeue_seal(shard, seg);
                return Err(e);
            }
        }
    }
}
