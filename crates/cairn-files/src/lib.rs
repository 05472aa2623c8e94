//! # cairn-files
//!
//! The file store, after KFS: large values ("files") stored as checksummed chunks
//! spread over all of a cairn store's shards, written as a stream, committed atomically,
//! read with range reads, removed in constant time and reclaimed in the background.
//! Opened on a [`cairn::Db`] with [`FileStore::new`]; its rows live in keyspace
//! [`KEYSPACE`] of that store, beside the store's own keys.
//!
//! ```
//! use std::io::{Read, Seek, SeekFrom, Write};
//! use cairn_files::{FileOptions, FileStore};
//! # let dir = tempfile::tempdir().unwrap();
//! let db = cairn::Db::open(dir.path())?;
//! let files = FileStore::with_options(&db, FileOptions::new().chunk_size(4096))?;
//!
//! // Stream a file in; nothing of it is visible before `commit`.
//! let mut w = files.create("logs/today")?;
//! for i in 0..1000u32 {
//!     w.write_all(format!("line {i}\n").as_bytes())?;
//! }
//! let stat = w.commit()?;
//! assert_eq!(stat.chunks, stat.size.div_ceil(4096));
//!
//! // Range reads fetch only the chunks they need.
//! let mut r = files.open("logs/today")?.expect("the file exists");
//! r.seek(SeekFrom::Start(7))?;
//! let mut buf = [0u8; 7];
//! r.read_exact(&mut buf)?;
//! assert_eq!(&buf, b"line 1\n");
//!
//! // Content-addressed: identical content is stored once.
//! let a = files.put_content(&b"same bytes"[..])?;
//! let b = files.put_content(&b"same bytes"[..])?;
//! assert_eq!(a, b);
//!
//! assert!(files.remove("logs/today")?); // constant time; chunks reclaimed in the background
//! assert!(files.stat("logs/today")?.is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! This crate uses only the engine's public API (`cairn`: keyspaces, batches, extensions,
//! background threads). It must never depend on the file system (`cairn-fs`), the FUSE
//! adapter, the cluster, the benchmarks or the CLI.
//!
//! How it works is in DESIGN.md ("File store"); the rows it writes are in FORMAT.md.

#![deny(missing_docs, clippy::unwrap_used, clippy::expect_used)]
#![forbid(unsafe_code)]

mod gc;
mod layout;
mod reader;
mod stream;
mod writer;

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::{Condvar, Mutex, MutexGuard};
use serde::Serialize;
use xxhash_rust::xxh3::xxh3_64;

use cairn::{
    Background, Db, Error, Iter, Keyspace, Result, SyncPolicy, WriteBatch, WriteOptions,
    MAX_KEY_LEN,
};

pub use reader::FileReader;
pub use writer::FileWriter;

/// The keyspace of a store that holds the file store's rows (see FORMAT.md).
pub const KEYSPACE: u8 = 1;

/// Default chunk size of a new store's file store (128 KiB).
pub const DEFAULT_CHUNK_SIZE: u64 = 128 << 10;
/// Smallest allowed chunk size.
pub const MIN_CHUNK_SIZE: u64 = 512;
/// Largest allowed chunk size (64 MiB).
pub const MAX_CHUNK_SIZE: u64 = 64 << 20;
/// Longest file key, in bytes (one byte less than [`MAX_KEY_LEN`]: the stored key has a
/// row tag in front).
pub const MAX_FILE_KEY_LEN: usize = MAX_KEY_LEN - 1;

/// Files up to this many bytes (or one chunk, if chunks are larger) are held in memory
/// until commit and then stored in one batch with their intent row: no separate sync for
/// the intent row, and nothing to reclaim if the writer is abandoned.
const SMALL_FILE_BYTES: u64 = 1 << 20;
/// Number of key stripes serialising commits, removes and opens of one key.
const STRIPES: usize = 64;
/// How often the collector looks for new garbage while it is active.
const GC_POLL: Duration = Duration::from_millis(20);
/// How long the collector stays active (polling) after its last work; then it sleeps
/// until woken.
pub(crate) const GC_ACTIVE: Duration = Duration::from_secs(10);
/// Quiet time the collector waits for, once there is garbage, before a pass.
const GC_SETTLE: Duration = Duration::from_millis(2);
/// Longest it waits for quiet.
const GC_SETTLE_MAX: Duration = Duration::from_millis(50);

/// What the file store knows about one file: one committed version of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileStat {
    /// Length in bytes.
    pub size: u64,
    /// Number of chunks (`ceil(size / chunk_size)`; 0 for an empty file).
    pub chunks: u64,
    /// Chunk size the file was written with.
    pub chunk_size: u64,
    /// BLAKE3 hash of the content.
    pub hash: [u8; 32],
    /// When this version was committed.
    pub created: SystemTime,
    /// Unique id of this version; a new write of the key gets a new one.
    pub version: u128,
}

impl FileStat {
    /// The content hash as 64 lowercase hex digits (the key `put_content` uses).
    pub fn hash_hex(&self) -> String {
        hex(&self.hash)
    }
}

/// The outcome of [`FileStore::verify`] for one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileCheck {
    /// The file's metadata.
    pub stat: FileStat,
    /// Everything found wrong; empty when every chunk passed its checksum and the
    /// content hashed to `stat.hash`.
    pub damage: Vec<FileDamage>,
}

impl FileCheck {
    /// Whether no damage was found.
    pub fn is_ok(&self) -> bool {
        self.damage.is_empty()
    }
}

/// One problem found by [`FileStore::verify`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileDamage {
    /// The chunk concerned, if the problem is in one chunk.
    pub chunk: Option<u64>,
    /// What is wrong.
    pub detail: String,
}

impl std::fmt::Display for FileDamage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.chunk {
            Some(c) => write!(f, "chunk {c}: {}", self.detail),
            None => f.write_str(&self.detail),
        }
    }
}

/// File-store figures, from [`FileStore::stats`].
///
/// The byte figures count the file store's records in the store's segment files (chunk
/// records: a 28-byte header, a 22-byte key and the chunk's bytes), so that `disk_bytes`
/// is what the file store takes on disk (segment headers and hint files aside) and
/// `live_bytes + reclaimable_bytes = disk_bytes`.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct FileStats {
    /// Files (committed, not removed).
    pub files: u64,
    /// Bytes of content of those files (exact).
    pub bytes: u64,
    /// Chunks of those files.
    pub chunks: u64,
    /// Versions waiting for their chunks to be reclaimed (removed or overwritten files,
    /// abandoned or crashed writes; writes in progress count too).
    pub pending_gc: u64,
    /// Bytes of the chunk records of removed or overwritten versions and abandoned
    /// writes that the collector has not deleted yet (an upper bound: each version's
    /// last chunk is counted whole, an abandoned write's chunks by its intent row's
    /// bound).
    pub pending_bytes: u64,
    /// Bytes of the file store's records that hold live files and its own rows.
    pub live_bytes: u64,
    /// Bytes of the file store's records on disk that hold nothing live: the chunks
    /// waiting for the collector (`pending_bytes`) and records deleted or replaced but
    /// not yet compacted away.
    pub reclaimable_bytes: u64,
    /// Bytes of the file store's records in the store's segment files.
    pub disk_bytes: u64,
}

/// What one garbage-collection pass did, from [`FileStore::collect_garbage`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Versions whose chunks were reclaimed.
    pub versions: u64,
    /// Chunk rows deleted.
    pub chunks: u64,
    /// Versions left for later because an open reader or a writer still uses them.
    pub deferred: u64,
}

/// Live totals, maintained under the key stripes once computed.
#[derive(Clone, Copy, Debug, Default)]
struct Totals {
    files: u64,
    bytes: u64,
    chunks: u64,
}

/// Versions in use by open readers and writers, which garbage collection must not touch.
#[derive(Default)]
struct Pins {
    counts: HashMap<u128, usize>,
    /// Versions the collector skipped because they were pinned; unpinning one wakes it.
    deferred: HashSet<u128>,
}

/// File-store state shared by every handle of one open store (kept as the store's
/// extension, [`Db::extension`]).
pub(crate) struct Shared {
    /// Whether the background collector was started for this open store.
    gc_started: AtomicBool,
    /// The store's chunk size, set at open.
    chunk_size: AtomicU32,
    /// Whether the settings row is on disk.
    settings_stored: AtomicBool,
    settings_lock: Mutex<()>,
    stripes: Box<[Mutex<()>]>,
    pins: Mutex<Pins>,
    totals: Mutex<Option<Totals>>,
    /// Serialises computing the totals.
    totals_init: Mutex<()>,
    /// Serialises garbage-collection passes.
    gc_run: Mutex<()>,
    /// Set to wake the collector at once (shutdown, or work while it is dormant).
    gc_wake: Mutex<bool>,
    gc_cv: Condvar,
    /// Work for the collector (removes, overwrites, abandoned writers, unpins), picked
    /// up by its next poll: the operation that made the garbage does not pay for waking
    /// a thread.
    gc_due: AtomicBool,
    /// The collector sleeps until woken (it found no work for a while), so new work must
    /// wake it.
    gc_dormant: AtomicBool,
    ids: RandomState,
    id_counter: AtomicU64,
}

impl Default for Shared {
    fn default() -> Shared {
        Shared {
            gc_started: AtomicBool::new(false),
            chunk_size: AtomicU32::new(DEFAULT_CHUNK_SIZE as u32),
            settings_stored: AtomicBool::new(false),
            settings_lock: Mutex::new(()),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            pins: Mutex::new(Pins::default()),
            totals: Mutex::new(None),
            totals_init: Mutex::new(()),
            gc_run: Mutex::new(()),
            gc_wake: Mutex::new(false),
            gc_cv: Condvar::new(),
            gc_due: AtomicBool::new(false),
            gc_dormant: AtomicBool::new(false),
            ids: RandomState::new(),
            id_counter: AtomicU64::new(0),
        }
    }
}

impl Shared {
    fn stripe(&self, key: &[u8]) -> MutexGuard<'_, ()> {
        self.stripes[(xxh3_64(key) % STRIPES as u64) as usize].lock()
    }

    fn chunk_size(&self) -> u32 {
        self.chunk_size.load(Ordering::Relaxed)
    }

    /// A new unique version id: the time in nanoseconds, then 64 random bits.
    fn new_version(&self) -> u128 {
        let now = layout::nanos_since_epoch(SystemTime::now());
        let mut h = self.ids.build_hasher();
        h.write_u64(self.id_counter.fetch_add(1, Ordering::Relaxed));
        h.write_u64(now);
        h.write_u32(std::process::id());
        ((now as u128) << 64) | h.finish() as u128
    }

    fn pin(&self, vid: u128) {
        *self.pins.lock().counts.entry(vid).or_insert(0) += 1;
    }

    fn unpin(&self, vid: u128) {
        let mut p = self.pins.lock();
        let wake = match p.counts.get_mut(&vid) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                p.counts.remove(&vid);
                p.deferred.remove(&vid)
            }
            None => false,
        };
        drop(p);
        if wake {
            self.note_garbage();
        }
    }

    /// Wakes the background collector now (at shutdown).
    fn wake_gc(&self) {
        *self.gc_wake.lock() = true;
        self.gc_cv.notify_all();
    }

    /// Tells the collector there is garbage: its next poll (within [`GC_POLL`]) finds
    /// it, so a remove does not wait for a thread to be woken. Only a dormant collector
    /// is woken.
    fn note_garbage(&self) {
        self.gc_due.store(true, Ordering::SeqCst);
        if self.gc_dormant.load(Ordering::SeqCst) {
            self.wake_gc();
        }
    }

    /// Returns when there is garbage to collect, at shutdown, or after `idle` with
    /// nothing to do. Until `active_until` (set [`GC_ACTIVE`] after the last pass that did
    /// work) it polls every [`GC_POLL`]; then it sleeps until woken. Once there is work,
    /// waits for the operations that make garbage to pause ([`GC_SETTLE`], at most
    /// [`GC_SETTLE_MAX`]), so that a burst of removes is collected in one pass that does
    /// not compete with them.
    fn wait_for_gc_work(&self, bg: &Background, idle: Duration, active_until: Instant) {
        let start = Instant::now();
        loop {
            if bg.is_stopping() {
                return;
            }
            if self.gc_due.swap(false, Ordering::SeqCst) {
                let settle = Instant::now();
                while settle.elapsed() < GC_SETTLE_MAX && !bg.is_stopping() {
                    std::thread::sleep(GC_SETTLE);
                    if !self.gc_due.swap(false, Ordering::SeqCst) {
                        break;
                    }
                }
                return;
            }
            let dormant = Instant::now() >= active_until;
            self.gc_dormant.store(dormant, Ordering::SeqCst);
            {
                let mut w = self.gc_wake.lock();
                if !*w && !bg.is_stopping() && !self.gc_due.load(Ordering::SeqCst) {
                    let wait = if dormant {
                        idle.saturating_sub(start.elapsed())
                    } else {
                        GC_POLL
                    };
                    self.gc_cv.wait_for(&mut w, wait);
                }
                // Woken: look again (garbage sets `gc_due` before it wakes).
                *w = false;
            }
            self.gc_dormant.store(false, Ordering::SeqCst);
            if start.elapsed() >= idle && !self.gc_due.load(Ordering::SeqCst) {
                return;
            }
        }
    }

    /// Adds `new` to and subtracts `old` from the totals, if they are being kept.
    /// Called under the key's stripe lock.
    fn adjust_totals(&self, new: Option<&FileStat>, old: Option<&FileStat>) {
        if let Some(t) = self.totals.lock().as_mut() {
            if let Some(n) = new {
                t.files += 1;
                t.bytes += n.size;
                t.chunks += n.chunks;
            }
            if let Some(o) = old {
                t.files = t.files.saturating_sub(1);
                t.bytes = t.bytes.saturating_sub(o.size);
                t.chunks = t.chunks.saturating_sub(o.chunks);
            }
        }
    }
}

/// Options of a file store, for [`FileStore::with_options`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileOptions {
    chunk_size: Option<u64>,
}

impl FileOptions {
    /// The defaults: the store's recorded chunk size, or [`DEFAULT_CHUNK_SIZE`] for a
    /// store whose first file is yet to be written.
    pub fn new() -> FileOptions {
        FileOptions::default()
    }

    /// Chunk size for a store whose first file is yet to be written, in bytes
    /// ([`MIN_CHUNK_SIZE`]..=[`MAX_CHUNK_SIZE`], default 128 KiB). It is recorded when
    /// the first file is written; opening a store that has one with a different explicit
    /// size is an error.
    pub fn chunk_size(mut self, bytes: u64) -> FileOptions {
        self.chunk_size = Some(bytes);
        self
    }
}

/// Reads the settings row: fixes the chunk size, refusing a different explicit one for
/// a store that already has one.
fn load_settings(ks: &Keyspace, want: Option<u64>) -> Result<Shared> {
    let dir = ks.db().path();
    let stored = match ks.get(layout::settings_key())? {
        Some(v) => Some(layout::decode_settings(&v)?),
        None => None,
    };
    let cs = match (stored, want) {
        (Some(s), Some(want)) if s as u64 != want => {
            return Err(Error::InvalidArgument(format!(
                "store at {} has file chunk size {s}; the chunk size is fixed at first use (asked for {want})",
                dir.display()
            )))
        }
        (Some(0), _) => {
            return Err(Error::corruption(
                dir,
                "file store settings row has chunk size 0",
            ))
        }
        (Some(s), _) => s,
        (None, want) => want.unwrap_or(DEFAULT_CHUNK_SIZE) as u32,
    };
    let sh = Shared::default();
    sh.chunk_size.store(cs, Ordering::Relaxed);
    sh.settings_stored
        .store(stored.is_some(), Ordering::Relaxed);
    Ok(sh)
}

fn hex(b: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(D[(x >> 4) as usize] as char);
        s.push(D[(x & 15) as usize] as char);
    }
    s
}

fn check_file_key(key: &[u8]) -> Result<()> {
    if key.len() > MAX_FILE_KEY_LEN {
        return Err(Error::KeyTooLarge {
            len: key.len(),
            max: MAX_FILE_KEY_LEN,
        });
    }
    Ok(())
}

/// A `std::io::Error` carrying a cairn error, with a matching kind.
pub(crate) fn to_io(e: Error) -> io::Error {
    let kind = match &e {
        Error::StorageFull(_) => io::ErrorKind::StorageFull,
        Error::Corruption { .. } => io::ErrorKind::InvalidData,
        Error::InvalidArgument(_) | Error::KeyTooLarge { .. } => io::ErrorKind::InvalidInput,
        Error::Io { source, .. } => source.kind(),
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e)
}

/// The cairn error inside `e` (see [`to_io`]), or `e` as an I/O error of the input.
fn from_io(e: io::Error) -> Error {
    if e.get_ref().is_some_and(|inner| inner.is::<Error>()) {
        if let Some(inner) = e.into_inner() {
            if let Ok(err) = inner.downcast::<Error>() {
                return *err;
            }
        }
        return Error::InvalidArgument("unreadable nested error".into());
    }
    Error::io("<input>", e)
}

/// The file store of a [`Db`], from [`FileStore::new`]. Cheap to clone; every method
/// takes `&self`, so one handle serves many threads. Holding one (or a reader or writer)
/// keeps the store open. Every handle opened on one open store shares its state (key
/// locks, read pins, totals) and one background collector, which stops when the store
/// closes.
///
/// Files are named by arbitrary byte-string keys (up to [`MAX_FILE_KEY_LEN`] bytes), in a
/// keyspace of their own: file keys never collide with the keys of `Db::put`.
#[derive(Clone)]
pub struct FileStore {
    ks: Keyspace,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for FileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStore")
            .field("dir", &self.db().path())
            .field("chunk_size", &self.chunk_size())
            .finish()
    }
}

impl FileStore {
    /// The file store of `db`, with default [`FileOptions`].
    pub fn new(db: &Db) -> Result<FileStore> {
        FileStore::with_options(db, FileOptions::new())
    }

    /// Opens the file store of `db`. The first open on an open store reads the store's
    /// settings and starts the background collector (which first collects what earlier
    /// runs left behind); later opens share them, and must not ask for a different
    /// chunk size.
    pub fn with_options(db: &Db, opts: FileOptions) -> Result<FileStore> {
        if let Some(c) = opts.chunk_size {
            if !(MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&c) {
                return Err(Error::InvalidArgument(format!(
                    "chunk_size must be in {MIN_CHUNK_SIZE}..={MAX_CHUNK_SIZE}, got {c}"
                )));
            }
        }
        let ks = db.keyspace(KEYSPACE);
        let shared = db.extension(|| load_settings(&ks, opts.chunk_size))?;
        if let Some(want) = opts.chunk_size {
            let have = shared.chunk_size() as u64;
            if have != want {
                return Err(Error::InvalidArgument(format!(
                    "store at {} has file chunk size {have}; the chunk size is fixed at first use (asked for {want})",
                    db.path().display()
                )));
            }
        }
        let store = FileStore { ks, shared };
        // A read-only store (`Options::read_only`) collects nothing: its writer does.
        if !db.is_read_only() && !store.shared.gc_started.swap(true, Ordering::SeqCst) {
            let waker = store.shared.clone();
            let shared = store.shared.clone();
            db.spawn_background(
                "cairn-files-gc",
                move |bg| {
                    // The collector's handle does not keep the store open.
                    let store = FileStore {
                        ks: bg.db().keyspace(KEYSPACE),
                        shared,
                    };
                    gc::gc_loop(bg, store)
                },
                move || waker.wake_gc(),
            )?;
        }
        Ok(store)
    }

    /// The store this file store lives in.
    pub fn db(&self) -> &Db {
        self.ks.db()
    }

    fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Whether chunk writes are synced before the commit record is written: under
    /// `Always` (commit is durable) and `Every` (so that the commit record, synced
    /// later, never reaches the disk before the chunks it names).
    fn sync_chunks(&self) -> bool {
        self.db().options().sync_policy() != SyncPolicy::Never
    }

    /// Live files, their bytes and chunks, and versions waiting for the collector.
    /// Computes the totals on first use (one scan of the metadata rows).
    pub fn stats(&self) -> Result<FileStats> {
        let totals = gc::totals(self)?;
        let rows = gc::garbage_rows(self)?;
        let pending_gc = rows.len() as u64;
        let per_chunk = self.chunk_size() + layout::CHUNK_RECORD_OVERHEAD;
        let pending: u64 = {
            let pins = self.shared().pins.lock();
            rows.iter()
                .filter(|r| r.is_garbage_row() || !pins.counts.contains_key(&r.vid()))
                .map(|r| r.bound().saturating_mul(per_chunk))
                .sum()
        };
        let ks = self.db().stats().keyspace(KEYSPACE);
        let pending_bytes = pending.min(ks.live_bytes);
        Ok(FileStats {
            files: totals.files,
            bytes: totals.bytes,
            chunks: totals.chunks,
            pending_gc,
            pending_bytes,
            live_bytes: ks.live_bytes - pending_bytes,
            reclaimable_bytes: ks.reclaimable_bytes + pending_bytes,
            disk_bytes: ks.disk_bytes,
        })
    }

    /// The store's chunk size in bytes (fixed when the store's first file was written).
    pub fn chunk_size(&self) -> u64 {
        self.shared().chunk_size() as u64
    }

    /// Writes the settings row once, before the store's first file data (which, after
    /// a crash, never survives without it: the store keeps a prefix of its writes).
    fn ensure_settings(&self) -> Result<()> {
        let sh = self.shared();
        if sh.settings_stored.load(Ordering::Acquire) {
            return Ok(());
        }
        let _g = sh.settings_lock.lock();
        if !sh.settings_stored.load(Ordering::Acquire) {
            self.ks.put_with(
                layout::settings_key(),
                layout::encode_settings(sh.chunk_size()),
                WriteOptions::new().defer_sync(),
            )?;
            sh.settings_stored.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// The committed metadata of `key`, read without taking its stripe.
    fn meta(&self, key: &[u8]) -> Result<Option<FileStat>> {
        match self.ks.get(layout::meta_key(key))? {
            Some(v) => layout::decode_meta(&v).map(Some),
            None => Ok(None),
        }
    }

    /// Starts writing a new version of `key`. Nothing of it is visible until
    /// [`FileWriter::commit`]; dropping the writer without committing leaves nothing
    /// behind (chunks already stored are reclaimed in the background).
    pub fn create(&self, key: impl AsRef<[u8]>) -> Result<FileWriter> {
        let key = key.as_ref();
        check_file_key(key)?;
        Ok(FileWriter::new(self.clone(), Some(key.to_vec())))
    }

    /// Stores everything `reader` yields as the file `key`, replacing any previous
    /// version atomically, and returns its metadata. Uses little memory whatever the
    /// size: the content is streamed chunk by chunk.
    pub fn put_reader(&self, key: impl AsRef<[u8]>, reader: impl Read) -> Result<FileStat> {
        let mut w = self.create(key)?;
        w.fill_from(reader)?;
        w.commit()
    }

    /// Stores `data` as the file `key` (see [`FileStore::put_reader`]).
    pub fn put(&self, key: impl AsRef<[u8]>, data: impl AsRef<[u8]>) -> Result<FileStat> {
        self.put_reader(key, data.as_ref())
    }

    /// Stores everything `reader` yields under the hex BLAKE3 hash of its content and
    /// returns that key. Content already stored under its hash is not stored again.
    pub fn put_content(&self, reader: impl Read) -> Result<String> {
        let mut w = FileWriter::new(self.clone(), None);
        w.fill_from(reader)?;
        w.commit_content()
    }

    /// Opens the committed file `key` for reading (`None` if there is none). The reader
    /// keeps reading this version to its end even if the key is overwritten or removed
    /// meanwhile.
    pub fn open(&self, key: impl AsRef<[u8]>) -> Result<Option<FileReader>> {
        let key = key.as_ref();
        if key.len() > MAX_FILE_KEY_LEN {
            return Ok(None);
        }
        let sh = self.shared();
        let stat = {
            // Under the stripe, so no remove or overwrite can hand this version to the
            // collector between reading the metadata and pinning the version.
            let _g = sh.stripe(key);
            let Some(stat) = self.meta(key)? else {
                return Ok(None);
            };
            if stat.chunks > 0 {
                sh.pin(stat.version);
            }
            stat
        };
        Ok(Some(FileReader::new(self.clone(), key.to_vec(), stat)))
    }

    /// Reads up to `len` bytes of `key` from `offset` (fewer at the end of the file,
    /// none past it), touching only the chunks that hold them. `None` if there is no
    /// such file.
    pub fn read_range(
        &self,
        key: impl AsRef<[u8]>,
        offset: u64,
        len: u64,
    ) -> Result<Option<Vec<u8>>> {
        let Some(mut r) = self.open(key)? else {
            return Ok(None);
        };
        r.read_range_at(offset, len).map(Some)
    }

    /// The whole content of `key` in memory (`None` if there is no such file). Prefer
    /// [`FileStore::open`] for files that may be large.
    pub fn read(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let Some(mut r) = self.open(key)? else {
            return Ok(None);
        };
        let size = r.stat().size;
        r.read_range_at(0, size).map(Some)
    }

    /// The metadata of `key`, if it exists.
    pub fn stat(&self, key: impl AsRef<[u8]>) -> Result<Option<FileStat>> {
        let key = key.as_ref();
        if key.len() > MAX_FILE_KEY_LEN {
            return Ok(None);
        }
        self.meta(key)
    }

    /// Whether `key` exists (answered from memory).
    pub fn exists(&self, key: impl AsRef<[u8]>) -> bool {
        let key = key.as_ref();
        key.len() <= MAX_FILE_KEY_LEN && self.ks.contains(layout::meta_key(key))
    }

    /// Removes `key`, returning whether it existed. Takes the same short time whatever
    /// the file's size (one small atomic batch); the chunks are reclaimed in the
    /// background once no reader uses them. Works on a full store too.
    pub fn remove(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        let key = key.as_ref();
        if key.len() > MAX_FILE_KEY_LEN {
            return Ok(false);
        }
        let sh = self.shared();
        let had_chunks = {
            let _g = sh.stripe(key);
            let Some(old) = self.meta(key)? else {
                return Ok(false);
            };
            let mut b = WriteBatch::new();
            b.delete(layout::meta_key(key));
            if old.chunks > 0 {
                b.put(layout::gc_key(old.version), layout::encode_gc(old.chunks));
            }
            self.ks.write_with(b, WriteOptions::new().frees_space())?;
            sh.adjust_totals(None, Some(&old));
            old.chunks > 0
        };
        if had_chunks {
            sh.note_garbage();
        }
        Ok(true)
    }

    /// Every file, in key order, with its metadata. Reverse with `.rev()`.
    pub fn list(&self) -> FileIter {
        self.list_prefix([])
    }

    /// The files whose keys start with `prefix`, in key order. Reverse with `.rev()`.
    pub fn list_prefix(&self, prefix: impl AsRef<[u8]>) -> FileIter {
        FileIter {
            inner: self
                .ks
                .prefix_stripped(layout::meta_key(prefix.as_ref()), 1),
        }
    }

    /// Re-reads every chunk of `key` (each checked against its checksum) and re-hashes
    /// the content against the stored BLAKE3 hash. `None` if there is no such file;
    /// damage is reported in the result, other failures (I/O errors) as errors.
    pub fn verify(&self, key: impl AsRef<[u8]>) -> Result<Option<FileCheck>> {
        let Some(r) = self.open(key)? else {
            return Ok(None);
        };
        let stat = r.stat().clone();
        let mut hasher = blake3::Hasher::new();
        let mut damage = Vec::new();
        for idx in 0..stat.chunks {
            match r.load_chunk(idx) {
                Ok(v) => {
                    hasher.update(&v);
                }
                Err(Error::Corruption { path, detail }) => damage.push(FileDamage {
                    chunk: Some(idx),
                    detail: format!("{detail} ({})", path.display()),
                }),
                Err(e) => return Err(e),
            }
        }
        if damage.is_empty() {
            let got = hasher.finalize();
            if got.as_bytes() != &stat.hash {
                damage.push(FileDamage {
                    chunk: None,
                    detail: format!(
                        "content hashes to {}, but the stored hash is {}",
                        got.to_hex(),
                        stat.hash_hex()
                    ),
                });
            }
        }
        Ok(Some(FileCheck { stat, damage }))
    }

    /// Runs one garbage-collection pass now, in this thread: reclaims the chunks of
    /// removed and overwritten versions and of abandoned or crashed writes, except those
    /// an open reader or live writer still uses. The background collector does the same
    /// on its own; this is for tests and tools that want it done before going on.
    pub fn collect_garbage(&self) -> Result<GcReport> {
        gc::pass(self, &|| false)
    }
}

/// Iterator over files and their metadata, from [`FileStore::list`] and
/// [`FileStore::list_prefix`].
pub struct FileIter {
    inner: Iter,
}

fn decode_entry(r: Result<(Vec<u8>, cairn::Value)>) -> Result<(Vec<u8>, FileStat)> {
    let (k, v) = r?;
    Ok((k, layout::decode_meta(&v)?))
}

impl Iterator for FileIter {
    type Item = Result<(Vec<u8>, FileStat)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next().map(decode_entry)
    }
}

impl DoubleEndedIterator for FileIter {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.inner.next_back().map(decode_entry)
    }
}

impl std::iter::FusedIterator for FileIter {}
