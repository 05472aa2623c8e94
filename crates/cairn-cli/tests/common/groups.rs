//! Replicated server ids of `cairn serve` processes on the network of [`super::net`]:
//! each replica a process that can be killed, paused and resumed, restarted, its store
//! deleted; the cluster's health and leaders as `cairn_cluster::admin::status` sees
//! them.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use cairn_cluster::admin::{ClusterStatus, Health};
use cairn_cluster::config::ReplicaInfo;
use cairn_cluster::{Client, ClientOptions, ClusterConfig, ServerInfo};

use super::cairn;
use super::net::Net;

/// A replica's process: its life cycle.
pub enum Proc {
    Down,
    Running(Child),
    Paused(Child),
}

/// Server ids of `replicas` replicas each: process `replicas * g + r` is replica `r`
/// of group `g`. Killed on drop.
pub struct Groups {
    pub procs: Vec<Proc>,
    pub net: Net,
    pub file: PathBuf,
    pub cfg: ClusterConfig,
    pub tmp: tempfile::TempDir,
    replicas: usize,
    /// More arguments of `cairn serve`.
    args: Vec<String>,
}

impl Drop for Groups {
    fn drop(&mut self) {
        for p in &mut self.procs {
            match std::mem::replace(p, Proc::Down) {
                Proc::Running(mut c) | Proc::Paused(mut c) => {
                    signal(&c, libc::SIGKILL);
                    let _ = c.wait();
                }
                Proc::Down => {}
            }
        }
        let _ = self.net.heal();
    }
}

pub fn signal(c: &Child, sig: i32) {
    // SAFETY: kill(2) on our own child, not yet reaped (its pid is not reused).
    unsafe { libc::kill(c.id() as i32, sig) };
}

impl Groups {
    /// Starts `groups` groups of `replicas` replicas (mutual TLS), each `cairn serve
    /// ARGS`, on fresh stores; does not wait for them.
    pub fn start(groups: usize, replicas: usize, args: &[&str]) -> Groups {
        let tmp = tempfile::tempdir().unwrap();
        let net = Net::new(groups * replicas);
        let servers: Vec<ServerInfo> = (0..groups)
            .map(|g| {
                let members = (0..replicas)
                    .map(|r| ReplicaInfo {
                        id: r as u64,
                        addr: net.addr(replicas * g + r),
                    })
                    .collect();
                ServerInfo::group(g as u32, members).unwrap()
            })
            .collect();
        let file = cairn_cluster::tls::init_certs(
            tmp.path(),
            &servers,
            &[cairn_cluster::tls::ClientCert::admin("0")],
        )
        .unwrap();
        let cfg = ClusterConfig::load(&file).unwrap();
        let mut g = Groups {
            procs: (0..groups * replicas).map(|_| Proc::Down).collect(),
            net,
            file,
            cfg,
            tmp,
            replicas,
            args: args.iter().map(|a| a.to_string()).collect(),
        };
        for i in 0..groups * replicas {
            g.spawn(i);
        }
        g
    }

    /// Replicas of each group.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    pub fn store(&self, i: usize) -> PathBuf {
        self.tmp.path().join(format!("r{i}"))
    }

    pub fn log(&self, i: usize) -> PathBuf {
        self.tmp.path().join(format!("r{i}.log"))
    }

    /// Copies every replica's log into `CAIRN_FAULT_LOGS`, if set (a run that failed).
    pub fn keep_logs(&self) {
        let Ok(dir) = std::env::var("CAIRN_FAULT_LOGS") else {
            return;
        };
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..self.procs.len() {
            let to = std::path::Path::new(&dir).join(format!("r{i}.log"));
            let _ = std::fs::copy(self.log(i), to);
        }
        println!("replica logs kept in {dir}");
    }

    pub fn spawn(&mut self, i: usize) {
        assert!(matches!(self.procs[i], Proc::Down), "replica {i} runs");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(i))
            .unwrap();
        let child = self
            .net
            .command(i)
            .arg("serve")
            .args(&self.args)
            .arg("--dir")
            .arg(self.store(i))
            .arg("--listen")
            .arg(self.net.addr(i).to_string())
            .arg("--cluster")
            .arg(&self.file)
            .env(
                "CAIRN_LOG",
                std::env::var("CAIRN_TEST_SERVER_LOG").unwrap_or("info,openraft=warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.procs[i] = Proc::Running(child);
    }

    pub fn kill(&mut self, i: usize) {
        match std::mem::replace(&mut self.procs[i], Proc::Down) {
            Proc::Running(mut c) | Proc::Paused(mut c) => {
                signal(&c, libc::SIGKILL);
                c.wait().unwrap();
            }
            Proc::Down => panic!("replica {i} is down"),
        }
    }

    pub fn pause(&mut self, i: usize) {
        match std::mem::replace(&mut self.procs[i], Proc::Down) {
            Proc::Running(c) => {
                signal(&c, libc::SIGSTOP);
                self.procs[i] = Proc::Paused(c);
            }
            _ => panic!("replica {i} is not running"),
        }
    }

    pub fn resume(&mut self, i: usize) {
        match std::mem::replace(&mut self.procs[i], Proc::Down) {
            Proc::Paused(c) => {
                signal(&c, libc::SIGCONT);
                self.procs[i] = Proc::Running(c);
            }
            _ => panic!("replica {i} is not paused"),
        }
    }

    pub fn status(&self) -> ClusterStatus {
        cairn_cluster::admin::status(&self.cfg, Duration::from_secs(2))
    }

    /// The process that leads group `g` (the latest term's), if one answers so.
    pub fn leader(&self, g: usize) -> Option<usize> {
        let st = self.status();
        let l = st.servers[g].leader()?;
        self.index_of(&l.addr)
    }

    /// The process listening at `addr` (a replica's id may change: one replaced
    /// online comes back under a new id at the same address).
    pub fn index_of(&self, addr: &str) -> Option<usize> {
        (0..self.procs.len()).find(|&i| self.net.addr(i).to_string() == addr)
    }

    /// Reads the cluster file again (after `cluster replica` changed it).
    pub fn reload(&mut self) {
        self.cfg = ClusterConfig::load(&self.file).unwrap();
    }

    /// Waits until every replica is up, every group has a leader and no replica lags
    /// more than 64 entries; how long that took. Panics past `bound`.
    pub fn wait_healthy(&self, bound: Duration) -> Duration {
        let t = Instant::now();
        loop {
            let st = self.status();
            let caught_up = st
                .servers
                .iter()
                .flat_map(|s| &s.replicas)
                .all(|r| r.up && r.lag.is_some_and(|l| l <= 64));
            if st.health() == Health::Healthy && caught_up {
                return t.elapsed();
            }
            if t.elapsed() >= bound {
                self.keep_logs();
            }
            assert!(
                t.elapsed() < bound,
                "not healthy within {bound:?}: {:#?}\n{}",
                st.servers,
                self.log_tails()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn log_tails(&self) -> String {
        let mut out = String::new();
        for i in 0..self.procs.len() {
            let text = std::fs::read_to_string(self.log(i)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out += &format!("--- replica {i}\n");
            out += &lines[lines.len().saturating_sub(15)..].join("\n");
            out += "\n";
        }
        out
    }

    pub fn client(&self, timeout: Duration) -> Client {
        self.client_with(timeout, cairn_cluster::Creates::default())
    }

    /// A client with timeout `timeout` that sends creates as `creates` says.
    pub fn client_with(&self, timeout: Duration, creates: cairn_cluster::Creates) -> Client {
        let opts = ClientOptions {
            timeout,
            creates,
            ..ClientOptions::default()
        };
        Client::with_config(self.cfg.clone(), opts).unwrap()
    }

    /// Runs `cairn cluster ARGS` on the cluster file: exit code and output.
    pub fn cluster_cmd(&self, args: &[&str]) -> (Option<i32>, String) {
        let out = cairn()
            .arg("cluster")
            .args(args)
            .arg("--cluster")
            .arg(&self.file)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    }
}
