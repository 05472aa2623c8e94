//! The in-memory ordered index of one shard.
//!
//! It maps every live key to the [`Loc`] of its newest record on disk. It is a two-level
//! packed B+tree: an outer [`BTreeMap`] from a *separator* to a leaf, and leaves that each
//! hold up to `LEAF_CAP` (128) entries packed into four vectors (all keys concatenated, their
//! end offsets, their locations, and a 4-byte *head* per key: the key's bytes after the
//! prefix all keys of the leaf share, as an integer). A leaf is searched by a binary search
//! over its heads (at most 512 contiguous bytes), and only keys whose head equals the probe's are
//! compared byte by byte, so a lookup in a leaf touches a few cache lines rather than one
//! key per step. Point operations cost one `BTreeMap` search plus one leaf search; scans
//! cost one of each plus the entries returned.
//!
//! Beside the ordered structure, a hash side ([`crate::hash_index`], unless turned off)
//! holds every entry's location by a tag of the key's hash: [`Index::candidate`] answers a
//! point lookup with about one cache miss, for reads that check the key they find.
//!
//! Invariants (checked by `check_invariants` in the tests):
//! - every leaf is non-empty and holds at most `LEAF_CAP` entries in strictly ascending order;
//! - the first leaf's separator is the empty key, so every key has a leaf: the one with the
//!   greatest separator `<=` the key (no re-keying is ever needed);
//! - a leaf's separator is `<=` its first key and `>` the last key of the previous leaf (it is
//!   the shortest such prefix of the first key when the leaf is created, and may become a
//!   strict lower bound after removals, which is fine);
//! - leaf vectors are allocated with (nearly) exact capacities: they grow by small steps,
//!   are shrunk after splits and trimmed after removals.
//!
//! Separators are stored inline when short (see `Sep`) rather than as `Box<[u8]>`, so that
//! searching the outer map does not chase a pointer per comparison.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::mem::size_of;
use std::ops::Bound;

use crate::hash_index::{tag_of, HashIndex};
pub use crate::loc::Loc;

/// Maximum number of entries in one leaf.
const LEAF_CAP: usize = 128;
/// Entries per leaf when bulk loading with [`Index::from_sorted`] (about 90 % of `LEAF_CAP`).
const BULK_FILL: usize = LEAF_CAP * 9 / 10;
/// A leaf with fewer entries than this after a removal tries to merge with a neighbour.
const MERGE_BELOW: usize = LEAF_CAP / 4;
/// Two leaves are merged only if the result holds at most this many entries.
const MERGE_MAX: usize = LEAF_CAP * 3 / 4;
/// Minimum number of entries a leaf's vectors grow by when they are full.
const GROW_MIN: usize = 8;
/// Upper limit on the spare key bytes reserved when a leaf's key buffer grows.
const KEY_SLACK_MAX: usize = 1024;
/// Cache line size assumed by `Leaf::warm`.
const CACHE_LINE: usize = 64;
/// Key bytes in a leaf entry's head (see [`head`]).
const HEAD_BYTES: usize = 4;
/// Estimated `BTreeMap` bytes per leaf: a `(separator, Leaf)` slot in nodes that are about
/// two-thirds full, plus the node headers and internal nodes.
const MAP_BYTES_PER_LEAF: usize = (size_of::<Sep>() + size_of::<Leaf>()) * 3 / 2 + 16;

/// Longest separator stored inline in a [`Sep`].
const SEP_INLINE: usize = 22;

/// A leaf's separator, the key of the outer map.
///
/// Separators are shortest distinguishing prefixes, so they are usually short; those are
/// stored inline, which spares an allocation per leaf and, more importantly, a pointer chase
/// (a likely cache miss) per comparison while searching the outer map.
#[derive(Clone)]
enum Sep {
    /// Length and bytes of a separator of at most `SEP_INLINE` bytes.
    Inline(u8, [u8; SEP_INLINE]),
    /// A longer separator.
    Heap(Box<[u8]>),
}

impl Sep {
    fn new(bytes: &[u8]) -> Sep {
        if bytes.len() <= SEP_INLINE {
            let mut inline = [0; SEP_INLINE];
            inline[..bytes.len()].copy_from_slice(bytes);
            Sep::Inline(bytes.len() as u8, inline)
        } else {
            Sep::Heap(Box::from(bytes))
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Sep::Inline(len, bytes) => &bytes[..*len as usize],
            Sep::Heap(bytes) => bytes,
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Sep::Inline(..) => 0,
            Sep::Heap(bytes) => bytes.len(),
        }
    }
}

// Equality and order are those of the bytes, as `Borrow<[u8]>` requires.
impl Borrow<[u8]> for Sep {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for Sep {
    fn eq(&self, other: &Sep) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Sep {}

impl PartialOrd for Sep {
    fn partial_cmp(&self, other: &Sep) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Sep {
    fn cmp(&self, other: &Sep) -> Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

/// Up to `LEAF_CAP` entries in ascending key order, packed.
#[derive(Default)]
struct Leaf {
    /// All keys concatenated in ascending order.
    keys: Vec<u8>,
    /// `ends[i]` is the end offset of key `i` in `keys`; key `i` starts at `ends[i - 1]` (or 0).
    ends: Vec<u32>,
    /// `locs[i]` is the location of key `i`.
    locs: Vec<Loc>,
    /// `heads[i]` is [`head`] of key `i` after the first `skip` bytes: a search compares
    /// these contiguous integers and reads the key bytes of only the entries whose head
    /// equals the probe's (usually one), instead of a key per step of a binary search.
    heads: Vec<u32>,
    /// Length of a prefix that every key of the leaf shares (that of the first key): at
    /// most the longest such prefix, which is measured when heads are recomputed and may
    /// grow after removals without `skip` following.
    skip: u32,
}

/// The `HEAD_BYTES` bytes of `key` from `skip` on, as a big-endian integer padded with
/// zero bytes. For keys sharing their first `skip` bytes, a smaller head means a smaller
/// key (equal heads decide nothing: the keys are compared).
fn head(key: &[u8], skip: usize) -> u32 {
    let rest = key.get(skip..).unwrap_or(&[]);
    let mut bytes = [0u8; HEAD_BYTES];
    let n = rest.len().min(HEAD_BYTES);
    bytes[..n].copy_from_slice(&rest[..n]);
    u32::from_be_bytes(bytes)
}

/// Length of the longest common prefix of `a` and `b`.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// How many entries a leaf holding `n` entries grows by when full (never beyond `LEAF_CAP`).
fn grow_step(n: usize) -> usize {
    (n / 4).max(GROW_MIN).min(LEAF_CAP.saturating_sub(n)).max(1)
}

/// Converts a key offset into the `u32` stored in `Leaf::ends`.
fn offset(n: usize) -> u32 {
    u32::try_from(n).expect("leaf key bytes exceed u32::MAX")
}

impl Leaf {
    /// A leaf holding one entry, allocated exactly.
    fn with_entry(key: &[u8], loc: Loc) -> Leaf {
        Leaf::from_parts(key, &[offset(key.len())], &[loc])
    }

    /// A leaf holding exact copies of the given packed parts (`ends` relative to `keys`).
    fn from_parts(keys: &[u8], ends: &[u32], locs: &[Loc]) -> Leaf {
        let mut leaf = Leaf {
            keys: keys.to_vec(),
            ends: ends.to_vec(),
            locs: locs.to_vec(),
            heads: Vec::new(),
            skip: 0,
        };
        leaf.recompute_heads();
        leaf
    }

    /// Sets `skip` to the longest prefix all keys share (that of the first and the last
    /// key, as they are sorted) and recomputes every head, allocated exactly.
    fn recompute_heads(&mut self) {
        let n = self.len();
        self.skip = match n {
            0 => 0,
            _ => offset(common_prefix(self.first_key(), self.last_key())),
        };
        let skip = self.skip as usize;
        let mut heads = Vec::with_capacity(self.locs.capacity());
        heads.extend((0..n).map(|i| head(self.key(i), skip)));
        self.heads = heads;
    }

    fn len(&self) -> usize {
        self.locs.len()
    }

    /// Start offset of key `i` in `keys`.
    fn start(&self, i: usize) -> usize {
        match i {
            0 => 0,
            _ => self.ends[i - 1] as usize,
        }
    }

    fn key(&self, i: usize) -> &[u8] {
        &self.keys[self.start(i)..self.ends[i] as usize]
    }

    fn first_key(&self) -> &[u8] {
        self.key(0)
    }

    fn last_key(&self) -> &[u8] {
        self.key(self.len() - 1)
    }

    /// The entries in ascending order.
    fn iter(&self) -> impl Iterator<Item = (&[u8], Loc)> + '_ {
        let mut start = 0;
        self.ends.iter().zip(&self.locs).map(move |(&end, &loc)| {
            let key = &self.keys[start..end as usize];
            start = end as usize;
            (key, loc)
        })
    }

    /// Loads the cache lines of `ends` and of small `keys` buffers with independent reads,
    /// so that their cache misses overlap instead of being paid one after another by the
    /// dependent steps of a binary search (a safe stand-in for prefetching).
    fn warm(&self) {
        let mut sum = 0u32;
        for chunk in self.heads.chunks(CACHE_LINE / size_of::<u32>()) {
            sum = sum.wrapping_add(chunk[0]);
        }
        std::hint::black_box(sum);
    }

    /// `Ok(index of key)` or `Err(index where it would be inserted)`.
    ///
    /// Keys not starting with the shared prefix fall before or after every entry; the
    /// others are placed by a binary search over the heads, and only the entries whose
    /// head equals the key's have their bytes compared.
    fn search(&self, key: &[u8]) -> Result<usize, usize> {
        let n = self.len();
        if n == 0 {
            return Err(0);
        }
        self.warm();
        let skip = self.skip as usize;
        let shared = &self.keys[..skip];
        match key.get(..skip) {
            Some(p) if p == shared => {}
            _ => {
                return match key.cmp(shared) {
                    Ordering::Less => Err(0),
                    _ => Err(n),
                };
            }
        }
        let h = head(key, skip);
        let mut i = self.heads.partition_point(|&x| x < h);
        while i < n && self.heads[i] == h {
            match self.key(i).cmp(key) {
                Ordering::Less => i += 1,
                Ordering::Equal => return Ok(i),
                Ordering::Greater => return Err(i),
            }
        }
        Err(i)
    }

    /// Index of the first key `>= key`.
    fn lower_bound(&self, key: &[u8]) -> usize {
        self.search(key).unwrap_or_else(|i| i)
    }

    /// Index of the first key `> key`.
    fn upper_bound(&self, key: &[u8]) -> usize {
        match self.search(key) {
            Ok(i) => i + 1,
            Err(i) => i,
        }
    }

    /// Spare key bytes to keep for `extra` more entries, judged by the average key length.
    fn key_slack(&self, extra: usize) -> usize {
        let avg = self.keys.len() / self.len().max(1);
        avg.saturating_mul(extra).min(KEY_SLACK_MAX)
    }

    /// Makes room for one more entry with a key of `klen` bytes, growing by small exact steps.
    fn reserve_for(&mut self, klen: usize) {
        let step = grow_step(self.len());
        if self.locs.len() == self.locs.capacity() {
            self.locs.reserve_exact(step);
        }
        if self.ends.len() == self.ends.capacity() {
            self.ends.reserve_exact(step);
        }
        if self.heads.len() == self.heads.capacity() {
            self.heads.reserve_exact(step);
        }
        if self.keys.capacity() - self.keys.len() < klen {
            let slack = self.key_slack(step - 1);
            self.keys.reserve_exact(klen + slack);
        }
    }

    /// Inserts an entry at position `i` (which must keep the keys ascending).
    fn insert_at(&mut self, i: usize, key: &[u8], loc: Loc) {
        self.reserve_for(key.len());
        let start = self.start(i);
        let old_len = self.keys.len();
        self.keys.resize(old_len + key.len(), 0);
        self.keys.copy_within(start..old_len, start + key.len());
        self.keys[start..start + key.len()].copy_from_slice(key);
        let klen = offset(key.len());
        self.ends.insert(i, offset(start) + klen);
        for end in &mut self.ends[i + 1..] {
            *end += klen;
        }
        self.locs.insert(i, loc);
        let skip = self.skip as usize;
        // Only a new first or last key can share less than `skip` bytes with the others.
        let other = if i == 0 { self.len() - 1 } else { 0 };
        if common_prefix(key, self.key(other)) < skip {
            self.recompute_heads();
        } else {
            self.heads.insert(i, head(key, skip));
        }
    }

    /// Removes entry `i` and returns its location.
    fn remove_at(&mut self, i: usize) -> Loc {
        let (start, end) = (self.start(i), self.ends[i] as usize);
        self.keys.drain(start..end);
        self.ends.remove(i);
        let klen = offset(end - start);
        for e in &mut self.ends[i..] {
            *e -= klen;
        }
        let loc = self.locs.remove(i);
        self.heads.remove(i);
        self.trim_excess();
        loc
    }

    /// Gives back spare capacity accumulated by removals (with hysteresis).
    fn trim_excess(&mut self) {
        let n = self.len();
        let step = grow_step(n);
        if self.locs.capacity() > n + 2 * step {
            self.locs.shrink_to(n + step);
        }
        if self.ends.capacity() > n + 2 * step {
            self.ends.shrink_to(n + step);
        }
        if self.heads.capacity() > n + 2 * step {
            self.heads.shrink_to(n + step);
        }
        let slack = self.key_slack(step);
        if self.keys.capacity() - self.keys.len() > 2 * slack + 16 {
            self.keys.shrink_to(self.keys.len() + slack);
        }
    }

    fn shrink_to_fit(&mut self) {
        self.keys.shrink_to_fit();
        self.ends.shrink_to_fit();
        self.locs.shrink_to_fit();
        self.heads.shrink_to_fit();
    }

    /// Moves entries `at..` into a new, exactly allocated leaf and shrinks `self` to fit.
    fn split_off(&mut self, at: usize) -> Leaf {
        let kstart = self.start(at);
        let base = offset(kstart);
        let ends: Vec<u32> = self.ends[at..].iter().map(|&e| e - base).collect();
        let right = Leaf::from_parts(&self.keys[kstart..], &ends, &self.locs[at..]);
        self.keys.truncate(kstart);
        self.ends.truncate(at);
        self.locs.truncate(at);
        self.shrink_to_fit();
        self.recompute_heads();
        right
    }

    /// Appends all entries of `other`, whose keys must all be greater than those of `self`.
    fn append(&mut self, other: Leaf) {
        if self.locs.is_empty() {
            *self = other;
            return;
        }
        let base = offset(self.keys.len());
        self.keys.reserve_exact(other.keys.len());
        self.keys.extend_from_slice(&other.keys);
        self.ends.reserve_exact(other.ends.len());
        self.ends.extend(other.ends.iter().map(|&e| e + base));
        self.locs.reserve_exact(other.locs.len());
        self.locs.extend_from_slice(&other.locs);
        if self.locs.capacity() > LEAF_CAP {
            self.shrink_to_fit();
        }
        self.recompute_heads();
    }

    /// Heap bytes of the three vectors, by capacity.
    fn heap_bytes(&self) -> usize {
        self.keys.capacity()
            + self.ends.capacity() * size_of::<u32>()
            + self.locs.capacity() * size_of::<Loc>()
            + self.heads.capacity() * size_of::<u32>()
    }
}

/// The shortest prefix of `right` that is greater than `left` (requires `left < right`;
/// otherwise the result is some prefix of `right`).
fn separator(left: &[u8], right: &[u8]) -> Sep {
    debug_assert!(left < right);
    let common = left.iter().zip(right).take_while(|(a, b)| a == b).count();
    Sep::new(&right[..(common + 1).min(right.len())])
}

/// Whether `key` is at or above `lower`.
fn above(key: &[u8], lower: Bound<&[u8]>) -> bool {
    match lower {
        Bound::Included(l) => key >= l,
        Bound::Excluded(l) => key > l,
        Bound::Unbounded => true,
    }
}

/// Whether `key` is at or below `upper`.
fn below(key: &[u8], upper: Bound<&[u8]>) -> bool {
    match upper {
        Bound::Included(u) => key <= u,
        Bound::Excluded(u) => key < u,
        Bound::Unbounded => true,
    }
}

/// The ordered index of one shard: every live key and the location of its newest record.
///
/// Keys are byte strings (cairn limits them to 64 KiB; the index itself only needs a leaf's
/// concatenated keys to fit in `u32`). Memory use is roughly `key_len + 20` bytes per entry
/// (measured for 8-byte keys: 26.5 when loaded in order, 28.7 when inserted at random).
#[derive(Default)]
pub struct Index {
    /// Leaves by separator; the first separator is always the empty key.
    leaves: BTreeMap<Sep, Leaf>,
    /// Number of entries.
    len: usize,
    /// The same entries by key hash, for point lookups ([`Index::candidate`]), unless
    /// turned off (`Options::hash_index`).
    hashes: Option<HashIndex>,
}

impl fmt::Debug for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Index")
            .field("len", &self.len)
            .field("leaves", &self.leaves.len())
            .finish()
    }
}

impl Index {
    /// An empty index with a hash side.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn new() -> Index {
        Index {
            hashes: Some(HashIndex::default()),
            ..Index::default()
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the index has no entries.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The leaf that `key` belongs in, if there are any leaves.
    fn leaf(&self, key: &[u8]) -> Option<(&[u8], &Leaf)> {
        let (sep, leaf) = self
            .leaves
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()?;
        Some((sep.as_bytes(), leaf))
    }

    /// The leaf that `key` belongs in, mutably, if there are any leaves.
    fn leaf_mut(&mut self, key: &[u8]) -> Option<&mut Leaf> {
        let (_, leaf) = self
            .leaves
            .range_mut::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()?;
        Some(leaf)
    }

    /// The location stored for `key` (exact: from the ordered index).
    pub fn get(&self, key: &[u8]) -> Option<Loc> {
        let (_, leaf) = self.leaf(key)?;
        leaf.search(key).ok().map(|i| leaf.locs[i])
    }

    /// A quick guess at the location of `key`, from the hash side: `None` only if `key` has
    /// no entry; otherwise usually its location, but possibly that of another key with the
    /// same hash tag (see `hash_index`). The caller checks the key of the record there and
    /// asks [`Index::get`] if it differs.
    pub fn candidate(&self, key: &[u8]) -> Option<Loc> {
        match &self.hashes {
            Some(hashes) => hashes.find(tag_of(key)),
            None => self.get(key),
        }
    }

    /// Starts loading the hash-side bucket of `key` into the CPU's cache (see
    /// [`HashIndex::prefetch`]), so that inserting it soon after overlaps that memory
    /// access with other work. A hint only.
    #[inline]
    pub fn prefetch(&self, key: &[u8]) {
        if let Some(h) = &self.hashes {
            h.prefetch(tag_of(key));
        }
    }

    /// Whether `key`'s entry is at `loc` (the record there holds `key`, as compaction knows
    /// when it asks): from the hash side when it finds `loc` (no other key's entry can be
    /// at the same place) or nothing, else from the ordered index.
    pub fn is_at(&self, key: &[u8], loc: Loc) -> bool {
        match self.hashes.as_ref().map(|h| h.find(tag_of(key))) {
            Some(Some(found)) if found == loc => true,
            Some(None) => false,
            _ => self.get(key) == Some(loc),
        }
    }

    /// Whether `key` has an entry (the hash side answers "no" for sure).
    pub fn contains(&self, key: &[u8]) -> bool {
        self.candidate(key).is_some() && (self.hashes.is_none() || self.get(key).is_some())
    }

    /// Inserts or replaces; returns the previous location.
    pub fn insert(&mut self, key: &[u8], loc: Loc) -> Option<Loc> {
        let Some(leaf) = self.leaf_mut(key) else {
            self.leaves
                .insert(Sep::new(&[]), Leaf::with_entry(key, loc));
            self.len = 1;
            if let Some(hashes) = &mut self.hashes {
                hashes.insert(tag_of(key), loc);
            }
            return None;
        };
        match leaf.search(key) {
            Ok(i) => {
                let old = std::mem::replace(&mut leaf.locs[i], loc);
                if let Some(hashes) = &mut self.hashes {
                    let moved = hashes.replace(tag_of(key), old, loc);
                    debug_assert!(moved, "hash index lacks an entry");
                }
                return Some(old);
            }
            Err(i) if leaf.len() < LEAF_CAP => leaf.insert_at(i, key, loc),
            Err(i) => {
                let at_end = i == leaf.len();
                self.split_insert(key, loc, at_end);
            }
        }
        if let Some(hashes) = &mut self.hashes {
            hashes.insert(tag_of(key), loc);
        }
        self.len += 1;
        None
    }

    /// Inserts a new key whose leaf is full, by splitting that leaf.
    ///
    /// Appending past the last key of the last leaf (sequential loading) leaves the full leaf
    /// as it is and starts a new one; anything else splits the leaf in half.
    fn split_insert(&mut self, key: &[u8], loc: Loc, at_end: bool) {
        let is_append = at_end
            && self
                .leaves
                .range::<[u8], _>((Bound::Excluded(key), Bound::Unbounded))
                .next()
                .is_none();
        let leaf = self.leaf_mut(key).expect("a full leaf exists");
        let right = if is_append {
            leaf.shrink_to_fit();
            Leaf::with_entry(key, loc)
        } else {
            let mut right = leaf.split_off(LEAF_CAP / 2);
            if key < right.first_key() {
                leaf.insert_at(leaf.lower_bound(key), key, loc);
            } else {
                right.insert_at(right.lower_bound(key), key, loc);
            }
            right
        };
        let sep = separator(leaf.last_key(), right.first_key());
        self.leaves.insert(sep, right);
    }

    /// Removes; returns the previous location.
    pub fn remove(&mut self, key: &[u8]) -> Option<Loc> {
        let leaf = self.leaf_mut(key)?;
        let i = leaf.search(key).ok()?;
        let loc = leaf.remove_at(i);
        let small = leaf.len() < MERGE_BELOW;
        self.len -= 1;
        if let Some(hashes) = &mut self.hashes {
            let removed = hashes.remove(tag_of(key), loc);
            debug_assert!(removed, "hash index lacks an entry");
        }
        if small {
            self.rebalance(key);
        }
        Some(loc)
    }

    /// Merges the (small or empty) leaf that `key` belongs in with a neighbour if the result
    /// is small enough, and always gets rid of it if it is empty.
    fn rebalance(&mut self, key: &[u8]) {
        enum Plan {
            IntoPrev(Sep),
            TakeNext(Sep),
            Clear,
            Keep,
        }
        let plan = {
            let mut upto = self
                .leaves
                .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)));
            let Some((sep, leaf)) = upto.next_back() else {
                return;
            };
            let n = leaf.len();
            match upto.next_back() {
                Some((_, prev)) if n == 0 || prev.len() + n <= MERGE_MAX => {
                    Plan::IntoPrev(sep.clone())
                }
                // Here, if `n == 0`, there is no previous leaf.
                _ => match self
                    .leaves
                    .range::<[u8], _>((Bound::Excluded(key), Bound::Unbounded))
                    .next()
                {
                    Some((next_sep, next)) if n == 0 || n + next.len() <= MERGE_MAX => {
                        Plan::TakeNext(next_sep.clone())
                    }
                    None if n == 0 => Plan::Clear,
                    _ => Plan::Keep,
                },
            }
        };
        match plan {
            Plan::IntoPrev(sep) => {
                let leaf = self.leaves.remove(sep.as_bytes()).expect("leaf exists");
                self.leaf_mut(key)
                    .expect("previous leaf exists")
                    .append(leaf);
            }
            Plan::TakeNext(next_sep) => {
                let next = self
                    .leaves
                    .remove(next_sep.as_bytes())
                    .expect("next leaf exists");
                self.leaf_mut(key).expect("leaf exists").append(next);
            }
            Plan::Clear => self.leaves.clear(),
            Plan::Keep => {}
        }
    }

    /// Replaces the entry only if it currently equals `expected`; returns whether it did.
    /// Used by compaction.
    pub fn replace_if(&mut self, key: &[u8], expected: Loc, new: Loc) -> bool {
        let Some(leaf) = self.leaf_mut(key) else {
            return false;
        };
        match leaf.search(key) {
            Ok(i) if leaf.locs[i] == expected => {
                leaf.locs[i] = new;
                if let Some(hashes) = &mut self.hashes {
                    let moved = hashes.replace(tag_of(key), expected, new);
                    debug_assert!(moved, "hash index lacks an entry");
                }
                true
            }
            _ => false,
        }
    }

    /// Appends to `out` up to `limit` entries with lower <= key <= upper (as the Bounds
    /// say), in ascending key order. Takes O(log n + limit) time; `lower > upper` yields
    /// nothing.
    pub fn scan_forward(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        limit: usize,
        out: &mut Vec<(Vec<u8>, Loc)>,
    ) {
        if limit == 0 {
            return;
        }
        let (start, mut pos) = match lower {
            Bound::Unbounded => (Bound::Unbounded, 0),
            Bound::Included(k) | Bound::Excluded(k) => {
                let Some((sep, leaf)) = self.leaf(k) else {
                    return;
                };
                let pos = match lower {
                    Bound::Included(_) => leaf.lower_bound(k),
                    _ => leaf.upper_bound(k),
                };
                (Bound::Included(sep), pos)
            }
        };
        let mut taken = 0;
        for leaf in self
            .leaves
            .range::<[u8], _>((start, Bound::Unbounded))
            .map(|(_, l)| l)
        {
            for (key, loc) in leaf.iter().skip(pos) {
                if !below(key, upper) {
                    return;
                }
                out.push((key.to_vec(), loc));
                taken += 1;
                if taken == limit {
                    return;
                }
            }
            pos = 0;
        }
    }

    /// Same as [`Index::scan_forward`] but in descending key order, starting from the upper
    /// end.
    pub fn scan_backward(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        limit: usize,
        out: &mut Vec<(Vec<u8>, Loc)>,
    ) {
        if limit == 0 {
            return;
        }
        // `end`: the last leaf to visit; `first_stop`: where to start in it (exclusive).
        let (end, mut first_stop) = match upper {
            Bound::Unbounded => (Bound::Unbounded, None),
            Bound::Included(k) | Bound::Excluded(k) => {
                let Some((sep, leaf)) = self.leaf(k) else {
                    return;
                };
                let stop = match upper {
                    Bound::Included(_) => leaf.upper_bound(k),
                    _ => leaf.lower_bound(k),
                };
                (Bound::Included(sep), Some(stop))
            }
        };
        let mut taken = 0;
        for leaf in self
            .leaves
            .range::<[u8], _>((Bound::Unbounded, end))
            .rev()
            .map(|(_, l)| l)
        {
            let stop = first_stop.take().unwrap_or(leaf.len());
            for i in (0..stop).rev() {
                let key = leaf.key(i);
                if !above(key, lower) {
                    return;
                }
                out.push((key.to_vec(), leaf.locs[i]));
                taken += 1;
                if taken == limit {
                    return;
                }
            }
        }
    }

    /// Heap bytes used by the index (leaf vectors by capacity, separators stored out of
    /// line, plus an estimate of BTreeMap node overhead per leaf), for stats. Takes
    /// O(number of leaves); within about a byte per entry of the allocations measured by a
    /// counting allocator (malloc's own per-allocation overhead is not included).
    pub fn memory_bytes(&self) -> usize {
        self.leaves
            .iter()
            .map(|(sep, leaf)| sep.heap_bytes() + leaf.heap_bytes() + MAP_BYTES_PER_LEAF)
            .sum::<usize>()
            + self.hashes.as_ref().map_or(0, HashIndex::heap_bytes)
    }

    /// Builds an index from entries whose keys are strictly ascending (bulk load at open:
    /// leaves filled to about 90 %, no per-entry searching).
    ///
    /// The order is checked in every build (one key comparison per entry): from the first
    /// entry whose key is not above the previous one, the rest are inserted one by one, a
    /// later entry for a key replacing an earlier one. Any input thus gives the index that
    /// inserting the entries in turn would, only slower when they are out of order.
    /// `hashed`: whether to keep the hash side (see [`Index::candidate`]).
    pub fn from_sorted<K: AsRef<[u8]>>(
        entries: impl IntoIterator<Item = (K, Loc)>,
        hashed: bool,
    ) -> Index {
        let mut leaves: Vec<(Sep, Leaf)> = Vec::new();
        // The entries of the leaf being filled.
        let mut keys: Vec<u8> = Vec::new();
        let mut ends: Vec<u32> = Vec::with_capacity(BULK_FILL);
        let mut locs: Vec<Loc> = Vec::with_capacity(BULK_FILL);
        let mut len = 0;
        let mut entries = entries.into_iter();
        // The first entry out of order, if any: it and the rest are inserted one by one.
        let mut unsorted = None;
        for (key, loc) in entries.by_ref() {
            let k = key.as_ref();
            if locs.len() == BULK_FILL {
                Self::push_leaf(&mut leaves, Leaf::from_parts(&keys, &ends, &locs));
                keys.clear();
                ends.clear();
                locs.clear();
            }
            let prev = match ends.len() {
                0 => leaves.last().map(|(_, leaf)| leaf.last_key()),
                n => Some(&keys[if n == 1 { 0 } else { ends[n - 2] as usize }..]),
            };
            if prev.is_some_and(|prev| prev >= k) {
                unsorted = Some((key, loc));
                break;
            }
            keys.extend_from_slice(k);
            ends.push(offset(keys.len()));
            locs.push(loc);
            len += 1;
        }
        if !locs.is_empty() {
            let tail = Leaf::from_parts(&keys, &ends, &locs);
            match leaves.last_mut() {
                Some((_, last)) if last.len() + tail.len() <= LEAF_CAP => last.append(tail),
                _ => Self::push_leaf(&mut leaves, tail),
            }
        }
        let mut index = Index {
            leaves: leaves.into_iter().collect(),
            len,
            hashes: None,
        };
        if let Some(first) = unsorted {
            for (key, loc) in std::iter::once(first).chain(entries.by_ref()) {
                index.insert(key.as_ref(), loc);
            }
        }
        // The input (a whole shard's keys and locations at open) is freed before the
        // hash side's build takes its buffers.
        drop(entries);
        if hashed {
            let mut tagged = Vec::with_capacity(index.len);
            index.for_each(|key, loc| tagged.push((tag_of(key), loc)));
            index.hashes = Some(HashIndex::from_tagged(tagged));
        }
        index
    }

    /// Appends a non-empty leaf whose keys follow those of the last leaf in `leaves`.
    fn push_leaf(leaves: &mut Vec<(Sep, Leaf)>, leaf: Leaf) {
        let sep = match leaves.last() {
            Some((_, prev)) => separator(prev.last_key(), leaf.first_key()),
            None => Sep::new(&[]),
        };
        leaves.push((sep, leaf));
    }

    /// Visits all entries in ascending order (used by tests, verify and stats).
    pub fn for_each(&self, mut f: impl FnMut(&[u8], Loc)) {
        for leaf in self.leaves.values() {
            for (key, loc) in leaf.iter() {
                f(key, loc);
            }
        }
    }
}

#[cfg(test)]
mod tests;
