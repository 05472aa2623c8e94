//! Multi-process tests of the cluster: every server is a separate `cairn serve` process,
//! on the network of `common::net` (each in a network namespace of its own where they
//! can be made, else on 127.0.0.1).
//!
//! - a storm of creates and mkdirs from client processes, while a random server is
//!   SIGKILLed and restarted, with splits (a small `--split-threshold`); after each
//!   cycle `cairn cluster check` must pass and every acknowledged operation must show
//!   (CI: a few cycles; `CAIRN_CLUSTER_KILL_CYCLES=200` by hand);
//! - a server that is down: operations on what it holds fail with EIO within the
//!   client's timeout, through the library and through a mount; nothing hangs;
//! - a cluster file that differs between server and client: clear errors;
//! - the everyday tools on a cluster mount, compared with a plain directory, and two
//!   mounts seeing one namespace (skipped where FUSE can't be used, reported through
//!   `common::skip`).
//!
//! The cluster commands (`status`, `check`, `init-certs`), metrics and SIGTERM are in
//! tests/cluster_admin.rs.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cairn_cluster::{Client, ClientError, ClientOptions, ClusterConfig};
use cairn_fs::{Cred, Errno, FileSystem, ROOT};

use common::cluster::{Cluster, Rng};
use common::{cairn, compare_with_plain, tree, Mount};

const R: Cred = Cred::ROOT;

// ---- the storm -------------------------------------------------------------------

const STORM_FILE: &str = "CAIRN_STORM_CLUSTER";

/// A storm client (a child process of the kill test): creates files and directories
/// with unique names in the directories it is given, and removes some of its files,
/// from two threads, for the time it is given; prints every outcome as
/// `@@ OP DIR NAME RESULT` (RESULT: `ok` or an errno), then `@@done`.
#[test]
fn storm_child() {
    let Ok(file) = std::env::var(STORM_FILE) else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap();
    let me: u32 = var("CAIRN_STORM_ID").parse().unwrap();
    let ms: u64 = var("CAIRN_STORM_MS").parse().unwrap();
    let dirs: Vec<u64> = var("CAIRN_STORM_DIRS")
        .split(',')
        .map(|d| d.parse().unwrap())
        .collect();
    let opts = ClientOptions {
        timeout: Duration::from_secs(3),
        ..ClientOptions::default()
    };
    let client = Client::with_config(ClusterConfig::load(&file).unwrap(), opts).unwrap();
    let deadline = Instant::now() + Duration::from_millis(ms);
    std::thread::scope(|s| {
        for t in 0..2u32 {
            let (client, dirs) = (&client, &dirs);
            s.spawn(move || {
                let mut rng = Rng(((me as u64) << 32) | t as u64 | 0x5eed_0000);
                let mut mine: Vec<(u64, String)> = Vec::new();
                let mut seq = 0u64;
                let line = |op: &str, d: u64, n: &str, r: Result<(), Errno>| {
                    let res = match r {
                        Ok(()) => "ok".to_string(),
                        Err(e) => e.0.to_string(),
                    };
                    println!("@@ {op} {d} {n} {res}");
                };
                while Instant::now() < deadline {
                    seq += 1;
                    let d = dirs[rng.below(dirs.len() as u64) as usize];
                    match rng.below(10) {
                        0 => {
                            let n = format!("m{me}-{t}-{seq}");
                            line(
                                "mkdir",
                                d,
                                &n,
                                client.mkdir(&R, d, n.as_bytes(), 0o755).map(drop),
                            );
                        }
                        1 if !mine.is_empty() => {
                            let (d, n) = mine.swap_remove(rng.below(mine.len() as u64) as usize);
                            line("unlink", d, &n, client.unlink(&R, d, n.as_bytes()));
                        }
                        _ => {
                            let n = format!("c{me}-{t}-{seq}");
                            let r = client.create(&R, d, n.as_bytes(), 0o644).map(drop);
                            if r.is_ok() {
                                mine.push((d, n.clone()));
                            }
                            line("create", d, &n, r);
                        }
                    }
                }
            });
        }
    });
    println!("@@done");
}

/// What the storm's outcomes say must be there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    File,
    Dir,
    Absent,
}

/// Starts a storm client process for `ms` milliseconds.
fn spawn_storm(cluster: &Cluster, id: u32, ms: u64, dirs: &[u64]) -> Child {
    let dirs: Vec<String> = dirs.iter().map(|d| d.to_string()).collect();
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "storm_child", "--nocapture", "--test-threads=1"])
        .env(STORM_FILE, &cluster.file)
        .env("CAIRN_STORM_ID", id.to_string())
        .env("CAIRN_STORM_MS", ms.to_string())
        .env("CAIRN_STORM_DIRS", dirs.join(","))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Reads a storm client's outcomes until it ends (at most `limit`), into `model`.
fn collect_storm(mut child: Child, limit: Duration, model: &Mutex<HashMap<(u64, String), Expect>>) {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + limit;
    let mut done = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if line == "@@done" {
                    done = true;
                    continue;
                }
                let Some(rest) = line.strip_prefix("@@ ") else {
                    continue;
                };
                let f: Vec<&str> = rest.split(' ').collect();
                let (op, dir, name, res) = (f[0], f[1].parse().unwrap(), f[2], f[3]);
                let errno: i32 = if res == "ok" { 0 } else { res.parse().unwrap() };
                let expect = match (op, errno) {
                    ("create", 0) | ("create", libc::EEXIST) => Some(Expect::File),
                    ("mkdir", 0) | ("mkdir", libc::EEXIST) => Some(Expect::Dir),
                    ("unlink", 0) | ("unlink", libc::ENOENT) => Some(Expect::Absent),
                    // Not known whether it happened: a server was down or restarting.
                    (_, libc::EIO) => None,
                    _ => panic!("storm: unexpected outcome: {line}"),
                };
                let mut m = model.lock().unwrap();
                match expect {
                    Some(e) => {
                        m.insert((dir, name.to_string()), e);
                    }
                    // An unlink that may or may not have happened: unknown from now on.
                    None => {
                        m.remove(&(dir, name.to_string()));
                    }
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("a storm client did not finish in time (a hang?)");
            }
        }
    }
    reader.join().unwrap();
    let st = child.wait().unwrap();
    assert!(st.success() && done, "storm client failed: {st}");
}

/// Every outcome the storm clients were told is what the cluster holds: listings and
/// lookups of the storm's directories.
fn verify_storm(client: &Client, dirs: &[u64], model: &HashMap<(u64, String), Expect>) {
    for &d in dirs {
        let mut listed: BTreeMap<String, u32> = BTreeMap::new();
        let mut cursor: Option<Vec<u8>> = None;
        loop {
            let page = client.readdir(&R, d, cursor.as_deref(), 1000).unwrap();
            let Some(last) = page.last() else { break };
            cursor = Some(last.name.clone());
            for e in page {
                let n = String::from_utf8(e.name).unwrap();
                assert!(
                    listed.insert(n.clone(), e.kind).is_none(),
                    "{n} listed twice"
                );
            }
        }
        for ((dir, name), want) in model.iter().filter(|((dir, _), _)| *dir == d) {
            let kind = listed.get(name);
            match want {
                Expect::File => assert_eq!(kind, Some(&libc::S_IFREG), "{dir}/{name}"),
                Expect::Dir => assert_eq!(kind, Some(&libc::S_IFDIR), "{dir}/{name}"),
                Expect::Absent => assert_eq!(kind, None, "{dir}/{name} was removed"),
            }
            match (want, client.lookup(&R, *dir, name.as_bytes())) {
                (Expect::Absent, r) => assert_eq!(r.unwrap_err().0, libc::ENOENT),
                (_, r) => {
                    r.unwrap_or_else(|e| panic!("lookup {dir}/{name}: {e}"));
                }
            }
        }
    }
}

/// SIGKILL a random server during a storm of creates and splits, restart it, and
/// check the cluster; repeated `CAIRN_CLUSTER_KILL_CYCLES` times (default 3).
#[test]
fn kill_servers_during_a_storm_of_creates_and_splits() {
    let cycles: u32 = std::env::var("CAIRN_CLUSTER_KILL_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let n = 3;
    let mut cluster = Cluster::start(n, 40, "always");
    let client = cluster.client(Duration::from_secs(20));
    let top = client.mkdir(&R, ROOT, b"storm", 0o755).unwrap();
    let dirs: Vec<u64> = (0..4)
        .map(|i| {
            client
                .mkdir(&R, top.ino, format!("d{i}").as_bytes(), 0o755)
                .unwrap()
                .ino
        })
        .collect();
    let model = Mutex::new(HashMap::new());
    let mut rng = Rng::new();
    for cycle in 0..cycles {
        let storm_ms = 2500;
        let storms: Vec<Child> = (0..2)
            .map(|k| spawn_storm(&cluster, cycle * 2 + k, storm_ms, &dirs))
            .collect();
        std::thread::scope(|s| {
            for child in storms {
                let model = &model;
                s.spawn(move || collect_storm(child, Duration::from_secs(60), model));
            }
            std::thread::sleep(Duration::from_millis(300 + rng.below(900)));
            let victim = rng.below(n as u64) as usize;
            println!("cycle {cycle}: SIGKILL server {victim}");
            cluster.kill(victim);
            std::thread::sleep(Duration::from_millis(100 + rng.below(700)));
            cluster.spawn(victim);
            cluster.wait_up(victim);
        });
        cluster.check();
        let m = model.lock().unwrap();
        verify_storm(&client, &dirs, &m);
        println!("cycle {cycle}: consistent, {} outcomes verified", m.len());
    }
    // The directories were split over the servers.
    let st = cluster.status_json();
    let partitions: u64 = st["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["partitions"].as_u64().unwrap())
        .sum();
    assert!(
        partitions > 2 * (dirs.len() as u64 + 2),
        "splits happened: {partitions} partitions\n{st:#}"
    );
}

// ---- a server that is down ----------------------------------------------------

/// A directory of `parent` whose home is server `home` (mkdir places directories by
/// hash, so some name does).
fn dir_on(client: &Client, parent: u64, home: u64) -> (u64, String) {
    for i in 0..200 {
        let name = format!("dir{i}");
        let a = client.mkdir(&R, parent, name.as_bytes(), 0o755).unwrap();
        if a.ino >> cairn_cluster::giga::HOME_SHIFT == home {
            return (a.ino, name);
        }
    }
    panic!("no directory placed on server {home}");
}

/// Runs `f`, which must fail with one of `errnos` within `bound`.
fn fails_within<T: std::fmt::Debug>(
    bound: Duration,
    errnos: &[i32],
    f: impl FnOnce() -> Result<T, Errno>,
) {
    let start = Instant::now();
    let r = f();
    let took = start.elapsed();
    match r {
        Err(e) => assert!(
            errnos.contains(&e.0),
            "failed with {e}, wanted one of {errnos:?}"
        ),
        Ok(v) => panic!("succeeded with a server down: {v:?}"),
    }
    assert!(took <= bound, "took {took:?}, bound {bound:?}");
}

/// Runs a shell command with a deadline: its exit status and stderr; a command still
/// running at the deadline is a hang (killed, and the test fails).
fn sh_within(bound: Duration, script: &str) -> (std::process::ExitStatus, String) {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .env("LC_ALL", "C")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (st, err);
        }
        if start.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`{script}` still running after {bound:?}: it hangs");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_server_that_is_down_gives_eio_within_the_timeout() {
    // `always`: the server is SIGKILLed, and the file must be there after its restart
    // (under `never` a create still in the engine's write buffer dies with the process).
    let mut cluster = Cluster::start(3, 8192, "always");
    let client = cluster.client(Duration::from_secs(20));
    let (d, dname) = dir_on(&client, ROOT, 2);
    let f = client.create(&R, d, b"f", 0o644).unwrap();
    client.write(&R, f.ino, 0, b"data").unwrap();
    // The mount, with a short timeout, before the server goes.
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let mount = Mount::cluster(&cluster.file, &mp, &["--timeout", "2"]);
    if mount.is_some() {
        assert_eq!(std::fs::read(mp.join(&dname).join("f")).unwrap(), b"data");
    }
    cluster.kill(2);
    let quick = cluster.client(Duration::from_secs(2));
    let bound = Duration::from_secs(2 + 5);
    fails_within(bound, &[libc::EIO], || quick.getattr(d));
    fails_within(bound, &[libc::EIO], || quick.lookup(&R, d, b"f"));
    fails_within(bound, &[libc::EIO], || quick.read(&R, f.ino, 0, 10));
    fails_within(bound, &[libc::EIO], || quick.create(&R, d, b"g", 0o644));
    fails_within(bound, &[libc::EIO], || quick.readdir(&R, d, None, 10));
    // What other servers hold still works.
    // (A file is created by the server of its entry: the root's partition is on
    // server 0.)
    quick.create(&R, ROOT, b"elsewhere", 0o644).unwrap();
    if mount.is_some() {
        // Through the mount: EIO (or ENOTCONN), within the timeout; nothing hangs.
        std::thread::sleep(Duration::from_millis(1500)); // the kernel's cache expires
        let p = mp.join(&dname);
        let (st, err) = sh_within(Duration::from_secs(30), &format!("stat '{}'", p.display()));
        assert!(!st.success());
        assert!(
            err.contains("Input/output error") || err.contains("not connected"),
            "{err}"
        );
        // And the mount's log says why.
        let log = mount.as_ref().map(Mount::log).unwrap_or_default();
        assert!(
            log.contains("server 2: no answer within the timeout"),
            "{log}"
        );
        let (st, _) = sh_within(Duration::from_secs(30), &format!("ls '{}'", mp.display()));
        assert!(st.success(), "the root is listed with server 2 down");
    } else {
        // (Mount::cluster has reported the skip of the mount part.)
        println!("the mount part not run: FUSE can't be used here (reported above)");
    }
    cluster.spawn(2);
    cluster.wait_up(2);
    assert_eq!(quick.read(&R, f.ino, 0, 10).unwrap(), b"data");
    if mount.is_some() {
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(std::fs::read(mp.join(&dname).join("f")).unwrap(), b"data");
    }
    drop(mount);
    cluster.check();
}

// ---- cluster files that differ ------------------------------------------------

#[test]
fn a_cluster_file_that_differs_is_a_clear_error() {
    let mut cluster = Cluster::start(2, 8192, "never");
    let client = cluster.client(Duration::from_secs(20));
    client.mkdir(&R, ROOT, b"before", 0o755).unwrap();
    // The same servers plus one more: another cluster.
    let other = cluster.tmp.path().join("other.toml");
    let text = std::fs::read_to_string(&cluster.file).unwrap();
    std::fs::write(
        &other,
        format!("{text}[[server]]\nid = 2\naddr = \"127.0.0.1:1\"\n"),
    )
    .unwrap();
    let out = cairn()
        .args(["cluster", "status", "--timeout", "3", "--cluster"])
        .arg(&other)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("different cluster file"), "{text}");
    assert!(text.contains("0 of 3 servers up"), "{text}");
    let out = cairn()
        .args(["cluster", "check", "--timeout", "3", "--cluster"])
        .arg(&other)
        .output()
        .unwrap();
    // An error (exit 1), not a report of an inconsistent namespace (exit 2): nothing can
    // be checked against servers of another cluster (admin::check is Err).
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("different cluster file"), "{err}");
    // A client with the other file is refused when it connects, and changes nothing.
    let wrong = Client::with_config(
        ClusterConfig::load(&other).unwrap(),
        ClientOptions {
            timeout: Duration::from_secs(3),
            ..ClientOptions::default()
        },
    );
    match wrong {
        Err(ClientError::ClusterMismatch { id, .. }) => assert!(id < 2, "{id}"),
        Err(e) => panic!("expected ClusterMismatch, got {e:?}"),
        Ok(c) => panic!(
            "a client of another cluster connected (mkdir: {:?})",
            c.mkdir(&R, ROOT, b"after", 0o755).map(|a| a.ino)
        ),
    }
    assert_eq!(
        client.lookup(&R, ROOT, b"after").unwrap_err().0,
        libc::ENOENT
    );
    // A mount with it is refused, saying why.
    let mp = cluster.tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    if Mount::fuse_usable() {
        let out = cairn()
            .args(["mount", "--foreground", "--timeout", "3", "--cluster"])
            .arg(&other)
            .arg(&mp)
            .args(common::transport_args())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("different cluster file"), "{err}");
    }
    // A server's store is bound to its cluster: serving it under another is refused.
    cluster.kill(1);
    let out = cluster
        .net
        .command(1)
        .arg("serve")
        .arg("--dir")
        .arg(cluster.store(1))
        .arg("--listen")
        .arg(cluster.net.addr(1).to_string())
        .arg("--cluster")
        .arg(&other)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("belongs to"), "{err}");
    // A server listening on an address that is not in the file.
    let out = cairn()
        .arg("serve")
        .arg("--dir")
        .arg(cluster.tmp.path().join("new"))
        .args(["--listen", "127.0.0.1:9"])
        .arg("--cluster")
        .arg(&cluster.file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("not the address of any server"), "{err}");
    cluster.spawn(1);
    cluster.wait_up(1);
    client.lookup(&R, ROOT, b"before").unwrap();
    cluster.check();
}

// ---- the mount ----------------------------------------------------------------

#[test]
fn everyday_tools_on_a_cluster_mount() {
    let cluster = Cluster::start(3, 100, "never");
    let tmp = tempfile::tempdir().unwrap();
    let (mp, mp2) = (tmp.path().join("mnt"), tmp.path().join("mnt2"));
    std::fs::create_dir(&mp).unwrap();
    std::fs::create_dir(&mp2).unwrap();
    let Some(m) = Mount::cluster(&cluster.file, &mp, &[]) else {
        return;
    };
    // 600 files in the big directory: six times the split threshold.
    compare_with_plain(tmp.path(), &mp, 600);
    let plain = tree(&tmp.path().join("plain"));
    // A second mount (another client) sees the same namespace, and each sees the
    // other's changes (once the kernel's cache of a second has expired).
    let Some(m2) = Mount::cluster(&cluster.file, &mp2, &[]) else {
        return;
    };
    assert_eq!(tree(&mp2), plain);
    std::fs::write(mp2.join("from-two"), b"2").unwrap();
    assert_eq!(std::fs::read(mp.join("from-two")).unwrap(), b"2");
    std::fs::rename(mp.join("from-two"), mp.join("copy/renamed")).unwrap();
    std::fs::create_dir(mp.join("made-by-one")).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!mp2.join("from-two").exists());
    assert_eq!(std::fs::read(mp2.join("copy/renamed")).unwrap(), b"2");
    assert!(mp2.join("made-by-one").is_dir());
    std::fs::remove_file(mp2.join("copy/renamed")).unwrap();
    std::fs::remove_dir(mp2.join("made-by-one")).unwrap();
    drop(m2);
    drop(m);
    cluster.check();
    // Everything is still there after the mounts end and a new one starts.
    let Some(_m) = Mount::cluster(&cluster.file, &mp, &[]) else {
        return;
    };
    assert_eq!(tree(&mp), plain);
}

/// The per-mount options of the mount on `mp` (`/proc/self/mountinfo`'s sixth field).
fn mount_options(mp: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = info
        .lines()
        .find(|l| l.split(' ').nth(4) == mp.to_str())
        .expect("the mount in mountinfo");
    line.split(' ')
        .nth(5)
        .unwrap()
        .split(',')
        .map(str::to_owned)
        .collect()
}

/// Runs `script` with `sh -c` as uid 1000 (group 1000, supplementary groups
/// `groups`), as `setpriv` does: its exit status and output.
fn sh_as_1000(groups: &str, script: &str) -> (bool, String) {
    let out = Command::new("setpriv")
        .args([
            "--reuid=1000",
            "--regid=1000",
            &format!("--groups={groups}"),
        ])
        .args(["--", "sh", "-c", script])
        .output()
        .expect("setpriv");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// A cluster mount is `nosuid,nodev` unless asked; through a certificate that allows
/// uids 1000-1999 only, mounted for every user with the kernel checking permissions
/// too: a user creates a read-only file and writes it through the create's open
/// (`umask 222; echo x > f`), reaches a directory through a supplementary group (sent
/// to the servers, which check every request of that certificate), and cannot read
/// root's 0600 file.
#[test]
fn a_cluster_mount_as_a_restricted_user() {
    let cluster = Cluster::start(2, 100, "never");
    let admin = cluster.client(Duration::from_secs(10));
    let open = admin.mkdir(&R, ROOT, b"open", 0o777).unwrap();
    let staff = admin.mkdir(&R, ROOT, b"staff", 0o770).unwrap();
    let gid = cairn_fs::SetAttr {
        gid: Some(50),
        ..Default::default()
    };
    admin.setattr(&R, staff.ino, &gid).unwrap();
    let secret = admin.create(&R, ROOT, b"secret", 0o600).unwrap();
    admin.write(&R, secret.ino, 0, b"root only").unwrap();
    let _ = open;
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let certs = cluster.file.parent().unwrap().to_path_buf();
    let (cert, key) = (
        certs.join("client-u1000.pem"),
        certs.join("client-u1000.key"),
    );
    let args = [
        "--allow-other",
        "--cert",
        cert.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ];
    let Some(m) = Mount::cluster(&cluster.file, &mp, &args) else {
        return;
    };
    let opts = mount_options(&mp);
    let has = |o: &str| opts.iter().any(|x| x == o);
    assert!(has("nosuid") && has("nodev"), "{opts:?}");
    let d = mp.display();
    let (ok, out) = sh_as_1000(
        "1000",
        &format!("umask 222; echo x > {d}/open/f && cat {d}/open/f"),
    );
    assert!(
        ok && out == "x\n",
        "a read-only create written through its open: {out}"
    );
    assert_eq!(
        admin.lookup(&R, open.ino, b"f").unwrap().mode & 0o777,
        0o444
    );
    let (ok, out) = sh_as_1000("50", &format!("echo y > {d}/staff/g && cat {d}/staff/g"));
    assert!(ok && out == "y\n", "through supplementary group 50: {out}");
    let (ok, out) = sh_as_1000("1000", &format!("echo z > {d}/staff/h"));
    assert!(!ok, "without group 50: {out}");
    let (ok, out) = sh_as_1000("1000", &format!("cat {d}/secret"));
    assert!(!ok && out.contains("Permission denied"), "{out}");
    drop(m);
    // `--suid --dev` give them back.
    let mut with = args.to_vec();
    with.extend(["--suid", "--dev"]);
    let Some(_m) = Mount::cluster(&cluster.file, &mp, &with) else {
        return;
    };
    let opts = mount_options(&mp);
    let has = |o: &str| opts.iter().any(|x| x == o);
    assert!(!has("nosuid") && !has("nodev"), "{opts:?}");
}
