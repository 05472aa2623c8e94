//! The file system's one way into the engine: its rows, kept in keyspace
//! [`crate::KEYSPACE`] of the store through the engine's public keyspace API. Keys given
//! to and returned by [`Rows`] are the file system's own (see `layout`). Nothing else in
//! this crate calls the engine's read and write operations directly.

use cairn::{Db, Iter, Keyspace, Result, Value, WriteBatch, WriteOptions};

/// The file system's rows in a store.
pub(super) struct Rows {
    ks: Keyspace,
}

/// The write options of `sync`: `false` defers the sync of `SyncPolicy::Always`.
#[inline]
fn opts(sync: bool) -> WriteOptions {
    if sync {
        WriteOptions::new()
    } else {
        WriteOptions::new().defer_sync()
    }
}

impl Rows {
    /// The rows of the file system in `db`.
    pub(super) fn new(db: Db) -> Rows {
        Rows {
            ks: db.keyspace(crate::KEYSPACE),
        }
    }

    /// The underlying store.
    pub(super) fn db(&self) -> &Db {
        self.ks.db()
    }

    /// The value of row `key`.
    #[inline]
    pub(super) fn get(&self, key: &[u8]) -> Result<Option<Value>> {
        self.ks.get(key)
    }

    /// Asks the kernel to start reading row `key` into the page cache, without waiting.
    #[inline]
    pub(super) fn prefetch(&self, key: &[u8]) {
        self.ks.prefetch(key)
    }

    /// Whether row `key` exists.
    #[inline]
    pub(super) fn contains(&self, key: &[u8]) -> bool {
        self.ks.contains(key)
    }

    /// Puts one row; `sync` false skips the sync of `SyncPolicy::Always` (a later
    /// [`Rows::flush`] or synced write makes it durable).
    #[inline]
    pub(super) fn put(&self, key: &[u8], value: &[u8], sync: bool) -> Result<()> {
        self.ks.put_with(key, value, opts(sync))
    }

    /// Applies `batch` atomically; `sync` as for [`Rows::put`].
    #[inline]
    pub(super) fn write(&self, batch: Batch, sync: bool) -> Result<()> {
        self.ks.write_with(batch.0, opts(sync))
    }

    /// Makes every write acknowledged so far durable.
    pub(super) fn flush(&self) -> Result<()> {
        self.ks.db().flush()
    }

    /// Every row numbered with tag byte `tag` (`tag` + a big-endian `u64`: inode rows),
    /// in no particular order: `f` gets the number and the value.
    pub(super) fn for_each_numbered(
        &self,
        tag: u8,
        f: impl FnMut(u64, Value) -> Result<()>,
    ) -> Result<()> {
        self.ks.for_each_numbered(tag, f)
    }

    /// Every row but those whose key starts with `tag` (numbered rows, which no ordered
    /// scan sees: [`Rows::for_each_numbered`] visits them), in key order, keys whole.
    pub(super) fn scan_all_but(&self, tag: u8) -> impl Iterator<Item = Result<(Vec<u8>, Value)>> {
        let below = self.ks.range(..&[tag][..]);
        let above = tag.checked_add(1).map(|next| self.ks.range(&[next][..]..));
        below.chain(above.into_iter().flatten())
    }

    /// The rows whose keys start with `prefix`, in key order, after the key
    /// `prefix + after` if `after` is given. The keys handed out are without `prefix`.
    pub(super) fn scan_prefix(&self, prefix: &[u8], after: Option<&[u8]>) -> Scan {
        match after {
            Some(a) => Scan(self.ks.prefix_suffixes_after(prefix, a)),
            None => Scan(self.ks.prefix_suffixes(prefix)),
        }
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
        self.0.put(key, value);
    }

    /// Adds a put of row `key` that must be new: the write fails with `EEXIST` (and
    /// writes nothing) if the row exists (see `cairn::WriteBatch::put_new`).
    #[inline]
    pub(super) fn put_new(&mut self, key: &[u8], value: &[u8]) {
        self.0.put_new(key, value);
    }

    /// Adds a delete of row `key`.
    #[inline]
    pub(super) fn delete(&mut self, key: &[u8]) {
        self.0.delete(key);
    }
}
