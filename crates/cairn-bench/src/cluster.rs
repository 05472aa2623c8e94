//! `cairn cluster-bench`: GIGA+'s concurrent-create experiment (GIGA+/IndexFS)
//! on real processes: S metadata servers (each a `cairn serve` process on a
//! loopback port of its own) and C client processes (`cairn __cluster-bench-client`)
//! that all create files in ONE directory. Reports the aggregate create rate, creates
//! per server-CPU-second (the scaling figure that means something when the servers share
//! a few cores), redirects per create once the directory has spread, and the same creates
//! through `cairn_fs::Fs` in this process (the cost of the network hop).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use cairn_cluster::client::{Client, ClientOptions, Creates};
use cairn_cluster::ClusterConfig;
use cairn_fs::{Cred, FileSystem, Fs, ROOT};
use clap::Args;
use serde::Serialize;

use crate::servers::{free_port, Kids, Serve, Servers};

/// The hidden subcommand that runs one client process.
pub const CLIENT_COMMAND: &str = "__cluster-bench-client";

/// What `cairn cluster-bench --help` says.
pub const ABOUT: &str = "\
Run GIGA+'s concurrent-create experiment (GIGA+/IndexFS) on real processes: for each
server count S (--servers), start S `cairn serve` processes on loopback ports, make one
directory, and have C client processes (--clients) create --files files each in it, all
at once. Reports creates/s (aggregate), creates per server-CPU-second (user + system time
of the server processes, read from /proc: the figure that shows scaling when S servers
share this machine's cores), redirects per create over the last half of the run (after
the directory has spread), and the same creates through cairn_fs::Fs in this process
(the network hop's cost). Connections are mutual TLS (certificates made for the run) or,
with --security insecure, plain TCP; --security tls,insecure --rounds 3 interleaves
both and reports the TLS cost per server count. Nothing is pinned to a CPU. Writes results.json and results.md
to --out.";

/// Arguments of `cairn cluster-bench`.
#[derive(Args, Debug, Clone)]
pub struct ClusterBenchArgs {
    /// Server counts to run, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub servers: Vec<u32>,
    /// Client processes, all creating in the one directory
    #[arg(long, default_value_t = 2)]
    pub clients: u32,
    /// Files each client process creates
    #[arg(long, default_value_t = 50_000)]
    pub files: u64,
    /// Threads in each client process, each creating its share of the files one
    /// after another (one request in flight per thread), over the process's one
    /// connection to each server
    #[arg(long, default_value_t = 1)]
    pub threads: u32,
    /// Durability of the servers: never (the engine's prefix rule) or always (a reply
    /// only once the create is durable, group commit)
    #[arg(long, default_value = "never")]
    pub sync: String,
    /// Entries a partition holds before its server splits it (default: the server's)
    #[arg(long)]
    pub split_threshold: Option<u64>,
    /// Partitions per server a directory splits into at most (default: the server's)
    #[arg(long)]
    pub partitions_per_server: Option<u32>,
    /// Work directory for the servers' stores: new or empty; what the run makes in it is
    /// removed at the end
    #[arg(long, default_value = "./cairn-cluster-bench")]
    pub dir: PathBuf,
    /// Directory for results.json and results.md
    #[arg(long, default_value = "cluster-bench-out")]
    pub out: PathBuf,
    /// Skip the in-process cairn_fs::Fs comparison
    #[arg(long)]
    pub no_lib: bool,
    /// Connections: tls, insecure (plain TCP), or both (tls,insecure: interleaved)
    #[arg(long, value_delimiter = ',', default_value = "tls")]
    pub security: Vec<String>,
    /// How clients send creates: stream (messages on one open call per server, the
    /// default), batch (the creates queued while four requests to their server are in
    /// flight go as one request), single (a request each); several: interleaved
    #[arg(long, value_delimiter = ',', default_value = "stream")]
    pub creates: Vec<String>,
    /// Runs of each server count and security mode (interleaved)
    #[arg(long, default_value_t = 1)]
    pub rounds: u32,
}

/// Arguments of one client process (hidden subcommand).
#[derive(Args, Debug, Clone)]
pub struct ClientArgs {
    /// The cluster file
    #[arg(long)]
    pub cluster: PathBuf,
    /// Inode of the directory to create in
    #[arg(long)]
    pub dir_ino: u64,
    /// Files to create (at most, with --seconds)
    #[arg(long)]
    pub files: u64,
    /// Name prefix of this client's files
    #[arg(long)]
    pub prefix: String,
    /// Plain TCP (the servers run with --insecure)
    #[arg(long)]
    pub insecure: bool,
    /// Threads creating at once
    #[arg(long, default_value_t = 1)]
    pub threads: u32,
    /// How creates travel: stream, batch or single
    #[arg(long, default_value = "stream")]
    pub creates: String,
    /// Stop after this many seconds (with fewer than --files files made, then)
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Send a create that failed with EIO again (its group's leader changed: it may or
    /// may not have been done; EEXIST then means it was), instead of failing
    #[arg(long)]
    pub retry_ambiguous: bool,
}

/// One client process's outcome.
#[derive(Debug, Serialize, Clone, Default)]
pub(crate) struct ClientResult {
    /// Creates it made.
    pub creates: u64,
    /// Seconds it took.
    pub secs: f64,
    redirects: u64,
    /// Creates and redirects in the second half of this client's run.
    late_creates: u64,
    late_redirects: u64,
    /// `MakeBatch` requests sent, and the creates they carried.
    batches: u64,
    batched: u64,
    /// Creates that failed with EIO and were sent again (`--retry-ambiguous`).
    pub ambiguous: u64,
}

/// One server count's outcome.
#[derive(Debug, Serialize)]
struct Run {
    servers: u32,
    clients: u32,
    threads: u32,
    files: u64,
    sync: String,
    security: String,
    /// Round of this run (from 0).
    round: u32,
    /// How the clients sent creates: stream, batch or single.
    creates: String,
    /// Creates per request to a server (batches and creates that went alone; none for
    /// streamed creates, which are messages on a call, not requests).
    creates_per_request: Option<f64>,
    creates_per_sec: f64,
    wall_secs: f64,
    server_cpu_secs: f64,
    creates_per_server_cpu_sec: f64,
    redirects: u64,
    redirects_per_create_late: f64,
    partitions: u64,
    per_server_entries: Vec<u64>,
    /// Highest aggregate creates/s over a window of 2 s (of half the run if it is
    /// shorter than 4 s; progress lines come every half second, so shorter windows
    /// would alias).
    peak_creates_per_sec: f64,
    /// Aggregate creates/s over the run's last 10% of creates (GIGA+'s steadiness:
    /// it lost up to 25% of its peak as the stores grew).
    last_tenth_creates_per_sec: f64,
    /// `(seconds, creates so far, creates/s over the half second before)`, all clients.
    timeline: Vec<(f64, u64, f64)>,
}

#[derive(Debug, Serialize)]
struct Report {
    command: String,
    machine: String,
    runs: Vec<Run>,
    lib_creates_per_sec: Option<f64>,
}

fn start_servers(
    exe: &Path,
    args: &ClusterBenchArgs,
    n: u32,
    work: &Path,
    insecure: bool,
) -> Result<(Servers, PathBuf, ClusterConfig)> {
    let mut toml = String::new();
    let mut addrs = Vec::new();
    for id in 0..n {
        let a = free_port()?;
        toml.push_str(&format!("[[server]]\nid = {id}\naddr = \"{a}\"\n"));
        addrs.push(a);
    }
    let (file, cfg) = if insecure {
        let file = work.join("cluster.toml");
        std::fs::write(&file, &toml).with_context(|| format!("writing {}", file.display()))?;
        let mut cfg = ClusterConfig::parse(&toml)?;
        cfg.set_insecure(true);
        (file, cfg)
    } else {
        let servers = ClusterConfig::parse(&toml)?.servers().to_vec();
        let file = cairn_cluster::tls::init_certs(
            &work.join("certs"),
            &servers,
            &[cairn_cluster::tls::ClientCert::admin("bench")],
        )?;
        let cfg = ClusterConfig::load(&file)?;
        (file, cfg)
    };
    let mut extra = Vec::new();
    if let Some(t) = args.split_threshold {
        extra.extend(["--split-threshold".to_string(), t.to_string()]);
    }
    if let Some(k) = args.partitions_per_server {
        extra.extend(["--partitions-per-server".to_string(), k.to_string()]);
    }
    if insecure {
        extra.push("--insecure".to_string());
    }
    let mut servers = Servers::default();
    for (id, a) in addrs.iter().enumerate() {
        let serve = Serve {
            exe: exe.to_path_buf(),
            dir: work.join(format!("server-{id}")),
            listen: *a,
            cluster: file.clone(),
            sync: args.sync.clone(),
            log: work.join(format!("server-{id}.log")),
            extra: extra.clone(),
        };
        servers.push(serve.spawn()?);
    }
    // Wait until every server accepts connections (bounded).
    servers.wait_listening(&addrs, Duration::from_secs(60), work)?;
    Ok((servers, file, cfg))
}

fn run_one(
    exe: &Path,
    args: &ClusterBenchArgs,
    n: u32,
    (security, how): (&str, &str),
    round: u32,
) -> Result<Run> {
    let insecure = security == "insecure";
    let work = args.dir.join(format!("s{n}-{security}-{how}-{round}"));
    std::fs::create_dir(&work).with_context(|| format!("creating {}", work.display()))?;
    let (servers, file, cfg) = start_servers(exe, args, n, &work, insecure)?;
    let client = Client::with_config(cfg.clone(), ClientOptions::default())?;
    let dir = client
        .mkdir(&Cred::ROOT, ROOT, b"bench", 0o755)
        .map_err(|e| anyhow::anyhow!("mkdir /bench on the cluster: {e}"))?;
    let cpu0 = servers.cpu_secs()?;
    let start = Instant::now();
    let mut kids = Kids::default();
    for k in 0..args.clients {
        kids.0.push(spawn_client(
            exe,
            &ClientSpawn {
                file: &file,
                dir_ino: dir.ino,
                files: args.files,
                prefix: format!("c{k}-"),
                threads: args.threads,
                creates: how,
                insecure,
                seconds: None,
                retry_ambiguous: false,
            },
        )?);
    }
    // Bounded: far beyond what the slowest run here takes (a create a millisecond).
    let limit = Duration::from_secs(600 + args.files / 1000);
    let (results, progress) = collect_clients(kids, limit)?;
    let wall = start.elapsed().as_secs_f64();
    let cpu1 = servers.cpu_secs()?;
    let status = cairn_cluster::admin::status(&cfg, Duration::from_secs(10));
    if let Some(down) = status.servers.iter().find(|s| !s.up) {
        bail!(
            "server {} at {} did not answer `status` after the run: {}",
            down.id,
            down.addr,
            down.error.as_deref().unwrap_or("no reason given")
        );
    }
    let per_server_entries: Vec<u64> = status.servers.iter().map(|s| s.entries).collect();
    let partitions: u64 = status.servers.iter().map(|s| s.partitions).sum();
    drop(servers);
    std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    let creates: u64 = results.iter().map(|r| r.creates).sum();
    let late_c: u64 = results.iter().map(|r| r.late_creates).sum();
    let late_r: u64 = results.iter().map(|r| r.late_redirects).sum();
    let timeline = merge_timelines(&progress);
    let batches: u64 = results.iter().map(|r| r.batches).sum();
    let batched: u64 = results.iter().map(|r| r.batched).sum();
    Ok(Run {
        servers: n,
        clients: args.clients,
        threads: args.threads,
        files: args.files,
        sync: args.sync.clone(),
        security: security.to_string(),
        round,
        creates: how.to_string(),
        creates_per_request: (how != "stream")
            .then(|| creates as f64 / (creates - batched.min(creates) + batches).max(1) as f64),
        creates_per_sec: creates as f64 / wall,
        wall_secs: wall,
        server_cpu_secs: cpu1 - cpu0,
        creates_per_server_cpu_sec: creates as f64 / (cpu1 - cpu0).max(1e-9),
        redirects: results.iter().map(|r| r.redirects).sum(),
        redirects_per_create_late: late_r as f64 / late_c.max(1) as f64,
        partitions,
        per_server_entries,
        peak_creates_per_sec: peak_rate(&progress),
        last_tenth_creates_per_sec: last_tenth_rate(&progress),
        timeline,
    })
}

/// A client process's progress lines: (seconds, creates) of each.
pub(crate) type Progress = Vec<(f64, u64)>;

/// One client process (`cairn __cluster-bench-client`) to start.
pub(crate) struct ClientSpawn<'a> {
    /// The cluster file.
    pub file: &'a Path,
    /// The directory it creates in.
    pub dir_ino: u64,
    /// Files it creates (at most, with `seconds`).
    pub files: u64,
    /// Its names' prefix.
    pub prefix: String,
    /// Its threads.
    pub threads: u32,
    /// How creates travel: stream, batch or single.
    pub creates: &'a str,
    /// Plain TCP.
    pub insecure: bool,
    /// Stop creating after this long.
    pub seconds: Option<f64>,
    /// Send creates that failed with EIO again.
    pub retry_ambiguous: bool,
}

/// Starts one client process; its progress and result on its stdout (piped), its
/// errors on ours.
pub(crate) fn spawn_client(exe: &Path, s: &ClientSpawn<'_>) -> Result<Child> {
    let mut cmd = Command::new(exe);
    cmd.arg(CLIENT_COMMAND)
        .args(s.insecure.then_some("--insecure"))
        .arg("--creates")
        .arg(s.creates)
        .arg("--cluster")
        .arg(s.file)
        .arg("--dir-ino")
        .arg(s.dir_ino.to_string())
        .arg("--files")
        .arg(s.files.to_string())
        .arg("--prefix")
        .arg(&s.prefix)
        .arg("--threads")
        .arg(s.threads.to_string());
    if let Some(t) = s.seconds {
        cmd.arg("--seconds").arg(t.to_string());
    }
    if s.retry_ambiguous {
        cmd.arg("--retry-ambiguous");
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting a client process")
}

/// Reads the client processes' output to their end and waits for them, at most
/// `limit` (then they are killed): each one's result and progress. Progress lines:
/// "@@P <secs> <creates>"; last line "@@R <json>". A client that fails fails the
/// whole (the others are killed).
pub(crate) fn collect_clients(
    mut kids: Kids,
    limit: Duration,
) -> Result<(Vec<ClientResult>, Vec<Progress>)> {
    let t = Instant::now();
    let mut readers = Vec::new();
    for c in &mut kids.0 {
        let out = c.stdout.take().context("client stdout")?;
        readers.push(std::thread::spawn(move || read_client(out)));
    }
    let mut done = vec![false; kids.0.len()];
    while done.iter().any(|d| !d) {
        for (c, d) in kids.0.iter_mut().zip(&mut done) {
            if let Some(st) = c.try_wait()? {
                ensure!(st.success(), "a client process failed ({st})");
                *d = true;
            }
        }
        ensure!(
            t.elapsed() < limit,
            "the client processes did not finish within {} s",
            limit.as_secs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut results = Vec::new();
    let mut progress = Vec::new();
    for r in readers {
        let (p, res) = r
            .join()
            .map_err(|_| anyhow::anyhow!("a reader thread panicked"))?;
        let res = res.context("a client process reported no result")?;
        results.push(parse_result(&res)?);
        progress.push(p);
    }
    Ok((results, progress))
}

/// A client process's progress lines and its result line (JSON), from its output.
fn read_client(out: ChildStdout) -> (Progress, Option<String>) {
    let mut progress = Vec::new();
    let mut result = None;
    for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
        if let Some(r) = line.strip_prefix("@@P ") {
            let mut it = r.split(' ');
            if let (Some(a), Some(b)) = (it.next(), it.next()) {
                if let (Ok(t), Ok(n)) = (a.parse::<f64>(), b.parse::<u64>()) {
                    progress.push((t, n));
                }
            }
        } else if let Some(r) = line.strip_prefix("@@R ") {
            result = Some(r.to_owned());
        }
    }
    (progress, result)
}

/// When the last client ended (its last progress line).
fn run_end(progress: &[Vec<(f64, u64)>]) -> f64 {
    progress
        .iter()
        .filter_map(|p| p.last().map(|x| x.0))
        .fold(0.0, f64::max)
}

/// Creates of all clients made by `t`: each client's count interpolated between its
/// progress lines (from none at its start; its last count after its end).
fn made_by(progress: &[Vec<(f64, u64)>], t: f64) -> f64 {
    progress
        .iter()
        .map(|p| {
            let (mut t0, mut n0) = (0.0, 0.0);
            for &(t1, n1) in p {
                let n1 = n1 as f64;
                if t1 >= t {
                    return if t1 > t0 {
                        n0 + (n1 - n0) * (t - t0) / (t1 - t0)
                    } else {
                        n1
                    };
                }
                (t0, n0) = (t1, n1);
            }
            n0
        })
        .sum()
}

/// Highest aggregate creates/s over a sliding window (see `Run::peak_creates_per_sec`).
fn peak_rate(progress: &[Vec<(f64, u64)>]) -> f64 {
    let end = run_end(progress);
    let window = if end >= 4.0 { 2.0 } else { end / 2.0 };
    if window <= 0.0 {
        return 0.0;
    }
    let mut peak: f64 = 0.0;
    let mut t = 0.0;
    while t + window <= end + 1e-9 {
        let n = made_by(progress, t + window) - made_by(progress, t);
        peak = peak.max(n / window);
        t += 0.25;
    }
    peak
}

/// Aggregate creates/s over the last 10% of the creates: from the moment 90% were made
/// (interpolated between progress lines) to the last client's end.
fn last_tenth_rate(progress: &[Vec<(f64, u64)>]) -> f64 {
    let mut times: Vec<f64> = progress.iter().flatten().map(|x| x.0).collect();
    times.sort_by(f64::total_cmp);
    let Some(&end) = times.last() else {
        return 0.0;
    };
    let total = made_by(progress, end);
    let goal = 0.9 * total;
    let (mut t0, mut n0) = (0.0, 0.0);
    for &t in &times {
        let n = made_by(progress, t);
        if n >= goal {
            let t90 = if n > n0 {
                t0 + (goal - n0) / (n - n0) * (t - t0)
            } else {
                t
            };
            return if end > t90 {
                (total - goal) / (end - t90)
            } else {
                0.0
            };
        }
        (t0, n0) = (t, n);
    }
    0.0
}

/// Aggregate creates so far and creates/s in half-second steps from the clients'
/// progress lines (a last, shorter step ends at the last client's end).
fn merge_timelines(progress: &[Vec<(f64, u64)>]) -> Vec<(f64, u64, f64)> {
    let end = run_end(progress);
    let mut out = Vec::new();
    let step = 0.5;
    let mut t0 = 0.0;
    while t0 < end {
        // A last step shorter than half of one joins the one before.
        let t = if end - t0 < 1.5 * step {
            end
        } else {
            t0 + step
        };
        let (n0, n1) = (made_by(progress, t0), made_by(progress, t));
        out.push((t, n1.round() as u64, (n1 - n0) / (t - t0)));
        t0 = t;
    }
    out
}

fn parse_result(s: &str) -> Result<ClientResult> {
    let v: serde_json::Value = serde_json::from_str(s)?;
    let g = |k: &str| v[k].as_u64().unwrap_or(0);
    Ok(ClientResult {
        creates: g("creates"),
        secs: v["secs"].as_f64().unwrap_or(0.0),
        redirects: g("redirects"),
        late_creates: g("late_creates"),
        late_redirects: g("late_redirects"),
        batches: g("batches"),
        batched: g("batched"),
        ambiguous: g("ambiguous"),
    })
}

/// The same creates through `cairn_fs::Fs` in this process, on a fresh store.
fn lib_rate(args: &ClusterBenchArgs) -> Result<f64> {
    let d = args.dir.join("lib");
    let fs = Fs::open(&d).map_err(|e| anyhow::anyhow!("opening {}: {e}", d.display()))?;
    let dir = fs
        .mkdir(&Cred::ROOT, ROOT, b"bench", 0o755)
        .map_err(|e| anyhow::anyhow!("mkdir: {e}"))?;
    let n = args.files * args.clients as u64;
    let t = Instant::now();
    for i in 0..n {
        fs.create(&Cred::ROOT, dir.ino, format!("f{i}").as_bytes(), 0o644)
            .map_err(|e| anyhow::anyhow!("create: {e}"))?;
    }
    let rate = n as f64 / t.elapsed().as_secs_f64();
    fs.close().map_err(|e| anyhow::anyhow!("close: {e}"))?;
    std::fs::remove_dir_all(&d)?;
    Ok(rate)
}

/// Runs `cairn cluster-bench`.
pub fn run(args: &ClusterBenchArgs) -> Result<()> {
    let load_at_start = std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split(' ')
        .next()
        .unwrap_or("?")
        .to_string();
    ensure!(
        args.clients > 0 && args.files > 0 && args.threads > 0,
        "--clients, --files and --threads must be positive"
    );
    ensure!(
        !args.servers.is_empty() && args.servers.iter().all(|&s| (1..=64).contains(&s)),
        "--servers takes counts in 1..=64"
    );
    ensure!(
        args.sync == "never" || args.sync == "always",
        "--sync is never or always"
    );
    let exe = std::env::current_exe().context("finding this executable")?;
    // The work directory must be new or empty: the run removes only what it made.
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let has_entries = std::fs::read_dir(&args.dir)
        .with_context(|| format!("reading {}", args.dir.display()))?
        .next()
        .is_some();
    ensure!(
        !has_entries,
        "--dir {} is not empty; give a new or empty directory",
        args.dir.display()
    );
    ensure!(
        !args.security.is_empty() && args.security.iter().all(|s| s == "tls" || s == "insecure"),
        "--security takes tls and/or insecure"
    );
    ensure!(
        !args.creates.is_empty() && args.creates.iter().all(|s| s.parse::<Creates>().is_ok()),
        "--creates takes stream, batch and/or single"
    );
    ensure!(args.rounds > 0, "--rounds must be positive");
    let mut runs = Vec::new();
    for &s in &args.servers {
        for round in 0..args.rounds {
            for security in &args.security {
                for how in &args.creates {
                    eprintln!(
                        "cluster-bench: {s} server(s), {} client(s) x {} thread(s), {} files each, sync {}, {security}, creates {how}, round {}",
                        args.clients, args.threads, args.files, args.sync, round + 1
                    );
                    let r = run_one(&exe, args, s, (security, how), round)?;
                    eprintln!(
                        "  {:.0} creates/s, {:.0} creates per server-CPU-second, {} creates per request, {:.4} redirects per create (late), {} partitions",
                        r.creates_per_sec, r.creates_per_server_cpu_sec, per_request(r.creates_per_request), r.redirects_per_create_late, r.partitions
                    );
                    runs.push(r);
                }
            }
        }
    }
    let lib = if args.no_lib {
        None
    } else {
        let r = lib_rate(args)?;
        eprintln!("  cairn_fs::Fs in-process, one thread: {r:.0} creates/s");
        Some(r)
    };
    let report = Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: {
            let m = crate::machine();
            format!(
                "{} CPUs, {} GiB, kernel {}; load average at the start {}",
                m.cpus,
                m.memory_bytes.unwrap_or(0) >> 30,
                m.kernel.unwrap_or_default(),
                load_at_start
            )
        },
        runs,
        lib_creates_per_sec: lib,
    };
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(
        args.out.join("results.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    let md = markdown(&report);
    std::fs::write(args.out.join("results.md"), &md)?;
    plots(&report, &args.out)?;
    print!("{md}");
    std::io::stdout().flush()?;
    // Empty now (each run removed its stores); left in place if anything else appeared.
    let _ = std::fs::remove_dir(&args.dir);
    Ok(())
}

/// The plots, like GIGA+'s figures: aggregate creates/s over time, a line per run of
/// the first round (log scale), into `creates-over-time.png`; creates per
/// server-CPU-second against the server count (the median of the rounds, a bar per way
/// of sending and security mode), into `creates-per-server-cpu.png`.
fn plots(r: &Report, out: &Path) -> Result<()> {
    let modes = crate::chart::distinct(
        r.runs
            .iter()
            .map(|x| (x.creates.as_str(), x.security.as_str())),
    );
    let label = |x: &Run| {
        let s = if x.servers == 1 { "server" } else { "servers" };
        if modes.len() > 1 {
            format!("{} {s}, {} {}", x.servers, x.creates, x.security)
        } else {
            format!("{} {s}", x.servers)
        }
    };
    let first: Vec<&Run> = r.runs.iter().filter(|x| x.round == 0).collect();
    let labels: Vec<String> = first.iter().map(|x| label(x)).collect();
    let series: Vec<crate::fsplot::Series<'_>> = first
        .iter()
        .zip(&labels)
        .map(|(x, l)| crate::fsplot::Series {
            label: l,
            average: x.creates_per_sec,
            points: &x.timeline,
        })
        .collect();
    let x = &r.runs[0];
    let heading = format!(
        "creates/s into one directory, {} x {} callers, sync {}",
        x.clients, x.threads, x.sync
    );
    crate::fsplot::create_rate(
        &out.join("creates-over-time.png"),
        &heading,
        crate::fsplot::XAxis::Seconds,
        &series,
    )?;
    let counts = crate::chart::distinct(r.runs.iter().map(|x| x.servers));
    let rows: Vec<String> = counts
        .iter()
        .map(|n| format!("{n} server{}", if *n == 1 { "" } else { "s" }))
        .collect();
    let names: Vec<String> = modes.iter().map(|(c, s)| format!("{c} {s}")).collect();
    let bars: Vec<(&str, Vec<Option<f64>>)> = modes
        .iter()
        .zip(&names)
        .map(|(&(c, s), name)| {
            let per_count = counts
                .iter()
                .map(|&n| {
                    median(
                        r.runs
                            .iter()
                            .filter(|x| x.servers == n && x.creates == c && x.security == s)
                            .map(|x| x.creates_per_server_cpu_sec)
                            .collect(),
                    )
                })
                .collect();
            (name.as_str(), per_count)
        })
        .collect();
    crate::fsplot::bars(
        &out.join("creates-per-server-cpu.png"),
        "creates per server-CPU-second (median of the rounds)",
        "creates/CPU-s",
        &rows,
        &bars,
    )
}

/// The median of `v` (the upper one of an even count), none if empty.
fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// Creates per request, or "—" for streamed creates.
fn per_request(x: Option<f64>) -> String {
    x.map_or_else(|| "—".to_string(), |x| format!("{x:.1}"))
}

fn markdown(r: &Report) -> String {
    let mut s = String::new();
    s.push_str(&format!("`{}`\n\n{}\n\n", r.command, r.machine));
    s.push_str("| servers | clients × threads, files each | sync | security | creates sent | creates per request | creates/s | peak creates/s (2 s) | last 10% ÷ peak | creates per server-CPU-s | redirects per create (last half) | partitions | entries per server (max / mean) |\n|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for x in &r.runs {
        let max = x.per_server_entries.iter().copied().max().unwrap_or(0) as f64;
        let mean = x.per_server_entries.iter().sum::<u64>() as f64
            / x.per_server_entries.len().max(1) as f64;
        s.push_str(&format!(
            "| {} | {} × {}, {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.2} | {:.0} | {:.4} | {} | {:.2} |\n",
            x.servers,
            x.clients,
            x.threads,
            x.files,
            x.sync,
            x.security,
            x.creates,
            per_request(x.creates_per_request),
            x.creates_per_sec,
            x.peak_creates_per_sec,
            x.last_tenth_creates_per_sec / x.peak_creates_per_sec.max(1e-9),
            x.creates_per_server_cpu_sec,
            x.redirects_per_create_late,
            x.partitions,
            if mean > 0.0 { max / mean } else { 0.0 }
        ));
    }
    // The TLS cost: median creates/s of each mode, per server count.
    let mut counts: Vec<u32> = r.runs.iter().map(|x| x.servers).collect();
    counts.dedup();
    for n in counts {
        let of_mode = |mode: &str| {
            median(
                r.runs
                    .iter()
                    .filter(|x| x.servers == n && x.security == mode)
                    .map(|x| x.creates_per_sec)
                    .collect(),
            )
        };
        if let (Some(t), Some(p)) = (of_mode("tls"), of_mode("insecure")) {
            s.push_str(&format!(
                "\n{n} server(s): TLS {t:.0} creates/s, insecure {p:.0} (medians): TLS is {:.1}% slower\n",
                (1.0 - t / p) * 100.0
            ));
        }
    }
    if let Some(l) = r.lib_creates_per_sec {
        s.push_str(&format!(
            "\ncairn_fs::Fs in-process (one thread, same total files): {l:.0} creates/s\n"
        ));
    }
    s
}

/// Runs one client process: creates `files` files in the directory, reporting progress
/// every half second on stdout.
pub fn client(args: &ClientArgs) -> Result<()> {
    ensure!(args.threads > 0, "--threads must be positive");
    let mut cfg = ClusterConfig::load(&args.cluster)?;
    cfg.set_insecure(args.insecure);
    let opts = ClientOptions {
        creates: args
            .creates
            .parse()
            .map_err(|_| anyhow::anyhow!("--creates takes stream, batch or single"))?,
        ..ClientOptions::default()
    };
    let c = Client::with_config(cfg, opts)?;
    let limit = args
        .seconds
        .map(|s| Duration::try_from_secs_f64(s).context("--seconds must be a positive number"))
        .transpose()?;
    let out_of_time = |t: Instant| limit.is_some_and(|l| t.elapsed() >= l);
    let done = std::sync::atomic::AtomicU64::new(0);
    let ambiguous = std::sync::atomic::AtomicU64::new(0);
    let redirects_at_half = std::sync::atomic::AtomicU64::new(u64::MAX);
    let half = args.files / 2;
    let t = Instant::now();
    let threads = args.threads as u64;
    let failed: Option<anyhow::Error> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|w| {
                let (c, done, at_half, ambiguous) = (&c, &done, &redirects_at_half, &ambiguous);
                s.spawn(move || -> Result<()> {
                    // Thread w creates files w, w + T, w + 2T, ...
                    let mut i = w;
                    while i < args.files && !out_of_time(t) {
                        let name = format!("{}{i}", args.prefix);
                        let retried = create(c, args.dir_ino, &name, args.retry_ambiguous)?;
                        ambiguous.fetch_add(retried, std::sync::atomic::Ordering::Relaxed);
                        if done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1 == half {
                            at_half.store(c.redirects(), std::sync::atomic::Ordering::Relaxed);
                        }
                        i += threads;
                    }
                    Ok(())
                })
            })
            .collect();
        // Progress every half second until the workers are done.
        let mut out = std::io::stdout().lock();
        let mut last = Instant::now();
        while !workers.iter().all(|w| w.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
            if last.elapsed() >= Duration::from_millis(500) {
                last = Instant::now();
                let n = done.load(std::sync::atomic::Ordering::Relaxed);
                let _ = writeln!(out, "@@P {:.3} {n}", t.elapsed().as_secs_f64());
                let _ = out.flush();
            }
        }
        workers
            .into_iter()
            .filter_map(|w| match w.join() {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e),
                Err(_) => Some(anyhow::anyhow!("a client thread panicked")),
            })
            .next()
    });
    if let Some(e) = failed {
        return Err(e);
    }
    let secs = t.elapsed().as_secs_f64();
    let made = done.load(std::sync::atomic::Ordering::Relaxed);
    let mut out = std::io::stdout().lock();
    writeln!(out, "@@P {secs:.3} {made}")?;
    let redirects = c.redirects();
    let at_half = match redirects_at_half.load(std::sync::atomic::Ordering::Relaxed) {
        u64::MAX => 0,
        r => r,
    };
    let r = serde_json::json!({
        "creates": made,
        "secs": secs,
        "redirects": redirects,
        "late_creates": made.saturating_sub(half),
        "late_redirects": redirects - at_half,
        "batches": c.batches().0,
        "batched": c.batches().1,
        "ambiguous": ambiguous.load(std::sync::atomic::Ordering::Relaxed),
    });
    writeln!(out, "@@R {r}")?;
    out.flush()?;
    Ok(())
}

/// Most times a client process sends one create again after EIO.
const AMBIGUOUS_RETRIES: u64 = 100;

/// Creates `name` in directory `dir`. With `retry`, a create that fails with EIO is sent
/// again (after 50 ms, at most [`AMBIGUOUS_RETRIES`] times), and EEXIST after such a
/// failure means the failed one was done (no one else makes this name). Returns how
/// many times it failed with EIO.
fn create(c: &Client, dir: u64, name: &str, retry: bool) -> Result<u64> {
    let mut failed = 0;
    loop {
        match c.create(&Cred::ROOT, dir, name.as_bytes(), 0o644) {
            Ok(_) => return Ok(failed),
            Err(e) if e.0 == libc::EEXIST && failed > 0 => return Ok(failed),
            Err(e) if e.0 == libc::EIO && retry && failed < AMBIGUOUS_RETRIES => {
                failed += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => bail!("create {name}: {e}"),
        }
    }
}
