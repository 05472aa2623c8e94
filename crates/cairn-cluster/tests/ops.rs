//! The operation tests of `cairn_fs` (crates/cairn-fs/tests/fs.rs), run against a
//! cluster of three in-process servers through the `FileSystem` trait: the same
//! results and errnos. Where the cluster legitimately differs it says so here:
//! listings come in hash order (the tests compare sorted names), and a store is not
//! reopened by a test (restarts are in crash.rs).

mod common;

use std::time::Duration;

use cairn_fs::{
    Cred, FileSystem, Groups, SetAttr, TimeSet, RENAME_EXCHANGE, RENAME_NOREPLACE, ROOT,
    XATTR_CREATE, XATTR_REPLACE,
};
use common::{e, Cluster};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const R: Cred = Cred::ROOT;
const ALICE: Cred = Cred::new(1000, 1000);
const BOB: Cred = Cred::new(1001, 1001);

/// A cluster and a client of it, and a check of the namespace when dropped.
struct Fresh {
    c: std::cell::RefCell<Option<Cluster>>,
    fs: cairn_cluster::Client,
}

impl Fresh {
    /// Shuts every server down cleanly and starts it again on its store.
    fn restart_all(&self) {
        let mut c = self.c.borrow_mut();
        let c = c.as_mut().unwrap();
        for i in 0..c.servers.len() {
            c.shutdown_one(i);
            c.restart(i, None);
        }
    }
}

impl std::ops::Deref for Fresh {
    type Target = cairn_cluster::Client;
    fn deref(&self) -> &cairn_cluster::Client {
        &self.fs
    }
}

impl Drop for Fresh {
    fn drop(&mut self) {
        if let Some(c) = self.c.borrow_mut().take() {
            if !std::thread::panicking() {
                c.check();
            }
            c.shutdown();
        }
    }
}

fn fresh() -> ((), Fresh) {
    let c = Cluster::start(3, 8192);
    let fs = c.client();
    (
        (),
        Fresh {
            c: std::cell::RefCell::new(Some(c)),
            fs,
        },
    )
}

/// Names of a directory, sorted (a cluster lists in hash order).
fn names(fs: &dyn FileSystem, ino: u64) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = fs
        .readdir(&R, ino, None, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    v.sort();
    v
}

fn assert_consistent(fs: &Fresh) {
    if let Some(c) = fs.c.borrow().as_ref() {
        c.check();
    }
}

#[test]
fn root_and_lookup() {
    let (_d, fs) = fresh();
    let fs = &fs;
    let root = fs.getattr(ROOT).unwrap();
    assert!(root.is_dir());
    assert_eq!(root.nlink, 2);
    assert_eq!(fs.lookup(&R, ROOT, b".").unwrap().ino, ROOT);
    assert_eq!(fs.lookup(&R, ROOT, b"..").unwrap().ino, ROOT);
    assert_eq!(e(fs.lookup(&R, ROOT, b"nope")), libc::ENOENT);
    assert_eq!(e(fs.getattr(999)), libc::ENOENT);
    let f = fs.create(&R, ROOT, b"f", 0o644).unwrap();
    assert_eq!(fs.lookup(&R, ROOT, b"f").unwrap(), f);
    assert_eq!(e(fs.lookup(&R, f.ino, b"x")), libc::ENOTDIR);
    assert_eq!(e(fs.lookup(&R, ROOT, &[b'a'; 256])), libc::ENAMETOOLONG);
    assert_eq!(e(fs.lookup(&R, ROOT, b"")), libc::ENOENT);
}

#[test]
fn create_mkdir_mknod_errors() {
    let (_d, fs) = fresh();
    let fs = &fs;
    let f = fs.create(&R, ROOT, b"f", 0o640).unwrap();
    assert_eq!(f.mode, libc::S_IFREG | 0o640);
    assert_eq!(f.nlink, 1);
    assert_eq!(e(fs.create(&R, ROOT, b"f", 0o644)), libc::EEXIST);
    assert_eq!(e(fs.mkdir(&R, ROOT, b"f", 0o755)), libc::EEXIST);
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
    assert_eq!(fs.getattr(ROOT).unwrap().nlink, 3);
    assert_eq!(fs.lookup(&R, d.ino, b"..").unwrap().ino, ROOT);

    let fifo = fs
        .mknod(&R, ROOT, b"fifo", libc::S_IFIFO | 0o600, 0)
        .unwrap();
    assert_eq!(fifo.mode & libc::S_IFMT, libc::S_IFIFO);
    let dev = fs
        .mknod(&R, ROOT, b"dev", libc::S_IFCHR | 0o600, 0x0103)
        .unwrap();
    assert_eq!(dev.rdev, 0x0103);
    assert_eq!(e(fs.mknod(&R, ROOT, b"bad", 0o170000, 0)), libc::EINVAL);
    assert_eq!(
        e(fs.mknod(&ALICE, ROOT, b"c", libc::S_IFCHR | 0o600, 1)),
        libc::EPERM
    );
    assert_consistent(fs);
}

#[test]
fn permissions() {
    let (_d, fs) = fresh();
    let fs = &fs;
    let home = fs.mkdir(&R, ROOT, b"home", 0o755).unwrap();
    // Only root may write in a 0755 root-owned dir.
    assert_eq!(e(fs.create(&ALICE, home.ino, b"x", 0o644)), libc::EACCES);
    fs.setattr(
        &R,
        home.ino,
        &SetAttr {
            uid: Some(1000),
            gid: Some(1000),
            ..Default::default()
        },
    )
    .unwrap();
    let f = fs.create(&ALICE, home.ino, b"x", 0o600).unwrap();
    assert_eq!((f.uid, f.gid), (1000, 1000));
    assert_eq!(e(fs.open_file(&BOB, f.ino, libc::O_RDONLY)), libc::EACCES);
    fs.open_file(&ALICE, f.ino, libc::O_RDWR).unwrap();
    fs.release(&ALICE, f.ino).unwrap();
    // chmod by a non-owner, chown by a non-root user, explicit times by a non-owner.
    let chmod = SetAttr {
        mode: Some(0o644),
        ..Default::default()
    };
    assert_eq!(e(fs.setattr(&BOB, f.ino, &chmod)), libc::EPERM);
    fs.setattr(&ALICE, f.ino, &chmod).unwrap();
    let chown = SetAttr {
        uid: Some(1001),
        ..Default::default()
    };
    assert_eq!(e(fs.setattr(&ALICE, f.ino, &chown)), libc::EPERM);
    fs.setattr(&R, f.ino, &chown).unwrap();
    let times = SetAttr {
        mtime: Some(TimeSet::At(5)),
        ..Default::default()
    };
    assert_eq!(e(fs.setattr(&ALICE, f.ino, &times)), libc::EPERM);
    let trunc = SetAttr {
        size: Some(0),
        ..Default::default()
    };
    assert_eq!(e(fs.setattr(&ALICE, f.ino, &trunc)), libc::EACCES);
    // Search permission on the directory.
    fs.setattr(
        &R,
        home.ino,
        &SetAttr {
            mode: Some(0o700),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(e(fs.lookup(&BOB, home.ino, b"x")), libc::EACCES);
    assert_eq!(e(fs.opendir(&BOB, home.ino)), libc::EACCES);
    fs.opendir(&ALICE, home.ino).unwrap();
    assert_eq!(e(fs.unlink(&BOB, home.ino, b"x")), libc::EACCES);
    // Sticky directory: only the owner of a file (or of the directory) removes it.
    let tmp = fs.mkdir(&R, ROOT, b"tmp", 0o1777).unwrap();
    fs.create(&ALICE, tmp.ino, b"a", 0o644).unwrap();
    assert_eq!(e(fs.unlink(&BOB, tmp.ino, b"a")), libc::EPERM);
    fs.unlink(&ALICE, tmp.ino, b"a").unwrap();
    // Switched off (as under a FUSE mount with default_permissions).
    fs.set_permission_checks(false);
    fs.lookup(&BOB, home.ino, b"x").unwrap();
    assert_consistent(fs);
}

#[test]
fn supplementary_groups() {
    let (_d, fs) = fresh();
    let fs = &fs;
    let staff = 50;
    let shared = fs.mkdir(&R, ROOT, b"shared", 0o770).unwrap();
    fs.setattr(
        &R,
        shared.ino,
        &SetAttr {
            gid: Some(staff),
            ..Default::default()
        },
    )
    .unwrap();
    let carol = Cred::new(1002, 1002).with_groups(&[7, staff]);
    // Group access through a supplementary group; none without it.
    let f = fs.create(&carol, shared.ino, b"notes", 0o640).unwrap();
    assert_eq!(e(fs.create(&BOB, shared.ino, b"x", 0o644)), libc::EACCES);
    assert_eq!(e(fs.lookup(&BOB, shared.ino, b"notes")), libc::EACCES);
    // chgrp to a group the owner belongs to, not to another.
    let to = |gid| SetAttr {
        gid: Some(gid),
        ..Default::default()
    };
    fs.setattr(&carol, f.ino, &to(staff)).unwrap();
    fs.setattr(&carol, f.ino, &to(7)).unwrap();
    assert_eq!(e(fs.setattr(&carol, f.ino, &to(99))), libc::EPERM);
    // Reading by another member of the file's group.
    fs.setattr(&carol, f.ino, &to(staff)).unwrap();
    let dave = Cred::new(1003, 1003).with_groups(&[staff]);
    fs.open_file(&dave, f.ino, libc::O_RDONLY).unwrap();
    fs.release(&dave, f.ino).unwrap();
    assert_eq!(e(fs.open_file(&dave, f.ino, libc::O_WRONLY)), libc::EACCES);
    // chmod g+s by an owner outside the file's group drops the setgid bit.
    fs.setattr(&R, f.ino, &to(99)).unwrap();
    let sgid = SetAttr {
        mode: Some(0o2640),
        ..Default::default()
    };
    let a = fs.setattr(&carol, f.ino, &sgid).unwrap();
    assert_eq!(a.mode & 0o7777, 0o640);
    fs.setattr(&R, f.ino, &to(staff)).unwrap();
    let a = fs.setattr(&carol, f.ino, &sgid).unwrap();
    assert_eq!(a.mode & 0o7777, 0o2640);
    assert_eq!(Groups::new(&[1; 40]).as_slice().len(), Groups::MAX);
    assert_consistent(fs);
}

#[test]
fn setattr_chmod_chown_truncate_utimens() {
    let (_d, fs) = fresh();
    let fs = &fs;
    let f = fs.create(&R, ROOT, b"f", 0o644).unwrap();
    let a = fs
        .setattr(
            &R,
            f.ino,
            &SetAttr {
                mode: Some(0o4755),
                ..Default::default()
            },
        )
        .unwrap();
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
    let a = fs
        .setattr(
            &R,
            f.ino,
            &SetAttr {
                size: Some(5),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(a.size, 5);
    assert_eq!(fs.read(&R, f.ino, 0, 100).unwrap(), b"hello");
    fs.setattr(
        &R,
        f.ino,
        &SetAttr {
            size: Some(8),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(fs.read(&R, f.ino, 0, 100).unwrap(), b"hello\0\0\0");
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap();
    assert_eq!(
        e(fs.setattr(
            &R,
            d.ino,
            &SetAttr {
                size: Some(0),
                ..Default::default()
            }
        )),
        libc::EISDIR
    );
    assert_eq!(e(fs.setattr(&R, 4242, &SetAttr::default())), libc::ENOENT);
    assert_consistent(fs);
}

#[test]
fn data_inline_and_chunked() {
    let (_d, fs) = fresh();
    let fs = &fs;
    let f = fs.create(&R, ROOT, b"f", 0o644).unwrap();
    assert_eq!(fs.read(&R, f.ino, 0, 10).unwrap(), b"");
    assert_eq!(fs.write(&R, f.ino, 0, b"abc").unwrap(), 3);
    assert_eq!(fs.write(&R, f.ino, 10, b"xyz").unwrap(), 3);
    assert_eq!(fs.read(&R, f.ino, 0, 100).unwrap(), b"abc\0\0\0\0\0\0\0xyz");
    assert_eq!(fs.read(&R, f.ino, 11, 1).unwrap(), b"y");
    assert_eq!(fs.read(&R, f.ino, 100, 1).unwrap(), b"");
    // Grow past the inline limit and across chunk boundaries, compare with a model.
    let mut model = fs.read(&R, f.ino, 0, 100).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..200 {
        let off = rng.random_range(0..300_000usize);
        let len = rng.random_range(0..70_000usize);
        let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        fs.write(&R, f.ino, off as u64, &data).unwrap();
        if model.len() < off + len {
            model.resize(off + len, 0);
        }
        model[off..off + len].copy_from_slice(&data);
        if rng.random_bool(0.1) {
            let size = rng.random_range(0..model.len() + 10);
            fs.setattr(
                &R,
                f.ino,
                &SetAttr {
                    size: Some(size as u64),
                    ..Default::default()
                },
            )
            .unwrap();
            model.resize(size, 0);
        }
        assert_eq!(fs.getattr(f.ino).unwrap().size, model.len() as u64);
    }
    assert_eq!(fs.read(&R, f.ino, 0, model.len() + 5).unwrap(), model);
    let mid = model.len() / 3;
    assert_eq!(
        fs.read(&R, f.ino, mid as u64, 100_000).unwrap(),
        model[mid..(mid + 100_000).min(model.len())]
    );
    assert_consistent(fs);
    // Truncate to zero returns to inline.
    fs.setattr(
        &R,
        f.ino,
        &SetAttr {
            size: Some(0),
            ..Default::default()
        },
    )
    .unwrap();
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
    // Reopen keeps everything.
    let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
    fs.write(&R, f.ino, 0, &big).unwrap();
    // A restart of every server keeps everything (the cluster's "reopen").
    fs.restart_all();
    assert_eq!(fs.read(&R, f.ino, 0, 300_000).unwrap(), big);
    let g = fs.create(&R, ROOT, b"g", 0o644).unwrap();
    // f and g both live on the server of the root's entries.
    assert!(g.ino > f.ino, "inode numbers are never reused");
    assert_consistent(fs);
}

#[test]
fn unlink_rmdir_link() {
    let (_d, fs) = fresh();
    let fs = &fs;
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap();
    let f = fs.create(&R, d.ino, b"f", 0o644).unwrap();
    fs.write(&R, f.ino, 0, &vec![9u8; 100_000]).unwrap();
    fs.setxattr(&R, f.ino, b"user.a", b"1", 0).unwrap();
    let l = fs.link(&R, f.ino, ROOT, b"hard").unwrap();
    assert_eq!(l.nlink, 2);
    assert_eq!(e(fs.link(&R, f.ino, ROOT, b"hard")), libc::EEXIST);
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
    fs.rmdir(&R, ROOT, b"d").unwrap();
    assert_eq!(fs.getattr(ROOT).unwrap().nlink, 2);
    assert_eq!(e(fs.getattr(d.ino)), libc::ENOENT);
    // Unlinked while open: data stays until the last close.
    fs.open_file(&R, f.ino, libc::O_RDONLY).unwrap();
    fs.unlink(&R, ROOT, b"hard").unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 0);
    assert_eq!(fs.read(&R, f.ino, 0, 2).unwrap(), vec![9, 9]);
    assert_consistent(fs);
    fs.release(&R, f.ino).unwrap();
    assert_eq!(e(fs.getattr(f.ino)), libc::ENOENT);
    assert_eq!(names(&**fs, ROOT), Vec::<Vec<u8>>::new());
    assert_consistent(fs);
}

/// The requests a client sent so far, by kind.
fn sent(fs: &dyn FileSystem) -> std::collections::BTreeMap<&'static str, u64> {
    fs.requests_sent().into_iter().collect()
}

/// A create that opens (the mount's CREATE) is one request, and the file it returns is
/// open in its creator's name: opened as `open(2)` with `O_CREAT` opens it (a mode
/// without write permission does not stop it), unlinked it lives until that release.
#[test]
fn create_open_is_one_request() {
    let (_d, fs) = fresh();
    let fs = &fs;
    let d = fs.mkdir(&R, ROOT, b"d", 0o777).unwrap();
    let before = sent(&**fs);
    let f = fs
        .create_open(&ALICE, d.ino, b"ro", 0o444, libc::O_RDWR)
        .unwrap();
    let after = sent(&**fs);
    let grew: Vec<_> = after
        .iter()
        .filter(|(k, v)| before[*k] != **v)
        .map(|(k, v)| (*k, v - before[*k]))
        .collect();
    assert_eq!(grew, vec![("MAKE", 1)]);
    assert_eq!((f.mode & 0o7777, f.uid), (0o444, ALICE.uid));
    // Any other open is checked against the mode.
    assert_eq!(e(fs.open_file(&ALICE, f.ino, libc::O_RDWR)), libc::EACCES);
    assert_eq!(fs.write(&ALICE, f.ino, 0, b"abc").unwrap(), 3);
    fs.unlink(&ALICE, d.ino, b"ro").unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 0);
    assert_eq!(fs.read(&ALICE, f.ino, 0, 3).unwrap(), b"abc".to_vec());
    fs.release(&ALICE, f.ino).unwrap();
    assert_eq!(e(fs.getattr(f.ino)), libc::ENOENT);
    // A name taken, a directory without write permission: as create.
    fs.create(&R, d.ino, b"taken", 0o644).unwrap();
    let taken = fs.create_open(&ALICE, d.ino, b"taken", 0o644, libc::O_RDWR);
    assert_eq!(e(taken), libc::EEXIST);
    let closed = fs.mkdir(&R, ROOT, b"closed", 0o755).unwrap();
    let denied = fs.create_open(&ALICE, closed.ino, b"x", 0o644, libc::O_RDWR);
    assert_eq!(e(denied), libc::EACCES);
    assert_consistent(fs);
}

#[test]
fn symlinks() {
    let (_d, fs) = fresh();
    let fs = &fs;
    let s = fs.symlink(&R, ROOT, b"s", b"../target/x").unwrap();
    assert_eq!(s.mode, libc::S_IFLNK | 0o777);
    assert_eq!(s.size, 11);
    assert_eq!(fs.readlink(&R, s.ino).unwrap(), b"../target/x");
    let f = fs.create(&R, ROOT, b"f", 0o644).unwrap();
    assert_eq!(e(fs.readlink(&R, f.ino)), libc::EINVAL);
    assert_eq!(e(fs.symlink(&R, ROOT, b"s", b"y")), libc::EEXIST);
    assert_eq!(
        e(fs.symlink(&R, ROOT, b"t", &vec![b'a'; 5000])),
        libc::ENAMETOOLONG
    );
    assert_eq!(e(fs.readlink(&R, 999)), libc::ENOENT);
    fs.unlink(&R, ROOT, b"s").unwrap();
    assert_consistent(fs);
}

#[test]
fn rename_cases() {
    let (_d, fs) = fresh();
    let fs = &fs;
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
    assert_eq!(names(&**fs, b.ino), vec![b"g".to_vec(), b"h".to_vec()]);
    // NOREPLACE
    assert_eq!(
        e(fs.rename(&R, b.ino, b"g", b.ino, b"h", RENAME_NOREPLACE)),
        libc::EEXIST
    );
    fs.unlink(&R, b.ino, b"h").unwrap();
    fs.rename(&R, b.ino, b"g", b.ino, b"n", RENAME_NOREPLACE)
        .unwrap();
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
    // Move a directory: link counts and ".." follow. The refused moves above took
    // the cluster's rename lock and gave it back: this one does not wait for a lease.
    let t = std::time::Instant::now();
    fs.rename(&R, a.ino, b"sub", b.ino, b"sub", 0).unwrap();
    assert!(
        t.elapsed() < std::time::Duration::from_secs(3),
        "a directory move waited {:?} for the rename lock",
        t.elapsed()
    );
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 2);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 3);
    assert_eq!(fs.lookup(&R, sub.ino, b"..").unwrap().ino, b.ino);
    // Replace an empty directory with a directory.
    let e1 = fs.mkdir(&R, ROOT, b"empty", 0o755).unwrap();
    fs.rename(&R, b.ino, b"sub", ROOT, b"empty", 0).unwrap();
    assert_eq!(e(fs.getattr(e1.ino)), libc::ENOENT);
    assert_eq!(fs.lookup(&R, ROOT, b"empty").unwrap().ino, sub.ino);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 2);
    assert_consistent(fs);
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
    assert_consistent(fs);
}

#[test]
fn readdir_cursor_and_changes() {
    let (_d, fs) = fresh();
    let fs = &fs;
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap();
    for i in 0..1000u32 {
        fs.create(&R, d.ino, format!("f{i:05}").as_bytes(), 0o644)
            .unwrap();
    }
    // Paged listing while the directory changes: every name present throughout is seen
    // exactly once, in order.
    let mut seen = Vec::new();
    let mut cursor: Option<Vec<u8>> = None;
    let mut round = 0u32;
    loop {
        let page = fs.readdir(&R, d.ino, cursor.as_deref(), 37).unwrap();
        if page.is_empty() {
            break;
        }
        cursor = Some(page.last().unwrap().name.clone());
        seen.extend(page.into_iter().map(|e| e.name));
        // Add before and after the cursor, remove odd-numbered late names.
        fs.create(&R, d.ino, format!("a{round:05}").as_bytes(), 0o644)
            .unwrap();
        fs.create(&R, d.ino, format!("z{round:05}").as_bytes(), 0o644)
            .unwrap();
        let victim = format!("f{:05}", 999 - round * 2);
        if round < 100 {
            fs.unlink(&R, d.ino, victim.as_bytes()).unwrap();
        }
        round += 1;
    }
    // (A cluster lists in hash order, not name order.)
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), seen.len(), "no duplicates");
    for i in 0..1000u32 {
        let n = format!("f{i:05}");
        let removed = i % 2 == 1 && i >= 999 - 2 * 99;
        if !removed {
            assert!(seen.contains(&n.into_bytes()), "f{i:05} missing");
        }
    }
    let f = fs.lookup(&R, d.ino, b"f00000").unwrap();
    assert_eq!(e(fs.readdir(&R, f.ino, None, 10)), libc::ENOTDIR);
    let first = &fs.readdir(&R, d.ino, None, 1).unwrap()[0];
    assert_eq!(first.kind, libc::S_IFREG);
    assert!(fs.readdir(&R, d.ino, None, 0).unwrap().is_empty());
    assert_consistent(fs);
}

#[test]
fn readdir_plus_carries_attributes_to_those_who_may_search() {
    let (_d, fs) = fresh();
    let fs = &fs;
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap();
    for i in 0..60u32 {
        let f = fs
            .create(&R, d.ino, format!("f{i:02}").as_bytes(), 0o640)
            .unwrap();
        fs.write(&R, f.ino, 0, &vec![7u8; i as usize * 100])
            .unwrap();
        fs.release(&R, f.ino).unwrap();
    }
    fs.mkdir(&R, d.ino, b"sub", 0o700).unwrap();
    assert!(fs.lists_attributes());
    // The same names as a plain listing, each with its attributes as a stat answers
    // them (the files' from the server listing them, the directory's from its home).
    let plus = fs.readdir_plus(&R, d.ino, None, usize::MAX).unwrap();
    let mut got: Vec<Vec<u8>> = plus.iter().map(|e| e.entry.name.clone()).collect();
    got.sort();
    assert_eq!(got, names(&**fs, d.ino));
    for e in &plus {
        let a = e.attr.as_ref().expect("attributes");
        assert_eq!(*a, fs.getattr(e.entry.ino).unwrap());
        if e.entry.kind != libc::S_IFREG {
            continue;
        }
        let i: usize = std::str::from_utf8(&e.entry.name[1..])
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!((a.size, a.mode & 0o7777), (i as u64 * 100, 0o640));
    }
    // Paged: resumes after any name, as a plain listing does.
    let first = fs.readdir_plus(&R, d.ino, None, 7).unwrap();
    let rest = fs
        .readdir_plus(&R, d.ino, Some(&first[6].entry.name), usize::MAX)
        .unwrap();
    assert_eq!(first.len() + rest.len(), plus.len());
    // Someone who may read the directory but not search it gets the names only: a
    // lookup would be refused them.
    let no_search = SetAttr {
        mode: Some(0o744),
        ..Default::default()
    };
    fs.setattr(&R, d.ino, &no_search).unwrap();
    assert_eq!(e(fs.lookup(&BOB, d.ino, b"f01")), libc::EACCES);
    let bare = fs.readdir_plus(&BOB, d.ino, None, usize::MAX).unwrap();
    assert_eq!(bare.len(), plus.len());
    assert!(
        bare.iter().all(|e| e.attr.is_none()),
        "no attributes for BOB"
    );
    fs.readdir_plus(&BOB, ROOT, None, 1).unwrap();
    assert_consistent(fs);
}

#[test]
fn atime_follows_relatime() {
    let (_d, fs) = fresh();
    let fs = &fs;
    let f = fs.create(&R, ROOT, b"f", 0o644).unwrap();
    fs.write(&R, f.ino, 0, b"data").unwrap();
    let before = fs.getattr(f.ino).unwrap();
    assert!(before.atime <= before.mtime);
    // First read after a write: atime is not newer than mtime, so it is set.
    std::thread::sleep(Duration::from_millis(2));
    fs.read(&R, f.ino, 0, 10).unwrap();
    let a1 = fs.getattr(f.ino).unwrap().atime;
    assert!(a1 > before.mtime, "read set atime");
    // A second read within a day writes nothing.
    std::thread::sleep(Duration::from_millis(2));
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
    std::thread::sleep(Duration::from_millis(2));
    fs.readdir(&R, d.ino, None, 10).unwrap();
    assert!(fs.getattr(d.ino).unwrap().atime > d.atime);
    // Reads leave mtime and ctime alone.
    let after = fs.getattr(f.ino).unwrap();
    assert_eq!(after.mtime, before.mtime);
    assert_consistent(fs);
}

#[test]
fn xattrs() {
    let (_d, fs) = fresh();
    let fs = &fs;
    let all = SetAttr {
        mode: Some(0o777),
        ..Default::default()
    };
    fs.setattr(&R, ROOT, &all).unwrap();
    let f = fs.create(&ALICE, ROOT, b"f", 0o644).unwrap();
    assert_eq!(e(fs.getxattr(&R, f.ino, b"user.x")), libc::ENODATA);
    fs.setxattr(&R, f.ino, b"user.x", b"1", 0).unwrap();
    fs.setxattr(&R, f.ino, b"user.y", b"", 0).unwrap();
    assert_eq!(fs.getxattr(&R, f.ino, b"user.x").unwrap(), b"1");
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
    assert_consistent(fs);
}
