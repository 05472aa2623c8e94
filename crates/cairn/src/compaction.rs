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
    if drop_dead_segments(core)? > 0 {
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
            if !m.sealed || m.damaged || id == st.active.id {
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
    let res = compact_segment(core, shard, seg, !manual);
    shard.state.write().compacting = false;
    res.map(|_| Outcome::Compacted)
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
/// [`drop_dead_segments`]). Returns whether it could be claimed.
fn claim_unsealed(shard: &Shard, seg: u32) -> bool {
    let io = shard.io.lock();
    if io.rotated.contains(&seg) {
        return false;
    }
    let mut st = shard.state.write();
    let busy = st.pending.as_ref().is_some_and(|p| p.seg == seg);
    match st.segs.get_mut(&seg) {
        Some(m) if !busy && !m.sealed && !m.sealing && !m.dropping => {
            m.dropping = true;
            true
        }
        _ => false,
    }
}

/// Gives a claimed unsealed segment back: sealed as usual.
fn unclaim(core: &Core, c: &Claim) {
    if !c.unsealed {
        return;
    }
    let shard = &core.shards[c.shard];
    let mut st = shard.state.write();
    if let Some(m) = st.segs.get_mut(&c.seg) {
        m.dropping = false;
        drop(st);
        core.queue_seal(shard.id, c.seg);
    }
}

/// Drops every segment, over all shards, whose records can all go without a copy (all
/// the chunks of removed files, say; see [`all_droppable`]): removed whole, without
/// reading its data when it is sealed (its hint file lists its records), and without
/// ever syncing it when it was not sealed yet, so a file written and removed before its
/// segments were sealed costs no disk writes for them. One sync of the store and one
/// watermark raise cover all of them. Shards being compacted are left alone. Returns
/// how many went.
///
/// A segment that goes may be lost at any moment afterwards (a power loss takes its
/// unsynced pages, and its removal may not be durable yet). Two things make that safe,
/// and both hold before the first one goes: the numbers of its records are below the
/// recorded watermark (else open would take the first of them for a lost write and cut
/// off every later one), and the records that superseded them are durable (else an
/// older version would come back). Until then a segment not sealed stays on its shard's
/// unsynced list, so that every flush that promises durability still syncs it.
fn drop_dead_segments(core: &Core) -> Result<usize> {
    let retired = RETIRED.load(Ordering::SeqCst);
    let mut claims: Vec<Claim> = Vec::new();
    let mut marked: Vec<usize> = Vec::new();
    for (i, sh) in core.shards.iter().enumerate() {
        // (id, file, size, sealed, listing)
        type Candidate = (u32, Arc<SegmentFile>, u64, bool, Option<Arc<Vec<Entry>>>);
        let (candidates, others): (Vec<Candidate>, Vec<Other>) = {
            let st = sh.state.read();
            if st.compacting || st.failed.is_some() {
                continue;
            }
            // A sealed segment is judged from its hint file; one not sealed yet from
            // its data, in the page cache (read once: a listing of records kept for a
            // segment judged not droppable yet).
            let candidates = st
                .segs
                .iter()
                .filter(|(&id, m)| {
                    !m.damaged
                        && id != st.active.id
                        && m.blocked_tomb == 0
                        && m.dead + m.tomb + SEG_HEADER_LEN >= m.size
                        && (m.sealed || !(m.sealing || m.dropping))
                        && m.drop_memo != Some((m.dead + m.tomb, retired))
                })
                .map(|(&id, m)| {
                    let f = m.file.clone();
                    let listed = m.listing.clone();
                    (id, f, m.size, m.sealed, listed)
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
                continue;
            }
            st.compacting = true;
        }
        marked.push(i);
        for (id, file, size, sealed, listed) in candidates {
            if !sealed && !claim_unsealed(sh, id) {
                continue;
            }
            let claim = Claim {
                shard: i,
                seg: id,
                file,
                unsealed: !sealed,
            };
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
                    m.drop_memo = Some((m.dead + m.tomb, retired));
                    // The records of a segment that is not sealed never change; kept,
                    // if few, so that the next judgement does not read them again.
                    if !sealed && !m.sealed {
                        m.listing = records.filter(|r| r.len() <= LISTING_MAX);
                    }
                }
                unclaim(core, &claim);
            }
        }
    }
    // Every record the claimed segments hold, and every record that superseded one of
    // them, is numbered below `upto` (they exist now). Every other file is synced up to
    // it, and it is recorded as the watermark: from then on the claimed segments may be
    // lost, so they leave the unsynced lists and go.
    let res = if claims.is_empty() {
        Ok(0)
    } else {
        let upto = core.current_seq().saturating_sub(1);
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
            .and_then(|()| core.raise_watermark(upto))
            .and_then(|()| {
                let mut n = 0;
                while let Some(c) = claims.first() {
                    let shard = &core.shards[c.shard];
                    if c.unsealed {
                        shard.io.lock().unsynced.retain(|f| f.id != c.seg);
                    }
                    retire(core, shard, c.seg, &c.file)?;
                    log::debug!(
                        "dropped shard {} segment {} whole{}",
                        c.shard,
                        c.seg,
                        if c.unsealed { " (not sealed)" } else { "" }
                    );
                    claims.remove(0);
                    n += 1;
                }
                Ok(n)
            })
    };
    // After an error: what was not retired goes back to normal.
    for c in &claims {
        unclaim(core, c);
    }
    for i in marked {
        core.shards[i].state.write().compacting = false;
    }
    res
}

/// The segments of a shard as [`Other`]s.
fn others_of(segs: &std::collections::BTreeMap<u32, SegMeta>) -> Vec<Other> {
    segs.iter()
        .map(|(&id, o)| Other {
            id,
            created_seq: o.created_seq,
            sealed: o.sealed,
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

fn compact_segment(core: &Core, shard: &Shard, seg: u32, throttled: bool) -> Result<()> {
    let (victim, size, max_seq, others) = {
        let st = shard.state.read();
        let Some(m) = st.segs.get(&seg) else {
            return Ok(());
        };
        let mut others = others_of(&st.segs);
        others.retain(|o| o.id != seg);
        (m.file.clone(), m.size, m.max_seq, others)
    };
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
    let outcome = segment::scan(&victim, size, |off, rec, intact| {
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
    })?;
    if let Some(o) = out.as_mut() {
        write_chunk(core, shard, o)?;
        core.fs.sync_data(&o.file.file, &o.file.path)?;
        let hint = segment::write_hint(&core.fs, &shard.dir, o.file.id, o.len, &o.entries)?;
        core.add_disk_used(hint);
        shard.note_write(hint);
        o.file.map_sealed(o.len);
        let mut st = shard.state.write();
        if let Some(m) = st.segs.get_mut(&o.file.id) {
            m.sealed = true;
            m.hint_size = hint;
        }
    }
    if !outcome.damage.is_empty() || outcome.tail.is_some() {
        // Records we could not read stay where they are: keep the segment, and do not
        // try it again automatically. `verify` reports the damage.
        let mut st = shard.state.write();
        if let Some(m) = st.segs.get_mut(&seg) {
            m.damaged = true;
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
    retire(core, shard, seg, &victim)?;
    log::debug!(
        "compacted shard {} segment {seg}: {size} bytes, {} records",
        shard.id,
        outcome.records
    );
    Ok(())
}

/// Removes the compacted segment `seg` from the table and from disk: nothing in the
/// index points at it any more.
fn retire(core: &Core, shard: &Shard, seg: u32, victim: &SegmentFile) -> Result<()> {
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
    core.fs.sync_dir(&shard.dir)
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
    for c in o.copied.drain(..) {
        let new = Loc {
            seg: o.file.id,
            off: c.new_off,
            len: c.old.len,
        };
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
