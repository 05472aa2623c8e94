//! Per-operation server CPU costs, measured in this process on this machine: one real
//! server (`cairn_cluster::server::start`, TCP on loopback, its own runtime) and a
//! client in the same process with as many creates in flight as a simulated server
//! serves (`--window`: N clients each keeping that many over N servers), each in a
//! request of its own, as there. The server's CPU is the process's CPU time
//! (`getrusage`) less the CPU of the client's threads (named `cairn-client`, read from
//! `/proc/self/task`) and of the calling thread: everything else (the server's runtime
//! and blocking threads, the engine's background threads) is the server's.

use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use cairn_cluster::server::{self, ServerOptions, SyncMode};
use cairn_cluster::{Client, ClientOptions, ClusterConfig, Creates};
use cairn_fs::{Cred, FileSystem, ROOT};
use serde::Serialize;

/// Server CPU per operation, in microseconds.
#[derive(Clone, Debug, Serialize)]
pub struct Costs {
    /// Creates (and lookups) timed.
    pub ops: u64,
    /// Callers at once (the simulation's `--window`), each create in a request of its
    /// own.
    pub window: u32,
    /// Clients (connections) the callers are spread over: in the simulation a server's
    /// creates in flight come from as many clients as it has creates in flight (each
    /// client spreads its window over every server), so by default each caller is a
    /// client of its own and no request shares a read or a write with another.
    pub clients: u32,
    /// How the clients sent their creates (`stream` or `single`).
    pub creates: String,
    /// Server CPU per create into a directory that does not split.
    pub create_us: f64,
    /// Server CPU per lookup: the estimate of a redirect's cost (a redirect takes the
    /// same request path, decoding, the server's lock and a reply, without the store
    /// read a lookup does: an upper bound).
    pub redirect_us: f64,
    /// Extra server CPU per create when the directory splits (threshold
    /// `split_threshold`, one server, so the target is local and no bytes cross the
    /// network), divided by the entries the splits moved: the per-entry cost of a split.
    pub split_entry_us: f64,
    /// The threshold of that run.
    pub split_threshold: u64,
    /// Splits in that run.
    pub splits: u64,
    /// Entries they moved, estimated as splits × (threshold + 1) / 2 (a partition splits
    /// on reaching threshold + 1 entries and moves the upper half of its hash range).
    pub entries_moved_estimate: u64,
}

fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

fn rusage(who: libc::c_int) -> f64 {
    // SAFETY: `rusage` is plain data, for which all zeroes is a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into a struct we own, valid for the call.
    if unsafe { libc::getrusage(who, &mut u) } != 0 {
        return 0.0;
    }
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(u.ru_utime) + s(u.ru_stime)
}

/// CPU seconds of the threads of this process whose name starts with `prefix`.
fn threads_cpu(prefix: &str) -> f64 {
    let hz = ticks_per_sec();
    let mut sum = 0.0;
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    for t in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ... utime stime at fields 14, 15 (1-based).
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !stat[open + 1..close].starts_with(prefix) {
            continue;
        }
        let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let (Some(u), Some(s)) = (f.get(11), f.get(12)) else {
            continue;
        };
        sum += (u.parse::<f64>().unwrap_or(0.0) + s.parse::<f64>().unwrap_or(0.0)) / hz;
    }
    sum
}

/// CPU seconds of everything but the client threads and this thread.
fn server_cpu() -> f64 {
    rusage(libc::RUSAGE_SELF) - threads_cpu("cairn-client") - rusage(libc::RUSAGE_THREAD)
}

/// One server on a new store in `dir` with `threshold`; creates `ops` files in a new
/// directory from `window` threads over `clients` clients (1 ..= `window`, as
/// [`measure`] makes it), then looks each up the same way.
fn one_run(
    dir: &Path,
    threshold: u64,
    ops: u64,
    (window, clients): (u32, u32),
    how: Creates,
) -> Result<Run> {
    let window = window.max(1);
    let addr = crate::servers::free_port()?;
    // Certificates for this run: the server and client talk mutual TLS, the default.
    let servers = ClusterConfig::parse(&format!("[[server]]\nid = 0\naddr = \"{addr}\"\n"))?
        .servers()
        .to_vec();
    let file = cairn_cluster::tls::init_certs(
        &dir.with_extension("certs"),
        &servers,
        &[cairn_cluster::tls::ClientCert::admin("costs")],
    )?;
    let cfg = ClusterConfig::load(&file)?;
    let mut opts = ServerOptions::new(dir, addr, cfg.clone());
    opts.sync = SyncMode::Never;
    opts.split_threshold = threshold;
    // Splits without bound: the run measures what a split costs per entry moved, so
    // its partitions must go on splitting however few servers it has.
    opts.partitions_per_server = 0;
    let h = server::start(opts).context("starting the measuring server")?;
    // The clients' default (streamed creates), as the simulated clients send them: a
    // server's creates in flight there come from many clients, each with fewer than
    // the four in flight a client keeps before it would batch (DESIGN.md, "Batched
    // creates"), so batches would not form either.
    let opts = ClientOptions {
        creates: how,
        ..ClientOptions::default()
    };
    let clients: Vec<Client> = (0..clients)
        .map(|_| Client::with_config(cfg.clone(), opts.clone()))
        .collect::<Result<_, _>>()?;
    let cred = Cred::ROOT;
    let d = clients[0]
        .mkdir(&cred, ROOT, b"costs", 0o755)
        .map_err(|e| anyhow!("mkdir: {e:?}"))?
        .ino;
    // `window` callers at once, as the simulation's clients keep `--window` creates in
    // flight (their threads are named like the client's, so their CPU is not counted).
    let each = |op: &'static str| -> Result<()> {
        let (clients, cred) = (&clients, &cred);
        std::thread::scope(|sc| {
            let workers: Vec<_> = (0..window)
                .map(|j| {
                    let client = &clients[j as usize % clients.len()];
                    std::thread::Builder::new()
                        .name("cairn-client-load".into())
                        .spawn_scoped(sc, move || -> Result<()> {
                            for k in (u64::from(j)..ops).step_by(window as usize) {
                                let name = format!("f{k}");
                                let r = if op == "create" {
                                    client.create(cred, d, name.as_bytes(), 0o644)
                                } else {
                                    client.lookup(cred, d, name.as_bytes())
                                };
                                r.map_err(|e| anyhow!("{op} {name}: {e:?}"))?;
                            }
                            Ok(())
                        })
                })
                .collect::<std::io::Result<_>>()?;
            for w in workers {
                w.join().map_err(|_| anyhow!("a {op} thread panicked"))??;
            }
            Ok(())
        })
    };
    let t0 = server_cpu();
    each("create")?;
    let t1 = server_cpu();
    each("lookup")?;
    let t2 = server_cpu();
    let status = cairn_cluster::admin::status(&cfg, Duration::from_secs(10));
    let splits = status.servers.first().map_or(0, |s| s.splits_done);
    drop(clients);
    h.shutdown()?;
    Ok(Run {
        create_cpu: t1 - t0,
        lookup_cpu: t2 - t1,
        splits,
    })
}

/// What one run of [`one_run`] measured.
struct Run {
    create_cpu: f64,
    lookup_cpu: f64,
    splits: u64,
}

/// Measures [`Costs`] with `ops` creates per run from `window` callers at once spread
/// over `clients` clients, sent as `how` says, stores under `work`.
pub fn measure(
    work: &Path,
    ops: u64,
    split_threshold: u64,
    (window, clients): (u32, u32),
    how: Creates,
) -> Result<Costs> {
    let clients = clients.clamp(1, window.max(1));
    let ops = ops.max(1);
    let base = work.join(format!("costs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base)?;
    let res = (|| {
        let flat = one_run(
            &base.join("flat"),
            u64::MAX / 4,
            ops,
            (window, clients),
            how,
        )?;
        let split = one_run(
            &base.join("split"),
            split_threshold,
            ops,
            (window, clients),
            how,
        )?;
        let (create, lookup, splits) = (flat.create_cpu, flat.lookup_cpu, split.splits);
        let moved = splits * split_threshold.saturating_add(1) / 2;
        let extra = (split.create_cpu - create).max(0.0);
        Ok(Costs {
            ops,
            window,
            clients,
            creates: how.word().to_string(),
            create_us: create / ops as f64 * 1e6,
            redirect_us: lookup / ops as f64 * 1e6,
            split_entry_us: if moved == 0 {
                0.0
            } else {
                extra / moved as f64 * 1e6
            },
            split_threshold,
            splits,
            entries_moved_estimate: moved,
        })
    })();
    let _ = std::fs::remove_dir_all(&base);
    res
}
