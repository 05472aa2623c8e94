//! Compaction: rewrite a sealed segment whose stale fraction passed the threshold,
//! copying its live records (and the tombstones still needed) to a new segment of the
//! same shard, then delete it.
//!
//! A tombstone is dropped once no other segment of the shard can hold an older version
//! of its key: every other segment was created after the tombstone was written, or is
//! sealed and its Bloom filter says the key is absent.
//!
//! Compaction works on one segment of one shard at a time and takes the shard's state
//! lock only for short in-memory updates, so other shards and readers never wait for it;
//! its I/O is throttled to `Options::compaction_rate`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bloom::Bloom;
use crate::core::Core;
use crate::index::Loc;
use crate::record::{self, Kind};
use crate::segment::{self, Entry, SegKind, SegmentFile, SEG_HEADER_LEN};
use crate::shard::{SegMeta, Shard};
use crate::tally::Tally;
use crate::{Error, Result};

const CHUNK: usize = 1 << 20;

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
    let mut busy = false;
    for (i, sh) in core.shards.iter().enumerate() {
        let st = sh.state.read();
        if st.failed.is_some() {
            continue;
        }
        for (&id, m) in &st.segs {
            if !m.is_sealed() || m.is_damaged() || id == st.active.id {
                continue;
            }
            let f = m.stale_fraction();
            if f >= threshold && st.compacting {
                busy = true;
            } else if f >= threshold && best.is_none_or(|b| f > b.2) {
                best = Some((i, id, f));
            }
        }
    }
    let Some((si, seg, _)) = best else {
        if busy {
            // Let the other thread finish (a manual compaction then goes on).
            std::thread::sleep(Duration::from_millis(1));
            return Ok(Outcome::Busy);
        }
        return Ok(Outcome::Nothing);
    };
    let shard = &core.shards[si];
    {
        let mut st = shard.state.write();
        if st.compacting {
            // Another thread is compacting this shard; let it finish.
            drop(st);
            std::thread::sleep(Duration::from_millis(1));
            return Ok(Outcome::Busy);
        }
        st.compacting = true;
    }
    let res = compact_segment(core, shard, seg, !manual, false);
    shard.state.write().compacting = false;
    res.map(|_| Outcome::Compacted)
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
        if only.is_some_and(|o| !o.contains(&i)) || sh.state.read().failed.is_some() {
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
/// compacted from its listing, copying only those; an active segment is emptied in place
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
        let ids: Vec<u32> = sh.state.read().segs.keys().copied().collect();
        for id in ids {
            if Instant::now() >= deadline {
                return;
            }
            let wanted = {
                let mut st = sh.state.write();
                let ok = !st.compacting
                    && st.failed.is_none()
                    && st.segs.get(&id).is_some_and(|m| {
                        !m.is_damaged()
                            && !m.is_dropping()
                            && m.size >= min
                            && m.live() <= CLOSE_COPY_MAX
                            && (m.all_stale() || m.stale_fraction() >= threshold)
                    });
                if ok {
                    st.compacting = true;
                }
                ok
            };
            if !wanted {
                continue;
            }
            let res = compact_segment(core, sh, id, false, true);
            sh.state.write().compacting = false;
            if let Err(e) = res {
                log::warn!("compacting shard {} segment {id} at close: {e}", sh.id);
                return;
            }
        }
    }
}

/// Segments retired by compaction so far (in any store of the process): a segment judged
/// not droppable whole is judged again once this (or its own stale bytes) changed.
static RETIRED: AtomicU64 = AtomicU64::new(0);

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

/// Whether every listed record of segment `seg` can go without a copy: puts the index no
/// longer points at, and tombstones whose key has a newer value or that no other segment
/// of the shard, but those `gone` before this one, can hold an older version of (see
/// [`Other::may_hold_older`]). (The newer records must be durable before the segment
/// goes: see [`drop_dead_segments`].)
fn all_droppable(
    shard: &Shard,
    seg: u32,
    records: &[Entry],
    others: &[Other],
    gone: &[u32],
) -> bool {
    // Short lock holds: writers of the shard wait for at most one slice of lookups.
    records.chunks(256).all(|slice| {
        let st = shard.state.read();
        slice.iter().all(|r| {
            let loc = Loc {
                seg,
                off: r.off,
                len: r.len,
            };
            match r.kind {
                Kind::Put => !st.index.is_at(&r.key, loc),
                Kind::Delete if st.index.contains(&r.key) => true,
                Kind::Delete => !others.iter().any(|o| {
                    o.id != seg && !gone.contains(&o.id) && o.may_hold_older(shard, &r.key, r.seq)
                }),
            }
        })
    })
}

/// A segment claimed for a whole drop.
struct Claim {
    shard: usize,
    seg: u32,
    file: Arc<SegmentFile>,
    /// Not sealed: marked `dropping`.
    unsealed: bool,
}

/// Claims the rotated, unsealed segment `seg` for a drop: it must be fully written (out
/// of the rotation in progress, no pending write) and not being sealed. It is marked so
/// that the maintenance thread does not seal it. It stays on the unsynced list, so that
/// every flush still syncs it, until the drop has made it safe to lose (see
/// [`drop_dead_segments`]). Returns whether it was claimed.
fn claim_unsealed(shard: &Shard, seg: u32) -> bool {
    let io = shard.io.lock();
    if io.rotated.contains(&seg) {
        return false;
    }
    let mut st = shard.state.write();
    let busy = st.pending.as_ref().is_some_and(|p| p.seg == seg);
    match st.segs.get_mut(&seg) {
        Some(m) if !busy => m.claim_drop(),
        _ => false,
    }
}

/// Takes segment `seg`, about to be removed, off the shard's unsynced list (if it is
/// there), so that no flush writes its dead data to disk. Only once it may be lost: its
/// records below the recorded watermark and the records that superseded them durable.
fn take_off_unsynced(shard: &Shard, seg: u32) {
    shard.io.lock().unsynced.retain(|f| f.id != seg);
}

/// Gives a claimed unsealed segment back: sealed as usual (it never left the unsynced
/// list).
fn unclaim(core: &Core, c: &Claim) {
    if !c.unsealed {
        return;
    }
    let shard = &core.shards[c.shard];
    let mut st = shard.state.write();
    if let Some(m) = st.segs.get_mut(&c.seg) {
        m.unclaim_drop();
        drop(st);
        core.queue_seal(shard.id, c.seg);
    }
}

/// Drops every segment, over all shards, whose records can all go without a copy (all
/// the chunks of removed files, say; see [`all_droppable`]): removed whole, without
/// reading its data when it is sealed (its hint file lists its records), and without
/// ever syncing it when it was not sealed yet, so a file written and removed before its
/// segments were sealed costs no disk writes for them (unless a flush that promises
/// durability runs meanwhile). One sync of the store and one watermark raise cover all
/// of them. Shards being compacted are left alone.
///
/// A segment that goes may be lost at any moment afterwards (a power loss takes its
/// unsynced pages, and its removal may not be durable yet). Two things make that safe,
/// and both hold before the first one goes: the numbers of its records are below the
/// recorded watermark (else open would take the first of them for a lost write and cut
/// off every later one), and the records that superseded them are durable (else an
/// older version would come back). Until then a segment not sealed stays on its shard's
/// unsynced list, so that every flush that promises durability still syncs it. And a
/// segment not sealed may come back partly written if its unlink is lost (some of its
/// dead puts without the deletes in it that superseded them): the `SEQSTATE` that
/// raises the watermark lists it (`SeqState::dropped`) until its unlink is durable, and
/// open removes a listed segment first.
///
/// `claimed`: unsealed segments the caller already marked `dropping`
/// ([`Shard::rotate_for_reclaim`]); each is dropped or given back. No segment is judged
/// after `deadline`. Returns what went.
fn drop_dead_segments(
    core: &Core,
    claimed: &[(usize, u32)],
    deadline: Option<Instant>,
) -> Result<Reclaimed> {
    let retired = RETIRED.load(Ordering::SeqCst);
    let mut claims: Vec<Claim> = Vec::new();
    let mut marked: Vec<usize> = Vec::new();
    let late = || deadline.is_some_and(|d| Instant::now() >= d);
    for (i, sh) in core.shards.iter().enumerate() {
        // (id, file, size, sealed, listing, claimed already)
        type Candidate = (
            u32,
            Arc<SegmentFile>,
            u64,
            bool,
            Option<Arc<Vec<Entry>>>,
            bool,
        );
        let mine = |id: u32| claimed.contains(&(i, id));
        let skip = {
            let st = sh.state.read();
            st.compacting || st.failed.is_some() || late()
        };
        if skip {
            give_back_claimed(core, i, claimed);
            continue;
        }
        let (candidates, others): (Vec<Candidate>, Vec<Other>) = {
            let st = sh.state.read();
            // A sealed segment is judged from its hint file; one not sealed yet from
            // its data, in the page cache (read once: a listing of records kept for a
            // segment judged not droppable yet).
            let candidates = st
                .segs
                .iter()
                .filter(|(&id, m)| {
                    mine(id)
                        || (!m.is_damaged()
                            && id != st.active.id
                            && m.all_stale()
                            && (m.is_sealed() || m.is_unsealed())
                            && m.drop_memo() != Some((m.dead + m.tomb, retired)))
                })
                .map(|(&id, m)| {
                    let f = m.file.clone();
                    let listed = m.listing();
                    (id, f, m.size, m.is_sealed(), listed, mine(id))
                })
                .collect();
            (candidates, others_of(&st.segs))
        };
        if candidates.is_empty() {
            continue;
        }
        {
            let mut st = sh.state.write();
            if st.compacting {
                drop(st);
                give_back_claimed(core, i, claimed);
                continue;
            }
            st.compacting = true;
        }
        marked.push(i);
        for (id, file, size, sealed, listed, pre) in candidates {
            let claim = Claim {
                shard: i,
                seg: id,
                file,
                unsealed: !sealed,
            };
            if !pre && late() {
                continue;
            }
            if !sealed && !pre && !claim_unsealed(sh, id) {
                continue;
            }
            // Nothing makes the index point into a segment other than the active one
            // again, so a record found dead stays dead. Segments claimed before this
            // one (older, retired before it) hold no older versions any more.
            let gone: Vec<u32> = claims
                .iter()
                .filter(|c| c.shard == i)
                .map(|c| c.seg)
                .collect();
            let records = match listed {
                Some(l) => Some(l),
                None => list_records(sh, id, &claim.file, size, sealed).map(Arc::new),
            };
            let ok = records
                .as_ref()
                .is_some_and(|recs| all_droppable(sh, id, recs, &others, &gone));
            if ok {
                claims.push(claim);
            } else {
                if let Some(m) = sh.state.write().segs.get_mut(&id) {
                    // The records of a segment that is not sealed never change; kept,
                    // if few, so that the next judgement does not read them again.
                    let listing = if !sealed && !m.is_sealed() {
                        records.filter(|r| r.len() <= LISTING_MAX)
                    } else {
                        None
                    };
                    m.note_judged((m.dead + m.tomb, retired), listing);
                }
                unclaim(core, &claim);
            }
        }
    }
    // Every record the claimed segments hold, and every record that superseded one of
    // them, is numbered below `upto` (they exist now). Every other file is synced up to
    // it, then it is recorded as the watermark, in the same `SEQSTATE` as the list of
    // the claimed segments (those not sealed may be partly on disk: a flush may have
    // synced some of their pages; all of them must go together). From then on the claimed segments may be lost, so they leave the
    // unsynced lists (in `retire`) and go.
    let res = if claims.is_empty() {
        Ok(Reclaimed::default())
    } else {
        let upto = core.current_seq().saturating_sub(1);
        // Every claimed segment, sealed or not: they were judged together (a tombstone
        // may go because an older segment claimed before it goes too), so an open after
        // a crash in the middle of the unlinks must finish all of them, not only some
        // (it once removed only those not sealed: a tombstone in one went while the
        // older sealed segment with the put it deleted stayed — a deleted key came back).
        let listed: Vec<(u32, u32, u64)> = claims
            .iter()
            .map(|c| (c.shard as u32, c.seg, c.file.created_seq))
            .collect();
        core.shards
            .iter()
            .enumerate()
            .try_for_each(|(i, s)| {
                let skip: Vec<u32> = claims
                    .iter()
                    .filter(|c| c.shard == i && c.unsealed)
                    .map(|c| c.seg)
                    .collect();
                s.sync_all_but(core, &skip)
            })
            .and_then(|()| core.raise_watermark(upto, &listed))
            .and_then(|()| {
                let mut r = Reclaimed::default();
                while let Some(c) = claims.first() {
                    r.bytes += retire(core, &core.shards[c.shard], c.seg, &c.file)?;
                    core.dropped(c.shard as u32, c.seg);
                    r.segments += 1;
                    log::debug!(
                        "dropped shard {} segment {} whole{}",
                        c.shard,
                        c.seg,
                        if c.unsealed { " (not sealed)" } else { "" }
                    );
                    claims.remove(0);
                }
                Ok(r)
            })
    };
    // After an error: what was not retired goes back to normal (and need not be removed
    // by the next open; one whose unlink was not synced stays listed).
    for c in &claims {
        if core.shards[c.shard].state.read().segs.contains_key(&c.seg) {
            core.dropped(c.shard as u32, c.seg);
        }
        unclaim(core, c);
    }
    for i in marked {
        core.shards[i].state.write().compacting = false;
    }
    res
}

/// Gives back the segments of shard `shard` in `claimed` (see
/// [`Shard::rotate_for_reclaim`]) when the shard is not judged now.
fn give_back_claimed(core: &Core, shard: usize, claimed: &[(usize, u32)]) {
    for &(_, id) in claimed.iter().filter(|c| c.0 == shard) {
        let file = core.shards[shard]
            .state
            .read()
            .segs
            .get(&id)
            .map(|m| m.file.clone());
        if let Some(file) = file {
            unclaim(
                core,
                &Claim {
                    shard,
                    seg: id,
                    file,
                    unsealed: true,
                },
            );
        }
    }
}

/// The segments of a shard as [`Other`]s.
fn others_of(segs: &std::collections::BTreeMap<u32, SegMeta>) -> Vec<Other> {
    segs.iter()
        .map(|(&id, o)| Other {
            id,
            created_seq: o.created_seq,
            sealed: o.is_sealed(),
            bloom: o.bloom.clone(),
        })
        .collect()
}

/// Another segment of the shard, as seen when compaction started.
struct Other {
    id: u32,
    created_seq: u64,
    sealed: bool,
    bloom: Arc<std::sync::OnceLock<Bloom>>,
}

impl Other {
    /// Whether this segment may hold a version of `key` older than `seq`.
    fn may_hold_older(&self, shard: &Shard, key: &[u8], seq: u64) -> bool {
        if self.created_seq > seq {
            return false;
        }
        if !self.sealed {
            return true;
        }
        if self.bloom.get().is_none() {
            if let Ok(b) = build_bloom(shard, self.id) {
                let _ = self.bloom.set(b);
            }
        }
        self.bloom.get().is_none_or(|b| b.may_contain(key))
    }
}

fn build_bloom(shard: &Shard, id: u32) -> Result<Bloom> {
    let path = segment::hint_path(&shard.dir, id);
    let mut keys: Vec<Vec<u8>> = Vec::new();
    segment::read_hint(&path, id, |_, _, _, _, _, k| keys.push(k.to_vec()))?;
    let mut b = Bloom::with_capacity(keys.len());
    for k in &keys {
        b.insert(k);
    }
    Ok(b)
}

/// A record copied to the output, waiting for its index update.
struct Copied {
    key: Vec<u8>,
    kind: Kind,
    seq: u64,
    old: Loc,
    new_off: u32,
    blockers: Vec<u32>,
}

struct Output {
    file: Arc<SegmentFile>,
    len: u64,
    buf: Vec<u8>,
    copied: Vec<Copied>,
    entries: Vec<Entry>,
}

struct Throttle {
    rate: Option<u64>,
    start: Instant,
    bytes: u64,
}

impl Throttle {
    fn account(&mut self, n: u64) {
        self.bytes += n;
        if let Some(rate) = self.rate {
            let due = Duration::from_secs_f64(self.bytes as f64 / rate as f64);
            let el = self.start.elapsed();
            if due > el {
                std::thread::sleep(due - el);
            }
        }
    }
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
/// place ([`Shard::empty_active`]) instead of removed.
fn compact_segment(
    core: &Core,
    shard: &Shard,
    seg: u32,
    throttled: bool,
    closing: bool,
) -> Result<()> {
    let (victim, size, max_seq, others, sealed, live, active) = {
        let st = shard.state.read();
        let Some(m) = st.segs.get(&seg) else {
            return Ok(());
        };
        let mut others = others_of(&st.segs);
        others.retain(|o| o.id != seg);
        let active = seg == st.active.id;
        if (active || !m.is_sealed()) && !closing {
            return Ok(());
        }
        (
            m.file.clone(),
            m.size,
            m.max_seq,
            others,
            m.is_sealed(),
            m.live(),
            active,
        )
    };
    // Few live records: the listing says where they are (a sealed segment's hint file;
    // the headers of one not sealed yet, which a clean close just synced).
    let listing = if live.saturating_mul(SPARSE_LIVE) <= size || !sealed {
        list_records(shard, seg, &victim, size, sealed)
    } else {
        None
    };
    if !sealed && listing.is_none() {
        // Not sealed and not listable: left for the maintenance thread and the usual
        // compaction after the next open.
        return Ok(());
    }
    // Records up to max_seq may be dropped or copied below; every batch they belong to
    // must be durable in all shards first, and recorded so.
    core.persist_watermark(max_seq)?;
    let created_seq = core.current_seq();
    let mut out: Option<Output> = None;
    // A tombstone dropped because its key has a newer value needs that value durable.
    let mut newer_value = false;
    let mut throttle = Throttle {
        rate: if throttled {
            core.opts.compaction_rate
        } else {
            None
        },
        start: Instant::now(),
        bytes: 0,
    };
    let visit = |off: u64, rec: &record::Record<'_>, intact: bool| -> Result<()> {
        if !intact {
            // Reported in the outcome; the segment is kept.
            return Ok(());
        }
        let h = rec.header;
        let old = Loc {
            seg,
            off: off as u32,
            len: h.record_len() as u32,
        };
        let (live, present) = {
            let st = shard.state.read();
            match h.kind {
                Kind::Put => (st.index.is_at(rec.key, old), true),
                Kind::Delete => (false, st.index.contains(rec.key)),
            }
        };
        let (keep, blockers) = match h.kind {
            Kind::Put => (live, Vec::new()),
            Kind::Delete if present => {
                newer_value = true;
                (false, Vec::new())
            }
            Kind::Delete => {
                let blockers: Vec<u32> = others
                    .iter()
                    .filter(|o| o.may_hold_older(shard, rec.key, h.seq))
                    .map(|o| o.id)
                    .collect();
                (!blockers.is_empty(), blockers)
            }
        };
        if !keep {
            return Ok(());
        }
        if out.is_none() {
            let id = {
                let mut st = shard.state.write();
                st.next_seg += 1;
                st.next_seg - 1
            };
            let f = Arc::new(SegmentFile::create(
                &core.fs,
                &shard.dir,
                shard.id,
                id,
                SegKind::Compacted,
                created_seq,
            )?);
            core.add_disk_used(SEG_HEADER_LEN);
            shard.note_write(SEG_HEADER_LEN);
            shard
                .state
                .write()
                .segs
                .insert(id, SegMeta::new(f.clone(), SEG_HEADER_LEN));
            out = Some(Output {
                file: f,
                len: SEG_HEADER_LEN,
                buf: Vec::with_capacity(CHUNK),
                copied: Vec::new(),
                entries: Vec::new(),
            });
        }
        let o = out.as_mut().expect("output created above");
        let new_off = o.len + o.buf.len() as u64;
        record::encode(
            &mut o.buf,
            h.kind,
            h.seq,
            h.batch_total,
            rec.key,
            rec.value,
            h.data_crc,
        );
        o.entries.push(Entry {
            kind: h.kind,
            seq: h.seq,
            batch_total: h.batch_total,
            off: new_off as u32,
            len: old.len,
            key: rec.key.to_vec(),
        });
        o.copied.push(Copied {
            key: rec.key.to_vec(),
            kind: h.kind,
            seq: h.seq,
            old,
            new_off: new_off as u32,
            blockers,
        });
        if o.buf.len() >= CHUNK {
            let n = o.buf.len() as u64;
            write_chunk(core, shard, o)?;
            throttle.account(2 * n);
        }
        Ok(())
    };
    let outcome = match &listing {
        Some(entries) => {
            let wanted = |e: &Entry| match e.kind {
                Kind::Delete => true,
                Kind::Put => {
                    let loc = Loc {
                        seg,
                        off: e.off,
                        len: e.len,
                    };
                    shard.state.read().index.is_at(&e.key, loc)
                }
            };
            segment::scan_listed(&victim, size, entries, wanted, visit)?
        }
        None => segment::scan(&victim, size, visit)?,
    };
    if let Some(o) = out.as_mut() {
        write_chunk(core, shard, o)?;
        core.fs.sync_data(&o.file.file, &o.file.path)?;
        let hint = segment::write_hint(&core.fs, &shard.dir, o.file.id, o.len, &o.entries)?;
        core.add_disk_used(hint);
        shard.note_write(hint);
        o.file.map_sealed(o.len);
        let mut st = shard.state.write();
        if let Some(m) = st.segs.get_mut(&o.file.id) {
            m.mark_sealed();
            m.hint_size = hint;
        }
    }
    if !outcome.damage.is_empty() || outcome.tail.is_some() {
        // Records we could not read stay where they are: keep the segment, and do not
        // try it again automatically. `verify` reports the damage.
        let mut st = shard.state.write();
        if let Some(m) = st.segs.get_mut(&seg) {
            m.mark_damaged();
        }
        for spot in outcome.damage.iter().chain(outcome.tail.as_ref()) {
            core.note_damage(crate::damage::Damage {
                path: victim.path.clone(),
                offset: Some(spot.offset),
                detail: format!(
                    "found by compaction: {}; the segment is kept and not compacted again",
                    spot.detail
                ),
            });
        }
        let spot = outcome.damage.first().or(outcome.tail.as_ref());
        return Err(Error::corruption(
            &victim.path,
            format!(
                "compaction skipped damaged records ({}); segment kept",
                spot.map_or(String::new(), |s| format!("at {}: {}", s.offset, s.detail))
            ),
        ));
    }
    // Every record dropped above was superseded by a newer record; make those durable,
    // with every other record of their batches in all shards, before the old versions
    // disappear from disk. (Read now: records superseded during the scan count too.)
    let superseded = shard
        .state
        .read()
        .segs
        .get(&seg)
        .map_or(u64::MAX, |m| m.superseded_seq);
    if newer_value || core.durable_seq() < superseded {
        core.flush()?;
    }
    if active {
        // The shard's own handles must be the file's only ones for it to be cut.
        drop(victim);
        if let Some(freed) = shard.empty_active(core, seg)? {
            RETIRED.fetch_add(1, Ordering::SeqCst);
            core.sub_disk_used(freed);
        }
    } else {
        retire(core, shard, seg, &victim)?;
    }
    log::debug!(
        "compacted shard {} segment {seg}: {size} bytes, {} records{}",
        shard.id,
        outcome.records,
        if listing.is_some() { " (listed)" } else { "" }
    );
    Ok(())
}

/// Removes the compacted segment `seg` from the table and from disk: nothing in the
/// index points at it any more. Returns the bytes of its files.
fn retire(core: &Core, shard: &Shard, seg: u32, victim: &SegmentFile) -> Result<u64> {
    // A segment not synced yet need not be synced now: the caller made it safe to lose.
    take_off_unsynced(shard, seg);
    let freed = {
        let mut st = shard.state.write();
        let m = st.segs.remove(&seg);
        for other in st.segs.values_mut() {
            if other.blockers.contains(&seg) {
                other.tomb += other.blocked_tomb;
                other.blocked_tomb = 0;
                other.blockers.clear();
            }
        }
        m.map_or(0, |m| m.size + m.hint_size)
    };
    RETIRED.fetch_add(1, Ordering::SeqCst);
    core.sub_disk_used(freed);
    core.fs.remove(&victim.path)?;
    core.fs.remove(&segment::hint_path(&shard.dir, seg))?;
    core.fs.sync_dir(&shard.dir)?;
    Ok(freed)
}

/// Writes the output buffer, then points the index at the copies that are still live.
fn write_chunk(core: &Core, shard: &Shard, o: &mut Output) -> Result<()> {
    if o.buf.is_empty() {
        return Ok(());
    }
    core.fs
        .write_at(&o.file.file, &o.file.path, &o.buf, o.len)?;
    let n = o.buf.len() as u64;
    shard.note_write(n);
    core.add_disk_used(n);
    o.len += n;
    o.buf.clear();
    let mut st = shard.state.write();
    let st = &mut *st;
    let mut dead = 0u64;
    let mut blocked = 0u64;
    let mut max_seq = 0u64;
    let mut blockers = Vec::new();
    let mut bytes = Tally::default();
    for c in o.copied.drain(..) {
        let new = Loc {
            seg: o.file.id,
            off: c.new_off,
            len: c.old.len,
        };
        bytes.add(Tally::ns(&c.key), new.len as u64);
        max_seq = max_seq.max(c.seq);
        match c.kind {
            Kind::Put => {
                if !st.index.replace_if(&c.key, c.old, new) {
                    dead += new.len as u64;
                }
            }
            Kind::Delete => {
                blocked += new.len as u64;
                blockers.extend(c.blockers);
            }
        }
    }
    if let Some(m) = st.segs.get_mut(&o.file.id) {
        m.size = o.len;
        m.bytes.add_all(&bytes);
        m.dead += dead;
        if dead > 0 {
            // Copies overwritten meanwhile: by records numbered below this.
            m.superseded_seq = m.superseded_seq.max(core.current_seq());
        }
        m.blocked_tomb += blocked;
        m.max_seq = m.max_seq.max(max_seq);
        for b in blockers {
            if !m.blockers.contains(&b) {
                m.blockers.push(b);
            }
        }
    }
    Ok(())
}
