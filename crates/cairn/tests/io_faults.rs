//! I/O faults while a store runs: a full disk, failing syncs, writes, seals and
//! compactions, injected with [`cairn::fault::FaultInjector`]. Errors must come back as
//! errors (never panics), reads keep working, and no acknowledged write is lost over a
//! reopen. Damage to the files of a closed store is `corruption.rs`'s.

use std::collections::BTreeMap;
use std::sync::Arc;

use cairn::fault::{FaultInjector, IoOp};
use cairn::{Db, Error, Options, SyncPolicy, WriteBatch};

mod store_model;
use store_model::{assert_no_wrong_data, check_model, key, value, Model};

fn faulty(sync: SyncPolicy) -> (Options, Arc<FaultInjector>) {
    let f = Arc::new(FaultInjector::new());
    let o = Options::new()
        .shards(4)
        .segment_size(16 << 10)
        .background_compaction(false)
        .sync(sync)
        .fault_injector(f.clone());
    (o, f)
}

fn is_io_failure(e: &Error) -> bool {
    matches!(
        e,
        Error::StorageFull(_) | Error::Io { .. } | Error::ReadOnly(_)
    )
}

/// ENOSPC on writes: errors come back, reads keep working, writes work again once space
/// is back, and every acknowledged write survives a reopen.
#[test]
fn enospc_on_write() {
    for sync in [SyncPolicy::Always, SyncPolicy::Never] {
        for after in [0u64, 1, 3, 10] {
            let dir = tempfile::tempdir().unwrap();
            let (o, f) = faulty(sync);
            let mut acked = Model::new();
            let mut failed = Vec::new();
            {
                let db = o.clone().open(dir.path()).unwrap();
                for i in 0..300 {
                    db.put(key(i), value(i, 0)).unwrap();
                    acked.insert(key(i), value(i, 0));
                }
                db.flush().unwrap();
                f.fail_after(IoOp::Write, after, libc::ENOSPC);
                let mut errors = 0;
                for i in 300..3000 {
                    match db.put(key(i), value(i, 0)) {
                        Ok(()) => {
                            acked.insert(key(i), value(i, 0));
                        }
                        Err(e) => {
                            assert!(matches!(e, Error::StorageFull(_)), "{e:?}");
                            failed.push(key(i));
                            errors += 1;
                        }
                    }
                    if errors >= 20 {
                        break;
                    }
                }
                assert!(errors >= 20, "{sync:?}/{after}: only {errors} failures");
                assert!(db.flush().is_err(), "flush succeeded with a full disk");
                // Reads still work.
                for i in 0..300 {
                    assert_eq!(db.get(key(i)).unwrap().unwrap().as_ref(), value(i, 0));
                }
                f.clear();
                for i in 3000..3100 {
                    db.put(key(i), value(i, 0)).unwrap();
                    acked.insert(key(i), value(i, 0));
                }
                db.flush().unwrap();
            }
            let db = o.open(dir.path()).unwrap();
            for (k, v) in &acked {
                assert_eq!(
                    db.get(k).unwrap().as_deref(),
                    Some(v.as_slice()),
                    "{sync:?}/{after}: acknowledged {} lost",
                    String::from_utf8_lossy(k)
                );
            }
            for k in &failed {
                let i: u32 = std::str::from_utf8(&k[3..]).unwrap().parse().unwrap();
                assert_no_wrong_data(&db, k, &[&value(i, 0)]);
            }
            assert!(db.verify().unwrap().is_clean());
        }
    }
}

/// `Error::StorageFull` is documented as "the write was not applied" (outside the sync of
/// `SyncPolicy::Always`). A put that fails with it must not be visible to readers, nor
/// appear after a reopen. A one-byte write buffer makes every put write to the file first.
#[test]
fn failed_put_is_not_applied() {
    let dir = tempfile::tempdir().unwrap();
    let (o, f) = faulty(SyncPolicy::Never);
    let o = o.write_buffer(1);
    {
        let db = o.clone().open(dir.path()).unwrap();
        db.put("k", "old").unwrap();
        f.fail_after(IoOp::Write, 0, libc::ENOSPC);
        let e = db.put("k", "new").unwrap_err();
        assert!(matches!(e, Error::StorageFull(_)), "{e:?}");
        assert_eq!(
            db.get("k").unwrap().as_deref(),
            Some(&b"old"[..]),
            "the failed put is visible"
        );
        f.clear();
        db.put("other", "x").unwrap();
    }
    let db = o.open(dir.path()).unwrap();
    assert_eq!(
        db.get("k").unwrap().as_deref(),
        Some(&b"old"[..]),
        "the failed put was written after all"
    );
}

/// A failed fsync under `SyncPolicy::Always`: the write reports the error, the store
/// refuses further writes until reopened, reads work, and every write acknowledged before
/// survives a reopen.
#[test]
fn eio_on_sync_makes_store_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let (o, f) = faulty(SyncPolicy::Always);
    let mut acked = Model::new();
    {
        let db = o.clone().open(dir.path()).unwrap();
        for i in 0..500 {
            db.put(key(i), value(i, 0)).unwrap();
            acked.insert(key(i), value(i, 0));
        }
        f.fail_after(IoOp::Sync, 0, libc::EIO);
        let e = db.put(key(500), value(500, 0)).unwrap_err();
        assert!(
            matches!(&e, Error::Io { source, .. } if source.raw_os_error() == Some(libc::EIO)),
            "{e:?}"
        );
        // The failing shard refuses writes even with the fault gone.
        f.clear();
        let e = db.put(key(500), value(500, 1)).unwrap_err();
        assert!(matches!(e, Error::ReadOnly(_)), "{e:?}");
        for (k, v) in &acked {
            assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_slice()));
        }
        let e = db.flush().unwrap_err();
        assert!(is_io_failure(&e), "{e:?}");
        // A batch touching the failed shard is refused as a whole.
        let mut b = WriteBatch::new();
        for i in 0..20 {
            b.put(key(10_000 + i), "batch");
        }
        b.put(key(500), "batch");
        assert!(matches!(db.write(b), Err(Error::ReadOnly(_))));
        for i in 0..20 {
            assert!(db.get(key(10_000 + i)).unwrap().is_none());
        }
    }
    let db = o.open(dir.path()).unwrap();
    for (k, v) in &acked {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_slice()));
    }
    assert_no_wrong_data(&db, &key(500), &[&value(500, 0)]);
    // Writable again after the reopen.
    db.put("again", "ok").unwrap();
    assert!(db.verify().unwrap().is_clean());
}

/// `Error::ReadOnly` says a failed fsync makes *the store* read-only until reopened;
/// writes to other shards than the one whose fsync failed must be refused too.
#[test]
fn eio_on_sync_makes_whole_store_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let (o, f) = faulty(SyncPolicy::Always);
    let db = o.open(dir.path()).unwrap();
    db.put("first", "1").unwrap();
    f.fail_after(IoOp::Sync, 0, libc::EIO);
    assert!(db.put("second", "2").is_err());
    f.clear();
    for i in 0..64 {
        let r = db.put(key(i), "x");
        assert!(
            matches!(r, Err(Error::ReadOnly(_))),
            "put of {} after a failed fsync: {r:?}",
            String::from_utf8_lossy(&key(i))
        );
    }
}

/// A seal that fails (the disk fails every operation from some point on) is retried
/// at a bounded rate, not in a loop: the failed segment stays queued, and the
/// maintenance thread once went straight back to it, spinning a CPU (134 of 200 clock
/// ticks over 2 s) and logging an error each time until the store was dropped. Whether
/// a seal is queued when the power goes depends on the maintenance thread's timing (it
/// was in about half the runs), so the run is repeated.
#[test]
fn a_failing_seal_is_retried_at_a_bounded_rate() {
    for attempt in 0..8 {
        failing_seal_run(attempt);
    }
}

fn failing_seal_run(attempt: u32) {
    let dir = tempfile::tempdir().unwrap();
    let power = Arc::new(cairn::fault::PowerLoss::new(dir.path().join("stash")).unwrap());
    // This store's background threads: those that appear with it (tests running beside
    // this one rarely open a store in the same instant, and theirs are idle or brief).
    let others = background_threads();
    let db = Options::new()
        .shards(4)
        .segment_size(16 << 10)
        .background_compaction(false)
        .sync(SyncPolicy::Never)
        .power_loss(power.clone())
        .open(dir.path().join("db"))
        .unwrap();
    // A thread names itself once it runs: look for a while.
    let mut mine: Vec<String> = Vec::new();
    for _ in 0..200 {
        mine = background_threads()
            .into_iter()
            .filter(|t| !others.contains(t))
            .collect();
        if !mine.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(
        !mine.is_empty(),
        "the store's maintenance thread was not found"
    );
    // The disk fails a few operations in, while segments rotate out: their seals fail.
    power.cut_after(40);
    for i in 0..400 {
        if db.put(key(i), value(i, 300)).is_err() {
            break;
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let before = cpu_ticks(&mine);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let used = cpu_ticks(&mine) - before;
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    assert!(
        used < ticks / 8,
        "run {attempt}: the store's background threads used {used} of {} clock ticks in 0.5 s",
        ticks / 2
    );
    drop(db);
}

/// The `/proc/self/task` ids of this process's maintenance and compaction threads.
fn background_threads() -> Vec<String> {
    let mut out = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let comm = comm.trim();
        if comm == "cairn-maint" || comm.starts_with("cairn-compact") {
            out.push(t.file_name().to_string_lossy().into_owned());
        }
    }
    out
}

/// User and system time, in clock ticks, of the threads `tids` of this process (0 for
/// one that has ended).
fn cpu_ticks(tids: &[String]) -> u64 {
    let mut total = 0;
    for tid in tids {
        let path = format!("/proc/self/task/{tid}/stat");
        let stat = std::fs::read_to_string(path).unwrap_or_default();
        // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 12 {
            total += f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0);
        }
    }
    total
}

/// A store that failed (an fsync that did not complete) cannot make what it acknowledged
/// durable: `close` reports the failure instead of success, whichever thread's sync
/// failed. (A close that said `Ok` here let a caller count unsynced writes as durable;
/// the power-loss tests caught it.)
#[test]
fn close_after_failed_sync_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let (o, f) = faulty(SyncPolicy::Never);
    let db = o.clone().open(dir.path()).unwrap();
    for i in 0..100 {
        db.put(key(i), value(i, 0)).unwrap();
    }
    f.fail_after(IoOp::Sync, 0, libc::EIO);
    assert!(db.flush().is_err());
    f.clear();
    // Written after the failure is refused; what was acknowledged before is readable.
    assert!(matches!(db.put("late", "x"), Err(Error::ReadOnly(_))));
    assert_eq!(db.get(key(7)).unwrap().as_deref(), Some(&value(7, 0)[..]));
    let e = db.close().unwrap_err();
    assert!(matches!(e, Error::ReadOnly(_)), "{e:?}");
    // The reopen finds a prefix of the writes (here all of them: nothing was lost).
    let db = o.open(dir.path()).unwrap();
    assert!(db.get("late").unwrap().is_none());
    assert!(db.verify().unwrap().is_clean());
    db.close().unwrap();
}

/// ENOSPC, EIO and failed creates at every point of a compaction: `compact` reports the
/// error, no data is lost or changed, and after the fault is gone compaction completes
/// and a reopen finds everything.
#[test]
fn faults_during_compaction() {
    let cases: &[(IoOp, i32, u64)] = &[
        (IoOp::Write, libc::ENOSPC, 0),
        (IoOp::Write, libc::ENOSPC, 1),
        (IoOp::Write, libc::ENOSPC, 2),
        (IoOp::Write, libc::ENOSPC, 4),
        (IoOp::Write, libc::ENOSPC, 8),
        (IoOp::Create, libc::ENOSPC, 0),
        (IoOp::Create, libc::ENOSPC, 1),
        (IoOp::Create, libc::ENOSPC, 3),
        (IoOp::Sync, libc::EIO, 0),
        (IoOp::Sync, libc::EIO, 2),
        (IoOp::Sync, libc::EIO, 5),
    ];
    for &(op, errno, after) in cases {
        let dir = tempfile::tempdir().unwrap();
        let f = Arc::new(FaultInjector::new());
        let o = Options::new()
            .shards(2)
            .segment_size(8 << 10)
            .background_compaction(false)
            .compaction_threshold(0.3)
            .fault_injector(f.clone());
        let mut model = Model::new();
        {
            // Fill the store and seal every rotated segment (threshold 1.0: only wholly
            // stale segments are compacted here), so that after the reopen nothing but
            // compaction does I/O.
            let db = o
                .clone()
                .compaction_threshold(1.0)
                .open(dir.path())
                .unwrap();
            for round in 0..4 {
                for i in 0..200 {
                    if (i + round) % 5 == 0 {
                        db.delete(key(i)).unwrap();
                        model.remove(&key(i));
                    } else {
                        db.put(key(i), value(i, round)).unwrap();
                        model.insert(key(i), value(i, round));
                    }
                }
            }
            db.flush().unwrap();
            db.compact().unwrap();
        }
        {
            let db = o.clone().open(dir.path()).unwrap();
            let before = db.stats().total.disk_bytes;
            f.fail_after(op, after, errno);
            let res = db.compact();
            if after == 0 {
                let e = res.as_ref().expect_err("compaction ignored the fault");
                assert!(is_io_failure(e), "{op:?}/{after}: {e:?}");
                if errno == libc::ENOSPC {
                    assert!(matches!(e, Error::StorageFull(_)), "{e:?}");
                }
            }
            check_model(&db, &model, &[]);
            f.clear();
            if op == IoOp::Sync {
                // A failed fsync leaves the shards it hit read-only until the reopen;
                // compaction skips those, and the others still compact.
                for i in 0..32 {
                    let k = format!("probe{i}");
                    if db.put(&k, "p").is_ok() {
                        db.delete(&k).unwrap();
                    }
                }
                let _ = db.compact();
            } else {
                db.compact().unwrap();
                let end = db.stats().total.disk_bytes;
                assert!(
                    end < before,
                    "{op:?}/{after}: compaction reclaimed nothing after the fault \
                     ({before} bytes before, {end} after)"
                );
            }
            check_model(&db, &model, &[]);
        }
        let db = o.clone().open(dir.path()).unwrap();
        check_model(&db, &model, &[]);
        assert!(db.verify().unwrap().is_clean(), "{op:?}/{after}");
        db.compact().unwrap();
        check_model(&db, &model, &[]);
        drop(db);
        let db = o.open(dir.path()).unwrap();
        check_model(&db, &model, &[]);
    }
}

/// Failures to create a new segment when the active one is full (rotation): the writes
/// fail, reads work, and the store recovers once creates work again.
#[test]
fn enospc_at_segment_creation() {
    for sync in [SyncPolicy::Always, SyncPolicy::Never] {
        for (op, errno) in [(IoOp::Create, libc::ENOSPC), (IoOp::Sync, libc::EIO)] {
            if op == IoOp::Sync && sync == SyncPolicy::Always {
                continue; // every put syncs: covered by eio_on_sync_makes_store_read_only
            }
            let dir = tempfile::tempdir().unwrap();
            let (o, f) = faulty(sync);
            let mut acked = Model::new();
            let mut maybe = BTreeMap::new();
            {
                let db = o.clone().open(dir.path()).unwrap();
                let segs = |db: &Db| db.stats().total.segments;
                for i in 0..200 {
                    db.put(key(i), value(i, 0)).unwrap();
                    acked.insert(key(i), value(i, 0));
                }
                db.flush().unwrap();
                // Creates happen at rotation and when a background seal writes a hint.
                f.fail_after(op, 0, errno);
                let n0 = segs(&db);
                let mut errors = 0;
                for i in 200..4000 {
                    match db.put(key(i), value(i, 0)) {
                        Ok(()) => {
                            acked.insert(key(i), value(i, 0));
                        }
                        Err(e) => {
                            assert!(is_io_failure(&e), "{e:?}");
                            maybe.insert(key(i), value(i, 0));
                            errors += 1;
                            if errors > 10 {
                                break;
                            }
                        }
                    }
                }
                assert!(errors > 0, "{sync:?}/{op:?}: no write failed");
                assert_eq!(segs(&db), n0, "a segment appeared while creates fail");
                for (k, v) in &acked {
                    assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_slice()));
                }
                f.clear();
                if op == IoOp::Create {
                    for i in 5000..5500 {
                        db.put(key(i), value(i, 0)).unwrap();
                        acked.insert(key(i), value(i, 0));
                    }
                    db.flush().unwrap();
                    assert!(segs(&db) > n0);
                }
            }
            let db = o.open(dir.path()).unwrap();
            for (k, v) in &acked {
                assert_eq!(
                    db.get(k).unwrap().as_deref(),
                    Some(v.as_slice()),
                    "{sync:?}/{op:?}: lost {}",
                    String::from_utf8_lossy(k)
                );
            }
            for (k, v) in &maybe {
                assert_no_wrong_data(&db, k, &[v]);
            }
            assert!(db.verify().unwrap().is_clean());
        }
    }
}

/// A batch whose write fails is not half-applied: after the fault and a reopen, each
/// failed batch is wholly present or wholly absent.
#[test]
fn failed_batches_stay_atomic() {
    for op in [IoOp::Write, IoOp::Sync] {
        let dir = tempfile::tempdir().unwrap();
        let (o, f) = faulty(SyncPolicy::Always);
        let mut outcomes = Vec::new();
        {
            let db = o.clone().open(dir.path()).unwrap();
            for n in 0..40u32 {
                if n == 10 {
                    f.fail_after(
                        op,
                        7,
                        if op == IoOp::Write {
                            libc::ENOSPC
                        } else {
                            libc::EIO
                        },
                    );
                }
                let mut b = WriteBatch::new();
                for j in 0..8 {
                    b.put(format!("b{n}-{j}"), format!("batch{n}"));
                }
                outcomes.push(db.write(b).is_ok());
            }
            f.clear();
        }
        assert!(outcomes.iter().any(|ok| !ok), "{op:?}: no batch failed");
        let db = o.open(dir.path()).unwrap();
        for (n, ok) in outcomes.iter().enumerate() {
            let present: Vec<bool> = (0..8)
                .map(|j| db.get(format!("b{n}-{j}")).unwrap().is_some())
                .collect();
            if *ok {
                assert!(
                    present.iter().all(|p| *p),
                    "{op:?}: acknowledged batch {n} lost"
                );
            } else {
                assert!(
                    present.iter().all(|p| *p) || present.iter().all(|p| !*p),
                    "{op:?}: failed batch {n} is half there: {present:?}"
                );
            }
        }
    }
}

/// A durable write that fails (`ENOSPC` writing the commit log) does not cost the
/// writes acknowledged after it: whether the disk has room again (they are
/// acknowledged, the failed write's frame goes with theirs) or not (they fail too),
/// everything acknowledged under `SyncPolicy::Always` survives a power cut. (The prefix
/// rule drops every write after one that is missing, so an acknowledged write after a
/// lost one would be lost with it.)
#[test]
fn writes_acknowledged_after_a_failed_one_survive_a_power_cut() {
    use cairn::fault::{Loss, PowerLoss};
    for room_again in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let stash = tempfile::tempdir().unwrap();
        let power = Arc::new(PowerLoss::new(stash.path()).unwrap());
        let (o, f) = faulty(SyncPolicy::Always);
        let o = o.segment_size(1 << 20).power_loss(power.clone());
        let mut acked = Vec::new();
        {
            let db = o.clone().open(dir.path()).unwrap();
            for i in 0..50u32 {
                db.put(format!("a{i}"), vec![1u8; 100]).unwrap();
                acked.push(format!("a{i}"));
            }
            f.fail_after(IoOp::Write, 0, libc::ENOSPC);
            let e = db.put("big", vec![7u8; 50_000]).unwrap_err();
            assert!(is_io_failure(&e), "{e:?}");
            if room_again {
                f.clear();
            } else {
                f.fail_after(IoOp::Write, 1, libc::ENOSPC);
            }
            for i in 0..200u32 {
                if db.put(format!("b{i}"), vec![2u8; 10]).is_ok() {
                    acked.push(format!("b{i}"));
                }
            }
            if room_again {
                assert_eq!(acked.len(), 250, "writes failed with room on the disk");
            }
            power.cut();
        }
        power.restart(Loss::Unsynced, 1).unwrap();
        f.clear();
        let db = o.open(dir.path()).unwrap();
        for k in &acked {
            assert!(
                db.get(k.as_bytes()).unwrap().is_some(),
                "room again {room_again}: acknowledged {k} lost"
            );
        }
    }
}
