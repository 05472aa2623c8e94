//! `run_until_signal`: SIGTERM drains the server and closes its store (alone in its
//! test binary: the signal handler is process-wide).

mod common;

use std::time::{Duration, Instant};

use cairn_cluster::server::{self, ServerOptions};
use cairn_cluster::{Client, ClientOptions, ClusterConfig};
use cairn_fs::{Cred, FileSystem, ROOT};
use common::{config_text, free_addrs};

#[test]
fn sigterm_drains_and_closes() {
    let addrs = free_addrs(1);
    let cfg = ClusterConfig::parse(&config_text(&addrs)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let opts = ServerOptions::new(dir.path(), addrs[0], cfg.clone());
    let t = std::thread::spawn(move || server::run_until_signal(opts));
    let end = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(addrs[0]).is_err() {
        assert!(Instant::now() < end, "server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let fs = Client::with_config(cfg.clone(), ClientOptions::default()).unwrap();
    fs.mkdir(&Cred::ROOT, ROOT, b"kept", 0o755).unwrap();
    // SAFETY: kill(2) on our own process; tokio's handler receives the signal.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGTERM);
    }
    t.join().unwrap().unwrap();
    // The store was closed: it opens again at once, with everything.
    let h = server::start(ServerOptions::new(dir.path(), addrs[0], cfg)).unwrap();
    assert!(fs.lookup(&Cred::ROOT, ROOT, b"kept").unwrap().is_dir());
    h.shutdown().unwrap();
}
