//! The timed phases of one `cairn fs-bench` target ([`run_target`]): creates sampled
//! over the run (stopped by --time-limit), a reopen, stats in random order, a listing
//! and unlinks (stopped by --phase-limit); their progress on stderr, and the pinning of
//! --pin.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::memory::{self, Memory};
use super::mount::{per_file, FuseStats};
use super::targets::{name, shuffled, Target};
use super::{Sample, TargetRun};

/// Progress of a phase on stderr: rewritten in place on a terminal, a line every 10
/// seconds otherwise (a log file).
struct Progress<'a> {
    label: &'a str,
    phase: &'a str,
    n: u64,
    start: Instant,
    last: Instant,
    tty: bool,
}

impl<'a> Progress<'a> {
    fn new(label: &'a str, phase: &'a str, n: u64) -> Progress<'a> {
        let now = Instant::now();
        Progress {
            label,
            phase,
            n,
            start: now,
            last: now,
            tty: std::io::stderr().is_terminal(),
        }
    }

    /// `done` of `n` are done; `rate`: the latest rate, if the caller has one.
    fn tick(&mut self, done: u64, rate: Option<f64>) {
        if done % 1024 != 0 && done != self.n {
            return;
        }
        let every = if self.tty { 0.25 } else { 10.0 };
        if self.last.elapsed().as_secs_f64() < every && done != self.n {
            return;
        }
        self.last = Instant::now();
        let secs = self.start.elapsed().as_secs_f64();
        let rate = rate.unwrap_or(done as f64 / secs.max(1e-9));
        let left = (self.n - done) as f64 / (done as f64 / secs.max(1e-9)).max(1e-9);
        let line = format!(
            "{}: {} {done}/{} ({rate:.0}/s, {secs:.0}s, {left:.0}s left)",
            self.label, self.phase, self.n
        );
        if self.tty {
            eprint!("\r{line}    ");
            if done == self.n {
                eprintln!();
            }
        } else {
            eprintln!("{line}");
        }
    }
}

/// A CPU set holding `cpu` only.
fn one_cpu(cpu: usize) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        set
    }
}

/// The calling thread, and optionally a FUSE server's session thread, pinned to one CPU
/// while a target runs; both get their earlier CPU sets back on drop.
struct Pin {
    restore: Vec<(i32, libc::cpu_set_t)>,
}

impl Pin {
    fn new(cpu: usize, server: Option<i32>) -> Result<Pin> {
        let mut pin = Pin {
            restore: Vec::new(),
        };
        for tid in std::iter::once(0).chain(server) {
            // SAFETY: sched_{get,set}affinity with a valid cpu_set_t of the size given.
            unsafe {
                let mut old: libc::cpu_set_t = std::mem::zeroed();
                let size = std::mem::size_of::<libc::cpu_set_t>();
                if libc::sched_getaffinity(tid, size, &mut old) != 0
                    || libc::sched_setaffinity(tid, size, &one_cpu(cpu)) != 0
                {
                    bail!(
                        "pinning to CPU {cpu}: {} (without --pin nothing is pinned)",
                        std::io::Error::last_os_error()
                    );
                }
                pin.restore.push((tid, old));
            }
        }
        Ok(pin)
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        for (tid, set) in &self.restore {
            // SAFETY: as in `new`.
            unsafe {
                libc::sched_setaffinity(*tid, std::mem::size_of::<libc::cpu_set_t>(), set);
            }
        }
    }
}

/// What [`run_target`] does: `n` creates (stopped after `limit`, if given) sampled
/// `intervals` times, with the caller and the FUSE server pinned to CPU `pin` if given.
#[derive(Debug, Clone, Copy)]
pub(super) struct Phases {
    pub(super) n: u64,
    pub(super) intervals: u64,
    pub(super) pin: Option<usize>,
    pub(super) limit: Option<Duration>,
    /// The stat and unlink phases stop after this long (--phase-limit).
    pub(super) phase_limit: Option<Duration>,
}

/// Phase → request → count per file.
type PerPhase = BTreeMap<String, BTreeMap<String, f64>>;

/// The FUSE requests of each phase, per file, from the mount's counts.
struct Requests<'a> {
    stats: Option<&'a FuseStats>,
    /// The counts at the end of the phase before.
    counts: Option<BTreeMap<String, u64>>,
    /// Phase → request → count per file.
    per_phase: BTreeMap<String, BTreeMap<String, f64>>,
    /// The same for the requests the mount sent on (a cluster mount's).
    sent_per_phase: BTreeMap<String, BTreeMap<String, f64>>,
}

impl<'a> Requests<'a> {
    fn new(stats: Option<&'a FuseStats>) -> Requests<'a> {
        Requests {
            stats,
            counts: stats.and_then(FuseStats::read),
            per_phase: BTreeMap::new(),
            sent_per_phase: BTreeMap::new(),
        }
    }

    /// Phase `phase` made `k` operations: its requests since the phase before.
    fn phase_done(&mut self, phase: &str, k: u64) {
        if let (Some(s), Some(before)) = (self.stats, self.counts.as_ref()) {
            if let Some(after) = s.read() {
                self.per_phase
                    .insert(phase.to_string(), per_file(before, &after, k, false));
                self.sent_per_phase
                    .insert(phase.to_string(), per_file(before, &after, k, true));
                self.counts = Some(after);
            }
        }
    }

    /// The FUSE requests per phase, for a FUSE target, and the requests sent on per
    /// phase, for one that sent any.
    fn result(self) -> (Option<PerPhase>, Option<PerPhase>) {
        let sent = self.sent_per_phase.values().any(|k| !k.is_empty());
        (
            self.stats.map(|_| self.per_phase),
            sent.then_some(self.sent_per_phase),
        )
    }
}

/// The create phase's results.
struct Creates {
    /// Files created.
    created: u64,
    /// Its time.
    secs: Duration,
    /// The rate over each interval.
    series: Vec<Sample>,
    /// (files, time) every n / 10,000 creates, and at the end.
    marks: Vec<(u64, Duration)>,
    /// When --time-limit stopped it.
    stopped_after: Option<f64>,
}

/// Creates `n` files on `t`, sampling the rate `intervals` times, stopping after `limit`.
fn creates(
    label: &str,
    t: &mut dyn Target,
    n: u64,
    intervals: u64,
    limit: Option<Duration>,
) -> Result<Creates> {
    let step = (n / intervals).max(1);
    let mut series = Vec::new();
    // (files, time) every `fine` creates: the first and last 10% are read from it.
    let fine = (n / 10_000).max(1);
    let mut marks = vec![(0u64, Duration::ZERO)];
    let mut progress = Progress::new(label, "created", n);
    let start = Instant::now();
    let mut last = (start, 0u64);
    let mut rate = None;
    let mut stopped_after = None;
    let mut created = 0;
    while created < n {
        t.create(&name(created))
            .with_context(|| format!("{label}: create {}", name(created)))?;
        created += 1;
        let done = created;
        if done % fine == 0 {
            let elapsed = start.elapsed();
            marks.push((done, elapsed));
            if limit.is_some_and(|l| elapsed >= l) && done < n {
                stopped_after = Some(elapsed.as_secs_f64());
            }
        }
        if done % step == 0 || done == n || stopped_after.is_some() {
            let now = Instant::now();
            let r = (done - last.1) as f64 / now.duration_since(last.0).as_secs_f64().max(1e-9);
            series.push(Sample {
                seconds: now.duration_since(start).as_secs_f64(),
                files: done,
                rate: r,
            });
            last = (now, done);
            rate = Some(r);
        }
        progress.tick(done, rate);
        if stopped_after.is_some() {
            eprintln!(
                "{label}: creates stopped after {:.0} s (--time-limit), {done} files",
                start.elapsed().as_secs_f64()
            );
            break;
        }
    }
    let secs = start.elapsed();
    if marks.last().map(|m| m.0) != Some(created) {
        marks.push((created, secs));
    }
    Ok(Creates {
        created,
        secs,
        series,
        marks,
        stopped_after,
    })
}

/// Runs the phases of one target: creates, a reopen where the target has one, stats in
/// random order, a listing and unlinks.
pub(super) fn run_target(
    label: &str,
    t: &mut dyn Target,
    phases: &Phases,
    stats: Option<&FuseStats>,
) -> Result<TargetRun> {
    let Phases {
        n,
        intervals,
        pin,
        limit,
        phase_limit,
    } = *phases;
    let _pin = match pin {
        Some(cpu) => Some(Pin::new(cpu, stats.map(|s| s.pid))?),
        None => None,
    };
    let mut requests = Requests::new(stats);
    // The peak read after the target is then its own.
    crate::measure::reset_peak_rss();
    let peak_anon = t.process().map(memory::PeakAnon::start);
    let memory_of = |t: &dyn Target| t.process().and_then(Memory::of);
    let c = creates(label, t, n, intervals, limit)?;
    let n = c.created;
    let (first_10pct_rate, last_10pct_rate) = tenths(&c.marks, n);
    requests.phase_done("create", n);
    let memory_after_create = memory_of(t);
    let index_bytes_per_file = t.index_bytes().map(|b| b as f64 / n as f64);
    let reopened = t.reopen()?;
    let memory_after_reopen = reopened.and_then(|_| memory_of(t));
    // (Before the shuffled order below, which is this process's, not the store's.)
    let peak_anon_bytes = peak_anon.map(|p| p.peak());

    let order = shuffled(n);
    let (stats_done, stat) = limited(label, "stat", n, phase_limit, |k| {
        let f = name(order[k as usize]);
        t.stat(&f).with_context(|| format!("{label}: stat {f}"))
    })?;
    drop(order);
    requests.phase_done("stat", stats_done.max(1));

    let t0 = Instant::now();
    let listed = t.list()?;
    let list = t0.elapsed();
    // The null server lists nothing (it stores no names).
    if listed != n && label != "null" {
        bail!("{label}: listed {listed} entries, created {n}");
    }
    requests.phase_done("list", n);

    let (unlinks_done, unlink) = limited(label, "unlinked", n, phase_limit, |k| {
        let f = name(k);
        t.unlink(&f).with_context(|| format!("{label}: unlink {f}"))
    })?;
    requests.phase_done("unlink", unlinks_done.max(1));

    let (fuse_requests, sent_requests) = requests.result();
    Ok(TargetRun {
        target: label.to_string(),
        files: n,
        stopped_after: c.stopped_after,
        create_rate: per_sec(n, c.secs),
        create_series: c.series,
        first_10pct_rate,
        last_10pct_rate,
        stat_rate: per_sec(stats_done, stat),
        list_rate: per_sec(n, list),
        unlink_rate: per_sec(unlinks_done, unlink),
        stats_done,
        unlinks_done,
        create_secs: c.secs.as_secs_f64(),
        stat_secs: stat.as_secs_f64(),
        list_secs: list.as_secs_f64(),
        unlink_secs: unlink.as_secs_f64(),
        fuse_requests,
        sent_requests,
        transport: None,
        memory_after_create,
        index_bytes_per_file,
        close_secs: reopened.map(|r| r.0.as_secs_f64()),
        reopen_secs: reopened.map(|r| r.1.as_secs_f64()),
        memory_after_reopen,
        peak_anon_bytes,
    })
}

/// `k` operations in `d`, per second.
fn per_sec(k: u64, d: Duration) -> f64 {
    k as f64 / d.as_secs_f64().max(1e-9)
}

/// Runs `op(k)` for `k` in `0..n`, its progress on stderr as `phase`, stopping once
/// `limit` (--phase-limit) has passed (looked at every 1,024 operations): the
/// operations made and the time they took.
fn limited(
    label: &str,
    phase: &str,
    n: u64,
    limit: Option<Duration>,
    mut op: impl FnMut(u64) -> Result<()>,
) -> Result<(u64, Duration)> {
    let mut progress = Progress::new(label, phase, n);
    let t0 = Instant::now();
    let mut done = 0;
    while done < n {
        if done % 1024 == 0 && limit.is_some_and(|l| t0.elapsed() >= l) {
            break;
        }
        op(done)?;
        done += 1;
        progress.tick(done, None);
    }
    Ok((done, t0.elapsed()))
}

/// The create rates over the first and the last tenth of `n` creates, from `marks`
/// ((files created, time) in ascending order, from (0, 0) to (n, total)): the first
/// tenth up to the first mark at or past n/10, the last from the last mark at or
/// before n − n/10.
pub(super) fn tenths(marks: &[(u64, Duration)], n: u64) -> (f64, f64) {
    let tenth = (n / 10).max(1);
    let end = marks.last().copied().unwrap_or((n, Duration::ZERO));
    let first = marks.iter().find(|m| m.0 >= tenth).copied().unwrap_or(end);
    let from = marks
        .iter()
        .rev()
        .find(|m| m.0 <= n.saturating_sub(tenth))
        .copied()
        .unwrap_or((0, Duration::ZERO));
    (
        per_sec(first.0, first.1),
        per_sec(end.0 - from.0, end.1.saturating_sub(from.1)),
    )
}
