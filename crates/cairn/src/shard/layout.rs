//! Durable appends without a file-system journal commit each.
//!
//! Under `SyncPolicy::Always` every small write ends in an `fdatasync` of the active
//! segment. When that write made the file longer, the `fdatasync` must also make the new
//! size durable, which on ext4 (and XFS) commits the file system's journal: on this
//! machine's disk 5,300–6,600 synced 1 KiB appends/s against 7,300–8,100 synced
//! overwrites of blocks already written. So a durable flush of a few bytes that reaches
//! the end of what the file holds also writes zeros past it ([`LAYOUT_WINDOW`]), synced by
//! the same `fdatasync`; the next durable writes land inside bytes the file already has,
//! and their syncs write data only. RocksDB's recycled log files do the same for its log.
//!
//! The zeros are never records: a segment may end in zero bytes, which readers take for
//! its end (`segment::scan`), and the zeros are cut off before the segment is sealed or
//! its hint written at close, so a sealed segment's length is its data's end as before.
//! Large durable flushes (a streamed file) skip the layout: their journal commit is
//! shared by many bytes already, and writing every block twice would halve their rate.

use super::{IoState, Shard};
use crate::ctx::StoreCtx;
use crate::segment::SegmentFile;
use crate::Result;

/// Bytes of zeros laid out past a durable small append's end, at a time: one journal
/// commit per this many bytes of small durable writes (1,000 writes of 1 KiB).
pub(crate) const LAYOUT_WINDOW: u64 = 1 << 20;

/// A durable flush of more bytes than this is not followed by a layout.
const LAYOUT_MAX_FLUSH: u64 = 64 << 10;

static ZEROS: [u8; LAYOUT_WINDOW as usize] = [0; LAYOUT_WINDOW as usize];

impl Shard {
    /// After a durable flush that wrote `flushed` bytes and left the active segment `file`
    /// holding data up to `end`: when the next small writes would extend the file, lays
    /// out zeros up to `end + LAYOUT_WINDOW` (at most `cap`, the segment's size cap), for
    /// the coming `fdatasync` to make durable with the data. A failed layout is not an
    /// error (the data was written; the zeros only save later journal commits): the bytes
    /// that did reach the file are cut off at the next rotation like any others.
    pub(super) fn lay_out(
        &self,
        core: &StoreCtx,
        io: &mut IoState,
        file: &SegmentFile,
        end: u64,
        flushed: u64,
        cap: u64,
    ) {
        // Only after bytes were written: a flush that wrote none has not dropped the
        // hint open kept for the file (`Shard::drop_kept_hint`), which must go first.
        if flushed == 0
            || flushed > LAYOUT_MAX_FLUSH
            || end + LAYOUT_MAX_FLUSH <= io.laid
            || end >= cap
        {
            return;
        }
        let from = end.max(io.laid);
        let to = (end + LAYOUT_WINDOW).min(cap);
        if to <= from {
            return;
        }
        // Counted as laid out before the write: a write that fails part way may still
        // have extended the file, and what is counted is what gets cut off later.
        io.laid = to;
        let zeros = &ZEROS[..(to - from) as usize];
        match core.fs.write_at(&file.file, &file.path, zeros, from) {
            Ok(()) => self.note_write(to - from),
            Err(e) => log::debug!("laying out {}: {e}", file.path.display()),
        }
    }

    /// Cuts the zeros laid out past `end`, the data's end, off `file` (a segment being
    /// rotated out, or the active one before its hint is written at close), so that its
    /// length is its data's end again. Not synced here: the seal's or the close's
    /// `fdatasync` that follows makes the new length durable before any hint says so.
    pub(super) fn cut_layout(
        &self,
        core: &StoreCtx,
        io: &mut IoState,
        file: &SegmentFile,
        end: u64,
    ) -> Result<()> {
        if io.laid > end {
            core.fs.set_len(&file.file, &file.path, end)?;
        }
        io.laid = end;
        Ok(())
    }
}
