//! A plain Bloom filter over the keys of one sealed segment. Compaction asks it whether a
//! segment may still hold an older version of a key before dropping that key's tombstone;
//! a false positive only keeps a tombstone longer.

use xxhash_rust::xxh3::xxh3_64_with_seed;

const SEED: u64 = 0x6361_6972_6e62_6c6d;
const BITS_PER_KEY: usize = 10;
const PROBES: u32 = 7;

/// A Bloom filter with about 1% false positives.
#[derive(Debug)]
pub struct Bloom {
    bits: Vec<u64>,
    nbits: u64,
}

impl Bloom {
    /// A filter sized for `n` keys.
    pub fn with_capacity(n: usize) -> Bloom {
        let nbits = (n.max(1) * BITS_PER_KEY).next_multiple_of(64) as u64;
        Bloom {
            bits: vec![0; (nbits / 64) as usize],
            nbits,
        }
    }

    fn probes(&self, key: &[u8]) -> impl Iterator<Item = u64> + '_ {
        let h = xxh3_64_with_seed(key, SEED);
        let (h1, h2) = (h, h.rotate_left(32) | 1);
        (0..PROBES as u64).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % self.nbits)
    }

    /// Adds a key.
    pub fn insert(&mut self, key: &[u8]) {
        let probes: Vec<u64> = self.probes(key).collect();
        for b in probes {
            self.bits[(b / 64) as usize] |= 1 << (b % 64);
        }
    }

    /// False when the key was certainly never inserted.
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.probes(key)
            .all(|b| self.bits[(b / 64) as usize] & (1 << (b % 64)) != 0)
    }

    /// Heap bytes used.
    pub fn memory_bytes(&self) -> usize {
        self.bits.len() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_few_false_positives() {
        let mut b = Bloom::with_capacity(10_000);
        for i in 0..10_000u32 {
            b.insert(&i.to_le_bytes());
        }
        assert!((0..10_000u32).all(|i| b.may_contain(&i.to_le_bytes())));
        let fp = (10_000..110_000u32)
            .filter(|i| b.may_contain(&i.to_le_bytes()))
            .count();
        assert!(fp < 2_000, "{fp} false positives in 100000");
    }
}
