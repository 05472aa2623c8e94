//! A cluster of in-process servers on loopback ports, for the tests.

#![allow(dead_code)]

pub mod groups;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cairn_cluster::admin;
use cairn_cluster::server::{self, ServerHandle, ServerOptions, SyncMode};
use cairn_cluster::{Client, ClientOptions, ClusterConfig};

pub struct Cluster {
    pub dirs: Vec<tempfile::TempDir>,
    pub cfg: ClusterConfig,
    pub servers: Vec<Option<ServerHandle>>,
    pub threshold: u64,
    /// Partitions per server a directory splits into at most.
    pub per_server: u32,
    pub sync: SyncMode,
}

/// `n` loopback addresses for servers to listen on (below the ephemeral port range:
/// see `cairn_testkit`).
pub use cairn_testkit::loopback_addrs as free_addrs;

/// The test certificates of this process (servers 0..16; clients admin, user, u1000),
/// and their CA.
pub fn certs() -> &'static (tempfile::TempDir, cairn_cluster::tls::CertAuthority) {
    static CERTS: std::sync::OnceLock<(tempfile::TempDir, cairn_cluster::tls::CertAuthority)> =
        std::sync::OnceLock::new();
    CERTS.get_or_init(|| {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let ca = cairn_cluster::tls::test_certs(dir.path(), 16).unwrap();
        (dir, ca)
    })
}

/// An endpoint (not connected) to the server at `addr` of `cfg` over TLS, presenting
/// certificate `who` of [`certs`] (`client-admin`, `server-1`...), or none.
pub fn endpoint(
    cfg: &ClusterConfig,
    addr: SocketAddr,
    who: Option<&str>,
) -> tonic::transport::Endpoint {
    let identity = who.map(|c| {
        let d = certs().0.path();
        (
            std::fs::read_to_string(d.join(format!("{c}.pem"))).unwrap(),
            std::fs::read_to_string(d.join(format!("{c}.key"))).unwrap(),
        )
    });
    endpoint_with(cfg, addr, identity)
}

/// An endpoint to the server at `addr` of `cfg` over TLS presenting this certificate
/// and key (PEM), if any.
pub fn endpoint_with(
    cfg: &ClusterConfig,
    addr: SocketAddr,
    identity: Option<(String, String)>,
) -> tonic::transport::Endpoint {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    let id = cfg
        .servers()
        .iter()
        .find(|s| s.addr == addr || s.replicas.iter().any(|r| r.addr == addr))
        .unwrap()
        .id;
    let ca = std::fs::read(certs().0.path().join("ca.pem")).unwrap();
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name(format!("server-{id}"));
    if let Some((c, k)) = identity {
        tls = tls.identity(Identity::from_pem(c, k));
    }
    tonic::transport::Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
}

/// The cluster file of servers at `addrs`, with TLS (the client: `admin`).
pub fn config_text(addrs: &[SocketAddr]) -> String {
    config_as(addrs, "admin")
}

/// The cluster file of servers at `addrs`, with TLS, as client `client`.
pub fn config_as(addrs: &[SocketAddr], client: &str) -> String {
    cairn_cluster::tls::test_cluster_text(certs().0.path(), addrs, client)
}

/// A client of cluster `c` presenting certificate `client-<cert>` of [`certs`].
pub fn client_as(c: &Cluster, cert: &str) -> Client {
    let addrs: Vec<SocketAddr> = c.cfg.servers().iter().map(|s| s.addr).collect();
    Client::with_config(
        ClusterConfig::parse(&config_as(&addrs, cert)).unwrap(),
        ClientOptions::default(),
    )
    .unwrap()
}

/// The cluster file of servers at `addrs` without TLS (for `--insecure`).
pub fn plain_text(addrs: &[SocketAddr]) -> String {
    addrs
        .iter()
        .enumerate()
        .map(|(i, a)| format!("[[server]]\nid = {i}\naddr = \"{a}\"\n"))
        .collect()
}

impl Cluster {
    pub fn start(n: usize, threshold: u64) -> Cluster {
        Cluster::start_with(n, threshold, SyncMode::Always)
    }

    pub fn start_with(n: usize, threshold: u64, sync: SyncMode) -> Cluster {
        // Logs, when asked for (RUST_LOG), into the test's captured output.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let addrs = free_addrs(n);
        let cfg = ClusterConfig::parse(&config_text(&addrs)).unwrap();
        let dirs: Vec<_> = (0..n).map(|_| tempfile::tempdir().unwrap()).collect();
        let mut c = Cluster {
            dirs,
            cfg,
            servers: Vec::new(),
            threshold,
            per_server: cairn_cluster::giga::DEFAULT_PARTITIONS_PER_SERVER,
            sync,
        };
        for i in 0..n {
            let h = server::start(c.opts(i, None)).unwrap();
            c.servers.push(Some(h));
        }
        c
    }

    pub fn opts(&self, i: usize, crash_at: Option<&str>) -> ServerOptions {
        let mut o = ServerOptions::new(
            self.dirs[i].path(),
            self.cfg.servers()[i].addr,
            self.cfg.clone(),
        );
        o.split_threshold = self.threshold;
        o.partitions_per_server = self.per_server;
        o.sync = self.sync;
        o.peer_timeout = Duration::from_secs(2);
        o.hooks.crash_at = crash_at.map(str::to_owned);
        o
    }

    pub fn client(&self) -> Client {
        self.client_timeout(Duration::from_secs(10))
    }

    pub fn client_timeout(&self, t: Duration) -> Client {
        self.client_with(t, cairn_cluster::Creates::Stream)
    }

    /// A client that sends its creates as `how` says.
    pub fn client_with(&self, t: Duration, how: cairn_cluster::Creates) -> Client {
        Client::with_config(
            self.cfg.clone(),
            ClientOptions {
                timeout: t,
                connect_timeout: Duration::from_secs(1),
                creates: how,
            },
        )
        .unwrap()
    }

    /// Stops server `i` as if killed.
    pub fn kill(&mut self, i: usize) {
        if let Some(h) = self.servers[i].take() {
            h.kill();
        }
    }

    /// Restarts server `i` (optionally with a crash point).
    pub fn restart(&mut self, i: usize, crash_at: Option<&str>) {
        assert!(self.servers[i].is_none());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match server::start(self.opts(i, crash_at)) {
                Ok(h) => {
                    self.servers[i] = Some(h);
                    return;
                }
                Err(e) if Instant::now() < deadline => {
                    eprintln!("restart of server {i}: {e}; again");
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("restart of server {i}: {e}"),
            }
        }
    }

    /// Server `i` with a crash point (restarted).
    pub fn arm(&mut self, i: usize, point: &str) {
        self.shutdown_one(i);
        self.restart(i, Some(point));
    }

    pub fn shutdown_one(&mut self, i: usize) {
        if let Some(h) = self.servers[i].take() {
            h.shutdown().unwrap();
        }
    }

    /// Shuts server `i` down cleanly and starts it again with its options changed by
    /// `change` (test hooks such as a power-loss record or a fault injector).
    pub fn restart_with(&mut self, i: usize, change: impl FnOnce(&mut ServerOptions)) {
        self.shutdown_one(i);
        let mut o = self.opts(i, None);
        change(&mut o);
        self.servers[i] = Some(server::start(o).unwrap());
    }

    /// Waits until server `i` reached its crash point.
    pub fn wait_crashed(&self, i: usize, t: Duration) -> bool {
        let end = Instant::now() + t;
        while Instant::now() < end {
            if self.servers[i].as_ref().is_some_and(|h| h.crashed()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    /// Waits until no server has an unfinished intent or an incoming partition.
    pub fn settle(&self, t: Duration) {
        let end = Instant::now() + t;
        loop {
            let pending: Vec<_> = self
                .servers
                .iter()
                .map(|s| s.as_ref().map(|h| h.pending()).unwrap_or((0, 0)))
                .collect();
            if pending.iter().all(|p| *p == (0, 0)) {
                return;
            }
            assert!(Instant::now() < end, "cluster did not settle: {pending:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Settles, then checks the namespace across the servers.
    pub fn check(&self) {
        self.settle(Duration::from_secs(30));
        let c = admin::check(&self.cfg, Duration::from_secs(5)).unwrap();
        assert!(c.problems.is_empty(), "inconsistent: {:#?}", c.problems);
    }

    pub fn shutdown(mut self) {
        for i in 0..self.servers.len() {
            self.shutdown_one(i);
        }
    }
}

/// The errno of a call that must fail.
pub fn e<T: std::fmt::Debug>(r: cairn_fs::FsResult<T>) -> i32 {
    r.expect_err("expected an error").0
}

/// The first name `{prefix}{i}` in `parent` whose directory home is server `home` of
/// `servers`: a directory made there by a mkdir whose parent lives elsewhere.
pub fn dir_name_on(parent: u64, prefix: &str, home: u32, servers: u32) -> Vec<u8> {
    (0..10_000)
        .map(|i| format!("{prefix}{i}").into_bytes())
        .find(|n| cairn_cluster::giga::dir_home(parent, n, servers) == home)
        .expect("a name homed on the server among 10,000")
}
