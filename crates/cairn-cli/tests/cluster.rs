//! Multi-process tests of the cluster: every server is a separate `cairn serve` process.
//! Where network namespaces can be made (root, `ip netns`), each server runs in a
//! namespace of its own with an address the test assigns (10.77.X.10+i), joined to the
//! test's namespace by veth pairs on a bridge that lives in a namespace of its own, so
//! clients reach servers through real interfaces; elsewhere the servers listen on
//! 127.0.0.1, and the test says so.
//!
//! - a storm of creates and mkdirs from client processes, while a random server is
//!   SIGKILLed and restarted, with splits (a small `--split-threshold`); after each
//!   cycle `cairn cluster check` must pass and every acknowledged operation must show
//!   (CI: a few cycles; `CAIRN_CLUSTER_KILL_CYCLES=200` by hand);
//! - a server that is down: operations on what it holds fail with EIO within the
//!   client's timeout, through the library and through a mount; nothing hangs;
//! - a cluster file that differs between server and client: clear errors;
//! - the everyday tools on a cluster mount, compared with a plain directory, and two
//!   mounts seeing one namespace (skipped where FUSE can't be used, reported through
//!   `common::skip`);
//! - `cairn cluster status` and `check`, metrics, SIGTERM.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cairn_cluster::{Client, ClientError, ClientOptions, ClusterConfig};
use cairn_fs::{Cred, Errno, FileSystem, ROOT};

use common::{cairn, compare_with_plain, tree, Mount};

const R: Cred = Cred::ROOT;

// ---- the network ------------------------------------------------------------------

/// Namespaces and interfaces made by this process get unique names from this.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// Runs `ip ARGS`; its stderr as the error.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Output of `ip ARGS` (empty on failure).
fn ip_out(args: &[&str]) -> String {
    Command::new("ip")
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Servers in network namespaces of their own, joined by a bridge (in a namespace of
/// its own too) to a veth in the test's namespace.
struct Netns {
    /// Every namespace made (deleted on drop).
    namespaces: Vec<String>,
    /// The namespace of each server.
    server_ns: Vec<String>,
    /// The test namespace's end of its veth pair.
    host_if: Option<String>,
    /// `10.77.X`.
    prefix: String,
}

impl Netns {
    /// Makes the namespaces of `n` servers, or says why not.
    fn new(n: usize) -> Result<Netns, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        // One setup at a time in this process, so that two tests don't pick the same
        // free /24.
        static SETUP: Mutex<()> = Mutex::new(());
        let _one = SETUP.lock().unwrap_or_else(|p| p.into_inner());
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}{k}", std::process::id() % 100_000);
        // A /24 that no interface or route of this machine uses yet.
        let used = ip_out(&["-4", "-o", "addr"]) + &ip_out(&["-4", "route"]);
        let start = (std::process::id() as usize * 7 + k as usize * 13) % 250;
        let x = (0..250)
            .map(|i| (start + i) % 250 + 2)
            .find(|x| !used.contains(&format!("10.77.{x}.")))
            .ok_or("no free 10.77.X.0/24")?;
        let mut net = Netns {
            namespaces: Vec::new(),
            server_ns: Vec::new(),
            host_if: None,
            prefix: format!("10.77.{x}"),
        };
        net.build(n, &tag)?;
        Ok(net)
    }

    fn build(&mut self, n: usize, tag: &str) -> Result<(), String> {
        let br = format!("cairn-test-{tag}-bridge");
        ip(&["netns", "add", &br])?;
        self.namespaces.push(br.clone());
        ip(&["-n", &br, "link", "set", "lo", "up"])?;
        ip(&["-n", &br, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &br, "link", "set", "br0", "up"])?;
        // The test's own end.
        let (h, hb) = (format!("cz{tag}h"), format!("cz{tag}hb"));
        ip(&["link", "add", &h, "type", "veth", "peer", "name", &hb])?;
        self.host_if = Some(h.clone());
        ip(&["link", "set", &hb, "netns", &br])?;
        ip(&["-n", &br, "link", "set", &hb, "master", "br0", "up"])?;
        ip(&["addr", "add", &format!("{}.1/24", self.prefix), "dev", &h])?;
        ip(&["link", "set", &h, "up"])?;
        for i in 0..n {
            let s = format!("cairn-test-{tag}-server{i}");
            ip(&["netns", "add", &s])?;
            self.namespaces.push(s.clone());
            self.server_ns.push(s.clone());
            ip(&["-n", &s, "link", "set", "lo", "up"])?;
            let (a, b) = (format!("cz{tag}s{i}"), format!("cz{tag}b{i}"));
            ip(&["link", "add", &a, "type", "veth", "peer", "name", &b])?;
            ip(&["link", "set", &a, "netns", &s])?;
            ip(&["link", "set", &b, "netns", &br])?;
            ip(&["-n", &br, "link", "set", &b, "master", "br0", "up"])?;
            let addr = format!("{}.{}/24", self.prefix, 10 + i);
            ip(&["-n", &s, "addr", "add", &addr, "dev", &a])?;
            ip(&["-n", &s, "link", "set", &a, "up"])?;
        }
        Ok(())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting a namespace deletes the interfaces in it, and a veth with its peer.
        for ns in self.namespaces.iter().rev() {
            let _ = ip(&["netns", "del", ns]);
        }
        if let Some(h) = &self.host_if {
            let _ = ip(&["link", "del", h]);
        }
    }
}

/// Where the servers run.
enum Net {
    Loopback(Vec<u16>),
    Namespaces(Netns),
}

impl Net {
    fn new(n: usize) -> Net {
        match Netns::new(n) {
            Ok(ns) => {
                println!(
                    "servers in network namespaces, addresses {}.10..{}",
                    ns.prefix,
                    9 + n
                );
                Net::Namespaces(ns)
            }
            Err(why) => {
                println!("servers on loopback (network namespaces can't be made here: {why})");
                Net::Loopback(free_ports(2 * n))
            }
        }
    }

    /// The address server `i` serves on.
    fn addr(&self, i: usize) -> SocketAddr {
        match self {
            Net::Loopback(ports) => format!("127.0.0.1:{}", ports[i]).parse().unwrap(),
            Net::Namespaces(ns) => format!("{}.{}:7100", ns.prefix, 10 + i).parse().unwrap(),
        }
    }

    /// The address of server `i`'s metrics.
    fn metrics_addr(&self, i: usize) -> SocketAddr {
        match self {
            Net::Loopback(ports) => {
                let n = ports.len() / 2;
                format!("127.0.0.1:{}", ports[n + i]).parse().unwrap()
            }
            Net::Namespaces(ns) => format!("{}.{}:9100", ns.prefix, 10 + i).parse().unwrap(),
        }
    }

    /// A command that runs `cairn` where server `i` lives.
    fn command(&self, i: usize) -> Command {
        match self {
            Net::Loopback(_) => cairn(),
            Net::Namespaces(ns) => {
                // `ip netns exec` execs the command: the child's pid is cairn's.
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns.server_ns[i]])
                    .arg(env!("CARGO_BIN_EXE_cairn"));
                c
            }
        }
    }
}

/// Free TCP ports on 127.0.0.1, below the ephemeral range (see `cairn_testkit`).
fn free_ports(n: usize) -> Vec<u16> {
    cairn_testkit::loopback_addrs(n)
        .iter()
        .map(|a| a.port())
        .collect()
}

// ---- the cluster -----------------------------------------------------------------

/// A cluster of `cairn serve` processes; killed on drop.
struct Cluster {
    servers: Vec<Option<Child>>,
    net: Net,
    file: PathBuf,
    cfg: ClusterConfig,
    split_threshold: u64,
    /// `--sync` of the servers.
    sync: &'static str,
    tmp: tempfile::TempDir,
}

impl Cluster {
    /// Starts `n` servers on fresh stores and waits until they all answer. `sync`:
    /// `always` where acknowledged changes must survive a SIGKILL, else `never` (every
    /// change of a sequential client would wait for an fsync of its own).
    fn start(n: usize, split_threshold: u64, sync: &'static str) -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
        let net = Net::new(n);
        let text: String = (0..n)
            .map(|i| format!("[[server]]\nid = {i}\naddr = \"{}\"\n\n", net.addr(i)))
            .collect();
        // Mutual TLS (the default): a CA, certificates and the cluster file naming them
        // (`cairn cluster init-certs`' work), in the test's directory.
        let servers = ClusterConfig::parse(&text).unwrap().servers().to_vec();
        let file = cairn_cluster::tls::init_certs(
            tmp.path(),
            &servers,
            &[
                cairn_cluster::tls::ClientCert::admin("0"),
                cairn_cluster::tls::ClientCert {
                    name: "u1000".into(),
                    uids: Some("1000-1999".into()),
                    gids: None,
                },
            ],
        )
        .unwrap();
        let cfg = ClusterConfig::load(&file).unwrap();
        let mut c = Cluster {
            servers: (0..n).map(|_| None).collect(),
            net,
            file,
            cfg,
            split_threshold,
            sync,
            tmp,
        };
        for i in 0..n {
            c.spawn(i);
        }
        for i in 0..n {
            c.wait_up(i);
        }
        c
    }

    fn store(&self, i: usize) -> PathBuf {
        self.tmp.path().join(format!("server{i}"))
    }

    fn log(&self, i: usize) -> PathBuf {
        self.tmp.path().join(format!("server{i}.log"))
    }

    /// Starts `cairn serve` for server `i` (not waiting for it to answer).
    fn spawn(&mut self, i: usize) {
        assert!(self.servers[i].is_none(), "server {i} is running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(i))
            .unwrap();
        let child = self
            .net
            .command(i)
            .arg("serve")
            .arg("--dir")
            .arg(self.store(i))
            .arg("--listen")
            .arg(self.net.addr(i).to_string())
            .arg("--cluster")
            .arg(&self.file)
            .arg("--split-threshold")
            .arg(self.split_threshold.to_string())
            .args(["--sync", self.sync])
            .arg("--metrics")
            .arg(self.net.metrics_addr(i).to_string())
            .env("CAIRN_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.servers[i] = Some(child);
    }

    /// Waits until server `i` answers a status request (at most 60 s).
    fn wait_up(&mut self, i: usize) {
        let start = Instant::now();
        loop {
            let st = cairn_cluster::admin::status(&self.cfg, Duration::from_secs(1));
            if st.servers[i].up {
                return;
            }
            if let Some(child) = self.servers[i].as_mut() {
                if let Some(status) = child.try_wait().unwrap() {
                    self.servers[i] = None;
                    panic!("server {i} exited with {status}:\n{}", self.log_tail(i));
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "server {i} does not answer: {:?}\n{}",
                st.servers[i].error,
                self.log_tail(i)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_tail(&self, i: usize) -> String {
        let text = std::fs::read_to_string(self.log(i)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// SIGKILLs server `i`.
    fn kill(&mut self, i: usize) {
        let mut c = self.servers[i].take().expect("server running");
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
        c.wait().unwrap();
    }

    /// SIGTERMs server `i` and returns its exit status (it must end within 30 s).
    fn terminate(&mut self, i: usize) -> std::process::ExitStatus {
        let mut c = self.servers[i].take().expect("server running");
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                return st;
            }
            if start.elapsed() > Duration::from_secs(30) {
                let _ = c.kill();
                c.wait().unwrap();
                panic!("server {i} did not stop within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A client of the cluster.
    fn client(&self, timeout: Duration) -> Client {
        let opts = ClientOptions {
            timeout,
            ..ClientOptions::default()
        };
        Client::with_config(self.cfg.clone(), opts).unwrap()
    }

    /// `cairn cluster check`: retried while it finds problems (operations of a restarted
    /// server may still be finishing), at most 60 s; panics with the last report.
    fn check(&self) {
        let start = Instant::now();
        loop {
            let out = cairn()
                .args(["cluster", "check", "--cluster"])
                .arg(&self.file)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            match out.status.code() {
                Some(0) => {
                    assert!(text.contains("consistent"), "{text}");
                    return;
                }
                Some(2) if start.elapsed() < Duration::from_secs(60) => {
                    std::thread::sleep(Duration::from_millis(500));
                }
                _ => panic!(
                    "cairn cluster check: {}\n{text}\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ),
            }
        }
    }

    /// `cairn cluster status --json`.
    fn status_json(&self) -> serde_json::Value {
        let out = cairn()
            .args(["cluster", "status", "--json", "--cluster"])
            .arg(&self.file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in self.servers.iter_mut().filter_map(Option::take) {
            let mut c = c;
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A small generator (SplitMix64), seeded from `CAIRN_CLUSTER_SEED` or the clock; the
/// seed is printed so that a failing run can be repeated.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = std::env::var("CAIRN_CLUSTER_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        println!("CAIRN_CLUSTER_SEED={seed}");
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// ---- the storm -------------------------------------------------------------------

const STORM_FILE: &str = "CAIRN_STORM_CLUSTER";

/// A storm client (a child process of the kill test): creates files and directories
/// with unique names in the directories it is given, and removes some of its files,
/// from two threads, for the time it is given; prints every outcome as
/// `@@ OP DIR NAME RESULT` (RESULT: `ok` or an errno), then `@@done`.
#[test]
fn storm_child() {
    let Ok(file) = std::env::var(STORM_FILE) else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap();
    let me: u32 = var("CAIRN_STORM_ID").parse().unwrap();
    let ms: u64 = var("CAIRN_STORM_MS").parse().unwrap();
    let dirs: Vec<u64> = var("CAIRN_STORM_DIRS")
        .split(',')
        .map(|d| d.parse().unwrap())
        .collect();
    let opts = ClientOptions {
        timeout: Duration::from_secs(3),
        ..ClientOptions::default()
    };
    let client = Client::with_config(ClusterConfig::load(&file).unwrap(), opts).unwrap();
    let deadline = Instant::now() + Duration::from_millis(ms);
    std::thread::scope(|s| {
        for t in 0..2u32 {
            let (client, dirs) = (&client, &dirs);
            s.spawn(move || {
                let mut rng = Rng(((me as u64) << 32) | t as u64 | 0x5eed_0000);
                let mut mine: Vec<(u64, String)> = Vec::new();
                let mut seq = 0u64;
                let line = |op: &str, d: u64, n: &str, r: Result<(), Errno>| {
                    let res = match r {
                        Ok(()) => "ok".to_string(),
                        Err(e) => e.0.to_string(),
                    };
                    println!("@@ {op} {d} {n} {res}");
                };
                while Instant::now() < deadline {
                    seq += 1;
                    let d = dirs[rng.below(dirs.len() as u64) as usize];
                    match rng.below(10) {
                        0 => {
                            let n = format!("m{me}-{t}-{seq}");
                            line(
                                "mkdir",
                                d,
                                &n,
                                client.mkdir(&R, d, n.as_bytes(), 0o755).map(drop),
                            );
                        }
                        1 if !mine.is_empty() => {
                            let (d, n) = mine.swap_remove(rng.below(mine.len() as u64) as usize);
                            line("unlink", d, &n, client.unlink(&R, d, n.as_bytes()));
                        }
                        _ => {
                            let n = format!("c{me}-{t}-{seq}");
                            let r = client.create(&R, d, n.as_bytes(), 0o644).map(drop);
                            if r.is_ok() {
                                mine.push((d, n.clone()));
                            }
                            line("create", d, &n, r);
                        }
                    }
                }
            });
        }
    });
    println!("@@done");
}

/// What the storm's outcomes say must be there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    File,
    Dir,
    Absent,
}

/// Starts a storm client process for `ms` milliseconds.
fn spawn_storm(cluster: &Cluster, id: u32, ms: u64, dirs: &[u64]) -> Child {
    let dirs: Vec<String> = dirs.iter().map(|d| d.to_string()).collect();
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "storm_child", "--nocapture", "--test-threads=1"])
        .env(STORM_FILE, &cluster.file)
        .env("CAIRN_STORM_ID", id.to_string())
        .env("CAIRN_STORM_MS", ms.to_string())
        .env("CAIRN_STORM_DIRS", dirs.join(","))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Reads a storm client's outcomes until it ends (at most `limit`), into `model`.
fn collect_storm(mut child: Child, limit: Duration, model: &Mutex<HashMap<(u64, String), Expect>>) {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + limit;
    let mut done = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if line == "@@done" {
                    done = true;
                    continue;
                }
                let Some(rest) = line.strip_prefix("@@ ") else {
                    continue;
                };
                let f: Vec<&str> = rest.split(' ').collect();
                let (op, dir, name, res) = (f[0], f[1].parse().unwrap(), f[2], f[3]);
                let errno: i32 = if res == "ok" { 0 } else { res.parse().unwrap() };
                let expect = match (op, errno) {
                    ("create", 0) | ("create", libc::EEXIST) => Some(Expect::File),
                    ("mkdir", 0) | ("mkdir", libc::EEXIST) => Some(Expect::Dir),
                    ("unlink", 0) | ("unlink", libc::ENOENT) => Some(Expect::Absent),
                    // Not known whether it happened: a server was down or restarting.
                    (_, libc::EIO) => None,
                    _ => panic!("storm: unexpected outcome: {line}"),
                };
                let mut m = model.lock().unwrap();
                match expect {
                    Some(e) => {
                        m.insert((dir, name.to_string()), e);
                    }
                    // An unlink that may or may not have happened: unknown from now on.
                    None => {
                        m.remove(&(dir, name.to_string()));
                    }
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("a storm client did not finish in time (a hang?)");
            }
        }
    }
    reader.join().unwrap();
    let st = child.wait().unwrap();
    assert!(st.success() && done, "storm client failed: {st}");
}

/// Every outcome the storm clients were told is what the cluster holds: listings and
/// lookups of the storm's directories.
fn verify_storm(client: &Client, dirs: &[u64], model: &HashMap<(u64, String), Expect>) {
    for &d in dirs {
        let mut listed: BTreeMap<String, u32> = BTreeMap::new();
        let mut cursor: Option<Vec<u8>> = None;
        loop {
            let page = client.readdir(&R, d, cursor.as_deref(), 1000).unwrap();
            let Some(last) = page.last() else { break };
            cursor = Some(last.name.clone());
            for e in page {
                let n = String::from_utf8(e.name).unwrap();
                assert!(
                    listed.insert(n.clone(), e.kind).is_none(),
                    "{n} listed twice"
                );
            }
        }
        for ((dir, name), want) in model.iter().filter(|((dir, _), _)| *dir == d) {
            let kind = listed.get(name);
            match want {
                Expect::File => assert_eq!(kind, Some(&libc::S_IFREG), "{dir}/{name}"),
                Expect::Dir => assert_eq!(kind, Some(&libc::S_IFDIR), "{dir}/{name}"),
                Expect::Absent => assert_eq!(kind, None, "{dir}/{name} was removed"),
            }
            match (want, client.lookup(&R, *dir, name.as_bytes())) {
                (Expect::Absent, r) => assert_eq!(r.unwrap_err().0, libc::ENOENT),
                (_, r) => {
                    r.unwrap_or_else(|e| panic!("lookup {dir}/{name}: {e}"));
                }
            }
        }
    }
}

/// SIGKILL a random server during a storm of creates and splits, restart it, and
/// check the cluster; repeated `CAIRN_CLUSTER_KILL_CYCLES` times (default 3).
#[test]
fn kill_servers_during_a_storm_of_creates_and_splits() {
    let cycles: u32 = std::env::var("CAIRN_CLUSTER_KILL_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let n = 3;
    let mut cluster = Cluster::start(n, 40, "always");
    let client = cluster.client(Duration::from_secs(20));
    let top = client.mkdir(&R, ROOT, b"storm", 0o755).unwrap();
    let dirs: Vec<u64> = (0..4)
        .map(|i| {
            client
                .mkdir(&R, top.ino, format!("d{i}").as_bytes(), 0o755)
                .unwrap()
                .ino
        })
        .collect();
    let model = Mutex::new(HashMap::new());
    let mut rng = Rng::new();
    for cycle in 0..cycles {
        let storm_ms = 2500;
        let storms: Vec<Child> = (0..2)
            .map(|k| spawn_storm(&cluster, cycle * 2 + k, storm_ms, &dirs))
            .collect();
        std::thread::scope(|s| {
            for child in storms {
                let model = &model;
                s.spawn(move || collect_storm(child, Duration::from_secs(60), model));
            }
            std::thread::sleep(Duration::from_millis(300 + rng.below(900)));
            let victim = rng.below(n as u64) as usize;
            println!("cycle {cycle}: SIGKILL server {victim}");
            cluster.kill(victim);
            std::thread::sleep(Duration::from_millis(100 + rng.below(700)));
            cluster.spawn(victim);
            cluster.wait_up(victim);
        });
        cluster.check();
        let m = model.lock().unwrap();
        verify_storm(&client, &dirs, &m);
        println!("cycle {cycle}: consistent, {} outcomes verified", m.len());
    }
    // The directories were split over the servers.
    let st = cluster.status_json();
    let partitions: u64 = st["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["partitions"].as_u64().unwrap())
        .sum();
    assert!(
        partitions > 2 * (dirs.len() as u64 + 2),
        "splits happened: {partitions} partitions\n{st:#}"
    );
}

// ---- a server that is down ----------------------------------------------------

/// A directory of `parent` whose home is server `home` (mkdir places directories by
/// hash, so some name does).
fn dir_on(client: &Client, parent: u64, home: u64) -> (u64, String) {
    for i in 0..200 {
        let name = format!("dir{i}");
        let a = client.mkdir(&R, parent, name.as_bytes(), 0o755).unwrap();
        if a.ino >> cairn_cluster::giga::HOME_SHIFT == home {
            return (a.ino, name);
        }
    }
    panic!("no directory placed on server {home}");
}

/// Runs `f`, which must fail with one of `errnos` within `bound`.
fn fails_within<T: std::fmt::Debug>(
    bound: Duration,
    errnos: &[i32],
    f: impl FnOnce() -> Result<T, Errno>,
) {
    let start = Instant::now();
    let r = f();
    let took = start.elapsed();
    match r {
        Err(e) => assert!(
            errnos.contains(&e.0),
            "failed with {e}, wanted one of {errnos:?}"
        ),
        Ok(v) => panic!("succeeded with a server down: {v:?}"),
    }
    assert!(took <= bound, "took {took:?}, bound {bound:?}");
}

/// Runs a shell command with a deadline: its exit status and stderr; a command still
/// running at the deadline is a hang (killed, and the test fails).
fn sh_within(bound: Duration, script: &str) -> (std::process::ExitStatus, String) {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .env("LC_ALL", "C")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (st, err);
        }
        if start.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`{script}` still running after {bound:?}: it hangs");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_server_that_is_down_gives_eio_within_the_timeout() {
    // `always`: the server is SIGKILLed, and the file must be there after its restart
    // (under `never` a create still in the engine's write buffer dies with the process).
    let mut cluster = Cluster::start(3, 8192, "always");
    let client = cluster.client(Duration::from_secs(20));
    let (d, dname) = dir_on(&client, ROOT, 2);
    let f = client.create(&R, d, b"f", 0o644).unwrap();
    client.write(&R, f.ino, 0, b"data").unwrap();
    // The mount, with a short timeout, before the server goes.
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let mount = Mount::cluster(&cluster.file, &mp, &["--timeout", "2"]);
    if mount.is_some() {
        assert_eq!(std::fs::read(mp.join(&dname).join("f")).unwrap(), b"data");
    }
    cluster.kill(2);
    let quick = cluster.client(Duration::from_secs(2));
    let bound = Duration::from_secs(2 + 5);
    fails_within(bound, &[libc::EIO], || quick.getattr(d));
    fails_within(bound, &[libc::EIO], || quick.lookup(&R, d, b"f"));
    fails_within(bound, &[libc::EIO], || quick.read(&R, f.ino, 0, 10));
    fails_within(bound, &[libc::EIO], || quick.create(&R, d, b"g", 0o644));
    fails_within(bound, &[libc::EIO], || quick.readdir(&R, d, None, 10));
    // What other servers hold still works.
    // (A file is created by the server of its entry: the root's partition is on
    // server 0.)
    quick.create(&R, ROOT, b"elsewhere", 0o644).unwrap();
    if mount.is_some() {
        // Through the mount: EIO (or ENOTCONN), within the timeout; nothing hangs.
        std::thread::sleep(Duration::from_millis(1500)); // the kernel's cache expires
        let p = mp.join(&dname);
        let (st, err) = sh_within(Duration::from_secs(30), &format!("stat '{}'", p.display()));
        assert!(!st.success());
        assert!(
            err.contains("Input/output error") || err.contains("not connected"),
            "{err}"
        );
        let (st, _) = sh_within(Duration::from_secs(30), &format!("ls '{}'", mp.display()));
        assert!(st.success(), "the root is listed with server 2 down");
    } else {
        // (Mount::cluster has reported the skip of the mount part.)
        println!("the mount part not run: FUSE can't be used here (reported above)");
    }
    cluster.spawn(2);
    cluster.wait_up(2);
    assert_eq!(quick.read(&R, f.ino, 0, 10).unwrap(), b"data");
    if mount.is_some() {
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(std::fs::read(mp.join(&dname).join("f")).unwrap(), b"data");
    }
    drop(mount);
    cluster.check();
}

// ---- cluster files that differ ------------------------------------------------

#[test]
fn a_cluster_file_that_differs_is_a_clear_error() {
    let mut cluster = Cluster::start(2, 8192, "never");
    let client = cluster.client(Duration::from_secs(20));
    client.mkdir(&R, ROOT, b"before", 0o755).unwrap();
    // The same servers plus one more: another cluster.
    let other = cluster.tmp.path().join("other.toml");
    let text = std::fs::read_to_string(&cluster.file).unwrap();
    std::fs::write(
        &other,
        format!("{text}[[server]]\nid = 2\naddr = \"127.0.0.1:1\"\n"),
    )
    .unwrap();
    let out = cairn()
        .args(["cluster", "status", "--timeout", "3", "--cluster"])
        .arg(&other)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("different cluster file"), "{text}");
    assert!(text.contains("0 of 3 servers up"), "{text}");
    let out = cairn()
        .args(["cluster", "check", "--timeout", "3", "--cluster"])
        .arg(&other)
        .output()
        .unwrap();
    // An error (exit 1), not a report of an inconsistent namespace (exit 2): nothing can
    // be checked against servers of another cluster (admin::check is Err).
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("different cluster file"), "{err}");
    // A client with the other file is refused when it connects, and changes nothing.
    let wrong = Client::with_config(
        ClusterConfig::load(&other).unwrap(),
        ClientOptions {
            timeout: Duration::from_secs(3),
            ..ClientOptions::default()
        },
    );
    match wrong {
        Err(ClientError::ClusterMismatch { id, .. }) => assert!(id < 2, "{id}"),
        Err(e) => panic!("expected ClusterMismatch, got {e:?}"),
        Ok(c) => panic!(
            "a client of another cluster connected (mkdir: {:?})",
            c.mkdir(&R, ROOT, b"after", 0o755).map(|a| a.ino)
        ),
    }
    assert_eq!(
        client.lookup(&R, ROOT, b"after").unwrap_err().0,
        libc::ENOENT
    );
    // A mount with it is refused, saying why.
    let mp = cluster.tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    if Mount::fuse_usable() {
        let out = cairn()
            .args(["mount", "--foreground", "--timeout", "3", "--cluster"])
            .arg(&other)
            .arg(&mp)
            .args(common::transport_args())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("different cluster file"), "{err}");
    }
    // A server's store is bound to its cluster: serving it under another is refused.
    cluster.kill(1);
    let out = cluster
        .net
        .command(1)
        .arg("serve")
        .arg("--dir")
        .arg(cluster.store(1))
        .arg("--listen")
        .arg(cluster.net.addr(1).to_string())
        .arg("--cluster")
        .arg(&other)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("belongs to"), "{err}");
    // A server listening on an address that is not in the file.
    let out = cairn()
        .arg("serve")
        .arg("--dir")
        .arg(cluster.tmp.path().join("new"))
        .args(["--listen", "127.0.0.1:9"])
        .arg("--cluster")
        .arg(&cluster.file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("not the address of any server"), "{err}");
    cluster.spawn(1);
    cluster.wait_up(1);
    client.lookup(&R, ROOT, b"before").unwrap();
    cluster.check();
}

// ---- tools ------------------------------------------------------------------

/// GET `/metrics` from `addr` (plain HTTP/1.0).
fn scrape(addr: SocketAddr) -> String {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

#[test]
fn status_check_metrics_and_sigterm() {
    let mut cluster = Cluster::start(3, 64, "never");
    let client = cluster.client(Duration::from_secs(20));
    let d = client.mkdir(&R, ROOT, b"big", 0o755).unwrap();
    for i in 0..1000 {
        client
            .create(&R, d.ino, format!("f{i}").as_bytes(), 0o644)
            .unwrap();
    }
    cluster.check();
    let st = cluster.status_json();
    let servers = st["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 3);
    assert!(servers.iter().all(|s| s["up"] == true), "{st:#}");
    let entries: u64 = servers.iter().map(|s| s["entries"].as_u64().unwrap()).sum();
    assert!(entries >= 1001, "{st:#}");
    let largest = &st["largest"][0];
    assert_eq!(largest["dir"].as_u64(), Some(d.ino), "{st:#}");
    assert!(largest["partitions"].as_u64().unwrap() >= 8, "{st:#}");
    let out = cairn()
        .args(["cluster", "status", "--cluster"])
        .arg(&cluster.file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("3 of 3 servers up"), "{text}");
    assert!(text.contains("largest directories"), "{text}");
    let m = scrape(cluster.net.metrics_addr(0));
    for name in ["cairn_ops_total", "cairn_partitions", "cairn_entries"] {
        assert!(m.contains(name), "{name} missing from the metrics:\n{m}");
    }
    // SIGTERM: a clean stop; what it held is all there after a restart.
    let st = cluster.terminate(1);
    assert!(st.success(), "server 1 after SIGTERM: {st}");
    let out = cairn()
        .args(["cluster", "status", "--timeout", "2", "--cluster"])
        .arg(&cluster.file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("2 of 3 servers up"), "{text}");
    assert_eq!(
        out.status.code(),
        Some(2),
        "a server of one replica down: down"
    );
    let out = cairn()
        .args(["cluster", "check", "--timeout", "2", "--cluster"])
        .arg(&cluster.file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a server down is a problem");
    cluster.spawn(1);
    cluster.wait_up(1);
    cluster.check();
    let names: BTreeSet<Vec<u8>> = client
        .readdir(&R, d.ino, None, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names.len(), 1000);
}

/// `cluster status`'s exit status: 0 healthy, 1 degraded, 2 down. Servers of one
/// replica that do not answer: down. A group of three `cairn serve --insecure`
/// replicas: healthy with a leader, degraded with one replica killed, down with two.
#[test]
fn status_exit_codes() {
    let tmp = tempfile::tempdir().unwrap();
    let status = |file: &Path| {
        let out = cairn()
            .args([
                "cluster",
                "status",
                "--insecure",
                "--timeout",
                "2",
                "--cluster",
            ])
            .arg(file)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.code(), text)
    };
    // Nothing listens: every server down.
    let ports = free_ports(5);
    let lonely = tmp.path().join("lonely.toml");
    let text: String = ports[..2]
        .iter()
        .enumerate()
        .map(|(i, p)| format!("[[server]]\nid = {i}\naddr = \"127.0.0.1:{p}\"\n"))
        .collect();
    std::fs::write(&lonely, text).unwrap();
    let (code, text) = status(&lonely);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("0 of 2 servers up"), "{text}");
    assert!(!text.contains("health:"), "{text}");

    // One server of three replicas.
    let group = tmp.path().join("group.toml");
    let mut text = "version = 2\n[[server]]\nid = 0\n".to_string();
    for p in &ports[2..] {
        text.push_str(&format!("[[server.replica]]\naddr = \"127.0.0.1:{p}\"\n"));
    }
    std::fs::write(&group, text).unwrap();
    let mut replicas = Children(
        ports[2..]
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let child = cairn()
                    .arg("serve")
                    .arg("--dir")
                    .arg(tmp.path().join(format!("r{i}")))
                    .args(["--listen", &format!("127.0.0.1:{p}"), "--insecure"])
                    .args(["--sync", "never", "--election-timeout", "600"])
                    .arg("--cluster")
                    .arg(&group)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                Some(child)
            })
            .collect(),
    );
    let until = |want: i32| {
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            let (code, text) = status(&group);
            if code == Some(want) {
                return text;
            }
            assert!(Instant::now() < end, "not exit {want}: {code:?}\n{text}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let text = until(0);
    assert!(text.contains("1 of 1 servers up"), "{text}");
    assert!(text.contains("leader replica"), "{text}");
    assert!(text.contains("3 of 3 replicas up"), "{text}");
    assert!(text.contains("health: healthy"), "{text}");
    let mut kill = |i: usize| {
        let mut c = replicas.0[i].take().unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
    };
    kill(0);
    let text = until(1);
    assert!(text.contains("2 of 3 replicas up"), "{text}");
    assert!(text.contains("health: degraded"), "{text}");
    kill(1);
    let text = until(2);
    assert!(text.contains("1 of 3 replicas up"), "{text}");
    assert!(text.contains("health: down"), "{text}");
}

/// Child processes, killed on drop.
struct Children(Vec<Option<Child>>);

impl Drop for Children {
    fn drop(&mut self) {
        for mut c in self.0.iter_mut().filter_map(Option::take) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn usage_errors() {
    for args in [
        &["serve", "--listen", "127.0.0.1:1"][..],
        &[
            "serve",
            "--dir",
            "x",
            "--listen",
            "nowhere",
            "--cluster",
            "f",
        ],
        &[
            "serve",
            "--dir",
            "x",
            "--listen",
            "127.0.0.1:1",
            "--cluster",
            "f",
            "--sync",
            "sometimes",
        ],
        &[
            "serve",
            "--dir",
            "x",
            "--listen",
            "127.0.0.1:1",
            "--cluster",
            "f",
            "--split-threshold",
            "0",
        ],
        &["cluster", "status"],
        &["cluster", "frobnicate", "--cluster", "f"],
        &["mount", "--cluster", "f", "a", "b"],
        &["mount", "a"],
        &["mount", "a", "b", "--timeout", "3"],
    ] {
        let out = cairn().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}: {out:?}");
    }
    // A cluster file that can't be read or is not valid: one line, exit 1.
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.toml");
    std::fs::write(&bad, "[[server]]\nid = 3\naddr = \"127.0.0.1:1\"\n").unwrap();
    for file in [bad.as_path(), Path::new("/nonexistent/cluster.toml")] {
        let out = cairn()
            .args(["cluster", "status", "--cluster"])
            .arg(file)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.starts_with("cairn: cluster file"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

// ---- the mount ----------------------------------------------------------------

#[test]
fn everyday_tools_on_a_cluster_mount() {
    let cluster = Cluster::start(3, 100, "never");
    let tmp = tempfile::tempdir().unwrap();
    let (mp, mp2) = (tmp.path().join("mnt"), tmp.path().join("mnt2"));
    std::fs::create_dir(&mp).unwrap();
    std::fs::create_dir(&mp2).unwrap();
    let Some(m) = Mount::cluster(&cluster.file, &mp, &[]) else {
        return;
    };
    // 600 files in the big directory: six times the split threshold.
    compare_with_plain(tmp.path(), &mp, 600);
    let plain = tree(&tmp.path().join("plain"));
    // A second mount (another client) sees the same namespace, and each sees the
    // other's changes (once the kernel's cache of a second has expired).
    let Some(m2) = Mount::cluster(&cluster.file, &mp2, &[]) else {
        return;
    };
    assert_eq!(tree(&mp2), plain);
    std::fs::write(mp2.join("from-two"), b"2").unwrap();
    assert_eq!(std::fs::read(mp.join("from-two")).unwrap(), b"2");
    std::fs::rename(mp.join("from-two"), mp.join("copy/renamed")).unwrap();
    std::fs::create_dir(mp.join("made-by-one")).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!mp2.join("from-two").exists());
    assert_eq!(std::fs::read(mp2.join("copy/renamed")).unwrap(), b"2");
    assert!(mp2.join("made-by-one").is_dir());
    std::fs::remove_file(mp2.join("copy/renamed")).unwrap();
    std::fs::remove_dir(mp2.join("made-by-one")).unwrap();
    drop(m2);
    drop(m);
    cluster.check();
    // Everything is still there after the mounts end and a new one starts.
    let Some(_m) = Mount::cluster(&cluster.file, &mp, &[]) else {
        return;
    };
    assert_eq!(tree(&mp), plain);
}

/// The per-mount options of the mount on `mp` (`/proc/self/mountinfo`'s sixth field).
fn mount_options(mp: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = info
        .lines()
        .find(|l| l.split(' ').nth(4) == mp.to_str())
        .expect("the mount in mountinfo");
    line.split(' ')
        .nth(5)
        .unwrap()
        .split(',')
        .map(str::to_owned)
        .collect()
}

/// Runs `script` with `sh -c` as uid 1000 (group 1000, supplementary groups
/// `groups`), as `setpriv` does: its exit status and output.
fn sh_as_1000(groups: &str, script: &str) -> (bool, String) {
    let out = Command::new("setpriv")
        .args([
            "--reuid=1000",
            "--regid=1000",
            &format!("--groups={groups}"),
        ])
        .args(["--", "sh", "-c", script])
        .output()
        .expect("setpriv");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// A cluster mount is `nosuid,nodev` unless asked; through a certificate that allows
/// uids 1000-1999 only, mounted for every user with the kernel checking permissions
/// too: a user creates a read-only file and writes it through the create's open
/// (`umask 222; echo x > f`), reaches a directory through a supplementary group (sent
/// to the servers, which check every request of that certificate), and cannot read
/// root's 0600 file.
#[test]
fn a_cluster_mount_as_a_restricted_user() {
    let cluster = Cluster::start(2, 100, "never");
    let admin = cluster.client(Duration::from_secs(10));
    let open = admin.mkdir(&R, ROOT, b"open", 0o777).unwrap();
    let staff = admin.mkdir(&R, ROOT, b"staff", 0o770).unwrap();
    let gid = cairn_fs::SetAttr {
        gid: Some(50),
        ..Default::default()
    };
    admin.setattr(&R, staff.ino, &gid).unwrap();
    let secret = admin.create(&R, ROOT, b"secret", 0o600).unwrap();
    admin.write(&R, secret.ino, 0, b"root only").unwrap();
    let _ = open;
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let certs = cluster.file.parent().unwrap().to_path_buf();
    let (cert, key) = (
        certs.join("client-u1000.pem"),
        certs.join("client-u1000.key"),
    );
    let args = [
        "--allow-other",
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ];
    let Some(m) = Mount::cluster(&cluster.file, &mp, &args) else {
        return;
    };
    let opts = mount_options(&mp);
    let has = |o: &str| opts.iter().any(|x| x == o);
    assert!(has("nosuid") && has("nodev"), "{opts:?}");
    let d = mp.display();
    let (ok, out) = sh_as_1000(
        "1000",
        &format!("umask 222; echo x > {d}/open/f && cat {d}/open/f"),
    );
    assert!(
        ok && out == "x\n",
        "a read-only create written through its open: {out}"
    );
    assert_eq!(
        admin.lookup(&R, open.ino, b"f").unwrap().mode & 0o777,
        0o444
    );
    let (ok, out) = sh_as_1000("50", &format!("echo y > {d}/staff/g && cat {d}/staff/g"));
    assert!(ok && out == "y\n", "through supplementary group 50: {out}");
    let (ok, out) = sh_as_1000("1000", &format!("echo z > {d}/staff/h"));
    assert!(!ok, "without group 50: {out}");
    let (ok, out) = sh_as_1000("1000", &format!("cat {d}/secret"));
    assert!(!ok && out.contains("Permission denied"), "{out}");
    drop(m);
    // `--suid --dev` give them back.
    let mut with = args.to_vec();
    with.extend(["--suid", "--dev"]);
    let Some(_m) = Mount::cluster(&cluster.file, &mp, &with) else {
        return;
    };
    let opts = mount_options(&mp);
    let has = |o: &str| opts.iter().any(|x| x == o);
    assert!(!has("nosuid") && !has("nodev"), "{opts:?}");
}

/// The README's two commands: `cluster init-certs` makes what a TLS cluster needs; a
/// cluster file without `[tls]` is refused unless `--insecure` is given, which warns;
/// `status` over plain TCP cannot reach a TLS server.
#[test]
fn init_certs_and_an_explicit_insecure() {
    let tmp = tempfile::tempdir().unwrap();
    let port = free_ports(1)[0];
    let plain = tmp.path().join("plain.toml");
    std::fs::write(
        &plain,
        format!("[[server]]\nid = 0\naddr = \"127.0.0.1:{port}\"\n"),
    )
    .unwrap();
    let certs = tmp.path().join("certs");
    let out = cairn()
        .args(["cluster", "init-certs"])
        .arg(&certs)
        .arg("--cluster")
        .arg(&plain)
        .args(["--clients", "2"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    for f in [
        "ca.pem",
        "ca.key",
        "server-0.pem",
        "server-0.key",
        "client-0.pem",
        "client-1.key",
        "cluster.toml",
    ] {
        assert!(certs.join(f).is_file(), "{f} missing");
    }
    let secure = certs.join("cluster.toml");
    // Without [tls] and without --insecure: a clear error, nothing served.
    let out = cairn()
        .arg("serve")
        .arg("--dir")
        .arg(tmp.path().join("s"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--cluster")
        .arg(&plain)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("[tls]") && err.contains("--insecure"), "{err}");
    // With the certificates: served, and `status` answers with the client certificate.
    let serve = |file: &Path, extra: &[&str]| {
        cairn()
            .arg("serve")
            .arg("--dir")
            .arg(tmp.path().join("s"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .arg("--cluster")
            .arg(file)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let status = |file: &Path, extra: &[&str]| {
        let out = cairn()
            .args(["cluster", "status", "--timeout", "2", "--cluster"])
            .arg(file)
            .args(extra)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let wait_up = |file: &Path, extra: &[&str]| {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            let s = status(file, extra);
            if s.contains("1 of 1 servers up") {
                return;
            }
            assert!(Instant::now() < end, "server did not come up: {s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let mut child = serve(&secure, &[]);
    wait_up(&secure, &[]);
    // Plain TCP to the TLS server: down, and the server goes on.
    let s = status(&plain, &["--insecure"]);
    assert!(s.contains("0 of 1 servers up"), "{s}");
    wait_up(&secure, &[]);
    terminate(&mut child);
    // --insecure on both sides: served, with a warning at start on each side.
    let mut child = serve(&plain, &["--insecure"]);
    wait_up(&plain, &["--insecure"]);
    let out = cairn()
        .args(["cluster", "status", "--insecure", "--cluster"])
        .arg(&plain)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning: --insecure"));
    terminate(&mut child);
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("warning: --insecure"), "{err}");
}

/// `cluster init-certs --replicas`: a certificate per replica, and a cluster file of
/// version 2 with the replicas at consecutive ports and a random cluster id.
#[test]
fn init_certs_with_replicas() {
    let tmp = tempfile::tempdir().unwrap();
    let init = |dir: &Path, extra: &[&str]| {
        cairn()
            .args(["cluster", "init-certs"])
            .arg(dir)
            .args(["--servers", "2", "--base", "127.0.0.1:7300"])
            .args(extra)
            .output()
            .unwrap()
    };
    let certs = tmp.path().join("certs");
    let out = init(&certs, &["--replicas", "3"]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("2 group(s) of 3 replica(s) (6 in all)"),
        "{said}"
    );
    let cfg = ClusterConfig::load(certs.join("cluster.toml")).unwrap();
    assert_eq!((cfg.len(), cfg.version(), cfg.replicated()), (2, 2, true));
    let tls = cfg.tls().unwrap();
    let mut pems = BTreeSet::new();
    for (g, s) in (0u32..).zip(cfg.servers()) {
        assert_eq!(s.id, g);
        assert_eq!(s.replicas.len(), 3);
        for (r, rep) in (0u64..).zip(&s.replicas) {
            let port = 7300 + 3 * g as u64 + r;
            assert_eq!(rep.id, r);
            assert_eq!(rep.addr, format!("127.0.0.1:{port}").parse().unwrap());
            assert_eq!(cfg.locate(rep.addr), Some((g, r)));
            let (cert, key) = tls.servers[g as usize][r as usize].clone().unwrap();
            assert_eq!(cert, certs.join(format!("server-{g}-{r}.pem")));
            assert_eq!(key, certs.join(format!("server-{g}-{r}.key")));
            assert!(key.is_file(), "{key:?}");
            assert!(pems.insert(std::fs::read(&cert).unwrap()), "{cert:?} twice");
        }
        assert_eq!(s.addr, s.replicas[0].addr);
    }
    assert!(!certs.join("server-0.pem").exists());
    // Another run: another cluster id. Certificates for its file keep the file's id.
    let other = tmp.path().join("other");
    assert!(init(&other, &["--replicas", "3"]).status.success());
    let other = ClusterConfig::load(other.join("cluster.toml")).unwrap();
    assert_ne!(other.cluster_id(), cfg.cluster_id());
    let again = tmp.path().join("again");
    let out = cairn()
        .args(["cluster", "init-certs"])
        .arg(&again)
        .arg("--cluster")
        .arg(certs.join("cluster.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let again = ClusterConfig::load(again.join("cluster.toml")).unwrap();
    assert_eq!(again.cluster_id(), cfg.cluster_id());
    assert_eq!(again.servers(), cfg.servers());
    // One replica (the default): the version 1 file and names, as before.
    let one = tmp.path().join("one");
    assert!(init(&one, &["--replicas", "1"]).status.success());
    let text = std::fs::read_to_string(one.join("cluster.toml")).unwrap();
    assert!(
        !text.contains("replica") && !text.contains("version"),
        "{text}"
    );
    assert!(one.join("server-1.pem").is_file());
    // At most 7 replicas.
    let out = init(&tmp.path().join("eight"), &["--replicas", "8"]);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
}

/// SIGTERM to a `cairn serve` child and a bounded wait for it.
fn terminate(child: &mut Child) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let end = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            panic!("server did not stop within 30 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
