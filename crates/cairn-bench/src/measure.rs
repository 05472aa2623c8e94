//! Measuring a phase of a workload: threads running operations, an HDR histogram of their
//! latencies, throughput per interval, and what the process wrote and held in memory.

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// What a phase does to the disk, to compare its bandwidth with the disk's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Writes (puts, updates, deletes).
    Write,
    /// Reads.
    Read,
}

/// Latency percentiles of one phase, in nanoseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Latency {
    /// Mean.
    pub mean_ns: f64,
    /// Median.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Slowest operation.
    pub max_ns: u64,
}

impl Latency {
    /// The percentiles of `hist`.
    pub fn of(hist: &Histogram<u64>) -> Latency {
        if hist.is_empty() {
            return Latency::default();
        }
        Latency {
            mean_ns: hist.mean(),
            p50_ns: hist.value_at_quantile(0.50),
            p99_ns: hist.value_at_quantile(0.99),
            p999_ns: hist.value_at_quantile(0.999),
            max_ns: hist.max(),
        }
    }
}

/// The measured result of one test (or one side of a mixed test) on one engine.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Phase {
    /// Stable identifier, e.g. `fill_random` or `read_while_writing.reads`.
    pub test: String,
    /// Human name, e.g. "fill random".
    pub title: String,
    /// Reads or writes, for the comparison with the disk's bandwidth.
    pub kind: Option<Kind>,
    /// Threads that ran this side of the test.
    pub threads: usize,
    /// Operations done.
    pub ops: u64,
    /// Key and value bytes the operations moved (written or read).
    pub bytes: u64,
    /// Wall time, in seconds.
    pub secs: f64,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// Megabytes (10^6 bytes) of keys and values per second.
    pub mb_per_sec: f64,
    /// Latency of single operations.
    pub latency: Latency,
    /// Length of one interval of `timeline`, in seconds.
    pub timeline_interval_secs: f64,
    /// Operations per second in each interval of the run.
    pub timeline: Vec<f64>,
    /// Bytes the process caused to be written to storage during the phase (and the flush
    /// after it), from `write_bytes` of `/proc/self/io`.
    pub write_bytes: Option<u64>,
    /// `write_bytes` over the key and value bytes written.
    pub write_amp: Option<f64>,
    /// Time of the flush after a write phase (not part of `secs`), in seconds.
    pub flush_secs: Option<f64>,
    /// Bytes allocated on disk by the engine's directory after the phase.
    pub disk_bytes: Option<u64>,
    /// Key and value bytes of the live records after the phase.
    pub live_bytes: Option<u64>,
    /// `disk_bytes` over `live_bytes`.
    pub space_amp: Option<f64>,
    /// Peak resident memory of the process during the phase (VmHWM, reset at its start when
    /// the kernel allows, else since the process started).
    pub peak_rss_bytes: Option<u64>,
    /// Peak anonymous resident memory (RssAnon: heap, not file pages mapped by the
    /// engine, which VmHWM counts too), sampled once per interval.
    pub peak_anon_rss_bytes: Option<u64>,
    /// Seconds to close and reopen the store after this phase.
    pub reopen_secs: Option<f64>,
    /// `fsync` and `fdatasync` calls by the engine's process during the phase (the
    /// durable fills of `--sync`; counted by the kernel, `synccount`).
    pub syncs: Option<u64>,
    /// `ops / syncs`: how many durable writes shared one sync.
    pub writes_per_sync: Option<f64>,
}

/// A small fast random number generator (SplitMix64).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.0)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// A strong 64-bit mixing function (the finalizer of SplitMix64); a bijection.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A pseudo-random permutation of `0..n` that needs no memory: a bijection on the next
/// power of two, walked until it lands below `n`.
#[derive(Clone, Debug)]
pub struct Permutation {
    n: u64,
    mask: u64,
    seed: u64,
}

impl Permutation {
    /// A permutation of `0..n` chosen by `seed`.
    pub fn new(n: u64, seed: u64) -> Permutation {
        let bits = 64 - n.max(2).saturating_sub(1).leading_zeros();
        let mask = if bits >= 64 {
            u64::MAX
        } else {
            (1 << bits) - 1
        };
        Permutation { n, mask, seed }
    }

    /// The `i`-th element (`i < n`).
    pub fn at(&self, mut i: u64) -> u64 {
        loop {
            i = self.round(i);
            if i < self.n {
                return i;
            }
        }
    }

    /// One bijective scramble of `x` within the mask's bits.
    fn round(&self, mut x: u64) -> u64 {
        let m = self.mask;
        let shift = (m.count_ones() / 2).max(1);
        for k in 0..4u64 {
            x = (x ^ (self.seed.wrapping_add(k)).wrapping_mul(0x9E37_79B9_7F4A_7C15)) & m;
            x = x.wrapping_mul(0xD6E8_FEB8_6659_FD93 | 1) & m;
            x ^= x >> shift;
        }
        x
    }
}

/// Per-thread state handed to an operation.
pub struct Worker {
    /// This thread's number within its group.
    pub thread: usize,
    /// Threads of the group.
    pub threads: usize,
    /// How many operations this thread has done before this one.
    pub index: u64,
    /// This thread's random numbers.
    pub rng: Rng,
    /// Scratch space, e.g. for the value a read returns.
    pub buf: Vec<u8>,
}

impl Worker {
    /// This operation's number within the group, when the group's operations are dealt
    /// to its threads in turn: thread `t` does `t`, `t + T`, `t + 2T`, ...
    pub fn global(&self) -> u64 {
        self.thread as u64 + self.index * self.threads as u64
    }
}

/// An operation: returns the key and value bytes it moved.
pub type Op<'a> = dyn Fn(&mut Worker) -> Result<u64> + Sync + 'a;

/// One kind of thread of a phase.
pub struct Group<'a> {
    /// Identifier of the resulting [`Phase`].
    pub test: String,
    /// Human name of the resulting [`Phase`].
    pub title: String,
    /// Reads or writes.
    pub kind: Kind,
    /// Threads running `op`.
    pub threads: usize,
    /// Operations to do in all, dealt to the threads in turn; `None`: until every group
    /// with a count is done.
    pub ops: Option<u64>,
    /// The operation.
    pub op: &'a Op<'a>,
}

/// A counter on its own cache line.
#[repr(align(128))]
#[derive(Default)]
struct Padded(AtomicU64);

/// What a phase adds to the run's seed for its workers' generators: its test name,
/// hashed (FNV-1a), so that every phase draws its own keys — the same for every engine —
/// and a phase does not read what an earlier one just read (its pages still cached).
fn phase_salt(test: &str) -> u64 {
    test.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Locks `m`; a lock poisoned by a panicking worker still holds a usable value (the
/// panic itself reaches the caller when the threads are joined).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the threads of one group share with each other and with the sampler.
struct GroupState {
    /// Operations done, per thread.
    counters: Vec<Padded>,
    /// Set when the group's last thread has ended.
    done: AtomicBool,
    /// When the latest of its threads that ended did.
    finished: Mutex<Option<Instant>>,
    /// The latencies of its threads that ended.
    hist: Mutex<Histogram<u64>>,
    /// Its threads still running.
    live: AtomicU64,
    /// Key and value bytes its operations moved.
    bytes: AtomicU64,
}

/// One run of groups of threads: what every thread shares.
struct Runner<'g, 'a> {
    groups: &'g [Group<'a>],
    states: Vec<GroupState>,
    /// An empty histogram, of the bounds every thread's takes.
    empty: Histogram<u64>,
    /// Set when the threads are to stop (every counted group is done, or one failed).
    stop: AtomicBool,
    /// The first error of an operation (or of a spawn).
    failure: Mutex<Option<anyhow::Error>>,
    /// Threads wait for it, so that every group starts at once, when all are spawned.
    go: AtomicBool,
    seed: u64,
}

impl<'g, 'a> Runner<'g, 'a> {
    fn new(groups: &'g [Group<'a>], seed: u64) -> Result<Runner<'g, 'a>> {
        let empty = new_hist()?;
        let states = groups
            .iter()
            .map(|g| GroupState {
                counters: (0..g.threads).map(|_| Padded::default()).collect(),
                done: AtomicBool::new(false),
                finished: Mutex::new(None),
                hist: Mutex::new(Histogram::new_from(&empty)),
                live: AtomicU64::new(g.threads as u64),
                bytes: AtomicU64::new(0),
            })
            .collect();
        Ok(Runner {
            groups,
            states,
            empty,
            stop: AtomicBool::new(false),
            failure: Mutex::new(None),
            go: AtomicBool::new(false),
            seed,
        })
    }

    /// Records `err` (the first one is reported) and stops every thread.
    fn fail(&self, err: anyhow::Error) {
        lock(&self.failure).get_or_insert(err);
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Spawns thread `t` of group `gi` in `scope`.
    fn spawn<'s>(&'s self, scope: &'s std::thread::Scope<'s, '_>, gi: usize, t: usize) {
        let group = &self.groups[gi];
        // Named so that a profile (`perf report --sort comm`) splits by phase.
        let name: String = group
            .test
            .replace("read_while_writing", "rww")
            .replace("random_", "r")
            .replace("fill_", "f")
            .replace("sequential", "seq")
            .chars()
            .take(15)
            .collect();
        let spawned = std::thread::Builder::new()
            .name(name)
            .spawn_scoped(scope, move || self.work(gi, t));
        if let Err(err) = spawned {
            self.fail(err.into());
            let state = &self.states[gi];
            if state.live.fetch_sub(1, Ordering::AcqRel) == 1 {
                state.done.store(true, Ordering::Release);
            }
        }
    }

    /// Thread `t` of group `gi`: its share of the group's operations, timed, once `go`.
    fn work(&self, gi: usize, t: usize) {
        let group = &self.groups[gi];
        let state = &self.states[gi];
        let mut worker = Worker {
            thread: t,
            threads: group.threads,
            index: 0,
            rng: Rng::new(mix64(
                self.seed ^ phase_salt(&group.test) ^ ((gi as u64) << 32) ^ t as u64,
            )),
            buf: Vec::with_capacity(4096),
        };
        let mine = match group.ops {
            Some(total) => {
                total / group.threads as u64 + u64::from((t as u64) < total % group.threads as u64)
            }
            None => u64::MAX,
        };
        let mut hist = Histogram::<u64>::new_from(&self.empty);
        let counter = &state.counters[t].0;
        let mut moved = 0u64;
        while !self.go.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        // A group without a count does at least one operation, however soon the others
        // are done.
        let background = group.ops.is_none();
        while worker.index < mine
            && (!self.stop.load(Ordering::Relaxed) || (background && worker.index == 0))
        {
            let t0 = Instant::now();
            match (group.op)(&mut worker) {
                Ok(n) => moved += n,
                Err(err) => {
                    self.fail(err);
                    break;
                }
            }
            let ns = t0.elapsed().as_nanos() as u64;
            let _ = hist.record(ns.max(1));
            counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            worker.index += 1;
        }
        let ended = Instant::now();
        {
            let mut f = lock(&state.finished);
            *f = Some(f.map_or(ended, |f| f.max(ended)));
        }
        state.bytes.fetch_add(moved, Ordering::Relaxed);
        let _ = lock(&state.hist).add(&hist);
        if state.live.fetch_sub(1, Ordering::AcqRel) == 1 {
            state.done.store(true, Ordering::Release);
            let counted_done = self
                .groups
                .iter()
                .zip(&self.states)
                .all(|(g, s)| g.ops.is_none() || s.done.load(Ordering::Acquire));
            if counted_done {
                self.stop.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Starts the threads (`go`) and samples the throughput of each group in each
    /// interval until it is done (a last, partial interval counts when it is at least a
    /// fifth of a full one). Returns the start, the groups' timelines and the highest
    /// anonymous memory seen.
    fn sample(&self, interval: Duration) -> (Instant, Vec<Vec<f64>>, Option<u64>) {
        let n = self.groups.len();
        let mut timelines: Vec<Vec<f64>> = vec![Vec::new(); n];
        let mut last: Vec<u64> = vec![0; n];
        let mut closed: Vec<bool> = vec![false; n];
        let start = Instant::now();
        self.go.store(true, Ordering::Release);
        let mut last_t = start;
        let mut anon = anon_rss();
        let all_done = || self.states.iter().all(|s| s.done.load(Ordering::Acquire));
        while !closed.iter().all(|c| *c) {
            anon = anon.max(anon_rss());
            let deadline = last_t + interval;
            while Instant::now() < deadline && !all_done() {
                std::thread::sleep(Duration::from_millis(5).min(interval));
            }
            let now = Instant::now();
            for (gi, state) in self.states.iter().enumerate() {
                if closed[gi] {
                    continue;
                }
                let finished = state.done.load(Ordering::Acquire);
                let sum: u64 = state
                    .counters
                    .iter()
                    .map(|c| c.0.load(Ordering::Relaxed))
                    .sum();
                // The last interval ends when the group's last thread did.
                let end = match *lock(&state.finished) {
                    Some(t) if finished => t.min(now),
                    _ => now,
                };
                let dt = end.saturating_duration_since(last_t).as_secs_f64();
                // A short last interval is dropped (it would be noise), unless it is the
                // phase's only one: every phase gets at least one point.
                let only = timelines[gi].is_empty() && sum > last[gi];
                if !finished || only || (dt >= interval.as_secs_f64() * 0.2 && sum > last[gi]) {
                    timelines[gi].push((sum - last[gi]) as f64 / dt.max(1e-9));
                }
                last[gi] = sum;
                closed[gi] = finished;
            }
            last_t = now;
        }
        (start, timelines, anon)
    }
}

/// Runs `groups` at once and measures each.
pub fn run(groups: &[Group<'_>], interval: Duration, seed: u64) -> Result<Vec<Phase>> {
    let runner = Runner::new(groups, seed)?;
    let io_before = proc_write_bytes();
    reset_peak_rss();
    let (start, mut timelines, peak_anon) = std::thread::scope(|scope| {
        for (gi, group) in groups.iter().enumerate() {
            for t in 0..group.threads {
                runner.spawn(scope, gi, t);
            }
        }
        runner.sample(interval)
    });
    if let Some(err) = runner
        .failure
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
    {
        return Err(err);
    }
    let write_bytes = match (io_before, proc_write_bytes()) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    let peak = peak_rss();
    let mut phases = Vec::new();
    for ((group, state), timeline) in groups.iter().zip(&runner.states).zip(&mut timelines) {
        let hist = lock(&state.hist);
        let end = lock(&state.finished).unwrap_or_else(Instant::now);
        let secs = end.duration_since(start).as_secs_f64().max(1e-9);
        let ops = hist.len();
        let moved = state.bytes.load(Ordering::Relaxed);
        phases.push(Phase {
            test: group.test.clone(),
            title: group.title.clone(),
            kind: Some(group.kind),
            threads: group.threads,
            ops,
            bytes: moved,
            secs,
            ops_per_sec: ops as f64 / secs,
            mb_per_sec: moved as f64 / secs / 1e6,
            latency: Latency::of(&hist),
            timeline_interval_secs: interval.as_secs_f64(),
            timeline: std::mem::take(timeline),
            write_bytes: if group.kind == Kind::Write {
                write_bytes
            } else {
                None
            },
            peak_rss_bytes: peak,
            peak_anon_rss_bytes: peak_anon,
            ..Phase::default()
        });
    }
    Ok(phases)
}

/// How [`drop_page_cache`] drops the page cache in this process: "drop_caches" as root
/// (everything the kernel can drop), else "fadvise" (the files under the directory given,
/// with `posix_fadvise(DONTNEED)`; pages a process has mapped stay).
pub fn cold_method() -> &'static str {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        "drop_caches"
    } else {
        "fadvise"
    }
}

/// Writes back every dirty page of the file system `dir` is on (`syncfs`), and waits.
pub fn write_back(dir: &Path) -> Result<()> {
    let f = std::fs::File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
    // SAFETY: syncfs takes a descriptor we own, open for the call's duration.
    if unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("syncfs of {}", dir.display()));
    }
    Ok(())
}

/// Drops the page cache so that the next reads of the files under `dir` reach the
/// disk, the way [`cold_method`] says; dirty data is written back first.
pub fn drop_page_cache(dir: &Path) -> Result<()> {
    if cold_method() == "drop_caches" {
        // SAFETY: sync has no preconditions.
        unsafe { libc::sync() };
        std::fs::write("/proc/sys/vm/drop_caches", "3")
            .context("writing 3 to /proc/sys/vm/drop_caches")?;
    } else {
        cairn::evict_page_cache(dir)?;
    }
    Ok(())
}

/// An empty latency histogram for 1 ns .. 1 hour at 3 significant digits.
pub fn new_hist() -> Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).context("a latency histogram")
}

/// `write_bytes` of `/proc/self/io`: bytes this process caused to be sent to storage.
pub fn proc_write_bytes() -> Option<u64> {
    let text = fs::read_to_string("/proc/self/io").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Peak resident set size of this process (VmHWM of `/proc/self/status`), in bytes.
pub fn peak_rss() -> Option<u64> {
    status_kib("VmHWM:").map(|k| k * 1024)
}

/// Anonymous resident memory (RssAnon), in bytes.
pub fn anon_rss() -> Option<u64> {
    status_kib("RssAnon:").map(|k| k * 1024)
}

fn status_kib(field: &str) -> Option<u64> {
    status_field_kib(&fs::read_to_string("/proc/self/status").ok()?, field)
}

/// Field `field` (`"VmHWM:"`, say) of a `/proc/PID/status` text, in KiB.
pub fn status_field_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Resets VmHWM to the current RSS (writing 5 to `/proc/self/clear_refs`), so that the
/// next reading is the peak of what follows; silently keeps the old peak where refused.
pub fn reset_peak_rss() {
    let _ = fs::write("/proc/self/clear_refs", "5");
}

/// Bytes allocated on disk under `dir` (like `du -s`: allocated blocks, not file sizes).
pub fn disk_usage(dir: &Path) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))?;
        for entry in entries {
            let entry = entry?;
            let meta = match entry.metadata() {
                Ok(m) => m,
                // A file removed under our feet (compaction) takes no space any more.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e.into()),
            };
            if meta.is_dir() {
                stack.push(entry.path());
            }
            total += meta.blocks() * 512;
        }
    }
    Ok(total)
}

/// Fills in the figures of a write phase that follow it: flushes the engine (timed, and
/// its writes counted), then write amplification, disk usage and space amplification.
pub fn after_write(
    phase: &mut Phase,
    flush: impl FnOnce() -> Result<()>,
    dir: &Path,
    written: u64,
    live: u64,
) -> Result<()> {
    let before = proc_write_bytes();
    let t = Instant::now();
    flush()?;
    phase.flush_secs = Some(t.elapsed().as_secs_f64());
    if let (Some(w), Some(a), Some(b)) = (phase.write_bytes, before, proc_write_bytes()) {
        phase.write_bytes = accounted(Some(w + b.saturating_sub(a)), written);
        if let (Some(total), true) = (phase.write_bytes, written > 0) {
            phase.write_amp = Some(total as f64 / written as f64);
        }
    }
    space(phase, dir, live)
}

/// `write_bytes` counted by `/proc/self/io` for a phase that wrote `written` bytes of
/// data, or `None` when it counted nothing at all: the file system is one the kernel's
/// I/O accounting does not see (tmpfs), so that no write amplification can be told.
pub fn accounted(write_bytes: Option<u64>, written: u64) -> Option<u64> {
    write_bytes.filter(|w| *w > 0 || written == 0)
}

/// Records disk usage and space amplification of `dir` holding `live` bytes of records.
pub fn space(phase: &mut Phase, dir: &Path, live: u64) -> Result<()> {
    let disk = disk_usage(dir)?;
    phase.disk_bytes = Some(disk);
    phase.live_bytes = Some(live);
    if live > 0 {
        phase.space_amp = Some(disk as f64 / live as f64);
    }
    Ok(())
}

/// Fails with a message naming `key` when a read found nothing where a value must be.
pub fn missing(key: &[u8]) -> anyhow::Error {
    anyhow!("a key that was written is missing: {key:02x?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_is_a_bijection() {
        for n in [1u64, 2, 3, 10, 1000, 4097] {
            let p = Permutation::new(n, 42);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let x = p.at(i);
                assert!(x < n);
                assert!(!seen[x as usize], "n={n} repeats {x}");
                seen[x as usize] = true;
            }
        }
    }

    /// The keys a phase's workers draw: the same for the same phase and seed (every
    /// engine gets the same work), different from another phase's (a read phase does not
    /// find the pages an earlier one read still cached).
    #[test]
    fn each_phase_draws_its_own_keys() {
        let draws = |test: &str| -> Vec<u64> {
            let seen = Mutex::new(Vec::new());
            let op = |w: &mut Worker| -> Result<u64> {
                seen.lock().unwrap().push(w.rng.below(1 << 40));
                Ok(1)
            };
            let g = Group {
                test: test.into(),
                title: test.into(),
                kind: Kind::Read,
                threads: 1,
                ops: Some(8),
                op: &op,
            };
            run(&[g], Duration::from_millis(10), 42).unwrap();
            seen.into_inner().unwrap()
        };
        let a = draws("random_read_4");
        assert_eq!(a.len(), 8);
        assert_eq!(a, draws("random_read_4"), "same phase, same keys");
        assert_ne!(
            a,
            draws("read_while_writing.reads"),
            "another phase, other keys"
        );
    }

    #[test]
    fn run_counts_every_operation() {
        let count = AtomicU64::new(0);
        let op = |_: &mut Worker| -> Result<u64> {
            std::thread::sleep(Duration::from_micros(20));
            count.fetch_add(1, Ordering::Relaxed);
            Ok(10)
        };
        let background = |_: &mut Worker| -> Result<u64> {
            std::thread::sleep(Duration::from_micros(50));
            Ok(1)
        };
        let groups = [
            Group {
                test: "a".into(),
                title: "a".into(),
                kind: Kind::Read,
                threads: 3,
                ops: Some(1001),
                op: &op,
            },
            Group {
                test: "b".into(),
                title: "b".into(),
                kind: Kind::Write,
                threads: 1,
                ops: None,
                op: &background,
            },
        ];
        let phases = run(&groups, Duration::from_millis(10), 1).unwrap();
        assert_eq!(count.load(Ordering::Relaxed), 1001);
        assert_eq!(phases[0].ops, 1001);
        assert_eq!(phases[0].bytes, 10010);
        assert!(phases[1].ops >= 1);
    }
}
