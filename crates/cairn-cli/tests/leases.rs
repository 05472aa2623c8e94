//! Leases of cluster mounts, through the binary: `cairn serve` processes on loopback and
//! `cairn mount --cluster` of them (skipped where FUSE can't be used, reported through
//! `common::skip`).
//!
//! - a seeded random sequence of changes through either of two mounts (creates,
//!   writes, truncates, chmods, renames, unlinks, mkdirs, rmdirs), each observed from
//!   the other mount the moment it returns — no waiting — against a model of the tree,
//!   with both kernels' caches warm; the same sequence on servers without leases
//!   (`--lease-time 0`) and mounts that keep entries long shows stale entries, so the
//!   check can fail;
//! - a directory a mount made on another server than its parent's: another mount's
//!   chmod of it shows in the maker at once;
//! - a mount whose process is stopped (SIGSTOP) holds up a change of what it holds
//!   until its session ends (not before, not much after), and nothing else; once
//!   resumed it sees the change and its leases work again;
//! - a killed mount holds up such a change no longer than its session lasts.
//!
//! The seed of the random sequence is printed as `CAIRN_LEASES_SEED=N` (set it to run a
//! sequence again); `CAIRN_LEASES_STEPS` sets its length (default 300). The tests of
//! this file run one at a time (their timings are not to depend on each other's load).

mod common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs::OpenOptions;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::cluster::{Cluster, Rng};
use common::net::{free_ports, Net};
use common::Mount;

/// Held by each test of this file for its whole run.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    // Modes below are given exactly: no umask bits of the environment in the way.
    // SAFETY: umask(2) has no preconditions.
    unsafe { libc::umask(0o022) };
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

// ---- the cluster and its mounts ---------------------------------------------------

/// Starts `n` servers (groups of one) on 127.0.0.1, with `--lease-time` `lease_time`
/// when given, and waits until they all answer.
fn start(n: usize, lease_time: Option<&str>) -> Cluster {
    let extra: Vec<&str> = match lease_time {
        Some(t) => vec!["--lease-time", t],
        None => Vec::new(),
    };
    Cluster::start_on(Net::Loopback(free_ports(2 * n)), n, 8192, "never", &extra)
}

/// Two mounts of `cluster` (`mnt-a`, `mnt-b` in a new directory), with `args` added;
/// `None` where FUSE can't be used (the skip reported).
fn two_mounts(cluster: &Cluster, args: &[&str]) -> Option<(tempfile::TempDir, Mount, Mount)> {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("mnt-a"), tmp.path().join("mnt-b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    let ma = Mount::cluster(&cluster.file, &a, args)?;
    let mb = Mount::cluster(&cluster.file, &b, args)?;
    Some((tmp, ma, mb))
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

// ---- the model of the tree --------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
}

#[derive(Clone, Debug)]
struct Node {
    kind: Kind,
    mode: u32,
    data: Vec<u8>,
    /// The inode number, once seen through a mount.
    ino: Option<u64>,
}

impl Node {
    fn file(mode: u32, data: Vec<u8>) -> Node {
        Node {
            kind: Kind::File,
            mode,
            data,
            ino: None,
        }
    }

    fn dir(mode: u32) -> Node {
        Node {
            kind: Kind::Dir,
            mode,
            data: Vec::new(),
            ino: None,
        }
    }
}

/// The directories files live in, relative to the work directory: itself and `sub`.
const FILE_DIRS: [&str; 2] = ["", "sub"];
/// Names of files (in either directory) and of the directories made and removed (in
/// the work directory only, always empty).
const FILES: usize = 8;
const DIRS: usize = 4;
const FILE_MODES: [u32; 5] = [0o644, 0o600, 0o640, 0o604, 0o755];
const DIR_MODES: [u32; 4] = [0o755, 0o750, 0o700, 0o711];

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// What the tree under the work directory must be: paths relative to it.
struct Model {
    nodes: BTreeMap<String, Node>,
}

impl Model {
    /// Every path a step may touch, existing or not.
    fn every_path() -> Vec<String> {
        let mut all = vec!["sub".to_string()];
        for d in FILE_DIRS {
            all.extend((0..FILES).map(|k| join(d, &format!("f{k}"))));
        }
        all.extend((0..DIRS).map(|k| format!("d{k}")));
        all
    }

    /// The names in directory `dir` (relative path).
    fn listing(&self, dir: &str) -> BTreeSet<String> {
        self.nodes
            .keys()
            .filter_map(|p| {
                let (d, n) = p.rsplit_once('/').unwrap_or(("", p));
                (d == dir).then(|| n.to_string())
            })
            .collect()
    }

    fn files(&self) -> Vec<String> {
        let f = self.nodes.iter().filter(|(_, n)| n.kind == Kind::File);
        f.map(|(p, _)| p.clone()).collect()
    }

    /// Checks `path` through the mount whose work directory is `w` (reading a file's
    /// bytes too when `read`), and notes its inode number where not known yet.
    fn observe(&mut self, w: &Path, path: &str, read: bool) -> Result<(), String> {
        let p = w.join(path);
        let got = std::fs::symlink_metadata(&p);
        let Some(want) = self.nodes.get_mut(path) else {
            return match got {
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
                Err(e) => Err(format!("lstat {}: {e}, wanted ENOENT", p.display())),
                Ok(m) => Err(format!(
                    "lstat {}: there (ino {}, mode {:o}, size {}), wanted ENOENT",
                    p.display(),
                    m.ino(),
                    m.mode(),
                    m.len()
                )),
            };
        };
        let m = got.map_err(|e| format!("lstat {}: {e}, wanted {want:?}", p.display()))?;
        let kind = if m.is_dir() {
            Kind::Dir
        } else if m.is_file() {
            Kind::File
        } else {
            return Err(format!("lstat {}: neither file nor directory", p.display()));
        };
        let mut wrong = Vec::new();
        if kind != want.kind {
            wrong.push(format!("kind {kind:?}"));
        }
        if m.mode() & 0o7777 != want.mode {
            wrong.push(format!("mode {:o}", m.mode() & 0o7777));
        }
        if want.ino.is_some_and(|i| i != m.ino()) {
            wrong.push(format!("ino {}", m.ino()));
        }
        if want.kind == Kind::File {
            if m.len() != want.data.len() as u64 {
                wrong.push(format!("size {}", m.len()));
            }
            if m.nlink() != 1 {
                wrong.push(format!("nlink {}", m.nlink()));
            }
        }
        if wrong.is_empty() && read && want.kind == Kind::File {
            match std::fs::read(&p) {
                Ok(d) if d == want.data => {}
                Ok(d) => wrong.push(format!("bytes {d:?}")),
                Err(e) => wrong.push(format!("read: {e}")),
            }
        }
        if !wrong.is_empty() {
            return Err(format!(
                "lstat {}: {}; wanted {:?}, mode {:o}, ino {:?}, size {}",
                p.display(),
                wrong.join(", "),
                want.kind,
                want.mode,
                want.ino,
                want.data.len()
            ));
        }
        want.ino = Some(m.ino());
        Ok(())
    }

    /// Checks the listing of directory `dir` through the mount whose work directory is
    /// `w`.
    fn observe_dir(&self, w: &Path, dir: &str) -> Result<(), String> {
        let p = w.join(dir);
        let got: BTreeSet<String> = std::fs::read_dir(&p)
            .and_then(|rd| {
                rd.map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                    .collect()
            })
            .map_err(|e| format!("readdir {}: {e}", p.display()))?;
        let want = self.listing(dir);
        if got != want {
            return Err(format!("readdir {}: {got:?}, wanted {want:?}", p.display()));
        }
        Ok(())
    }

    /// Every path and both directories' listings through `w`.
    fn sweep(&mut self, w: &Path) -> Result<(), String> {
        for p in Model::every_path() {
            self.observe(w, &p, false)?;
        }
        for d in FILE_DIRS {
            self.observe_dir(w, d)?;
        }
        Ok(())
    }
}

/// Compares an outcome with the one wanted (`Ok`, or `Err(errno)`).
fn outcome<T>(what: &str, got: std::io::Result<T>, want: Result<(), i32>) -> Result<(), String> {
    match (got, want) {
        (Ok(_), Ok(())) => Ok(()),
        (Err(e), Err(n)) if e.raw_os_error() == Some(n) => Ok(()),
        (Ok(_), Err(n)) => Err(format!(
            "{what}: succeeded, wanted {}",
            std::io::Error::from_raw_os_error(n)
        )),
        (Err(e), want) => Err(format!("{what}: {e}, wanted {want:?}")),
    }
}

// ---- the random sequence ----------------------------------------------------------

/// What a step changed: paths to look at and directories to list.
#[derive(Default)]
struct Touched {
    paths: Vec<String>,
    dirs: Vec<String>,
}

/// Runs `steps` random steps through the mounts whose work directories are `ws`
/// (the same directory of one cluster, made and empty), each observed at once; the
/// first observation that differs from the model, with the steps before it.
fn random_sequence(ws: [&Path; 2], rng: &mut Rng, steps: usize) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(ws[0].join("sub"))
        .unwrap();
    let mut model = Model {
        nodes: BTreeMap::from([("sub".to_string(), Node::dir(0o755))]),
    };
    // Both kernels learn every name, present or absent: entries they would keep, were
    // leases not revoked.
    for w in ws {
        model.sweep(w).map_err(|e| format!("warming: {e}"))?;
    }
    let mut recent: VecDeque<String> = VecDeque::new();
    for step in 0..steps {
        let m = rng.below(2) as usize;
        let (here, there) = (ws[m], ws[1 - m]);
        let mount = ["A", "B"][m];
        let result = one_step(&mut model, here, rng).and_then(|(what, touched)| {
            recent.push_back(format!("{step}: {mount}: {what}"));
            if recent.len() > 12 {
                recent.pop_front();
            }
            // First the other mount, then (sometimes) this one: names before listings,
            // so that a listing can't refresh what the kernel kept of a name.
            let mut sides = vec![there];
            if rng.below(3) == 0 {
                sides.push(here);
            }
            for w in sides {
                for p in &touched.paths {
                    model.observe(w, p, true)?;
                }
                for d in &touched.dirs {
                    model.observe_dir(w, d)?;
                }
            }
            if step % 25 == 24 {
                for w in ws {
                    model.sweep(w)?;
                }
            }
            Ok(())
        });
        if let Err(e) = result {
            let before: Vec<String> = recent.into_iter().collect();
            return Err(format!(
                "step {step} (through {mount}): {e}\nthe steps before:\n{}",
                before.join("\n")
            ));
        }
    }
    for w in ws {
        model.sweep(w).map_err(|e| format!("at the end: {e}"))?;
    }
    Ok(())
}

/// A file's path, existing or not: a name of the pool in either directory.
fn any_file(rng: &mut Rng) -> String {
    let d = FILE_DIRS[rng.below(2) as usize];
    join(d, &format!("f{}", rng.below(FILES as u64)))
}

/// A directory's path (in the work directory), existing or not.
fn any_dir(rng: &mut Rng) -> String {
    format!("d{}", rng.below(DIRS as u64))
}

/// Mostly an existing file; sometimes any name.
fn some_file(model: &Model, rng: &mut Rng) -> String {
    let files = model.files();
    if files.is_empty() || rng.below(8) == 0 {
        any_file(rng)
    } else {
        files[rng.below(files.len() as u64) as usize].clone()
    }
}

fn pick(rng: &mut Rng, modes: &[u32]) -> u32 {
    modes[rng.below(modes.len() as u64) as usize]
}

fn parent(p: &str) -> String {
    p.rsplit_once('/').map_or("", |(d, _)| d).to_string()
}

/// `min` random bytes and up to `spread - 1` more.
fn bytes(rng: &mut Rng, min: u64, spread: u64) -> Vec<u8> {
    let n = min + rng.below(spread);
    (0..n).map(|_| rng.next() as u8).collect()
}

/// One random step through the mount whose work directory is `w`: what it did (for
/// the report) and what it touched; an outcome that differs from the model's is an
/// error.
fn one_step(model: &mut Model, w: &Path, rng: &mut Rng) -> Result<(String, Touched), String> {
    let mut t = Touched::default();
    let what = match rng.below(13) {
        0..=2 => create(model, w, rng, &mut t)?,
        3 | 4 => write(model, w, rng, &mut t)?,
        5 => chmod(model, w, rng, &mut t)?,
        6 | 7 => rename(model, w, rng, &mut t)?,
        8..=10 => unlink_mkdir_rmdir(model, w, rng, &mut t)?,
        // Look: a name (there or not), or a listing, through this mount.
        11 => {
            let p = if rng.below(4) == 0 {
                any_dir(rng)
            } else {
                any_file(rng)
            };
            model.observe(w, &p, rng.below(2) == 0)?;
            format!("stat {p}")
        }
        _ => {
            let d = FILE_DIRS[rng.below(2) as usize];
            model.observe_dir(w, d)?;
            format!("readdir {d:?}")
        }
    };
    Ok((what, t))
}

/// Create (O_CREAT|O_EXCL) and write.
fn create(model: &mut Model, w: &Path, rng: &mut Rng, t: &mut Touched) -> Result<String, String> {
    let p = any_file(rng);
    let mode = pick(rng, &FILE_MODES);
    let data = bytes(rng, 0, 64);
    let what = format!("create {p} {mode:o} with {} bytes", data.len());
    let made = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(w.join(&p))
        .and_then(|mut f| f.write_all(&data));
    if model.nodes.contains_key(&p) {
        outcome(&what, made, Err(libc::EEXIST))?;
    } else {
        outcome(&what, made, Ok(()))?;
        model.nodes.insert(p.clone(), Node::file(mode, data));
    }
    t.dirs.push(parent(&p));
    t.paths.push(p);
    Ok(what)
}

/// Write: append, write at an offset (within or at the end), or truncate (shorter or
/// longer).
fn write(model: &mut Model, w: &Path, rng: &mut Rng, t: &mut Touched) -> Result<String, String> {
    let p = some_file(model, rng);
    t.paths.push(p.clone());
    let open = OpenOptions::new().write(true).open(w.join(&p));
    let Some(node) = model.nodes.get_mut(&p) else {
        let what = format!("open {p} for writing");
        outcome(&what, open, Err(libc::ENOENT))?;
        return Ok(what);
    };
    let f = open.map_err(|e| format!("open {p} for writing: {e}"))?;
    let len = node.data.len() as u64;
    let what;
    match rng.below(3) {
        0 => {
            let data = bytes(rng, 1, 40);
            what = format!("append {} bytes to {p}", data.len());
            outcome(&what, f.write_all_at(&data, len), Ok(()))?;
            node.data.extend(data);
        }
        1 => {
            let at = rng.below(len + 1);
            let data = bytes(rng, 1, 40);
            what = format!("write {} bytes at {at} of {p}", data.len());
            outcome(&what, f.write_all_at(&data, at), Ok(()))?;
            let end = at as usize + data.len();
            if node.data.len() < end {
                node.data.resize(end, 0);
            }
            node.data[at as usize..end].copy_from_slice(&data);
        }
        _ => {
            let to = rng.below(len + 20);
            what = format!("truncate {p} to {to}");
            outcome(&what, f.set_len(to), Ok(()))?;
            node.data.resize(to as usize, 0);
        }
    }
    Ok(what)
}

/// Chmod of a file or a directory (there or not).
fn chmod(model: &mut Model, w: &Path, rng: &mut Rng, t: &mut Touched) -> Result<String, String> {
    let p = match rng.below(6) {
        0 => "sub".to_string(),
        1 => any_dir(rng),
        _ => any_file(rng),
    };
    let mode = match model.nodes.get(&p).map(|n| n.kind) {
        Some(Kind::Dir) => pick(rng, &DIR_MODES),
        _ => pick(rng, &FILE_MODES),
    };
    let what = format!("chmod {mode:o} {p}");
    let done = std::fs::set_permissions(w.join(&p), std::fs::Permissions::from_mode(mode));
    match model.nodes.get_mut(&p) {
        Some(n) => {
            outcome(&what, done, Ok(()))?;
            n.mode = mode;
        }
        None => outcome(&what, done, Err(libc::ENOENT))?,
    }
    t.paths.push(p);
    Ok(what)
}

/// Rename a file, within its directory or to the other (over a file or not, or onto
/// itself); or a directory to a free name.
fn rename(model: &mut Model, w: &Path, rng: &mut Rng, t: &mut Touched) -> Result<String, String> {
    let (from, to) = if rng.below(4) == 0 {
        let from = any_dir(rng);
        let free: Vec<String> = (0..DIRS)
            .map(|k| format!("d{k}"))
            .filter(|d| !model.nodes.contains_key(d))
            .collect();
        let to = if free.is_empty() {
            from.clone()
        } else {
            free[rng.below(free.len() as u64) as usize].clone()
        };
        (from, to)
    } else {
        (some_file(model, rng), any_file(rng))
    };
    let what = format!("rename {from} {to}");
    let done = std::fs::rename(w.join(&from), w.join(&to));
    match model.nodes.remove(&from) {
        Some(n) => {
            outcome(&what, done, Ok(()))?;
            model.nodes.insert(to.clone(), n);
        }
        None => outcome(&what, done, Err(libc::ENOENT))?,
    }
    t.dirs.push(parent(&from));
    t.dirs.push(parent(&to));
    t.dirs.dedup();
    t.paths.push(from);
    t.paths.push(to);
    t.paths.dedup();
    Ok(what)
}

/// Unlink a file, make a directory, or remove one (those made here are always empty);
/// there or not.
fn unlink_mkdir_rmdir(
    model: &mut Model,
    w: &Path,
    rng: &mut Rng,
    t: &mut Touched,
) -> Result<String, String> {
    let (p, what, done, want) = match rng.below(3) {
        0 => {
            let p = any_file(rng);
            let done = std::fs::remove_file(w.join(&p));
            let want = match model.nodes.remove(&p) {
                Some(_) => Ok(()),
                None => Err(libc::ENOENT),
            };
            let what = format!("unlink {p}");
            (p, what, done, want)
        }
        1 => {
            let p = any_dir(rng);
            let mode = pick(rng, &DIR_MODES);
            let done = std::fs::DirBuilder::new().mode(mode).create(w.join(&p));
            let want = if model.nodes.contains_key(&p) {
                Err(libc::EEXIST)
            } else {
                model.nodes.insert(p.clone(), Node::dir(mode));
                Ok(())
            };
            let what = format!("mkdir {p} {mode:o}");
            (p, what, done, want)
        }
        _ => {
            let p = any_dir(rng);
            let done = std::fs::remove_dir(w.join(&p));
            let want = match model.nodes.remove(&p) {
                Some(_) => Ok(()),
                None => Err(libc::ENOENT),
            };
            let what = format!("rmdir {p}");
            (p, what, done, want)
        }
    };
    outcome(&what, done, want)?;
    t.dirs.push(parent(&p));
    t.paths.push(p);
    Ok(what)
}

/// The work directory `name`, made through `a`: its path in either mount.
fn work_dir(a: &Path, b: &Path, name: &str) -> [PathBuf; 2] {
    std::fs::create_dir(a.join(name)).unwrap();
    [a.join(name), b.join(name)]
}

/// Three servers (the default lease time), two mounts: see the file's doc.
#[test]
fn two_mounts_see_each_others_changes_at_once() {
    see_each_others_changes(None, 300);
}

/// The same with leases of 0.3 s: the kernels' times run out during the sequence, and
/// the mounts' clients answer what they keep under leases still renewed (or ask).
#[test]
fn two_mounts_see_each_others_changes_with_short_leases() {
    see_each_others_changes(Some("0.3"), 1500);
}

/// Three servers (`--lease-time lease_time`), two mounts, the random sequence.
fn see_each_others_changes(lease_time: Option<&str>, default_steps: usize) {
    let _one = one_at_a_time();
    let cluster = start(3, lease_time);
    let Some((tmp, ma, mb)) = two_mounts(&cluster, &[]) else {
        return;
    };
    let ws = work_dir(&tmp.path().join("mnt-a"), &tmp.path().join("mnt-b"), "w");
    let mut rng = Rng::from_env("CAIRN_LEASES_SEED");
    let seed = rng.0;
    let start = Instant::now();
    let steps = std::env::var("CAIRN_LEASES_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default_steps);
    if let Err(e) = random_sequence([&ws[0], &ws[1]], &mut rng, steps) {
        panic!(
            "{e}\n(run again with CAIRN_LEASES_SEED={seed})\nmount A's log:\n{}\nmount B's log:\n{}",
            tail(&ma.log(), 20),
            tail(&mb.log(), 20)
        );
    }
    println!("{steps} steps in {:?}", start.elapsed());
    drop(mb);
    drop(ma);
    cluster.check();
}

/// The check above can fail: on servers without leases, mounts that keep entries and
/// attributes long show stale ones (a name the other mount made is still absent, the
/// size before the other mount's write), and the random sequence trips on them.
#[test]
fn without_leases_long_kernel_timeouts_show_stale_entries() {
    let _one = one_at_a_time();
    let cluster = start(3, Some("0"));
    let long = [
        "--entry-timeout",
        "30",
        "--attr-timeout",
        "30",
        "--negative-timeout",
        "30",
    ];
    let Some((tmp, _ma, _mb)) = two_mounts(&cluster, &long) else {
        return;
    };
    let [a, b] = work_dir(&tmp.path().join("mnt-a"), &tmp.path().join("mnt-b"), "w");
    // B learns that `x` is absent and that `y` holds 1 byte; A makes `x` and grows `y`.
    std::fs::write(a.join("y"), b"1").unwrap();
    assert_eq!(std::fs::symlink_metadata(b.join("y")).unwrap().len(), 1);
    assert!(std::fs::symlink_metadata(b.join("x")).is_err());
    std::fs::write(a.join("x"), b"made").unwrap();
    std::fs::write(a.join("y"), b"1234").unwrap();
    let x = std::fs::symlink_metadata(b.join("x"));
    assert!(
        x.as_ref().is_err_and(|e| e.kind() == ErrorKind::NotFound),
        "B sees A's new x at once, without leases: {x:?}"
    );
    let y = std::fs::symlink_metadata(b.join("y")).unwrap().len();
    assert_eq!(y, 1, "B sees A's write of y at once, without leases");
    // And the random sequence sees it too.
    let [a2, b2] = work_dir(&tmp.path().join("mnt-a"), &tmp.path().join("mnt-b"), "r");
    let mut rng = Rng::from_env("CAIRN_LEASES_SEED");
    let seed = rng.0;
    match random_sequence([&a2, &b2], &mut rng, 300) {
        Ok(()) => {
            panic!("300 random steps saw nothing stale without leases (CAIRN_LEASES_SEED={seed})")
        }
        Err(e) => println!("as expected, without leases: {}", e.lines().next().unwrap()),
    }
}

/// The server of inode `ino` (its top 16 bits).
fn home(ino: u64) -> u64 {
    ino >> cairn_cluster::giga::HOME_SHIFT
}

/// A directory a mount makes may be placed on another server than its parent's: the
/// maker's kernel keeps the attributes the mkdir answered no longer than another mount's
/// change of them (a chmod).
#[test]
fn a_directory_made_on_another_server_is_forgotten_by_its_maker_when_changed() {
    let _one = one_at_a_time();
    let cluster = start(3, None);
    let Some((tmp, _ma, _mb)) = two_mounts(&cluster, &[]) else {
        return;
    };
    let (a, b) = (tmp.path().join("mnt-a"), tmp.path().join("mnt-b"));
    std::fs::create_dir(a.join("w")).unwrap();
    let parent = home(std::fs::symlink_metadata(a.join("w")).unwrap().ino());
    let (mut here, mut elsewhere, mut stale) = (0, 0, Vec::new());
    for k in 0..30 {
        let d = format!("w/d{k}");
        std::fs::DirBuilder::new()
            .mode(0o750)
            .create(a.join(&d))
            .unwrap();
        let ino = std::fs::symlink_metadata(a.join(&d)).unwrap().ino();
        std::fs::set_permissions(b.join(&d), std::fs::Permissions::from_mode(0o711)).unwrap();
        let mode = std::fs::symlink_metadata(a.join(&d)).unwrap().mode() & 0o7777;
        if home(ino) == parent {
            here += 1;
        } else {
            elsewhere += 1;
        }
        if mode != 0o711 {
            stale.push(format!(
                "{d} (on server {}, its parent on {parent}): mode {mode:o}",
                home(ino)
            ));
        }
        if here > 0 && elsewhere >= 3 {
            break;
        }
    }
    println!("{here} directories on their parent's server, {elsewhere} elsewhere");
    assert!(elsewhere > 0, "no directory placed off its parent's server");
    assert!(
        stale.is_empty(),
        "the maker still sees the mode before B's chmod 711: {stale:?}"
    );
}

// ---- a mount that stops answering ------------------------------------------------

/// The process `pid`, stopped (SIGSTOP) until [`Stopped::resume`] or drop: a mount
/// whose process is stopped can't be unmounted, nor its files looked at.
struct Stopped {
    pid: i32,
    stopped: bool,
}

impl Stopped {
    fn new(pid: i32) -> Stopped {
        // SAFETY: kill(2) of a child of this process, not reaped.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        let s = Stopped { pid, stopped: true };
        let start = Instant::now();
        while !is_stopped(pid) {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "process {pid} not stopped 5 s after SIGSTOP"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        s
    }

    fn resume(&mut self) {
        if std::mem::replace(&mut self.stopped, false) {
            // SAFETY: as in new.
            unsafe { libc::kill(self.pid, libc::SIGCONT) };
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        self.resume();
    }
}

/// Whether process `pid` is stopped (`T` in /proc/PID/stat).
fn is_stopped(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // "PID (COMM) STATE ...": COMM may hold spaces and parentheses.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, r)| r.trim_start().chars().next());
    state == Some('T')
}

/// Whether thread `tid` of this process is in unlink(2) (or unlinkat), as
/// /proc/self/task/TID/syscall says.
fn in_unlink(tid: i32) -> bool {
    let text =
        std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).unwrap_or_default();
    let nr: Option<libc::c_long> = text.split(' ').next().and_then(|n| n.parse().ok());
    #[cfg(target_arch = "x86_64")]
    let unlink = [libc::SYS_unlink, libc::SYS_unlinkat];
    #[cfg(not(target_arch = "x86_64"))]
    let unlink = [libc::SYS_unlinkat];
    nr.is_some_and(|n| unlink.contains(&n))
}

/// Runs `f` and returns its result and how long it took.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let r = f();
    (r, start.elapsed())
}

/// The names in directory `p`.
fn names(p: &Path) -> BTreeSet<String> {
    std::fs::read_dir(p)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

fn absent(p: &Path) -> bool {
    matches!(std::fs::symlink_metadata(p), Err(e) if e.kind() == ErrorKind::NotFound)
}

const LEASE: Duration = Duration::from_secs(2);

/// Asserts that a change that had to wait for a stopped holder's lease took at least
/// a second (it waited) and at most the lease time and a margin.
fn waited_for_the_lease(what: &str, took: Duration) {
    assert!(
        took >= Duration::from_secs(1),
        "{what}: did not wait for the stopped mount's lease ({took:?})"
    );
    assert!(
        took <= LEASE + Duration::from_millis(1500),
        "{what}: waited past the stopped mount's lease ({took:?})"
    );
}

/// Servers with `--lease-time 2`. A mount whose process is stopped holds up a change
/// of what it holds until its session ends, and nothing else; resumed, it sees the
/// change at once and holds leases again.
#[test]
fn a_stopped_mount_holds_up_a_change_for_at_most_the_lease_time() {
    let _one = one_at_a_time();
    let cluster = start(3, Some("2"));
    let Some((tmp, ma, mb)) = two_mounts(&cluster, &[]) else {
        return;
    };
    let (a, b, c) = (
        tmp.path().join("mnt-a"),
        tmp.path().join("mnt-b"),
        tmp.path().join("mnt-c"),
    );
    // A makes `held/f` and looks at it: A holds leases on them. B makes `elsewhere`,
    // which A never looks at; a third mount C, for a change while B's waits.
    std::fs::create_dir(a.join("held")).unwrap();
    std::fs::write(a.join("held/f"), b"data").unwrap();
    let len = std::fs::symlink_metadata(a.join("held/f")).unwrap().len();
    assert_eq!(len, 4);
    std::fs::create_dir(b.join("elsewhere")).unwrap();
    assert_eq!(std::fs::read(b.join("held/f")).unwrap(), b"data");
    std::fs::create_dir(&c).unwrap();
    let Some(mc) = Mount::cluster(&cluster.file, &c, &[]) else {
        return;
    };
    assert!(c.join("elsewhere").is_dir());

    let mut stopped = Stopped::new(ma.pid());
    unlink_while_stopped(&b, &c);
    // Still stopped: what A doesn't hold still changes at once through B too.
    let (made, took) = timed(|| std::fs::write(b.join("elsewhere/g2"), b"g"));
    made.unwrap();
    assert!(
        took < Duration::from_secs(1),
        "B's create elsewhere took {took:?}"
    );
    assert!(is_stopped(ma.pid()));

    // Resumed, A sees the unlink (its kernel forgot f when its lease ended).
    stopped.resume();
    let start = Instant::now();
    let mut tries = 0;
    loop {
        tries += 1;
        if absent(&a.join("held/f")) && names(&a.join("held")) == names(&b.join("held")) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "A still sees held/f 5 s after it resumed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "A saw the unlink {:?} after it resumed ({tries} tries)",
        start.elapsed()
    );
    leases_work_again(&ma, &a, &b);
    // Nothing lost.
    assert_eq!(names(&a.join("elsewhere")), names(&b.join("elsewhere")));
    assert_eq!(names(&c.join("elsewhere")), names(&b.join("elsewhere")));
    assert_eq!(names(&a.join("elsewhere")).len(), 2);
    drop(stopped);
    drop(mc);
    drop(mb);
    drop(ma);
    cluster.check();
}

/// With A stopped: B's unlink of `held/f`, which A holds, waits for A's lease; C's
/// create of `elsewhere/g1` meanwhile doesn't. B sees f gone.
fn unlink_while_stopped(b: &Path, c: &Path) {
    let ((done, took), (made, made_took, during)) = std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let f = b.join("held/f");
        let unlink = s.spawn(move || {
            // SAFETY: gettid(2) has no preconditions.
            tx.send(unsafe { libc::gettid() }).unwrap();
            timed(|| std::fs::remove_file(f))
        });
        // Once B's unlink is under way, what A doesn't hold changes at once through
        // another mount (B's own requests may queue behind the unlink).
        let tid = rx.recv().unwrap();
        let start = Instant::now();
        while !in_unlink(tid) && !unlink.is_finished() {
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "B's unlink not under way after 2 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let (made, made_took) = timed(|| std::fs::write(c.join("elsewhere/g1"), b"g"));
        let during = !unlink.is_finished();
        (unlink.join().unwrap(), (made, made_took, during))
    });
    println!(
        "with A stopped: B's unlink of A's file took {took:?}; C's create elsewhere meanwhile \
         {made_took:?} (the unlink still waiting after it: {during})"
    );
    done.unwrap();
    made.unwrap();
    waited_for_the_lease("B's unlink of a file A holds", took);
    assert!(
        made_took < Duration::from_secs(1) && during,
        "a create A doesn't hold took {made_took:?} (during the unlink's wait: {during})"
    );
    assert!(absent(&b.join("held/f")));
    assert!(names(&b.join("held")).is_empty());
}

/// After A resumed: its create shows in B at once, B's change of what A holds is not
/// held up, and A holds leases again (stopped once more, it holds up B's chmod).
fn leases_work_again(ma: &Mount, a: &Path, b: &Path) {
    let h = |m: &Path| m.join("held/h");
    std::fs::write(h(a), b"1").unwrap();
    assert_eq!(std::fs::symlink_metadata(h(b)).unwrap().len(), 1);
    assert_eq!(names(&b.join("held")), BTreeSet::from(["h".to_string()]));
    assert_eq!(std::fs::symlink_metadata(h(a)).unwrap().len(), 1);
    let (grown, took) = timed(|| {
        OpenOptions::new()
            .append(true)
            .open(h(b))
            .and_then(|mut f| f.write_all(b"23"))
    });
    grown.unwrap();
    println!("B's append to a file A holds, A running again: {took:?}");
    assert!(took < Duration::from_secs(1), "B's append took {took:?}");
    assert_eq!(std::fs::symlink_metadata(h(a)).unwrap().len(), 3);
    assert_eq!(std::fs::read(h(a)).unwrap(), b"123");
    let again = Stopped::new(ma.pid());
    let mode = std::fs::Permissions::from_mode(0o600);
    let (chmod, took) = timed(|| std::fs::set_permissions(h(b), mode));
    drop(again);
    println!("B's chmod of a file A holds, A stopped again: {took:?}");
    chmod.unwrap();
    waited_for_the_lease("B's chmod of a file A holds, A stopped again", took);
    let mode = std::fs::symlink_metadata(h(a)).unwrap().mode();
    assert_eq!(mode & 0o7777, 0o600);
}

/// A mount killed (SIGKILL) while it holds leases: its session lasts its lease time
/// past its last renewal, not longer; a change of what it held completes within that,
/// and a new mount in its place sees everything.
#[test]
fn a_killed_mount_does_not_hold_up_others_forever() {
    let _one = one_at_a_time();
    let cluster = start(3, Some("2"));
    let Some((tmp, ma, mb)) = two_mounts(&cluster, &[]) else {
        return;
    };
    let (a, b) = (tmp.path().join("mnt-a"), tmp.path().join("mnt-b"));
    std::fs::create_dir(a.join("held")).unwrap();
    std::fs::write(a.join("held/f"), b"data").unwrap();
    assert_eq!(
        std::fs::symlink_metadata(a.join("held/f")).unwrap().len(),
        4
    );
    assert_eq!(std::fs::read(b.join("held/f")).unwrap(), b"data");
    let killed = Instant::now();
    ma.kill();
    let (done, took) = timed(|| std::fs::remove_file(b.join("held/f")));
    println!(
        "unlink of a killed mount's file took {took:?} ({:?} after the SIGKILL)",
        killed.elapsed()
    );
    done.unwrap();
    assert!(
        killed.elapsed() <= LEASE + Duration::from_millis(1500),
        "the unlink waited past the killed mount's lease: {took:?}"
    );
    assert!(absent(&b.join("held/f")));
    // A new mount where the dead one was sees it all.
    std::fs::write(b.join("held/g"), b"g").unwrap();
    let Some(ma2) = Mount::cluster(&cluster.file, &a, &[]) else {
        return;
    };
    assert_eq!(names(&a.join("held")), BTreeSet::from(["g".to_string()]));
    assert_eq!(std::fs::read(a.join("held/g")).unwrap(), b"g");
    drop(ma2);
    drop(mb);
    cluster.check();
}
