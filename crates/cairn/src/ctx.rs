//! Store-wide state that every shard shares: options, the file layer, the write order
//! ([`SeqTracker`]), disk accounting, the seal queue, the background threads' wake-ups
//! and the failure and shutdown flags. It sits
//! below the shards (which take a `&StoreCtx`) and below [`crate::core::Core`], which
//! owns it together with the shards, so shards never name the store that holds them.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use crate::damage::Damage;
use crate::fsutil::Fs;
use crate::seq::SeqTracker;
use crate::versions::Snapshots;
use crate::wake::{Request, Wake, Wakeups};
use crate::{Error, Options, Result};

/// Store-wide state shared by the shards, the store and the background threads.
pub(crate) struct StoreCtx {
    pub dir: PathBuf,
    pub opts: Options,
    pub fs: Fs,
    /// Number of shards (fixed at creation).
    pub shard_count: usize,
    /// The write order: sequence numbers, the durable mark, the watermark.
    pub seqs: SeqTracker,
    /// Bytes of segment and hint files (including buffered records).
    disk_used: AtomicU64,
    /// Rotated segments `(shard, segment)` waiting for the maintenance thread to seal
    /// them.
    seal_queue: Mutex<VecDeque<(u32, u32)>>,
    /// Wakes the background threads (lock order: before `seal_queue`).
    wakeups: Wakeups,
    /// Set after a failed fsync: the whole store refuses writes until reopened.
    failed: Mutex<Option<String>>,
    /// Damage found since the store was opened, by sealing and compaction.
    found_damage: Mutex<Vec<Damage>>,
    /// Held shared by a checkpoint from its cut until it has linked or copied every
    /// segment, and exclusively by compaction while it removes (or empties) segment
    /// files: no file a checkpoint still needs goes. Taken before any shard lock.
    pub removals: RwLock<()>,
    /// The store is closing: background threads finish and return.
    shutdown: AtomicBool,
    /// The store is closed to writes (set once the background threads have returned).
    closed: AtomicBool,
    /// Once closing: when the layers' background threads should have returned.
    pub(crate) threads_deadline: OnceLock<Instant>,
    /// The live snapshots (and transactions).
    pub snaps: Snapshots,
}

impl StoreCtx {
    /// A context for a store whose write order `seqs` open found.
    pub fn new(
        dir: PathBuf,
        opts: Options,
        fs: Fs,
        shard_count: usize,
        seqs: SeqTracker,
        disk_used: u64,
        to_seal: Vec<(u32, u32)>,
    ) -> StoreCtx {
        StoreCtx {
            dir,
            opts,
            fs,
            shard_count,
            seqs,
            disk_used: AtomicU64::new(disk_used),
            seal_queue: Mutex::new(to_seal.into()),
            wakeups: Wakeups::default(),
            failed: Mutex::new(None),
            found_damage: Mutex::new(Vec::new()),
            removals: RwLock::new(()),
            shutdown: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            threads_deadline: OnceLock::new(),
            snaps: Snapshots::default(),
        }
    }

    /// The next sequence number to be assigned.
    pub fn current_seq(&self) -> u64 {
        self.seqs.next()
    }

    pub fn add_disk_used(&self, n: u64) {
        self.disk_used.fetch_add(n, Ordering::Relaxed);
    }

    pub fn sub_disk_used(&self, n: u64) {
        let _ = self
            .disk_used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(n))
            });
    }

    /// The durable mark: every record numbered up to it is durable in every shard.
    pub fn durable_seq(&self) -> u64 {
        self.seqs.durable()
    }

    /// Makes the store read-only: after a failed fsync the kernel may have dropped dirty
    /// pages, so nothing written since the last good sync can be trusted on disk.
    pub fn fail(&self, msg: String) {
        self.failed.lock().get_or_insert(msg);
    }

    /// Why the store is read-only, if it is.
    pub fn failure(&self) -> Option<String> {
        self.failed.lock().clone()
    }

    /// Records damage found while the store runs (logged too), so that
    /// [`crate::Db::damage`] and [`crate::Db::verify`] report it. A place already
    /// recorded is not recorded again.
    pub fn note_damage(&self, d: Damage) {
        let mut found = self.found_damage.lock();
        if found
            .iter()
            .any(|f| f.path == d.path && f.offset == d.offset)
        {
            return;
        }
        log::error!("damage found: {d}");
        found.push(d);
    }

    /// The damage recorded by [`StoreCtx::note_damage`].
    pub fn found_damage(&self) -> Vec<Damage> {
        self.found_damage.lock().clone()
    }

    /// Whether the store is closing (or closed): background threads should return.
    pub fn is_shutdown(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    /// Whether the store refuses writes because it is closed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Refuses every later write.
    pub fn set_closed(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Starts closing: background threads finish and return.
    pub fn begin_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.wakeups.notify(Wake::Shutdown);
    }

    /// Reserves `n` bytes of the size limit for a write; deletes may use a small reserve
    /// beyond it so that a full store can still be emptied. What the write does not
    /// keep goes back when the reservation is dropped.
    pub(crate) fn reserve(&self, n: u64, delete: bool) -> Result<Reservation<'_>> {
        match self.opts.max_size {
            None => self.add_disk_used(n),
            Some(max) => {
                let limit = if delete {
                    max + (max / 32).max(1 << 20)
                } else {
                    max
                };
                self.disk_used
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                        (used + n <= limit).then_some(used + n)
                    })
                    .map_err(|used| {
                        Error::StorageFull(format!(
                            "writing {n} bytes would pass max_size {max} ({used} bytes in use)"
                        ))
                    })?;
            }
        }
        Ok(Reservation {
            ctx: self,
            bytes: n,
            kept: 0,
        })
    }

    /// Queues rotated segment `seg` of shard `shard` for sealing.
    pub fn queue_seal(&self, shard: u32, seg: u32) {
        self.seal_queue.lock().push_back((shard, seg));
        self.wakeups.notify(Wake::SealQueued);
    }

    /// The next segment queued for sealing, taken off the queue.
    pub fn next_to_seal(&self) -> Option<(u32, u32)> {
        self.seal_queue.lock().pop_front()
    }

    /// Puts back at the queue's end a segment whose seal failed, for a later try.
    pub fn requeue_seal(&self, shard: u32, seg: u32) {
        self.seal_queue.lock().push_back((shard, seg));
    }

    /// Asks the maintenance thread to create the spare segments shards asked for.
    pub fn want_spare(&self) {
        self.wakeups.notify(Wake::Request(Request::Spare));
    }

    /// Asks the maintenance thread to checkpoint a full commit log file.
    pub fn want_checkpoint(&self) {
        self.wakeups.notify(Wake::Request(Request::Checkpoint));
    }

    /// Takes the maintenance thread's request `r`: whether it was pending.
    pub fn take_request(&self, r: Request) -> bool {
        self.wakeups.take(r)
    }

    /// The maintenance thread's wait for work: returns at once while a segment is queued
    /// for sealing, a request is pending or the store is closing, else waits for one of
    /// them or for `timeout`.
    pub fn wait_for_work(&self, timeout: Duration) {
        self.wakeups.wait_for_work(timeout, || {
            self.is_shutdown() || !self.seal_queue.lock().is_empty()
        });
    }

    /// Waits `timeout`, or until the next wake-up (a seal queued, a request, shutdown),
    /// whatever is queued: the compaction thread's idle wait, and a pause after a
    /// failure. (Waiting for work instead returns at once while a seal is queued: with a
    /// failed seal left queued on a failing disk, two threads retrying in a loop would
    /// each cost a CPU.)
    pub fn pause(&self, timeout: Duration) {
        self.wakeups.pause(timeout, || self.is_shutdown());
    }
}

/// Bytes of the size limit reserved for a write ([`StoreCtx::reserve`]). What the write
/// keeps ([`Reservation::keep`]) stays counted; the rest is given back when the
/// reservation is dropped, however the write ends.
#[must_use]
pub(crate) struct Reservation<'a> {
    ctx: &'a StoreCtx,
    bytes: u64,
    kept: u64,
}

impl Reservation<'_> {
    /// The write appended `n` of the reserved bytes (at most all of them).
    pub fn keep(&mut self, n: u64) {
        self.kept = n.min(self.bytes);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.bytes > self.kept {
            self.ctx.sub_disk_used(self.bytes - self.kept);
        }
    }
}
