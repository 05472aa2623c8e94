//! A fresh load of a read-only view (at open, and when the view is rebuilt): the
//! writer's recovery loading (`recovery::view`), in a mode that writes nothing. Every
//! shard is read in parallel — a segment from its hint file when one describes the whole
//! file (a sorted run merged straight from its map), else by a scan that stops at the
//! first record that is not whole and intact — merged, and its index bulk-built from
//! the keys none of whose records is above the watermark; then the records above it
//! are cut at the visible prefix (the crash cut's rule, as a catch-up cuts them), the
//! visible ones go into the index and the rest are held back. The view's per-segment
//! bookkeeping is made from what was loaded, so that catch-ups go on from there.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use super::gather;
use super::{apply, Recs, Seg, ShardView, Step, View};
use crate::index::Shape;
use crate::manifest::{self, SeqState};
use crate::open::{par_map, par_map_with, shard_dir};
use crate::recovery::view::{self as rview, ViewShard};
use crate::recovery::{settle, LoadBuffers, Loaded};
use crate::segment::{self, Hint, SegmentFile, SEG_HEADER_LEN};
use crate::seq::ShardSeqs;
use crate::shard::{Active, ShardState};
use crate::Result;

/// One attempt of a fresh load of the `nshards` shards of the store in `dir`.
pub(super) fn fresh(dir: &Path, nshards: u32, shape: &Shape) -> Step<(View, Vec<ShardState>)> {
    // Read before the listings: every record numbered up to its watermark was in the
    // files before it was written (see `super::attempt`).
    let seqstate = manifest::read_seqstate(dir)?;
    let loaded = par_map_with((0..nshards).collect(), |bufs: &mut LoadBuffers, i| {
        Ok(load_shard(dir, i, &seqstate, shape, bufs))
    })?;
    let loaded = loaded.into_iter().collect::<Step<Vec<Loaded>>>()?;
    let mut counts = HashMap::new();
    for l in &loaded {
        l.view_counts(&mut counts);
    }
    let visible = apply::extend_visible(seqstate.watermark, &seqstate, &counts);
    drop(counts);
    let built = par_map(loaded, |l| {
        let sdir = l.dir.clone();
        let mut pending = Recs::default();
        let vs = rview::build(l, &seqstate, visible, |h| {
            pending.push(h.kind, h.seq, h.batch_total, h.loc, h.key, h.copy)
        })?;
        shard_of(&sdir, vs, pending)
    })?;
    let mut shards = Vec::with_capacity(built.len());
    let mut states = Vec::with_capacity(built.len());
    for (sv, st) in built {
        shards.push(sv);
        states.push(st);
    }
    let view = View {
        visible,
        seqstate,
        shards,
        // The load is the first round: the deletes it applied are remembered until the
        // next one looks at the compaction outputs (`apply::prune_tombs`).
        round: 1,
    };
    Ok((view, states))
}

/// Reads shard `i` and settles it (merged, its settled keys' index bulk-built).
fn load_shard(
    dir: &Path,
    i: u32,
    seqstate: &SeqState,
    shape: &Shape,
    bufs: &mut LoadBuffers,
) -> Step<Loaded> {
    let sdir = shard_dir(dir, i);
    let listing = gather::list(&sdir)?;
    let mut l = Loaded::for_view(i, &sdir, bufs);
    for (&id, &ino) in &listing.segs {
        let Some(file) = gather::open_new(&sdir, i, id, ino)? else {
            continue;
        };
        let len = file
            .file
            .metadata()
            .map_err(|e| crate::Error::io(&file.path, e))?
            .len();
        if listing.hints.contains(&id) {
            // A hint that is gone or does not describe the file: the segment is scanned.
            let hint = Hint::open(&segment::hint_path(&sdir, id), id).ok();
            if let Some(h) = hint.filter(|h| h.data_len() == len && h.within(len)) {
                l.view_hinted(file, ino, len, h);
                continue;
            }
        }
        let (end, last) = gather::scan_from(&file, SEG_HEADER_LEN, len, |k, seq, t, loc, key| {
            l.view_rec(k, seq, t, loc, key)
        })?;
        l.view_scanned(file, ino, end, last);
    }
    settle(&mut l, seqstate, shape, bufs);
    Ok(l)
}

/// The view's knowledge of a loaded shard (directory `dir`), and its state.
fn shard_of(dir: &Path, vs: ViewShard, pending: Recs) -> Result<(ShardView, ShardState)> {
    let ViewShard {
        index,
        segs: metas,
        live_bytes,
        live_by_ns,
        keys_by_ns,
        follow,
    } = vs;
    let mut held: HashMap<u32, u64> = HashMap::new();
    for r in &pending.recs {
        *held.entry(r.loc.seg).or_default() += 1;
    }
    let mut segs = BTreeMap::new();
    for (id, f) in follow.segs {
        let Some(m) = metas.get(&id) else { continue };
        let seg = Seg {
            file: m.file.clone(),
            ino: f.ino,
            end: m.size,
            last: f.last,
            hinted: f.hinted,
            live: f.live,
            held: held.get(&id).copied().unwrap_or(0),
            gone: false,
        };
        segs.insert(id, seg);
    }
    let tombs = follow
        .tombs
        .into_iter()
        .map(|(k, seq)| (k, (seq, 1)))
        .collect();
    let stand_in = Arc::new(SegmentFile::read_only_stand_in(dir)?);
    let st = ShardState {
        index,
        segs: metas,
        active: Active {
            id: stand_in.id,
            file: stand_in,
            buf_start: SEG_HEADER_LEN,
            buf: Vec::new(),
        },
        pending: None,
        next_seg: 0,
        live_bytes,
        live_by_ns,
        keys_by_ns,
        failed: None,
        write_stuck: false,
        seqs: ShardSeqs::recovered(0),
        kept_hint: None,
        versions: Default::default(),
    };
    let sv = ShardView {
        segs,
        pending,
        tombs,
    };
    Ok((sv, st))
}
