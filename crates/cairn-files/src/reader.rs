//! Reading a file: positioned reads of one committed version, chunk by chunk.

use std::io::{self, Read, Seek, SeekFrom};

use cairn::{Error, Result, Value};

use crate::{layout, to_io, FileStat, FileStore};

/// A reader of one committed version of a file, from [`FileStore::open`]. Implements
/// [`Read`] and [`Seek`]; a read fetches only the chunks it needs, each checked against
/// its checksum (damage is an `io::Error` of kind `InvalidData` wrapping
/// [`Error::Corruption`]).
///
/// The version stays readable to its end while the reader exists, even if the key is
/// overwritten or removed meanwhile: its chunks are reclaimed only after the reader is
/// dropped.
pub struct FileReader {
    store: FileStore,
    key: Vec<u8>,
    stat: FileStat,
    pos: u64,
    /// The chunk read last, with its index.
    cur: Option<(u64, Value)>,
    /// Chunks below this index have been prefetched.
    prefetched: u64,
}

/// Bytes a sequential reader asks the kernel to read ahead of it.
const READ_AHEAD_BYTES: u64 = 4 << 20;
/// At most this many chunks are read ahead.
const READ_AHEAD_MAX_CHUNKS: u64 = 64;

impl std::fmt::Debug for FileReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileReader")
            .field("key", &self.key.escape_ascii().to_string())
            .field("version", &self.stat.version)
            .field("size", &self.stat.size)
            .field("pos", &self.pos)
            .finish()
    }
}

impl FileReader {
    /// `stat.version` must already be pinned if it has chunks (see `FileStore::open`).
    pub(crate) fn new(store: FileStore, key: Vec<u8>, stat: FileStat) -> FileReader {
        FileReader {
            store,
            key,
            stat,
            pos: 0,
            cur: None,
            prefetched: 0,
        }
    }

    /// The metadata of the version being read.
    pub fn stat(&self) -> &FileStat {
        &self.stat
    }

    /// The file's key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The file's length in bytes.
    pub fn len(&self) -> u64 {
        self.stat.size
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.stat.size == 0
    }

    /// The current position.
    pub fn position(&self) -> u64 {
        self.pos
    }

    fn corrupt(&self, detail: String) -> Error {
        Error::corruption(
            format!("<file {}>", self.key.escape_ascii()),
            format!("version {:032x}: {detail}", self.stat.version),
        )
    }

    /// Reads chunk `idx` and checks its length.
    pub(crate) fn load_chunk(&self, idx: u64) -> Result<Value> {
        let cs = self.stat.chunk_size;
        let want = cs.min(self.stat.size.saturating_sub(idx * cs));
        if idx >= self.stat.chunks {
            return Err(self.corrupt(format!("chunk {idx} is past the end")));
        }
        let k = layout::chunk_key(self.stat.version, idx as u32);
        let v = self.store.ks.get(&k)?.ok_or_else(|| {
            self.corrupt(format!("chunk {idx} of {} is missing", self.stat.chunks))
        })?;
        if v.len() as u64 != want {
            return Err(self.corrupt(format!(
                "chunk {idx} has {} bytes, expected {want}",
                v.len()
            )));
        }
        Ok(v)
    }

    /// Moves the position (for [`FileReader::copy_to`]).
    pub(crate) fn set_position(&mut self, pos: u64) {
        self.pos = pos;
    }

    /// Chunks in a read-ahead window of `bytes` (at least one, at most
    /// `READ_AHEAD_MAX_CHUNKS`).
    pub(crate) fn read_ahead_window(&self, bytes: u64) -> u64 {
        (bytes / self.stat.chunk_size).clamp(1, READ_AHEAD_MAX_CHUNKS)
    }

    /// Whether chunks `start..end` of a read-ahead `window` are worth asking for now:
    /// the window is topped up in steps of a quarter, not one chunk at a time, except
    /// for the file's last chunks.
    pub(crate) fn worth_reading_ahead(&self, start: u64, end: u64, window: u64) -> bool {
        start < end && (end - start >= (window / 4).max(1) || end >= self.stat.chunks)
    }

    /// Asks the kernel to start reading chunks `start..end`, without waiting.
    pub(crate) fn prefetch_chunks(&self, start: u64, end: u64) {
        for idx in start..end {
            self.store
                .ks
                .prefetch(layout::chunk_key(self.stat.version, idx as u32));
        }
    }

    /// Has the kernel start reading the chunks after `from`, up to the read-ahead
    /// window, so that a sequential reader keeps several disk reads in flight.
    fn read_ahead(&mut self, from: u64) {
        let window = self.read_ahead_window(READ_AHEAD_BYTES);
        let end = (from + window).min(self.stat.chunks);
        let start = self.prefetched.max(from);
        if !self.worth_reading_ahead(start, end, window) {
            return;
        }
        self.prefetch_chunks(start, end);
        self.prefetched = end;
    }

    /// Reads into `buf` from the current position, as many bytes as fit and the file
    /// has.
    fn read_some(&mut self, buf: &mut [u8]) -> Result<usize> {
        let mut done = 0;
        let cs = self.stat.chunk_size;
        while done < buf.len() && self.pos < self.stat.size {
            let idx = self.pos / cs;
            let chunk = match self.cur.take() {
                Some((i, v)) if i == idx => v,
                prev => {
                    let sequential = prev.as_ref().map_or(idx == 0, |(i, _)| *i + 1 == idx);
                    drop(prev);
                    if sequential {
                        self.read_ahead(idx + 1);
                    }
                    self.load_chunk(idx)?
                }
            };
            let off = (self.pos - idx * cs) as usize;
            let n = (chunk.len() - off).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&chunk[off..off + n]);
            done += n;
            self.pos += n as u64;
            self.cur = Some((idx, chunk));
        }
        Ok(done)
    }

    /// Up to `len` bytes from `offset` (fewer at the end of the file).
    pub(crate) fn read_range_at(&mut self, offset: u64, len: u64) -> Result<Vec<u8>> {
        let n = len.min(self.stat.size.saturating_sub(offset));
        let n = usize::try_from(n).map_err(|_| {
            Error::InvalidArgument(format!("range of {n} bytes does not fit in memory"))
        })?;
        self.pos = offset;
        let mut out = vec![0; n];
        let got = self.read_some(&mut out)?;
        debug_assert_eq!(got, n);
        Ok(out)
    }
}

impl Read for FileReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_some(buf).map_err(to_io)
    }
}

impl Seek for FileReader {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        let (base, delta) = match pos {
            SeekFrom::Start(p) => {
                self.pos = p;
                return Ok(p);
            }
            SeekFrom::End(d) => (self.stat.size, d),
            SeekFrom::Current(d) => (self.pos, d),
        };
        match base.checked_add_signed(delta) {
            Some(p) => {
                self.pos = p;
                Ok(p)
            }
            None => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek to a negative or overflowing position",
            )),
        }
    }

    fn stream_position(&mut self) -> io::Result<u64> {
        Ok(self.pos)
    }
}

impl Drop for FileReader {
    fn drop(&mut self) {
        if self.stat.chunks > 0 {
            self.store.shared().unpin(self.stat.version);
        }
    }
}
