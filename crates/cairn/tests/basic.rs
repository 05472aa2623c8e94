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
