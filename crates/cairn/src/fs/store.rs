//! The file system's one way into the engine: its rows, kept in the engine's `fs`
//! keyspace. Keys given to and returned by [`Rows`] are the file system's own (see
//! `layout`), without the keyspace byte. Nothing else in `fs` names engine internals,
//! so that when the engine offers keyspaces publicly only this module changes.

use std::ops::Bound;

use crate::db::{ikey, ns_prefix_bounds, NS_FS};
use crate::{Db, Iter, Result, Value, WriteBatch};

/// The file system's rows in a store.
pub(super) struct Rows {
    db: Db,
}

impl Rows {
    /// The rows of the file system in `db`.
    pub(super) fn new(db: Db) -> Rows {
        Rows { db }
    }

    /// The underlying store.
    pub(super) fn db(&self) -> &Db {
        &self.db
    }

    /// The value of row `key`.
    #[inline]
    pub(super) fn get(&self, key: &[u8]) -> Result<Option<Value>> {
        self.db.core().get(&ikey(NS_FS, key))
    }

    /// Whether row `key` exists.
    #[inline]
    pub(super) fn contains(&self, key: &[u8]) -> bool {
        self.db.core().contains(&ikey(NS_FS, key))
    }

    /// Puts one row; `sync` false skips the sync of `SyncPolicy::Always` (a later
    /// [`Rows::flush`] or synced write makes it durable).
    #[inline]
    pub(super) fn put(&self, key: &[u8], value: &[u8], sync: bool) -> Result<()> {
        self.db.core().put(&ikey(NS_FS, key), value, sync)
    }

    /// Applies `batch` atomically; `sync` as for [`Rows::put`].
    #[inline]
    pub(super) fn write(&self, batch: Batch, sync: bool) -> Result<()> {
        self.db.core().write_batch(batch.0, sync)
    }

    /// Makes every write acknowledged so far durable.
    pub(super) fn flush(&self) -> Result<()> {
        self.db.core().flush()
    }

    /// The rows whose keys start with `prefix`, in key order, after the key
    /// `prefix + after` if `after` is given. The keys handed out are without `prefix`.
    pub(super) fn scan_prefix(&self, prefix: &[u8], after: Option<&[u8]>) -> Scan {
        let (lo, hi) = ns_prefix_bounds(NS_FS, prefix);
        let lo = match after {
            Some(a) => {
                let mut k = ikey(NS_FS, prefix);
                k.extend_from_slice(a);
                Bound::Excluded(k)
            }
            None => lo,
        };
        Scan(Iter::new(
            self.db.core_arc().clone(),
            lo,
            hi,
            1 + prefix.len(),
        ))
    }
}

/// An iterator over rows returned by [`Rows::scan_prefix`]: (key without the prefix,
/// value).
pub(super) struct Scan(Iter);

impl Iterator for Scan {
    type Item = Result<(Vec<u8>, Value)>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next()
    }
}

/// Changes of rows, applied atomically by [`Rows::write`].
pub(super) struct Batch(WriteBatch);

impl Batch {
    /// An empty batch.
    pub(super) fn new() -> Batch {
        Batch(WriteBatch::new())
    }

    /// Adds a put of row `key`.
    #[inline]
    pub(super) fn put(&mut self, key: &[u8], value: &[u8]) {
        self.0.put_ns(NS_FS, key, value);
    }

    /// Adds a delete of row `key`.
    #[inline]
    pub(super) fn delete(&mut self, key: &[u8]) {
        self.0.delete_ns(NS_FS, key);
    }
}
