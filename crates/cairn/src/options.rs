//! Tuning knobs, chosen when a store is opened.

#[cfg(feature = "test-hooks")]
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "test-hooks")]
use crate::fault::{FaultInjector, PowerLoss};
use crate::fsutil::Fs;
use crate::{Error, Result};

/// When writes reach stable storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Never fsync on the write path; data reaches the disk when buffers fill,
    /// segments are sealed, or [`Db::flush`](crate::Db::flush) is called. Fastest.
    Never,
    /// A background thread makes every write durable within this interval.
    Every(Duration),
    /// A write returns only once it is on stable storage. Concurrent writers
    /// share fsyncs (group commit).
    Always,
}

/// Default number of shards of a new store.
pub const DEFAULT_SHARDS: u32 = 16;
/// Default segment size cap (64 MiB).
pub const DEFAULT_SEGMENT_SIZE: u64 = 64 << 20;
/// Largest allowed segment size (offsets in the index are 32-bit).
pub const MAX_SEGMENT_SIZE: u64 = 1 << 30;
/// Smallest allowed segment size.
pub const MIN_SEGMENT_SIZE: u64 = 4 << 10;
/// Largest allowed shard count.
pub const MAX_SHARDS: u32 = 4096;
/// Most regions of numbered rows one store may declare ([`Options::numbered_rows`]; a
/// new store's manifest lists them all).
pub const MAX_NUMBERED_REGIONS: usize = 64;
/// Default time a close may spend giving back space (see [`Options::close_budget`]).
pub const DEFAULT_CLOSE_BUDGET: Duration = Duration::from_secs(2);

/// Builder for opening a store with non-default settings.
///
/// ```
/// use cairn::{Options, SyncPolicy};
/// # let dir = tempfile::tempdir().unwrap();
/// let db = Options::new()
///     .shards(8)
///     .segment_size(16 << 20)
///     .compaction_threshold(0.4)
///     .sync(SyncPolicy::Always)
///     .open(dir.path())?;
/// db.put("k", "v")?;
/// # Ok::<(), cairn::Error>(())
/// ```
#[derive(Clone)]
pub struct Options {
    pub(crate) shards: Option<u32>,
    pub(crate) segment_size: u64,
    pub(crate) compaction_threshold: f64,
    pub(crate) sync: SyncPolicy,
    pub(crate) max_size: Option<u64>,
    pub(crate) background_compaction: bool,
    pub(crate) compaction_threads: usize,
    pub(crate) compaction_rate: Option<u64>,
    pub(crate) write_buffer: usize,
    pub(crate) hash_index: bool,
    pub(crate) numbered: Vec<crate::numbered::Region>,
    pub(crate) close_budget: Duration,
    pub(crate) commit_log_size: u64,
    pub(crate) read_only: bool,
    #[cfg(feature = "test-hooks")]
    pub(crate) fault: Option<Arc<FaultInjector>>,
    #[cfg(feature = "test-hooks")]
    pub(crate) power: Option<Arc<PowerLoss>>,
}

impl Default for Options {
    fn default() -> Self {
        Options::new()
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("shards", &self.shards)
            .field("segment_size", &self.segment_size)
            .field("compaction_threshold", &self.compaction_threshold)
            .field("sync", &self.sync)
            .field("max_size", &self.max_size)
            .field("background_compaction", &self.background_compaction)
            .field("compaction_threads", &self.compaction_threads)
            .field("compaction_rate", &self.compaction_rate)
            .field("write_buffer", &self.write_buffer)
            .field("hash_index", &self.hash_index)
            .field("numbered", &self.numbered)
            .field("close_budget", &self.close_budget)
            .field("commit_log_size", &self.commit_log_size)
            .field("read_only", &self.read_only)
            .finish()
    }
}

impl Options {
    /// Default options: 16 shards (for a new store), 64 MiB segments, compaction at 50%
    /// stale bytes, `SyncPolicy::Never`, no size limit, background compaction on.
    pub fn new() -> Options {
        Options {
            shards: None,
            segment_size: DEFAULT_SEGMENT_SIZE,
            compaction_threshold: 0.5,
            sync: SyncPolicy::Never,
            max_size: None,
            background_compaction: true,
            compaction_threads: 1,
            compaction_rate: Some(256 << 20),
            write_buffer: 256 << 10,
            hash_index: true,
            numbered: Vec::new(),
            close_budget: DEFAULT_CLOSE_BUDGET,
            commit_log_size: crate::commitlog::DEFAULT_COMMIT_LOG_SIZE,
            read_only: false,
            #[cfg(feature = "test-hooks")]
            fault: None,
            #[cfg(feature = "test-hooks")]
            power: None,
        }
    }

    /// Number of shards for a new store (1..=4096). The count is recorded on disk at
    /// creation; opening an existing store with a different explicit count is an error.
    pub fn shards(mut self, n: u32) -> Options {
        self.shards = Some(n);
        self
    }

    /// Size at which a segment file is sealed and a new one started (4 KiB..=1 GiB).
    pub fn segment_size(mut self, bytes: u64) -> Options {
        self.segment_size = bytes;
        self
    }

    /// Fraction of stale bytes (0.0..=1.0, exclusive of 0) at which a sealed segment is
    /// rewritten by compaction.
    pub fn compaction_threshold(mut self, fraction: f64) -> Options {
        self.compaction_threshold = fraction;
        self
    }

    /// Durability policy for writes.
    pub fn sync(mut self, policy: SyncPolicy) -> Options {
        self.sync = policy;
        self
    }

    /// Upper bound on the bytes the store may occupy on disk. A put that would pass it
    /// fails with [`Error::StorageFull`].
    pub fn max_size(mut self, bytes: u64) -> Options {
        self.max_size = Some(bytes);
        self
    }

    /// Whether background threads compact segments automatically (default true).
    /// [`Db::compact`](crate::Db::compact) works either way.
    pub fn background_compaction(mut self, on: bool) -> Options {
        self.background_compaction = on;
        self
    }

    /// Number of background compaction threads (default 1).
    pub fn compaction_threads(mut self, n: usize) -> Options {
        self.compaction_threads = n;
        self
    }

    /// Upper bound on the bytes per second that background compaction reads and writes,
    /// so that foreground latency stays steady (default 256 MiB/s; `None` = unthrottled).
    pub fn compaction_rate(mut self, bytes_per_sec: Option<u64>) -> Options {
        self.compaction_rate = bytes_per_sec;
        self
    }

    /// Whether the in-memory index also keeps every key's location by hash (default on).
    ///
    /// With it, a point read (`get`) finds its record's location with about one memory
    /// access instead of a search of the ordered index (a dozen dependent cache misses
    /// once the index outgrows the CPU caches): reads of a large store run about 3x
    /// faster, and writes pay about 20% more. It costs 18 to 27 bytes of memory per key
    /// on top of the ordered index's key length plus about 27 bytes. Turn it off for
    /// stores whose keys are mostly scanned rather than read one by one, or to fit more
    /// keys in memory. Not recorded on disk: each open chooses.
    pub fn hash_index(mut self, on: bool) -> Options {
        self.hash_index = on;
        self
    }

    /// Declares the keys of `keyspace` made of the byte `tag` followed by an 8-byte
    /// big-endian number (at most 2^32 − 3) *numbered rows*: rows the application reads,
    /// writes and deletes only one by one, never by range (the file system's inode rows,
    /// `I` + inode number). Each shard keeps them in an exact hash table of their own
    /// instead of its ordered index: a write of one costs about a third less CPU (no
    /// ordered insert) and each row about 22 bytes of memory instead of about 42.
    ///
    /// A store *created* with the declaration also routes these rows to shards by
    /// their number, 64 consecutive numbers to a shard (rather than each key by its
    /// hash), so that rows made one after another share a shard's cache lines; this is
    /// recorded in its manifest (format version 2, [`crate::Db::grouped_rows`]) and kept
    /// for the store's life. At most 64 regions (an open declaring more is refused with
    /// [`crate::Error::InvalidArgument`]). The table itself is not recorded: each open
    /// chooses, and a store opened without the declaration keeps the same rows in its
    /// ordered index, with the same contents.
    /// While declared, an ordered scan ([`crate::Db::range`], [`crate::Keyspace::prefix`]
    /// and the others) whose range may hold such rows is refused with
    /// [`crate::Error::InvalidArgument`] rather than return a partial answer; visit them
    /// with [`crate::Keyspace::for_each_numbered`] instead. Numbers above 2^32 − 3 are
    /// kept in the ordered index (and visited there too).
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = cairn::Options::new().numbered_rows(7, b'I').open(dir.path())?;
    /// let rows = db.keyspace(7);
    /// let mut key = vec![b'I'];
    /// key.extend_from_slice(&42u64.to_be_bytes());
    /// rows.put(&key, "inode 42")?;
    /// assert_eq!(rows.get(&key)?.as_deref(), Some(&b"inode 42"[..]));
    /// let mut seen = Vec::new();
    /// rows.for_each_numbered(b'I', |n, v| {
    ///     seen.push((n, v.to_vec()));
    ///     Ok(())
    /// })?;
    /// assert_eq!(seen, vec![(42, b"inode 42".to_vec())]);
    /// assert!(rows.prefix("I").next().unwrap().is_err());
    /// # Ok::<(), cairn::Error>(())
    /// ```
    pub fn numbered_rows(mut self, keyspace: u8, tag: u8) -> Options {
        let region = crate::numbered::Region { ns: keyspace, tag };
        if !self.numbered.contains(&region) {
            self.numbered.push(region);
        }
        self
    }

    /// How long a close ([`crate::Db::close`], or dropping the last handle) may spend,
    /// beyond its final flush, giving back the space of what was deleted or overwritten
    /// just before (default 2 s): the layers' background threads get the first half
    /// to finish their work (the file store's collector deletes the chunks of files
    /// removed just before), then segments that hold nothing live are dropped whole, and
    /// segments with little live data (at most 1 MiB, the active ones included) are
    /// compacted by copying only that. Each step is cheap (no segment is read whole), and
    /// none is started after the budget is spent: the rest is reclaimed after the next
    /// open. Zero turns it off.
    pub fn close_budget(mut self, budget: Duration) -> Options {
        self.close_budget = budget;
        self
    }

    /// Per-shard in-memory write buffer, flushed to the segment file when full
    /// (default 256 KiB).
    pub fn write_buffer(mut self, bytes: usize) -> Options {
        self.write_buffer = bytes;
        self
    }

    /// Size of each of the two commit log files (default 64 MiB) that make durable
    /// writes durable under [`SyncPolicy::Always`]: one `fdatasync` of the shared log
    /// serves every writer waiting at that moment, whichever shards their writes went
    /// to. When one file fills, appends move to the other and the store makes every
    /// shard durable in the background so the full file can be reused. `0` turns the
    /// log off: a durable write then syncs the segments of every shard holding a write
    /// made before it (more `fdatasync`s with many concurrent writers). Other policies
    /// do not use the log.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = cairn::Options::new()
    ///     .sync(cairn::SyncPolicy::Always)
    ///     .commit_log_size(16 << 20)
    ///     .open(dir.path())?;
    /// db.put("k", "v")?; // durable when it returns
    /// # Ok::<(), cairn::Error>(())
    /// ```
    pub fn commit_log_size(mut self, bytes: u64) -> Options {
        self.commit_log_size = bytes;
        self
    }

    /// Opens the store read-only, as a follower of whichever process writes it: the
    /// open takes no lock (another process may hold the store open for writing, and
    /// later writers are not kept out) and writes nothing in the directory — no repair
    /// of a torn tail, no `SEQSTATE` rewrite, no hint files, no replay of the commit
    /// log — and starts no background thread. It sees the store as of its open: a prefix
    /// of the writer's writes that never shows part of a batch (records past the first
    /// gap or torn record are held back in memory). [`crate::Db::catch_up`] brings the
    /// view forward to what the writer has written since. Every write — `put`,
    /// `delete`, `write`, `flush`, `compact`, `reclaim`, ... — fails with
    /// [`crate::Error::OpenedReadOnly`]. A store that does not exist is an error, not
    /// created. The other options that matter are those of the index
    /// ([`Options::hash_index`], [`Options::numbered_rows`]); the rest are ignored.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let writer = cairn::Db::open(dir.path())?; // holds the store's lock
    /// writer.put("k", "v1")?;
    /// writer.flush()?;
    /// let reader = cairn::Options::new().read_only().open(dir.path())?;
    /// assert_eq!(reader.get("k")?.as_deref(), Some(&b"v1"[..]));
    /// assert!(reader.put("k", "v2").is_err());
    /// writer.put("k", "v3")?;
    /// writer.flush()?; // in the segment files now
    /// let caught = reader.catch_up()?;
    /// assert_eq!(caught.records, 1);
    /// assert_eq!(reader.get("k")?.as_deref(), Some(&b"v3"[..]));
    /// # Ok::<(), cairn::Error>(())
    /// ```
    pub fn read_only(mut self) -> Options {
        self.read_only = true;
        self
    }

    /// Whether these options open the store read-only ([`Options::read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The sync policy these options ask for.
    pub fn sync_policy(&self) -> SyncPolicy {
        self.sync
    }

    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    /// Test hook: consult `fault` before every file write, sync and create.
    pub fn fault_injector(mut self, fault: Arc<FaultInjector>) -> Options {
        self.fault = Some(fault);
        self
    }

    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    /// Test hook: every file write, sync, create, rename, removal, truncation and
    /// directory creation goes through `power`, which records what a power cut could
    /// still lose and can cut the power (see [`crate::fault::PowerLoss`]). Syncs are
    /// recorded, not done.
    pub fn power_loss(mut self, power: Arc<PowerLoss>) -> Options {
        self.power = Some(power);
        self
    }

    /// The file operations of a store opened with these options: the plain system
    /// calls, unless a test hook was set.
    pub(crate) fn fs(&self) -> Fs {
        #[cfg(feature = "test-hooks")]
        {
            crate::fault::hooked_fs(self.fault.clone(), self.power.clone())
        }
        #[cfg(not(feature = "test-hooks"))]
        {
            Fs::default()
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if let Some(n) = self.shards {
            if n == 0 || n > MAX_SHARDS {
                return Err(Error::InvalidArgument(format!(
                    "shards must be in 1..={MAX_SHARDS}, got {n}"
                )));
            }
        }
        if self.numbered.len() > MAX_NUMBERED_REGIONS {
            return Err(Error::InvalidArgument(format!(
                "at most {MAX_NUMBERED_REGIONS} regions of numbered rows can be declared, got {}",
                self.numbered.len()
            )));
        }
        if !(MIN_SEGMENT_SIZE..=MAX_SEGMENT_SIZE).contains(&self.segment_size) {
            return Err(Error::InvalidArgument(format!(
                "segment_size must be in {MIN_SEGMENT_SIZE}..={MAX_SEGMENT_SIZE}, got {}",
                self.segment_size
            )));
        }
        let t = self.compaction_threshold;
        if !(t > 0.0 && t <= 1.0) {
            return Err(Error::InvalidArgument(format!(
                "compaction_threshold must be in (0, 1], got {t}"
            )));
        }
        if let SyncPolicy::Every(d) = self.sync {
            if d.is_zero() {
                return Err(Error::InvalidArgument(
                    "SyncPolicy::Every needs a non-zero interval".into(),
                ));
            }
        }
        if self.compaction_rate == Some(0) {
            return Err(Error::InvalidArgument(
                "compaction_rate must be positive".into(),
            ));
        }
        Ok(())
    }
}
