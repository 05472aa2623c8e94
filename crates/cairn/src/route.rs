//! Which shard a key lives in. Every key goes by the hash of its whole internal key,
//! except the numbered rows of the regions a store was created with
//! ([`crate::Options::numbered_rows`]), which go by their number's group: the hash of
//! `number >> shift`, so that `2^shift` consecutive numbers (the inodes the file system
//! makes one after another) share a shard, its write buffer and its table's cache lines.
//! The grouped regions are recorded in the manifest when the store is created and never
//! change: every open routes by what the store says, whatever its options declare.

use xxhash_rust::xxh3::xxh3_64;

use crate::numbered::{Region, KEY_LEN};

/// Consecutive numbers that share a shard in a grouped region: `2^GROUP_SHIFT`. Large
/// enough that a run of creates stays in one shard's cache lines for a while, small
/// enough that the numbers of a busy directory still spread over every shard.
pub(crate) const GROUP_SHIFT: u8 = 6;

/// A region of numbered rows routed by group (recorded in the manifest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grouped {
    pub region: Region,
    /// Numbers `n` with the same `n >> shift` share a shard.
    pub shift: u8,
}

/// Routes keys to shards.
#[derive(Clone, Debug)]
pub(crate) struct Router {
    shards: u64,
    grouped: Vec<Grouped>,
}

impl Router {
    /// A router over `shards` shards with the grouped regions `grouped`.
    pub fn new(shards: usize, grouped: Vec<Grouped>) -> Router {
        Router {
            shards: shards.max(1) as u64,
            grouped,
        }
    }

    /// The shard of internal key `key`.
    #[inline]
    pub fn shard_of(&self, key: &[u8]) -> usize {
        if !self.grouped.is_empty() && key.len() == KEY_LEN {
            for g in &self.grouped {
                if let Some(n) = g.region.number_in(key) {
                    let group = n >> g.shift;
                    return (xxh3_64(&group.to_le_bytes()) % self.shards) as usize;
                }
            }
        }
        (xxh3_64(key) % self.shards) as usize
    }

    /// The grouped regions, as (keyspace, tag).
    pub fn grouped_rows(&self) -> Vec<(u8, u8)> {
        self.grouped
            .iter()
            .map(|g| (g.region.ns, g.region.tag))
            .collect()
    }

    /// The format version of a store routed so (its manifest's).
    pub fn format_version(&self) -> u32 {
        if self.grouped.is_empty() {
            crate::FORMAT_VERSION
        } else {
            crate::manifest::ROUTED_VERSION
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file system's inode rows, grouped as a new store groups them.
    const INODES: Grouped = Grouped {
        region: Region { ns: 2, tag: b'I' },
        shift: GROUP_SHIFT,
    };

    fn row(ns: u8, tag: u8, n: u64) -> Vec<u8> {
        Region { ns, tag }.key_for(n).to_vec()
    }

    #[test]
    fn a_group_shares_a_shard_and_groups_spread() {
        let r = Router::new(16, vec![INODES]);
        let mut per_shard = [0u32; 16];
        for group in 0..1600u64 {
            let s = r.shard_of(&row(2, b'I', group << 6));
            for i in 1..64 {
                assert_eq!(r.shard_of(&row(2, b'I', group << 6 | i)), s);
            }
            per_shard[s] += 1;
        }
        assert!(
            per_shard.iter().all(|&c| (60..140).contains(&c)),
            "{per_shard:?}"
        );
    }

    #[test]
    fn other_keys_go_by_their_hash() {
        let grouped = Router::new(8, vec![INODES]);
        let plain = Router::new(8, Vec::new());
        let mut differ = 0;
        for n in 0..200u64 {
            for k in [
                row(3, b'I', n),
                row(2, b'J', n),
                row(2, b'I', n)[..9].to_vec(),
            ] {
                assert_eq!(grouped.shard_of(&k), plain.shard_of(&k));
                assert_eq!(plain.shard_of(&k), (xxh3_64(&k) % 8) as usize);
            }
            differ +=
                usize::from(grouped.shard_of(&row(2, b'I', n)) != plain.shard_of(&row(2, b'I', n)));
        }
        assert!(differ > 100, "grouped rows are routed by number");
    }
}
