//! The write path. A single put or delete and an atomic batch go the same way
//! ([`Core::apply`]): refused if the store is closed; shards whose buffer is full
//! written out; the size limit reserved ([`crate::ctx::Reservation`], which gives back
//! what the write does not keep whichever way it ends); the write locks of its shards
//! taken in shard order; refused if a shard failed or a key that must be new exists;
//! deletes of absent keys left out; then one sequence number taken and the records
//! appended (and framed in the commit log, if the write goes there) before the locks go.
//! Then the caller waits for the durability it asked for (`seq.rs` defines it).

use std::ops::Bound;

use parking_lot::RwLockWriteGuard;

use super::Core;
use crate::batch::{Op, WriteBatch};
use crate::commitlog::{MAX_DEFERRED_LOGGED_BYTES, MAX_LOGGED_BYTES, MAX_STAGED_BYTES};
use crate::keys::check_value;
use crate::record::Kind;
use crate::seq::Need;
use crate::shard::{Prepared, ShardState};
use crate::versions::Released;
use crate::{Error, Result, SyncPolicy, MAX_KEY_LEN};

/// The borrowed form of a bound.
fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// A write's records, grouped by shard, as [`Core::apply`] takes them.
struct Write<'w, 'k> {
    /// Each record with its shard, sorted by shard (a batch's order kept within one).
    ops: &'w [(usize, Prepared<'k>)],
    /// The shards written, ascending, each once.
    shards: &'w [usize],
    /// Keys that must not exist before the write (`WriteBatch::put_new`).
    new_keys: &'w [&'k [u8]],
    /// The write frees space though it holds a put (a file remove): it may use the
    /// delete reserve beyond `max_size`, as a write of deletes only may.
    frees: bool,
    /// A transaction's commit: what it read, which must not have changed since its
    /// snapshot (`shards` then names the shards of those reads too).
    check: Option<&'w Check>,
}

/// What a transaction's commit checks under its shards' write locks: nothing it read
/// was written after its snapshot, numbered `seq` (which is live: every write after it
/// noted what it superseded, `versions`).
pub(crate) struct Check {
    pub seq: u64,
    /// The internal keys it read.
    pub keys: KeyList,
    /// The internal ranges it scanned (they take every shard's lock).
    pub ranges: Vec<Range>,
}

/// Internal keys, one after another in one buffer (a transaction's reads: one
/// allocation for all of them, not one a key).
#[derive(Debug, Default)]
pub(crate) struct KeyList {
    bytes: Vec<u8>,
    /// Where each key ends in `bytes`.
    ends: Vec<usize>,
}

impl KeyList {
    /// Adds the internal key of `key` in namespace `ns`.
    pub fn push(&mut self, ns: u8, key: &[u8]) {
        self.bytes.push(ns);
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
    }

    /// How many keys it holds (a key added twice counts twice).
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Its keys, in the order they were added.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(a, b)| self.bytes.get(a..b).unwrap_or_default())
    }
}

/// An internal key range a transaction scanned.
pub(crate) type Range = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// Where a write stands in the write order: its number and, if it went to the commit
/// log, the log position its frames end at.
#[derive(Clone, Copy)]
struct Written {
    seq: u64,
    lsn: Option<u64>,
}

/// The write locks of a write's shards, in shard order (one without a `Vec`).
enum Locks<'a> {
    One(RwLockWriteGuard<'a, ShardState>),
    Many(Vec<RwLockWriteGuard<'a, ShardState>>),
}

impl<'a> Locks<'a> {
    fn all(&self) -> &[RwLockWriteGuard<'a, ShardState>] {
        match self {
            Locks::One(g) => std::slice::from_ref(g),
            Locks::Many(v) => v,
        }
    }

    fn all_mut(&mut self) -> &mut [RwLockWriteGuard<'a, ShardState>] {
        match self {
            Locks::One(g) => std::slice::from_mut(g),
            Locks::Many(v) => v,
        }
    }
}

impl Core {
    /// Puts an internal key; `sync` false skips the sync of `SyncPolicy::Always` (the
    /// caller makes the data durable later with `flush`).
    pub fn put(&self, ikey: &[u8], value: &[u8], sync: bool) -> Result<()> {
        check_value(value)?;
        self.write_single(Prepared::new(Kind::Put, ikey, value), sync)
    }

    /// Deletes an internal key.
    pub fn delete(&self, ikey: &[u8], sync: bool) -> Result<()> {
        self.write_single(Prepared::new(Kind::Delete, ikey, &[]), sync)
    }

    /// Applies one record (a write of one shard, with no `Vec`), then waits as asked.
    fn write_single(&self, op: Prepared<'_>, sync: bool) -> Result<()> {
        let shard = self.shard_of(op.key);
        let ops = [(shard, op)];
        let w = Write {
            ops: &ops,
            shards: std::slice::from_ref(&shard),
            new_keys: &[],
            frees: false,
            check: None,
        };
        let written = self.apply(&w, &mut [false], sync)?;
        self.after_write(written, sync, shard)
    }

    /// Applies a batch atomically; `sync` as for [`Core::put`]; with `frees`, for a
    /// batch that frees space though it holds a small put (a file remove): it may use
    /// the delete reserve beyond `max_size`.
    pub fn write_batch_opts(&self, batch: WriteBatch, sync: bool, frees: bool) -> Result<()> {
        self.write_checked(batch, sync, frees, None)
    }

    /// [`Core::write_batch_opts`], refused with [`Error::Conflict`] (nothing written)
    /// when `check` finds a read changed: a transaction's commit.
    pub fn write_checked(
        &self,
        batch: WriteBatch,
        sync: bool,
        frees: bool,
        check: Option<&Check>,
    ) -> Result<()> {
        if let Some(len) = batch.too_large_key() {
            return Err(Error::KeyTooLarge {
                len,
                max: MAX_KEY_LEN,
            });
        }
        let (ops, new_keys) = batch.into_final_parts();
        self.write_ops(ops, &new_keys, sync, frees, check)
    }

    /// Applies `ops` atomically (each key at most once, none over [`MAX_KEY_LEN`]);
    /// `new_keys`: the indices of the puts whose keys must have no value before;
    /// `sync`, `frees` and `check` as for [`Core::write_checked`].
    pub(crate) fn write_ops(
        &self,
        ops: Vec<Op>,
        new_keys: &[usize],
        sync: bool,
        frees: bool,
        check: Option<&Check>,
    ) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        if ops.len() > u32::MAX as usize {
            return Err(Error::InvalidArgument(
                "batch has too many operations".into(),
            ));
        }
        // Operations grouped by shard (a stable sort keeps their order within a shard).
        let mut prepared: Vec<(usize, Prepared<'_>)> = Vec::with_capacity(ops.len());
        for (kind, k, v) in &ops {
            check_value(v)?;
            let s = self.shard_of(k);
            if *kind == Kind::Put {
                // Asked for now, a put's hash-side bucket (a cache miss per key in a
                // large shard) arrives while the batch is prepared below, rather than
                // being waited for under the shard's lock.
                self.prefetch_entry(s, k);
            }
            prepared.push((s, Prepared::new(*kind, k, v)));
        }
        prepared.sort_by_key(|p| p.0);
        let mut shards: Vec<usize> = prepared.iter().map(|p| p.0).collect();
        if let Some(c) = check {
            // The shards of what it read are locked too, so that nothing writes them
            // between the check and the write.
            match c.ranges.is_empty() {
                true => shards.extend(c.keys.iter().map(|k| self.shard_of(k))),
                false => shards.extend(0..self.shards.len()),
            }
            shards.sort_unstable();
        }
        shards.dedup();
        let new_keys: Vec<&[u8]> = new_keys
            .iter()
            .filter_map(|&i| ops.get(i).map(|op| &op.1[..]))
            .collect();
        let w = Write {
            ops: &prepared,
            shards: &shards,
            new_keys: &new_keys,
            frees,
            check,
        };
        let written = self.apply(&w, &mut vec![false; prepared.len()], sync)?;
        self.after_write(written, sync, shards[0])
    }

    /// Starts loading the index memory that writing internal key `ikey` (in shard
    /// `shard`) will touch into the CPU's cache, without waiting; skipped when the
    /// shard's lock is held by a writer (a hint only).
    #[inline]
    fn prefetch_entry(&self, shard: usize, ikey: &[u8]) {
        if let Some(st) = self.shards[shard].state.try_read() {
            st.index.prefetch(ikey);
        }
    }

    /// The write path (see the module documentation): applies `w` atomically, with
    /// `keep` (one flag a record) for the records it appends. Returns where the write
    /// stands in the write order, or `None` when it changed nothing (every record a
    /// delete of an absent key).
    fn apply(&self, w: &Write<'_, '_>, keep: &mut [bool], sync: bool) -> Result<Option<Written>> {
        if self.is_closed() {
            return Err(self.refusal());
        }
        let mut write_out = false;
        for &s in w.shards {
            write_out |= self.shards[s].prepare_write(self)?;
        }
        if write_out {
            self.write_out()?;
        }
        let deletes_only = w.frees || w.ops.iter().all(|p| p.1.kind == Kind::Delete);
        let bytes = w.ops.iter().map(|p| p.1.record_len()).sum();
        let mut reserved = self.reserve(bytes, deletes_only)?;
        let mut locks = match w.shards {
            [s] => Locks::One(self.shards[*s].state.write()),
            _ => Locks::Many(
                w.shards
                    .iter()
                    .map(|&s| self.shards[s].state.write())
                    .collect(),
            ),
        };
        let (kept, used) = self.judge(w, locks.all(), keep)?;
        if kept == 0 {
            return Ok(None);
        }
        reserved.keep(used);
        let (written, switched, released) =
            self.append_kept(w, locks.all_mut(), keep, kept, sync, used);
        drop(locks);
        for r in released {
            self.sub_disk_used(r.bytes);
        }
        if switched {
            self.want_checkpoint();
        }
        for (s, p) in w.ops {
            self.shards[*s].note_user((p.key.len() + p.value.len()) as u64);
        }
        Ok(Some(written))
    }

    /// Under the write locks `locks` (of `w.shards`): refuses the write if a shard
    /// failed or a key that must be new exists, and marks in `keep` the records to
    /// append. Deletes of absent keys are left out (judged by the index's hash side:
    /// rarely, a key sharing its tag with a live one keeps a delete that removes nothing,
    /// which is harmless). Returns how many records are kept and their bytes.
    fn judge(
        &self,
        w: &Write<'_, '_>,
        locks: &[RwLockWriteGuard<'_, ShardState>],
        keep: &mut [bool],
    ) -> Result<(u32, u64)> {
        if let Some(f) = locks.iter().find_map(|g| g.failed.clone()) {
            return Err(Error::ReadOnly(f));
        }
        let state_of = |s: usize| &locks[w.shards.binary_search(&s).unwrap_or(0)];
        if let Some(c) = w.check {
            let read_changed = c
                .keys
                .iter()
                .any(|k| state_of(self.shard_of(k)).versions.changed_after(k, c.seq));
            let range_changed = || {
                c.ranges.iter().any(|(lo, hi)| {
                    locks.iter().any(|g| {
                        g.versions
                            .range_changed_after(as_ref(lo), as_ref(hi), c.seq)
                    })
                })
            };
            if read_changed || range_changed() {
                return Err(Error::Conflict);
            }
        }
        // Checked under the locks, so that nothing can create them between the check
        // and the write.
        if let Some(k) = w
            .new_keys
            .iter()
            .find(|k| state_of(self.shard_of(k)).index.contains(k))
        {
            return Err(Error::KeyExists {
                len: k.len().saturating_sub(1),
            });
        }
        let (mut kept, mut used) = (0u32, 0u64);
        for ((s, p), k) in w.ops.iter().zip(keep.iter_mut()) {
            *k = p.kind == Kind::Put || state_of(*s).index.candidate(p.key).is_some();
            if *k {
                kept += 1;
                used += p.record_len();
            }
        }
        Ok((kept, used))
    }

    /// Takes the write's number and appends its kept records (`kept` of them, `used`
    /// bytes) under it, shard by shard, each shard's new records framed in the commit
    /// log too if the write goes there (the number is taken while the log is held, so
    /// the log holds writes in the order of their numbers). Returns where the write
    /// stands and whether the log moved to its other file.
    fn append_kept(
        &self,
        w: &Write<'_, '_>,
        locks: &mut [RwLockWriteGuard<'_, ShardState>],
        keep: &[bool],
        kept: u32,
        sync: bool,
        used: u64,
    ) -> (Written, bool, Vec<Released>) {
        let mut log = match &self.log {
            Some(l) if self.logs(sync, used) => Some(l.lock()),
            _ => None,
        };
        let seq = self.seqs.assign();
        // Read after the number was taken (`versions::Snapshots`).
        let live = self.snaps.live(w.check.is_some());
        let mut released = Vec::new();
        let mut i = 0;
        for (g, &s) in locks.iter_mut().zip(w.shards) {
            let start = g.active.buf.len();
            while let Some((_, p)) = w.ops.get(i).filter(|o| o.0 == s) {
                if keep[i] {
                    g.append(p, seq, kept, log.is_some(), live);
                }
                i += 1;
            }
            if live.is_some() || !g.versions.is_empty() {
                let oldest = live.map_or(u64::MAX, |l| l.oldest);
                if g.versions.prunable(oldest) {
                    let r = g.prune_versions(oldest, false);
                    if !r.is_empty() {
                        released.push(r);
                    }
                }
                self.shards[s].notes.publish(&g.versions);
            }
            if let Some(l) = log.as_mut() {
                if g.active.buf.len() > start {
                    l.append(s as u32, &g.active.buf[start..]);
                }
            }
        }
        let lsn = log.as_ref().map(|l| l.end());
        let switched = log.is_some_and(|l| l.switched());
        (Written { seq, lsn }, switched, released)
    }

    /// Whether this write goes to the commit log: under `SyncPolicy::Always`, a durable
    /// write of at most `MAX_LOGGED_BYTES`, or a deferred one (`defer_sync`) of at most
    /// `MAX_DEFERRED_LOGGED_BYTES` (a later `sync_written` then syncs the log once for
    /// it instead of the shards it touched; larger deferred writes, such as a file's
    /// chunks, are synced in their shards rather than written twice).
    fn logs(&self, sync: bool, bytes: u64) -> bool {
        let max = if sync {
            MAX_LOGGED_BYTES
        } else {
            MAX_DEFERRED_LOGGED_BYTES
        };
        self.log.is_some() && self.opts.sync == SyncPolicy::Always && bytes <= max
    }

    /// Hands every shard's buffered records to the kernel (no fsync): after a killed
    /// process, the writes made so far survive.
    pub fn write_out(&self) -> Result<()> {
        for s in &self.shards {
            s.flush(self, false)?;
        }
        Ok(())
    }

    /// After a write (`None`: nothing was written): under `SyncPolicy::Always` with
    /// `sync`, waits until it survives a crash. `shard`: the (first) shard written,
    /// synced first. A deferred write that went to the log waits for a sync only when
    /// the log holds more than `MAX_STAGED_BYTES` not yet written: that bounds the
    /// memory of a caller who defers many writes and never asks for durability.
    fn after_write(&self, w: Option<Written>, sync: bool, shard: usize) -> Result<()> {
        let durable = sync && self.opts.sync == SyncPolicy::Always;
        match w {
            Some(w) if durable => self.wait_safe(w.seq, shard, w.lsn),
            // A durable write that changed nothing (the delete of an absent key) still
            // returns only once every earlier write is safe.
            None if durable => self.sync_written(shard),
            Some(Written { lsn: Some(lsn), .. }) => match &self.log {
                Some(log) if log.staged() > MAX_STAGED_BYTES => log.wait(lsn, |msg| self.fail(msg)),
                _ => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// Makes every write numbered so far survive a crash ([`Core::wait_safe`] of the
    /// last number taken), syncing shard `first` first.
    pub fn sync_written(&self, first: usize) -> Result<()> {
        self.wait_safe(self.seqs.last_assigned(), first, None)
    }

    /// Returns once every write numbered up to `seq` survives a crash (so a durable
    /// write never depends on a lost earlier one): durable, or without a commit log
    /// ([`Need::Durable`]); with one, logged up to `lsn` (the end of the write numbered
    /// `seq`, if it was logged; else the log's end now, read after `seq` was taken, so
    /// every logged write numbered up to it is before it) or durable
    /// ([`Need::Logged`]).
    fn wait_safe(&self, seq: u64, first: usize, lsn: Option<u64>) -> Result<()> {
        if self.seqs.durable() >= seq {
            return Ok(());
        }
        let need = match &self.log {
            None => Need::Durable,
            Some(log) => Need::Logged {
                lsn: lsn.unwrap_or_else(|| log.appended()),
            },
        };
        self.sync_upto(seq, first, need)
    }

    /// Makes every record numbered up to `seq` what `need` says, sharing the commit
    /// log's sync and each shard's with the other writers waiting for them (group
    /// commit). Shards are visited from `first` on: a writer syncs its own shard first,
    /// so concurrent writers sync different shards in parallel and then find the others'
    /// shards synced (or join their sync).
    fn sync_upto(&self, seq: u64, first: usize, need: Need) -> Result<()> {
        if let (Need::Logged { lsn }, Some(log)) = (need, &self.log) {
            log.wait(lsn, |msg| self.fail(msg))?;
        }
        // A write numbered up to `seq` appended its records before it released its
        // shards' locks, and a shard's sync takes that lock: none of them is missed.
        let n = self.shards.len();
        for i in 0..n {
            self.shards[(first + i) % n].sync_upto(self, seq, need.cover())?;
        }
        if need == Need::Durable {
            self.seqs.mark_durable(seq);
        }
        Ok(())
    }
}
