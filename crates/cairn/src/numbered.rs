//! Numbered rows ([`crate::Options::numbered_rows`]): keys made of a keyspace byte, a
//! tag byte and a big-endian 64-bit number, which the layers above only ever read, write
//! and delete one by one (the file system's inode rows: `I` + inode number). A shard keeps
//! those of a declared region in an exact table of their own ([`crate::index::Index`]),
//! not in its ordered index: a write costs one hash-table insert instead of a hash-side
//! insert plus an ordered insert, and a key about 22 bytes of memory instead of about 42.
//!
//! The table is a [`HashIndex`](crate::hash_index::HashIndex) whose tags are not hashes
//! but the numbers themselves, mixed by a bijection of 32-bit words: two numbers never
//! share a tag, so a tag found is the key's own (no record has to be read to tell keys
//! apart), and the key can be rebuilt from its tag (to visit the rows). Numbers from
//! [`MAX_NUMBER`] + 1 up do not fit and stay in the ordered index, as every key of an
//! undeclared region does.

use std::ops::Bound;

/// The largest number a numbered row in a table can have: the 32-bit words from
/// `MAX_NUMBER + 1` up stand in for the two tags the table reserves (empty and removed).
pub const MAX_NUMBER: u64 = 0xFFFF_FFFD;

/// Length of a numbered row's internal key: keyspace, tag, number.
pub const KEY_LEN: usize = 10;

/// Consecutive numbers kept together: a group of `2^GROUP_BITS` of them shares one tag
/// but for its low bits, so they share a part and (nearly always) a home bucket.
const GROUP_BITS: u32 = 2;
/// Bits of a group's number that [`mix`] spreads.
const SPREAD_BITS: u32 = 32 - GROUP_BITS;
const SPREAD_MASK: u32 = (1 << SPREAD_BITS) - 1;

const M1: u32 = 0x7feb_352d;
const M2: u32 = 0x846c_a68b;

/// The multiplicative inverse of odd `a` modulo 2^32 (Newton's iteration: each step
/// doubles the bits that are right, from 3); modulo 2^30 it is the same, masked.
const fn inverse(a: u32) -> u32 {
    let mut x = a;
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u32.wrapping_sub(a.wrapping_mul(x)));
        i += 1;
    }
    x
}

const M1_INV: u32 = inverse(M1);
const M2_INV: u32 = inverse(M2);

/// Undoes `x ^= x >> s` (for `x` of at most 32 bits).
fn unshift(y: u32, s: u32) -> u32 {
    let mut x = y;
    let mut k = s;
    while k < 32 {
        x = y ^ (x >> s);
        k += s;
    }
    x
}

/// A bijection of 30-bit words that spreads consecutive words over the whole range
/// (xor-shifts and odd multipliers modulo 2^30; each step is invertible).
fn spread(mut x: u32) -> u32 {
    x ^= x >> 15;
    x = x.wrapping_mul(M1) & SPREAD_MASK;
    x ^= x >> 14;
    x = x.wrapping_mul(M2) & SPREAD_MASK;
    x ^= x >> 15;
    x
}

/// The inverse of [`spread`].
fn unspread(mut x: u32) -> u32 {
    x = unshift(x, 15);
    x = x.wrapping_mul(M2_INV) & SPREAD_MASK;
    x = unshift(x, 14);
    x = x.wrapping_mul(M1_INV) & SPREAD_MASK;
    unshift(x, 15)
}

/// A bijection of 32-bit words: the number of `x`'s group of 4 spread over the tag's
/// top 30 bits (so that groups land in every part and bucket), `x`'s place in its group
/// kept as the low 2. The table's home bucket comes from the bits below the part bits,
/// scaled to the part's size, so the 4 numbers of a group share a home bucket unless a
/// bucket boundary falls between them: consecutive numbers (the file system's inodes,
/// made one after another) fill one cache line instead of four.
fn mix(x: u32) -> u32 {
    spread(x >> GROUP_BITS) << GROUP_BITS | x & !(SPREAD_MASK << GROUP_BITS)
}

/// The inverse of [`mix`].
fn unmix(x: u32) -> u32 {
    unspread(x >> GROUP_BITS) << GROUP_BITS | x & !(SPREAD_MASK << GROUP_BITS)
}

/// The first of the two words above `MAX_NUMBER`, whose mixes stand in for the mixes
/// that are reserved tags.
const SPARE: u32 = MAX_NUMBER as u32 + 1;

/// The tag of number `n` (at most [`MAX_NUMBER`]): never 0 or 1 (the table's empty and
/// removed marks), distinct for distinct numbers.
fn tag_of_number(n: u32) -> u32 {
    match mix(n) {
        t @ 0..=1 => mix(SPARE + t),
        t => t,
    }
}

/// The number whose tag is `tag` (the inverse of [`tag_of_number`]).
fn number_of_tag(tag: u32) -> u32 {
    match unmix(tag) {
        m if m >= SPARE => unmix(m - SPARE),
        m => m,
    }
}

/// A declared region of numbered rows: keyspace `ns`, tag byte `tag`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Region {
    pub ns: u8,
    pub tag: u8,
}

impl Region {
    /// The table tag of internal key `key` if it is one of this region's rows with a
    /// number that fits the table.
    #[inline]
    pub fn tag_of(&self, key: &[u8]) -> Option<u32> {
        let n = self.number_in(key)?;
        (n <= MAX_NUMBER).then(|| tag_of_number(n as u32))
    }

    /// The number of internal key `key` if it is one of this region's rows (any
    /// number, also those above [`MAX_NUMBER`]).
    #[inline]
    pub fn number_in(&self, key: &[u8]) -> Option<u64> {
        let k: &[u8; KEY_LEN] = key.try_into().ok()?;
        if k[0] != self.ns || k[1] != self.tag {
            return None;
        }
        Some(u64::from_be_bytes([
            k[2], k[3], k[4], k[5], k[6], k[7], k[8], k[9],
        ]))
    }

    /// The number of the row whose table tag is `tag`.
    pub fn number_of(tag: u32) -> u64 {
        u64::from(number_of_tag(tag))
    }

    /// The internal key of the row whose table tag is `tag`.
    pub fn key_of(&self, tag: u32) -> [u8; KEY_LEN] {
        self.key_for(Region::number_of(tag))
    }

    /// Whether the internal key range `lo..hi` may hold rows of this region's table.
    pub fn overlaps(&self, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
        let first = self.key_for(0);
        let last = self.key_for(MAX_NUMBER);
        let above_lo = match lo {
            Bound::Included(b) => last.as_slice() >= b.as_slice(),
            Bound::Excluded(b) => last.as_slice() > b.as_slice(),
            Bound::Unbounded => true,
        };
        let below_hi = match hi {
            Bound::Included(b) => first.as_slice() <= b.as_slice(),
            Bound::Excluded(b) => first.as_slice() < b.as_slice(),
            Bound::Unbounded => true,
        };
        above_lo && below_hi
    }

    /// The internal key of this region's row numbered `n`.
    pub fn key_for(&self, n: u64) -> [u8; KEY_LEN] {
        let mut k = [0u8; KEY_LEN];
        k[0] = self.ns;
        k[1] = self.tag;
        k[2..].copy_from_slice(&n.to_be_bytes());
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_words_standing_in_for_reserved_tags_are_not_reserved() {
        assert!(mix(SPARE) >= 2 && mix(SPARE + 1) >= 2);
        assert_eq!(mix(0), 0, "the case the spare words are for");
        for m in [M1, M2] {
            assert_eq!(m.wrapping_mul(inverse(m)), 1);
        }
    }

    #[test]
    fn numbers_whose_mix_is_reserved_get_a_tag_and_come_back() {
        for t in 0..2u32 {
            let n = unmix(t);
            assert!(u64::from(n) <= MAX_NUMBER);
            let tag = tag_of_number(n);
            assert!(tag >= 2);
            assert_eq!(number_of_tag(tag), n);
        }
    }

    #[test]
    fn consecutive_numbers_spread_over_parts() {
        // The table's part is the tag's top 6 bits: 64,000 consecutive numbers (16,000
        // groups of 4) should fill every part about evenly.
        let mut parts = [0u32; 64];
        for n in 1..=64_000u32 {
            parts[(tag_of_number(n) >> 26) as usize] += 1;
        }
        assert!(parts.iter().all(|&c| (700..1300).contains(&c)), "{parts:?}");
    }

    #[test]
    fn the_four_numbers_of_a_group_share_a_home() {
        // Tags that differ in their low 2 bits only: the same part and the same
        // home-bucket bits but for those.
        for g in (0..1_000_000u32).step_by(997) {
            let base = mix(g * 4);
            for i in 0..4 {
                assert_eq!(mix(g * 4 + i), base | i);
            }
        }
    }

    #[test]
    fn keys_outside_the_region_or_the_range_have_no_tag() {
        let r = Region { ns: 3, tag: b'I' };
        let key = |ns: u8, tag: u8, n: u64| {
            let mut k = vec![ns, tag];
            k.extend_from_slice(&n.to_be_bytes());
            k
        };
        assert!(r.tag_of(&key(3, b'I', 7)).is_some());
        assert!(r.tag_of(&key(3, b'I', MAX_NUMBER)).is_some());
        assert!(r.tag_of(&key(3, b'I', MAX_NUMBER + 1)).is_none());
        assert!(r.tag_of(&key(4, b'I', 7)).is_none());
        assert!(r.tag_of(&key(3, b'D', 7)).is_none());
        assert!(r.tag_of(&key(3, b'I', 7)[..9]).is_none());
        let mut long = key(3, b'I', 7);
        long.push(0);
        assert!(r.tag_of(&long).is_none());
    }

    #[test]
    fn ranges_overlap_the_region_as_intervals_do() {
        let r = Region { ns: 3, tag: b'I' };
        let inc = |v: &[u8]| Bound::Included(v.to_vec());
        let exc = |v: &[u8]| Bound::Excluded(v.to_vec());
        assert!(r.overlaps(&Bound::Unbounded, &Bound::Unbounded));
        assert!(r.overlaps(&inc(&[3]), &exc(&[4])));
        assert!(r.overlaps(&inc(&[3, b'I']), &exc(&[3, b'J'])));
        assert!(!r.overlaps(&inc(&[3, b'J']), &Bound::Unbounded));
        assert!(!r.overlaps(&Bound::Unbounded, &exc(&[3, b'I'])));
        assert!(r.overlaps(&Bound::Unbounded, &inc(&[3, b'I', 0, 0, 0, 0, 0, 0, 0, 0])));
        assert!(!r.overlaps(&Bound::Unbounded, &exc(&[3, b'I', 0, 0, 0, 0, 0, 0, 0, 0])));
        assert!(!r.overlaps(
            &exc(&[3, b'I', 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFD]),
            &Bound::Unbounded
        ));
        assert!(!r.overlaps(&inc(&[0, b'I']), &exc(&[3])));
    }

    proptest! {
        #[test]
        fn a_key_comes_back_from_its_tag(n in 0..=MAX_NUMBER, ns: u8, tag: u8) {
            let r = Region { ns, tag };
            let mut key = vec![ns, tag];
            key.extend_from_slice(&n.to_be_bytes());
            let t = r.tag_of(&key).unwrap();
            prop_assert!(t >= 2);
            prop_assert_eq!(r.key_of(t).to_vec(), key);
        }

        #[test]
        fn mix_and_unmix_are_inverse(x: u32) {
            prop_assert_eq!(unmix(mix(x)), x);
            prop_assert_eq!(mix(unmix(x)), x);
        }

        #[test]
        fn spread_and_unspread_are_inverse(x in 0..=SPREAD_MASK) {
            prop_assert!(spread(x) <= SPREAD_MASK);
            prop_assert_eq!(unspread(spread(x)), x);
            prop_assert_eq!(spread(unspread(x)), x);
        }
    }
}
