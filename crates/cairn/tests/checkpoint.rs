//! Checkpoints and backups: consistent copies made while writers, compaction and
//! reclamation go on; a power cut during a checkpoint; incremental backups over
//! compaction; verify and restore of damaged backups.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::backup;
use cairn::fault::{Loss, PowerLoss};
use cairn::{Db, Error, Options, SyncPolicy, WriteBatch};

/// Slots each writer cycles through (so that its writes overwrite and go dead).
const SLOTS: u64 = 48;

fn slot_key(t: u64, s: u64) -> String {
    format!("t{t}/slot/{s:03}")
}

fn last_key(t: u64) -> String {
    format!("t{t}/last")
}

fn extra_key(t: u64, i: u64) -> String {
    format!("t{t}/x/{i:012}")
}

fn num(v: &[u8]) -> u64 {
    let s = std::str::from_utf8(v).unwrap();
    s.split(':').next().unwrap().parse().unwrap()
}

/// Writer `t`'s write `i`, one atomic batch over several shards: slot `i % SLOTS`
/// and `last` take `i`, the extra key of `i - 1` goes and the one of `i` comes.
fn write_op(db: &Db, t: u64, i: u64) -> Result<(), Error> {
    let mut v = format!("{i}:").into_bytes();
    v.resize(64 + (i as usize * 37) % 200, b'p');
    let mut b = WriteBatch::new();
    b.put(slot_key(t, i % SLOTS), &v).put(last_key(t), &v);
    if i > 0 {
        b.delete(extra_key(t, i - 1));
    }
    b.put(extra_key(t, i), &v);
    db.write(b)
}

/// Checks that `db` holds exactly writer `t`'s writes `0..=L` for its `last` value `L`
/// (or none), and returns `L + 1` (the number of its writes it holds).
fn check_prefix(db: &Db, t: u64, ctx: &str) -> u64 {
    let Some(last) = db.get(last_key(t)).unwrap().map(|v| num(&v)) else {
        for s in 0..SLOTS {
            assert!(
                db.get(slot_key(t, s)).unwrap().is_none(),
                "{ctx}: t{t} slot {s} without last"
            );
        }
        return 0;
    };
    for s in 0..SLOTS {
        let want = (0..=last).rev().find(|i| i % SLOTS == s);
        let got = db.get(slot_key(t, s)).unwrap().map(|v| num(&v));
        assert_eq!(
            got, want,
            "{ctx}: writer {t} slot {s} (last {last}): not a prefix"
        );
    }
    let extras: Vec<Vec<u8>> = db
        .prefix(format!("t{t}/x/"))
        .map(|kv| kv.unwrap().0)
        .collect();
    assert_eq!(
        extras,
        vec![extra_key(t, last).into_bytes()],
        "{ctx}: writer {t}: the extra keys are not those of write {last}"
    );
    last + 1
}

fn busy_options() -> Options {
    Options::new()
        .shards(8)
        .segment_size(64 << 10)
        .write_buffer(4 << 10)
        .compaction_threshold(0.3)
        .compaction_rate(None)
}

#[test]
fn checkpoint_is_a_point_in_time_copy() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Options::new()
        .shards(4)
        .open(tmp.path().join("db"))
        .unwrap();
    for i in 0..2000u32 {
        db.put(format!("k{i:05}"), format!("v{i}")).unwrap();
    }
    db.keyspace(9).put("other", "space").unwrap();
    db.compact().unwrap();
    let report = db.checkpoint(tmp.path().join("copy")).unwrap();
    assert!(report.copied_files >= 4, "{report:?}");
    db.put("k00000", "changed").unwrap();
    db.delete("k00001").unwrap();
    // The destination must be new: an existing, non-empty directory is refused.
    let again = db.checkpoint(tmp.path().join("copy"));
    assert!(matches!(again, Err(Error::InvalidArgument(_))), "{again:?}");
    // An empty directory is fine.
    std::fs::create_dir(tmp.path().join("empty")).unwrap();
    db.checkpoint(tmp.path().join("empty")).unwrap();
    db.close().unwrap();

    let copy = Db::open(tmp.path().join("copy")).unwrap();
    assert!(copy.open_damage().is_empty(), "{:?}", copy.open_damage());
    assert_eq!(copy.get("k00000").unwrap().as_deref(), Some(&b"v0"[..]));
    assert_eq!(copy.get("k00001").unwrap().as_deref(), Some(&b"v1"[..]));
    assert_eq!(copy.range::<&str, _>(..).count(), 2000);
    assert_eq!(
        copy.keyspace(9).get("other").unwrap().as_deref(),
        Some(&b"space"[..])
    );
    assert!(copy.verify().unwrap().is_clean());
    // The copy is a store of its own: writing to it leaves the original alone.
    copy.put("k00002", "copy's").unwrap();
    copy.close().unwrap();
    let db = Db::open(tmp.path().join("db")).unwrap();
    assert_eq!(db.get("k00002").unwrap().as_deref(), Some(&b"v2"[..]));
    assert_eq!(db.get("k00000").unwrap().as_deref(), Some(&b"changed"[..]));
    let empty = Db::open(tmp.path().join("empty")).unwrap();
    assert_eq!(
        empty.get("k00000").unwrap().as_deref(),
        Some(&b"changed"[..])
    );
}

#[test]
fn checkpoint_to_another_file_system_copies() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("SKIP: no /dev/shm to stand for another file system");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir_in(shm).unwrap();
    let db = Options::new()
        .shards(2)
        .segment_size(64 << 10)
        .open(tmp.path().join("db"))
        .unwrap();
    for i in 0..3000u32 {
        db.put(format!("k{i:05}"), vec![b'v'; 100]).unwrap();
    }
    db.flush().unwrap();
    std::thread::sleep(Duration::from_millis(200)); // sealing runs in the background
    let report = db.checkpoint(other.path().join("copy")).unwrap();
    assert_eq!(report.linked_files, 0, "{report:?}");
    let copy = Db::open(other.path().join("copy")).unwrap();
    assert_eq!(copy.range::<&str, _>(..).count(), 3000);
    assert!(copy.verify().unwrap().is_clean());
}

/// Four writers, compaction and reclamation running, a checkpoint every few hundred
/// milliseconds: each checkpoint holds, for each writer, exactly a prefix of its
/// writes, at least those acknowledged before the checkpoint began and at most those
/// begun before it returned.
#[test]
fn checkpoints_under_load_hold_a_prefix_of_every_writer() {
    const WRITERS: u64 = 4;
    let tmp = tempfile::tempdir().unwrap();
    for sync in [SyncPolicy::Never, SyncPolicy::Always] {
        let dir = tmp.path().join(format!("db-{sync:?}"));
        let db = busy_options().sync(sync).open(&dir).unwrap();
        let acked: Vec<AtomicU64> = (0..WRITERS).map(|_| AtomicU64::new(0)).collect();
        let begun: Vec<AtomicU64> = (0..WRITERS).map(|_| AtomicU64::new(0)).collect();
        let stop = AtomicBool::new(false);
        let mut taken = Vec::new();
        std::thread::scope(|s| {
            for t in 0..WRITERS {
                let (db, acked, begun, stop) = (&db, &acked, &begun, &stop);
                s.spawn(move || {
                    for i in 0..2_000_000u64 {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        begun[t as usize].store(i + 1, Ordering::SeqCst);
                        write_op(db, t, i).unwrap();
                        acked[t as usize].store(i + 1, Ordering::SeqCst);
                    }
                });
            }
            let (db2, stop2) = (&db, &stop);
            s.spawn(move || {
                while !stop2.load(Ordering::SeqCst) {
                    db2.compact().unwrap();
                    db2.reclaim().unwrap();
                    std::thread::sleep(Duration::from_millis(20));
                }
            });
            let deadline = Instant::now() + Duration::from_secs(6);
            for n in 0..12 {
                std::thread::sleep(Duration::from_millis(250));
                let before: Vec<u64> = acked.iter().map(|a| a.load(Ordering::SeqCst)).collect();
                let dest = tmp.path().join(format!("cp-{sync:?}-{n}"));
                let report = db.checkpoint(&dest).unwrap();
                let after: Vec<u64> = begun.iter().map(|a| a.load(Ordering::SeqCst)).collect();
                eprintln!("{sync:?} checkpoint {n}: {report:?}");
                taken.push((dest, before, after, report));
                if Instant::now() > deadline {
                    break;
                }
            }
            stop.store(true, Ordering::SeqCst);
        });
        db.close().unwrap();
        assert!(taken.len() >= 3);
        for (dest, before, after, report) in &taken {
            let ctx = format!("{sync:?} {}: {report:?}", dest.display());
            let copy = Db::open(dest).unwrap();
            assert!(
                copy.open_damage().is_empty(),
                "{ctx}: {:?}",
                copy.open_damage()
            );
            for t in 0..WRITERS {
                let held = check_prefix(&copy, t, &ctx);
                let (lo, hi) = (before[t as usize], after[t as usize]);
                assert!(
                    (lo..=hi).contains(&held),
                    "{ctx}: writer {t}: holds {held} writes, acknowledged before {lo}, begun by the end {hi}"
                );
            }
            assert!(copy.verify().unwrap().is_clean(), "{ctx}");
            copy.close().unwrap();
        }
    }
}

/// A power cut at every point of a checkpoint: the store keeps every write it synced
/// before, and the destination is absent, or whole and clean; a staging directory left
/// behind is refused by open.
#[test]
fn power_cut_during_checkpoint_leaves_store_whole_and_copy_absent_or_whole() {
    let seeds: u64 = std::env::var("CAIRN_CHECKPOINT_CUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    for seed in 0..seeds {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("db");
        let dest = tmp.path().join("copy");
        let power = Arc::new(PowerLoss::new(tmp.path().join("stash")).unwrap());
        let opts = || {
            busy_options()
                .shards(4)
                .compaction_threshold(0.99)
                .power_loss(power.clone())
        };
        let db = opts().open(&dir).unwrap();
        for i in 0..300 {
            write_op(&db, 0, i).unwrap();
        }
        db.flush().unwrap();
        for i in 300..320 {
            write_op(&db, 0, i).unwrap(); // in the buffers at the cut
        }
        let ops = power.ops();
        power.cut_after(ops + seed * 3);
        let res = db.checkpoint(&dest);
        power.cut();
        drop(db);
        let loss = Loss::ALL[seed as usize % Loss::ALL.len()];
        power.restart(loss, seed).unwrap();
        let ctx = format!("seed {seed} {loss:?} checkpoint {res:?}");
        let db = opts().open(&dir).unwrap();
        if loss.in_order() {
            assert!(db.open_damage().is_empty(), "{ctx}: {:?}", db.open_damage());
            let held = check_prefix(&db, 0, &format!("{ctx}: the store"));
            assert!(held >= 300, "{ctx}: synced writes lost");
        } else {
            // Pages kept in any order: each key holds a write from the synced ones on.
            for s in 0..SLOTS {
                let floor = (0..300).rev().find(|i| i % SLOTS == s).unwrap();
                match db.get(slot_key(0, s)) {
                    Ok(v) => {
                        let v = v.map(|v| num(&v));
                        assert!(
                            v.is_some_and(|v| v >= floor && v % SLOTS == s),
                            "{ctx}: slot {s} {v:?}"
                        );
                    }
                    Err(Error::Corruption { .. }) if !db.open_damage().is_empty() => {}
                    Err(e) => panic!("{ctx}: slot {s}: {e}"),
                }
            }
        }
        drop(db);
        if dest.exists() {
            let copy = Db::open(&dest).unwrap();
            assert!(
                copy.open_damage().is_empty(),
                "{ctx}: {:?}",
                copy.open_damage()
            );
            let held = check_prefix(&copy, 0, &format!("{ctx}: the copy"));
            assert!(held >= 320, "{ctx}: the copy lost writes");
        } else {
            assert!(res.is_err(), "{ctx}: the checkpoint said it was done");
        }
        let staging = tmp.path().join("copy.incomplete");
        if staging.exists() {
            let opened = Db::open(&staging);
            assert!(opened.is_err(), "{ctx}: an incomplete checkpoint opened");
        }
    }
}

/// Incremental backups over a store that compacts between them: each restores to
/// exactly its own point; the incremental one copies little; damage is found.
#[test]
fn incremental_backups_restore_their_own_point_and_damage_is_found() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Options::new()
        .shards(4)
        .segment_size(256 << 10)
        .compaction_threshold(0.2)
        .open(tmp.path().join("db"))
        .unwrap();
    let value = |gen: u32, i: u32| format!("{gen}:{i}:{}", "x".repeat(200));
    for i in 0..20_000 {
        db.put(format!("k{i:06}"), value(0, i)).unwrap();
    }
    db.flush().unwrap();
    db.compact().unwrap();
    let full = db.backup(tmp.path().join("b0"), None).unwrap();
    assert_eq!(full.linked_files, 0, "{full:?}");
    // 1% of the keys change, and the store compacts.
    for i in (0..20_000).step_by(100) {
        db.put(format!("k{i:06}"), value(1, i)).unwrap();
    }
    db.flush().unwrap();
    db.compact().unwrap();
    let inc = db
        .backup(tmp.path().join("b1"), Some(&tmp.path().join("b0")))
        .unwrap();
    assert!(
        inc.copied_bytes * 5 < full.copied_bytes,
        "an incremental backup copied {} bytes, the full one {}: {inc:?}",
        inc.copied_bytes,
        full.copied_bytes
    );
    assert!(inc.linked_files > 0, "{inc:?}");
    db.put("k000000", "after").unwrap();
    db.close().unwrap();

    for (b, gen_of) in [("b0", 0u32), ("b1", 1)] {
        let report = backup::verify(tmp.path().join(b)).unwrap();
        assert!(report.is_clean(), "{b}: {:?}", report.damage);
        assert!(report.records_checked >= 20_000, "{report:?}");
        let to = tmp.path().join(format!("restored-{b}"));
        backup::restore(tmp.path().join(b), &to).unwrap();
        let r = Db::open(&to).unwrap();
        assert!(r.open_damage().is_empty());
        for i in 0..20_000 {
            let want = if i % 100 == 0 { gen_of } else { 0 };
            let got = r.get(format!("k{i:06}")).unwrap();
            assert_eq!(
                got.as_deref(),
                Some(value(want, i).as_bytes()),
                "{b} key {i}"
            );
        }
        r.close().unwrap();
    }

    // One damaged byte in a segment of the incremental backup (shared with the full
    // one through a hard link: both see it).
    let seg = find_file(&tmp.path().join("b1/shards"), ".seg");
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&seg, &bytes).unwrap();
    let report = backup::verify(tmp.path().join("b1")).unwrap();
    assert!(!report.is_clean());
    assert!(
        report.damage.iter().any(|d| d.path == seg),
        "{:?}",
        report.damage
    );
    let refused = backup::restore(tmp.path().join("b1"), tmp.path().join("r2"));
    assert!(
        matches!(refused, Err(Error::Corruption { .. })),
        "{refused:?}"
    );
    assert!(!tmp.path().join("r2").exists());
    // A file that was not in the backup is reported.
    std::fs::write(tmp.path().join("b0/stray"), b"?").unwrap();
    let report = backup::verify(tmp.path().join("b0")).unwrap();
    assert!(report.damage.iter().any(|d| d.path.ends_with("stray")));
}

/// The largest file under `dir` whose name ends with `suffix`.
fn find_file(dir: &Path, suffix: &str) -> std::path::PathBuf {
    let mut best: Option<(u64, std::path::PathBuf)> = None;
    for shard in std::fs::read_dir(dir).unwrap() {
        for f in std::fs::read_dir(shard.unwrap().path()).unwrap() {
            let p = f.unwrap().path();
            let len = p.metadata().unwrap().len();
            if p.to_string_lossy().ends_with(suffix) && best.as_ref().is_none_or(|b| len > b.0) {
                best = Some((len, p));
            }
        }
    }
    best.unwrap().1
}

/// A read-only handle's checkpoint and backup copy its view: what the writer had
/// written when the view was taken, not what it wrote after.
#[test]
fn checkpoint_of_a_read_only_view_holds_the_view() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let db = busy_options().open(&dir).unwrap();
    for i in 0..500 {
        write_op(&db, 0, i).unwrap();
    }
    db.keyspace(3).put("other", "space").unwrap();
    db.flush().unwrap();
    let view = Options::new().read_only().open(&dir).unwrap();
    for i in 500..700 {
        write_op(&db, 0, i).unwrap();
    }
    db.flush().unwrap();
    let report = view.checkpoint(tmp.path().join("cp")).unwrap();
    assert!(report.copied_files > 0, "{report:?}");
    view.backup(tmp.path().join("b"), None).unwrap();
    assert!(backup::verify(tmp.path().join("b")).unwrap().is_clean());
    backup::restore(tmp.path().join("b"), tmp.path().join("r")).unwrap();
    for copy in ["cp", "r"] {
        let c = Db::open(tmp.path().join(copy)).unwrap();
        assert!(c.open_damage().is_empty());
        assert_eq!(check_prefix(&c, 0, copy), 500, "{copy}");
        assert_eq!(
            c.keyspace(3).get("other").unwrap().as_deref(),
            Some(&b"space"[..])
        );
        c.close().unwrap();
    }
    db.close().unwrap();
}
