//! A leaf of the ordered index: up to `LEAF_CAP` entries in ascending key order, in one
//! of two layouts.
//!
//! - **Packed** (any keys): all keys concatenated in `keys`, their end offsets in `ends`,
//!   their locations, and a 4-byte *head* per key: the key's bytes after the prefix all
//!   keys of the leaf share (`skip` bytes), as an integer. A search is a binary search over
//!   the heads (at most 512 contiguous bytes); only keys whose head equals the probe's are
//!   compared byte by byte.
//! - **Fixed** (every key of one length, at most `FIXED_KEY_MAX` bytes, and at most
//!   `FIXED_REST` of them after the shared prefix): `keys` holds the shared prefix only,
//!   and `heads` and `ends` hold each key's next 4 and 4 bytes after it (zero-padded), so
//!   the pair is the whole rest of the key. An entry costs its 8 bytes and its location
//!   instead of the key's length + 8 and its location: 20 bytes rather than 28 for
//!   HaloDB's 8-byte keys and 29 for the file system's 9-byte inode keys. A search
//!   is the same binary search over the heads, and a tie is settled by the `ends` word
//!   without reading any key.
//!
//! A leaf takes the fixed layout when it is laid out anew ([`Leaf::lay_out`]: created,
//! split, merged, or its shared prefix shrank) and its keys allow it; it turns packed
//! when a key arrives that does not fit (another length, or a prefix that leaves more
//! than `FIXED_REST` bytes), and may turn fixed again at its next lay-out.

use std::cmp::Ordering;
use std::mem::size_of;
use std::ops::Deref;

use super::{Loc, LEAF_CAP};

/// Minimum number of entries a leaf's vectors grow by when they are full.
const GROW_MIN: usize = 8;
/// Upper limit on the spare key bytes reserved when a leaf's key buffer grows.
const KEY_SLACK_MAX: usize = 1024;
/// Cache line size assumed by `Leaf::warm`.
const CACHE_LINE: usize = 64;
/// Key bytes in a leaf entry's head (see [`head`]).
const HEAD_BYTES: usize = 4;
/// Longest key a fixed leaf holds (its keys are rebuilt on the stack when read).
pub(super) const FIXED_KEY_MAX: usize = 32;
/// Most key bytes after the shared prefix a fixed leaf holds per entry (head and tail).
pub(super) const FIXED_REST: usize = 2 * HEAD_BYTES;

/// The `HEAD_BYTES` bytes of `key` from `skip` on, as a big-endian integer padded with
/// zero bytes. For keys sharing their first `skip` bytes, a smaller head means a smaller
/// key (equal heads decide nothing: the keys are compared).
#[inline]
pub(super) fn head(key: &[u8], skip: usize) -> u32 {
    let rest = key.get(skip..).unwrap_or(&[]);
    if let Some(bytes) = rest.first_chunk::<HEAD_BYTES>() {
        return u32::from_be_bytes(*bytes);
    }
    let mut bytes = [0u8; HEAD_BYTES];
    bytes[..rest.len()].copy_from_slice(rest);
    u32::from_be_bytes(bytes)
}

/// The `FIXED_REST` bytes of `key` from `skip` on, as a big-endian integer padded with
/// zero bytes: a fixed leaf's head (high half) and tail (low half) at once.
#[inline]
fn rest_word(key: &[u8], skip: usize) -> u64 {
    let rest = key.get(skip..).unwrap_or(&[]);
    if let Some(bytes) = rest.first_chunk::<FIXED_REST>() {
        return u64::from_be_bytes(*bytes);
    }
    // Fewer than 8 bytes: a short loop rather than a call to memcpy.
    rest.iter()
        .enumerate()
        .fold(0, |w, (i, &b)| w | u64::from(b) << (56 - 8 * i))
}

/// A fixed leaf's (head, tail) of `key` after `skip` bytes.
#[inline]
fn head_tail(key: &[u8], skip: usize) -> (u32, u32) {
    let w = rest_word(key, skip);
    ((w >> 32) as u32, w as u32)
}

/// Length of the longest common prefix of `a` and `b`.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// How many entries a leaf holding `n` entries grows by when full (never beyond `LEAF_CAP`).
fn grow_step(n: usize) -> usize {
    (n / 4).max(GROW_MIN).min(LEAF_CAP.saturating_sub(n)).max(1)
}

/// Whether the keys of a packed leaf (their end offsets `ends`, the first `klen` bytes
/// long, sharing `skip` bytes) may be laid out fixed: all of one length, at most
/// `FIXED_KEY_MAX`, with at most `FIXED_REST` bytes after the shared prefix.
fn fits_fixed(ends: &[u32], klen: usize, skip: usize) -> bool {
    !ends.is_empty()
        && klen <= FIXED_KEY_MAX
        && klen - skip <= FIXED_REST
        && ends
            .iter()
            .enumerate()
            .all(|(i, &e)| e as usize == (i + 1) * klen)
}

/// Where key `i` of packed keys starts, given their end offsets.
fn start_at(ends: &[u32], i: usize) -> usize {
    match i {
        0 => 0,
        _ => ends[i - 1] as usize,
    }
}

/// Key `i` of packed keys: `keys` concatenated, `ends` their end offsets.
pub(super) fn key_at<'a>(keys: &'a [u8], ends: &[u32], i: usize) -> &'a [u8] {
    &keys[start_at(ends, i)..ends[i] as usize]
}

/// How packed keys (`keys` concatenated, `ends` their end offsets) are laid out: the
/// prefix they all share, their heads, and, when they fit a fixed leaf, their length and
/// tails. The vectors are allocated for `cap` entries.
struct Layout {
    skip: usize,
    heads: Vec<u32>,
    fixed: Option<(usize, Vec<u32>)>,
}

fn layout_of(keys: &[u8], ends: &[u32], cap: usize) -> Layout {
    let n = ends.len();
    let key = |i| key_at(keys, ends, i);
    let skip = match n {
        0 => 0,
        _ => common_prefix(key(0), key(n - 1)),
    };
    let klen = ends.first().map_or(0, |&e| e as usize);
    let mut heads = Vec::with_capacity(cap);
    if !fits_fixed(ends, klen, skip) {
        heads.extend((0..n).map(|i| head(key(i), skip)));
        return Layout {
            skip,
            heads,
            fixed: None,
        };
    }
    let mut tails = Vec::with_capacity(cap);
    for i in 0..n {
        let (h, t) = head_tail(key(i), skip);
        heads.push(h);
        tails.push(t);
    }
    Layout {
        skip,
        heads,
        fixed: Some((klen, tails)),
    }
}

/// Converts a key offset into the `u32` stored in `Leaf::ends`.
pub(super) fn offset(n: usize) -> u32 {
    // A leaf holds at most `LEAF_CAP` keys of at most `MAX_KEY_LEN` bytes: 8 MiB.
    debug_assert!(u32::try_from(n).is_ok(), "leaf key bytes exceed u32::MAX");
    n as u32
}

/// A key read from a leaf: borrowed from a packed leaf, rebuilt from a fixed one.
pub(super) enum LeafKey<'a> {
    /// The key's bytes in a packed leaf.
    Packed(&'a [u8]),
    /// A fixed leaf's key: its length and bytes.
    Fixed(u8, [u8; FIXED_KEY_MAX]),
}

impl Deref for LeafKey<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            LeafKey::Packed(k) => k,
            LeafKey::Fixed(len, bytes) => &bytes[..*len as usize],
        }
    }
}

/// Up to `LEAF_CAP` entries in ascending key order, packed or fixed (see the module's
/// documentation).
#[derive(Default)]
pub(super) struct Leaf {
    /// Packed: all keys concatenated in ascending order. Fixed: the prefix every key
    /// shares (`skip` bytes).
    pub(super) keys: Vec<u8>,
    /// Packed: `ends[i]` is the end offset of key `i` in `keys` (key `i` starts at
    /// `ends[i - 1]`, or 0). Fixed: key `i`'s bytes `skip + 4 .. skip + 8` as [`head`]
    /// reads them (its *tail*).
    pub(super) ends: Vec<u32>,
    /// `locs[i]` is the location of key `i`.
    pub(super) locs: Vec<Loc>,
    /// `heads[i]` is [`head`] of key `i` after the first `skip` bytes: a search compares
    /// these contiguous integers and reads the key bytes (or, fixed, the tails) of only
    /// the entries whose head equals the probe's (usually one), instead of a key per step
    /// of a binary search.
    pub(super) heads: Vec<u32>,
    /// Length of a prefix that every key of the leaf shares (that of the first key): at
    /// most the longest such prefix, which is measured when the leaf is laid out and may
    /// grow after removals without `skip` following.
    pub(super) skip: u32,
    /// `Some(length of every key)` in the fixed layout, `None` when packed.
    pub(super) fixed: Option<u32>,
}

impl Leaf {
    /// A leaf holding one entry, allocated exactly.
    pub(super) fn with_entry(key: &[u8], loc: Loc) -> Leaf {
        Leaf::from_parts(key, &[offset(key.len())], &[loc])
    }

    /// A leaf holding the given packed parts (`ends` relative to `keys`), laid out anew
    /// (fixed if the keys allow it, without copying the keys first).
    pub(super) fn from_parts(keys: &[u8], ends: &[u32], locs: &[Loc]) -> Leaf {
        let Layout { skip, heads, fixed } = layout_of(keys, ends, ends.len());
        let (keys, ends, fixed) = match fixed {
            Some((klen, tails)) => (keys[..skip].to_vec(), tails, Some(offset(klen))),
            None => (keys.to_vec(), ends.to_vec(), None),
        };
        Leaf {
            keys,
            ends,
            locs: locs.to_vec(),
            heads,
            skip: offset(skip),
            fixed,
        }
    }

    /// Lays the leaf out anew: `skip` becomes the longest prefix all keys share (that of
    /// the first and the last key, as they are sorted), the layout fixed if the keys allow
    /// it, and every head (and, fixed, tail) is recomputed, allocated like `locs`.
    pub(super) fn lay_out(&mut self) {
        let n = self.len();
        if let Some(klen) = self.fixed {
            // Keys of one length stay so: only the shared prefix can have grown.
            if n == 0 {
                return;
            }
            let klen = klen as usize;
            let (old, first) = (self.skip as usize, self.fixed_key(0, klen).to_vec());
            let skip = common_prefix(&first, &self.fixed_key(n - 1, klen));
            if skip > old {
                for i in 0..n {
                    let (h, t) = head_tail(&self.fixed_key(i, klen), skip);
                    self.heads[i] = h;
                    self.ends[i] = t;
                }
                self.keys.extend_from_slice(&first[old..skip]);
                self.keys.shrink_to_fit();
                self.skip = offset(skip);
            }
            return;
        }
        let Layout { skip, heads, fixed } = layout_of(&self.keys, &self.ends, self.locs.capacity());
        if let Some((klen, tails)) = fixed {
            self.keys.truncate(skip);
            self.keys.shrink_to_fit();
            self.ends = tails;
            self.fixed = Some(offset(klen));
        }
        self.skip = offset(skip);
        self.heads = heads;
    }

    /// Turns a fixed leaf packed (its heads stay right: `skip` does not change); a packed
    /// leaf is left as it is.
    fn unpack(&mut self) {
        let Some(klen) = self.fixed else {
            return;
        };
        let (n, klen) = (self.len(), klen as usize);
        let mut keys = Vec::with_capacity(n * klen);
        let mut ends = Vec::with_capacity(self.locs.capacity());
        for i in 0..n {
            keys.extend_from_slice(&self.fixed_key(i, klen));
            ends.push(offset(keys.len()));
        }
        self.keys = keys;
        self.ends = ends;
        self.fixed = None;
    }

    pub(super) fn len(&self) -> usize {
        self.locs.len()
    }

    /// Start offset of key `i` in `keys` (packed).
    fn start(&self, i: usize) -> usize {
        start_at(&self.ends, i)
    }

    /// Key `i` of a packed leaf.
    fn packed_key(&self, i: usize) -> &[u8] {
        key_at(&self.keys, &self.ends, i)
    }

    /// The rest of key `i` of a fixed leaf after the shared prefix: its head and tail,
    /// as [`rest_word`] reads them.
    fn rest(&self, i: usize) -> u64 {
        u64::from(self.heads[i]) << 32 | u64::from(self.ends[i])
    }

    /// Key `i` of a fixed leaf whose keys are `klen` bytes long.
    #[inline]
    fn fixed_key(&self, i: usize, klen: usize) -> LeafKey<'_> {
        let skip = self.skip as usize;
        let mut bytes = [0u8; FIXED_KEY_MAX];
        bytes[..skip].copy_from_slice(&self.keys[..skip]);
        bytes[skip..klen].copy_from_slice(&self.rest(i).to_be_bytes()[..klen - skip]);
        LeafKey::Fixed(klen as u8, bytes)
    }

    /// Key `i`.
    pub(super) fn key(&self, i: usize) -> LeafKey<'_> {
        match self.fixed {
            Some(klen) => self.fixed_key(i, klen as usize),
            None => LeafKey::Packed(self.packed_key(i)),
        }
    }

    pub(super) fn first_key(&self) -> LeafKey<'_> {
        self.key(0)
    }

    pub(super) fn last_key(&self) -> LeafKey<'_> {
        self.key(self.len() - 1)
    }

    /// Calls `f` with the entries from the `from`th on, in ascending order, until it
    /// returns `false`; returns whether every entry was visited. A fixed leaf's keys are
    /// rebuilt in one buffer that holds the shared prefix throughout, so a visit costs an
    /// 8-byte store per entry.
    pub(super) fn visit_from(&self, from: usize, mut f: impl FnMut(&[u8], Loc) -> bool) -> bool {
        match self.fixed {
            None => (from..self.len()).all(|i| f(self.packed_key(i), self.locs[i])),
            Some(klen) => {
                let (skip, klen) = (self.skip as usize, klen as usize);
                let mut buf = [0u8; FIXED_KEY_MAX + FIXED_REST];
                buf[..skip].copy_from_slice(&self.keys[..skip]);
                (from..self.len()).all(|i| {
                    buf[skip..skip + FIXED_REST].copy_from_slice(&self.rest(i).to_be_bytes());
                    f(&buf[..klen], self.locs[i])
                })
            }
        }
    }

    /// Loads the cache lines of `heads` with independent reads, so that their cache
    /// misses overlap instead of being paid one after another by the dependent steps of a
    /// binary search (a safe stand-in for prefetching).
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
    /// head equals the key's have their bytes (packed) or tails (fixed) compared.
    pub(super) fn search(&self, key: &[u8]) -> Result<usize, usize> {
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
        match self.fixed {
            None => {
                while i < n && self.heads[i] == h {
                    match self.packed_key(i).cmp(key) {
                        Ordering::Less => i += 1,
                        Ordering::Equal => return Ok(i),
                        Ordering::Greater => return Err(i),
                    }
                }
            }
            Some(klen) => {
                // (head, tail) is the whole rest of an entry's key, padded: pairs are
                // distinct and ordered as the keys are.
                let t = rest_word(key, skip) as u32;
                while i < n && self.heads[i] == h {
                    match self.ends[i].cmp(&t) {
                        Ordering::Less => i += 1,
                        Ordering::Greater => return Err(i),
                        // A key of the leaf's length with this rest is this entry's key;
                        // a shorter or longer one is compared whole.
                        Ordering::Equal if key.len() == klen as usize => return Ok(i),
                        Ordering::Equal => {
                            return match (*self.fixed_key(i, klen as usize)).cmp(key) {
                                Ordering::Less => Err(i + 1),
                                Ordering::Equal => Ok(i),
                                Ordering::Greater => Err(i),
                            };
                        }
                    }
                }
            }
        }
        Err(i)
    }

    /// Index of the first key `>= key`.
    pub(super) fn lower_bound(&self, key: &[u8]) -> usize {
        self.search(key).unwrap_or_else(|i| i)
    }

    /// Index of the first key `> key`.
    pub(super) fn upper_bound(&self, key: &[u8]) -> usize {
        match self.search(key) {
            Ok(i) => i + 1,
            Err(i) => i,
        }
    }

    /// Spare key bytes to keep for `extra` more entries, judged by the average key length
    /// (none in a fixed leaf, whose `keys` is the shared prefix).
    fn key_slack(&self, extra: usize) -> usize {
        if self.fixed.is_some() {
            return 0;
        }
        let avg = self.keys.len() / self.len().max(1);
        avg.saturating_mul(extra).min(KEY_SLACK_MAX)
    }

    /// Makes room for one more entry with `klen` more key bytes, growing by small exact
    /// steps.
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
    pub(super) fn insert_at(&mut self, i: usize, key: &[u8], loc: Loc) {
        let skip = self.skip as usize;
        if let Some(klen) = self.fixed {
            if key.len() == klen as usize && key[..skip] == self.keys[..skip] {
                self.reserve_for(0);
                let (h, t) = head_tail(key, skip);
                self.heads.insert(i, h);
                self.ends.insert(i, t);
                self.locs.insert(i, loc);
                return;
            }
            // Another length, or a shorter shared prefix: packed, then laid out anew
            // below if the prefix shrank (which may make it fixed again).
            self.unpack();
        }
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
        // Only a new first or last key can share less than `skip` bytes with the others.
        let other = if i == 0 { self.len() - 1 } else { 0 };
        if common_prefix(key, self.packed_key(other)) < skip {
            self.lay_out();
        } else {
            self.heads.insert(i, head(key, skip));
        }
    }

    /// Removes entry `i` and returns its location.
    pub(super) fn remove_at(&mut self, i: usize) -> Loc {
        if self.fixed.is_none() {
            let (start, end) = (self.start(i), self.ends[i] as usize);
            self.keys.drain(start..end);
            let klen = offset(end - start);
            for e in &mut self.ends[i + 1..] {
                *e -= klen;
            }
        }
        self.ends.remove(i);
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

    pub(super) fn shrink_to_fit(&mut self) {
        self.keys.shrink_to_fit();
        self.ends.shrink_to_fit();
        self.locs.shrink_to_fit();
        self.heads.shrink_to_fit();
    }

    /// Moves entries `at..` into a new, exactly allocated leaf and shrinks `self` to fit;
    /// both are laid out anew.
    pub(super) fn split_off(&mut self, at: usize) -> Leaf {
        let mut right = match self.fixed {
            Some(_) => Leaf {
                keys: self.keys.clone(),
                ends: self.ends[at..].to_vec(),
                locs: self.locs[at..].to_vec(),
                heads: self.heads[at..].to_vec(),
                skip: self.skip,
                fixed: self.fixed,
            },
            None => {
                let kstart = self.start(at);
                let base = offset(kstart);
                let right = Leaf {
                    keys: self.keys[kstart..].to_vec(),
                    ends: self.ends[at..].iter().map(|&e| e - base).collect(),
                    locs: self.locs[at..].to_vec(),
                    ..Leaf::default()
                };
                self.keys.truncate(kstart);
                right
            }
        };
        self.ends.truncate(at);
        self.locs.truncate(at);
        self.heads.truncate(at);
        self.shrink_to_fit();
        self.lay_out();
        right.lay_out();
        right
    }

    /// Appends all entries of `other`, whose keys must all be greater than those of `self`.
    pub(super) fn append(&mut self, mut other: Leaf) {
        if self.locs.is_empty() {
            *self = other;
            return;
        }
        self.unpack();
        other.unpack();
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
        self.lay_out();
    }

    /// Heap bytes of the four vectors, by capacity.
    pub(super) fn heap_bytes(&self) -> usize {
        self.keys.capacity()
            + self.ends.capacity() * size_of::<u32>()
            + self.locs.capacity() * size_of::<Loc>()
            + self.heads.capacity() * size_of::<u32>()
    }
}
