//! A cluster of `cairn serve` processes of one replica each, on the network of
//! [`super::net`], for the multi-process cluster tests.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use cairn_cluster::{Client, ClientOptions, ClusterConfig};

use super::cairn;
use super::net::Net;

/// A cluster of `cairn serve` processes; killed on drop.
pub struct Cluster {
    pub servers: Vec<Option<Child>>,
    pub net: Net,
    pub file: PathBuf,
    pub cfg: ClusterConfig,
    pub split_threshold: u64,
    /// `--sync` of the servers.
    pub sync: &'static str,
    /// More arguments of every `cairn serve` (`--lease-time 2` ...).
    pub extra: Vec<String>,
    pub tmp: tempfile::TempDir,
}

impl Cluster {
    /// Starts `n` servers on fresh stores and waits until they all answer. `sync`:
    /// `always` where acknowledged changes must survive a SIGKILL, else `never` (every
    /// change of a sequential client would wait for an fsync of its own).
    pub fn start(n: usize, split_threshold: u64, sync: &'static str) -> Cluster {
        Cluster::start_on(Net::new(n), n, split_threshold, sync, &[])
    }

    /// As [`Cluster::start`], on `net`, each `cairn serve` given `extra` too.
    pub fn start_on(
        net: Net,
        n: usize,
        split_threshold: u64,
        sync: &'static str,
        extra: &[&str],
    ) -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
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
            extra: extra.iter().map(|s| s.to_string()).collect(),
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

    pub fn store(&self, i: usize) -> PathBuf {
        self.tmp.path().join(format!("server{i}"))
    }

    pub fn log(&self, i: usize) -> PathBuf {
        self.tmp.path().join(format!("server{i}.log"))
    }

    /// Starts `cairn serve` for server `i` (not waiting for it to answer).
    pub fn spawn(&mut self, i: usize) {
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
            .args(&self.extra)
            .env("CAIRN_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.servers[i] = Some(child);
    }

    /// Waits until server `i` answers a status request (at most 60 s).
    pub fn wait_up(&mut self, i: usize) {
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

    pub fn log_tail(&self, i: usize) -> String {
        let text = std::fs::read_to_string(self.log(i)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// SIGKILLs server `i`.
    pub fn kill(&mut self, i: usize) {
        let mut c = self.servers[i].take().expect("server running");
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
        c.wait().unwrap();
    }

    /// SIGTERMs server `i` and returns its exit status (it must end within 30 s).
    pub fn terminate(&mut self, i: usize) -> std::process::ExitStatus {
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
    pub fn client(&self, timeout: Duration) -> Client {
        let opts = ClientOptions {
            timeout,
            ..ClientOptions::default()
        };
        Client::with_config(self.cfg.clone(), opts).unwrap()
    }

    /// `cairn cluster check`: retried while it finds problems (operations of a restarted
    /// server may still be finishing), at most 60 s; panics with the last report.
    pub fn check(&self) {
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
    pub fn status_json(&self) -> serde_json::Value {
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

/// A small generator (SplitMix64), seeded from an environment variable or the clock; the
/// seed is printed so that a failing run can be repeated.
pub struct Rng(pub u64);

impl Rng {
    /// Seeded from `CAIRN_CLUSTER_SEED` (or the clock).
    pub fn new() -> Rng {
        Rng::from_env("CAIRN_CLUSTER_SEED")
    }

    /// Seeded from the variable `var` (or the clock), printed as `VAR=SEED`.
    pub fn from_env(var: &str) -> Rng {
        let seed = std::env::var(var)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        println!("{var}={seed}");
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
