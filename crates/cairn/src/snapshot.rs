//! [`Snapshot`]: the store as it was at one point of the write order, read while writes,
//! compaction and reclamation go on (DESIGN.md, "Snapshots and transactions").

use std::ops::RangeBounds;
use std::sync::Arc;

use crate::db::Db;
use crate::iter::{Iter, SnapPin};
use crate::keys::{as_bytes, ikey, ns_bounds, ns_prefix_bounds, NS_USER};
use crate::keyspace::Keyspace;
use crate::value::Value;
use crate::{Result, MAX_KEY_LEN};

/// The store as it was when the snapshot was taken: every write numbered up to
/// [`Snapshot::seq`] (whole batches), none after. Reads through it ([`Snapshot::get`],
/// [`Snapshot::contains`], [`Snapshot::iter`], [`Snapshot::range`],
/// [`Snapshot::prefix`], forward and reverse) see exactly that, while writes, compaction
/// and reclamation go on. Taken by [`Db::snapshot`] or [`Keyspace::snapshot`]: O(1),
/// never waiting for a writer.
///
/// Cheap to clone (clones share it); it is let go of when the last clone, and the last
/// iterator made from it, is dropped. Until then the store keeps what it may still read:
/// each version overwritten or deleted after it was taken (about 64 bytes of memory per
/// version plus its key, and the record on disk), and the segment files holding them,
/// even those compaction removed meanwhile. [`crate::Stats::snapshots`] shows what the
/// live snapshots pin. A snapshot lives in memory only: closing the store (or a crash)
/// ends it; it is not a copy on disk ([`Db::checkpoint`] makes one).
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let db = cairn::Db::open(dir.path())?;
/// db.put("a", "1")?;
/// let snap = db.snapshot();
/// db.put("a", "2")?;
/// db.put("b", "2")?;
/// assert_eq!(snap.get("a")?.as_deref(), Some(&b"1"[..]));
/// assert!(!snap.contains("b")?);
/// assert_eq!(snap.iter().count(), 1);
/// assert_eq!(db.get("a")?.as_deref(), Some(&b"2"[..]));
/// # Ok::<(), cairn::Error>(())
/// ```
#[derive(Clone)]
pub struct Snapshot {
    pin: Arc<SnapPin>,
    ns: u8,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("seq", &self.pin.seq)
            .field("keyspace", &self.ns)
            .finish()
    }
}

impl Db {
    /// A snapshot of the store as it is now (see [`Snapshot`]), reading keyspace 0
    /// (`Db`'s own keys; [`Snapshot::keyspace`] reads another at the same point).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            pin: Arc::new(SnapPin::take(self.core_arc())),
            ns: NS_USER,
        }
    }
}

impl Keyspace {
    /// A snapshot of the store as it is now (see [`Snapshot`]), reading this keyspace.
    pub fn snapshot(&self) -> Snapshot {
        self.db().snapshot().keyspace(self.id())
    }
}

impl Snapshot {
    /// The number of the last write it sees (the store's sequence numbers: every write
    /// takes the next one).
    pub fn seq(&self) -> u64 {
        self.pin.seq
    }

    /// The same snapshot, reading keyspace `id`: keyspaces seen at one point together.
    pub fn keyspace(&self, id: u8) -> Snapshot {
        Snapshot {
            pin: self.pin.clone(),
            ns: id,
        }
    }

    /// The keyspace it reads.
    pub fn keyspace_id(&self) -> u8 {
        self.ns
    }

    pub(crate) fn pin(&self) -> &Arc<SnapPin> {
        &self.pin
    }

    /// The value `key` had: at most one disk read, checksum verified.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        let k = key.as_ref();
        if k.len() > MAX_KEY_LEN {
            return Ok(None);
        }
        let core = &self.pin.core;
        let ik = ikey(self.ns, k);
        core.shards[core.shard_of(&ik)].get_at(&ik, Some(self.pin.seq))
    }

    /// Whether `key` had a value (answered from memory, no disk read).
    pub fn contains(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        let k = key.as_ref();
        if k.len() > MAX_KEY_LEN {
            return Ok(false);
        }
        let core = &self.pin.core;
        let ik = ikey(self.ns, k);
        let st = core.shards[core.shard_of(&ik)].state.read();
        Ok(match st.versions.at(&ik, self.pin.seq) {
            Some(v) => v.is_some(),
            None => st.index.contains(&ik),
        })
    }

    /// Every key and value it holds, in key order. Reverse with `.rev()`.
    pub fn iter(&self) -> Iter {
        self.range::<[u8], _>(..)
    }

    /// The keys within `range`, in key order. Reverse with `.rev()`.
    pub fn range<K: AsRef<[u8]> + ?Sized, R: RangeBounds<K>>(&self, range: R) -> Iter {
        let (lo, hi) = ns_bounds(
            self.ns,
            as_bytes(range.start_bound()),
            as_bytes(range.end_bound()),
        );
        Iter::new(self.pin.core.clone(), lo, hi, 1).at(self.pin.clone())
    }

    /// The keys starting with `prefix`, in key order. Reverse with `.rev()`.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        let (lo, hi) = ns_prefix_bounds(self.ns, prefix.as_ref());
        Iter::new(self.pin.core.clone(), lo, hi, 1).at(self.pin.clone())
    }
}
