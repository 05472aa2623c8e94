//! Full verification: every record of every segment and every hint file.

use serde::Serialize;

use crate::core::Core;
use crate::damage::Damage;
use crate::segment;
use crate::Result;

/// What [`crate::Db::verify`] found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct VerifyReport {
    /// Segment and hint files read.
    pub files_checked: u64,
    /// Intact records read.
    pub records_checked: u64,
    /// Every damaged place.
    pub damage: Vec<Damage>,
}

impl VerifyReport {
    /// True when no damage was found.
    pub fn is_clean(&self) -> bool {
        self.damage.is_empty()
    }
}

pub(crate) fn verify(core: &Core) -> Result<VerifyReport> {
    let mut report = VerifyReport::default();
    for shard in &core.shards {
        // Every index entry must point inside a segment the shard has.
        let st = shard.state.read();
        let mut bad = Vec::new();
        st.index.for_each(|key, loc| {
            let ok = st
                .segs
                .get(&loc.seg)
                .is_some_and(|m| loc.off as u64 + loc.len as u64 <= m.size);
            if !ok && bad.len() < 16 {
                bad.push(Damage {
                    path: shard.dir.clone(),
                    offset: None,
                    detail: format!(
                        "index entry for key {} points outside segment {}",
                        key.escape_ascii(),
                        loc.seg
                    ),
                });
            }
        });
        drop(st);
        report.damage.extend(bad);
        // Hand the write buffer to the file so the whole log is on disk to check.
        let list = |st: &crate::shard::ShardState| -> Vec<_> {
            st.segs
                .values()
                .map(|m| {
                    let len = if m.file.id == st.active.id {
                        st.active.buf_start
                    } else {
                        m.size
                    };
                    // The active segment's hint that open kept is checked too.
                    (m.file.clone(), len, st.has_hint(m.file.id))
                })
                .collect()
        };
        // A read-only view writes nothing: it checks what it read of each segment.
        let segs = match core.follower {
            Some(_) => list(&shard.state.read()),
            None => shard.with_flushed(core, list)?,
        };
        for (file, len, sealed) in segs {
            report.files_checked += 1;
            let (entries, outcome) = segment::scan_entries(&file, len)?;
            report.records_checked += outcome.records;
            for spot in outcome.damage.into_iter().chain(outcome.tail) {
                report.damage.push(Damage {
                    path: file.path.clone(),
                    offset: Some(spot.offset),
                    detail: spot.detail,
                });
            }
            if sealed {
                report.files_checked += 1;
                let hpath = segment::hint_path(&shard.dir, file.id);
                match segment::read_hint_entries(&hpath, file.id) {
                    Ok((hinted, _)) if hinted == entries => {}
                    Ok((hinted, _)) => report.damage.push(Damage {
                        path: hpath,
                        offset: None,
                        detail: format!(
                            "hint lists {} records, the segment holds {} intact ones or they differ",
                            hinted.len(),
                            entries.len()
                        ),
                    }),
                    // Compaction removed the segment meanwhile, or a write removed the
                    // hint open kept for the active segment: nothing to check.
                    Err(_) if !shard.state.read().has_hint(file.id) => {}
                    // The writer of a store open read-only removed the segment since.
                    Err(_) if core.follower.is_some() && !hpath.exists() => {}
                    Err(e) => report.damage.push(Damage {
                        path: hpath,
                        offset: None,
                        detail: e.to_string(),
                    }),
                }
            }
        }
    }
    // Damage sealing or compaction found since the store was opened, where this pass did
    // not find it again.
    for d in core.found_damage() {
        if !report
            .damage
            .iter()
            .any(|r| r.path == d.path && r.offset == d.offset)
        {
            report.damage.push(d);
        }
    }
    Ok(report)
}
