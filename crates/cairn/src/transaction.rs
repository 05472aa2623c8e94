//! [`Transaction`]: optimistic, serializable transactions over a snapshot, committed as
//! one batch only if nothing they read changed (DESIGN.md, "Snapshots and
//! transactions").

use std::borrow::Borrow;
use std::collections::{BTreeMap, VecDeque};
use std::ops::{Bound, RangeBounds};
use std::time::Duration;

use crate::batch::Op;
use crate::core::{Check, KeyList, Range};
use crate::db::Db;
use crate::iter::Iter;
use crate::keys::{as_bytes, check_key, check_value, ikey, ns_bounds, ns_prefix_bounds};
use crate::keyspace::{Keyspace, WriteOptions};
use crate::record::Kind;
use crate::snapshot::Snapshot;
use crate::value::Value;
use crate::{Error, Result, MAX_KEY_LEN};

/// An optimistic transaction ([`Db::transaction`], [`Keyspace::transaction`]): reads
/// see its [`Snapshot`], taken when it began, with its own writes over it; writes are
/// buffered; [`Transaction::commit`] applies them as one atomic batch (with the
/// durability of [`Db::write`]) only if nothing it read — the keys it got or asked
/// about, and every range it scanned, so no phantom either — was written by anyone
/// after its snapshot. Otherwise the commit fails with [`Error::Conflict`] and writes
/// nothing. That makes committed transactions serializable: each behaves as if it ran
/// alone at its commit (a transaction that only read, at its snapshot), so write skew
/// is refused, not only lost updates.
///
/// The check runs under the write locks of the shards it read and writes, as
/// [`crate::WriteBatch::put_new`]'s does: transactions on different keys (and writers)
/// go on in parallel, and none waits for another's reads. A scan makes the commit lock
/// every shard for its check. An abandoned transaction is dropped: nothing was written.
/// [`Db::transact`] runs a closure as a transaction until it commits.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let db = cairn::Db::open(dir.path())?;
/// db.put("alice", "10")?;
/// let mut tx = db.transaction();
/// let n: u32 = std::str::from_utf8(&tx.get("alice")?.unwrap()).unwrap().parse().unwrap();
/// tx.put("alice", (n - 3).to_string())?;
/// tx.put("bob", "3")?;
/// db.put("alice", "20")?; // someone else wrote what it read
/// assert!(matches!(tx.commit(), Err(cairn::Error::Conflict)));
/// assert!(db.get("bob")?.is_none());
/// # Ok::<(), cairn::Error>(())
/// ```
pub struct Transaction {
    snap: Snapshot,
    /// Its writes, by key (kept as internal keys, so that the commit hands them to
    /// the write path without copying).
    writes: BTreeMap<TxKey, Written>,
    /// Internal keys it read from the snapshot.
    reads: KeyList,
    /// Internal ranges it scanned.
    ranges: Vec<Range>,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("snapshot", &self.snap)
            .field("writes", &self.writes.len())
            .field("reads", &self.reads.len())
            .field("ranges", &self.ranges.len())
            .finish()
    }
}

impl Db {
    /// Begins a transaction on keyspace 0 (see [`Transaction`]).
    pub fn transaction(&self) -> Transaction {
        Transaction::new(self.snapshot())
    }

    /// Runs `f` in a transaction and commits it, again in a new transaction as long as
    /// the commit (or `f`) fails with [`Error::Conflict`], backing off a little more
    /// each time (up to a millisecond). Returns what `f` returned with the commit that
    /// succeeded; any other error ends it. `f` may run several times: its effects
    /// outside the transaction should be harmless to repeat.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = cairn::Db::open(dir.path())?;
    /// let count = |v: Option<cairn::Value>| v.map_or(0, |v| u64::from_le_bytes(v[..8].try_into().unwrap()));
    /// let seen = db.transact(|tx| {
    ///     let n = count(tx.get("hits")?);
    ///     tx.put("hits", (n + 1).to_le_bytes())?;
    ///     Ok(n + 1)
    /// })?;
    /// assert_eq!(seen, 1);
    /// # Ok::<(), cairn::Error>(())
    /// ```
    pub fn transact<T>(&self, f: impl FnMut(&mut Transaction) -> Result<T>) -> Result<T> {
        retry(|| self.snapshot(), f)
    }
}

impl Keyspace {
    /// Begins a transaction on this keyspace (see [`Transaction`]).
    pub fn transaction(&self) -> Transaction {
        Transaction::new(self.snapshot())
    }

    /// [`Db::transact`] on this keyspace.
    pub fn transact<T>(&self, f: impl FnMut(&mut Transaction) -> Result<T>) -> Result<T> {
        retry(|| self.snapshot(), f)
    }
}

/// Runs `f` in transactions over snapshots from `snap` until one commits.
fn retry<T>(
    snap: impl Fn() -> Snapshot,
    mut f: impl FnMut(&mut Transaction) -> Result<T>,
) -> Result<T> {
    let mut attempt: u32 = 0;
    loop {
        let mut tx = Transaction::new(snap());
        let out = f(&mut tx).and_then(|v| tx.commit().map(|()| v));
        match out {
            Err(Error::Conflict) => {
                attempt = attempt.saturating_add(1);
                if attempt < 4 {
                    std::thread::yield_now();
                } else {
                    let us = 1u64 << attempt.min(10);
                    std::thread::sleep(Duration::from_micros(us));
                }
            }
            other => return other,
        }
    }
}

impl Transaction {
    fn new(snap: Snapshot) -> Transaction {
        Transaction {
            snap,
            writes: BTreeMap::new(),
            reads: KeyList::default(),
            ranges: Vec::new(),
        }
    }

    /// The snapshot its reads see (under its own writes).
    pub fn snapshot(&self) -> &Snapshot {
        &self.snap
    }

    fn ns(&self) -> u8 {
        self.snap.keyspace_id()
    }

    /// The value of `key`: its own write if it wrote `key`, else the snapshot's.
    pub fn get(&mut self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        let k = key.as_ref();
        if let Some(w) = self.writes.get(k) {
            return Ok(w.value.as_ref().map(|v| Value::new(v.clone(), 0)));
        }
        if k.len() <= MAX_KEY_LEN {
            self.reads.push(self.ns(), k);
        }
        self.snap.get(k)
    }

    /// Whether `key` has a value: its own write if it wrote `key`, else the
    /// snapshot's.
    pub fn contains(&mut self, key: impl AsRef<[u8]>) -> Result<bool> {
        let k = key.as_ref();
        if let Some(w) = self.writes.get(k) {
            return Ok(w.value.is_some());
        }
        if k.len() <= MAX_KEY_LEN {
            self.reads.push(self.ns(), k);
        }
        self.snap.contains(k)
    }

    /// Sets `key` to `value` when it commits.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.put_checked(key.as_ref(), value.as_ref(), false)
    }

    /// Sets `key`, which must have no value when it commits (checked with the rest,
    /// as [`crate::WriteBatch::put_new`]: the commit fails with [`Error::KeyExists`]
    /// and writes nothing if it has one).
    pub fn put_new(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.put_checked(key.as_ref(), value.as_ref(), true)
    }

    /// Deletes `key` when it commits.
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        let k = key.as_ref();
        check_key(k)?;
        self.write(k, None, false);
        Ok(())
    }

    /// [`Transaction::put`] (`new` false) or [`Transaction::put_new`] (`new` true).
    fn put_checked(&mut self, key: &[u8], value: &[u8], new: bool) -> Result<()> {
        check_key(key)?;
        check_value(value)?;
        self.write(key, Some(value.to_vec()), new);
        Ok(())
    }

    /// Records its write of `key` (`None`: a delete); `new`: the key must have no value
    /// when it commits (a requirement that stays once made, whatever later writes of
    /// the key do).
    fn write(&mut self, key: &[u8], value: Option<Vec<u8>>, new: bool) {
        match self.writes.get_mut(key) {
            Some(w) => {
                w.value = value;
                w.new |= new;
            }
            None => {
                let k = TxKey(ikey(self.ns(), key));
                self.writes.insert(k, Written { value, new });
            }
        }
    }

    /// Every key and value, its own writes over the snapshot, in key order. Reverse
    /// with `.rev()`. The whole keyspace counts as read.
    pub fn iter(&mut self) -> TxIter {
        self.range::<[u8], _>(..)
    }

    /// The keys within `range`, its own writes over the snapshot, in key order. Reverse
    /// with `.rev()`. The whole range counts as read (an insert into it by another
    /// writer before the commit is a conflict), however much of it is consumed.
    pub fn range<K: AsRef<[u8]> + ?Sized, R: RangeBounds<K>>(&mut self, range: R) -> TxIter {
        let (lo, hi) = ns_bounds(
            self.ns(),
            as_bytes(range.start_bound()),
            as_bytes(range.end_bound()),
        );
        let scan = self.snap.range(range);
        self.scan(lo, hi, scan)
    }

    /// The keys starting with `prefix`, its own writes over the snapshot, in key order.
    /// Reverse with `.rev()`. Every key with the prefix counts as read.
    pub fn prefix(&mut self, prefix: impl AsRef<[u8]>) -> TxIter {
        let (lo, hi) = ns_prefix_bounds(self.ns(), prefix.as_ref());
        let scan = self.snap.prefix(prefix);
        self.scan(lo, hi, scan)
    }

    /// `scan` of the internal range `lo..hi`, with its own writes there over it.
    fn scan(&mut self, lo: Bound<Vec<u8>>, hi: Bound<Vec<u8>>, scan: Iter) -> TxIter {
        let inside = |k: &TxKey| (lo.as_ref(), hi.as_ref()).contains(&k.0);
        let writes = self
            .writes
            .iter()
            .filter(|(k, _)| inside(k))
            .map(|(k, w)| (k.user().to_vec(), w.value.clone()))
            .collect();
        self.ranges.push((lo, hi));
        TxIter {
            scan,
            writes,
            front: None,
            back: None,
        }
    }

    /// Commits with the default [`WriteOptions`] (see [`Transaction::commit_with`]).
    pub fn commit(self) -> Result<()> {
        self.commit_with(WriteOptions::new())
    }

    /// Applies its writes as one atomic batch, waiting for durability as `opts` says
    /// (as [`Db::write_with`]), if nothing it read was written after its snapshot; else
    /// fails with [`Error::Conflict`] and writes nothing. A transaction that wrote
    /// nothing commits at once (its reads were of one snapshot).
    pub fn commit_with(self, opts: WriteOptions) -> Result<()> {
        if self.writes.is_empty() {
            return Ok(());
        }
        // Its writes go to the write path as they are: one operation a key (the map
        // holds each once), keys and values checked when they were written.
        let mut ops: Vec<Op> = Vec::with_capacity(self.writes.len());
        let mut new_keys = Vec::new();
        for (k, w) in self.writes {
            if w.new {
                new_keys.push(ops.len());
            }
            ops.push(match w.value {
                Some(v) => (Kind::Put, k.0, v),
                None => (Kind::Delete, k.0, Vec::new()),
            });
        }
        let check = Check {
            seq: self.snap.seq(),
            keys: self.reads,
            ranges: self.ranges,
        };
        // The snapshot stays live until the write is done: the check relies on it.
        let core = &self.snap.pin().core;
        core.write_ops(
            ops,
            &new_keys,
            opts.sync(),
            opts.frees_space_set(),
            Some(&check),
        )
    }
}

/// A key a transaction wrote: the internal key (its keyspace byte, then the key),
/// ordered, compared and looked up by the key alone (every key of one transaction is
/// of one keyspace).
#[derive(Debug)]
struct TxKey(Vec<u8>);

impl TxKey {
    fn user(&self) -> &[u8] {
        self.0.get(1..).unwrap_or_default()
    }
}

impl Borrow<[u8]> for TxKey {
    fn borrow(&self) -> &[u8] {
        self.user()
    }
}

impl PartialEq for TxKey {
    fn eq(&self, other: &TxKey) -> bool {
        self.user() == other.user()
    }
}

impl Eq for TxKey {}

impl PartialOrd for TxKey {
    fn partial_cmp(&self, other: &TxKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for TxKey {
    fn cmp(&self, other: &TxKey) -> std::cmp::Ordering {
        self.user().cmp(other.user())
    }
}

/// A transaction's write of one key.
#[derive(Debug)]
struct Written {
    /// The value (`None`: a delete).
    value: Option<Vec<u8>>,
    /// Whether the key must have no value when it commits ([`Transaction::put_new`]).
    new: bool,
}

/// A transaction's scan ([`Transaction::range`] ...): its own writes in the range over
/// the snapshot's records, in key order (or reverse with `.rev()`).
pub struct TxIter {
    scan: Iter,
    /// Its writes in the range, in key order.
    writes: VecDeque<(Vec<u8>, Option<Vec<u8>>)>,
    /// The snapshot's next item at each end, taken but not yet handed out.
    front: Option<(Vec<u8>, Value)>,
    back: Option<(Vec<u8>, Value)>,
}

impl TxIter {
    fn step(&mut self, forward: bool) -> Option<Result<(Vec<u8>, Value)>> {
        loop {
            let (peek, other) = match forward {
                true => (&mut self.front, &mut self.back),
                false => (&mut self.back, &mut self.front),
            };
            if peek.is_none() {
                let next = if forward {
                    self.scan.next()
                } else {
                    self.scan.next_back()
                };
                *peek = match next {
                    Some(Ok(kv)) => Some(kv),
                    Some(Err(e)) => return Some(Err(e)),
                    // The scan's last item may be waiting at the other end.
                    None => other.take(),
                };
            }
            let write = match forward {
                true => self.writes.front(),
                false => self.writes.back(),
            };
            let first = |a: &[u8], b: &[u8]| if forward { a < b } else { a > b };
            let take_write = match (peek.as_ref(), write) {
                (None, None) => return None,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some((sk, _)), Some((wk, _))) => {
                    if wk == sk {
                        // Its own write hides the snapshot's record.
                        *peek = None;
                        true
                    } else {
                        first(wk, sk)
                    }
                }
            };
            if !take_write {
                return peek.take().map(Ok);
            }
            let w = match forward {
                true => self.writes.pop_front(),
                false => self.writes.pop_back(),
            };
            if let Some((k, Some(v))) = w {
                return Some(Ok((k, Value::new(v, 0))));
            }
        }
    }
}

impl Iterator for TxIter {
    type Item = Result<(Vec<u8>, Value)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.step(true)
    }
}

impl DoubleEndedIterator for TxIter {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.step(false)
    }
}

impl std::iter::FusedIterator for TxIter {}
