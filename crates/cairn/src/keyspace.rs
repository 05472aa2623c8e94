//! [`Keyspace`]: a key space of its own inside a store, for the layers built on the
//! engine (the file store, the file system, the cluster) and for applications that want
//! separate tables. Its keys are stored behind a one-byte keyspace id; everything else
//! (shards, sequence numbers, group commit, the prefix guarantee) is the store's.

use std::ops::RangeBounds;

use crate::batch::WriteBatch;
use crate::db::Db;
use crate::iter::Iter;
use crate::keys::{as_bytes, check_key, check_value, ikey, ns_bounds, ns_prefix_bounds, with_ikey};
use crate::value::Value;
use crate::{Result, MAX_KEY_LEN};

/// How a write waits for durability.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = cairn::Options::new().sync(cairn::SyncPolicy::Always).open(dir.path())?;
/// let ks = db.keyspace(9);
/// // Many writes without waiting for each one's fsync, then one flush for all.
/// for i in 0..100u32 {
///     ks.put_with(i.to_be_bytes(), "v", cairn::WriteOptions::new().defer_sync())?;
/// }
/// db.flush()?;
/// # Ok::<(), cairn::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteOptions {
    sync: bool,
    frees_space: bool,
}

impl Default for WriteOptions {
    fn default() -> WriteOptions {
        WriteOptions::new()
    }
}

impl WriteOptions {
    /// The default: under `SyncPolicy::Always` the write returns once it is durable.
    pub fn new() -> WriteOptions {
        WriteOptions {
            sync: true,
            frees_space: false,
        }
    }

    /// Returns without waiting for durability even under `SyncPolicy::Always`; the
    /// caller makes the write durable later ([`Db::sync_written`], [`Db::flush`],
    /// [`Db::flush_shards`]). Order is kept: the write is still numbered before every
    /// later write, so a crash never keeps a later write without it. Under
    /// `SyncPolicy::Always` with the commit log, a deferred write of at most 16 KiB goes
    /// to the log (without waiting), so that [`Db::sync_written`] makes many of them
    /// durable with one `fdatasync` of the log, whatever shards they fell in.
    pub fn defer_sync(mut self) -> WriteOptions {
        self.sync = false;
        self
    }

    /// Marks a write that frees space although it holds a small put (a remove that
    /// records a tombstone row, say): like deletes, it may use the small reserve beyond
    /// `Options::max_size`, so that a full store can still be emptied.
    pub fn frees_space(mut self) -> WriteOptions {
        self.frees_space = true;
        self
    }

    /// Whether the write waits for durability (under `SyncPolicy::Always`).
    pub(crate) fn sync(&self) -> bool {
        self.sync
    }

    /// Whether the write was marked with [`WriteOptions::frees_space`].
    pub(crate) fn frees_space_set(&self) -> bool {
        self.frees_space
    }
}

/// A key space of its own inside a store (see [`Db::keyspace`]). Cheap to clone; it
/// keeps the store open like a [`Db`] clone.
#[derive(Clone, Debug)]
pub struct Keyspace {
    db: Db,
    id: u8,
}

impl Db {
    /// Opens keyspace `id` of this store: a key space of its own, with the same
    /// operations as `Db` (point reads and writes, atomic batches, ordered scans). Keys
    /// of different keyspaces never collide; every keyspace shares the store's shards,
    /// sequence numbers, group commit and crash guarantees, so a batch written to one
    /// keyspace is ordered with the writes of every other.
    ///
    /// Keyspace 0 is `Db`'s own (what [`Db::put`] and friends use). Layers built on the
    /// engine take one number each and document it (FORMAT.md lists those of cairn's
    /// own layers: 1 for the file store, 2 for the file system, 3 for the cluster).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = cairn::Db::open(dir.path())?;
    /// let meta = db.keyspace(7);
    /// meta.put("k", "in keyspace 7")?;
    /// db.put("k", "in keyspace 0")?;
    /// assert_eq!(meta.get("k")?.as_deref(), Some(&b"in keyspace 7"[..]));
    /// assert_eq!(db.get("k")?.as_deref(), Some(&b"in keyspace 0"[..]));
    /// # Ok::<(), cairn::Error>(())
    /// ```
    pub fn keyspace(&self, id: u8) -> Keyspace {
        Keyspace {
            db: self.clone(),
            id,
        }
    }
}

impl Keyspace {
    /// This keyspace's id.
    pub fn id(&self) -> u8 {
        self.id
    }

    /// The store this keyspace belongs to.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The stored form of `key`.
    fn ikey(&self, key: &[u8]) -> Vec<u8> {
        ikey(self.id, key)
    }

    /// Reads the value of `key`: at most one disk read, checksum verified.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        let k = key.as_ref();
        if k.len() > MAX_KEY_LEN {
            return Ok(None);
        }
        with_ikey(self.id, k, |ik| self.db.core().get(ik))
    }

    /// Reads the values of `keys`, in their order, as [`crate::Db::get_many`] does.
    pub fn get_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<Value>>> {
        crate::many::get_many_in(self.db.core(), self.id, keys)
    }

    /// Whether `key` has a value (answered from memory, no disk read).
    pub fn contains(&self, key: impl AsRef<[u8]>) -> bool {
        let k = key.as_ref();
        k.len() <= MAX_KEY_LEN && with_ikey(self.id, k, |ik| self.db.core().contains(ik))
    }

    /// Sets `key` to `value`.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.put_with(key, value, WriteOptions::new())
    }

    /// Sets `key` to `value`, waiting for durability as `opts` says.
    pub fn put_with(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        opts: WriteOptions,
    ) -> Result<()> {
        let k = key.as_ref();
        check_key(k)?;
        check_value(value.as_ref())?;
        self.db.core().put(&self.ikey(k), value.as_ref(), opts.sync)
    }

    /// Deletes `key` (a no-op when it is absent).
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.delete_with(key, WriteOptions::new())
    }

    /// Deletes `key`, waiting for durability as `opts` says.
    pub fn delete_with(&self, key: impl AsRef<[u8]>, opts: WriteOptions) -> Result<()> {
        let k = key.as_ref();
        check_key(k)?;
        self.db.core().delete(&self.ikey(k), opts.sync)
    }

    /// Applies every operation of `batch` to this keyspace atomically (see
    /// [`Db::write`]).
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        self.write_with(batch, WriteOptions::new())
    }

    /// Applies `batch` atomically, waiting for durability as `opts` says.
    pub fn write_with(&self, mut batch: WriteBatch, opts: WriteOptions) -> Result<()> {
        batch.set_keyspace(self.id);
        self.db
            .core()
            .write_batch_opts(batch, opts.sync, opts.frees_space)
    }

    /// Every key and value of this keyspace in key order. Reverse with `.rev()`.
    pub fn iter(&self) -> Iter {
        self.range::<[u8], _>(..)
    }

    /// The keys within `range`, in key order. Reverse with `.rev()`.
    pub fn range<K: AsRef<[u8]> + ?Sized, R: RangeBounds<K>>(&self, range: R) -> Iter {
        let (lo, hi) = ns_bounds(
            self.id,
            as_bytes(range.start_bound()),
            as_bytes(range.end_bound()),
        );
        Iter::new(self.db.core_arc().clone(), lo, hi, 1)
    }

    /// The keys starting with `prefix`, in key order. Reverse with `.rev()`.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        let (lo, hi) = ns_prefix_bounds(self.id, prefix.as_ref());
        Iter::new(self.db.core_arc().clone(), lo, hi, 1)
    }

    /// Like [`Keyspace::prefix`], handing out each key with `prefix` removed (no copy
    /// of the prefix per key): for tables whose rows share a prefix, such as the
    /// entries of one directory.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = cairn::Db::open(dir.path())?;
    /// let ks = db.keyspace(5);
    /// ks.put("dir1/a", "")?;
    /// ks.put("dir1/b", "")?;
    /// ks.put("dir2/c", "")?;
    /// let names: Vec<_> = ks.prefix_suffixes("dir1/").map(|r| r.unwrap().0).collect();
    /// assert_eq!(names, vec![b"a".to_vec(), b"b".to_vec()]);
    /// # Ok::<(), cairn::Error>(())
    /// ```
    pub fn prefix_suffixes(&self, prefix: impl AsRef<[u8]>) -> Iter {
        let p = prefix.as_ref();
        self.prefix_stripped(p, p.len())
    }

    /// Like [`Keyspace::prefix_suffixes`], resuming after the key `prefix + after`:
    /// for listings read in pages (a directory, say) that resume after the last suffix
    /// they handed out.
    pub fn prefix_suffixes_after(&self, prefix: impl AsRef<[u8]>, after: &[u8]) -> Iter {
        let p = prefix.as_ref();
        let (_, hi) = ns_prefix_bounds(self.id, p);
        let mut lo = ikey(self.id, p);
        lo.extend_from_slice(after);
        Iter::new(
            self.db.core_arc().clone(),
            std::ops::Bound::Excluded(lo),
            hi,
            1 + p.len(),
        )
    }

    /// Like [`Keyspace::prefix`], handing out each key without its first `strip`
    /// bytes (at most the prefix's length): for a table whose rows start with a tag
    /// byte, say, listed by a prefix that goes beyond the tag.
    pub fn prefix_stripped(&self, prefix: impl AsRef<[u8]>, strip: usize) -> Iter {
        let p = prefix.as_ref();
        let (lo, hi) = ns_prefix_bounds(self.id, p);
        Iter::new(self.db.core_arc().clone(), lo, hi, 1 + strip.min(p.len()))
    }

    /// Visits every numbered row of this keyspace with tag byte `tag` (the keys made of
    /// `tag` and an 8-byte big-endian number; see [`crate::Options::numbered_rows`]):
    /// `f` gets each row's number and value, in no particular order. Works the same
    /// whether the rows are declared numbered (then held by number only, and refused to
    /// ordered scans) or not. A row that exists for the whole visit is visited once,
    /// with a value it held during the visit; one written or deleted meanwhile may be
    /// visited or not. Memory: 8 bytes per row of the largest shard. Stops at the first
    /// error, of a read or of `f`.
    pub fn for_each_numbered(
        &self,
        tag: u8,
        mut f: impl FnMut(u64, Value) -> Result<()>,
    ) -> Result<()> {
        use std::ops::Bound;
        const CHUNK: usize = 4096;
        let core = self.db.core();
        let (lo, hi) = ns_prefix_bounds(self.id, &[tag]);
        let (lo, hi) = (
            lo.as_ref().map(Vec::as_slice),
            hi.as_ref().map(Vec::as_slice),
        );
        let mut numbers = Vec::new();
        let mut key = vec![tag];
        for shard in &core.shards {
            numbers.clear();
            shard
                .state
                .read()
                .index
                .numbered_keys(self.id, tag, &mut numbers);
            // Those in the ordered index (undeclared, or numbers too large for a
            // table), a chunk at a time, each resumed after the last key of the one
            // before.
            let mut after: Option<Vec<u8>> = None;
            loop {
                let mut chunk = Vec::with_capacity(CHUNK);
                let lower = after.as_deref().map_or(lo, Bound::Excluded);
                shard
                    .state
                    .read()
                    .index
                    .scan_forward(lower, hi, CHUNK, &mut chunk);
                let full = chunk.len() == CHUNK;
                numbers.extend(chunk.iter().filter_map(|(k, _)| {
                    let n: [u8; 8] = k.get(2..)?.try_into().ok()?;
                    Some(u64::from_be_bytes(n))
                }));
                match chunk.pop() {
                    Some((last, _)) if full => after = Some(last),
                    _ => break,
                }
            }
            for &n in &numbers {
                key.truncate(1);
                key.extend_from_slice(&n.to_be_bytes());
                if let Some(v) = self.get(&key)? {
                    f(n, v)?;
                }
            }
        }
        Ok(())
    }

    /// The shard that holds `key`: writes to one shard are synced by one fsync
    /// ([`Db::flush_shards`]).
    pub fn shard_of(&self, key: impl AsRef<[u8]>) -> usize {
        self.db.core().shard_of(&self.ikey(key.as_ref()))
    }

    /// Asks the kernel to start reading `key`'s record into the page cache without
    /// waiting (a no-op if the key is absent or its record is still in memory), so that
    /// a streaming reader can keep several reads in flight.
    pub fn prefetch(&self, key: impl AsRef<[u8]>) {
        self.db.core().prefetch(&self.ikey(key.as_ref()))
    }
}
