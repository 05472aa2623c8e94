//! Snapshots: a model test against a `BTreeMap` history, and what a snapshot held for a
//! whole overwrite workload pins, and gives back.
//!
//! The model property runs random writes (puts, overwrites, deletes, batches), takes
//! snapshots at random points (the model keeps a copy of the map at each), reads them
//! back through gets, `contains` and scans in both directions while compaction and
//! reclamation run (explicitly, and in the background in some cases), and drops them at
//! random. Every snapshot read must equal the model's copy. At the end, with every
//! snapshot dropped, nothing may be pinned any more, and after a compaction the store's
//! size must be what the same writes gave a store that never had a snapshot.
//!
//! `PROPTEST_CASES` overrides the number of cases.

use cairn::{Db, Options, Snapshot, WriteBatch};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;

mod scan_model;
use scan_model::{check_both_ways, run_scan, Key, Model, Scan, Target};

const ALPHABET: [u8; 4] = [0x00, b'a', b'b', 0xff];

#[derive(Clone, Debug)]
enum Read {
    Get(Key),
    Contains(Key),
    Scan(Scan),
}

#[derive(Clone, Debug)]
enum Op {
    Put(Key, Vec<u8>),
    Delete(Key),
    Batch(Vec<(Key, Option<Vec<u8>>)>),
    Take,
    Drop(Index),
    Read(Index, Read),
    Compact,
    Reclaim,
    Flush,
}

fn key() -> impl Strategy<Value = Key> {
    prop::collection::vec(prop::sample::select(&ALPHABET[..]), 0..=3)
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => Just(Vec::new()),
        10 => prop::collection::vec(any::<u8>(), 0..200),
        1 => (any::<u8>(), 1000usize..3000).prop_map(|(b, n)| vec![b; n]),
    ]
}

fn read() -> impl Strategy<Value = Read> {
    let target = prop_oneof![
        1 => Just(Target::All),
        3 => (scan_model::bound(key), scan_model::bound(key))
            .prop_map(|(lo, hi)| Target::Range(lo, hi)),
        2 => key().prop_map(Target::Prefix),
    ];
    prop_oneof![
        3 => key().prop_map(Read::Get),
        1 => key().prop_map(Read::Contains),
        3 => scan_model::scan(target, 8, 20).prop_map(Read::Scan),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (key(), value()).prop_map(|(k, v)| Op::Put(k, v)),
        10 => key().prop_map(Op::Delete),
        5 => prop::collection::vec((key(), prop::option::weighted(0.7, value())), 0..8)
            .prop_map(Op::Batch),
        6 => Just(Op::Take),
        2 => any::<Index>().prop_map(Op::Drop),
        20 => (any::<Index>(), read()).prop_map(|(i, r)| Op::Read(i, r)),
        3 => Just(Op::Compact),
        2 => Just(Op::Reclaim),
        1 => Just(Op::Flush),
    ]
}

fn options(shards: u32, background: bool) -> Options {
    Options::new()
        .shards(shards)
        .segment_size(4096)
        .compaction_threshold(0.05)
        .background_compaction(background)
        .compaction_rate(None)
}

/// Reads `r` through `snap` and checks it against `m`.
fn check(snap: &Snapshot, m: &Model, r: &Read) -> Result<(), TestCaseError> {
    match r {
        Read::Get(k) => {
            let got = snap.get(k).unwrap().map(|v| v.to_vec());
            prop_assert_eq!(got.as_ref(), m.get(k), "get {:?} at {}", k, snap.seq());
        }
        Read::Contains(k) => {
            prop_assert_eq!(snap.contains(k).unwrap(), m.contains_key(k));
        }
        Read::Scan(scan) => run_scan(snap, m, scan)?,
    }
    Ok(())
}

fn apply(db: &Db, m: &mut Model, op: &Op) {
    match op {
        Op::Put(k, v) => {
            db.put(k, v).unwrap();
            m.insert(k.clone(), v.clone());
        }
        Op::Delete(k) => {
            db.delete(k).unwrap();
            m.remove(k);
        }
        Op::Batch(ops) => {
            let mut b = WriteBatch::new();
            for (k, v) in ops {
                match v {
                    Some(v) => {
                        b.put(k, v);
                        m.insert(k.clone(), v.clone());
                    }
                    None => {
                        b.delete(k);
                        m.remove(k);
                    }
                }
            }
            db.write(b).unwrap();
        }
        Op::Compact => db.compact().unwrap(),
        Op::Reclaim => {
            db.reclaim().unwrap();
        }
        Op::Flush => db.flush().unwrap(),
        Op::Take | Op::Drop(_) | Op::Read(..) => {}
    }
}

fn run(shards: u32, background: bool, ops: &[Op]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let twin_dir = tempfile::tempdir().unwrap();
    let db = options(shards, background).open(dir.path()).unwrap();
    let twin = options(shards, false).open(twin_dir.path()).unwrap();
    let (mut m, mut tm) = (Model::new(), Model::new());
    let mut snaps: Vec<(Snapshot, Model)> = Vec::new();
    for op in ops {
        match op {
            Op::Take => snaps.push((db.snapshot(), m.clone())),
            Op::Drop(i) if !snaps.is_empty() => {
                snaps.remove(i.index(snaps.len()));
            }
            Op::Read(i, r) if !snaps.is_empty() => {
                let (s, sm) = &snaps[i.index(snaps.len())];
                check(s, sm, r)?;
            }
            // The same read of the store as it is now, through a fresh snapshot.
            Op::Read(_, r) => check(&db.snapshot(), &m, r)?,
            _ => {
                apply(&db, &mut m, op);
                apply(&twin, &mut tm, op);
                // What it wrote changed nothing any live snapshot sees of those keys.
                let touched: Vec<&Key> = match op {
                    Op::Put(k, _) | Op::Delete(k) => vec![k],
                    Op::Batch(ops) => ops.iter().map(|(k, _)| k).collect(),
                    _ => Vec::new(),
                };
                for (s, sm) in &snaps {
                    for k in &touched {
                        check(s, sm, &Read::Get((*k).clone()))?;
                    }
                }
            }
        }
    }
    // Every snapshot still reads what it read when taken, after a full compaction.
    db.compact().unwrap();
    for (s, sm) in &snaps {
        check_both_ways(s, sm, "after a compaction")?;
    }
    snaps.clear();
    let st = db.stats();
    prop_assert_eq!(st.snapshots.live, 0);
    prop_assert_eq!(st.snapshots.versions, 0, "{:?}", st.snapshots);
    prop_assert_eq!(st.snapshots.pinned_bytes, 0);
    prop_assert_eq!(st.snapshots.retained_segments, 0);
    // With nothing pinned, compaction gives back what the snapshots kept: the store is
    // the size of one that never had one (give or take a segment per shard of what each
    // left in its active segment and tombstones).
    for d in [&db, &twin] {
        d.compact().unwrap();
        d.reclaim().unwrap();
        d.compact().unwrap();
    }
    let (a, b) = (db.stats().total, twin.stats().total);
    prop_assert_eq!(a.live_bytes, b.live_bytes);
    let slack = 2 * 4096 * shards as u64 + b.live_bytes / 8;
    prop_assert!(
        a.disk_bytes <= b.disk_bytes + slack,
        "{} bytes on disk, {} without snapshots",
        a.disk_bytes,
        b.disk_bytes
    );
    let all: Vec<Key> = db.iter().map(|kv| kv.unwrap().0).collect();
    prop_assert_eq!(all, m.keys().cloned().collect::<Vec<_>>());
    db.close().unwrap();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]

    #[test]
    fn snapshots_read_their_copy_of_the_model(
        shards in 1u32..=3,
        background in prop::bool::weighted(0.3),
        ops in prop::collection::vec(op(), 1..300),
    ) {
        run(shards, background, &ops)?;
    }
}

/// A snapshot held for the whole of a heavy overwrite workload: it pins one version per
/// key it saw overwritten (not one per write), about 64 bytes of memory plus the key
/// each, and the segments holding them; dropped, all of it comes back.
#[test]
fn a_snapshot_held_through_heavy_overwrites_pins_what_it_sees_and_gives_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new()
        .shards(4)
        .segment_size(256 << 10)
        .background_compaction(true)
        .compaction_rate(None)
        .open(dir.path())
        .unwrap();
    let keys = 20_000u32;
    let value = |i: u32, round: u32| {
        let mut v = vec![(round % 251) as u8; 100];
        v[..4].copy_from_slice(&i.to_be_bytes());
        v
    };
    for i in 0..keys {
        db.put(format!("key{i:08}"), value(i, 0)).unwrap();
    }
    db.flush().unwrap();
    let before = db.stats().total;
    let snap = db.snapshot();
    let mut pinned_versions = Vec::new();
    for round in 1..=10u32 {
        for i in 0..keys {
            // Overwrite a half of the keys each round, always the same half.
            if i % 2 == 0 {
                db.put(format!("key{i:08}"), value(i, round)).unwrap();
            }
        }
        let s = db.stats();
        pinned_versions.push(s.snapshots.versions);
        // One version per key overwritten, however many times.
        assert_eq!(s.snapshots.versions, u64::from(keys / 2), "round {round}");
        assert_eq!(s.snapshots.keys, u64::from(keys / 2));
        let key_bytes = 1 + 11; // keyspace byte + "key" + 8 digits
        let per = s.snapshots.memory_bytes as f64 / s.snapshots.versions as f64;
        assert!(
            per <= 64.0 + key_bytes as f64,
            "{per} bytes of memory a version"
        );
        // The disk it pins is at most the store as it was when it was taken.
        assert!(s.snapshots.pinned_bytes <= before.live_bytes);
    }
    let held = db.stats().total;
    // The snapshot still reads every value of round 0.
    for (n, kv) in snap.iter().enumerate() {
        let (k, v) = kv.unwrap();
        assert_eq!(k, format!("key{n:08}").into_bytes());
        assert_eq!(&*v, &value(n as u32, 0)[..]);
    }
    drop(snap);
    let s = db.stats();
    assert_eq!(s.snapshots.versions, 0);
    assert_eq!(s.snapshots.pinned_bytes, 0);
    assert_eq!(s.snapshots.retained_segments, 0);
    db.compact().unwrap();
    let after = db.stats().total;
    assert!(
        after.disk_bytes < held.disk_bytes,
        "{} bytes on disk with the snapshot, {} after",
        held.disk_bytes,
        after.disk_bytes
    );
    assert!(
        after.disk_bytes <= after.live_bytes * 2 + (4 << 20),
        "{} bytes on disk for {} live",
        after.disk_bytes,
        after.live_bytes
    );
    eprintln!(
        "held: {} on disk, {} live; after: {} on disk; versions pinned per round {:?}",
        held.disk_bytes, held.live_bytes, after.disk_bytes, pinned_versions
    );
}
