//! Optimistic transactions: the bank-transfer invariant under 8 threads, write skew,
//! phantoms, lost updates, a conflict that writes nothing, reads of a transaction's own
//! writes, and transfers that stay all-or-nothing through power cuts and SIGKILL.
//!
//! The bank: 100 accounts of 1000; each transfer is a transaction that reads two
//! balances, moves an amount no larger than the first between them, and writes a row of
//! its own to a log (`log/<thread>/<n>`: from, to, amount). Whatever happens, the total
//! is constant at every snapshot, and each account's balance is its opening balance
//! plus what the log rows say went in, less what went out: every committed transfer
//! counted exactly once, none half.
//!
//! `CAIRN_POWER_CUTS=N` sets the number of power cuts; `CAIRN_TX_KILLS=N` the number of
//! SIGKILL cycles.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cairn::{Db, Error, Options, Snapshot, SyncPolicy, Transaction};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod power_cut;
use power_cut::{each_seed, PowerCuts};

const ACCOUNTS: u32 = 100;
const OPENING: u64 = 1000;

fn acct(i: u32) -> String {
    format!("acct/{i:03}")
}

fn num(v: &[u8]) -> u64 {
    u64::from_le_bytes(v[..8].try_into().unwrap())
}

/// Opens the accounts if the store has none (one batch).
fn open_accounts(db: &Db) {
    if db.get(acct(0)).unwrap().is_some() {
        return;
    }
    let mut b = cairn::WriteBatch::new();
    for i in 0..ACCOUNTS {
        b.put(acct(i), OPENING.to_le_bytes());
    }
    db.write(b).unwrap();
}

/// One transfer of up to `max` from `from` to `to`, logged as `log/<t>/<n>`. Returns
/// the amount moved.
fn transfer(
    tx: &mut Transaction,
    from: u32,
    to: u32,
    max: u64,
    t: u64,
    n: u64,
) -> cairn::Result<u64> {
    let a = num(&tx.get(acct(from))?.unwrap());
    let b = num(&tx.get(acct(to))?.unwrap());
    let amount = max.min(a);
    tx.put(acct(from), (a - amount).to_le_bytes())?;
    tx.put(acct(to), (b + amount).to_le_bytes())?;
    let mut row = Vec::with_capacity(16);
    row.extend_from_slice(&from.to_le_bytes());
    row.extend_from_slice(&to.to_le_bytes());
    row.extend_from_slice(&amount.to_le_bytes());
    tx.put(format!("log/{t:08}/{n:08}"), row)?;
    Ok(amount)
}

/// Checks the bank at `snap`: the total, and each balance against the log. Returns the
/// number of log rows.
fn check_bank(snap: &Snapshot, ctx: &str) -> usize {
    let mut balances = BTreeMap::new();
    for kv in snap.prefix("acct/") {
        let (k, v) = kv.unwrap();
        balances.insert(k, num(&v));
    }
    assert_eq!(balances.len(), ACCOUNTS as usize, "{ctx}");
    let total: u64 = balances.values().sum();
    assert_eq!(
        total,
        OPENING * ACCOUNTS as u64,
        "{ctx}: total at {}",
        snap.seq()
    );
    let mut want: BTreeMap<Vec<u8>, i64> = (0..ACCOUNTS)
        .map(|i| (acct(i).into_bytes(), OPENING as i64))
        .collect();
    let mut rows = 0;
    for kv in snap.prefix("log/") {
        let (_, v) = kv.unwrap();
        let from = u32::from_le_bytes(v[0..4].try_into().unwrap());
        let to = u32::from_le_bytes(v[4..8].try_into().unwrap());
        let amount = num(&v[8..16]) as i64;
        *want.get_mut(acct(from).as_bytes()).unwrap() -= amount;
        *want.get_mut(acct(to).as_bytes()).unwrap() += amount;
        rows += 1;
    }
    for (k, b) in &balances {
        assert_eq!(
            *b as i64,
            want[k],
            "{ctx}: {} against the log",
            String::from_utf8_lossy(k)
        );
    }
    rows
}

#[test]
fn bank_transfers_from_eight_threads_keep_the_total_and_count_each_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new()
        .shards(8)
        .segment_size(256 << 10)
        .compaction_rate(None)
        .open(dir.path())
        .unwrap();
    open_accounts(&db);
    let stop = AtomicBool::new(false);
    let committed = AtomicU64::new(0);
    let conflicts = AtomicU64::new(0);
    let per_thread = 1500u64;
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let (db, committed, conflicts) = (&db, &committed, &conflicts);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(t);
                for n in 0..per_thread {
                    let from = rng.random_range(0..ACCOUNTS);
                    let to = (from + rng.random_range(1..ACCOUNTS)) % ACCOUNTS;
                    let max = rng.random_range(1..200);
                    let mut tries = 0;
                    db.transact(|tx| {
                        tries += 1;
                        transfer(tx, from, to, max, t, n)
                    })
                    .unwrap();
                    committed.fetch_add(1, Ordering::Relaxed);
                    conflicts.fetch_add(tries - 1, Ordering::Relaxed);
                }
            });
        }
        // A checker reads the bank at snapshots while the transfers go on.
        let (db, stop, committed) = (&db, &stop, &committed);
        s.spawn(move || {
            let mut checks = 0;
            while !stop.load(Ordering::Relaxed) || checks == 0 {
                check_bank(&db.snapshot(), "while transferring");
                checks += 1;
            }
        });
        s.spawn(move || {
            while committed.load(Ordering::Relaxed) < 8 * per_thread {
                std::thread::sleep(Duration::from_millis(5));
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    let rows = check_bank(&db.snapshot(), "at the end");
    assert_eq!(rows as u64, 8 * per_thread);
    eprintln!(
        "{} transfers committed, {} conflicts retried",
        committed.load(Ordering::Relaxed),
        conflicts.load(Ordering::Relaxed)
    );
    // Nothing is pinned once every transaction is done.
    db.compact().unwrap();
    let st = db.stats().snapshots;
    assert_eq!((st.live, st.versions, st.pinned_bytes), (0, 0, 0), "{st:?}");
    drop(db);
    let db = Db::open(dir.path()).unwrap();
    check_bank(&db.snapshot(), "reopened");
}

#[test]
fn write_skew_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path()).unwrap();
    // Two doctors on call; each may go off call if the other is still on.
    db.put("alice", "on").unwrap();
    db.put("bob", "on").unwrap();
    let mut t1 = db.transaction();
    let mut t2 = db.transaction();
    for (tx, me) in [(&mut t1, "alice"), (&mut t2, "bob")] {
        let on = ["alice", "bob"]
            .iter()
            .filter(|d| tx.get(d).unwrap().as_deref() == Some(&b"on"[..]))
            .count();
        assert_eq!(on, 2);
        tx.put(me, "off").unwrap();
    }
    let r1 = t1.commit();
    let r2 = t2.commit();
    assert!(r1.is_ok(), "{r1:?}");
    assert!(matches!(r2, Err(Error::Conflict)), "{r2:?}");
    assert_eq!(db.get("alice").unwrap().as_deref(), Some(&b"off"[..]));
    assert_eq!(db.get("bob").unwrap().as_deref(), Some(&b"on"[..]));
}

#[test]
fn write_skew_from_threads_commits_exactly_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new().shards(4).open(dir.path()).unwrap();
    for round in 0..200u32 {
        let (x, y) = (format!("x{round}"), format!("y{round}"));
        db.put(&x, "1").unwrap();
        db.put(&y, "1").unwrap();
        let barrier = std::sync::Barrier::new(2);
        let oks: Vec<bool> = std::thread::scope(|s| {
            let hs: Vec<_> = [&x, &y]
                .into_iter()
                .map(|mine| {
                    let (db, barrier, x, y) = (&db, &barrier, &x, &y);
                    s.spawn(move || {
                        let mut tx = db.transaction();
                        let sum: u32 = [x, y]
                            .iter()
                            .map(|k| tx.get(k).unwrap().unwrap()[0] as u32 - b'0' as u32)
                            .sum();
                        assert_eq!(sum, 2);
                        tx.put(mine, "0").unwrap();
                        barrier.wait();
                        match tx.commit() {
                            Ok(()) => true,
                            Err(Error::Conflict) => false,
                            Err(e) => panic!("{e}"),
                        }
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(oks.iter().filter(|&&ok| ok).count(), 1, "round {round}");
        let left: usize = [&x, &y]
            .iter()
            .filter(|k| db.get(k).unwrap().as_deref() == Some(&b"1"[..]))
            .count();
        assert_eq!(left, 1, "round {round}: the invariant x + y >= 1 broke");
    }
}

#[test]
fn a_scanned_range_conflicts_with_an_insert_into_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new().shards(4).open(dir.path()).unwrap();
    for k in ["r/a", "r/c", "s/a"] {
        db.put(k, "1").unwrap();
    }
    // Phantom: a transaction counts the rows of r/ and records the count; an insert
    // into r/ before its commit makes the count wrong.
    let count_rows = |db: &Db| {
        let mut tx = db.transaction();
        let n = tx.prefix("r/").count();
        tx.put("count", n.to_string()).unwrap();
        tx
    };
    let tx = count_rows(&db);
    db.put("r/b", "1").unwrap();
    assert!(matches!(tx.commit(), Err(Error::Conflict)));
    assert!(db.get("count").unwrap().is_none());
    // A delete inside the range too, scanned backwards over part of a range.
    let mut tx = db.transaction();
    let last: Vec<_> = tx
        .range("r/".."r/z")
        .rev()
        .take(1)
        .map(|kv| kv.unwrap().0)
        .collect();
    assert_eq!(last, vec![b"r/c".to_vec()]);
    tx.put("last", &last[0]).unwrap();
    db.delete("r/a").unwrap();
    assert!(matches!(tx.commit(), Err(Error::Conflict)));
    // Writes outside the range, or to keys it did not read, do not conflict.
    let tx = count_rows(&db);
    db.put("s/b", "1").unwrap();
    db.put("q", "1").unwrap();
    tx.commit().unwrap();
    assert_eq!(db.get("count").unwrap().as_deref(), Some(&b"2"[..]));
}

#[test]
fn lost_updates_are_refused_and_a_conflict_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new().shards(4).open(dir.path()).unwrap();
    db.put("n", 0u64.to_le_bytes()).unwrap();
    let mut a = db.transaction();
    let mut b = db.transaction();
    for tx in [&mut a, &mut b] {
        let n = num(&tx.get("n").unwrap().unwrap());
        tx.put("n", (n + 1).to_le_bytes()).unwrap();
        // Other keys, in other shards, that must not appear if it fails.
        for i in 0..20 {
            tx.put(format!("side/{i}"), "x").unwrap();
        }
        tx.delete("gone").unwrap();
    }
    db.put("gone", "still here").unwrap();
    let before: Vec<_> = db.iter().map(|kv| kv.unwrap()).collect();
    let seq = db.snapshot().seq();
    // `a` read nothing that changed; `b` read "n", which `a` then wrote.
    a.commit().unwrap();
    let after_a: Vec<_> = db.iter().map(|kv| kv.unwrap()).collect();
    assert_ne!(before, after_a);
    let seq_a = db.snapshot().seq();
    assert_eq!(seq_a, seq + 1);
    assert!(matches!(b.commit(), Err(Error::Conflict)));
    let after_b: Vec<_> = db.iter().map(|kv| kv.unwrap()).collect();
    assert_eq!(after_a, after_b);
    assert_eq!(db.snapshot().seq(), seq_a, "a conflict takes no number");
    assert_eq!(num(&db.get("n").unwrap().unwrap()), 1);
    // Blind writes (nothing read) never conflict; a read-only transaction commits.
    let mut blind = db.transaction();
    blind.put("n", 7u64.to_le_bytes()).unwrap();
    db.put("n", 5u64.to_le_bytes()).unwrap();
    blind.commit().unwrap();
    let mut ro = db.transaction();
    assert_eq!(num(&ro.get("n").unwrap().unwrap()), 7);
    db.put("n", 9u64.to_le_bytes()).unwrap();
    ro.commit().unwrap();
    // put_new inside a transaction: checked at the commit.
    let mut tx = db.transaction();
    tx.put_new("fresh", "1").unwrap();
    db.put("fresh", "0").unwrap();
    assert!(matches!(tx.commit(), Err(Error::KeyExists { .. })));
    assert_eq!(db.get("fresh").unwrap().as_deref(), Some(&b"0"[..]));
    // The requirement stays when a later write of the key replaces the put_new, and
    // holds only for its key.
    for later in ["put", "delete"] {
        let mut tx = db.transaction();
        tx.put_new("fresh", "2").unwrap();
        tx.put("other", "3").unwrap();
        match later {
            "put" => tx.put("fresh", "4").unwrap(),
            _ => tx.delete("fresh").unwrap(),
        }
        assert!(
            matches!(tx.commit(), Err(Error::KeyExists { .. })),
            "{later}"
        );
        assert_eq!(db.get("fresh").unwrap().as_deref(), Some(&b"0"[..]));
        assert!(db.get("other").unwrap().is_none());
    }
    let mut tx = db.transaction();
    tx.put_new("newer", "5").unwrap();
    tx.put("newer", "6").unwrap();
    tx.put_new("newest", "7").unwrap();
    tx.commit().unwrap();
    assert_eq!(db.get("newer").unwrap().as_deref(), Some(&b"6"[..]));
    assert_eq!(db.get("newest").unwrap().as_deref(), Some(&b"7"[..]));
}

#[test]
fn a_keyspace_transaction_writes_only_its_keyspace() {
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new().shards(4).open(dir.path()).unwrap();
    let ks = db.keyspace(3);
    db.put("k", "in keyspace 0").unwrap();
    let mut tx = ks.transaction();
    assert!(tx.get("k").unwrap().is_none());
    tx.put("k", "in keyspace 3").unwrap();
    tx.put_new("n", "new").unwrap();
    tx.delete("gone").unwrap();
    assert_eq!(tx.get("k").unwrap().as_deref(), Some(&b"in keyspace 3"[..]));
    let seen: Vec<Vec<u8>> = tx.iter().map(|kv| kv.unwrap().0).collect();
    assert_eq!(seen, vec![b"k".to_vec(), b"n".to_vec()]);
    tx.commit().unwrap();
    assert_eq!(db.get("k").unwrap().as_deref(), Some(&b"in keyspace 0"[..]));
    assert_eq!(ks.get("k").unwrap().as_deref(), Some(&b"in keyspace 3"[..]));
    assert_eq!(ks.get("n").unwrap().as_deref(), Some(&b"new"[..]));
    assert!(db.get("n").unwrap().is_none());
    // A write in keyspace 0 does not conflict with a keyspace-3 read of the same key.
    let mut tx = ks.transaction();
    let _ = tx.get("k").unwrap();
    tx.put("k", "again").unwrap();
    db.put("k", "zero again").unwrap();
    tx.commit().unwrap();
    assert_eq!(ks.get("k").unwrap().as_deref(), Some(&b"again"[..]));
}

#[test]
fn a_transaction_reads_its_own_writes_over_its_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new().shards(3).open(dir.path()).unwrap();
    let ks = db.keyspace(5);
    for k in ["a", "c", "e", "g"] {
        ks.put(k, "old").unwrap();
    }
    let mut tx = ks.transaction();
    tx.put("b", "new").unwrap();
    tx.delete("c").unwrap();
    tx.put("e", "new").unwrap();
    tx.put("h", "new").unwrap();
    ks.put("d", "later").unwrap(); // after its snapshot: not seen
    assert_eq!(tx.get("e").unwrap().as_deref(), Some(&b"new"[..]));
    assert!(tx.get("c").unwrap().is_none());
    assert!(!tx.contains("d").unwrap());
    let fwd: Vec<(Vec<u8>, Vec<u8>)> = tx
        .iter()
        .map(|kv| kv.map(|(k, v)| (k, v.to_vec())).unwrap())
        .collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = [
        ("a", "old"),
        ("b", "new"),
        ("e", "new"),
        ("g", "old"),
        ("h", "new"),
    ]
    .iter()
    .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
    .collect();
    assert_eq!(fwd, want);
    let back: Vec<Vec<u8>> = tx.iter().rev().map(|kv| kv.unwrap().0).collect();
    let mut rev: Vec<Vec<u8>> = want.iter().map(|(k, _)| k.clone()).collect();
    rev.reverse();
    assert_eq!(back, rev);
    // From both ends at once.
    let mut it = tx.range("b".."h");
    assert_eq!(it.next().unwrap().unwrap().0, b"b");
    assert_eq!(it.next_back().unwrap().unwrap().0, b"g");
    assert_eq!(it.next_back().unwrap().unwrap().0, b"e");
    assert!(it.next().is_none());
    assert!(it.next_back().is_none());
    // It scanned everything, and "d" was inserted: the commit conflicts.
    assert!(matches!(tx.commit(), Err(Error::Conflict)));
    assert!(ks.get("b").unwrap().is_none());
    // The same without the insert commits, in its keyspace.
    let mut tx = ks.transaction();
    assert_eq!(tx.prefix("").count(), 5);
    tx.put("z", "1").unwrap();
    tx.commit().unwrap();
    assert_eq!(ks.get("z").unwrap().as_deref(), Some(&b"1"[..]));
    assert!(db.get("z").unwrap().is_none());
}

// ---- Power cuts ----

fn power_run(seed: u64) {
    let mut pc = PowerCuts::new(seed, &[0, 64 << 20]);
    for cycle in 0..3u64 {
        let ctx = pc.context(cycle);
        let db = pc.open();
        open_accounts(&db);
        db.flush().unwrap();
        let run = cycle + 1;
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let (db, stop) = (&db, &stop);
                s.spawn(move || {
                    let mut r = StdRng::seed_from_u64(seed ^ t);
                    for n in 0.. {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let from = r.random_range(0..ACCOUNTS);
                        let to = (from + r.random_range(1..ACCOUNTS)) % ACCOUNTS;
                        let res = db.transact(|tx| transfer(tx, from, to, 50, run * 10 + t, n));
                        if res.is_err() {
                            break;
                        }
                    }
                });
            }
            pc.cut_soon(&stop);
        });
        drop(db);
        let ctx = format!("{ctx}: {}", pc.restart());
        let db = pc.open();
        check_bank(&db.snapshot(), &ctx);
        db.close().unwrap();
    }
}

#[test]
fn transfers_stay_whole_through_power_cuts() {
    each_seed(7_000, 12, power_run);
}

// ---- SIGKILL ----

const KILL_DIR: &str = "CAIRN_TX_KILL_DIR";

/// The child of `transfers_stay_whole_through_sigkill`: transfers from four threads
/// until it is killed.
#[test]
#[ignore]
fn tx_kill_child() {
    let Ok(dir) = std::env::var(KILL_DIR) else {
        return;
    };
    let always = std::env::var("CAIRN_TX_KILL_ALWAYS").is_ok();
    let db = Options::new()
        .shards(8)
        .segment_size(64 << 10)
        .compaction_threshold(0.3)
        .sync(if always {
            SyncPolicy::Always
        } else {
            SyncPolicy::Never
        })
        .open(&dir)
        .unwrap();
    open_accounts(&db);
    println!("ready");
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        % 1_000_000_000;
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let db = &db;
            s.spawn(move || {
                let mut r = StdRng::seed_from_u64(base ^ t);
                for n in 0.. {
                    let from = r.random_range(0..ACCOUNTS);
                    let to = (from + r.random_range(1..ACCOUNTS)) % ACCOUNTS;
                    db.transact(|tx| transfer(tx, from, to, 50, base * 10 + t, n))
                        .unwrap();
                }
            });
        }
    });
}

fn kill_cycle(dir: &Path, always: bool, run_ms: u64) {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        "tx_kill_child",
        "--nocapture",
        "--ignored",
        "--test-threads=1",
    ])
    .env(KILL_DIR, dir)
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    if always {
        cmd.env("CAIRN_TX_KILL_ALWAYS", "1");
    }
    let mut child = cmd.spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    // Wait for "ready", then let it run.
    let start = Instant::now();
    let mut buf = [0u8; 64];
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("ready")
        && start.elapsed() < Duration::from_secs(30)
    {
        use std::io::Read;
        let n = out.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&buf[..n]);
    }
    std::thread::sleep(Duration::from_millis(run_ms));
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn transfers_stay_whole_through_sigkill() {
    let cycles: u64 = std::env::var("CAIRN_TX_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let mut rows = 0;
    for cycle in 0..cycles {
        let always = cycle % 2 == 0;
        kill_cycle(tmp.path(), always, rng.random_range(50..300));
        let db = Db::open(tmp.path()).unwrap();
        let n = check_bank(&db.snapshot(), &format!("cycle {cycle} always={always}"));
        assert!(n >= rows, "cycle {cycle}: {n} log rows after {rows}");
        rows = n;
        assert!(db.verify().unwrap().is_clean());
        db.close().unwrap();
    }
    assert!(rows > 0, "no transfer survived any kill");
}
