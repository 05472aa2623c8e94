//! SIGKILL tests of the prefix guarantee: after a crash the store holds a prefix of the
//! writes in the order they were made, across shards, whatever the sync policy; under
//! `SyncPolicy::Always` that prefix also holds every acknowledged write.
//!
//! A child process (this test binary again, running only `prefix_child`) has writer
//! threads that each write operations numbered 0, 1, 2, … on keys of their own: operation
//! `i` puts the value `i` on key `i % KEYS` (or, one time in five, on several keys in
//! one batch). Writes of one thread are ordered (each starts after the previous one
//! returned), so what survives of each thread must be its operations `0..=M` for some
//! `M`: every key holds the value of the last operation up to `M` that wrote it, where
//! `M` is the highest value found. Small write buffers and many shards make the shards'
//! buffers reach the files in every possible order, which is what the recovery's cut
//! must repair. The child prints `@@A <t> <i>` once operation `i` of thread `t`
//! returned.
//!
//! The prefix also has a lower bound: every write handed to the kernel before the kill
//! survives it (the page cache outlives the process). Every 16th operation a thread
//! hands every shard's buffer to the kernel (`Db::flush_shards` without a sync) and
//! prints `@@K <t> <i>`: its operations up to `i` must survive, whatever the policy.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cairn::{Db, Options, SyncPolicy, WriteBatch};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const DIR_VAR: &str = "CAIRN_PREFIX_DIR";
const MODE_VAR: &str = "CAIRN_PREFIX_MODE";
const KEYS: u64 = 300;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `SyncPolicy::Never`, one writer, tiny write buffers, no flushes.
    Never,
    /// `SyncPolicy::Never`, three writers, compaction running.
    NeverCompacting,
    /// `SyncPolicy::Always`, three writers sharing fsyncs.
    Always,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Never => "never",
            Mode::NeverCompacting => "never-compacting",
            Mode::Always => "always",
        }
    }

    fn parse(s: &str) -> Mode {
        [Mode::Never, Mode::NeverCompacting, Mode::Always]
            .into_iter()
            .find(|m| m.name() == s)
            .unwrap_or_else(|| panic!("unknown mode {s}"))
    }

    fn threads(self) -> u64 {
        if self == Mode::Never {
            1
        } else {
            3
        }
    }

    fn options(self) -> Options {
        let o = Options::new().shards(16).write_buffer(1 << 10);
        match self {
            Mode::Never => o.sync(SyncPolicy::Never).background_compaction(false),
            Mode::NeverCompacting => o
                .sync(SyncPolicy::Never)
                .segment_size(16 << 10)
                .compaction_threshold(0.2)
                .compaction_rate(None),
            Mode::Always => o.sync(SyncPolicy::Always).background_compaction(false),
        }
    }
}

fn key(t: u64, k: u64) -> String {
    format!("t{t}-{k:03}")
}

fn emit(line: &str) {
    let s = format!("{line}\n");
    let mut out = std::io::stdout().lock();
    out.write_all(s.as_bytes()).unwrap();
    out.flush().unwrap();
}

/// The value operation `i` writes: its number and some padding.
fn value(i: u64, pad: usize) -> Vec<u8> {
    let mut v = i.to_string().into_bytes();
    v.push(b':');
    v.resize(v.len() + pad, b'x');
    v
}

fn op_number(v: &[u8]) -> u64 {
    let s = std::str::from_utf8(v).expect("utf-8 value");
    s.split(':')
        .next()
        .unwrap()
        .parse()
        .expect("numbered value")
}

/// Keys operation `i` of a thread writes (`rng` seeded by `i`, so the parent can
/// replay it).
fn keys_of(i: u64) -> Vec<u64> {
    let mut rng = StdRng::seed_from_u64(i);
    if rng.random_range(0..5) == 0 {
        let mut ks: Vec<u64> = (0..rng.random_range(2..6))
            .map(|_| rng.random_range(0..KEYS))
            .collect();
        ks.push(i % KEYS);
        ks.sort_unstable();
        ks.dedup();
        ks
    } else {
        vec![i % KEYS]
    }
}

/// The state of a thread's keys after its operations `0..=m` (`None`: none of them).
fn expected(m: Option<u64>) -> BTreeMap<u64, u64> {
    let mut out = BTreeMap::new();
    if let Some(m) = m {
        for i in 0..=m {
            for k in keys_of(i) {
                out.insert(k, i);
            }
        }
    }
    out
}

fn writer(db: &Db, t: u64, start: u64) {
    let mut pad_rng = StdRng::seed_from_u64(t);
    for i in start.. {
        let ks = keys_of(i);
        let v = value(i, pad_rng.random_range(0..200));
        let res = if ks.len() == 1 {
            db.put(key(t, ks[0]), &v)
        } else {
            let mut b = WriteBatch::new();
            for k in &ks {
                b.put(key(t, *k), &v);
            }
            db.write(b)
        };
        if let Err(e) = res {
            emit(&format!("@@E {t} {i}: {e}"));
            std::process::exit(3);
        }
        emit(&format!("@@A {t} {i}"));
        if i % 16 == 15 {
            let all: Vec<usize> = (0..db.shard_count()).collect();
            if let Err(e) = db.flush_shards(&all, false) {
                emit(&format!("@@E {t} {i}: {e}"));
                std::process::exit(3);
            }
            emit(&format!("@@K {t} {i}"));
        }
    }
}

/// The highest operation of thread `t` found in `db`.
fn highest(db: &Db, t: u64) -> Option<u64> {
    (0..KEYS)
        .filter_map(|k| db.get(key(t, k)).unwrap().map(|v| op_number(&v)))
        .max()
}

/// The child process: does nothing unless started by `prefix_survives_sigkill`.
#[test]
#[ignore = "child process of the prefix_survives_sigkill tests, which run it with --ignored"]
fn prefix_child() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let mode = Mode::parse(&std::env::var(MODE_VAR).unwrap());
    emit("");
    let db = mode.options().open(&dir).unwrap();
    // Each thread continues after the highest operation that survived.
    let starts: Vec<u64> = (0..mode.threads())
        .map(|t| highest(&db, t).map_or(0, |m| m + 1))
        .collect();
    emit("@@R");
    std::thread::scope(|s| {
        for t in 0..mode.threads() {
            let (db, start) = (&db, starts[t as usize]);
            s.spawn(move || writer(db, t, start));
        }
    });
}

/// What the child reported per thread: the highest operation acknowledged, and the
/// highest one known handed to the kernel.
#[derive(Default)]
struct Reported {
    acked: BTreeMap<u64, u64>,
    handed: BTreeMap<u64, u64>,
}

/// Runs a child for `run_ms` after it opened the store, SIGKILLs it, and returns what it
/// reported.
fn run_child(dir: &Path, mode: Mode, run_ms: u64) -> Reported {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "prefix_child", "--nocapture", "--test-threads=1"])
        .arg("--ignored")
        .env(DIR_VAR, dir)
        .env(MODE_VAR, mode.name())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().unwrap();
    // What the child says on stderr (a panic), for the message if it never starts.
    let mut stderr = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        while let Ok(n) = r.read_until(b'\n', &mut buf) {
            if n == 0
                || buf.last() != Some(&b'\n')
                || tx.send(String::from_utf8_lossy(&buf).into()).is_err()
            {
                break;
            }
            buf.clear();
        }
    });
    let mut rep = Reported::default();
    let mut line = |l: &str| {
        let Some(at) = l.find("@@") else { return };
        let mut p = l[at..].split_whitespace();
        match p.next() {
            Some(tag @ ("@@A" | "@@K")) => {
                let t: u64 = p.next().unwrap().parse().unwrap();
                let i: u64 = p.next().unwrap().parse().unwrap();
                let to = if tag == "@@A" {
                    &mut rep.acked
                } else {
                    &mut rep.handed
                };
                to.insert(t, i);
            }
            Some("@@E") => panic!("child failed: {l}"),
            _ => {}
        }
    };
    let start = Instant::now();
    let mut deadline: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) || now - start > Duration::from_secs(60) {
            break;
        }
        match rx.recv_timeout(Duration::from_millis(10)) {
            Ok(l) => {
                if l.contains("@@R") {
                    deadline = Some(Instant::now() + Duration::from_millis(run_ms));
                }
                line(&l);
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => break,
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
    for l in rx.try_iter() {
        line(&l);
    }
    let errors = errors.join().unwrap();
    assert!(
        deadline.is_some(),
        "child never opened the store; its stderr: {errors}"
    );
    rep
}

fn campaign(mode: Mode, cycles: u32) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(0x5eed ^ cycles as u64);
    let (mut cut_seen, mut bound_checked) = (0, 0);
    for cycle in 0..cycles {
        let rep = run_child(dir.path(), mode, rng.random_range(30..250));
        let acked = &rep.acked;
        let db = mode.options().open(dir.path()).unwrap();
        for t in 0..mode.threads() {
            let m = highest(&db, t);
            let want = expected(m);
            for k in 0..KEYS {
                let got = db.get(key(t, k)).unwrap().map(|v| op_number(&v));
                assert_eq!(
                    got,
                    want.get(&k).copied(),
                    "{mode:?} cycle {cycle}, thread {t}, key {k}: the store is not a prefix \
                     of the writes (highest surviving operation {m:?})"
                );
            }
            if mode == Mode::Always {
                let a = acked.get(&t).copied();
                assert!(
                    m >= a,
                    "{mode:?} cycle {cycle}, thread {t}: acknowledged operation {a:?} lost \
                     (highest surviving {m:?})"
                );
            } else if m < acked.get(&t).copied() {
                cut_seen += 1;
            }
            // Every operation handed to the kernel before the kill survived it.
            if let Some(&h) = rep.handed.get(&t) {
                bound_checked += 1;
                assert!(
                    m >= Some(h),
                    "{mode:?} cycle {cycle}, thread {t}: operation {h} was handed to the \
                     kernel before the kill, the highest surviving is {m:?}"
                );
            }
        }
        assert!(
            db.verify().unwrap().is_clean(),
            "verify after cycle {cycle}"
        );
        drop(db);
    }
    eprintln!(
        "{mode:?}: {cycles} kills, {cut_seen} with acknowledged-but-unsynced writes lost, \
         {bound_checked} lower bounds checked"
    );
    assert!(bound_checked > 0, "no thread handed writes to the kernel");
}

#[test]
fn prefix_survives_sigkill_never() {
    campaign(Mode::Never, 20);
}

#[test]
fn prefix_survives_sigkill_never_compacting() {
    campaign(Mode::NeverCompacting, 15);
}

#[test]
fn prefix_survives_sigkill_always() {
    campaign(Mode::Always, 12);
}
