//! The metrics endpoint (one per process: the Prometheus recorder is global).

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use cairn_cluster::server;
use cairn_fs::{Cred, FileSystem, ROOT};
use common::{free_addrs, Cluster};

#[test]
fn prometheus_text_on_the_metrics_port() {
    let mut c = Cluster::start(1, 10);
    c.shutdown_one(0);
    let maddr = free_addrs(1)[0];
    let mut o = c.opts(0, None);
    o.metrics = Some(maddr);
    c.servers[0] = Some(server::start(o).unwrap());
    let fs = c.client();
    let d = fs.mkdir(&Cred::ROOT, ROOT, b"d", 0o755).unwrap().ino;
    for i in 0..50 {
        fs.create(&Cred::ROOT, d, format!("f{i}").as_bytes(), 0o644)
            .unwrap();
    }
    fs.lookup(&Cred::ROOT, d, b"f1").unwrap();
    // A connection that is no TLS: refused and counted.
    let addr = c.cfg.servers()[0].addr;
    let mut bad = std::net::TcpStream::connect(addr).unwrap();
    bad.write_all(b"hello, no TLS here\r\n\r\n").unwrap();
    let mut sink = Vec::new();
    bad.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = bad.read_to_end(&mut sink);
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while c.servers[0].as_ref().unwrap().refused_connections() == 0 {
        assert!(std::time::Instant::now() < end, "not counted");
        std::thread::sleep(Duration::from_millis(20));
    }
    c.settle(Duration::from_secs(30));
    // Gauges are set by the housekeeping loop (every half second).
    std::thread::sleep(Duration::from_millis(1200));
    let mut s = std::net::TcpStream::connect(maddr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    // Every create reached the server at least once (a create that met a split in
    // flight was answered "busy" and sent again: counted twice).
    let creates: u64 = body
        .lines()
        .find_map(|l| l.strip_prefix("cairn_ops_total{op=\"create\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no create counter in:\n{body}"));
    assert!((50..=60).contains(&creates), "{creates} creates counted");
    for want in [
        "cairn_ops_total{op=\"lookup\"}",
        "cairn_op_seconds",
        "cairn_partitions",
        "cairn_entries",
        "cairn_splits_total",
        "cairn_splits_in_flight",
        "cairn_tls_refused_total{reason=\"handshake\"} 1",
        // The client's stream of creates, still open.
        "cairn_create_streams 1",
    ] {
        assert!(body.contains(want), "{want} missing from:\n{body}");
    }
    c.shutdown();
}
