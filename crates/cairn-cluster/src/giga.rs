//! GIGA+ arithmetic: name hashes, partitions of a directory, their hash ranges, the
//! bitmap that routes a name to its partition, and where each partition lives.
//!
//! A directory's partition `i` at depth `r` holds the names whose hash `h` has
//! `h mod 2^r == i`. Splitting it creates partition `i + 2^r`; both then have depth
//! `r + 1`. Partition 0 always exists. Read with the hash's bits reversed (`rev`), a
//! partition is one contiguous range (the `r` top bits of `rev(h)` are fixed), so the
//! entries of a partition are one key range on disk (entries are keyed by `rev(h)` then
//! name) and a listing ordered by `(rev(h), name)` resumes after any name whatever
//! splits happened meanwhile.

use std::collections::BTreeSet;

use xxhash_rust::xxh3::xxh3_64;

/// Deepest a partition may be split (2^24 partitions per directory).
pub const MAX_DEPTH: u32 = 24;

/// Default partitions per server a directory splits into at most
/// ([`split_depth_limit`]): enough that entries per server stay within a few percent of
/// the mean when the server count is not a power of two, few enough that a spread
/// directory stops moving entries.
pub const DEFAULT_PARTITIONS_PER_SERVER: u32 = 8;

/// The depth past which no partition of a directory splits in a cluster of `servers`
/// servers when a directory may have `per_server` partitions per server: the smallest
/// `d` with `2^d ≥ servers × per_server` (at most [`MAX_DEPTH`]; `per_server` 0 means
/// [`MAX_DEPTH`]). Once every partition has reached it, the directory is spread as
/// evenly as it will be: more splits would only move entries (GIGA+ stops splitting a
/// directory once it covers the servers; IndexFS bounds partitions by servers too).
///
/// ```
/// use cairn_cluster::giga::split_depth_limit;
/// assert_eq!(split_depth_limit(64, 8), 9); // 512 partitions over 64 servers
/// assert_eq!(split_depth_limit(3, 8), 5); // 32 partitions: 11, 11 and 10 per server
/// assert_eq!(split_depth_limit(4, 0), cairn_cluster::giga::MAX_DEPTH);
/// ```
pub fn split_depth_limit(servers: u32, per_server: u32) -> u32 {
    if per_server == 0 {
        return MAX_DEPTH;
    }
    let want = u64::from(servers.max(1)) * u64::from(per_server);
    let mut d = 0;
    while d < MAX_DEPTH && (1u64 << d) < want {
        d += 1;
    }
    d
}

/// Bits of an inode number that name its home server.
pub const HOME_SHIFT: u32 = 48;

/// The hash of a name.
pub fn name_hash(name: &[u8]) -> u64 {
    xxh3_64(name)
}

/// The position of a hash in partition (and listing) order.
pub fn rev(h: u64) -> u64 {
    h.reverse_bits()
}

/// The low `depth` bits of `h`.
fn low(h: u64, depth: u32) -> u64 {
    if depth >= 64 {
        h
    } else {
        h & ((1u64 << depth) - 1)
    }
}

/// Whether partition `index` at `depth` holds the names of hash `h`.
pub fn covers(index: u32, depth: u32, h: u64) -> bool {
    low(h, depth) == index as u64
}

/// The partition that splitting `index` at `depth` creates.
pub fn child(index: u32, depth: u32) -> u32 {
    index + (1u32 << depth)
}

/// The partition `index` was split from, and the depth it had then (`None` for 0).
pub fn parent(index: u32) -> Option<(u32, u32)> {
    if index == 0 {
        return None;
    }
    let top = 31 - index.leading_zeros();
    Some((index - (1 << top), top))
}

/// The depth at which partition `index` was created (0 for partition 0).
pub fn created_depth(index: u32) -> u32 {
    parent(index).map_or(0, |(_, d)| d + 1)
}

/// The inclusive range of `rev(h)` that partition `index` at `depth` covers.
pub fn rev_range(index: u32, depth: u32) -> (u64, u64) {
    let lo = (index as u64).reverse_bits();
    let hi = if depth == 0 {
        u64::MAX
    } else {
        lo | (u64::MAX >> depth)
    };
    (lo, hi)
}

/// The server of partition `index` of a directory whose home is server `home`, in a
/// cluster of `n` servers.
pub fn server_of(home: u32, index: u32, n: u32) -> u32 {
    ((home as u64 + index as u64) % n as u64) as u32
}

/// The home server of inode `ino`.
pub fn home_of(ino: u64) -> u32 {
    (ino >> HOME_SHIFT) as u32
}

/// The inode number `local` of server `server`.
pub fn make_ino(server: u32, local: u64) -> u64 {
    ((server as u64) << HOME_SHIFT) | local
}

/// The home server of a new directory `name` in `parent`: spread by hash, so that a
/// tree of directories spreads over the servers.
pub fn dir_home(parent: u64, name: &[u8], n: u32) -> u32 {
    let mut b = Vec::with_capacity(8 + name.len());
    b.extend_from_slice(&parent.to_be_bytes());
    b.extend_from_slice(name);
    (xxh3_64(&b) % n as u64) as u32
}

/// The partitions of one directory that a party knows to exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bitmap {
    parts: BTreeSet<u32>,
}

impl Default for Bitmap {
    fn default() -> Bitmap {
        Bitmap::new()
    }
}

impl Bitmap {
    /// A bitmap knowing only partition 0.
    pub fn new() -> Bitmap {
        Bitmap {
            parts: BTreeSet::from([0]),
        }
    }

    /// A bitmap of these partitions (partition 0 is always included).
    pub fn from_parts(parts: impl IntoIterator<Item = u32>) -> Bitmap {
        let mut b = Bitmap::new();
        b.merge(parts);
        b
    }

    /// Adds partitions learnt from a server (their indexes above `2^MAX_DEPTH` are
    /// ignored). Returns whether anything was new.
    pub fn merge(&mut self, parts: impl IntoIterator<Item = u32>) -> bool {
        let mut new = false;
        for p in parts {
            if p < (1 << MAX_DEPTH) {
                new |= self.parts.insert(p);
            }
        }
        new
    }

    /// Whether partition `p` is known.
    pub fn contains(&self, p: u32) -> bool {
        self.parts.contains(&p)
    }

    /// The known partitions, ascending.
    pub fn parts(&self) -> impl Iterator<Item = u32> + '_ {
        self.parts.iter().copied()
    }

    /// Number of known partitions.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Always false: partition 0 is always known.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The partition this bitmap routes hash `h` to: the deepest known `i` with
    /// `h mod 2^r == i`.
    pub fn route(&self, h: u64) -> u32 {
        let top = self.parts.last().copied().unwrap_or(0);
        let mut r = 32 - top.leading_zeros();
        loop {
            let i = low(h, r) as u32;
            if self.parts.contains(&i) {
                return i;
            }
            if r == 0 {
                return 0;
            }
            r -= 1;
        }
    }

    /// The depth this bitmap implies for partition `i`: one more than the deepest split
    /// of `i` it knows (a child `i + 2^r` known means `i` had depth `r` or more).
    pub fn depth_of(&self, i: u32) -> u32 {
        let mut d = created_depth(i);
        while d < MAX_DEPTH && self.parts.contains(&child(i, d)) {
            d += 1;
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Splits partitions of a directory at random, as servers would, and returns the
    /// real (index, depth) list.
    fn split_at_random(steps: &[u32]) -> Vec<(u32, u32)> {
        let mut parts = vec![(0u32, 0u32)];
        for &s in steps {
            let k = s as usize % parts.len();
            let (i, d) = parts[k];
            if d >= 12 {
                continue;
            }
            parts[k] = (i, d + 1);
            parts.push((child(i, d), d + 1));
        }
        parts
    }

    proptest! {
        /// The partitions tile the hash space: every hash is covered by exactly one, the
        /// full bitmap routes it there, and a stale bitmap routes it to an ancestor.
        #[test]
        fn partitions_tile_and_route(steps in proptest::collection::vec(any::<u32>(), 0..60),
                                     hashes in proptest::collection::vec(any::<u64>(), 1..50),
                                     keep in any::<u64>()) {
            let parts = split_at_random(&steps);
            let full = Bitmap::from_parts(parts.iter().map(|p| p.0));
            for &h in &hashes {
                let owners: Vec<_> = parts.iter().filter(|&&(i, d)| covers(i, d, h)).collect();
                prop_assert_eq!(owners.len(), 1);
                let (i, d) = *owners[0];
                prop_assert_eq!(full.route(h), i);
                prop_assert_eq!(full.depth_of(i), d);
                let (lo, hi) = rev_range(i, d);
                prop_assert!(lo <= rev(h) && rev(h) <= hi);
                // A bitmap missing some partitions routes to a partition that is the
                // owner or an ancestor of it (whose server redirects).
                let stale = Bitmap::from_parts(parts.iter().map(|p| p.0)
                    .filter(|p| keep.rotate_left(*p) & 1 == 1));
                let mut a = stale.route(h);
                let mut ok = a == i;
                let mut x = i;
                while let Some((p, _)) = parent(x) {
                    if p == a { ok = true; }
                    x = p;
                }
                if a == 0 { ok = true; }
                prop_assert!(ok, "stale route {} for owner {}", a, i);
                a = 0;
                let _ = a;
            }
            // The rev ranges of all partitions are disjoint and cover everything.
            let mut ranges: Vec<_> = parts.iter().map(|&(i, d)| rev_range(i, d)).collect();
            ranges.sort();
            prop_assert_eq!(ranges[0].0, 0);
            for w in ranges.windows(2) {
                prop_assert_eq!(w[0].1.wrapping_add(1), w[1].0);
            }
            prop_assert_eq!(ranges.last().unwrap().1, u64::MAX);
        }
    }

    #[test]
    fn parents_and_placement() {
        assert_eq!(parent(0), None);
        assert_eq!(parent(1), Some((0, 0)));
        assert_eq!(parent(5), Some((1, 2)));
        assert_eq!(created_depth(5), 3);
        assert_eq!(child(1, 2), 5);
        assert_eq!(server_of(3, 2, 4), 1);
        assert_eq!(home_of(make_ino(7, 42)), 7);
        assert_eq!(rev_range(0, 0), (0, u64::MAX));
        assert_eq!(rev_range(1, 1), (1 << 63, u64::MAX));
    }
}
