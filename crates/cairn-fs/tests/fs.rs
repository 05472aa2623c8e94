//! Tests of `cairn_fs`: every operation and errno (the shared suite of the
//! `FileSystem` trait, `cairn_fs::conformance`, on `Fs`), and what only a local store
//! has: reopening, lazy directory times, orphans, and a SIGKILL crash test.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use cairn_fs::*;

mod fsmodel;

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
//
// A child process (this test binary again, running only `crash_child`) runs the
// workload of tests/fsmodel — creates, mkdirs, writes of bytes no other write writes,
// truncates, renames, links, unlinks, fsyncs — on the store with default options
// (`SyncPolicy::Never`) until it is killed with SIGKILL. It prints `@@R <fingerprint>`
// of the state it found, `@@A <n>` once its n-th operation returned and `@@F <n>` once
// the n-th (an fsync) did. The parent regenerates the same operations from the same
// state and seed, reopens the store and checks that it holds exactly the state after
// some prefix of them — namespace, link groups and every file's content — no shorter
// than the last fsync, and that `Fs::check` finds nothing.

const CRASH_DIR: &str = "CAIRN_FS_CRASH_DIR";
const CRASH_SEED: &str = "CAIRN_FS_CRASH_SEED";

fn emit(line: String) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(format!("{line}\n").as_bytes()).unwrap();
    out.flush().unwrap();
}

/// The child: runs the model's workload until killed.
#[test]
#[ignore = "child process of crash_consistency, which runs it with --ignored"]
fn crash_child() {
    let Ok(dir) = std::env::var(CRASH_DIR) else {
        return;
    };
    let seed: u64 = std::env::var(CRASH_SEED).unwrap().parse().unwrap();
    let fs = Fs::open(&dir).unwrap();
    let known = fsmodel::snapshot_fs(&fs).unwrap();
    let mut model = fsmodel::Model::from_canon(&known);
    emit(format!("@@R {}", fsmodel::fingerprint(&known)));
    let mut g = fsmodel::Gen(seed);
    for n in 1u64.. {
        let op = model.next_op(&mut g, (seed << 20) + n - 1);
        if let Err(e) = fsmodel::apply_fs(&fs, &op) {
            emit(format!("@@E {op:?}: {e}"));
            std::process::exit(3);
        }
        model.apply(&op);
        if matches!(op, fsmodel::Op::Fsync) {
            emit(format!("@@F {n}"));
        }
        emit(format!("@@A {n}"));
    }
}

#[test]
fn crash_consistency() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut known = fsmodel::Canon::new();
    let (mut lost, mut kept) = (0, 0);
    for cycle in 0..12u64 {
        let seed = 1000 + cycle;
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .arg("--ignored")
            .env(CRASH_DIR, dir.path())
            .env(CRASH_SEED, seed.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            let mut out = out;
            let mut line = String::new();
            // Only whole lines count (the kill may cut the last one).
            while matches!(out.read_line(&mut line), Ok(n) if n > 0) && line.ends_with('\n') {
                if tx.send(std::mem::take(&mut line)).is_err() {
                    break;
                }
            }
        });
        let first = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the child started");
        let mut lines = vec![first];
        while !lines.last().unwrap().contains("@@R") {
            lines.push(
                rx.recv_timeout(Duration::from_secs(60))
                    .expect("the child opened the store"),
            );
        }
        let fp = lines
            .last()
            .unwrap()
            .split_whitespace()
            .last()
            .unwrap()
            .to_string();
        assert_eq!(
            fp,
            fsmodel::fingerprint(&known).to_string(),
            "cycle {cycle}: the child found another state than the last one checked"
        );
        std::thread::sleep(Duration::from_millis(100 + 40 * (cycle % 5)));
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGKILL);
        }
        child.wait().unwrap();
        reader.join().unwrap();
        lines.extend(rx.try_iter());
        let (mut acked, mut synced) = (0usize, 0usize);
        for l in &lines {
            let mut p = l[l.find("@@").unwrap_or(0)..].split_whitespace();
            match (p.next(), p.next().and_then(|n| n.parse().ok())) {
                (Some("@@A"), Some(n)) => acked = acked.max(n),
                (Some("@@F"), Some(n)) => synced = synced.max(n),
                (Some("@@E"), _) => panic!("cycle {cycle}: the child failed: {l}"),
                _ => {}
            }
        }
        // The operations the child made: those it reported, and one in flight.
        let start = fsmodel::Model::from_canon(&known);
        let ops = fsmodel::ops(&start, seed, seed << 20, acked + 1);
        let fs = Fs::open(dir.path()).unwrap();
        let report = fs.check().unwrap();
        assert!(report.is_empty(), "cycle {cycle}: {report:#?}");
        let got = fsmodel::snapshot_fs(&fs).unwrap();
        let p = fsmodel::check_prefix(
            &start,
            &ops,
            &got,
            synced,
            false,
            &format!("cycle {cycle} ({acked} operations acknowledged, {synced} synced)"),
        );
        if p < acked {
            lost += 1;
        } else {
            kept += 1;
        }
        known = got;
        fs.close().unwrap();
    }
    eprintln!("{kept} kills kept every acknowledged operation, {lost} lost unsynced ones");
}
