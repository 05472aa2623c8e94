//! The file system's shared suite (`cairn_fs::conformance`, the same cases `Fs` passes
//! in crates/cairn-fs/tests/fs.rs) on a cluster of three in-process servers through
//! `cairn_cluster::Client`, each case on a fresh cluster, with `cairn_cluster::admin::check`
//! as the consistency check. A small split threshold makes the big directories split
//! over every server.
//!
//! The cluster's documented differences from `Fs` (DESIGN.md, "Cluster") are in
//! [`PROFILE`]; the suite checks the documented behaviour there instead of `Fs`'s.

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use cairn_cluster::server::{ServerHandle, ServerOptions};
use cairn_cluster::{Client, ClientOptions, ClusterConfig};
use cairn_fs::conformance::{Profile, Target};
use cairn_fs::FileSystem;

/// How the cluster differs from `cairn_fs::Fs` (each documented in DESIGN.md).
const PROFILE: Profile = Profile {
    name: "cairn_cluster::Client (3 servers)",
    // Listings are in name-hash order, the order of the partitions.
    readdir_in_name_order: false,
    // Enough to split a directory many times at the threshold below.
    big_directory_entries: 4_000,
};

/// Entries of a partition above which it splits, in these tests.
const SPLIT_THRESHOLD: u64 = 200;

/// Free TCP ports on 127.0.0.1 (bound and released: another process could take one
/// before a server binds it, which `start_cluster` retries).
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// A cluster of in-process servers with a client, on fresh stores.
struct InProcess {
    servers: Vec<ServerHandle>,
    client: Client,
    cfg: ClusterConfig,
    _dir: tempfile::TempDir,
}

impl InProcess {
    fn new(n: usize) -> InProcess {
        let dir = tempfile::tempdir().unwrap();
        for attempt in 0.. {
            let ports = free_ports(n);
            // Mutual TLS, as a client whose certificate allows every uid.
            let certs = dir.path().join(format!("certs{attempt}"));
            cairn_cluster::tls::test_certs(&certs, n as u32).unwrap();
            let addrs: Vec<SocketAddr> = ports
                .iter()
                .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
                .collect();
            let cfg = ClusterConfig::parse(&cairn_cluster::tls::test_cluster_text(
                &certs, &addrs, "admin",
            ))
            .unwrap();
            let mut servers = Vec::new();
            let mut failed = None;
            for (i, p) in ports.iter().enumerate() {
                let listen: SocketAddr = format!("127.0.0.1:{p}").parse().unwrap();
                let store = dir.path().join(format!("a{attempt}-s{i}"));
                let mut opts = ServerOptions::new(store, listen, cfg.clone());
                opts.split_threshold = SPLIT_THRESHOLD;
                match cairn_cluster::server::start(opts) {
                    Ok(h) => servers.push(h),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            match failed {
                None => {
                    let copts = ClientOptions {
                        timeout: Duration::from_secs(20),
                        ..ClientOptions::default()
                    };
                    let client = Client::with_config(cfg.clone(), copts).unwrap();
                    return InProcess {
                        servers,
                        client,
                        cfg,
                        _dir: dir,
                    };
                }
                // A port taken meanwhile: try other ports.
                Some(e) if attempt < 5 && e.to_string().contains("listening on") => {
                    for s in servers {
                        let _ = s.shutdown();
                    }
                }
                Some(e) => panic!("starting the cluster: {e}"),
            }
        }
        unreachable!()
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        for s in self.servers.drain(..) {
            if let Err(e) = s.shutdown() {
                eprintln!("shutting a server down: {e}");
            }
        }
    }
}

impl Target for InProcess {
    fn fs(&self) -> &dyn FileSystem {
        &self.client
    }

    fn profile(&self) -> &Profile {
        &PROFILE
    }

    fn check(&self) -> Vec<String> {
        match cairn_cluster::admin::check(&self.cfg, Duration::from_secs(20)) {
            Ok(c) => c.problems,
            Err(e) => vec![format!("check failed: {e}")],
        }
    }
}

cairn_fs::conformance_tests!(InProcess::new(3));

/// One server alone is a cluster too.
#[test]
fn single_server_cluster() {
    let c = InProcess::new(1);
    cairn_fs::conformance::rename_cases(&c);
    cairn_fs::conformance::readdir_cursor_and_changes(&c);
}

/// Several clients at once, creating in one directory while it splits: every client
/// then sees the same names, all of them, each once.
#[test]
fn concurrent_clients_see_one_namespace() {
    let c = InProcess::new(3);
    let d = c
        .client
        .mkdir(&ROOT_CRED, cairn_fs::ROOT, b"shared", 0o755)
        .unwrap();
    let clients: Vec<Client> = (0..4)
        .map(|_| {
            Client::with_config(
                c.cfg.clone(),
                ClientOptions {
                    timeout: Duration::from_secs(20),
                    ..ClientOptions::default()
                },
            )
            .unwrap()
        })
        .collect();
    const PER: u32 = 1500;
    std::thread::scope(|s| {
        for (k, cl) in clients.iter().enumerate() {
            s.spawn(move || {
                for i in 0..PER {
                    let name = format!("k{k}-{i}");
                    if i % 50 == 0 {
                        cl.mkdir(&ROOT_CRED, d.ino, name.as_bytes(), 0o755).unwrap();
                    } else {
                        cl.create(&ROOT_CRED, d.ino, name.as_bytes(), 0o644)
                            .unwrap();
                    }
                }
            });
        }
    });
    let want: BTreeSet<Vec<u8>> = (0..clients.len())
        .flat_map(|k| (0..PER).map(move |i| format!("k{k}-{i}").into_bytes()))
        .collect();
    for (k, cl) in clients.iter().enumerate() {
        let listed = list(cl, d.ino, 333);
        let set: BTreeSet<Vec<u8>> = listed.iter().cloned().collect();
        assert_eq!(set.len(), listed.len(), "client {k}: a name listed twice");
        assert_eq!(set, want, "client {k}");
        // Lookups of names the others made.
        for other in 0..clients.len() {
            let n = format!("k{other}-{}", PER - 1);
            cl.lookup(&ROOT_CRED, d.ino, n.as_bytes()).unwrap();
        }
    }
    assert!(c.check().is_empty(), "{:#?}", c.check());
}

/// A listing that runs while other clients create (and the directory splits) returns
/// every name that existed when it started, each once.
#[test]
fn listing_during_splits_sees_every_name_once() {
    let c = InProcess::new(3);
    let d = c
        .client
        .mkdir(&ROOT_CRED, cairn_fs::ROOT, b"grow", 0o755)
        .unwrap();
    for i in 0..400 {
        c.client
            .create(&ROOT_CRED, d.ino, format!("old{i}").as_bytes(), 0o644)
            .unwrap();
    }
    let writer = Client::with_config(c.cfg.clone(), ClientOptions::default()).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && i < 3_000 {
                writer
                    .create(&ROOT_CRED, d.ino, format!("new{i}").as_bytes(), 0o644)
                    .unwrap();
                i += 1;
            }
        });
        for round in 0..3 {
            let listed = list(&c.client, d.ino, 17);
            let set: BTreeSet<Vec<u8>> = listed.iter().cloned().collect();
            assert_eq!(
                set.len(),
                listed.len(),
                "round {round}: a name listed twice"
            );
            for i in 0..400 {
                assert!(
                    set.contains(format!("old{i}").as_bytes()),
                    "round {round}: old{i} missing"
                );
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert!(c.check().is_empty(), "{:#?}", c.check());
}

const ROOT_CRED: cairn_fs::Cred = cairn_fs::Cred::ROOT;

/// Every name of directory `dir`, listed in pages of `page`.
fn list(fs: &dyn FileSystem, dir: u64, page: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut cursor: Option<Vec<u8>> = None;
    loop {
        let entries = fs
            .readdir(&ROOT_CRED, dir, cursor.as_deref(), page)
            .unwrap();
        let Some(last) = entries.last() else { break };
        cursor = Some(last.name.clone());
        out.extend(entries.into_iter().map(|e| e.name));
    }
    out
}
