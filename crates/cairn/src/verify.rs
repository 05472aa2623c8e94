//! Full verification: every record of every segment and every hint file.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::core::Core;
use crate::damage::Damage;
use crate::segment::{self, SegmentFile};
use crate::{Error, Result};

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

/// Checks every segment of the store directory `dir` without opening the store (a
/// backup): each segment's header and records, and its hint file, if any, against it.
/// Counts intact records in `records` and adds what is wrong to `damage`.
pub(crate) fn verify_dir(dir: &Path, records: &mut u64, damage: &mut Vec<Damage>) -> Result<()> {
    let shards = dir.join("shards");
    let mut shard_dirs: Vec<(u32, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(&shards).map_err(|e| Error::io(&shards, e))? {
        let e = e.map_err(|e| Error::io(&shards, e))?;
        if let Some(i) = e.file_name().to_str().and_then(|n| n.parse().ok()) {
            shard_dirs.push((i, e.path()));
        }
    }
    shard_dirs.sort();
    for (shard, sdir) in shard_dirs {
        let mut ids: Vec<(u32, bool)> = Vec::new();
        for e in std::fs::read_dir(&sdir).map_err(|e| Error::io(&sdir, e))? {
            let name = e.map_err(|e| Error::io(&sdir, e))?.file_name();
            let name = name.to_string_lossy();
            if let Some(id) = name.strip_suffix(".seg").and_then(|n| n.parse().ok()) {
                ids.push((id, false));
            } else if let Some(id) = name.strip_suffix(".hint").and_then(|n| n.parse().ok()) {
                ids.push((id, true));
            }
        }
        ids.sort();
        for (id, is_hint) in &ids {
            let has_seg = ids.contains(&(*id, false));
            if *is_hint && !has_seg {
                damage.push(Damage {
                    path: segment::hint_path(&sdir, *id),
                    offset: None,
                    detail: "hint file without its segment".into(),
                });
            } else if !*is_hint {
                let hinted = ids.contains(&(*id, true));
                verify_segment(&sdir, shard, *id, hinted, records, damage)?;
            }
        }
    }
    Ok(())
}

/// Checks one segment of a store directory (see [`verify_dir`]).
fn verify_segment(
    sdir: &Path,
    shard: u32,
    id: u32,
    hinted: bool,
    records: &mut u64,
    damage: &mut Vec<Damage>,
) -> Result<()> {
    let path = segment::seg_path(sdir, id);
    let mut bad = |offset: Option<u64>, detail: String| {
        damage.push(Damage {
            path: path.clone(),
            offset,
            detail,
        })
    };
    let (file, len) = match SegmentFile::open_read_only(&path, shard, id)? {
        None => {
            bad(None, "segment is shorter than its header".into());
            return Ok(());
        }
        Some((_, _, Some(why))) => {
            bad(Some(0), why);
            return Ok(());
        }
        Some((f, len, None)) => (f, len),
    };
    let (entries, outcome) = segment::scan_entries(&file, len)?;
    *records += outcome.records;
    for spot in outcome.damage.into_iter().chain(outcome.tail) {
        bad(Some(spot.offset), spot.detail);
    }
    if hinted {
        let hpath = segment::hint_path(sdir, id);
        let detail = match segment::read_hint_entries(&hpath, id) {
            Ok((h, data_len)) if h == entries && data_len == len => None,
            Ok((h, data_len)) => Some(format!(
                "hint lists {} records of {data_len} bytes, the segment holds {} intact ones in {len} bytes, or they differ",
                h.len(),
                entries.len()
            )),
            Err(e) => Some(e.to_string()),
        };
        if let Some(detail) = detail {
            damage.push(Damage {
                path: hpath,
                offset: None,
                detail,
            });
        }
    }
    Ok(())
}
