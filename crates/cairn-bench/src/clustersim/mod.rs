//! `cairn cluster-sim`: GIGA+'s experiment (every server's clients create files in
//! one shared directory) at 64 and 256 servers, in one process: the real server, client
//! and split code of `cairn_cluster` on turmoil's simulated network in virtual time,
//! each server on a real cairn store in a temporary directory. Reports how the
//! directory spreads (splits and creates until it covers every server), redirects per
//! create over time, entries per server, entries moved per split, and a PROJECTION of
//! the aggregate create rate from per-operation server CPU costs measured in this
//! process (see DESIGN.md, "Simulation", for what is deterministic and how the
//! projection is made).

mod cost;
mod kills;
mod net;
mod observe;
mod sim;

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{ensure, Context, Result};
use clap::Args;
use serde::Serialize;

pub use cost::{measure, Costs};
pub use sim::{balance, simulate, CrashEvent, Sample, SimOptions, SimResult, SplitEvent};

/// What `cairn cluster-sim --help` says.
pub const ABOUT: &str = "\
Simulate GIGA+'s concurrent-create experiment at 64 and 256 servers in one process: the
real cluster servers, clients and splits on a simulated network (turmoil) in virtual time,
deterministic in its network and scheduling from --seed, each server on a real cairn store
in a temporary directory. Every server's client creates --files-per-server files in one
shared directory; --crashes K kills K servers (in-process SIGKILL: tasks dropped, unsynced
writes lost) at random points during splits and restarts them; afterwards the namespace is
checked (admin check) and every acknowledged create must be there. Reports splits until the
directory covers every server, redirects per create over time, entries per server, entries
moved per split, and a PROJECTION of the aggregate create rate from server CPU costs per
operation measured here (not a measurement of a cluster). Writes results.json and
results.md to --out.";

/// GIGA+'s published figure at 64 servers, creates/s.
pub const GIGA_RATE_64: f64 = 190_000.0;

/// Arguments of `cairn cluster-sim`.
#[derive(Args, Debug, Clone)]
pub struct ClusterSimArgs {
    /// Server counts to simulate, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "64,256")]
    pub servers: Vec<u32>,
    /// Files each server's client creates (default 1,000,000; 2,000 with --quick)
    #[arg(long)]
    pub files_per_server: Option<u64>,
    /// A small run: 2,000 files per server, split threshold 64, 2,000 operations per
    /// cost measurement
    #[arg(long)]
    pub quick: bool,
    /// Seed of the simulation's random choices
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Servers to kill and restart during splits (per server count)
    #[arg(long, default_value_t = 0)]
    pub crashes: u32,
    /// Entries a partition holds before it splits (default: the server's 8,192; 64 with
    /// --quick)
    #[arg(long)]
    pub split_threshold: Option<u64>,
    /// Partitions per server a directory splits into at most (0: no bound)
    #[arg(long, default_value_t = cairn_cluster::giga::DEFAULT_PARTITIONS_PER_SERVER)]
    pub partitions_per_server: u32,
    /// Creates each client keeps in flight
    #[arg(long, default_value_t = 16)]
    pub window: u32,
    /// Clients the cost measurement spreads its `--window` callers over (default: one
    /// each, as a server of a large simulated cluster sees its creates in flight come
    /// from that many clients; fewer share connections, and requests then share reads
    /// and writes)
    #[arg(long)]
    pub cost_clients: Option<u32>,
    /// How the cost measurement's clients send creates: stream (the default, as the
    /// simulated clients do) or single (a request each, as before streams)
    #[arg(long, default_value = "stream")]
    pub cost_creates: String,
    /// Creates (and lookups) per run of the cost measurement (default 50,000)
    #[arg(long)]
    pub cost_ops: Option<u64>,
    /// Work directory for the servers' stores (a subdirectory is made and removed)
    #[arg(long, default_value_t = std::env::temp_dir().display().to_string())]
    pub work: String,
    /// Directory for results.json and results.md
    #[arg(long, default_value = "cluster-sim-out")]
    pub out: PathBuf,
}

/// The projection for one server count.
#[derive(Clone, Debug, Serialize)]
pub struct Projection {
    /// Servers.
    pub servers: u32,
    /// Server CPU per create in the cluster, µs: c + ρ·r + μ·s.
    pub effective_create_us: f64,
    /// ρ: redirects per create (after the directory covered every server, else the
    /// whole run's).
    pub redirects_per_create: f64,
    /// μ: entries moved by splits per create (whole run).
    pub moved_per_create: f64,
    /// B: entries per server, max / mean, at the end.
    pub balance: f64,
    /// c / (c + ρ·r + μ·s) / B.
    pub efficiency: f64,
    /// servers × (1 / c) × efficiency, creates/s: a PROJECTION.
    pub projected_creates_per_sec: f64,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// How the projection is made.
    pub formula: &'static str,
    /// Costs measured here.
    pub costs: Costs,
    /// One simulation per server count.
    pub runs: Vec<SimResult>,
    /// The projections.
    pub projections: Vec<Projection>,
}

/// How the projection is made (also in results.md and DESIGN.md).
pub const FORMULA: &str = "projected aggregate creates/s = N × (1 / c) × efficiency, \
efficiency = c / (c + ρ·r + μ·s) / B, where c = server CPU per create, r = server CPU per \
redirect (measured as per lookup), s = server CPU per entry a split moves (all three measured \
in this process on this machine), ρ = redirects per create and μ = entries moved per create \
(from the simulation), B = max/mean entries per server (from the simulation): one core per \
server, clients and network not limiting, the busiest server saturating first. A \
PROJECTION, not a measurement.";

/// The projection of `r` with `c`.
pub fn project(c: &Costs, r: &SimResult) -> Projection {
    let rho = r
        .redirects_per_create_after_cover
        .unwrap_or(r.redirects_per_create);
    let mu = if r.creates == 0 {
        0.0
    } else {
        r.entries_moved as f64 / r.creates as f64
    };
    let eff_us = c.create_us + rho * c.redirect_us + mu * c.split_entry_us;
    let b = if r.balance_max_over_mean > 0.0 {
        r.balance_max_over_mean
    } else {
        1.0
    };
    let efficiency = if eff_us > 0.0 {
        c.create_us / eff_us / b
    } else {
        0.0
    };
    let rate = if c.create_us > 0.0 {
        r.servers as f64 * (1e6 / c.create_us) * efficiency
    } else {
        0.0
    };
    Projection {
        servers: r.servers,
        effective_create_us: eff_us,
        redirects_per_create: rho,
        moved_per_create: mu,
        balance: b,
        efficiency,
        projected_creates_per_sec: rate,
    }
}

/// Runs `cairn cluster-sim`.
pub fn run(args: &ClusterSimArgs) -> Result<()> {
    ensure!(!args.servers.is_empty(), "--servers: at least one count");
    let files = args
        .files_per_server
        .unwrap_or(if args.quick { 2_000 } else { 1_000_000 });
    let threshold = args.split_threshold.unwrap_or(if args.quick {
        64
    } else {
        cairn_cluster::server::DEFAULT_SPLIT_THRESHOLD
    });
    let cost_ops = args
        .cost_ops
        .unwrap_or(if args.quick { 2_000 } else { 50_000 });
    let work = PathBuf::from(&args.work);
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    eprintln!("measuring per-operation server CPU costs ({cost_ops} creates per run)");
    let cost_clients = args.cost_clients.unwrap_or(args.window);
    use cairn_cluster::Creates;
    let how = match args.cost_creates.parse() {
        Ok(how @ (Creates::Stream | Creates::Single)) => how,
        _ => anyhow::bail!(
            "--cost-creates takes stream or single, not {}",
            args.cost_creates
        ),
    };
    let costs = measure(
        &work,
        cost_ops,
        threshold.max(2),
        (args.window, cost_clients),
        how,
    )?;
    let mut runs = Vec::new();
    for &n in &args.servers {
        eprintln!(
            "simulating {n} servers × {files} files (threshold {threshold}, seed {}, {} crashes)",
            args.seed, args.crashes
        );
        let r = simulate(&SimOptions {
            servers: n,
            files_per_server: files,
            seed: args.seed,
            crashes: args.crashes,
            split_threshold: threshold,
            partitions_per_server: args.partitions_per_server,
            window: args.window,
            work: work.clone(),
            ack_before_durable: false,
        })
        .with_context(|| format!("the simulation of {n} servers"))?;
        eprintln!(
            "  {} creates, {} splits, covered after {:?} splits, balance {:.3}, check passed",
            r.creates, r.splits, r.splits_to_cover, r.balance_max_over_mean
        );
        runs.push(r);
    }
    let projections = runs.iter().map(|r| project(&costs, r)).collect();
    let report = Report {
        formula: FORMULA,
        costs,
        runs,
        projections,
    };
    std::fs::write(
        args.out.join("results.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    let md = markdown(&report, args);
    std::fs::write(args.out.join("results.md"), &md)?;
    print!("{md}");
    Ok(())
}

/// The Markdown report.
pub fn markdown(r: &Report, args: &ClusterSimArgs) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "# cairn cluster-sim\n");
    let _ = writeln!(
        m,
        "Seed {}, {} crashes per run, window {} creates per client{}.\n",
        args.seed,
        args.crashes,
        args.window,
        if args.quick { ", --quick" } else { "" }
    );
    costs_section(&mut m, &r.costs);
    runs_table(&mut m, &r.runs);
    for s in r.runs.iter().filter(|s| !s.crash_events.is_empty()) {
        kills_table(&mut m, s);
    }
    for s in &r.runs {
        samples_table(&mut m, s);
    }
    projection_section(&mut m, r);
    m
}

/// The costs measured in this process.
fn costs_section(m: &mut String, c: &Costs) {
    let _ = writeln!(
        m,
        "## Costs measured in this process (server CPU per operation)\n"
    );
    let _ = writeln!(
        m,
        "| create | redirect (≈ lookup) | per entry a split moves | runs of | callers at once | over clients | sent |\n|---|---|---|---|---|---|---|\n| {:.2} µs | {:.2} µs | {:.3} µs ({} splits at threshold {}) | {} ops | {} | {} | {} |\n",
        c.create_us,
        c.redirect_us,
        c.split_entry_us,
        c.splits,
        c.split_threshold,
        c.ops,
        c.window,
        c.clients,
        c.creates
    );
}

/// One row per simulated run.
fn runs_table(m: &mut String, runs: &[SimResult]) {
    let _ = writeln!(m, "## Simulations\n");
    let _ = writeln!(
        m,
        "| servers | files/server | creates | unknown (EIO) | splits (seen by the driver) | splits to cover | creates to cover | virtual ms to cover | redirects/create | after cover | moved/split mean (max) | remote splits (moved mean) | entries/server max/mean | partitions | kills (inside a split) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for s in runs {
        let opt = |v: Option<u64>| v.map_or("never".to_string(), |v| v.to_string());
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} ({}) | {} | {} | {} | {:.4} | {} | {:.1} ({}) | {} ({:.1}) | {:.3} | {} | {} ({}) |",
            s.servers,
            s.files_per_server,
            s.creates,
            s.creates_unknown,
            s.splits,
            s.splits_observed,
            opt(s.splits_to_cover),
            opt(s.creates_to_cover),
            opt(s.virtual_ms_to_cover),
            s.redirects_per_create,
            s.redirects_per_create_after_cover
                .map_or("-".to_string(), |v| format!("{v:.4}")),
            s.moved_per_split_mean,
            s.moved_per_split_max,
            s.remote_splits,
            s.moved_per_remote_split_mean,
            s.balance_max_over_mean,
            s.partitions,
            s.crash_events.len(),
            s.crash_events.iter().filter(|e| e.during_split).count(),
        );
    }
}

/// The kills and restarts of run `s`.
fn kills_table(m: &mut String, s: &SimResult) {
    let _ = writeln!(
        m,
        "\n### Kills, {} servers\n\n| armed at step | drawn point | killed at step | server | stopped at | inside a split | restarted at step | unsynced writes lost |\n|---|---|---|---|---|---|---|---|",
        s.servers
    );
    for e in &s.crash_events {
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            e.armed_step,
            e.drawn_point,
            e.step,
            e.server,
            e.point.as_deref().unwrap_or("between steps"),
            if e.during_split { "yes" } else { "no" },
            e.restart_step,
            e.lost_writes
        );
    }
}

/// The time series of run `s`.
fn samples_table(m: &mut String, s: &SimResult) {
    let _ = writeln!(
        m,
        "\n### Redirects per create over time, {} servers\n\n| creates | virtual ms | redirects/create (interval) | splits | partitions | servers covered |\n|---|---|---|---|---|---|",
        s.servers
    );
    for p in &s.samples {
        let _ = writeln!(
            m,
            "| {} | {} | {:.4} | {} | {} | {} |",
            p.creates,
            p.virtual_ms,
            p.redirects_per_create,
            p.splits,
            p.partitions,
            p.servers_covered
        );
    }
}

/// The projection of the aggregate create rate, and its target.
fn projection_section(m: &mut String, r: &Report) {
    let _ = writeln!(m, "\n## Projection (NOT a measurement)\n\n{}\n", r.formula);
    let _ = writeln!(
        m,
        "| servers | c + ρ·r + μ·s | ρ | μ | B | efficiency | projected creates/s | target |\n|---|---|---|---|---|---|---|---|"
    );
    for p in &r.projections {
        let target = if p.servers == 64 {
            let ok = p.projected_creates_per_sec >= 10.0 * GIGA_RATE_64 && p.balance <= 1.25;
            format!(
                "≥ {:.0} and B ≤ 1.25: {}",
                10.0 * GIGA_RATE_64,
                if ok { "met" } else { "NOT met" }
            )
        } else {
            format!(
                "B ≤ 1.25: {}",
                if p.balance <= 1.25 { "met" } else { "NOT met" }
            )
        };
        let _ = writeln!(
            m,
            "| {} | {:.2} µs | {:.4} | {:.3} | {:.3} | {:.3} | {:.0} | {} |",
            p.servers,
            p.effective_create_us,
            p.redirects_per_create,
            p.moved_per_create,
            p.balance,
            p.efficiency,
            p.projected_creates_per_sec,
            target
        );
    }
}
