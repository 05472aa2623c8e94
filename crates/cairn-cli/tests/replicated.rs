//! A replicated group as an operator runs it: three `cairn serve` processes of one
//! server id (mutual TLS, `--sync always`), one of them paused (SIGSTOP) while it leads
//! and resumed, another SIGKILLed and restarted; a client keeps creating throughout and
//! must see no error, and afterwards every acknowledged create is there and
//! `cairn cluster check` finds the namespace consistent; renames and unlinks in flight
//! when a leader pauses are done once and answered. A dead replica replaced while
//! the group serves (`cairn cluster replica add`, then `remove`). And a cluster mount
//! of two groups with one replica of each dead: the everyday tools run without an
//! error; with two of a group's three dead, what that group holds fails with `EIO`
//! within the client's timeout, and works again once one is back.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cairn_cluster::config::ReplicaInfo;
use cairn_cluster::{Client, ClientOptions, ClusterConfig, ServerInfo};
use cairn_fs::{Cred, FileSystem, ROOT};

use common::{cairn, compare_with_plain, Mount};

const R: Cred = Cred::ROOT;

struct Group {
    tmp: tempfile::TempDir,
    file: PathBuf,
    addrs: Vec<SocketAddr>,
    procs: Vec<Option<Child>>,
    /// `--sync` of the servers.
    sync: &'static str,
    /// `--election-timeout` of process i, if given.
    serve_e: fn(usize) -> Option<u64>,
}

impl Drop for Group {
    fn drop(&mut self) {
        for p in self.procs.iter_mut().flatten() {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}

fn signal(p: &Child, sig: &str) {
    let st = Command::new("kill")
        .args([sig, &p.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

impl Group {
    /// One server id of three replicas.
    fn start() -> Group {
        Group::start_groups(1, "always")
    }

    /// `groups` server ids of three replicas each: replica r of group g is process
    /// `3 g + r`.
    fn start_groups(groups: u32, sync: &'static str) -> Group {
        Group::start_with(groups, sync, None, |_| Some(1000))
    }

    /// [`Group::start_groups`], the cluster file giving `election_timeout_ms` if
    /// `file_e`, and process i started with `--election-timeout` `serve_e(i)` if some.
    fn start_with(
        groups: u32,
        sync: &'static str,
        file_e: Option<u64>,
        serve_e: fn(usize) -> Option<u64>,
    ) -> Group {
        let tmp = tempfile::tempdir().unwrap();
        let n = 3 * groups as usize;
        let addrs: Vec<SocketAddr> = cairn_testkit::loopback_addrs(n);
        let servers: Vec<ServerInfo> = (0..groups)
            .map(|g| {
                let replicas = (0..3)
                    .map(|r| ReplicaInfo {
                        id: r as u64,
                        addr: addrs[3 * g as usize + r],
                    })
                    .collect();
                ServerInfo::group(g, replicas).unwrap()
            })
            .collect();
        let file = cairn_cluster::tls::init_certs(
            tmp.path(),
            &servers,
            &[cairn_cluster::tls::ClientCert::admin("0")],
        )
        .unwrap();
        if let Some(e) = file_e {
            let text = std::fs::read_to_string(&file).unwrap();
            std::fs::write(&file, format!("election_timeout_ms = {e}\n{text}")).unwrap();
        }
        let mut g = Group {
            tmp,
            file,
            addrs,
            procs: (0..n).map(|_| None).collect(),
            sync,
            serve_e,
        };
        for i in 0..n {
            g.spawn(i);
        }
        g
    }

    fn log(&self, i: usize) -> PathBuf {
        self.tmp.path().join(format!("r{i}.log"))
    }

    fn spawn(&mut self, i: usize) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(i))
            .unwrap();
        let child = cairn()
            .args(["serve", "--sync", self.sync])
            .args(
                (self.serve_e)(i)
                    .map(|e| ["--election-timeout".to_string(), e.to_string()])
                    .into_iter()
                    .flatten(),
            )
            .arg("--dir")
            .arg(self.tmp.path().join(format!("r{i}")))
            .arg("--listen")
            .arg(self.addrs[i].to_string())
            .arg("--cluster")
            .arg(&self.file)
            .env("RUST_LOG", "info,openraft=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.procs[i] = Some(child);
    }

    /// The replica that took up the highest term, from the logs.
    fn leader(&self) -> usize {
        let mut best = (0u64, 0usize);
        for i in 0..self.procs.len() {
            let text = std::fs::read_to_string(self.log(i)).unwrap_or_default();
            for l in text.lines() {
                if let Some(rest) = l.split("leading in term ").nth(1) {
                    let t: u64 = rest.split_whitespace().next().unwrap().parse().unwrap();
                    if t >= best.0 {
                        best = (t, i);
                    }
                }
            }
        }
        assert!(best.0 > 0, "no replica leads");
        best.1
    }

    /// SIGKILLs process `i` and reaps it.
    fn kill(&mut self, i: usize) {
        let mut p = self.procs[i].take().unwrap();
        p.kill().unwrap();
        p.wait().unwrap();
    }

    /// `cairn cluster check` passes, at once or (asked again every 0.5 s) within
    /// `bound`, while replicas catch up.
    fn consistent_within(&self, bound: Duration) {
        let t = Instant::now();
        loop {
            let out = cairn()
                .args(["cluster", "check", "--cluster"])
                .arg(&self.file)
                .output()
                .unwrap();
            if out.status.success() {
                return;
            }
            assert!(
                t.elapsed() < bound,
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn client(&self) -> Client {
        let cfg = ClusterConfig::load(&self.file).unwrap();
        let o = ClientOptions {
            timeout: Duration::from_secs(30),
            ..ClientOptions::default()
        };
        Client::with_config(cfg, o).unwrap()
    }
}

/// The cluster file's `election_timeout_ms` is the servers' election timeout when
/// their command line gives none, and the time a client gives a replica to answer
/// before it tries another. Here the file says 5 s while two of the three replicas are
/// told 300 ms: a paused leader is replaced within about a second, but the client
/// waits out the file's 5 s on it first (with the client's own 1 s it would be ~1 s).
#[test]
fn the_election_timeout_comes_from_the_cluster_file() {
    let g = Group::start_with(1, "never", Some(5000), |i| (i > 0).then_some(300));
    let c = g.client();
    let d = c.mkdir(&R, ROOT, b"d", 0o755).unwrap().ino;
    creates(&c, d, 0..20);
    let log = std::fs::read_to_string(g.log(0)).unwrap();
    assert!(log.contains("election timeout 5000 ms"), "{log}");
    let log = std::fs::read_to_string(g.log(1)).unwrap();
    assert!(log.contains("election timeout 300 ms"), "{log}");
    let l = g.leader();
    signal(g.procs[l].as_ref().unwrap(), "-STOP");
    let pause = creates(&c, d, 20..21);
    signal(g.procs[l].as_ref().unwrap(), "-CONT");
    eprintln!("a create while the leader was paused: {pause:?}");
    assert!(pause >= Duration::from_millis(4900), "{pause:?}");
    creates(&c, d, 21..40);
    holds_creates(&c, d, 40);
}

/// Creates `names` in `dir`, each acknowledged (any error fails the test); the longest
/// a create took.
fn creates(c: &Client, dir: u64, names: std::ops::Range<u32>) -> Duration {
    let mut longest = Duration::ZERO;
    for i in names {
        let t = Instant::now();
        c.create(&R, dir, format!("f{i}").as_bytes(), 0o644)
            .unwrap_or_else(|e| panic!("create f{i}: {e:?}"));
        longest = longest.max(t.elapsed());
    }
    longest
}

/// Directory `dir` holds exactly `f0..f{n-1}` (what [`creates`] made).
fn holds_creates(c: &Client, dir: u64, n: u32) {
    let mut names: Vec<Vec<u8>> = c
        .readdir(&R, dir, None, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n != b"." && n != b"..")
        .collect();
    names.sort();
    let mut want: Vec<Vec<u8>> = (0..n).map(|i| format!("f{i}").into_bytes()).collect();
    want.sort();
    assert_eq!(names, want);
}

#[test]
fn a_paused_leader_and_a_killed_replica_cost_a_pause_not_an_error() {
    let mut g = Group::start();
    let c = g.client();
    let d = c.mkdir(&R, ROOT, b"d", 0o755).unwrap().ino;
    creates(&c, d, 0..100);

    // The leader is paused: another replica is elected and the creates go on.
    let l = g.leader();
    signal(g.procs[l].as_ref().unwrap(), "-STOP");
    let pause = creates(&c, d, 100..200);
    assert_ne!(g.leader(), l, "a new leader after the pause");
    eprintln!("longest create while the leader was paused: {pause:?}");
    assert!(pause < Duration::from_secs(10), "{pause:?}");
    // It comes back: it follows (it no longer leads), and loses nothing it had.
    signal(g.procs[l].as_ref().unwrap(), "-CONT");
    creates(&c, d, 200..300);

    // A follower is killed and restarted; it catches up.
    let l2 = g.leader();
    let f = (l2 + 1) % 3;
    g.kill(f);
    creates(&c, d, 300..400);
    g.spawn(f);
    creates(&c, d, 400..500);

    holds_creates(&c, d, 500);

    // Renames and unlinks in flight when the leader pauses: each is sent again to the
    // next leader with its token and answered as done, never done twice (an unlink
    // answered ENOENT, a rename refused).
    let l3 = g.leader();
    let worker = std::thread::spawn({
        let c = g.client();
        move || renames_and_unlinks(&c, d, 0..500)
    });
    std::thread::sleep(Duration::from_millis(300));
    signal(g.procs[l3].as_ref().unwrap(), "-STOP");
    let longest = worker.join().unwrap();
    signal(g.procs[l3].as_ref().unwrap(), "-CONT");
    eprintln!("longest rename or unlink across the pause: {longest:?}");
    let mut names: Vec<Vec<u8>> = c
        .readdir(&R, d, None, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n != b"." && n != b"..")
        .collect();
    names.sort();
    let mut want: Vec<Vec<u8>> = (0..500)
        .filter(|i| i % 2 == 0)
        .map(|i| format!("r{i}").into_bytes())
        .collect();
    want.sort();
    assert_eq!(names, want);
    g.consistent_within(Duration::from_secs(20));
}

/// Renames `f{i}` to `r{i}` for each of `names`, and unlinks the odd ones, each
/// acknowledged (any error fails the test); the longest one took.
fn renames_and_unlinks(c: &Client, dir: u64, names: std::ops::Range<u32>) -> Duration {
    let mut longest = Duration::ZERO;
    for i in names {
        let (from, to) = (format!("f{i}"), format!("r{i}"));
        let t = Instant::now();
        c.rename(&R, dir, from.as_bytes(), dir, to.as_bytes(), 0)
            .unwrap_or_else(|e| panic!("rename {from}: {e:?}"));
        longest = longest.max(t.elapsed());
        if i % 2 == 1 {
            let t = Instant::now();
            c.unlink(&R, dir, to.as_bytes())
                .unwrap_or_else(|e| panic!("unlink {to}: {e:?}"));
            longest = longest.max(t.elapsed());
        }
    }
    longest
}

/// Runs `cairn cluster replica ARGS` on the group's file: (success, stdout + stderr).
fn replica_cmd(g: &Group, args: &[&str]) -> (bool, String) {
    let out = cairn()
        .args(["cluster", "replica"])
        .args(args)
        .arg("--cluster")
        .arg(&g.file)
        .args(["--group", "0"])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn a_dead_replica_is_replaced_while_the_group_serves() {
    let mut g = Group::start();
    let c = g.client();
    let d = c.mkdir(&R, ROOT, b"d", 0o755).unwrap().ino;
    creates(&c, d, 0..200);

    // A follower's machine dies: its process and its store are gone.
    let l = g.leader();
    let dead = (l + 1) % 3;
    g.kill(dead);
    std::fs::remove_dir_all(g.tmp.path().join(format!("r{dead}"))).unwrap();
    creates(&c, d, 200..300);

    // A new replica on a new address: `add` writes it into the cluster file (a
    // certificate from the CA beside it), then waits for it to catch up; it is started
    // once the file names it, while the creates go on.
    let new = cairn_testkit::loopback_addr();
    let mut add = cairn()
        .args([
            "cluster",
            "replica",
            "add",
            &new.to_string(),
            "--timeout",
            "60",
        ])
        .arg("--cluster")
        .arg(&g.file)
        .args(["--group", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !std::fs::read_to_string(&g.file)
        .unwrap()
        .contains(&new.to_string())
    {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "add never wrote the file"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    g.addrs.push(new);
    g.procs.push(None);
    g.spawn(3);
    creates(&c, d, 300..400);
    let t = Instant::now();
    while add.try_wait().unwrap().is_none() {
        assert!(t.elapsed() < Duration::from_secs(90), "add did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = add.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.lines()
            .any(|l| l.contains(&new.to_string()) && l.contains("voter")),
        "{text}"
    );

    // Refusals leave the group as it is.
    let (ok, text) = replica_cmd(&g, &["remove", "127.0.0.1:1"]);
    assert!(!ok && text.contains("lists no replica"), "{text}");
    let (ok, text) = replica_cmd(&g, &["add", &g.addrs[l].to_string(), "--id", "9"]);
    assert!(!ok && text.contains("not 9"), "{text}");

    // A replica that never starts is not made a voter (the group's log is far shorter
    // than the lag openraft would call caught up): `add` gives up after its timeout,
    // leaving a learner, which `remove` takes out of the group and the file.
    let ghost = cairn_testkit::loopback_addr().to_string();
    let (ok, text) = replica_cmd(&g, &["add", &ghost, "--timeout", "3"]);
    assert!(!ok && text.contains("did not catch up"), "{text}");
    let (ok, text) = replica_cmd(&g, &["remove", &ghost]);
    assert!(ok, "{text}");
    assert!(
        !text
            .lines()
            .any(|l| l.contains(&ghost) && (l.contains("voter") || l.contains("learner"))),
        "{text}"
    );
    assert!(!std::fs::read_to_string(&g.file).unwrap().contains(&ghost));

    // The dead one leaves the group and the file.
    let dead_addr = g.addrs[dead].to_string();
    let (ok, text) = replica_cmd(&g, &["remove", &dead_addr]);
    assert!(ok, "{text}");
    assert!(!std::fs::read_to_string(&g.file)
        .unwrap()
        .contains(&dead_addr));
    creates(&c, d, 400..500);

    // The new replica counts in the majority: with the leader killed, it and the
    // remaining old one elect a leader and the creates go on.
    let l = g.leader();
    g.kill(l);
    let c = g.client();
    creates(&c, d, 500..600);
    g.spawn(l);

    holds_creates(&c, d, 600);
    // Every replica the file now lists is up, and holds the same state.
    g.consistent_within(Duration::from_secs(30));
}

#[test]
fn a_cluster_mount_works_with_a_replica_of_each_group_dead() {
    let mut g = Group::start_groups(2, "never");
    let c = g.client();
    // Files of both groups: directories land on either, and a file's inode lives
    // where its directory's entries do (no split below the threshold).
    let mut files = Vec::new();
    for k in 0..8 {
        let name = format!("d{k}");
        let d = c.mkdir(&R, ROOT, name.as_bytes(), 0o755).unwrap().ino;
        for i in 0..25 {
            let a = c.create(&R, d, format!("f{i}").as_bytes(), 0o644).unwrap();
            files.push((a.ino, format!("{name}/f{i}")));
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let mp = tmp.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let Some(m) = Mount::cluster(&g.file, &mp, &["--timeout", "4"]) else {
        return;
    };
    // Replica 0 of each group (the first leader, as a rule) dies.
    g.kill(0);
    g.kill(3);
    // (In a directory of its own: the workload compares whole trees.)
    c.mkdir(&R, ROOT, b"work", 0o755).unwrap();
    compare_with_plain(tmp.path(), &mp.join("work"), 300);

    // Two of group 1's three are dead: what it holds fails with EIO within the
    // client's timeout (4 s, and an election's worth of retries); group 0's works.
    g.kill(4);
    let quick = Client::with_config(
        ClusterConfig::load(&g.file).unwrap(),
        ClientOptions {
            timeout: Duration::from_secs(4),
            ..ClientOptions::default()
        },
    )
    .unwrap();
    let on = |grp: u32| {
        files
            .iter()
            .find(|(ino, _)| cairn_cluster::giga::home_of(*ino) == grp)
            .unwrap_or_else(|| panic!("no file of group {grp}"))
    };
    // Past the leader's read lease (0.4 E after the last majority answer), a read
    // needs a majority too.
    std::thread::sleep(Duration::from_secs(2));
    let t = Instant::now();
    let e = quick.getattr(on(1).0).unwrap_err();
    assert_eq!(e.0, libc::EIO, "{e}");
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    quick.getattr(on(0).0).unwrap();
    // Through the mount too: a clear error, not a hang.
    let p = mp.join(&on(1).1);
    std::thread::sleep(Duration::from_millis(1500)); // the kernel's cache expires
    let t = Instant::now();
    let err = std::fs::metadata(&p).unwrap_err();
    assert!(
        err.raw_os_error() == Some(libc::EIO) || err.raw_os_error() == Some(libc::ENOTCONN),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());

    // One comes back: group 1 has a majority again and serves.
    g.spawn(4);
    let t = Instant::now();
    while quick.getattr(on(1).0).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "group 1 never served again"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::fs::metadata(&p).unwrap();
    drop(m);
    g.spawn(0);
    g.spawn(3);
    g.consistent_within(Duration::from_secs(30));
}
