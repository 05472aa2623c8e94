use cairn::{Db, Options, SyncPolicy, WriteBatch};

#[test]
fn put_get_delete_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Options::new()
            .shards(4)
            .segment_size(64 << 10)
            .open(dir.path())
            .unwrap();
        for i in 0..5000u32 {
            db.put(format!("key{i:05}"), format!("value{i}").repeat(10))
                .unwrap();
        }
        for i in 0..5000u32 {
            assert_eq!(
                db.get(format!("key{i:05}")).unwrap().unwrap().into_vec(),
                format!("value{i}").repeat(10).into_bytes()
            );
        }
        for i in (0..5000u32).step_by(2) {
            db.delete(format!("key{i:05}")).unwrap();
        }
        let keys: Vec<_> = db.iter().map(|r| r.unwrap().0).collect();
        assert_eq!(keys.len(), 2500);
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        let rev: Vec<_> = db.iter().rev().map(|r| r.unwrap().0).collect();
        assert_eq!(rev.len(), 2500);
        db.compact().unwrap();
        let s = db.stats();
        assert_eq!(s.total.keys, 2500);
    }
    let db = Options::new()
        .segment_size(64 << 10)
        .open(dir.path())
        .unwrap();
    assert_eq!(db.iter().count(), 2500);
    assert!(db.get("key00000").unwrap().is_none());
    assert_eq!(
        db.get("key00001").unwrap().unwrap().into_vec(),
        "value1".repeat(10).into_bytes()
    );
    let mut b = WriteBatch::new();
    b.put("a", "1").put("b", "2").delete("key00001");
    db.write(b).unwrap();
    assert!(!db.contains("key00001").unwrap());
    assert!(db.verify().unwrap().is_clean());
}

#[test]
fn sync_always_many_threads() {
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new()
        .sync(SyncPolicy::Always)
        .open(dir.path())
        .unwrap();
    std::thread::scope(|s| {
        for t in 0..8 {
            let db = db.clone();
            s.spawn(move || {
                for i in 0..200 {
                    db.put(format!("t{t}-{i}"), "x").unwrap();
                }
            });
        }
    });
    assert_eq!(db.iter().count(), 1600);
    drop(db);
    let db = Db::open(dir.path()).unwrap();
    assert_eq!(db.iter().count(), 1600);
}

#[test]
fn db_is_send_sync_clone() {
    fn assert_traits<T: Send + Sync + Clone + 'static>() {}
    assert_traits::<Db>();
    fn assert_send<T: Send>() {}
    assert_send::<cairn::Iter>();
}

/// The hint files under `dir`, with the inode and bytes of each.
fn hints(dir: &std::path::Path) -> std::collections::BTreeMap<std::path::PathBuf, (u64, Vec<u8>)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = std::collections::BTreeMap::new();
    for shard in std::fs::read_dir(dir.join("shards")).unwrap() {
        for f in std::fs::read_dir(shard.unwrap().path()).unwrap() {
            let p = f.unwrap().path();
            if p.extension().is_some_and(|e| e == "hint") {
                let ino = std::fs::metadata(&p).unwrap().ino();
                out.insert(p.clone(), (ino, std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

/// An open that only reads leaves the active segments' hint files as the last close
/// wrote them (no directory sync at open, no rescan of the segments at close); the
/// first write to a shard removes its active segment's hint before the file changes,
/// and the next close writes it anew.
#[test]
fn an_open_that_only_reads_keeps_the_active_hints() {
    let dir = tempfile::tempdir().unwrap();
    let open = || Options::new().shards(4).open(dir.path()).unwrap();
    let db = open();
    for i in 0..1000u32 {
        db.put(format!("key{i:05}"), format!("value{i}")).unwrap();
    }
    db.close().unwrap();
    let before = hints(dir.path());
    assert_eq!(before.len(), 4, "one hint per shard's active segment");

    let db = open();
    for i in 0..1000u32 {
        assert!(db.get(format!("key{i:05}")).unwrap().is_some());
    }
    assert!(db.verify().unwrap().is_clean());
    db.close().unwrap();
    assert_eq!(hints(dir.path()), before, "a read-only open rewrote a hint");

    let db = open();
    db.put("key00001", "changed").unwrap();
    db.flush().unwrap();
    let during = hints(dir.path());
    assert_eq!(during.len(), 3, "the written shard's hint must be gone");
    assert!(during.iter().all(|(p, v)| before.get(p) == Some(v)));
    assert!(db.verify().unwrap().is_clean());
    db.close().unwrap();
    let after = hints(dir.path());
    assert_eq!(after.len(), 4);
    let rewritten: Vec<_> = after
        .iter()
        .filter(|(p, v)| before.get(*p) != Some(*v))
        .collect();
    assert_eq!(rewritten.len(), 1, "only the written shard's hint is new");

    let db = open();
    assert_eq!(db.get("key00001").unwrap().unwrap().into_vec(), b"changed");
    assert_eq!(db.iter().count(), 1000);
    assert!(db.open_damage().is_empty());
}

/// Keys that share their first 8, 16 or 24 bytes, or differ only by trailing zero bytes,
/// come back in byte order and with their own values after a reopen (the open sorts a
/// shard's records on their first 24 bytes, then on the whole key), and the newest
/// version of each wins.
#[test]
fn reopen_orders_keys_sharing_long_prefixes() {
    let dir = tempfile::tempdir().unwrap();
    let mut keys: Vec<Vec<u8>> = vec![b"ab".to_vec(), b"ab\0".to_vec(), b"ab\0\0".to_vec()];
    for len in [7usize, 8, 9, 16, 23, 24, 25, 40] {
        for last in [0u8, 1, 200] {
            let mut k = vec![b'D'; len];
            k.push(last);
            keys.push(k);
        }
    }
    let db = cairn::Options::new().shards(2).open(dir.path()).unwrap();
    // Written in reverse order, each twice: the second value must win.
    for (i, k) in keys.iter().enumerate().rev() {
        db.put(k, format!("old{i}")).unwrap();
    }
    for (i, k) in keys.iter().enumerate() {
        db.put(k, format!("new{i}")).unwrap();
    }
    db.close().unwrap();
    let db = cairn::Db::open(dir.path()).unwrap();
    let got: Vec<(Vec<u8>, Vec<u8>)> = db
        .iter()
        .map(|kv| kv.map(|(k, v)| (k, v.to_vec())))
        .collect::<Result<_, _>>()
        .unwrap();
    let mut want: Vec<(Vec<u8>, Vec<u8>)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (k.clone(), format!("new{i}").into_bytes()))
        .collect();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn put_new_writes_a_new_key_and_refuses_a_taken_one_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new().shards(4).open(dir.path()).unwrap();
    db.put("taken", "old").unwrap();
    // A batch across shards whose new key is taken writes nothing.
    let mut b = WriteBatch::new();
    b.put("a", "1")
        .put_new("taken", "new")
        .delete("b")
        .put("c", "3");
    match db.write(b) {
        Err(cairn::Error::KeyExists { len }) => assert_eq!(len, 5),
        other => panic!("expected KeyExists, got {other:?}"),
    }
    assert_eq!(db.get("taken").unwrap().unwrap().into_vec(), b"old");
    assert!(db.get("a").unwrap().is_none() && db.get("c").unwrap().is_none());
    // A free key is written with the rest of its batch; deleted, it is free again.
    let mut b = WriteBatch::new();
    b.put_new("fresh", "1").put("a", "1");
    db.write(b).unwrap();
    assert_eq!(db.get("fresh").unwrap().unwrap().into_vec(), b"1");
    let mut b = WriteBatch::new();
    b.put_new("fresh", "2");
    assert!(matches!(db.write(b), Err(cairn::Error::KeyExists { .. })));
    db.delete("fresh").unwrap();
    let mut b = WriteBatch::new();
    // The requirement is on the value before the batch, whatever the batch does after.
    b.put_new("fresh", "3").delete("fresh").put("fresh", "4");
    db.write(b).unwrap();
    assert_eq!(db.get("fresh").unwrap().unwrap().into_vec(), b"4");
    // The refusal survives nothing: a reopen finds exactly what was written.
    drop(db);
    let db = Options::new().shards(4).open(dir.path()).unwrap();
    assert_eq!(db.get("taken").unwrap().unwrap().into_vec(), b"old");
    assert_eq!(db.get("fresh").unwrap().unwrap().into_vec(), b"4");
    assert!(db.get("c").unwrap().is_none());
}

#[test]
fn put_new_lets_one_of_racing_writers_win() {
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new().shards(4).open(dir.path()).unwrap();
    // 4 threads race to create the same 500 keys, each with its own value: every key
    // is won exactly once, and holds its winner's value.
    let wins: Vec<Vec<u32>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u8)
            .map(|t| {
                let db = db.clone();
                s.spawn(move || {
                    let mut won = Vec::new();
                    for i in 0..500u32 {
                        let mut b = WriteBatch::new();
                        b.put_new(format!("k{i}"), [t]);
                        match db.write(b) {
                            Ok(()) => won.push(i),
                            Err(cairn::Error::KeyExists { .. }) => {}
                            Err(e) => panic!("write failed: {e}"),
                        }
                    }
                    won
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<u32> = wins.iter().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..500).collect::<Vec<_>>());
    for (t, won) in wins.iter().enumerate() {
        for i in won {
            assert_eq!(
                db.get(format!("k{i}")).unwrap().unwrap().into_vec(),
                [t as u8]
            );
        }
    }
}
