//! `replication-bench catch-up`: one group of 3 replicas is filled with many entries
//! (`cluster-bench`'s client processes, streamed creates); then a follower is killed,
//! its store deleted, and it is started empty while a client thread creates at a modest
//! rate. Reports the seconds until the follower's applied index reaches the leader's,
//! whether it was sent a snapshot, and the client's creates/s and longest pause during
//! the catch-up against before.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use cairn_cluster::admin::ClusterCheck;
use cairn_cluster::{Client, ClientOptions};
use clap::Args;
use serde::Serialize;

use super::group::Cluster;
use super::probe::Prober;
use super::storm::{longest_gap, present, Storm, ThreadLog, Verdict};
use super::{Common, SyncMode};
use crate::cluster::{collect_clients, spawn_client, ClientSpawn};
use crate::servers::Kids;

/// Longest a status call may take (a replica busy installing a snapshot may be slow).
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait for a leader.
const LEADER_LIMIT: Duration = Duration::from_secs(30);
/// Longest wait for the group to settle after the fill and after the catch-up.
const SETTLE_LIMIT: Duration = Duration::from_secs(600);
/// How often the catch-up is polled.
const POLL: Duration = Duration::from_millis(100);
/// Each server's time to answer `cluster check`'s dumps.
const CHECK_TIMEOUT: Duration = Duration::from_secs(300);

/// Arguments of `replication-bench catch-up`.
#[derive(Args, Debug, Clone)]
pub struct CatchUpArgs {
    /// Entries (files) the group holds before a follower comes back empty
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub entries: u64,
    /// Directories the entries are made in, by a client process each
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub dirs: u32,
    /// Threads of each filling client process
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub fill_threads: u32,
    /// Creates a second of the client thread that runs before and during the catch-up
    #[arg(long, default_value_t = 200.0)]
    pub rate: f64,
    /// Seconds that client runs before the follower is stopped (the "before" figures)
    #[arg(long, default_value_t = 10.0)]
    pub before: f64,
    /// Longest the catch-up may take, seconds
    #[arg(long, default_value_t = 1800.0)]
    pub limit: f64,
    /// When the servers' changes are durable
    #[arg(long, value_enum, default_value = "always")]
    pub sync: SyncMode,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: Common,
}

/// The client thread's figures over one stretch of time.
#[derive(Debug, Clone, Default, Serialize)]
struct Stretch {
    secs: f64,
    acknowledged: u64,
    failed: u64,
    creates_per_sec: f64,
    longest_pause_secs: f64,
}

/// The results.
#[derive(Debug, Serialize)]
struct Report {
    command: String,
    machine: String,
    sync: SyncMode,
    entries: u64,
    fill_secs: f64,
    fill_creates_per_sec: f64,
    /// Creates of the fill that failed with EIO (a leader change) and were sent again.
    fill_ambiguous: u64,
    /// The group's term once filled (1: no election since the first).
    term_after_fill: u64,
    /// The leader's applied index when the follower was stopped.
    applied_at_stop: u64,
    /// Replica killed (and its leader then).
    follower: usize,
    leader: usize,
    /// Seconds from its kill to its start, empty (its store deleted meanwhile).
    down_secs: f64,
    /// Seconds from the start of the empty follower until it answered status, and
    /// until its applied index reached the leader's.
    answered_secs: f64,
    catch_up_secs: f64,
    snapshots_installed: u64,
    rate: f64,
    before: Stretch,
    during: Stretch,
    verdict: Verdict,
    check: ClusterCheck,
}

/// Runs `replication-bench catch-up`.
pub(super) fn run(a: &CatchUpArgs) -> Result<()> {
    ensure!(
        a.rate > 0.0 && a.before > 0.0 && a.limit > 0.0 && a.limit <= 86_400.0,
        "--rate, --before and --limit must be positive (--limit at most a day)"
    );
    super::prepare_work(&a.common.dir)?;
    let machine = super::machine_line();
    let exe = super::exe()?;
    let mut cluster = Cluster::start(&exe, &a.common.dir, (1, 3), a.sync.word())?;
    let (ca, cert, key) = cluster.status_tls();
    let prober = Prober::new(&cluster.cfg, (&ca, &cert, &key), STATUS_TIMEOUT)?;
    prober.wait_leader(0, LEADER_LIMIT)?;
    let client = Client::with_config(cluster.cfg.clone(), ClientOptions::default())?;
    eprintln!(
        "replication-bench catch-up: filling a group of 3 (sync {}) with {} entries",
        a.sync.word(),
        a.entries
    );
    let (fill, fill_secs, fill_ambiguous) = fill(&cluster, &client, a)?;
    prober.wait_settled(0, SETTLE_LIMIT)?;
    let term_after_fill = prober.wait_leader(0, LEADER_LIMIT)?.1.term;
    eprintln!(
        "  filled in {fill_secs:.1} s ({:.0} creates/s; {fill_ambiguous} creates sent again after EIO; term {term_after_fill})",
        a.entries as f64 / fill_secs
    );
    let paced = super::dir_on_group(&client, "paced", 0, 1)?;
    let limit = Duration::from_secs_f64(a.before + a.limit + 300.0);
    let storm = Storm::start(&client, &[paced], Some(a.rate), limit);
    std::thread::sleep(Duration::from_secs_f64(a.before));
    let caught = catch_up(&mut cluster, &prober, &storm, a)?;
    let end = storm.now();
    let logs = storm.finish()?;
    drop(client);
    prober.wait_settled(0, SETTLE_LIMIT)?;
    let fresh = Client::with_config(cluster.cfg.clone(), ClientOptions::default())?;
    let mut verdict = super::storm::verify(&fresh, &logs)?;
    for &(dir, ref prefix, n) in &fill {
        let (seen, unexpected) = present(&fresh, dir, prefix, n as usize)?;
        let lost = seen.iter().filter(|s| !**s).count() as u64;
        verdict.acknowledged += n;
        verdict.lost += lost;
        verdict.unexpected += unexpected;
    }
    eprintln!("  checked the acknowledged creates; running cluster check");
    let check = cairn_cluster::admin::check(&cluster.cfg, CHECK_TIMEOUT)?;
    drop(fresh);
    drop(cluster);
    let report = Report {
        command: super::command_line(),
        machine,
        sync: a.sync,
        entries: a.entries,
        fill_secs,
        fill_creates_per_sec: a.entries as f64 / fill_secs,
        fill_ambiguous,
        term_after_fill,
        applied_at_stop: caught.applied_at_stop,
        follower: caught.follower,
        leader: caught.leader,
        answered_secs: caught.answered,
        catch_up_secs: caught.secs,
        snapshots_installed: caught.snapshots,
        rate: a.rate,
        before: stretch(&logs, (0, caught.stopped_at)),
        down_secs: (caught.restarted_at - caught.stopped_at) as f64 / 1e6,
        during: stretch(&logs, (caught.restarted_at, end)),
        verdict,
        check,
    };
    print!("{}", markdown(&report));
    super::write_json(a.common.json.as_deref(), &report)?;
    ensure!(
        report.verdict.lost == 0,
        "{} acknowledged creates lost; the stores are kept in {}",
        report.verdict.lost,
        a.common.dir.display()
    );
    super::finish_work(&a.common)
}

/// A filled directory: its inode, its names' prefix and how many it holds.
type Filled = (u64, String, u64);

/// Fills the group with `--entries` files in `--dirs` directories, a client process
/// each (a create that fails with EIO, its leader changing, is sent again); returns
/// the directories, the seconds it took and the creates sent again.
fn fill(cluster: &Cluster, client: &Client, a: &CatchUpArgs) -> Result<(Vec<Filled>, f64, u64)> {
    let exe = super::exe()?;
    let n = u64::from(a.dirs);
    let mut dirs = Vec::new();
    for k in 0..a.dirs {
        let ino = super::dir_on_group(client, &format!("fill{k}"), 0, 1)?;
        // The first directory takes the remainder.
        let files = a.entries / n + if k == 0 { a.entries % n } else { 0 };
        dirs.push((ino, format!("e{k}-"), files));
    }
    let t = Instant::now();
    let mut kids = Kids::default();
    for (ino, prefix, files) in dirs.iter().filter(|d| d.2 > 0) {
        kids.0.push(spawn_client(
            &exe,
            &ClientSpawn {
                file: &cluster.file,
                dir_ino: *ino,
                files: *files,
                prefix: prefix.clone(),
                threads: a.fill_threads,
                creates: "stream",
                insecure: false,
                seconds: None,
                retry_ambiguous: true,
            },
        )?);
    }
    // Bounded: 200 creates a second would be far slower than any run so far.
    let limit = Duration::from_secs(600 + a.entries / 200);
    let (results, _) = collect_clients(kids, limit)?;
    let ambiguous = results.iter().map(|r| r.ambiguous).sum();
    Ok((dirs, t.elapsed().as_secs_f64(), ambiguous))
}

/// What [`catch_up`] saw.
struct CaughtUp {
    follower: usize,
    leader: usize,
    applied_at_stop: u64,
    /// When the follower was killed and when it was started empty, µs of the storm's
    /// clock.
    stopped_at: u64,
    restarted_at: u64,
    answered: f64,
    secs: f64,
    snapshots: u64,
}

/// Kills a follower (SIGKILL), deletes its store, starts it empty, and polls until its
/// applied index reaches the leader's (at most `--limit`).
fn catch_up(
    cluster: &mut Cluster,
    prober: &Prober,
    storm: &Storm,
    a: &CatchUpArgs,
) -> Result<CaughtUp> {
    let (leader, st) = prober.wait_leader(0, LEADER_LIMIT)?;
    let follower = (leader + 1) % prober.replicas(0);
    let stopped_at = storm.now();
    cluster.kill(0, follower)?;
    cluster.wipe(0, follower)?;
    let restarted_at = storm.now();
    cluster.restart(0, follower)?;
    let t = Instant::now();
    eprintln!(
        "  replica {follower} (a follower; replica {leader} leads at applied index {}) started empty",
        st.applied
    );
    let limit = Duration::from_secs_f64(a.limit);
    let mut answered = None;
    loop {
        cluster.check_alive()?;
        let lead = prober.leader(0).map(|(_, s)| s.applied);
        if let Ok(f) = prober.replica(0, follower) {
            let s = t.elapsed().as_secs_f64();
            answered.get_or_insert(s);
            if lead.is_some_and(|l| f.applied >= l) {
                eprintln!(
                    "  caught up after {s:.1} s (applied index {}, {} snapshot(s) installed)",
                    f.applied, f.snapshots_installed
                );
                return Ok(CaughtUp {
                    follower,
                    leader,
                    applied_at_stop: st.applied,
                    stopped_at,
                    restarted_at,
                    answered: answered.unwrap_or(s),
                    secs: s,
                    snapshots: f.snapshots_installed,
                });
            }
        }
        ensure!(
            t.elapsed() < limit,
            "replica {follower} did not catch up within {} s (see {})",
            a.limit,
            cluster.log(0, follower).display()
        );
        std::thread::sleep(POLL);
    }
}

/// The client thread's figures over `(from, to]` (µs of the storm's clock): creates
/// that ended in it, and the longest gap between acknowledged ones that ended in it.
fn stretch(logs: &[ThreadLog], (from, to): (u64, u64)) -> Stretch {
    let recs = logs
        .iter()
        .flat_map(|l| &l.recs)
        .filter(|r| r.end > from && r.end <= to);
    let (mut acknowledged, mut failed) = (0, 0);
    for r in recs {
        if r.errno == 0 {
            acknowledged += 1;
        } else {
            failed += 1;
        }
    }
    let secs = to.saturating_sub(from) as f64 / 1e6;
    let longest = logs
        .iter()
        .map(|l| longest_gap(&l.acked_ends(), 0, (from, to)).len)
        .max()
        .unwrap_or(0);
    Stretch {
        secs,
        acknowledged,
        failed,
        creates_per_sec: acknowledged as f64 / secs.max(1e-9),
        longest_pause_secs: longest as f64 / 1e6,
    }
}

/// The report as Markdown.
fn markdown(r: &Report) -> String {
    let s = super::secs;
    let mut out = format!("`{}`\n\n{}\n\n", r.command, r.machine);
    out.push_str(
        "| entries | sync | fill creates/s | catch-up | snapshot installed | client creates/s, before / during | longest pause, before / during | failed creates, before / during |\n\
         |---:|---|---:|---:|---|---:|---:|---:|\n",
    );
    let _ = writeln!(
        out,
        "| {} | {} | {:.0} | {} | {} | {:.0} / {:.0} | {} / {} | {} / {} |",
        r.entries,
        r.sync.word(),
        r.fill_creates_per_sec,
        s(r.catch_up_secs),
        if r.snapshots_installed > 0 {
            format!("yes ({})", r.snapshots_installed)
        } else {
            "no".to_string()
        },
        r.before.creates_per_sec,
        r.during.creates_per_sec,
        s(r.before.longest_pause_secs),
        s(r.during.longest_pause_secs),
        r.before.failed,
        r.during.failed,
    );
    let _ = writeln!(
        out,
        "\nreplica {} (a follower) killed at the leader's applied index {}, its store deleted, \
         started empty {} later: it answered after {}, caught up after {} (applied index = \
         the leader's, polled every {} ms); the client asked for {} creates/s, before for {} \
         and during (from the start to the catch-up) for {}.",
        r.follower,
        r.applied_at_stop,
        s(r.down_secs),
        s(r.answered_secs),
        s(r.catch_up_secs),
        POLL.as_millis(),
        r.rate,
        s(r.before.secs),
        s(r.during.secs)
    );
    if r.fill_ambiguous > 0 || r.term_after_fill > 1 {
        let _ = writeln!(
            out,
            "\nduring the fill: {} create(s) failed with EIO and were sent again; the group was in term {} after it",
            r.fill_ambiguous, r.term_after_fill
        );
    }
    let v = &r.verdict;
    let _ = writeln!(
        out,
        "\nacknowledged creates lost: {} (of {} acknowledged, the fill's included; {} unexpected names)",
        v.lost, v.acknowledged, v.unexpected
    );
    out.push_str(&super::failover::check_line(&r.check));
    out
}
