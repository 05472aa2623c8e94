//! The merge of a shard's segment runs at open.

use super::{rec_order, Rec};

/// The records of a shard in [`rec_order`], as a merge of its segments' runs.
///
/// Each segment's records are contiguous in `recs` (loaded segment by segment), and a
/// sealed segment's hint lists them in key order; a run found out of order (a segment
/// scanned without a hint, an older hint) is sorted in place first. The runs are then
/// merged through a tree of losers (a tournament: each inner node keeps the run that
/// lost the match played there, the root's winner is next): each record is read once,
/// in order, and never moved, where a sort of the whole shard moved every 64-byte record
/// once per level of merging, through scratch memory of half the shard's records. A
/// record taken costs one comparison per level of the tree, ⌈log₂ runs⌉, where a binary
/// heap of the runs' heads spent two per level on its way down.
pub(super) struct Merge<'a> {
    recs: &'a [Rec],
    arena: &'a [u8],
    /// Per run: (next record, end).
    cursors: Vec<(usize, usize)>,
    /// `losers[0]`: the run whose next record comes first; `losers[1..runs]`: the loser
    /// of the match at each inner node. Node `n`'s children are `2n` and `2n + 1`; run
    /// `r` is the leaf `runs + r`.
    losers: Vec<u32>,
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
            losers: vec![0; cursors.len()],
            cursors,
        };
        if !m.losers.is_empty() {
            m.losers[0] = m.play(1);
        }
        m
    }

    /// Plays the matches of the subtree under `node`, keeping their losers; returns its
    /// winner.
    fn play(&mut self, node: usize) -> u32 {
        let runs = self.cursors.len();
        if node >= runs {
            return (node - runs) as u32;
        }
        let (a, b) = (self.play(2 * node), self.play(2 * node + 1));
        let (winner, loser) = if self.before(b, a) { (b, a) } else { (a, b) };
        self.losers[node] = loser;
        winner
    }

    /// Whether run `a`'s next record comes before run `b`'s; an exhausted run comes
    /// after every other.
    fn before(&self, a: u32, b: u32) -> bool {
        let (x, y) = (self.cursors[a as usize], self.cursors[b as usize]);
        match (x.0 < x.1, y.0 < y.1) {
            (true, true) => rec_order(&self.recs[x.0], &self.recs[y.0], self.arena).is_lt(),
            (a_left, _) => a_left,
        }
    }

    /// The next record in order if `pred` accepts it.
    pub(super) fn next_if(&mut self, pred: impl FnOnce(&Rec) -> bool) -> Option<&'a Rec> {
        let &run = self.losers.first()?;
        let (next, end) = self.cursors[run as usize];
        if next < end && pred(&self.recs[next]) {
            self.next()
        } else {
            None
        }
    }
}

impl<'a> Iterator for Merge<'a> {
    type Item = &'a Rec;

    fn next(&mut self) -> Option<&'a Rec> {
        let &run = self.losers.first()?;
        let c = &mut self.cursors[run as usize];
        if c.0 == c.1 {
            return None;
        }
        let rec = &self.recs[c.0];
        c.0 += 1;
        // The winner's run has a new head: replay its matches from its leaf up.
        let mut winner = run;
        let mut node = (self.cursors.len() + run as usize) / 2;
        while node > 0 {
            let loser = self.losers[node];
            if self.before(loser, winner) {
                self.losers[node] = winner;
                winner = loser;
            }
            node /= 2;
        }
        self.losers[0] = winner;
        Some(rec)
    }
}
