//! The commands that only read work on a store another `cairn` process holds open:
//! they open it read-only (a snapshot as of now) and say so on standard error; the
//! commands that write still report the lock.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::cairn;

const SNAPSHOT: &str = "in use by another process; reading a snapshot as of now";

fn run(dir: &Path, args: &[&str]) -> Output {
    cairn()
        .arg("--db")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run cairn")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs a reading command that must succeed while the store is held, and says once
/// that it reads a snapshot; returns its standard output.
fn read_held(dir: &Path, args: &[&str]) -> String {
    let out = run(dir, args);
    let err = text(&out.stderr);
    assert!(out.status.success(), "cairn {args:?} failed: {err}");
    assert_eq!(
        err.matches(SNAPSHOT).count(),
        1,
        "cairn {args:?} said: {err}"
    );
    text(&out.stdout)
}

/// A `cairn file put - --key held` reading its standard input: it holds the store open
/// until its input ends.
fn holder(dir: &Path) -> Child {
    let mut child = cairn()
        .arg("--db")
        .arg(dir)
        .args(["file", "put", "-", "--key", "held"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the holder");
    let stdin = child.stdin.as_mut().unwrap();
    stdin.write_all(&vec![7u8; 3 << 20]).unwrap();
    stdin.flush().unwrap();
    child
}

#[test]
fn reading_commands_work_on_a_store_another_process_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    for (k, v) in [("apple", "red"), ("banana", "yellow"), ("cherry", "dark")] {
        let out = run(&dir, &["put", k, v]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let src = tmp.path().join("notes.txt");
    std::fs::write(&src, b"a file stored before the holder started\n").unwrap();
    let out = run(
        &dir,
        &["file", "put", src.to_str().unwrap(), "--key", "notes"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));

    let mut held = holder(&dir);
    // Wait (bounded) until the holder has the store open: a write is refused then.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = run(&dir, &["put", "probe", "x"]);
        if !out.status.success() {
            let err = text(&out.stderr);
            assert!(err.contains("locked"), "a write failed otherwise: {err}");
            break;
        }
        assert!(Instant::now() < deadline, "the holder never held the store");
        std::thread::sleep(Duration::from_millis(20));
    }

    assert_eq!(read_held(&dir, &["get", "banana"]).trim_end(), "yellow");
    let scan = read_held(&dir, &["scan"]);
    for k in ["apple", "banana", "cherry"] {
        assert!(scan.contains(k), "scan: {scan}");
    }
    let stats = read_held(&dir, &["stats", "--json"]);
    assert!(stats.contains("\"keys\""), "stats: {stats}");
    let verify = read_held(&dir, &["verify"]);
    assert!(verify.contains("no damage found"), "verify: {verify}");
    let got = read_held(&dir, &["file", "get", "notes"]);
    assert_eq!(got, "a file stored before the holder started\n");
    let ls = read_held(&dir, &["file", "ls"]);
    assert!(
        ls.contains("notes") && !ls.contains("held"),
        "file ls: {ls}"
    );

    // Writing commands still report the lock.
    for args in [
        &["put", "k", "v"][..],
        &["del", "apple"],
        &["compact"],
        &["flush"],
    ] {
        let out = run(&dir, args);
        let err = text(&out.stderr);
        assert!(
            !out.status.success(),
            "cairn {args:?} wrote to a held store"
        );
        assert!(err.contains("locked"), "cairn {args:?}: {err}");
        assert!(!err.contains(SNAPSHOT), "cairn {args:?}: {err}");
    }

    // The holder finishes; then the store opens as usual again.
    drop(held.stdin.take());
    let out = held.wait_with_output().unwrap();
    assert!(out.status.success(), "holder: {}", text(&out.stderr));
    let out = run(&dir, &["file", "ls"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("held"));
    assert!(!text(&out.stderr).contains(SNAPSHOT));
}
