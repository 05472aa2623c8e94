//! A model of a file system's namespace and of each file's contents, for the crash and
//! power-loss tests of cairn-fs (tests/fs.rs, tests/power_loss.rs) and of the mount
//! (crates/cairn-cli/tests/mount_crash.rs includes this file).
//!
//! Operations are generated from a seed and the model's current state, so that every one
//! is valid (a create names a free name, a rename never moves a directory into itself,
//! ...) and a test can regenerate the same sequence from the same start without the file
//! system. Every write writes bytes no other write writes, so the content of a file read
//! back tells which writes reached it. A state is compared as a [`Canon`]: every path
//! with its kind, a file's content and its link group (the first path of the group), a
//! symbolic link's target.
//!
//! The operations are applied either to a [`cairn_fs::Fs`] ([`apply_fs`],
//! [`snapshot_fs`]) or to a mounted directory through the kernel ([`apply_posix`],
//! [`snapshot_posix`]); each changes the file system with one request.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use cairn_fs::{Cred, Fs, FsResult, SetAttr, ROOT};

/// A path from the root: names joined by '/'.
pub type P = String;

/// Longest file the workload makes.
const MAX_FILE: u64 = 300_000;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    Dir,
    /// A regular file of this link group.
    File(u64),
    Link(Vec<u8>),
}

/// What a path holds, as compared between the model and a file system.
#[derive(Clone, PartialEq, Eq)]
pub enum Seen {
    Dir,
    /// A regular file: its content and the first path of its link group.
    File {
        data: Vec<u8>,
        group: P,
    },
    Link(Vec<u8>),
}

impl std::fmt::Debug for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Seen::Dir => write!(f, "dir"),
            Seen::File { data, group } => write!(
                f,
                "file of {} bytes (hash {:016x}) linked as {group}",
                data.len(),
                fnv(data)
            ),
            Seen::Link(t) => write!(f, "symlink to {}", String::from_utf8_lossy(t)),
        }
    }
}

/// A whole state: every path but the root.
pub type Canon = BTreeMap<P, Seen>;

fn fnv(b: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &x in b {
        h = (h ^ x as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A short fingerprint of a state (for a child process to report its start).
pub fn fingerprint(c: &Canon) -> u64 {
    fnv(format!("{c:?}").as_bytes())
}

/// The first difference between two states, for a failure message.
pub fn first_difference(a: &Canon, b: &Canon) -> String {
    for (p, s) in a {
        match b.get(p) {
            None => return format!("{p}: {s:?}, then absent"),
            Some(t) if t != s => return format!("{p}: {s:?}, then {t:?}"),
            _ => {}
        }
    }
    match b.iter().find(|(p, _)| !a.contains_key(*p)) {
        Some((p, s)) => format!("{p}: absent, then {s:?}"),
        None => "none".into(),
    }
}

/// One operation of the workload.
#[derive(Clone, Debug)]
pub enum Op {
    Create(P),
    Mkdir(P),
    Symlink(P, Vec<u8>),
    /// A new hard link (second) to a file (first).
    Link(P, P),
    Write(P, u64, Vec<u8>),
    Truncate(P, u64),
    Rename(P, P),
    Unlink(P),
    Rmdir(P),
    /// Makes everything so far durable.
    Fsync,
}

/// The namespace and the contents.
#[derive(Clone, Debug, Default)]
pub struct Model {
    tree: BTreeMap<P, Kind>,
    data: BTreeMap<u64, Vec<u8>>,
    next: u64,
}

fn join(dir: &str, name: &str) -> P {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

fn parent(p: &str) -> &str {
    p.rfind('/').map_or("", |i| &p[..i])
}

fn inside(p: &str, dir: &str) -> bool {
    p.len() > dir.len() && p.starts_with(dir) && p.as_bytes()[dir.len()] == b'/'
}

/// splitmix64.
pub struct Gen(pub u64);

impl Gen {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn pick<'a, T>(&mut self, v: &'a [T]) -> Option<&'a T> {
        (!v.is_empty()).then(|| &v[self.below(v.len() as u64) as usize])
    }
}

/// Bytes that only operation `id` writes.
fn bytes_of(id: u64, len: usize) -> Vec<u8> {
    let mut g = Gen(id.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0xfeed);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&g.next().to_le_bytes());
    }
    v.truncate(len);
    v
}

impl Model {
    /// The state as compared.
    pub fn canon(&self) -> Canon {
        let mut first: BTreeMap<u64, &P> = BTreeMap::new();
        for (p, k) in &self.tree {
            if let Kind::File(g) = k {
                first.entry(*g).or_insert(p);
            }
        }
        self.tree
            .iter()
            .map(|(p, k)| {
                let s = match k {
                    Kind::Dir => Seen::Dir,
                    Kind::File(g) => Seen::File {
                        data: self.data[g].clone(),
                        group: first[g].clone(),
                    },
                    Kind::Link(t) => Seen::Link(t.clone()),
                };
                (p.clone(), s)
            })
            .collect()
    }

    /// The model of a state read back.
    pub fn from_canon(c: &Canon) -> Model {
        let mut m = Model::default();
        let mut groups: BTreeMap<&P, u64> = BTreeMap::new();
        for (p, s) in c {
            let k = match s {
                Seen::Dir => Kind::Dir,
                Seen::Link(t) => Kind::Link(t.clone()),
                Seen::File { data, group } => {
                    let g = *groups.entry(group).or_insert_with(|| {
                        m.next += 1;
                        m.next
                    });
                    m.data.insert(g, data.clone());
                    Kind::File(g)
                }
            };
            m.tree.insert(p.clone(), k);
        }
        m
    }

    fn paths(&self, f: impl Fn(&Kind) -> bool) -> Vec<P> {
        self.tree
            .iter()
            .filter(|(_, k)| f(k))
            .map(|(p, _)| p.clone())
            .collect()
    }

    fn dirs(&self) -> Vec<P> {
        let mut d = vec![String::new()];
        d.extend(self.paths(|k| *k == Kind::Dir));
        d
    }

    /// A free path in some directory, if the first tries find one.
    fn free_path(&self, g: &mut Gen) -> Option<P> {
        let dirs = self.dirs();
        (0..8).find_map(|_| {
            let d = g.pick(&dirs)?;
            let p = join(d, &format!("n{}", g.below(12)));
            (!self.tree.contains_key(&p)).then_some(p)
        })
    }

    /// The next operation, valid in this state (`id` makes its bytes unique).
    pub fn next_op(&self, g: &mut Gen, id: u64) -> Op {
        for _ in 0..16 {
            let files = self.paths(|k| matches!(k, Kind::File(_)));
            let op = match g.below(100) {
                0..18 => self.free_path(g).map(Op::Create),
                18..26 => self
                    .free_path(g)
                    .filter(|p| p.matches('/').count() < 3)
                    .map(Op::Mkdir),
                26..30 => self
                    .free_path(g)
                    .map(|p| Op::Symlink(p, format!("t{id}").into_bytes())),
                30..36 => {
                    let (Some(src), Some(p)) = (g.pick(&files).cloned(), self.free_path(g)) else {
                        continue;
                    };
                    Some(Op::Link(src, p))
                }
                36..58 => g.pick(&files).map(|p| {
                    let Some(Kind::File(grp)) = self.tree.get(p) else {
                        unreachable!("a file")
                    };
                    let len = self.data[grp].len() as u64;
                    let off = g.below(len + 5000);
                    let n = if g.below(10) < 6 {
                        1 + g.below(3000)
                    } else {
                        1 + g.below(100_000)
                    };
                    let n = n.min(MAX_FILE.saturating_sub(off)).max(1);
                    Op::Write(p.clone(), off, bytes_of(id, n as usize))
                }),
                58..64 => g.pick(&files).map(|p| {
                    let Some(Kind::File(grp)) = self.tree.get(p) else {
                        unreachable!("a file")
                    };
                    let len = self.data[grp].len() as u64;
                    Op::Truncate(p.clone(), g.below(len + 5000))
                }),
                64..80 => {
                    let all = self.paths(|_| true);
                    let (Some(src), Some(d)) =
                        (g.pick(&all).cloned(), g.pick(&self.dirs()).cloned())
                    else {
                        continue;
                    };
                    let dst = join(&d, &format!("n{}", g.below(12)));
                    let src_kind = &self.tree[&src];
                    let ok = dst != src
                        && !inside(&dst, &src)
                        && match self.tree.get(&dst) {
                            None => true,
                            Some(Kind::Dir) => false,
                            Some(k) => *src_kind != Kind::Dir && k != src_kind,
                        };
                    ok.then_some(Op::Rename(src, dst))
                }
                80..90 => {
                    let v = self.paths(|k| !matches!(k, Kind::Dir));
                    g.pick(&v).cloned().map(Op::Unlink)
                }
                90..95 => {
                    let empty: Vec<P> = self
                        .paths(|k| *k == Kind::Dir)
                        .into_iter()
                        .filter(|d| !self.tree.keys().any(|p| inside(p, d)))
                        .collect();
                    g.pick(&empty).cloned().map(Op::Rmdir)
                }
                _ => Some(Op::Fsync),
            };
            if let Some(op) = op {
                return op;
            }
        }
        Op::Fsync
    }

    /// Applies an operation.
    pub fn apply(&mut self, op: &Op) {
        match op {
            Op::Create(p) => {
                self.next += 1;
                self.data.insert(self.next, Vec::new());
                self.tree.insert(p.clone(), Kind::File(self.next));
            }
            Op::Mkdir(p) => {
                self.tree.insert(p.clone(), Kind::Dir);
            }
            Op::Symlink(p, t) => {
                self.tree.insert(p.clone(), Kind::Link(t.clone()));
            }
            Op::Link(src, p) => {
                let k = self.tree[src].clone();
                self.tree.insert(p.clone(), k);
            }
            Op::Write(p, off, bytes) => {
                let Some(Kind::File(g)) = self.tree.get(p) else {
                    panic!("write of {p}, not a file")
                };
                let d = self.data.get_mut(g).expect("data of a file");
                let (off, end) = (*off as usize, *off as usize + bytes.len());
                if d.len() < end {
                    d.resize(end, 0);
                }
                d[off..end].copy_from_slice(bytes);
            }
            Op::Truncate(p, n) => {
                let Some(Kind::File(g)) = self.tree.get(p) else {
                    panic!("truncate of {p}, not a file")
                };
                self.data
                    .get_mut(g)
                    .expect("data of a file")
                    .resize(*n as usize, 0);
            }
            Op::Rename(src, dst) => {
                self.tree.remove(dst);
                let moved: Vec<P> = self
                    .tree
                    .keys()
                    .filter(|p| *p == src || inside(p, src))
                    .cloned()
                    .collect();
                for p in moved {
                    let k = self.tree.remove(&p).expect("listed");
                    self.tree.insert(format!("{dst}{}", &p[src.len()..]), k);
                }
            }
            Op::Unlink(p) | Op::Rmdir(p) => {
                self.tree.remove(p);
            }
            Op::Fsync => {}
        }
    }
}

// ---- A cairn_fs::Fs ----

const CRED: Cred = Cred::ROOT;

/// The inode of a path.
pub fn resolve(fs: &Fs, p: &str) -> FsResult<u64> {
    let mut ino = ROOT;
    for name in p.split('/').filter(|n| !n.is_empty()) {
        ino = fs.lookup(&CRED, ino, name.as_bytes())?.ino;
    }
    Ok(ino)
}

fn dir_and_name<'a>(fs: &Fs, p: &'a str) -> FsResult<(u64, &'a [u8])> {
    let name = &p[p.rfind('/').map_or(0, |i| i + 1)..];
    Ok((resolve(fs, parent(p))?, name.as_bytes()))
}

/// Applies an operation to a file system.
pub fn apply_fs(fs: &Fs, op: &Op) -> FsResult<()> {
    match op {
        Op::Create(p) => {
            let (d, n) = dir_and_name(fs, p)?;
            fs.create(&CRED, d, n, 0o644).map(drop)
        }
        Op::Mkdir(p) => {
            let (d, n) = dir_and_name(fs, p)?;
            fs.mkdir(&CRED, d, n, 0o755).map(drop)
        }
        Op::Symlink(p, t) => {
            let (d, n) = dir_and_name(fs, p)?;
            fs.symlink(&CRED, d, n, t).map(drop)
        }
        Op::Link(src, p) => {
            let ino = resolve(fs, src)?;
            let (d, n) = dir_and_name(fs, p)?;
            fs.link(&CRED, ino, d, n).map(drop)
        }
        Op::Write(p, off, bytes) => {
            let ino = resolve(fs, p)?;
            fs.write(ino, *off, bytes).map(drop)
        }
        Op::Truncate(p, n) => {
            let ino = resolve(fs, p)?;
            let s = SetAttr {
                size: Some(*n),
                ..Default::default()
            };
            fs.setattr(&CRED, ino, &s).map(drop)
        }
        Op::Rename(src, dst) => {
            let (d1, n1) = dir_and_name(fs, src)?;
            let (d2, n2) = dir_and_name(fs, dst)?;
            fs.rename(&CRED, d1, n1, d2, n2, 0)
        }
        Op::Unlink(p) => {
            let (d, n) = dir_and_name(fs, p)?;
            fs.unlink(&CRED, d, n)
        }
        Op::Rmdir(p) => {
            let (d, n) = dir_and_name(fs, p)?;
            fs.rmdir(&CRED, d, n)
        }
        Op::Fsync => fs.fsync(ROOT),
    }
}

/// Reads the whole namespace and every file's content.
pub fn snapshot_fs(fs: &Fs) -> FsResult<Canon> {
    let mut found: Vec<(P, u64, Seen)> = Vec::new();
    let mut dirs = vec![(String::new(), ROOT)];
    while let Some((dir, ino)) = dirs.pop() {
        for e in fs.readdir(ino, None, usize::MAX)? {
            let p = join(&dir, &String::from_utf8_lossy(&e.name));
            let a = fs.lookup(&CRED, ino, &e.name)?;
            let s = match a.mode & libc::S_IFMT {
                libc::S_IFDIR => {
                    dirs.push((p.clone(), a.ino));
                    Seen::Dir
                }
                libc::S_IFLNK => Seen::Link(fs.readlink(a.ino)?),
                _ => Seen::File {
                    data: fs.read(a.ino, 0, a.size as usize)?,
                    group: String::new(),
                },
            };
            found.push((p, a.ino, s));
        }
    }
    Ok(grouped(found))
}

/// Fills in each file's link group: the first of the paths with its inode number.
fn grouped(mut found: Vec<(P, u64, Seen)>) -> Canon {
    found.sort_by(|a, b| a.0.cmp(&b.0));
    let mut first: BTreeMap<u64, P> = BTreeMap::new();
    for (p, ino, s) in &found {
        if matches!(s, Seen::File { .. }) {
            first.entry(*ino).or_insert_with(|| p.clone());
        }
    }
    found
        .into_iter()
        .map(|(p, ino, s)| {
            let s = match s {
                Seen::File { data, .. } => Seen::File {
                    data,
                    group: first[&ino].clone(),
                },
                s => s,
            };
            (p, s)
        })
        .collect()
}

// ---- A mounted directory, through the kernel ----

/// Applies an operation to the tree under `root` with plain system calls.
pub fn apply_posix(root: &Path, op: &Op) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let at = |p: &str| root.join(p);
    match op {
        Op::Create(p) => std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(at(p))
            .map(drop),
        Op::Mkdir(p) => std::fs::create_dir(at(p)),
        Op::Symlink(p, t) => {
            use std::os::unix::ffi::OsStrExt;
            std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(t), at(p))
        }
        Op::Link(src, p) => std::fs::hard_link(at(src), at(p)),
        Op::Write(p, off, bytes) => std::fs::OpenOptions::new()
            .write(true)
            .open(at(p))?
            .write_all_at(bytes, *off),
        Op::Truncate(p, n) => std::fs::OpenOptions::new()
            .write(true)
            .open(at(p))?
            .set_len(*n),
        Op::Rename(src, dst) => std::fs::rename(at(src), at(dst)),
        Op::Unlink(p) => std::fs::remove_file(at(p)),
        Op::Rmdir(p) => std::fs::remove_dir(at(p)),
        Op::Fsync => std::fs::File::open(root)?.sync_all(),
    }
}

/// Reads the whole tree under `root` and every file's content.
pub fn snapshot_posix(root: &Path) -> io::Result<Canon> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let mut found: Vec<(P, u64, Seen)> = Vec::new();
    let mut dirs = vec![String::new()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(root.join(&dir))? {
            let e = e?;
            let p = join(&dir, &e.file_name().to_string_lossy());
            let m = std::fs::symlink_metadata(root.join(&p))?;
            let s = if m.is_dir() {
                dirs.push(p.clone());
                Seen::Dir
            } else if m.file_type().is_symlink() {
                Seen::Link(
                    std::fs::read_link(root.join(&p))?
                        .as_os_str()
                        .as_bytes()
                        .to_vec(),
                )
            } else {
                Seen::File {
                    data: std::fs::read(root.join(&p))?,
                    group: String::new(),
                }
            };
            found.push((p, m.ino(), s));
        }
    }
    Ok(grouped(found))
}

/// The states after each prefix of `ops` from `start`: `states[i]` after the first `i`.
pub fn states(start: &Model, ops: &[Op]) -> Vec<Canon> {
    let mut m = start.clone();
    let mut out = vec![m.canon()];
    for op in ops {
        m.apply(op);
        out.push(m.canon());
    }
    out
}

/// The operations a run with `seed` makes from `start`, the first `n` of them.
pub fn ops(start: &Model, seed: u64, first_id: u64, n: usize) -> Vec<Op> {
    let mut m = start.clone();
    let mut g = Gen(seed);
    (0..n)
        .map(|i| {
            let op = m.next_op(&mut g, first_id + i as u64);
            m.apply(&op);
            op
        })
        .collect()
}

impl Model {
    /// Whether the state read back is this one (without copying the contents).
    pub fn matches(&self, c: &Canon) -> bool {
        if self.tree.len() != c.len() {
            return false;
        }
        let mut first: BTreeMap<u64, &P> = BTreeMap::new();
        for (p, k) in &self.tree {
            if let Kind::File(g) = k {
                first.entry(*g).or_insert(p);
            }
        }
        self.tree.iter().all(|(p, k)| match (k, c.get(p)) {
            (Kind::Dir, Some(Seen::Dir)) => true,
            (Kind::Link(t), Some(Seen::Link(u))) => t == u,
            (Kind::File(g), Some(Seen::File { data, group })) => {
                &self.data[g] == data && first[g] == group
            }
            _ => false,
        })
    }
}

/// Checks that `got` is the state after some prefix of `ops` from `start`, at least
/// `floor` of them; returns how many (the highest such prefix). With `split_writes`, a
/// write may also have reached the file system in part, up to a 4 KiB boundary of the
/// file inside it: the kernel sends a `pwrite` through a FUSE mount as several requests
/// (a first partial page on its own, then up to `max_pages` pages each), and each is one
/// operation of the file system; then the write counts as not made.
pub fn check_prefix(
    start: &Model,
    ops: &[Op],
    got: &Canon,
    floor: usize,
    split_writes: bool,
    ctx: &str,
) -> usize {
    let mut m = start.clone();
    let mut found = (floor == 0 && m.matches(got)).then_some(0);
    for (i, op) in ops.iter().enumerate() {
        if let (true, Op::Write(p, off, data)) = (split_writes && i >= floor, op) {
            let mut t = m.clone();
            let end = off + data.len() as u64;
            let mut at = *off;
            for b in (off / 4096 + 1..)
                .map(|k| k * 4096)
                .take_while(|&b| b < end)
            {
                let part = data[(at - off) as usize..(b - off) as usize].to_vec();
                t.apply(&Op::Write(p.clone(), at, part));
                at = b;
                if t.matches(got) {
                    found = Some(i);
                }
            }
        }
        m.apply(op);
        if i + 1 >= floor && m.matches(got) {
            found = Some(i + 1);
        }
    }
    if let Some(p) = found {
        return p;
    }
    let states = states(start, ops);
    let any = (0..states.len()).rev().find(|&p| &states[p] == got);
    // The nearest state, and how the file system differs from it.
    let diffs = |s: &Canon| -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for p in s.keys().chain(got.keys()) {
            if s.get(p) != got.get(p) && !v.iter().any(|d| d.starts_with(&format!("{p}:"))) {
                let mut d = format!("{p}: {:?}, found {:?}", s.get(p), got.get(p));
                if let (Some(Seen::File { data: a, .. }), Some(Seen::File { data: b, .. })) =
                    (s.get(p), got.get(p))
                {
                    let first = a.iter().zip(b).position(|(x, y)| x != y);
                    let last = a.iter().zip(b).rposition(|(x, y)| x != y);
                    d += &format!(" (bytes differ from {first:?} to {last:?})");
                }
                v.push(d);
            }
        }
        v
    };
    let nearest = (0..states.len())
        .min_by_key(|&p| diffs(&states[p]).len())
        .unwrap_or(0);
    panic!(
        "{ctx}: the file system is not the state after any prefix of the {} operations \
         from the {floor} guaranteed on (it equals the state after {any:?}); the nearest \
         is the state after {nearest}: {:#?}; the operations: {:#?}",
        ops.len(),
        diffs(&states[nearest]),
        ops.iter().map(|o| format!("{o:.70?}")).collect::<Vec<_>>()
    )
}
