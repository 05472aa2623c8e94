//! Read-only opens (`Options::read_only`) and `Db::catch_up`: a reader that follows a
//! writer — in another process (this test binary started again as the writer), through
//! compactions, reclamation, segment drops, a SIGKILL and the writer's reopen — and, in
//! one process, against a model of the writer's acknowledged writes; what a read-only
//! handle refuses, and that it writes nothing.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn::{Db, Error, Options, WriteBatch};
use proptest::prelude::*;

const DIR_VAR: &str = "CAIRN_RO_DIR";
const MS_VAR: &str = "CAIRN_RO_MS";
const RATE_VAR: &str = "CAIRN_RO_RATE";

/// The keys one batch of the follow writer sets to its counter (8 of them: in a store
/// of 8 shards they fall in several).
const COUNTERS: usize = 8;

fn writer_options() -> Options {
    Options::new()
        .shards(8)
        .segment_size(64 << 10)
        .write_buffer(8 << 10)
        .compaction_threshold(0.3)
}

/// The value the follow writer gives `key` at counter `n`.
fn val(key: &str, n: u64) -> String {
    format!("{key}:{n}")
}

/// The counter of a value the follow writer wrote for `key`; panics on any other.
fn counter_of(key: &[u8], v: &[u8]) -> u64 {
    let s = std::str::from_utf8(v).expect("utf-8 value");
    let (k, n) = s.rsplit_once(':').expect("key:n value");
    assert_eq!(k.as_bytes(), key, "value {s} read for another key");
    n.parse().expect("a counter")
}

/// The child process: a writer that does nothing unless a test started it.
#[test]
#[ignore = "child process of the read-only tests, which run it with --ignored"]
fn child_writer() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let ms: u64 = std::env::var(MS_VAR).unwrap().parse().unwrap();
    match std::env::var(RATE_VAR) {
        Ok(rate) => rate_writer(Path::new(&dir), ms, rate.parse().unwrap()),
        Err(_) => follow_writer(Path::new(&dir), ms),
    }
}

/// Batches of the counter to every `c*` key with puts and deletes of filler keys,
/// flushes, compactions and reclamations, for `ms` milliseconds; prints the last
/// counter.
fn follow_writer(dir: &Path, ms: u64) {
    let db = writer_options().open(dir).unwrap();
    // A writer reopened after a kill goes on from what its recovery kept.
    let mut c = db.get("c0").unwrap().map_or(0, |v| counter_of(b"c0", &v)) + 1;
    println!("@@OPEN {c}");
    let end = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < end {
        let mut b = WriteBatch::new();
        for j in 0..COUNTERS {
            let k = format!("c{j}");
            b.put(&k, val(&k, c));
        }
        let f = format!("f{}", c % 300);
        b.put(&f, val(&f, c));
        b.delete(format!("f{}", (c + 150) % 300));
        db.write(b).unwrap();
        let s = format!("s{}", c % 40);
        db.put(
            &s,
            format!("{}{}", val(&s, c), "x".repeat((c % 200) as usize)),
        )
        .unwrap();
        if c.is_multiple_of(97) {
            db.delete(&s).unwrap();
        }
        match c % 3000 {
            0 => db.compact().unwrap(),
            1500 => {
                db.reclaim().unwrap();
            }
            n if n.is_multiple_of(400) => db.flush().unwrap(),
            _ => {}
        }
        c += 1;
    }
    db.close().unwrap();
    println!("@@LAST {}", c - 1);
}

/// Small puts at `rate` a second (0: as fast as it can) for `ms` milliseconds; prints
/// how many.
fn rate_writer(dir: &Path, ms: u64, rate: u64) {
    let db = Options::new().shards(16).open(dir).unwrap();
    println!("@@OPEN 0");
    let start = Instant::now();
    let end = start + Duration::from_millis(ms);
    let mut n: u64 = 0;
    while Instant::now() < end {
        for _ in 0..1000 {
            db.put(n.to_be_bytes(), n.to_le_bytes().repeat(2)).unwrap();
            n += 1;
        }
        if rate > 0 {
            let due = start + Duration::from_secs_f64(n as f64 / rate as f64);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    db.close().unwrap();
    println!("@@LAST {n} {secs}");
}

/// A writer child and the lines it prints.
struct Writer {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Writer {
    fn start(dir: &Path, ms: u64, rate: Option<u64>) -> Writer {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "child_writer", "--nocapture", "--ignored"])
            .env(DIR_VAR, dir)
            .env(MS_VAR, ms.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(r) = rate {
            cmd.env(RATE_VAR, r.to_string());
        }
        let mut child = cmd.spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Some(l) = line.strip_prefix("@@") {
                    if tx.send(l.to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        Writer { child, lines: rx }
    }

    /// The next line starting with `what`, within a minute.
    fn expect(&self, what: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).expect("the writer's report");
            if let Some(rest) = line.strip_prefix(what) {
                return rest.trim().to_string();
            }
        }
    }
}

/// What one reader thread saw.
#[derive(Default, Debug)]
struct Seen {
    catch_ups: u64,
    rebuilt: u64,
    retries: u64,
    /// The counter of the `c*` keys at each catch-up, in order.
    counters: Vec<u64>,
}

/// Checks a reader's whole view: every `c*` key holds the same counter (a batch is
/// seen whole or not at all), every value is one the writer wrote for its key, and no
/// key's counter is below one an earlier catch-up saw. Returns the counter.
fn check_view(db: &Db, newest: &mut HashMap<Vec<u8>, u64>) -> u64 {
    let mut batch = None;
    for kv in db.iter() {
        let (k, v) = kv.expect("a scan of the view");
        let n = counter_of(
            &k,
            &v[..v.iter().position(|&b| b == b'x').unwrap_or(v.len())],
        );
        if k.starts_with(b"c") {
            match batch {
                None => batch = Some(n),
                Some(b) => assert_eq!(b, n, "part of a batch is visible: {k:?}"),
            }
        }
        let seen = newest.entry(k.clone()).or_insert(0);
        assert!(n >= *seen, "{k:?} went back from {} to {n}", *seen);
        *seen = n;
        // A point read agrees with the scan.
        assert_eq!(db.get(&k).unwrap().as_deref(), Some(&v[..]));
    }
    let c = batch.unwrap_or(0);
    for j in 0..COUNTERS {
        let k = format!("c{j}");
        let got = db.get(&k).unwrap().map(|v| counter_of(k.as_bytes(), &v));
        assert_eq!(got.unwrap_or(0), c, "{k}");
    }
    c
}

/// Follows the store in `dir` until `stop`, catching up every 2 ms.
fn reader(dir: PathBuf, stop: Arc<AtomicBool>, seen: Arc<Mutex<Seen>>) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let db = loop {
        match Options::new().read_only().open(&dir) {
            Ok(db) => break db,
            Err(e) => {
                assert!(Instant::now() < deadline, "no read-only open: {e}");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    };
    assert!(db.is_read_only());
    let mut newest = HashMap::new();
    let mut last = check_view(&db, &mut newest);
    while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
        let up = db.catch_up().expect("a catch-up");
        let c = check_view(&db, &mut newest);
        assert!(c >= last, "the counter went back from {last} to {c}");
        last = c;
        let mut s = seen.lock().unwrap();
        s.catch_ups += 1;
        s.rebuilt += up.rebuilt as u64;
        s.retries += up.retries as u64;
        s.counters.push(c);
        drop(s);
        std::thread::sleep(Duration::from_millis(2));
    }
    // The last look: everything the writer wrote before it closed.
    db.catch_up().unwrap();
    let c = check_view(&db, &mut newest);
    seen.lock().unwrap().counters.push(c);
    db.close().unwrap();
}

/// Two readers in this process follow a writer process through compactions,
/// reclamations and segment drops; the writer is killed (SIGKILL), the readers go on,
/// a second writer reopens the store (recovering it) and goes on writing, and the
/// readers follow it to its last write.
#[test]
fn readers_follow_a_writer_process_through_compaction_and_a_kill() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let mut first = Writer::start(&dir, 60_000, None);
    first.expect("OPEN");
    let stop = Arc::new(AtomicBool::new(false));
    let seen: Vec<Arc<Mutex<Seen>>> = (0..2).map(|_| Arc::default()).collect();
    let readers: Vec<_> = seen
        .iter()
        .map(|s| {
            let (d, st, s) = (dir.clone(), stop.clone(), s.clone());
            std::thread::spawn(move || reader(d, st, s))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(2500));
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let at_kill: Vec<u64> = seen
        .iter()
        .map(|s| s.lock().unwrap().counters.last().copied().unwrap_or(0))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let second = Writer::start(&dir, 1500, None);
    let from: u64 = second.expect("OPEN").parse().unwrap();
    let last: u64 = second.expect("LAST").parse().unwrap();
    let mut second = second;
    assert!(second.child.wait().unwrap().success());
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.join().expect("a reader failed");
    }
    for (s, killed) in seen.iter().zip(at_kill) {
        let s = s.lock().unwrap();
        eprintln!(
            "reader: {} catch-ups, {} rebuilt, {} retries; counter {killed} at the kill, \
             the reopened writer went on from {from} to {last}",
            s.catch_ups, s.rebuilt, s.retries
        );
        assert!(s.catch_ups > 50, "too few catch-ups: {}", s.catch_ups);
        assert!(
            killed > 100,
            "the reader saw too little of the first writer"
        );
        assert!(
            from > killed,
            "the reopened writer lost what the reader saw"
        );
        assert_eq!(s.counters.last().copied(), Some(last), "the last write");
        // Seen while the first writer ran, and again after the reopen.
        let distinct = s.counters.windows(2).filter(|w| w[0] != w[1]).count();
        assert!(distinct > 20, "the view moved only {distinct} times");
    }
}

/// Reads the files of `dir` — bytes, lengths and modification times — to compare
/// before and after a read-only open.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, i64, i64)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let meta = std::fs::metadata(&d).unwrap();
        out.insert(d.clone(), (Vec::new(), meta.mtime(), meta.mtime_nsec()));
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::metadata(&p).unwrap();
            if m.is_dir() {
                todo.push(p);
            } else {
                out.insert(
                    p.clone(),
                    (std::fs::read(&p).unwrap(), m.mtime(), m.mtime_nsec()),
                );
            }
        }
    }
    out
}

/// The newest segment file of shard 0.
fn newest_segment(dir: &Path) -> PathBuf {
    let mut segs: Vec<PathBuf> = std::fs::read_dir(dir.join("shards/0000"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    segs.sort();
    segs.pop().unwrap()
}

/// A store left by a writer that stopped without closing (its active segments
/// unhinted, one with a torn tail, a `.tmp` file beside them) is read, caught up and
/// verified read-only without a byte, a length or a modification time changing.
#[test]
fn a_read_only_open_of_a_torn_store_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let db = Options::new().shards(4).open(dir).unwrap();
    for i in 0..500u32 {
        db.put(format!("k{i}"), format!("v{i}")).unwrap();
    }
    db.flush().unwrap();
    // Stopped without a close (as a killed writer stops): no hints, nothing cut back.
    std::mem::forget(db);
    let seg = newest_segment(dir);
    let mut torn = std::fs::read(&seg).unwrap();
    torn.extend_from_slice(&[0x5a; 37]);
    std::fs::write(&seg, &torn).unwrap();
    std::fs::write(dir.join("shards/0001/0000000009.hint.tmp"), b"half a hint").unwrap();
    let before = snapshot(dir);
    std::thread::sleep(Duration::from_millis(20));
    let ro = Options::new().read_only().open(dir).unwrap();
    for i in 0..500u32 {
        let v = ro.get(format!("k{i}")).unwrap();
        assert_eq!(v.as_deref(), Some(format!("v{i}").as_bytes()));
    }
    assert_eq!(ro.iter().count(), 500);
    assert!(ro.catch_up().unwrap().records == 0);
    assert!(ro.verify().unwrap().is_clean());
    let _ = ro.stats();
    ro.close().unwrap();
    assert_eq!(
        snapshot(dir),
        before,
        "a read-only open changed the directory"
    );
}

/// Every write is refused with `OpenedReadOnly`, and changes nothing.
#[test]
fn a_read_only_store_refuses_every_write() {
    let tmp = tempfile::tempdir().unwrap();
    let w = Db::open(tmp.path()).unwrap();
    w.put("k", "v").unwrap();
    w.flush().unwrap();
    let ro = Options::new().read_only().open(tmp.path()).unwrap();
    let refused = |r: cairn::Result<()>, what: &str| match r {
        Err(Error::OpenedReadOnly(p)) => assert_eq!(p, tmp.path(), "{what}"),
        other => panic!("{what}: {other:?}"),
    };
    refused(ro.put("k", "w"), "put");
    refused(ro.delete("k"), "delete");
    refused(ro.delete("absent"), "delete of an absent key");
    let mut b = WriteBatch::new();
    b.put("a", "1");
    refused(ro.write(b), "write");
    refused(ro.flush(), "flush");
    refused(ro.sync_written(), "sync_written");
    refused(ro.flush_shards(&[0], true), "flush_shards");
    refused(ro.compact(), "compact");
    refused(ro.reclaim().map(|_| ()), "reclaim");
    refused(ro.keyspace(5).put("k", "v"), "a keyspace's put");
    let msg = ro.put("k", "w").unwrap_err().to_string();
    assert!(msg.contains("read-only"), "{msg}");
    assert_eq!(ro.get("k").unwrap().as_deref(), Some(&b"v"[..]));
    ro.close().unwrap();
    assert_eq!(w.get("k").unwrap().as_deref(), Some(&b"v"[..]));
    // A writer's catch-up has nothing to do.
    assert_eq!(w.catch_up().unwrap().records, 0);
    assert!(!w.is_read_only());
}

/// A read-only open of a store that is not there fails and creates nothing.
#[test]
fn a_read_only_open_creates_no_store() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nothing");
    assert!(Options::new().read_only().open(&missing).is_err());
    assert!(!missing.exists());
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(Options::new().read_only().open(&empty).is_err());
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
}

/// One write of the model test.
#[derive(Clone, Debug)]
enum Op {
    Put(u8, u16),
    Delete(u8),
    Batch(Vec<(u8, Option<u16>)>),
    Flush,
    Compact,
    Reclaim,
    CatchUp,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u8..24, any::<u16>()).prop_map(|(k, v)| Op::Put(k, v)),
        3 => (0u8..24).prop_map(Op::Delete),
        3 => prop::collection::vec((0u8..24, prop::option::of(any::<u16>())), 1..6)
            .prop_map(Op::Batch),
        1 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => Just(Op::Reclaim),
        4 => Just(Op::CatchUp),
    ]
}

fn mkey(k: u8) -> Vec<u8> {
    format!("key{k:02}").into_bytes()
}

/// A value of `v`, long enough that segments fill and rotate.
fn mval(k: u8, v: u16) -> Vec<u8> {
    let mut out = format!("{k}:{v}:").into_bytes();
    out.resize(40 + (v as usize % 300), b'.');
    out
}

type State = BTreeMap<Vec<u8>, Vec<u8>>;

fn read_all(db: &Db) -> State {
    db.iter()
        .map(|kv| kv.unwrap())
        .map(|(k, v)| (k, v.to_vec()))
        .collect()
}

/// Runs `ops` on a writer and a read-only handle of the same store in this process:
/// after every catch-up the reader shows the state after some prefix of the writer's
/// writes, never an earlier prefix than it showed before, and after a flush the
/// newest one.
fn run_model(ops: &[Op]) {
    let tmp = tempfile::tempdir().unwrap();
    let w = Options::new()
        .shards(4)
        .segment_size(4 << 10)
        .write_buffer(1 << 10)
        .background_compaction(false)
        .compaction_threshold(0.2)
        .open(tmp.path())
        .unwrap();
    let r = Options::new().read_only().open(tmp.path()).unwrap();
    let mut model = State::new();
    let mut history = vec![model.clone()];
    let mut at = 0;
    for op in ops {
        match op {
            Op::Put(k, v) => {
                w.put(mkey(*k), mval(*k, *v)).unwrap();
                model.insert(mkey(*k), mval(*k, *v));
            }
            Op::Delete(k) => {
                w.delete(mkey(*k)).unwrap();
                model.remove(&mkey(*k));
            }
            Op::Batch(items) => {
                let mut b = WriteBatch::new();
                for (k, v) in items {
                    match v {
                        Some(v) => {
                            b.put(mkey(*k), mval(*k, *v));
                            model.insert(mkey(*k), mval(*k, *v));
                        }
                        None => {
                            b.delete(mkey(*k));
                            model.remove(&mkey(*k));
                        }
                    }
                }
                w.write(b).unwrap();
            }
            Op::Flush => w.flush().unwrap(),
            Op::Compact => w.compact().unwrap(),
            Op::Reclaim => {
                w.reclaim().unwrap();
            }
            Op::CatchUp => {}
        }
        history.push(model.clone());
        if matches!(op, Op::CatchUp | Op::Flush | Op::Compact) {
            r.catch_up().unwrap();
            let got = read_all(&r);
            let found = (at..history.len()).rev().find(|&i| history[i] == got);
            let Some(i) = found else {
                panic!("the reader shows no state the writer had since step {at}: {got:?}");
            };
            at = i;
            if matches!(op, Op::Flush) {
                assert_eq!(got, model, "after a flush the reader is current");
            }
            for (k, v) in &got {
                assert_eq!(r.get(k).unwrap().as_deref(), Some(&v[..]));
            }
        }
    }
    w.flush().unwrap();
    r.catch_up().unwrap();
    assert_eq!(read_all(&r), model);
    assert!(r.verify().unwrap().is_clean());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn a_reader_shows_a_prefix_of_the_writers_writes(ops in prop::collection::vec(op(), 1..160)) {
        run_model(&ops);
    }
}

/// The catch-up rate: a writer process puts small records at 200,000 a second (set
/// `CAIRN_RO_TARGET=0` for as fast as it can) for 3 s while a reader catches up every
/// 5 ms; the reader must end with every record and keep up on the way.
#[test]
fn a_reader_keeps_up_with_200k_puts_a_second() {
    let rate: u64 = std::env::var("CAIRN_RO_TARGET")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(200_000);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let w = Writer::start(&dir, 3000, Some(rate));
    w.expect("OPEN");
    let db = Options::new().read_only().open(&dir).unwrap();
    let start = Instant::now();
    let (mut records, mut busy, mut rounds, mut worst) =
        (0u64, Duration::ZERO, 0u64, Duration::ZERO);
    let mut cpu = Duration::ZERO;
    let mut lag_samples = Vec::new();
    let mut child = w.child;
    loop {
        let done = child.try_wait().unwrap().is_some();
        let cpu0 = thread_cpu();
        let up = db.catch_up().unwrap();
        cpu += thread_cpu().saturating_sub(cpu0);
        records += up.records;
        busy += up.took;
        worst = worst.max(up.took);
        rounds += 1;
        lag_samples.push(up.held_back);
        if done {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(120));
        std::thread::sleep(Duration::from_millis(5));
    }
    let last: Vec<String> = std::iter::from_fn(|| w.lines.try_recv().ok()).collect();
    let report = last
        .iter()
        .find_map(|l| l.strip_prefix("LAST "))
        .unwrap()
        .to_string();
    let mut it = report.split_whitespace();
    let puts: u64 = it.next().unwrap().parse().unwrap();
    let secs: f64 = it.next().unwrap().parse().unwrap();
    db.catch_up().unwrap();
    assert_eq!(db.iter().count() as u64, puts);
    eprintln!(
        "writer: {puts} puts in {secs:.2} s = {:.0}/s; reader: {records} records made visible in \
         {rounds} catch-ups, {:.3} s busy ({:.3} s of CPU) = {:.0} records/s of catch-up time; \
         slowest catch-up {:?}",
        puts as f64 / secs,
        busy.as_secs_f64(),
        cpu.as_secs_f64(),
        records as f64 / busy.as_secs_f64().max(1e-9),
        worst
    );
    // Keeping up: catching up costs well under the time the writer took to write. Its
    // CPU time, not its wall time: on a shared machine under load the reader's thread
    // waits for a core as long as it works, and that says nothing of catching up.
    assert!(cpu.as_secs_f64() < secs, "the reader fell behind");
}

/// CPU time of the calling thread so far.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
