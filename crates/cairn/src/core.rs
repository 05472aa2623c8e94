//! The open store's shared state: the [`StoreCtx`] and the shards, with the operations
//! that span shards — routing a key to its shard, single writes, atomic batches, group
//! commit over all shards, flush and close. The handle ([`crate::Db`]), the keyspaces,
//! iterators, compaction and the background threads sit above it.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fs::File;
use std::ops::Deref;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::batch::WriteBatch;
use crate::commitlog::{CommitLog, MAX_DEFERRED_LOGGED_BYTES, MAX_LOGGED_BYTES, MAX_STAGED_BYTES};
use crate::ctx::StoreCtx;
use crate::damage::Damage;
use crate::keys::check_value;
use crate::manifest::{self, SeqState};
use crate::record::Kind;
use crate::route::Router;
use crate::shard::{Prepared, Shard};
use crate::value::Value;
use crate::{Error, Result, SyncPolicy, MAX_KEY_LEN};

/// State that layers above the engine attach to an open store (see
/// [`crate::Db::extension`]), one value per type.
pub(crate) type Extensions = Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>;

/// The open store: the context every shard shares, the shards, and what the store keeps
/// beside them.
pub(crate) struct Core {
    pub ctx: StoreCtx,
    pub shards: Vec<Shard>,
    /// Which shard a key lives in (as the manifest says).
    pub router: Router,
    /// The persisted `SEQSTATE`.
    pub seqstate: Mutex<SeqState>,
    /// Segments never synced that are being dropped, until their unlink is durable
    /// (`SeqState::dropped`): every `SEQSTATE` written meanwhile lists them.
    pub dropping: Mutex<Vec<(u32, u32, u64)>>,
    pub open_damage: Vec<Damage>,
    /// The commit log of durable writes (`SyncPolicy::Always` with a log size).
    pub log: Option<CommitLog>,
    /// State of the layers above, by type.
    pub extensions: Extensions,
    pub _lock: File,
}

impl Deref for Core {
    type Target = StoreCtx;
    fn deref(&self) -> &StoreCtx {
        &self.ctx
    }
}

impl Core {
    /// The shard of internal key `key`.
    #[inline]
    pub fn shard_of(&self, key: &[u8]) -> usize {
        self.router.shard_of(key)
    }

    /// Creates the spare segments shards asked for.
    pub(crate) fn make_spares(&self) {
        if self.spare_wanted.swap(false, Ordering::SeqCst) {
            for s in &self.shards {
                s.make_spare(self);
            }
        }
    }

    /// Makes every acknowledged write durable and advances the batch watermark.
    pub fn flush(&self) -> Result<()> {
        // After a failed sync (of a shard or of the commit log) what was acknowledged
        // may not be on disk: no flush can say it is.
        if let Some(f) = self.failure() {
            return Err(Error::ReadOnly(f));
        }
        let upto = self.current_seq().saturating_sub(1);
        for s in &self.shards {
            s.flush(self, true)?;
        }
        self.durable_seq.fetch_max(upto, Ordering::SeqCst);
        Ok(())
    }

    /// The end of a clean close (`Db::close` does the steps before it: everything
    /// durable, then the space of dead records given back where that is cheap): a hint
    /// file for every active segment (so the next open reads no data), and the batch
    /// watermark recorded. Writes are refused by then.
    pub(crate) fn finish_close(&self) -> Result<()> {
        for s in &self.shards {
            s.drop_spare(self)?;
            s.hint_active(self)?;
        }
        self.persist_watermark(self.durable_seq())?;
        // Every logged record is durable in its shard (the close flushed): the next
        // open reads no frame.
        match &self.log {
            Some(log) => log.new_generations(),
            None => Ok(()),
        }
    }

    /// Frees a commit log file that appends moved away from: makes every shard
    /// durable, after which each of its records is in its segment. Returns whether
    /// there was one. Run by the maintenance thread.
    pub(crate) fn checkpoint_log(&self) -> Result<bool> {
        let Some(log) = &self.log else {
            return Ok(false);
        };
        self.checkpoint_wanted.store(false, Ordering::SeqCst);
        let Some(i) = log.full_file() else {
            return Ok(false);
        };
        // Every record framed in file `i` was appended to its shard before appends
        // moved away from it, so this flush covers them.
        self.flush()?;
        log.freed(i);
        Ok(true)
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

    /// Ensures `SEQSTATE` records a watermark of at least `seq`, flushing first if the
    /// in-memory watermark is behind. Compaction calls this before it may drop or
    /// rewrite any record up to `seq`.
    pub fn persist_watermark(&self, seq: u64) -> Result<()> {
        if self.durable_seq() < seq {
            self.flush()?;
        }
        if self.seqstate.lock().watermark >= seq {
            return Ok(());
        }
        self.raise_watermark(self.durable_seq(), &[])
    }

    /// Records a watermark of at least `seq` in `SEQSTATE`, and counts every write up to
    /// it as durable. The caller has made every record numbered up to `seq` durable in
    /// every shard, but for records of segments it is dropping whole, whose successors
    /// are durable. `dropping` (`(shard, segment, created_seq)`) lists those of them that
    /// are not sealed, which may be partly on disk: the same `SEQSTATE` records them
    /// (`SeqState::dropped`), so that open removes them if their unlink is lost, and
    /// every later one too until [`Core::dropped`] says their unlink is durable. This is
    /// the one place that writes `SEQSTATE` while the store is open.
    pub(crate) fn raise_watermark(&self, seq: u64, dropping: &[(u32, u32, u64)]) -> Result<()> {
        {
            let mut st = self.seqstate.lock();
            let mut pending = self.dropping.lock();
            pending.extend_from_slice(dropping);
            if st.watermark < seq || !dropping.is_empty() {
                let mut next = st.clone();
                next.watermark = next.watermark.max(seq);
                next.dropped = pending.clone();
                manifest::write_seqstate(&self.fs, &self.dir, &next)?;
                *st = next;
            }
        }
        self.durable_seq.fetch_max(seq, Ordering::SeqCst);
        Ok(())
    }

    /// Segment `seg` of shard `shard`, listed by [`Core::raise_watermark`], is durably
    /// unlinked: later `SEQSTATE`s leave it out.
    pub fn dropped(&self, shard: u32, seg: u32) {
        self.dropping
            .lock()
            .retain(|&(sh, s, _)| (sh, s) != (shard, seg));
    }

    /// Reads the value of an internal key.
    pub fn get(&self, ikey: &[u8]) -> Result<Option<Value>> {
        self.shards[self.shard_of(ikey)].get(ikey)
    }

    /// Asks the kernel to start reading the record of an internal key into the page
    /// cache, without waiting (a no-op if the key is absent or its record is still in
    /// memory). Lets a streaming reader (the file store) keep several reads in flight.
    pub fn prefetch(&self, ikey: &[u8]) {
        let src = {
            let st = self.shards[self.shard_of(ikey)].state.read();
            st.index
                .get(ikey)
                .and_then(|loc| st.source(loc).ok().map(|s| (loc, s)))
        };
        if let Some((loc, crate::shard::Source::File(f))) = src {
            f.will_need(loc.off as u64, loc.len as u64);
        }
    }

    /// Starts writing shard `shard`'s written-but-unsynced data of its active segment
    /// to disk without waiting (`sync_file_range(SYNC_FILE_RANGE_WRITE)`), so that a
    /// later sync finds less to do. A streaming writer (the file store) calls this as it
    /// goes, so that the sync at its commit overlaps with the streaming.
    pub fn start_writeback(&self, shard: usize) {
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::io::AsRawFd;
            let file = self.shards[shard].state.read().active.file.clone();
            // SAFETY: an advisory system call on a descriptor that `file` keeps open.
            unsafe {
                libc::sync_file_range(file.file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = shard;
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

    /// Whether an internal key has a value: the index's hash side answers "absent"
    /// with one bucket read (a create's check that its name is free), the ordered side
    /// confirms "present".
    pub fn contains(&self, ikey: &[u8]) -> bool {
        self.shards[self.shard_of(ikey)]
            .state
            .read()
            .index
            .contains(ikey)
    }

    /// Puts an internal key; `sync` false skips the sync of `SyncPolicy::Always` (the
    /// caller makes the data durable later with `flush`).
    pub fn put(&self, ikey: &[u8], value: &[u8], sync: bool) -> Result<()> {
        check_value(value)?;
        let shard = self.shard_of(ikey);
        let w = self.write_one(Prepared::new(Kind::Put, ikey, value), sync)?;
        self.after_write(w, sync, shard)
    }

    /// Deletes an internal key.
    pub fn delete(&self, ikey: &[u8], sync: bool) -> Result<()> {
        let shard = self.shard_of(ikey);
        let w = self.write_one(Prepared::new(Kind::Delete, ikey, &[]), sync)?;
        self.after_write(w, sync, shard)
    }

    /// After a write (its sequence number, and its end in the commit log if it went
    /// there; `None`: nothing was written): under `SyncPolicy::Always` with `sync`,
    /// waits until it is durable. `shard`: the (first) shard written, synced first.
    /// A deferred write that went to the log waits for a sync only when the log holds
    /// more than `MAX_STAGED_BYTES` not yet written: that bounds the memory of a caller
    /// who defers many writes and never asks for durability.
    fn after_write(&self, w: Option<(u64, Option<u64>)>, sync: bool, shard: usize) -> Result<()> {
        match w {
            Some((seq, lsn)) if sync && self.opts.sync == SyncPolicy::Always => {
                self.sync_upto_logged(seq, shard, lsn)
            }
            // A durable write that changed nothing (the delete of an absent key) still
            // returns only once every earlier write is durable.
            None if sync && self.opts.sync == SyncPolicy::Always => self.sync_written(shard),
            Some((_, Some(lsn))) => match &self.log {
                Some(log) if log.staged() > MAX_STAGED_BYTES => log.wait(lsn, |msg| self.fail(msg)),
                _ => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// Returns once every write numbered up to `seq` is durable in every shard (so a
    /// durable write never depends on a lost earlier one), sharing each shard's fsync
    /// with the other writers waiting for it. Shards are visited from `first` on: a
    /// writer syncs its own shard first, so concurrent writers sync different shards in
    /// parallel and then find the others' shards synced (or join their fsync).
    pub fn sync_upto(&self, seq: u64, first: usize) -> Result<()> {
        self.sync_upto_logged(seq, first, None)
    }

    /// Makes every write numbered so far durable ([`Core::sync_upto`] of the last
    /// number taken), syncing shard `first` first.
    pub fn sync_written(&self, first: usize) -> Result<()> {
        self.sync_upto(self.current_seq().saturating_sub(1), first)
    }

    /// Like [`Core::sync_upto`], where the write numbered `seq` ends at log position
    /// `lsn` if it went to the commit log. With the log, every logged write numbered
    /// up to `seq` is in the log before that position (each takes its number while it
    /// holds the log), so one sync of the log makes them durable; the writes that are
    /// not logged are synced in their shards, which are synced only if they hold one.
    fn sync_upto_logged(&self, seq: u64, first: usize, lsn: Option<u64>) -> Result<()> {
        if self.durable_seq() >= seq {
            return Ok(());
        }
        if let Some(log) = &self.log {
            let upto = lsn.unwrap_or_else(|| log.appended());
            log.wait(upto, |msg| self.fail(msg))?;
            let n = self.shards.len();
            for i in 0..n {
                self.shards[(first + i) % n].sync_unlogged(self, seq)?;
            }
            // Not `durable_seq`: that counts writes durable in their shards (the
            // watermark written to SEQSTATE, below which open reads no log).
            return Ok(());
        }
        // A write numbered below `seq` finished its append before its shard's lock was
        // released, and `sync_seq` takes that lock: nothing below `seq` is missed.
        let n = self.shards.len();
        for i in 0..n {
            let s = &self.shards[(first + i) % n];
            s.sync_seq(self, seq)?;
        }
        self.durable_seq.fetch_max(seq, Ordering::SeqCst);
        Ok(())
    }

    /// Hands every shard's buffered records to the kernel (no fsync): after a killed
    /// process, the writes made so far survive.
    pub fn write_out(&self) -> Result<()> {
        for s in &self.shards {
            s.flush(self, false)?;
        }
        Ok(())
    }

    /// Appends one record; returns its sequence number and, if it went to the commit
    /// log, its end there; `None` for the delete of an absent key (nothing written).
    fn write_one(&self, op: Prepared<'_>, sync: bool) -> Result<Option<(u64, Option<u64>)>> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let shard = &self.shards[self.shard_of(op.key)];
        if shard.prepare_write(self)? {
            self.write_out()?;
        }
        let len = op.record_len();
        let delete = op.kind == Kind::Delete;
        self.reserve(len, delete)?;
        let (seq, lsn, switched) = {
            let mut st = shard.state.write();
            if let Some(f) = &st.failed {
                let e = Error::ReadOnly(f.clone());
                drop(st);
                self.sub_disk_used(len);
                return Err(e);
            }
            // The hash side answers "absent" for sure; a rare false "present" only
            // writes a tombstone that removes nothing.
            if delete && st.index.candidate(op.key).is_none() {
                drop(st);
                self.sub_disk_used(len);
                return Ok(None);
            }
            let mut log = match &self.log {
                Some(l) if self.logs(sync, len) => Some(l.lock()),
                _ => None,
            };
            let start = st.active.buf.len();
            let seq = self.next_seq.fetch_add(1, Ordering::SeqCst);
            st.append(&op, seq, 1, log.is_some());
            let lsn = log.as_mut().map(|l| {
                l.append(shard.id, &st.active.buf[start..]);
                l.end()
            });
            (seq, lsn, log.is_some_and(|l| l.switched()))
        };
        if switched {
            self.want_checkpoint();
        }
        shard.note_user((op.key.len() + op.value.len()) as u64);
        Ok(Some((seq, lsn)))
    }

    /// Applies a batch atomically; `sync` as for [`Core::put`]; with `frees`, for a
    /// batch that frees space though it holds a small put (a file remove): it may use
    /// the delete reserve beyond `max_size`.
    pub fn write_batch_opts(&self, batch: WriteBatch, sync: bool, frees: bool) -> Result<()> {
        self.write_batch_inner(batch, sync, frees)
    }

    fn write_batch_inner(&self, batch: WriteBatch, sync: bool, frees: bool) -> Result<()> {
        if let Some(len) = batch.too_large_key() {
            return Err(Error::KeyTooLarge {
                len,
                max: MAX_KEY_LEN,
            });
        }
        let (ops, new_keys) = batch.into_final_parts();
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
        shards.dedup();
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let mut write_out = false;
        for &s in &shards {
            write_out |= self.shards[s].prepare_write(self)?;
        }
        if write_out {
            self.write_out()?;
        }
        let all_deletes = frees || ops.iter().all(|o| o.0 == Kind::Delete);
        let reserved: u64 = prepared.iter().map(|p| p.1.record_len()).sum();
        self.reserve(reserved, all_deletes)?;
        let mut guards: Vec<_> = shards
            .iter()
            .map(|&s| self.shards[s].state.write())
            .collect();
        if let Some(f) = guards.iter().find_map(|g| g.failed.clone()) {
            drop(guards);
            self.sub_disk_used(reserved);
            return Err(Error::ReadOnly(f));
        }
        let guard_of = |s: usize| shards.binary_search(&s).unwrap_or(0);
        // Keys that must be new (`WriteBatch::put_new`): checked under the locks, so
        // that nothing can create them between the check and the write.
        if let Some(&i) = new_keys.iter().find(|&&i| {
            let k = &ops[i].1;
            guards[guard_of(self.shard_of(k))].index.contains(k)
        }) {
            drop(guards);
            self.sub_disk_used(reserved);
            return Err(Error::KeyExists {
                len: ops[i].1.len().saturating_sub(1),
            });
        }
        // Deletes of absent keys are no-ops and are left out of the batch (judged by the
        // index's hash side: rarely, a key sharing its tag with a live one keeps a delete
        // that removes nothing, which is harmless).
        let mut effective = 0u64;
        let mut used = 0u64;
        let keep: Vec<bool> = prepared
            .iter()
            .map(|(s, p)| {
                let k =
                    p.kind == Kind::Put || guards[guard_of(*s)].index.candidate(p.key).is_some();
                if k {
                    effective += 1;
                    used += p.record_len();
                }
                k
            })
            .collect();
        if effective == 0 {
            drop(guards);
            self.sub_disk_used(reserved);
            return self.after_write(None, sync, shards[0]);
        }
        let mut log = match &self.log {
            Some(l) if self.logs(sync, used) => Some(l.lock()),
            _ => None,
        };
        let starts: Vec<usize> = guards.iter().map(|g| g.active.buf.len()).collect();
        let seq = self.next_seq.fetch_add(1, Ordering::SeqCst);
        for ((s, p), &k) in prepared.iter().zip(&keep) {
            if k {
                guards[guard_of(*s)].append(p, seq, effective as u32, log.is_some());
            }
        }
        let lsn = log.as_mut().map(|l| {
            for (g, (&s, &start)) in guards.iter().zip(shards.iter().zip(&starts)) {
                if g.active.buf.len() > start {
                    l.append(s as u32, &g.active.buf[start..]);
                }
            }
            l.end()
        });
        let switched = log.is_some_and(|l| l.switched());
        drop(guards);
        if switched {
            self.want_checkpoint();
        }
        self.sub_disk_used(reserved - used);
        for (s, p) in &prepared {
            self.shards[*s].note_user((p.key.len() + p.value.len()) as u64);
        }
        self.after_write(Some((seq, lsn)), sync, shards[0])
    }

    /// Seals the queued segments now (used by `compact` and the background thread).
    pub fn seal_queued(&self) -> Result<()> {
        self.seal_queued_with(|| {})
    }

    /// Like [`Core::seal_queued`], running `between` before each seal.
    pub(crate) fn seal_queued_with(&self, between: impl Fn()) -> Result<()> {
        loop {
            between();
            let Some((shard, seg)) = self.seal_queue.lock().pop_front() else {
                return Ok(());
            };
            if let Err(e) = self.shards[shard as usize].seal(self, seg) {
                // Leave it queued for a later try.
                self.seal_queue.lock().push_back((shard, seg));
                return Err(e);
            }
        }
    }

    /// Waits `timeout`, or until woken (a seal queued, shutdown), whatever is queued: the
    /// compaction thread's idle wait, and the maintenance thread's pause after a seal
    /// failed. Both once used [`Core::wait`], which returns at once while a seal is
    /// queued: with a failed seal left queued (a failing disk) the two threads retried in
    /// a loop, each costing a CPU.
    pub(crate) fn pause(&self, timeout: Duration) {
        let mut q = self.seal_queue.lock();
        if !self.is_shutdown() {
            self.wake.wait_for(&mut q, timeout);
        }
    }

    /// The maintenance thread's wait for work: returns at once while a segment is queued
    /// for sealing or a spare segment or a checkpoint is asked for, else waits for one,
    /// for shutdown or for `timeout`.
    pub(crate) fn wait(&self, timeout: Duration) {
        let mut q = self.seal_queue.lock();
        let wanted = self.spare_wanted.load(Ordering::SeqCst)
            || self.checkpoint_wanted.load(Ordering::SeqCst);
        if q.is_empty() && !self.is_shutdown() && !wanted {
            self.wake.wait_for(&mut q, timeout);
        }
    }
}
