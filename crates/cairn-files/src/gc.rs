//! Reclaiming the chunks of versions nobody can reach any more, and the file totals.
//!
//! Garbage is named by rows, never found by scanning chunks: a garbage row (`'g'`) is
//! written in the same batch that removes or replaces a file's metadata, and an intent
//! row (`'w'`), made durable before a large file's first chunk, stays until the commit
//! batch deletes it. An intent row whose writer is gone (dropped, failed, or killed with
//! the process) is garbage too. A pass deletes the chunks each row names (skipping
//! versions an open reader or live writer pins), makes those deletes reach the disk, and
//! only then deletes the rows, so a crash at any point leaves the row to redo the work.

use std::time::{Duration, Instant};

use cairn::{Background, Result, WriteBatch, WriteOptions};

use crate::{layout, FileStore, GcReport, Totals, GC_ACTIVE};

/// Deletes per batch (of one shard).
const DELETE_BATCH: usize = 256;
/// How long the background collector sleeps when nothing wakes it.
const IDLE: Duration = Duration::from_secs(30);

/// One garbage or intent row.
pub(crate) struct GarbageRow {
    /// The row's key within the file namespace (tag, then the version).
    key: Vec<u8>,
    vid: u128,
    /// Chunk indexes below this may exist.
    bound: u64,
}

impl GarbageRow {
    /// Whether this is a garbage row (a removed or replaced version), not an intent row.
    pub(crate) fn is_garbage_row(&self) -> bool {
        self.key.first() == Some(&layout::TAG_GC)
    }

    /// The version the row names.
    pub(crate) fn vid(&self) -> u128 {
        self.vid
    }

    /// Every chunk of the version has an index below this.
    pub(crate) fn bound(&self) -> u64 {
        self.bound
    }
}

/// Every garbage and intent row.
pub(crate) fn garbage_rows(store: &FileStore) -> Result<Vec<GarbageRow>> {
    let mut rows = Vec::new();
    for tag in [layout::TAG_GC, layout::TAG_INTENT] {
        for r in store.ks.prefix([tag]) {
            let (key, v) = r?;
            rows.push(GarbageRow {
                vid: layout::vid_of_row(&key)?,
                bound: layout::decode_bound(&v)?,
                key,
            });
        }
    }
    Ok(rows)
}

/// One collection pass. Stops early, leaving the rest for the next pass (or the next
/// open), once `stop` says so (checked between batches of deletes).
pub(crate) fn pass(store: &FileStore, stop: &dyn Fn() -> bool) -> Result<GcReport> {
    let (sh, ks, db) = (store.shared(), &store.ks, store.db());
    let _run = sh.gc_run.lock();
    let mut report = GcReport::default();
    let rows = garbage_rows(store)?;
    let todo: Vec<GarbageRow> = {
        let mut pins = sh.pins.lock();
        rows.into_iter()
            .filter(|r| {
                if pins.counts.contains_key(&r.vid) {
                    pins.deferred.insert(r.vid);
                    report.deferred += 1;
                    false
                } else {
                    // The listing may be stale: an intent row listed while its writer
                    // was committing is gone now (the commit deletes it before the
                    // writer lets go of its pin), and its version is live. A row that
                    // exists while its version is unpinned stays garbage: no writer
                    // owns it and no reader can reach it.
                    ks.contains(&r.key)
                }
            })
            .collect()
    };
    if todo.is_empty() {
        return Ok(report);
    }
    // One batch per shard, so that a batch holds one shard's lock, briefly: removes and
    // writes going on meanwhile hardly wait for it. (The deletes need no atomicity: the
    // rows naming them go only after all of them.)
    let nshards = db.shard_count();
    let mut batches: Vec<WriteBatch> = (0..nshards).map(|_| WriteBatch::new()).collect();
    let deferred = WriteOptions::new().defer_sync();
    for row in &todo {
        let end = row.bound.min(u32::MAX as u64 + 1);
        for idx in 0..end {
            let ck = layout::chunk_key(row.vid, idx as u32);
            if !ks.contains(&ck) {
                continue;
            }
            let batch = &mut batches[ks.shard_of(&ck)];
            batch.delete(&ck);
            report.chunks += 1;
            if batch.len() >= DELETE_BATCH {
                ks.write_with(std::mem::take(batch), deferred)?;
                if stop() {
                    return Ok(report);
                }
            }
        }
        report.versions += 1;
    }
    for batch in batches {
        ks.write_with(batch, deferred)?;
    }
    // The chunk deletes must be as durable as the row deletes that follow.
    if report.chunks > 0 {
        let all: Vec<usize> = (0..nshards).collect();
        db.flush_shards(&all, store.sync_chunks())?;
    }
    let mut batch = WriteBatch::new();
    for row in &todo {
        batch.delete(&row.key);
    }
    ks.write_with(batch, deferred)?;
    Ok(report)
}

/// The live totals, computed from the meta rows on first use (with every key stripe
/// held, so that no commit or remove runs meanwhile) and kept up to date afterwards.
pub(crate) fn totals(store: &FileStore) -> Result<Totals> {
    let sh = store.shared();
    if let Some(t) = *sh.totals.lock() {
        return Ok(t);
    }
    let _init = sh.totals_init.lock();
    if let Some(t) = *sh.totals.lock() {
        return Ok(t);
    }
    let stripes: Vec<_> = sh.stripes.iter().map(|s| s.lock()).collect();
    let mut t = Totals::default();
    for r in store.ks.prefix_suffixes([layout::TAG_META]) {
        let (key, v) = r?;
        match layout::decode_meta(&v) {
            Ok(s) => {
                t.files += 1;
                t.bytes += s.size;
                t.chunks += s.chunks;
            }
            Err(e) => log::error!(
                "file store: unreadable metadata of {}: {e}",
                key.escape_ascii()
            ),
        }
    }
    *sh.totals.lock() = Some(t);
    drop(stripes);
    Ok(t)
}

/// The background collector: computes the totals, collects what a process that had the
/// store open before left behind (killed writers and removes),
/// then collects whenever woken (by removes, overwrites, abandoned writers and readers
/// letting go of a version) or every [`IDLE`] interval. After a pass that deleted
/// chunks, asks the store to drop the segments that now hold nothing live
/// ([`cairn::Db::reclaim`]), so that a removed file's space comes back within
/// milliseconds. When the store closes, a last pass collects what was removed just
/// before, until [`Background::deadline`].
pub(crate) fn gc_loop(bg: Background, store: FileStore) {
    if let Err(e) = totals(&store) {
        log::error!("file store: computing totals failed: {e}");
    }
    let late = || bg.deadline().is_some_and(|d| Instant::now() >= d);
    // Polling for garbage until this: after open (a store is often opened to be used at
    // once), then after the last pass that found some.
    let mut active_until = Instant::now() + GC_ACTIVE;
    loop {
        let last = bg.is_stopping();
        if last && late() {
            return;
        }
        match pass(&store, &late) {
            Ok(r) => {
                if r.versions > 0 || r.deferred > 0 {
                    active_until = Instant::now() + GC_ACTIVE;
                }
                // At close, the store itself drops what is dead (Options::close_budget).
                if r.chunks > 0 && !bg.is_stopping() {
                    if let Err(e) = bg.db().reclaim() {
                        log::error!("file store: reclaiming dead segments failed: {e}");
                    }
                }
            }
            Err(e) => log::error!("file store: garbage collection failed: {e}"),
        }
        if last || late() {
            return;
        }
        store.shared().wait_for_gc_work(&bg, IDLE, active_until);
    }
}
