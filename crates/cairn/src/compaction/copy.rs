//! The copy of a compaction: the live records of a segment (and the tombstones still
//! needed) go to a new segment of the same shard, written in chunks, the index pointed
//! at each copy still live after its chunk is written.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core::Core;
use crate::damage::Damage;
use crate::index::Loc;
use crate::record::{self, Kind};
use crate::segment::{self, Entry, ScanOutcome, SegmentFile, SEG_HEADER_LEN};
use crate::shard::{entry_loc, Copied, Shard, Victim};
use crate::{Error, Result};

/// Bytes of copies buffered before they are written.
const CHUNK: usize = 1 << 20;

/// What a copy found.
pub(super) struct CopyDone {
    /// A tombstone was dropped because its key has a newer value, which must be durable
    /// before the segment goes.
    pub newer_value: bool,
    /// Records read.
    pub records: u64,
}

/// The output segment, while it is written.
struct Output {
    file: Arc<SegmentFile>,
    len: u64,
    buf: Vec<u8>,
    copied: Vec<Copied>,
    entries: Vec<Entry>,
}

/// Holds compaction's I/O to `rate` bytes a second.
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

/// One compaction's copy of segment `seg` of `shard`.
struct Copier<'a> {
    core: &'a Core,
    shard: &'a Shard,
    seg: u32,
    victim: &'a Victim,
    /// Creation number of the output segment.
    created_seq: u64,
    out: Option<Output>,
    newer_value: bool,
    throttle: Throttle,
}

/// Copies the live records of `victim` (segment `seg`), read from `listing` when given
/// (only the records that may be kept), else by a scan of the whole file, to a new
/// segment, written, synced and sealed. Damage found leaves the segment in place, marked
/// damaged (and reported), and is an error.
pub(super) fn copy_live(
    core: &Core,
    shard: &Shard,
    seg: u32,
    victim: &Victim,
    listing: Option<&[Entry]>,
    throttled: bool,
) -> Result<CopyDone> {
    let mut c = Copier {
        core,
        shard,
        seg,
        victim,
        created_seq: core.current_seq(),
        out: None,
        newer_value: false,
        throttle: Throttle {
            rate: if throttled {
                core.opts.compaction_rate
            } else {
                None
            },
            start: Instant::now(),
            bytes: 0,
        },
    };
    let visit = |off: u64, rec: &record::Record<'_>, intact: bool| c.visit(off, rec, intact);
    let outcome = match listing {
        Some(entries) => {
            let wanted = |e: &Entry| match e.kind {
                Kind::Delete => true,
                Kind::Put => shard.with_index(|i| i.is_at(&e.key, entry_loc(seg, e))),
            };
            segment::scan_listed(&victim.file, victim.size, entries, wanted, visit)?
        }
        None => segment::scan(&victim.file, victim.size, visit)?,
    };
    c.finish()?;
    if !outcome.damage.is_empty() || outcome.tail.is_some() {
        return Err(damaged(core, shard, seg, &victim.file, &outcome));
    }
    Ok(CopyDone {
        newer_value: c.newer_value,
        records: outcome.records,
    })
}

/// Records we could not read stay where they are: the segment is kept, and not tried
/// again automatically. `verify` reports the damage. Returns the error to report.
fn damaged(
    core: &Core,
    shard: &Shard,
    seg: u32,
    file: &SegmentFile,
    outcome: &ScanOutcome,
) -> Error {
    shard.mark_damaged(seg);
    for spot in outcome.damage.iter().chain(outcome.tail.as_ref()) {
        core.note_damage(Damage {
            path: file.path.clone(),
            offset: Some(spot.offset),
            detail: format!(
                "found by compaction: {}; the segment is kept and not compacted again",
                spot.detail
            ),
        });
    }
    let spot = outcome.damage.first().or(outcome.tail.as_ref());
    Error::corruption(
        &file.path,
        format!(
            "compaction skipped damaged records ({}); segment kept",
            spot.map_or(String::new(), |s| format!("at {}: {}", s.offset, s.detail))
        ),
    )
}

impl Copier<'_> {
    /// Copies the record at `off` if it is to be kept.
    fn visit(&mut self, off: u64, rec: &record::Record<'_>, intact: bool) -> Result<()> {
        if !intact {
            // Reported in the outcome; the segment is kept.
            return Ok(());
        }
        let old = Loc {
            seg: self.seg,
            off: off as u32,
            len: rec.header.record_len() as u32,
        };
        let Some(blockers) = self.keep(rec, old) else {
            return Ok(());
        };
        let core = self.core;
        let o = match &mut self.out {
            Some(o) => o,
            None => self.out.insert(Output {
                file: self.shard.add_output(core, self.created_seq)?,
                len: SEG_HEADER_LEN,
                buf: Vec::with_capacity(CHUNK),
                copied: Vec::new(),
                entries: Vec::new(),
            }),
        };
        let h = rec.header;
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
            write_chunk(core, self.shard, o)?;
            self.throttle.account(2 * n);
        }
        Ok(())
    }

    /// Whether the record at `old` is kept: a put the index still points at, or a
    /// tombstone some other segment may hold an older version of its key in (those are
    /// returned: its blockers). `None`: dropped.
    fn keep(&mut self, rec: &record::Record<'_>, old: Loc) -> Option<Vec<u32>> {
        let h = rec.header;
        match h.kind {
            Kind::Put => self
                .shard
                .with_index(|i| i.is_at(rec.key, old))
                .then(Vec::new),
            Kind::Delete if self.shard.with_index(|i| i.contains(rec.key)) => {
                self.newer_value = true;
                None
            }
            Kind::Delete => {
                let blockers: Vec<u32> = self
                    .victim
                    .others
                    .iter()
                    .filter(|o| o.may_hold_older(self.shard, rec.key, h.seq))
                    .map(|o| o.id)
                    .collect();
                (!blockers.is_empty()).then_some(blockers)
            }
        }
    }

    /// Writes the last chunk, syncs the output, writes its hint file and seals it.
    fn finish(&mut self) -> Result<()> {
        let Some(o) = self.out.as_mut() else {
            return Ok(());
        };
        let (core, shard) = (self.core, self.shard);
        write_chunk(core, shard, o)?;
        core.fs.sync_data(&o.file.file, &o.file.path)?;
        let hint = segment::write_hint(&core.fs, &shard.dir, o.file.id, o.len, &o.entries)?;
        core.add_disk_used(hint);
        shard.note_write(hint);
        o.file.map_sealed(o.len);
        shard.seal_output(o.file.id, hint);
        Ok(())
    }
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
    let copied = std::mem::take(&mut o.copied);
    shard.apply_copies(core, o.file.id, o.len, copied);
    Ok(())
}
