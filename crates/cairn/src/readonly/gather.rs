//! What a shard's files gained since the follower last read them: its directory
//! listed, new segments read (from their hint files when they have one that describes
//! them, else by a scan), the segments it reads on read from where it stopped, and
//! those no longer listed noted. Nothing of the view changes here.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

use super::{Halt, Recs, Seg, ShardView, Step};
use crate::index::Loc;
use crate::record::{self, Kind, HEADER_LEN};
use crate::segment::{self, Hint, SegKind, SegmentFile, WindowReader, SEG_HEADER_LEN};
use crate::Error;

/// A shard's directory as listed: each segment's inode number, and the hint files.
pub(super) struct Listing {
    pub segs: BTreeMap<u32, u64>,
    pub hints: HashSet<u32>,
}

/// How far a segment was read.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Progress {
    /// Every record below this was read.
    pub end: u64,
    /// Offset and number of the last record read.
    pub last: Option<(u64, u64)>,
    /// Its hint file listed every record.
    pub hinted: bool,
}

/// What reading one shard found.
#[derive(Default)]
pub(super) struct ShardDelta {
    /// Segments read for the first time.
    pub new: Vec<(u32, Seg)>,
    /// Segments read on.
    pub advanced: Vec<(u32, Progress)>,
    /// Segments of the view no longer listed.
    pub gone: Vec<u32>,
    /// The records read, of every segment.
    pub recs: Recs,
}

pub(super) fn list(dir: &Path) -> Step<Listing> {
    let mut out = Listing {
        segs: BTreeMap::new(),
        hints: HashSet::new(),
    };
    let rd = fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for ent in rd {
        let ent = ent.map_err(|e| Error::io(dir, e))?;
        let name = ent.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((stem, ext)) = name.split_once('.') else {
            continue;
        };
        if stem.len() != 10 || !stem.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(id) = stem.parse::<u32>() else {
            continue;
        };
        match ext {
            "seg" => {
                out.segs.insert(id, ent.ino());
            }
            "hint" => {
                out.hints.insert(id);
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Reads what shard `shard` (directory `dir`) gained since `sv` was made.
pub(super) fn shard(dir: &Path, shard: u32, sv: &ShardView) -> Step<ShardDelta> {
    let listing = list(dir)?;
    let mut out = ShardDelta::default();
    for (&id, &ino) in &listing.segs {
        let hinted = listing.hints.contains(&id);
        match sv.segs.get(&id) {
            Some(s) if s.ino != ino => {
                return Err(Halt::Restart(format!(
                    "segment {id} of shard {shard} is another file now"
                )))
            }
            Some(s) if s.gone => {}
            Some(s) if s.hinted && hinted => {}
            Some(s) => {
                let p = read_on(dir, id, s, hinted, &mut out.recs)?;
                if p != s.progress() {
                    out.advanced.push((id, p));
                }
            }
            None => {
                if let Some(seg) = read_new(dir, shard, id, ino, hinted, &mut out.recs)? {
                    out.new.push((id, seg));
                }
            }
        }
    }
    out.gone = sv
        .segs
        .iter()
        .filter(|(id, s)| !s.gone && !listing.segs.contains_key(id))
        .map(|(&id, _)| id)
        .collect();
    Ok(out)
}

/// Opens segment `id`, new to the view: `None` when it is not there any more or shorter
/// than its header (being created: it holds no record yet).
pub(super) fn open_new(
    dir: &Path,
    shard: u32,
    id: u32,
    ino: u64,
) -> Step<Option<Arc<SegmentFile>>> {
    let path = segment::seg_path(dir, id);
    let file = match SegmentFile::open_read_only(&path, shard, id) {
        Ok(Some((file, _len, _damage))) => Arc::new(file),
        Ok(None) => return Ok(None),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            // Listed, then removed: what replaced it may be missing from the listing.
            return Err(Halt::Race(format!(
                "segment {id} of shard {shard} vanished"
            )));
        }
        Err(e @ (Error::Io { .. } | Error::Format { .. })) => return Err(Halt::Fail(e)),
        Err(e) => {
            log::warn!("read-only view: {} skipped: {e}", path.display());
            return Ok(None);
        }
    };
    let ino_now = file.file.metadata().map_err(|e| Error::io(&path, e))?.ino();
    if ino_now != ino {
        return Err(Halt::Race(format!(
            "segment {id} of shard {shard} was replaced"
        )));
    }
    Ok(Some(file))
}

/// Opens and reads segment `id`, new to the view: `None` when it is not there any more
/// or shorter than its header.
fn read_new(
    dir: &Path,
    shard: u32,
    id: u32,
    ino: u64,
    hinted: bool,
    out: &mut Recs,
) -> Step<Option<Seg>> {
    let Some(file) = open_new(dir, shard, id, ino)? else {
        return Ok(None);
    };
    let mut seg = Seg {
        file,
        ino,
        end: SEG_HEADER_LEN,
        last: None,
        hinted: false,
        live: 0,
        held: 0,
        gone: false,
    };
    let p = read_on(dir, id, &seg, hinted, out)?;
    (seg.end, seg.last, seg.hinted) = (p.end, p.last, p.hinted);
    Ok(Some(seg))
}

/// Reads segment `id` on from `s.end`: from its hint file when `hinted` and the hint
/// describes the whole file (then every record is known), else by a scan that stops at
/// the first record that is not whole and intact (being written, or damaged: a hint
/// written when the segment is sealed lists what follows damage). Returns the new end,
/// the last record read and whether the hint listed everything.
fn read_on(dir: &Path, id: u32, s: &Seg, hinted: bool, out: &mut Recs) -> Step<Progress> {
    let path = &s.file.path;
    let len = s
        .file
        .file
        .metadata()
        .map_err(|e| Error::io(path, e))?
        .len();
    if len < s.end {
        return Err(Halt::Restart(format!(
            "{} is shorter than what was read of it",
            path.display()
        )));
    }
    if let Some((off, seq)) = s.last {
        let still = s
            .file
            .pread_at(off, HEADER_LEN)
            .ok()
            .and_then(|b| record::decode_header(&b).ok())
            .is_some_and(|h| h.seq == seq);
        if !still {
            return Err(Halt::Restart(format!(
                "{} was cut back and written again",
                path.display()
            )));
        }
    }
    if hinted {
        if let Some(r) = read_hint(dir, id, s, len, out) {
            return Ok(r);
        }
    }
    let copies = s.file.kind == SegKind::Compacted;
    let (end, last) = scan_from(&s.file, s.end, len, |kind, seq, total, loc, key| {
        out.push(kind, seq, total, loc, key, copies)
    })?;
    Ok(Progress {
        end,
        last: last.or(s.last),
        hinted: false,
    })
}

/// The records of segment `id` from `s.end` on, from its hint file, if the hint is
/// intact and describes the file's `len` bytes.
fn read_hint(dir: &Path, id: u32, s: &Seg, len: u64, out: &mut Recs) -> Option<Progress> {
    let hint = Hint::open(&segment::hint_path(dir, id), id).ok()?;
    if hint.data_len() != len || !hint.within(len) {
        return None;
    }
    let mut last = s.last;
    let copies = s.file.kind == SegKind::Compacted;
    for e in hint.entries() {
        let off = e.off as u64;
        if off < s.end {
            continue;
        }
        if last.is_none_or(|(o, _)| o < off) {
            last = Some((off, e.seq));
        }
        let loc = Loc {
            seg: id,
            off: e.off,
            len: e.len,
        };
        out.push(e.kind, e.seq, e.batch_total, loc, e.key, copies);
    }
    Some(Progress {
        end: len,
        last,
        hinted: true,
    })
}

/// Reads the records of `file` from `from` to `len`, stopping at the first one that is
/// not whole and intact, handing each to `push` (kind, number, batch size, location,
/// key). Returns where it stopped and the last record read.
pub(super) fn scan_from(
    file: &SegmentFile,
    from: u64,
    len: u64,
    mut push: impl FnMut(Kind, u64, u32, Loc, &[u8]),
) -> Step<(u64, Option<(u64, u64)>)> {
    let mut r = WindowReader::new(&file.file, len);
    let mut pos = from;
    let mut last = None;
    let io = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Halt::Restart(format!("{} was cut back while read", file.path.display()))
        } else {
            Halt::Fail(Error::io(&file.path, e))
        }
    };
    while len - pos >= HEADER_LEN as u64 {
        let Ok(h) = record::decode_header(r.slice(pos, HEADER_LEN).map_err(io)?) else {
            break;
        };
        let rlen = h.record_len();
        if pos + rlen > len {
            break;
        }
        let b = r.slice(pos, rlen as usize).map_err(io)?;
        let Ok(rec) = record::decode(b) else {
            break;
        };
        let loc = Loc {
            seg: file.id,
            off: pos as u32,
            len: rlen as u32,
        };
        push(h.kind, h.seq, h.batch_total, loc, rec.key);
        last = Some((pos, h.seq));
        pos += rlen;
    }
    Ok((pos, last))
}

/// The number of the record at `loc` of `file` (an index entry's), read from its
/// header.
pub(super) fn seq_at(file: &SegmentFile, loc: Loc) -> Step<u64> {
    let b = file.pread_at(loc.off as u64, HEADER_LEN)?;
    match record::decode_header(&b) {
        Ok(h) => Ok(h.seq),
        Err(_) => Err(Halt::Restart(format!(
            "{} no longer holds the record at offset {}",
            file.path.display(),
            loc.off
        ))),
    }
}
