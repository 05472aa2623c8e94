//! Checkpoints: a consistent copy of an open store, made while writers go on
//! ([`crate::Db::checkpoint`], and the copy under a backup, `backup.rs`).
//!
//! The copy is the store as of one point of the write order, the *cut*: every write
//! numbered below it and none after, whole batches only. Four steps:
//! 1. **Seal.** Each active segment holding at least 1/8 of `segment_size` is rotated
//!    out and sealed (synced, its hint written), so that it is linked rather than
//!    copied. Then `StoreCtx::removals` is held shared until every segment is placed:
//!    compaction removes segment files only holding it exclusively, so none the copy
//!    needs goes (compaction runs on meanwhile; only its removals wait).
//! 2. **The cut** (writers held, for as long as it takes to note a few numbers per
//!    segment): every shard's write lock, in shard order. A write takes its number and
//!    appends its records under the locks of its shards, so with all of them held every
//!    number below the next one is wholly in the shards. For each segment the cut notes
//!    its open file, the length of its data and the bytes not in the file yet (the write
//!    buffer, and a write to the file in flight), and the store's `SEQSTATE` as held in
//!    memory.
//! 3. **Placing the files** (writers free) in a staging directory `DEST.incomplete`
//!    holding the marker [`INCOMPLETE`]: a sealed segment never changes, so it and its
//!    hint file are hard-linked where the staging directory is on the store's file
//!    system (copied elsewhere, or for a backup); a segment not sealed is copied up to
//!    its length at the cut, the bytes the cut held in memory written over the copy.
//!    Then a `SEQSTATE` whose watermark is the last number below the cut (every record
//!    up to it is in the copy: nothing is left to judge at open) and the manifest.
//! 4. **Finishing**: every file and directory synced, the marker removed, the staging
//!    directory renamed to `DEST` and the parent synced. A crash leaves either no `DEST`
//!    or a whole one; `Db::open` refuses a directory holding the marker.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLockWriteGuard;
use serde::Serialize;

use crate::core::Core;
use crate::fsutil::{self, Fs};
use crate::manifest::{self, SeqState};
use crate::open::shard_dir;
use crate::segment::{self, SegmentFile};
use crate::shard::ShardState;
use crate::{Error, Result};

mod view;

pub(crate) use view::copy_view;

/// A file in a directory that a checkpoint or backup is still being made in: a store
/// directory holding it is refused by `Db::open`.
pub const INCOMPLETE: &str = "CHECKPOINT-INCOMPLETE";

/// What [`crate::Db::checkpoint`] made.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CheckpointReport {
    /// Writes in the checkpoint: every write the store numbered below this (its
    /// sequence numbers, which batches share) and no later one.
    pub upto_seq: u64,
    /// Files hard-linked (sealed segments and their hint files).
    pub linked_files: u64,
    /// Bytes of the files hard-linked.
    pub linked_bytes: u64,
    /// Files copied.
    pub copied_files: u64,
    /// Bytes copied.
    pub copied_bytes: u64,
    /// How long writers were held (the cut).
    pub cut: Duration,
    /// How long the whole checkpoint took.
    pub took: Duration,
}

/// How the files of a copy are placed.
pub(crate) enum How<'a> {
    /// Sealed segments hard-linked from the store where the destination is on its file
    /// system; no checksums.
    Link,
    /// Every file copied from the store, checksummed — but a sealed segment (and its
    /// hint) that `base` holds byte for byte, which is hard-linked from `base`.
    Copy { base: Option<&'a dyn Base> },
}

/// An earlier copy that a backup may take files from.
pub(crate) trait Base {
    /// The directory of the earlier copy.
    fn dir(&self) -> &Path;
    /// Length and CRC-32C of the file at `rel` in it, if it holds one.
    fn file(&self, rel: &Path) -> Option<(u64, u32)>;
}

/// A file placed in the copy.
#[derive(Clone, Debug)]
pub(crate) struct Placed {
    /// Path relative to the copy's directory.
    pub rel: PathBuf,
    pub len: u64,
    /// CRC-32C of the whole file (when copying with checksums).
    pub crc: Option<u32>,
}

/// A directory a copy is made in, renamed to its destination once whole.
pub(crate) struct Staging {
    pub dir: PathBuf,
    dest: PathBuf,
}

impl Staging {
    /// Checks `dest` (absent, or an empty directory), clears what an interrupted copy to
    /// it left, and creates the staging directory with its marker.
    pub fn begin(fs: &Fs, dest: &Path) -> Result<Staging> {
        let dest = absolute(dest)?;
        let Some(name) = dest.file_name() else {
            return Err(Error::InvalidArgument(format!(
                "{} cannot be a checkpoint's destination",
                dest.display()
            )));
        };
        match std::fs::read_dir(&dest).map(|mut d| d.next().is_none()) {
            Ok(true) => {}
            Ok(false) => {
                return Err(Error::InvalidArgument(format!(
                    "{} exists and is not empty: a checkpoint goes to a new directory",
                    dest.display()
                )))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
                return Err(Error::InvalidArgument(format!(
                    "{} exists and is not a directory",
                    dest.display()
                )))
            }
            Err(e) => return Err(Error::io(&dest, e)),
        }
        let mut staged = name.to_owned();
        staged.push(".incomplete");
        let dir = dest.with_file_name(staged);
        if dir.exists() {
            if !dir.join(INCOMPLETE).exists() {
                return Err(Error::InvalidArgument(format!(
                    "{} exists and is not an interrupted checkpoint; remove it first",
                    dir.display()
                )));
            }
            std::fs::remove_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        }
        for parent in fs.create_dirs(&dir)? {
            fs.sync_dir(&parent)?;
        }
        let marker = dir.join(INCOMPLETE);
        let f = fs.create_new(&marker)?;
        fs.sync_data(&f, &marker)?;
        fs.sync_dir(&dir)?;
        Ok(Staging { dir, dest })
    }

    /// Makes the copy whole: syncs the staging directory, removes its marker and renames
    /// it to the destination.
    pub fn finish(self, fs: &Fs) -> Result<PathBuf> {
        fs.remove(&self.dir.join(INCOMPLETE))?;
        fs.sync_dir(&self.dir)?;
        if self.dest.is_dir() {
            // An empty directory (checked at the start) gives way to the copy.
            std::fs::remove_dir(&self.dest).map_err(|e| Error::io(&self.dest, e))?;
        }
        fs.rename(&self.dir, &self.dest)?;
        fs.sync_dir(fsutil::parent(&self.dest))?;
        Ok(self.dest)
    }
}

/// `p` made absolute against the working directory.
fn absolute(p: &Path) -> Result<PathBuf> {
    std::path::absolute(p).map_err(|e| Error::io(p, e))
}

/// One segment as the cut found it.
struct SegAtCut {
    shard: u32,
    file: Arc<SegmentFile>,
    /// Bytes of it in the copy: its data up to the cut.
    len: u64,
    /// Synced and hinted: it never changes again.
    sealed: bool,
    /// Bytes of it not (surely) in the file yet, by offset: a write in flight and the
    /// write buffer.
    overlays: Vec<(u64, Arc<Vec<u8>>)>,
}

/// What the cut saw.
struct Cut {
    segs: Vec<SegAtCut>,
    /// The number the next write takes.
    next: u64,
    seqstate: SeqState,
    held: Duration,
}

/// Makes a copy of the store `core` in `staging`, placing files as `how` says. Returns
/// the report and the files placed (the caller adds its own and finishes the staging).
pub(crate) fn copy_store(
    core: &Core,
    staging: &Staging,
    how: &How<'_>,
) -> Result<(CheckpointReport, Vec<Placed>)> {
    let start = Instant::now();
    if core.is_closed() {
        return Err(Error::Closed);
    }
    let fs = &core.fs;
    let link = matches!(how, How::Link) && same_device(&core.dir, &staging.dir)?;
    seal_active(core)?;
    // What the buffers hold goes to the kernel now, so that the cut copies little.
    core.write_out()?;
    let keep = core.removals.read();
    let cut = cut(core)?;
    let mut report = CheckpointReport {
        upto_seq: cut.next,
        cut: cut.held,
        ..CheckpointReport::default()
    };
    let mut placed = Vec::new();
    let shards = staging.dir.join("shards");
    fs.create_dirs(&shards)?;
    for i in 0..core.shards.len() as u32 {
        fs.create_dirs(&shard_dir(&staging.dir, i))?;
    }
    // A base on another file system cannot give links: its files are not compared.
    let base = match how {
        How::Copy { base: Some(b) } if same_device(b.dir(), &staging.dir)? => Some(*b),
        _ => None,
    };
    let placer = Placer {
        fs,
        src: &core.dir,
        dst: &staging.dir,
        link,
        base,
        how,
    };
    for seg in &cut.segs {
        placer.segment(seg, &mut report, &mut placed)?;
    }
    // Every segment the copy needs is in it: compaction may remove files again.
    drop(keep);
    for i in 0..core.shards.len() as u32 {
        fs.sync_dir(&shard_dir(&staging.dir, i))?;
    }
    fs.sync_dir(&shards)?;
    let mut seqstate = cut.seqstate;
    seqstate.watermark = seqstate.watermark.max(cut.next.saturating_sub(1));
    manifest::write_seqstate(fs, &staging.dir, &seqstate)?;
    let m = manifest::read_manifest(&core.dir)?;
    manifest::write_manifest(fs, &staging.dir, &m)?;
    if let How::Copy { .. } = how {
        for name in [manifest::SEQSTATE, manifest::MANIFEST] {
            let path = staging.dir.join(name);
            let bytes = fsutil::read_file(&path)?;
            placed.push(Placed {
                rel: PathBuf::from(name),
                len: bytes.len() as u64,
                crc: Some(crc32c::crc32c(&bytes)),
            });
        }
    }
    report.took = start.elapsed();
    Ok((report, placed))
}

/// Whether `a` and `b` are on one file system (a hard link between them can work).
fn same_device(a: &Path, b: &Path) -> Result<bool> {
    let dev = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.dev())
            .map_err(|e| Error::io(p, e))
    };
    Ok(dev(a)? == dev(b)?)
}

/// Rotates out and seals every active segment holding at least 1/8 of
/// `segment_size`: sealed, it is hard-linked rather than copied (and a later
/// incremental backup links it from this one), so a checkpoint copies at most that
/// much per shard, and the bytes it makes durable are the store's own.
fn seal_active(core: &Core) -> Result<()> {
    let min = core.opts.segment_size / 8;
    for sh in &core.shards {
        // Only the segment rotated here: a backlog of others waiting for the
        // maintenance thread would make the checkpoint as slow as it is long.
        if let Some(id) = sh.rotate_if_at_least(core, min)? {
            sh.seal(core, id)?;
        }
    }
    Ok(())
}

/// The cut (see the module documentation): every shard's write lock, in shard order,
/// held while each segment's length and in-memory bytes are noted.
fn cut(core: &Core) -> Result<Cut> {
    let start = Instant::now();
    let locks: Vec<RwLockWriteGuard<'_, ShardState>> =
        core.shards.iter().map(|s| s.state.write()).collect();
    if let Some(f) = locks.iter().find_map(|g| g.failed.clone()) {
        return Err(Error::ReadOnly(f));
    }
    let next = core.seqs.next();
    let mut segs = Vec::new();
    for (sh, st) in core.shards.iter().zip(&locks) {
        segs.extend(segments_at_cut(sh.id, st));
    }
    let seqstate = core.seqs.recorded();
    drop(locks);
    Ok(Cut {
        segs,
        next,
        seqstate,
        held: start.elapsed(),
    })
}

/// Shard `shard`'s segments as its state `st` has them.
fn segments_at_cut(shard: u32, st: &ShardState) -> Vec<SegAtCut> {
    st.segs
        .iter()
        .map(|(&id, m)| {
            let active = id == st.active.id;
            let mut overlays = Vec::new();
            if let Some(p) = st.pending.as_ref().filter(|p| p.seg == id) {
                overlays.push((p.start, p.data.clone()));
            }
            if active && !st.active.buf.is_empty() {
                overlays.push((st.active.buf_start, Arc::new(st.active.buf.clone())));
            }
            SegAtCut {
                shard,
                file: m.file.clone(),
                len: if active { st.active.end() } else { m.size },
                sealed: m.is_sealed() && !active,
                overlays,
            }
        })
        .collect()
}

/// Places the files of the segments the cut saw.
struct Placer<'a> {
    fs: &'a Fs,
    src: &'a Path,
    dst: &'a Path,
    /// Sealed segments are hard-linked from the store.
    link: bool,
    /// The earlier backup that files may be linked from (on the copy's file system).
    base: Option<&'a dyn Base>,
    how: &'a How<'a>,
}

impl Placer<'_> {
    /// Places one segment (and its hint file, if sealed).
    fn segment(
        &self,
        seg: &SegAtCut,
        report: &mut CheckpointReport,
        placed: &mut Vec<Placed>,
    ) -> Result<()> {
        let rel_dir = PathBuf::from("shards").join(format!("{:04}", seg.shard));
        let rel_seg = rel_dir.join(file_name(&segment::seg_path(Path::new(""), seg.file.id)));
        let rel_hint = rel_dir.join(file_name(&segment::hint_path(Path::new(""), seg.file.id)));
        if !seg.sealed {
            let crc = self.copy_unsealed(seg, &rel_seg)?;
            report.copied_files += 1;
            report.copied_bytes += seg.len;
            placed.push(Placed {
                rel: rel_seg,
                len: seg.len,
                crc,
            });
            return Ok(());
        }
        for rel in [rel_seg, rel_hint] {
            let src = self.src.join(&rel);
            let p = self.whole(&src, &rel)?;
            match p.1 {
                true => {
                    report.linked_files += 1;
                    report.linked_bytes += p.0.len;
                }
                false => {
                    report.copied_files += 1;
                    report.copied_bytes += p.0.len;
                }
            }
            placed.push(p.0);
        }
        Ok(())
    }

    /// Copies a segment not sealed: its file up to the cut's length, the bytes the cut
    /// held in memory written over it; synced. Returns its checksum when copying with
    /// checksums.
    fn copy_unsealed(&self, seg: &SegAtCut, rel: &Path) -> Result<Option<u32>> {
        let path = self.dst.join(rel);
        let f = self.fs.create_new(&path)?;
        let got = self.fs.copy_range(&seg.file.file, &f, &path, seg.len)?;
        let mut end = got;
        for (off, bytes) in &seg.overlays {
            let keep = (seg.len.saturating_sub(*off) as usize).min(bytes.len());
            self.fs.write_at(&f, &path, &bytes[..keep], *off)?;
            end = end.max(off + keep as u64);
        }
        if end < seg.len {
            return Err(Error::corruption(
                &seg.file.path,
                format!(
                    "segment holds {end} bytes, its shard counts {} (checkpoint)",
                    seg.len
                ),
            ));
        }
        self.fs.sync_data(&f, &path)?;
        Ok(match self.how {
            How::Copy { .. } => Some(file_crc(&f, &path, seg.len)?),
            How::Link => None,
        })
    }

    /// Places the whole immutable file `src` at `rel`: a hard link from the store, a
    /// hard link from the base backup that holds it byte for byte, or a copy. Returns
    /// what was placed and whether it was linked.
    fn whole(&self, src: &Path, rel: &Path) -> Result<(Placed, bool)> {
        let dst = self.dst.join(rel);
        let file = File::open(src).map_err(|e| Error::io(src, e))?;
        let len = file.metadata().map_err(|e| Error::io(src, e))?.len();
        if self.link {
            self.fs.hard_link(src, &dst)?;
            let p = Placed {
                rel: rel.to_owned(),
                len,
                crc: None,
            };
            return Ok((p, true));
        }
        if let Some(b) = self
            .base
            .filter(|b| b.file(rel).is_some_and(|(l, _)| l == len))
        {
            let crc = file_crc(&file, src, len)?;
            if b.file(rel) == Some((len, crc)) {
                self.fs.hard_link(&b.dir().join(rel), &dst)?;
                let p = Placed {
                    rel: rel.to_owned(),
                    len,
                    crc: Some(crc),
                };
                return Ok((p, true));
            }
        }
        let f = self.fs.create_new(&dst)?;
        let got = self.fs.copy_range(&file, &f, &dst, len)?;
        if got != len {
            return Err(Error::corruption(
                src,
                format!("file shrank from {len} to {got} bytes while it was copied"),
            ));
        }
        self.fs.sync_data(&f, &dst)?;
        let crc = match self.how {
            How::Copy { .. } => Some(file_crc(&f, &dst, len)?),
            How::Link => None,
        };
        let p = Placed {
            rel: rel.to_owned(),
            len,
            crc,
        };
        Ok((p, false))
    }
}

/// The last component of `p`.
fn file_name(p: &Path) -> &std::ffi::OsStr {
    p.file_name().unwrap_or_default()
}

/// CRC-32C of the first `len` bytes of `file`.
pub(crate) fn file_crc(file: &File, path: &Path, len: u64) -> Result<u32> {
    let mut crc = 0u32;
    let got = fsutil::copy_through_buffer(
        file,
        |buf, _| {
            crc = crc32c::crc32c_append(crc, buf);
            Ok(())
        },
        len,
    )
    .map_err(|e| Error::io(path, e))?;
    if got != len {
        return Err(Error::corruption(
            path,
            format!("file holds {got} bytes, {len} expected"),
        ));
    }
    Ok(crc)
}
