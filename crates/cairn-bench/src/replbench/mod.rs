//! `cairn replication-bench`: what replication costs and what it buys, on real
//! processes (each replica a `cairn serve` process on a loopback port, mutual TLS):
//!
//! - `failover`: a create storm while the leader of group 0 is SIGKILLed and
//!   restarted again and again: the pauses the clients saw, the errors, and a check
//!   that no acknowledged create was lost;
//! - `cost`: creates/s and creates per server-CPU-second of groups of 3 replicas
//!   against groups of 1, under `--sync never` and `--sync always`, interleaved;
//! - `catchup`: a replica that comes back empty after its group holds a million
//!   entries: how long until it has caught up, and what the clients saw meanwhile.
//!
//! The processes are started and stopped through `crate::servers` (as `cluster-bench`
//! does), the cost's clients are `cluster-bench`'s client processes, the failover's and
//! catch-up's clients threads of this process (`storm`), and each replica's status
//! comes from the replica itself (`probe`).

mod catchup;
mod cost;
mod failover;
mod group;
mod probe;
mod storm;

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use cairn_cluster::giga::dir_home;
use cairn_cluster::Client;
use cairn_fs::{Cred, FileSystem, ROOT};
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;

pub use catchup::CatchUpArgs;
pub use cost::CostArgs;
pub use failover::FailoverArgs;

/// What `cairn replication-bench --help` says.
pub const ABOUT: &str = "\
Measure replication on real processes: each replica a `cairn serve` process on a loopback
port, groups of replicas kept by Raft, mutual TLS with certificates made for the run (as
`cairn cluster init-certs --replicas R` makes them). Three experiments:

  failover  a create storm (--threads threads of this process, each creating files one by
            one in a directory of its own) while the leader of group 0 is SIGKILLed every
            --every seconds and restarted a second later, --kills times; reports the
            pauses the threads saw around each kill (p50, p99, max), the creates
            acknowledged, the ambiguous errors (EIO: a create whose outcome the client
            could not learn; creates carry tokens and are sent again, so this stays 0) and
            other errors; then checks with a fresh client that every acknowledged create
            exists (`acknowledged creates lost: 0`, else the exit status is 1) and runs
            `cluster check`.
  cost      groups of 3 replicas against groups of 1 (--groups groups), under --sync never
            and always, interleaved and repeated --rounds times: creates/s of --clients
            client processes for --seconds, and creates per server-CPU-second (user +
            system time of every server process, from /proc).
  catch-up  one group of 3 holding --entries entries (made through the clients' streamed
            creates); a follower is killed, its store deleted, and started empty while a
            client creates at --rate a second: seconds until its applied index reaches the
            leader's, whether it got a snapshot, and the client's creates/s and longest
            pause during the catch-up against before.

Each prints a Markdown table (and writes JSON with --json). Every phase has a deadline;
the servers are stopped on every way out. The work directory (--dir) must be new or
empty; it is removed at the end unless --keep (then it holds every replica's store and
log).";

/// Arguments of `cairn replication-bench`.
#[derive(Args, Debug)]
pub struct ReplBenchArgs {
    /// The experiment
    #[command(subcommand)]
    pub experiment: Experiment,
}

/// The experiments of `cairn replication-bench`.
#[derive(Subcommand, Debug)]
pub enum Experiment {
    /// A create storm while group 0's leader is killed and restarted, again and again
    Failover(FailoverArgs),
    /// Creates/s and creates per server-CPU-second: 3 replicas against 1
    Cost(CostArgs),
    /// A replica that comes back empty: how long until it has caught up
    #[command(name = "catch-up")]
    CatchUp(CatchUpArgs),
}

/// Options every experiment takes.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Work directory for the replicas' stores and logs: new or empty; removed at the
    /// end unless --keep
    #[arg(long, default_value = "./cairn-replication-bench")]
    pub dir: PathBuf,
    /// Also write the results as JSON to this file
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Keep the work directory (stores, server logs, certificates)
    #[arg(long)]
    pub keep: bool,
}

/// `--sync` of the servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    /// A reply waits until the change is on disk
    Always,
    /// Replies don't wait for the disk
    Never,
}

impl SyncMode {
    /// The word `cairn serve --sync` takes.
    fn word(self) -> &'static str {
        match self {
            SyncMode::Always => "always",
            SyncMode::Never => "never",
        }
    }
}

/// Runs `cairn replication-bench`.
pub fn run(args: &ReplBenchArgs) -> Result<()> {
    match &args.experiment {
        Experiment::Failover(a) => failover::run(a),
        Experiment::Cost(a) => cost::run(a),
        Experiment::CatchUp(a) => catchup::run(a),
    }
}

/// The running binary, which answers `serve` and `cluster-bench`'s client command.
fn exe() -> Result<PathBuf> {
    std::env::current_exe().context("finding this executable")
}

/// Makes the work directory, which must be new or empty (the run removes only what
/// it made).
fn prepare_work(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let has_entries = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .next()
        .is_some();
    ensure!(
        !has_entries,
        "--dir {} is not empty; give a new or empty directory",
        dir.display()
    );
    Ok(())
}

/// Removes the work directory at the end of a run, unless `--keep`.
fn finish_work(c: &Common) -> Result<()> {
    if c.keep {
        eprintln!("replication-bench: kept {}", c.dir.display());
        return Ok(());
    }
    std::fs::remove_dir_all(&c.dir).with_context(|| format!("removing {}", c.dir.display()))
}

/// The machine and its load, for reports.
fn machine_line() -> String {
    let load = std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split(' ')
        .next()
        .unwrap_or("?")
        .to_string();
    let m = crate::machine();
    format!(
        "{} CPUs, {} GiB, kernel {}; load average at the start {load}",
        m.cpus,
        m.memory_bytes.unwrap_or(0) >> 30,
        m.kernel.unwrap_or_default(),
    )
}

/// This process's command line.
fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// Writes `v` as JSON to `path`, if given.
fn write_json<T: Serialize>(path: Option<&Path>, v: &T) -> Result<()> {
    if let Some(p) = path {
        let text = serde_json::to_string_pretty(v)?;
        std::fs::write(p, text).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// Makes a directory at the root whose home is group `group` of `groups` (named
/// `{stem}-{j}` for the first j that lands there); returns its inode.
fn dir_on_group(client: &Client, stem: &str, group: u32, groups: u32) -> Result<u64> {
    let name = (0..10_000u32)
        .map(|j| format!("{stem}-{j}"))
        .find(|n| dir_home(ROOT, n.as_bytes(), groups) == group)
        .with_context(|| format!("no directory name for group {group}"))?;
    let d = client
        .mkdir(&Cred::ROOT, ROOT, name.as_bytes(), 0o755)
        .map_err(|e| anyhow::anyhow!("mkdir /{name} on the cluster: {e}"))?;
    Ok(d.ino)
}

/// Seconds as text with a precision that suits them.
fn secs(s: f64) -> String {
    if s < 10.0 {
        format!("{s:.2} s")
    } else {
        format!("{s:.1} s")
    }
}

/// The median of `v` (of an even count, the mean of the middle two; 0 if empty).
fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// Seconds since the epoch, now.
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Seconds since the epoch as UTC `YYYY-MM-DDTHH:MM:SS.mmmZ`, as the servers' logs
/// write their times.
fn utc(unix: f64) -> String {
    let ms = (unix.max(0.0) * 1000.0).round() as i64;
    let (days, ms_of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (h, mi, sec, milli) = (
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1000 % 60,
        ms_of_day % 1000,
    );
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{sec:02}.{milli:03}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_times() {
        assert_eq!(utc(0.0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(951_782_400.5), "2000-02-29T00:00:00.500Z");
        assert_eq!(utc(1_764_426_518.25), "2025-11-29T14:28:38.250Z");
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
