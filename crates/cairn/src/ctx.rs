//! Store-wide state that every shard shares: options, the file layer, the sequence
//! counter, disk accounting, the seal queue and the failure and shutdown flags. It sits
//! below the shards (which take a `&StoreCtx`) and below [`crate::core::Core`], which
//! owns it together with the shards, so shards never name the store that holds them.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::damage::Damage;
use crate::fsutil::Fs;
use crate::{Error, Options, Result};

/// Store-wide state shared by the shards, the store and the background threads.
pub(crate) struct StoreCtx {
    pub dir: PathBuf,
    pub opts: Options,
    pub fs: Fs,
    /// Number of shards (fixed at creation).
    pub shard_count: usize,
    pub(crate) next_seq: AtomicU64,
    /// Bytes of segment and hint files (including buffered records).
    disk_used: AtomicU64,
    /// Highest sequence number known durable in every shard (in memory).
    pub(crate) durable_seq: AtomicU64,
    pub(crate) seal_queue: Mutex<VecDeque<(u32, u32)>>,
    /// A shard asked the maintenance thread for a spare segment.
    pub(crate) spare_wanted: AtomicBool,
    /// A commit log file is full and waits for the maintenance thread's checkpoint.
    pub(crate) checkpoint_wanted: AtomicBool,
    pub(crate) wake: Condvar,
    /// Set after a failed fsync: the whole store refuses writes until reopened.
    failed: Mutex<Option<String>>,
    /// Damage found since the store was opened, by sealing and compaction.
    found_damage: Mutex<Vec<Damage>>,
    /// The store is closing: background threads finish and return.
    pub(crate) shutdown: AtomicBool,
    /// The store is closed to writes (set once the background threads have returned).
    closed: AtomicBool,
    /// Once closing: when the layers' background threads should have returned.
    pub(crate) threads_deadline: OnceLock<Instant>,
}

impl StoreCtx {
    /// A context for a store whose next write is numbered `next_seq`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        dir: PathBuf,
        opts: Options,
        fs: Fs,
        shard_count: usize,
        next_seq: u64,
        disk_used: u64,
        durable_seq: u64,
        to_seal: Vec<(u32, u32)>,
    ) -> StoreCtx {
        StoreCtx {
            dir,
            opts,
            fs,
            shard_count,
            next_seq: AtomicU64::new(next_seq),
            disk_used: AtomicU64::new(disk_used),
            durable_seq: AtomicU64::new(durable_seq),
            seal_queue: Mutex::new(to_seal.into()),
            spare_wanted: AtomicBool::new(false),
            checkpoint_wanted: AtomicBool::new(false),
            wake: Condvar::new(),
            failed: Mutex::new(None),
            found_damage: Mutex::new(Vec::new()),
            shutdown: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            threads_deadline: OnceLock::new(),
        }
    }

    /// The next sequence number to be assigned.
    pub fn current_seq(&self) -> u64 {
        self.next_seq.load(Ordering::SeqCst)
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

    pub fn durable_seq(&self) -> u64 {
        self.durable_seq.load(Ordering::SeqCst)
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

    /// Reserves `n` bytes of the size limit; deletes may use a small reserve beyond it
    /// so that a full store can still be emptied.
    pub(crate) fn reserve(&self, n: u64, delete: bool) -> Result<()> {
        let Some(max) = self.opts.max_size else {
            self.add_disk_used(n);
            return Ok(());
        };
        let limit = if delete {
            max + (max / 32).max(1 << 20)
        } else {
            max
        };
        self.disk_used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                (used + n <= limit).then_some(used + n)
            })
            .map(|_| ())
            .map_err(|used| {
                Error::StorageFull(format!(
                    "writing {n} bytes would pass max_size {max} ({used} bytes in use)"
                ))
            })
    }

    pub fn queue_seal(&self, shard: u32, seg: u32) {
        self.seal_queue.lock().push_back((shard, seg));
        self.wake.notify_all();
    }

    /// Asks the maintenance thread to create the spare segments shards asked for.
    pub fn want_spare(&self) {
        self.spare_wanted.store(true, Ordering::SeqCst);
        self.wake_maintenance();
    }

    /// Wakes the background threads waiting in `Core::wait` (under the queue's lock,
    /// so that a thread about to wait cannot miss it).
    fn wake_maintenance(&self) {
        let _q = self.seal_queue.lock();
        self.wake.notify_all();
    }

    /// Asks the maintenance thread to checkpoint a full commit log file.
    pub fn want_checkpoint(&self) {
        if !self.checkpoint_wanted.swap(true, Ordering::SeqCst) {
            self.wake_maintenance();
        }
    }
}
