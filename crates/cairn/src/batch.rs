//! Atomic groups of writes.

use std::collections::HashMap;

use crate::keys::{ikey, NS_USER};
use crate::record::Kind;
use crate::MAX_KEY_LEN;

/// A group of puts and deletes applied atomically by [`crate::Db::write`], across all
/// shards and across a crash: after reopening, either every operation is there or none.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = cairn::Db::open(dir.path())?;
/// let mut batch = cairn::WriteBatch::new();
/// batch.put("from", "90").put("to", "110").delete("pending");
/// db.write(batch)?;
/// assert_eq!(db.get("to")?.as_deref(), Some(&b"110"[..]));
/// # Ok::<(), cairn::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct WriteBatch {
    /// Operations on internal keys (namespace byte, then the key).
    ops: Vec<(Kind, Vec<u8>, Vec<u8>)>,
    /// Length of the first key over the limit, reported when the batch is written.
    too_large: Option<usize>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }

    /// Adds a put.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> &mut WriteBatch {
        self.put_ns(NS_USER, key.as_ref(), value.as_ref())
    }

    /// Adds a delete.
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> &mut WriteBatch {
        self.delete_ns(NS_USER, key.as_ref())
    }

    /// Moves every operation to keyspace `id` (a batch's keys are added in keyspace 0
    /// and take the keyspace they are written to).
    pub(crate) fn set_keyspace(&mut self, id: u8) {
        for op in &mut self.ops {
            op.1[0] = id;
        }
    }

    /// Adds a put of `key` in namespace `ns`.
    pub(crate) fn put_ns(&mut self, ns: u8, key: &[u8], value: &[u8]) -> &mut WriteBatch {
        self.check(key);
        self.ops.push((Kind::Put, ikey(ns, key), value.to_vec()));
        self
    }

    /// Adds a delete of `key` in namespace `ns`.
    pub(crate) fn delete_ns(&mut self, ns: u8, key: &[u8]) -> &mut WriteBatch {
        self.check(key);
        self.ops.push((Kind::Delete, ikey(ns, key), Vec::new()));
        self
    }

    fn check(&mut self, key: &[u8]) {
        if key.len() > MAX_KEY_LEN && self.too_large.is_none() {
            self.too_large = Some(key.len());
        }
    }

    /// Number of operations added.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether no operation was added.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Removes every operation.
    pub fn clear(&mut self) {
        self.ops.clear();
        self.too_large = None;
    }

    /// Length of the first key over [`MAX_KEY_LEN`], if any.
    pub(crate) fn too_large_key(&self) -> Option<usize> {
        self.too_large
    }

    /// The operations with only the last one per key kept, in first-seen key order.
    pub(crate) fn into_final_ops(self) -> Vec<(Kind, Vec<u8>, Vec<u8>)> {
        // Small batches (the common case) are checked pairwise, without a hash map.
        if self.ops.len() <= 16 {
            let n = self.ops.len();
            let later = |i: usize| (i + 1..n).any(|j| self.ops[j].1 == self.ops[i].1);
            if !(0..n).any(later) {
                return self.ops;
            }
            let keep: Vec<bool> = (0..n).map(|i| !later(i)).collect();
            return self
                .ops
                .into_iter()
                .zip(keep)
                .filter_map(|(op, k)| k.then_some(op))
                .collect();
        }
        let mut last: HashMap<&[u8], usize> = HashMap::with_capacity(self.ops.len());
        for (i, (_, k, _)) in self.ops.iter().enumerate() {
            last.insert(k.as_slice(), i);
        }
        if last.len() == self.ops.len() {
            return self.ops;
        }
        let keep: Vec<bool> = (0..self.ops.len())
            .map(|i| last[self.ops[i].1.as_slice()] == i)
            .collect();
        self.ops
            .into_iter()
            .zip(keep)
            .filter_map(|(op, k)| k.then_some(op))
            .collect()
    }
}
