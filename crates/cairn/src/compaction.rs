//! Compaction: rewrite a sealed segment whose stale fraction passed the threshold,
//! copying its live records (and the tombstones still needed) to a new segment of the
//! same shard, then delete it.
//!
//! A tombstone is dropped once no other segment of the shard can hold an older version
//! of its key: every other segment was created after the tombstone was written, or is
//! sealed and its Bloom filter says the key is absent.
//!
//! Compaction works on one segment of one shard at a time, holding the right to compact
//! that shard, and reaches the shard only through its operations (`shard/compact.rs`),
//! which take its locks for short in-memory updates, so other shards and readers never
//! wait for it; its I/O is throttled to `Options::compaction_rate`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::core::Core;
use crate::segment::{self, Entry, SegmentFile, SEG_HEADER_LEN};
use crate::shard::Shard;
use crate::Result;

mod copy;
mod drop;

use drop::drop_dead_segments;

/// How long [`compact_one`] waits, at most, for another thread to finish compacting the
/// shard it wants.
const BUSY_WAIT: Duration = Duration::from_millis(100);

/// What one call of [`compact_one`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A segment was compacted.
    Compacted,
    /// The best candidate's shard was being compacted by another thread.
    Busy,
    /// No segment passes the threshold.
    Nothing,
}

/// Finds the sealed segment with the highest stale fraction at or above the threshold,
/// over all shards, and compacts it.
pub(crate) fn compact_one(core: &Core, manual: bool) -> Result<Outcome> {
    if drop_dead_segments(core, &[], None)?.segments > 0 {
        return Ok(Outcome::Compacted);
    }
    let threshold = core.opts.compaction_threshold;
    let mut best: Option<(usize, u32, f64)> = None;
    // A shard being compacted by another thread that has more to do.
    let mut busy: Option<usize> = None;
    for (i, sh) in core.shards.iter().enumerate() {
        let Some((id, f)) = sh.best_for_compaction(threshold) else {
            continue;
        };
        if sh.is_compacting() {
            busy = Some(i);
        } else if best.is_none_or(|b| f > b.2) {
            best = Some((i, id, f));
        }
    }
    let Some((si, seg, _)) = best else {
        if let Some(i) = busy {
            // Let the other thread finish (a manual compaction then goes on).
            core.shards[i].wait_compaction_done(BUSY_WAIT);
            return Ok(Outcome::Busy);
        }
        return Ok(Outcome::Nothing);
    };
    let shard = &core.shards[si];
    let Some(_guard) = shard.try_begin_compaction() else {
        // Another thread is compacting this shard; let it finish.
        shard.wait_compaction_done(BUSY_WAIT);
        return Ok(Outcome::Busy);
    };
    compact_segment(core, shard, seg, !manual, false).map(|_| Outcome::Compacted)
}

/// What [`Db::reclaim`](crate::Db::reclaim) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reclaimed {
    /// Active segments rotated out because they were mostly stale.
    pub rotated: u64,
    /// Segments removed whole.
    pub segments: u64,
    /// Bytes of segment and hint files those held.
    pub bytes: u64,
}

/// Which active segments [`reclaim`] rotates out, by size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RotateMin {
    /// Shards that may be taking writes: at least an eighth of the segment size, so
    /// that a shard whose active segment is kept mostly stale (hot keys overwritten,
    /// files written and removed) still makes segments of at least that size.
    Busy,
    /// Shards that took no write for a while: at least 1/64 of the segment size.
    Idle,
}

impl RotateMin {
    fn bytes(self, core: &Core) -> u64 {
        let div = match self {
            RotateMin::Busy => 8,
            RotateMin::Idle => 64,
        };
        (core.opts.segment_size / div).max(SEG_HEADER_LEN + 1)
    }
}

/// Gives back the space of dead records without copying any: in the shards `only`
/// names (all when `None`), an active segment of at least `min` bytes that is at least
/// `compaction_threshold` stale is rotated out (one that holds nothing live is claimed
/// on the way, so that it is never synced or sealed); then every segment whose records
/// can all go is dropped whole ([`drop_dead_segments`]). A rotated segment with live
/// records is sealed and compacted as usual.
pub(crate) fn reclaim(core: &Core, only: Option<&[usize]>, min: RotateMin) -> Result<Reclaimed> {
    let threshold = core.opts.compaction_threshold;
    let mut rotated = 0;
    let mut claimed: Vec<(usize, u32)> = Vec::new();
    let mut first_err = None;
    for (i, sh) in core.shards.iter().enumerate() {
        if only.is_some_and(|o| !o.contains(&i)) || sh.is_failed() {
            continue;
        }
        match sh.rotate_for_reclaim(core, min.bytes(core), threshold) {
            Ok(Some((id, c))) => {
                rotated += 1;
                if c {
                    claimed.push((i, id));
                }
            }
            Ok(None) => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    let mut r = drop_dead_segments(core, &claimed, None)?;
    r.rotated = rotated;
    match first_err {
        Some(e) => Err(e),
        None => Ok(r),
    }
}

/// Most live bytes a segment may hold for a clean close to compact it
/// ([`reclaim_at_close`]).
const CLOSE_COPY_MAX: u64 = 1 << 20;

/// At a clean close (writes refused, everything durable), gives back before `deadline`
/// what costs little: segments whose records can all go are dropped whole
/// ([`drop_dead_segments`]), then every segment of at least 1/64 of the segment size
/// (the active ones and those not sealed yet included) that is at least
/// `compaction_threshold` stale and holds at most [`CLOSE_COPY_MAX`] live bytes is
/// compacted from its listing, copying only those; an active segment is emptied (replaced by its header)
/// ([`Shard::empty_active`]). Segments are taken oldest first in each shard, so that
/// tombstones whose older versions went before them can go too. Best effort: the first
/// error is logged and ends it (the space is then reclaimed after the next open).
pub(crate) fn reclaim_at_close(core: &Core, deadline: Instant) {
    if let Err(e) = drop_dead_segments(core, &[], Some(deadline)) {
        log::warn!("dropping dead segments at close: {e}");
        return;
    }
    let threshold = core.opts.compaction_threshold;
    let min = (core.opts.segment_size / 64).max(SEG_HEADER_LEN + 1);
    for sh in &core.shards {
        for id in sh.segment_ids() {
            if Instant::now() >= deadline {
                return;
            }
            let wanted = |m: &crate::shard::SegMeta| {
                m.size >= min
                    && m.live() <= CLOSE_COPY_MAX
                    && (m.all_stale() || m.stale_fraction() >= threshold)
            };
            let Some(_guard) = sh.begin_compaction_of(id, wanted) else {
                continue;
            };
            if let Err(e) = compact_segment(core, sh, id, false, true) {
                log::warn!("compacting shard {} segment {id} at close: {e}", sh.id);
                return;
            }
        }
    }
}

/// Segments retired by compaction so far (in any store of the process): a segment judged
/// not droppable whole is judged again once this (or its own stale bytes) changed.
pub(crate) static RETIRED: AtomicU64 = AtomicU64::new(0);

/// Most records of a listing kept for a segment not sealed yet (see `SegMeta::listing`).
const LISTING_MAX: usize = 16 << 10;

/// The records of segment `seg` (`size` bytes): from its hint file when sealed, else from
/// its data (a rotated segment not sealed yet was written moments ago: its pages are in
/// the page cache), headers and keys only when it is mapped. `None` when unsure (no
/// readable hint, damage, another length).
fn list_records(
    shard: &Shard,
    seg: u32,
    file: &SegmentFile,
    size: u64,
    sealed: bool,
) -> Option<Vec<Entry>> {
    if sealed {
        let read = segment::read_hint_entries(&segment::hint_path(&shard.dir, seg), seg);
        return match read {
            Ok((entries, data_len)) if data_len == size => Some(entries),
            _ => None,
        };
    }
    if let Some(entries) = segment::scan_entries_mapped(file, size) {
        return Some(entries);
    }
    let (entries, outcome) = segment::scan_entries(file, size).ok()?;
    let intact = outcome.valid_end == size && outcome.damage.is_empty() && outcome.tail.is_none();
    intact.then_some(entries)
}

/// Removes the compacted segment `seg` from the shard and from disk: nothing in the
/// index points at it any more. Returns the bytes of its files.
fn retire(core: &Core, shard: &Shard, seg: u32, victim: &SegmentFile) -> Result<u64> {
    let freed = shard.finish_drop(seg);
    RETIRED.fetch_add(1, Ordering::SeqCst);
    core.sub_disk_used(freed);
    core.fs.remove(&victim.path)?;
    core.fs.remove(&segment::hint_path(&shard.dir, seg))?;
    core.fs.sync_dir(&shard.dir)?;
    Ok(freed)
}

/// A compaction reads only the listed records that may be kept (see
/// [`segment::scan_listed`]) when at most this fraction of the segment is live; else it
/// reads the whole segment, which also checks every record.
const SPARSE_LIVE: u64 = 8;

/// Compacts segment `seg` of `shard`: copies its live records (and the tombstones still
/// needed) to a new segment, then removes it. A segment with few live records is read
/// from its listing, record by record, the rest by a scan of the whole file. With
/// `closing` (a clean close: writes refused, everything durable), `seg` may be the
/// active segment or a rotated one not sealed yet; the active one is then emptied in
/// place ([`Shard::empty_active`]) instead of removed. The caller holds the right to
/// compact the shard.
fn compact_segment(
    core: &Core,
    shard: &Shard,
    seg: u32,
    throttled: bool,
    closing: bool,
) -> Result<()> {
    let Some(victim) = shard.victim(seg, closing) else {
        return Ok(());
    };
    let size = victim.size;
    // Few live records: the listing says where they are (a sealed segment's hint file;
    // the headers of one not sealed yet, which a clean close just synced).
    let listing = if victim.live.saturating_mul(SPARSE_LIVE) <= size || !victim.sealed {
        list_records(shard, seg, &victim.file, size, victim.sealed)
    } else {
        None
    };
    if !victim.sealed && listing.is_none() {
        // Not sealed and not listable: left for the maintenance thread and the usual
        // compaction after the next open.
        return Ok(());
    }
    // Records up to max_seq may be dropped or copied below; every batch they belong to
    // must be durable in all shards first, and recorded so.
    core.persist_watermark(victim.max_seq)?;
    let copied = copy::copy_live(core, shard, seg, &victim, listing.as_deref(), throttled)?;
    // Every record dropped above was superseded by a newer record; make those durable,
    // with every other record of their batches in all shards, before the old versions
    // disappear from disk. (Read now: records superseded during the scan count too.)
    let superseded = shard.superseded_seq(seg);
    if copied.newer_value || core.durable_seq() < superseded {
        core.flush()?;
    }
    // Not while a checkpoint still needs the file (see `StoreCtx::removals`).
    let _removing = core.removals.write();
    if victim.active {
        // The shard's own handles must be the file's only ones for it to be cut.
        drop(victim);
        if let Some(freed) = shard.empty_active(core, seg)? {
            RETIRED.fetch_add(1, Ordering::SeqCst);
            core.sub_disk_used(freed);
        }
    } else {
        retire(core, shard, seg, &victim.file)?;
    }
    log::debug!(
        "compacted shard {} segment {seg}: {size} bytes, {} records{}",
        shard.id,
        copied.records,
        if listing.is_some() { " (listed)" } else { "" }
    );
    Ok(())
}
