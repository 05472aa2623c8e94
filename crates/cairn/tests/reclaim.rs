//! Giving space back: `Db::reclaim` while the store is open, and a clean close that drops
//! or empties the segments holding nothing live and compacts those holding little
//! (`Options::close_budget`); the per-keyspace figures of `Db::stats`. Every test checks
//! that the store afterwards holds exactly what was written (a model), that `verify`
//! finds nothing, and that reopening gives the same answers: deleted keys stay deleted.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use cairn::fault::{FaultInjector, IoOp};
use cairn::{Db, Options};

/// Bytes of the segment and hint files under `dir` (their lengths).
fn store_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for shard in std::fs::read_dir(dir.join("shards")).unwrap() {
        for f in std::fs::read_dir(shard.unwrap().path()).unwrap() {
            let f = f.unwrap();
            let name = f.file_name().to_string_lossy().into_owned();
            if name.ends_with(".seg") || name.ends_with(".hint") {
                total += f.metadata().unwrap().len();
            }
        }
    }
    total
}

/// Small segments, no background compaction (what is reclaimed is what the tests ask
/// for), the default close budget.
fn opts() -> Options {
    Options::new()
        .shards(4)
        .segment_size(256 << 10)
        .background_compaction(false)
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// A value of `len` bytes that names `key` and `round`.
fn value(key: &str, round: u32, len: usize) -> Vec<u8> {
    let mut v = format!("{key}#{round}:").into_bytes();
    let mut x = (round as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ key.len() as u64;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(x as u8);
    }
    v.truncate(len);
    v
}

/// What a workload leaves in the model, applied to `db` too.
struct Writer<'a> {
    db: &'a Db,
    model: Model,
}

impl Writer<'_> {
    fn put(&mut self, key: &str, v: Vec<u8>) {
        self.db.put(key, &v).unwrap();
        self.model.insert(key.as_bytes().to_vec(), v);
    }

    fn delete(&mut self, key: &str) {
        self.db.delete(key).unwrap();
        self.model.remove(key.as_bytes());
    }
}

/// Where a workload writes its small keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Small {
    /// Nowhere: every segment but the one holding the one large value left holds
    /// nothing live.
    None,
    /// Before the large values and again after them: the segments holding them are
    /// mostly dead but not all.
    Around,
    /// After the large values and their deletes only.
    Last,
}

/// About 2.4 MiB of 8 KiB values, all but one deleted again, and small keys that stay
/// (some overwritten, one deleted).
fn workload(db: &Db, small: Small) -> Model {
    let mut w = Writer {
        db,
        model: Model::new(),
    };
    let put_small = |w: &mut Writer<'_>, round: u32| {
        for i in 0..20 {
            w.put(&format!("live/{i:02}"), value("live", round * 100 + i, 100));
        }
    };
    if small == Small::Around {
        put_small(&mut w, 0);
    }
    for i in 0..300 {
        w.put(&format!("big/{i:03}"), value("big", i, 8 << 10));
    }
    for i in 0..300 {
        if i != 7 {
            w.delete(&format!("big/{i:03}"));
        }
    }
    if small != Small::None {
        put_small(&mut w, 1);
        w.delete("live/03");
    }
    w.model
}

/// The store holds exactly `model`: point reads, a scan, and no damage.
fn check(db: &Db, model: &Model) {
    for (k, v) in model {
        assert_eq!(
            db.get(k).unwrap().as_deref(),
            Some(&v[..]),
            "{}",
            String::from_utf8_lossy(k)
        );
    }
    let all: Model = db
        .iter()
        .map(|kv| kv.map(|(k, v)| (k, v.to_vec())))
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(all.len(), model.len());
    assert!(all == *model, "a scan disagrees with the model");
    for i in 0..300 {
        let k = format!("big/{i:03}");
        assert_eq!(db.contains(&k).unwrap(), model.contains_key(k.as_bytes()));
    }
    let report = db.verify().unwrap();
    assert!(report.is_clean(), "{:?}", report.damage);
}

#[test]
fn a_close_gives_back_the_space_of_deleted_values() {
    for small in [Small::None, Small::Around, Small::Last] {
        let dir = tempfile::tempdir().unwrap();
        let db = opts().open(dir.path()).unwrap();
        let model = workload(&db, small);
        db.flush().unwrap();
        let before = store_bytes(dir.path());
        assert!(before > 2 << 20, "{before}");
        db.close().unwrap();
        let after = store_bytes(dir.path());
        assert!(
            after * 10 <= before,
            "{small:?}: {after} bytes left of {before}"
        );
        let db = opts().open(dir.path()).unwrap();
        check(&db, &model);
        // The figures agree: almost nothing on disk is reclaimable any more.
        let total = db.stats().total;
        assert!(total.reclaimable_bytes * 10 <= before, "{total:?}");
        db.close().unwrap();
    }
}

#[test]
fn a_zero_close_budget_leaves_the_space_for_later() {
    let dir = tempfile::tempdir().unwrap();
    let db = opts()
        .close_budget(Duration::ZERO)
        .open(dir.path())
        .unwrap();
    let model = workload(&db, Small::Around);
    db.flush().unwrap();
    let before = store_bytes(dir.path());
    db.close().unwrap();
    let kept = store_bytes(dir.path());
    assert!(kept * 10 >= before * 8, "{kept} of {before}");
    // The next close (with the default budget) gives it back.
    let db = opts().open(dir.path()).unwrap();
    check(&db, &model);
    db.close().unwrap();
    assert!(store_bytes(dir.path()) * 10 <= before);
    let db = opts().open(dir.path()).unwrap();
    check(&db, &model);
}

#[test]
fn reclaim_drops_dead_segments_while_open() {
    let dir = tempfile::tempdir().unwrap();
    let db = opts().open(dir.path()).unwrap();
    let model = workload(&db, Small::None);
    let before = db.stats().total;
    assert!(before.reclaimable_bytes > 2 << 20, "{before:?}");
    let r = db.reclaim().unwrap();
    assert!(r.segments > 0 && r.bytes > 0 && r.rotated > 0, "{r:?}");
    let after = db.stats().total;
    // Most went whole. What is left: the segment holding the one value left; the one
    // holding the tombstones of the values deleted from it (they must stay while it
    // does), which compaction shrinks; and active segments too small to rotate.
    assert!(r.bytes * 10 >= before.disk_bytes * 6, "{r:?} of {before:?}");
    assert!(after.disk_bytes < before.disk_bytes);
    assert_eq!(after.live_bytes, before.live_bytes);
    check(&db, &model);
    db.compact().unwrap();
    let compacted = db.stats().total.disk_bytes;
    assert!(
        compacted <= (256 << 10) + (64 << 10),
        "{compacted} of {} bytes left",
        before.disk_bytes
    );
    check(&db, &model);
    // Writes go on after the rotations, and everything survives a reopen.
    let mut model = model;
    db.put("after", "reclaim").unwrap();
    model.insert(b"after".to_vec(), b"reclaim".to_vec());
    check(&db, &model);
    db.close().unwrap();
    let db = opts().open(dir.path()).unwrap();
    check(&db, &model);
}

#[test]
fn background_compaction_reclaims_an_idle_store() {
    // Dead bytes mixed with live ones in the active segments: the compaction thread
    // rotates them out once the shards are idle, and compacts them.
    let dir = tempfile::tempdir().unwrap();
    let o = || opts().background_compaction(true);
    let db = o().open(dir.path()).unwrap();
    let model = workload(&db, Small::Last);
    let before = db.stats().total.disk_bytes;
    let start = std::time::Instant::now();
    let mut now = before;
    // Generous: it takes about a second on an idle machine.
    while now * 10 > before && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
        now = db.stats().total.disk_bytes;
    }
    assert!(now * 10 <= before, "{now} of {before} bytes left");
    check(&db, &model);
    db.close().unwrap();
    let db = o().open(dir.path()).unwrap();
    check(&db, &model);
}

#[test]
fn tombstones_whose_older_values_remain_are_kept() {
    // Old values in a segment that stays (it holds live keys), deleted later: a close
    // must not drop the tombstones, or the old values would come back.
    let dir = tempfile::tempdir().unwrap();
    let db = opts().open(dir.path()).unwrap();
    let mut w = Writer {
        db: &db,
        model: Model::new(),
    };
    for i in 0..40 {
        w.put(&format!("old/{i:02}"), value("old", i, 4 << 10));
    }
    for i in 0..120 {
        w.put(&format!("pad/{i:03}"), value("pad", i, 8 << 10));
    }
    for i in (0..40).step_by(2) {
        w.delete(&format!("old/{i:02}"));
    }
    for i in 0..120 {
        w.delete(&format!("pad/{i:03}"));
    }
    let model = w.model;
    db.close().unwrap();
    for _ in 0..2 {
        let db = opts().open(dir.path()).unwrap();
        check(&db, &model);
        for i in (0..40).step_by(2) {
            assert!(db.get(format!("old/{i:02}")).unwrap().is_none());
        }
        db.close().unwrap();
    }
}

#[test]
fn stats_per_keyspace_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let db = opts().open(dir.path()).unwrap();
    let other = db.keyspace(7);
    for i in 0..100u32 {
        db.put(format!("k{i}"), vec![1u8; 1000]).unwrap();
        other.put(format!("o{i}"), vec![2u8; 500]).unwrap();
    }
    for i in 0..50u32 {
        db.put(format!("k{i}"), vec![3u8; 1000]).unwrap();
        other.delete(format!("o{i}")).unwrap();
    }
    let check_figures = |db: &Db| {
        let s = db.stats();
        let (kv, o) = (s.keyspace(0), s.keyspace(7));
        assert_eq!((kv.keys, o.keys), (100, 50));
        // A record: 28-byte header, keyspace byte and key, value.
        let kv_live: u64 = (0..100u32)
            .map(|i| 28 + 1 + format!("k{i}").len() as u64 + 1000)
            .sum();
        let o_live: u64 = (50..100u32)
            .map(|i| 28 + 1 + format!("o{i}").len() as u64 + 500)
            .sum();
        assert_eq!((kv.live_bytes, o.live_bytes), (kv_live, o_live));
        for k in [&kv, &o] {
            assert_eq!(k.live_bytes + k.reclaimable_bytes, k.disk_bytes);
        }
        assert_eq!(s.total.live_bytes, kv.live_bytes + o.live_bytes);
        assert_eq!(
            s.total.reclaimable_bytes,
            kv.reclaimable_bytes + o.reclaimable_bytes
        );
        assert!(s.total.disk_bytes >= kv.disk_bytes + o.disk_bytes);
        assert!(s.keyspace(3).disk_bytes == 0 && s.keyspace(3).keys == 0);
        s
    };
    let s = check_figures(&db);
    // 50 overwritten values of keyspace 0, 50 values and their tombstones in 7.
    assert!(s.keyspace(0).reclaimable_bytes >= 50 * 1000);
    assert!(s.keyspace(7).reclaimable_bytes >= 50 * 500);
    drop(other);
    db.close().unwrap();
    // Recovery counts the same live figures; compaction takes the reclaimable ones.
    let db = opts().compaction_threshold(0.05).open(dir.path()).unwrap();
    check_figures(&db);
    db.compact().unwrap();
    let s = check_figures(&db);
    assert!(s.total.reclaimable_bytes < 50 * 500, "{:?}", s.total);
}

/// A close that fails part way (an I/O error at its n-th file write, sync or create)
/// leaves a store that reopens to exactly what was written. A clean close does every
/// step of reclamation with files that are intact before and after it, so stopping
/// between any two of them must lose nothing and bring nothing back.
#[test]
fn a_close_stopped_at_any_step_loses_nothing() {
    for op in [IoOp::Sync, IoOp::Create, IoOp::Write] {
        let mut fired_last = true;
        let mut n = 0;
        // Until a close meets no fault: then every step was passed.
        while fired_last && n < 120 {
            let dir = tempfile::tempdir().unwrap();
            let fault = std::sync::Arc::new(FaultInjector::new());
            let db = opts()
                .fault_injector(fault.clone())
                .open(dir.path())
                .unwrap();
            let model = workload(
                &db,
                [Small::None, Small::Around, Small::Last][n as usize % 3],
            );
            db.flush().unwrap();
            fault.fail_after(op, n, libc::EIO);
            let _ = db.close();
            // The fault fired if the operations allowed were used up.
            fired_last = fault.check(op).is_err();
            fault.clear();
            let db = opts().open(dir.path()).unwrap();
            check(&db, &model);
            db.close().unwrap();
            let db = opts().open(dir.path()).unwrap();
            check(&db, &model);
            n += 1;
        }
        assert!(!fired_last, "{op:?}: closes still failing after {n} steps");
        eprintln!(
            "{op:?}: a close was stopped at each of its first {} steps",
            n - 1
        );
    }
}

/// The segment files of shard 0 and their lengths.
fn segments(dir: &Path) -> BTreeMap<String, u64> {
    std::fs::read_dir(dir.join("shards/0000"))
        .unwrap()
        .map(|f| f.unwrap())
        .filter(|f| f.file_name().to_string_lossy().ends_with(".seg"))
        .map(|f| {
            let len = f.metadata().unwrap().len();
            (f.file_name().to_string_lossy().into_owned(), len)
        })
        .collect()
}

#[test]
fn a_dropped_segment_that_comes_back_partly_written_is_removed_at_open() {
    // A segment never synced is dropped whole: its put and the delete that superseded
    // it both in it. Had a power failure kept the watermark covering them but lost the
    // unlink, and written back only the page holding the put, open would find the put
    // without its delete. SEQSTATE lists such segments until their unlink is durable,
    // and open removes them first.
    let dir = tempfile::tempdir().unwrap();
    let o = || {
        Options::new()
            .shards(1)
            .segment_size(1 << 20)
            .background_compaction(false)
    };
    let db = o().open(dir.path()).unwrap();
    let value = vec![7u8; 200 << 10];
    db.put("k", &value).unwrap();
    db.delete("k").unwrap();
    db.flush().unwrap();
    let before = segments(dir.path());
    // The active segment: the newest one holding records.
    let (name, _) = before.iter().rev().find(|(_, len)| **len > 40).unwrap();
    let path = dir.path().join("shards/0000").join(name);
    // The segment as a crash could leave it: everything up to the end of the put.
    let bytes = std::fs::read(&path).unwrap();
    let put_end = bytes.len() - (28 + 2); // the tombstone: header, keyspace byte, "k"
    let partial = bytes[..put_end].to_vec();
    let r = db.reclaim().unwrap();
    assert!(r.rotated == 1 && r.segments >= 1, "{r:?}");
    assert!(!path.exists(), "the dead segment went");
    let seqstate = std::fs::read(dir.path().join("SEQSTATE")).unwrap();
    db.close().unwrap();

    // A SEQSTATE that lists nothing: after an open acted on the list.
    drop(o().open(dir.path()).unwrap());
    let unlisted = std::fs::read(dir.path().join("SEQSTATE")).unwrap();
    assert_ne!(unlisted, seqstate);

    // The crash: the unlink lost, the put's pages on disk, not the delete's.
    let crash = |seqstate: &[u8]| {
        let copy = tempfile::tempdir().unwrap();
        let shards = copy.path().join("shards/0000");
        std::fs::create_dir_all(&shards).unwrap();
        std::fs::copy(dir.path().join("CAIRN"), copy.path().join("CAIRN")).unwrap();
        std::fs::write(copy.path().join("SEQSTATE"), seqstate).unwrap();
        for f in std::fs::read_dir(dir.path().join("shards/0000")).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), shards.join(f.file_name())).unwrap();
        }
        std::fs::write(shards.join(name), &partial).unwrap();
        copy
    };
    let copy = crash(&seqstate);
    let db = o().open(copy.path()).unwrap();
    assert!(
        db.get("k").unwrap().is_none(),
        "the deleted value came back"
    );
    assert_eq!(db.iter().count(), 0);
    assert!(!copy.path().join("shards/0000").join(name).exists());
    assert!(db.verify().unwrap().is_clean());
    db.close().unwrap();
    // The list is gone once it was acted on; a reopen is the same.
    let db = o().open(copy.path()).unwrap();
    assert!(db.get("k").unwrap().is_none());
    drop(db);

    // What the list prevents: the same crash with a SEQSTATE that does not name the
    // segment brings the deleted value back.
    let copy = crash(&unlisted);
    let db = o().open(copy.path()).unwrap();
    let back = db.get("k").unwrap();
    assert!(
        back.as_deref() == Some(&value[..]),
        "the value did not come back"
    );
}
