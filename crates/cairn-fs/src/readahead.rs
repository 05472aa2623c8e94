//! Read-ahead of file data: a reader that goes through a file in order has the chunk
//! rows it will want next read from disk before it asks for them, several at once.
//!
//! Chunk rows sit on different shards of the store (a row's shard is a hash of its key),
//! so the kernel's own readahead of one segment file sees only every few chunks of a
//! file, and a single-threaded reader (the FUSE server) would wait for one disk read at
//! a time. [`ReadAhead`] notices sequential reads per inode and asks the store to
//! prefetch the next chunks (`posix_fadvise(WILLNEED)` on their records, which the
//! kernel reads in the background, in parallel), in a window that starts at
//! [`MIN_WINDOW`] and doubles up to [`MAX_WINDOW`] while the reader stays sequential.

use std::collections::HashMap;

use parking_lot::Mutex;

/// Chunks read ahead when a reader is first seen going in order (256 KiB).
pub(crate) const MIN_WINDOW: u64 = 4;
/// Most chunks read ahead of a sequential reader (4 MiB of 64 KiB chunks).
pub(crate) const MAX_WINDOW: u64 = 64;
/// Streams tracked at once; past it the table starts over (a forgotten stream just
/// starts with a small window again).
const MAX_STREAMS: usize = 4096;

/// Where a reader of one inode was.
#[derive(Clone, Copy, Debug)]
struct Stream {
    /// The chunk after the last one read.
    next: u64,
    /// Chunks below this index were prefetched.
    prefetched: u64,
    /// Current window, in chunks.
    window: u64,
}

/// Sequential-read detection and the prefetch window of each inode being read.
#[derive(Debug, Default)]
pub(crate) struct ReadAhead {
    streams: Mutex<HashMap<u64, Stream>>,
}

impl ReadAhead {
    /// Notes a read of chunks `first..=last` of inode `ino`, a file of `chunks`
    /// chunks; returns the chunks to prefetch now (empty for a reader not in order,
    /// or when the window is still mostly ahead of it).
    pub(crate) fn on_read(
        &self,
        ino: u64,
        first: u64,
        last: u64,
        chunks: u64,
    ) -> std::ops::Range<u64> {
        let mut m = self.streams.lock();
        if m.len() >= MAX_STREAMS && !m.contains_key(&ino) {
            m.clear();
        }
        let s = m.entry(ino).or_insert(Stream {
            next: u64::MAX,
            prefetched: 0,
            window: 0,
        });
        // In order: from the start of the file, or where the last read ended (the same
        // chunk again counts: reads smaller than a chunk).
        let sequential = first == 0 || first == s.next || first + 1 == s.next;
        s.next = last + 1;
        if !sequential {
            s.window = 0;
            s.prefetched = 0;
            return 0..0;
        }
        s.window = if s.window == 0 {
            MIN_WINDOW
        } else {
            (s.window * 2).min(MAX_WINDOW)
        };
        let end = (last + 1 + s.window).min(chunks);
        let start = s.prefetched.max(last + 1);
        // Top up in steps of a quarter window, not one chunk at a time.
        if start >= end || (end - start < (s.window / 4).max(1) && end < chunks) {
            return 0..0;
        }
        s.prefetched = end;
        start..end
    }

    /// Forgets inode `ino` (its last close).
    pub(crate) fn forget(&self, ino: u64) {
        self.streams.lock().remove(&ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequential_reader_gets_a_growing_window() {
        let ra = ReadAhead::default();
        assert_eq!(ra.on_read(1, 0, 1, 1000), 2..6);
        assert_eq!(ra.on_read(1, 2, 3, 1000), 6..12);
        assert_eq!(ra.on_read(1, 4, 5, 1000), 12..22);
        let mut last = 0..0;
        for i in 3..100 {
            let r = ra.on_read(1, 2 * i, 2 * i + 1, 1000);
            if !r.is_empty() {
                assert!(r.start >= last.end, "{r:?} after {last:?}");
                assert!(r.end <= 2 * i + 2 + MAX_WINDOW);
                last = r;
            }
        }
        assert!(last.end >= 200, "the window kept ahead: {last:?}");
    }

    #[test]
    fn random_reads_prefetch_nothing_and_the_end_of_the_file_bounds_it() {
        let ra = ReadAhead::default();
        assert_eq!(ra.on_read(7, 40, 40, 100), 0..0);
        assert_eq!(ra.on_read(7, 10, 10, 100), 0..0);
        assert_eq!(ra.on_read(7, 90, 90, 100), 0..0);
        // In order from there: prefetched up to the last chunk, never past it.
        assert_eq!(ra.on_read(7, 91, 91, 100), 92..96);
        assert_eq!(ra.on_read(7, 92, 92, 100), 96..100);
        assert_eq!(ra.on_read(7, 93, 93, 100), 0..0);
        // Reads smaller than a chunk: the same chunk again is still in order.
        assert_eq!(ra.on_read(7, 93, 93, 100), 0..0);
        ra.forget(7);
        assert_eq!(ra.on_read(7, 50, 50, 100), 0..0);
    }
}
