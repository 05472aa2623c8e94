//! Counts kept per keyspace (the first byte of a stored key): a shard's live keys and
//! live record bytes, and each segment's record bytes, so that `Db::stats` can tell how
//! much of the store each keyspace holds, live and reclaimable. A store uses few
//! keyspaces (cairn's own layers use four), so a short list searched in order is both
//! smaller and faster than a table of all 256.

use serde::Serialize;

/// A number per keyspace; absent keyspaces count 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally(Vec<(u8, u64)>);

impl Tally {
    /// The keyspace of a stored key (0 for an empty key, which is never stored).
    pub fn ns(key: &[u8]) -> u8 {
        key.first().copied().unwrap_or(0)
    }

    fn slot(&mut self, ns: u8) -> &mut u64 {
        let i = match self.0.iter().position(|e| e.0 == ns) {
            Some(i) => i,
            None => {
                self.0.push((ns, 0));
                self.0.len() - 1
            }
        };
        &mut self.0[i].1
    }

    /// Adds `n` to keyspace `ns`.
    pub fn add(&mut self, ns: u8, n: u64) {
        *self.slot(ns) += n;
    }

    /// Subtracts `n` from keyspace `ns` (never below 0).
    pub fn sub(&mut self, ns: u8, n: u64) {
        let s = self.slot(ns);
        *s = s.saturating_sub(n);
    }

    /// The count of keyspace `ns`.
    pub fn get(&self, ns: u8) -> u64 {
        self.0.iter().find(|e| e.0 == ns).map_or(0, |e| e.1)
    }

    /// Every keyspace counted, with its count (zeros included).
    pub fn iter(&self) -> impl Iterator<Item = (u8, u64)> + '_ {
        self.0.iter().copied()
    }

    /// Adds every count of `other`.
    pub fn add_all(&mut self, other: &Tally) {
        for (ns, n) in other.iter() {
            self.add(ns, n);
        }
    }
}

/// Figures for one keyspace of the store, from [`crate::Stats::keyspaces`].
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct KeyspaceStats {
    /// The keyspace (0: `Db`'s own keys; 1: the file store; 2: the file system).
    pub keyspace: u8,
    /// Live keys.
    pub keys: u64,
    /// Bytes of the live records (headers, keys and values) the index points at.
    pub live_bytes: u64,
    /// Bytes of records still in segment files (or write buffers) that hold nothing
    /// live: values overwritten or deleted, and tombstones. Compaction, or dropping a
    /// segment whole, gives them back.
    pub reclaimable_bytes: u64,
    /// Bytes of this keyspace's records in segment files and write buffers
    /// (`live_bytes + reclaimable_bytes`). Segment headers and hint files are not
    /// counted per keyspace (see [`crate::ShardStats::disk_bytes`]).
    pub disk_bytes: u64,
}
