//! `replication-bench failover`: a create storm while the leader of group 0 is SIGKILLed
//! every few seconds and restarted (same store, same address) a second later. Reports
//! the pauses the storm's threads saw around each kill, the creates acknowledged, the
//! ambiguous errors and the others; then checks that every acknowledged create exists
//! and runs `cluster check`.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use cairn_cluster::admin::ClusterCheck;
use cairn_cluster::{Client, ClientOptions};
use clap::Args;
use serde::Serialize;

use super::group::Cluster;
use super::probe::Prober;
use super::storm::{longest_gap, quantile, Counts, Gap, Storm, ThreadLog, Verdict};
use super::{Common, SyncMode};

/// Replicas per group.
const REPLICAS: u32 = 3;
/// Longest a status call may take.
const STATUS_TIMEOUT: Duration = Duration::from_millis(500);
/// Longest wait for a group to have a leader, or every replica up, before a kill; and
/// for a new leader and the restart after one.
const LEADER_LIMIT: Duration = Duration::from_secs(30);
/// Longest wait for the groups to settle after the storm.
const SETTLE_LIMIT: Duration = Duration::from_secs(120);
/// Each server's time to answer `cluster check`'s dumps.
const CHECK_TIMEOUT: Duration = Duration::from_secs(120);
/// Pauses longer than this are listed with their times, to look up in the logs.
const LONG_PAUSE: f64 = 2.0;

/// Arguments of `replication-bench failover`.
#[derive(Args, Debug, Clone)]
pub struct FailoverArgs {
    /// Groups of 3 replicas; the threads' directories are spread over them, and the
    /// leader of group 0 is the one killed
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub groups: u32,
    /// Threads creating files, one at a time each, in a directory of its own
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub threads: u32,
    /// Seconds between kills (the first comes this long after the storm starts)
    #[arg(long, default_value_t = 3.0)]
    pub every: f64,
    /// Kills
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub kills: u32,
    /// Seconds a killed leader stays down before it is started again
    #[arg(long, default_value_t = 1.0)]
    pub down: f64,
    /// When the servers' changes are durable
    #[arg(long, value_enum, default_value = "always")]
    pub sync: SyncMode,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: Common,
}

/// One kill.
#[derive(Debug, Clone, Serialize)]
struct Kill {
    /// Seconds from the storm's start.
    at: f64,
    /// The replica killed, and the term it led.
    replica: usize,
    term: u64,
    /// Seconds from the kill until a replica led and served again, which, and in
    /// which term (the killed one, restarted, if it took up its term again before the
    /// others elected another).
    leader_after: f64,
    leader: usize,
    leader_term: u64,
    /// Seconds from the kill to the restart.
    restarted_after: f64,
    /// Each thread's longest time without an acknowledged create around this kill
    /// (of the gaps between acknowledged creates that end from the kill to the next
    /// one), seconds.
    pauses: Vec<f64>,
    /// The longest of them: from and to, seconds of the storm's clock.
    longest: (f64, f64),
}

/// The results.
#[derive(Debug, Serialize)]
struct Report {
    command: String,
    machine: String,
    groups: u32,
    replicas: u32,
    threads: u32,
    sync: SyncMode,
    every_secs: f64,
    down_secs: f64,
    /// When the storm started (the zero of its clock), seconds since the epoch.
    started_unix: f64,
    storm_secs: f64,
    counts: Counts,
    creates_per_sec: f64,
    /// Per kill, the longest pause of any thread: p50, p99, max (seconds).
    pause: [f64; 3],
    /// Over every (thread, kill): p50, p99, max (seconds).
    thread_pause: [f64; 3],
    /// Seconds from a kill until a replica led again: p50, max.
    leader_again: [f64; 2],
    /// Kills after which another replica was elected (in the others the killed one,
    /// restarted, won the election).
    elected: usize,
    /// Acknowledged creates' latency: p50, p99 (milliseconds).
    latency_ms: [f64; 2],
    kills: Vec<Kill>,
    verdict: Verdict,
    check: ClusterCheck,
}

/// Runs `replication-bench failover`.
pub(super) fn run(a: &FailoverArgs) -> Result<()> {
    ensure!(
        a.every > a.down && a.down > 0.0 && a.every <= 3600.0,
        "--every must be longer than --down, which must be positive (and --every at most an hour)"
    );
    super::prepare_work(&a.common.dir)?;
    let machine = super::machine_line();
    let exe = super::exe()?;
    let mut cluster = Cluster::start(&exe, &a.common.dir, (a.groups, REPLICAS), a.sync.word())?;
    let (ca, cert, key) = cluster.status_tls();
    let prober = Prober::new(&cluster.cfg, (&ca, &cert, &key), STATUS_TIMEOUT)?;
    for g in 0..cluster.groups() {
        prober.wait_leader(g, LEADER_LIMIT)?;
    }
    let client = Client::with_config(cluster.cfg.clone(), ClientOptions::default())?;
    let dirs = (0..a.threads)
        .map(|t| super::dir_on_group(&client, &format!("t{t}"), t % a.groups, a.groups))
        .collect::<Result<Vec<u64>>>()?;
    eprintln!(
        "replication-bench failover: {} group(s) of {REPLICAS}, sync {}, {} threads; {} kills of group 0's leader, every {} s",
        a.groups, a.sync.word(), a.threads, a.kills, a.every
    );
    // Bounded: the kills, and as long again for waits between them.
    let limit = Duration::from_secs_f64(2.0 * a.every * f64::from(a.kills + 1) + 300.0);
    let storm = Storm::start(&client, &dirs, None, limit);
    let started_unix = super::unix_now();
    let mut kills = killer(&mut cluster, &prober, a, &storm)?;
    let storm_end = storm.now();
    let logs = storm.finish()?;
    drop(client);
    for g in 0..cluster.groups() {
        prober.wait_settled(g, SETTLE_LIMIT)?;
    }
    let fresh = Client::with_config(cluster.cfg.clone(), ClientOptions::default())?;
    let verdict = super::storm::verify(&fresh, &logs)?;
    let check = cairn_cluster::admin::check(&cluster.cfg, CHECK_TIMEOUT)?;
    drop(fresh);
    drop(cluster);
    pauses(&mut kills, &logs, storm_end);
    let report = summarize(
        a,
        machine,
        (kills, &logs, (started_unix, storm_end)),
        verdict,
        check,
    );
    print!("{}", markdown(&report));
    super::write_json(a.common.json.as_deref(), &report)?;
    ensure!(
        report.verdict.lost == 0,
        "{} acknowledged creates lost (first: {}); the stores are kept in {}",
        report.verdict.lost,
        report.verdict.lost_names.join(", "),
        a.common.dir.display()
    );
    super::finish_work(&a.common)
}

/// The kills, one every `--every` seconds: waits until every replica of group 0
/// answers and one leads, SIGKILLs that one, and starts it again after `--down`
/// seconds; meanwhile notes when another replica leads. Ends `--every` seconds after
/// the last kill.
fn killer(
    cluster: &mut Cluster,
    prober: &Prober,
    a: &FailoverArgs,
    storm: &Storm,
) -> Result<Vec<Kill>> {
    let every = Duration::from_secs_f64(a.every);
    let mut kills = Vec::new();
    let mut next = Instant::now() + every;
    for k in 0..a.kills {
        wait_until(cluster, next)?;
        all_up(prober, cluster)?;
        let (l, st) = prober.wait_leader(0, LEADER_LIMIT)?;
        let (at, t) = (storm.now(), Instant::now());
        cluster.kill(0, l)?;
        let (restarted, led) = recover(cluster, prober, (l, st.term), a.down, t)?;
        eprintln!(
            "  kill {}/{}: replica {l} (term {}); replica {} led (term {}) after {:.2} s",
            k + 1,
            a.kills,
            st.term,
            led.0,
            led.1,
            led.2
        );
        kills.push(Kill {
            at: at as f64 / 1e6,
            replica: l,
            term: st.term,
            leader_after: led.2,
            leader: led.0,
            leader_term: led.1,
            restarted_after: restarted,
            pauses: Vec::new(),
            longest: (0.0, 0.0),
        });
        next = t + every;
    }
    wait_until(cluster, next)?;
    Ok(kills)
}

/// Sleeps until `t`, checking that no server exited on its own.
fn wait_until(cluster: &mut Cluster, t: Instant) -> Result<()> {
    while Instant::now() < t {
        cluster.check_alive()?;
        std::thread::sleep((t - Instant::now()).min(Duration::from_millis(100)));
    }
    Ok(())
}

/// Waits until every replica of group 0 answers status (at most [`LEADER_LIMIT`]).
fn all_up(prober: &Prober, cluster: &mut Cluster) -> Result<()> {
    let t = Instant::now();
    loop {
        let st = prober.group(0);
        if st.iter().all(Result::is_ok) {
            return Ok(());
        }
        cluster.check_alive()?;
        ensure!(
            t.elapsed() < LEADER_LIMIT,
            "a replica of group 0 did not answer within {} s of its restart: {}",
            LEADER_LIMIT.as_secs(),
            st.iter()
                .filter_map(|s| s.as_ref().err().map(|e| format!("{e:#}")))
                .collect::<Vec<_>>()
                .join("; ")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// After replica `l` of group 0, leader in term `term`, was killed at `t`: starts it
/// again `down` seconds after `t`, and watches for a replica that leads and serves
/// again: another one (of a higher term), or `l` itself once restarted (a replica
/// that comes back before the others' election takes up its term again). Returns the
/// seconds to the restart and (the leader, its term, seconds to it).
fn recover(
    cluster: &mut Cluster,
    prober: &Prober,
    (l, term): (usize, u64),
    down: f64,
    t: Instant,
) -> Result<(f64, (usize, u64, f64))> {
    let (mut restarted, mut led) = (None, None);
    loop {
        let s = t.elapsed().as_secs_f64();
        if restarted.is_none() && s >= down {
            cluster.restart(0, l)?;
            restarted = Some(s);
        }
        if led.is_none() {
            for r in (0..prober.replicas(0)).filter(|&r| r != l || restarted.is_some()) {
                if let Ok(st) = prober.replica(0, r) {
                    if st.role == "leader" && (st.term > term || r == l) {
                        led = Some((r, st.term, t.elapsed().as_secs_f64()));
                        break;
                    }
                }
            }
        }
        if let (Some(r), Some(led)) = (restarted, led) {
            return Ok((r, led));
        }
        cluster.check_alive()?;
        ensure!(
            t.elapsed() < LEADER_LIMIT,
            "group 0 had no serving leader within {} s of killing replica {l}",
            LEADER_LIMIT.as_secs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Each kill's pauses: per thread, the longest gap between acknowledged creates that
/// ends from the kill to the next one (to the storm's end for the last).
fn pauses(kills: &mut [Kill], logs: &[ThreadLog], storm_end: u64) {
    let ends: Vec<Vec<u64>> = logs.iter().map(ThreadLog::acked_ends).collect();
    let starts: Vec<u64> = kills.iter().map(|k| (k.at * 1e6) as u64).collect();
    for (i, k) in kills.iter_mut().enumerate() {
        let to = starts.get(i + 1).copied().unwrap_or(storm_end);
        let gaps: Vec<Gap> = ends
            .iter()
            .map(|e| longest_gap(e, 0, (starts[i], to)))
            .collect();
        k.pauses = gaps.iter().map(|g| g.len as f64 / 1e6).collect();
        if let Some(g) = gaps.iter().max_by_key(|g| g.len) {
            k.longest = (g.from as f64 / 1e6, g.to as f64 / 1e6);
        }
    }
}

/// The report from the kills, the storm's records, the check of the acknowledged
/// creates and `cluster check`'s.
fn summarize(
    a: &FailoverArgs,
    machine: String,
    (kills, logs, (started_unix, storm_end)): (Vec<Kill>, &[ThreadLog], (f64, u64)),
    verdict: Verdict,
    check: ClusterCheck,
) -> Report {
    let per_kill: Vec<f64> = kills
        .iter()
        .map(|k| k.pauses.iter().copied().fold(0.0, f64::max))
        .collect();
    let all: Vec<f64> = kills
        .iter()
        .flat_map(|k| k.pauses.iter().copied())
        .collect();
    let led: Vec<f64> = kills.iter().map(|k| k.leader_after).collect();
    let lat: Vec<f64> = logs
        .iter()
        .flat_map(|l| &l.recs)
        .filter(|r| r.errno == 0)
        .map(|r| (r.end - r.start) as f64 / 1e3)
        .collect();
    let counts = Counts::of(logs);
    let storm_secs = storm_end as f64 / 1e6;
    let q3 = |v: &[f64]| [quantile(v, 0.5), quantile(v, 0.99), quantile(v, 1.0)];
    Report {
        command: super::command_line(),
        machine,
        groups: a.groups,
        replicas: REPLICAS,
        threads: a.threads,
        sync: a.sync,
        every_secs: a.every,
        down_secs: a.down,
        started_unix,
        storm_secs,
        creates_per_sec: counts.acknowledged as f64 / storm_secs.max(1e-9),
        counts,
        pause: q3(&per_kill),
        thread_pause: q3(&all),
        leader_again: [quantile(&led, 0.5), quantile(&led, 1.0)],
        elected: kills.iter().filter(|k| k.leader != k.replica).count(),
        latency_ms: [quantile(&lat, 0.5), quantile(&lat, 0.99)],
        kills,
        verdict,
        check,
    }
}

/// The report as Markdown.
fn markdown(r: &Report) -> String {
    let s = super::secs;
    let mut out = format!("`{}`\n\n{}\n\n", r.command, r.machine);
    out.push_str(
        "| groups × replicas | sync | threads | kills, every | creates acknowledged | creates/s | ambiguous (EIO) | other errors | pause p50 | pause p99 | pause max | a leader again after, p50 / max |\n\
         |---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let _ = writeln!(
        out,
        "| {} × {} | {} | {} | {}, {} | {} | {:.0} | {} | {} | {} | {} | {} | {} / {} |",
        r.groups,
        r.replicas,
        r.sync.word(),
        r.threads,
        r.kills.len(),
        s(r.every_secs),
        r.counts.acknowledged,
        r.creates_per_sec,
        r.counts.ambiguous,
        r.counts.others(),
        s(r.pause[0]),
        s(r.pause[1]),
        s(r.pause[2]),
        s(r.leader_again[0]),
        s(r.leader_again[1]),
    );
    let _ = writeln!(
        out,
        "\npause: per kill, the longest time a thread went without an acknowledged create \
         (of the gaps that end from the kill to the next one); per thread and kill: p50 {}, \
         p99 {}, max {}. Acknowledged creates' latency: p50 {:.2} ms, p99 {:.2} ms.",
        s(r.thread_pause[0]),
        s(r.thread_pause[1]),
        s(r.thread_pause[2]),
        r.latency_ms[0],
        r.latency_ms[1]
    );
    let _ = writeln!(
        out,
        "Another replica was elected after {} of the {} kills; after the others the killed \
         replica, restarted, won the election.",
        r.elected,
        r.kills.len()
    );
    if !r.counts.other.is_empty() {
        let e: Vec<String> = r
            .counts
            .other
            .iter()
            .map(|(e, n)| format!("errno {e}: {n}"))
            .collect();
        let _ = writeln!(out, "other errors: {}", e.join(", "));
    }
    for (i, k) in r.kills.iter().enumerate() {
        let p = k.pauses.iter().copied().fold(0.0, f64::max);
        if p > LONG_PAUSE {
            let _ = writeln!(
                out,
                "pause over {}: kill {} (of replica {} at {:.2} s, {}): no create acknowledged from {:.2} s to {:.2} s ({} to {})",
                s(LONG_PAUSE),
                i + 1,
                k.replica,
                k.at,
                super::utc(r.started_unix + k.at),
                k.longest.0,
                k.longest.1,
                super::utc(r.started_unix + k.longest.0),
                super::utc(r.started_unix + k.longest.1),
            );
        }
    }
    let v = &r.verdict;
    let _ = writeln!(
        out,
        "\nacknowledged creates lost: {} (of {} acknowledged; {} ambiguous, {} of them done; {} unexpected names)",
        v.lost, v.acknowledged, v.ambiguous, v.ambiguous_done, v.unexpected
    );
    if let Some((a, b)) = v.lost_between {
        let near: Vec<String> = r.kills.iter().map(|k| format!("{:.2}", k.at)).collect();
        let _ = writeln!(
            out,
            "lost creates were acknowledged from {a:.2} s to {b:.2} s of the storm; kills at {} s",
            near.join(", ")
        );
    }
    out.push_str(&check_line(&r.check));
    out
}

/// `cluster check`'s verdict as a line (and its problems, each on a line).
pub(super) fn check_line(c: &ClusterCheck) -> String {
    let mut out = String::new();
    if c.problems.is_empty() {
        let _ = writeln!(
            out,
            "cluster check: consistent ({} partitions, {} entries, {} inodes)",
            c.partitions, c.entries, c.inodes
        );
    } else {
        let _ = writeln!(out, "cluster check: {} problem(s)", c.problems.len());
        for p in c.problems.iter().take(20) {
            let _ = writeln!(out, "  problem: {p}");
        }
    }
    out
}
