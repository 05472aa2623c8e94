//! One simulated run: N real servers (`cairn_cluster::server::start_embedded`, each with
//! a real cairn store in a temporary directory) and N clients (`Client::in_runtime`) on
//! turmoil's simulated network, stepped by this thread in virtual time.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Context, Result};
use cairn::fault::{Loss, PowerLoss};
use cairn_cluster::giga::{home_of, server_of, split_depth_limit};
use cairn_cluster::server::{
    start_embedded, CrashHook, Probe, ServerOptions, SyncMode, SPLIT_CRASH_POINTS,
};
use cairn_cluster::{Client, ClientOptions, ClusterConfig};
use cairn_fs::{Cred, ROOT};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::net::{dialer, server_dialer, Conns};

/// The port every simulated server listens on.
const PORT: u16 = 7000;
/// The virtual time of one simulation step.
const TICK: Duration = Duration::from_millis(1);
/// Name of the shared directory (under the root).
const SHARED: &[u8] = b"shared";
/// Steps an armed kill waits for a server to reach its drawn split crash point before
/// it takes the next split crash point any server reaches.
const RETARGET_STEPS: u64 = 50;
/// Steps an armed kill waits for any split crash point before it kills any server
/// instead (recorded with no point).
const ARMED_STEPS: u64 = 5_000;
/// The split crash points only a split to another server passes (the source's transfer,
/// the target's accept and activation). In a power-of-two cluster every split after
/// the directory covers all servers stays on its server (GIGA+ places partition
/// i + 2^r on the server of i once 2^r is a multiple of N), so kills at these points
/// are drawn in the first 5% of the creates, when the directory spreads.
const REMOTE_POINTS: &[&str] = &[
    "split:before-accept",
    "accept:after-write",
    "activate:before",
];

/// What one simulated run does.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// Servers (and client hosts: one per server).
    pub servers: u32,
    /// Files each server's client creates in the shared directory.
    pub files_per_server: u64,
    /// Seed of every random choice (network delays, crash points, restarts).
    pub seed: u64,
    /// Servers to kill and restart during splits.
    pub crashes: u32,
    /// Entries of a partition above which it splits.
    pub split_threshold: u64,
    /// Partitions per server a directory splits into at most (0: no bound).
    pub partitions_per_server: u32,
    /// Creates each client keeps in flight.
    pub window: u32,
    /// Where the servers' stores go (a fresh subdirectory is made and removed).
    pub work: PathBuf,
    /// A negative control for the tests: with crashes, servers acknowledge creates
    /// before they are durable (`SyncMode::Never`), kills land between steps (not at
    /// split crash points, just after a sync) and lose every unsynced write
    /// (`Loss::Unsynced`), so acknowledged creates vanish and the run's check must fail.
    pub ack_before_durable: bool,
}

/// One split as the driver saw it (it polls every server after every step).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SplitEvent {
    /// Simulation step at which the source's new depth was seen.
    pub step: u64,
    /// The source server.
    pub server: u32,
    /// The partition that split.
    pub index: u32,
    /// Its depth after the split.
    pub depth: u32,
    /// Entries it moved (see `moved_exact`).
    pub moved: u64,
    /// Whether `moved` is exact: the new partition was seen while incoming (it takes no
    /// creates then); otherwise it is the source's drop in entries between two polls.
    pub moved_exact: bool,
    /// Whether the new partition is on another server (its entries crossed the
    /// network); a local split moves no rows, it relabels the upper half in place.
    pub remote: bool,
}

/// A point of the time series.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Creates acknowledged so far.
    pub creates: u64,
    /// Virtual milliseconds since the start.
    pub virtual_ms: u64,
    /// Redirects the clients received so far.
    pub redirects: u64,
    /// Redirects per create since the previous sample.
    pub redirects_per_create: f64,
    /// Splits seen so far.
    pub splits: u64,
    /// Partitions of the shared directory.
    pub partitions: u64,
    /// Servers holding an active partition of it.
    pub servers_covered: u32,
}

/// A kill and restart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CrashEvent {
    /// Step at which the kill was armed (its point of the workload was reached).
    pub armed_step: u64,
    /// The split crash point drawn for it.
    pub drawn_point: String,
    /// Step of the kill.
    pub step: u64,
    /// The server.
    pub server: u32,
    /// The split crash point (`server::SPLIT_CRASH_POINTS`) at which the server stopped,
    /// inside a split: the drawn one, or, if no server reached that within
    /// `RETARGET_STEPS` (50) steps, the next one any server reached; `None`: no split
    /// crash point was reached within `ARMED_STEPS` (5,000) steps and a server was killed
    /// between steps instead.
    pub point: Option<String>,
    /// Whether the kill landed inside a split: at a split crash point, or (for a
    /// fallback kill) with one of its partitions splitting at that instant.
    pub during_split: bool,
    /// Step of the restart.
    pub restart_step: u64,
    /// Unsynced file changes the simulated power cut dropped (`Loss::Prefix`).
    pub lost_writes: usize,
}

/// What one run found.
#[derive(Clone, Debug, Serialize)]
pub struct SimResult {
    /// Servers.
    pub servers: u32,
    /// Files each server's client was asked to create.
    pub files_per_server: u64,
    /// The seed.
    pub seed: u64,
    /// Split threshold.
    pub split_threshold: u64,
    /// Partitions per server a directory splits into at most (0: no bound).
    pub partitions_per_server: u32,
    /// Creates acknowledged.
    pub creates: u64,
    /// Creates that failed with EIO (possible only with crashes: outcome unknown).
    pub creates_unknown: u64,
    /// Simulation steps (each `TICK`, 1 ms, of virtual time).
    pub steps: u64,
    /// Virtual milliseconds the workload took.
    pub virtual_ms: u64,
    /// Splits until the directory had an active partition on every server (None: never).
    pub splits_to_cover: Option<u64>,
    /// Creates acknowledged by then.
    pub creates_to_cover: Option<u64>,
    /// Virtual milliseconds by then.
    pub virtual_ms_to_cover: Option<u64>,
    /// Splits in all, as the servers counted them (exact, across restarts).
    pub splits: u64,
    /// Splits the driver saw (`split_events`; a partition that is activated and splits
    /// again between two polls is missed).
    pub splits_observed: u64,
    /// Entries moved by splits, in all, as the servers counted them.
    pub entries_moved: u64,
    /// Mean entries moved per split.
    pub moved_per_split_mean: f64,
    /// Most entries one split moved.
    pub moved_per_split_max: u64,
    /// Splits whose new partition is on another server (entries crossed the network).
    pub remote_splits: u64,
    /// Mean entries those moved.
    pub moved_per_remote_split_mean: f64,
    /// Redirects the clients received, in all.
    pub redirects: u64,
    /// Redirects per create, whole run.
    pub redirects_per_create: f64,
    /// Redirects per create after the directory covered every server.
    pub redirects_per_create_after_cover: Option<f64>,
    /// Entries of the shared directory per server at the end.
    pub entries_per_server: Vec<u64>,
    /// Their max / mean at the end.
    pub balance_max_over_mean: f64,
    /// Partitions of the shared directory at the end.
    pub partitions: u64,
    /// The time series.
    pub samples: Vec<Sample>,
    /// Every split, in the order seen.
    pub split_events: Vec<SplitEvent>,
    /// Kills and restarts.
    pub crash_events: Vec<CrashEvent>,
    /// Entries, partitions and inodes `admin::check` read at the end (it found no problem).
    pub checked: (u64, u64, u64),
}

/// State the clients share with the driver (one thread: `Rc`).
#[derive(Default)]
struct Shared {
    dir: Cell<u64>,
    acked: Cell<u64>,
    unknown: Cell<u64>,
    clients: RefCell<Vec<Client>>,
    error: RefCell<Option<String>>,
}

/// The kill the driver armed, shared with the servers' crash hooks (`Mutex`: the hook
/// must be `Sync`; one thread uses it).
#[derive(Default)]
struct Arming {
    /// The split crash point the next kill waits for; `Some(None)`: any of them.
    armed: Option<Option<&'static str>>,
    /// The server that stopped, and the point, until the driver kills it.
    fired: Option<(u32, &'static str)>,
}

impl Arming {
    /// Server `id` reached crash point `point`: whether it stops there.
    fn reached(&mut self, id: u32, point: &str) -> bool {
        if self.fired.is_some() {
            return false;
        }
        let hit = match self.armed {
            Some(Some(p)) => (p == point).then_some(p),
            Some(None) => SPLIT_CRASH_POINTS.iter().copied().find(|&p| p == point),
            None => None,
        };
        if let Some(p) = hit {
            self.armed = None;
            self.fired = Some((id, p));
        }
        hit.is_some()
    }
}

fn cluster_text(ips: &[IpAddr]) -> String {
    let mut t = String::new();
    for (i, ip) in ips.iter().enumerate() {
        t.push_str(&format!("[[server]]\nid = {i}\naddr = \"{ip}:{PORT}\"\n\n"));
    }
    t
}

/// Runs one simulation; fails if the namespace is inconsistent afterwards or a client
/// saw an error other than the outcome-unknown `EIO` of a crash.
pub fn simulate(o: &SimOptions) -> Result<SimResult> {
    ensure!(o.servers >= 1, "at least one server");
    ensure!(o.window >= 1, "a window of at least one create");
    let n = o.servers;
    let work = o
        .work
        .join(format!("sim-{n}-{}-{}", o.seed, std::process::id()));
    if work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    }
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let res = run(o, &work);
    let _ = std::fs::remove_dir_all(&work);
    res
}

fn run(o: &SimOptions, work: &std::path::Path) -> Result<SimResult> {
    let n = o.servers;
    let mut rng = StdRng::seed_from_u64(o.seed ^ 0xc1a5_7e55);
    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(100 * 24 * 3600))
        .tick_duration(TICK)
        .min_message_latency(Duration::from_micros(50))
        .max_message_latency(Duration::from_millis(2))
        .tcp_capacity(4096)
        .rng_seed(o.seed)
        .build();
    let ips: Vec<IpAddr> = (0..n).map(|i| sim.lookup(format!("s{i}"))).collect();
    // The simulated network carries plain HTTP/2 (no TLS): an insecure cluster file, the
    // only kind a custom dialer accepts (cairn_cluster::transport).
    let mut cfg =
        ClusterConfig::parse(&cluster_text(&ips)).context("the simulated cluster file")?;
    cfg.set_insecure(true);
    let crashing = o.crashes > 0;
    let sync = if crashing && !o.ack_before_durable {
        SyncMode::Always
    } else {
        SyncMode::Never
    };
    let loss = if o.ack_before_durable {
        Loss::Unsynced
    } else {
        Loss::Prefix
    };
    // The kill armed now, shared with every server's crash hook.
    let arming = Arc::new(Mutex::new(Arming::default()));
    let probes: Rc<RefCell<Vec<Option<Probe>>>> = Rc::new(RefCell::new(vec![None; n as usize]));
    let mut power: Vec<Option<Arc<PowerLoss>>> = Vec::new();
    let conns: Vec<Arc<Conns>> = (0..n).map(|_| Arc::new(Conns::default())).collect();
    for i in 0..n {
        let dir = work.join(format!("s{i}"));
        let pl = if crashing {
            let stash = work.join(format!("stash{i}"));
            std::fs::create_dir_all(&stash)?;
            Some(Arc::new(
                PowerLoss::new(&stash).context("power-loss record")?,
            ))
        } else {
            None
        };
        power.push(pl.clone());
        let mut opts =
            ServerOptions::new(&dir, SocketAddr::new(ips[i as usize], PORT), cfg.clone());
        opts.sync = sync;
        opts.split_threshold = o.split_threshold;
        opts.partitions_per_server = o.partitions_per_server;
        if crashing {
            let arming = arming.clone();
            opts.hooks.crash_hook = Some(CrashHook(Arc::new(move |id, point| {
                arming.lock().expect("one thread").reached(id, point)
            })));
        }
        let probes = probes.clone();
        let conns = conns[i as usize].clone();
        sim.host(format!("s{i}"), move || {
            let opts = opts.clone();
            let mut engine = cairn::Options::new()
                .shards(2)
                .segment_size(8 << 20)
                .write_buffer(64 << 10)
                .background_compaction(false);
            if let Some(pl) = &pl {
                engine = engine.power_loss(pl.clone());
            }
            let probes = probes.clone();
            let conns = conns.clone();
            async move {
                let listener =
                    turmoil::net::TcpListener::bind((IpAddr::from(Ipv4Addr::UNSPECIFIED), PORT))
                        .await?;
                let accepting = conns.clone();
                let incoming = futures_util::stream::unfold(listener, move |l| {
                    let conns = accepting.clone();
                    async move {
                        let r = l.accept().await.map(|(s, _)| conns.register(s));
                        Some((r, l))
                    }
                });
                let server = start_embedded(opts, engine, incoming, server_dialer(conns))?;
                probes.borrow_mut()[i as usize] = Some(server.probe());
                std::future::pending::<()>().await;
                drop(server);
                Ok(())
            }
        });
    }
    let shared = Rc::new(Shared::default());
    let per_task = |files: u64, w: u32, j: u32| (j as u64..files).step_by(w as usize);
    for c in 0..n {
        let shared = shared.clone();
        let cfg = cfg.clone();
        let (files, w, crashing) = (o.files_per_server, o.window, crashing);
        sim.client(format!("c{c}"), async move {
            let opts = ClientOptions {
                timeout: Duration::from_secs(600),
                connect_timeout: Duration::from_secs(2),
                creates: cairn_cluster::Creates::Stream,
            };
            let client = Client::in_runtime(cfg, opts, dialer())?;
            shared.clients.borrow_mut().push(client.clone());
            if c == 0 {
                let a = client
                    .mkdir_async(&Cred::ROOT, ROOT, SHARED, 0o755)
                    .await
                    .map_err(|e| anyhow!("mkdir of the shared directory: {e:?}"))?;
                shared.dir.set(a.ino);
            }
            while shared.dir.get() == 0 {
                tokio::time::sleep(TICK).await;
            }
            let dir = shared.dir.get();
            let mut tasks = Vec::new();
            for j in 0..w {
                let (client, shared) = (client.clone(), shared.clone());
                tasks.push(tokio::task::spawn_local(async move {
                    for k in per_task(files, w, j) {
                        let name = format!("c{c}-{k}");
                        match client
                            .create_async(&Cred::ROOT, dir, name.as_bytes(), 0o644)
                            .await
                        {
                            Ok(_) => shared.acked.set(shared.acked.get() + 1),
                            Err(e) if crashing && e.0 == libc::EIO => {
                                shared.unknown.set(shared.unknown.get() + 1)
                            }
                            Err(e) => {
                                *shared.error.borrow_mut() =
                                    Some(format!("client {c}: create {name}: {e:?}"));
                                return;
                            }
                        }
                    }
                }));
            }
            for t in tasks {
                t.await?;
            }
            Ok(())
        });
    }

    let total = o.files_per_server * n as u64;
    // With partitions bounded per server, the directory's splits end once it is spread
    // (2^D - 1 of them, `split_depth_limit`), early in a long run: each kill is then
    // armed at a count of splits seen rather than of creates, so that it lands inside a
    // split.
    let bounded_splits = (o.partitions_per_server > 0)
        .then(|| (1u64 << split_depth_limit(n, o.partitions_per_server)) - 1);
    // Each kill: a split crash point, and the progress at which it is armed. Unbounded:
    // creates acknowledged, in the first 5% for a point only remote splits pass, else
    // 5-90%. Bounded: splits seen, before the directory covers the servers (about N - 1
    // splits) for a remote point, else in the first 90% of the splits.
    let mut crash_at: Vec<(u64, &'static str)> = (0..o.crashes)
        .map(|_| {
            let p = SPLIT_CRASH_POINTS[rng.random_range(0..SPLIT_CRASH_POINTS.len())];
            let remote = REMOTE_POINTS.contains(&p);
            let at = match bounded_splits {
                Some(e) if remote => rng.random_range(0..=(n as u64).saturating_sub(2).min(e)),
                Some(e) => rng.random_range(0..=e * 9 / 10),
                None if remote => rng.random_range(0..=total / 20),
                None => rng.random_range(total / 20..=(total * 9 / 10).max(total / 20)),
            };
            (at, p)
        })
        .collect();
    crash_at.sort_unstable();
    let mut crash_next = 0usize;
    let mut armed_since: Option<u64> = None;
    // (restart step, server, crash event)
    let mut down: Vec<(u64, u32, usize)> = Vec::new();
    // Splits and moved entries each server counted before its kills.
    let mut counted: Vec<(u64, u64)> = vec![(0, 0); n as usize];
    let mut obs = Observer::new(n, ROOT);
    let mut res = SimResult {
        servers: n,
        files_per_server: o.files_per_server,
        seed: o.seed,
        split_threshold: o.split_threshold,
        partitions_per_server: o.partitions_per_server,
        creates: 0,
        creates_unknown: 0,
        steps: 0,
        virtual_ms: 0,
        splits_to_cover: None,
        creates_to_cover: None,
        virtual_ms_to_cover: None,
        splits: 0,
        splits_observed: 0,
        entries_moved: 0,
        moved_per_split_mean: 0.0,
        moved_per_split_max: 0,
        remote_splits: 0,
        moved_per_remote_split_mean: 0.0,
        redirects: 0,
        redirects_per_create: 0.0,
        redirects_per_create_after_cover: None,
        entries_per_server: Vec::new(),
        balance_max_over_mean: 0.0,
        partitions: 0,
        samples: Vec::new(),
        split_events: Vec::new(),
        crash_events: Vec::new(),
        checked: (0, 0, 0),
    };
    let sample_every = (total / 50).max(1);
    let mut next_sample = 0u64;
    let mut redirects_at_cover = 0u64;
    let mut step = 0u64;
    let redirects = |s: &Shared| {
        s.clients
            .borrow()
            .iter()
            .map(|c| c.redirects())
            .sum::<u64>()
    };
    loop {
        let done = sim
            .step()
            .map_err(|e| anyhow!("simulation step {step}: {e}"))?;
        step += 1;
        if let Some(e) = shared.error.borrow().as_ref() {
            bail!("{e}");
        }
        let dir = shared.dir.get();
        if dir != 0 {
            obs.dir = dir;
            obs.poll(step, &probes.borrow(), &mut res.split_events);
        }
        let acked = shared.acked.get();
        if res.splits_to_cover.is_none() && dir != 0 && obs.covered() == n {
            res.splits_to_cover = Some(res.split_events.len() as u64);
            res.creates_to_cover = Some(acked);
            res.virtual_ms_to_cover = Some(sim.elapsed().as_millis() as u64);
            redirects_at_cover = redirects(&shared);
        }
        if acked >= next_sample || done {
            let r = redirects(&shared);
            let prev = res.samples.last();
            let (pc, pr) = prev.map_or((0, 0), |p| (p.creates, p.redirects));
            res.samples.push(Sample {
                creates: acked,
                virtual_ms: sim.elapsed().as_millis() as u64,
                redirects: r,
                redirects_per_create: ratio(r - pr, acked - pc),
                splits: res.split_events.len() as u64,
                partitions: obs.partitions(),
                servers_covered: obs.covered(),
            });
            next_sample = acked + sample_every;
        }
        // Restarts that are due.
        down.retain(|&(at, s, ev)| {
            if step >= at {
                sim.bounce(format!("s{s}"));
                res.crash_events[ev].restart_step = step;
                false
            } else {
                true
            }
        });
        // A kill inside a split: once the kill's point of the workload is reached, a
        // split crash point drawn from the seed is armed; the first server to reach it
        // stops there (its crash hook) and is killed at the end of this step. If no
        // server reaches it within ARMED_STEPS steps, any server is killed instead.
        let fired = arming.lock().expect("one thread").fired.take();
        let mut kill: Option<(u32, Option<&'static str>)> = fired.map(|(s, p)| (s, Some(p)));
        if kill.is_none() && crash_next < crash_at.len() && !done {
            let progress = match bounded_splits {
                Some(_) => res.split_events.len() as u64,
                None => acked,
            };
            match armed_since {
                None if progress >= crash_at[crash_next].0 && o.ack_before_durable => {
                    // The negative control kills between steps at once: right after a
                    // split's sync there is little unsynced to lose.
                    armed_since = Some(step);
                    let up: Vec<u32> = (0..n).filter(|s| !down.iter().any(|d| d.1 == *s)).collect();
                    if !up.is_empty() {
                        kill = Some((up[rng.random_range(0..up.len())], None));
                    }
                }
                None if progress >= crash_at[crash_next].0 => {
                    arming.lock().expect("one thread").armed = Some(Some(crash_at[crash_next].1));
                    armed_since = Some(step);
                }
                Some(since) if step - since == RETARGET_STEPS => {
                    arming.lock().expect("one thread").armed = Some(None);
                }
                Some(since) if step - since >= ARMED_STEPS => {
                    arming.lock().expect("one thread").armed = None;
                    let up: Vec<u32> = (0..n).filter(|s| !down.iter().any(|d| d.1 == *s)).collect();
                    if !up.is_empty() {
                        kill = Some((up[rng.random_range(0..up.len())], None));
                    }
                }
                _ => {}
            }
        }
        if let Some((s, point)) = kill {
            let during_split = point.is_some()
                || probes.borrow()[s as usize]
                    .as_ref()
                    .is_some_and(|p| p.splitting());
            let pl = power[s as usize].as_ref().context("power-loss record")?;
            if let Some(p) = probes.borrow()[s as usize].as_ref() {
                add_counts(&mut counted[s as usize], p);
            }
            pl.cut();
            // Its connections close in the order they were opened (net::Conns).
            conns[s as usize].arm_kill();
            sim.crash(format!("s{s}"));
            conns[s as usize].disarm();
            probes.borrow_mut()[s as usize] = None;
            let r = pl
                .restart(loss, rng.random())
                .with_context(|| format!("rewriting server {s}'s files after the kill"))?;
            let restart = step + rng.random_range(5..200);
            res.crash_events.push(CrashEvent {
                armed_step: armed_since.unwrap_or(step),
                drawn_point: crash_at[crash_next].1.to_string(),
                step,
                server: s,
                point: point.map(str::to_string),
                during_split,
                restart_step: 0,
                lost_writes: r.lost,
            });
            down.push((restart, s, res.crash_events.len() - 1));
            crash_next += 1;
            armed_since = None;
        }
        if done {
            break;
        }
    }
    for (_, s, ev) in down.drain(..) {
        sim.bounce(format!("s{s}"));
        res.crash_events[ev].restart_step = step;
    }
    res.steps = step;
    res.virtual_ms = sim.elapsed().as_millis() as u64;
    res.creates = shared.acked.get();
    res.creates_unknown = shared.unknown.get();

    // The check: the existing admin check over the simulated network, retried while
    // restarted servers finish their intents (at most 120 virtual seconds).
    let verdict: Rc<RefCell<Option<Result<cairn_cluster::admin::ClusterCheck, String>>>> =
        Rc::new(RefCell::new(None));
    {
        let verdict = verdict.clone();
        let cfg = cfg.clone();
        sim.client("checker", async move {
            let d = dialer();
            let mut last = None;
            for _ in 0..120 {
                match cairn_cluster::admin::check_with(&cfg, Duration::from_secs(30), d.clone())
                    .await
                {
                    Ok(c) if c.problems.is_empty() && c.in_flight == 0 => {
                        last = Some(Ok(c));
                        break;
                    }
                    Ok(c) => last = Some(Ok(c)),
                    Err(e) => last = Some(Err(e.to_string())),
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            *verdict.borrow_mut() = last;
            Ok(())
        });
    }
    loop {
        let done = sim
            .step()
            .map_err(|e| anyhow!("simulation step {step}: {e}"))?;
        step += 1;
        if done {
            break;
        }
    }
    obs.poll(step, &probes.borrow(), &mut res.split_events);
    let check = verdict
        .borrow_mut()
        .take()
        .context("the check did not finish")?
        .map_err(|e| anyhow!("check: {e}"))?;
    if !check.problems.is_empty() || check.in_flight != 0 {
        bail!(
            "the namespace is INCONSISTENT after the simulation (seed {}): {} in flight; {}",
            o.seed,
            check.in_flight,
            check.problems.join("; ")
        );
    }
    // Every acknowledged create is there; a create that failed may or may not be. The
    // check's entries are the files plus the shared directory's own entry.
    let files = check.entries.saturating_sub(1);
    if files < res.creates || files > res.creates + res.creates_unknown {
        bail!(
            "the shared directory holds {files} files; {} creates were acknowledged and {} \
             failed (seed {})",
            res.creates,
            res.creates_unknown,
            o.seed
        );
    }
    res.checked = (check.entries, check.partitions, check.inodes);

    let r = redirects(&shared);
    res.redirects = r;
    res.redirects_per_create = ratio(r, res.creates);
    if let Some(c) = res.creates_to_cover {
        if res.creates > c {
            res.redirects_per_create_after_cover =
                Some(ratio(r - redirects_at_cover, res.creates - c));
        }
    }
    // The servers' own counts: those of the servers killed, as read just before their
    // kill, plus the running servers' now.
    for (c, p) in counted.iter_mut().zip(probes.borrow().iter()) {
        if let Some(p) = p {
            add_counts(c, p);
        }
    }
    res.splits = counted.iter().map(|c| c.0).sum();
    res.splits_observed = res.split_events.len() as u64;
    res.entries_moved = counted.iter().map(|c| c.1).sum();
    res.moved_per_split_mean = ratio(res.entries_moved, res.splits);
    res.moved_per_split_max = res.split_events.iter().map(|e| e.moved).max().unwrap_or(0);
    let remote: Vec<u64> = res
        .split_events
        .iter()
        .filter(|e| e.remote)
        .map(|e| e.moved)
        .collect();
    res.remote_splits = remote.len() as u64;
    res.moved_per_remote_split_mean = ratio(remote.iter().sum(), res.remote_splits);
    res.entries_per_server = obs.entries_per_server();
    res.balance_max_over_mean = balance(&res.entries_per_server);
    res.partitions = obs.partitions();
    Ok(res)
}

/// Adds the splits and moved entries server `p` counted since it started to `c`.
fn add_counts(c: &mut (u64, u64), p: &Probe) {
    c.0 += p.splits_done().unwrap_or(0);
    c.1 += p.entries_moved().unwrap_or(0);
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Max / mean of `v` (0 for an empty or all-zero list).
pub fn balance(v: &[u64]) -> f64 {
    let sum: u64 = v.iter().sum();
    if v.is_empty() || sum == 0 {
        return 0.0;
    }
    let mean = sum as f64 / v.len() as f64;
    *v.iter().max().unwrap_or(&0) as f64 / mean
}

/// Follows the shared directory's partitions on every server.
struct Observer {
    n: u32,
    dir: u64,
    /// (server, index) → (depth, entries) at the last poll.
    seen: BTreeMap<(u32, u32), (u32, u64)>,
    /// New partitions seen while incoming: index → entries.
    incoming: BTreeMap<u32, u64>,
}

impl Observer {
    fn new(n: u32, dir: u64) -> Observer {
        Observer {
            n,
            dir,
            seen: BTreeMap::new(),
            incoming: BTreeMap::new(),
        }
    }

    /// Reads every server that is up; records the splits its depths show.
    fn poll(&mut self, step: u64, probes: &[Option<Probe>], out: &mut Vec<SplitEvent>) {
        for (s, p) in probes.iter().enumerate() {
            let Some(parts) = p.as_ref().and_then(|p| p.partitions()) else {
                continue;
            };
            for q in parts.iter().filter(|q| q.dir == self.dir) {
                if q.incoming {
                    self.incoming.entry(q.index).or_insert(q.entries);
                    continue;
                }
                let key = (s as u32, q.index);
                if let Some(&(d0, e0)) = self.seen.get(&key) {
                    for d in d0..q.depth {
                        let child = q.index + (1u32 << d.min(31));
                        let (moved, exact) = match self.incoming.get(&child) {
                            Some(&e) => (e, true),
                            None => (e0.saturating_sub(q.entries), false),
                        };
                        out.push(SplitEvent {
                            step,
                            server: s as u32,
                            index: q.index,
                            depth: d + 1,
                            moved,
                            moved_exact: exact,
                            remote: server_of(home_of(self.dir), child, self.n) != s as u32,
                        });
                    }
                }
                self.seen.insert(key, (q.depth, q.entries));
            }
        }
    }

    /// Partitions of the directory that are active somewhere.
    fn partitions(&self) -> u64 {
        self.seen.len() as u64
    }

    /// Servers holding an active partition of the directory.
    fn covered(&self) -> u32 {
        let mut s: Vec<u32> = self.seen.keys().map(|k| k.0).collect();
        s.dedup();
        s.len() as u32
    }

    fn entries_per_server(&self) -> Vec<u64> {
        let mut v = vec![0u64; self.n as usize];
        for (&(s, _), &(_, e)) in &self.seen {
            v[s as usize] += e;
        }
        v
    }
}
