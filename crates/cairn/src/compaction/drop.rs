//! Whole drops: segments every record of which can go without a copy are removed
//! without reading their data when sealed (the hint file lists the records), and without
//! ever syncing them when not sealed yet.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::{list_records, retire, Reclaimed, LISTING_MAX, RETIRED};
use crate::core::Core;
use crate::record::Kind;
use crate::segment::{Entry, SegmentFile};
use crate::shard::{entry_loc, CompactionGuard, DropCandidate, Other, Shard};
use crate::Result;

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
        shard.with_index(|index| {
            slice.iter().all(|r| match r.kind {
                Kind::Put => !index.is_at(&r.key, entry_loc(seg, r)),
                Kind::Delete if index.contains(&r.key) => true,
                Kind::Delete => !others.iter().any(|o| {
                    o.id != seg && !gone.contains(&o.id) && o.may_hold_older(shard, &r.key, r.seq)
                }),
            })
        })
    })
}

/// A segment claimed for a whole drop.
struct Claim {
    shard: usize,
    seg: u32,
    file: Arc<SegmentFile>,
    /// Not sealed: claimed (`SegState::Dropping`).
    unsealed: bool,
}

/// Gives a claimed unsealed segment back: sealed as usual (it never left the unsynced
/// list).
fn unclaim(core: &Core, c: &Claim) {
    if !c.unsealed {
        return;
    }
    let shard = &core.shards[c.shard];
    if shard.release_drop(c.seg) {
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
/// `claimed`: unsealed segments the caller already claimed
/// ([`Shard::rotate_for_reclaim`]); each is dropped or given back. No segment is judged
/// after `deadline`. Returns what went.
pub(super) fn drop_dead_segments(
    core: &Core,
    claimed: &[(usize, u32)],
    deadline: Option<Instant>,
) -> Result<Reclaimed> {
    let retired = RETIRED.load(Ordering::SeqCst);
    let mut claims: Vec<Claim> = Vec::new();
    // The right to compact each shard judged, held until its segments went.
    let mut guards: Vec<CompactionGuard<'_>> = Vec::new();
    let late = || deadline.is_some_and(|d| Instant::now() >= d);
    for (i, sh) in core.shards.iter().enumerate() {
        let guard = match sh.is_failed() || late() {
            true => None,
            false => sh.try_begin_compaction(),
        };
        let Some(guard) = guard else {
            give_back_claimed(core, i, claimed);
            continue;
        };
        // A sealed segment is judged from its hint file; one not sealed yet from its
        // data, in the page cache (read once: a listing of records kept for a segment
        // judged not droppable yet).
        let (candidates, others) = sh.drop_candidates(retired, |id| claimed.contains(&(i, id)));
        if candidates.is_empty() {
            continue;
        }
        guards.push(guard);
        for cand in candidates {
            if !cand.claimed && late() {
                continue;
            }
            if !cand.sealed && !cand.claimed && !sh.claim_for_drop(cand.id) {
                continue;
            }
            if let Some(c) = judge(core, i, cand, &others, &claims, retired) {
                claims.push(c);
            }
        }
    }
    let res = retire_claims(core, &mut claims);
    // After an error: what was not retired goes back to normal (and need not be removed
    // by the next open; one whose unlink was not synced stays listed).
    for c in &claims {
        if core.shards[c.shard].segment_file(c.seg).is_some() {
            core.dropped(c.shard as u32, c.seg);
        }
        unclaim(core, c);
    }
    drop(guards);
    res
}

/// Judges the candidate `cand` of shard `i` (claimed already when not sealed): the claim
/// when all its records can go, else `None`, the segment given back and what was found
/// noted, so that it is not judged again until something changed.
fn judge(
    core: &Core,
    i: usize,
    cand: DropCandidate,
    others: &[Other],
    claims: &[Claim],
    retired: u64,
) -> Option<Claim> {
    let sh = &core.shards[i];
    let claim = Claim {
        shard: i,
        seg: cand.id,
        file: cand.file,
        unsealed: !cand.sealed,
    };
    // Nothing makes the index point into a segment other than the active one again,
    // so a record found dead stays dead. Segments claimed before this one (older,
    // retired before it) hold no older versions any more.
    let gone: Vec<u32> = claims
        .iter()
        .filter(|c| c.shard == i)
        .map(|c| c.seg)
        .collect();
    let records = match cand.listing {
        Some(l) => Some(l),
        None => list_records(sh, cand.id, &claim.file, cand.size, cand.sealed).map(Arc::new),
    };
    let ok = records
        .as_ref()
        .is_some_and(|recs| all_droppable(sh, cand.id, recs, others, &gone));
    if ok {
        return Some(claim);
    }
    // The records of a segment that is not sealed never change; kept, if few, so that
    // the next judgement does not read them again.
    let listing = records.filter(|r| !cand.sealed && r.len() <= LISTING_MAX);
    sh.note_judged(cand.id, retired, listing);
    unclaim(core, &claim);
    None
}

/// Removes the claimed segments. Every record they hold, and every record that
/// superseded one of them, is numbered below `upto` (they exist now). Every other file is
/// synced up to it, then it is recorded as the watermark, in the same `SEQSTATE` as the
/// list of the claimed segments (those not sealed may be partly on disk: a flush may have
/// synced some of their pages; all of them must go together). From then on the claimed
/// segments may be lost, so they leave the unsynced lists (in `retire`) and go. Those
/// retired leave `claims`.
fn retire_claims(core: &Core, claims: &mut Vec<Claim>) -> Result<Reclaimed> {
    let mut r = Reclaimed::default();
    if claims.is_empty() {
        return Ok(r);
    }
    let upto = core.current_seq().saturating_sub(1);
    // Every claimed segment, sealed or not: they were judged together (a tombstone may
    // go because an older segment claimed before it goes too), so an open after a crash
    // in the middle of the unlinks must finish all of them, not only some (it once
    // removed only those not sealed: a tombstone in one went while the older sealed
    // segment with the put it deleted stayed — a deleted key came back).
    let listed: Vec<(u32, u32, u64)> = claims
        .iter()
        .map(|c| (c.shard as u32, c.seg, c.file.created_seq))
        .collect();
    for (i, s) in core.shards.iter().enumerate() {
        let skip: Vec<u32> = claims
            .iter()
            .filter(|c| c.shard == i && c.unsealed)
            .map(|c| c.seg)
            .collect();
        s.sync_all_but(core, &skip)?;
    }
    // The whole set goes while no checkpoint is placing files: one that saw some of
    // them gone and others not would not know to remove the rest (its `SEQSTATE`
    // lists no dropped segments).
    let _removing = core.removals.write();
    core.raise_watermark(upto, &listed)?;
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
}

/// Gives back the segments of shard `shard` in `claimed` (see
/// [`Shard::rotate_for_reclaim`]) when the shard is not judged now.
fn give_back_claimed(core: &Core, shard: usize, claimed: &[(usize, u32)]) {
    for &(_, id) in claimed.iter().filter(|c| c.0 == shard) {
        if let Some(file) = core.shards[shard].segment_file(id) {
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
