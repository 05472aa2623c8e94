//! A replicated cluster of `cairn serve` processes for `replication-bench`: G groups of
//! R replicas on a block of loopback ports of its own, mutual TLS with certificates made
//! for the run (as `cairn cluster init-certs` makes them: a version 2 cluster file when
//! R > 1), each replica's store and log in the work directory. The processes are
//! stopped on every way out (the [`Servers`] guard inside).

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use cairn_cluster::tls::ClientCert;
use cairn_cluster::{ClusterConfig, ReplicaInfo, ServerInfo};

use crate::servers::{Serve, Servers};

/// The name of the client certificate without uid 0 that status polls use: a server
/// answers such a certificate from memory, where an administrator's makes it count
/// every inode of its store.
const STATUS_CLIENT: &str = "status";

/// How long servers get to start listening.
const START_LIMIT: Duration = Duration::from_secs(60);

/// A running replicated cluster (see the module's documentation).
pub(crate) struct Cluster {
    /// The cluster, as clients read it.
    pub cfg: ClusterConfig,
    /// The cluster file.
    pub file: PathBuf,
    /// Where the stores, logs and certificates are.
    pub work: PathBuf,
    /// By group, by replica: how each process was started.
    serves: Vec<Vec<Serve>>,
    /// Slot `g * R + r` is replica r of group g.
    servers: Servers,
}

impl Cluster {
    /// Starts `groups` groups of `replicas` replicas with `--sync sync` in `work` (an
    /// existing directory), and waits until every replica accepts connections.
    pub(crate) fn start(
        exe: &Path,
        work: &Path,
        (groups, replicas): (u32, u32),
        sync: &str,
    ) -> Result<Cluster> {
        let n = (groups * replicas) as usize;
        let addrs = port_block(n)?;
        let servers: Vec<ServerInfo> = (0..groups)
            .map(|g| {
                let group = (0..replicas)
                    .map(|r| ReplicaInfo {
                        id: u64::from(r),
                        addr: addrs[(g * replicas + r) as usize],
                    })
                    .collect();
                ServerInfo::group(g, group).context("the server list")
            })
            .collect::<Result<_>>()?;
        let status = ClientCert {
            name: STATUS_CLIENT.to_string(),
            uids: None,
            gids: None,
        };
        let file = cairn_cluster::tls::init_certs(
            &work.join("certs"),
            &servers,
            &[ClientCert::admin("bench"), status],
        )
        .context("making the cluster's certificates")?;
        let cfg = ClusterConfig::load(&file).context("reading the cluster file")?;
        let mut c = Cluster {
            cfg,
            file: file.clone(),
            work: work.to_path_buf(),
            serves: Vec::new(),
            servers: Servers::default(),
        };
        for g in 0..groups {
            let mut row = Vec::new();
            for r in 0..replicas {
                let serve = Serve {
                    exe: exe.to_path_buf(),
                    dir: work.join(format!("g{g}r{r}")),
                    listen: addrs[(g * replicas + r) as usize],
                    cluster: file.clone(),
                    sync: sync.to_string(),
                    log: work.join(format!("g{g}r{r}.log")),
                    extra: Vec::new(),
                };
                c.servers.push(serve.spawn()?);
                row.push(serve);
            }
            c.serves.push(row);
        }
        c.servers.wait_listening(&addrs, START_LIMIT, work)?;
        Ok(c)
    }

    /// Groups.
    pub(crate) fn groups(&self) -> usize {
        self.serves.len()
    }

    /// Replicas per group.
    pub(crate) fn replicas(&self) -> usize {
        self.serves.first().map_or(0, Vec::len)
    }

    fn slot(&self, g: usize, r: usize) -> usize {
        g * self.replicas() + r
    }

    /// The log of replica `r` of group `g`.
    pub(crate) fn log(&self, g: usize, r: usize) -> &Path {
        &self.serves[g][r].log
    }

    /// The CA and the status client's certificate and key (see [`STATUS_CLIENT`]).
    pub(crate) fn status_tls(&self) -> (PathBuf, PathBuf, PathBuf) {
        let d = self.work.join("certs");
        (
            d.join("ca.pem"),
            d.join(format!("client-{STATUS_CLIENT}.pem")),
            d.join(format!("client-{STATUS_CLIENT}.key")),
        )
    }

    /// SIGKILLs replica `r` of group `g`.
    pub(crate) fn kill(&mut self, g: usize, r: usize) -> Result<()> {
        let i = self.slot(g, r);
        self.servers.kill(i)
    }

    /// Removes the store of replica `r` of group `g` (which must be stopped).
    pub(crate) fn wipe(&mut self, g: usize, r: usize) -> Result<()> {
        let d = &self.serves[g][r].dir;
        std::fs::remove_dir_all(d).with_context(|| format!("removing {}", d.display()))
    }

    /// Starts replica `r` of group `g` again, as it was started (same store, address
    /// and log), once it is stopped; a line in its log marks the restart.
    pub(crate) fn restart(&mut self, g: usize, r: usize) -> Result<()> {
        let serve = self.serves[g][r].clone();
        let line = format!(
            "---- replication-bench: restarted at {} ----",
            super::utc(super::unix_now())
        );
        append_line(&serve.log, &line)?;
        let child = serve.spawn()?;
        let i = self.slot(g, r);
        self.servers.set(i, child)
    }

    /// CPU seconds the running servers used so far.
    pub(crate) fn cpu_secs(&self) -> Result<f64> {
        self.servers.cpu_secs()
    }

    /// CPU seconds the running replicas `(group, replica)` used so far.
    pub(crate) fn cpu_secs_of(&self, replicas: &[(usize, usize)]) -> Result<f64> {
        let slots: Vec<usize> = replicas.iter().map(|&(g, r)| self.slot(g, r)).collect();
        self.servers.cpu_secs_of(&slots)
    }

    /// Fails if a server exited on its own (a crash; not one this run stopped).
    pub(crate) fn check_alive(&mut self) -> Result<()> {
        if let Some((i, st)) = self.servers.exited() {
            let (g, r) = (i / self.replicas().max(1), i % self.replicas().max(1));
            bail!(
                "replica {r} of group {g} exited on its own ({st}); see {}",
                self.log(g, r).display()
            );
        }
        Ok(())
    }
}

/// Appends a line to a log file.
fn append_line(path: &Path, line: &str) -> Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(f, "{line}").with_context(|| format!("writing {}", path.display()))
}

/// `n` consecutive free loopback ports below the kernel's ephemeral range (from
/// 32768), so that no outgoing connection takes the port of a replica that is down
/// for a restart.
fn port_block(n: usize) -> Result<Vec<SocketAddr>> {
    const LOW: usize = 20_000;
    const SPAN: usize = 12_000;
    let seed = std::process::id() as usize;
    for attempt in 0..200 {
        let base = LOW + (seed * 31 + attempt * 97 * (n + 1)) % (SPAN - n);
        let ports: Vec<SocketAddr> = (base..base + n)
            .map(|p| SocketAddr::from(([127, 0, 0, 1], p as u16)))
            .collect();
        if ports.iter().all(|a| TcpListener::bind(a).is_ok()) {
            return Ok(ports);
        }
    }
    bail!(
        "found no {n} consecutive free loopback ports in {LOW}..{}",
        LOW + SPAN
    )
}
