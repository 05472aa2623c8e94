//! Writing a file: chunking, hashing, the intent row, and the atomic commit.

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::SystemTime;

use parking_lot::Mutex;

use cairn::{Error, Result, WriteBatch, WriteOptions};

use crate::{from_io, layout, to_io, FileStat, FileStore, SMALL_FILE_BYTES};

/// The first bound recorded in an intent row; each later one doubles it.
const FIRST_BOUND: u64 = 64;
/// A streaming writer starts the disk writes of what it stored every this many bytes
/// (`sync_file_range(WRITE)`, which does not wait), so that the sync of its commit, or of
/// the caller's flush or close, has only the tail to wait for. Under every sync policy:
/// with `Never` the chunks still reach the disk by the next flush or close (`cairn file
/// put` closes durably) or within the kernel's dirty-page expiry, and waiting until then
/// writes the whole file after the stream instead of during it (a 512 MiB put took
/// the stream's time plus the disk's; see DESIGN.md, "File store").
const WRITEBACK_EVERY: u64 = 16 << 20;
/// Most threads that store a large file's chunks (see [`Pipeline`]).
const MAX_STORERS: usize = 2;
/// Bytes of chunks queued for each storer thread (at least one chunk, at most 4).
const STORER_QUEUE_BYTES: usize = 2 << 20;
/// Chunks larger than this are stored in the writer's own thread: a pipeline would hold
/// several of them in memory.
const PIPELINE_MAX_CHUNK: usize = 4 << 20;

/// A file being written, from [`FileStore::create`]. Implements [`std::io::Write`];
/// [`FileWriter::commit`] makes the whole file visible at once, replacing any previous
/// version of the key. Dropping it without committing discards it.
///
/// While the file is at most 1 MiB it is held in memory: a small file is stored at
/// commit in one batch together with its intent row. A larger file is streamed to the
/// store chunk by chunk, after its intent row, by up to two storer threads (one per
/// group of shards) while the writer's thread hashes the next chunks; memory use is
/// then a few chunks (about 3 MiB with 128 KiB chunks). Either way the intent row names
/// every chunk that may have been stored, so a crash's leftovers are found and
/// reclaimed without any scan.
///
/// A `write` that fails (for example with `StorageFull`, as an `io::Error` of kind
/// `StorageFull` wrapping the [`Error`]) poisons the writer: it can no longer commit.
pub struct FileWriter {
    store: FileStore,
    /// `None` for `put_content`, whose key is known only at the end.
    key: Option<Vec<u8>>,
    vid: u128,
    chunk_size: usize,
    /// The chunk being filled: `buf[..filled]`. Allocated on the first write.
    buf: Vec<u8>,
    filled: usize,
    /// Complete chunks kept in memory while the file is small (indexes 0..).
    held: Vec<Vec<u8>>,
    max_held: usize,
    /// Chunks produced so far (held or stored).
    chunks: u64,
    /// Bound recorded in the intent row; 0 = no intent row (nothing stored).
    bound: u64,
    started: SystemTime,
    hasher: blake3::Hasher,
    size: u64,
    /// Stores chunks in this thread (and holds what the storer threads stored, once
    /// they are done).
    sink: Sink,
    /// The storer threads of a large file.
    pipeline: Option<Pipeline>,
    failed: Option<String>,
    committed: bool,
}

impl std::fmt::Debug for FileWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileWriter")
            .field(
                "key",
                &self.key.as_deref().map(|k| k.escape_ascii().to_string()),
            )
            .field("version", &self.vid)
            .field("size", &self.size)
            .finish()
    }
}

impl FileWriter {
    pub(crate) fn new(store: FileStore, key: Option<Vec<u8>>) -> FileWriter {
        let sh = store.shared();
        let chunk_size = sh.chunk_size() as usize;
        let vid = sh.new_version();
        // Pinned from the start: the collector leaves this version's intent row alone
        // while the writer lives.
        sh.pin(vid);
        let shards = store.db().shard_count();
        FileWriter {
            key,
            vid,
            chunk_size,
            buf: Vec::new(),
            filled: 0,
            held: Vec::new(),
            max_held: (SMALL_FILE_BYTES / chunk_size as u64).max(1) as usize,
            chunks: 0,
            bound: 0,
            started: SystemTime::now(),
            hasher: blake3::Hasher::new(),
            size: 0,
            sink: Sink {
                store: store.clone(),
                vid,
                touched: vec![false; shards],
                unflushed: 0,
            },
            pipeline: None,
            failed: None,
            committed: false,
            store,
        }
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.size
    }

    fn check_ok(&self) -> Result<()> {
        match &self.failed {
            Some(f) => Err(Error::InvalidArgument(format!(
                "file writer failed earlier and cannot continue: {f}"
            ))),
            None => Ok(()),
        }
    }

    fn poison<T>(&mut self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            self.failed.get_or_insert_with(|| e.to_string());
        }
        r
    }

    fn ensure_buf(&mut self) {
        if self.buf.len() != self.chunk_size {
            self.buf = match self.pipeline.as_ref().and_then(|p| p.free.try_recv().ok()) {
                Some(b) if b.len() == self.chunk_size => b,
                _ => vec![0; self.chunk_size],
            };
        }
    }

    /// Appends `data`, storing each chunk as it fills.
    fn append(&mut self, mut data: &[u8]) -> Result<()> {
        self.check_ok()?;
        while !data.is_empty() {
            if self.filled == 0 && data.len() >= self.chunk_size && self.pipeline.is_none() {
                // A whole chunk, stored from the caller's bytes without a copy.
                let (chunk, rest) = data.split_at(self.chunk_size);
                self.size += chunk.len() as u64;
                let r = self.push_chunk(Some(chunk));
                self.poison(r)?;
                data = rest;
                continue;
            }
            self.ensure_buf();
            let n = (self.chunk_size - self.filled).min(data.len());
            self.buf[self.filled..self.filled + n].copy_from_slice(&data[..n]);
            self.filled += n;
            self.size += n as u64;
            data = &data[n..];
            if self.filled == self.chunk_size {
                let r = self.push_chunk(None);
                self.poison(r)?;
            }
        }
        Ok(())
    }

    /// Reads all of `reader` into the file, straight into the chunk buffer.
    pub(crate) fn fill_from(&mut self, mut reader: impl Read) -> Result<()> {
        self.check_ok()?;
        loop {
            self.ensure_buf();
            let n = match reader.read(&mut self.buf[self.filled..]) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let e = from_io(e);
                    self.failed.get_or_insert_with(|| e.to_string());
                    return Err(e);
                }
            };
            self.filled += n;
            self.size += n as u64;
            if self.filled == self.chunk_size {
                let r = self.push_chunk(None);
                self.poison(r)?;
            }
        }
    }

    /// Hands the next chunk on: `direct` (a whole chunk of the caller's bytes), else
    /// `buf[..filled]`. It is hashed, then held in memory while the file is small, stored
    /// otherwise: by the storer threads once the file is large.
    fn push_chunk(&mut self, direct: Option<&[u8]>) -> Result<()> {
        if self.chunks >= u32::MAX as u64 {
            return Err(Error::InvalidArgument(format!(
                "file exceeds {} chunks of {} bytes",
                u32::MAX,
                self.chunk_size
            )));
        }
        if let Some(p) = &self.pipeline {
            p.check()?;
        }
        let idx = self.chunks;
        let buf = std::mem::take(&mut self.buf);
        let filled = std::mem::take(&mut self.filled);
        let data = direct.unwrap_or(&buf[..filled]);
        self.hasher.update(data);
        let r = if self.bound == 0 && self.held.len() < self.max_held {
            self.held.push(data.to_vec());
            self.buf = buf;
            Ok(())
        } else if self.pipeline.is_some() {
            // Only the buffer reaches here (no direct chunks once there is a pipeline);
            // a new one is taken by the next write.
            let mut owned = buf;
            owned.truncate(filled);
            self.store_chunk(idx, Chunk::Owned(owned))
        } else {
            let r = self
                .spill_held()
                .and_then(|()| self.store_chunk(idx, Chunk::Borrowed(data)));
            self.buf = buf;
            r
        };
        if r.is_ok() {
            self.chunks += 1;
        }
        r
    }

    /// The file turned out not to be small: starts the storer threads and stores the
    /// chunks held in memory.
    fn spill_held(&mut self) -> Result<()> {
        if self.pipeline.is_none() {
            self.pipeline = Pipeline::start(&self.sink, self.chunk_size);
        }
        let held = std::mem::take(&mut self.held);
        for (i, c) in held.into_iter().enumerate() {
            self.store_chunk(i as u64, Chunk::Owned(c))?;
        }
        Ok(())
    }

    /// Stores chunk `idx`, on a storer thread if there are any.
    fn store_chunk(&mut self, idx: u64, data: Chunk<'_>) -> Result<()> {
        if idx >= self.bound {
            // Before the chunk is handed on: the intent row is written before it.
            self.raise_bound(idx)?;
        }
        match (&self.pipeline, data) {
            (Some(p), Chunk::Owned(v)) => p.send(&self.sink, idx, v),
            (Some(p), Chunk::Borrowed(d)) => p.send(&self.sink, idx, d.to_vec()),
            (None, Chunk::Owned(v)) => self.sink.put(idx, &v),
            (None, Chunk::Borrowed(d)) => self.sink.put(idx, d),
        }
    }

    /// Waits for the storer threads to store every chunk handed to them; takes over
    /// what they stored, or the first error one met.
    fn finish_pipeline(&mut self) -> Result<()> {
        match self.pipeline.take() {
            Some(p) => p.finish(&mut self.sink),
            None => Ok(()),
        }
    }

    /// Records, before chunk `idx` is stored, that this version may have chunks below a
    /// new bound, so a crash's leftovers can be found without any scan. No sync is
    /// needed: the store keeps a prefix of its writes after a crash, so a chunk never
    /// survives without the intent row written before it.
    fn raise_bound(&mut self, idx: u64) -> Result<()> {
        if self.bound == 0 {
            self.store.ensure_settings()?;
        }
        let mut bound = (self.bound * 2).max(FIRST_BOUND);
        while bound <= idx {
            bound *= 2;
        }
        let key = self.key.as_deref().unwrap_or_default();
        self.store.ks.put_with(
            layout::intent_key(self.vid),
            layout::encode_intent(bound, self.started, key),
            WriteOptions::new().defer_sync(),
        )?;
        self.bound = bound;
        Ok(())
    }

    /// Takes the last partial chunk and returns the new version's stat (its content
    /// hash complete). Nothing more is stored yet.
    fn seal(&mut self) -> Result<FileStat> {
        self.check_ok()?;
        if self.filled > 0 {
            let r = self.push_chunk(None);
            self.poison(r)?;
        }
        let r = self.finish_pipeline();
        self.poison(r)?;
        self.store.ensure_settings()?;
        Ok(FileStat {
            size: self.size,
            chunks: self.chunks,
            chunk_size: self.chunk_size as u64,
            hash: *self.hasher.finalize().as_bytes(),
            created: SystemTime::now(),
            version: self.vid,
        })
    }

    /// Stores the chunks still held in memory (a small file) in one batch together with
    /// their intent row, then makes every stored chunk reach the OS (and stable storage
    /// unless the policy is `Never`), so that the commit record can never be durable
    /// before the chunks it names.
    ///
    /// The chunks of a small file are not put in the commit batch itself: damage to one
    /// of them would then make recovery drop the whole batch, metadata included, and the
    /// file would vanish instead of failing its reads.
    fn store_and_settle(&mut self) -> Result<()> {
        if self.bound == 0 && !self.held.is_empty() {
            let ks = &self.store.ks;
            let bound = self.held.len() as u64;
            let key = self.key.as_deref().unwrap_or_default();
            let mut b = WriteBatch::new();
            let ik = layout::intent_key(self.vid);
            // Every shard of this batch is settled before the commit batch is written:
            // recovery drops a batch with any record missing, chunks included.
            self.sink.touched[ks.shard_of(&ik)] = true;
            b.put(&ik, layout::encode_intent(bound, self.started, key));
            for (i, c) in self.held.iter().enumerate() {
                let ck = layout::chunk_key(self.vid, i as u32);
                self.sink.touched[ks.shard_of(&ck)] = true;
                b.put(&ck, c);
            }
            let r = ks.write_with(b, WriteOptions::new().defer_sync());
            self.poison(r)?;
            self.bound = bound;
            self.held = Vec::new();
        }
        if self.bound > 0 {
            let shards: Vec<usize> = (0..self.sink.touched.len())
                .filter(|&s| self.sink.touched[s])
                .collect();
            let r = self
                .store
                .db()
                .flush_shards(&shards, self.store.sync_chunks());
            self.poison(r)?;
        }
        Ok(())
    }

    /// Makes the file visible under `key`, atomically replacing any previous version.
    /// With `dedupe`, a file with the same content already there is kept instead and
    /// this version discarded. Returns the stat of the file now under `key`.
    fn publish(&mut self, key: &[u8], stat: FileStat, dedupe: bool) -> Result<FileStat> {
        let store = self.store.clone();
        let sh = store.shared();
        let old_had_chunks = {
            let _g = sh.stripe(key);
            let old = store.meta(key)?;
            if let Some(o) = &old {
                if dedupe && o.hash == stat.hash && o.size == stat.size {
                    // Identical content is there: this version is dropped (and its
                    // chunks, if stored, reclaimed, see Drop).
                    return Ok(o.clone());
                }
            }
            let mut b = WriteBatch::new();
            for (i, c) in self.held.iter().enumerate() {
                b.put(layout::chunk_key(self.vid, i as u32), c);
            }
            b.put(layout::meta_key(key), layout::encode_meta(&stat));
            if self.bound > 0 {
                b.delete(layout::intent_key(self.vid));
            }
            if let Some(o) = old.as_ref().filter(|o| o.chunks > 0) {
                b.put(layout::gc_key(o.version), layout::encode_gc(o.chunks));
            }
            let r = store.ks.write(b);
            self.poison(r)?;
            self.committed = true;
            sh.adjust_totals(Some(&stat), old.as_ref());
            old.is_some_and(|o| o.chunks > 0)
        };
        if old_had_chunks {
            sh.note_garbage();
        }
        Ok(stat)
    }

    /// Makes the file visible, atomically replacing any previous version of the key, and
    /// durable as the store's sync policy says: under `SyncPolicy::Always` it is on
    /// stable storage when this returns; under `Every(d)` within `d`; under `Never` it
    /// survives a crash of the process, not necessarily of the machine. On error nothing
    /// of this version becomes visible.
    pub fn commit(mut self) -> Result<FileStat> {
        let key = self
            .key
            .clone()
            .ok_or_else(|| Error::InvalidArgument("writer has no key".into()))?;
        let stat = self.seal()?;
        self.store_and_settle()?;
        self.publish(&key, stat, false)
    }

    /// Commits under the content's hex hash (`put_content`), keeping an identical file
    /// that is already there.
    pub(crate) fn commit_content(mut self) -> Result<String> {
        let stat = self.seal()?;
        let key = stat.hash_hex();
        let same = |o: &FileStat| o.hash == stat.hash && o.size == stat.size;
        if self.store.meta(key.as_bytes())?.is_some_and(|o| same(&o)) {
            // Stored already: nothing of this copy needs to be (what was streamed is
            // reclaimed, see Drop).
            return Ok(key);
        }
        self.store_and_settle()?;
        self.publish(key.as_bytes(), stat, true)?;
        Ok(key)
    }

    /// Discards the file (the same as dropping the writer).
    pub fn abort(self) {}
}

impl Write for FileWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.append(data).map_err(to_io)?;
        Ok(data.len())
    }

    fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        self.append(data).map_err(to_io)
    }

    /// Does nothing: data reaches the store chunk by chunk, and [`FileWriter::commit`]
    /// makes it visible and durable.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for FileWriter {
    fn drop(&mut self) {
        // Chunks still being stored stay pinned until they are.
        let _ = self.finish_pipeline();
        let sh = self.store.shared();
        sh.unpin(self.vid);
        if !self.committed && self.bound > 0 {
            // The intent row names the stored chunks; the collector reclaims them.
            sh.note_garbage();
        }
    }
}

/// A chunk to store: the caller's bytes, or a buffer that can be handed to a thread.
enum Chunk<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
}

/// Stores chunks of one version, and remembers the shards it wrote to.
struct Sink {
    store: FileStore,
    vid: u128,
    /// Shards holding stored chunks not yet settled.
    touched: Vec<bool>,
    /// Bytes stored since the last `start_writeback`.
    unflushed: u64,
}

impl Sink {
    /// An empty sink for the same version (for a storer thread).
    fn fork(&self) -> Sink {
        Sink {
            store: self.store.clone(),
            vid: self.vid,
            touched: vec![false; self.touched.len()],
            unflushed: 0,
        }
    }

    fn put(&mut self, idx: u64, data: &[u8]) -> Result<()> {
        let ks = &self.store.ks;
        let k = layout::chunk_key(self.vid, idx as u32);
        ks.put_with(&k, data, WriteOptions::new().defer_sync())?;
        self.touched[ks.shard_of(&k)] = true;
        self.unflushed += data.len() as u64;
        if self.unflushed >= WRITEBACK_EVERY {
            self.unflushed = 0;
            for s in (0..self.touched.len()).filter(|&s| self.touched[s]) {
                ks.db().start_writeback(s);
            }
        }
        Ok(())
    }

    /// Takes over the shards another sink wrote to.
    fn absorb(&mut self, other: Sink) {
        for (t, o) in self.touched.iter_mut().zip(other.touched) {
            *t |= o;
        }
    }
}

/// The storer threads of a large file: the caller's thread cuts and hashes the stream
/// while these store the chunks (checksum, encoding, the write to the segment file), so
/// that hashing and storing overlap. With several shards there are several storers,
/// each storing the chunks of its own shards, so that they never wait for each other's
/// locks: the shards' independence turned into parallel writes.
struct Pipeline {
    storers: Vec<Storer>,
    /// Buffers coming back from the storers, for the next chunks.
    free: Receiver<Vec<u8>>,
    /// Set by a storer that met an error; the error itself is in `error`.
    failed: Arc<AtomicBool>,
    error: Arc<Mutex<Option<Error>>>,
}

struct Storer {
    tx: SyncSender<(u64, Vec<u8>)>,
    thread: JoinHandle<Sink>,
}

impl Pipeline {
    /// Starts the storers for chunks of `chunk_size` bytes (`None` if chunks are too
    /// large or no thread could be started: the caller stores).
    fn start(sink: &Sink, chunk_size: usize) -> Option<Pipeline> {
        if chunk_size > PIPELINE_MAX_CHUNK {
            return None;
        }
        let queue = (STORER_QUEUE_BYTES / chunk_size).clamp(1, 4);
        let shards = sink.touched.len();
        let n = MAX_STORERS.min(shards);
        let (free_tx, free) = mpsc::channel::<Vec<u8>>();
        let failed = Arc::new(AtomicBool::new(false));
        let error: Arc<Mutex<Option<Error>>> = Arc::new(Mutex::new(None));
        let mut storers = Vec::with_capacity(n);
        for i in 0..n {
            let (tx, rx) = mpsc::sync_channel::<(u64, Vec<u8>)>(queue);
            let mut own = sink.fork();
            let (free_tx, failed, error) = (free_tx.clone(), failed.clone(), error.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("cairn-file-store-{i}"))
                .spawn(move || {
                    store_loop(&mut own, rx, &free_tx, &failed, &error);
                    own
                });
            match spawned {
                Ok(thread) => storers.push(Storer { tx, thread }),
                Err(e) => {
                    log::warn!("file writer: starting a storer thread failed: {e}");
                    break;
                }
            }
        }
        if storers.is_empty() {
            return None;
        }
        Some(Pipeline {
            storers,
            free,
            failed,
            error,
        })
    }

    /// The first error a storer met, if any (it stops the writer).
    fn check(&self) -> Result<()> {
        if self.failed.load(Ordering::Relaxed) {
            return Err(self.error.lock().take().unwrap_or_else(|| {
                Error::InvalidArgument("storing a chunk failed earlier".into())
            }));
        }
        Ok(())
    }

    /// Hands chunk `idx` to the storer of its shard.
    fn send(&self, sink: &Sink, idx: u64, data: Vec<u8>) -> Result<()> {
        let shard = sink
            .store
            .ks
            .shard_of(layout::chunk_key(sink.vid, idx as u32));
        let storer = &self.storers[shard % self.storers.len()];
        if storer.tx.send((idx, data)).is_err() {
            self.check()?;
            return Err(Error::InvalidArgument("a storer thread has stopped".into()));
        }
        Ok(())
    }

    /// Waits for every chunk to be stored; the shards written go to `sink`.
    fn finish(self, sink: &mut Sink) -> Result<()> {
        let Pipeline {
            storers,
            failed,
            error,
            ..
        } = self;
        let mut lost = false;
        for s in storers {
            drop(s.tx);
            match s.thread.join() {
                Ok(own) => sink.absorb(own),
                Err(_) => lost = true,
            }
        }
        if failed.load(Ordering::SeqCst) || lost {
            return Err(error
                .lock()
                .take()
                .unwrap_or_else(|| Error::InvalidArgument("a storer thread failed".into())));
        }
        Ok(())
    }
}

/// A storer thread: stores each chunk it is handed and gives its buffer back; after an
/// error (recorded for the writer) it only drains the queue.
fn store_loop(
    sink: &mut Sink,
    rx: Receiver<(u64, Vec<u8>)>,
    free: &Sender<Vec<u8>>,
    failed: &AtomicBool,
    error: &Mutex<Option<Error>>,
) {
    for (idx, mut data) in rx {
        if !failed.load(Ordering::Relaxed) {
            if let Err(e) = sink.put(idx, &data) {
                error.lock().get_or_insert(e);
                failed.store(true, Ordering::SeqCst);
            }
        }
        let cap = data.capacity();
        data.resize(cap, 0);
        let _ = free.send(data);
    }
}
