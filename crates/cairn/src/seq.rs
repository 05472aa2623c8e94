//! The write order and its durability: the number each write takes, and what is known
//! of the records numbered so far. DESIGN.md ("The write order") draws the same.
//!
//! Every write (a put, a delete, a batch) takes one sequence number
//! ([`SeqTracker::assign`]) while it holds the write lock of every shard it appends to,
//! and the commit log's lock if it is logged; it appends its records (all numbered
//! alike) before it lets them go. So a shard's records are appended in the order of
//! their numbers, and the commit log holds logged writes in that order too.
//!
//! In its shard ([`ShardSeqs`]) a record is
//!
//! - *appended*: in the shard's write buffer and index (readers find it);
//! - *taken*: a sync took the shard's buffer ([`ShardSeqs::take`]), and with it every
//!   record of the shard numbered up to the last one appended; it is being written to its
//!   segment file and synced;
//! - *durable*: that sync, or a later one, completed ([`ShardSeqs::synced`]).
//!
//! **Durable** means one thing throughout the engine: the record is in its shard's
//! segment file, and that file was synced after it was written. A record that also went
//! to the commit log is *logged*: once the log is synced past its frame it survives a
//! crash (open writes it back into its shard), but it is not durable until its shard is
//! synced. A durable write ([`Need`]) returns once every record numbered up to its own is
//! durable, or logged and the log synced past it; only durable records count for the
//! store's durable mark, and so for the watermark that compaction and open rely on.
//!
//! The store's part ([`SeqTracker`]) holds the next number, the durable mark (in memory),
//! the watermark recorded in `SEQSTATE`, and the segments being dropped that every
//! `SEQSTATE` lists. The commit log keeps its own positions under its lock
//! (`CommitLog`); a logged write's frames end at a position, its `lsn`, which
//! [`Need::Logged`] carries.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::manifest::SeqState;
use crate::Result;

/// No record: the `first_*` fields of [`ShardSeqs`] when nothing is waiting.
const NONE: u64 = u64::MAX;

/// Which of a shard's records a caller needs durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cover {
    /// Every record.
    All,
    /// The records not in the commit log (a logged record is made safe by the log).
    Unlogged,
}

/// What a caller needs of every record numbered up to some number before it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Need {
    /// Durable in every shard (the store has no commit log). The store's durable mark
    /// then rises to the number.
    Durable,
    /// Logged and the commit log synced up to position `lsn` (which the caller read
    /// after the number was taken, so the log's part is covered), or else durable: each
    /// survives a crash. The durable mark does not move: logged records are not durable.
    Logged {
        /// The log position to sync up to.
        lsn: u64,
    },
}

impl Need {
    /// The records each shard must make durable for this need.
    pub fn cover(self) -> Cover {
        match self {
            Need::Durable => Cover::All,
            Need::Logged { .. } => Cover::Unlogged,
        }
    }
}

/// What a take took ([`ShardSeqs::take`]): the shard's last appended number then. Handed
/// back to [`ShardSeqs::synced`] once the files the take left to sync are synced.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub(crate) struct Taken(u64);

/// Where one shard's records stand, behind the shard's state lock. The fields change
/// only through the transitions [`ShardSeqs::append`], [`ShardSeqs::take`] and
/// [`ShardSeqs::synced`].
#[derive(Clone, Debug)]
pub(crate) struct ShardSeqs {
    /// Highest number appended.
    appended: u64,
    /// Lowest number appended since the last take (`NONE`: none).
    first_untaken: u64,
    /// Lowest number of a record not logged appended since the last take.
    first_untaken_unlogged: u64,
    /// `appended` at the last take: it took every record numbered up to it.
    taken: u64,
    /// `appended` at the last take that took a record not logged.
    taken_unlogged: u64,
    /// The highest [`Taken`] whose sync completed: every record numbered up to it is
    /// durable.
    synced: u64,
}

impl ShardSeqs {
    /// A shard as open left it: every record it holds (numbered up to `max_seq`) counts
    /// as durable.
    pub fn recovered(max_seq: u64) -> ShardSeqs {
        ShardSeqs {
            appended: max_seq,
            first_untaken: NONE,
            first_untaken_unlogged: NONE,
            taken: max_seq,
            taken_unlogged: 0,
            synced: max_seq,
        }
    }

    /// A record numbered `seq` was appended to the write buffer; `logged`: it went to the
    /// commit log too. Numbers come in order (a batch's records share theirs).
    pub fn append(&mut self, seq: u64, logged: bool) {
        debug_assert!(
            seq >= self.appended,
            "appended {seq} after {}",
            self.appended
        );
        self.appended = self.appended.max(seq);
        self.first_untaken = self.first_untaken.min(seq);
        if !logged {
            self.first_untaken_unlogged = self.first_untaken_unlogged.min(seq);
        }
    }

    /// A sync takes the write buffer: every record appended so far is taken. Called
    /// under the state lock, with the buffer handed to the file in the same hold.
    pub fn take(&mut self) -> Taken {
        self.taken = self.appended;
        self.first_untaken = NONE;
        if self.first_untaken_unlogged != NONE {
            self.taken_unlogged = self.appended;
            self.first_untaken_unlogged = NONE;
        }
        Taken(self.taken)
    }

    /// The sync of `t` completed: the files its take left to sync (every file of the
    /// shard that may hold a record not durable) are synced, so every record numbered up
    /// to it is durable. A sync that fails hands nothing back.
    pub fn synced(&mut self, t: Taken) {
        self.synced = self.synced.max(t.0);
    }

    /// Highest number appended to the shard.
    pub fn last_appended(&self) -> u64 {
        self.appended
    }

    /// Whether every record of the shard numbered up to `seq` that `cover` names is
    /// durable: none was appended since the last take, and the takes that took them were
    /// synced.
    pub fn is_durable(&self, seq: u64, cover: Cover) -> bool {
        let (first, taken) = match cover {
            Cover::All => (self.first_untaken, self.taken),
            Cover::Unlogged => (self.first_untaken_unlogged, self.taken_unlogged),
        };
        first > seq && self.synced >= taken.min(seq)
    }
}

/// The store's part of the write order (see the module documentation).
pub(crate) struct SeqTracker {
    /// The number the next write takes.
    next: AtomicU64,
    /// The durable mark: every record numbered up to it is durable in every shard. At
    /// least the recorded watermark.
    durable: AtomicU64,
    /// What `SEQSTATE` says, with the segments being dropped.
    recorded: Mutex<Recorded>,
}

/// The persisted `SEQSTATE`, and the segments being dropped whole that are not yet
/// durably unlinked (`(shard, segment, created_seq)`): every `SEQSTATE` written
/// meanwhile lists them (`SeqState::dropped`).
struct Recorded {
    state: SeqState,
    dropping: Vec<(u32, u32, u64)>,
}

impl SeqTracker {
    /// The write order of a store open found: the next write is numbered `next`, and
    /// `state` is its `SEQSTATE` (whose watermark is durable).
    pub fn new(next: u64, state: SeqState) -> SeqTracker {
        SeqTracker {
            next: AtomicU64::new(next),
            durable: AtomicU64::new(state.watermark),
            recorded: Mutex::new(Recorded {
                state,
                dropping: Vec::new(),
            }),
        }
    }

    /// Takes the next number for a write. The caller holds the write lock of every shard
    /// the write appends to (and the commit log's lock if the write is logged), and
    /// appends its records before it lets them go.
    pub fn assign(&self) -> u64 {
        self.next.fetch_add(1, Ordering::SeqCst)
    }

    /// The number the next write takes.
    pub fn next(&self) -> u64 {
        self.next.load(Ordering::SeqCst)
    }

    /// The last number taken (0 before any).
    pub fn last_assigned(&self) -> u64 {
        self.next().saturating_sub(1)
    }

    /// The durable mark.
    pub fn durable(&self) -> u64 {
        self.durable.load(Ordering::SeqCst)
    }

    /// Every record numbered up to `seq` is durable in every shard (the caller synced
    /// each shard after `seq` was taken).
    pub fn mark_durable(&self, seq: u64) {
        self.durable.fetch_max(seq, Ordering::SeqCst);
    }

    /// The watermark `SEQSTATE` records.
    pub fn watermark(&self) -> u64 {
        self.recorded.lock().state.watermark
    }

    /// Records a watermark of at least `seq` and the segments `dropping` lists with
    /// `write` (which writes a `SEQSTATE` durably), then marks `seq` durable. The caller
    /// made every record numbered up to `seq` durable, but for those of the segments
    /// being dropped. Writes nothing when neither changes; on an error the segments stay
    /// listed, and nothing else changed.
    pub fn raise_watermark(
        &self,
        seq: u64,
        dropping: &[(u32, u32, u64)],
        write: impl FnOnce(&SeqState) -> Result<()>,
    ) -> Result<()> {
        {
            let mut r = self.recorded.lock();
            r.dropping.extend_from_slice(dropping);
            if r.state.watermark < seq || !dropping.is_empty() {
                let mut next = r.state.clone();
                next.watermark = next.watermark.max(seq);
                next.dropped = r.dropping.clone();
                write(&next)?;
                r.state = next;
            }
        }
        self.mark_durable(seq);
        Ok(())
    }

    /// What `SEQSTATE` says now (the segments being dropped left out).
    pub fn recorded(&self) -> SeqState {
        let mut s = self.recorded.lock().state.clone();
        s.dropped.clear();
        s
    }

    /// Segment `seg` of shard `shard` is durably unlinked: later `SEQSTATE`s leave it
    /// out.
    pub fn dropped(&self, shard: u32, seg: u32) {
        self.recorded
            .lock()
            .dropping
            .retain(|&(sh, s, _)| (sh, s) != (shard, seg));
    }
}

#[cfg(test)]
mod tests;
