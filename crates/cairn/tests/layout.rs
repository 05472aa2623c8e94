//! Durable small appends lay the active segment out ahead of them (zeros past the data,
//! so that their `fdatasync`s need no journal commit): the zeros are never read as
//! records, a crash leaves them as a clean end, and they are gone from every segment
//! that is sealed or closed. These are the segments' syncs, so the commit log (which
//! would take the small durable writes instead) is off; `commitlog.rs` tests the
//! log's own layout.

mod common;

use std::path::{Path, PathBuf};

use cairn::{Db, Options, SyncPolicy};
use common::snapshot;

/// Every segment file under the store `dir`, with its length.
fn segments(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    for shard in std::fs::read_dir(dir.join("shards")).unwrap() {
        for f in std::fs::read_dir(shard.unwrap().path()).unwrap() {
            let p = f.unwrap().path();
            if p.extension().is_some_and(|e| e == "seg") {
                let len = std::fs::metadata(&p).unwrap().len();
                out.push((p, len));
            }
        }
    }
    out.sort();
    out
}

fn key(i: u32) -> String {
    format!("key{i:05}")
}

fn value(i: u32) -> Vec<u8> {
    format!("value {i} ").repeat(10).into_bytes()
}

fn check_all(db: &Db, n: u32) {
    for i in 0..n {
        assert_eq!(
            db.get(key(i)).unwrap().as_deref(),
            Some(&value(i)[..]),
            "{}",
            key(i)
        );
    }
    assert!(db.damage().is_empty(), "{:?}", db.damage());
    let report = db.verify().unwrap();
    assert!(report.is_clean(), "{:?}", report.damage);
}

#[test]
fn durable_small_writes_lay_out_the_segment_and_a_crash_leaves_a_clean_end() {
    let dir = tempfile::tempdir().unwrap();
    let crash = tempfile::tempdir().unwrap();
    let o = Options::new()
        .shards(1)
        .sync(SyncPolicy::Always)
        .commit_log_size(0);
    let db = o.clone().open(dir.path()).unwrap();
    for i in 0..300 {
        db.put(key(i), value(i)).unwrap();
    }
    // ~40 KB of records, and the file already holds zeros well past them.
    let segs = segments(dir.path());
    assert_eq!(segs.len(), 1, "{segs:?}");
    assert!(segs[0].1 >= 1 << 20, "not laid out: {segs:?}");
    check_all(&db, 300);

    snapshot(dir.path(), crash.path()); // SIGKILL now
    let copy = o.clone().open(crash.path()).unwrap();
    check_all(&copy, 300);
    let cut = segments(crash.path());
    assert!(
        cut[0].1 < 64 << 10,
        "the zeros were not cut off at open: {cut:?}"
    );
    // Appends go on where the data ended, and the next open reads them all.
    for i in 300..400 {
        copy.put(key(i), value(i)).unwrap();
    }
    drop(copy);
    check_all(&o.clone().open(crash.path()).unwrap(), 400);

    // A clean close cuts the zeros before the active segment's hint says where it ends:
    // the next open uses the hint (no rescan, no damage).
    drop(db);
    let closed = segments(dir.path());
    assert!(closed[0].1 < 64 << 10, "zeros left at close: {closed:?}");
    check_all(&o.open(dir.path()).unwrap(), 300);
}

#[test]
fn sealed_segments_end_where_their_data_ends() {
    let dir = tempfile::tempdir().unwrap();
    let o = Options::new()
        .shards(2)
        .segment_size(64 << 10)
        .sync(SyncPolicy::Always)
        .commit_log_size(0);
    let db = o.clone().open(dir.path()).unwrap();
    for i in 0..4000 {
        db.put(key(i), value(i)).unwrap();
    }
    check_all(&db, 4000);
    drop(db);
    let segs = segments(dir.path());
    assert!(segs.len() > 4, "too few rotations to test: {segs:?}");
    // Each laid out up to its cap at most, and cut back to its records at rotation or
    // close: a hint matches its segment's length only then (else open rescans it and
    // reports the mismatch as damage, which check_all refuses).
    for (p, len) in &segs {
        assert!(
            *len < (64 << 10) + (16 << 10),
            "{} is {len} bytes",
            p.display()
        );
    }
    check_all(&o.open(dir.path()).unwrap(), 4000);
}

#[test]
fn large_durable_writes_are_not_laid_out() {
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new()
        .shards(1)
        .sync(SyncPolicy::Always)
        .commit_log_size(0)
        .open(dir.path())
        .unwrap();
    let big = vec![7u8; 256 << 10];
    for i in 0..3 {
        db.put(key(i), &big).unwrap();
    }
    let segs = segments(dir.path());
    assert!(
        segs[0].1 < 800 << 10,
        "256 KiB writes should not be followed by zeros: {segs:?}"
    );
}

#[test]
fn without_sync_always_nothing_is_laid_out() {
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new().shards(1).open(dir.path()).unwrap();
    for i in 0..300 {
        db.put(key(i), value(i)).unwrap();
    }
    db.flush().unwrap();
    let segs = segments(dir.path());
    assert!(segs[0].1 < 64 << 10, "{segs:?}");
}
