//! The store handle: opening, routing keys to shards, the public operations, and the
//! background threads (sealing, periodic sync, compaction).

use std::collections::VecDeque;
use std::fs::{self, File};
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use xxhash_rust::xxh3::xxh3_64;

use crate::batch::WriteBatch;
use crate::fsutil::Fs;
use crate::iter::Iter;
use crate::manifest::{self, SeqState};
use crate::record::Kind;
use crate::recovery;
use crate::segment::{SegKind, SegmentFile};
use crate::shard::{Prepared, Shard};
use crate::stats::Stats;
use crate::value::Value;
use crate::verify::{Damage, VerifyReport};
use crate::{Error, Options, Result, SyncPolicy, MAX_KEY_LEN, MAX_VALUE_LEN};

/// Namespace of the keys of the public key-value API. Every stored key starts with a
/// namespace byte, so the file store and other layers never collide with user keys.
pub(crate) const NS_USER: u8 = 0;
/// Namespace of the file store's rows (see `files`).
pub(crate) const NS_FILES: u8 = 1;
/// Namespace of the file system's rows (see `fs`).
pub(crate) const NS_FS: u8 = 2;

/// `ns` followed by `key`: the key as stored.
pub(crate) fn ikey(ns: u8, key: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(key.len() + 1);
    v.push(ns);
    v.extend_from_slice(key);
    v
}

/// Internal bounds covering the user bounds `lo..hi` within namespace `ns`.
pub(crate) fn ns_bounds(
    ns: u8,
    lo: Bound<&[u8]>,
    hi: Bound<&[u8]>,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let lo = match lo {
        Bound::Included(k) => Bound::Included(ikey(ns, k)),
        Bound::Excluded(k) => Bound::Excluded(ikey(ns, k)),
        Bound::Unbounded => Bound::Included(vec![ns]),
    };
    let hi = match hi {
        Bound::Included(k) => Bound::Included(ikey(ns, k)),
        Bound::Excluded(k) => Bound::Excluded(ikey(ns, k)),
        Bound::Unbounded if ns == u8::MAX => Bound::Unbounded,
        Bound::Unbounded => Bound::Excluded(vec![ns + 1]),
    };
    (lo, hi)
}

/// Internal bounds of the keys of namespace `ns` starting with `prefix`.
pub(crate) fn ns_prefix_bounds(ns: u8, prefix: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let p = ikey(ns, prefix);
    let end = prefix_successor(&p).map_or(Bound::Unbounded, Bound::Excluded);
    (Bound::Included(p), end)
}

/// Store-wide state shared by the handle, the shards and the background threads.
pub(crate) struct Core {
    pub dir: PathBuf,
    pub opts: Options,
    pub fs: Fs,
    pub shards: Vec<Shard>,
    next_seq: AtomicU64,
    /// Bytes of segment and hint files (including buffered records).
    disk_used: AtomicU64,
    /// Highest sequence number known durable in every shard (in memory).
    durable_seq: AtomicU64,
    /// The persisted `SEQSTATE`.
    pub seqstate: Mutex<SeqState>,
    seal_queue: Mutex<VecDeque<(u32, u32)>>,
    /// A shard asked the maintenance thread for a spare segment.
    spare_wanted: AtomicBool,
    wake: Condvar,
    /// Set after a failed fsync: the whole store refuses writes until reopened.
    failed: Mutex<Option<String>>,
    shutdown: AtomicBool,
    pub open_damage: Vec<Damage>,
    /// File-store state shared by all its handles (key stripes, pins, totals, GC wake-up).
    pub files: crate::files::Shared,
    _lock: File,
}

impl Core {
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

    pub fn is_shutdown(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    pub fn shard_of(&self, key: &[u8]) -> usize {
        (xxh3_64(key) % self.shards.len() as u64) as usize
    }

    /// Reserves `n` bytes of the size limit; deletes may use a small reserve beyond it
    /// so that a full store can still be emptied.
    fn reserve(&self, n: u64, delete: bool) -> Result<()> {
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
        let _q = self.seal_queue.lock();
        self.wake.notify_all();
    }

    /// Creates the spare segments shards asked for.
    fn make_spares(&self) {
        if self.spare_wanted.swap(false, Ordering::SeqCst) {
            for s in &self.shards {
                s.make_spare(self);
            }
        }
    }

    /// Makes every acknowledged write durable and advances the batch watermark.
    pub fn flush(&self) -> Result<()> {
        let upto = self.current_seq().saturating_sub(1);
        for s in &self.shards {
            s.flush(self, true)?;
        }
        self.durable_seq.fetch_max(upto, Ordering::SeqCst);
        Ok(())
    }

    /// A clean close: everything durable, a hint file for every active segment (so the
    /// next open reads no data), and the batch watermark recorded.
    fn close(&self) -> Result<()> {
        if self.failure().is_some() {
            return Ok(());
        }
        self.flush()?;
        for s in &self.shards {
            s.drop_spare(self)?;
            s.hint_active(self)?;
        }
        self.persist_watermark(self.durable_seq())
    }

    /// Ensures `SEQSTATE` records a watermark of at least `seq`, flushing first if the
    /// in-memory watermark is behind. Compaction calls this before it may drop or
    /// rewrite any record up to `seq`.
    pub fn persist_watermark(&self, seq: u64) -> Result<()> {
        if self.durable_seq() < seq {
            self.flush()?;
        }
        let mut st = self.seqstate.lock();
        if st.watermark >= seq {
            return Ok(());
        }
        let mut next = st.clone();
        next.watermark = self.durable_seq();
        manifest::write_seqstate(&self.fs, &self.dir, &next)?;
        *st = next;
        Ok(())
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
            use std::os::unix::io::AsRawFd;
            // SAFETY: an advisory system call on a descriptor that `f` keeps open.
            unsafe {
                libc::posix_fadvise(
                    f.file.as_raw_fd(),
                    loc.off as libc::off_t,
                    loc.len as libc::off_t,
                    libc::POSIX_FADV_WILLNEED,
                );
            }
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

    /// Whether an internal key has a value.
    pub fn contains(&self, ikey: &[u8]) -> bool {
        self.shards[self.shard_of(ikey)]
            .state
            .read()
            .index
            .get(ikey)
            .is_some()
    }

    /// Puts an internal key; `sync` false skips the sync of `SyncPolicy::Always` (the
    /// caller makes the data durable later with `flush`).
    pub fn put(&self, ikey: &[u8], value: &[u8], sync: bool) -> Result<()> {
        check_value(value)?;
        let shard = self.shard_of(ikey);
        let seq = self.write_one(Prepared::new(Kind::Put, ikey, value))?;
        self.after_write(seq, sync, shard)
    }

    /// Deletes an internal key.
    pub fn delete(&self, ikey: &[u8], sync: bool) -> Result<()> {
        let shard = self.shard_of(ikey);
        let seq = self.write_one(Prepared::new(Kind::Delete, ikey, &[]))?;
        self.after_write(seq, sync, shard)
    }

    /// After a write numbered `seq` (`None`: nothing was written): under
    /// `SyncPolicy::Always` with `sync`, waits until it is durable.
    /// `shard`: the (first) shard written, synced first.
    fn after_write(&self, seq: Option<u64>, sync: bool, shard: usize) -> Result<()> {
        match seq {
            Some(seq) if sync && self.opts.sync == SyncPolicy::Always => self.sync_upto(seq, shard),
            _ => Ok(()),
        }
    }

    /// Returns once every write numbered up to `seq` is durable in every shard (so a
    /// durable write never depends on a lost earlier one), sharing each shard's fsync
    /// with the other writers waiting for it. Shards are visited from `first` on: a
    /// writer syncs its own shard first, so concurrent writers sync different shards in
    /// parallel and then find the others' shards synced (or join their fsync).
    pub fn sync_upto(&self, seq: u64, first: usize) -> Result<()> {
        if self.durable_seq() >= seq {
            return Ok(());
        }
        // A write numbered below `seq` finished its append before its shard's lock was
        // released, and `sync_seq` takes that lock: nothing below `seq` is missed.
        let n = self.shards.len();
        for i in 0..n {
            let s = &self.shards[(first + i) % n];
            s.sync_seq(self, seq)?;
        }
        self.durable_seq.fetch_max(seq, Ordering::SeqCst);
        Ok(())
    }

    /// Hands every shard's buffered records to the kernel (no fsync): after a killed
    /// process, the writes made so far survive.
    pub fn write_out(&self) -> Result<()> {
        for s in &self.shards {
            s.flush(self, false)?;
        }
        Ok(())
    }

    /// Appends one record; returns its sequence number, or `None` for the delete of an
    /// absent key (nothing written).
    fn write_one(&self, op: Prepared<'_>) -> Result<Option<u64>> {
        let shard = &self.shards[self.shard_of(op.key)];
        shard.prepare_write(self)?;
        let len = op.record_len();
        let delete = op.kind == Kind::Delete;
        self.reserve(len, delete)?;
        let seq = {
            let mut st = shard.state.write();
            if let Some(f) = &st.failed {
                let e = Error::ReadOnly(f.clone());
                drop(st);
                self.sub_disk_used(len);
                return Err(e);
            }
            // The hash side answers "absent" for sure; a rare false "present" only
            // writes a tombstone that removes nothing.
            if delete && st.index.candidate(op.key).is_none() {
                drop(st);
                self.sub_disk_used(len);
                return Ok(None);
            }
            let seq = self.next_seq.fetch_add(1, Ordering::SeqCst);
            st.append(&op, seq, 1);
            seq
        };
        shard.note_user((op.key.len() + op.value.len()) as u64);
        Ok(Some(seq))
    }

    /// Applies a batch atomically; `sync` as for [`Core::put`].
    pub fn write_batch(&self, batch: WriteBatch, sync: bool) -> Result<()> {
        self.write_batch_inner(batch, sync, false)
    }

    /// Like [`Core::write_batch`], for a batch that frees space though it holds a small
    /// put (a file remove): it may use the delete reserve beyond `max_size`.
    pub fn write_batch_freeing(&self, batch: WriteBatch, sync: bool) -> Result<()> {
        self.write_batch_inner(batch, sync, true)
    }

    fn write_batch_inner(&self, batch: WriteBatch, sync: bool, frees: bool) -> Result<()> {
        if let Some(len) = batch.too_large_key() {
            return Err(Error::KeyTooLarge {
                len,
                max: MAX_KEY_LEN,
            });
        }
        let ops = batch.into_final_ops();
        if ops.is_empty() {
            return Ok(());
        }
        if ops.len() > u32::MAX as usize {
            return Err(Error::InvalidArgument(
                "batch has too many operations".into(),
            ));
        }
        // Operations grouped by shard (a stable sort keeps their order within a shard).
        let mut prepared: Vec<(usize, Prepared<'_>)> = Vec::with_capacity(ops.len());
        for (kind, k, v) in &ops {
            check_value(v)?;
            prepared.push((self.shard_of(k), Prepared::new(*kind, k, v)));
        }
        prepared.sort_by_key(|p| p.0);
        let mut shards: Vec<usize> = prepared.iter().map(|p| p.0).collect();
        shards.dedup();
        for &s in &shards {
            self.shards[s].prepare_write(self)?;
        }
        let all_deletes = frees || ops.iter().all(|o| o.0 == Kind::Delete);
        let reserved: u64 = prepared.iter().map(|p| p.1.record_len()).sum();
        self.reserve(reserved, all_deletes)?;
        let mut guards: Vec<_> = shards
            .iter()
            .map(|&s| self.shards[s].state.write())
            .collect();
        if let Some(f) = guards.iter().find_map(|g| g.failed.clone()) {
            drop(guards);
            self.sub_disk_used(reserved);
            return Err(Error::ReadOnly(f));
        }
        let guard_of = |s: usize| shards.binary_search(&s).unwrap_or(0);
        // Deletes of absent keys are no-ops and are left out of the batch (judged by the
        // index's hash side: rarely, a key sharing its tag with a live one keeps a delete
        // that removes nothing, which is harmless).
        let mut effective = 0u64;
        let mut used = 0u64;
        let keep: Vec<bool> = prepared
            .iter()
            .map(|(s, p)| {
                let k =
                    p.kind == Kind::Put || guards[guard_of(*s)].index.candidate(p.key).is_some();
                if k {
                    effective += 1;
                    used += p.record_len();
                }
                k
            })
            .collect();
        if effective == 0 {
            drop(guards);
            self.sub_disk_used(reserved);
            return Ok(());
        }
        let seq = self.next_seq.fetch_add(1, Ordering::SeqCst);
        for ((s, p), &k) in prepared.iter().zip(&keep) {
            if k {
                guards[guard_of(*s)].append(p, seq, effective as u32);
            }
        }
        drop(guards);
        self.sub_disk_used(reserved - used);
        for (s, p) in &prepared {
            self.shards[*s].note_user((p.key.len() + p.value.len()) as u64);
        }
        self.after_write(Some(seq), sync, shards[0])
    }

    /// Seals the queued segments now (used by `compact` and the background thread).
    pub fn seal_queued(&self) -> Result<()> {
        self.seal_queued_with(|| {})
    }

    /// Like [`Core::seal_queued`], running `between` before each seal.
    fn seal_queued_with(&self, between: impl Fn()) -> Result<()> {
        loop {
            between();
            let Some((shard, seg)) = self.seal_queue.lock().pop_front() else {
                return Ok(());
            };
            if let Err(e) = self.shards[shard as usize].seal(self, seg) {
                // Leave it queued for a later try.
                self.seal_queue.lock().push_back((shard, seg));
                return Err(e);
            }
        }
    }

    /// Waits for a segment to seal (and, for the maintenance thread, `spares`, for a
    /// spare segment asked for), shutdown or `timeout`.
    fn wait(&self, timeout: Duration, spares: bool) {
        let mut q = self.seal_queue.lock();
        let spare_wanted = spares && self.spare_wanted.load(Ordering::SeqCst);
        if q.is_empty() && !self.is_shutdown() && !spare_wanted {
            self.wake.wait_for(&mut q, timeout);
        }
    }

    /// Background loop: seals rotated segments and runs the periodic sync.
    fn maintenance_loop(&self) {
        let interval = match self.opts.sync {
            SyncPolicy::Every(d) => Some(d),
            _ => None,
        };
        let mut last_sync = Instant::now();
        while !self.is_shutdown() {
            // Spares first: a writer is about to need one, while a seal only frees
            // memory maps and makes a segment compactable.
            if let Err(e) = self.seal_queued_with(|| self.make_spares()) {
                log::error!("sealing a segment failed: {e}");
                self.wait(Duration::from_millis(500), true);
            }
            if let Some(d) = interval {
                if last_sync.elapsed() >= d {
                    if let Err(e) = self.flush() {
                        log::error!("periodic sync failed: {e}");
                    }
                    last_sync = Instant::now();
                }
                self.wait(
                    d.saturating_sub(last_sync.elapsed())
                        .max(Duration::from_millis(1)),
                    true,
                );
            } else {
                self.wait(Duration::from_millis(500), true);
            }
        }
    }

    fn compaction_loop(&self) {
        while !self.is_shutdown() {
            match crate::compaction::compact_one(self, false) {
                Ok(crate::compaction::Outcome::Compacted) => {}
                Ok(_) => self.wait(Duration::from_millis(200), false),
                Err(e) => {
                    log::error!("background compaction failed: {e}");
                    self.wait(Duration::from_secs(1), false);
                }
            }
        }
    }
}

pub(crate) fn check_key(k: &[u8]) -> Result<()> {
    if k.len() > MAX_KEY_LEN {
        return Err(Error::KeyTooLarge {
            len: k.len(),
            max: MAX_KEY_LEN,
        });
    }
    Ok(())
}

pub(crate) fn check_value(v: &[u8]) -> Result<()> {
    if v.len() > MAX_VALUE_LEN {
        return Err(Error::ValueTooLarge {
            len: v.len(),
            max: MAX_VALUE_LEN,
        });
    }
    Ok(())
}

/// Runs `f` over `items` on up to the machine's parallelism, keeping order.
fn par_map<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> Result<R> + Sync) -> Result<Vec<R>> {
    let n = items.len();
    let workers = std::thread::available_parallelism()
        .map(|p| p.get())
        .unwrap_or(2)
        .min(n.max(1));
    let slots: Vec<Mutex<Option<T>>> = items.into_iter().map(|t| Mutex::new(Some(t))).collect();
    let results: Vec<Mutex<Option<Result<R>>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n {
                    break;
                }
                let item = slots[i].lock().take().expect("each item taken once");
                *results[i].lock() = Some(f(item));
            });
        }
    });
    results
        .into_iter()
        .map(|r| r.into_inner().expect("every item processed"))
        .collect()
}

/// Directory of shard `i`.
pub(crate) fn shard_dir(dir: &Path, i: u32) -> PathBuf {
    dir.join("shards").join(format!("{i:04}"))
}

fn open_core(dir: &Path, opts: Options) -> Result<Core> {
    opts.validate()?;
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    if !dir.join(manifest::MANIFEST).exists() {
        check_creatable(dir)?;
    }
    let lock_path = dir.join("LOCK");
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| Error::io(&lock_path, e))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => return Err(Error::Locked(dir.to_owned())),
        Err(fs::TryLockError::Error(e)) => return Err(Error::io(&lock_path, e)),
    }
    let fs = Fs::new(opts.fault.clone());
    let nshards = if dir.join(manifest::MANIFEST).exists() {
        let n = manifest::read_manifest(dir)?;
        if let Some(want) = opts.shards {
            if want != n {
                return Err(Error::InvalidArgument(format!(
                    "store at {} has {n} shards; the shard count is fixed at creation (asked for {want})",
                    dir.display()
                )));
            }
        }
        n
    } else {
        create_store(
            &fs,
            dir,
            opts.shards.unwrap_or(crate::options::DEFAULT_SHARDS),
        )?
    };
    let mut seqstate = manifest::read_seqstate(dir)?;
    for i in 0..nshards {
        let d = shard_dir(dir, i);
        if !d.is_dir() {
            return Err(Error::corruption(&d, "shard directory is missing"));
        }
    }
    // Phase 1: load every shard's entries in parallel.
    let loaded = par_map((0..nshards).collect(), |i| {
        recovery::load(&fs, i, &shard_dir(dir, i))
    })?;
    // Phase 2: the writes newer than the watermark that survive must be a prefix of
    // the writes made, each batch whole (see `recovery::find_cut`).
    let mut seqs = Vec::new();
    for l in &loaded {
        l.seqs_above(seqstate.watermark, &mut seqs);
    }
    let max_seq = loaded
        .iter()
        .map(|l| l.max_seq)
        .chain([seqstate.max_seq()])
        .max()
        .unwrap_or(0);
    let lost_records = loaded.iter().any(|l| l.lost_records);
    let cut = recovery::find_cut(seqs, &seqstate, max_seq, lost_records);
    let mut damage: Vec<Damage> = Vec::new();
    if cut != recovery::Cut::default() {
        for s in &cut.aborted {
            log::warn!("batch {s} was only partly written before damage; ignoring all of it");
        }
        for &(lo, hi) in &cut.void {
            if lost_records {
                log::warn!("writes {lo}..={hi} are missing after damage");
            } else {
                log::warn!(
                    "write {lo} was lost in a crash; ignoring the writes after it ({lo}..={hi}) \
                     so that the store holds a prefix of its writes"
                );
            }
            seqstate.add_void(lo, hi);
        }
        seqstate.aborted.extend(&cut.aborted);
        seqstate.aborted.sort_unstable();
        manifest::write_seqstate(&fs, dir, &seqstate)?;
    }
    let next_seq = max_seq + 1;
    for l in &loaded {
        damage.extend(l.damage.iter().cloned());
    }
    // Phase 3: rebuild each shard's index in parallel.
    let (segment_size, hashed) = (opts.segment_size, opts.hash_index);
    let built = par_map(loaded, |l| {
        let (id, sdir) = (l.shard, l.dir.clone());
        let fs = &fs;
        recovery::build(l, &seqstate, fs, segment_size, hashed, |seg| {
            SegmentFile::create(fs, &sdir, id, seg, SegKind::Data, next_seq)
        })
    })?;
    let mut shards = Vec::with_capacity(built.len());
    let mut to_seal = Vec::new();
    let mut disk = 0;
    for (i, b) in built.into_iter().enumerate() {
        disk += b.state.disk_bytes();
        to_seal.extend(b.to_seal.iter().map(|&s| (i as u32, s)));
        shards.push(Shard::new(
            i as u32,
            shard_dir(dir, i as u32),
            b.state,
            b.unsynced,
        ));
    }
    let watermark = seqstate.watermark;
    Ok(Core {
        dir: dir.to_owned(),
        opts,
        fs,
        shards,
        next_seq: AtomicU64::new(next_seq),
        disk_used: AtomicU64::new(disk),
        durable_seq: AtomicU64::new(watermark),
        seqstate: Mutex::new(seqstate),
        seal_queue: Mutex::new(to_seal.into()),
        spare_wanted: AtomicBool::new(false),
        wake: Condvar::new(),
        failed: Mutex::new(None),
        shutdown: AtomicBool::new(false),
        open_damage: damage,
        files: Default::default(),
        _lock: lock,
    })
}

/// A new store may be created only in an empty directory (or one left by a creation
/// that crashed before writing its manifest).
fn check_creatable(dir: &Path) -> Result<()> {
    let has_data = fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok())
        .any(|e| {
            let name = e.file_name();
            name != "LOCK" && name != "shards" && !name.to_string_lossy().ends_with(".tmp")
        });
    if has_data {
        return Err(Error::format(
            dir,
            "directory is not empty and holds no cairn store (no CAIRN manifest)",
        ));
    }
    Ok(())
}

fn create_store(fs: &Fs, dir: &Path, n: u32) -> Result<u32> {
    check_creatable(dir)?;
    let shards = dir.join("shards");
    if shards.exists() {
        // A crash during creation may leave shard directories; they must be empty.
        for e in fs::read_dir(&shards)
            .map_err(|e| Error::io(&shards, e))?
            .flatten()
        {
            let non_empty = fs::read_dir(e.path())
                .map(|mut d| d.next().is_some())
                .unwrap_or(true);
            if non_empty {
                return Err(Error::corruption(
                    dir.join(manifest::MANIFEST),
                    "manifest missing but shard directories hold data",
                ));
            }
        }
    }
    for i in 0..n {
        let d = shard_dir(dir, i);
        fs::create_dir_all(&d).map_err(|e| Error::io(&d, e))?;
    }
    fs.sync_dir(&shards)?;
    fs.sync_dir(dir)?;
    manifest::write_manifest(fs, dir, n)?;
    Ok(n)
}

struct Handle {
    core: Arc<Core>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.core.shutdown.store(true, Ordering::SeqCst);
        self.core.files.wake_gc();
        {
            let _q = self.core.seal_queue.lock();
            self.core.wake.notify_all();
        }
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        if let Err(e) = self.core.close() {
            log::error!("closing the store failed: {e}");
        }
    }
}

/// A cairn store. Cheap to clone; all clones share the store, and every method takes
/// `&self`, so one `Db` serves many threads. The store closes (flushing its buffers) when
/// the last clone is dropped.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let db = cairn::Db::open(dir.path())?;
/// db.put("apple", "red")?;
/// db.put("banana", "yellow")?;
/// assert_eq!(db.get("apple")?.as_deref(), Some(&b"red"[..]));
/// let fruits: Vec<_> = db.prefix("b").map(|kv| kv.map(|(k, _)| k)).collect::<Result<_, _>>()?;
/// assert_eq!(fruits, vec![b"banana".to_vec()]);
/// db.delete("apple")?;
/// assert!(!db.contains("apple")?);
/// # Ok::<(), cairn::Error>(())
/// ```
#[derive(Clone)]
pub struct Db {
    handle: Arc<Handle>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("dir", &self.core().dir)
            .field("shards", &self.core().shards.len())
            .finish()
    }
}

fn as_bytes<K: AsRef<[u8]> + ?Sized>(b: Bound<&K>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_ref()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl Db {
    /// Opens the store in `dir` with default [`Options`], creating it if needed.
    pub fn open(dir: impl AsRef<Path>) -> Result<Db> {
        Options::new().open(dir)
    }

    pub(crate) fn open_with(dir: &Path, opts: Options) -> Result<Db> {
        let core = Arc::new(open_core(dir, opts)?);
        crate::files::open(&core)?;
        let mut threads = Vec::new();
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name)
                .spawn(f)
                .map_err(|e| Error::io(dir, e))
        };
        let c = core.clone();
        threads.push(spawn(
            "cairn-maint".into(),
            Box::new(move || c.maintenance_loop()),
        )?);
        let c = core.clone();
        threads.push(spawn(
            "cairn-files-gc".into(),
            Box::new(move || crate::files::gc_loop(c)),
        )?);
        if core.opts.background_compaction {
            for i in 0..core.opts.compaction_threads.max(1) {
                let c = core.clone();
                threads.push(spawn(
                    format!("cairn-compact-{i}"),
                    Box::new(move || c.compaction_loop()),
                )?);
            }
        }
        Ok(Db {
            handle: Arc::new(Handle {
                core,
                threads: Mutex::new(threads),
            }),
        })
    }

    pub(crate) fn core(&self) -> &Core {
        &self.handle.core
    }

    pub(crate) fn core_arc(&self) -> &Arc<Core> {
        &self.handle.core
    }

    /// The file store: large values streamed in chunks over all shards, committed
    /// atomically, read with range reads (see [`crate::files`]).
    pub fn files(&self) -> crate::files::FileStore {
        crate::files::FileStore::new(self.clone())
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.core().dir
    }

    /// Sets `key` to `value`.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let k = key.as_ref();
        check_key(k)?;
        self.core().put(&ikey(NS_USER, k), value.as_ref(), true)
    }

    /// Reads the value of `key`: at most one disk read, checksum verified.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        let k = key.as_ref();
        if k.len() > MAX_KEY_LEN {
            return Ok(None);
        }
        self.core().get(&ikey(NS_USER, k))
    }

    /// Deletes `key` (a no-op when it is absent).
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let k = key.as_ref();
        check_key(k)?;
        self.core().delete(&ikey(NS_USER, k), true)
    }

    /// Whether `key` has a value (answered from memory, no disk read).
    pub fn contains(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        let k = key.as_ref();
        Ok(k.len() <= MAX_KEY_LEN && self.core().contains(&ikey(NS_USER, k)))
    }

    /// Applies every operation of `batch` atomically: readers and a crash see all of it
    /// or none of it. Within a batch, the last operation on a key wins.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        self.core().write_batch(batch, true)
    }

    /// Every key and value in key order. Reverse with `.rev()`.
    pub fn iter(&self) -> Iter {
        let (lo, hi) = ns_bounds(NS_USER, Bound::Unbounded, Bound::Unbounded);
        Iter::new(self.handle.core.clone(), lo, hi, 1)
    }

    /// The keys within `range`, in key order. Reverse with `.rev()`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = cairn::Db::open(dir.path())?;
    /// for k in ["a", "b", "c", "d"] { db.put(k, k)?; }
    /// let keys: Vec<_> = db.range("b".."d").map(|r| r.unwrap().0).collect();
    /// assert_eq!(keys, vec![b"b".to_vec(), b"c".to_vec()]);
    /// let back: Vec<_> = db.range("b"..).rev().map(|r| r.unwrap().0).collect();
    /// assert_eq!(back, vec![b"d".to_vec(), b"c".to_vec(), b"b".to_vec()]);
    /// # Ok::<(), cairn::Error>(())
    /// ```
    pub fn range<K: AsRef<[u8]> + ?Sized, R: RangeBounds<K>>(&self, range: R) -> Iter {
        let (lo, hi) = ns_bounds(
            NS_USER,
            as_bytes(range.start_bound()),
            as_bytes(range.end_bound()),
        );
        Iter::new(self.handle.core.clone(), lo, hi, 1)
    }

    /// The keys starting with `prefix`, in key order. Reverse with `.rev()`.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        let (lo, hi) = ns_prefix_bounds(NS_USER, prefix.as_ref());
        Iter::new(self.handle.core.clone(), lo, hi, 1)
    }

    /// Makes every write acknowledged so far durable.
    pub fn flush(&self) -> Result<()> {
        self.core().flush()
    }

    /// Runs compaction now: seals every segment whose stale fraction is at or above the
    /// threshold (the active one included), then rewrites them.
    pub fn compact(&self) -> Result<()> {
        let c = self.core();
        for s in &c.shards {
            s.rotate_if_stale(c, c.opts.compaction_threshold)?;
        }
        c.seal_queued()?;
        // Bounded by the segments that exist now, so that it returns even while writers
        // keep producing stale segments.
        let mut budget: usize = c.shards.iter().map(|s| s.state.read().segs.len()).sum();
        // Waiting for a background compaction is bounded too (1 ms a try).
        let mut waits = 0u32;
        while budget > 0 && waits < 60_000 {
            match crate::compaction::compact_one(c, true)? {
                crate::compaction::Outcome::Compacted => budget -= 1,
                crate::compaction::Outcome::Busy => waits += 1,
                crate::compaction::Outcome::Nothing => break,
            }
        }
        Ok(())
    }

    /// Sizes and amplification, per shard and in total.
    pub fn stats(&self) -> Stats {
        let mut stats = crate::stats::collect(self.core());
        stats.files = crate::files::stats(self.core_arc());
        stats
    }

    /// Re-reads every record and hint file and reports each damaged place.
    pub fn verify(&self) -> Result<VerifyReport> {
        crate::verify::verify(self.core())
    }

    /// Damage found and skipped while opening (corrupt records, unreadable hints).
    pub fn open_damage(&self) -> &[Damage] {
        &self.core().open_damage
    }
}

/// The smallest key greater than every key starting with `p`, if any.
fn prefix_successor(p: &[u8]) -> Option<Vec<u8>> {
    let mut v = p.to_vec();
    while let Some(last) = v.pop() {
        if last < 0xff {
            v.push(last + 1);
            return Some(v);
        }
    }
    None
}
