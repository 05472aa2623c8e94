//! The merge of a shard's segment runs at open.

use super::{rec_order, Rec};

/// The records of a shard in [`rec_order`], as a merge of its segments' runs.
///
/// Each segment's records are contiguous in `recs` (loaded segment by segment), and a
/// sealed segment's hint lists them in key order; a run found out of order (a segment
/// scanned without a hint, an older hint) is sorted in place first. The runs are then
/// merged through a binary heap of their heads: each record is read once, in order,
/// and never moved, where a sort of the whole shard moved every 64-byte record once per
/// level of merging, through scratch memory of half the shard's records.
pub(super) struct Merge<'a> {
    recs: &'a [Rec],
    arena: &'a [u8],
    /// Per run: (next record, end).
    cursors: Vec<(usize, usize)>,
    /// Runs not exhausted, a min-heap on their next records.
    heap: Vec<u32>,
}

impl<'a> Merge<'a> {
    pub(super) fn new(recs: &'a mut [Rec], arena: &'a [u8]) -> Merge<'a> {
        let mut cursors = Vec::new();
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
            cursors.push((start, end));
            start = end;
        }
        let mut m = Merge {
            recs,
            arena,
            heap: (0..cursors.len() as u32).collect(),
            cursors,
        };
        for i in (0..m.heap.len() / 2).rev() {
            m.sift_down(i);
        }
        m
    }

    /// Whether run `a`'s next record comes before run `b`'s.
    fn before(&self, a: u32, b: u32) -> bool {
        let (x, y) = (self.cursors[a as usize].0, self.cursors[b as usize].0);
        rec_order(&self.recs[x], &self.recs[y], self.arena).is_lt()
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
    pub(super) fn next_if(&mut self, pred: impl FnOnce(&Rec) -> bool) -> Option<&'a Rec> {
        let &run = self.heap.first()?;
        if pred(&self.recs[self.cursors[run as usize].0]) {
            self.next()
        } else {
            None
        }
    }
}

impl<'a> Iterator for Merge<'a> {
    type Item = &'a Rec;

    fn next(&mut self) -> Option<&'a Rec> {
        let &run = self.heap.first()?;
        let c = &mut self.cursors[run as usize];
        let rec = &self.recs[c.0];
        c.0 += 1;
        if c.0 == c.1 {
            let last = self.heap.pop().expect("the heap holds this run");
            if self.heap.is_empty() {
                return Some(rec);
            }
            self.heap[0] = last;
        }
        self.sift_down(0);
        Some(rec)
    }
}
