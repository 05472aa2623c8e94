//! Simulated power loss, for tests: what a real disk could still lose, and the rewrite
//! of the store's files to one state the disk could be left in after a power cut.
//!
//! With [`crate::Options::power_loss`], every file write, sync, create, rename, removal,
//! truncation and directory creation of the store goes through a [`PowerLoss`]
//! (`fsutil::Fs` calls it), which does the operation and remembers:
//! - per file (by inode), every change made since its last `fsync`/`fdatasync`, with the
//!   bytes it overwrote or cut off;
//! - per directory, every entry created, renamed or removed since the directory's last
//!   `fsync` (a removed or replaced file keeps a hard link in a stash directory, so that
//!   its removal can be undone).
//!
//! Syncs are not passed to the kernel: what is durable is what the record says. The
//! power goes off at [`PowerLoss::cut`], or at the operation [`PowerLoss::cut_after`]
//! counted to: that operation and every later one fails with `EIO` and does nothing.
//! Once every store using it is dropped, [`PowerLoss::restart`] rewrites the files and
//! directories to a state a disk could show after the cut ([`Loss`] says which kind),
//! chosen by a seed, so that a failing cut can be replayed.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use parking_lot::{Mutex, MutexGuard};

use crate::fsutil::FileOps;

/// The unit a disk writes atomically in this simulation (a page of the page cache).
pub const PAGE: u64 = 4096;

/// What survives of the changes that were not synced when the power went off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Loss {
    /// Nothing unsynced: every file holds what it held at its last sync, every
    /// directory the entries it had at its last sync.
    Unsynced,
    /// Each file keeps its unsynced writes up to some point, in the order they were
    /// made (possibly all, possibly none), and each directory its unsynced entry changes
    /// up to some point: what a disk that writes back in order keeps.
    Prefix,
    /// Like `Prefix`, and the first write a file loses may survive up to a 4 KiB
    /// boundary inside it (a write torn between pages).
    Torn,
    /// Each 4 KiB page that unsynced writes touched is kept or lost on its own (the
    /// kernel wrote dirty pages back in any order); a lost page inside the file's new
    /// length but past its synced length reads as zeros. Directories as in `Prefix`.
    Reordered,
}

impl Loss {
    /// Every kind of loss.
    pub const ALL: [Loss; 4] = [Loss::Unsynced, Loss::Prefix, Loss::Torn, Loss::Reordered];

    /// Whether the unsynced writes of each file that survive are a prefix of them (true
    /// for every kind but `Reordered`).
    pub fn in_order(self) -> bool {
        self != Loss::Reordered
    }
}

/// What [`PowerLoss::restart`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Restart {
    /// File operations done before the cut.
    pub ops: u64,
    /// Files with unsynced changes.
    pub files: usize,
    /// Unsynced changes kept whole.
    pub kept: usize,
    /// Unsynced changes lost.
    pub lost: usize,
    /// Writes kept in part (`Loss::Torn`).
    pub torn: usize,
    /// Dirty pages kept and lost (`Loss::Reordered`).
    pub pages: (usize, usize),
    /// Unsynced directory entry changes kept and undone.
    pub entries: (usize, usize),
    /// What happened to each file and directory with unsynced changes, one line each
    /// (for a failing test's message).
    pub detail: Vec<String>,
}

impl std::fmt::Display for Restart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ops before the cut; {} files with unsynced changes: {} kept, {} lost, {} torn, \
             pages {} kept {} lost; directory entries {} kept, {} undone",
            self.ops,
            self.files,
            self.kept,
            self.lost,
            self.torn,
            self.pages.0,
            self.pages.1,
            self.entries.0,
            self.entries.1
        )
    }
}

/// The seeds a power-loss test runs: the one `CAIRN_POWER_SEED` names (to replay a
/// failure), else `CAIRN_POWER_CUTS` of them (`default` when unset) counted from `base`.
/// Shared by the power-loss tests of every layer.
pub fn seeds(base: u64, default: u64) -> Vec<u64> {
    if let Some(s) = std::env::var("CAIRN_POWER_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return vec![s];
    }
    let n = std::env::var("CAIRN_POWER_CUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    (base..base + n).collect()
}

/// One unsynced change of a file.
enum Change {
    Write { off: u64, data: Vec<u8> },
    SetLen(u64),
}

struct Unsynced {
    change: Change,
    /// The file's length before the change.
    old_len: u64,
    /// The bytes the change overwrote (a write, from its offset) or cut off (a
    /// truncation, from the new length).
    old: Vec<u8>,
}

impl Unsynced {
    /// Undoes the change in `buf` (the file's content right after it).
    fn undo(&self, buf: &mut Vec<u8>) {
        let at = match self.change {
            Change::Write { off, .. } => off,
            Change::SetLen(len) => len,
        } as usize;
        if buf.len() < at + self.old.len() {
            buf.resize(at + self.old.len(), 0);
        }
        buf[at..at + self.old.len()].copy_from_slice(&self.old);
        buf.resize(self.old_len as usize, 0);
    }

    /// Redoes the change in `buf`, a write only up to `upto` bytes of its data.
    fn redo(&self, buf: &mut Vec<u8>, upto: usize) {
        match &self.change {
            Change::Write { off, data } => {
                let (off, data) = (*off as usize, &data[..upto.min(data.len())]);
                if buf.len() < off + data.len() {
                    buf.resize(off + data.len(), 0);
                }
                buf[off..off + data.len()].copy_from_slice(data);
            }
            Change::SetLen(len) => buf.resize(*len as usize, 0),
        }
    }
}

/// A file the record knows.
struct Node {
    /// Where the file is now: its name, or its link in the stash once removed or
    /// replaced.
    path: PathBuf,
    /// Changes since its last sync, oldest first.
    log: Vec<Unsynced>,
}

impl Entry {
    fn describe(&self) -> String {
        match self {
            Entry::Created(n) => format!("create {}", n.to_string_lossy()),
            Entry::MadeDir(n) => format!("mkdir {}", n.to_string_lossy()),
            Entry::Removed { name, .. } => format!("remove {}", name.to_string_lossy()),
            Entry::Renamed { from, to, .. } => format!(
                "rename {} to {}",
                from.to_string_lossy(),
                to.to_string_lossy()
            ),
        }
    }
}

/// An unsynced change of a directory's entries.
enum Entry {
    /// A file was created.
    Created(OsString),
    /// A directory was created.
    MadeDir(OsString),
    /// A file was removed; `stash` links to it.
    Removed { name: OsString, stash: PathBuf },
    /// A file was renamed within the directory, replacing the file `replaced` now links
    /// to, if any.
    Renamed {
        from: OsString,
        to: OsString,
        replaced: Option<PathBuf>,
    },
}

#[derive(Default)]
struct State {
    stash: PathBuf,
    stashed: u64,
    /// File operations so far.
    ops: u64,
    /// The operation numbered above this one finds the power off.
    cut_at: Option<u64>,
    cut: bool,
    nodes: Vec<Node>,
    by_ino: HashMap<(u64, u64), usize>,
    /// Unsynced entry changes by directory: (global order, change).
    dirs: BTreeMap<PathBuf, Vec<(u64, Entry)>>,
    changes: u64,
}

/// A record of what the store's files could still lose, and the power switch (see the
/// module documentation). Test hook: pass it to [`crate::Options::power_loss`].
///
/// ```
/// use std::sync::Arc;
/// use cairn::fault::{Loss, PowerLoss};
/// # let tmp = tempfile::tempdir().unwrap();
/// let power = Arc::new(PowerLoss::new(tmp.path().join("stash"))?);
/// let dir = tmp.path().join("db");
/// let db = cairn::Options::new().power_loss(power.clone()).open(&dir)?;
/// db.put("synced", "1")?;
/// db.flush()?;
/// db.put("not synced", "2")?;
/// power.cut();
/// drop(db);
/// power.restart(Loss::Unsynced, 7)?;
/// let db = cairn::Db::open(&dir)?;
/// assert!(db.get("synced")?.is_some());
/// assert!(db.get("not synced")?.is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PowerLoss {
    state: Mutex<State>,
}

impl std::fmt::Debug for PowerLoss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.lock();
        f.debug_struct("PowerLoss")
            .field("ops", &st.ops)
            .field("cut", &st.cut)
            .finish()
    }
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

fn name_of(path: &Path) -> io::Result<(PathBuf, OsString)> {
    match (path.parent(), path.file_name()) {
        (Some(p), Some(n)) => {
            let p = if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            };
            Ok((p.to_owned(), n.to_owned()))
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: no file name", path.display()),
        )),
    }
}

/// splitmix64: a small, good generator for the seeded choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

impl PowerLoss {
    /// A record with the power on. `stash` (created if missing) holds links to removed
    /// and replaced files until their removal is durable; it must be on the same file
    /// system as the store, and nothing else may use it.
    pub fn new(stash: impl Into<PathBuf>) -> io::Result<PowerLoss> {
        let stash = stash.into();
        fs::create_dir_all(&stash)?;
        Ok(PowerLoss {
            state: Mutex::new(State {
                stash,
                ..State::default()
            }),
        })
    }

    /// Turns the power off now: every later file operation fails with `EIO` and does
    /// nothing.
    pub fn cut(&self) {
        self.state.lock().cut = true;
    }

    /// Turns the power off at the file operation after the next `n` ones (`0`: the next
    /// one fails).
    pub fn cut_after(&self, n: u64) {
        let mut st = self.state.lock();
        st.cut_at = Some(st.ops + n);
    }

    /// Whether the power is off.
    pub fn is_cut(&self) -> bool {
        self.state.lock().cut
    }

    /// File operations done so far (since creation or the last restart).
    pub fn ops(&self) -> u64 {
        self.state.lock().ops
    }

    /// Rewrites the files to a state a disk could show after the power cut: synced
    /// content and directory entries are kept; of the rest, what `loss` says, chosen by
    /// `seed`. Cuts the power first if it is still on. Call it once every store using
    /// this record is dropped (no thread may still use the files). Afterwards the
    /// power is on again, everything on disk counts as synced, and the record can
    /// serve the next run.
    pub fn restart(&self, loss: Loss, seed: u64) -> io::Result<Restart> {
        let mut st = self.state.lock();
        st.cut = true;
        let mut rng = Rng(seed ^ 0x5eed_0fc0_ffee);
        let mut report = Restart {
            ops: st.ops,
            ..Restart::default()
        };
        for node in st.nodes.iter().filter(|n| !n.log.is_empty()) {
            report.files += 1;
            let before = report.clone();
            restore_file(node, loss, &mut rng, &mut report)?;
            report.detail.push(format!(
                "{}: {} changes, {} kept, {} lost, {} torn, pages {} kept {} lost",
                node.path.display(),
                node.log.len(),
                report.kept - before.kept,
                report.lost - before.lost,
                report.torn - before.torn,
                report.pages.0 - before.pages.0,
                report.pages.1 - before.pages.1
            ));
        }
        // Directory entries: each directory keeps its unsynced changes up to a point;
        // the rest are undone, newest first over all directories.
        let mut undo: Vec<(u64, &Path, &Entry)> = Vec::new();
        for (dir, log) in &st.dirs {
            let keep = match loss {
                Loss::Unsynced => 0,
                _ => rng.below(log.len() as u64 + 1) as usize,
            };
            report.entries.0 += keep;
            report.entries.1 += log.len() - keep;
            for (i, (_, e)) in log.iter().enumerate() {
                report.detail.push(format!(
                    "{}: {} {}",
                    dir.display(),
                    if i < keep { "kept" } else { "undone" },
                    e.describe()
                ));
            }
            undo.extend(log[keep..].iter().map(|(n, e)| (*n, dir.as_path(), e)));
        }
        undo.sort_by_key(|u| std::cmp::Reverse(u.0));
        for (_, dir, e) in undo {
            undo_entry(dir, e)?;
        }
        let stash = std::mem::take(&mut st.stash);
        for ent in fs::read_dir(&stash)? {
            fs::remove_file(ent?.path())?;
        }
        *st = State {
            stash,
            ..State::default()
        };
        Ok(report)
    }

    /// Counts an operation; fails when the power is (now) off.
    fn begin(&self) -> io::Result<MutexGuard<'_, State>> {
        let mut st = self.state.lock();
        st.ops += 1;
        if st.cut_at.is_some_and(|c| st.ops > c) {
            st.cut = true;
        }
        if st.cut {
            return Err(eio());
        }
        Ok(st)
    }

    /// `pwrite` of all of `buf` at `off`.
    pub(crate) fn write_at(
        &self,
        file: &File,
        path: &Path,
        buf: &[u8],
        off: u64,
    ) -> io::Result<()> {
        let mut st = self.begin()?;
        let node = st.node_of(file, path)?;
        let old_len = file.metadata()?.len();
        let old = if off < old_len {
            let mut v = vec![0u8; (old_len - off).min(buf.len() as u64) as usize];
            file.read_exact_at(&mut v, off)?;
            v
        } else {
            Vec::new()
        };
        let res = file.write_all_at(buf, off);
        st.nodes[node].log.push(Unsynced {
            change: Change::Write {
                off,
                data: buf.to_vec(),
            },
            old_len,
            old,
        });
        res
    }

    /// `ftruncate`.
    pub(crate) fn set_len(&self, file: &File, path: &Path, len: u64) -> io::Result<()> {
        let mut st = self.begin()?;
        let node = st.node_of(file, path)?;
        let old_len = file.metadata()?.len();
        let old = if len < old_len {
            let mut v = vec![0u8; (old_len - len) as usize];
            file.read_exact_at(&mut v, len)?;
            v
        } else {
            Vec::new()
        };
        file.set_len(len)?;
        st.nodes[node].log.push(Unsynced {
            change: Change::SetLen(len),
            old_len,
            old,
        });
        Ok(())
    }

    /// `fsync`/`fdatasync` of a file: its content and length are durable.
    pub(crate) fn sync_file(&self, file: &File, path: &Path) -> io::Result<()> {
        let mut st = self.begin()?;
        let node = st.node_of(file, path)?;
        st.nodes[node].log.clear();
        Ok(())
    }

    /// `fsync` of a directory: its entries are durable.
    pub(crate) fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.begin()?;
        fs::metadata(dir)?;
        let log = st.dirs.remove(dir).unwrap_or_default();
        for (_, e) in log {
            let gone = match e {
                Entry::Removed { stash, .. } => Some(stash),
                Entry::Renamed { replaced, .. } => replaced,
                _ => None,
            };
            // The file is gone for good: forget it, and let its inode go.
            if let Some(stash) = gone {
                let meta = fs::symlink_metadata(&stash)?;
                if let Some(n) = st.by_ino.remove(&(meta.dev(), meta.ino())) {
                    st.nodes[n].log.clear();
                }
                fs::remove_file(&stash)?;
            }
        }
        Ok(())
    }

    /// Creates a new file for reading and writing (fails if it exists).
    pub(crate) fn create_new(&self, path: &Path) -> io::Result<File> {
        let mut st = self.begin()?;
        let (dir, name) = name_of(path)?;
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        let meta = f.metadata()?;
        let n = st.nodes.len();
        st.nodes.push(Node {
            path: path.to_owned(),
            log: Vec::new(),
        });
        st.by_ino.insert((meta.dev(), meta.ino()), n);
        st.log_entry(dir, Entry::Created(name));
        Ok(f)
    }

    /// Creates one directory (its parent must exist).
    pub(crate) fn create_dir(&self, path: &Path) -> io::Result<()> {
        let mut st = self.begin()?;
        let (dir, name) = name_of(path)?;
        fs::create_dir(path)?;
        st.log_entry(dir, Entry::MadeDir(name));
        Ok(())
    }

    /// Renames `from` to `to`, in the same directory, replacing `to` if it exists.
    pub(crate) fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.begin()?;
        let (dir, from_name) = name_of(from)?;
        let (to_dir, to_name) = name_of(to)?;
        if dir != to_dir {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "power-loss simulation: rename across directories",
            ));
        }
        let moved = fs::symlink_metadata(from)?;
        let replaced = match fs::symlink_metadata(to) {
            Ok(_) => Some(st.stash_link(to)?),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        if let Err(e) = fs::rename(from, to) {
            if let Some(s) = &replaced {
                let _ = fs::remove_file(s);
            }
            return Err(e);
        }
        if let Some(&n) = st.by_ino.get(&(moved.dev(), moved.ino())) {
            st.nodes[n].path = to.to_owned();
        }
        st.log_entry(
            dir,
            Entry::Renamed {
                from: from_name,
                to: to_name,
                replaced,
            },
        );
        Ok(())
    }

    /// Makes `dst` a new name of the file at `src`: a new entry of `dst`'s directory,
    /// undone if that directory was not synced since. The file's content is the one
    /// `src` names (its unsynced changes stay recorded on its node).
    pub(crate) fn hard_link(&self, src: &Path, dst: &Path) -> io::Result<()> {
        let mut st = self.begin()?;
        let (dir, name) = name_of(dst)?;
        fs::hard_link(src, dst)?;
        st.log_entry(dir, Entry::Created(name));
        Ok(())
    }

    /// Removes a file; a missing file is not an error.
    pub(crate) fn remove(&self, path: &Path) -> io::Result<()> {
        let mut st = self.begin()?;
        let (dir, name) = name_of(path)?;
        match fs::symlink_metadata(path) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        }
        let stash = st.stash_link(path)?;
        if let Err(e) = fs::remove_file(path) {
            let _ = fs::remove_file(&stash);
            return Err(e);
        }
        st.log_entry(dir, Entry::Removed { name, stash });
        Ok(())
    }
}

impl State {
    /// The node of an open file, created (as a file synced so far) on first sight.
    fn node_of(&mut self, file: &File, path: &Path) -> io::Result<usize> {
        let meta = file.metadata()?;
        Ok(self.node_at(meta.dev(), meta.ino(), path))
    }

    fn node_at(&mut self, dev: u64, ino: u64, path: &Path) -> usize {
        if let Some(&n) = self.by_ino.get(&(dev, ino)) {
            return n;
        }
        let n = self.nodes.len();
        self.nodes.push(Node {
            path: path.to_owned(),
            log: Vec::new(),
        });
        self.by_ino.insert((dev, ino), n);
        n
    }

    /// Links the file at `path` into the stash (it is about to lose its name); its node
    /// now lives there.
    fn stash_link(&mut self, path: &Path) -> io::Result<PathBuf> {
        let meta = fs::symlink_metadata(path)?;
        self.stashed += 1;
        let stash = self.stash.join(format!("{}", self.stashed));
        fs::hard_link(path, &stash)?;
        let n = self.node_at(meta.dev(), meta.ino(), path);
        self.nodes[n].path = stash.clone();
        Ok(stash)
    }

    fn log_entry(&mut self, dir: PathBuf, e: Entry) {
        self.changes += 1;
        let n = self.changes;
        self.dirs.entry(dir).or_default().push((n, e));
    }
}

/// Rewrites one file with unsynced changes to what survives of them.
fn restore_file(node: &Node, loss: Loss, rng: &mut Rng, report: &mut Restart) -> io::Result<()> {
    let current = fs::read(&node.path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("power-loss simulation: {}: {e}", node.path.display()),
        )
    })?;
    let mut durable = current.clone();
    for u in node.log.iter().rev() {
        u.undo(&mut durable);
    }
    let n = node.log.len();
    let truncates = node
        .log
        .iter()
        .any(|u| matches!(u.change, Change::SetLen(_)));
    let out = match loss {
        Loss::Reordered if !truncates => {
            // Every dirty page independently as it is now or as it was synced.
            let mut pages: Vec<u64> = Vec::new();
            for u in &node.log {
                if let Change::Write { off, data } = &u.change {
                    if !data.is_empty() {
                        pages.extend(off / PAGE..=(off + data.len() as u64 - 1) / PAGE);
                    }
                }
            }
            pages.sort_unstable();
            pages.dedup();
            let cur_len = current.len() as u64;
            let mut len = durable.len() as u64;
            let mut kept = Vec::new();
            for p in pages {
                if rng.below(2) == 0 {
                    kept.push(p);
                    len = len.max(((p + 1) * PAGE).min(cur_len));
                } else {
                    report.pages.1 += 1;
                }
            }
            report.pages.0 += kept.len();
            let mut out = durable;
            out.resize(len as usize, 0);
            for p in kept {
                let (a, b) = ((p * PAGE) as usize, (((p + 1) * PAGE).min(len)) as usize);
                if a < b {
                    out[a..b].copy_from_slice(&current[a..b]);
                }
            }
            out
        }
        _ => {
            let keep = match loss {
                Loss::Unsynced => 0,
                _ => rng.below(n as u64 + 1) as usize,
            };
            let mut out = durable;
            for u in &node.log[..keep] {
                u.redo(&mut out, usize::MAX);
            }
            report.kept += keep;
            report.lost += n - keep;
            if loss == Loss::Torn && keep < n {
                if let Change::Write { off, data } = &node.log[keep].change {
                    // The 4 KiB boundaries strictly inside the write.
                    let first = off / PAGE + 1;
                    let end = off + data.len() as u64;
                    let last = end.saturating_sub(1) / PAGE;
                    if first <= last && first * PAGE < end {
                        let b = (first + rng.below(last - first + 1)) * PAGE;
                        node.log[keep].redo(&mut out, (b - off) as usize);
                        report.torn += 1;
                    }
                }
            }
            out
        }
    };
    if out != current {
        let f = OpenOptions::new().write(true).open(&node.path)?;
        f.set_len(out.len() as u64)?;
        f.write_all_at(&out, 0)?;
    }
    Ok(())
}

/// Undoes one unsynced change of directory `dir`.
fn undo_entry(dir: &Path, e: &Entry) -> io::Result<()> {
    let res = match e {
        Entry::Created(name) => fs::remove_file(dir.join(name)),
        Entry::MadeDir(name) => fs::remove_dir_all(dir.join(name)),
        Entry::Removed { name, stash } => fs::hard_link(stash, dir.join(name)),
        Entry::Renamed { from, to, replaced } => {
            fs::rename(dir.join(to), dir.join(from)).and_then(|()| match replaced {
                Some(s) => fs::hard_link(s, dir.join(to)),
                None => Ok(()),
            })
        }
    };
    res.map_err(|err| {
        io::Error::new(
            err.kind(),
            format!(
                "power-loss simulation: undoing a change of {}: {err}",
                dir.display()
            ),
        )
    })
}

impl FileOps for PowerLoss {
    fn write_at(&self, file: &File, path: &Path, buf: &[u8], off: u64) -> io::Result<()> {
        PowerLoss::write_at(self, file, path, buf, off)
    }

    fn sync_data(&self, file: &File, path: &Path) -> io::Result<()> {
        self.sync_file(file, path)
    }

    fn sync_all(&self, file: &File, path: &Path) -> io::Result<()> {
        self.sync_file(file, path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        PowerLoss::sync_dir(self, dir)
    }

    fn create_new(&self, path: &Path) -> io::Result<File> {
        PowerLoss::create_new(self, path)
    }

    fn set_len(&self, file: &File, path: &Path, len: u64) -> io::Result<()> {
        PowerLoss::set_len(self, file, path, len)
    }

    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        PowerLoss::create_dir(self, dir)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        PowerLoss::rename(self, from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        PowerLoss::remove(self, path)
    }

    fn hard_link(&self, src: &Path, dst: &Path) -> io::Result<()> {
        PowerLoss::hard_link(self, src, dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, PowerLoss, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let p = PowerLoss::new(tmp.path().join("stash")).unwrap();
        let d = tmp.path().join("d");
        fs::create_dir(&d).unwrap();
        (tmp, p, d)
    }

    #[test]
    fn unsynced_writes_and_entries_are_lost_synced_ones_kept() {
        let (_t, p, d) = setup();
        let a = d.join("a");
        let f = p.create_new(&a).unwrap();
        p.write_at(&f, &a, b"hello", 0).unwrap();
        p.sync_file(&f, &a).unwrap();
        p.sync_dir(&d).unwrap();
        p.write_at(&f, &a, b" world", 5).unwrap();
        p.write_at(&f, &a, b"J", 0).unwrap();
        let b = d.join("b");
        let g = p.create_new(&b).unwrap();
        p.write_at(&g, &b, b"x", 0).unwrap();
        p.sync_file(&g, &b).unwrap();
        drop((f, g));
        let r = p.restart(Loss::Unsynced, 1).unwrap();
        assert_eq!(fs::read(&a).unwrap(), b"hello");
        assert!(
            !b.exists(),
            "a create whose directory was not synced is lost"
        );
        assert_eq!((r.kept, r.lost, r.entries), (0, 2, (0, 1)));
    }

    #[test]
    fn removals_and_renames_are_undone() {
        let (_t, p, d) = setup();
        let (a, b, t) = (d.join("a"), d.join("b"), d.join("t"));
        for (path, data) in [(&a, b"A"), (&b, b"B")] {
            let f = p.create_new(path).unwrap();
            p.write_at(&f, path, data, 0).unwrap();
            p.sync_file(&f, path).unwrap();
        }
        p.sync_dir(&d).unwrap();
        p.remove(&a).unwrap();
        let f = p.create_new(&t).unwrap();
        p.write_at(&f, &t, b"T", 0).unwrap();
        p.sync_file(&f, &t).unwrap();
        p.rename(&t, &b).unwrap();
        assert_eq!(fs::read(&b).unwrap(), b"T");
        p.cut();
        assert!(p.remove(&b).is_err(), "no operation after the cut");
        p.restart(Loss::Unsynced, 2).unwrap();
        assert_eq!(fs::read(&a).unwrap(), b"A");
        assert_eq!(fs::read(&b).unwrap(), b"B");
        assert!(!t.exists());
        assert_eq!(
            fs::read_dir(d.parent().unwrap().join("stash"))
                .unwrap()
                .count(),
            0
        );
    }

    #[test]
    fn a_prefix_of_the_writes_or_a_torn_one() {
        let data: Vec<u8> = (0..3 * PAGE as usize + 100).map(|i| i as u8).collect();
        let mut seen_torn = false;
        for seed in 0..40 {
            for loss in [Loss::Prefix, Loss::Torn] {
                let (_t, p, d) = setup();
                let a = d.join("a");
                let f = p.create_new(&a).unwrap();
                p.sync_file(&f, &a).unwrap();
                p.sync_dir(&d).unwrap();
                p.write_at(&f, &a, &data[..10], 0).unwrap();
                p.write_at(&f, &a, &data[10..], 10).unwrap();
                drop(f);
                let r = p.restart(loss, seed).unwrap();
                let got = fs::read(&a).unwrap();
                let ok = got.is_empty() || got == data[..10] || got == data;
                let torn = got.len() > 10 && got.len() < data.len();
                assert!(
                    ok || (loss == Loss::Torn && torn),
                    "{loss:?} {seed}: {}",
                    got.len()
                );
                if torn {
                    assert_eq!(got.len() as u64 % PAGE, 0);
                    assert_eq!(got, data[..got.len()]);
                    assert_eq!(r.torn, 1);
                    seen_torn = true;
                }
            }
        }
        assert!(seen_torn);
    }

    #[test]
    fn reordered_pages_leave_zeros_where_a_later_page_survived() {
        let data = vec![7u8; 4 * PAGE as usize];
        let mut holes = 0;
        for seed in 0..64 {
            // Each seed on a fresh file.
            let (_t, p, d) = setup();
            let a = d.join("a");
            let f = p.create_new(&a).unwrap();
            p.sync_file(&f, &a).unwrap();
            p.sync_dir(&d).unwrap();
            p.write_at(&f, &a, &data, 0).unwrap();
            drop(f);
            p.restart(Loss::Reordered, seed).unwrap();
            let got = fs::read(&a).unwrap();
            assert_eq!(got.len() as u64 % PAGE, 0);
            for page in got.chunks(PAGE as usize) {
                assert!(page.iter().all(|&b| b == 7) || page.iter().all(|&b| b == 0));
            }
            holes += got.chunks(PAGE as usize).any(|pg| pg[0] == 0) as u32;
        }
        assert!(holes > 0);
    }
}
