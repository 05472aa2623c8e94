//! Replicated groups in one process, for the tests: every server id a group of
//! replicas, each a server with its own store, on its own loopback port, with the test
//! certificates of [`super::certs`] (a replica of group g presents `server-<g>`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cairn_cluster::server::{self, ServerHandle, ServerOptions, SyncMode};
use cairn_cluster::{Client, ClientOptions, ClusterConfig};

use super::{certs, free_addrs};

/// A cluster of `groups` groups of `replicas` replicas each.
pub struct Groups {
    pub dir: tempfile::TempDir,
    pub cfg: ClusterConfig,
    pub addrs: Vec<Vec<SocketAddr>>,
    /// By group, by replica.
    pub servers: Vec<Vec<Option<ServerHandle>>>,
}

fn text(addrs: &[Vec<SocketAddr>], client: &str) -> String {
    let d = certs().0.path().display();
    let mut t = format!(
        "version = 2\n[tls]\nca = \"{d}/ca.pem\"\nclient_cert = \"{d}/client-{client}.pem\"\nclient_key = \"{d}/client-{client}.key\"\n"
    );
    for (g, reps) in addrs.iter().enumerate() {
        t.push_str(&format!("\n[[server]]\nid = {g}\n"));
        for a in reps {
            t.push_str(&format!(
                "[[server.replica]]\naddr = \"{a}\"\ncert = \"{d}/server-{g}.pem\"\nkey = \"{d}/server-{g}.key\"\n"
            ));
        }
    }
    t
}

impl Groups {
    pub fn start(groups: usize, replicas: usize) -> Groups {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let free = free_addrs(groups * replicas);
        let addrs: Vec<Vec<SocketAddr>> = free.chunks(replicas).map(<[_]>::to_vec).collect();
        let cfg = ClusterConfig::parse(&text(&addrs, "admin")).unwrap();
        let mut g = Groups {
            dir: tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap(),
            cfg,
            addrs,
            servers: Vec::new(),
        };
        for gi in 0..groups {
            let row = (0..replicas).map(|r| Some(g.start_one(gi, r))).collect();
            g.servers.push(row);
        }
        g
    }

    pub fn start_one(&self, g: usize, r: usize) -> ServerHandle {
        server::start(self.opts(g, r)).unwrap()
    }

    /// Replica `r` of group `g`, its store's file operations through `power` (what a
    /// power cut would keep of them).
    #[allow(dead_code)]
    pub fn start_powered(
        &self,
        g: usize,
        r: usize,
        power: std::sync::Arc<cairn::fault::PowerLoss>,
    ) -> ServerHandle {
        let mut o = self.opts(g, r);
        o.hooks.power_loss = Some(power);
        server::start(o).unwrap()
    }

    fn opts(&self, g: usize, r: usize) -> ServerOptions {
        let mut o = ServerOptions::new(
            self.dir.path().join(format!("g{g}r{r}")),
            self.addrs[g][r],
            self.cfg.clone(),
        );
        o.sync = SyncMode::Never;
        o.election_timeout = Duration::from_millis(1000);
        o.snapshot_every = 200;
        o
    }

    /// Waits (up to 20 s) until every running replica of group `g` has applied the
    /// same index, then checks that their states are identical (digests).
    pub fn converged(&self, g: usize) {
        let t = Instant::now();
        loop {
            let st: Vec<_> = self.servers[g]
                .iter()
                .flatten()
                .map(|s| s.replica_status(true).unwrap())
                .collect();
            let first = &st[0];
            if st.iter().all(|s| s.digest_applied == first.digest_applied) {
                for s in &st {
                    assert!(s.digested);
                    assert_eq!(
                        (s.digest_rows, s.digest),
                        (first.digest_rows, first.digest),
                        "group {g}: replicas {} and {} differ at index {}",
                        first.replica,
                        s.replica,
                        s.digest_applied
                    );
                }
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "group {g}: replicas do not converge: {st:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn client(&self) -> Client {
        let o = ClientOptions {
            timeout: Duration::from_secs(30),
            ..ClientOptions::default()
        };
        Client::with_config(self.cfg.clone(), o).unwrap()
    }

    /// The replica of group `g` that leads, once one does (within 20 s).
    pub fn leader(&self, g: usize) -> usize {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(20) {
            let leading: Vec<usize> = self.servers[g]
                .iter()
                .enumerate()
                .filter(|(_, s)| s.as_ref().is_some_and(ServerHandle::leads))
                .map(|(i, _)| i)
                .collect();
            if leading.len() == 1 {
                return leading[0];
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("group {g}: no leader within 20 s");
    }
}
