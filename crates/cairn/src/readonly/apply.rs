//! The second half of a catch-up: the new visible prefix (the crash cut's rule: every
//! write up to the watermark, then a run of whole batches without a gap), the plan of
//! index changes it makes (checked against the segments that left the directory before
//! anything changes), and the plan applied to every shard at once.

use std::collections::HashMap;

use parking_lot::{RwLock, RwLockWriteGuard};

use super::gather::{self, ShardDelta};
use super::{Added, Halt, Rec, Recs, Seg, ShardView, Step, View};
use crate::index::Loc;
use crate::manifest::SeqState;
use crate::record::Kind;
use crate::shard::{SegMeta, ShardState};
use crate::tally::Tally;

/// One index change of a shard's plan: the record that becomes its key's newest
/// version (a put's location, or a delete), and where the key pointed before.
struct Op {
    rec: Rec,
    old: Option<Loc>,
}

/// A shard's part of a round.
struct Plan {
    /// The records made visible, their keys in `recs.arena`.
    recs: Recs,
    ops: Vec<Op>,
    /// Records of `recs` that are not their key's newest version: (segment, bytes).
    dead: Vec<(u32, u64)>,
    /// Records held back for a later round.
    pending: Recs,
}

/// Applies what `deltas` read to `view` and `states`: checks first, then changes
/// everything under every shard's write lock at once, so that readers see the whole
/// round or none of it.
pub(super) fn round(
    view: &mut View,
    states: &[&RwLock<ShardState>],
    seqstate: &SeqState,
    deltas: Vec<ShardDelta>,
) -> Step<Added> {
    let visible = new_visible(view, seqstate, &deltas);
    let mut plans = Vec::with_capacity(deltas.len());
    for ((sv, d), st) in view.shards.iter().zip(&deltas).zip(states) {
        let plan = plan(sv, d, &st.read(), seqstate, view.visible, visible)?;
        check_gone(sv, d, &plan)?;
        plans.push(plan);
    }
    view.round += 1;
    let round = view.round;
    let mut added = Added::default();
    let mut locks: Vec<RwLockWriteGuard<'_, ShardState>> =
        states.iter().map(|s| s.write()).collect();
    for (((sv, d), plan), st) in view
        .shards
        .iter_mut()
        .zip(deltas)
        .zip(plans)
        .zip(locks.iter_mut())
    {
        added.records += plan.recs.recs.len() as u64;
        added.bytes += plan.recs.recs.iter().map(|r| r.loc.len as u64).sum::<u64>();
        added.held_back += plan.pending.recs.len() as u64;
        take_segments(sv, d, st);
        apply_plan(sv, plan, st, round);
        release(sv, st);
    }
    drop(locks);
    view.visible = visible;
    Ok(added)
}

/// The new visible prefix: every write up to the watermark (all of them were in the
/// files before `SEQSTATE` said so, and were read, or were superseded by records that
/// were), then each next number while it is void, aborted, or has all its batch's
/// records read (copies in compaction outputs do not count: their originals may have
/// been read too).
fn new_visible(view: &View, seqstate: &SeqState, deltas: &[ShardDelta]) -> u64 {
    let v = view.visible.max(seqstate.watermark);
    let mut counts: HashMap<u64, (u32, u32)> = HashMap::new();
    let held = view.shards.iter().map(|s| &s.pending);
    for recs in held.chain(deltas.iter().map(|d| &d.recs)) {
        for r in &recs.recs {
            if r.seq > v && !r.copy {
                counts.entry(r.seq).or_insert((0, r.batch_total)).0 += 1;
            }
        }
    }
    extend_visible(v, seqstate, &counts)
}

/// The visible prefix from `v` on: each next number while it is void, aborted, or has
/// all its batch's records read (`counts`: per number, the records read and their
/// batch's size).
pub(super) fn extend_visible(
    mut v: u64,
    seqstate: &SeqState,
    counts: &HashMap<u64, (u32, u32)>,
) -> u64 {
    loop {
        let next = v + 1;
        if let Some((_, hi)) = seqstate.in_void(next) {
            v = hi;
        } else if seqstate.aborted.binary_search(&next).is_ok()
            || counts.get(&next).is_some_and(|&(n, total)| n >= total)
        {
            v = next;
        } else {
            return v;
        }
    }
}

/// Works out shard `sv`'s index changes: of the records read and held (those not
/// ignored, numbered up to `visible`), each key's newest one, if it is newer than what
/// the index holds (a record numbered above `before`, the old visible prefix, always
/// is; an older one — a compaction's copy — is compared with the index's record and
/// the key's last delete). Reads the numbers of index entries it compares with from
/// their segments; changes nothing.
fn plan(
    sv: &ShardView,
    d: &ShardDelta,
    st: &ShardState,
    seqstate: &SeqState,
    before: u64,
    visible: u64,
) -> Step<Plan> {
    let mut recs = Recs::default();
    let mut pending = Recs::default();
    for (from, r) in sv
        .pending
        .recs
        .iter()
        .map(|r| (&sv.pending, r))
        .chain(d.recs.recs.iter().map(|r| (&d.recs, r)))
    {
        if seqstate.ignored(r.seq) {
            continue;
        }
        if r.seq <= visible {
            recs.push_from(from, r);
        } else {
            pending.push_from(from, r);
        }
    }
    let mut order: Vec<usize> = (0..recs.recs.len()).collect();
    order.sort_unstable_by(|&a, &b| {
        let (ra, rb) = (&recs.recs[a], &recs.recs[b]);
        recs.key(ra)
            .cmp(recs.key(rb))
            .then(rb.seq.cmp(&ra.seq))
            .then(rb.loc.seg.cmp(&ra.loc.seg))
    });
    let mut ops = Vec::new();
    let mut dead = Vec::new();
    let mut i = 0;
    while i < order.len() {
        let first = recs.recs[order[i]];
        let key = recs.key(&first);
        let mut j = i + 1;
        while j < order.len() && recs.key(&recs.recs[order[j]]) == key {
            let r = recs.recs[order[j]];
            if r.kind == Kind::Put {
                dead.push((r.loc.seg, r.loc.len as u64));
            }
            j += 1;
        }
        let old = st.index.get(key);
        if wins(sv, &first, key, old, before)? {
            ops.push(Op { rec: first, old });
        } else if first.kind == Kind::Put {
            dead.push((first.loc.seg, first.loc.len as u64));
        }
        i = j;
    }
    Ok(Plan {
        recs,
        ops,
        dead,
        pending,
    })
}

/// Whether record `r` of `key` is newer than the key's index entry `old` and its last
/// delete.
fn wins(sv: &ShardView, r: &Rec, key: &[u8], old: Option<Loc>, before: u64) -> Step<bool> {
    if r.seq > before {
        return Ok(true);
    }
    if sv.tombs.get(key).is_some_and(|&(t, _)| t >= r.seq) {
        return Ok(false);
    }
    let Some(old) = old else {
        return Ok(true);
    };
    let Some(seg) = sv.segs.get(&old.seg) else {
        return Err(Halt::Restart(format!(
            "the index points into segment {}, which the view does not hold",
            old.seg
        )));
    };
    let old_seq = gather::seq_at(&seg.file, old)?;
    Ok((r.seq, r.loc.seg) > (old_seq, old.seg))
}

/// Stops the round when a segment that left the directory would keep index entries:
/// compaction removes a segment only once its live records are copied to an output
/// (listed, and read, before the segment went) or superseded by records up to the
/// watermark, so a view that still needs it was read in a race with the writer (a
/// `SEQSTATE` older than the removal): read again from a fresh listing.
fn check_gone(sv: &ShardView, d: &ShardDelta, plan: &Plan) -> Step<()> {
    let gone = |id: u32| d.gone.contains(&id) || sv.segs.get(&id).is_some_and(|s| s.gone);
    let mut live: HashMap<u32, i64> = HashMap::new();
    for (&id, s) in &sv.segs {
        if gone(id) {
            live.insert(id, s.live as i64);
        }
    }
    if live.is_empty() {
        return Ok(());
    }
    for op in &plan.ops {
        if let Some(n) = op.old.and_then(|o| live.get_mut(&o.seg)) {
            *n -= 1;
        }
        if op.rec.kind == Kind::Put {
            if let Some(n) = live.get_mut(&op.rec.loc.seg) {
                *n += 1;
            }
        }
    }
    match live.iter().find(|(_, &n)| n > 0) {
        Some((id, n)) => Err(Halt::Race(format!(
            "segment {id} left the directory with {n} records the view still needs"
        ))),
        None => Ok(()),
    }
}

/// Adds the segments `d` read for the first time to the view and the shard, and
/// updates those it read on, with the byte counts of what was read.
fn take_segments(sv: &mut ShardView, d: ShardDelta, st: &mut ShardState) {
    for (id, seg) in d.new {
        let mut m = SegMeta::new(seg.file.clone(), seg.end);
        if seg.hinted {
            m.mark_sealed();
        }
        st.segs.insert(id, m);
        sv.segs.insert(id, seg);
    }
    for (id, p) in d.advanced {
        if let Some(s) = sv.segs.get_mut(&id) {
            (s.end, s.last, s.hinted) = (p.end, p.last, p.hinted);
        }
        if let Some(m) = st.segs.get_mut(&id) {
            m.size = p.end;
            if p.hinted && !m.is_sealed() {
                m.mark_sealed();
            }
        }
    }
    for id in d.gone {
        if let Some(s) = sv.segs.get_mut(&id) {
            s.gone = true;
        }
    }
    for r in &d.recs.recs {
        if let Some(m) = st.segs.get_mut(&r.loc.seg) {
            let ns = Tally::ns(d.recs.key(r));
            m.bytes.add(ns, r.loc.len as u64);
            m.max_seq = m.max_seq.max(r.seq);
            if r.kind == Kind::Delete {
                m.tomb += r.loc.len as u64;
            }
        }
    }
}

/// Makes `plan`'s changes to the shard's index and counts.
fn apply_plan(sv: &mut ShardView, plan: Plan, st: &mut ShardState, round: u64) {
    let live = |segs: &mut std::collections::BTreeMap<u32, Seg>, id: u32, up: bool| {
        if let Some(s) = segs.get_mut(&id) {
            s.live = if up {
                s.live + 1
            } else {
                s.live.saturating_sub(1)
            };
        }
    };
    for op in &plan.ops {
        let r = op.rec;
        let key = plan.recs.key(&r);
        let ns = Tally::ns(key);
        match r.kind {
            Kind::Put => {
                sv.tombs.remove(key);
                st.live_bytes += r.loc.len as u64;
                st.live_by_ns.add(ns, r.loc.len as u64);
                live(&mut sv.segs, r.loc.seg, true);
                match st.index.insert(key, r.loc) {
                    Some(old) => {
                        mark_dead(st, ns, old);
                        live(&mut sv.segs, old.seg, false);
                    }
                    None => st.keys_by_ns.add(ns, 1),
                }
            }
            Kind::Delete => {
                sv.tombs.insert(key.into(), (r.seq, round));
                if let Some(old) = st.index.remove(key) {
                    st.keys_by_ns.sub(ns, 1);
                    mark_dead(st, ns, old);
                    live(&mut sv.segs, old.seg, false);
                }
            }
        }
    }
    for (seg, len) in plan.dead {
        if let Some(m) = st.segs.get_mut(&seg) {
            m.dead += len;
        }
    }
    for s in sv.segs.values_mut() {
        s.held = 0;
    }
    for r in &plan.pending.recs {
        if let Some(s) = sv.segs.get_mut(&r.loc.seg) {
            s.held += 1;
        }
    }
    sv.pending = plan.pending;
    prune_tombs(sv, round);
}

/// Accounts the record at `old`, of keyspace `ns`, as superseded.
fn mark_dead(st: &mut ShardState, ns: u8, old: Loc) {
    if let Some(m) = st.segs.get_mut(&old.seg) {
        m.dead += old.len as u64;
    }
    st.live_bytes = st.live_bytes.saturating_sub(old.len as u64);
    st.live_by_ns.sub(ns, old.len as u64);
}

/// Forgets the deletes that no stale copy can undo any more. A compaction copies a
/// put it judged live, so a stale copy of a put older than a delete numbered `t` can
/// only be written to an output created before `t` was taken (its header's creation
/// number at most `t`), and every such output was listed by this round (it existed
/// before the delete reached the files, which was before an earlier round read it):
/// once all of those are sealed and read whole, the delete can be forgotten.
fn prune_tombs(sv: &mut ShardView, round: u64) {
    if sv.tombs.is_empty() {
        return;
    }
    let open_output = sv
        .segs
        .values()
        .filter(|s| !s.gone && !s.hinted && s.file.kind == crate::segment::SegKind::Compacted)
        .map(|s| s.file.created_seq)
        .min()
        .unwrap_or(u64::MAX);
    sv.tombs
        .retain(|_, &mut (seq, r)| r == round || seq >= open_output);
}

/// Closes the segments that left the directory and that nothing points into any more.
fn release(sv: &mut ShardView, st: &mut ShardState) {
    let done: Vec<u32> = sv
        .segs
        .iter()
        .filter(|(_, s)| s.gone && s.live == 0 && s.held == 0)
        .map(|(&id, _)| id)
        .collect();
    for id in done {
        sv.segs.remove(&id);
        st.segs.remove(&id);
    }
}
