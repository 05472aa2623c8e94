//! Writing a file: chunking, hashing, the intent row, and the atomic commit.

use std::io::{self, Read, Write};
use std::time::SystemTime;

use crate::db::{ikey, NS_FILES};
use crate::{Error, Result, WriteBatch};

use super::{
    from_io, layout, settle_shards, sync_chunks, to_io, FileStat, FileStore, SMALL_FILE_BYTES,
};

/// The first bound recorded in an intent row; each later one doubles it.
const FIRST_BOUND: u64 = 64;
/// Unless the policy is `Never`, a streaming writer starts the disk writes of what it
/// stored every this many bytes, so that its commit's sync has only the tail to wait for.
const WRITEBACK_EVERY: u64 = 16 << 20;

/// A file being written, from [`FileStore::create`]. Implements [`std::io::Write`];
/// [`FileWriter::commit`] makes the whole file visible at once, replacing any previous
/// version of the key. Dropping it without committing discards it.
///
/// Memory use is one chunk, plus, while the file is at most 1 MiB, the file itself: a
/// small file is stored at commit in one batch together with its intent row. A larger
/// file is streamed to the store chunk by chunk after its intent row was made durable.
/// Either way the intent row names every chunk that may have been stored, so a crash's
/// leftovers are found and reclaimed without any scan.
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
    /// Bound recorded in the durable intent row; 0 = no intent row (nothing stored).
    bound: u64,
    started: SystemTime,
    hasher: blake3::Hasher,
    size: u64,
    /// Shards holding stored chunks not yet settled.
    touched: Vec<bool>,
    /// Bytes stored since the last `start_writeback`.
    unflushed: u64,
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
        let shards = store.core().shards.len();
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
            touched: vec![false; shards],
            unflushed: 0,
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
            self.buf = vec![0; self.chunk_size];
        }
    }

    /// Appends `data`, storing each chunk as it fills.
    fn append(&mut self, mut data: &[u8]) -> Result<()> {
        self.check_ok()?;
        while !data.is_empty() {
            self.ensure_buf();
            let n = (self.chunk_size - self.filled).min(data.len());
            self.buf[self.filled..self.filled + n].copy_from_slice(&data[..n]);
            self.filled += n;
            self.size += n as u64;
            data = &data[n..];
            if self.filled == self.chunk_size {
                let r = self.push_chunk();
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
                let r = self.push_chunk();
                self.poison(r)?;
            }
        }
    }

    /// Hands the chunk in `buf[..filled]` on: held in memory while the file is small,
    /// stored otherwise.
    fn push_chunk(&mut self) -> Result<()> {
        if self.chunks >= u32::MAX as u64 {
            return Err(Error::InvalidArgument(format!(
                "file exceeds {} chunks of {} bytes",
                u32::MAX,
                self.chunk_size
            )));
        }
        let buf = std::mem::take(&mut self.buf);
        let data = &buf[..self.filled];
        self.hasher.update(data);
        let r = if self.bound == 0 && self.held.len() < self.max_held {
            self.held.push(data.to_vec());
            Ok(())
        } else {
            self.spill_held()
                .and_then(|()| self.store_chunk(self.chunks, data))
        };
        self.buf = buf;
        self.filled = 0;
        if r.is_ok() {
            self.chunks += 1;
        }
        r
    }

    /// Stores the chunks held in memory (the file turned out not to be small).
    fn spill_held(&mut self) -> Result<()> {
        let held = std::mem::take(&mut self.held);
        for (i, c) in held.iter().enumerate() {
            self.store_chunk(i as u64, c)?;
        }
        Ok(())
    }

    fn store_chunk(&mut self, idx: u64, data: &[u8]) -> Result<()> {
        if idx >= self.bound {
            self.raise_bound(idx)?;
        }
        let core = self.store.core();
        let k = ikey(NS_FILES, &layout::chunk_key(self.vid, idx as u32));
        core.put(&k, data, false)?;
        self.touched[core.shard_of(&k)] = true;
        self.unflushed += data.len() as u64;
        if self.unflushed >= WRITEBACK_EVERY && sync_chunks(core) {
            self.unflushed = 0;
            for s in (0..self.touched.len()).filter(|&s| self.touched[s]) {
                core.start_writeback(s);
            }
        }
        Ok(())
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
        self.store.core().put(
            &ikey(NS_FILES, &layout::intent_key(self.vid)),
            &layout::encode_intent(bound, self.started, key),
            false,
        )?;
        self.bound = bound;
        Ok(())
    }

    /// Takes the last partial chunk and returns the new version's stat (its content
    /// hash complete). Nothing more is stored yet.
    fn seal(&mut self) -> Result<FileStat> {
        self.check_ok()?;
        if self.filled > 0 {
            let r = self.push_chunk();
            self.poison(r)?;
        }
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
            let core = self.store.core();
            let bound = self.held.len() as u64;
            let key = self.key.as_deref().unwrap_or_default();
            let mut b = WriteBatch::new();
            let ik = layout::intent_key(self.vid);
            // Every shard of this batch is settled before the commit batch is written:
            // recovery drops a batch with any record missing, chunks included.
            self.touched[core.shard_of(&ikey(NS_FILES, &ik))] = true;
            b.put_ns(
                NS_FILES,
                &ik,
                &layout::encode_intent(bound, self.started, key),
            );
            for (i, c) in self.held.iter().enumerate() {
                let ck = layout::chunk_key(self.vid, i as u32);
                self.touched[core.shard_of(&ikey(NS_FILES, &ck))] = true;
                b.put_ns(NS_FILES, &ck, c);
            }
            let r = core.write_batch(b, false);
            self.poison(r)?;
            self.bound = bound;
            self.held = Vec::new();
        }
        if self.bound > 0 {
            let core = self.store.core();
            let shards: Vec<usize> = (0..self.touched.len())
                .filter(|&s| self.touched[s])
                .collect();
            let r = settle_shards(core, &shards, sync_chunks(core));
            self.poison(r)?;
        }
        Ok(())
    }

    /// Makes the file visible under `key`, atomically replacing any previous version.
    /// With `dedupe`, a file with the same content already there is kept instead and
    /// this version discarded. Returns the stat of the file now under `key`.
    fn publish(&mut self, key: &[u8], stat: FileStat, dedupe: bool) -> Result<FileStat> {
        let store = self.store.clone();
        let (sh, core) = (store.shared(), store.core());
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
                b.put_ns(NS_FILES, &layout::chunk_key(self.vid, i as u32), c);
            }
            b.put_ns(
                NS_FILES,
                &layout::meta_key(key),
                &layout::encode_meta(&stat),
            );
            if self.bound > 0 {
                b.delete_ns(NS_FILES, &layout::intent_key(self.vid));
            }
            if let Some(o) = old.as_ref().filter(|o| o.chunks > 0) {
                b.put_ns(
                    NS_FILES,
                    &layout::gc_key(o.version),
                    &layout::encode_gc(o.chunks),
                );
            }
            let r = core.write_batch(b, true);
            self.poison(r)?;
            self.committed = true;
            sh.adjust_totals(Some(&stat), old.as_ref());
            old.is_some_and(|o| o.chunks > 0)
        };
        if old_had_chunks {
            sh.wake_gc();
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
        let sh = self.store.shared();
        sh.unpin(self.vid);
        if !self.committed && self.bound > 0 {
            // The intent row names the stored chunks; the collector reclaims them.
            sh.wake_gc();
        }
    }
}
