//! The hash side of a shard's index: the location of every live key by a 32-bit *tag* of
//! its hash, so that a point lookup costs about one cache miss instead of a walk down the
//! ordered index (a dozen dependent misses once the index outgrows the caches).
//!
//! The table holds no keys, so a lookup yields a *candidate*: the location of some live key
//! with the same tag. It never misses a live key (no false negatives); it may name another
//! key's record when two keys share a tag (about `n / 2^32` of lookups in a shard of `n`
//! keys). The caller checks the key stored in the record, as every read does anyway, and
//! asks the ordered index when it differs (see `Shard::get`).
//!
//! Layout: 64 independent parts chosen by the tag's top 6 bits, so that growing one rehashes
//! 1/64 of the table at a time (a short pause for the shard's writers and readers rather
//! than one long one). A part is an open-addressing table of 64-byte buckets, each holding 4
//! tags and their 4 locations in one cache line; a tag's home bucket is given by its low
//! bits (scaled to the part's size) and it is stored in the first bucket from there with a free slot (linear probing
//! over buckets). Tag 0 marks an empty slot and 1 a removed one (a tombstone); real tags
//! are 2 and up. A bucket with an empty slot was never full since the part was last
//! rebuilt, so no tag was pushed past it: a lookup stops there. A part is rebuilt when 7/8
//! of its slots are in use (live or removed), to 7/12 load (it grows by half), and shrunk
//! when under 1/8 live; a bulk load (opening a store) sizes parts for about 1/2 to 3/4
//! load. Each part's sizes come from a ladder of its own (see [`rung`]), so that the parts
//! do not all grow at the same insert. Memory: 16 bytes per slot, 18 to 30 bytes per key
//! in a part, 22 to 23 over a table (the parts' loads spread over the range).

use std::mem::size_of;

use xxhash_rust::xxh3::xxh3_64;

use crate::loc::Loc;
use crate::table_mem::ZeroedArray;

/// Slots per bucket: 4 tags and 4 locations fill one 64-byte cache line.
const SLOTS: usize = 4;
/// Tag of an empty slot.
const EMPTY: u32 = 0;
/// Tag of a slot whose entry was removed.
const TOMB: u32 = 1;
/// The tag's top bits choose the part.
const PART_BITS: u32 = 6;
const PARTS: usize = 1 << PART_BITS;
/// Bits of the tag below the part bits: they choose the home bucket.
const HOME_BITS: u32 = 32 - PART_BITS;
/// Most buckets in a part (every home bucket stays reachable from `HOME_BITS` bits).
const MAX_BUCKETS: usize = 1 << HOME_BITS;
/// Placeholder location of empty slots.
const NO_LOC: Loc = Loc {
    seg: 0,
    off: 0,
    len: 0,
};

/// The tag of `key`: 32 bits of its xxh3 hash not used to choose its shard (the shard is
/// the hash modulo the shard count, from the low bits; grouped numbered rows go by the
/// hash of their number's group instead, which the tag does not depend on either),
/// never `EMPTY` or `TOMB`.
pub fn tag_of(key: &[u8]) -> u32 {
    ((xxh3_64(key) >> 32) as u32).max(TOMB + 1)
}

/// Load (numerator, denominator) of a part after it grew or shrank: 7/12, so that it
/// grows by half before reaching the 7/8 limit.
const GROWN_LOAD: (usize, usize) = (7, 12);
/// Load of a part after a bulk load (opening a store), before its size is taken to its
/// rung: parts load about 1/2 to 3/4 after an open.
const BULK_LOAD: (usize, usize) = (3, 4);

/// A part's sizes grow by half (7/8 load to 7/12), so parts of one size would all grow
/// at nearly the same insert: keys spread evenly, and each holds 1/64 of the shard's. A
/// shard's whole table would then be rehashed in one burst every time it grew by half (a
/// dip of the insert rate to about half, at 1.5× intervals, measured at 10M creates).
/// So part `phase` takes its sizes from a ladder of its own, ⌈1.5^(k + phase/64)⌉
/// buckets: the 64 ladders interleave, and parts reach their limits one after another,
/// spread evenly over each growth by half.
fn rung(min_buckets: usize, phase: u32) -> usize {
    let f = f64::from(phase) / PARTS as f64;
    // From a rung or two below, up to the first that is large enough.
    let mut k = ((min_buckets.max(1) as f64).ln() / 1.5f64.ln() - f - 2.0)
        .floor()
        .max(0.0);
    loop {
        let b = 1.5f64.powf(k + f).ceil();
        // Within 10%: `min_buckets` was rounded up from a load, and a part that grows
        // from one rung must land on the next, not skip it.
        if b * 1.1 >= min_buckets as f64 || b >= MAX_BUCKETS as f64 {
            return (b as usize).clamp(1, MAX_BUCKETS);
        }
        k += 1.0;
    }
}

/// Buckets for `entries` at `load`.
fn buckets_for(entries: usize, load: (usize, usize)) -> usize {
    (entries * load.1)
        .div_ceil(load.0 * SLOTS)
        .clamp(1, MAX_BUCKETS)
}

/// The home bucket of `tag` among `n`: its low bits scaled to `0..n` (any `n`, so that
/// parts can grow by half rather than double).
fn home(tag: u32, n: usize) -> usize {
    let low = u64::from(tag) & (MAX_BUCKETS as u64 - 1);
    ((low * n as u64) >> HOME_BITS) as usize
}

/// Asks the CPU to bring the cache line at `p` in (x86-64; elsewhere nothing).
#[inline]
pub(crate) fn prefetch_line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it never faults and reads nothing architecturally,
    // whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The bucket after `b` of `n`, wrapping around.
fn next(b: usize, n: usize) -> usize {
    if b + 1 == n {
        0
    } else {
        b + 1
    }
}

/// All zero is an empty bucket (tag `EMPTY`, location `NO_LOC`).
#[derive(Clone, Copy, zerocopy::FromZeros)]
#[repr(C, align(64))]
struct Bucket {
    tags: [u32; SLOTS],
    locs: [Loc; SLOTS],
}

/// One part: its buckets (none until the first insert).
#[derive(Default)]
struct Part {
    /// Which of the `PARTS` rungs' offsets this part's sizes take (its number).
    phase: u32,
    buckets: ZeroedArray<Bucket>,
    /// Slots holding a live entry.
    live: usize,
    /// Slots holding a live entry or a tombstone.
    used: usize,
}

impl Part {
    fn slots(&self) -> usize {
        self.buckets.len() * SLOTS
    }

    /// Visits the buckets of `tag`'s probe run, from its home bucket to the first bucket
    /// with an empty slot (included), until `f` returns `Some`.
    fn probe<T>(&self, tag: u32, mut f: impl FnMut(usize, &Bucket) -> Option<T>) -> Option<T> {
        let n = self.buckets.len();
        if n == 0 {
            return None;
        }
        let mut b = home(tag, n);
        // At most every bucket: the load limit keeps empty slots, so the run ends sooner.
        for _ in 0..n {
            let bucket = &self.buckets[b];
            if let Some(found) = f(b, bucket) {
                return Some(found);
            }
            if bucket.tags.contains(&EMPTY) {
                return None;
            }
            b = next(b, n);
        }
        None
    }

    fn find(&self, tag: u32) -> Option<Loc> {
        self.probe(tag, |_, bucket| {
            (0..SLOTS)
                .find(|&s| bucket.tags[s] == tag)
                .map(|s| bucket.locs[s])
        })
    }

    /// The bucket and slot holding (`tag`, `loc`).
    fn position(&self, tag: u32, loc: Loc) -> Option<(usize, usize)> {
        self.probe(tag, |b, bucket| {
            (0..SLOTS)
                .find(|&s| bucket.tags[s] == tag && bucket.locs[s] == loc)
                .map(|s| (b, s))
        })
    }

    fn new(phase: u32) -> Part {
        Part {
            phase,
            ..Part::default()
        }
    }

    fn insert(&mut self, tag: u32, loc: Loc) {
        if (self.used + 1) * 8 > self.slots() * 7 {
            self.rebuild(rung(buckets_for(self.live + 1, GROWN_LOAD), self.phase));
        }
        if place(&mut self.buckets, tag, loc) {
            self.used += 1;
        }
        self.live += 1;
    }

    fn replace(&mut self, tag: u32, old: Loc, new: Loc) -> bool {
        match self.position(tag, old) {
            Some((b, s)) => {
                self.buckets[b].locs[s] = new;
                true
            }
            None => false,
        }
    }

    fn remove(&mut self, tag: u32, loc: Loc) -> bool {
        let Some((b, s)) = self.position(tag, loc) else {
            return false;
        };
        self.buckets[b].tags[s] = TOMB;
        self.buckets[b].locs[s] = NO_LOC;
        self.live -= 1;
        if self.live == 0 {
            *self = Part::new(self.phase);
        } else if self.slots() >= 8 * SLOTS && self.live * 8 < self.slots() {
            self.rebuild(buckets_for(self.live, GROWN_LOAD));
        }
        true
    }

    /// Rehashes the live entries into `buckets` buckets, dropping tombstones.
    fn rebuild(&mut self, buckets: usize) {
        let old = std::mem::replace(&mut self.buckets, ZeroedArray::new(buckets));
        for bucket in old.iter() {
            for s in 0..SLOTS {
                let tag = bucket.tags[s];
                if tag == EMPTY || tag == TOMB {
                    continue;
                }
                place(&mut self.buckets, tag, bucket.locs[s]);
            }
        }
        self.used = self.live;
    }
}

/// Stores (`tag`, `loc`) in the first free slot (empty or a tombstone) of `tag`'s probe
/// run; returns whether the slot was empty. The load limit guarantees a free slot.
fn place(buckets: &mut [Bucket], tag: u32, loc: Loc) -> bool {
    let n = buckets.len();
    let mut b = home(tag, n);
    loop {
        let bucket = &mut buckets[b];
        if let Some(s) = bucket.tags.iter().position(|&t| t == EMPTY || t == TOMB) {
            let was_empty = bucket.tags[s] == EMPTY;
            bucket.tags[s] = tag;
            bucket.locs[s] = loc;
            return was_empty;
        }
        b = next(b, n);
    }
}

/// `entries` sorted by the top 16 bits of their tags: two stable counting-sort passes,
/// the lower of the two bytes first, through `aux` (emptied after; its room kept).
fn by_top_bits(entries: &mut [(u32, Loc)], aux: &mut Vec<(u32, Loc)>) {
    aux.clear();
    crate::room::make_room(aux, entries.len());
    aux.resize(entries.len(), (0u32, NO_LOC));
    radix_pass(entries, aux, 16);
    radix_pass(aux, entries, 24);
    aux.clear();
}

/// One stable counting-sort pass of `src` into `dst` by the tag's byte at `shift`.
fn radix_pass(src: &[(u32, Loc)], dst: &mut [(u32, Loc)], shift: u32) {
    let mut start = [0usize; 256];
    for e in src {
        start[(e.0 >> shift) as usize & 0xff] += 1;
    }
    let mut at = 0;
    for c in &mut start {
        let n = *c;
        *c = at;
        at += n;
    }
    for &e in src {
        let b = (e.0 >> shift) as usize & 0xff;
        dst[start[b]] = e;
        start[b] += 1;
    }
}

/// Locations of a shard's live keys by tag (see the module documentation).
#[derive(Default)]
pub struct HashIndex {
    /// `PARTS` parts, or none while the table is empty.
    parts: Vec<Part>,
    /// Number of entries.
    len: usize,
}

impl HashIndex {
    /// A table with room for about `n` entries spread evenly over the parts (bulk load).
    pub fn with_capacity(n: usize) -> HashIndex {
        let mut table = HashIndex::default();
        if n > 0 {
            table.parts = (0..PARTS as u32).map(Part::new).collect();
            let buckets = buckets_for(n.div_ceil(PARTS), BULK_LOAD);
            for part in &mut table.parts {
                part.rebuild(rung(buckets, part.phase));
            }
        }
        table
    }

    /// A table of `entries` (tag, location) of distinct live keys, built in tag order: a
    /// tag's top bits choose its part and its low bits its home bucket (scaled, so in
    /// order), so sorted by their top 16 bits the inserts walk each part's buckets from
    /// start to end in windows of a few cache lines, instead of a cache and TLB miss per
    /// insert into a table of hundreds of MB (opening a store).
    pub fn from_tagged(entries: &mut Vec<(u32, Loc)>, aux: &mut Vec<(u32, Loc)>) -> HashIndex {
        let mut table = HashIndex::with_capacity(entries.len());
        by_top_bits(entries, aux);
        for &(tag, loc) in entries.iter() {
            table.insert(tag, loc);
        }
        entries.clear();
        table
    }

    fn part(&self, tag: u32) -> Option<&Part> {
        self.parts.get((tag >> (32 - PART_BITS)) as usize)
    }

    fn part_mut(&mut self, tag: u32) -> Option<&mut Part> {
        self.parts.get_mut((tag >> (32 - PART_BITS)) as usize)
    }

    /// Starts loading the bucket where `tag`'s probe begins into the CPU's cache, so that
    /// an insert or lookup of `tag` soon after need not wait for memory. A hint: the table
    /// is not changed, and nothing is read architecturally.
    #[inline]
    pub fn prefetch(&self, tag: u32) {
        if let Some(part) = self.part(tag) {
            let n = part.buckets.len();
            if n > 0 {
                prefetch_line(std::ptr::from_ref(&part.buckets[home(tag, n)]).cast());
            }
        }
    }

    /// The location of some live key tagged `tag`: the key's own if it is live and no other
    /// live key shares its tag.
    pub fn find(&self, tag: u32) -> Option<Loc> {
        self.part(tag)?.find(tag)
    }

    /// Adds a live key's entry (the key must not have one).
    pub fn insert(&mut self, tag: u32, loc: Loc) {
        if self.parts.is_empty() {
            self.parts = (0..PARTS as u32).map(Part::new).collect();
        }
        if let Some(part) = self.part_mut(tag) {
            part.insert(tag, loc);
            self.len += 1;
        }
    }

    /// Moves the entry (`tag`, `old`) to `new`; returns whether it existed.
    pub fn replace(&mut self, tag: u32, old: Loc, new: Loc) -> bool {
        self.part_mut(tag)
            .is_some_and(|part| part.replace(tag, old, new))
    }

    /// Removes the entry (`tag`, `loc`); returns whether it existed.
    pub fn remove(&mut self, tag: u32, loc: Loc) -> bool {
        let removed = self.part_mut(tag).is_some_and(|part| part.remove(tag, loc));
        if removed {
            self.len -= 1;
            if self.len == 0 {
                self.parts = Vec::new();
            }
        }
        removed
    }

    /// Whether the entry (`tag`, `loc`) exists.
    #[cfg(test)]
    pub fn contains(&self, tag: u32, loc: Loc) -> bool {
        self.part(tag).and_then(|p| p.position(tag, loc)).is_some()
    }

    /// Number of entries.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Visits every entry (tag, location), in no particular order.
    pub fn for_each(&self, mut f: impl FnMut(u32, Loc)) {
        for part in &self.parts {
            for b in part.buckets.iter() {
                for (&tag, &loc) in b.tags.iter().zip(&b.locs) {
                    if tag > TOMB {
                        f(tag, loc);
                    }
                }
            }
        }
    }

    /// Heap bytes, by capacity.
    pub fn heap_bytes(&self) -> usize {
        self.parts.capacity() * size_of::<Part>()
            + self.parts.iter().map(|p| p.buckets.bytes()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{ikey, NS_USER};
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn loc(n: u32) -> Loc {
        Loc {
            seg: n,
            off: n.wrapping_mul(7),
            len: 1,
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32),
        Replace(u32),
        Remove(u32),
    }

    /// Tags from a small range so that many entries share a tag, a home bucket and a part.
    fn op_strategy() -> impl Strategy<Value = Op> {
        let tag = prop_oneof![2u32..40, (0u32..40).prop_map(|t| t << 26 | 5), any::<u32>()];
        prop_oneof![
            4 => tag.clone().prop_map(Op::Insert),
            1 => tag.clone().prop_map(Op::Replace),
            3 => tag.prop_map(Op::Remove),
        ]
    }

    /// A table built in tag order holds what one built by inserts holds, duplicates of a
    /// tag included, and the radix passes sort by the top 16 bits.
    #[test]
    fn from_tagged_holds_every_entry() {
        let mut entries: Vec<(u32, Loc)> = (0..50_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761).max(2), loc(i)))
            .collect();
        entries.extend((0..100).map(|i| (7 << 26 | 3, loc(100_000 + i))));
        let mut aux = Vec::new();
        let mut sorted = entries.clone();
        by_top_bits(&mut sorted, &mut aux);
        assert_eq!(sorted.len(), entries.len());
        assert!(sorted.windows(2).all(|w| w[0].0 >> 16 <= w[1].0 >> 16));
        let multiset = |v: &[(u32, Loc)]| {
            let mut v: Vec<(u32, u32, u32, u32)> =
                v.iter().map(|(t, l)| (*t, l.seg, l.off, l.len)).collect();
            v.sort_unstable();
            v
        };
        assert_eq!(multiset(&sorted), multiset(&entries));
        // Built twice through the same buffers: each build empties them and keeps room.
        for _ in 0..2 {
            let mut input = entries.clone();
            let table = HashIndex::from_tagged(&mut input, &mut aux);
            assert!(input.is_empty() && aux.is_empty() && aux.capacity() >= entries.len());
            assert_eq!(table.len(), entries.len());
            for &(tag, l) in &entries {
                assert!(table.contains(tag, l), "{tag:#x}");
            }
        }
        assert_eq!(HashIndex::from_tagged(&mut Vec::new(), &mut aux).len(), 0);
    }

    proptest! {
        /// Against a model multimap from tag to locations: every live entry is found, and a
        /// lookup of a tag returns one of that tag's locations.
        #[test]
        fn model(ops in proptest::collection::vec(op_strategy(), 1..3000)) {
            let mut table = HashIndex::default();
            let mut model: HashMap<u32, Vec<Loc>> = HashMap::new();
            let mut next = 0u32;
            for op in ops {
                match op {
                    Op::Insert(t) => {
                        let t = t.max(2);
                        next += 1;
                        table.insert(t, loc(next));
                        model.entry(t).or_default().push(loc(next));
                    }
                    Op::Replace(t) => {
                        let t = t.max(2);
                        next += 1;
                        let old = model.get_mut(&t).and_then(|v| v.first_mut());
                        match old {
                            Some(old) => {
                                prop_assert!(table.replace(t, *old, loc(next)));
                                *old = loc(next);
                            }
                            None => prop_assert!(!table.replace(t, loc(0), loc(next))),
                        }
                    }
                    Op::Remove(t) => {
                        let t = t.max(2);
                        match model.get_mut(&t).and_then(|v| v.pop()) {
                            Some(l) => prop_assert!(table.remove(t, l)),
                            None => prop_assert!(!table.remove(t, loc(0))),
                        }
                    }
                }
            }
            let live: usize = model.values().map(Vec::len).sum();
            prop_assert_eq!(table.len(), live);
            for (t, locs) in &model {
                for l in locs {
                    prop_assert!(table.contains(*t, *l));
                }
                match table.find(*t) {
                    Some(l) => prop_assert!(locs.contains(&l)),
                    None => prop_assert!(locs.is_empty()),
                }
            }
        }
    }

    /// Two user keys whose internal keys have the same tag, found by a birthday search.
    fn colliding_keys() -> (Vec<u8>, Vec<u8>) {
        let mut seen = HashMap::new();
        for i in 0u64.. {
            let key = i.to_be_bytes();
            if let Some(j) = seen.insert(tag_of(&ikey(NS_USER, &key)), i) {
                return (j.to_be_bytes().to_vec(), key.to_vec());
            }
        }
        unreachable!()
    }

    /// Reads through a store when two keys share a tag: the record found first belongs to
    /// the other key, and the ordered index must decide (absent, present, after deletes,
    /// after reopening, with the hash side on and off).
    #[test]
    fn colliding_keys_read_right_through_the_store() {
        let (a, b) = colliding_keys();
        assert_eq!(tag_of(&ikey(NS_USER, &a)), tag_of(&ikey(NS_USER, &b)));
        for hashed in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let open = || {
                crate::Options::new()
                    .shards(1)
                    .hash_index(hashed)
                    .open(dir.path())
                    .unwrap()
            };
            let db = open();
            db.put(&a, b"value of a").unwrap();
            assert_eq!(db.get(&b).unwrap(), None);
            assert_eq!(&*db.get(&a).unwrap().unwrap(), b"value of a");
            db.put(&b, b"value of b").unwrap();
            db.flush().unwrap();
            for _ in 0..2 {
                assert_eq!(&*db.get(&a).unwrap().unwrap(), b"value of a");
                assert_eq!(&*db.get(&b).unwrap().unwrap(), b"value of b");
                db.put(&a, b"value of a").unwrap();
            }
            drop(db);
            let db = open();
            assert_eq!(&*db.get(&a).unwrap().unwrap(), b"value of a");
            assert_eq!(&*db.get(&b).unwrap().unwrap(), b"value of b");
            db.delete(&a).unwrap();
            assert_eq!(db.get(&a).unwrap(), None);
            assert_eq!(&*db.get(&b).unwrap().unwrap(), b"value of b");
            db.put(&a, b"a again").unwrap();
            db.delete(&b).unwrap();
            assert_eq!(db.get(&b).unwrap(), None);
            assert_eq!(&*db.get(&a).unwrap().unwrap(), b"a again");
        }
    }

    #[test]
    fn grows_shrinks_and_frees() {
        let mut table = HashIndex::default();
        let n = 200_000u32;
        for i in 0..n {
            table.insert(tag_of(&i.to_be_bytes()), loc(i));
        }
        assert_eq!(table.len(), n as usize);
        let per_key = table.heap_bytes() as f64 / n as f64;
        assert!(per_key < 28.0, "{per_key} bytes per key");
        for i in 0..n {
            assert!(table.find(tag_of(&i.to_be_bytes())).is_some());
        }
        for i in 0..n - 10 {
            assert!(table.remove(tag_of(&i.to_be_bytes()), loc(i)));
        }
        assert!(
            table.heap_bytes() < 64 * 1024,
            "{} bytes left",
            table.heap_bytes()
        );
        for i in n - 10..n {
            assert_eq!(table.find(tag_of(&i.to_be_bytes())), Some(loc(i)));
            assert!(table.remove(tag_of(&i.to_be_bytes()), loc(i)));
        }
        assert_eq!(table.len(), 0);
        assert_eq!(table.heap_bytes(), 0);
    }

    /// Parts grow one after another, not all at once: with equal sizes, all 64 parts of
    /// a table reached their limit within a few thousand inserts of each other, and the
    /// whole table was rehashed in one burst.
    #[test]
    fn parts_grow_one_after_another() {
        let mut table = HashIndex::default();
        let sizes = |t: &HashIndex| t.parts.iter().map(|p| p.buckets.len()).collect::<Vec<_>>();
        let mut before = Vec::new();
        let mut most = 0;
        let mut growths = 0;
        for i in 0..400_000u32 {
            table.insert(tag_of(&i.to_be_bytes()), loc(i));
            if i % 1_000 == 999 {
                let now = sizes(&table);
                if i >= 100_000 {
                    let grew = now.iter().zip(&before).filter(|(a, b)| a != b).count();
                    most = most.max(grew);
                    growths += grew;
                }
                before = now;
            }
        }
        assert!(growths >= 64, "{growths} growths");
        assert!(most <= 8, "{most} of 64 parts grew within 1,000 inserts");
        let per_key = table.heap_bytes() as f64 / 400_000.0;
        assert!((18.0..26.0).contains(&per_key), "{per_key} bytes per key");
    }
}
