//! The cluster's commands: `cairn serve` (one metadata server), `cairn cluster status`,
//! `cairn cluster check`, and the client side of `cairn mount --cluster`. The work is
//! done by `cairn_cluster`; this module parses, prints and picks exit statuses.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};

use cairn_cluster::admin::{ClusterCheck, ClusterStatus};
use cairn_cluster::server::{ServerOptions, SyncMode};
use cairn_cluster::{Client, ClientOptions, ClusterConfig};

/// Long description of `serve`.
pub const SERVE_ABOUT: &str = "\
Run one metadata server of a cluster in the foreground, until SIGINT or SIGTERM, which
stop it cleanly (no new requests, those in flight finished, the store closed).

The cluster file (TOML) lists every server, the same file on every server and client:

  [[server]]
  id = 0
  addr = \"10.0.0.1:7100\"
  [[server]]
  id = 1
  addr = \"10.0.0.2:7100\"

The server is the one whose addr is --listen (with --listen 0.0.0.0:PORT, the one with
that port). Its store (--dir) is bound to this server of this cluster on first start; a
store of another cluster or server is refused. Before answering, it finishes the
operations across servers that a crash interrupted.

Logs go to stderr; CAIRN_LOG sets what is logged (a tracing filter such as `warn`,
`info` or `cairn_cluster=debug`; default `info`).";

/// Long description of `cluster`.
pub const CLUSTER_ABOUT: &str = "\
Look at a running cluster from any machine that can reach its servers.

`status` shows each server up or down, the partitions, entries and inodes it holds,
splits done and in flight, and the largest directories with their partition counts.
`check` reads every server's rows and checks that the partitions of each directory
tile its hash space on the servers they belong to, that every entry is in the right
partition and its inode exists at its home with a matching link, and that nothing is
left half done; it exits 0 when the cluster is consistent, 2 with a report when not
(a server that does not answer is a problem too).";

/// `--sync` of `serve`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SyncArg {
    /// A reply waits until the change is on disk (concurrent requests share fsyncs)
    Always,
    /// Replies don't wait for the disk; a crash keeps a prefix of the changes
    Never,
}

/// Arguments of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Directory of this server's store (created if needed)
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// Address to listen on: this server's addr in the cluster file (IP:PORT)
    #[arg(long, value_name = "ADDR")]
    pub listen: SocketAddr,
    /// The cluster file (TOML, see above)
    #[arg(long, value_name = "FILE")]
    pub cluster: PathBuf,
    /// When a change is durable: before its reply (always), or when the OS writes it
    /// (never)
    #[arg(long, value_enum, value_name = "WHEN", default_value = "always")]
    pub sync: SyncArg,
    /// Serve Prometheus metrics over HTTP on this address (IP:PORT, path /metrics)
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Entries of a directory partition above which it is split in two (default 8192)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub split_threshold: Option<u64>,
}

/// Arguments of `cluster`.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// What to do
    #[command(subcommand)]
    pub command: ClusterCommand,
}

/// The subcommands of `cluster`.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Servers up or down, partitions, entries, splits; the largest directories
    Status {
        /// The cluster file
        #[arg(long, value_name = "FILE")]
        cluster: PathBuf,
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
        /// Seconds to wait for each server's answer
        #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
        timeout: f64,
    },
    /// Check the namespace's consistency across servers; exit status 2 if it is not
    Check {
        /// The cluster file
        #[arg(long, value_name = "FILE")]
        cluster: PathBuf,
        /// Seconds to wait for each server's answer
        #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
        timeout: f64,
    },
}

/// Reads the cluster file at `path`.
fn load(path: &Path) -> Result<ClusterConfig> {
    ClusterConfig::load(path).with_context(|| format!("cluster file {}", path.display()))
}

/// A timeout given in seconds on the command line.
fn seconds(s: f64, what: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|d| !d.is_zero())
        .with_context(|| format!("{what} must be a positive number of seconds, not {s}"))
}

/// `serve`: runs the server until SIGINT or SIGTERM.
pub fn serve(args: &ServeArgs) -> Result<()> {
    init_tracing();
    let cluster = load(&args.cluster)?;
    let mut opts = ServerOptions::new(&args.dir, args.listen, cluster);
    opts.sync = match args.sync {
        SyncArg::Always => SyncMode::Always,
        SyncArg::Never => SyncMode::Never,
    };
    opts.metrics = args.metrics;
    if let Some(n) = args.split_threshold {
        opts.split_threshold = n;
    }
    cairn_cluster::server::run_until_signal(opts)
        .with_context(|| format!("serving {} on {}", args.dir.display(), args.listen))?;
    Ok(())
}

/// Logs of the server (tracing) on stderr, filtered by `CAIRN_LOG` (default `info`).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CAIRN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal. Fails only if a subscriber is already set, which
    // then keeps logging.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
}

/// `cluster status|check`.
pub fn run(args: &ClusterArgs, out: &mut impl Write) -> Result<ExitCode> {
    match &args.command {
        ClusterCommand::Status {
            cluster,
            json,
            timeout,
        } => {
            let cfg = load(cluster)?;
            let st = cairn_cluster::admin::status(&cfg, seconds(*timeout, "--timeout")?);
            if *json {
                serde_json::to_writer_pretty(&mut *out, &st).map_err(std::io::Error::from)?;
                writeln!(out)?;
            } else {
                write_status(out, &st)?;
            }
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        ClusterCommand::Check { cluster, timeout } => {
            let cfg = load(cluster)?;
            let report = cairn_cluster::admin::check(&cfg, seconds(*timeout, "--timeout")?)
                .context("checking the cluster")?;
            write_check(out, &report)?;
            out.flush()?;
            Ok(if report.problems.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(crate::EXIT_DAMAGE)
            })
        }
    }
}

/// A directory's inode number as `ino (home N)`.
fn ino_text(ino: u64) -> String {
    format!("{ino} (home {})", ino >> cairn_cluster::giga::HOME_SHIFT)
}

/// The table of `cluster status`.
fn write_status(out: &mut impl Write, st: &ClusterStatus) -> std::io::Result<()> {
    writeln!(
        out,
        "{:>6}  {:<22} {:<5} {:>10} {:>10} {:>10} {:>7} {:>9} {:>7}",
        "server",
        "address",
        "state",
        "partitions",
        "entries",
        "inodes",
        "splits",
        "splitting",
        "intents"
    )?;
    for s in &st.servers {
        if s.up {
            writeln!(
                out,
                "{:>6}  {:<22} {:<5} {:>10} {:>10} {:>10} {:>7} {:>9} {:>7}",
                s.id,
                s.addr,
                "up",
                s.partitions,
                s.entries,
                s.inodes,
                s.splits_done,
                s.splits_in_flight,
                s.intents_pending
            )?;
        } else {
            let why = s.error.as_deref().unwrap_or("no answer");
            writeln!(out, "{:>6}  {:<22} {:<5} {why}", s.id, s.addr, "down")?;
        }
    }
    let up = st.servers.iter().filter(|s| s.up).count();
    let sum = |f: fn(&cairn_cluster::admin::ServerState) -> u64| -> u64 {
        st.servers.iter().filter(|s| s.up).map(f).sum()
    };
    writeln!(
        out,
        "{up} of {} servers up: {} partitions, {} entries, {} inodes, {} splits in flight",
        st.servers.len(),
        sum(|s| s.partitions),
        sum(|s| s.entries),
        sum(|s| s.inodes),
        sum(|s| s.splits_in_flight as u64),
    )?;
    if !st.largest.is_empty() {
        writeln!(out, "largest directories:")?;
        writeln!(
            out,
            "  {:<28} {:>10} {:>10}",
            "directory", "partitions", "entries"
        )?;
        for d in &st.largest {
            writeln!(
                out,
                "  {:<28} {:>10} {:>10}",
                ino_text(d.dir),
                d.partitions,
                d.entries
            )?;
        }
    }
    Ok(())
}

/// The report of `cluster check`.
fn write_check(out: &mut impl Write, c: &ClusterCheck) -> std::io::Result<()> {
    for p in &c.problems {
        writeln!(out, "problem: {p}")?;
    }
    let verdict = if c.problems.is_empty() {
        "consistent".to_string()
    } else {
        format!("{} problem(s) found", c.problems.len())
    };
    let down = if c.down.is_empty() {
        String::new()
    } else {
        let ids: Vec<String> = c.down.iter().map(|i| i.to_string()).collect();
        format!(" (servers down, not checked: {})", ids.join(", "))
    };
    writeln!(
        out,
        "checked {} partitions, {} entries, {} inodes{down}: {verdict}",
        c.partitions, c.entries, c.inodes
    )
}

/// `mount --cluster FILE MOUNTPOINT`: a client of the cluster served through FUSE in
/// the foreground. Refuses to mount when the root directory's server (server 0) does
/// not answer, with its error (unreachable, or reading another cluster file); other
/// servers that are down are reported, and the parts of the namespace they hold fail
/// with EIO until they are back.
pub fn mount(
    cluster_file: &Path,
    mountpoint: &Path,
    timeout: Option<f64>,
    opts: &cairn_fuse::MountOptions,
) -> Result<()> {
    let cfg = load(cluster_file)?;
    let mut copts = ClientOptions::default();
    if let Some(t) = timeout {
        copts.timeout = seconds(t, "--timeout")?;
    }
    let st = cairn_cluster::admin::status(&cfg, copts.connect_timeout.max(copts.timeout / 2));
    for s in st.servers.iter().filter(|s| !s.up) {
        let why = s.error.as_deref().unwrap_or("no answer");
        if s.id == 0 {
            bail!(
                "cannot mount {}: server 0 ({}), which holds the root directory: {why}",
                cluster_file.display(),
                s.addr
            );
        }
        eprintln!(
            "cairn: warning: server {} ({}) is down ({why}); what it holds fails with EIO until it is back",
            s.id, s.addr
        );
    }
    let client = Client::with_config(cfg, copts)
        .with_context(|| format!("connecting to the cluster of {}", cluster_file.display()))?;
    let mount = cairn_fuse::mount_fs(Box::new(client), mountpoint, opts)?;
    eprintln!(
        "cairn: cluster {} mounted on {} (Ctrl-C or `cairn umount {}` to unmount)",
        cluster_file.display(),
        mountpoint.display(),
        mountpoint.display()
    );
    mount.run()
}
