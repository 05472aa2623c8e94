//! Streaming a whole file out: chunks read ahead by several threads at once, written
//! out in order by the caller's thread.
//!
//! A chunk read cold costs the kernel's work of filling the page cache (page
//! allocation, the disk read, the copy out) and cairn's checksum; one thread doing all
//! of it for a 1 GiB file reads at about what a plain `cat` gets (the page cache's
//! speed on one CPU), well below what the disk gives. Chunks lie in different shards'
//! segments, so several can be read at once (KFS's partitions used for read
//! parallelism): workers take the next chunk index, read and check it, and hand it to
//! the caller's thread, which writes the chunks in order. At most [`WINDOW`] chunks are
//! read ahead of the one being written, so memory stays bounded whatever the file's
//! size.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};

use cairn::{Result, Value};

use crate::{to_io, FileReader};

/// Chunks read ahead of the one being written, at most.
const WINDOW: u64 = 32;
/// Bytes the kernel is asked to read ahead of the workers, at most.
const READ_AHEAD_BYTES: u64 = 8 << 20;

/// Chunks read by the workers and not yet written, by index.
struct Ready {
    chunks: BTreeMap<u64, Result<Value>>,
    /// The next chunk the writer wants.
    next: u64,
}

struct Shared {
    ready: Mutex<Ready>,
    /// Signalled when a chunk is ready (for the writer) or written (for workers waiting
    /// for room in the window).
    cv: Condvar,
    /// Next chunk index for a worker to take.
    take: AtomicU64,
    /// Chunks below this index have been asked of the kernel ahead of the workers.
    prefetched: AtomicU64,
    /// Set when the writer stops early (an error): workers then stop too.
    stop: AtomicBool,
}

impl FileReader {
    /// Writes the rest of the file, from the current position to its end, to `out`,
    /// and returns the bytes written. Chunks are read ahead on `threads` threads
    /// (`0`: one per CPU, two to eight), each checked against its checksum, and written
    /// in order from the calling thread; at most 32 chunks are held at once. Damage is an
    /// `io::Error` of kind `InvalidData`; an error writing to `out` is returned as is.
    ///
    /// ```
    /// use std::io::Write;
    /// use cairn_files::{FileOptions, FileStore};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = cairn::Db::open(dir.path())?;
    /// let files = FileStore::with_options(&db, FileOptions::new().chunk_size(4096))?;
    /// let mut w = files.create("f")?;
    /// w.write_all(&vec![7u8; 100_000])?;
    /// w.commit()?;
    /// let mut out = Vec::new();
    /// let n = files.open("f")?.expect("it exists").copy_to(&mut out, 0)?;
    /// assert_eq!((n, out.len()), (100_000, 100_000));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn copy_to(&mut self, out: &mut impl Write, threads: usize) -> io::Result<u64> {
        let size = self.len();
        let start = self.position();
        if start >= size {
            return Ok(0);
        }
        let cs = self.stat().chunk_size;
        let first = start / cs;
        let last = size.div_ceil(cs); // one past the last chunk
        let threads = if threads == 0 {
            std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8))
        } else {
            threads
        }
        .min((last - first) as usize)
        .max(1);
        let shared = Shared {
            ready: Mutex::new(Ready {
                chunks: BTreeMap::new(),
                next: first,
            }),
            cv: Condvar::new(),
            take: AtomicU64::new(first),
            prefetched: AtomicU64::new(first),
            stop: AtomicBool::new(false),
        };
        let this = &*self;
        let written = std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| work(this, &shared, last));
            }
            let res = write_in_order(&shared, out, first, last, start - first * cs);
            // Whatever happened, the workers must end before the scope does. `stop` is
            // set under the lock a worker holds from its check of `stop` to its wait, so
            // the wake-up cannot fall between the two (a worker then waited forever:
            // `cairn file get` hung when its reader went away).
            {
                let _g = shared.ready.lock();
                shared.stop.store(true, Ordering::SeqCst);
            }
            shared.cv.notify_all();
            res
        })?;
        self.set_position(size);
        Ok(written)
    }
}

/// A worker: takes chunk indexes in turn and reads them, waiting while its chunk is a
/// window or more ahead of the one being written.
fn work(r: &FileReader, sh: &Shared, last: u64) {
    let ahead = r.read_ahead_window(READ_AHEAD_BYTES);
    loop {
        if sh.stop.load(Ordering::SeqCst) {
            return;
        }
        let idx = sh.take.fetch_add(1, Ordering::SeqCst);
        if idx >= last {
            return;
        }
        {
            let mut g = sh.ready.lock();
            while idx >= g.next + WINDOW && !sh.stop.load(Ordering::SeqCst) {
                sh.cv.wait(&mut g);
            }
        }
        if sh.stop.load(Ordering::SeqCst) {
            return;
        }
        // Keep the disk busy ahead of the workers: top the window past this chunk up
        // as a sequential reader does (without waiting), each chunk asked for once.
        let end = (idx + ahead).min(last);
        let from = sh.prefetched.load(Ordering::SeqCst).max(idx + 1);
        if r.worth_reading_ahead(from, end, ahead) {
            let from = sh.prefetched.fetch_max(end, Ordering::SeqCst).max(idx + 1);
            r.prefetch_chunks(from, end);
        }
        let v = r.load_chunk(idx);
        let mut g = sh.ready.lock();
        g.chunks.insert(idx, v);
        drop(g);
        sh.cv.notify_all();
    }
}

/// The writer: takes the chunks in order and writes them, from `skip` bytes into the
/// first.
fn write_in_order(
    sh: &Shared,
    out: &mut impl Write,
    first: u64,
    last: u64,
    mut skip: u64,
) -> io::Result<u64> {
    let mut written = 0u64;
    for idx in first..last {
        let v = {
            let mut g = sh.ready.lock();
            loop {
                if let Some(v) = g.chunks.remove(&idx) {
                    g.next = idx + 1;
                    break v;
                }
                sh.cv.wait(&mut g);
            }
        };
        // Room in the window for the workers.
        sh.cv.notify_all();
        let v = v.map_err(to_io)?;
        let bytes = &v[skip as usize..];
        skip = 0;
        out.write_all(bytes)?;
        written += bytes.len() as u64;
    }
    Ok(written)
}
