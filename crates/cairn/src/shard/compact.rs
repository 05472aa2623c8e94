//! The operations compaction performs on a shard: the right to compact it (one
//! compaction at a time, waited for on a condition), the segments it may take, claiming a
//! segment not sealed yet for a whole drop and giving it back, the output segment, the
//! index updates for the records it copied, and the removal of a segment that went.
//! Compaction (`compaction.rs`) takes no lock of the shard itself and changes no
//! segment's state but through these.
//!
//! Lock order: the `compacting` flag's mutex is taken with no other lock of the shard held
//! and holds none (the flag is set for the whole compaction, the mutex only to flip it);
//! the rest as in `shard.rs`: `io` before `state`.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::{SegMeta, Shard};
use crate::bloom::Bloom;
use crate::ctx::StoreCtx;
use crate::index::{Index, Loc};
use crate::record::Kind;
use crate::segment::{self, Entry, SegKind, SegmentFile, SEG_HEADER_LEN};
use crate::shard::meta::Listing;
use crate::tally::Tally;
use crate::Result;

/// The right to compact a shard (or drop segments of it whole), held by one thread at a
/// time; given back, waking the threads that wait for it, when dropped.
pub(crate) struct CompactionGuard<'a> {
    shard: &'a Shard,
}

impl Drop for CompactionGuard<'_> {
    fn drop(&mut self) {
        *self.shard.compacting.lock() = false;
        self.shard.compaction_done.notify_all();
    }
}

/// The segment a compaction rewrites, as seen when it started.
pub(crate) struct Victim {
    pub file: Arc<SegmentFile>,
    pub size: u64,
    pub max_seq: u64,
    /// Every other segment of the shard.
    pub others: Vec<Other>,
    pub sealed: bool,
    /// Upper bound of its live bytes ([`SegMeta::live`]).
    pub live: u64,
    /// It is the active segment (only at a clean close).
    pub active: bool,
}

/// A segment that may be dropped whole, as seen when compaction chose it.
pub(crate) struct DropCandidate {
    pub id: u32,
    pub file: Arc<SegmentFile>,
    pub size: u64,
    pub sealed: bool,
    /// Its records, listed by an earlier judgement (not sealed yet).
    pub listing: Option<Listing>,
    /// Claimed already by the caller ([`Shard::rotate_for_reclaim`]).
    pub claimed: bool,
}

/// Another segment of the shard, as seen when compaction started.
pub(crate) struct Other {
    pub id: u32,
    created_seq: u64,
    sealed: bool,
    bloom: Arc<OnceLock<Bloom>>,
}

impl Other {
    /// Whether this segment may hold a version of `key` older than `seq`.
    pub fn may_hold_older(&self, shard: &Shard, key: &[u8], seq: u64) -> bool {
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

/// The segments of a shard as [`Other`]s.
fn others_of(segs: &BTreeMap<u32, SegMeta>) -> Vec<Other> {
    segs.iter()
        .map(|(&id, o)| Other {
            id,
            created_seq: o.created_seq,
            sealed: o.is_sealed(),
            bloom: o.bloom.clone(),
        })
        .collect()
}

/// A record copied to the output, waiting for its index update.
pub(crate) struct Copied {
    pub key: Vec<u8>,
    pub kind: Kind,
    pub seq: u64,
    pub old: Loc,
    pub new_off: u32,
    pub blockers: Vec<u32>,
}

impl Shard {
    /// Whether an fsync failed on the shard (it takes no writes and is not compacted).
    pub fn is_failed(&self) -> bool {
        self.state.read().failed.is_some()
    }

    /// Whether another thread holds the right to compact the shard.
    pub fn is_compacting(&self) -> bool {
        *self.compacting.lock()
    }

    /// The right to compact the shard, unless another thread holds it.
    pub fn try_begin_compaction(&self) -> Option<CompactionGuard<'_>> {
        let mut c = self.compacting.lock();
        if *c {
            return None;
        }
        *c = true;
        Some(CompactionGuard { shard: self })
    }

    /// Waits until no thread holds the right to compact the shard, or `timeout` passed.
    pub fn wait_compaction_done(&self, timeout: Duration) {
        let mut c = self.compacting.lock();
        if *c {
            // One wait: the caller looks again (another thread may take it first).
            let _ = self.compaction_done.wait_for(&mut c, timeout);
        }
    }

    /// The sealed segment with the highest stale fraction at or above `threshold`, with
    /// that fraction (none in a failed shard).
    pub fn best_for_compaction(&self, threshold: f64) -> Option<(u32, f64)> {
        let st = self.state.read();
        if st.failed.is_some() {
            return None;
        }
        let mut best: Option<(u32, f64)> = None;
        for (&id, m) in &st.segs {
            if !m.is_sealed() || m.is_damaged() || id == st.active.id {
                continue;
            }
            let f = m.stale_fraction();
            if f >= threshold && best.is_none_or(|b| f > b.1) {
                best = Some((id, f));
            }
        }
        best
    }

    /// The ids of the shard's segments, oldest first.
    pub fn segment_ids(&self) -> Vec<u32> {
        self.state.read().segs.keys().copied().collect()
    }

    /// The right to compact the shard for segment `id`, if no other thread holds it, the
    /// shard did not fail, and `wanted` says so of the segment (not damaged, not claimed
    /// for a drop: checked here).
    pub fn begin_compaction_of(
        &self,
        id: u32,
        wanted: impl FnOnce(&SegMeta) -> bool,
    ) -> Option<CompactionGuard<'_>> {
        let guard = self.try_begin_compaction()?;
        let st = self.state.read();
        let ok = st.failed.is_none()
            && st
                .segs
                .get(&id)
                .is_some_and(|m| !m.is_damaged() && !m.is_dropping() && wanted(m));
        ok.then_some(guard)
    }

    /// The segments that may be dropped whole: those `mine` names (claimed by the
    /// caller), and every other one but the active segment that by its accounting holds
    /// nothing live, is sealed or unsealed with nothing in progress, is not damaged, and
    /// was not judged not droppable with the same stale bytes and `retired` count. With
    /// every segment of the shard as [`Other`]s.
    pub fn drop_candidates(
        &self,
        retired: u64,
        mine: impl Fn(u32) -> bool,
    ) -> (Vec<DropCandidate>, Vec<Other>) {
        let st = self.state.read();
        let candidates = st
            .segs
            .iter()
            .filter(|(&id, m)| {
                mine(id)
                    || (!m.is_damaged()
                        && id != st.active.id
                        && m.all_stale()
                        && (m.is_sealed() || m.is_unsealed())
                        && m.drop_memo() != Some((m.stale(), retired)))
            })
            .map(|(&id, m)| DropCandidate {
                id,
                file: m.file.clone(),
                size: m.size,
                sealed: m.is_sealed(),
                listing: m.listing(),
                claimed: mine(id),
            })
            .collect();
        (candidates, others_of(&st.segs))
    }

    /// Claims the rotated, unsealed segment `seg` for a drop: it must be fully written
    /// (out of the rotation in progress, no pending write) and not being sealed. It is
    /// marked so that the maintenance thread does not seal it. It stays on the unsynced
    /// list, so that every flush still syncs it, until the drop has made it safe to lose
    /// ([`Shard::take_off_unsynced`]). Returns whether it was claimed.
    pub fn claim_for_drop(&self, seg: u32) -> bool {
        let io = self.io.lock();
        if io.rotated.contains(&seg) {
            return false;
        }
        let mut st = self.state.write();
        let busy = st.pending.as_ref().is_some_and(|p| p.seg == seg);
        match st.segs.get_mut(&seg) {
            Some(m) if !busy => m.claim_drop(),
            _ => false,
        }
    }

    /// Gives back a segment claimed for a drop, to be sealed as usual (it never left
    /// the unsynced list). Returns whether the segment still exists (the caller queues
    /// its seal).
    pub fn release_drop(&self, seg: u32) -> bool {
        let mut st = self.state.write();
        match st.segs.get_mut(&seg) {
            Some(m) => {
                m.unclaim_drop();
                true
            }
            None => false,
        }
    }

    /// Records that segment `seg` was judged not droppable whole (see
    /// [`SegMeta::note_judged`]); a `listing` is kept only while it is not sealed.
    pub fn note_judged(&self, seg: u32, retired: u64, listing: Option<Listing>) {
        if let Some(m) = self.state.write().segs.get_mut(&seg) {
            let listing = listing.filter(|_| !m.is_sealed());
            m.note_judged((m.stale(), retired), listing);
        }
    }

    /// Takes segment `seg`, about to be removed, off the unsynced list (if it is
    /// there), so that no flush writes its dead data to disk. Only once it may be lost:
    /// its records below the recorded watermark and the records that superseded them
    /// durable.
    pub fn take_off_unsynced(&self, seg: u32) {
        self.io.lock().unsynced.retain(|f| f.id != seg);
    }

    /// The file of segment `seg`, if it exists.
    pub fn segment_file(&self, seg: u32) -> Option<Arc<SegmentFile>> {
        self.state.read().segs.get(&seg).map(|m| m.file.clone())
    }

    /// Runs `f` on the index (under the state lock: keep it short).
    pub fn with_index<R>(&self, f: impl FnOnce(&Index) -> R) -> R {
        f(&self.state.read().index)
    }

    /// Segment `seg` as a compaction's victim: `None` when it is gone, or when it is the
    /// active segment or not sealed and not `closing`.
    pub fn victim(&self, seg: u32, closing: bool) -> Option<Victim> {
        let st = self.state.read();
        let m = st.segs.get(&seg)?;
        let active = seg == st.active.id;
        if (active || !m.is_sealed()) && !closing {
            return None;
        }
        let mut others = others_of(&st.segs);
        others.retain(|o| o.id != seg);
        Some(Victim {
            file: m.file.clone(),
            size: m.size,
            max_seq: m.max_seq,
            others,
            sealed: m.is_sealed(),
            live: m.live(),
            active,
        })
    }

    /// Creates compaction's output segment, its records numbered from `created_seq`.
    pub fn add_output(&self, core: &StoreCtx, created_seq: u64) -> Result<Arc<SegmentFile>> {
        let id = {
            let mut st = self.state.write();
            st.next_seg += 1;
            st.next_seg - 1
        };
        let f = Arc::new(SegmentFile::create(
            &core.fs,
            &self.dir,
            self.id,
            id,
            SegKind::Compacted,
            created_seq,
        )?);
        core.add_disk_used(SEG_HEADER_LEN);
        self.note_write(SEG_HEADER_LEN);
        self.state
            .write()
            .segs
            .insert(id, SegMeta::new(f.clone(), SEG_HEADER_LEN));
        Ok(f)
    }

    /// Marks the output segment `id`, synced, with its hint file of `hint` bytes, sealed.
    pub fn seal_output(&self, id: u32, hint: u64) {
        if let Some(m) = self.state.write().segs.get_mut(&id) {
            m.mark_sealed();
            m.hint_size = hint;
        }
    }

    /// Marks segment `seg` damaged: kept, and not compacted again.
    pub fn mark_damaged(&self, seg: u32) {
        if let Some(m) = self.state.write().segs.get_mut(&seg) {
            m.mark_damaged();
        }
    }

    /// The highest sequence number of a record that superseded one of segment `seg`'s
    /// (`u64::MAX` when it is gone).
    pub fn superseded_seq(&self, seg: u32) -> u64 {
        self.state
            .read()
            .segs
            .get(&seg)
            .map_or(u64::MAX, |m| m.superseded_seq)
    }

    /// Takes segment `seg`, compacted or dropped whole, out of the shard: nothing in the
    /// index points at it any more, and it may be lost. The tombstones it blocked in other
    /// segments may be dropped again. Returns the bytes of its files (the caller removes
    /// them).
    pub fn finish_drop(&self, seg: u32) -> u64 {
        // A segment not synced yet need not be synced now: the caller made it safe to
        // lose.
        self.take_off_unsynced(seg);
        let mut st = self.state.write();
        let mut m = st.segs.remove(&seg);
        if let Some(p) = m.as_ref().filter(|p| p.pinned > 0) {
            // A live snapshot may still read records of it: the file stays open (the
            // caller unlinks it), and its bytes counted, until they are let go.
            st.versions.retire(seg, p.file.clone(), p.size, p.pinned);
            self.notes.publish(&st.versions);
            if let Some(p) = m.as_mut() {
                p.size = 0;
            }
        }
        for other in st.segs.values_mut() {
            if other.blockers.contains(&seg) {
                other.tomb += other.blocked_tomb;
                other.blocked_tomb = 0;
                other.blockers.clear();
            }
        }
        m.map_or(0, |m| m.size + m.hint_size)
    }

    /// Points the index at the copies in the output segment `out` (now `len` bytes) that
    /// are still live, and accounts the copies.
    pub fn apply_copies(&self, core: &StoreCtx, out: u32, len: u64, copied: Vec<Copied>) {
        let mut st = self.state.write();
        let st = &mut *st;
        let (mut dead, mut blocked, mut max_seq) = (0u64, 0u64, 0u64);
        let mut blockers = Vec::new();
        let mut bytes = Tally::default();
        for c in copied {
            let new = Loc {
                seg: out,
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
        if let Some(m) = st.segs.get_mut(&out) {
            m.size = len;
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
    }
}

/// Where the listed record `e` of segment `seg` is.
pub(crate) fn entry_loc(seg: u32, e: &Entry) -> Loc {
    Loc {
        seg,
        off: e.off,
        len: e.len,
    }
}
