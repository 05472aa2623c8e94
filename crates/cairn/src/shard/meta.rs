//! A segment's bookkeeping ([`SegMeta`]), its life cycle ([`SegState`]) and where the
//! shard's spare segment stands ([`Spare`]).
//!
//! Life cycle of a segment (DESIGN.md, "Concurrency"):
//!
//! ```text
//!             begin_seal               end_seal(ok)
//!  Unsealed ─────────────▶ Sealing ─────────────────▶ Sealed
//!     │  ▲                    │ end_seal(failed)          │
//!     │  └────────────────────┘                           │
//!     │ claim_drop     unclaim_drop                       │
//!     ▼  ──────────▶ Unsealed                             │
//!  Dropping ── (removed by compaction) ──▶ gone ◀──────────┘ (retired)
//!  any but Dropping ── mark_damaged ──▶ Damaged (not compacted again)
//! ```
//!
//! A transition that does not apply to the current state is refused: the method returns
//! `false` and changes nothing (a debug build also asserts where the caller should have
//! known better).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use crate::bloom::Bloom;
use crate::segment::{Entry, SegmentFile, SEG_HEADER_LEN};
use crate::tally::Tally;

/// What compaction found when it last judged a segment not droppable whole:
/// `(dead + tomb, segments retired so far)`; it is judged again when either changed.
pub(crate) type DropMemo = (u64, u64);

/// The records of a segment not sealed yet that compaction read and could not drop whole
/// yet (they never change; forgotten once it is sealed).
pub(crate) type Listing = Arc<Vec<Entry>>;

/// Where a segment is in its life cycle.
#[derive(Clone, Default)]
pub(crate) enum SegState {
    /// Taking appends (the active segment), or rotated out and waiting for the
    /// maintenance thread to seal it.
    #[default]
    Unsealed,
    /// Like `Unsealed`, with what compaction learnt when it judged it not droppable
    /// whole yet.
    UnsealedJudged {
        memo: DropMemo,
        listing: Option<Listing>,
    },
    /// The maintenance thread is syncing it and writing its hint file. What compaction
    /// learnt before is kept, should the seal fail.
    Sealing {
        memo: Option<DropMemo>,
        listing: Option<Listing>,
    },
    /// Synced and hinted: eligible for compaction.
    Sealed { memo: Option<DropMemo> },
    /// Compaction claimed it, before it was sealed, to drop it whole (it holds nothing
    /// live): it is not to be sealed. Compaction removes it or gives it back
    /// (`Unsealed` again, what it learnt kept).
    Dropping {
        memo: Option<DropMemo>,
        listing: Option<Listing>,
    },
    /// Compaction found damage here; it is not retried automatically. `sealed`: it has a
    /// hint file (it was sealed when found, or its seal completed later).
    Damaged { sealed: bool },
}

/// Bookkeeping for one segment of the shard.
pub(crate) struct SegMeta {
    pub file: Arc<SegmentFile>,
    /// Bytes of the segment including its header (and, for the active segment, buffered
    /// bytes not yet written).
    pub size: u64,
    /// Bytes of the hint file, once written.
    pub hint_size: u64,
    /// Bytes of records superseded by newer ones.
    pub dead: u64,
    /// Bytes of `dead` that a live snapshot may still read (`versions`): not stale while
    /// it is live, so compaction leaves the segment alone rather than copy its live
    /// records out and keep the old file open anyway.
    pub pinned: u64,
    /// Highest sequence number of a record that superseded one of this segment's (or
    /// an upper bound of it): once the store is durable up to it, dropping the
    /// superseded records loses nothing.
    pub superseded_seq: u64,
    /// Bytes of tombstones that compaction may be able to drop.
    pub tomb: u64,
    /// Bytes of tombstones compaction kept because `blockers` may hold older versions.
    pub blocked_tomb: u64,
    /// Segments that blocked dropping tombstones here; when one goes, they are retried.
    pub blockers: Vec<u32>,
    /// Highest sequence number in the segment.
    pub max_seq: u64,
    /// Every record the write path appended to the segment at offset `mark.0` or later
    /// is numbered at least `mark.1` (appends come in number order). The write path
    /// moves it to its own record while a live snapshot may be as new as `mark.1`, so
    /// it soon says "written after every live snapshot": a write that supersedes such a
    /// record notes nothing (`versions`). `(u32::MAX, 0)`: no mark.
    pub mark: (u32, u64),
    /// Every record of the segment is numbered at least this (the header's creation
    /// number, or later for a spare that became the active segment later).
    pub created_seq: u64,
    /// Where the segment is in its life cycle (changed only through the methods below).
    state: SegState,
    /// Keys of the segment, built from the hint file on first need.
    pub bloom: Arc<OnceLock<Bloom>>,
    /// Bytes of the segment's records by keyspace (for `Db::stats`).
    pub bytes: Tally,
}

impl SegMeta {
    pub fn new(file: Arc<SegmentFile>, size: u64) -> SegMeta {
        SegMeta {
            created_seq: file.created_seq,
            file,
            size,
            hint_size: 0,
            dead: 0,
            pinned: 0,
            superseded_seq: 0,
            tomb: 0,
            blocked_tomb: 0,
            blockers: Vec::new(),
            max_seq: 0,
            mark: (u32::MAX, 0),
            state: SegState::Unsealed,
            bloom: Arc::new(OnceLock::new()),
            bytes: Tally::default(),
        }
    }

    /// Bytes of records that are neither superseded nor deletes: an upper bound of the
    /// live bytes (damaged stretches count too).
    pub fn live(&self) -> u64 {
        self.size
            .saturating_sub(SEG_HEADER_LEN + self.dead + self.tomb + self.blocked_tomb)
    }

    /// Whether, by its accounting, the segment holds nothing live: every record is
    /// superseded or a tombstone that may be droppable.
    pub fn all_stale(&self) -> bool {
        self.blocked_tomb == 0
            && self.pinned == 0
            && self.dead + self.tomb + SEG_HEADER_LEN >= self.size
    }

    /// Bytes that compaction would reclaim: superseded records no snapshot pins, and
    /// tombstones.
    pub fn stale(&self) -> u64 {
        (self.dead + self.tomb).saturating_sub(self.pinned)
    }

    /// Stale fraction of the record bytes.
    pub fn stale_fraction(&self) -> f64 {
        let body = self.size.saturating_sub(SEG_HEADER_LEN);
        if body == 0 {
            1.0
        } else {
            self.stale() as f64 / body as f64
        }
    }

    /// Whether the segment has been synced and has a hint file describing it.
    pub fn is_sealed(&self) -> bool {
        matches!(
            self.state,
            SegState::Sealed { .. } | SegState::Damaged { sealed: true }
        )
    }

    /// Whether compaction found damage here (it is not compacted again).
    pub fn is_damaged(&self) -> bool {
        matches!(self.state, SegState::Damaged { .. })
    }

    /// Whether compaction claimed it to drop it whole.
    pub fn is_dropping(&self) -> bool {
        matches!(self.state, SegState::Dropping { .. })
    }

    /// Whether nothing is in progress on it and it is not sealed: the maintenance
    /// thread may seal it, or compaction claim it.
    pub fn is_unsealed(&self) -> bool {
        matches!(
            self.state,
            SegState::Unsealed | SegState::UnsealedJudged { .. }
        )
    }

    /// What compaction found when it last judged the segment not droppable whole.
    pub fn drop_memo(&self) -> Option<DropMemo> {
        match &self.state {
            SegState::UnsealedJudged { memo, .. } => Some(*memo),
            SegState::Sealing { memo, .. }
            | SegState::Sealed { memo }
            | SegState::Dropping { memo, .. } => *memo,
            SegState::Unsealed | SegState::Damaged { .. } => None,
        }
    }

    /// The records compaction listed for the segment not sealed yet.
    pub fn listing(&self) -> Option<Listing> {
        match &self.state {
            SegState::UnsealedJudged { listing, .. }
            | SegState::Sealing { listing, .. }
            | SegState::Dropping { listing, .. } => listing.clone(),
            _ => None,
        }
    }

    /// Moves an unsealed segment (judged or not) to the state `next` makes of its drop
    /// memo and listing; any other state is kept and `false` returned.
    fn leave_unsealed(
        &mut self,
        next: impl FnOnce(Option<DropMemo>, Option<Listing>) -> SegState,
    ) -> bool {
        match std::mem::take(&mut self.state) {
            SegState::Unsealed => {
                self.state = next(None, None);
                true
            }
            SegState::UnsealedJudged { memo, listing } => {
                self.state = next(Some(memo), listing);
                true
            }
            other => {
                self.state = other;
                false
            }
        }
    }

    /// Unsealed → Sealing (the maintenance thread begins its seal). Refused otherwise:
    /// gone, sealed, being sealed by another thread (a segment can be queued twice), or
    /// being dropped by compaction (which queues it again if it gives it back).
    pub fn begin_seal(&mut self) -> bool {
        self.leave_unsealed(|memo, listing| SegState::Sealing { memo, listing })
    }

    /// Sealing → Sealed when the seal succeeded (the listing is forgotten: the hint
    /// file lists the records now), else back to Unsealed. A segment found damaged
    /// meanwhile stays so, sealed when the seal succeeded.
    pub fn end_seal(&mut self, ok: bool) -> bool {
        match std::mem::take(&mut self.state) {
            SegState::Sealing { memo, .. } if ok => {
                self.state = SegState::Sealed { memo };
                true
            }
            SegState::Sealing { memo, listing } => {
                self.state = unsealed(memo, listing);
                true
            }
            SegState::Damaged { sealed } => {
                self.state = SegState::Damaged {
                    sealed: sealed || ok,
                };
                true
            }
            other => {
                debug_assert!(false, "end of a seal that did not begin");
                self.state = other;
                false
            }
        }
    }

    /// Marks a segment written whole and synced with its hint file by compaction (its
    /// output), or found sealed by open: Unsealed → Sealed.
    pub fn mark_sealed(&mut self) -> bool {
        match self.state {
            SegState::Unsealed => {
                self.state = SegState::Sealed { memo: None };
                true
            }
            _ => {
                debug_assert!(false, "only a new segment is marked sealed");
                false
            }
        }
    }

    /// Sealed → Unsealed: open takes a sealed segment as the active one again (its hint
    /// kept until the file changes).
    pub fn reopen(&mut self) -> bool {
        match self.state {
            SegState::Sealed { .. } => {
                self.state = SegState::Unsealed;
                true
            }
            _ => false,
        }
    }

    /// Unsealed → Dropping: compaction claims the segment to drop it whole. Refused
    /// when it is being sealed, sealed, claimed already or damaged.
    pub fn claim_drop(&mut self) -> bool {
        self.leave_unsealed(|memo, listing| SegState::Dropping { memo, listing })
    }

    /// Dropping → Unsealed: compaction gives a claimed segment back. Returns whether it
    /// was claimed.
    pub fn unclaim_drop(&mut self) -> bool {
        match std::mem::take(&mut self.state) {
            SegState::Dropping { memo, listing } => {
                self.state = unsealed(memo, listing);
                true
            }
            other => {
                self.state = other;
                false
            }
        }
    }

    /// Records what compaction found when it judged the segment not droppable whole:
    /// `memo`, and for a segment not sealed yet the `listing` of its records (they never
    /// change). Sets nothing on a damaged segment.
    pub fn note_judged(&mut self, memo: DropMemo, listing: Option<Listing>) {
        self.state = match std::mem::take(&mut self.state) {
            SegState::Unsealed | SegState::UnsealedJudged { .. } => {
                SegState::UnsealedJudged { memo, listing }
            }
            SegState::Sealing { .. } => SegState::Sealing {
                memo: Some(memo),
                listing,
            },
            SegState::Dropping { .. } => SegState::Dropping {
                memo: Some(memo),
                listing,
            },
            SegState::Sealed { .. } => SegState::Sealed { memo: Some(memo) },
            damaged @ SegState::Damaged { .. } => damaged,
        };
    }

    /// Any state but Dropping → Damaged: compaction found damage; the segment is kept
    /// and not compacted again.
    pub fn mark_damaged(&mut self) -> bool {
        if self.is_dropping() {
            debug_assert!(false, "a segment claimed for a drop is not compacted");
            return false;
        }
        self.state = SegState::Damaged {
            sealed: self.is_sealed(),
        };
        true
    }
}

/// Unsealed, with what compaction learnt if anything.
fn unsealed(memo: Option<DropMemo>, listing: Option<Listing>) -> SegState {
    match memo {
        Some(memo) => SegState::UnsealedJudged { memo, listing },
        None => SegState::Unsealed,
    }
}

/// Where a shard's spare segment (the next active segment, created ahead of time by the
/// maintenance thread so that a rotation does not wait for a file creation's syncs)
/// stands. Held in an atomic ([`SpareCell`]): writers read it on every write without a
/// lock; the file itself is in `IoState::spare`, under the shard's `io` mutex.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Spare {
    /// No spare, and none asked for yet.
    None = 0,
    /// Asked for (the active segment is half full, or the shard rotated): the
    /// maintenance thread makes it.
    Asked = 1,
    /// Ready in `IoState::spare`.
    Ready = 2,
    /// Creating one failed; asked again at the next rotation.
    Failed = 3,
}

impl Spare {
    fn from_u8(v: u8) -> Spare {
        match v {
            1 => Spare::Asked,
            2 => Spare::Ready,
            3 => Spare::Failed,
            _ => Spare::None,
        }
    }
}

/// A [`Spare`] in an atomic byte.
pub(crate) struct SpareCell(AtomicU8);

impl SpareCell {
    pub fn new() -> SpareCell {
        SpareCell(AtomicU8::new(Spare::None as u8))
    }

    pub fn get(&self) -> Spare {
        Spare::from_u8(self.0.load(Ordering::SeqCst))
    }

    pub fn set(&self, s: Spare) {
        self.0.store(s as u8, Ordering::SeqCst);
    }

    /// Moves from `from` to `to` if the spare is still at `from`; returns whether it did.
    pub fn advance(&self, from: Spare, to: Spare) -> bool {
        self.0
            .compare_exchange(from as u8, to as u8, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }
}
