//! Tests of `cairn_fs`: every operation and errno (the shared suite of the
//! `FileSystem` trait, `cairn_fs::conformance`, on `Fs`), and what only a local store
//! has: reopening, lazy directory times, orphans, and a SIGKILL crash test.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use cairn_fs::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const R: Cred = Cred::ROOT;

fn e<T: std::fmt::Debug>(r: FsResult<T>) -> i32 {
    r.expect_err("expected an error").0
}

/// A fresh `Fs` in a temporary directory, for the shared suite.
struct Local {
    fs: Fs,
    _dir: tempfile::TempDir,
}

impl Local {
    fn new() -> Local {
        let dir = tempfile::tempdir().unwrap();
        let fs = Fs::open(dir.path()).unwrap();
        Local { fs, _dir: dir }
    }
}

impl conformance::Target for Local {
    fn fs(&self) -> &dyn FileSystem {
        &self.fs
    }

    fn profile(&self) -> &conformance::Profile {
        &conformance::Profile::LOCAL
    }

    fn check(&self) -> Vec<String> {
        self.fs.check().unwrap()
    }
}

cairn_fs::conformance_tests!(Local::new());

fn names(fs: &Fs, ino: u64) -> Vec<Vec<u8>> {
    fs.readdir(ino, None, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect()
}

fn assert_consistent(fs: &Fs) {
    let report = fs.check().unwrap();
    assert!(report.is_empty(), "inconsistent: {report:#?}");
}

#[test]
fn orphans_are_freed_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let ino;
    {
        let fs = Fs::open(dir.path()).unwrap();
        ino = fs.create(&R, ROOT, b"f", 0o644).unwrap().ino;
        fs.write(ino, 0, &vec![1u8; 50_000]).unwrap();
        fs.open_file(&R, ino, libc::O_RDONLY).unwrap();
        fs.unlink(&R, ROOT, b"f").unwrap();
        // Dropped while open, as if the process died.
    }
    let fs = Fs::open(dir.path()).unwrap();
    assert_eq!(e(fs.getattr(ino)), libc::ENOENT);
    assert_consistent(&fs);
}

/// Directory times changed by file creates and removals are written lazily (every
/// 64th change); getattr, fsync and close must still show and keep the latest ones.
#[test]
fn directory_times_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::open(dir.path()).unwrap();
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap();
    let mut last = 0;
    for i in 0..10 {
        std::thread::sleep(Duration::from_millis(1));
        let f = fs
            .create(&R, d.ino, format!("f{i}").as_bytes(), 0o644)
            .unwrap();
        let a = fs.getattr(d.ino).unwrap();
        assert_eq!(
            a.mtime, f.ctime,
            "create {i} shows in the directory's mtime"
        );
        assert!(a.mtime > last);
        last = a.mtime;
    }
    drop(fs);
    let fs = Fs::open(dir.path()).unwrap();
    assert_eq!(fs.getattr(d.ino).unwrap().mtime, last, "kept at close");
    std::thread::sleep(Duration::from_millis(1));
    fs.unlink(&R, d.ino, b"f3").unwrap();
    let after_unlink = fs.getattr(d.ino).unwrap().mtime;
    assert!(after_unlink > last);
    fs.fsync(d.ino).unwrap();
    // A second handle on a copy of the files sees what fsync wrote, without a close.
    let copy = tempfile::tempdir().unwrap();
    let status = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", dir.path().display()))
        .arg(copy.path())
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::remove_file(copy.path().join("LOCK")).ok();
    let fs2 = Fs::open(copy.path()).unwrap();
    assert_eq!(
        fs2.getattr(d.ino).unwrap().mtime,
        after_unlink,
        "kept by fsync"
    );
    assert_eq!(names(&fs2, d.ino).len(), 9);
    assert_consistent(&fs2);
    assert_consistent(&fs);
}

#[test]
fn statfs_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let fs = Fs::open(dir.path()).unwrap();
        let s = fs.statfs().unwrap();
        assert_eq!(s.namelen, 255);
        assert!(s.blocks > 0 && s.ffree > 0);
        let d = fs.mkdir(&R, ROOT, b"d", 0o700).unwrap();
        fs.create(&R, d.ino, b"x", 0o600).unwrap();
        fs.symlink(&R, d.ino, b"l", b"x").unwrap();
    }
    let fs = Fs::open(dir.path()).unwrap();
    let d = fs.lookup(&R, ROOT, b"d").unwrap();
    assert_eq!(names(&fs, d.ino), vec![b"l".to_vec(), b"x".to_vec()]);
    assert_consistent(&fs);
    // The file system shares the store with the key-value API without collisions.
    fs.db().put("k", "v").unwrap();
    assert_eq!(fs.db().iter().count(), 1);
    assert_consistent(&fs);
}

/// Data, inode numbers and a big directory's listing survive a reopen.
#[test]
fn reopen_keeps_data_listing_and_inode_numbers() {
    const N: u32 = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::open(dir.path()).unwrap();
    let f = fs.create(&R, ROOT, b"f", 0o644).unwrap();
    let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
    fs.write(f.ino, 0, &big).unwrap();
    let small = fs.create(&R, ROOT, b"small", 0o644).unwrap();
    fs.write(small.ino, 0, b"inline").unwrap();
    let d = fs.mkdir(&R, ROOT, b"big", 0o755).unwrap();
    for i in 0..N {
        let n = (i as u64 * 7919) % N as u64;
        fs.create(&R, d.ino, format!("n{n:07}").as_bytes(), 0o644)
            .unwrap();
    }
    let want: Vec<Vec<u8>> = (0..N).map(|n| format!("n{n:07}").into_bytes()).collect();
    assert_eq!(names(&fs, d.ino), want);
    drop(fs);
    let fs = Fs::open(dir.path()).unwrap();
    assert_eq!(fs.read(f.ino, 0, 300_000).unwrap(), big);
    assert_eq!(fs.read(small.ino, 0, 100).unwrap(), b"inline");
    assert_eq!(names(&fs, d.ino), want);
    let g = fs.create(&R, ROOT, b"g", 0o644).unwrap();
    assert!(g.ino > d.ino, "inode numbers are never reused");
    assert_eq!(e(fs.getattr(999_999)), libc::ENOENT);
    assert_consistent(&fs);
}

// ---- crash test ----

const CRASH_DIR: &str = "CAIRN_FS_CRASH_DIR";

/// The child: creates, renames, writes, unlinks and links at random until killed.
#[test]
#[ignore = "child process of crash_consistency, which runs it with --ignored"]
fn crash_child() {
    let Ok(dir) = std::env::var(CRASH_DIR) else {
        return;
    };
    let fs = Fs::open(&dir).unwrap();
    let seed: u64 = std::env::var("CAIRN_FS_CRASH_SEED")
        .unwrap()
        .parse()
        .unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    println!("@@R");
    let dirs: Vec<u64> = (0..4)
        .map(|i| {
            let n = format!("d{i}");
            match fs.lookup(&R, ROOT, n.as_bytes()) {
                Ok(a) => a.ino,
                Err(_) => fs.mkdir(&R, ROOT, n.as_bytes(), 0o755).unwrap().ino,
            }
        })
        .collect();
    loop {
        let d = dirs[rng.random_range(0..dirs.len())];
        let d2 = dirs[rng.random_range(0..dirs.len())];
        let n = format!("n{}", rng.random_range(0..200));
        let n2 = format!("n{}", rng.random_range(0..200));
        let r = match rng.random_range(0..8) {
            0 | 1 => fs.create(&R, d, n.as_bytes(), 0o644).map(drop),
            2 => fs.mkdir(&R, d, n.as_bytes(), 0o755).map(drop),
            3 => fs.rename(&R, d, n.as_bytes(), d2, n2.as_bytes(), 0),
            4 => fs.lookup(&R, d, n.as_bytes()).and_then(|a| {
                if a.is_dir() {
                    // Move a file into a subdirectory.
                    fs.rename(&R, d2, n2.as_bytes(), a.ino, b"inner", 0)
                } else {
                    let len = rng.random_range(0..150_000usize);
                    fs.write(a.ino, rng.random_range(0..10_000), &vec![7u8; len])
                        .map(drop)
                }
            }),
            5 => fs.unlink(&R, d, n.as_bytes()),
            6 => fs
                .lookup(&R, d, n.as_bytes())
                .and_then(|a| fs.link(&R, a.ino, d2, n2.as_bytes()))
                .map(drop),
            _ => fs.lookup(&R, d, n.as_bytes()).and_then(|a| {
                if a.is_dir() {
                    let _ = fs.unlink(&R, a.ino, b"inner");
                    fs.rmdir(&R, d, n.as_bytes())
                } else {
                    fs.setattr(
                        &R,
                        a.ino,
                        &SetAttr {
                            size: Some(rng.random_range(0..100_000)),
                            ..Default::default()
                        },
                    )
                    .map(drop)
                }
            }),
        };
        match r {
            Ok(()) => {}
            Err(Errno(
                libc::ENOENT
                | libc::EEXIST
                | libc::EISDIR
                | libc::ENOTDIR
                | libc::ENOTEMPTY
                | libc::EPERM
                | libc::EINVAL,
            )) => {}
            Err(e) => panic!("unexpected error {e}"),
        }
    }
}

#[test]
fn crash_consistency() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let cycles = 12;
    for cycle in 0..cycles {
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .arg("--ignored")
            .env(CRASH_DIR, dir.path())
            .env("CAIRN_FS_CRASH_SEED", cycle.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "child ended before it started"
            );
            if line.contains("@@R") {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100 + 40 * (cycle % 5)));
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGKILL);
        }
        child.wait().unwrap();
        let fs = Fs::open(dir.path()).unwrap();
        let report = fs.check().unwrap();
        assert!(report.is_empty(), "cycle {cycle}: {report:#?}");
        assert!(!names(&fs, ROOT).is_empty());
    }
}
