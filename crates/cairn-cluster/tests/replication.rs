//! Replicated groups in one process: every server id a group of three replicas (each
//! a server with its own store, on its own loopback port, with mutual TLS). Changes
//! go through the group's leader and survive its loss; clients follow the lead.

mod common;

use std::time::Duration;

use cairn_cluster::Client;
use cairn_fs::{Cred, FileSystem, ROOT};

use common::groups::Groups;

fn names(c: &Client, dir: u64) -> Vec<String> {
    let mut v: Vec<String> = c
        .readdir(&Cred::ROOT, dir, None, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name.to_vec()).unwrap())
        .filter(|n| n != "." && n != "..")
        .collect();
    v.sort();
    v
}

#[test]
fn a_group_keeps_serving_when_its_leader_dies() {
    let mut g = Groups::start(1, 3);
    let c = g.client();
    let d = c.mkdir(&Cred::ROOT, ROOT, b"d", 0o755).unwrap();
    for i in 0..300 {
        c.create(&Cred::ROOT, d.ino, format!("f{i}").as_bytes(), 0o644)
            .unwrap();
    }
    let f = c.create(&Cred::ROOT, ROOT, b"data", 0o644).unwrap();
    c.write(&Cred::ROOT, f.ino, 0, b"hello, replicas").unwrap();

    // The leader dies; another replica takes over with everything acknowledged.
    let l = g.leader(0);
    g.servers[0][l].take().unwrap().kill();
    for i in 300..400 {
        c.create(&Cred::ROOT, d.ino, format!("f{i}").as_bytes(), 0o644)
            .unwrap();
    }
    let l2 = g.leader(0);
    assert_ne!(l, l2);
    let mut want: Vec<String> = (0..400).map(|i| format!("f{i}")).collect();
    want.sort();
    assert_eq!(names(&c, d.ino), want);
    assert_eq!(
        c.read(&Cred::ROOT, f.ino, 0, 100).unwrap(),
        b"hello, replicas"
    );

    // The dead replica comes back and catches up (by log or snapshot); then the other
    // two die in turn, and it serves everything with one of them.
    g.servers[0][l] = Some(g.start_one(0, l));
    std::thread::sleep(Duration::from_secs(2));
    g.servers[0][l2].take().unwrap().kill();
    let l3 = g.leader(0);
    let other = (0..3)
        .find(|&i| i != l3 && g.servers[0][i].is_some())
        .unwrap();
    assert!(other == l || l3 == l);
    assert_eq!(names(&c, d.ino), want);
    g.converged(0);
}

/// A leader loses the power and comes back at once. Under `SyncMode::Never` nothing it
/// appended since its restart was synced, while both followers hold every entry (the
/// test waits for that before the cut). Back with its shorter log, it must not lead its
/// old term again — it would append other entries under log ids the followers hold,
/// and the creates acknowledged before the cut would be gone (all 100 were, before the
/// fix) — but wait for an election, which only a replica holding them can win.
#[test]
fn a_leader_back_from_a_power_cut_does_not_take_up_its_term() {
    let mut g = Groups::start(1, 3);
    let c = g.client();
    let d = c.mkdir(&Cred::ROOT, ROOT, b"d", 0o755).unwrap();
    g.converged(0);
    // Every replica again, its files through a power-loss record from now on.
    let power: Vec<_> = (0..3)
        .map(|r| {
            let stash = g.dir.path().join(format!("stash{r}"));
            std::sync::Arc::new(cairn::fault::PowerLoss::new(stash).unwrap())
        })
        .collect();
    for r in 0..3 {
        g.servers[0][r].take().unwrap().shutdown().unwrap();
    }
    for (r, p) in power.iter().enumerate() {
        g.servers[0][r] = Some(g.start_powered(0, r, p.clone()));
    }
    for i in 0..100 {
        c.create(&Cred::ROOT, d.ino, format!("f{i}").as_bytes(), 0o644)
            .unwrap();
    }
    // Every replica has applied every entry (asked without a digest, which would
    // checkpoint the store).
    let t = std::time::Instant::now();
    loop {
        let applied: Vec<u64> = g.servers[0]
            .iter()
            .flatten()
            .map(|s| s.replica_status(false).unwrap().applied)
            .collect();
        if applied.iter().all(|&a| a == applied[0]) {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "{applied:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let l = g.leader(0);
    power[l].cut();
    g.servers[0][l].take().unwrap().kill();
    // What it had written but not synced is lost (what it had not even written, in
    // its write buffers, went with the process).
    let lost = power[l].restart(cairn::fault::Loss::Unsynced, 1).unwrap();
    eprintln!("power cut of the leader, replica {l}: {lost:?}");
    g.servers[0][l] = Some(g.start_one(0, l));
    for i in 100..120 {
        c.create(&Cred::ROOT, d.ino, format!("f{i}").as_bytes(), 0o644)
            .unwrap();
    }
    let mut want: Vec<String> = (0..120).map(|i| format!("f{i}")).collect();
    want.sort();
    assert_eq!(names(&c, d.ino), want);
    g.converged(0);
}

#[test]
fn an_empty_replica_joins_by_snapshot() {
    let mut g = Groups::start(2, 3);
    let c = g.client();
    let d = c.mkdir(&Cred::ROOT, ROOT, b"d", 0o755).unwrap();
    for i in 0..1000 {
        c.create(&Cred::ROOT, d.ino, format!("f{i}").as_bytes(), 0o644)
            .unwrap();
    }
    // A follower of the directory's group loses its store and comes back empty: it
    // must get a snapshot (the log before it is gone: snapshots every 200 entries).
    let h = cairn_cluster::giga::home_of(d.ino) as usize;
    let l = g.leader(h);
    let victim = (l + 1) % 3;
    g.servers[h][victim].take().unwrap().kill();
    std::fs::remove_dir_all(g.dir.path().join(format!("g{h}r{victim}"))).unwrap();
    g.servers[h][victim] = Some(g.start_one(h, victim));
    for i in 1000..1100 {
        c.create(&Cred::ROOT, d.ino, format!("f{i}").as_bytes(), 0o644)
            .unwrap();
    }
    g.converged(0);
    g.converged(1);
    let st = g.servers[h][victim]
        .as_ref()
        .unwrap()
        .replica_status(false)
        .unwrap();
    assert!(st.snapshots_installed >= 1, "{st:?}");
    // Now only the rebuilt replica and one other are up: it must hold everything.
    g.servers[h][l].take().unwrap().kill();
    g.leader(h);
    let mut want: Vec<String> = (0..1100).map(|i| format!("f{i}")).collect();
    want.sort();
    assert_eq!(names(&c, d.ino), want);
}

/// The RPCs of service `Raft`, from the proto file.
fn raft_rpcs() -> Vec<String> {
    let proto = include_str!("../proto/cluster.proto");
    let body = proto
        .split("service Raft {")
        .nth(1)
        .and_then(|s| s.split('}').next())
        .expect("service Raft in cluster.proto");
    body.lines()
        .filter_map(|l| l.trim().strip_prefix("rpc "))
        .map(|l| l.split('(').next().unwrap().trim().to_string())
        .collect()
}

#[test]
fn raft_messages_are_for_the_replicas_of_the_group_only() {
    use cairn_cluster::proto::{self, raft_client::RaftClient};
    use tonic::Code;
    let g = Groups::start(2, 3);
    g.leader(0);
    let a = g.addrs[0][0];
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let msg = |cluster_id: u64, group: u32, body: &[u8]| proto::RaftMsg {
            cluster_id,
            group,
            body: body.to_vec(),
        };
        // Every call of the service, with its expected refusal for each caller.
        async fn call(
            c: &mut RaftClient<tonic::transport::Channel>,
            rpc: &str,
            m: proto::RaftMsg,
        ) -> Code {
            let r = match rpc {
                "Append" => c.append(m).await,
                "Vote" => c.vote(m).await,
                "Snapshot" => c.snapshot(m).await,
                other => panic!("service Raft has a call {other} that this test does not probe"),
            };
            r.map(|_| Code::Ok).unwrap_or_else(|s| s.code())
        }
        let id = g.cfg.cluster_id();
        for who in ["client-admin", "client-user", "server-1"] {
            let ch = common::endpoint(&g.cfg, a, Some(who))
                .connect()
                .await
                .unwrap();
            let mut c = RaftClient::new(ch);
            for rpc in raft_rpcs() {
                assert_eq!(
                    call(&mut c, &rpc, msg(id, 0, b"")).await,
                    Code::PermissionDenied,
                    "{rpc} as {who}"
                );
            }
        }
        // Group 0's own certificate, with another cluster's id, another group, or a
        // body that does not decode: refused before Raft sees it, and counted.
        let ch = common::endpoint(&g.cfg, a, Some("server-0"))
            .connect()
            .await
            .unwrap();
        let mut c = RaftClient::new(ch);
        let before = g.servers[0][0]
            .as_ref()
            .unwrap()
            .replica_status(false)
            .unwrap();
        for rpc in raft_rpcs() {
            for m in [
                msg(id ^ 1, 0, b""),
                msg(id, 1, b""),
                msg(id, 0, b"\xff\xff garbage"),
            ] {
                assert_eq!(call(&mut c, &rpc, m).await, Code::InvalidArgument, "{rpc}");
            }
        }
        let after = g.servers[0][0]
            .as_ref()
            .unwrap()
            .replica_status(false)
            .unwrap();
        assert!(after.refused >= before.refused + 3 * raft_rpcs().len() as u64);
    });
    // The group was not disturbed.
    let c = g.client();
    c.mkdir(&Cred::ROOT, ROOT, b"after", 0o755).unwrap();
    g.converged(0);
}
