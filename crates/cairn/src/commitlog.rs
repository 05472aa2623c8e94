//! The commit log: under `SyncPolicy::Always`, durable writes are made durable by one
//! shared log file instead of by syncing the segments of every shard they touch.
//!
//! A durable write still goes to its shard's write buffer as before (readers find it
//! there, the index points at it); while it holds its shards' locks it also copies the
//! records it encoded into the log's buffer, and takes its sequence number under the
//! log's lock, so the log holds logged writes in the order of their numbers. The writer
//! then waits until the log is synced past its records: the first waiter to find no
//! sync running writes everything buffered so far and calls `fdatasync` once for all of
//! it (group commit); the others find their records durable when it is done. A store of
//! 16 shards thus pays one `fdatasync` per group of concurrent durable writers, where
//! syncing shards paid up to one per shard (the prefix guarantee makes a write wait for
//! every earlier write in every shard), and the shards' own files are written in large
//! unsynced pieces.
//!
//! Two files, `commit.0` and `commit.1`, take turns. When the active one passes its size
//! (`Options::commit_log_size`) and the other is free, appends move to the other, which
//! starts a new *generation*: its header is rewritten with a number never used before,
//! and every frame carries the generation of the file it was written to, so frames left
//! from an earlier pass are not read as new ones. The maintenance thread then makes
//! every shard durable (`Core::flush`), after which the full file's frames are all in
//! the segments, and frees it. If the other file is still being checkpointed, the
//! active one grows past its size meanwhile. Like the segments, the log file is written
//! with zeros laid out ahead of its data (1 MiB), so that its syncs overwrite blocks the
//! file has and commit no journal; after the first pass the files are only overwritten.
//!
//! At open ([`recover`]), the frames of each file's current generation are read, and
//! every logged record newer than the durable watermark that its shard does not hold is
//! written back into that shard (`recovery::write_replayed`) before the crash cut is
//! judged; then every shard is synced and both files start new generations. A clean
//! close does the same last step, so the next open reads no frame.
//!
//! Writes made with `WriteOptions::defer_sync` of at most [`MAX_DEFERRED_LOGGED_BYTES`]
//! are logged too, without waiting: their frames wait in the buffer until a durable
//! write or `Db::sync_written` syncs the log (or, past [`MAX_STAGED_BYTES`] of frames
//! waiting, the deferred writer itself does). A server that applies each request with
//! deferred writes and syncs once per group thus pays one `fdatasync` of the log per
//! group, whatever shards its rows fell in.
//!
//! Writes larger than [`MAX_LOGGED_BYTES`] (deferred: [`MAX_DEFERRED_LOGGED_BYTES`])
//! are not logged (their shards are synced, as without the log): logging them would
//! write their bytes twice. A durable write after them syncs the shards that hold them
//! (`Shard::sync_upto` with `Cover::Unlogged`).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::fsutil::{self, Fs};
use crate::record::{self, mask, u32_at, u64_at};
use crate::{Error, Result};

/// Bytes of a log file's header.
pub(crate) const LOG_HEADER_LEN: u64 = 4096;
const LOG_MAGIC: &[u8; 8] = b"CAIRNCLG";
/// Format version of the commit log files.
pub(crate) const LOG_VERSION: u32 = 1;
/// Bytes of a frame's header.
pub(crate) const FRAME_HEADER_LEN: usize = 20;
/// Zeros laid out past the data when a write reaches the end of what the file holds.
const LAY_AHEAD: u64 = 1 << 20;
/// Default size of each log file before appends move to the other.
pub const DEFAULT_COMMIT_LOG_SIZE: u64 = 64 << 20;
/// A sync's leader yields once before taking the buffer when the last sync covered at
/// least this many writers.
const YIELD_GROUP: usize = 4;
/// Writes whose records are larger than this are not logged.
pub(crate) const MAX_LOGGED_BYTES: u64 = 1 << 20;
/// Deferred writes (`WriteOptions::defer_sync`) whose records are larger than this are
/// not logged: below it lie metadata rows and small values, above it a file's data
/// chunks (64 KiB in the file system, 128 KiB in the file store), which would be
/// written twice for nothing (their layers sync their shards).
pub(crate) const MAX_DEFERRED_LOGGED_BYTES: u64 = 16 << 10;
/// A deferred write that finds more than this appended to the log and not yet taken by
/// a sync waits for one (bounding the memory of writers that never ask for durability).
pub(crate) const MAX_STAGED_BYTES: u64 = 4 << 20;
/// Largest frame payload a reader accepts (a logged write of one shard).
const MAX_FRAME: usize = (MAX_LOGGED_BYTES as usize) + (1 << 20);

/// Path of log file `i`.
pub(crate) fn log_path(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("commit.{i}"))
}

fn header(gen: u64) -> Vec<u8> {
    let mut h = vec![0u8; LOG_HEADER_LEN as usize];
    h[0..8].copy_from_slice(LOG_MAGIC);
    h[8..12].copy_from_slice(&LOG_VERSION.to_le_bytes());
    h[12..20].copy_from_slice(&gen.to_le_bytes());
    let crc = mask(crc32c::crc32c(&h[0..20]));
    h[20..24].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The generation in a log file's header; `None` if the header is damaged or missing
/// (the file then holds no frame to read). Another format version is an error.
fn parse_header(path: &Path, b: &[u8]) -> Result<Option<u64>> {
    if b.len() < 24 || &b[0..8] != LOG_MAGIC || mask(crc32c::crc32c(&b[0..20])) != u32_at(b, 20) {
        return Ok(None);
    }
    let v = u32_at(b, 8);
    if v != LOG_VERSION {
        return Err(Error::format(
            path,
            format!("commit log format version {v}, this build reads {LOG_VERSION}"),
        ));
    }
    Ok(Some(u64_at(b, 12)))
}

fn frame_crc(head: &[u8], payload: &[u8]) -> u32 {
    mask(crc32c::crc32c_append(crc32c::crc32c(head), payload))
}

/// Appends a frame: `payload` (records of shard `shard`) in generation `gen`.
fn encode_frame(out: &mut Vec<u8>, shard: u32, gen: u64, payload: &[u8]) {
    let mut h = [0u8; FRAME_HEADER_LEN];
    h[0..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    h[4..8].copy_from_slice(&shard.to_le_bytes());
    h[8..16].copy_from_slice(&gen.to_le_bytes());
    let crc = frame_crc(&h[0..16], payload);
    h[16..20].copy_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
}

/// One record found in the log at open.
pub(crate) struct LoggedRecord {
    pub seq: u64,
    pub key: Vec<u8>,
    /// The encoded record, as the shard's segment holds it.
    pub bytes: Vec<u8>,
}

/// What [`recover`] found.
#[derive(Default)]
pub(crate) struct Recovered {
    /// Logged records by shard, in log order.
    pub by_shard: Vec<Vec<LoggedRecord>>,
    /// Frames read.
    pub frames: u64,
    /// Highest generation named by a header.
    pub max_gen: u64,
    /// Whether any log file exists.
    pub exists: bool,
}

/// Reads the frames of the current generation of both log files of the store at
/// `dir`. A file stops at its first frame that is torn, damaged, of another
/// generation or names a shard the store does not have: frames are synced in order, so
/// nothing acknowledged lies after it.
pub(crate) fn recover(dir: &Path, shards: u32) -> Result<Recovered> {
    let mut out = Recovered {
        by_shard: (0..shards).map(|_| Vec::new()).collect(),
        ..Recovered::default()
    };
    for i in 0..2 {
        let path = log_path(dir, i);
        if !path.exists() {
            continue;
        }
        out.exists = true;
        let bytes = fsutil::read_file(&path)?;
        let Some(gen) = parse_header(&path, &bytes)? else {
            log::warn!(
                "{}: commit log header missing or damaged; reading no frame from it",
                path.display()
            );
            continue;
        };
        out.max_gen = out.max_gen.max(gen);
        let mut pos = LOG_HEADER_LEN as usize;
        while pos + FRAME_HEADER_LEN <= bytes.len() {
            let h = &bytes[pos..pos + FRAME_HEADER_LEN];
            let len = u32_at(h, 0) as usize;
            let shard = u32_at(h, 4);
            if u64_at(h, 8) != gen || len == 0 || len > MAX_FRAME || shard >= shards {
                break;
            }
            let end = pos + FRAME_HEADER_LEN + len;
            if end > bytes.len() {
                break;
            }
            let payload = &bytes[pos + FRAME_HEADER_LEN..end];
            if frame_crc(&h[0..16], payload) != u32_at(h, 16) {
                break;
            }
            let Some(recs) = split_records(payload) else {
                log::warn!(
                    "{}: a frame at offset {pos} holds a damaged record; reading no further",
                    path.display()
                );
                break;
            };
            out.by_shard[shard as usize].extend(recs);
            out.frames += 1;
            pos = end;
        }
    }
    Ok(out)
}

/// The records of a frame's payload; `None` if one does not decode.
fn split_records(mut b: &[u8]) -> Option<Vec<LoggedRecord>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let r = record::decode(b).ok()?;
        let len = r.header.record_len() as usize;
        out.push(LoggedRecord {
            seq: r.header.seq,
            key: r.key.to_vec(),
            bytes: b[..len].to_vec(),
        });
        b = &b[len..];
    }
    Some(out)
}

/// One log file, open for the store's lifetime (outside the lock: a sync's leader
/// writes through it with the lock released).
struct LogHandle {
    path: PathBuf,
    file: File,
}

impl LogHandle {
    /// Opens log file `i` of the store at `dir`, creating it if missing; says whether
    /// it did (the directory then needs a sync).
    fn open(fs: &Fs, dir: &Path, i: usize) -> Result<(LogHandle, bool)> {
        let path = log_path(dir, i);
        if !path.exists() {
            let file = fs.create_new(&path)?;
            return Ok((LogHandle { path, file }, true));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        Ok((LogHandle { path, file }, false))
    }
}

/// Where one log file stands, behind the log's lock.
struct LogFile {
    /// Generation of the frames written to it now.
    gen: u64,
    /// Where the next frame goes.
    pos: u64,
    /// Bytes the file holds (data and laid-out zeros).
    laid: u64,
    /// Appends moved to the other file; waits for the checkpoint that frees it.
    full: bool,
}

/// Bytes to write at an offset of a log file.
struct Chunk {
    file: usize,
    off: u64,
    bytes: Vec<u8>,
}

struct Inner {
    files: Vec<LogFile>,
    active: usize,
    /// Appended, not yet taken by a sync.
    staged: Vec<Chunk>,
    /// Bytes of frames appended since open (positions in the log, not in a file).
    appended: u64,
    /// `appended` as of the last completed sync.
    synced: u64,
    syncing: bool,
    /// `appended` when the running sync took the buffer.
    target: u64,
    /// Syncs started since open.
    round: u64,
    next_gen: u64,
    /// A write or sync of the log failed: nothing after the last good sync is durable.
    failed: Option<String>,
    /// A frame was appended since the files last started a generation.
    used: bool,
    /// Writers inside `wait` now.
    waiting: usize,
    /// Writers waiting when the last sync took the buffer.
    last_group: usize,
}

/// The shared log of durable writes (see the module documentation).
pub(crate) struct CommitLog {
    fs: Fs,
    handles: [LogHandle; 2],
    inner: Mutex<Inner>,
    /// Writers whose records the running sync covers wait on `waits[round % 2]`; those
    /// that came after it took the buffer, on the other one, and the first of them is
    /// woken to lead the next sync. So a sync wakes only the writers it made durable,
    /// and one more: on two cores, waking every waiter to find most of them still
    /// waiting cost more than the syncs.
    waits: [Condvar; 2],
    size: u64,
    syncs: AtomicU64,
    written: AtomicU64,
}

/// The log, locked for appending: the caller takes the sequence number of its write
/// while holding it, so frames are in the order of their numbers.
pub(crate) struct Appender<'a> {
    g: MutexGuard<'a, Inner>,
    log: &'a CommitLog,
    switched: bool,
}

impl Appender<'_> {
    /// Appends a frame holding `records` (encoded records of shard `shard`).
    pub fn append(&mut self, shard: u32, records: &[u8]) {
        let g = &mut *self.g;
        let len = (FRAME_HEADER_LEN + records.len()) as u64;
        let a = g.active;
        if g.files[a].pos + len > self.log.size && g.files[a].pos > LOG_HEADER_LEN {
            let o = 1 - a;
            if !g.files[o].full {
                g.files[a].full = true;
                let gen = g.next_gen;
                g.next_gen += 1;
                let f = &mut g.files[o];
                f.gen = gen;
                f.pos = LOG_HEADER_LEN;
                g.staged.push(Chunk {
                    file: o,
                    off: 0,
                    bytes: header(gen),
                });
                g.active = o;
                self.switched = true;
            }
        }
        let a = g.active;
        let (pos, gen) = (g.files[a].pos, g.files[a].gen);
        let c = match g.staged.last_mut() {
            Some(c) if c.file == a && c.off + c.bytes.len() as u64 == pos => c,
            _ => {
                g.staged.push(Chunk {
                    file: a,
                    off: pos,
                    bytes: Vec::with_capacity(64 << 10),
                });
                let last = g.staged.len() - 1;
                &mut g.staged[last]
            }
        };
        encode_frame(&mut c.bytes, shard, gen, records);
        g.files[a].pos += len;
        g.appended += len;
        g.used = true;
    }

    /// The log position after everything appended so far: a writer waits for it.
    pub fn end(&self) -> u64 {
        self.g.appended
    }

    /// Whether an append moved to the other file, so that the full one wants a
    /// checkpoint.
    pub fn switched(&self) -> bool {
        self.switched
    }
}

impl CommitLog {
    /// Opens (creating them if missing) both log files of the store at `dir` and starts
    /// a new generation in each, numbered above `max_gen`. The caller has made every
    /// record the files held durable in its shard.
    pub fn start(fs: &Fs, dir: &Path, size: u64, max_gen: u64) -> Result<CommitLog> {
        let (h0, created0) = LogHandle::open(fs, dir, 0)?;
        let (h1, created1) = LogHandle::open(fs, dir, 1)?;
        let handles = [h0, h1];
        let mut files = Vec::with_capacity(2);
        for h in &handles {
            let len = h.file.metadata().map_err(|e| Error::io(&h.path, e))?.len();
            files.push(LogFile {
                gen: 0,
                pos: LOG_HEADER_LEN,
                laid: len.max(LOG_HEADER_LEN),
                full: false,
            });
        }
        let created = created0 || created1;
        let log = CommitLog {
            fs: fs.clone(),
            handles,
            inner: Mutex::new(Inner {
                files,
                active: 0,
                staged: Vec::new(),
                appended: 0,
                synced: 0,
                syncing: false,
                target: 0,
                round: 0,
                next_gen: max_gen + 1,
                failed: None,
                used: true,
                waiting: 0,
                last_group: 0,
            }),
            waits: [Condvar::new(), Condvar::new()],
            size: size.max(2 * LOG_HEADER_LEN),
            syncs: AtomicU64::new(0),
            written: AtomicU64::new(0),
        };
        log.new_generations()?;
        if created {
            fs.sync_dir(dir)?;
        }
        Ok(log)
    }

    /// Starts a new generation in both files (headers written and synced), so that
    /// none of the frames they hold is read again. The caller has made every logged
    /// record durable in its shard, and no write is in progress. Does nothing if no
    /// frame was appended since the last time.
    pub fn new_generations(&self) -> Result<()> {
        let mut g = self.inner.lock();
        if !g.used {
            return Ok(());
        }
        if let Some(f) = &g.failed {
            return Err(Error::ReadOnly(f.clone()));
        }
        g.staged.clear();
        g.synced = g.appended;
        for i in 0..2 {
            let gen = g.next_gen;
            g.next_gen += 1;
            let f = &mut g.files[i];
            let h = &self.handles[i];
            self.fs.write_at(&h.file, &h.path, &header(gen), 0)?;
            if f.laid < LOG_HEADER_LEN + LAY_AHEAD {
                let zeros = vec![0u8; (LOG_HEADER_LEN + LAY_AHEAD - f.laid) as usize];
                self.fs.write_at(&h.file, &h.path, &zeros, f.laid)?;
                f.laid = LOG_HEADER_LEN + LAY_AHEAD;
            }
            self.fs.sync_data(&h.file, &h.path)?;
            f.gen = gen;
            f.pos = LOG_HEADER_LEN;
            f.full = false;
        }
        g.active = 0;
        g.used = false;
        Ok(())
    }

    /// Locks the log for appending.
    pub fn lock(&self) -> Appender<'_> {
        Appender {
            g: self.inner.lock(),
            log: self,
            switched: false,
        }
    }

    /// The log position after everything appended so far.
    pub fn appended(&self) -> u64 {
        self.inner.lock().appended
    }

    /// Bytes of frames appended and not yet taken by a sync.
    pub fn staged(&self) -> u64 {
        let g = self.inner.lock();
        g.appended - if g.syncing { g.target } else { g.synced }
    }

    /// `fdatasync` calls made on the log since open.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Bytes written to the log files since open (frames and laid-out zeros).
    pub fn bytes_written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// The file that appends moved away from, waiting for its checkpoint.
    pub fn full_file(&self) -> Option<usize> {
        let g = self.inner.lock();
        (0..2).find(|&i| g.files[i].full)
    }

    /// File `i`'s records are all durable in their shards: it may take appends again.
    pub fn freed(&self, i: usize) {
        self.inner.lock().files[i].full = false;
    }

    /// Returns once everything appended up to log position `upto` is durable, writing
    /// and syncing it if no other writer is doing so (group commit). The writer that
    /// ran a sync that failed gets its error; a failed write is retried by the next
    /// sync, but after a failed `fdatasync` `on_fail` is called with its message and
    /// every wait fails (`Error::ReadOnly`).
    pub fn wait(&self, upto: u64, on_fail: impl Fn(String)) -> Result<()> {
        let mut g = self.inner.lock();
        g.waiting += 1;
        let res = self.wait_locked(&mut g, upto, on_fail);
        g.waiting -= 1;
        res
    }

    fn wait_locked(
        &self,
        g: &mut MutexGuard<'_, Inner>,
        upto: u64,
        on_fail: impl Fn(String),
    ) -> Result<()> {
        let mut yielded = false;
        loop {
            if let Some(f) = &g.failed {
                return Err(Error::ReadOnly(f.clone()));
            }
            if g.synced >= upto {
                return Ok(());
            }
            if g.syncing {
                let covered = upto <= g.target;
                let cv = &self.waits[((g.round + u64::from(!covered)) % 2) as usize];
                cv.wait(g);
                continue;
            }
            // Under load (the last group was large), let writers that are about to
            // append do so before taking the buffer: on few cores they are runnable
            // but not running, and each sync then covers more of them.
            if !yielded && g.last_group >= YIELD_GROUP {
                yielded = true;
                MutexGuard::unlocked(g, std::thread::yield_now);
                continue;
            }
            g.syncing = true;
            g.last_group = g.waiting;
            g.round += 1;
            let target = g.appended;
            g.target = target;
            let mut chunks = std::mem::take(&mut g.staged);
            // Zeros laid out past a write that reaches the end of what its file holds.
            for c in &mut chunks {
                let end = c.off + c.bytes.len() as u64;
                let f = &mut g.files[c.file];
                if end > f.laid {
                    c.bytes.resize(c.bytes.len() + LAY_AHEAD as usize, 0);
                    f.laid = end + LAY_AHEAD;
                }
            }
            let res = MutexGuard::unlocked(g, || self.write_and_sync(&chunks));
            g.syncing = false;
            // The writers this sync covered (and those of a failed one, to retry or
            // fail), and the first of the next group, to lead its sync.
            self.waits[(g.round % 2) as usize].notify_all();
            self.waits[((g.round + 1) % 2) as usize].notify_one();
            match res {
                Ok(()) => g.synced = g.synced.max(target),
                // A write that failed (a full disk, say) is retried by the next sync:
                // its bytes go back in front of what was appended since.
                Err((e, false)) => {
                    let later = std::mem::take(&mut g.staged);
                    g.staged = chunks;
                    g.staged.extend(later);
                    return Err(e);
                }
                // After a failed fsync the kernel may have dropped the dirty pages:
                // nothing since the last good sync can be trusted to be on disk.
                Err((e, true)) => {
                    let msg = format!("commit log sync failed: {e}");
                    g.failed = Some(msg.clone());
                    on_fail(msg);
                    // No sync follows: every waiter must wake to see the failure.
                    self.waits[((g.round + 1) % 2) as usize].notify_all();
                    return Err(e);
                }
            }
        }
    }

    /// Writes `chunks`, then syncs the files written; an error says whether it was the
    /// sync's.
    fn write_and_sync(&self, chunks: &[Chunk]) -> std::result::Result<(), (Error, bool)> {
        self.write_chunks(chunks).map_err(|e| (e, false))?;
        let mut touched = [false; 2];
        for c in chunks {
            touched[c.file] = true;
        }
        for (i, &t) in touched.iter().enumerate() {
            if t {
                let h = &self.handles[i];
                self.fs.sync_data(&h.file, &h.path).map_err(|e| (e, true))?;
                self.syncs.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    fn write_chunks(&self, chunks: &[Chunk]) -> Result<()> {
        for c in chunks {
            let h = &self.handles[c.file];
            self.fs.write_at(&h.file, &h.path, &c.bytes, c.off)?;
            self.written
                .fetch_add(c.bytes.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Removes the log files of the store at `dir` (a store opened without the log, whose
/// records are durable in their shards).
pub(crate) fn remove(fs: &Fs, dir: &Path) -> Result<()> {
    let mut any = false;
    for i in 0..2 {
        let p = log_path(dir, i);
        if p.exists() {
            fs.remove(&p)?;
            any = true;
        }
    }
    if any {
        fs.sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(seq: u64, key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        record::encode(
            &mut b,
            record::Kind::Put,
            seq,
            1,
            key,
            value,
            record::data_crc(key, value),
        );
        b
    }

    #[test]
    fn frames_round_trip_and_stop_at_damage_or_another_generation() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Fs::default();
        let log = CommitLog::start(&fs, dir.path(), 1 << 20, 0).unwrap();
        for s in 1..=3u64 {
            let end = {
                let mut a = log.lock();
                a.append(s as u32 % 2, &rec(s, format!("k{s}").as_bytes(), b"v"));
                a.end()
            };
            log.wait(end, |_| {}).unwrap();
        }
        let r = recover(dir.path(), 2).unwrap();
        assert_eq!(r.frames, 3);
        let seqs: Vec<u64> = r.by_shard[1].iter().map(|x| x.seq).collect();
        assert_eq!(seqs, vec![1, 3]);
        assert_eq!(r.by_shard[0][0].key, b"k2");
        // A new generation hides every frame.
        log.new_generations().unwrap();
        assert_eq!(recover(dir.path(), 2).unwrap().frames, 0);
        // A damaged frame ends the file there.
        {
            let mut a = log.lock();
            a.append(0, &rec(4, b"k4", b"v"));
            a.append(0, &rec(5, b"k5", b"v"));
            let end = a.end();
            drop(a);
            log.wait(end, |_| {}).unwrap();
        }
        let p = log_path(dir.path(), 0);
        let mut b = std::fs::read(&p).unwrap();
        b[LOG_HEADER_LEN as usize + FRAME_HEADER_LEN + 3] ^= 1;
        std::fs::write(&p, &b).unwrap();
        assert_eq!(recover(dir.path(), 2).unwrap().frames, 0);
        // A shard the store does not have ends it too.
        assert_eq!(recover(dir.path(), 1).unwrap().frames, 0);
    }

    #[test]
    fn appends_move_to_the_other_file_when_one_is_full() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Fs::default();
        let log = CommitLog::start(&fs, dir.path(), 3 * LOG_HEADER_LEN, 7).unwrap();
        let value = vec![1u8; 1000];
        for s in 1..=20u64 {
            let end = {
                let mut a = log.lock();
                a.append(0, &rec(s, format!("k{s}").as_bytes(), &value));
                a.end()
            };
            log.wait(end, |_| {}).unwrap();
        }
        assert_eq!(log.full_file(), Some(0));
        // File 0 is not freed: appends stay in file 1 past its size.
        let r = recover(dir.path(), 1).unwrap();
        assert_eq!(r.frames, 20);
        let mut seqs: Vec<u64> = r.by_shard[0].iter().map(|x| x.seq).collect();
        seqs.sort_unstable();
        assert_eq!(seqs, (1..=20).collect::<Vec<_>>());
        assert!(r.max_gen > 8);
        log.freed(0);
        assert_eq!(log.full_file(), None);
    }
}
