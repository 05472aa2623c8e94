//! The merge of a shard's segment runs at open, and how a hinted segment joins them.

use std::sync::Arc;

use super::{order_of, rec_order, same_key_of, Loaded, LoadedSeg, Rec};
use crate::index::Loc;
use crate::segment::{self, Hint, HintEntries, SegmentFile};

/// A record as the merge yields it: its metadata, and its key, borrowed from the hint
/// map or the arena it was read from (`rec.key_off` is meaningful only for the latter).
#[derive(Clone, Copy)]
pub(super) struct Item<'a> {
    pub rec: Rec,
    pub key: &'a [u8],
}

impl Item<'_> {
    /// Whether two items are of the same key (their inline prefixes first).
    pub(super) fn same_key(&self, other: &Item<'_>) -> bool {
        same_key_of(&self.rec, self.key, &other.rec, other.key)
    }
}

/// [`order_of`] on items: the order [`rec_order`] sorts a buffer's runs in.
fn item_order(a: &Item<'_>, b: &Item<'_>) -> std::cmp::Ordering {
    order_of(&a.rec, a.key, &b.rec, b.key)
}

/// Where a run's records come from.
enum Source<'a> {
    /// Records read into the shard's record buffer (segments scanned, or hints written
    /// out of key order by an older version), sorted in place.
    Recs(std::slice::Iter<'a, Rec>),
    /// A hint in key order, walked straight from its map: the records are never copied.
    Hint(HintEntries<'a>, u32),
}

struct Run<'a> {
    /// The run's next record, not yet yielded.
    head: Item<'a>,
    source: Source<'a>,
}

/// The next record of `source` (keys of records in `recs` are in `arena`).
fn pull<'a>(source: &mut Source<'a>, arena: &'a [u8]) -> Option<Item<'a>> {
    match source {
        Source::Recs(it) => it.next().map(|r| Item {
            rec: *r,
            key: r.key(arena),
        }),
        Source::Hint(it, seg) => it.next().map(|e| Item {
            rec: Rec {
                prefix: segment::key_prefix(e.key),
                key_off: 0,
                key_len: e.key.len() as u32,
                kind: e.kind,
                batch_total: e.batch_total,
                seq: e.seq,
                loc: Loc {
                    seg: *seg,
                    off: e.off,
                    len: e.len,
                },
            },
            key: e.key,
        }),
    }
}

/// The records of a shard in [`rec_order`], as a merge of its segments' runs.
///
/// A sealed segment's hint lists its records in key order: such a hint is one run,
/// read from its map as the merge goes. The other segments' records are contiguous in
/// `recs` (loaded segment by segment); each segment's is a run, sorted in place first
/// if out of order. The runs are merged through a binary heap of their heads, each
/// record read once, in order: nothing is copied into a shard-wide buffer, and nothing
/// sorted but what came without a sorted hint.
pub(super) struct Merge<'a> {
    arena: &'a [u8],
    runs: Vec<Run<'a>>,
    /// Runs not exhausted, a min-heap on their heads.
    heap: Vec<u32>,
}

impl<'a> Merge<'a> {
    /// The merge of `recs` (keys in `arena`) and of `hints` (each in key order).
    pub(super) fn new(recs: &'a mut [Rec], arena: &'a [u8], hints: &'a [Hint]) -> Merge<'a> {
        let mut bounds = Vec::new();
        let mut start = 0;
        while start < recs.len() {
            let seg = recs[start].loc.seg;
            let mut end = start + 1;
            let mut sorted = true;
            while end < recs.len() && recs[end].loc.seg == seg {
                sorted &= rec_order(&recs[end - 1], &recs[end], arena).is_lt();
                end += 1;
            }
            if !sorted {
                recs[start..end].sort_unstable_by(|a, b| rec_order(a, b, arena));
            }
            bounds.push((start, end));
            start = end;
        }
        let recs: &'a [Rec] = recs;
        let sources = bounds
            .into_iter()
            .map(|(s, e)| Source::Recs(recs[s..e].iter()))
            .chain(hints.iter().map(|h| Source::Hint(h.entries(), h.id())));
        let mut runs = Vec::new();
        for mut source in sources {
            if let Some(head) = pull(&mut source, arena) {
                runs.push(Run { head, source });
            }
        }
        let mut m = Merge {
            arena,
            heap: (0..runs.len() as u32).collect(),
            runs,
        };
        for i in (0..m.heap.len() / 2).rev() {
            m.sift_down(i);
        }
        m
    }

    /// Whether run `a`'s next record comes before run `b`'s.
    fn before(&self, a: u32, b: u32) -> bool {
        item_order(&self.runs[a as usize].head, &self.runs[b as usize].head).is_lt()
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut least = i;
            if l < n && self.before(self.heap[l], self.heap[least]) {
                least = l;
            }
            if r < n && self.before(self.heap[r], self.heap[least]) {
                least = r;
            }
            if least == i {
                return;
            }
            self.heap.swap(i, least);
            i = least;
        }
    }

    /// The next record in order if `pred` accepts it.
    pub(super) fn next_if(&mut self, pred: impl FnOnce(&Item<'a>) -> bool) -> Option<Item<'a>> {
        let &run = self.heap.first()?;
        if pred(&self.runs[run as usize].head) {
            self.next()
        } else {
            None
        }
    }
}

impl<'a> Iterator for Merge<'a> {
    type Item = Item<'a>;

    fn next(&mut self) -> Option<Item<'a>> {
        let &run = self.heap.first()?;
        let arena = self.arena;
        let r = &mut self.runs[run as usize];
        let item = r.head;
        if let Some(head) = pull(&mut r.source, arena) {
            r.head = head;
        } else {
            // The heap holds this run.
            match self.heap.pop() {
                Some(last) if !self.heap.is_empty() => self.heap[0] = last,
                _ => return Some(item),
            }
        }
        self.sift_down(0);
        Some(item)
    }
}

impl Loaded {
    /// A load of shard `shard` (directory `dir`) with no segment yet, into `bufs`'
    /// buffers; new segments get ids from `next_seg`; `follow` for a read-only view.
    pub(crate) fn empty(
        shard: u32,
        dir: &std::path::Path,
        bufs: &mut super::LoadBuffers,
        next_seg: u32,
        follow: Option<super::view::Follow>,
    ) -> Loaded {
        Loaded {
            shard,
            dir: dir.to_owned(),
            segs: std::collections::BTreeMap::new(),
            arena: std::mem::take(&mut bufs.arena),
            recs: std::mem::take(&mut bufs.recs),
            hints: Vec::new(),
            settled: None,
            damage: Vec::new(),
            max_seq: 0,
            lost_records: false,
            next_seg,
            follow,
        }
    }

    /// Takes the sealed segment `file` (`len` bytes) as its checked `hint` describes it:
    /// a hint in key order joins the runs merged later; an older version's, in file
    /// order, has its records sorted with the scanned ones.
    pub(crate) fn add_hinted(&mut self, file: Arc<SegmentFile>, len: u64, hint: Hint) {
        let id = file.id;
        self.max_seq = self.max_seq.max(hint.max_seq());
        self.segs.insert(
            id,
            LoadedSeg {
                file,
                size: len,
                hint_size: hint.size(),
                sealed: true,
            },
        );
        if hint.in_order() {
            self.hints.push(hint);
            return;
        }
        for e in hint.entries() {
            let loc = Loc {
                seg: id,
                off: e.off,
                len: e.len,
            };
            self.push_rec(e.kind, e.seq, e.batch_total, loc, e.key);
        }
    }
}
