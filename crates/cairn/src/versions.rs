//! The old versions a shard keeps for its snapshots ([`Versions`]), and the store's
//! register of live snapshots ([`Snapshots`]).
//!
//! The index names only each key's newest record. While a snapshot is live, every write
//! also notes, in its shard's [`Versions`] and under the same write lock, what the key
//! held before it: the record it superseded (or that the key was absent) and the write's
//! sequence number, `by`. Each key's notes form a chain, oldest first, so what a snapshot
//! taken at number `s` sees of a key is the first note with `by > s`, or the index's entry
//! when there is none. A key that changed after `s` has a note with `by > s`: that is
//! what a transaction's commit checks (DESIGN.md, "Snapshots and transactions").
//!
//! A note is kept while some live snapshot may need it: notes with `by` at most the
//! oldest live snapshot's number go (all of them when no snapshot is live). A write does
//! not note a version no snapshot can see: when the key's last note says its current
//! version was written after the newest live snapshot was taken.
//!
//! Noted keys are found by hash: a [`HashTable`] of key numbers (each beside 32 bits of
//! its key's hash, so that growing the table reads no key), each naming an [`Entry`]
//! (the key's first note, where its bytes are in an [`Arena`], and its later notes in a
//! slab of 24-byte [`Node`]s). A write's note thus costs a hash probe, and appends an
//! entry and the key's bytes when the key is new; it never searches or shifts an ordered
//! structure, and never copies what is stored ([`Chunks`]: fixed-size chunks). The
//! order scans need ([`Versions::scan`], [`Versions::range_changed_after`]) is an
//! [`Index`] of the noted keys kept behind a lock of its own and brought up to date by
//! the reads that need it (keys are numbered in the order they were first noted, so the
//! ones it lacks are the numbers from its `upto` on), or rebuilt when it lacks most of
//! them: a store whose snapshots never scan never builds it.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hashbrown::HashTable;
use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::index::{BulkBuffers, Index, Loc, Shape};
use crate::segment::SegmentFile;
use crate::seq::SeqTracker;
use chunks::{Arena, Chunks, Span};

mod chunks;
#[cfg(test)]
mod tests;

/// No node (the end of a chain, of the free list).
const NIL: u32 = u32::MAX;

/// The location of "the key had no value" (no record is 0 bytes long).
const ABSENT: Loc = Loc {
    seg: 0,
    off: 0,
    len: 0,
};

/// Seed of the notes' key hash: the plain xxh3 of a key chooses its shard by its low
/// bits, which the keys of one shard thus share.
const HASH_SEED: u64 = 0x6e6f_7465_735f_6b65;

/// 32 bits of the notes' hash of `key`, which the table keeps beside each key's number
/// (so that growing the table or passing over another key never reads a key).
fn hash(key: &[u8]) -> u32 {
    (xxh3_64_with_seed(key, HASH_SEED) >> 32) as u32
}

/// The table's hash of a key whose [`hash`] is `h`: the 32 bits spread over 64, so that
/// the table's choice of bucket (low bits) and its tag (top bits) both depend on them.
#[inline]
fn spread(h: u32) -> u64 {
    u64::from(h).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// One old version of a key: what the key held until the write numbered `by`. A key's
/// first note is kept in its [`Entry`]; later ones are nodes of a slab.
#[derive(Clone, Copy)]
struct Node {
    by: u64,
    /// The superseded record, or [`ABSENT`].
    loc: Loc,
    /// The next (newer) note of the key, or the next free node.
    next: u32,
}

impl Node {
    fn version(&self) -> Option<Loc> {
        (self.loc.len != 0).then_some(self.loc)
    }
}

/// A noted key: its first (oldest) note, where its bytes are in the arena, and the
/// first and last of its later notes in the slab ([`NIL`]: none). 40 bytes (the note's
/// fields are the entry's own: a nested struct would be padded to 24).
#[derive(Clone, Copy)]
struct Entry {
    /// The first note's `by`.
    by: u64,
    /// The first note's version, or [`ABSENT`].
    loc: Loc,
    key: Span,
    next: u32,
    last: u32,
}

impl Entry {
    fn note(&self) -> Node {
        Node {
            by: self.by,
            loc: self.loc,
            next: NIL,
        }
    }
}

const _: () = assert!(std::mem::size_of::<Entry>() == 40);

/// The noted keys: their bytes, entries, and the table finding them by hash (each key's
/// number and [`hash`]). A key's number is its entry's position; keys are only
/// appended, between sweeps. Entries and bytes are kept in chunks: appending never
/// copies what is there.
#[derive(Default)]
struct Keys {
    arena: Arena,
    entries: Chunks<Entry>,
    table: HashTable<(u32, u32)>,
}

impl Keys {
    #[inline]
    fn entry(&self, id: u32) -> &Entry {
        self.entries.get(id as usize)
    }

    #[inline]
    fn entry_mut(&mut self, id: u32) -> &mut Entry {
        self.entries.get_mut(id as usize)
    }

    fn key(&self, id: u32) -> &[u8] {
        self.arena.get(self.entry(id).key)
    }

    fn find(&self, key: &[u8]) -> Option<u32> {
        let h = hash(key);
        self.table
            .find(spread(h), |&(id, kh)| kh == h && self.key(id) == key)
            .map(|&(id, _)| id)
    }

    /// The number of `key` (whose [`hash`] is `h`), noting it with the one note `note`
    /// if it is not noted yet: `Err(id)` then, `Ok(id)` when it was.
    #[inline]
    fn find_or_push(&mut self, key: &[u8], h: u32, note: Node) -> Result<u32, u32> {
        let Keys {
            arena,
            entries,
            table,
        } = self;
        let found = table.entry(
            spread(h),
            |&(id, kh)| kh == h && arena.get(entries.get(id as usize).key) == key,
            |&(_, kh)| spread(kh),
        );
        match found {
            hashbrown::hash_table::Entry::Occupied(o) => Ok(o.get().0),
            hashbrown::hash_table::Entry::Vacant(v) => {
                let id = entries.push(Entry {
                    by: note.by,
                    loc: note.loc,
                    key: arena.push(key),
                    next: NIL,
                    last: NIL,
                }) as u32;
                v.insert((id, h));
                Err(id)
            }
        }
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn memory_bytes(&self) -> usize {
        self.arena.memory_bytes() + self.entries.memory_bytes() + self.table.allocation_size()
    }
}

/// The noted keys in order, as far as the reads that needed it brought it: every key
/// numbered below `upto`, each mapped to `Loc { seg: its number, .. }`.
#[derive(Default)]
struct Order {
    index: Index,
    upto: usize,
}

impl Order {
    /// Adds the keys numbered from `upto` on: one by one when they are few, else by
    /// rebuilding from all of them sorted.
    fn catch_up(&mut self, keys: &Keys) {
        let n = keys.len();
        let loc = |id: u32| Loc {
            seg: id,
            off: 0,
            len: 0,
        };
        if n - self.upto > self.upto {
            let mut ids: Vec<u32> = (0..n as u32).collect();
            ids.sort_unstable_by(|&a, &b| keys.key(a).cmp(keys.key(b)));
            self.index = Index::from_sorted_in(
                ids.into_iter().map(|id| (keys.key(id), loc(id))),
                &Shape::default(),
                &mut BulkBuffers::default(),
            );
        } else {
            for id in self.upto..n {
                self.index.insert(keys.key(id as u32), loc(id as u32));
            }
        }
        self.upto = n;
    }
}

/// What the live snapshots are, as a write sees them (read after it took its number).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Live {
    /// At most the number of every live snapshot.
    pub oldest: u64,
    /// At least the number of every live snapshot.
    pub newest: u64,
}

/// A segment removed from its shard (compacted, dropped whole) while notes still point
/// into it: its file stays open, and its bytes counted on disk, until they go.
pub(crate) struct Retired {
    pub file: Arc<SegmentFile>,
    /// Bytes of the segment file, still counted in the store's disk use.
    pub size: u64,
    /// Bytes of records notes point at.
    pub pinned: u64,
}

/// What pruning let go of, to drop after the shard's lock is released (unmapping and
/// closing files, freeing large tables) and to take off the disk count.
#[derive(Default)]
pub(crate) struct Released {
    pub files: Vec<Arc<SegmentFile>>,
    /// Bytes of the files, to take off the store's disk use.
    pub bytes: u64,
    garbage: Option<(Keys, Order, Chunks<Node>)>,
}

impl Released {
    /// Whether nothing was let go.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.garbage.is_none()
    }
}

/// The old versions one shard keeps for its live snapshots (see the module
/// documentation). Behind the shard's state lock.
pub(crate) struct Versions {
    keys: Keys,
    /// The noted keys in order, for scans; brought up to date by them.
    order: RwLock<Order>,
    /// Each key's notes after its first (which its entry holds).
    nodes: Chunks<Node>,
    /// First free node (linked through `next`).
    free: u32,
    /// Nodes in use.
    count: usize,
    /// Bytes of the records the nodes point at.
    pinned: u64,
    /// At most the lowest `by` of a node in use (`u64::MAX`: none).
    min_by: u64,
    /// At least the highest `by` of a node in use.
    max_by: u64,
    /// `count` after the last sweep: the next waits until it doubled.
    swept: usize,
    /// Segments removed while pinned, by id.
    pub retired: BTreeMap<u32, Retired>,
}

impl Default for Versions {
    fn default() -> Versions {
        Versions {
            keys: Keys::default(),
            order: RwLock::new(Order::default()),
            nodes: Chunks::default(),
            free: NIL,
            count: 0,
            pinned: 0,
            min_by: u64::MAX,
            max_by: 0,
            swept: 0,
            retired: BTreeMap::new(),
        }
    }
}

/// A figure of what one shard's notes hold ([`Versions::figures`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Figures {
    pub versions: u64,
    pub keys: u64,
    pub pinned_bytes: u64,
    pub memory_bytes: u64,
    pub retired_segments: u64,
    pub retired_bytes: u64,
}

impl Versions {
    /// Whether no key has notes.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn alloc(&mut self, node: Node) -> u32 {
        if self.free != NIL {
            let i = self.free;
            let slot = self.nodes.get_mut(i as usize);
            self.free = slot.next;
            *slot = node;
            i
        } else {
            self.nodes.push(node) as u32
        }
    }

    fn release_node(&mut self, i: u32) {
        *self.nodes.get_mut(i as usize) = Node {
            by: 0,
            loc: ABSENT,
            next: self.free,
        };
        self.free = i;
    }

    /// The `by` of the last note of the key numbered `id`.
    fn last_by(&self, id: u32) -> u64 {
        let e = self.keys.entry(id);
        match e.last {
            NIL => e.by,
            last => self.nodes.get(last as usize).by,
        }
    }

    /// The write numbered `by` superseded `old` (`None`: the key had no value) of `key`.
    /// Returns the record the note pins, if it took one: none when no live snapshot can
    /// see `old` (the key's last note says it was written after the newest of them).
    pub fn record(&mut self, key: &[u8], old: Option<Loc>, by: u64, live: Live) -> Option<Loc> {
        let note = Node {
            by,
            loc: old.unwrap_or(ABSENT),
            next: NIL,
        };
        if let Ok(id) = self.keys.find_or_push(key, hash(key), note) {
            if self.last_by(id) > live.newest {
                return None;
            }
            let n = self.alloc(note);
            let e = self.keys.entry_mut(id);
            let prev = std::mem::replace(&mut e.last, n);
            match prev {
                NIL => e.next = n,
                prev => self.nodes.get_mut(prev as usize).next = n,
            }
        }
        self.count += 1;
        self.min_by = self.min_by.min(by);
        self.max_by = self.max_by.max(by);
        if let Some(l) = old {
            self.pinned += l.len as u64;
        }
        old
    }

    /// What a snapshot taken at `seq` sees of `key`, if the notes know: `Some(None)`, it
    /// had no value; `Some(Some(loc))`, the record at `loc`; `None`, what the index says.
    pub fn at(&self, key: &[u8], seq: u64) -> Option<Option<Loc>> {
        if self.count == 0 {
            return None;
        }
        self.version_after(self.keys.find(key)?, seq)
    }

    /// The version of the first note of the key numbered `id` with `by > seq`.
    fn version_after(&self, id: u32, seq: u64) -> Option<Option<Loc>> {
        let e = self.keys.entry(id);
        if e.by > seq {
            return Some(e.note().version());
        }
        let mut i = e.next;
        while i != NIL {
            let n = self.nodes.get(i as usize);
            if n.by > seq {
                return Some(n.version());
            }
            i = n.next;
        }
        None
    }

    /// Whether the key numbered `id` was written after `seq`.
    fn id_changed_after(&self, id: u32, seq: u64) -> bool {
        self.last_by(id) > seq
    }

    /// Whether `key` was written after `seq` (for a snapshot at `seq` that is live).
    pub fn changed_after(&self, key: &[u8], seq: u64) -> bool {
        self.count > 0
            && self
                .keys
                .find(key)
                .is_some_and(|id| self.id_changed_after(id, seq))
    }

    /// The noted keys in order, brought up to date.
    fn ordered(&self) -> RwLockReadGuard<'_, Order> {
        let order = self.order.read();
        if order.upto == self.keys.len() {
            return order;
        }
        drop(order);
        let mut order = self.order.write();
        if order.upto != self.keys.len() {
            order.catch_up(&self.keys);
        }
        RwLockWriteGuard::downgrade(order)
    }

    /// Whether a key within `lo..hi` was written after `seq` (for a snapshot at `seq`
    /// that is live): a scan of the noted keys in the range.
    pub fn range_changed_after(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, seq: u64) -> bool {
        const CHUNK: usize = 256;
        if self.count == 0 {
            return false;
        }
        let order = self.ordered();
        let mut from: Option<Vec<u8>> = None;
        let mut chunk = Vec::with_capacity(CHUNK);
        loop {
            chunk.clear();
            let lower = from.as_deref().map_or(lo, Bound::Excluded);
            order.index.scan_forward(lower, hi, CHUNK, &mut chunk);
            if chunk.iter().any(|(_, h)| self.id_changed_after(h.seg, seq)) {
                return true;
            }
            match chunk.pop() {
                Some((last, _)) if chunk.len() + 1 == CHUNK => from = Some(last),
                _ => return false,
            }
        }
    }

    /// Up to `limit` noted keys within `lo..hi`, forward or backward, each with a handle
    /// for [`resolve`](Versions::resolve).
    pub fn scan(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        limit: usize,
        forward: bool,
        out: &mut Vec<(Vec<u8>, Loc)>,
    ) {
        if self.count == 0 {
            return;
        }
        let order = self.ordered();
        if forward {
            order.index.scan_forward(lo, hi, limit, out);
        } else {
            order.index.scan_backward(lo, hi, limit, out);
        }
    }

    /// What a snapshot at `seq` sees of a key [`scan`](Versions::scan) returned with
    /// handle `h` (as [`at`](Versions::at)).
    pub fn resolve(&self, h: Loc, seq: u64) -> Option<Option<Loc>> {
        self.version_after(h.seg, seq)
    }

    /// Whether pruning for a snapshot register whose oldest is `oldest` would let go of
    /// anything now.
    #[inline]
    pub fn prunable(&self, oldest: u64) -> bool {
        self.count > 0 && oldest >= self.min_by
    }

    /// Lets go of the notes no live snapshot needs (`oldest`: at most the number of
    /// every live one, `u64::MAX` when there is none): all of them when `oldest` is at
    /// least every note's `by` (cheap); else, once the notes doubled since the last
    /// sweep (or `force`), those with `by <= oldest`. Segments removed meanwhile whose
    /// records no note needs any more are handed to `out`, with what the shard's
    /// segments pinned (`unpin`: a record of a segment still in the shard).
    pub fn prune(
        &mut self,
        oldest: u64,
        force: bool,
        mut unpin: impl FnMut(Loc),
        out: &mut Released,
    ) {
        if !self.prunable(oldest) {
            return;
        }
        if oldest >= self.max_by {
            self.clear(&mut unpin, out);
            return;
        }
        if !force && self.count < 2 * self.swept + 64 {
            return;
        }
        self.sweep(oldest, &mut unpin, out);
    }

    /// Lets go of every note.
    fn clear(&mut self, unpin: &mut impl FnMut(Loc), out: &mut Released) {
        let firsts = self.keys.entries.iter().map(|e| e.loc);
        for l in firsts.chain(self.nodes.iter().map(|n| n.loc)) {
            if l.len != 0 && !self.retired.contains_key(&l.seg) {
                unpin(l);
            }
        }
        for (_, r) in std::mem::take(&mut self.retired) {
            out.bytes += r.size;
            out.files.push(r.file);
        }
        let old = std::mem::take(self);
        out.garbage = Some((old.keys, old.order.into_inner(), old.nodes));
    }

    /// Lets go of the notes with `by <= oldest`. The keys left are numbered anew (in
    /// tables of their own), and the ordered side is rebuilt by the next read needing it.
    fn sweep(&mut self, oldest: u64, unpin: &mut impl FnMut(Loc), out: &mut Released) {
        let old = std::mem::take(&mut self.keys);
        let mut min_by = u64::MAX;
        for id in 0..old.len() as u32 {
            let e = *old.entry(id);
            // The first note kept, and the slab's rest of the chain after it.
            let mut first = None;
            if e.by > oldest {
                first = Some((e.note(), e.next));
            } else {
                if let Some(l) = e.note().version() {
                    self.unpin(l, unpin, out);
                }
                self.count -= 1;
                let mut i = e.next;
                while i != NIL {
                    let n = *self.nodes.get(i as usize);
                    if n.by > oldest {
                        // It moves into the key's new entry.
                        self.release_node(i);
                        first = Some((n, n.next));
                        break;
                    }
                    if let Some(l) = n.version() {
                        self.unpin(l, unpin, out);
                    }
                    self.release_node(i);
                    self.count -= 1;
                    i = n.next;
                }
            }
            if let Some((note, next)) = first {
                min_by = min_by.min(note.by);
                let key = old.key(id);
                let Err(kept) = self.keys.find_or_push(key, hash(key), note) else {
                    debug_assert!(false, "a key noted twice");
                    continue;
                };
                let last = if next == NIL { NIL } else { e.last };
                let k = self.keys.entry_mut(kept);
                k.next = next;
                k.last = last;
            }
        }
        let order = std::mem::take(self.order.get_mut());
        out.garbage = Some((old, order, Chunks::default()));
        self.min_by = min_by;
        self.swept = self.count;
    }

    /// A note pinning `l` went.
    fn unpin(&mut self, l: Loc, unpin: &mut impl FnMut(Loc), out: &mut Released) {
        self.pinned -= l.len as u64;
        match self.retired.get_mut(&l.seg) {
            Some(r) => {
                r.pinned -= l.len as u64;
                if r.pinned == 0 {
                    if let Some(r) = self.retired.remove(&l.seg) {
                        out.bytes += r.size;
                        out.files.push(r.file);
                    }
                }
            }
            None => unpin(l),
        }
    }

    /// Keeps segment `seg`, removed from the shard with `pinned` bytes of its records
    /// still noted, open until they go; `size`: its bytes, still counted on disk.
    pub fn retire(&mut self, seg: u32, file: Arc<SegmentFile>, size: u64, pinned: u64) {
        self.retired.insert(seg, Retired { file, size, pinned });
    }

    /// What the notes hold.
    pub fn figures(&self) -> Figures {
        Figures {
            versions: self.count as u64,
            keys: self.keys.len() as u64,
            pinned_bytes: self.pinned,
            memory_bytes: (self.keys.memory_bytes()
                + self.order.read().index.memory_bytes()
                + self.nodes.memory_bytes()) as u64,
            retired_segments: self.retired.len() as u64,
            retired_bytes: self.retired.values().map(|r| r.size).sum(),
        }
    }

    /// (count, lowest `by`, highest `by`), for the shard's lock-free summary.
    pub fn summary(&self) -> (usize, u64, u64) {
        (self.count, self.min_by, self.max_by)
    }
}

/// The store's live snapshots (each a sequence number; several may share one), and the
/// two bounds every write reads after taking its number ([`Snapshots::live`]).
///
/// Taking a snapshot lowers `oldest` to the last number handed out *before* it reads its
/// own number (the last handed out then, at least as high), and sets `newest` to the
/// maximum first: a write numbered after the snapshot took its number reads both after
/// that (all four operations are `SeqCst`), so it notes what it supersedes, and keeps
/// what the snapshot needs. Registrations and releases are serialised by a mutex that
/// no writer takes.
pub(crate) struct Snapshots {
    oldest: AtomicU64,
    newest: AtomicU64,
    /// Live snapshots, counted before a new one reads its number: a transaction's
    /// commit that finds only its own needs no notes of its writes (no snapshot older
    /// than them but its own, which is done with the store once they are applied).
    count: AtomicU64,
    /// Live snapshots by number: how many, and when the first was taken.
    live: Mutex<BTreeMap<u64, (u32, Instant)>>,
}

impl Default for Snapshots {
    fn default() -> Snapshots {
        Snapshots {
            oldest: AtomicU64::new(u64::MAX),
            newest: AtomicU64::new(0),
            count: AtomicU64::new(0),
            live: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Snapshots {
    /// Registers a snapshot of everything numbered so far; returns its number.
    pub fn take(&self, seqs: &SeqTracker) -> u64 {
        let mut live = self.live.lock();
        self.count.fetch_add(1, Ordering::SeqCst);
        self.newest.store(u64::MAX, Ordering::SeqCst);
        let before = seqs.last_assigned();
        self.oldest.fetch_min(before, Ordering::SeqCst);
        let seq = seqs.last_assigned();
        live.entry(seq).or_insert((0, Instant::now())).0 += 1;
        let newest = live.keys().next_back().copied().unwrap_or(0);
        self.newest.store(newest, Ordering::SeqCst);
        seq
    }

    /// Lets go of a snapshot taken at `seq`. Returns the new `oldest` when it rose.
    pub fn release(&self, seq: u64) -> Option<u64> {
        let mut live = self.live.lock();
        if let Some(e) = live.get_mut(&seq) {
            e.0 -= 1;
            if e.0 == 0 {
                live.remove(&seq);
            }
        }
        let oldest = live.keys().next().copied().unwrap_or(u64::MAX);
        let newest = live.keys().next_back().copied().unwrap_or(0);
        self.count.fetch_sub(1, Ordering::SeqCst);
        let was = self.oldest.swap(oldest, Ordering::SeqCst);
        self.newest.store(newest, Ordering::SeqCst);
        (oldest > was).then_some(oldest)
    }

    /// The bounds of the live snapshots as a write numbered before this call sees them:
    /// `None` when there are none, or when `own` (the commit of a transaction, which
    /// holds one) finds only its own.
    #[inline]
    pub fn live(&self, own: bool) -> Option<Live> {
        let oldest = self.oldest.load(Ordering::SeqCst);
        if oldest == u64::MAX || (own && self.count.load(Ordering::SeqCst) == 1) {
            return None;
        }
        Some(Live {
            oldest,
            newest: self.newest.load(Ordering::SeqCst),
        })
    }

    /// At most the number of every live snapshot (`u64::MAX`: none).
    pub fn oldest(&self) -> u64 {
        self.oldest.load(Ordering::SeqCst)
    }

    /// How many snapshots are live, and the age of the oldest.
    pub fn count_and_age(&self) -> (u64, Option<Duration>) {
        let live = self.live.lock();
        let n = live.values().map(|e| e.0 as u64).sum();
        let age = live.values().map(|e| e.1).min().map(|t| t.elapsed());
        (n, age)
    }
}

/// A shard's notes at a glance, readable without its lock: whether letting go of a
/// snapshot should prune them now ([`Summary::worth_pruning`]).
#[derive(Default)]
pub(crate) struct Summary {
    count: AtomicU64,
    min_by: AtomicU64,
    max_by: AtomicU64,
    retired: AtomicU64,
}

/// Notes past which a released snapshot sweeps a shard at once rather than leave it to
/// the shard's next write.
const SWEEP_ON_RELEASE: u64 = 4096;

impl Summary {
    /// Publishes `v`'s figures (under the shard's lock, after a change).
    pub fn publish(&self, v: &Versions) {
        let (count, min, max) = v.summary();
        self.count.store(count as u64, Ordering::Relaxed);
        self.min_by.store(min, Ordering::Relaxed);
        self.max_by.store(max, Ordering::Relaxed);
        self.retired
            .store(v.retired.len() as u64, Ordering::Relaxed);
    }

    /// Whether pruning for `oldest` would let go of something.
    pub fn prunable(&self, oldest: u64) -> bool {
        self.count.load(Ordering::Relaxed) > 0 && oldest >= self.min_by.load(Ordering::Relaxed)
    }

    /// Whether pruning for `oldest` is worth the shard's lock now: it lets go of every
    /// note (cheap), of segments kept open, or of many notes.
    pub fn worth_pruning(&self, oldest: u64) -> bool {
        self.prunable(oldest)
            && (oldest >= self.max_by.load(Ordering::Relaxed)
                || self.retired.load(Ordering::Relaxed) > 0
                || self.count.load(Ordering::Relaxed) >= SWEEP_ON_RELEASE)
    }
}
