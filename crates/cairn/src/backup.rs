//! Backups: a checkpoint whose every file is copied (not linked to the store) and
//! listed, with its length and CRC-32C, in a `BACKUP` file; incremental against an
//! earlier backup, from which the sealed segments it holds byte for byte are
//! hard-linked instead of copied; checked file by file and record by record
//! ([`verify`]); restored by copying ([`restore`]).
//!
//! A backup directory is a store directory (`Db::open` opens it), but opening it for
//! writing changes it — and the files it shares with other backups by hard links — so
//! it is restored to a directory of its own, or opened with `Options::read_only`.
//!
//! ```
//! # let tmp = tempfile::tempdir().unwrap();
//! let db = cairn::Db::open(tmp.path().join("db"))?;
//! db.put("k", "v")?;
//! db.backup(tmp.path().join("monday"), None)?;
//! db.put("k", "w")?;
//! // Only what changed since Monday is copied; the rest is linked from it.
//! db.backup(tmp.path().join("tuesday"), Some(&tmp.path().join("monday")))?;
//! assert!(cairn::backup::verify(tmp.path().join("tuesday"))?.is_clean());
//! cairn::backup::restore(tmp.path().join("monday"), tmp.path().join("restored"))?;
//! let old = cairn::Db::open(tmp.path().join("restored"))?;
//! assert_eq!(old.get("k")?.as_deref(), Some(&b"v"[..]));
//! # Ok::<(), cairn::Error>(())
//! ```

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::checkpoint::{self, Base, CheckpointReport, How, Placed, Staging};
use crate::damage::Damage;
use crate::fsutil::{self, Fs};
use crate::record::mask;
use crate::{Error, Result};

/// The file listing a backup's files.
pub const BACKUP_FILE: &str = "BACKUP";

const BACKUP_MAGIC: &[u8; 8] = b"CAIRNBAK";
const BACKUP_VERSION: u32 = 1;

/// What a backup's `BACKUP` file says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupList {
    /// The backup holds every write numbered below this, and no later one.
    pub upto_seq: u64,
    /// When it was made, in seconds since the Unix epoch.
    pub made_at: u64,
    /// Each file (path relative to the backup, '/'-separated) with its length and
    /// CRC-32C.
    pub files: BTreeMap<String, (u64, u32)>,
}

impl BackupList {
    /// Reads the `BACKUP` file of the backup in `dir`.
    pub fn read(dir: &Path) -> Result<BackupList> {
        let path = dir.join(BACKUP_FILE);
        if !path.exists() && dir.is_dir() {
            return Err(Error::InvalidArgument(format!(
                "{} is not a backup: it has no {BACKUP_FILE} list",
                dir.display()
            )));
        }
        let b = fsutil::read_file(&path)?;
        decode(&path, &b)
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(BACKUP_MAGIC);
        b.extend_from_slice(&BACKUP_VERSION.to_le_bytes());
        b.extend_from_slice(&self.upto_seq.to_le_bytes());
        b.extend_from_slice(&self.made_at.to_le_bytes());
        b.extend_from_slice(&(self.files.len() as u32).to_le_bytes());
        for (name, (len, crc)) in &self.files {
            b.extend_from_slice(&(name.len() as u16).to_le_bytes());
            b.extend_from_slice(name.as_bytes());
            b.extend_from_slice(&len.to_le_bytes());
            b.extend_from_slice(&crc.to_le_bytes());
        }
        let crc = mask(crc32c::crc32c(&b));
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }
}

/// Decodes a `BACKUP` file's bytes (FORMAT.md, "Backup list").
fn decode(path: &Path, b: &[u8]) -> Result<BackupList> {
    let bad = |what: &str| Error::corruption(path, format!("backup list: {what}"));
    if b.len() < 32 || &b[..8] != BACKUP_MAGIC {
        return Err(bad("not a backup list (bad magic or too short)"));
    }
    let (body, tail) = b.split_at(b.len() - 4);
    if mask(crc32c::crc32c(body)) != u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]) {
        return Err(bad("checksum mismatch"));
    }
    let mut r = Reader { b: body, at: 8 };
    let version = r.u32().ok_or_else(|| bad("truncated"))?;
    if version != BACKUP_VERSION {
        return Err(Error::format(
            path,
            format!("backup list version {version}; this build reads {BACKUP_VERSION}"),
        ));
    }
    let upto_seq = r.u64().ok_or_else(|| bad("truncated"))?;
    let made_at = r.u64().ok_or_else(|| bad("truncated"))?;
    let n = r.u32().ok_or_else(|| bad("truncated"))?;
    let mut files = BTreeMap::new();
    for _ in 0..n {
        let len = r.u16().ok_or_else(|| bad("truncated"))? as usize;
        let name = r.take(len).ok_or_else(|| bad("truncated"))?;
        let name = std::str::from_utf8(name).map_err(|_| bad("a file name is not UTF-8"))?;
        if !safe_name(name) {
            return Err(bad(&format!("file name {name:?} leaves the backup")));
        }
        let size = r.u64().ok_or_else(|| bad("truncated"))?;
        let crc = r.u32().ok_or_else(|| bad("truncated"))?;
        files.insert(name.to_owned(), (size, crc));
    }
    if r.at != body.len() {
        return Err(bad("bytes after the last file"));
    }
    Ok(BackupList {
        upto_seq,
        made_at,
        files,
    })
}

/// Whether `name` is a relative path that stays inside the backup.
fn safe_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('/')
        && name
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|s| u16::from_le_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn u64(&mut self) -> Option<u64> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Some(u64::from_le_bytes(a))
    }
}

/// An earlier backup as the base of an incremental one.
struct BaseBackup {
    dir: PathBuf,
    list: BackupList,
}

impl Base for BaseBackup {
    fn dir(&self) -> &Path {
        &self.dir
    }

    fn file(&self, rel: &Path) -> Option<(u64, u32)> {
        self.list.files.get(&rel_name(rel)).copied()
    }
}

/// `rel` as the backup list names it ('/'-separated).
fn rel_name(rel: &Path) -> String {
    rel.iter()
        .map(|c| c.to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// Makes a backup of the store `core` in `dest` (see [`crate::Db::backup`]).
pub(crate) fn backup(db: &crate::Db, dest: &Path, base: Option<&Path>) -> Result<CheckpointReport> {
    let core = db.core();
    let base = match base {
        Some(dir) => Some(BaseBackup {
            list: BackupList::read(dir)?,
            dir: std::path::absolute(dir).map_err(|e| Error::io(dir, e))?,
        }),
        None => None,
    };
    let fs = &core.fs;
    let staging = Staging::begin(fs, dest)?;
    let how = How::Copy {
        base: base.as_ref().map(|b| b as &dyn Base),
    };
    let made = match db.is_read_only() {
        // The store is another process's: a copy of the view, every file listed.
        true => checkpoint::copy_view(db, &staging)
            .and_then(|r| Ok((r, placed_files(&staging.dir, Path::new(""))?))),
        false => checkpoint::copy_store(core, &staging, &how),
    };
    let (report, placed) = match made {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging.dir);
            return Err(e);
        }
    };
    let list = BackupList {
        upto_seq: report.upto_seq,
        made_at: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        files: listed(&placed)?,
    };
    fs.write_atomic(&staging.dir.join(BACKUP_FILE), &list.encode())?;
    staging.finish(fs)?;
    Ok(report)
}

/// Every file under `root.join(rel)`, with its length and CRC-32C.
fn placed_files(root: &Path, rel: &Path) -> Result<Vec<Placed>> {
    let dir = root.join(rel);
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
        let e = e.map_err(|e| Error::io(&dir, e))?;
        let r = rel.join(e.file_name());
        if e.file_type().map_err(|err| Error::io(&dir, err))?.is_dir() {
            out.extend(placed_files(root, &r)?);
        } else if e.file_name() != checkpoint::INCOMPLETE {
            let path = root.join(&r);
            let f = File::open(&path).map_err(|err| Error::io(&path, err))?;
            let len = f.metadata().map_err(|err| Error::io(&path, err))?.len();
            let crc = checkpoint::file_crc(&f, &path, len)?;
            out.push(Placed {
                rel: r,
                len,
                crc: Some(crc),
            });
        }
    }
    Ok(out)
}

/// The backup list's files from what the copy placed.
fn listed(placed: &[Placed]) -> Result<BTreeMap<String, (u64, u32)>> {
    placed
        .iter()
        .map(|p| match p.crc {
            Some(crc) => Ok((rel_name(&p.rel), (p.len, crc))),
            None => Err(Error::InvalidArgument(format!(
                "{} was placed without a checksum",
                p.rel.display()
            ))),
        })
        .collect()
}

/// What [`verify`] found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BackupReport {
    /// The backup holds every write numbered below this.
    pub upto_seq: u64,
    /// Files whose length and checksum were checked against the backup list.
    pub files_checked: u64,
    /// Their bytes.
    pub bytes_checked: u64,
    /// Intact records read (every segment scanned).
    pub records_checked: u64,
    /// Every damaged, missing or unexpected file or record.
    pub damage: Vec<Damage>,
}

impl BackupReport {
    /// True when no damage was found.
    pub fn is_clean(&self) -> bool {
        self.damage.is_empty()
    }
}

/// Checks the backup in `dir`: every file its list names is there with its length and
/// CRC-32C, no other file is, and every record of every segment is intact (each
/// segment scanned, its hint file compared with it). Reads everything; writes nothing.
pub fn verify(dir: impl AsRef<Path>) -> Result<BackupReport> {
    let dir = dir.as_ref();
    let list = BackupList::read(dir)?;
    let mut report = BackupReport {
        upto_seq: list.upto_seq,
        ..BackupReport::default()
    };
    for (name, &(len, crc)) in &list.files {
        let path = dir.join(name);
        match check_file(&path, len, crc) {
            Ok(()) => {
                report.files_checked += 1;
                report.bytes_checked += len;
            }
            Err(detail) => report.damage.push(Damage {
                path,
                offset: None,
                detail,
            }),
        }
    }
    for extra in unlisted(dir, &list)? {
        report.damage.push(Damage {
            path: dir.join(&extra),
            offset: None,
            detail: "file is not in the backup list (the backup was written to?)".into(),
        });
    }
    crate::verify::verify_dir(dir, &mut report.records_checked, &mut report.damage)?;
    Ok(report)
}

/// Checks one listed file; the mismatch as a sentence.
fn check_file(path: &Path, len: u64, crc: u32) -> std::result::Result<(), String> {
    let f = File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    let have = f.metadata().map_err(|e| e.to_string())?.len();
    if have != len {
        return Err(format!("{have} bytes, the backup list says {len}"));
    }
    match checkpoint::file_crc(&f, path, len) {
        Ok(c) if c == crc => Ok(()),
        Ok(c) => Err(format!(
            "CRC-32C {c:08x}, the backup list says {crc:08x}: the file changed or is damaged"
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// Files under `dir` that the list does not name (the list itself aside).
fn unlisted(dir: &Path, list: &BackupList) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let d = dir.join(&rel);
        for e in std::fs::read_dir(&d).map_err(|e| Error::io(&d, e))? {
            let e = e.map_err(|e| Error::io(&d, e))?;
            let r = rel.join(e.file_name());
            if e.file_type().map_err(|err| Error::io(&d, err))?.is_dir() {
                stack.push(r);
            } else {
                let name = rel_name(&r);
                if name != BACKUP_FILE && !list.files.contains_key(&name) {
                    out.push(name);
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Restores the backup in `backup` to the new store directory `dir` (absent, or
/// empty): checks every file against the backup list, copies them (sharing blocks
/// where the file system can), and syncs, so that `dir` is a store of its own that
/// shares nothing with the backup. A crash leaves `dir` whole or absent.
pub fn restore(backup: impl AsRef<Path>, dir: impl AsRef<Path>) -> Result<()> {
    let (backup, dir) = (backup.as_ref(), dir.as_ref());
    let list = BackupList::read(backup)?;
    let fs = Fs::default();
    let staging = Staging::begin(&fs, dir)?;
    let res = copy_listed(&fs, backup, &staging.dir, &list);
    if let Err(e) = res {
        let _ = std::fs::remove_dir_all(&staging.dir);
        return Err(e);
    }
    staging.finish(&fs)?;
    Ok(())
}

/// Copies every file of `list` from `backup` to `to`, checking each; syncs them and
/// every directory under `to`.
fn copy_listed(fs: &Fs, backup: &Path, to: &Path, list: &BackupList) -> Result<()> {
    for (name, &(len, crc)) in &list.files {
        let src = backup.join(name);
        check_file(&src, len, crc).map_err(|d| Error::corruption(&src, d))?;
        let dst = to.join(name);
        fs.create_dirs(fsutil::parent(&dst))?;
        let from = File::open(&src).map_err(|e| Error::io(&src, e))?;
        let f = fs.create_new(&dst)?;
        if fs.copy_range(&from, &f, &dst, len)? != len {
            return Err(Error::corruption(&src, "file shrank while it was copied"));
        }
        fs.sync_data(&f, &dst)?;
    }
    sync_tree(fs, to)
}

/// Syncs every directory under `dir`, the deepest first, then `dir`.
fn sync_tree(fs: &Fs, dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let e = e.map_err(|e| Error::io(dir, e))?;
        if e.file_type().map_err(|err| Error::io(dir, err))?.is_dir() {
            sync_tree(fs, &e.path())?;
        }
    }
    fs.sync_dir(dir)
}
