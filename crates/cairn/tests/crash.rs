//! SIGKILL crash tests.
//!
//! Each test runs many cycles on one store directory: it starts a child process (this
//! test binary again, running only `child_writer`), lets it write for a random 50–300 ms,
//! kills it with SIGKILL, reopens the store and checks it against what the child
//! reported. The next cycle's child then recovers the recovered store.
//!
//! The child's writer threads each own a disjoint set of keys and print, one line each
//! (written with one `write` and flushed at once, so a SIGKILL never loses a printed
//! line):
//!
//! ```text
//! @@R                          store open, writing starts
//! @@I <t> <id> <S|B> <op>...   thread t is about to apply operation <id>
//! @@A <t> <id>                 operation <id> returned Ok
//! @@F <t>                      Db::flush, called by thread t, returned Ok
//! @@E <message>                an operation failed; the child exits
//! ```
//!
//! where an `<op>` is `P:<key>:<pad>` (a put) or `D:<key>` (a delete); a single write
//! (`S`) has one op, a batch (`B`) several. The value of a put by operation `id` is
//! `value(id, key, pad)`: unique per operation and tagged with its id, so the parent can
//! tell exactly which write a value came from (and so whether a batch was applied).
//!
//! What must hold after each kill, per key, is that the value is the one of the last
//! *guaranteed* operation on it or of a later (unguaranteed) one. Under
//! `SyncPolicy::Always` every acknowledged operation is guaranteed, so only the one
//! in-flight operation of each thread is not; under `SyncPolicy::Never` only operations
//! acknowledged before the thread's last `@@F` are. Batches must be all-or-nothing,
//! `verify` must find nothing, and a scan must agree with point reads.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{mpsc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cairn::{Db, Options, SyncPolicy, WriteBatch};
use common::{on_disk, snapshot};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const DIR_VAR: &str = "CAIRN_CRASH_DIR";
const MODE_VAR: &str = "CAIRN_CRASH_MODE";
const SEED_VAR: &str = "CAIRN_CRASH_SEED";
const BASE_VAR: &str = "CAIRN_CRASH_BASE";

/// Operation ids of writer thread `t` start at `base + t * THREAD_IDS`.
const THREAD_IDS: u64 = 10_000_000;

/// What the child does and how it is configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// SyncPolicy::Always, one writer, small segments, no compaction: recovery alone.
    Always,
    /// SyncPolicy::Always, four writers sharing fsyncs (group commit), no compaction.
    AlwaysThreads,
    /// SyncPolicy::Never with a `Db::flush` every few operations, no compaction.
    NeverFlush,
    /// SyncPolicy::Always, few keys, big values, aggressive background compaction.
    CompactAlways,
    /// SyncPolicy::Never with flushes, few keys, aggressive background compaction.
    CompactNever,
}

const MODES: [Mode; 5] = [
    Mode::Always,
    Mode::AlwaysThreads,
    Mode::NeverFlush,
    Mode::CompactAlways,
    Mode::CompactNever,
];

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Always => "always",
            Mode::AlwaysThreads => "always-threads",
            Mode::NeverFlush => "never-flush",
            Mode::CompactAlways => "compact-always",
            Mode::CompactNever => "compact-never",
        }
    }

    fn parse(s: &str) -> Mode {
        MODES
            .into_iter()
            .find(|m| m.name() == s)
            .unwrap_or_else(|| panic!("unknown mode {s}"))
    }

    fn never(self) -> bool {
        matches!(self, Mode::NeverFlush | Mode::CompactNever)
    }

    fn compacting(self) -> bool {
        matches!(self, Mode::CompactAlways | Mode::CompactNever)
    }

    fn threads(self) -> usize {
        if self == Mode::AlwaysThreads {
            4
        } else {
            1
        }
    }

    /// Keys per writer thread.
    fn keys(self) -> u32 {
        match self {
            Mode::CompactAlways | Mode::CompactNever => 48,
            Mode::AlwaysThreads => 150,
            Mode::Always | Mode::NeverFlush => 400,
        }
    }

    /// Every key of writer thread `t`.
    fn keys_of(self, t: usize) -> impl Iterator<Item = String> {
        (0..self.keys()).map(move |i| key_name(t, i))
    }

    /// Range of the padding added to each value.
    fn pad(self) -> std::ops::Range<usize> {
        if self.compacting() {
            300..1500
        } else {
            0..300
        }
    }

    fn options(self) -> Options {
        let o = Options::new().shards(4).sync(if self.never() {
            SyncPolicy::Never
        } else {
            SyncPolicy::Always
        });
        if self.compacting() {
            o.segment_size(16 << 10)
                .compaction_threshold(0.2)
                .compaction_rate(None)
                .compaction_threads(2)
        } else {
            o.segment_size(32 << 10).background_compaction(false)
        }
    }
}

fn key_name(t: usize, i: u32) -> String {
    format!("t{t}k{i:04}")
}

/// The value written for `key` by operation `id`.
fn value(id: u64, key: &str, pad: usize) -> Vec<u8> {
    let mut v = format!("{id}:{key}:").into_bytes();
    let mut x = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ pad as u64 ^ 0x5555;
    for _ in 0..pad {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(b'a' + (x % 26) as u8);
    }
    v
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    Put(String, usize),
    Del(String),
}

impl Op {
    fn key(&self) -> &str {
        match self {
            Op::Put(k, _) | Op::Del(k) => k,
        }
    }

    fn effect(&self, id: u64) -> Option<Vec<u8>> {
        match self {
            Op::Put(k, pad) => Some(value(id, k, *pad)),
            Op::Del(_) => None,
        }
    }

    fn encode(&self) -> String {
        match self {
            Op::Put(k, pad) => format!("P:{k}:{pad}"),
            Op::Del(k) => format!("D:{k}"),
        }
    }

    fn decode(s: &str) -> Op {
        let mut it = s.split(':');
        match (it.next(), it.next(), it.next()) {
            (Some("P"), Some(k), Some(pad)) => Op::Put(k.to_string(), pad.parse().unwrap()),
            (Some("D"), Some(k), None) => Op::Del(k.to_string()),
            _ => panic!("bad op {s:?}"),
        }
    }
}

/// One operation a writer started: a single put or delete, or a batch.
#[derive(Clone, Debug)]
struct Logged {
    id: u64,
    ops: Vec<Op>,
    batch: bool,
}

// ---------------------------------------------------------------------------------------
// The child
// ---------------------------------------------------------------------------------------

fn emit(line: &str) {
    // One write per line: a line is either wholly in the pipe or not at all, and lines of
    // different threads do not mix.
    let s = format!("{line}\n");
    let mut out = std::io::stdout().lock();
    out.write_all(s.as_bytes()).unwrap();
    out.flush().unwrap();
}

fn fail(msg: String) -> ! {
    emit(&format!("@@E {msg}"));
    std::process::exit(3);
}

/// One writer thread of the child: writes to its own keys until killed.
fn writer(db: &Db, mode: Mode, t: usize, seed: u64, mut id: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut until_flush = rng.random_range(1..40u32);
    let n = mode.keys();
    loop {
        let pick = |rng: &mut StdRng| key_name(t, rng.random_range(0..n));
        let roll = rng.random_range(0..100);
        let (ops, batch) = if roll < 25 {
            // A batch over several keys, most likely in several shards.
            let mut keys: Vec<String> = (0..rng.random_range(2..8))
                .map(|_| pick(&mut rng))
                .collect();
            keys.sort();
            keys.dedup();
            let ops = keys
                .into_iter()
                .map(|k| {
                    if rng.random_range(0..5) == 0 {
                        Op::Del(k)
                    } else {
                        Op::Put(k, rng.random_range(mode.pad()))
                    }
                })
                .collect();
            (ops, true)
        } else if roll < 40 {
            (vec![Op::Del(pick(&mut rng))], false)
        } else {
            (
                vec![Op::Put(pick(&mut rng), rng.random_range(mode.pad()))],
                false,
            )
        };
        let desc: Vec<String> = ops.iter().map(Op::encode).collect();
        let kind = if batch { "B" } else { "S" };
        emit(&format!("@@I {t} {id} {kind} {}", desc.join(" ")));
        let res = if batch {
            let mut b = WriteBatch::new();
            for op in &ops {
                match op {
                    Op::Put(k, pad) => b.put(k, value(id, k, *pad)),
                    Op::Del(k) => b.delete(k),
                };
            }
            db.write(b)
        } else {
            match &ops[0] {
                Op::Put(k, pad) => db.put(k, value(id, k, *pad)),
                Op::Del(k) => db.delete(k),
            }
        };
        if let Err(e) = res {
            fail(format!("operation {id} failed: {e}"));
        }
        emit(&format!("@@A {t} {id}"));
        id += 1;
        if mode.never() {
            until_flush -= 1;
            if until_flush == 0 {
                if let Err(e) = db.flush() {
                    fail(format!("flush failed: {e}"));
                }
                emit(&format!("@@F {t}"));
                until_flush = rng.random_range(1..40);
            }
        }
    }
}

/// The child process: does nothing unless started by a crash test.
#[test]
#[ignore = "child process of the crash tests, which run it with --ignored"]
fn child_writer() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let mode = Mode::parse(&std::env::var(MODE_VAR).unwrap());
    let seed: u64 = std::env::var(SEED_VAR).unwrap().parse().unwrap();
    let base: u64 = std::env::var(BASE_VAR).unwrap().parse().unwrap();
    // Separate our lines from whatever the test harness printed.
    emit("");
    let db = match mode.options().open(&dir) {
        Ok(db) => db,
        Err(e) => fail(format!("open failed: {e}")),
    };
    emit("@@R");
    std::thread::scope(|s| {
        for t in 0..mode.threads() {
            let db = &db;
            s.spawn(move || writer(db, mode, t, seed ^ t as u64, base + t as u64 * THREAD_IDS));
        }
    });
}

// ---------------------------------------------------------------------------------------
// The parent
// ---------------------------------------------------------------------------------------

/// What one writer thread reported.
#[derive(Default)]
struct Track {
    /// Operations in the order they were started.
    ops: Vec<Logged>,
    /// Number of leading operations of `ops` that were acknowledged.
    acked: usize,
    /// Number of leading operations of `ops` acknowledged before the last `@@F`.
    flushed: usize,
}

/// What one child run reported.
#[derive(Default)]
struct Run {
    tracks: BTreeMap<usize, Track>,
    ready: bool,
    error: Option<String>,
}

impl Run {
    fn line(&mut self, line: &str) {
        let Some(at) = line.find("@@") else { return };
        let line = &line[at..];
        let mut parts = line.split(' ');
        let tag = parts.next();
        if tag == Some("@@R") {
            self.ready = true;
            return;
        }
        if tag == Some("@@E") {
            self.error = Some(line.to_string());
            return;
        }
        let t: usize = parts.next().unwrap().parse().unwrap();
        let track = self.tracks.entry(t).or_default();
        match tag {
            Some("@@I") => {
                let id: u64 = parts.next().unwrap().parse().unwrap();
                let batch = parts.next() == Some("B");
                let ops = parts.map(Op::decode).collect();
                assert_eq!(
                    track.acked,
                    track.ops.len(),
                    "operation started before the thread's last one ended"
                );
                track.ops.push(Logged { id, ops, batch });
            }
            Some("@@A") => {
                let id: u64 = parts.next().unwrap().parse().unwrap();
                assert_eq!(track.ops.last().map(|o| o.id), Some(id), "ack out of order");
                track.acked = track.ops.len();
            }
            Some("@@F") => track.flushed = track.acked,
            _ => panic!("unexpected line {line:?}"),
        }
    }
}

/// Held while a child is being spawned and while this process has a store open.
///
/// Tests run in parallel threads of one process, and a child starts as a copy of that
/// process, with a copy of every open file until it execs. If it copied the `LOCK` file
/// of a store another test has open, that store would stay locked until the exec, and the
/// other test's next child could fail to open it.
static FORK_GUARD: Mutex<()> = Mutex::new(());

fn fork_guard() -> MutexGuard<'static, ()> {
    FORK_GUARD.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs one child on `dir`, kills it `run_ms` after it reported the store open (or,
/// with `early`, that long after it started, maybe while it is still recovering), and
/// returns what it reported.
fn run_child(
    dir: &Path,
    mode: Mode,
    seed: u64,
    base: u64,
    run_ms: u64,
    early: Option<Duration>,
) -> Run {
    let exe = std::env::current_exe().unwrap();
    let guard = fork_guard();
    let mut child = Command::new(exe)
        .args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
        .arg("--ignored")
        .env(DIR_VAR, dir)
        .env(MODE_VAR, mode.name())
        .env(SEED_VAR, seed.to_string())
        .env(BASE_VAR, base.to_string())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child");
    drop(guard); // the child has exec'd: it holds no copies of our files any more
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                // A line cut short by the kill is not a report.
                Ok(_) if buf.last() != Some(&b'\n') => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf).trim_end().to_string();
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut run = Run::default();
    // Wait for the store to be open, then let it write for the chosen time.
    let start = Instant::now();
    let mut deadline = early.map(|d| start + d);
    loop {
        let now = Instant::now();
        let wait = match deadline {
            Some(d) if now >= d => break,
            Some(d) => d - now,
            None if now - start > Duration::from_secs(30) => break,
            None => Duration::from_millis(20),
        };
        match rx.recv_timeout(wait) {
            Ok(line) => {
                run.line(&line);
                if run.ready && deadline.is_none() {
                    deadline = Some(Instant::now() + Duration::from_millis(run_ms));
                }
                if run.error.is_some() {
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    child.kill().expect("SIGKILL the child"); // SIGKILL on unix
    let status = child.wait().unwrap();
    reader.join().unwrap();
    // Lines the child wrote before it died.
    for line in rx.try_iter() {
        run.line(&line);
    }
    let stderr = err_reader.join().unwrap();
    assert!(
        (run.ready || early.is_some()) && run.error.is_none(),
        "child failed ({status:?}): {:?}\nstderr:\n{stderr}",
        run.error
    );
    run
}

type State = BTreeMap<String, Option<Vec<u8>>>;
/// Values a key may hold, each with the position of the operation that wrote it.
type Choices = Vec<(i64, Option<Vec<u8>>)>;

fn show(v: &Option<Vec<u8>>) -> String {
    match v {
        None => "absent".into(),
        Some(b) => {
            let s = String::from_utf8_lossy(b);
            let tag: String = s.chars().take_while(|&c| c != ':').collect();
            format!("value of op {tag} ({} bytes)", b.len())
        }
    }
}

/// Checks the keys of one writer thread in the reopened store against their state
/// before the run and what the thread reported; adds what it observed to `observed`.
fn check_track(
    db: &Db,
    keys: impl Iterator<Item = String>,
    guaranteed: usize,
    before: &State,
    track: &Track,
    observed: &mut State,
    ctx: &str,
) {
    // The state every guaranteed operation leads to.
    let mut base: State = State::new();
    let keys: Vec<String> = keys.collect();
    for k in &keys {
        base.insert(k.clone(), before.get(k).cloned().flatten());
    }
    for l in &track.ops[..guaranteed] {
        for op in &l.ops {
            base.insert(op.key().to_string(), op.effect(l.id));
        }
    }
    // Per key: the values it may hold, each with the position of the operation that
    // wrote it (-1: the guaranteed state).
    let mut allowed: HashMap<String, Choices> = HashMap::new();
    for (k, v) in &base {
        allowed.insert(k.clone(), vec![(-1, v.clone())]);
    }
    for (pos, l) in track.ops.iter().enumerate().skip(guaranteed) {
        for op in &l.ops {
            allowed
                .get_mut(op.key())
                .expect("a key of this thread")
                .push((pos as i64, op.effect(l.id)));
        }
    }
    let mut explained: HashMap<String, Vec<i64>> = HashMap::new();
    for k in &keys {
        let got = db
            .get(k)
            .unwrap_or_else(|e| panic!("{ctx}: get {k} failed: {e}"))
            .map(|v| v.into_vec());
        let options = &allowed[k];
        let which: Vec<i64> = options
            .iter()
            .filter(|(_, v)| *v == got)
            .map(|(p, _)| *p)
            .collect();
        if which.is_empty() {
            let last_acked = track.ops[..track.acked]
                .iter()
                .rev()
                .find(|l| l.ops.iter().any(|o| o.key() == k));
            panic!(
                "{ctx}: key {k} holds {} but may only hold one of [{}]; last acknowledged \
                 operation on it: {:?} ({} of {} operations of its thread acknowledged, {} \
                 guaranteed)",
                show(&got),
                options
                    .iter()
                    .map(|(p, v)| format!("{p}: {}", show(v)))
                    .collect::<Vec<_>>()
                    .join(", "),
                last_acked,
                track.acked,
                track.ops.len(),
                guaranteed
            );
        }
        explained.insert(k.clone(), which);
        observed.insert(k.clone(), got);
    }
    // Batches not guaranteed to be there: all or nothing. A key showing a value only
    // this batch wrote proves it applied; a key showing a value only an earlier operation
    // (or the guaranteed state) can explain proves it did not. A delete of a key that was
    // absent when the batch ran was left out of the batch, so it proves nothing (the
    // earlier delete may be lost in its shard while the batch survives in others).
    let mut view = base.clone(); // the writer's view as each operation started
    for (pos, l) in track.ops.iter().enumerate().skip(guaranteed) {
        let pos = pos as i64;
        let mut applied = None;
        let mut not_applied = None;
        for op in l.ops.iter().filter(|_| l.batch) {
            let w = &explained[op.key()];
            if w == &[pos] {
                applied = Some(op.key());
            }
            let effective = matches!(op, Op::Put(..)) || view[op.key()].is_some();
            if effective && w.iter().all(|&p| p < pos) {
                not_applied = Some(op.key());
            }
        }
        for op in &l.ops {
            view.insert(op.key().to_string(), op.effect(l.id));
        }
        if let (Some(a), Some(n)) = (applied, not_applied) {
            panic!(
                "{ctx}: batch {} ({:?}) is half applied: {a} has its value, {n} holds {}",
                l.id,
                l.ops,
                show(&observed[n])
            );
        }
    }
}

/// Checks the reopened store against the state before the run and the run's report.
/// Returns the state observed (the base of the next cycle).
fn check(db: &Db, mode: Mode, before: &State, run: &Run, ctx: &str) -> State {
    let mut observed = State::new();
    let empty = Track::default();
    for t in 0..mode.threads() {
        let track = run.tracks.get(&t).unwrap_or(&empty);
        let guaranteed = if mode.never() {
            track.flushed
        } else {
            track.acked
        };
        let ctx = format!("{ctx} thread {t}");
        check_track(
            db,
            mode.keys_of(t),
            guaranteed,
            before,
            track,
            &mut observed,
            &ctx,
        );
    }
    // A scan sees exactly what point reads see, and no key that was never written.
    let scanned: Vec<(Vec<u8>, Vec<u8>)> = db
        .iter()
        .map(|r| r.map(|(k, v)| (k, v.into_vec())))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{ctx}: scan failed: {e}"));
    let expect: Vec<(Vec<u8>, Vec<u8>)> = observed
        .iter()
        .filter_map(|(k, v)| v.clone().map(|v| (k.clone().into_bytes(), v)))
        .collect();
    assert!(scanned == expect, "{ctx}: scan disagrees with point reads");
    let report = db.verify().unwrap();
    assert!(report.is_clean(), "{ctx}: verify found {:?}", report.damage);
    assert!(
        db.open_damage().is_empty(),
        "{ctx}: damage found at open: {:?}",
        db.open_damage()
    );
    observed
}

/// Statistics over all cycles, to make sure the test exercised something.
#[derive(Default, Debug)]
struct Totals {
    /// Kills soon after the start, and how many of them came before the store was open.
    early: usize,
    early_unready: usize,
    acked: usize,
    batches: usize,
    in_flight: usize,
    segments_max: u64,
}

fn crash_cycles(mode: Mode, cycles: u32, budget: Duration) {
    let seed: u64 = match std::env::var(SEED_VAR) {
        Ok(s) => s.parse().unwrap(),
        Err(_) => rand::rng().random(),
    };
    eprintln!(
        "crash test {}: seed {seed} (set {SEED_VAR} to repeat)",
        mode.name()
    );
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut state = State::new();
    let mut totals = Totals::default();
    let start = Instant::now();
    let mut done = 0;
    for cycle in 0..cycles {
        if cycle >= 8 && start.elapsed() > budget {
            break; // slow machine: enough cycles for a meaningful run
        }
        let run_ms = rng.random_range(50..300);
        // Now and then kill the child within its first milliseconds, while it may still
        // be recovering the store (truncating torn tails, rewriting SEQSTATE, creating
        // segments).
        let early = rng
            .random_bool(0.15)
            .then(|| Duration::from_millis(rng.random_range(1..40)));
        let base = (cycle as u64 + 1) * THREAD_IDS * 10;
        let run = run_child(dir.path(), mode, rng.random(), base, run_ms, early);
        let ctx = format!(
            "mode {} seed {seed} cycle {cycle} (ran {}, {} ops)",
            mode.name(),
            match early {
                Some(d) => format!("{d:?} from start"),
                None => format!("{run_ms} ms"),
            },
            run.tracks.values().map(|t| t.ops.len()).sum::<usize>()
        );
        totals.early += usize::from(early.is_some());
        totals.early_unready += usize::from(!run.ready);
        for track in run.tracks.values() {
            totals.acked += track.acked;
            totals.batches += track.ops[..track.acked].iter().filter(|l| l.batch).count();
            totals.in_flight += track.ops.len() - track.acked;
        }
        // No background compaction while checking: `verify` races with it (see
        // corruption.rs, verify_while_compaction_runs).
        let guard = fork_guard();
        let db = mode
            .options()
            .background_compaction(false)
            .open(dir.path())
            .unwrap_or_else(|e| panic!("{ctx}: reopen failed: {e}"));
        state = check(&db, mode, &state, &run, &ctx);
        totals.segments_max = totals.segments_max.max(db.stats().total.segments);
        drop(db);
        drop(guard);
        done += 1;
    }
    eprintln!(
        "crash test {}: {done} kills in {:.1?}: {totals:?}",
        mode.name(),
        start.elapsed()
    );
    assert!(totals.acked >= 200, "too little work: {totals:?}");
    assert!(totals.batches >= 20, "too few batches: {totals:?}");
    assert!(totals.segments_max >= 8, "no segment rotation: {totals:?}");
}

#[test]
fn crash_sync_always() {
    crash_cycles(Mode::Always, 25, Duration::from_secs(25));
}

#[test]
fn crash_sync_always_four_writers() {
    crash_cycles(Mode::AlwaysThreads, 25, Duration::from_secs(25));
}

#[test]
fn crash_sync_never_with_flushes() {
    crash_cycles(Mode::NeverFlush, 25, Duration::from_secs(25));
}

#[test]
fn crash_during_compaction_sync_always() {
    crash_cycles(Mode::CompactAlways, 25, Duration::from_secs(25));
}

#[test]
fn crash_during_compaction_sync_never_with_flushes() {
    crash_cycles(Mode::CompactNever, 25, Duration::from_secs(25));
}

// ---------------------------------------------------------------------------------------
// Deterministic reproductions. A copy of the store's files taken while the store is open
// and idle is exactly what a SIGKILL at that moment leaves behind (the page cache
// survives, the process's buffers do not).
// ---------------------------------------------------------------------------------------

/// Compaction drops a record once the index points at a newer version, even when that
/// newer version is still only in the write buffer. A crash then loses both: the key
/// vanishes although its old value was flushed.
#[test]
fn compaction_keeps_durable_version_until_successor_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let crash = tempfile::tempdir().unwrap();
    let o = Options::new()
        .shards(1)
        .segment_size(4 << 10)
        .background_compaction(false);
    let db = o.clone().open(dir.path()).unwrap();
    db.put("key", "OLDVALUE").unwrap();
    for i in 0..40 {
        db.put(format!("f{i:03}"), [b'x'; 100]).unwrap();
    }
    db.flush().unwrap();
    db.compact().unwrap(); // seals the first segment
    for i in 0..40 {
        db.put(format!("f{i:03}"), [b'y'; 100]).unwrap();
    }
    db.flush().unwrap(); // "OLDVALUE" is durable; the first segment is now mostly stale
    db.put("key", "NEWVALUE").unwrap(); // acknowledged, buffered (SyncPolicy::Never)
    assert!(
        !on_disk(dir.path(), b"NEWVALUE"),
        "test setup: the put was written"
    );
    db.compact().unwrap();
    snapshot(dir.path(), crash.path()); // SIGKILL now
    let got = o.open(crash.path()).unwrap().get("key").unwrap();
    assert!(
        got.as_deref() == Some(b"OLDVALUE") || got.as_deref() == Some(b"NEWVALUE"),
        "after a crash the key holds {got:?}, but \"OLDVALUE\" was flushed"
    );
    drop(db);
}

/// The same under `SyncPolicy::Always`, with a batch over two shards caught between its
/// two shards' writes (here held there by a failed write on the second shard; a SIGKILL
/// at that moment does the same). Compaction drops the old versions because the index
/// already points at the batch; the crash leaves the batch incomplete, so recovery
/// rightly ignores it — and the batch's keys are gone instead of holding their old values.
///
/// Run without the commit log (the failed write is shard 1's) and with it (the failed
/// write is the log's: the batch is in both shards' buffers, unacknowledged, and the
/// compaction's sync makes it whole).
#[test]
fn compaction_during_in_flight_batch_keeps_old_versions() {
    for log_size in [0, 64 << 20] {
        in_flight_batch_during_compaction(log_size);
    }
}

fn in_flight_batch_during_compaction(log_size: u64) {
    use cairn::fault::{FaultInjector, IoOp};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let crash = tempfile::tempdir().unwrap();
    let f = Arc::new(FaultInjector::new());
    let o = Options::new()
        .shards(2)
        .segment_size(4 << 10)
        .sync(SyncPolicy::Always)
        .commit_log_size(log_size)
        .background_compaction(false)
        .fault_injector(f.clone());
    let db = o.clone().open(dir.path()).unwrap();
    let keys: Vec<String> = (0..16).map(|i| format!("a{i:02}")).collect();
    for k in &keys {
        db.put(k, format!("OLD-{k}")).unwrap();
    }
    for round in 0..2u8 {
        for i in 0..80 {
            db.put(format!("f{i:03}"), [b'x' + round; 100]).unwrap();
        }
        db.flush().unwrap();
        db.compact().unwrap(); // seals; the segments with the old values stay (half live)
    }
    let in_shard0: Vec<bool> = keys
        .iter()
        .map(|k| {
            on_disk(
                &dir.path().join("shards/0000"),
                format!("OLD-{k}").as_bytes(),
            )
        })
        .collect();
    assert!(in_shard0.iter().any(|&b| b) && in_shard0.iter().any(|&b| !b));
    // Without the log, shard 0's write succeeds and shard 1's fails; with it, the log's
    // write of the batch fails. Either way the batch is refused.
    f.fail_after(IoOp::Write, if log_size == 0 { 1 } else { 0 }, libc::ENOSPC);
    let mut b = WriteBatch::new();
    for k in &keys {
        b.put(k, format!("NEW-{k}"));
    }
    assert!(db.write(b).is_err());
    f.clear();
    db.compact().unwrap();
    snapshot(dir.path(), crash.path()); // SIGKILL now
    drop(db);
    let db = Options::new().open(crash.path()).unwrap();
    let got: Vec<Option<String>> = keys
        .iter()
        .map(|k| {
            db.get(k)
                .unwrap()
                .map(|v| String::from_utf8(v.into_vec()).unwrap())
        })
        .collect();
    let old = keys
        .iter()
        .map(|k| Some(format!("OLD-{k}")))
        .collect::<Vec<_>>();
    let new = keys
        .iter()
        .map(|k| Some(format!("NEW-{k}")))
        .collect::<Vec<_>>();
    assert!(
        got == old || got == new,
        "batch neither applied nor absent after the crash: {got:?}"
    );
}
