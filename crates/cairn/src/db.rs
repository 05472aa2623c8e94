//! The store handle, [`Db`]: open and close, the key-value API of keyspace 0, and what
//! the layers above the engine build on — keyspaces of their own ([`Db::keyspace`]),
//! state attached to the open store ([`Db::extension`]) and background threads that
//! stop when it closes ([`Db::spawn_background`]).

use std::any::{Any, TypeId};
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use parking_lot::Mutex;

use crate::background;
use crate::batch::WriteBatch;
use crate::checkpoint::{self, CheckpointReport, How, Staging};
use crate::compaction::{self, Outcome, Reclaimed};
use crate::core::Core;
use crate::damage::Damage;
use crate::iter::Iter;
use crate::keys::{as_bytes, check_key, ikey, ns_bounds, ns_prefix_bounds, with_ikey, NS_USER};
use crate::keyspace::WriteOptions;
use crate::open::open_core;
use crate::readonly::CatchUp;
use crate::stats::Stats;
use crate::value::Value;
use crate::verify::VerifyReport;
use crate::{Error, Options, Result, MAX_KEY_LEN};

/// What the last user-facing handle owns: the store's threads, and the hooks that stop
/// the layers' threads. Dropping it (or [`Db::close`]) closes the store.
struct Handle {
    core: Arc<Core>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Called at close, after the shutdown flag is set, to wake the layers' threads.
    stop_hooks: Mutex<Vec<Box<dyn Fn() + Send + Sync>>>,
    closed: AtomicBool,
}

impl Handle {
    /// Stops every background thread (the engine's and the layers'), then flushes the
    /// store and writes a hint file for every active segment. Runs once.
    ///
    /// Writes are still taken while the threads finish (a layer's thread may write as
    /// it winds up: the file store's collector deletes the chunks of files removed just
    /// before), and refused once they have all returned.
    fn shutdown(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let start = Instant::now();
        let budget = self.core.opts.close_budget;
        let _ = self.core.threads_deadline.set(start + budget / 2);
        self.core.begin_shutdown();
        for hook in self.stop_hooks.lock().iter() {
            hook();
        }
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        self.core.set_closed();
        let core = &self.core;
        // A read-only open wrote nothing and leaves everything as it found it.
        if core.follower.is_some() {
            return Ok(());
        }
        // A store that failed (a sync that did not complete, say) cannot make what it
        // acknowledged durable: the close says so rather than report success.
        if let Some(why) = core.failure() {
            return Err(Error::ReadOnly(why));
        }
        core.flush()?;
        if !budget.is_zero() {
            compaction::reclaim_at_close(core, start + budget);
        }
        core.finish_close()
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            log::error!(
                "closing the store at {} failed: {e} (use Db::close to see this error)",
                self.core.dir.display()
            );
        }
    }
}

/// A cairn store. Cheap to clone; all clones share the store, and every method takes
/// `&self`, so one `Db` serves many threads. The store closes (flushing its buffers and
/// writing hint files) when the last clone is dropped; [`Db::close`] does the same and
/// returns any error, which a drop can only log.
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
/// db.close()?;
/// # Ok::<(), cairn::Error>(())
/// ```
#[derive(Clone)]
pub struct Db {
    core: Arc<Core>,
    /// `None` for the handle given to background threads ([`Background::db`]), which
    /// does not keep the store open.
    handle: Option<Arc<Handle>>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("dir", &self.core().dir)
            .field("shards", &self.core().shards.len())
            .finish()
    }
}

/// What a layer's background thread gets (see [`Db::spawn_background`]): a handle to
/// the store that does not keep it open, and the signal that it is closing.
pub struct Background {
    db: Db,
}

impl Background {
    /// The store. Valid until the thread returns: the store waits for the thread
    /// before it closes.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Whether the store is closing: the thread should return soon.
    pub fn is_stopping(&self) -> bool {
        self.db.core.is_shutdown()
    }

    /// Once the store is closing, the time by which the thread should have returned:
    /// until then it may still write, to finish work that gives space back (the file
    /// store's collector deletes the chunks of files removed just before the close).
    /// The store waits for the thread whatever the time; this bounds how long a close
    /// takes ([`crate::Options::close_budget`], half of it). `None` while the store is
    /// open.
    pub fn deadline(&self) -> Option<Instant> {
        if self.is_stopping() {
            self.db.core.threads_deadline.get().copied()
        } else {
            None
        }
    }
}

impl Db {
    /// Opens the store in `dir` with default [`Options`], creating it if needed.
    pub fn open(dir: impl AsRef<Path>) -> Result<Db> {
        Options::new().open(dir)
    }

    pub(crate) fn open_with(dir: &Path, opts: Options) -> Result<Db> {
        let read_only = opts.read_only;
        let core = Arc::new(if read_only {
            crate::readonly::open_core(dir, opts)?
        } else {
            open_core(dir, opts)?
        });
        let db = Db {
            core: core.clone(),
            handle: Some(Arc::new(Handle {
                core,
                threads: Mutex::new(Vec::new()),
                stop_hooks: Mutex::new(Vec::new()),
                closed: AtomicBool::new(false),
            })),
        };
        if read_only {
            // No maintenance, no compaction: nothing that writes.
            return Ok(db);
        }
        let c = db.core.clone();
        db.spawn_thread("cairn-maint".into(), move || {
            background::maintenance_loop(&c)
        })?;
        if db.core.opts.background_compaction {
            for i in 0..db.core.opts.compaction_threads.max(1) {
                let c = db.core.clone();
                db.spawn_thread(format!("cairn-compact-{i}"), move || {
                    background::compaction_loop(&c)
                })?;
            }
        }
        Ok(db)
    }

    fn handle(&self) -> Result<&Arc<Handle>> {
        self.handle.as_ref().ok_or_else(|| {
            Error::InvalidArgument(
                "a background thread's store handle cannot start threads or close the store".into(),
            )
        })
    }

    fn spawn_thread(&self, name: String, f: impl FnOnce() + Send + 'static) -> Result<()> {
        let handle = self.handle()?;
        let t = std::thread::Builder::new()
            .name(name)
            .spawn(f)
            .map_err(|e| Error::io(&self.core.dir, e))?;
        handle.threads.lock().push(t);
        Ok(())
    }

    pub(crate) fn core(&self) -> &Core {
        &self.core
    }

    pub(crate) fn core_arc(&self) -> &Arc<Core> {
        &self.core
    }

    /// Closes the store now and reports what a drop could only log: stops the
    /// background threads (the engine's and those of layers, [`Db::spawn_background`]),
    /// makes every write durable and writes a hint file for every active segment, so
    /// that the next open reads no data.
    ///
    /// The store is shared by every clone of this handle (and by the keyspaces and
    /// layers opened on it); `close` closes it for all of them, and their later
    /// operations fail with [`Error::Closed`]. Dropping the last clone without `close`
    /// does the same and logs an error instead of returning it.
    pub fn close(self) -> Result<()> {
        let handle = self.handle()?.clone();
        handle.shutdown()
    }

    /// State that a layer keeps for this open store, one value per type `T`, created
    /// by `init` on first use and shared by every later caller until the store closes
    /// (the file store keeps its key locks and read pins here, so that every handle
    /// opened on one store shares them). `init` must not call `extension` itself. The
    /// value must not own a `Db` (it would keep the store open forever): keep owning
    /// handles in the layer's own handle type instead.
    pub fn extension<T: Any + Send + Sync>(
        &self,
        init: impl FnOnce() -> Result<T>,
    ) -> Result<Arc<T>> {
        let mut ext = self.core.extensions.lock();
        // Stored under its type: the downcast always succeeds.
        if let Some(Ok(v)) = ext
            .get(&TypeId::of::<T>())
            .map(|v| v.clone().downcast::<T>())
        {
            return Ok(v);
        }
        let v = Arc::new(init()?);
        ext.insert(TypeId::of::<T>(), v.clone());
        Ok(v)
    }

    /// Starts a thread named `name` for a layer above the engine (the file store's
    /// collector, say). It runs `run` with a [`Background`] whose [`Background::db`]
    /// does not keep the store open; when the store closes, `stop` is called (to wake
    /// the thread if it sleeps) and the store waits for `run` to return before its last
    /// flush. `run` should check [`Background::is_stopping`] between steps.
    pub fn spawn_background(
        &self,
        name: &str,
        run: impl FnOnce(Background) + Send + 'static,
        stop: impl Fn() + Send + Sync + 'static,
    ) -> Result<()> {
        let handle = self.handle()?;
        if handle.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        handle.stop_hooks.lock().push(Box::new(stop));
        let bg = Background {
            db: Db {
                core: self.core.clone(),
                handle: None,
            },
        };
        self.spawn_thread(name.to_owned(), move || run(bg))
    }

    /// Number of shards (fixed when the store was created).
    pub fn shard_count(&self) -> usize {
        self.core.shards.len()
    }

    /// The regions of numbered rows (keyspace, tag) this store routes to shards by
    /// group of 64 consecutive numbers rather than by each key's hash: those declared
    /// with [`Options::numbered_rows`] when it was created, recorded in its manifest
    /// (format version 2; a store made without any, or before 2026-11-28, has none).
    /// Fixed for the store's life, whatever later opens declare.
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = cairn::Options::new().numbered_rows(7, b'I').open(dir.path())?;
    /// drop(db);
    /// let db = cairn::Db::open(dir.path())?;
    /// assert_eq!(db.grouped_rows(), vec![(7, b'I')]);
    /// # Ok::<(), cairn::Error>(())
    /// ```
    pub fn grouped_rows(&self) -> Vec<(u8, u8)> {
        self.core.router.grouped_rows()
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &Options {
        &self.core.opts
    }

    /// Whether the store is closing or closed. While it closes, writes are still taken
    /// until the background threads have returned (see [`Background::deadline`]);
    /// after that they fail with [`Error::Closed`].
    pub fn is_closing(&self) -> bool {
        self.core.is_shutdown()
    }

    /// Why the store refuses writes, if it does (a failed fsync makes it read-only
    /// until it is reopened).
    pub fn failure(&self) -> Option<String> {
        self.core.failure()
    }

    /// Sends the buffered writes of the given shards to the kernel, and with `durable`
    /// makes them durable (several shards' fsyncs in flight at once). For layers that
    /// write with [`crate::WriteOptions::defer_sync`] and know which shards they
    /// touched ([`crate::Keyspace::shard_of`]): cheaper than [`Db::flush`], which syncs every
    /// shard.
    pub fn flush_shards(&self, shards: &[usize], durable: bool) -> Result<()> {
        self.refuse_read_only()?;
        let core = self.core();
        if let Some(&bad) = shards.iter().find(|&&s| s >= core.shards.len()) {
            return Err(Error::InvalidArgument(format!(
                "shard {bad} does not exist (the store has {})",
                core.shards.len()
            )));
        }
        if shards.len() <= 1 || !durable {
            for &s in shards {
                core.shards[s].flush(core, durable)?;
            }
            return Ok(());
        }
        // fsyncs of different segment files proceed in parallel in the device queue.
        let workers = 4.min(shards.len());
        let next = AtomicU64::new(0);
        let first_err: Mutex<Option<Error>> = Mutex::new(None);
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let Some(&shard) = shards.get(i) else { break };
                    if let Err(e) = core.shards[shard].flush(core, true) {
                        first_err.lock().get_or_insert(e);
                    }
                });
            }
        });
        first_err.into_inner().map_or(Ok(()), Err)
    }

    /// Starts writing shard `shard`'s written but unsynced data to disk without waiting
    /// (`sync_file_range(SYNC_FILE_RANGE_WRITE)` on Linux), so that a later sync finds
    /// less to do. A streaming writer calls this as it goes, so that the sync at its
    /// commit overlaps with the streaming. Out-of-range shards are ignored.
    pub fn start_writeback(&self, shard: usize) {
        if shard < self.core.shards.len() && self.core.follower.is_none() {
            self.core.start_writeback(shard);
        }
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.core().dir
    }

    /// Sets `key` to `value`.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.put_with(key, value, WriteOptions::new())
    }

    /// Sets `key` to `value`, waiting for durability as `opts` says.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = cairn::Options::new().sync(cairn::SyncPolicy::Always).open(dir.path())?;
    /// for i in 0..100u32 {
    ///     db.put_with(i.to_be_bytes(), "v", cairn::WriteOptions::new().defer_sync())?;
    /// }
    /// db.sync_written()?; // one sync for the hundred writes
    /// # Ok::<(), cairn::Error>(())
    /// ```
    pub fn put_with(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        opts: WriteOptions,
    ) -> Result<()> {
        let k = key.as_ref();
        check_key(k)?;
        self.core()
            .put(&ikey(NS_USER, k), value.as_ref(), opts.sync())
    }

    /// Reads the value of `key`: at most one disk read, checksum verified.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        let k = key.as_ref();
        if k.len() > MAX_KEY_LEN {
            return Ok(None);
        }
        with_ikey(NS_USER, k, |ik| self.core().get(ik))
    }

    /// Reads the values of `keys`, in their order, each as [`Db::get`] would; faster than
    /// one `get` per key when the index and records are not in the CPU's caches, as
    /// the memory accesses of different keys overlap. Not one point in time across the
    /// keys: read from a [`Db::snapshot`] for that.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = cairn::Db::open(dir.path())?;
    /// db.put("a", "1")?;
    /// db.put("c", "3")?;
    /// let got = db.get_many(&["a", "b", "c"])?;
    /// let got: Vec<_> = got.iter().map(|v| v.as_deref()).collect();
    /// assert_eq!(got, [Some(&b"1"[..]), None, Some(&b"3"[..])]);
    /// # Ok::<(), cairn::Error>(())
    /// ```
    pub fn get_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<Value>>> {
        crate::many::get_many_in(self.core(), NS_USER, keys)
    }

    /// Deletes `key` (a no-op when it is absent).
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.delete_with(key, WriteOptions::new())
    }

    /// Deletes `key`, waiting for durability as `opts` says.
    pub fn delete_with(&self, key: impl AsRef<[u8]>, opts: WriteOptions) -> Result<()> {
        let k = key.as_ref();
        check_key(k)?;
        self.core().delete(&ikey(NS_USER, k), opts.sync())
    }

    /// Whether `key` has a value (answered from memory, no disk read).
    pub fn contains(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        let k = key.as_ref();
        Ok(k.len() <= MAX_KEY_LEN && with_ikey(NS_USER, k, |ik| self.core().contains(ik)))
    }

    /// Applies every operation of `batch` atomically: readers and a crash see all of it
    /// or none of it. Within a batch, the last operation on a key wins.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        self.write_with(batch, WriteOptions::new())
    }

    /// Applies `batch` atomically, waiting for durability as `opts` says.
    pub fn write_with(&self, batch: WriteBatch, opts: WriteOptions) -> Result<()> {
        self.core()
            .write_batch_opts(batch, opts.sync(), opts.frees_space_set())
    }

    /// Every key and value in key order. Reverse with `.rev()`.
    pub fn iter(&self) -> Iter {
        let (lo, hi) = ns_bounds(NS_USER, Bound::Unbounded, Bound::Unbounded);
        Iter::new(self.core.clone(), lo, hi, 1)
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
        Iter::new(self.core.clone(), lo, hi, 1)
    }

    /// The keys starting with `prefix`, in key order. Reverse with `.rev()`.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        let (lo, hi) = ns_prefix_bounds(NS_USER, prefix.as_ref());
        Iter::new(self.core.clone(), lo, hi, 1)
    }

    /// Makes every write acknowledged so far durable.
    pub fn flush(&self) -> Result<()> {
        self.refuse_read_only()?;
        self.core().flush()
    }

    /// Makes every write made so far durable, sharing fsyncs with concurrent callers
    /// and with writers under `SyncPolicy::Always` (group commit), and returns at once
    /// when they already are. For layers that write with
    /// [`crate::WriteOptions::defer_sync`] while holding a lock of their own and wait for
    /// durability after releasing it, so that concurrent operations share fsyncs;
    /// [`Db::flush`] instead syncs every shard on each call.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = cairn::Db::open(dir.path())?;
    /// let ks = db.keyspace(9);
    /// ks.put_with("k", "v", cairn::WriteOptions::new().defer_sync())?;
    /// db.sync_written()?; // "k" is durable now
    /// # Ok::<(), cairn::Error>(())
    /// ```
    pub fn sync_written(&self) -> Result<()> {
        self.refuse_read_only()?;
        self.core().sync_written(0)
    }

    /// Runs compaction now: seals every segment whose stale fraction is at or above the
    /// threshold (the active one included), then rewrites them.
    pub fn compact(&self) -> Result<()> {
        self.refuse_read_only()?;
        let c = self.core();
        for s in &c.shards {
            s.rotate_if_stale(c, c.opts.compaction_threshold)?;
        }
        c.seal_queued()?;
        // Bounded by the segments that exist now, so that it returns even while writers
        // keep producing stale segments.
        let mut budget: usize = c.shards.iter().map(|s| s.state.read().segs.len()).sum();
        // Waiting for a background compaction is bounded too (a minute in all; each
        // wait ends when the shard waited for is free).
        let mut waited = std::time::Duration::ZERO;
        while budget > 0 && waited < std::time::Duration::from_secs(60) {
            let t = Instant::now();
            match compaction::compact_one(c, true)? {
                Outcome::Compacted => budget -= 1,
                Outcome::Busy => waited += t.elapsed(),
                Outcome::Nothing => break,
            }
        }
        Ok(())
    }

    /// Gives back now, without copying anything, the space of records that are all
    /// dead (superseded or deleted): each shard's active segment that holds at least
    /// 1/8 of `segment_size` and is at least `compaction_threshold` stale is rotated
    /// out, then every segment whose records can all go (puts since overwritten or
    /// deleted, tombstones no other segment needs) is removed whole. A segment that was
    /// never synced is not synced for the drop (unless a flush that promises durability
    /// runs meanwhile): its dirty pages go with the file. Rotated
    /// segments that still hold live records are sealed and compacted in the background
    /// as usual.
    ///
    /// Cost: the listing of each candidate segment (its hint file, or the headers of one
    /// not sealed yet, a page per record of large values), one sync of every other
    /// file of the store (cheap for those already synced) and one `SEQSTATE` write, and an unlink and a directory sync per segment dropped. Layers
    /// call it after deleting much at once (the file store's collector, after reclaiming
    /// the chunks of removed files); the compaction thread does the same by itself for
    /// shards that take no writes for a while (for active segments down to 1/64 of
    /// `segment_size`), and [`Db::close`] for what was deleted
    /// just before it (see [`Options::close_budget`]).
    pub fn reclaim(&self) -> Result<Reclaimed> {
        self.refuse_read_only()?;
        compaction::reclaim(self.core(), None, compaction::RotateMin::Busy)
    }

    /// Sizes and amplification, per shard and in total.
    pub fn stats(&self) -> Stats {
        crate::stats::collect(self.core())
    }

    /// Re-reads every record and hint file and reports each damaged place.
    pub fn verify(&self) -> Result<VerifyReport> {
        crate::verify::verify(self.core())
    }

    /// Makes a consistent copy of the whole store (every keyspace: the file store and
    /// the file system too) in `dest`, a new directory, while writers go on; returns
    /// once it is durable. The copy holds exactly the writes numbered below one point of
    /// the write order (a prefix of the acknowledged writes, whole batches only), and
    /// `Db::open(dest)` opens it with nothing to repair.
    ///
    /// Writers are held only for the cut: the time to note each segment's length (see
    /// [`CheckpointReport::cut`]). Sealed segments, which never change, are hard-linked
    /// when `dest` is on the store's file system — then the checkpoint takes about as
    /// long for any size — and copied otherwise (with `copy_file_range`); the segments
    /// still taking writes are copied up to the cut. Compaction waits until the
    /// checkpoint has placed every segment, so none it needs is removed.
    ///
    /// On a read-only handle ([`Options::read_only`]: the store is another process's)
    /// the copy is of the view, record by record, into a new store: the same prefix of
    /// the writer's writes the view shows, in time proportional to the data.
    ///
    /// `dest` must not exist or be an empty directory; the copy is made in
    /// `DEST.incomplete` and renamed, so a crash leaves `dest` whole or absent. A
    /// checkpoint shares its sealed segments' data with the store (hard links): for a
    /// copy that survives damage to the store's disk, use [`Db::backup`].
    ///
    /// ```
    /// # let tmp = tempfile::tempdir().unwrap();
    /// let db = cairn::Db::open(tmp.path().join("db"))?;
    /// db.put("k", "v")?;
    /// let report = db.checkpoint(tmp.path().join("copy"))?;
    /// db.put("k", "later")?;
    /// let copy = cairn::Db::open(tmp.path().join("copy"))?;
    /// assert_eq!(copy.get("k")?.as_deref(), Some(&b"v"[..]));
    /// assert!(report.cut < std::time::Duration::from_secs(1));
    /// # Ok::<(), cairn::Error>(())
    /// ```
    pub fn checkpoint(&self, dest: impl AsRef<Path>) -> Result<CheckpointReport> {
        let core = self.core();
        let staging = Staging::begin(&core.fs, dest.as_ref())?;
        let made = match self.is_read_only() {
            true => checkpoint::copy_view(self, &staging),
            false => checkpoint::copy_store(core, &staging, &How::Link).map(|r| r.0),
        };
        match made {
            Ok(report) => {
                staging.finish(&core.fs)?;
                Ok(report)
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staging.dir);
                Err(e)
            }
        }
    }

    /// Makes a backup of the store in `dest`: a checkpoint (see [`Db::checkpoint`])
    /// whose files are all copied, never linked to the store, and listed with their
    /// lengths and CRC-32C checksums in `dest/BACKUP`, so that
    /// [`crate::backup::verify`] can check it. With `base`, an earlier backup, the
    /// backup is incremental: each sealed segment (and hint file) the base holds byte
    /// for byte is hard-linked from it instead of copied, so only what changed since is
    /// written (the store's sealed segments are read to compare). Restore with
    /// [`crate::backup::restore`].
    pub fn backup(&self, dest: impl AsRef<Path>, base: Option<&Path>) -> Result<CheckpointReport> {
        crate::backup::backup(self, dest.as_ref(), base)
    }

    /// Damage found and skipped while opening (corrupt records, unreadable hints).
    pub fn open_damage(&self) -> &[Damage] {
        &self.core().open_damage
    }

    /// Every damaged place found since the store was opened: at open (as
    /// [`Db::open_damage`]), and since then by the background work that reads whole
    /// segments — sealing (which lists a segment's records for its hint file) and
    /// compaction. [`Db::verify`] reports the latter too.
    pub fn damage(&self) -> Vec<Damage> {
        let mut all = self.core().open_damage.clone();
        all.extend(self.core().found_damage());
        all
    }
}

/// Read-only opens ([`Options::read_only`]).
impl Db {
    /// Whether this store was opened read-only ([`Options::read_only`]): it follows
    /// another process's writes ([`Db::catch_up`]) and refuses its own.
    pub fn is_read_only(&self) -> bool {
        self.core.follower.is_some()
    }

    /// Brings a read-only view ([`Options::read_only`]) forward to what the writer has
    /// put in the files since the view was opened or last caught up: each shard's
    /// segments read on from where they were read to, new segments read from their hint
    /// files (or scanned), and the new `SEQSTATE`; the view then shows the longest
    /// prefix of the writer's writes, never part of a batch, that the files hold whole.
    /// Writes still in the writer's memory (its write buffers) are not in the files
    /// yet: the writer's [`Db::flush`] puts them there. A catch-up writes nothing and
    /// takes no lock the writer waits for; readers of this handle wait only while the
    /// changes are applied, to every shard at once. When the writer compacted or dropped
    /// segments meanwhile, the view follows (it keeps the files it reads open until
    /// nothing in it points into them); when the writer crashed and was reopened, and
    /// its recovery threw writes away, the view is read again from scratch
    /// ([`CatchUp::rebuilt`]). A store open for writing is always current: this returns
    /// at once, with nothing added.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let writer = cairn::Db::open(dir.path())?;
    /// let reader = cairn::Options::new().read_only().open(dir.path())?;
    /// let mut b = cairn::WriteBatch::new();
    /// b.put("a", "1");
    /// b.put("b", "1");
    /// writer.write(b)?;
    /// writer.flush()?;
    /// assert!(reader.get("a")?.is_none());
    /// let caught = reader.catch_up()?;
    /// assert_eq!(caught.records, 2);
    /// assert_eq!(reader.get("b")?.as_deref(), Some(&b"1"[..]));
    /// # Ok::<(), cairn::Error>(())
    /// ```
    pub fn catch_up(&self) -> Result<CatchUp> {
        crate::readonly::catch_up(self.core())
    }

    /// Refuses an operation that would write, on a store opened read-only.
    fn refuse_read_only(&self) -> Result<()> {
        match self.core.follower {
            Some(_) => Err(self.core.refusal()),
            None => Ok(()),
        }
    }
}

impl Options {
    /// Opens (creating if needed) the store in `dir` with these options.
    pub fn open(self, dir: impl AsRef<Path>) -> Result<Db> {
        Db::open_with(dir.as_ref(), self)
    }
}
