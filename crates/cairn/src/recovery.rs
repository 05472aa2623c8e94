//! Opening a shard: load hint files (or scan segments without one), repair torn tails,
//! drop incomplete batches, and rebuild the index from the newest version of each key.
//!
//! Open runs in three phases so that batch atomicity can be checked across shards:
//! 1. [`load`] (per shard, in parallel): check every segment's hint file and keep its
//!    map (a hint lists the segment's entries — key, sequence number, location — in key
//!    order), or read the entries by scanning the segment; then [`settle`] them: merge
//!    them into key order, newest first (hints straight from their maps), and bulk-load
//!    the index from the winners
//!    of every key none of whose records is newer than the durable watermark (phase 2
//!    cannot change what those are), accounting dead and tombstone bytes. Only the records of
//!    the other keys (those written since the last sync) are kept for phase 3, so the
//!    entries of a whole shard are in memory only while that shard loads, not those of
//!    every shard at once (at 200 million keys, ~17 GB more than the indexes).
//! 2. the caller counts, over all shards, the records of each batch newer than the
//!    durable watermark, and declares the incomplete ones aborted.
//! 3. [`build`] (per shard, in parallel): the kept keys' winners go into the index, and
//!    the shard's state is made.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::commitlog::LoggedRecord;
use crate::damage::Damage;
use crate::fsutil::Fs;
use crate::index::{BulkBuffers, Index, Loc};
use crate::record::Kind;
use crate::segment::{self, Hint, SegKind, SegmentFile, SEG_HEADER_LEN};
use crate::seq::ShardSeqs;
use crate::shard::{Active, SegMeta, ShardState};
use crate::tally::Tally;
use crate::{Error, Result};
use merge::{Item, Merge};

mod merge;
pub(crate) mod view;

/// One record's metadata gathered at open.
#[derive(Clone, Copy)]
struct Rec {
    /// The key's first 24 bytes as three big-endian words, zero-padded: comparing these
    /// orders keys as their bytes do, and most comparisons end here without reading the
    /// key from the arena (a cache miss per key in a shard of millions). Eight bytes were
    /// too few: every entry key of one directory starts with the same `D` + parent, so
    /// sorting a 100-million-file store compared nearly every pair through the arena.
    prefix: [u64; 3],
    key_off: usize,
    key_len: u32,
    kind: Kind,
    batch_total: u32,
    seq: u64,
    loc: Loc,
}

impl Rec {
    /// The record's key, kept in `arena`.
    fn key<'a>(&self, arena: &'a [u8]) -> &'a [u8] {
        &arena[self.key_off..self.key_off + self.key_len as usize]
    }
}

struct LoadedSeg {
    file: Arc<SegmentFile>,
    size: u64,
    hint_size: u64,
    sealed: bool,
}

/// Phase-1 result for one shard.
pub(crate) struct Loaded {
    pub shard: u32,
    pub dir: PathBuf,
    segs: BTreeMap<u32, LoadedSeg>,
    /// The keys of `recs`.
    arena: Vec<u8>,
    /// Every record read from a segment without a hint in key order, until [`settle`];
    /// after it, only those of the keys (from any segment) with a record newer than the
    /// watermark, sorted by key and newest first.
    recs: Vec<Rec>,
    /// The checked hints in key order, until [`settle`] merges them from their maps.
    hints: Vec<Hint>,
    /// What [`settle`] decided: the index and accounting of the other keys.
    settled: Option<Settled>,
    pub damage: Vec<Damage>,
    pub max_seq: u64,
    /// Damage made records unreadable (not a torn tail): sequence numbers may be
    /// missing for a reason other than a crash.
    pub lost_records: bool,
    next_seg: u32,
    /// What a read-only view keeps beyond a writer's load ([`view`]), when loaded for
    /// one.
    follow: Option<view::Follow>,
}

fn parse_name(name: &str) -> Option<(u32, &str)> {
    let (stem, ext) = name.split_once('.')?;
    if stem.len() != 10 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((stem.parse().ok()?, ext))
}

/// Phase 1: reads the entries of every segment of a shard, into `bufs`' buffers (taken
/// from it; [`settle`] gives them back).
pub(crate) fn load(fs: &Fs, shard: u32, dir: &Path, bufs: &mut LoadBuffers) -> Result<Loaded> {
    let mut seg_ids = Vec::new();
    let mut hint_ids = HashSet::new();
    let mut max_id = 0u32;
    let rd = fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for ent in rd {
        let ent = ent.map_err(|e| Error::io(dir, e))?;
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(".tmp") {
            fs.remove(&ent.path())?;
            continue;
        }
        match parse_name(name) {
            Some((id, "seg")) => {
                seg_ids.push(id);
                max_id = max_id.max(id);
            }
            Some((id, "hint")) => {
                hint_ids.insert(id);
                max_id = max_id.max(id);
            }
            _ => {}
        }
    }
    seg_ids.sort_unstable();
    let mut out = Loaded::empty(shard, dir, bufs, max_id + 1, None);
    for &id in &hint_ids {
        if seg_ids.binary_search(&id).is_err() {
            // The segment was removed by compaction after its hint: finish the removal.
            fs.remove(&segment::hint_path(dir, id))?;
        }
    }
    for id in seg_ids {
        load_segment(fs, dir, shard, id, hint_ids.contains(&id), &mut out)?;
    }
    Ok(out)
}

/// Loads segment `id` of the shard into `out`: from its hint file when it has one that
/// describes it, else by a scan of its data (a torn tail is cut off).
fn load_segment(
    fs: &Fs,
    dir: &Path,
    shard: u32,
    id: u32,
    has_hint: bool,
    out: &mut Loaded,
) -> Result<()> {
    let path = segment::seg_path(dir, id);
    let hpath = segment::hint_path(dir, id);
    let Some((file, len)) = open_segment(fs, &path, &hpath, shard, id, out)? else {
        return Ok(());
    };
    let file = Arc::new(file);
    if has_hint {
        if load_hint(&hpath, id, &file, len, out)? {
            return Ok(());
        }
        fs.remove(&hpath)?;
    }
    let outcome = segment::scan(&file, len, |off, rec, _intact| {
        let h = rec.header;
        let loc = Loc {
            seg: id,
            off: off as u32,
            len: h.record_len() as u32,
        };
        out.push_rec(h.kind, h.seq, h.batch_total, loc, rec.key);
        Ok(())
    })?;
    for spot in outcome.damage {
        out.lost_records = true;
        out.damage.push(Damage {
            path: path.clone(),
            offset: Some(spot.offset),
            detail: format!("{}; skipped, later records kept", spot.detail),
        });
    }
    let mut size = len;
    if outcome.tail.is_some() || outcome.zero_tail > 0 {
        // Nothing intact follows: a write torn by a crash, or zeros laid out ahead of
        // durable appends by the last run. Cut it off, so that appends go on where the
        // data ends and the length is the data's end again.
        fs.set_len(&file.file, &path, outcome.valid_end)?;
        fs.sync_data(&file.file, &path)?;
        if let Some(tail) = outcome.tail {
            log::warn!(
                "{}: truncated torn tail of {} bytes at offset {} ({})",
                path.display(),
                len - outcome.valid_end,
                tail.offset,
                tail.detail
            );
        }
        size = outcome.valid_end;
    }
    out.segs.insert(
        id,
        LoadedSeg {
            file,
            size,
            hint_size: 0,
            sealed: false,
        },
    );
    Ok(())
}

/// Opens segment `id` at `path`: its file and length, or `None` when it holds nothing
/// (removed: shorter than its header) or cannot be read (skipped, the damage noted).
fn open_segment(
    fs: &Fs,
    path: &Path,
    hpath: &Path,
    shard: u32,
    id: u32,
    out: &mut Loaded,
) -> Result<Option<(SegmentFile, u64)>> {
    match SegmentFile::open(path, shard, id) {
        Ok(Some((file, len, damage))) => {
            if let Some(detail) = damage {
                out.damage.push(Damage {
                    path: path.to_owned(),
                    offset: Some(0),
                    detail: format!("{detail}; its records are read, it takes no more writes"),
                });
            }
            Ok(Some((file, len)))
        }
        Ok(None) => {
            // Shorter than its header: a crash while it was being created. It holds no
            // records.
            fs.remove(path)?;
            fs.remove(hpath)?;
            Ok(None)
        }
        Err(e @ Error::Format { .. }) => Err(e),
        Err(e @ Error::Io { .. }) => Err(e),
        Err(e) => {
            out.damage.push(Damage {
                path: path.to_owned(),
                offset: Some(0),
                detail: format!("segment skipped: {e}"),
            });
            Ok(None)
        }
    }
}

/// Loads segment `id` (`len` bytes) from its hint file at `hpath`; returns whether the
/// hint described it (else the damage is noted and the caller scans the segment).
fn load_hint(
    hpath: &Path,
    id: u32,
    file: &Arc<SegmentFile>,
    len: u64,
    out: &mut Loaded,
) -> Result<bool> {
    let detail = match Hint::open(hpath, id) {
        Ok(hint) if !hint.within(len) => {
            "hint lists a record outside the segment; rescanning".to_string()
        }
        Ok(hint) if hint.data_len() == len => {
            out.add_hinted(file.clone(), len, hint);
            return Ok(true);
        }
        Ok(hint) => format!(
            "hint covers {} bytes but the segment has {len}; rescanning",
            hint.data_len()
        ),
        Err(e @ Error::Io { .. }) => return Err(e),
        Err(e) => format!("{e}; rescanning the segment"),
    };
    out.damage.push(Damage {
        path: hpath.to_owned(),
        offset: None,
        detail,
    });
    Ok(false)
}

impl Loaded {
    /// Adds the record at `loc` to the shard's loaded records.
    fn push_rec(&mut self, kind: Kind, seq: u64, batch_total: u32, loc: Loc, key: &[u8]) {
        self.recs.push(Rec {
            prefix: segment::key_prefix(key),
            key_off: self.arena.len(),
            key_len: key.len() as u32,
            kind,
            batch_total,
            seq,
            loc,
        });
        self.arena.extend_from_slice(key);
        self.max_seq = self.max_seq.max(seq);
    }
}

/// Writes `recs` (records from the commit log that shard `shard` lost) into a new
/// segment `id` of the shard, in the order of their numbers, synced; the caller then
/// loads the shard again. The segment says it was created at the lowest of them, so
/// compaction counts it as possibly holding versions that old.
pub(crate) fn write_replayed(
    fs: &Fs,
    shard: u32,
    dir: &Path,
    id: u32,
    recs: &mut Vec<&LoggedRecord>,
) -> Result<()> {
    recs.sort_by_key(|r| r.seq);
    let created = recs.first().map_or(0, |r| r.seq);
    let seg = SegmentFile::create(fs, dir, shard, id, SegKind::Data, created)?;
    let bytes: Vec<u8> = recs.iter().flat_map(|r| r.bytes.iter().copied()).collect();
    fs.write_at(&seg.file, &seg.path, &bytes, SEG_HEADER_LEN)?;
    fs.sync_data(&seg.file, &seg.path)?;
    log::warn!(
        "shard {shard}: {} durable write(s) missing from the segments were restored from the commit log",
        recs.len()
    );
    Ok(())
}

impl Loaded {
    /// The highest creation number in the headers of the shard's segments.
    pub fn max_created(&self) -> u64 {
        self.segs
            .values()
            .map(|s| s.file.created_seq)
            .max()
            .unwrap_or(0)
    }

    /// The id a new segment of this shard would take.
    pub fn next_seg(&self) -> u32 {
        self.next_seg
    }

    /// Of `logged` (this shard's records found in the commit log), those newer than
    /// the watermark, not ignored, that this shard does not hold: a write acknowledged
    /// durable through the log whose record never reached the segment. Call before
    /// [`settle`].
    pub fn missing<'a>(
        &self,
        logged: &'a [LoggedRecord],
        seqstate: &crate::manifest::SeqState,
    ) -> Vec<&'a LoggedRecord> {
        let wanted = |r: &&LoggedRecord| r.seq > seqstate.watermark && !seqstate.ignored(r.seq);
        if !logged.iter().any(|r| wanted(&r)) {
            return Vec::new();
        }
        let wm = seqstate.watermark;
        let from_hints = self
            .hints
            .iter()
            .filter(|h| h.max_seq() > wm)
            .flat_map(|h| h.entries())
            .filter(|e| e.seq > wm)
            .map(|e| (e.seq, e.key));
        let held: HashSet<(u64, &[u8])> = self
            .recs
            .iter()
            .filter(|r| r.seq > wm)
            .map(|r| (r.seq, r.key(&self.arena)))
            .chain(from_hints)
            .collect();
        logged
            .iter()
            .filter(|r| wanted(r) && !held.contains(&(r.seq, &r.key[..])))
            .collect()
    }

    /// Adds (sequence number, records in its batch) of each of this shard's records
    /// newer than `watermark` to `out`.
    pub fn seqs_above(&self, watermark: u64, out: &mut Vec<(u64, u32)>) {
        out.extend(
            self.recs
                .iter()
                .filter(|r| r.seq > watermark)
                .map(|r| (r.seq, r.batch_total)),
        );
    }
}

/// What phase 2 decided about the writes newer than the watermark.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Cut {
    /// Batches partly written (only when damage keeps the prefix from being judged).
    pub aborted: Vec<u64>,
    /// Ranges to ignore: the cut-off suffix after a crash, or gaps left by damage.
    pub void: Vec<(u64, u64)>,
}

/// Phase 2: every write gets its own sequence number, so after a crash the writes
/// that survive must be those numbered `watermark + 1 ..= g - 1` for some `g`; the
/// first number missing (or a batch found incomplete) is the first write lost, and
/// every later write found is cut off too, so that the store keeps a prefix of its
/// writes (a write that depended on a lost one never survives without it).
///
/// `seqs` holds (sequence number, batch size) of every record newer than the
/// watermark in every shard; `max_seq` is the highest number found anywhere. With
/// `lost_records` (damage destroyed records, so a missing number need not mean a
/// crash), nothing is cut: missing numbers are recorded as void and incomplete batches
/// as aborted, keeping every intact write.
pub(crate) fn find_cut(
    mut seqs: Vec<(u64, u32)>,
    state: &crate::manifest::SeqState,
    max_seq: u64,
    lost_records: bool,
) -> Cut {
    seqs.sort_unstable();
    let mut cut = Cut::default();
    // The next number expected, and whether a gap before it is being bridged.
    let mut expected = state.watermark + 1;
    let mut i = 0;
    while i < seqs.len() {
        let (seq, total) = seqs[i];
        let mut found = 0u64;
        while i < seqs.len() && seqs[i].0 == seq {
            found += 1;
            i += 1;
        }
        if state.ignored(seq) {
            expected = expected.max(seq + 1);
            continue;
        }
        // Numbers between `expected` and `seq` that nothing accounts for were lost.
        if let Some(gap) = first_unaccounted(state, expected, seq) {
            if !lost_records {
                cut.void.push((gap, max_seq));
                return cut;
            }
            for r in unaccounted_ranges(state, gap, seq) {
                cut.void.push(r);
            }
        }
        if found < total as u64 {
            if !lost_records {
                cut.void.push((seq, max_seq));
                return cut;
            }
            cut.aborted.push(seq);
        }
        expected = seq + 1;
    }
    cut
}

/// The first number in `from..to` that is neither aborted nor void.
fn first_unaccounted(state: &crate::manifest::SeqState, from: u64, to: u64) -> Option<u64> {
    let mut m = from;
    while m < to {
        if let Some((_, hi)) = state.in_void(m) {
            m = hi + 1;
        } else if state.aborted.binary_search(&m).is_ok() {
            m += 1;
        } else {
            return Some(m);
        }
    }
    None
}

/// The maximal ranges of `from..to` that are neither aborted nor void.
fn unaccounted_ranges(state: &crate::manifest::SeqState, from: u64, to: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut m = from;
    while let Some(g) = first_unaccounted(state, m, to) {
        let mut end = g;
        while end + 1 < to && !state.ignored(end + 1) {
            end += 1;
        }
        out.push((g, end));
        m = end + 1;
    }
    out
}

/// What phase 3 produced for one shard.
pub(crate) struct Built {
    pub state: ShardState,
    /// Segments to seal in the background (synced and hinted).
    pub to_seal: Vec<u32>,
    /// Rotated-out segments not known to be synced.
    pub unsynced: Vec<Arc<SegmentFile>>,
}

/// The index and accounting of a shard's settled keys (see [`settle`]).
struct Settled {
    index: Index,
    acct: Acct,
}

/// A shard's accounting: per segment, its bytes, dead and tombstone bytes; the live
/// bytes and keys.
struct Acct {
    segs: BTreeMap<u32, SegMeta>,
    live_bytes: u64,
    live_by_ns: Tally,
    keys_by_ns: Tally,
}

impl Acct {
    /// Accounts the records of one key, `group` (sorted newest first), ignoring those
    /// `seqstate` says to, and returns the location of the winner if it is a put.
    fn account(
        &mut self,
        key: &[u8],
        group: &[Rec],
        seqstate: &crate::manifest::SeqState,
    ) -> Option<Loc> {
        let ns = Tally::ns(key);
        let mut winner = None;
        let mut first = true;
        for r in group {
            // Every record is of a loaded segment.
            let Some(m) = self.segs.get_mut(&r.loc.seg) else {
                continue;
            };
            m.max_seq = m.max_seq.max(r.seq);
            m.bytes.add(ns, r.loc.len as u64);
            if seqstate.ignored(r.seq) {
                m.dead += r.loc.len as u64;
            } else if first {
                first = false;
                match r.kind {
                    Kind::Put => {
                        self.live_bytes += r.loc.len as u64;
                        self.live_by_ns.add(ns, r.loc.len as u64);
                        self.keys_by_ns.add(ns, 1);
                        winner = Some(r.loc);
                    }
                    Kind::Delete => m.tomb += r.loc.len as u64,
                }
            } else {
                m.dead += r.loc.len as u64;
            }
        }
        winner
    }
}

/// Whether two records, whose keys are `ak` and `bk`, are of the same key (their
/// inline prefixes first).
#[inline]
fn same_key_of(a: &Rec, ak: &[u8], b: &Rec, bk: &[u8]) -> bool {
    a.prefix == b.prefix && ak == bk
}

/// Whether two records are of the same key (their keys in `arena`).
fn same_key(a: &Rec, b: &Rec, arena: &[u8]) -> bool {
    same_key_of(a, a.key(arena), b, b.key(arena))
}

/// The end of the group of records of one key that starts at `i` in `recs` (sorted).
fn group_end(recs: &[Rec], arena: &[u8], i: usize) -> usize {
    let mut j = i + 1;
    while j < recs.len() && same_key(&recs[j], &recs[i], arena) {
        j += 1;
    }
    j
}

/// The order open settles records in, of two records whose keys are `ak` and `bk`: by
/// key (inline prefixes first), then newest first (a later segment first among equal
/// numbers, which only a damaged store can hold).
#[inline]
fn order_of(a: &Rec, ak: &[u8], b: &Rec, bk: &[u8]) -> std::cmp::Ordering {
    a.prefix
        .cmp(&b.prefix)
        .then_with(|| ak.cmp(bk))
        .then(b.seq.cmp(&a.seq))
        .then(b.loc.seg.cmp(&a.loc.seg))
}

/// [`order_of`] two records whose keys are in `arena`.
fn rec_order(a: &Rec, b: &Rec, arena: &[u8]) -> std::cmp::Ordering {
    order_of(a, a.key(arena), b, b.key(arena))
}

/// The large buffers a shard's load fills — the records and keys of its segments read
/// without a hint in key order, and the bulk load's — kept by the thread that loads
/// shards for the next one. Fresh ones for every shard were the open's main cost after
/// the index itself: a page fault and the zeroing of a page for every 4 KiB written,
/// and the allocator handing the memory back between shards (a 100-million-file store:
/// 20 of its 55 CPU-seconds to open were the kernel's, nearly all faults).
#[derive(Default)]
pub(crate) struct LoadBuffers {
    recs: Vec<Rec>,
    arena: Vec<u8>,
    /// The index's bulk-load buffers.
    bulk: BulkBuffers,
}

/// An iterator that says it yields at most `n` items: the winners of a shard, so the
/// bulk load reserves room for its hash tags once.
struct AtMost<I>(I, usize);

impl<I: Iterator> Iterator for AtMost<I> {
    type Item = I::Item;
    fn next(&mut self) -> Option<I::Item> {
        self.0.next()
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.1))
    }
}

/// End of phase 1: merges the shard's records into key order, newest first
/// ([`Merge`]), and bulk-loads the index from the winners of every key none of whose
/// records is newer than `seqstate.watermark` (phase 2 only ever ignores records newer
/// than it, so these are final) as the merge yields them, accounting their bytes; keeps
/// only the records of the other keys (with their keys), sorted, for [`build`]. The
/// shard's record buffers go back to `bufs`. `shape`: whether the index keeps its
/// hash side, and its regions of numbered rows.
pub(crate) fn settle(
    l: &mut Loaded,
    seqstate: &crate::manifest::SeqState,
    shape: &crate::index::Shape,
    bufs: &mut LoadBuffers,
) {
    let mut arena = std::mem::take(&mut l.arena);
    let mut recs = std::mem::take(&mut l.recs);
    let segs = l
        .segs
        .iter()
        .map(|(&id, s)| {
            let mut m = SegMeta::new(s.file.clone(), s.size);
            m.hint_size = s.hint_size;
            if s.sealed {
                m.mark_sealed();
            }
            (id, m)
        })
        .collect();
    let mut acct = Acct {
        segs,
        live_bytes: 0,
        live_by_ns: Tally::default(),
        keys_by_ns: Tally::default(),
    };
    let (mut kept, mut kept_arena) = (Vec::new(), Vec::new());
    let hints = std::mem::take(&mut l.hints);
    let n = recs.len() + hints.iter().map(|h| h.count() as usize).sum::<usize>();
    let mut follow = l.follow.take();
    let mut merge = Merge::new(&mut recs, &arena, &hints);
    let mut group: Vec<Rec> = Vec::new();
    // The winners go straight into the bulk load: no list of them is made.
    let winners = std::iter::from_fn(|| loop {
        let first: Item = merge.next()?;
        let key = first.key;
        group.clear();
        group.push(first.rec);
        while let Some(r) = merge.next_if(|r| r.same_key(&first)) {
            group.push(r.rec);
        }
        // Newest first: the group has a record newer than the watermark iff its first.
        if first.rec.seq > seqstate.watermark {
            let key_off = kept_arena.len();
            kept_arena.extend_from_slice(key);
            kept.extend(group.iter().map(|r| Rec { key_off, ..*r }));
        } else {
            let won = acct.account(key, &group, seqstate);
            if let Some(f) = follow.as_mut() {
                f.note(key, &group, won, seqstate);
            }
            if let Some(loc) = won {
                return Some((key, loc));
            }
        }
    });
    let index = Index::from_sorted_in(AtMost(winners, n), shape, &mut bufs.bulk);
    // The hints' maps go; the kept records hold copies of their keys.
    drop(hints);
    recs.clear();
    arena.clear();
    (bufs.recs, bufs.arena) = (recs, arena);
    l.recs = kept;
    l.arena = kept_arena;
    l.follow = follow;
    l.settled = Some(Settled { index, acct });
}

/// Phase 3: builds the shard's in-memory state from what [`settle`] made of it in phase
/// 1: the winners of the keys it left (ignoring records of aborted batches and of void
/// ranges) go into its index. `new_active` creates a fresh active segment when the
/// newest data segment is sealed.
pub(crate) fn build(
    mut l: Loaded,
    seqstate: &crate::manifest::SeqState,
    segment_size: u64,
    new_active: impl FnOnce(u32) -> Result<SegmentFile>,
) -> Result<Built> {
    // Phase 1 settles every shard before phase 3 builds it.
    let Some(mut st) = l.settled.take() else {
        return Err(Error::corruption(
            &l.dir,
            "shard built before it was settled",
        ));
    };
    let (arena, recs) = (std::mem::take(&mut l.arena), std::mem::take(&mut l.recs));
    let mut i = 0;
    while i < recs.len() {
        let end = group_end(&recs, &arena, i);
        let key = recs[i].key(&arena);
        if let Some(loc) = st.acct.account(key, &recs[i..end], seqstate) {
            st.index.insert(key, loc);
        }
        i = end;
    }
    drop((arena, recs));
    let Settled {
        index,
        acct:
            Acct {
                mut segs,
                live_bytes,
                live_by_ns,
                keys_by_ns,
            },
    } = st;
    // Whatever superseded a record at open is numbered at most the shard's highest.
    for m in segs.values_mut() {
        if m.dead > 0 {
            m.superseded_seq = l.max_seq;
        }
    }
    // The newest data segment keeps taking appends unless it is full. A clean close
    // leaves a hint for it (so this open did not read its data). The hint stays while
    // the file is as it describes: the shard removes it, durably, before the first
    // write that changes the file (`ShardState::kept_hint`), so that an open that only
    // reads costs no directory sync and its close no new hint.
    let newest_data = segs
        .iter_mut()
        .rev()
        .find(|(_, m)| m.file.kind == SegKind::Data)
        .filter(|(_, m)| !m.is_sealed() || m.size < segment_size);
    let mut next_seg = l.next_seg;
    let mut kept_hint = None;
    let active = match newest_data {
        Some((&id, m)) => {
            if m.is_sealed() {
                m.reopen();
                kept_hint = Some(id);
            }
            Active::new(m.file.clone(), m.size, segment_size)
        }
        None => {
            let f = Arc::new(new_active(next_seg)?);
            next_seg += 1;
            segs.insert(f.id, SegMeta::new(f.clone(), SEG_HEADER_LEN));
            Active::new(f, SEG_HEADER_LEN, segment_size)
        }
    };
    for (id, m) in &segs {
        if m.is_sealed() && *id != active.id {
            m.file.map_sealed(m.size);
        }
    }
    let to_seal: Vec<u32> = segs
        .iter()
        .filter(|(&id, m)| !m.is_sealed() && id != active.id)
        .map(|(&id, _)| id)
        .collect();
    let unsynced = to_seal.iter().map(|id| segs[id].file.clone()).collect();
    Ok(Built {
        state: ShardState {
            index,
            segs,
            active,
            pending: None,
            next_seg,
            live_bytes,
            live_by_ns,
            keys_by_ns,
            failed: None,
            write_stuck: false,
            seqs: ShardSeqs::recovered(l.max_seq),
            kept_hint,
            versions: Default::default(),
        },
        to_seal,
        unsynced,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::SeqState;

    fn singles(seqs: &[u64]) -> Vec<(u64, u32)> {
        seqs.iter().map(|&s| (s, 1)).collect()
    }

    fn state(watermark: u64) -> SeqState {
        SeqState {
            watermark,
            ..SeqState::default()
        }
    }

    /// Records of `segs` segments (each a run in `recs`, in segment order) over keys
    /// of 1..=40 bytes drawn from a small set, so keys repeat across segments and share
    /// their first 24 bytes; `sorted` segments are in `rec_order`, the others not.
    fn runs(seed: u64, segs: u32, per_seg: usize, sorted: bool) -> (Vec<Rec>, Vec<u8>) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (mut recs, mut arena) = (Vec::new(), Vec::new());
        let mut seq = 0;
        for seg in 1..=segs {
            let start = recs.len();
            for _ in 0..rng.random_range(0..=per_seg) {
                let mut key = vec![b'k'; rng.random_range(1..=40)];
                let i = key.len() - 1;
                key[i] = rng.random_range(b'a'..=b'd');
                seq += 1;
                recs.push(Rec {
                    prefix: segment::key_prefix(&key),
                    key_off: arena.len(),
                    key_len: key.len() as u32,
                    kind: if rng.random_bool(0.8) {
                        Kind::Put
                    } else {
                        Kind::Delete
                    },
                    batch_total: 1,
                    seq,
                    loc: Loc {
                        seg,
                        off: seq as u32,
                        len: 1,
                    },
                });
                arena.extend_from_slice(&key);
            }
            if sorted || rng.random_bool(0.5) {
                recs[start..].sort_by(|a, b| rec_order(a, b, &arena));
            }
        }
        (recs, arena)
    }

    /// Turns some of `recs`' segments into hint files in `dir` (every third one, from
    /// `first`), taking their records out of `recs`; returns the hints.
    fn some_as_hints(recs: &mut Vec<Rec>, arena: &[u8], dir: &Path, first: u32) -> Vec<Hint> {
        let fs = Fs::default();
        let segs: std::collections::BTreeSet<u32> = recs.iter().map(|r| r.loc.seg).collect();
        let mut hints = Vec::new();
        for seg in segs.into_iter().filter(|s| s % 3 == first % 3) {
            let entries: Vec<segment::Entry> = recs
                .iter()
                .filter(|r| r.loc.seg == seg)
                .map(|r| segment::Entry {
                    kind: r.kind,
                    seq: r.seq,
                    batch_total: r.batch_total,
                    off: r.loc.off,
                    len: r.loc.len,
                    key: r.key(arena).to_vec(),
                })
                .collect();
            segment::write_hint(&fs, dir, seg, 1 << 20, &entries).unwrap();
            let hint = Hint::open(&segment::hint_path(dir, seg), seg).unwrap();
            assert!(hint.in_order());
            hints.push(hint);
            recs.retain(|r| r.loc.seg != seg);
        }
        hints
    }

    #[test]
    fn merging_the_segments_runs_orders_like_a_sort() {
        for seed in 0..200 {
            let (segs, per_seg) = (1 + seed as u32 % 17, [0, 1, 5, 60][seed as usize % 4]);
            let (mut recs, arena) = runs(seed, segs, per_seg, seed % 3 == 0);
            let mut sorted = recs.clone();
            sorted.sort_by(|a, b| rec_order(a, b, &arena));
            let want: Vec<(u32, u32)> = sorted.iter().map(|r| (r.loc.seg, r.loc.off)).collect();
            // Every third segment (from an offset the seed picks) comes as a hint read
            // from its map, the rest from the record buffer; one seed in four, none.
            let dir = tempfile::tempdir().unwrap();
            let hints = match seed % 4 {
                0 => Vec::new(),
                k => some_as_hints(&mut recs, &arena, dir.path(), k as u32),
            };
            let got: Vec<(u32, u32)> = Merge::new(&mut recs, &arena, &hints)
                .map(|r| (r.rec.loc.seg, r.rec.loc.off))
                .collect();
            assert_eq!(got, want, "seed {seed}: {segs} segments of up to {per_seg}");
            // Taken key by key, as settle takes them: the same groups as the sort's.
            let mut want_groups = Vec::new();
            let mut i = 0;
            while i < sorted.len() {
                let j = group_end(&sorted, &arena, i);
                want_groups.push(j - i);
                i = j;
            }
            let mut merge = Merge::new(&mut recs, &arena, &hints);
            let mut groups = Vec::new();
            while let Some(first) = merge.next() {
                let mut n = 1;
                while merge.next_if(|r| r.same_key(&first)).is_some() {
                    n += 1;
                }
                groups.push(n);
            }
            assert_eq!(groups, want_groups, "seed {seed}");
            assert!(merge.next().is_none() && merge.next_if(|_| true).is_none());
        }
    }

    #[test]
    fn contiguous_writes_are_kept() {
        let c = find_cut(singles(&[13, 11, 12, 14]), &state(10), 14, false);
        assert_eq!(c, Cut::default());
    }

    #[test]
    fn a_missing_write_cuts_off_every_later_one() {
        let c = find_cut(singles(&[11, 12, 14, 15]), &state(10), 15, false);
        assert_eq!(c.void, vec![(13, 15)]);
        assert!(c.aborted.is_empty());
        // The first write after the watermark may be the lost one.
        let c = find_cut(singles(&[12]), &state(10), 12, false);
        assert_eq!(c.void, vec![(11, 12)]);
    }

    #[test]
    fn a_torn_batch_cuts_itself_and_every_later_write() {
        let seqs = vec![(11, 1), (12, 3), (12, 3), (13, 1)];
        let c = find_cut(seqs, &state(10), 13, false);
        assert_eq!(c.void, vec![(12, 13)]);
        let whole = vec![(11, 1), (12, 2), (12, 2), (13, 1)];
        assert_eq!(find_cut(whole, &state(10), 13, false), Cut::default());
    }

    #[test]
    fn earlier_cuts_and_aborts_account_for_missing_numbers() {
        let mut st = state(10);
        st.add_void(13, 20);
        st.aborted.push(22);
        // 13..=20 were cut off earlier and may still be on disk; 22 was aborted.
        let c = find_cut(singles(&[11, 12, 15, 21, 23, 24]), &st, 24, false);
        assert_eq!(c, Cut::default());
        let c = find_cut(singles(&[11, 12, 21, 24]), &st, 24, false);
        assert_eq!(c.void, vec![(23, 24)]);
    }

    #[test]
    fn damage_keeps_every_intact_write_and_records_the_holes() {
        let seqs = vec![(11, 1), (14, 1), (15, 2), (17, 1)];
        let c = find_cut(seqs, &state(10), 17, true);
        assert_eq!(c.void, vec![(12, 13), (16, 16)]);
        assert_eq!(c.aborted, vec![15]);
    }

    #[test]
    fn seqstate_void_ranges() {
        let mut st = state(5);
        st.add_void(30, 40);
        st.add_void(10, 12);
        assert_eq!(st.void, vec![(10, 12), (30, 40)]);
        assert!(st.ignored(10) && st.ignored(12) && st.ignored(35));
        assert!(!st.ignored(13) && !st.ignored(29) && !st.ignored(41));
        assert_eq!(st.max_seq(), 40);
    }
}
