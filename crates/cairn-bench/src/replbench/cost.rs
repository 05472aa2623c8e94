//! `replication-bench cost`: what a group of 3 replicas costs against a group of 1, in
//! creates/s and in creates per server-CPU-second, under `--sync never` and `--sync
//! always`. Every cell (replicas × sync mode) starts a cluster of its own and runs
//! `cluster-bench`'s client processes for a fixed time; the cells of a round are
//! interleaved, and the order alternates from round to round. Also the CPU of each
//! group's leader alone: on one machine the replicas share its CPU, but deployed one to
//! a machine a group is bound by its busiest replica, the leader.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use cairn_cluster::{Client, ClientOptions};
use clap::Args;
use serde::Serialize;

use super::group::Cluster;
use super::probe::Prober;
use super::{Common, SyncMode};
use crate::cluster::{collect_clients, spawn_client, ClientSpawn};
use crate::servers::Kids;

/// The replica counts compared.
const REPLICA_COUNTS: [u32; 2] = [1, 3];
/// Longest wait for every group to have a leader.
const LEADER_LIMIT: Duration = Duration::from_secs(30);

/// Arguments of `replication-bench cost`.
#[derive(Args, Debug, Clone)]
pub struct CostArgs {
    /// Groups of each cluster
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub groups: u32,
    /// Client processes, each creating in a directory of its own (spread over the
    /// groups)
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub clients: u32,
    /// Threads per client process, each with a create in flight (streamed)
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub threads: u32,
    /// Seconds the clients create in each cell
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// The servers' sync modes to compare, comma-separated
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "never,always"
    )]
    pub sync: Vec<SyncMode>,
    /// Rounds of every cell
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub common: Common,
}

/// One cell's run.
#[derive(Debug, Clone, Serialize)]
struct Cell {
    round: u32,
    replicas: u32,
    sync: SyncMode,
    creates: u64,
    secs: f64,
    creates_per_sec: f64,
    server_cpu_secs: f64,
    creates_per_server_cpu_sec: f64,
    /// CPU seconds of each group's leader (every server, with 1 replica), summed: the
    /// busiest replica, whose CPU bounds a group when each replica has a machine of
    /// its own.
    leader_cpu_secs: f64,
    creates_per_leader_cpu_sec: f64,
}

/// One sync mode's comparison: medians over the rounds.
#[derive(Debug, Clone, Serialize)]
struct Ratio {
    sync: SyncMode,
    /// Creates/s with 1 and with 3 replicas, and 3 ÷ 1.
    creates_per_sec: [f64; 3],
    /// Creates per server-CPU-second with 1 and 3 replicas, and 3 ÷ 1.
    per_cpu_sec: [f64; 3],
    /// Creates per leader-CPU-second with 1 and 3 replicas, and 3 ÷ 1.
    per_leader_cpu_sec: [f64; 3],
}

/// The results.
#[derive(Debug, Serialize)]
struct Report {
    command: String,
    machine: String,
    groups: u32,
    clients: u32,
    threads: u32,
    seconds: f64,
    cells: Vec<Cell>,
    ratios: Vec<Ratio>,
}

/// Runs `replication-bench cost`.
pub(super) fn run(a: &CostArgs) -> Result<()> {
    ensure!(
        a.seconds > 0.0 && a.seconds <= 3600.0,
        "--seconds must be positive, at most an hour"
    );
    ensure!(!a.sync.is_empty(), "--sync needs a mode");
    super::prepare_work(&a.common.dir)?;
    let machine = super::machine_line();
    let exe = super::exe()?;
    let order: Vec<(u32, SyncMode)> = a
        .sync
        .iter()
        .flat_map(|&s| REPLICA_COUNTS.map(|r| (r, s)))
        .collect();
    let mut cells = Vec::new();
    for round in 0..a.rounds {
        let mut this = order.clone();
        if round % 2 == 1 {
            this.reverse();
        }
        for (replicas, sync) in this {
            eprintln!(
                "replication-bench cost: round {}, {} group(s) of {replicas}, sync {}",
                round + 1,
                a.groups,
                sync.word()
            );
            let c = run_cell(&exe, a, (replicas, sync), round)?;
            eprintln!(
                "  {:.0} creates/s, {:.0} creates per server-CPU-second",
                c.creates_per_sec, c.creates_per_server_cpu_sec
            );
            cells.push(c);
        }
    }
    let ratios = a.sync.iter().map(|&s| ratio(&cells, s)).collect();
    let report = Report {
        command: super::command_line(),
        machine,
        groups: a.groups,
        clients: a.clients,
        threads: a.threads,
        seconds: a.seconds,
        cells,
        ratios,
    };
    print!("{}", markdown(&report));
    super::write_json(a.common.json.as_deref(), &report)?;
    super::finish_work(&a.common)
}

/// One cell: a cluster of `--groups` groups of `replicas` with `sync`, the clients for
/// `--seconds`, the servers' CPU time meanwhile.
fn run_cell(
    exe: &Path,
    a: &CostArgs,
    (replicas, sync): (u32, SyncMode),
    round: u32,
) -> Result<Cell> {
    let work = a
        .common
        .dir
        .join(format!("r{replicas}-{}-{round}", sync.word()));
    std::fs::create_dir(&work).with_context(|| format!("creating {}", work.display()))?;
    let cluster = Cluster::start(exe, &work, (a.groups, replicas), sync.word())?;
    let mut leaders: Vec<(usize, usize)> = (0..cluster.groups()).map(|g| (g, 0)).collect();
    if replicas > 1 {
        let (ca, cert, key) = cluster.status_tls();
        let prober = Prober::new(&cluster.cfg, (&ca, &cert, &key), Duration::from_secs(1))?;
        for (g, l) in leaders.iter_mut() {
            *l = prober.wait_leader(*g, LEADER_LIMIT)?.0;
        }
    }
    let client = Client::with_config(cluster.cfg.clone(), ClientOptions::default())?;
    let dirs = (0..a.clients)
        .map(|k| super::dir_on_group(&client, &format!("c{k}"), k % a.groups, a.groups))
        .collect::<Result<Vec<u64>>>()?;
    drop(client);
    let cpu0 = cluster.cpu_secs()?;
    let leader0 = cluster.cpu_secs_of(&leaders)?;
    let mut kids = Kids::default();
    for (k, &dir) in dirs.iter().enumerate() {
        kids.0.push(spawn_client(
            exe,
            &ClientSpawn {
                file: &cluster.file,
                dir_ino: dir,
                files: u64::MAX / 2,
                prefix: format!("c{k}-"),
                threads: a.threads,
                creates: "stream",
                insecure: false,
                seconds: Some(a.seconds),
                retry_ambiguous: false,
            },
        )?);
    }
    let limit = Duration::from_secs_f64(a.seconds + 120.0);
    let (results, _) = collect_clients(kids, limit)?;
    let cpu = cluster.cpu_secs()? - cpu0;
    let leader_cpu = cluster.cpu_secs_of(&leaders)? - leader0;
    drop(cluster);
    std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    let creates: u64 = results.iter().map(|r| r.creates).sum();
    let secs = results.iter().map(|r| r.secs).fold(0.0, f64::max);
    Ok(Cell {
        round,
        replicas,
        sync,
        creates,
        secs,
        creates_per_sec: creates as f64 / secs.max(1e-9),
        server_cpu_secs: cpu,
        creates_per_server_cpu_sec: creates as f64 / cpu.max(1e-9),
        leader_cpu_secs: leader_cpu,
        creates_per_leader_cpu_sec: creates as f64 / leader_cpu.max(1e-9),
    })
}

/// The medians over the rounds of `sync`'s cells, and 3 replicas ÷ 1.
fn ratio(cells: &[Cell], sync: SyncMode) -> Ratio {
    let med = |r: u32, f: fn(&Cell) -> f64| {
        let v: Vec<f64> = cells
            .iter()
            .filter(|c| c.sync == sync && c.replicas == r)
            .map(f)
            .collect();
        super::median(&v)
    };
    let both = |f: fn(&Cell) -> f64| {
        let (one, three) = (med(1, f), med(3, f));
        [one, three, three / one.max(1e-9)]
    };
    Ratio {
        sync,
        creates_per_sec: both(|c| c.creates_per_sec),
        per_cpu_sec: both(|c| c.creates_per_server_cpu_sec),
        per_leader_cpu_sec: both(|c| c.creates_per_leader_cpu_sec),
    }
}

/// The report as Markdown.
fn markdown(r: &Report) -> String {
    let mut out = format!("`{}`\n\n{}\n\n", r.command, r.machine);
    let _ = writeln!(
        out,
        "{} group(s); {} client process(es) × {} threads, {} s a cell\n",
        r.groups, r.clients, r.threads, r.seconds
    );
    out.push_str(
        "| round | replicas | sync | creates | creates/s | server CPU-s | creates per server-CPU-s | leaders' CPU-s | creates per leader-CPU-s |\n\
         |---:|---:|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for c in &r.cells {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.0} | {:.1} | {:.0} | {:.1} | {:.0} |",
            c.round + 1,
            c.replicas,
            c.sync.word(),
            c.creates,
            c.creates_per_sec,
            c.server_cpu_secs,
            c.creates_per_server_cpu_sec,
            c.leader_cpu_secs,
            c.creates_per_leader_cpu_sec
        );
    }
    out.push_str(
        "\n| sync | creates/s, 1 replica | 3 replicas | 3 ÷ 1 | creates per server-CPU-s, 1 replica | 3 replicas | 3 ÷ 1 | per leader-CPU-s, 1 replica | 3 replicas | 3 ÷ 1 |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for x in &r.ratios {
        let (c, p, l) = (x.creates_per_sec, x.per_cpu_sec, x.per_leader_cpu_sec);
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.2} |",
            x.sync.word(),
            c[0],
            c[1],
            c[2],
            p[0],
            p[1],
            p[2],
            l[0],
            l[1],
            l[2]
        );
    }
    out.push_str("\n(medians over the rounds; of two, their mean)\n");
    out
}
