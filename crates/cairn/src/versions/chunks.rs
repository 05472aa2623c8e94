//! Append-only storage in fixed-size chunks for the snapshot notes ([`Chunks`] of
//! fixed-size items, [`Arena`] of key bytes): growing never moves what is stored, so a
//! write that notes a version never copies the notes before it (a `Vec` that grows
//! copies every item it holds each time), and the slack is at most one chunk.
//!
//! The first chunk starts small and doubles up to the chunk size, so that a shard whose
//! snapshots note a handful of versions (a transaction's commit beside another's
//! snapshot) allocates little; only that first chunk ever moves (its items are found by
//! number, never by address).

/// Items in a full chunk of [`Chunks`] (a power of two).
const CHUNK_ITEMS: usize = 1 << CHUNK_BITS;
const CHUNK_BITS: u32 = 8;
/// Items the first chunk of [`Chunks`] is allocated with.
const FIRST_ITEMS: usize = 16;
/// Bytes of a full chunk of [`Arena`]; a key longer than a quarter of it has a chunk of
/// its own size.
const ARENA_CHUNK: usize = 4 << 10;
/// Bytes the first chunk of [`Arena`] is allocated with.
const ARENA_FIRST: usize = 256;

/// Grows the first chunk `c` (below `full` items) so that it holds `extra` more: by
/// doubling, at most to `full` (or to exactly what is needed, if more).
fn grow_first<T>(c: &mut Vec<T>, extra: usize, full: usize) {
    if c.len() + extra > c.capacity() {
        let want = (c.capacity() * 2).clamp(c.len() + extra, full.max(c.len() + extra));
        c.reserve_exact(want - c.len());
    }
}

/// A sequence of items numbered from 0, appended one at a time, stored in chunks of
/// [`CHUNK_ITEMS`] (item `i` is item `i % CHUNK_ITEMS` of chunk `i / CHUNK_ITEMS`).
pub(super) struct Chunks<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for Chunks<T> {
    fn default() -> Chunks<T> {
        Chunks {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Chunks<T> {
    /// How many items there are.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Appends `item`; returns its number.
    #[inline]
    pub fn push(&mut self, item: T) -> usize {
        let i = self.len;
        if let Some(c) = self.chunks.last_mut() {
            if c.len() < c.capacity() {
                c.push(item);
                self.len += 1;
                return i;
            }
        }
        self.push_slow(item)
    }

    /// [`push`](Chunks::push) when the last chunk is full (or there is none).
    #[cold]
    fn push_slow(&mut self, item: T) -> usize {
        let i = self.len;
        match self.chunks.last_mut() {
            Some(c) if c.len() < CHUNK_ITEMS => {
                if self.len < CHUNK_ITEMS {
                    grow_first(c, 1, CHUNK_ITEMS);
                }
                c.push(item);
            }
            _ => {
                let mut c = Vec::with_capacity(if i == 0 { FIRST_ITEMS } else { CHUNK_ITEMS });
                c.push(item);
                self.chunks.push(c);
            }
        }
        self.len += 1;
        i
    }

    /// Item `i` (below [`len`](Chunks::len)).
    #[inline]
    pub fn get(&self, i: usize) -> &T {
        &self.chunks[i >> CHUNK_BITS][i & (CHUNK_ITEMS - 1)]
    }

    /// Item `i` (below [`len`](Chunks::len)), to change.
    #[inline]
    pub fn get_mut(&mut self, i: usize) -> &mut T {
        &mut self.chunks[i >> CHUNK_BITS][i & (CHUNK_ITEMS - 1)]
    }

    /// Every item, in order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }

    /// Bytes allocated (by capacity).
    pub fn memory_bytes(&self) -> usize {
        self.chunks
            .iter()
            .map(|c| c.capacity() * std::mem::size_of::<T>())
            .sum::<usize>()
            + self.chunks.capacity() * std::mem::size_of::<Vec<T>>()
    }
}

/// Where [`Arena::push`] put a key's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Span {
    /// The chunk.
    pub chunk: u32,
    /// The offset in the chunk.
    pub off: u32,
    /// The length.
    pub len: u32,
}

/// Keys' bytes, appended into chunks of [`ARENA_CHUNK`] bytes: a key that does not fit
/// in what is left of the current chunk starts the next one; a key longer than a
/// quarter chunk gets a chunk of its own size (and the current chunk stays current).
#[derive(Default)]
pub(super) struct Arena {
    chunks: Vec<Vec<u8>>,
    /// The chunk short keys go to.
    current: Option<usize>,
}

impl Arena {
    /// Appends `key`; returns where it is.
    #[inline]
    pub fn push(&mut self, key: &[u8]) -> Span {
        if let Some(i) = self.current {
            let c = &mut self.chunks[i];
            if key.len() <= ARENA_CHUNK / 4 && c.len() + key.len() <= c.capacity() {
                let off = c.len();
                c.extend_from_slice(key);
                return Span {
                    chunk: i as u32,
                    off: off as u32,
                    len: key.len() as u32,
                };
            }
        }
        self.push_slow(key)
    }

    /// [`push`](Arena::push) when the current chunk has no room for `key` (or `key` is
    /// long).
    #[cold]
    fn push_slow(&mut self, key: &[u8]) -> Span {
        let chunk = if key.len() > ARENA_CHUNK / 4 {
            self.chunks.push(Vec::with_capacity(key.len()));
            self.chunks.len() - 1
        } else {
            match self.current {
                Some(i) if self.chunks[i].len() + key.len() <= ARENA_CHUNK => {
                    grow_first(&mut self.chunks[i], key.len(), ARENA_CHUNK);
                    i
                }
                _ => {
                    let first = if self.current.is_none() {
                        ARENA_FIRST
                    } else {
                        ARENA_CHUNK
                    };
                    self.chunks.push(Vec::with_capacity(first));
                    self.current = Some(self.chunks.len() - 1);
                    self.chunks.len() - 1
                }
            }
        };
        let c = &mut self.chunks[chunk];
        let off = c.len();
        c.extend_from_slice(key);
        Span {
            chunk: chunk as u32,
            off: off as u32,
            len: key.len() as u32,
        }
    }

    /// The bytes at `s` (as [`push`](Arena::push) returned it).
    #[inline]
    pub fn get(&self, s: Span) -> &[u8] {
        let off = s.off as usize;
        &self.chunks[s.chunk as usize][off..off + s.len as usize]
    }

    /// Bytes allocated (by capacity).
    pub fn memory_bytes(&self) -> usize {
        self.chunks.iter().map(Vec::capacity).sum::<usize>()
            + self.chunks.capacity() * std::mem::size_of::<Vec<u8>>()
    }
}

#[cfg(test)]
mod tests {
    use super::{Arena, Chunks, ARENA_CHUNK, CHUNK_ITEMS};

    #[test]
    fn chunks_keep_items_in_place_as_they_grow() {
        let mut c = Chunks::default();
        let n = 3 * CHUNK_ITEMS + 17;
        for i in 0..n {
            assert_eq!(c.push(i as u64 * 3), i);
        }
        assert_eq!(c.len(), n);
        let first = c.get(CHUNK_ITEMS) as *const u64;
        for i in n..n + CHUNK_ITEMS {
            c.push(i as u64 * 3);
        }
        assert_eq!(
            first,
            c.get(CHUNK_ITEMS) as *const u64,
            "a full chunk moved"
        );
        for i in 0..n + CHUNK_ITEMS {
            assert_eq!(*c.get(i), i as u64 * 3);
        }
        *c.get_mut(5) = 1;
        assert_eq!(c.iter().nth(5), Some(&1));
        assert_eq!(c.iter().count(), n + CHUNK_ITEMS);
        // Slack: at most the last chunk's unused items (plus the chunk list).
        assert!(c.memory_bytes() <= (n + 2 * CHUNK_ITEMS) * 8 + 64 * 24);
    }

    #[test]
    fn arena_returns_each_key_as_pushed() {
        let mut a = Arena::default();
        let keys: Vec<Vec<u8>> = (0..5000u32)
            .map(|i| {
                let len = match i % 7 {
                    0 => 0,
                    1 => ARENA_CHUNK + 3,
                    _ => (i % 200) as usize,
                };
                (0..len).map(|j| (i as usize + j) as u8).collect()
            })
            .collect();
        let spans: Vec<_> = keys.iter().map(|k| a.push(k)).collect();
        for (k, s) in keys.iter().zip(&spans) {
            assert_eq!(a.get(*s), &k[..]);
        }
        let total: usize = keys.iter().map(Vec::len).sum();
        assert!(a.memory_bytes() >= total);
        // No chunk but the first is larger than it needs to be.
        assert!(a.memory_bytes() <= total + total / 2 + 4 * ARENA_CHUNK);
    }
}
