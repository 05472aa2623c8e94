//! The namespace tests of the [`FileSystem`] trait, shared by every implementation: a
//! local [`crate::Fs`] (crates/cairn-fs/tests/fs.rs) and a cluster of metadata servers
//! through its client (crates/cairn-cluster, crates/cairn-cli tests) run the same cases,
//! so the two keep the same operations, errors and rules.
//!
//! Test code (compiled with the `testsuite` feature only): a case reports a failure by
//! panicking, as `assert!` does. Each case takes a fresh, empty file system
//! ([`Target`]); [`conformance_tests!`](crate::conformance_tests) makes one `#[test]`
//! per case.
//!
//! Where an implementation legitimately differs from `Fs` (documented in DESIGN.md), its
//! [`Profile`] says so and the case checks the documented behaviour instead: nothing is
//! skipped silently.

// A case fails by panicking, like `assert!`: an unwrap here is an assertion that the
// operation succeeds, with the error in the panic message. The module is test code
// (the `testsuite` feature), not library code run by a file system.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use crate::{
    Cred, FileSystem, FsResult, SetAttr, TimeSet, RENAME_EXCHANGE, RENAME_NOREPLACE, ROOT,
    XATTR_CREATE, XATTR_REPLACE,
};

mod perms;
pub use perms::{data_access_by_inode, permissions, supplementary_groups};

/// How an implementation differs from `cairn_fs::Fs`, as its documentation says.
#[derive(Clone, Debug)]
pub struct Profile {
    /// Name shown in failure messages.
    pub name: &'static str,
    /// `readdir` lists names in byte order. `false`: in an order of its own that a
    /// resumed listing keeps (the cluster: by name hash, the order of its partitions).
    pub readdir_in_name_order: bool,
    /// Files created in the big-directory case.
    pub big_directory_entries: u32,
    /// [`FileSystem::set_permission_checks`]`(false)` switches the checks off. `false`:
    /// the implementation checks non-root callers whatever it is asked (a cluster
    /// client whose certificate does not allow root).
    pub checks_can_be_switched_off: bool,
}

impl Profile {
    /// The profile of `cairn_fs::Fs`: the reference every rule above describes.
    pub const LOCAL: Profile = Profile {
        name: "cairn_fs::Fs",
        readdir_in_name_order: true,
        big_directory_entries: 200_000,
        checks_can_be_switched_off: true,
    };
}

/// A fresh, empty file system to run one case on.
pub trait Target {
    /// The file system (its root directory is [`ROOT`], owned by root, mode 0755).
    fn fs(&self) -> &dyn FileSystem;
    /// How it differs from `cairn_fs::Fs`.
    fn profile(&self) -> &Profile;
    /// The implementation's consistency check of what it stores: the problems found
    /// (none when consistent).
    fn check(&self) -> Vec<String>;
}

const R: Cred = Cred::ROOT;
const ALICE: Cred = Cred::new(1000, 1000);
const BOB: Cred = Cred::new(1001, 1001);

/// The errno of a result that must be an error.
#[track_caller]
fn e<T: std::fmt::Debug>(r: FsResult<T>) -> i32 {
    r.expect_err("expected an error").0
}

/// The names of directory `ino`, in listing order.
fn names(fs: &dyn FileSystem, ino: u64) -> Vec<Vec<u8>> {
    fs.readdir(&R, ino, None, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect()
}

/// The names of directory `ino`, sorted.
fn sorted_names(fs: &dyn FileSystem, ino: u64) -> Vec<Vec<u8>> {
    let mut n = names(fs, ino);
    n.sort();
    n
}

/// Asserts that the implementation's check finds nothing.
#[track_caller]
fn assert_consistent(t: &dyn Target) {
    let report = t.check();
    assert!(
        report.is_empty(),
        "{}: inconsistent: {report:#?}",
        t.profile().name
    );
}

/// A small deterministic generator (SplitMix64) for the data cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn size(n: u64) -> SetAttr {
    SetAttr {
        size: Some(n),
        ..Default::default()
    }
}

fn mode(m: u32) -> SetAttr {
    SetAttr {
        mode: Some(m),
        ..Default::default()
    }
}

/// The root, lookups of `.`, `..`, missing and too long names.
pub fn root_and_lookup(t: &dyn Target) {
    let fs = t.fs();
    let root = fs.getattr(ROOT).unwrap();
    assert!(root.is_dir());
    assert_eq!(root.nlink, 2);
    assert_eq!(root.mode & 0o7777, 0o755);
    assert_eq!(fs.lookup(&R, ROOT, b".").unwrap().ino, ROOT);
    assert_eq!(fs.lookup(&R, ROOT, b"..").unwrap().ino, ROOT);
    assert_eq!(fs.parent_of(ROOT).unwrap(), ROOT);
    assert_eq!(e(fs.lookup(&R, ROOT, b"nope")), libc::ENOENT);
    assert_eq!(e(fs.getattr(999)), libc::ENOENT);
    let f = fs.create(&R, ROOT, b"f", 0o644).unwrap();
    assert_eq!(fs.lookup(&R, ROOT, b"f").unwrap(), f);
    assert_eq!(fs.getattr(f.ino).unwrap(), f);
    assert_eq!(e(fs.lookup(&R, f.ino, b"x")), libc::ENOTDIR);
    assert_eq!(e(fs.lookup(&R, ROOT, &[b'a'; 256])), libc::ENAMETOOLONG);
    assert_eq!(e(fs.lookup(&R, ROOT, b"")), libc::ENOENT);
    assert_consistent(t);
}

/// create, mkdir and mknod with their errors.
pub fn create_mkdir_mknod_errors(t: &dyn Target) {
    let fs = t.fs();
    let f = fs.create(&R, ROOT, b"f", 0o640).unwrap();
    assert_eq!(f.mode, libc::S_IFREG | 0o640);
    assert_eq!(f.nlink, 1);
    let root = fs.getattr(ROOT).unwrap();
    assert_eq!(e(fs.create(&R, ROOT, b"f", 0o644)), libc::EEXIST);
    assert_eq!(e(fs.mkdir(&R, ROOT, b"f", 0o755)), libc::EEXIST);
    // Refused, they changed nothing: the name keeps its file, the directory its links.
    assert_eq!(fs.lookup(&R, ROOT, b"f").unwrap().ino, f.ino);
    assert_eq!(fs.getattr(f.ino).unwrap().mode, libc::S_IFREG | 0o640);
    assert_eq!(fs.getattr(ROOT).unwrap().nlink, root.nlink);
    assert_eq!(e(fs.create(&R, ROOT, b".", 0o644)), libc::EEXIST);
    assert_eq!(
        e(fs.create(&R, ROOT, &[b'x'; 256], 0o644)),
        libc::ENAMETOOLONG
    );
    fs.create(&R, ROOT, &[b'x'; 255], 0o644).unwrap();
    assert_eq!(e(fs.create(&R, ROOT, b"a/b", 0o644)), libc::EINVAL);
    assert_eq!(e(fs.create(&R, ROOT, b"a\0b", 0o644)), libc::EINVAL);
    assert_eq!(e(fs.create(&R, f.ino, b"x", 0o644)), libc::ENOTDIR);
    assert_eq!(e(fs.create(&R, 12345, b"x", 0o644)), libc::ENOENT);
    // Any other byte is fine.
    let odd: Vec<u8> = (1u8..=255).filter(|b| *b != b'/').take(200).collect();
    fs.create(&R, ROOT, &odd, 0o644).unwrap();
    assert_eq!(fs.lookup(&R, ROOT, &odd).unwrap().size, 0);

    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap();
    assert_eq!(d.nlink, 2);
    assert_eq!(d.mode, libc::S_IFDIR | 0o755);
    assert_eq!(fs.getattr(ROOT).unwrap().nlink, 3);
    assert_eq!(fs.lookup(&R, d.ino, b"..").unwrap().ino, ROOT);
    assert_eq!(fs.parent_of(d.ino).unwrap(), ROOT);
    let dd = fs.mkdir(&R, d.ino, b"dd", 0o700).unwrap();
    assert_eq!(fs.lookup(&R, dd.ino, b"..").unwrap().ino, d.ino);
    assert_eq!(fs.lookup(&R, d.ino, b"dd").unwrap(), dd);
    assert_eq!(e(fs.mkdir(&R, d.ino, b"dd", 0o700)), libc::EEXIST);

    let fifo = fs
        .mknod(&R, ROOT, b"fifo", libc::S_IFIFO | 0o600, 0)
        .unwrap();
    assert_eq!(fifo.mode & libc::S_IFMT, libc::S_IFIFO);
    let dev = fs
        .mknod(&R, ROOT, b"dev", libc::S_IFCHR | 0o600, 0x0103)
        .unwrap();
    assert_eq!(dev.rdev, 0x0103);
    assert_eq!(fs.getattr(dev.ino).unwrap().rdev, 0x0103);
    assert_eq!(e(fs.mknod(&R, ROOT, b"bad", 0o170000, 0)), libc::EINVAL);
    assert_eq!(
        e(fs.mknod(&ALICE, ROOT, b"c", libc::S_IFCHR | 0o600, 1)),
        libc::EPERM
    );
    assert_consistent(t);
}

/// chmod, chown, utimens and truncate through setattr.
pub fn setattr_chmod_chown_truncate_utimens(t: &dyn Target) {
    let fs = t.fs();
    let f = fs.create(&R, ROOT, b"f", 0o644).unwrap();
    let a = fs.setattr(&R, f.ino, &mode(0o4755)).unwrap();
    assert_eq!(a.mode, libc::S_IFREG | 0o4755);
    let a = fs
        .setattr(
            &R,
            f.ino,
            &SetAttr {
                uid: Some(7),
                gid: Some(8),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!((a.uid, a.gid), (7, 8));
    assert_eq!(a.mode & libc::S_ISUID, 0, "chown clears set-user-id");
    let a = fs
        .setattr(
            &R,
            f.ino,
            &SetAttr {
                atime: Some(TimeSet::At(1_000)),
                mtime: Some(TimeSet::At(2_000)),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!((a.atime, a.mtime), (1_000, 2_000));
    assert_eq!(fs.getattr(f.ino).unwrap(), a);
    let a = fs
        .setattr(
            &R,
            f.ino,
            &SetAttr {
                mtime: Some(TimeSet::Now),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(a.mtime > 2_000);
    fs.write(&R, f.ino, 0, b"hello world").unwrap();
    let a = fs.setattr(&R, f.ino, &size(5)).unwrap();
    assert_eq!(a.size, 5);
    assert_eq!(fs.read(&R, f.ino, 0, 100).unwrap(), b"hello");
    fs.setattr(&R, f.ino, &size(8)).unwrap();
    assert_eq!(fs.read(&R, f.ino, 0, 100).unwrap(), b"hello\0\0\0");
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap();
    assert_eq!(e(fs.setattr(&R, d.ino, &size(0))), libc::EISDIR);
    let d2 = fs.setattr(&R, d.ino, &mode(0o711)).unwrap();
    assert_eq!(d2.mode, libc::S_IFDIR | 0o711);
    assert_eq!(
        fs.lookup(&R, ROOT, b"d").unwrap().mode,
        libc::S_IFDIR | 0o711
    );
    assert_eq!(e(fs.setattr(&R, 4242, &SetAttr::default())), libc::ENOENT);
    assert_consistent(t);
}

/// No file grows beyond `i64::MAX` bytes (the largest `off_t`; `st_size` is signed):
/// a setattr to a larger size, a write or an fallocate that would end past it, fail
/// with `EFBIG` and change nothing, not even the other attributes the same call sets.
pub fn sizes_beyond_the_largest_file(t: &dyn Target) {
    let fs = t.fs();
    let f = fs.create(&R, ROOT, b"f", 0o644).unwrap();
    fs.write(&R, f.ino, 0, b"hello").unwrap();
    let before = fs.getattr(f.ino).unwrap();
    for big in [i64::MAX as u64 + 1, u64::MAX - 1, u64::MAX] {
        assert_eq!(
            e(fs.setattr(&R, f.ino, &size(big))),
            libc::EFBIG,
            "size {big}"
        );
        let with_mode = SetAttr {
            size: Some(big),
            mode: Some(0o600),
            mtime: Some(TimeSet::At(1_000)),
            ..Default::default()
        };
        assert_eq!(
            e(fs.setattr(&R, f.ino, &with_mode)),
            libc::EFBIG,
            "size {big}"
        );
        assert_eq!(fs.getattr(f.ino).unwrap(), before, "size {big}");
    }
    // As large as a file can be, then back.
    let a = fs.setattr(&R, f.ino, &size(i64::MAX as u64)).unwrap();
    assert_eq!(a.size, i64::MAX as u64);
    assert_eq!(fs.getattr(f.ino).unwrap().size, i64::MAX as u64);
    assert_eq!(fs.read(&R, f.ino, 0, 8).unwrap(), b"hello\0\0\0");
    assert_eq!(fs.read(&R, f.ino, i64::MAX as u64 - 2, 8).unwrap(), [0, 0]);
    let a = fs.setattr(&R, f.ino, &size(5)).unwrap();
    assert_eq!(a.size, 5);
    let before = fs.getattr(f.ino).unwrap();
    assert_eq!(e(fs.write(&R, f.ino, i64::MAX as u64, b"x")), libc::EFBIG);
    assert_eq!(
        e(fs.write(&R, f.ino, i64::MAX as u64 - 1, b"xy")),
        libc::EFBIG
    );
    assert_eq!(e(fs.write(&R, f.ino, u64::MAX, b"x")), libc::EFBIG);
    assert_eq!(e(fs.fallocate(&R, f.ino, i64::MAX, 1, 0)), libc::EFBIG);
    assert_eq!(e(fs.fallocate(&R, f.ino, i64::MAX - 1, 2, 0)), libc::EFBIG);
    assert_eq!(fs.getattr(f.ino).unwrap(), before);
    assert_eq!(fs.read(&R, f.ino, 0, 100).unwrap(), b"hello");
    assert_consistent(t);
}

/// Reads and writes of small (inline) and large (chunked) files against a model.
pub fn data_inline_and_chunked(t: &dyn Target) {
    let fs = t.fs();
    let f = fs.create(&R, ROOT, b"f", 0o644).unwrap();
    assert_eq!(fs.read(&R, f.ino, 0, 10).unwrap(), b"");
    assert_eq!(fs.write(&R, f.ino, 0, b"abc").unwrap(), 3);
    assert_eq!(fs.write(&R, f.ino, 10, b"xyz").unwrap(), 3);
    assert_eq!(fs.read(&R, f.ino, 0, 100).unwrap(), b"abc\0\0\0\0\0\0\0xyz");
    assert_eq!(fs.read(&R, f.ino, 11, 1).unwrap(), b"y");
    assert_eq!(fs.read(&R, f.ino, 100, 1).unwrap(), b"");
    // Grow past the inline limit and across chunk boundaries, compare with a model.
    let mut model = fs.read(&R, f.ino, 0, 100).unwrap();
    let mut rng = Rng(7);
    for _ in 0..200 {
        let off = rng.below(300_000) as usize;
        let len = rng.below(70_000) as usize;
        let data = rng.bytes(len);
        assert_eq!(fs.write(&R, f.ino, off as u64, &data).unwrap(), len);
        if model.len() < off + len {
            model.resize(off + len, 0);
        }
        model[off..off + len].copy_from_slice(&data);
        if rng.below(10) == 0 {
            let n = rng.below(model.len() as u64 + 10) as usize;
            fs.setattr(&R, f.ino, &size(n as u64)).unwrap();
            model.resize(n, 0);
        }
        assert_eq!(fs.getattr(f.ino).unwrap().size, model.len() as u64);
    }
    assert_eq!(fs.read(&R, f.ino, 0, model.len() + 5).unwrap(), model);
    let mid = model.len() / 3;
    assert_eq!(
        fs.read(&R, f.ino, mid as u64, 100_000).unwrap(),
        model[mid..(mid + 100_000).min(model.len())]
    );
    assert_consistent(t);
    // Truncate to zero returns to inline.
    fs.setattr(&R, f.ino, &size(0)).unwrap();
    fs.write(&R, f.ino, 0, b"small").unwrap();
    assert_eq!(fs.read(&R, f.ino, 0, 100).unwrap(), b"small");
    fs.fsync(f.ino).unwrap();
    let dd = fs.mkdir(&R, ROOT, b"dir", 0o755).unwrap();
    assert_eq!(e(fs.write(&R, dd.ino, 0, b"x")), libc::EISDIR);
    assert_eq!(e(fs.read(&R, dd.ino, 0, 1)), libc::EISDIR);
    assert_eq!(e(fs.open_file(&R, dd.ino, libc::O_WRONLY)), libc::EISDIR);
    // O_TRUNC
    fs.open_file(&R, f.ino, libc::O_WRONLY | libc::O_TRUNC)
        .unwrap();
    fs.release(&R, f.ino).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().size, 0);
    // A large write in one call, read back across chunks.
    let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
    fs.write(&R, f.ino, 0, &big).unwrap();
    assert_eq!(fs.read(&R, f.ino, 0, 300_000).unwrap(), big);
    assert_eq!(fs.read(&R, f.ino, 65_530, 20).unwrap(), big[65_530..65_550]);
    fs.fsync(f.ino).unwrap();
    assert_consistent(t);
}

/// unlink, rmdir and link with their errors; files unlinked while open.
pub fn unlink_rmdir_link(t: &dyn Target) {
    let fs = t.fs();
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap();
    let f = fs.create(&R, d.ino, b"f", 0o644).unwrap();
    fs.write(&R, f.ino, 0, &vec![9u8; 100_000]).unwrap();
    fs.setxattr(&R, f.ino, b"user.a", b"1", 0).unwrap();
    let l = fs.link(&R, f.ino, ROOT, b"hard").unwrap();
    assert_eq!(l.nlink, 2);
    assert_eq!(l.ino, f.ino);
    assert_eq!(fs.lookup(&R, ROOT, b"hard").unwrap().ino, f.ino);
    assert_eq!(e(fs.link(&R, f.ino, ROOT, b"hard")), libc::EEXIST);
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 2);
    assert_eq!(e(fs.link(&R, d.ino, ROOT, b"dl")), libc::EPERM);
    assert_eq!(e(fs.link(&R, 777, ROOT, b"x")), libc::ENOENT);
    assert_eq!(e(fs.rmdir(&R, ROOT, b"d")), libc::ENOTEMPTY);
    assert_eq!(e(fs.rmdir(&R, d.ino, b"f")), libc::ENOTDIR);
    assert_eq!(e(fs.rmdir(&R, ROOT, b"nope")), libc::ENOENT);
    assert_eq!(e(fs.rmdir(&R, d.ino, b".")), libc::EINVAL);
    assert_eq!(e(fs.rmdir(&R, d.ino, b"..")), libc::ENOTEMPTY);
    assert_eq!(e(fs.unlink(&R, ROOT, b"d")), libc::EISDIR);
    assert_eq!(e(fs.unlink(&R, ROOT, b"nope")), libc::ENOENT);
    fs.unlink(&R, d.ino, b"f").unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 1);
    assert_eq!(fs.read(&R, f.ino, 0, 3).unwrap(), vec![9, 9, 9]);
    assert_eq!(fs.getxattr(&R, f.ino, b"user.a").unwrap(), b"1");
    fs.rmdir(&R, ROOT, b"d").unwrap();
    assert_eq!(fs.getattr(ROOT).unwrap().nlink, 2);
    assert_eq!(e(fs.getattr(d.ino)), libc::ENOENT);
    assert_eq!(e(fs.lookup(&R, ROOT, b"d")), libc::ENOENT);
    assert_eq!(e(fs.create(&R, d.ino, b"late", 0o644)), libc::ENOENT);
    // Unlinked while open: data stays until the last close.
    fs.open_file(&R, f.ino, libc::O_RDONLY).unwrap();
    fs.unlink(&R, ROOT, b"hard").unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 0);
    assert_eq!(fs.read(&R, f.ino, 0, 2).unwrap(), vec![9, 9]);
    assert_consistent(t);
    fs.release(&R, f.ino).unwrap();
    assert_eq!(e(fs.getattr(f.ino)), libc::ENOENT);
    assert_eq!(names(fs, ROOT), Vec::<Vec<u8>>::new());
    assert_consistent(t);
}

/// Symbolic links: target, size, errors.
pub fn symlinks(t: &dyn Target) {
    let fs = t.fs();
    let s = fs.symlink(&R, ROOT, b"s", b"../target/x").unwrap();
    assert_eq!(s.mode, libc::S_IFLNK | 0o777);
    assert_eq!(s.size, 11);
    assert_eq!(fs.readlink(&R, s.ino).unwrap(), b"../target/x");
    assert_eq!(fs.lookup(&R, ROOT, b"s").unwrap(), s);
    let f = fs.create(&R, ROOT, b"f", 0o644).unwrap();
    assert_eq!(e(fs.readlink(&R, f.ino)), libc::EINVAL);
    assert_eq!(e(fs.symlink(&R, ROOT, b"s", b"y")), libc::EEXIST);
    assert_eq!(
        e(fs.symlink(&R, ROOT, b"t", &vec![b'a'; 5000])),
        libc::ENAMETOOLONG
    );
    assert_eq!(e(fs.readlink(&R, 999)), libc::ENOENT);
    fs.unlink(&R, ROOT, b"s").unwrap();
    assert_eq!(e(fs.readlink(&R, s.ino)), libc::ENOENT);
    assert_consistent(t);
}

/// rename in all its forms: moves, replacing files and empty directories, NOREPLACE,
/// EXCHANGE, the errors, and a directory into its own subtree.
pub fn rename_cases(t: &dyn Target) {
    let fs = t.fs();
    let a = fs.mkdir(&R, ROOT, b"a", 0o755).unwrap();
    let b = fs.mkdir(&R, ROOT, b"b", 0o755).unwrap();
    let f = fs.create(&R, a.ino, b"f", 0o644).unwrap();
    let g = fs.create(&R, b.ino, b"g", 0o644).unwrap();
    // Plain move across directories.
    fs.rename(&R, a.ino, b"f", b.ino, b"f2", 0).unwrap();
    assert_eq!(e(fs.lookup(&R, a.ino, b"f")), libc::ENOENT);
    assert_eq!(fs.lookup(&R, b.ino, b"f2").unwrap().ino, f.ino);
    // Replace an existing file: the replaced inode goes.
    fs.rename(&R, b.ino, b"f2", b.ino, b"g", 0).unwrap();
    assert_eq!(fs.lookup(&R, b.ino, b"g").unwrap().ino, f.ino);
    assert_eq!(e(fs.getattr(g.ino)), libc::ENOENT);
    // Onto itself (same inode): nothing happens.
    fs.link(&R, f.ino, b.ino, b"h").unwrap();
    fs.rename(&R, b.ino, b"g", b.ino, b"h", 0).unwrap();
    assert_eq!(sorted_names(fs, b.ino), vec![b"g".to_vec(), b"h".to_vec()]);
    // NOREPLACE
    assert_eq!(
        e(fs.rename(&R, b.ino, b"g", b.ino, b"h", RENAME_NOREPLACE)),
        libc::EEXIST
    );
    fs.unlink(&R, b.ino, b"h").unwrap();
    fs.rename(&R, b.ino, b"g", b.ino, b"n", RENAME_NOREPLACE)
        .unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 1);
    // Errors.
    assert_eq!(
        e(fs.rename(&R, b.ino, b"missing", ROOT, b"x", 0)),
        libc::ENOENT
    );
    assert_eq!(e(fs.rename(&R, ROOT, b"a", ROOT, b"b", 3)), libc::EINVAL);
    assert_eq!(e(fs.rename(&R, ROOT, b"a", ROOT, b"b", 8)), libc::EINVAL);
    assert_eq!(
        e(fs.rename(&R, ROOT, b"a", b.ino, &[b'z'; 256], 0)),
        libc::ENAMETOOLONG
    );
    assert_eq!(e(fs.rename(&R, b.ino, b"n", ROOT, b"a", 0)), libc::EISDIR);
    assert_eq!(e(fs.rename(&R, ROOT, b"a", b.ino, b"n", 0)), libc::ENOTDIR);
    assert_eq!(e(fs.rename(&R, ROOT, b"a", ROOT, b"b", 0)), libc::ENOTEMPTY);
    // Directory into its own subtree.
    let sub = fs.mkdir(&R, a.ino, b"sub", 0o755).unwrap();
    assert_eq!(e(fs.rename(&R, ROOT, b"a", sub.ino, b"a", 0)), libc::EINVAL);
    assert_eq!(e(fs.rename(&R, ROOT, b"a", a.ino, b"x", 0)), libc::EINVAL);
    // Move a directory: link counts and ".." follow.
    fs.rename(&R, a.ino, b"sub", b.ino, b"sub", 0).unwrap();
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 2);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 3);
    assert_eq!(fs.lookup(&R, sub.ino, b"..").unwrap().ino, b.ino);
    assert_eq!(fs.parent_of(sub.ino).unwrap(), b.ino);
    // Replace an empty directory with a directory.
    let e1 = fs.mkdir(&R, ROOT, b"empty", 0o755).unwrap();
    fs.rename(&R, b.ino, b"sub", ROOT, b"empty", 0).unwrap();
    assert_eq!(e(fs.getattr(e1.ino)), libc::ENOENT);
    assert_eq!(fs.lookup(&R, ROOT, b"empty").unwrap().ino, sub.ino);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 2);
    assert_eq!(fs.parent_of(sub.ino).unwrap(), ROOT);
    assert_consistent(t);
    // EXCHANGE: a file and a directory in different parents.
    assert_eq!(
        e(fs.rename(&R, b.ino, b"n", ROOT, b"nothing", RENAME_EXCHANGE)),
        libc::ENOENT
    );
    fs.rename(&R, b.ino, b"n", ROOT, b"empty", RENAME_EXCHANGE)
        .unwrap();
    assert_eq!(fs.lookup(&R, ROOT, b"empty").unwrap().ino, f.ino);
    assert_eq!(fs.lookup(&R, b.ino, b"n").unwrap().ino, sub.ino);
    assert_eq!(fs.lookup(&R, sub.ino, b"..").unwrap().ino, b.ino);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 3);
    // EXCHANGE refusing a directory into its own subtree.
    let deep = fs.mkdir(&R, sub.ino, b"deep", 0o755).unwrap();
    assert_eq!(
        e(fs.rename(&R, ROOT, b"b", deep.ino, b"x", RENAME_EXCHANGE)),
        libc::ENOENT
    );
    fs.create(&R, deep.ino, b"x", 0o644).unwrap();
    assert_eq!(
        e(fs.rename(&R, ROOT, b"b", deep.ino, b"x", RENAME_EXCHANGE)),
        libc::EINVAL
    );
    assert_consistent(t);
}

/// Many renames of files and directories between directories, checked against a
/// model of the tree: the entries of the file system are the model's after each step.
pub fn rename_many(t: &dyn Target) {
    let fs = t.fs();
    let dirs: Vec<u64> = (0..6)
        .map(|i| {
            fs.mkdir(&R, ROOT, format!("d{i}").as_bytes(), 0o755)
                .unwrap()
                .ino
        })
        .collect();
    let mut rng = Rng(11);
    // (dir index, name) -> ino of the files.
    let mut model: std::collections::BTreeMap<(usize, Vec<u8>), u64> = Default::default();
    for i in 0..60 {
        let d = rng.below(dirs.len() as u64) as usize;
        let name = format!("f{i}").into_bytes();
        let a = fs.create(&R, dirs[d], &name, 0o644).unwrap();
        model.insert((d, name), a.ino);
    }
    for step in 0..300 {
        let keys: Vec<_> = model.keys().cloned().collect();
        let (sd, sn) = keys[rng.below(keys.len() as u64) as usize].clone();
        let dd = rng.below(dirs.len() as u64) as usize;
        let dn = format!("r{}", rng.below(80)).into_bytes();
        let r = fs.rename(&R, dirs[sd], &sn, dirs[dd], &dn, 0);
        if (sd, &sn) == (dd, &dn) {
            r.unwrap();
            continue;
        }
        r.unwrap_or_else(|e| panic!("step {step}: rename: {e}"));
        let ino = model.remove(&(sd, sn)).unwrap();
        if let Some(old) = model.insert((dd, dn), ino) {
            assert_eq!(e(fs.getattr(old)), libc::ENOENT, "step {step}: replaced");
        }
    }
    for (i, d) in dirs.iter().enumerate() {
        let want: BTreeSet<Vec<u8>> = model
            .keys()
            .filter(|(di, _)| *di == i)
            .map(|(_, n)| n.clone())
            .collect();
        let got: BTreeSet<Vec<u8>> = names(fs, *d).into_iter().collect();
        assert_eq!(got, want, "directory d{i}");
        for n in &want {
            assert_eq!(
                fs.lookup(&R, *d, n).unwrap().ino,
                model[&(i, n.clone())],
                "d{i}/{}",
                String::from_utf8_lossy(n)
            );
        }
    }
    // Directories move too, with their contents.
    fs.rename(&R, ROOT, b"d0", dirs[1], b"moved", 0).unwrap();
    assert_eq!(fs.lookup(&R, dirs[1], b"moved").unwrap().ino, dirs[0]);
    assert_eq!(fs.parent_of(dirs[0]).unwrap(), dirs[1]);
    let inside = model.keys().filter(|(di, _)| *di == 0).count();
    assert_eq!(names(fs, dirs[0]).len(), inside);
    assert_eq!(
        e(fs.rename(&R, ROOT, b"d1", dirs[0], b"loop", 0)),
        libc::EINVAL
    );
    assert_consistent(t);
}

/// Paged listings while the directory changes; readdir of a file; limit 0.
pub fn readdir_cursor_and_changes(t: &dyn Target) {
    let fs = t.fs();
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap();
    for i in 0..1000u32 {
        fs.create(&R, d.ino, format!("f{i:05}").as_bytes(), 0o644)
            .unwrap();
    }
    // Paged listing while the directory changes: every name present throughout is seen
    // exactly once (in name order where the implementation lists in name order).
    let mut seen = Vec::new();
    let mut cursor: Option<Vec<u8>> = None;
    let mut round = 0u32;
    let mut removed = BTreeSet::new();
    let mut added = 0;
    loop {
        let page = fs.readdir(&R, d.ino, cursor.as_deref(), 37).unwrap();
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 37);
        cursor = Some(page.last().unwrap().name.clone());
        seen.extend(page.into_iter().map(|e| e.name));
        // Add names (in name order: before and after the cursor) in the first rounds,
        // remove odd-numbered late names.
        if round < 20 {
            fs.create(&R, d.ino, format!("a{round:05}").as_bytes(), 0o644)
                .unwrap();
            fs.create(&R, d.ino, format!("z{round:05}").as_bytes(), 0o644)
                .unwrap();
            added += 2;
        }
        if round < 100 {
            let victim = 999 - round * 2;
            fs.unlink(&R, d.ino, format!("f{victim:05}").as_bytes())
                .unwrap();
            removed.insert(victim);
        }
        round += 1;
        assert!(round < 1000, "the listing does not end");
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), seen.len(), "no duplicates");
    if t.profile().readdir_in_name_order {
        assert_eq!(sorted, seen, "in order");
    }
    for i in 0..1000u32 {
        let n = format!("f{i:05}");
        if !removed.contains(&i) {
            assert!(
                sorted.binary_search(&n.into_bytes()).is_ok(),
                "f{i:05} missing"
            );
        }
    }
    // A full listing now: exactly the entries there are, in the same order as a paged
    // one with any page size.
    let all = names(fs, d.ino);
    assert_eq!(all.len(), 1000 - removed.len() + added);
    for page_size in [1usize, 7, 500] {
        let mut paged = Vec::new();
        let mut cursor: Option<Vec<u8>> = None;
        loop {
            let page = fs.readdir(&R, d.ino, cursor.as_deref(), page_size).unwrap();
            let Some(last) = page.last() else { break };
            cursor = Some(last.name.clone());
            paged.extend(page.into_iter().map(|e| e.name));
        }
        assert_eq!(paged, all, "pages of {page_size}");
    }
    let f = fs.lookup(&R, d.ino, b"f00000").unwrap();
    assert_eq!(e(fs.readdir(&R, f.ino, None, 10)), libc::ENOTDIR);
    assert_eq!(e(fs.readdir(&R, 424_242, None, 10)), libc::ENOENT);
    let entries = fs.readdir(&R, d.ino, None, usize::MAX).unwrap();
    for en in &entries {
        assert_eq!(en.kind, libc::S_IFREG);
        assert_eq!(fs.lookup(&R, d.ino, &en.name).unwrap().ino, en.ino);
    }
    assert!(fs.readdir(&R, d.ino, None, 0).unwrap().is_empty());
    assert_consistent(t);
}

/// Access times follow `relatime`.
pub fn atime_follows_relatime(t: &dyn Target) {
    let fs = t.fs();
    let f = fs.create(&R, ROOT, b"f", 0o644).unwrap();
    fs.write(&R, f.ino, 0, b"data").unwrap();
    let before = fs.getattr(f.ino).unwrap();
    assert!(before.atime <= before.mtime);
    // First read after a write: atime is not newer than mtime, so it is set.
    std::thread::sleep(std::time::Duration::from_millis(2));
    fs.read(&R, f.ino, 0, 10).unwrap();
    let a1 = fs.getattr(f.ino).unwrap().atime;
    assert!(a1 > before.mtime, "read set atime");
    // A second read within a day writes nothing.
    std::thread::sleep(std::time::Duration::from_millis(2));
    fs.read(&R, f.ino, 0, 10).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().atime, a1);
    // An atime more than a day old is refreshed.
    let old = a1 - 2 * 24 * 3600 * 1_000_000_000;
    let set = SetAttr {
        atime: Some(TimeSet::At(old)),
        ..SetAttr::default()
    };
    fs.setattr(&R, f.ino, &set).unwrap();
    // (setattr also set ctime to now, so both rules ask for the update.)
    fs.read(&R, f.ino, 0, 1).unwrap();
    assert!(fs.getattr(f.ino).unwrap().atime > a1);
    // Listing a directory from its start is a read of it.
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2));
    fs.readdir(&R, d.ino, None, 10).unwrap();
    assert!(fs.getattr(d.ino).unwrap().atime > d.atime);
    // Reads leave mtime and ctime alone.
    let after = fs.getattr(f.ino).unwrap();
    assert_eq!(after.mtime, before.mtime);
    assert_consistent(t);
}

/// A directory's times follow the entries created and removed in it.
pub fn directory_times(t: &dyn Target) {
    let fs = t.fs();
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap();
    let mut last = fs.getattr(d.ino).unwrap().mtime;
    for i in 0..10 {
        std::thread::sleep(std::time::Duration::from_millis(1));
        let f = fs
            .create(&R, d.ino, format!("f{i}").as_bytes(), 0o644)
            .unwrap();
        let a = fs.getattr(d.ino).unwrap();
        assert_eq!(a.mtime, f.ctime, "create {i} shows in the mtime");
        assert!(a.mtime > last);
        last = a.mtime;
    }
    std::thread::sleep(std::time::Duration::from_millis(1));
    fs.unlink(&R, d.ino, b"f3").unwrap();
    assert!(fs.getattr(d.ino).unwrap().mtime > last);
    // Explicit times.
    let a = fs
        .setattr(
            &R,
            d.ino,
            &SetAttr {
                mtime: Some(TimeSet::At(77)),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(a.mtime, 77);
    assert_eq!(fs.getattr(d.ino).unwrap().mtime, 77);
    fs.fsync(d.ino).unwrap();
    assert_eq!(names(fs, d.ino).len(), 9);
    assert_consistent(t);
}

/// A directory far bigger than a page of the listing (and, on a cluster, than a
/// partition): paged listing sees every name once, and lookups and removals work
/// throughout.
pub fn big_directory(t: &dyn Target) {
    let fs = t.fs();
    let n = t.profile().big_directory_entries;
    let d = fs.mkdir(&R, ROOT, b"big", 0o755).unwrap();
    for i in 0..n {
        // Names in an order unlike their sorted order.
        let k = (i as u64 * 7919) % n as u64;
        fs.create(&R, d.ino, format!("n{k:07}").as_bytes(), 0o644)
            .unwrap();
    }
    let list = |fs: &dyn FileSystem| {
        let mut out = Vec::with_capacity(n as usize);
        let mut cursor: Option<Vec<u8>> = None;
        loop {
            let page = fs.readdir(&R, d.ino, cursor.as_deref(), 4096).unwrap();
            let Some(last) = page.last() else { break };
            cursor = Some(last.name.clone());
            out.extend(page.into_iter().map(|e| e.name));
        }
        out
    };
    let want: Vec<Vec<u8>> = (0..n).map(|k| format!("n{k:07}").into_bytes()).collect();
    let sorted = |mut v: Vec<Vec<u8>>| {
        v.sort();
        v
    };
    let listed = list(fs);
    if t.profile().readdir_in_name_order {
        assert_eq!(listed, want);
    } else {
        assert_eq!(sorted(listed), want);
    }
    assert_eq!(fs.getattr(d.ino).unwrap().nlink, 2);
    for k in (0..n).step_by(2) {
        fs.unlink(&R, d.ino, format!("n{k:07}").as_bytes()).unwrap();
    }
    let left = sorted(list(fs));
    let want_left: Vec<Vec<u8>> = want.iter().skip(1).step_by(2).cloned().collect();
    assert_eq!(left, want_left);
    assert!(fs.lookup(&R, d.ino, b"n0000001").is_ok());
    assert_eq!(e(fs.lookup(&R, d.ino, b"n0000002")), libc::ENOENT);
    assert_consistent(t);
}

/// Extended attributes: flags, errors, namespaces, and an access ACL that sets the mode.
pub fn xattrs(t: &dyn Target) {
    let fs = t.fs();
    fs.setattr(&R, ROOT, &mode(0o777)).unwrap();
    let f = fs.create(&ALICE, ROOT, b"f", 0o644).unwrap();
    assert_eq!(e(fs.getxattr(&R, f.ino, b"user.x")), libc::ENODATA);
    fs.setxattr(&R, f.ino, b"user.x", b"1", 0).unwrap();
    fs.setxattr(&R, f.ino, b"user.y", b"", 0).unwrap();
    assert_eq!(fs.getxattr(&R, f.ino, b"user.x").unwrap(), b"1");
    assert_eq!(fs.getxattr(&R, f.ino, b"user.y").unwrap(), b"");
    assert_eq!(
        e(fs.setxattr(&R, f.ino, b"user.x", b"2", XATTR_CREATE)),
        libc::EEXIST
    );
    assert_eq!(
        e(fs.setxattr(&R, f.ino, b"user.z", b"2", XATTR_REPLACE)),
        libc::ENODATA
    );
    fs.setxattr(&R, f.ino, b"user.x", b"2", XATTR_REPLACE)
        .unwrap();
    assert_eq!(fs.getxattr(&R, f.ino, b"user.x").unwrap(), b"2");
    assert_eq!(
        fs.listxattr(&R, f.ino).unwrap(),
        vec![b"user.x".to_vec(), b"user.y".to_vec()]
    );
    assert_eq!(
        e(fs.setxattr(&BOB, f.ino, b"user.q", b"2", 0)),
        libc::EACCES
    );
    assert_eq!(
        e(fs.setxattr(&ALICE, f.ino, b"trusted.q", b"2", 0)),
        libc::EPERM
    );
    assert_eq!(e(fs.removexattr(&R, f.ino, b"user.nope")), libc::ENODATA);
    fs.removexattr(&R, f.ino, b"user.x").unwrap();
    assert_eq!(fs.listxattr(&R, f.ino).unwrap(), vec![b"user.y".to_vec()]);
    assert_eq!(e(fs.getxattr(&R, 999, b"user.x")), libc::ENOENT);
    assert_eq!(e(fs.getxattr(&R, f.ino, b"")), libc::EINVAL);
    // On a directory too.
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap();
    fs.setxattr(&R, d.ino, b"user.d", b"dir", 0).unwrap();
    assert_eq!(fs.getxattr(&R, d.ino, b"user.d").unwrap(), b"dir");
    // A minimal access ACL only sets the permission bits (as `cp -a` uses it).
    let acl = |u: u16, g: u16, o: u16| {
        let mut v = 2u32.to_le_bytes().to_vec();
        for (tag, perm) in [(1u16, u), (4, g), (0x20, o)] {
            v.extend_from_slice(&tag.to_le_bytes());
            v.extend_from_slice(&perm.to_le_bytes());
            v.extend_from_slice(&u32::MAX.to_le_bytes());
        }
        v
    };
    fs.setxattr(&R, f.ino, b"system.posix_acl_access", &acl(6, 4, 0), 0)
        .unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().mode, libc::S_IFREG | 0o640);
    assert_eq!(fs.listxattr(&R, f.ino).unwrap(), vec![b"user.y".to_vec()]);
    assert_eq!(
        e(fs.setxattr(&R, f.ino, b"system.posix_acl_access", b"junk", 0)),
        libc::EINVAL
    );
    fs.unlink(&R, ROOT, b"f").unwrap();
    assert_consistent(t);
}

/// statfs figures.
pub fn statfs(t: &dyn Target) {
    let fs = t.fs();
    let s = fs.statfs().unwrap();
    assert_eq!(s.namelen, 255);
    assert!(s.blocks > 0 && s.ffree > 0 && s.bsize > 0);
    assert!(s.bfree <= s.blocks && s.bavail <= s.blocks);
}

/// A case of the suite.
pub type Case = fn(&dyn Target);

/// Every case, by name (what [`conformance_tests!`](crate::conformance_tests) runs).
pub const CASES: &[(&str, Case)] = &[
    ("root_and_lookup", root_and_lookup),
    ("create_mkdir_mknod_errors", create_mkdir_mknod_errors),
    ("permissions", permissions),
    ("supplementary_groups", supplementary_groups),
    ("data_access_by_inode", data_access_by_inode),
    (
        "setattr_chmod_chown_truncate_utimens",
        setattr_chmod_chown_truncate_utimens,
    ),
    (
        "sizes_beyond_the_largest_file",
        sizes_beyond_the_largest_file,
    ),
    ("data_inline_and_chunked", data_inline_and_chunked),
    ("unlink_rmdir_link", unlink_rmdir_link),
    ("symlinks", symlinks),
    ("rename_cases", rename_cases),
    ("rename_many", rename_many),
    ("readdir_cursor_and_changes", readdir_cursor_and_changes),
    ("atime_follows_relatime", atime_follows_relatime),
    ("directory_times", directory_times),
    ("big_directory", big_directory),
    ("xattrs", xattrs),
    ("statfs", statfs),
];

/// One `#[test]` per case of [`conformance`](crate::conformance), each on a fresh
/// target made by the expression given (anything that implements
/// [`Target`](crate::conformance::Target)):
///
/// ```ignore
/// cairn_fs::conformance_tests!(LocalTarget::new());
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@cases $make;
            root_and_lookup,
            create_mkdir_mknod_errors,
            permissions,
            supplementary_groups,
            data_access_by_inode,
            setattr_chmod_chown_truncate_utimens,
            sizes_beyond_the_largest_file,
            data_inline_and_chunked,
            unlink_rmdir_link,
            symlinks,
            rename_cases,
            rename_many,
            readdir_cursor_and_changes,
            atime_follows_relatime,
            directory_times,
            big_directory,
            xattrs,
            statfs,
        );
    };
    (@cases $make:expr; $($case:ident,)*) => {
        $(
            #[test]
            fn $case() {
                let target = $make;
                $crate::conformance::$case(&target);
            }
        )*
        /// The macro's list and the suite's agree (a case added to one only fails here).
        #[test]
        fn conformance_cases_all_listed() {
            let listed: &[&str] = &[$(stringify!($case)),*];
            let cases: Vec<&str> = $crate::conformance::CASES.iter().map(|c| c.0).collect();
            assert_eq!(listed, cases.as_slice());
        }
    };
}
