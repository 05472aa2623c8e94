//! A shard's hint files: sealing a rotated segment (fsync, scan, hint), the hint of the
//! active segment written at a clean close, and the one a later open keeps until the
//! segment's file changes (`ShardState::kept_hint`).

use std::sync::Arc;

use super::{Shard, ShardState};
use crate::ctx::StoreCtx;
use crate::damage::Damage;
use crate::segment::{self, SegmentFile, SEG_HEADER_LEN};
use crate::{Error, Result};

impl ShardState {
    /// Whether segment `seg` has a hint file that describes it: it is sealed, or it is
    /// the active segment whose hint open kept ([`ShardState::kept_hint`]).
    pub fn has_hint(&self, seg: u32) -> bool {
        self.segs
            .get(&seg)
            .is_some_and(|m| m.is_sealed() || self.kept_hint == Some(seg))
    }

    /// Forgets the hint open kept for `seg` (its file was removed or replaced): its
    /// bytes no longer count as used.
    fn forget_kept_hint(&mut self, core: &StoreCtx, seg: u32) {
        if self.kept_hint != Some(seg) {
            return;
        }
        self.kept_hint = None;
        if let Some(m) = self.segs.get_mut(&seg) {
            core.sub_disk_used(m.hint_size);
            m.hint_size = 0;
        }
    }
}

impl Shard {
    /// Removes the hint file that open kept for segment `seg` (see
    /// [`ShardState::kept_hint`]) and makes the removal durable, before the segment's file
    /// changes: after a power loss, a hint that came back must not describe a file that
    /// was cut back and grew again to the same length. Called with `io` held.
    pub(super) fn drop_kept_hint(&self, core: &StoreCtx, seg: u32) -> Result<()> {
        if self.state.read().kept_hint != Some(seg) {
            return Ok(());
        }
        core.fs.remove(&segment::hint_path(&self.dir, seg))?;
        core.fs.sync_dir(&self.dir)?;
        self.state.write().forget_kept_hint(core, seg);
        Ok(())
    }

    /// Writes a hint file for the active segment at a clean close, so the next open
    /// loads its entries without reading its data. The next open keeps the hint until
    /// the first write that changes the file ([`ShardState::kept_hint`]); a close with
    /// nothing written since open leaves that hint as it is.
    pub fn hint_active(&self, core: &StoreCtx) -> Result<()> {
        let _sync = self.sync.lock();
        let mut io = self.io.lock();
        let appended = self.state.read().seqs.last_appended();
        // Usually the close's flush made everything durable already.
        if !self.durable_upto(appended) {
            if let Some(t) = self.flush_locked(core, &mut io, true, false)? {
                self.sync_files(core, t)?;
            }
        }
        let (file, len) = {
            let st = self.state.read();
            if st.kept_hint == Some(st.active.id) {
                // Nothing was written since open: the hint open kept describes the file.
                return Ok(());
            }
            (st.active.file.clone(), st.active.buf_start)
        };
        if io.laid > len {
            // The zeros laid out past the data go, durably, before the hint says the
            // file ends at `len`.
            self.cut_layout(core, &mut io, &file, len)?;
            self.sync_file(core, &file)?;
        }
        if len <= SEG_HEADER_LEN {
            return Ok(());
        }
        // Headers and keys through the map, as sealing reads them; the full scan only
        // when a record does not check out.
        let entries = match segment::scan_entries_mapped(&file, len) {
            Some(entries) => entries,
            None => {
                let (entries, outcome) = segment::scan_entries(&file, len)?;
                if outcome.valid_end != len {
                    return Ok(());
                }
                entries
            }
        };
        let n = segment::write_hint(&core.fs, &self.dir, file.id, len, &entries)?;
        self.note_write(n);
        Ok(())
    }

    /// Seals a rotated-out segment: syncs it, writes its hint file, and makes it eligible
    /// for compaction.
    pub fn seal(&self, core: &StoreCtx, seg: u32) -> Result<()> {
        // Refused when gone, sealed, being sealed by another thread (a segment can be
        // queued twice), or being dropped by compaction (which queues it again if it
        // changes its mind).
        let file = {
            let mut st = self.state.write();
            match st.segs.get_mut(&seg) {
                Some(m) if m.is_unsealed() => {
                    m.begin_seal();
                    m.file.clone()
                }
                _ => return Ok(()),
            }
        };
        let res = self.seal_file(core, seg, &file);
        let mut st = self.state.write();
        if res.is_ok() {
            // Rotated out unchanged: the new hint replaced the one open kept.
            st.forget_kept_hint(core, seg);
        }
        if let Some(m) = st.segs.get_mut(&seg) {
            m.end_seal(res.is_ok());
            if let Ok(hint_size) = res {
                m.hint_size = hint_size;
            }
        }
        res.map(|_| ())
    }

    /// Syncs a rotated segment and writes its hint file; returns the hint's size.
    fn seal_file(&self, core: &StoreCtx, seg: u32, file: &Arc<SegmentFile>) -> Result<u64> {
        core.fs.sync_data(&file.file, &file.path)?;
        let len = file
            .file
            .metadata()
            .map_err(|e| Error::io(&file.path, e))?
            .len();
        let (entries, valid_end) = match segment::scan_entries_mapped(file, len) {
            Some(entries) => (entries, len),
            None => {
                let (entries, outcome) = segment::scan_entries(file, len)?;
                for spot in outcome.damage.iter() {
                    core.note_damage(Damage {
                        path: file.path.clone(),
                        offset: Some(spot.offset),
                        detail: format!(
                            "found while sealing: {}; skipped, later records kept",
                            spot.detail
                        ),
                    });
                }
                if let Some(spot) = &outcome.tail {
                    core.note_damage(Damage {
                        path: file.path.clone(),
                        offset: Some(spot.offset),
                        detail: format!(
                            "found while sealing: {}; no intact record follows (left out of the hint)",
                            spot.detail
                        ),
                    });
                }
                (entries, outcome.valid_end)
            }
        };
        let hint_size = segment::write_hint(&core.fs, &self.dir, seg, valid_end, &entries)?;
        self.note_write(hint_size);
        core.add_disk_used(hint_size);
        {
            let mut io = self.io.lock();
            io.unsynced.retain(|f| f.id != seg);
        }
        file.map_sealed(valid_end);
        Ok(hint_size)
    }
}
