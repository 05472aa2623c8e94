//! Recovery's loading for a read-only view (`crate::readonly`): the shard's segments
//! are read by the view (nothing is written, removed or cut back, segment files are
//! opened for reading only and never mapped), then [`settle`](super::settle) merges
//! them and bulk-loads the index as a writer's open does, and [`build`] cuts the kept
//! records at the view's visible prefix, holding back those past it. What the view
//! needs to follow the writer afterwards — per segment its inode, last record read and
//! hint, the index entries into it, and the keys whose newest record is a delete — is
//! noted on the way ([`Follow`]).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use super::{group_end, Acct, LoadBuffers, Loaded, LoadedSeg, Rec, Settled};
use crate::index::{Index, Loc};
use crate::manifest::SeqState;
use crate::record::Kind;
use crate::segment::{Hint, SegKind, SegmentFile};
use crate::shard::SegMeta;
use crate::tally::Tally;
use crate::Result;

/// What the view knows of a segment beyond its [`SegMeta`].
pub(crate) struct FollowSeg {
    /// The file's inode number, as the directory listing gave it.
    pub ino: u64,
    /// Offset and number of the last record read (the highest offset).
    pub last: Option<(u64, u64)>,
    /// Its hint file listed every record.
    pub hinted: bool,
    /// Index entries that point into it.
    pub live: u64,
}

/// What a read-only view keeps of a shard's load beyond a writer's.
#[derive(Default)]
pub(crate) struct Follow {
    pub segs: BTreeMap<u32, FollowSeg>,
    /// Keys whose newest visible record is a delete, and its number.
    pub tombs: Vec<(Box<[u8]>, u64)>,
}

impl Follow {
    /// Notes the outcome of one key's records, `group` (newest first): the index entry
    /// `won`, or the delete that won.
    pub(super) fn note(&mut self, key: &[u8], group: &[Rec], won: Option<Loc>, ss: &SeqState) {
        match won {
            Some(loc) => {
                if let Some(s) = self.segs.get_mut(&loc.seg) {
                    s.live += 1;
                }
            }
            None => {
                if let Some(r) = group.iter().find(|r| !ss.ignored(r.seq)) {
                    if r.kind == Kind::Delete {
                        self.tombs.push((key.into(), r.seq));
                    }
                }
            }
        }
    }
}

impl Loaded {
    /// An empty load of shard `shard` (directory `dir`) for a read-only view, into
    /// `bufs`' buffers; the view adds its segments.
    pub(crate) fn for_view(shard: u32, dir: &Path, bufs: &mut LoadBuffers) -> Loaded {
        Loaded::empty(shard, dir, bufs, 0, Some(Follow::default()))
    }

    /// Adds segment `id` (inode `ino`, `len` bytes), which `hint` describes whole.
    pub(crate) fn view_hinted(&mut self, file: Arc<SegmentFile>, ino: u64, len: u64, hint: Hint) {
        self.note_seg(file.id, ino, hint.last(), true);
        self.add_hinted(file, len, hint);
    }

    /// Adds segment `id` (inode `ino`), whose records up to `end` were scanned (with
    /// [`Loaded::view_rec`]); `last` is the last of them.
    pub(crate) fn view_scanned(
        &mut self,
        file: Arc<SegmentFile>,
        ino: u64,
        end: u64,
        last: Option<(u64, u64)>,
    ) {
        let id = file.id;
        self.note_seg(id, ino, last, false);
        self.segs.insert(
            id,
            LoadedSeg {
                file,
                size: end,
                hint_size: 0,
                sealed: false,
            },
        );
    }

    /// Adds a record scanned from a segment.
    pub(crate) fn view_rec(
        &mut self,
        kind: Kind,
        seq: u64,
        batch_total: u32,
        loc: Loc,
        key: &[u8],
    ) {
        self.push_rec(kind, seq, batch_total, loc, key);
    }

    fn note_seg(&mut self, id: u32, ino: u64, last: Option<(u64, u64)>, hinted: bool) {
        if let Some(f) = self.follow.as_mut() {
            let live = 0;
            f.segs.insert(
                id,
                FollowSeg {
                    ino,
                    last,
                    hinted,
                    live,
                },
            );
        }
    }

    /// Whether the record is a copy a compaction made: it does not count towards its
    /// batch (its original may be read too).
    fn is_copy(&self, r: &Rec) -> bool {
        self.segs
            .get(&r.loc.seg)
            .is_some_and(|s| s.file.kind == SegKind::Compacted)
    }

    /// After [`settle`](super::settle): counts, per number above the watermark, the
    /// records read (copies left out) and their batch's size, into `counts`.
    pub(crate) fn view_counts(&self, counts: &mut HashMap<u64, (u32, u32)>) {
        for r in &self.recs {
            if !self.is_copy(r) {
                counts.entry(r.seq).or_insert((0, r.batch_total)).0 += 1;
            }
        }
    }
}

/// A record held back past the view's visible prefix.
pub(crate) struct Held<'a> {
    pub kind: Kind,
    pub seq: u64,
    pub batch_total: u32,
    pub loc: Loc,
    pub key: &'a [u8],
    pub copy: bool,
}

/// A shard of a read-only view, loaded.
pub(crate) struct ViewShard {
    pub index: Index,
    pub segs: BTreeMap<u32, SegMeta>,
    pub live_bytes: u64,
    pub live_by_ns: Tally,
    pub keys_by_ns: Tally,
    pub follow: Follow,
}

/// The end of a read-only load of a settled shard: the kept records (those of keys
/// with a record above the watermark) numbered up to `visible` go into the index, the
/// later ones (not ignored) are handed to `hold`, their bytes accounted to their
/// segments.
pub(crate) fn build(
    mut l: Loaded,
    seqstate: &SeqState,
    visible: u64,
    mut hold: impl FnMut(Held<'_>),
) -> Result<ViewShard> {
    let Some(Settled {
        mut index,
        mut acct,
    }) = l.settled.take()
    else {
        return Err(crate::Error::corruption(
            &l.dir,
            "shard built before it was settled",
        ));
    };
    let mut follow = l.follow.take().unwrap_or_default();
    let (arena, recs) = (std::mem::take(&mut l.arena), std::mem::take(&mut l.recs));
    let mut i = 0;
    while i < recs.len() {
        let end = group_end(&recs, &arena, i);
        let key = recs[i].key(&arena);
        // Newest first: the held-back records lead the group.
        let mut vis = i;
        while vis < end && recs[vis].seq > visible {
            let r = &recs[vis];
            if !seqstate.ignored(r.seq) {
                held_bytes(&mut acct, key, r);
                let copy = l.is_copy(r);
                hold(Held {
                    kind: r.kind,
                    seq: r.seq,
                    batch_total: r.batch_total,
                    loc: r.loc,
                    key,
                    copy,
                });
            }
            vis += 1;
        }
        let group = &recs[vis..end];
        let won = acct.account(key, group, seqstate);
        follow.note(key, group, won, seqstate);
        if let Some(loc) = won {
            index.insert(key, loc);
        }
        i = end;
    }
    let Acct {
        segs,
        live_bytes,
        live_by_ns,
        keys_by_ns,
    } = acct;
    Ok(ViewShard {
        index,
        segs,
        live_bytes,
        live_by_ns,
        keys_by_ns,
        follow,
    })
}

/// Accounts a held-back record's bytes to its segment, as a catch-up does for every
/// record it reads.
fn held_bytes(acct: &mut Acct, key: &[u8], r: &Rec) {
    if let Some(m) = acct.segs.get_mut(&r.loc.seg) {
        m.bytes.add(Tally::ns(key), r.loc.len as u64);
        m.max_seq = m.max_seq.max(r.seq);
    }
}
