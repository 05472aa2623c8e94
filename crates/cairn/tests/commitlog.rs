//! The commit log of durable writes (`SyncPolicy::Always`): acknowledged writes whose
//! records never reached their segments come back from the log after a SIGKILL; the two
//! files take turns and the full one is checkpointed; concurrent writers share syncs;
//! a store opened without the log makes the logged writes durable and removes the files.

mod common;

use cairn::{Db, Options, SyncPolicy, WriteBatch, WriteOptions};
use common::{on_disk, snapshot};

fn key(i: u32) -> String {
    format!("key{i:05}")
}

fn value(i: u32) -> Vec<u8> {
    format!("value-{i:05}-").repeat(4).into_bytes()
}

fn check_all(db: &Db, n: u32) {
    for i in 0..n {
        assert_eq!(
            db.get(key(i)).unwrap().as_deref(),
            Some(value(i).as_slice()),
            "acknowledged {} lost",
            key(i)
        );
    }
}

/// Durable writes wait for the log, not for their segments: a SIGKILL right after them
/// (their records still in the shards' write buffers) leaves them only in the log, and
/// open writes them back into their shards.
#[test]
fn acknowledged_writes_only_in_the_log_survive_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let crash = tempfile::tempdir().unwrap();
    let o = Options::new().shards(4).sync(SyncPolicy::Always);
    let db = o.clone().open(dir.path()).unwrap();
    for i in 0..200 {
        db.put(key(i), value(i)).unwrap();
    }
    let mut b = WriteBatch::new();
    for i in 200..220 {
        b.put(key(i), value(i));
    }
    db.write(b).unwrap();
    let stats = db.stats();
    assert!(stats.commit_log_syncs >= 1 && stats.commit_log_syncs <= 201);
    assert!(
        !on_disk(&dir.path().join("shards"), &value(5)),
        "the write reached its segment: this test would not show the log's replay"
    );
    snapshot(dir.path(), crash.path()); // SIGKILL now
    drop(db);
    let db = o.clone().open(crash.path()).unwrap();
    check_all(&db, 220);
    assert!(db.verify().unwrap().is_clean());
    assert!(db.open_damage().is_empty(), "{:?}", db.open_damage());
    // The replayed records are in the segments now, durable: a second kill right after
    // the open loses nothing either.
    assert!(on_disk(&crash.path().join("shards"), &value(5)));
    let again = tempfile::tempdir().unwrap();
    snapshot(crash.path(), again.path());
    drop(db);
    let db = o.open(again.path()).unwrap();
    check_all(&db, 220);
    db.put("after", "reopen").unwrap();
    assert_eq!(db.get("after").unwrap().as_deref(), Some(&b"reopen"[..]));
}

/// A small log: appends move between the two files many times, each full file is
/// freed by the maintenance thread's checkpoint, and a kill at any moment keeps every
/// acknowledged write.
#[test]
fn small_log_files_take_turns_and_keep_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let o = Options::new()
        .shards(3)
        .sync(SyncPolicy::Always)
        .commit_log_size(16 << 10);
    let db = o.clone().open(dir.path()).unwrap();
    let mut kills = 0;
    for i in 0..1500 {
        db.put(key(i), value(i)).unwrap();
        if i % 300 == 299 {
            let crash = tempfile::tempdir().unwrap();
            snapshot(dir.path(), crash.path());
            let copy = o.clone().open(crash.path()).unwrap();
            check_all(&copy, i + 1);
            assert!(copy.verify().unwrap().is_clean());
            kills += 1;
        }
    }
    assert_eq!(kills, 5);
    // 1,500 writes of ~90 bytes passed 16 KiB many times.
    let log_bytes = db.stats().commit_log_bytes;
    assert!(log_bytes > 100 << 10, "{log_bytes}");
    db.close().unwrap();
    let db = o.open(dir.path()).unwrap();
    check_all(&db, 1500);
}

/// Concurrent durable writers: every write is acknowledged durable, the log's syncs are
/// shared (fewer syncs than writes), and a kill keeps them all.
#[test]
fn concurrent_writers_share_log_syncs() {
    const THREADS: u32 = 8;
    const EACH: u32 = 300;
    let dir = tempfile::tempdir().unwrap();
    let crash = tempfile::tempdir().unwrap();
    let o = Options::new().sync(SyncPolicy::Always);
    let db = o.clone().open(dir.path()).unwrap();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let db = &db;
            s.spawn(move || {
                for j in 0..EACH {
                    let i = t * EACH + j;
                    db.put(key(i), value(i)).unwrap();
                }
            });
        }
    });
    let syncs = db.stats().commit_log_syncs;
    assert!(
        syncs < (THREADS * EACH) as u64,
        "{syncs} log syncs for {} writes: none shared",
        THREADS * EACH
    );
    snapshot(dir.path(), crash.path());
    drop(db);
    let db = o.open(crash.path()).unwrap();
    check_all(&db, THREADS * EACH);
}

/// A store opened without the log (another sync policy, or size 0) after a kill
/// under the log: the logged writes are written back, made durable, and the log files
/// removed; a clean close under the log leaves nothing for the next open to replay.
#[test]
fn opening_without_the_log_keeps_its_writes_and_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let crash = tempfile::tempdir().unwrap();
    let db = Options::new()
        .sync(SyncPolicy::Always)
        .open(dir.path())
        .unwrap();
    for i in 0..50 {
        db.put(key(i), value(i)).unwrap();
    }
    snapshot(dir.path(), crash.path());
    drop(db);
    assert!(crash.path().join("commit.0").exists());
    let db = Options::new().open(crash.path()).unwrap();
    check_all(&db, 50);
    assert!(!crash.path().join("commit.0").exists());
    assert!(!crash.path().join("commit.1").exists());
    drop(db);
    let db = Options::new().open(crash.path()).unwrap();
    check_all(&db, 50);
    drop(db);
    // Clean close under the log, then damage to the log's frames: nothing is read
    // from it, so nothing is lost or reported.
    let db = Options::new()
        .sync(SyncPolicy::Always)
        .open(dir.path())
        .unwrap();
    db.put("x", "y").unwrap();
    db.close().unwrap();
    let p = dir.path().join("commit.0");
    let mut b = std::fs::read(&p).unwrap();
    for x in &mut b[4096..8192] {
        *x ^= 0x5a;
    }
    std::fs::write(&p, &b).unwrap();
    let db = Options::new()
        .sync(SyncPolicy::Always)
        .open(dir.path())
        .unwrap();
    check_all(&db, 50);
    assert_eq!(db.get("x").unwrap().as_deref(), Some(&b"y"[..]));
    assert!(db.open_damage().is_empty());
}

/// The maintenance thread frees each full file (after syncing every shard), so the
/// files stay near their size however long the writes go on; without it, appends would
/// stay in the other file, which would grow without bound.
#[test]
fn full_files_are_freed_so_the_log_stays_small() {
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new()
        .shards(2)
        .sync(SyncPolicy::Always)
        .commit_log_size(16 << 10)
        .open(dir.path())
        .unwrap();
    let mut b = WriteBatch::new();
    for i in 0..30_000u32 {
        // Four records a batch: 30,000 durable batches write ~16 MiB of frames.
        for j in 0..4u32 {
            b.put(key(i * 4 + j), value(i));
        }
        db.write(std::mem::take(&mut b)).unwrap();
    }
    let logged = db.stats().commit_log_bytes;
    assert!(logged > 12 << 20, "{logged}");
    for f in ["commit.0", "commit.1"] {
        let len = std::fs::metadata(dir.path().join(f)).unwrap().len();
        // Each file: its size, a frame past it, and the 1 MiB laid out ahead; a
        // checkpoint late by a few MiB of writes is allowed for, not one never done.
        assert!(len < 6 << 20, "{f} is {len} bytes after {logged} logged");
    }
}

/// Deferred writes (`defer_sync`) go to the log without waiting; one `sync_written`
/// syncs the log once for all of them, whatever shards they fell in, and a SIGKILL
/// right after it keeps them though their segments never got them.
#[test]
fn deferred_writes_are_made_durable_by_one_log_sync() {
    let dir = tempfile::tempdir().unwrap();
    let crash = tempfile::tempdir().unwrap();
    let o = Options::new().shards(4).sync(SyncPolicy::Always);
    let db = o.clone().open(dir.path()).unwrap();
    let before = db.stats().commit_log_syncs;
    for i in 0..500 {
        db.put_with(key(i), value(i), WriteOptions::new().defer_sync())
            .unwrap();
    }
    assert_eq!(
        db.stats().commit_log_syncs,
        before,
        "a deferred write waited for a sync"
    );
    db.sync_written().unwrap();
    let stats = db.stats();
    assert_eq!(
        stats.commit_log_syncs,
        before + 1,
        "one sync for 500 writes"
    );
    assert!(stats.commit_log_bytes > 500 * value(0).len() as u64);
    assert!(
        !on_disk(&dir.path().join("shards"), &value(5)),
        "sync_written synced the shards, not the log"
    );
    snapshot(dir.path(), crash.path()); // SIGKILL now
    drop(db);
    let db = o.open(crash.path()).unwrap();
    check_all(&db, 500);
    assert!(db.verify().unwrap().is_clean());
}

/// A durable write after deferred ones, even one that changes nothing (the delete of
/// an absent key), returns only once they are durable too.
#[test]
fn a_durable_write_makes_earlier_deferred_writes_durable() {
    for noop in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let crash = tempfile::tempdir().unwrap();
        let o = Options::new().shards(4).sync(SyncPolicy::Always);
        let db = o.clone().open(dir.path()).unwrap();
        for i in 0..300 {
            db.put_with(key(i), value(i), WriteOptions::new().defer_sync())
                .unwrap();
        }
        if noop {
            db.delete("absent").unwrap();
            let mut b = WriteBatch::new();
            b.delete("absent too");
            db.write(b).unwrap();
        } else {
            db.put(key(300), value(300)).unwrap();
        }
        snapshot(dir.path(), crash.path());
        drop(db);
        let db = o.open(crash.path()).unwrap();
        check_all(&db, if noop { 300 } else { 301 });
    }
}

/// A writer that defers its syncs and never asks for durability does not make the log
/// hold its frames in memory without bound: past a few MiB waiting, it syncs.
#[test]
fn deferred_frames_waiting_in_memory_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new()
        .sync(SyncPolicy::Always)
        .open(dir.path())
        .unwrap();
    let before = db.stats().commit_log_syncs;
    let v = vec![7u8; 4000];
    for i in 0..4000u32 {
        // 16 MB of frames in all.
        db.put_with(key(i), &v, WriteOptions::new().defer_sync())
            .unwrap();
    }
    let syncs = db.stats().commit_log_syncs - before;
    assert!(
        (2..=8).contains(&syncs),
        "{syncs} log syncs for 16 MB of deferred frames (bound: one per 4 MiB)"
    );
}

/// Deferred writes larger than 16 KiB (a file's data chunks) are not written twice:
/// they stay out of the log, and `sync_written` syncs their shards.
#[test]
fn large_deferred_writes_stay_out_of_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let crash = tempfile::tempdir().unwrap();
    let o = Options::new().shards(2).sync(SyncPolicy::Always);
    let db = o.clone().open(dir.path()).unwrap();
    let logged = db.stats().commit_log_bytes;
    let big = |i: u8| vec![i; 64 << 10];
    for i in 0..8u8 {
        db.put_with([b'b', i], big(i), WriteOptions::new().defer_sync())
            .unwrap();
    }
    assert_eq!(
        db.stats().commit_log_bytes,
        logged,
        "a 64 KiB deferred write was logged"
    );
    db.sync_written().unwrap();
    assert!(on_disk(&dir.path().join("shards"), &big(3)));
    snapshot(dir.path(), crash.path());
    drop(db);
    let db = o.open(crash.path()).unwrap();
    for i in 0..8u8 {
        assert_eq!(db.get([b'b', i]).unwrap().as_deref(), Some(&big(i)[..]));
    }
}
