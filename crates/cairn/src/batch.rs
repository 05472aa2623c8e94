//! Atomic groups of writes.

use std::collections::HashMap;

use crate::keys::{ikey, NS_USER};
use crate::record::Kind;
use crate::MAX_KEY_LEN;

/// One operation of a batch: its kind, internal key (namespace byte, then the key) and
/// value (empty for a delete).
pub(crate) type Op = (Kind, Vec<u8>, Vec<u8>);

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
    ops: Vec<Op>,
    /// Length of the first key over the limit, reported when the batch is written.
    too_large: Option<usize>,
    /// Indices in `ops` of the puts added by [`WriteBatch::put_new`]: their keys must
    /// have no value when the batch is applied.
    new_keys: Vec<usize>,
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

    /// Adds a put of a key that must be new: when the batch is applied, if `key` has a
    /// value, nothing of the batch is written and the write fails with
    /// [`crate::Error::KeyExists`]. The check and the write are one atomic step, so two
    /// writers racing to create one key cannot both succeed (a file system's create of a
    /// name, say); it also costs less than a separate `contains` first, whose lookup
    /// the write would then repeat.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = cairn::Db::open(dir.path())?;
    /// let mut batch = cairn::WriteBatch::new();
    /// batch.put_new("user/ada", "1815").put("users", "1");
    /// db.write(batch)?;
    /// let mut again = cairn::WriteBatch::new();
    /// again.put_new("user/ada", "1816").put("users", "2");
    /// assert!(matches!(db.write(again), Err(cairn::Error::KeyExists { .. })));
    /// assert_eq!(db.get("users")?.as_deref(), Some(&b"1"[..]));
    /// # Ok::<(), cairn::Error>(())
    /// ```
    pub fn put_new(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> &mut WriteBatch {
        self.put_new_ns(NS_USER, key.as_ref(), value.as_ref())
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

    /// Adds a put of `key` in namespace `ns` that requires the key to be new (see
    /// [`WriteBatch::put_new`]).
    pub(crate) fn put_new_ns(&mut self, ns: u8, key: &[u8], value: &[u8]) -> &mut WriteBatch {
        self.new_keys.push(self.ops.len());
        self.put_ns(ns, key, value)
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
        self.new_keys.clear();
    }

    /// Length of the first key over [`MAX_KEY_LEN`], if any.
    pub(crate) fn too_large_key(&self) -> Option<usize> {
        self.too_large
    }

    /// The operations with only the last one per key kept, in the order of those last
    /// ones, and the indices among them of the keys that must be new
    /// ([`WriteBatch::put_new`]; the requirement is on the key's value before the
    /// batch, whatever the batch does to the key after), each once.
    pub(crate) fn into_final_parts(mut self) -> (Vec<Op>, Vec<usize>) {
        let new_keys = std::mem::take(&mut self.new_keys);
        let Some(keep) = self.superseded() else {
            // No key twice: the indices stand.
            return (self.ops, new_keys);
        };
        // A key's final operation is its last; its index among the kept ones is the
        // number kept before it.
        let mut idx: Vec<usize> = new_keys
            .iter()
            .map(|&i| {
                let last = (i..self.ops.len())
                    .rev()
                    .find(|&j| self.ops[j].1 == self.ops[i].1)
                    .unwrap_or(i);
                keep[..last].iter().filter(|&&k| k).count()
            })
            .collect();
        idx.sort_unstable();
        idx.dedup();
        let ops = self
            .ops
            .into_iter()
            .zip(keep)
            .filter_map(|(op, k)| k.then_some(op))
            .collect();
        (ops, idx)
    }

    /// Which operations are the last of their key (`None`: all of them, the common case).
    fn superseded(&self) -> Option<Vec<bool>> {
        let n = self.ops.len();
        // Small batches (the common case) are checked pairwise, without a hash map.
        if n <= 16 {
            let later = |i: usize| (i + 1..n).any(|j| self.ops[j].1 == self.ops[i].1);
            if !(0..n).any(later) {
                return None;
            }
            return Some((0..n).map(|i| !later(i)).collect());
        }
        let mut last: HashMap<&[u8], usize> = HashMap::with_capacity(n);
        for (i, (_, k, _)) in self.ops.iter().enumerate() {
            last.insert(k.as_slice(), i);
        }
        if last.len() == n {
            return None;
        }
        Some(
            (0..n)
                .map(|i| last[self.ops[i].1.as_slice()] == i)
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(ops: &[Op], idx: &[usize]) -> Vec<Vec<u8>> {
        idx.iter().map(|&i| ops[i].1[1..].to_vec()).collect()
    }

    #[test]
    fn new_keys_point_at_their_final_operations() {
        let mut b = WriteBatch::new();
        b.put_new("x", "1").put("y", "1");
        let (ops, idx) = b.into_final_parts();
        assert_eq!(ops.len(), 2);
        assert_eq!(keys(&ops, &idx), [b"x".to_vec()]);

        // Repeats: "x" new then replaced, "y" deleted twice, "z" new twice.
        let mut b = WriteBatch::new();
        b.put_new("x", "1")
            .delete("y")
            .put_new("z", "1")
            .put("x", "2")
            .delete("y")
            .put_new("z", "2");
        let (ops, idx) = b.into_final_parts();
        let order: Vec<&[u8]> = ops.iter().map(|o| &o.1[1..]).collect();
        assert_eq!(order, [&b"x"[..], b"y", b"z"]);
        assert_eq!(ops[0].2, b"2");
        assert_eq!(keys(&ops, &idx), [b"x".to_vec(), b"z".to_vec()]);

        // Large batches take the hash-map path.
        let mut b = WriteBatch::new();
        for i in 0..40u32 {
            b.put(i.to_be_bytes(), "v");
        }
        b.put_new(7u32.to_be_bytes(), "w").put_new("tail", "t");
        let (ops, idx) = b.into_final_parts();
        assert_eq!(ops.len(), 41);
        assert_eq!(
            keys(&ops, &idx),
            [7u32.to_be_bytes().to_vec(), b"tail".to_vec()]
        );
        assert_eq!(ops[idx[0]].2, b"w");

        let mut b = WriteBatch::new();
        b.put_new("a", "1");
        b.clear();
        b.put("a", "1");
        assert!(b.into_final_parts().1.is_empty());
    }
}
