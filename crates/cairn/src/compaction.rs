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

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bloom::Bloom;
use crate::db::Core;
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

/// Drops every sealed segment, over all shards, that holds nothing but puts the index no
/// longer points at (all the chunks of removed files, say): such a segment is removed
/// whole, without reading its data, and one flush of the store before the removals
/// covers all of them. Shards being compacted are left alone. Returns how many went.
fn drop_dead_segments(core: &Core) -> Result<usize> {
    // Per shard (marked as compacting): the segments to drop.
    type Claimed = Vec<(usize, Vec<(u32, Arc<SegmentFile>)>)>;
    let mut claimed: Claimed = Vec::new();
    let mut max_seq = 0;
    let mut superseded_seq = 0;
    for (i, sh) in core.shards.iter().enumerate() {
        // (id, file, size, max_seq, superseded_seq)
        let candidates: Vec<(u32, Arc<SegmentFile>, u64, u64, u64)> = {
            let st = sh.state.read();
            if st.compacting || st.failed.is_some() {
                continue;
            }
            st.segs
                .iter()
                .filter(|(&id, m)| {
                    m.sealed
                        && !m.damaged
                        && id != st.active.id
                        && m.tomb == 0
                        && m.blocked_tomb == 0
                        && m.dead + SEG_HEADER_LEN >= m.size
                })
                .map(|(&id, m)| (id, m.file.clone(), m.size, m.max_seq, m.superseded_seq))
                .collect()
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
        // Nothing can make the index point into a sealed segment again, so what the
        // hint shows stays true.
        let dead: Vec<(u32, Arc<SegmentFile>)> = candidates
            .into_iter()
            .filter(|(id, _, size, _, _)| all_dead_by_hint(sh, *id, *size))
            .map(|(id, f, _, seq, by)| {
                max_seq = max_seq.max(seq);
                superseded_seq = superseded_seq.max(by);
                (id, f)
            })
            .collect();
        if dead.is_empty() {
            sh.state.write().compacting = false;
        } else {
            claimed.push((i, dead));
        }
    }
    if claimed.is_empty() {
        return Ok(0);
    }
    // The records up to max_seq that go must be below the recorded watermark (so that
    // open does not take them for lost writes), and the records that superseded them
    // durable (often they are already: then no sync at all).
    let res = core
        .persist_watermark(max_seq)
        .and_then(|()| {
            if core.durable_seq() < superseded_seq {
                core.flush()
            } else {
                Ok(())
            }
        })
        .and_then(|()| {
            let mut n = 0;
            for (i, dead) in &claimed {
                for (id, f) in dead {
                    retire(core, &core.shards[*i], *id, f)?;
                    log::debug!("dropped shard {i} segment {id} whole: all superseded");
                    n += 1;
                }
            }
            Ok(n)
        });
    for (i, _) in &claimed {
        core.shards[*i].state.write().compacting = false;
    }
    res
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

/// Whether the sealed segment `seg` of `size` bytes holds only puts that the index no
/// longer points at, as its hint file tells without reading the data. `false` when
/// unsure (no readable hint, a tombstone, a live record).
fn all_dead_by_hint(shard: &Shard, seg: u32, size: u64) -> bool {
    let mut entries: Vec<(Kind, Loc, Vec<u8>)> = Vec::new();
    let read = segment::read_hint(
        &segment::hint_path(&shard.dir, seg),
        seg,
        |kind, _, _, off, len, key| entries.push((kind, Loc { seg, off, len }, key.to_vec())),
    );
    if !matches!(read, Ok((data_len, _)) if data_len == size) {
        return false;
    }
    // Short lock holds: writers of the shard wait for at most one slice of lookups.
    entries.chunks(256).all(|slice| {
        let st = shard.state.read();
        slice
            .iter()
            .all(|(kind, loc, key)| *kind == Kind::Put && st.index.get(key) != Some(*loc))
    })
}

fn compact_segment(core: &Core, shard: &Shard, seg: u32, throttled: bool) -> Result<()> {
    let (victim, size, max_seq, others) = {
        let st = shard.state.read();
        let Some(m) = st.segs.get(&seg) else {
            return Ok(());
        };
        let others: Vec<Other> = st
            .segs
            .iter()
            .filter(|(&id, _)| id != seg)
            .map(|(&id, o)| Other {
                id,
                created_seq: o.file.created_seq,
                sealed: o.sealed,
                bloom: o.bloom.clone(),
            })
            .collect();
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
        let current = shard.state.read().index.get(rec.key);
        let (keep, blockers) = match h.kind {
            Kind::Put => (current == Some(old), Vec::new()),
            Kind::Delete if current.is_some() => {
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
