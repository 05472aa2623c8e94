//! One simulated run: N real servers (`cairn_cluster::server::start_embedded`, each with
//! a real cairn store in a temporary directory) and N clients (`Client::in_runtime`) on
//! turmoil's simulated network, stepped by this thread in virtual time.

use std::cell::{Cell, RefCell};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Context, Result};
use cairn::fault::{Loss, PowerLoss};
use cairn_cluster::admin::ClusterCheck;
use cairn_cluster::server::{start_embedded, CrashHook, Probe, ServerOptions, SyncMode};
use cairn_cluster::{Client, ClientOptions, ClusterConfig};
use cairn_fs::{Cred, ROOT};
use rand::Rng;
use serde::Serialize;

use super::kills::{lock, Arming, Kills};
use super::net::{dialer, server_dialer, Conns};
use super::observe::Observer;

/// The port every simulated server listens on.
const PORT: u16 = 7000;
/// The virtual time of one simulation step.
const TICK: Duration = Duration::from_millis(1);
/// Name of the shared directory (under the root).
const SHARED: &[u8] = b"shared";
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

fn run(o: &SimOptions, work: &Path) -> Result<SimResult> {
    let mut cluster = Cluster::new(o, work)?;
    let shared = Rc::new(Shared::default());
    cluster.add_clients(o, &shared);
    let mut d = Driver::new(o, cluster, shared);
    while !d.step()? {}
    d.restart_all();
    let check = d.cluster.check()?;
    d.obs.poll(
        d.cluster.step,
        &d.cluster.probes.borrow(),
        &mut d.res.split_events,
    );
    d.finish(o.seed, &check)
}

/// The simulated cluster: turmoil's simulation with a host per server (and a client
/// host per server), and what the driver reaches the servers by.
struct Cluster {
    sim: turmoil::Sim<'static>,
    /// The cluster file every server and client reads.
    cfg: ClusterConfig,
    /// The kill armed now, shared with every server's crash hook.
    arming: Arc<Mutex<Arming>>,
    /// Each server's probe while it is up.
    probes: Rc<RefCell<Vec<Option<Probe>>>>,
    /// Each server's power-loss record (with crashes).
    power: Vec<Option<Arc<PowerLoss>>>,
    /// Each server's connections.
    conns: Vec<Arc<Conns>>,
    /// What a kill loses of the unsynced writes.
    loss: Loss,
    /// Simulation steps taken.
    step: u64,
}

impl Cluster {
    /// The simulation with `o.servers` servers on stores under `work` (no client yet).
    fn new(o: &SimOptions, work: &Path) -> Result<Cluster> {
        let n = o.servers;
        let sim = turmoil::Builder::new()
            .simulation_duration(Duration::from_secs(100 * 24 * 3600))
            .tick_duration(TICK)
            .min_message_latency(Duration::from_micros(50))
            .max_message_latency(Duration::from_millis(2))
            .tcp_capacity(4096)
            .rng_seed(o.seed)
            .build();
        let ips: Vec<IpAddr> = (0..n).map(|i| sim.lookup(format!("s{i}"))).collect();
        // The simulated network carries plain HTTP/2 (no TLS): an insecure cluster file,
        // the only kind a custom dialer accepts (cairn_cluster::transport).
        let mut cfg =
            ClusterConfig::parse(&cluster_text(&ips)).context("the simulated cluster file")?;
        cfg.set_insecure(true);
        let mut cluster = Cluster {
            sim,
            cfg,
            arming: Arc::new(Mutex::new(Arming::default())),
            probes: Rc::new(RefCell::new(vec![None; n as usize])),
            power: Vec::new(),
            conns: (0..n).map(|_| Arc::new(Conns::default())).collect(),
            loss: if o.ack_before_durable {
                Loss::Unsynced
            } else {
                Loss::Prefix
            },
            step: 0,
        };
        for (i, ip) in (0..n).zip(ips) {
            cluster.add_server(o, work, i, SocketAddr::new(ip, PORT))?;
        }
        Ok(cluster)
    }

    /// Host `s{i}`: server `i` on a store in `work/s{i}`, started again on every restart.
    fn add_server(&mut self, o: &SimOptions, work: &Path, i: u32, addr: SocketAddr) -> Result<()> {
        let crashing = o.crashes > 0;
        let pl = if crashing {
            let stash = work.join(format!("stash{i}"));
            std::fs::create_dir_all(&stash)?;
            Some(Arc::new(
                PowerLoss::new(&stash).context("power-loss record")?,
            ))
        } else {
            None
        };
        self.power.push(pl.clone());
        let mut opts = ServerOptions::new(work.join(format!("s{i}")), addr, self.cfg.clone());
        opts.sync = if crashing && !o.ack_before_durable {
            SyncMode::Always
        } else {
            SyncMode::Never
        };
        opts.split_threshold = o.split_threshold;
        opts.partitions_per_server = o.partitions_per_server;
        if crashing {
            let arming = self.arming.clone();
            opts.hooks.crash_hook = Some(CrashHook(Arc::new(move |id, point| {
                lock(&arming).reached(id, point)
            })));
        }
        let probes = self.probes.clone();
        let conns = self.conns[i as usize].clone();
        self.sim.host(format!("s{i}"), move || {
            let mut engine = cairn::Options::new()
                .shards(2)
                .segment_size(8 << 20)
                .write_buffer(64 << 10)
                .background_compaction(false);
            if let Some(pl) = &pl {
                engine = engine.power_loss(pl.clone());
            }
            serve(i, opts.clone(), engine, probes.clone(), conns.clone())
        });
        Ok(())
    }

    /// Hosts `c{c}`: one client per server, each creating its files in the shared
    /// directory (which client 0 makes).
    fn add_clients(&mut self, o: &SimOptions, shared: &Rc<Shared>) {
        let work = Workload {
            files: o.files_per_server,
            window: o.window,
            crashing: o.crashes > 0,
        };
        for c in 0..o.servers {
            self.sim.client(
                format!("c{c}"),
                work.client(c, self.cfg.clone(), shared.clone()),
            );
        }
    }

    /// One step of virtual time: whether the simulation is over.
    fn step(&mut self) -> Result<bool> {
        let done = self
            .sim
            .step()
            .map_err(|e| anyhow!("simulation step {}: {e}", self.step))?;
        self.step += 1;
        Ok(done)
    }

    /// Virtual milliseconds since the start.
    fn elapsed_ms(&self) -> u64 {
        self.sim.elapsed().as_millis() as u64
    }

    /// Kills server `s` now: its connections close in the order they were opened
    /// (`net::Conns`).
    fn crash(&mut self, s: u32) {
        self.conns[s as usize].arm_kill();
        self.sim.crash(format!("s{s}"));
        self.conns[s as usize].disarm();
        self.probes.borrow_mut()[s as usize] = None;
    }

    /// The existing admin check over the simulated network, run to the end of the
    /// simulation and retried while restarted servers finish their intents (at most 120
    /// virtual seconds): its last answer.
    fn check(&mut self) -> Result<ClusterCheck> {
        let verdict: Rc<RefCell<Option<Result<ClusterCheck, String>>>> =
            Rc::new(RefCell::new(None));
        self.sim
            .client("checker", checker(self.cfg.clone(), verdict.clone()));
        while !self.step()? {}
        let last = verdict.borrow_mut().take();
        last.context("the check did not finish")?
            .map_err(|e| anyhow!("check: {e}"))
    }
}

/// Server `i`'s host: listens on the simulated network and serves until it is killed.
async fn serve(
    i: u32,
    opts: ServerOptions,
    engine: cairn::Options,
    probes: Rc<RefCell<Vec<Option<Probe>>>>,
    conns: Arc<Conns>,
) -> turmoil::Result {
    let listener =
        turmoil::net::TcpListener::bind((IpAddr::from(Ipv4Addr::UNSPECIFIED), PORT)).await?;
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

/// The checker's host: `admin::check` until it finds the namespace clean and settled,
/// at most 120 times a virtual second apart; its last answer goes to `verdict`.
async fn checker(
    cfg: ClusterConfig,
    verdict: Rc<RefCell<Option<Result<ClusterCheck, String>>>>,
) -> turmoil::Result {
    let d = dialer();
    let mut last = None;
    for _ in 0..120 {
        match cairn_cluster::admin::check_with(&cfg, Duration::from_secs(30), d.clone()).await {
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
}

/// What every client does: `files` creates, `window` at a time, each caller taking
/// every `window`-th name.
#[derive(Clone, Copy)]
struct Workload {
    files: u64,
    window: u32,
    /// Whether servers are killed (an `EIO` is then an outcome unknown, not an error).
    crashing: bool,
}

impl Workload {
    /// Client `c`'s host: connects, waits for the shared directory (client 0 makes it),
    /// creates its files.
    async fn client(self, c: u32, cfg: ClusterConfig, shared: Rc<Shared>) -> turmoil::Result {
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
        for j in 0..self.window {
            let (client, shared) = (client.clone(), shared.clone());
            tasks.push(tokio::task::spawn_local(
                self.creates(client, shared, c, dir, j),
            ));
        }
        for t in tasks {
            t.await?;
        }
        Ok(())
    }

    /// Caller `j` of client `c`: its creates in `dir`, one after the other, counted in
    /// `shared`; the first unexpected error ends it and fails the run.
    async fn creates(self, client: Client, shared: Rc<Shared>, c: u32, dir: u64, j: u32) {
        for k in (j as u64..self.files).step_by(self.window as usize) {
            let name = format!("c{c}-{k}");
            match client
                .create_async(&Cred::ROOT, dir, name.as_bytes(), 0o644)
                .await
            {
                Ok(_) => shared.acked.set(shared.acked.get() + 1),
                Err(e) if self.crashing && e.0 == libc::EIO => {
                    shared.unknown.set(shared.unknown.get() + 1)
                }
                Err(e) => {
                    *shared.error.borrow_mut() = Some(format!("client {c}: create {name}: {e:?}"));
                    return;
                }
            }
        }
    }
}

/// The driver of one run: the cluster, what its clients report, the kills, and the
/// result it builds as it polls the servers after every step.
struct Driver {
    cluster: Cluster,
    shared: Rc<Shared>,
    kills: Kills,
    obs: Observer,
    res: SimResult,
    /// Creates between two samples of the time series.
    sample_every: u64,
    /// Creates acknowledged at which the next sample is taken.
    next_sample: u64,
    /// Redirects the clients had received when the directory covered every server.
    redirects_at_cover: u64,
}

impl Driver {
    fn new(o: &SimOptions, cluster: Cluster, shared: Rc<Shared>) -> Driver {
        let total = o.files_per_server * o.servers as u64;
        Driver {
            cluster,
            shared,
            kills: Kills::draw(o),
            obs: Observer::new(o.servers, ROOT),
            res: SimResult::empty(o),
            sample_every: (total / 50).max(1),
            next_sample: 0,
            redirects_at_cover: 0,
        }
    }

    /// One step of the workload: the servers polled, due restarts and kills made.
    /// Whether the workload is over.
    fn step(&mut self) -> Result<bool> {
        let done = self.cluster.step()?;
        if let Some(e) = self.shared.error.borrow().as_ref() {
            bail!("{e}");
        }
        self.observe(done);
        self.restart_due();
        let progress = (self.res.split_events.len() as u64, self.shared.acked.get());
        let (step, arming) = (self.cluster.step, &self.cluster.arming);
        if let Some((s, point)) = self.kills.due(arming, step, progress, done) {
            self.kill(s, point)?;
        }
        Ok(done)
    }

    /// Polls the servers: splits seen, the step at which the directory covers every
    /// server, a sample of the time series when due (and at the end, `done`).
    fn observe(&mut self, done: bool) {
        let step = self.cluster.step;
        let dir = self.shared.dir.get();
        if dir != 0 {
            self.obs.dir = dir;
            self.obs.poll(
                step,
                &self.cluster.probes.borrow(),
                &mut self.res.split_events,
            );
        }
        let acked = self.shared.acked.get();
        let res = &mut self.res;
        if res.splits_to_cover.is_none() && dir != 0 && self.obs.covered() == res.servers {
            res.splits_to_cover = Some(res.split_events.len() as u64);
            res.creates_to_cover = Some(acked);
            res.virtual_ms_to_cover = Some(self.cluster.elapsed_ms());
            self.redirects_at_cover = redirects(&self.shared);
        }
        if acked >= self.next_sample || done {
            let r = redirects(&self.shared);
            let prev = res.samples.last();
            let (pc, pr) = prev.map_or((0, 0), |p| (p.creates, p.redirects));
            res.samples.push(Sample {
                creates: acked,
                virtual_ms: self.cluster.elapsed_ms(),
                redirects: r,
                redirects_per_create: ratio(r - pr, acked - pc),
                splits: res.split_events.len() as u64,
                partitions: self.obs.partitions(),
                servers_covered: self.obs.covered(),
            });
            self.next_sample = acked + self.sample_every;
        }
    }

    /// Restarts the servers whose restart step has come.
    fn restart_due(&mut self) {
        let step = self.cluster.step;
        let (sim, events) = (&mut self.cluster.sim, &mut self.res.crash_events);
        self.kills.down.retain(|&(at, s, ev)| {
            if step >= at {
                sim.bounce(format!("s{s}"));
                events[ev].restart_step = step;
                false
            } else {
                true
            }
        });
    }

    /// Restarts every server still down (the workload is over).
    fn restart_all(&mut self) {
        for (_, s, ev) in self.kills.down.drain(..) {
            self.cluster.sim.bounce(format!("s{s}"));
            self.res.crash_events[ev].restart_step = self.cluster.step;
        }
        self.res.steps = self.cluster.step;
        self.res.virtual_ms = self.cluster.elapsed_ms();
        self.res.creates = self.shared.acked.get();
        self.res.creates_unknown = self.shared.unknown.get();
    }

    /// Kills server `s` (stopped at split crash point `point`, if any), cuts its power
    /// and schedules its restart.
    fn kill(&mut self, s: u32, point: Option<&'static str>) -> Result<()> {
        let step = self.cluster.step;
        let probe = self.cluster.probes.borrow()[s as usize].clone();
        let during_split = point.is_some() || probe.as_ref().is_some_and(|p| p.splitting());
        let pl = self.cluster.power[s as usize]
            .clone()
            .context("power-loss record")?;
        let drawn = self
            .kills
            .plan
            .get(self.kills.next)
            .context("a kill not planned")?;
        let drawn_point = drawn.1.to_string();
        if let Some(p) = &probe {
            add_counts(&mut self.kills.counted[s as usize], p);
        }
        pl.cut();
        self.cluster.crash(s);
        let r = pl
            .restart(self.cluster.loss, self.kills.rng.random())
            .with_context(|| format!("rewriting server {s}'s files after the kill"))?;
        let restart = step + self.kills.rng.random_range(5..200);
        self.res.crash_events.push(CrashEvent {
            armed_step: self.kills.armed_since.unwrap_or(step),
            drawn_point,
            step,
            server: s,
            point: point.map(str::to_string),
            during_split,
            restart_step: 0,
            lost_writes: r.lost,
        });
        let ev = self.res.crash_events.len() - 1;
        self.kills.down.push((restart, s, ev));
        self.kills.next += 1;
        self.kills.armed_since = None;
        Ok(())
    }

    /// The result, once `check` (the namespace after the run) is known: fails if the
    /// namespace is inconsistent or an acknowledged create is missing.
    fn finish(mut self, seed: u64, check: &ClusterCheck) -> Result<SimResult> {
        if !check.problems.is_empty() || check.in_flight != 0 {
            bail!(
                "the namespace is INCONSISTENT after the simulation (seed {seed}): {} in \
                 flight; {}",
                check.in_flight,
                check.problems.join("; ")
            );
        }
        let res = &mut self.res;
        // Every acknowledged create is there; a create that failed may or may not be.
        // The check's entries are the files plus the shared directory's own entry.
        let files = check.entries.saturating_sub(1);
        if files < res.creates || files > res.creates + res.creates_unknown {
            bail!(
                "the shared directory holds {files} files; {} creates were acknowledged and \
                 {} failed (seed {seed})",
                res.creates,
                res.creates_unknown,
            );
        }
        res.checked = (check.entries, check.partitions, check.inodes);
        let r = redirects(&self.shared);
        res.redirects = r;
        res.redirects_per_create = ratio(r, res.creates);
        if let Some(c) = res.creates_to_cover {
            if res.creates > c {
                res.redirects_per_create_after_cover =
                    Some(ratio(r - self.redirects_at_cover, res.creates - c));
            }
        }
        // The servers' own counts: those of the servers killed, as read just before
        // their kill, plus the running servers' now.
        let counted = &mut self.kills.counted;
        for (c, p) in counted.iter_mut().zip(self.cluster.probes.borrow().iter()) {
            if let Some(p) = p {
                add_counts(c, p);
            }
        }
        res.splits = counted.iter().map(|c| c.0).sum();
        res.entries_moved = counted.iter().map(|c| c.1).sum();
        res.summarize_splits(&self.obs);
        Ok(self.res)
    }
}

/// Redirects the clients received so far.
fn redirects(s: &Shared) -> u64 {
    s.clients.borrow().iter().map(|c| c.redirects()).sum()
}

impl SimResult {
    /// The result of a run of `o` before it starts.
    fn empty(o: &SimOptions) -> SimResult {
        SimResult {
            servers: o.servers,
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
        }
    }

    /// The figures of the splits seen and of the directory at the end (`splits` and
    /// `entries_moved` are the servers' counts, set before).
    fn summarize_splits(&mut self, obs: &Observer) {
        self.splits_observed = self.split_events.len() as u64;
        self.moved_per_split_mean = ratio(self.entries_moved, self.splits);
        self.moved_per_split_max = self.split_events.iter().map(|e| e.moved).max().unwrap_or(0);
        let remote: Vec<u64> = self
            .split_events
            .iter()
            .filter(|e| e.remote)
            .map(|e| e.moved)
            .collect();
        self.remote_splits = remote.len() as u64;
        self.moved_per_remote_split_mean = ratio(remote.iter().sum(), self.remote_splits);
        self.entries_per_server = obs.entries_per_server();
        self.balance_max_over_mean = balance(&self.entries_per_server);
        self.partitions = obs.partitions();
    }
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
