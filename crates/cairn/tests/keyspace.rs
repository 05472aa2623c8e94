//! The engine's API for the layers above it: keyspaces, extensions, layer threads and
//! `Db::close`, tested as public API.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::{Db, Error, Options, SyncPolicy, WriteBatch, WriteOptions};

fn keys(it: impl Iterator<Item = cairn::Result<(Vec<u8>, cairn::Value)>>) -> Vec<Vec<u8>> {
    it.map(|r| r.unwrap().0).collect()
}

#[test]
fn keyspaces_are_separate_and_share_the_guarantees() {
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new().shards(4).open(dir.path()).unwrap();
    let (a, b) = (db.keyspace(1), db.keyspace(200));
    assert_eq!((a.id(), b.id()), (1, 200));
    db.put("k", "zero").unwrap();
    a.put("k", "one").unwrap();
    b.put("k", "two").unwrap();
    assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"zero"[..]));
    assert_eq!(a.get("k").unwrap().as_deref(), Some(&b"one"[..]));
    assert_eq!(b.get("k").unwrap().as_deref(), Some(&b"two"[..]));
    // Keyspace 0 is Db's own.
    assert_eq!(
        db.keyspace(0).get("k").unwrap().as_deref(),
        Some(&b"zero"[..])
    );
    // Scans stay inside their keyspace and hand out keys without the keyspace byte.
    for i in 0..50u32 {
        a.put(format!("row/{i:03}"), i.to_le_bytes()).unwrap();
        b.put(format!("row/{i:03}"), "x").unwrap();
    }
    assert_eq!(keys(a.iter()).len(), 51);
    assert_eq!(keys(db.iter()), vec![b"k".to_vec()]);
    let rows = keys(a.prefix("row/"));
    assert_eq!(rows.len(), 50);
    assert_eq!(rows[0], b"row/000");
    let back = keys(a.range("row/010".."row/013").rev());
    assert_eq!(
        back,
        vec![
            b"row/012".to_vec(),
            b"row/011".to_vec(),
            b"row/010".to_vec()
        ]
    );
    let suffixes = keys(a.prefix_suffixes("row/04"));
    assert_eq!(
        suffixes,
        (0..10)
            .map(|i| format!("{i}").into_bytes())
            .collect::<Vec<_>>()
    );
    let after = keys(a.prefix_suffixes_after("row/", b"047"));
    assert_eq!(after, vec![b"048".to_vec(), b"049".to_vec()]);
    assert_eq!(
        keys(a.prefix_stripped("row/04", 4)).first().unwrap(),
        b"040"
    );
    // The last keyspace id has no "next keyspace" bound.
    let last = db.keyspace(255);
    last.put([0xff, 0xff], "v").unwrap();
    assert_eq!(keys(last.iter()), vec![vec![0xff, 0xff]]);
    // A batch applies to the keyspace it is written to, atomically.
    let mut batch = WriteBatch::new();
    batch.put("x", "1").put("y", "2").delete("k");
    b.write(batch).unwrap();
    assert!(b.contains("x") && b.contains("y") && !b.contains("k"));
    assert!(a.contains("k") && !a.contains("x"));
    // Limits are the store's.
    assert!(matches!(
        a.put(vec![0u8; cairn::MAX_KEY_LEN + 1], "v"),
        Err(Error::KeyTooLarge { .. })
    ));
    assert!(a.get(vec![0u8; cairn::MAX_KEY_LEN + 1]).unwrap().is_none());
    drop((a, b, last));
    db.close().unwrap();
    // Everything survives a reopen.
    let db = Db::open(dir.path()).unwrap();
    let a = db.keyspace(1);
    assert_eq!(a.get("k").unwrap().as_deref(), Some(&b"one"[..]));
    assert_eq!(keys(a.prefix("row/")).len(), 50);
    // Keyspace 200: its 50 rows and the batch's two puts (its "k" deleted).
    assert_eq!(keys(db.keyspace(200).iter()).len(), 52);
    assert!(db.keyspace(200).contains("x") && !db.keyspace(200).contains("k"));
}

#[test]
fn deferred_syncs_and_shard_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new()
        .shards(8)
        .sync(SyncPolicy::Always)
        .open(dir.path())
        .unwrap();
    let ks = db.keyspace(3);
    let mut touched = vec![false; db.shard_count()];
    for i in 0..200u32 {
        let k = i.to_be_bytes();
        ks.put_with(k, "v", WriteOptions::new().defer_sync())
            .unwrap();
        touched[ks.shard_of(k)] = true;
    }
    let shards: Vec<usize> = (0..touched.len()).filter(|&s| touched[s]).collect();
    db.flush_shards(&shards, true).unwrap();
    for s in &shards {
        db.start_writeback(*s);
    }
    db.start_writeback(10_000); // ignored
    assert!(matches!(
        db.flush_shards(&[db.shard_count()], true),
        Err(Error::InvalidArgument(_))
    ));
    let mut b = WriteBatch::new();
    b.delete(0u32.to_be_bytes());
    ks.write_with(b, WriteOptions::new().frees_space()).unwrap();
    assert!(!ks.contains(0u32.to_be_bytes()));
    ks.prefetch(1u32.to_be_bytes());
    assert_eq!(db.options().sync_policy(), SyncPolicy::Always);
    db.close().unwrap();
}

/// State a layer attaches to an open store.
struct LayerState {
    made: usize,
}

#[test]
fn extensions_are_one_per_type_and_per_open_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let inits = AtomicUsize::new(0);
    let init = || {
        Ok(LayerState {
            made: inits.fetch_add(1, Ordering::SeqCst) + 1,
        })
    };
    let a = db.extension(init).unwrap();
    let b = db.clone().extension(init).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(a.made, 1);
    // Another type gets its own value; a failing init leaves nothing behind.
    assert!(db
        .extension::<String>(|| Err(Error::InvalidArgument("no".into())))
        .is_err());
    assert_eq!(*db.extension(|| Ok(String::from("yes"))).unwrap(), "yes");
    drop((a, b));
    db.close().unwrap();
    // A new open of the store starts afresh.
    let db = Db::open(dir.path()).unwrap();
    assert_eq!(db.extension(init).unwrap().made, 2);
}

#[test]
fn layer_threads_stop_before_the_store_closes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    let stopped = Arc::new(AtomicBool::new(false));
    let woken = Arc::new(AtomicBool::new(false));
    let (s, w) = (stopped.clone(), woken.clone());
    db.spawn_background(
        "test-layer",
        move |bg| {
            // The thread's handle writes like any other, and does not keep the store
            // open: the test's close below does not wait for this loop to see a drop.
            let ks = bg.db().keyspace(9);
            let mut n = 0u32;
            while !bg.is_stopping() {
                ks.put(n.to_be_bytes(), "tick").unwrap();
                n += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            // A background handle cannot close the store or start threads.
            assert!(bg.db().clone().close().is_err());
            s.store(true, Ordering::SeqCst);
        },
        move || w.store(true, Ordering::SeqCst),
    )
    .unwrap();
    let t = Instant::now();
    while db.keyspace(9).iter().count() < 3 && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let other = db.clone();
    db.close().unwrap();
    assert!(woken.load(Ordering::SeqCst), "the stop hook ran");
    assert!(
        stopped.load(Ordering::SeqCst),
        "the thread returned before close did"
    );
    // Other handles see a closed store: writes refused, no thread can start.
    assert!(matches!(other.put("a", "b"), Err(Error::Closed)));
    assert!(matches!(
        other.spawn_background("late", |_| {}, || {}),
        Err(Error::Closed)
    ));
    assert!(other.is_closing());
    drop(other);
    let db = Db::open(dir.path()).unwrap();
    assert!(db.keyspace(9).iter().count() >= 3);
}

/// The internal layout of a numbered row's key: tag, then the number big-endian.
fn numbered(n: u64) -> Vec<u8> {
    let mut k = vec![b'I'];
    k.extend_from_slice(&n.to_be_bytes());
    k
}

/// Checks keyspace `ks` against `model` (number → value) through every way in: point
/// reads, the visit of numbered rows, and the other rows' scans.
fn check_numbered(ks: &cairn::Keyspace, model: &std::collections::BTreeMap<u64, Vec<u8>>) {
    for (n, v) in model {
        assert_eq!(
            ks.get(numbered(*n)).unwrap().as_deref(),
            Some(&v[..]),
            "row {n}"
        );
        assert!(ks.contains(numbered(*n)));
    }
    for n in [0, 1, 5_000, 0xFFFF_FFFD, 0xFFFF_FFFE, u64::MAX] {
        if !model.contains_key(&n) {
            assert_eq!(ks.get(numbered(n)).unwrap(), None, "row {n}");
        }
    }
    let mut seen = std::collections::BTreeMap::new();
    ks.for_each_numbered(b'I', |n, v| {
        assert!(
            seen.insert(n, v.to_vec()).is_none(),
            "row {n} visited twice"
        );
        Ok(())
    })
    .unwrap();
    assert_eq!(&seen, model);
    // Rows of the keyspace that are not numbered rows scan as always.
    assert_eq!(keys(ks.prefix("D")).len(), 300);
}

#[test]
fn numbered_rows_are_kept_by_number_through_compaction_and_reopens() {
    use std::collections::BTreeMap;
    let dir = tempfile::tempdir().unwrap();
    let declared = || {
        Options::new()
            .shards(4)
            .segment_size(256 << 10)
            .numbered_rows(3, b'I')
    };
    let mut model: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    {
        let db = declared().open(dir.path()).unwrap();
        let ks = db.keyspace(3);
        for i in 0..300u32 {
            ks.put(format!("D{i:05}"), "entry").unwrap();
        }
        db.put("I-user-key", "keyspace 0").unwrap();
        // Numbers that fit the tables, and some that do not (kept in order).
        let pool = |r: u64| match r % 10 {
            0 => 0xFFFF_FFFB + r / 10 % 6,
            1 => u64::MAX - r / 10 % 3,
            _ => r / 10 % 3000,
        };
        for round in 0..6 {
            for _ in 0..4000 {
                let r = rand();
                let n = pool(r >> 8);
                if r % 4 == 0 {
                    ks.delete(numbered(n)).unwrap();
                    model.remove(&n);
                } else {
                    let v = format!("{n}:{round}:{}", "v".repeat((r >> 40) as usize % 200));
                    if r % 7 == 0 {
                        let mut b = WriteBatch::new();
                        b.put(numbered(n), &v);
                        b.put(format!("D{:05}", n % 300), "entry");
                        ks.write(b).unwrap();
                    } else {
                        ks.put(numbered(n), &v).unwrap();
                    }
                    model.insert(n, v.into_bytes());
                }
            }
            // Overwrites leave stale records: compaction moves the live ones.
            db.compact().unwrap();
            check_numbered(&ks, &model);
        }
        assert!(db.verify().unwrap().is_clean());
        // An ordered scan that could hold numbered rows is refused, not answered in
        // part; scans beside them are not.
        for mut it in [ks.prefix("I"), ks.iter(), ks.range(.."J")] {
            assert!(matches!(it.next(), Some(Err(Error::InvalidArgument(_)))));
            assert!(it.next().is_none());
        }
        assert_eq!(keys(ks.range("J"..)).len(), 0);
        assert_eq!(keys(db.prefix("I")), vec![b"I-user-key".to_vec()]);
        let stats = db.stats();
        assert_eq!(stats.keyspace(3).keys, model.len() as u64 + 300);
    }
    // Reopened declared (the tables built from the hint files and records), then
    // undeclared: the same rows, now in the ordered index, where a scan lists them.
    {
        let db = declared().open(dir.path()).unwrap();
        check_numbered(&db.keyspace(3), &model);
        assert!(db.verify().unwrap().is_clean());
    }
    let db = Options::new().open(dir.path()).unwrap();
    let ks = db.keyspace(3);
    check_numbered(&ks, &model);
    let scanned: Vec<u64> = keys(ks.prefix("I"))
        .iter()
        .map(|k| u64::from_be_bytes(k[1..].try_into().unwrap()))
        .collect();
    assert_eq!(scanned, model.keys().copied().collect::<Vec<_>>());
}

/// The shards the rows numbered `0..n` live in, by group of 64.
fn shards_by_group(ks: &cairn::Keyspace, n: u64) -> Vec<Vec<usize>> {
    (0..n / 64)
        .map(|g| (0..64).map(|i| ks.shard_of(numbered(g * 64 + i))).collect())
        .collect()
}

#[test]
fn numbered_rows_are_routed_as_the_store_was_created_whatever_an_open_declares() {
    use std::collections::{BTreeMap, BTreeSet};
    let version = |dir: &std::path::Path| {
        let b = std::fs::read(dir.join("CAIRN")).unwrap();
        u32::from_le_bytes(b[8..12].try_into().unwrap())
    };
    let model: BTreeMap<u64, Vec<u8>> = (0..4096u64)
        .chain([0xFFFF_FFF0, u64::MAX])
        .map(|n| (n, format!("row {n}").into_bytes()))
        .collect();
    let fill = |db: &Db| {
        let ks = db.keyspace(3);
        for (n, v) in &model {
            ks.put(numbered(*n), v).unwrap();
        }
        for i in 0..300u32 {
            ks.put(format!("D{i:05}"), "entry").unwrap();
        }
    };
    let declared = || Options::new().shards(8).numbered_rows(3, b'I');

    // Created declared: rows go by group of 64, recorded in a version-2 manifest, and
    // every later open routes so, declared, undeclared or declaring something else.
    let grouped = tempfile::tempdir().unwrap();
    {
        let db = declared().open(grouped.path()).unwrap();
        assert_eq!(db.grouped_rows(), vec![(3, b'I')]);
        fill(&db);
        db.compact().unwrap();
    }
    assert_eq!(version(grouped.path()), 2);
    let mut routes = Vec::new();
    for opts in [
        Options::new(),
        declared(),
        Options::new().numbered_rows(3, b'J').numbered_rows(0, b'I'),
    ] {
        let db = opts.open(grouped.path()).unwrap();
        assert_eq!(db.grouped_rows(), vec![(3, b'I')]);
        let ks = db.keyspace(3);
        check_numbered(&ks, &model);
        assert!(db.verify().unwrap().is_clean());
        let by_group = shards_by_group(&ks, 4096);
        assert!(by_group.iter().all(|g| g.iter().all(|&s| s == g[0])));
        let used: BTreeSet<usize> = by_group.iter().map(|g| g[0]).collect();
        assert!(used.len() >= 6, "64 groups over 8 shards: {used:?}");
        routes.push(by_group);
        // Rows written now land where the earlier ones are.
        ks.put(numbered(7), "row 7").unwrap();
    }
    assert!(routes.windows(2).all(|w| w[0] == w[1]));

    // Created undeclared (as every store before grouped routing): a version-1 manifest,
    // each row by its key's hash, also when a later open declares the rows.
    let hashed = tempfile::tempdir().unwrap();
    {
        let db = Options::new().shards(8).open(hashed.path()).unwrap();
        assert!(db.grouped_rows().is_empty());
        fill(&db);
    }
    assert_eq!(version(hashed.path()), 1);
    let db = declared().open(hashed.path()).unwrap();
    assert!(db.grouped_rows().is_empty());
    let ks = db.keyspace(3);
    check_numbered(&ks, &model);
    assert!(db.verify().unwrap().is_clean());
    let spread = shards_by_group(&ks, 4096)
        .iter()
        .filter(|g| g.iter().any(|&s| s != g[0]))
        .count();
    assert_eq!(spread, 64, "every group spread over shards by hash");
}

#[test]
fn at_most_64_regions_of_numbered_rows_are_declared() {
    let dir = tempfile::tempdir().unwrap();
    let many = |n: u8| (0..n).fold(Options::new(), |o, t| o.numbered_rows(5, t));
    match many(65).open(dir.path()) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("at most 64"), "{m}"),
        other => panic!("{other:?}"),
    }
    let db = many(64).open(dir.path()).unwrap();
    assert_eq!(db.grouped_rows().len(), 64);
    drop(db);
    assert_eq!(Db::open(dir.path()).unwrap().grouped_rows().len(), 64);
}
