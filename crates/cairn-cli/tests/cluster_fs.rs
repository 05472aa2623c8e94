//! The file system's shared suite (`cairn_fs::conformance`, the same cases `Fs` passes
//! in crates/cairn-fs/tests/fs.rs) on a cluster of three in-process servers through
//! `cairn_cluster::Client`, each case on a fresh cluster, with `cairn_cluster::admin::check`
//! as the consistency check. A small split threshold makes the big directories split
//! over every server.
//!
//! The cluster's documented differences from `Fs` (DESIGN.md, "Cluster") are in
//! [`PROFILE`]; the suite checks the documented behaviour there instead of `Fs`'s.

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use cairn_cluster::server::{ServerHandle, ServerOptions};
use cairn_cluster::{Client, ClientOptions, ClusterConfig};
use cairn_fs::conformance::{Profile, Target};
use cairn_fs::FileSystem;

/// How the cluster differs from `cairn_fs::Fs` (each documented in DESIGN.md).
const PROFILE: Profile = Profile {
    name: "cairn_cluster::Client (3 servers)",
    // Every directory reports 2 links: its subdirectories are spread over servers.
    dir_nlink_counts_subdirs: false,
    // Listings are in name-hash order, the order of the partitions.
    readdir_in_name_order: false,
    dir_times_follow_entries: true,
    unlinked_open_files_stay: true,
    // Enough to split a directory many times at the threshold below.
    big_directory_entries: 20_000,
};

/// Entries of a partition above which it splits, in these tests.
const SPLIT_THRESHOLD: u64 = 500;

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

/// The cluster file of servers on 127.0.0.1 at `ports`.
fn cluster_file(ports: &[u16]) -> String {
    ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("[[server]]\nid = {i}\naddr = \"127.0.0.1:{p}\"\n\n"))
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
            let cfg = ClusterConfig::parse(&cluster_file(&ports)).unwrap();
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
