//! Concurrency stress while compaction runs, plus the edges of the API: large and empty
//! values, size limits, `max_size`, locking, the fixed shard count and garbage on disk.
//!
//! `CAIRN_STRESS_OPS=N` scales the concurrent stress tests (default 10000; e.g. 40000
//! for a run of a minute or two).

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use cairn::{Db, Error, Options, SyncPolicy, VerifyReport, WriteBatch, MAX_KEY_LEN, MAX_VALUE_LEN};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

// ---------------------------------------------------------------------------------------
// Self-describing values.
//
// Every value is `key|writer:version|padding`, where the padding's length and bytes are a
// function of (key, writer, version). A reader can therefore check that a value belongs
// to the key it was returned for, that it is byte-for-byte one that was written, and that
// it is not from the future (its version was issued before the read).

const WRITERS: usize = 4;
/// Writer id of values written before the threads start.
const SETUP: usize = WRITERS;
const OWNED: usize = 300;
const SHARED: usize = 40;
const STABLE: usize = 1500;
/// Operations per writer thread: `default`, or `CAIRN_STRESS_OPS` times `default` / 10000
/// (for longer runs).
fn ops_per_writer(default: u64) -> u64 {
    std::env::var("CAIRN_STRESS_OPS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map_or(default, |n| n * default / 10_000)
}

fn owned_key(w: usize, i: usize) -> Vec<u8> {
    format!("w{w}/{i:04}").into_bytes()
}
fn shared_key(i: usize) -> Vec<u8> {
    format!("s/{i:03}").into_bytes()
}
fn stable_key(i: usize) -> Vec<u8> {
    format!("stable/{i:05}").into_bytes()
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

fn value_for(key: &[u8], writer: usize, version: u64) -> Vec<u8> {
    let mut v = key.to_vec();
    v.extend_from_slice(format!("|{writer}:{version}|").as_bytes());
    let h = key
        .iter()
        .fold(mix(writer as u64 * 1_000_003 + version), |a, &b| {
            mix(a ^ b as u64)
        });
    let len = (h % 240) as usize;
    v.extend((0..len).map(|i| b'a' + ((h >> 8) as usize + i) as u8 % 26));
    v
}

/// Parses and checks a value read for `key`; returns (writer, version).
fn check_value(key: &[u8], v: &[u8], issued: &[AtomicU64]) -> (usize, u64) {
    let shown = || {
        format!(
            "key {:?} value {:?}",
            String::from_utf8_lossy(key),
            String::from_utf8_lossy(&v[..v.len().min(80)])
        )
    };
    assert!(
        v.len() > key.len() && v.starts_with(key) && v[key.len()] == b'|',
        "value of another key: {}",
        shown()
    );
    let rest = &v[key.len() + 1..];
    let end = rest
        .iter()
        .position(|&b| b == b'|')
        .unwrap_or_else(|| panic!("malformed value: {}", shown()));
    let tag = std::str::from_utf8(&rest[..end]).unwrap_or_else(|_| panic!("{}", shown()));
    let (w, n) = tag
        .split_once(':')
        .unwrap_or_else(|| panic!("malformed tag: {}", shown()));
    let (w, n): (usize, u64) = (
        w.parse().unwrap_or_else(|_| panic!("{}", shown())),
        n.parse().unwrap_or_else(|_| panic!("{}", shown())),
    );
    assert!(w <= SETUP, "bad writer: {}", shown());
    assert_eq!(v, value_for(key, w, n), "damaged value: {}", shown());
    if key.starts_with(b"stable/") {
        assert_eq!((w, n), (SETUP, 0), "stable key changed: {}", shown());
    } else if key.starts_with(b"w") {
        let owner = (key[1] - b'0') as usize;
        assert_eq!(w, owner, "owned key written by another writer: {}", shown());
    }
    if w < WRITERS {
        let issued = issued[w].load(Ordering::SeqCst);
        assert!(
            n < issued,
            "value from the future (issued {issued}): {}",
            shown()
        );
    }
    (w, n)
}

/// Remembers, per key, the newest (writer, version) a thread has seen, and fails when a
/// later read returns an older value of the same writer (a resurrected old version).
#[derive(Default)]
struct Monotonic {
    seen: HashMap<Vec<u8>, (usize, u64)>,
}

impl Monotonic {
    fn see(&mut self, key: &[u8], wv: (usize, u64)) {
        if let Some(&(w, n)) = self.seen.get(key) {
            if w == wv.0 {
                assert!(
                    wv.1 >= n,
                    "key {:?} went back from version {n} to {} of writer {w}",
                    String::from_utf8_lossy(key),
                    wv.1
                );
            }
        }
        self.seen.insert(key.to_vec(), wv);
    }
}

/// Damage that `verify` reports when a concurrent (background) compaction removes a
/// segment and its hint file between listing and reading them: a false positive, see
/// the ignored `verify_races_with_compaction`.
fn vanished_hint(d: &cairn::Damage) -> bool {
    d.path.extension().is_some_and(|e| e == "hint")
        && d.detail.contains("No such file or directory")
}

fn verify_clean(db: &Db, when: &str) -> VerifyReport {
    let mut r = db.verify().unwrap_or_else(|e| panic!("verify {when}: {e}"));
    // Real damage persists; the false positive above is transient, so retry only that.
    for _ in 0..10 {
        if r.is_clean() || !r.damage.iter().all(vanished_hint) {
            break;
        }
        r = db.verify().unwrap_or_else(|e| panic!("verify {when}: {e}"));
    }
    assert!(r.is_clean(), "verify {when}: {:?}", r.damage);
    r
}

/// Segment files created in the store's life that compaction has since removed.
fn segments_removed(dir: &Path) -> u64 {
    let mut removed = 0;
    for shard in fs::read_dir(dir.join("shards")).unwrap() {
        let (mut next_id, mut present) = (0u64, 0u64);
        for f in fs::read_dir(shard.unwrap().path()).unwrap() {
            let name = f.unwrap().file_name().to_string_lossy().into_owned();
            if let Some(id) = name
                .strip_suffix(".seg")
                .and_then(|s| s.parse::<u64>().ok())
            {
                present += 1;
                next_id = next_id.max(id + 1);
            }
        }
        removed += next_id.saturating_sub(present);
    }
    removed
}

fn contents(db: &Db) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    for item in db.iter() {
        let (k, v) = item.unwrap();
        assert!(m.insert(k, v.into_vec()).is_none(), "key yielded twice");
    }
    m
}

// ---------------------------------------------------------------------------------------

/// What a writer did: the exact final state of its own keys and its last operation on
/// each shared key.
struct WriterOutcome {
    own: BTreeMap<Vec<u8>, Vec<u8>>,
    shared_last: HashMap<Vec<u8>, Option<Vec<u8>>>,
}

fn writer(db: &Db, w: usize, ops: u64, issued: &[AtomicU64], barrier: &Barrier) -> WriterOutcome {
    let mut rng = StdRng::seed_from_u64(0x5eed_0000 + w as u64);
    let mut own: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut shared_last = HashMap::new();
    let mut next = 0u64;
    // Versions are published before the write, so whoever reads version n also finds
    // n < issued.
    let issue = |next: &mut u64| {
        let n = *next;
        *next += 1;
        issued[w].store(*next, Ordering::SeqCst);
        n
    };
    barrier.wait();
    for _ in 0..ops {
        let roll = rng.random_range(0..100);
        let k = owned_key(w, rng.random_range(0..OWNED));
        match roll {
            0..50 => {
                let n = issue(&mut next);
                let v = value_for(&k, w, n);
                db.put(&k, &v).unwrap();
                own.insert(k, v);
            }
            50..65 => {
                db.delete(&k).unwrap();
                own.remove(&k);
            }
            65..80 => {
                let n = issue(&mut next);
                let mut b = WriteBatch::new();
                let mut effects = Vec::new();
                for _ in 0..rng.random_range(1..8) {
                    // Repeats of the same key inside a batch are likely: last one wins.
                    let k = owned_key(w, rng.random_range(0..OWNED.min(40)));
                    if rng.random_bool(0.7) {
                        let v = value_for(&k, w, n);
                        b.put(&k, &v);
                        effects.push((k, Some(v)));
                    } else {
                        b.delete(&k);
                        effects.push((k, None));
                    }
                }
                if rng.random_bool(0.3) {
                    let k = shared_key(rng.random_range(0..SHARED));
                    let v = value_for(&k, w, n);
                    b.put(&k, &v);
                    shared_last.insert(k, Some(v));
                }
                db.write(b).unwrap();
                for (k, v) in effects {
                    match v {
                        Some(v) => own.insert(k, v),
                        None => own.remove(&k),
                    };
                }
            }
            80..90 => {
                let k = shared_key(rng.random_range(0..SHARED));
                let n = issue(&mut next);
                let v = value_for(&k, w, n);
                db.put(&k, &v).unwrap();
                shared_last.insert(k, Some(v));
            }
            90..94 => {
                let k = shared_key(rng.random_range(0..SHARED));
                db.delete(&k).unwrap();
                shared_last.insert(k, None);
            }
            _ => {
                // Read-your-writes: nobody else writes this key, so the value is exact.
                let got = db.get(&k).unwrap().map(|v| v.into_vec());
                assert_eq!(got.as_ref(), own.get(&k), "writer {w} reading its own key");
            }
        }
    }
    WriterOutcome { own, shared_last }
}

fn check_scan_item(
    key: &[u8],
    value: &[u8],
    issued: &[AtomicU64],
    mono: &mut Monotonic,
    stable_seen: &mut usize,
) {
    let wv = check_value(key, value, issued);
    mono.see(key, wv);
    if key.starts_with(b"stable/") {
        *stable_seen += 1;
    }
}

/// Full forward and reverse scans: strictly ordered (so no key twice), every stable key
/// present, every value one its key held.
fn full_scanner(db: &Db, issued: &[AtomicU64], done: &AtomicBool) -> u64 {
    let mut mono = Monotonic::default();
    let mut scans = 0;
    while !done.load(Ordering::SeqCst) || scans < 2 {
        let reverse = scans % 2 == 1;
        let mut prev: Option<Vec<u8>> = None;
        let mut stable_seen = 0;
        let it: Box<dyn Iterator<Item = cairn::Result<(Vec<u8>, cairn::Value)>>> = if reverse {
            Box::new(db.iter().rev())
        } else {
            Box::new(db.iter())
        };
        for item in it {
            let (k, v) = item.unwrap();
            if let Some(p) = &prev {
                if reverse {
                    assert!(k < *p, "reverse scan out of order: {k:?} after {p:?}");
                } else {
                    assert!(k > *p, "forward scan out of order: {k:?} after {p:?}");
                }
            }
            check_scan_item(&k, &v, issued, &mut mono, &mut stable_seen);
            prev = Some(k);
        }
        assert_eq!(stable_seen, STABLE, "a scan missed stable keys");
        scans += 1;
    }
    scans
}

/// Prefix and range scans, with `next()` and `next_back()` mixed on one iterator.
fn range_scanner(db: &Db, issued: &[AtomicU64], done: &AtomicBool) -> u64 {
    let mut rng = StdRng::seed_from_u64(0xa11ce);
    let mut mono = Monotonic::default();
    let mut scans = 0;
    while !done.load(Ordering::SeqCst) || scans < 2 {
        let mut stable_seen = 0;
        match scans % 3 {
            0 => {
                // The stable keys, meeting in the middle from both ends.
                let mut it = db.prefix("stable/");
                let (mut front, mut back) = (Vec::new(), Vec::new());
                loop {
                    let item = if rng.random_bool(0.5) {
                        it.next().map(|r| (r, true))
                    } else {
                        it.next_back().map(|r| (r, false))
                    };
                    let Some((r, fwd)) = item else { break };
                    let (k, v) = r.unwrap();
                    check_scan_item(&k, &v, issued, &mut mono, &mut stable_seen);
                    if fwd { &mut front } else { &mut back }.push(k);
                }
                back.reverse();
                front.extend(back);
                let want: Vec<Vec<u8>> = (0..STABLE).map(stable_key).collect();
                assert_eq!(front, want, "mixed-direction prefix scan of stable keys");
            }
            1 => {
                // A writer's region, bounded both sides, mixed directions.
                let w = rng.random_range(0..WRITERS);
                let lo = owned_key(w, rng.random_range(0..OWNED / 2));
                let hi = owned_key(w, rng.random_range(OWNED / 2..OWNED));
                let mut it = db.range(lo.clone()..=hi.clone());
                let (mut front, mut back): (Vec<Vec<u8>>, Vec<Vec<u8>>) = (Vec::new(), Vec::new());
                loop {
                    let fwd = rng.random_bool(0.5);
                    let item = if fwd { it.next() } else { it.next_back() };
                    let Some(r) = item else { break };
                    let (k, v) = r.unwrap();
                    assert!(
                        k >= lo && k <= hi,
                        "range scan yielded {k:?} outside bounds"
                    );
                    check_scan_item(&k, &v, issued, &mut mono, &mut stable_seen);
                    if fwd {
                        assert!(front.last().is_none_or(|p| k > *p), "front out of order");
                        front.push(k);
                    } else {
                        assert!(back.last().is_none_or(|p| k < *p), "back out of order");
                        back.push(k);
                    }
                }
                if let (Some(f), Some(b)) = (front.last(), back.last()) {
                    assert!(f < b, "front and back of one iterator crossed");
                }
            }
            _ => {
                // Shared keys in reverse, then everything after the stable keys.
                let mut prev: Option<Vec<u8>> = None;
                for r in db.prefix("s/").rev() {
                    let (k, v) = r.unwrap();
                    assert!(prev.as_ref().is_none_or(|p| k < *p), "reverse prefix order");
                    check_scan_item(&k, &v, issued, &mut mono, &mut stable_seen);
                    prev = Some(k);
                }
                let first = db.range::<[u8], _>((
                    std::ops::Bound::Excluded(&stable_key(STABLE - 1)[..]),
                    std::ops::Bound::Unbounded,
                ));
                for r in first.take(50) {
                    let (k, v) = r.unwrap();
                    assert!(k.starts_with(b"w"), "unexpected key after stable keys");
                    check_scan_item(&k, &v, issued, &mut mono, &mut stable_seen);
                }
            }
        }
        scans += 1;
    }
    scans
}

fn reader(db: &Db, r: u64, issued: &[AtomicU64], done: &AtomicBool) -> u64 {
    let mut rng = StdRng::seed_from_u64(0xbeef + r);
    let mut mono = Monotonic::default();
    let mut gets = 0;
    while !done.load(Ordering::SeqCst) || gets < 100 {
        let k = match rng.random_range(0..10) {
            0..3 => stable_key(rng.random_range(0..STABLE)),
            3..5 => shared_key(rng.random_range(0..SHARED)),
            _ => owned_key(rng.random_range(0..WRITERS), rng.random_range(0..OWNED)),
        };
        let got = db.get(&k).unwrap();
        match got {
            Some(v) => {
                let wv = check_value(&k, &v, issued);
                mono.see(&k, wv);
            }
            None => assert!(!k.starts_with(b"stable/"), "stable key {k:?} missing"),
        }
        gets += 1;
    }
    gets
}

#[test]
fn concurrent_writers_scanners_readers_and_compaction() {
    let opts = || {
        Options::new()
            .shards(4)
            .segment_size(16 << 10)
            .write_buffer(4 << 10)
            .compaction_threshold(0.3)
            .compaction_threads(2)
            .compaction_rate(None)
    };
    run_stress(opts, ops_per_writer(10_000));
}

/// All writers on one shard, 8 KiB segments, a periodic sync every millisecond, one
/// background compaction thread at its default rate limit.
#[test]
fn concurrent_stress_one_shard_periodic_sync() {
    let opts = || {
        Options::new()
            .shards(1)
            .segment_size(8 << 10)
            .compaction_threshold(0.5)
            .sync(SyncPolicy::Every(Duration::from_millis(1)))
    };
    run_stress(opts, ops_per_writer(5_000));
}

#[allow(clippy::too_many_lines)]
fn run_stress(opts: impl Fn() -> Options, ops: u64) {
    let start = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let db = opts().open(dir.path()).unwrap();
    for i in 0..STABLE {
        let k = stable_key(i);
        db.put(&k, value_for(&k, SETUP, 0)).unwrap();
    }
    for i in 0..SHARED {
        let k = shared_key(i);
        db.put(&k, value_for(&k, SETUP, 0)).unwrap();
    }
    let issued: Vec<AtomicU64> = (0..WRITERS).map(|_| AtomicU64::new(0)).collect();
    let done = AtomicBool::new(false);
    let barrier = Barrier::new(WRITERS);
    let longest_compact_ms = AtomicU64::new(0);
    let (outcomes, counts) = std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (db, issued, barrier) = (&db, &issued, &barrier);
                s.spawn(move || writer(db, w, ops, issued, barrier))
            })
            .collect();
        let others = vec![
            s.spawn(|| full_scanner(&db, &issued, &done)),
            s.spawn(|| range_scanner(&db, &issued, &done)),
            s.spawn(|| reader(&db, 0, &issued, &done)),
            s.spawn(|| reader(&db, 1, &issued, &done)),
            s.spawn(|| {
                let mut n = 0u64;
                while !done.load(Ordering::SeqCst) || n < 2 {
                    let t = Instant::now();
                    db.compact().unwrap();
                    let ms = t.elapsed().as_millis() as u64;
                    longest_compact_ms.fetch_max(ms, Ordering::SeqCst);
                    db.flush().unwrap();
                    let _ = db.stats();
                    n += 1;
                }
                n
            }),
        ];
        // Join the writers first, then stop the others, so that a panicking writer
        // does not leave them spinning.
        let outcomes: Vec<WriterOutcome> = writers
            .into_iter()
            .map(|h| h.join())
            .collect::<Result<_, _>>()
            .inspect_err(|_| done.store(true, Ordering::SeqCst))
            .unwrap();
        done.store(true, Ordering::SeqCst);
        let counts: Vec<u64> = others.into_iter().map(|h| h.join().unwrap()).collect();
        (outcomes, counts)
    });
    eprintln!(
        "stress: {:?} after {:?} (full scans, range scans, gets, gets, compact calls); \
         longest compact call {} ms; {} segments compacted away; {:?}",
        counts,
        start.elapsed(),
        longest_compact_ms.load(Ordering::SeqCst),
        segments_removed(dir.path()),
        db.stats().total
    );
    assert!(
        counts.iter().all(|&c| c >= 2),
        "a checker thread did not run: {counts:?}"
    );
    // Compaction ran while the others did (thousands of segments are written).
    let removed = segments_removed(dir.path());
    assert!(
        removed >= (ops / 250).min(20),
        "compaction removed only {removed} segments during the stress"
    );

    // The expected final state: exact for stable and owned keys; for a shared key, the
    // last operation of one of the writers that touched it.
    let mut expect: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for i in 0..STABLE {
        let k = stable_key(i);
        let v = value_for(&k, SETUP, 0);
        expect.insert(k, v);
    }
    for o in &outcomes {
        expect.extend(o.own.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    let actual = contents(&db);
    for i in 0..SHARED {
        let k = shared_key(i);
        let lasts: Vec<&Option<Vec<u8>>> = outcomes
            .iter()
            .filter_map(|o| o.shared_last.get(&k))
            .collect();
        let got = actual.get(&k).cloned();
        if lasts.is_empty() {
            assert_eq!(got, Some(value_for(&k, SETUP, 0)), "untouched shared key");
        } else {
            assert!(
                lasts.contains(&&got),
                "shared key {k:?} ends as {got:?}, not the last write of any writer"
            );
        }
        if let Some(v) = got {
            expect.insert(k, v);
        }
    }
    assert_eq!(actual.len(), expect.len());
    assert!(
        actual == expect,
        "final state differs from the expected one"
    );
    for (k, v) in &expect {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(&v[..]));
    }
    assert_eq!(db.stats().total.keys, expect.len() as u64);

    db.compact().unwrap();
    assert!(contents(&db) == expect, "state changed by compaction");
    verify_clean(&db, "after the stress");
    drop(db);

    // Reopen without background compaction, so the store is quiet while verifying.
    let db = opts()
        .background_compaction(false)
        .open(dir.path())
        .unwrap();
    assert!(db.open_damage().is_empty(), "{:?}", db.open_damage());
    assert!(contents(&db) == expect, "state changed by reopening");
    assert_eq!(db.stats().total.keys, expect.len() as u64);
    let report = verify_clean(&db, "after reopening");
    assert!(report.records_checked as usize >= expect.len());
    db.compact().unwrap();
    assert!(
        contents(&db) == expect,
        "state changed by compaction after reopening"
    );
    verify_clean(&db, "after compacting the reopened store");
    eprintln!("stress total {:?}", start.elapsed());
}

/// `verify` while compaction removes segments must not report damage: the store is
/// intact. It lists the segments, then reads each one's hint file by path; a segment
/// compacted away in between has lost its hint file, and verify reports that as damage.
#[test]
fn verify_races_with_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new()
        .shards(1)
        .segment_size(4096)
        .background_compaction(false)
        .open(dir.path())
        .unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let churn = s.spawn(|| {
            let mut round = 0u32;
            while !stop.load(Ordering::SeqCst) {
                for i in 0..100u32 {
                    db.put(format!("k{}", i % 20), format!("{round}-{i}").repeat(8))
                        .unwrap();
                }
                db.compact().unwrap();
                round += 1;
            }
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut failure = None;
        while Instant::now() < deadline && failure.is_none() {
            let r = db.verify().unwrap();
            if !r.is_clean() {
                failure = Some(r.damage);
            }
        }
        stop.store(true, Ordering::SeqCst);
        churn.join().unwrap();
        assert!(failure.is_none(), "verify reported damage: {failure:?}");
    });
}

// ---------------------------------------------------------------------------------------

#[test]
fn large_and_empty_values_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || {
        Options::new()
            .shards(2)
            .segment_size(64 << 10)
            .compaction_threshold(0.3)
    };
    let db = opts().open(dir.path()).unwrap();
    let big = |n: usize, seed: u8| -> Vec<u8> {
        (0..n)
            .map(|i| (mix(i as u64 ^ ((seed as u64) << 40)) >> 7) as u8)
            .collect()
    };
    let mut expect: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let sizes = [1 << 20, (1 << 20) + 1, 3 << 20, (4 << 20) - 7, 4 << 20];
    for (i, &n) in sizes.iter().enumerate() {
        let k = format!("big{i}").into_bytes();
        let v = big(n, i as u8);
        db.put(&k, &v).unwrap();
        assert_eq!(db.get(&k).unwrap().unwrap().len(), n);
        expect.insert(k, v);
    }
    for i in 0..50 {
        let k = format!("empty{i:02}").into_bytes();
        db.put(&k, b"").unwrap();
        expect.insert(k, Vec::new());
        let k = format!("small{i:02}").into_bytes();
        db.put(&k, [i as u8; 10]).unwrap();
        expect.insert(k, vec![i as u8; 10]);
    }
    // A key of exactly the maximum length, with an empty and then a large value.
    let long_key = vec![b'z'; MAX_KEY_LEN];
    db.put(&long_key, b"").unwrap();
    assert_eq!(db.get(&long_key).unwrap().as_deref(), Some(&b""[..]));
    db.put(&long_key, big(1 << 20, 99)).unwrap();
    expect.insert(long_key.clone(), big(1 << 20, 99));
    // An empty value is not a missing value.
    assert!(db.contains("empty00").unwrap());
    assert_eq!(db.get("empty00").unwrap().map(|v| v.len()), Some(0));
    // Empty values in a batch, and a big value overwritten by an empty one.
    let mut b = WriteBatch::new();
    b.put("big0", b"")
        .put("batch-empty", b"")
        .put("batch-big", big(2 << 20, 7));
    db.write(b).unwrap();
    expect.insert(b"big0".to_vec(), Vec::new());
    expect.insert(b"batch-empty".to_vec(), Vec::new());
    expect.insert(b"batch-big".to_vec(), big(2 << 20, 7));
    db.delete("big1").unwrap();
    expect.remove(&b"big1"[..]);

    let check = |db: &Db, when: &str| {
        assert!(contents(db) == expect, "contents {when}");
        let rev: Vec<Vec<u8>> = db.iter().rev().map(|r| r.unwrap().0).collect();
        let want: Vec<Vec<u8>> = expect.keys().rev().cloned().collect();
        assert_eq!(rev, want, "reverse keys {when}");
        for (k, v) in &expect {
            let got = db
                .get(k)
                .unwrap()
                .unwrap_or_else(|| panic!("{k:?} missing {when}"));
            assert!(
                got.len() == v.len() && *got == v[..],
                "{k:?} differs {when}"
            );
        }
        assert_eq!(db.stats().total.keys, expect.len() as u64, "{when}");
    };
    check(&db, "before compaction");
    db.compact().unwrap();
    check(&db, "after compaction");
    db.flush().unwrap();
    drop(db);
    let db = opts()
        .background_compaction(false)
        .open(dir.path())
        .unwrap();
    assert!(db.open_damage().is_empty());
    check(&db, "after reopening");
    verify_clean(&db, "after reopening");
    db.compact().unwrap();
    check(&db, "after compacting the reopened store");
    verify_clean(&db, "after compacting the reopened store");
}

#[test]
fn oversized_keys_and_values_are_rejected_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new().shards(2).open(dir.path()).unwrap();
    db.put("keep", "1").unwrap();
    db.flush().unwrap();
    let before = db.stats().total;

    let key = vec![b'k'; MAX_KEY_LEN + 1];
    match db.put(&key, "v") {
        Err(Error::KeyTooLarge { len, max }) => assert_eq!((len, max), (65537, MAX_KEY_LEN)),
        other => panic!("put of an oversized key: {other:?}"),
    }
    match db.delete(&key) {
        Err(Error::KeyTooLarge { len, .. }) => assert_eq!(len, 65537),
        other => panic!("delete of an oversized key: {other:?}"),
    }
    let mut b = WriteBatch::new();
    b.put("batch-a", "1").put(&key, "v").put("batch-b", "2");
    assert!(matches!(db.write(b), Err(Error::KeyTooLarge { .. })));
    assert!(db.get(&key).unwrap().is_none());
    assert!(!db.contains(&key).unwrap());

    // A zeroed allocation is not touched until written, so this costs little memory.
    let value = vec![0u8; MAX_VALUE_LEN + 1];
    match db.put("big", &value) {
        Err(Error::ValueTooLarge { len, max }) => {
            assert_eq!((len, max), ((1 << 30) + 1, MAX_VALUE_LEN))
        }
        other => panic!("put of an oversized value: {other:?}"),
    }
    let mut b = WriteBatch::new();
    b.put("batch-c", "3").put("big", &value).delete("keep");
    drop(value);
    assert!(matches!(db.write(b), Err(Error::ValueTooLarge { .. })));

    let after = db.stats().total;
    assert_eq!(after.keys, before.keys);
    assert_eq!(after.disk_bytes, before.disk_bytes, "bytes were written");
    assert_eq!(after.user_bytes_written, before.user_bytes_written);
    let keys: Vec<Vec<u8>> = db.iter().map(|r| r.unwrap().0).collect();
    assert_eq!(keys, vec![b"keep".to_vec()]);
    drop(db);
    let db = Db::open(dir.path()).unwrap();
    let all: Vec<(Vec<u8>, Vec<u8>)> = db
        .iter()
        .map(|r| r.map(|(k, v)| (k, v.into_vec())).unwrap())
        .collect();
    assert_eq!(all, vec![(b"keep".to_vec(), b"1".to_vec())]);
    verify_clean(&db, "after reopening");
}

#[test]
fn max_size_storage_full_then_recovers_after_deletes_and_compaction() {
    const MAX: u64 = 256 << 10;
    let dir = tempfile::tempdir().unwrap();
    let opts = || {
        Options::new()
            .shards(2)
            .segment_size(8 << 10)
            .max_size(MAX)
            .background_compaction(false)
    };
    let db = opts().open(dir.path()).unwrap();
    let val = |i: usize| format!("{i:06}").repeat(34).into_bytes();
    let mut n = 0;
    let full_at = loop {
        assert!(n < 10_000, "max_size never reached");
        match db.put(format!("key{n:06}"), val(n)) {
            Ok(()) => n += 1,
            Err(Error::StorageFull(_)) => break n,
            Err(e) => panic!("unexpected error: {e}"),
        }
    };
    assert!(full_at > 100, "full after only {full_at} puts");
    // The failed put left nothing behind.
    assert!(db.get(format!("key{full_at:06}")).unwrap().is_none());
    let disk = db.stats().total.disk_bytes;
    // Segment headers and hint files written by sealing are not reserved against the
    // limit, so allow a little over it; but not much.
    assert!(disk <= MAX + MAX / 8, "{disk} bytes on disk, limit {MAX}");
    // Still full: puts, overwrites and batches of puts fail; reads work.
    assert!(matches!(
        db.put("another", "x".repeat(200)),
        Err(Error::StorageFull(_))
    ));
    assert!(matches!(
        db.put("key000000", val(0)),
        Err(Error::StorageFull(_))
    ));
    let mut b = WriteBatch::new();
    b.put("b1", "x".repeat(300)).put("b2", "y");
    assert!(matches!(db.write(b), Err(Error::StorageFull(_))));
    for i in 0..full_at {
        assert_eq!(
            db.get(format!("key{i:06}")).unwrap().unwrap().into_vec(),
            val(i)
        );
    }
    assert_eq!(db.iter().count(), full_at);
    assert!(db.get("another").unwrap().is_none());
    // Still full after reopening.
    drop(db);
    let db = opts().open(dir.path()).unwrap();
    assert!(matches!(
        db.put("another", "x".repeat(200)),
        Err(Error::StorageFull(_))
    ));
    assert_eq!(db.iter().count(), full_at);
    // Deletes go through even though the store is full: single ones, and batches.
    for i in (0..full_at).step_by(2) {
        db.delete(format!("key{i:06}")).unwrap();
    }
    let mut b = WriteBatch::new();
    for i in (1..full_at).step_by(2) {
        b.delete(format!("key{i:06}"));
    }
    db.write(b).unwrap();
    assert_eq!(db.iter().count(), 0);
    assert_eq!(db.stats().total.keys, 0);
    db.compact().unwrap();
    let after = db.stats().total;
    assert!(
        after.disk_bytes < MAX / 2,
        "compaction freed too little: {after:?}"
    );
    // Space is back: about as much can be written again.
    for i in 0..full_at / 2 {
        db.put(format!("new{i:06}"), val(i)).unwrap();
    }
    assert_eq!(db.iter().count(), full_at / 2);
    verify_clean(&db, "after refilling");
    drop(db);
    let db = opts().open(dir.path()).unwrap();
    assert_eq!(db.iter().count(), full_at / 2);
    assert_eq!(db.get("new000001").unwrap().unwrap().into_vec(), val(1));
    assert!(db.get("key000001").unwrap().is_none());
    verify_clean(&db, "after reopening");
}

/// An iterator keeps working after the last `Db` handle is dropped, and the store can
/// be opened again once the iterator is gone too.
#[test]
fn iterator_outlives_its_db() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || Options::new().shards(3).segment_size(4096);
    let db = opts().open(dir.path()).unwrap();
    for i in 0..500u32 {
        db.put(format!("k{i:03}"), format!("v{i}").repeat(20))
            .unwrap();
    }
    let mut fwd = db.iter();
    let mut rev = db.prefix("k4").rev();
    assert_eq!(fwd.next().unwrap().unwrap().0, b"k000");
    drop(db);
    let rest: Vec<Vec<u8>> = fwd.map(|r| r.unwrap().0).collect();
    assert_eq!(rest.len(), 499);
    assert_eq!(rest.last().unwrap(), b"k499");
    assert_eq!(rev.next().unwrap().unwrap().0, b"k499");
    assert_eq!(rev.count(), 99);
    let db = opts().open(dir.path()).unwrap();
    assert_eq!(db.iter().count(), 500);
    verify_clean(&db, "after reopening");
}

#[test]
fn second_open_is_locked_until_the_last_handle_closes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new().shards(2).open(dir.path()).unwrap();
    db.put("k", "v").unwrap();
    let assert_locked = |what: &str| match Db::open(dir.path()) {
        Err(Error::Locked(p)) => assert_eq!(p, dir.path(), "{what}"),
        Err(e) => panic!("{what}: expected Locked, got {e}"),
        Ok(_) => panic!("{what}: opened a store that is already open"),
    };
    assert_locked("second open");
    assert!(matches!(
        Options::new()
            .shards(2)
            .background_compaction(false)
            .open(dir.path()),
        Err(Error::Locked(_))
    ));
    let clone = db.clone();
    drop(db);
    assert_locked("while a clone is alive");
    assert_eq!(clone.get("k").unwrap().as_deref(), Some(&b"v"[..]));
    drop(clone);
    let db = Db::open(dir.path()).expect("open after the last handle closed");
    assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"v"[..]));
}

/// A child process being started shares the parent's open files, the store's lock
/// among them, from its fork to its exec: a store dropped and opened again meanwhile
/// finds the lock held for that moment. The open waits such a moment out.
#[test]
fn reopen_while_children_start() {
    let dir = tempfile::tempdir().unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while !stop.load(std::sync::atomic::Ordering::SeqCst) && std::time::Instant::now() < end
            {
                let _ = std::process::Command::new("true").status();
            }
        });
        for i in 0..300 {
            let db = Options::new()
                .shards(2)
                .background_compaction(false)
                .open(dir.path())
                .unwrap_or_else(|e| panic!("reopen {i}: {e}"));
            db.put("k", format!("{i}")).unwrap();
            drop(db);
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
    });
}

#[test]
fn shard_count_is_fixed_at_creation() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Options::new().shards(4).open(dir.path()).unwrap();
        for i in 0..100 {
            db.put(format!("k{i}"), format!("v{i}")).unwrap();
        }
    }
    for n in [1, 3, 5, 16] {
        match Options::new().shards(n).open(dir.path()) {
            Err(Error::InvalidArgument(msg)) => assert!(msg.contains('4'), "{msg}"),
            Err(e) => panic!("shards({n}): expected InvalidArgument, got {e}"),
            Ok(_) => panic!("shards({n}) opened a 4-shard store"),
        }
    }
    // The failed opens released the lock and changed nothing.
    let db = Db::open(dir.path()).unwrap();
    assert_eq!(db.stats().shards.len(), 4);
    assert_eq!(db.iter().count(), 100);
    drop(db);
    let db = Options::new().shards(4).open(dir.path()).unwrap();
    assert_eq!(db.get("k7").unwrap().as_deref(), Some(&b"v7"[..]));
    // Out-of-range counts are refused before anything is created.
    let fresh = tempfile::tempdir().unwrap();
    for n in [0, 4097] {
        assert!(matches!(
            Options::new().shards(n).open(fresh.path().join("x")),
            Err(Error::InvalidArgument(_))
        ));
    }
}

fn masked_crc(b: &[u8]) -> u32 {
    crc32c::crc32c(b).rotate_right(15).wrapping_add(0xa282_ead8)
}

/// A manifest with a correct checksum around the given fields.
fn manifest(version: u32, shards: u32) -> Vec<u8> {
    let mut b = b"CAIRNDB\0".to_vec();
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&shards.to_le_bytes());
    let crc = masked_crc(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

fn open_must_fail(dir: &Path, what: &str) -> Error {
    let res = std::panic::catch_unwind(|| Options::new().open(dir));
    match res {
        Err(_) => panic!("{what}: open panicked"),
        Ok(Ok(_)) => panic!("{what}: open succeeded"),
        Ok(Err(e)) => e,
    }
}

#[test]
fn garbage_manifest_is_an_error_not_a_panic() {
    let mut bad_crc = manifest(1, 4);
    *bad_crc.last_mut().unwrap() ^= 1;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("text", b"this is not a cairn store\n".to_vec()),
        ("magic only", b"CAIRNDB\0".to_vec()),
        ("magic and a few bytes", b"CAIRNDB\0\x01\x00".to_vec()),
        ("bad checksum", bad_crc),
        ("other version", manifest(2, 4)),
        ("zero shards", manifest(1, 0)),
        ("too many shards", manifest(1, 1 << 20)),
        ("random", (0..4096).map(|i| mix(i) as u8).collect()),
        ("long after magic", {
            let mut b = manifest(1, 4);
            b.extend_from_slice(&[0xff; 100]);
            b
        }),
    ];
    for (what, bytes) in &cases {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("CAIRN"), bytes).unwrap();
        let e = open_must_fail(dir.path(), what);
        assert!(
            matches!(e, Error::Format { .. } | Error::Corruption { .. }),
            "{what}: {e}"
        );
        // And the same garbage over a real store with data.
        let dir = tempfile::tempdir().unwrap();
        {
            let db = Options::new().shards(4).open(dir.path()).unwrap();
            db.put("k", "v").unwrap();
        }
        fs::write(dir.path().join("CAIRN"), bytes).unwrap();
        open_must_fail(dir.path(), what);
    }
    // CAIRN that is a directory.
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("CAIRN")).unwrap();
    open_must_fail(dir.path(), "CAIRN is a directory");
    // A non-empty directory that is not a store is not taken over.
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("notes.txt"), "mine").unwrap();
    let e = open_must_fail(dir.path(), "foreign directory");
    assert!(matches!(e, Error::Format { .. }), "{e}");
    assert_eq!(fs::read(dir.path().join("notes.txt")).unwrap(), b"mine");
}

#[test]
fn other_garbage_files_are_errors_not_panics() {
    let make = || {
        let dir = tempfile::tempdir().unwrap();
        let db = Options::new()
            .shards(2)
            .segment_size(4096)
            .open(dir.path())
            .unwrap();
        for i in 0..200 {
            db.put(format!("k{i:03}"), [i as u8; 100]).unwrap();
        }
        db.compact().unwrap();
        drop(db);
        dir
    };
    // A garbage SEQSTATE.
    let dir = make();
    fs::write(
        dir.path().join("SEQSTATE"),
        b"garbage garbage garbage garbage",
    )
    .unwrap();
    open_must_fail(dir.path(), "garbage SEQSTATE");
    // A garbage segment file (longer than a segment header) and a garbage hint file:
    // the store may refuse to open or open and report the damage, but must not panic,
    // and if it opens, it must hold all the data.
    let dir = make();
    fs::write(
        dir.path().join("shards/0000/0000009999.seg"),
        (0..500).map(|i| mix(i) as u8).collect::<Vec<u8>>(),
    )
    .unwrap();
    open_may_fail_keeping_data(dir.path(), "garbage segment");
    let dir = make();
    let shard0 = dir.path().join("shards/0000");
    let hint = fs::read_dir(&shard0)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "hint"))
        .expect("a hint file");
    fs::write(&hint, b"CAIRNHNT garbage").unwrap();
    open_may_fail_keeping_data(dir.path(), "garbage hint");
}

fn open_may_fail_keeping_data(dir: &Path, what: &str) {
    let res = std::panic::catch_unwind(|| Options::new().open(dir));
    match res {
        Err(_) => panic!("{what}: open panicked"),
        Ok(Err(_)) => {}
        Ok(Ok(db)) => {
            assert!(!db.open_damage().is_empty(), "{what}: damage not reported");
            for i in 0..200 {
                assert_eq!(
                    db.get(format!("k{i:03}")).unwrap().as_deref(),
                    Some(&[i as u8; 100][..]),
                    "{what}"
                );
            }
            assert_eq!(db.iter().count(), 200, "{what}");
        }
    }
}
