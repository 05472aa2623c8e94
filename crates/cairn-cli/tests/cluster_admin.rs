//! The cluster commands as an operator runs them, on `cairn serve` processes (the
//! network of `common::net`): `cairn cluster status` (its report, JSON and exit status:
//! healthy, degraded, down) and `check`, the servers' metrics, a clean stop on SIGTERM,
//! usage errors, and `cluster init-certs` (with and without replicas, and `--insecure`).

mod common;

use std::collections::BTreeSet;
use std::io::Read;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use cairn_cluster::ClusterConfig;
use cairn_fs::{Cred, FileSystem, ROOT};

use common::cairn;
use common::cluster::Cluster;
use common::net::free_ports;

const R: Cred = Cred::ROOT;

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
