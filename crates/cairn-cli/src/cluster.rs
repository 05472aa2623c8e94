//! The cluster's commands: `cairn serve` (one metadata server), `cairn cluster status`,
//! `cairn cluster check`, `cairn cluster init-certs`, and the client side of
//! `cairn mount --cluster`. The work is
//! done by `cairn_cluster`; this module parses, prints and picks exit statuses.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};

use cairn_cluster::admin::{ClusterCheck, ClusterStatus, Health, ServerState};
use cairn_cluster::server::{ServerOptions, SyncMode};
use cairn_cluster::{Client, ClientOptions, ClusterConfig};

/// Long description of `serve`.
pub const SERVE_ABOUT: &str = "\
Run one metadata server of a cluster in the foreground, until SIGINT or SIGTERM, which
stop it cleanly (no new requests, those in flight finished, the store closed).

The cluster file (TOML) lists every server, the same file on every server and client:

  [tls]
  ca = \"certs/ca.pem\"                 # the cluster's CA
  client_cert = \"certs/client-0.pem\"  # this machine's client certificate (mount,
  client_key = \"certs/client-0.key\"   # cluster status/check), if it is a client
  [[server]]
  id = 0
  addr = \"10.0.0.1:7100\"
  cert = \"certs/server-0.pem\"         # server 0's certificate and key
  key = \"certs/server-0.key\"
  [[server]]
  id = 1
  addr = \"10.0.0.2:7100\"
  cert = \"certs/server-1.pem\"
  key = \"certs/server-1.key\"

Every connection is mutual TLS: a party without a certificate signed by the CA is
refused before any request is read (`cairn cluster init-certs` makes a CA and
certificates). Plain TCP needs --insecure on every server and client; it lets anyone
who reaches the port read and change everything.

A server may instead list replicas, each in a [[server.replica]] table with its own
addr, cert and key (version = 2; see docs/cluster.md). The server is the one whose
addr is --listen (with --listen 0.0.0.0:PORT, the one with that port). Its store (--dir) is bound to this server of this cluster on first start; a
store of another cluster or server is refused. Before answering, it finishes the
operations across servers that a crash interrupted.

Logs go to stderr; CAIRN_LOG sets what is logged (a tracing filter such as `warn`,
`info` or `cairn_cluster=debug`; default `info`).";

/// Long description of `cluster`.
pub const CLUSTER_ABOUT: &str = "\
Look at a running cluster from any machine that can reach its servers.

`status` shows each server up or down, the partitions, entries and inodes it holds,
splits done and in flight, and the largest directories with their partition counts
(the inodes and the largest directories need a client certificate that allows uid 0;
with another they show as `-`); for a server of several replicas, its leader and term
and each replica's role, applied index and lag. It exits 0 when the cluster is
healthy, 1 when it is degraded (a replica down or lagging, every server serving) and 2
when it is down (a server that cannot serve).
`init-certs` makes a CA and certificates for a test cluster, and a cluster file that
names them. `check` reads every server's rows (it needs a client certificate that
allows uid 0) and checks that the partitions of each directory
tile its hash space on the servers they belong to, that every entry is in the right
partition and its inode exists at its home with a matching link, and that nothing is
left half done; it also compares the replicas of each replicated server (digests of
their states at one applied index). It exits 0 when the cluster is consistent, 2 with
a report when not (a server that does not answer is a problem too; a replica that does
not answer is a note).";

/// Long description of `cluster status`.
pub const STATUS_ABOUT: &str = "\
Ask every server (every replica of a replicated server) what it holds and show it:
each server up or down, its partitions, entries, inodes, splits done and in flight and
intents pending, and the largest directories with their partition counts. The inodes
and the largest directories need a client certificate that allows uid 0; with another
they show as `-`.

For a server of several replicas, the row shows what its leader answered, then its
term and leader, and each replica's address, role (leader, follower, candidate,
learner, recovering, stopping), applied index and lag behind the leader (or down, with
the error); a last line gives the cluster's health.

Exit status:
  0  healthy: every replica of every server answered (and holds its group's log), and
     each replicated server has a leader
  1  degraded: some replica is down, lags more than 1000 entries behind its leader or
     is a learner (it has not yet received its group's log, or is being added), but
     every replicated server has a leader and a majority of its replicas up (or the
     command failed: a message on stderr)
  2  down: some server cannot serve (a server of one replica that did not answer, a
     replicated server without a leader or without a majority of its replicas up)";

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
    /// Serve Prometheus metrics over HTTP (path /metrics) on this port of 127.0.0.1, or
    /// on IP:PORT (such as 0.0.0.0:9100 to let other machines read them)
    #[arg(long, value_name = "[IP:]PORT", value_parser = metrics_addr)]
    pub metrics: Option<SocketAddr>,
    /// Plain TCP, no TLS and no authentication: anyone who reaches --listen can read
    /// and change the namespace (tests, trusted networks)
    #[arg(long)]
    pub insecure: bool,
    /// Entries of a directory partition above which it is split in two (default 8192)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub split_threshold: Option<u64>,
    /// Partitions per server a directory is split into at most; once spread, its
    /// partitions grow instead of splitting (default 8; 0: no bound)
    #[arg(long, value_name = "N")]
    pub partitions_per_server: Option<u32>,
    /// Threads that serve requests (default 1; more for a server with cores of its own)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub workers: u16,
    /// A replicated group's election timeout in milliseconds: a replica that hears no
    /// leader for this long (to 1.2 times as long) stands for election (default: the
    /// cluster file's `election_timeout_ms`, else 1000; clients read it there)
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(cairn_cluster::config::ELECTION_TIMEOUT_MS))]
    pub election_timeout: Option<u64>,
    /// A replica of a replicated group snapshots its state every N entries (default
    /// 100000)
    #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(16..))]
    pub snapshot_every: u64,
    /// How long a mount's lease session lasts past its last renewal, in seconds: the
    /// longest a mount's kernel keeps a name or attributes it was granted, and the
    /// longest a change waits for a mount that stopped answering (default 5; 0: no
    /// leases — mounts keep what they are told for their own timeouts and see others'
    /// changes that late)
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub lease_time: f64,
}

/// `--metrics`: a port (on 127.0.0.1) or IP:PORT.
fn metrics_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse()
        .map_err(|_| format!("{s:?} is neither a port nor IP:PORT"))
}

/// How a client connects: TLS (the cluster file's client certificate, or these), or
/// plain TCP.
#[derive(Debug, Args, Clone, Default)]
pub struct TlsArgs {
    /// Plain TCP, no TLS (the servers must run with --insecure too)
    #[arg(long)]
    pub insecure: bool,
    /// This client's certificate (PEM) instead of the cluster file's [tls] client_cert
    #[arg(
        long,
        value_name = "FILE",
        requires = "key",
        conflicts_with = "insecure"
    )]
    pub cert: Option<PathBuf>,
    /// The key of --cert (PEM)
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
}

/// Reads the cluster file at `path` and applies `tls`.
pub(crate) fn load_client(path: &Path, tls: &TlsArgs) -> Result<ClusterConfig> {
    let mut cfg = load(path)?;
    if tls.insecure {
        eprintln!("cairn: warning: --insecure: plain TCP, the servers cannot tell who this is");
        cfg.set_insecure(true);
    }
    if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
        let mut t = cfg.tls().cloned().with_context(|| {
            format!(
                "cluster file {} has no [tls] table naming the CA",
                path.display()
            )
        })?;
        t.client = Some((cert.clone(), key.clone()));
        cfg.set_tls(Some(t));
    }
    Ok(cfg)
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
    /// Servers and replicas up or down, partitions, entries, splits; exit status 0
    /// healthy, 1 degraded, 2 down
    #[command(long_about = STATUS_ABOUT)]
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
        /// How to connect
        #[command(flatten)]
        tls: TlsArgs,
    },
    /// Check the namespace's consistency across servers; exit status 2 if it is not
    Check {
        /// The cluster file
        #[arg(long, value_name = "FILE")]
        cluster: PathBuf,
        /// Seconds to wait for each server's answer
        #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
        timeout: f64,
        /// How to connect
        #[command(flatten)]
        tls: TlsArgs,
    },
    /// Make a CA, certificates for N servers (each of R replicas) and M clients, and a
    /// cluster file naming them, in DIR (for a test cluster; keep DIR/ca.key secret)
    InitCerts(InitCertsArgs),
    /// Add a replica to a replicated server's group or remove one, while it serves
    Replica(crate::replica::ReplicaArgs),
}

/// Arguments of `cluster init-certs`.
#[derive(Debug, Args)]
pub struct InitCertsArgs {
    /// Where to write them (created if needed)
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// Servers 0..N-1, at consecutive ports from --base
    #[arg(long, value_name = "N", conflicts_with = "cluster", value_parser = clap::value_parser!(u32).range(1..=65536))]
    servers: Option<u32>,
    /// Replicas per server with --servers (kept consistent by Raft): replica r of
    /// server g at port --base + g*R + r
    #[arg(long, value_name = "R", default_value_t = 1, conflicts_with = "cluster", value_parser = clap::value_parser!(u32).range(1..=7))]
    replicas: u32,
    /// Address of server 0 with --servers
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:7100")]
    base: SocketAddr,
    /// Take the servers (and their replicas) from this cluster file instead
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    /// Client certificates client-0..client-(M-1); the cluster file names client-0's
    #[arg(long, value_name = "M", default_value_t = 1)]
    clients: u32,
    /// Client certificates that do not allow uid 0 (it runs as nobody, and group 0
    /// as group nobody); by default they allow every uid and gid
    #[arg(long)]
    root_squash: bool,
    /// Client certificates limited to these uids (`OU=uids:`): `*`, or uids and
    /// ranges separated by commas, e.g. `1000-1999`; others run as nobody
    #[arg(long, value_name = "LIST", conflicts_with = "root_squash")]
    uids: Option<String>,
    /// Client certificates limited to these gids (`OU=gids:`), as group or
    /// supplementary group; others are squashed to nobody (default: every gid but
    /// 0, unless the uids include 0)
    #[arg(long, value_name = "LIST")]
    gids: Option<String>,
}

/// A uids or gids list as given, once it parses.
fn checked_ids(list: &str, what: &str) -> Result<String> {
    match cairn_cluster::tls::Ids::parse(list) {
        Some(_) => Ok(list.to_string()),
        None => bail!("{what} {list:?}: give `*` or ids and ranges a-b separated by commas"),
    }
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

/// `--lease-time`: zero (no leases) or a positive number of seconds up to an hour.
fn lease_time(s: f64) -> Result<Duration> {
    if s == 0.0 {
        return Ok(Duration::ZERO);
    }
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|d| *d >= Duration::from_millis(100) && *d <= Duration::from_secs(3600))
        .with_context(|| format!("--lease-time must be 0 or 0.1 to 3600 seconds, not {s}"))
}

/// `serve`: runs the server until SIGINT or SIGTERM.
pub fn serve(args: &ServeArgs) -> Result<()> {
    init_tracing("info");
    let mut cluster = load(&args.cluster)?;
    if args.insecure {
        eprintln!(
            "cairn: warning: --insecure: plain TCP with no authentication; anyone who reaches {} can read and change the namespace",
            args.listen
        );
        cluster.set_insecure(true);
    }
    let mut opts = ServerOptions::new(&args.dir, args.listen, cluster);
    opts.sync = match args.sync {
        SyncArg::Always => SyncMode::Always,
        SyncArg::Never => SyncMode::Never,
    };
    opts.metrics = args.metrics;
    if let Some(n) = args.split_threshold {
        opts.split_threshold = n;
    }
    if let Some(n) = args.partitions_per_server {
        opts.partitions_per_server = n;
    }
    opts.workers = usize::from(args.workers);
    if let Some(ms) = args.election_timeout {
        let e = std::time::Duration::from_millis(ms);
        if e != opts.election_timeout {
            eprintln!(
                "cairn: warning: --election-timeout {ms}: clients take the cluster file's ({} ms) as the time to wait for a replica before trying another; set election_timeout_ms in the file instead",
                opts.election_timeout.as_millis()
            );
        }
        opts.election_timeout = e;
    }
    opts.snapshot_every = args.snapshot_every;
    opts.lease_time = lease_time(args.lease_time)?;
    // Huge pages while the store opens, off while it serves.
    opts.open_with = Some(crate::allocator::huge_pages_while_dyn);
    cairn_cluster::server::run_until_signal(opts)
        .with_context(|| format!("serving {} on {}", args.dir.display(), args.listen))?;
    Ok(())
}

/// Logs (tracing) on stderr, filtered by `CAIRN_LOG`, else by the filter `default`: a
/// server's, and a cluster mount's client's (in the background, stderr is the mount's
/// log file).
fn init_tracing(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CAIRN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours only on a terminal. Fails only if a subscriber is already set, which
    // then keeps logging.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
}

/// `cluster status|check|init-certs|replica`.
pub fn run(args: &ClusterArgs, out: &mut impl Write) -> Result<ExitCode> {
    match &args.command {
        ClusterCommand::Status {
            cluster,
            json,
            timeout,
            tls,
        } => {
            let cfg = load_client(cluster, tls)?;
            let st = cairn_cluster::admin::status(&cfg, seconds(*timeout, "--timeout")?);
            let health = st.health();
            if *json {
                let j = StatusJson {
                    status: &st,
                    health,
                };
                serde_json::to_writer_pretty(&mut *out, &j).map_err(std::io::Error::from)?;
                writeln!(out)?;
            } else {
                write_status(out, &st)?;
            }
            out.flush()?;
            Ok(ExitCode::from(health_exit(health)))
        }
        ClusterCommand::InitCerts(a) => init_certs(a, out),
        ClusterCommand::Replica(a) => crate::replica::run(a, out),
        ClusterCommand::Check {
            cluster,
            timeout,
            tls,
        } => {
            let cfg = load_client(cluster, tls)?;
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

/// Exit status of `cluster status` when the cluster is degraded.
const EXIT_DEGRADED: u8 = 1;
/// Exit status of `cluster status` when the cluster is down.
const EXIT_DOWN: u8 = 2;

/// The exit status of `cluster status` for the cluster's health.
fn health_exit(h: Health) -> u8 {
    match h {
        Health::Healthy => 0,
        Health::Degraded => EXIT_DEGRADED,
        Health::Down => EXIT_DOWN,
    }
}

/// `cluster status --json`: the status and the cluster's health.
#[derive(serde::Serialize)]
struct StatusJson<'a> {
    #[serde(flatten)]
    status: &'a ClusterStatus,
    health: Health,
}

/// Servers `0..n`, each of `replicas` replicas: replica r of server g at port
/// `base + g*replicas + r`.
fn server_list(n: u32, replicas: u32, base: SocketAddr) -> Result<Vec<cairn_cluster::ServerInfo>> {
    (0..n)
        .map(|id| {
            let group = (0..replicas)
                .map(|r| {
                    let port = u64::from(base.port()) + u64::from(id) * u64::from(replicas);
                    let port = u16::try_from(port + u64::from(r)).ok().with_context(|| {
                        format!("server {id}: port {} out of range", port + u64::from(r))
                    })?;
                    Ok(cairn_cluster::ReplicaInfo {
                        id: u64::from(r),
                        addr: SocketAddr::new(base.ip(), port),
                    })
                })
                .collect::<Result<_>>()?;
            Ok(cairn_cluster::ServerInfo::group(id, group)?)
        })
        .collect()
}

/// `cluster init-certs`.
fn init_certs(a: &InitCertsArgs, out: &mut impl Write) -> Result<ExitCode> {
    let uids = match (&a.uids, a.root_squash) {
        (Some(list), _) => Some(checked_ids(list, "--uids")?),
        (None, true) => None,
        (None, false) => Some("*".to_string()),
    };
    let gids = a
        .gids
        .as_deref()
        .map(|g| checked_ids(g, "--gids"))
        .transpose()?;
    let names: Vec<cairn_cluster::tls::ClientCert> = (0..a.clients)
        .map(|i| cairn_cluster::tls::ClientCert {
            name: i.to_string(),
            uids: uids.clone(),
            gids: gids.clone(),
        })
        .collect();
    let dir = &a.dir;
    let creating = || format!("creating certificates in {}", dir.display());
    let (file, list) = match (a.servers, &a.cluster) {
        (_, Some(f)) => {
            let cfg = load(f)?;
            let file =
                cairn_cluster::tls::init_certs_for(dir, &cfg, &names).with_context(creating)?;
            (file, cfg.servers().to_vec())
        }
        (Some(n), None) => {
            let list = server_list(n, a.replicas, a.base)?;
            let file = cairn_cluster::tls::init_certs(dir, &list, &names).with_context(creating)?;
            (file, list)
        }
        (None, None) => bail!("give --servers N or --cluster FILE"),
    };
    let sizes: Vec<usize> = list.iter().map(|s| s.replicas.len()).collect();
    let (least, most) = (sizes.iter().min(), sizes.iter().max());
    let each = match (least, most) {
        (Some(l), Some(m)) if l != m => format!("{l} to {m}"),
        _ => most.copied().unwrap_or(0).to_string(),
    };
    writeln!(
        out,
        "wrote a CA, server certificates for {} group(s) of {each} replica(s) ({} in all), \
         {} client certificate(s) and {} (keep {} secret)",
        list.len(),
        sizes.iter().sum::<usize>(),
        names.len(),
        file.display(),
        dir.join("ca.key").display()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// A directory's inode number as `ino (home N)`.
fn ino_text(ino: u64) -> String {
    format!("{ino} (home {})", ino >> cairn_cluster::giga::HOME_SHIFT)
}

/// The table of `cluster status`. A server that answered only what it keeps in memory
/// (the certificate does not allow uid 0) shows `-` for its inodes, and a line after the
/// table says why. A replicated server's row is followed by its term and leader and a
/// line per replica; with such servers, a last line gives the cluster's health.
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
            let inodes = if s.partial {
                "-".to_string()
            } else {
                s.inodes.to_string()
            };
            writeln!(
                out,
                "{:>6}  {:<22} {:<5} {:>10} {:>10} {:>10} {:>7} {:>9} {:>7}",
                s.id,
                s.addr,
                "up",
                s.partitions,
                s.entries,
                inodes,
                s.splits_done,
                s.splits_in_flight,
                s.intents_pending
            )?;
        } else {
            let why = s.error.as_deref().unwrap_or("no answer");
            writeln!(out, "{:>6}  {:<22} {:<5} {why}", s.id, s.addr, "down")?;
        }
        if !s.replicas.is_empty() {
            write_replicas(out, s)?;
        }
    }
    let up = st.servers.iter().filter(|s| s.up).count();
    let sum = |f: fn(&cairn_cluster::admin::ServerState) -> u64| -> u64 {
        st.servers.iter().filter(|s| s.up).map(f).sum()
    };
    let partial: Vec<String> = st
        .servers
        .iter()
        .filter(|s| s.up && s.partial)
        .map(|s| s.id.to_string())
        .collect();
    let inodes = if partial.is_empty() {
        sum(|s| s.inodes).to_string()
    } else if partial.len() == up {
        "-".to_string()
    } else {
        format!("at least {}", sum(|s| s.inodes))
    };
    writeln!(
        out,
        "{up} of {} servers up: {} partitions, {} entries, {inodes} inodes, {} splits in flight",
        st.servers.len(),
        sum(|s| s.partitions),
        sum(|s| s.entries),
        sum(|s| s.splits_in_flight as u64),
    )?;
    if !partial.is_empty() {
        writeln!(
            out,
            "inodes: - (needs an admin certificate) on server{} {}, whose largest \
             directories are left out too",
            if partial.len() == 1 { "" } else { "s" },
            partial.join(", ")
        )?;
    }
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
    if st.servers.iter().any(|s| !s.replicas.is_empty()) {
        write_health(out, st)?;
    }
    Ok(())
}

/// Under a replicated server's row: its term and leader, and a line per replica (its
/// address, role, applied index and lag behind the leader, or down with the error).
fn write_replicas(out: &mut impl Write, s: &ServerState) -> std::io::Result<()> {
    let up = s.replicas.iter().filter(|r| r.up).count();
    let term = s
        .leader()
        .map(|l| l.term)
        .or_else(|| s.replicas.iter().filter(|r| r.up).map(|r| r.term).max())
        .unwrap_or(0);
    let leader = match s.leader() {
        Some(l) => format!("leader replica {}", l.id),
        None => "no leader".to_string(),
    };
    writeln!(
        out,
        "{:8}term {term}, {leader}, {up} of {} replicas up",
        "",
        s.replicas.len()
    )?;
    writeln!(
        out,
        "{:8}{:>7}  {:<22} {:<10} {:>10} {:>8}",
        "", "replica", "address", "role", "applied", "lag"
    )?;
    for r in &s.replicas {
        if r.up {
            let lag = r.lag.map_or("-".to_string(), |l| l.to_string());
            let role = if r.role.is_empty() { "?" } else { &r.role };
            writeln!(
                out,
                "{:8}{:>7}  {:<22} {:<10} {:>10} {:>8}",
                "", r.id, r.addr, role, r.applied, lag
            )?;
        } else {
            let why = r.error.as_deref().unwrap_or("no answer");
            writeln!(
                out,
                "{:8}{:>7}  {:<22} {:<10} {why}",
                "", r.id, r.addr, "down"
            )?;
        }
    }
    Ok(())
}

/// The cluster's health, and what makes it less than healthy.
fn write_health(out: &mut impl Write, st: &ClusterStatus) -> std::io::Result<()> {
    let health = st.health();
    let word = match health {
        Health::Healthy => "healthy",
        Health::Degraded => "degraded",
        Health::Down => "down",
    };
    let why: Vec<String> = st.servers.iter().filter_map(trouble).collect();
    if why.is_empty() {
        writeln!(out, "health: {word}")
    } else {
        writeln!(out, "health: {word} ({})", why.join("; "))
    }
}

/// What keeps server `s` from being healthy, if anything.
fn trouble(s: &ServerState) -> Option<String> {
    if s.health() == Health::Healthy {
        return None;
    }
    if s.replicas.is_empty() {
        return Some(format!("server {} down", s.id));
    }
    let n = s.replicas.len();
    let up = s.replicas.iter().filter(|r| r.up).count();
    let mut why = Vec::new();
    if s.leader().is_none() {
        why.push("no leader".to_string());
    }
    if up < n {
        why.push(format!("{up} of {n} replicas up"));
    }
    let lagging: Vec<String> = s
        .replicas
        .iter()
        .filter(|r| r.weak())
        .map(|r| match r.lag {
            Some(lag) if lag > cairn_cluster::admin::LAGGING => {
                format!("replica {} {lag} behind", r.id)
            }
            _ => format!("replica {} a learner", r.id),
        })
        .collect();
    why.extend(lagging);
    Some(format!("server {}: {}", s.id, why.join(", ")))
}

/// The report of `cluster check`: a line per problem, a line per note (not damage),
/// and a summary.
fn write_check(out: &mut impl Write, c: &ClusterCheck) -> std::io::Result<()> {
    for p in &c.problems {
        writeln!(out, "problem: {p}")?;
    }
    for n in &c.notes {
        writeln!(out, "note: {n}")?;
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
    let compared = match c.groups_compared {
        0 => String::new(),
        1 => ", the replicas of 1 server".to_string(),
        n => format!(", the replicas of {n} servers"),
    };
    writeln!(
        out,
        "checked {} partitions, {} entries, {} inodes{compared}{down}: {verdict}",
        c.partitions, c.entries, c.inodes
    )
}

/// `mount --cluster FILE MOUNTPOINT`: a client of the cluster served through FUSE in
/// the foreground; `ready` is called once it serves. Refuses to mount when the root directory's server (server 0) does
/// not answer, with its error (unreachable, or reading another cluster file); other
/// servers that are down are reported, and the parts of the namespace they hold fail
/// with EIO until they are back.
pub fn mount(
    cluster_file: &Path,
    tls: &TlsArgs,
    mountpoint: &Path,
    timeout: Option<f64>,
    opts: &cairn_fuse::MountOptions,
    ready: impl FnOnce(),
) -> Result<()> {
    // Why an operation failed (a server down, a group without a leader) is the client's
    // to say: its warnings go to the mount's log.
    init_tracing("warn");
    let cfg = load_client(cluster_file, tls)?;
    let mut copts = ClientOptions::default();
    if let Some(t) = timeout {
        copts.timeout = seconds(t, "--timeout")?;
    }
    let st = cairn_cluster::admin::status(&cfg, copts.connect_timeout.max(copts.timeout / 2));
    // A replicated server with replicas up but no leader yet (an election) is not down:
    // the client follows the lead once there is one.
    let down = |s: &&ServerState| !s.up && !s.replicas.iter().any(|r| r.up);
    for s in st.servers.iter().filter(down) {
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
        "cairn: cluster {} mounted on {} (`umount {}` or SIGTERM unmounts)",
        cluster_file.display(),
        mountpoint.display(),
        mountpoint.display()
    );
    mount.run_with(ready)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_cluster::admin::{LargeDir, ReplicaState};

    fn server(id: u32, partial: bool) -> ServerState {
        ServerState {
            id,
            addr: format!("127.0.0.1:{}", 7000 + id),
            up: true,
            partitions: 2,
            entries: 10,
            inodes: if partial { 0 } else { 5 },
            partial,
            ..Default::default()
        }
    }

    fn text(servers: Vec<ServerState>, largest: Vec<LargeDir>) -> String {
        let mut out = Vec::new();
        write_status(&mut out, &ClusterStatus { servers, largest }).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// An inode column per server: its count, or `-` where the certificate does not
    /// allow uid 0 (the server answered `partial`), with a line saying why.
    #[test]
    fn status_without_an_admin_certificate() {
        let whole = text(
            vec![server(0, false), server(1, false)],
            vec![LargeDir {
                dir: 1,
                partitions: 4,
                entries: 20,
            }],
        );
        assert!(
            whole.contains("2 of 2 servers up: 4 partitions, 20 entries, 10 inodes"),
            "{whole}"
        );
        assert!(!whole.contains("admin certificate"), "{whole}");
        assert!(whole.contains("largest directories:"), "{whole}");

        let part = text(vec![server(0, true), server(1, true)], vec![]);
        let rows: Vec<&str> = part.lines().skip(1).take(2).collect();
        for r in &rows {
            let cols: Vec<&str> = r.split_whitespace().collect();
            assert_eq!(cols[5], "-", "inodes of {r:?} in\n{part}");
        }
        assert!(
            part.contains("2 of 2 servers up: 4 partitions, 20 entries, - inodes"),
            "{part}"
        );
        assert!(
            part.contains("inodes: - (needs an admin certificate) on servers 0, 1"),
            "{part}"
        );
        assert!(!part.contains("largest directories:"), "{part}");

        // One server answering in full, another in part.
        let mixed = text(vec![server(0, false), server(1, true)], vec![]);
        assert!(mixed.contains("at least 5 inodes"), "{mixed}");
        assert!(
            mixed.contains("inodes: - (needs an admin certificate) on server 1,"),
            "{mixed}"
        );
        // Servers of one replica: no replica lines, no health line.
        assert!(
            !whole.contains("replica") && !whole.contains("health:"),
            "{whole}"
        );
    }

    /// A replicated server of three replicas, replica `lead` leading (if any) and those
    /// in `down` down.
    fn group(id: u32, lead: Option<u64>, down: &[u64]) -> ServerState {
        let replicas = (0..3)
            .map(|r| {
                let up = !down.contains(&r);
                ReplicaState {
                    id: r,
                    addr: format!("127.0.0.1:{}", 7100 + r),
                    up,
                    error: (!up).then(|| "connection refused".to_string()),
                    role: match (up, lead == Some(r)) {
                        (false, _) => String::new(),
                        (true, true) => "leader".into(),
                        (true, false) => "follower".into(),
                    },
                    term: 3,
                    leader: lead,
                    applied: 120,
                    lag: up.then_some(0),
                    ..Default::default()
                }
            })
            .collect();
        ServerState {
            replicas,
            up: lead.is_some(),
            ..server(id, false)
        }
    }

    /// A replicated server: its leader and term, a line per replica, and the health.
    #[test]
    fn status_of_replicated_servers() {
        let t = text(vec![group(0, Some(1), &[2]), server(1, false)], vec![]);
        assert!(
            t.contains("term 3, leader replica 1, 2 of 3 replicas up"),
            "{t}"
        );
        let rows: Vec<Vec<&str>> = t
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("replica"))
            .skip(1)
            .take(3)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows[0][..5],
            ["0", "127.0.0.1:7100", "follower", "120", "0"]
        );
        assert_eq!(rows[1][..3], ["1", "127.0.0.1:7101", "leader"]);
        assert_eq!(
            rows[2],
            ["2", "127.0.0.1:7102", "down", "connection", "refused"]
        );
        assert!(
            t.contains("health: degraded (server 0: 2 of 3 replicas up)"),
            "{t}"
        );
        assert!(t.contains("2 of 2 servers up"), "{t}");

        let t = text(vec![group(0, None, &[1, 2])], vec![]);
        assert!(t.contains("term 3, no leader, 1 of 3 replicas up"), "{t}");
        assert!(
            t.contains("health: down (server 0: no leader, 1 of 3 replicas up)"),
            "{t}"
        );
        let t = text(vec![group(0, Some(0), &[])], vec![]);
        assert!(t.contains("health: healthy\n"), "{t}");
    }

    #[test]
    fn exit_status_of_health() {
        assert_eq!(health_exit(Health::Healthy), 0);
        assert_eq!(health_exit(Health::Degraded), 1);
        assert_eq!(health_exit(Health::Down), 2);
        // The help says how far behind a replica makes the cluster degraded.
        let lagging = format!("{} entries", cairn_cluster::admin::LAGGING);
        assert!(STATUS_ABOUT.contains(&lagging), "{STATUS_ABOUT}");
    }

    /// Notes (not damage) and the replicas compared in `check`'s report.
    #[test]
    fn check_report_with_replicas() {
        let c = ClusterCheck {
            notes: vec!["group 0: replica 2 (127.0.0.1:7102) did not answer: refused".into()],
            replicas_down: vec![(0, 2)],
            groups_compared: 2,
            partitions: 3,
            entries: 10,
            inodes: 11,
            ..Default::default()
        };
        let mut out = Vec::new();
        write_check(&mut out, &c).unwrap();
        let t = String::from_utf8(out).unwrap();
        assert!(
            t.starts_with("note: group 0: replica 2 (127.0.0.1:7102) did not answer"),
            "{t}"
        );
        assert!(
            t.contains(
                "checked 3 partitions, 10 entries, 11 inodes, the replicas of 2 servers: consistent"
            ),
            "{t}"
        );
    }
}
