//! The in-memory ordered index of one shard.
//!
//! It maps every live key to the [`Loc`] of its newest record on disk. It is a two-level
//! packed B+tree: an outer [`BTreeMap`] from a *separator* to a leaf, and leaves that each
//! hold up to `LEAF_CAP` (128) entries packed into four vectors (all keys concatenated, their
//! end offsets, their locations, and a 4-byte *head* per key: the key's bytes after the
//! prefix all keys of the leaf share, as an integer), or, where every key of a leaf has
//! one short length, the shared prefix once and each key's rest as two integers
//! ([`leaf`]: 8 bytes a key less for HaloDB's 8-byte keys). A leaf is searched by a binary
//! search over its heads (at most 512 contiguous bytes), and only keys whose head equals
//! the probe's are compared, so a lookup in a leaf touches a few cache lines rather than
//! one key per step. Point operations cost one `BTreeMap` search plus one leaf search;
//! scans cost one of each plus the entries returned.
//!
//! Beside the ordered structure, a hash side ([`crate::hash_index`], unless turned off)
//! holds every entry's location by a tag of the key's hash: [`Index::candidate`] answers a
//! point lookup with about one cache miss, for reads that check the key they find.
//!
//! Keys of declared regions of numbered rows ([`crate::numbered`]) are not in either: each
//! region has an exact table of its own, and every operation on such a key goes there
//! alone (ordered scans never see them; [`Index::numbered_keys`] lists them).
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
use crate::numbered::{Region, KEY_LEN};
use leaf::{key_at, offset, Leaf, LeafKey};

mod leaf;

/// Maximum number of entries in one leaf.
const LEAF_CAP: usize = 128;
/// Entries per leaf when bulk loading with [`Index::from_sorted`] (about 90 % of `LEAF_CAP`).
const BULK_FILL: usize = LEAF_CAP * 9 / 10;
/// A leaf with fewer entries than this after a removal tries to merge with a neighbour.
const MERGE_BELOW: usize = LEAF_CAP / 4;
/// Two leaves are merged only if the result holds at most this many entries.
const MERGE_MAX: usize = LEAF_CAP * 3 / 4;
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

/// The buffers of a bulk load ([`Index::from_sorted_in`]): the hash side's tags, taken
/// as the entries pass, and the radix passes' second buffer, 16 bytes a key each. Kept
/// between builds, they are written into pages already mapped: fresh ones cost a page
/// fault and a zeroed page per 4 KiB, every time.
#[derive(Default)]
pub struct BulkBuffers {
    tagged: Vec<(u32, Loc)>,
    aux: Vec<(u32, Loc)>,
    /// The tags of each region of numbered rows.
    numbered: Vec<Vec<(u32, Loc)>>,
}

/// How a shard's index is built (from the store's `Options`).
#[derive(Clone, Debug, Default)]
pub struct Shape {
    /// Whether the ordered keys are also kept by hash (`Options::hash_index`).
    pub hashed: bool,
    /// The regions of numbered rows kept in exact tables (`Options::numbered_rows`).
    pub numbered: Vec<Region>,
}

/// The numbered rows of one region, by their exact tags.
struct Numbered {
    region: Region,
    table: HashIndex,
}

/// The region among `regions` that holds internal key `key`, and its tag there.
#[inline]
fn numbered_in(regions: &[Region], key: &[u8]) -> Option<(usize, u32)> {
    if key.len() != KEY_LEN {
        return None;
    }
    regions
        .iter()
        .enumerate()
        .find_map(|(i, r)| r.tag_of(key).map(|t| (i, t)))
}

/// The ordered index of one shard: every live key and the location of its newest record.
///
/// Keys are byte strings (cairn limits them to 64 KiB; the index itself only needs a leaf's
/// concatenated keys to fit in `u32`). Memory use is roughly `key_len + 20` bytes per entry
/// in packed leaves, 20 in fixed ones (measured for 8-byte keys, ordered side: 22.0 when
/// loaded in order, 24.7 when inserted at random; 29.8 and 33.4 before fixed leaves).
#[derive(Default)]
pub struct Index {
    /// Leaves by separator; the first separator is always the empty key.
    leaves: BTreeMap<Sep, Leaf>,
    /// Number of entries (numbered rows included).
    len: usize,
    /// The same entries by key hash, for point lookups ([`Index::candidate`]), unless
    /// turned off (`Options::hash_index`).
    hashes: Option<HashIndex>,
    /// The numbered rows of each declared region (not in `leaves` or `hashes`).
    numbered: Vec<Numbered>,
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

    /// Which of `self.numbered` holds `key`, and its tag there.
    #[inline]
    fn numbered_slot(&self, key: &[u8]) -> Option<(usize, u32)> {
        if self.numbered.is_empty() || key.len() != KEY_LEN {
            return None;
        }
        self.numbered
            .iter()
            .enumerate()
            .find_map(|(i, n)| n.region.tag_of(key).map(|t| (i, t)))
    }

    /// The table of numbered rows that holds `key`, and its tag there.
    #[inline]
    fn numbered(&self, key: &[u8]) -> Option<(&HashIndex, u32)> {
        let (i, t) = self.numbered_slot(key)?;
        Some((&self.numbered[i].table, t))
    }

    /// Like [`Index::numbered`], mutably.
    #[inline]
    fn numbered_mut(&mut self, key: &[u8]) -> Option<(&mut HashIndex, u32)> {
        let (i, t) = self.numbered_slot(key)?;
        Some((&mut self.numbered[i].table, t))
    }

    /// Appends to `out` the numbers of the rows of region (`ns`, `tag`) held in its
    /// table, in no particular order (none when the region is not declared; rows whose
    /// numbers do not fit a table are in the ordered index).
    pub fn numbered_keys(&self, ns: u8, tag: u8, out: &mut Vec<u64>) {
        for n in &self.numbered {
            if n.region == (Region { ns, tag }) {
                n.table.for_each(|t, _| out.push(Region::number_of(t)));
            }
        }
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
        if let Some((table, t)) = self.numbered(key) {
            return table.find(t);
        }
        let (_, leaf) = self.leaf(key)?;
        leaf.search(key).ok().map(|i| leaf.locs[i])
    }

    /// A quick guess at the location of `key`, from the hash side: `None` only if `key` has
    /// no entry; otherwise usually its location, but possibly that of another key with the
    /// same hash tag (see `hash_index`). The caller checks the key of the record there and
    /// asks [`Index::get`] if it differs.
    pub fn candidate(&self, key: &[u8]) -> Option<Loc> {
        if let Some((table, t)) = self.numbered(key) {
            return table.find(t);
        }
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
        if let Some((table, t)) = self.numbered(key) {
            table.prefetch(t);
        } else if let Some(h) = &self.hashes {
            h.prefetch(tag_of(key));
        }
    }

    /// Whether `key`'s entry is at `loc` (the record there holds `key`, as compaction knows
    /// when it asks): from the hash side when it finds `loc` (no other key's entry can be
    /// at the same place) or nothing, else from the ordered index.
    pub fn is_at(&self, key: &[u8], loc: Loc) -> bool {
        if let Some((table, t)) = self.numbered(key) {
            return table.find(t) == Some(loc);
        }
        match self.hashes.as_ref().map(|h| h.find(tag_of(key))) {
            Some(Some(found)) if found == loc => true,
            Some(None) => false,
            _ => self.get(key) == Some(loc),
        }
    }

    /// Whether `key` has an entry (the hash side answers "no" for sure).
    pub fn contains(&self, key: &[u8]) -> bool {
        if let Some((table, t)) = self.numbered(key) {
            return table.find(t).is_some();
        }
        self.candidate(key).is_some() && (self.hashes.is_none() || self.get(key).is_some())
    }

    /// Inserts or replaces; returns the previous location.
    pub fn insert(&mut self, key: &[u8], loc: Loc) -> Option<Loc> {
        if let Some((table, t)) = self.numbered_mut(key) {
            let old = table.find(t);
            match old {
                Some(old) => {
                    table.replace(t, old, loc);
                }
                None => {
                    table.insert(t, loc);
                    self.len += 1;
                }
            }
            return old;
        }
        let Some(leaf) = self.leaf_mut(key) else {
            self.leaves
                .insert(Sep::new(&[]), Leaf::with_entry(key, loc));
            self.len += 1;
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
        let Some(leaf) = self.leaf_mut(key) else {
            debug_assert!(false, "a full leaf exists");
            return;
        };
        let right = if is_append {
            leaf.shrink_to_fit();
            Leaf::with_entry(key, loc)
        } else {
            let mut right = leaf.split_off(LEAF_CAP / 2);
            if key < &*right.first_key() {
                leaf.insert_at(leaf.lower_bound(key), key, loc);
            } else {
                right.insert_at(right.lower_bound(key), key, loc);
            }
            right
        };
        let sep = separator(&leaf.last_key(), &right.first_key());
        self.leaves.insert(sep, right);
    }

    /// Removes; returns the previous location.
    pub fn remove(&mut self, key: &[u8]) -> Option<Loc> {
        if let Some((table, t)) = self.numbered_mut(key) {
            let loc = table.find(t)?;
            table.remove(t, loc);
            self.len -= 1;
            return Some(loc);
        }
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
            // The plan names leaves found above: both exist.
            Plan::IntoPrev(sep) => {
                if let Some(leaf) = self.leaves.remove(sep.as_bytes()) {
                    match self.leaf_mut(key) {
                        Some(prev) => prev.append(leaf),
                        None => {
                            self.leaves.insert(sep, leaf);
                        }
                    }
                }
            }
            Plan::TakeNext(next_sep) => {
                if let Some(next) = self.leaves.remove(next_sep.as_bytes()) {
                    match self.leaf_mut(key) {
                        Some(leaf) => leaf.append(next),
                        None => {
                            self.leaves.insert(next_sep, next);
                        }
                    }
                }
            }
            Plan::Clear => self.leaves.clear(),
            Plan::Keep => {}
        }
    }

    /// Replaces the entry only if it currently equals `expected`; returns whether it did.
    /// Used by compaction.
    pub fn replace_if(&mut self, key: &[u8], expected: Loc, new: Loc) -> bool {
        if let Some((table, t)) = self.numbered_mut(key) {
            return table.replace(t, expected, new);
        }
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
            let went_on = leaf.visit_from(pos, |key, loc| {
                if !below(key, upper) {
                    return false;
                }
                out.push((key.to_vec(), loc));
                taken += 1;
                taken < limit
            });
            if !went_on {
                return;
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
                if !above(&key, lower) {
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
            + self
                .numbered
                .iter()
                .map(|n| n.table.heap_bytes())
                .sum::<usize>()
    }

    /// [`Index::from_sorted_in`] with buffers of its own.
    #[cfg(test)]
    pub fn from_sorted<K: AsRef<[u8]>>(
        entries: impl IntoIterator<Item = (K, Loc)>,
        hashed: bool,
    ) -> Index {
        let shape = Shape {
            hashed,
            numbered: Vec::new(),
        };
        Self::from_sorted_in(entries, &shape, &mut BulkBuffers::default())
    }

    /// Builds an index from entries whose keys are strictly ascending (bulk load at open:
    /// leaves filled to about 90 %, no per-entry searching).
    ///
    /// The order is checked in every build (one key comparison per entry): from the first
    /// entry whose key is not above the previous one, the rest are inserted one by one, a
    /// later entry for a key replacing an earlier one. Any input thus gives the index that
    /// inserting the entries in turn would, only slower when they are out of order.
    /// `shape`: whether to keep the hash side (see [`Index::candidate`]), and the regions
    /// of numbered rows to keep in tables of their own.
    ///
    /// `bufs` are left empty with their room kept for the next build (open builds one
    /// index per shard on each of its threads).
    pub fn from_sorted_in<K: AsRef<[u8]>>(
        entries: impl IntoIterator<Item = (K, Loc)>,
        shape: &Shape,
        bufs: &mut BulkBuffers,
    ) -> Index {
        let hashed = shape.hashed;
        let regions = &shape.numbered;
        bufs.numbered.resize_with(regions.len(), Vec::new);
        for tags in &mut bufs.numbered {
            tags.clear();
        }
        let mut leaves: Vec<(Sep, Leaf)> = Vec::new();
        // The entries of the leaf being filled.
        let mut keys: Vec<u8> = Vec::new();
        let mut ends: Vec<u32> = Vec::with_capacity(BULK_FILL);
        let mut locs: Vec<Loc> = Vec::with_capacity(BULK_FILL);
        let mut len = 0;
        let mut entries = entries.into_iter();
        // The hash side's tags, taken from the input keys as they pass (a second walk
        // over the leaves would rebuild every key of a fixed leaf), with room for as many
        // as the input says it may hold (room not written to costs no memory).
        let (least, most) = entries.size_hint();
        let tagged = &mut bufs.tagged;
        tagged.clear();
        if hashed {
            crate::room::make_room(tagged, most.unwrap_or(least));
        }
        // The first entry out of order, if any: it and the rest are inserted one by one.
        let mut unsorted = None;
        // The last numbered row of each region.
        let mut last_numbered: Vec<Option<u64>> = vec![None; regions.len()];
        for (key, loc) in entries.by_ref() {
            let k = key.as_ref();
            // Numbered rows go to their tables, each region's in ascending order too
            // (a repeated key is out of order: the inserts below replace it).
            // (A numbered key is 10 bytes: `numbered_in` checks it.)
            let numbered =
                numbered_in(regions, k).zip(k.get(2..).and_then(|b| <[u8; 8]>::try_from(b).ok()));
            if let Some(((i, t), n)) = numbered {
                let n = u64::from_be_bytes(n);
                if last_numbered[i].is_some_and(|last| last >= n) {
                    unsorted = Some((key, loc));
                    break;
                }
                bufs.numbered[i].push((t, loc));
                last_numbered[i] = Some(n);
                len += 1;
                continue;
            }
            if locs.len() == BULK_FILL {
                Self::push_leaf(&mut leaves, Leaf::from_parts(&keys, &ends, &locs));
                keys.clear();
                ends.clear();
                locs.clear();
            }
            let prev = match ends.len() {
                0 => leaves.last().map(|(_, leaf)| leaf.last_key()),
                n => Some(LeafKey::Packed(key_at(&keys, &ends, n - 1))),
            };
            if prev.is_some_and(|prev| &*prev >= k) {
                unsorted = Some((key, loc));
                break;
            }
            keys.extend_from_slice(k);
            ends.push(offset(keys.len()));
            locs.push(loc);
            if hashed {
                tagged.push((tag_of(k), loc));
            }
            len += 1;
        }
        if !locs.is_empty() {
            let tail = Leaf::from_parts(&keys, &ends, &locs);
            match leaves.last_mut() {
                Some((_, last)) if last.len() + tail.len() <= LEAF_CAP => last.append(tail),
                _ => Self::push_leaf(&mut leaves, tail),
            }
        }
        let numbered = regions
            .iter()
            .zip(bufs.numbered.iter_mut())
            .map(|(&region, tags)| Numbered {
                region,
                table: HashIndex::from_tagged(tags, &mut bufs.aux),
            })
            .collect();
        let mut index = Index {
            leaves: leaves.into_iter().collect(),
            len,
            hashes: None,
            numbered,
        };
        if let Some(first) = unsorted {
            // Out of order: the rest one by one (a later entry for a key replaces an
            // earlier one), then the tags from the index itself.
            for (key, loc) in std::iter::once(first).chain(entries.by_ref()) {
                index.insert(key.as_ref(), loc);
            }
            tagged.clear();
            if hashed {
                tagged.reserve_exact(index.len);
                index.for_each_ordered(|key, loc| tagged.push((tag_of(key), loc)));
            }
        }
        // An input that owns its entries (a list of them) is freed before the hash
        // side's build takes its buffers (the tags, 16 bytes a key, were taken beside
        // it). Open's input owns nothing: it merges the shard's records, which open
        // keeps for its next shard.
        drop(entries);
        if hashed {
            index.hashes = Some(HashIndex::from_tagged(tagged, &mut bufs.aux));
        }
        index
    }

    /// Appends a non-empty leaf whose keys follow those of the last leaf in `leaves`.
    fn push_leaf(leaves: &mut Vec<(Sep, Leaf)>, leaf: Leaf) {
        let sep = match leaves.last() {
            Some((_, prev)) => separator(&prev.last_key(), &leaf.first_key()),
            None => Sep::new(&[]),
        };
        leaves.push((sep, leaf));
    }

    /// Visits all entries: the ordered ones in ascending order, then the numbered rows
    /// in no particular order (used by tests and verify).
    pub fn for_each(&self, mut f: impl FnMut(&[u8], Loc)) {
        self.for_each_ordered(&mut f);
        for n in &self.numbered {
            n.table.for_each(|t, loc| f(&n.region.key_of(t), loc));
        }
    }

    /// Visits the entries of the ordered index in ascending order.
    fn for_each_ordered(&self, mut f: impl FnMut(&[u8], Loc)) {
        for leaf in self.leaves.values() {
            leaf.visit_from(0, |key, loc| {
                f(key, loc);
                true
            });
        }
    }
}

#[cfg(test)]
mod tests;
