//! The operator's views of replicated servers, in one process (every server id a group
//! of three replicas, each with its own store, port and certificate): `admin::status`
//! shows each replica's role, indexes and lag, and the cluster's health as replicas
//! die; `admin::check` reads each server's rows from its leader and compares the
//! replicas of each server by digests of their states.

mod common;

use std::time::{Duration, Instant};

use cairn_cluster::admin::{self, ClusterStatus, Health, ReplicaState, ServerState, LAGGING};
use cairn_fs::{Cred, FileSystem, ROOT};

use common::groups::Groups;

impl Groups {
    /// `admin::status` once it says `want` (within 20 s).
    fn status_until(&self, want: Health) -> ClusterStatus {
        let t = Instant::now();
        loop {
            let st = admin::status(&self.cfg, Duration::from_secs(2));
            if st.health() == want {
                return st;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "not {want:?} within 20 s: {st:#?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn status_shows_replicas_and_health_as_they_die() {
    let mut g = Groups::start(2, 3);
    let leaders = [g.leader(0), g.leader(1)];
    let c = g.client();
    let d = c.mkdir(&Cred::ROOT, ROOT, b"d", 0o755).unwrap();
    for i in 0..50 {
        c.create(&Cred::ROOT, d.ino, format!("f{i}").as_bytes(), 0o644)
            .unwrap();
    }

    let st = g.status_until(Health::Healthy);
    assert_eq!(st.servers.len(), 2);
    for (s, &l) in st.servers.iter().zip(&leaders) {
        assert!(s.up, "{s:#?}");
        assert_eq!(s.replicas.len(), 3, "{s:#?}");
        let lead = s.leader().expect("a leader");
        assert_eq!(lead.id, l as u64, "{s:#?}");
        assert_eq!(s.addr, lead.addr, "the server's address is its leader's");
        for r in &s.replicas {
            assert!(r.up && r.error.is_none(), "{r:#?}");
            assert!(r.term > 0, "{r:#?}");
            let role = if r.id == l as u64 {
                "leader"
            } else {
                "follower"
            };
            assert_eq!(r.role, role, "{r:#?}");
            assert_eq!(r.leader, Some(l as u64), "{r:#?}");
            assert!(r.lag.is_some_and(|x| x <= LAGGING), "{r:#?}");
            assert!(r.applied > 0, "{r:#?}");
        }
    }
    let entries: u64 = st.servers.iter().map(|s| s.entries).sum();
    assert!(entries >= 51, "{st:#?}");

    // Group 1's leader dies: another is elected, the group serves with two of three.
    g.servers[1][leaders[1]].take().unwrap().kill();
    let st = g.status_until(Health::Degraded);
    assert_eq!(st.servers[0].health(), Health::Healthy);
    let s1 = &st.servers[1];
    assert_eq!(s1.health(), Health::Degraded);
    assert!(s1.up, "{s1:#?}");
    let dead = &s1.replicas[leaders[1]];
    assert!(!dead.up && dead.error.is_some(), "{dead:#?}");
    assert_eq!(dead.role, "");
    let lead = s1.leader().expect("a new leader");
    assert_ne!(lead.id, leaders[1] as u64);
    assert_eq!(lead.lag, Some(0));
    // The group still serves.
    c.create(&Cred::ROOT, d.ino, b"after", 0o644).unwrap();

    // A second replica of group 1 dies: no majority, the cluster is down.
    let other = (0..3)
        .find(|&r| r != leaders[1] && g.servers[1][r].is_some())
        .unwrap();
    g.servers[1][other].take().unwrap().kill();
    let st = g.status_until(Health::Down);
    assert_eq!(st.servers[0].health(), Health::Healthy);
    assert_eq!(st.servers[1].health(), Health::Down);
    assert_eq!(st.servers[1].replicas.iter().filter(|r| r.up).count(), 1);
}

#[test]
fn check_reads_leaders_and_compares_replicas() {
    let mut g = Groups::start(2, 3);
    g.leader(0);
    g.leader(1);
    let c = g.client();
    let d = c.mkdir(&Cred::ROOT, ROOT, b"d", 0o755).unwrap();
    for i in 0..300 {
        c.create(&Cred::ROOT, d.ino, format!("f{i}").as_bytes(), 0o644)
            .unwrap();
    }
    let r = admin::check(&g.cfg, Duration::from_secs(10)).unwrap();
    assert!(r.problems.is_empty(), "{r:#?}");
    assert!(r.notes.is_empty(), "{r:#?}");
    assert_eq!(r.groups_compared, 2, "{r:#?}");
    assert!(r.replicas_down.is_empty(), "{r:#?}");
    assert!(r.entries >= 301, "{r:#?}");

    // A follower dies: noted, not damage; the other two are still compared.
    let l = g.leader(0);
    let victim = (l + 1) % 3;
    g.servers[0][victim].take().unwrap().kill();
    c.create(&Cred::ROOT, ROOT, b"later", 0o644).unwrap();
    let r = admin::check(&g.cfg, Duration::from_secs(10)).unwrap();
    assert!(r.problems.is_empty(), "{r:#?}");
    assert_eq!(r.replicas_down, vec![(0, victim as u64)], "{r:#?}");
    assert!(
        r.notes
            .iter()
            .any(|n| n.starts_with(&format!("group 0: replica {victim} "))
                && n.contains("did not answer")),
        "{r:#?}"
    );
    assert_eq!(r.groups_compared, 2, "{r:#?}");
    assert!(r.entries >= 301, "{r:#?}");
}

// ---- health from hand-made statuses ---------------------------------------------

fn single(id: u32, up: bool) -> ServerState {
    ServerState {
        id,
        addr: format!("127.0.0.1:{}", 7000 + id),
        up,
        ..Default::default()
    }
}

/// A replicated server with one replica per role ("" for a replica that is down), the
/// leader's lag 0 and the others' `lag`.
fn group(id: u32, roles: &[&str], lag: u64) -> ServerState {
    let replicas: Vec<ReplicaState> = roles
        .iter()
        .enumerate()
        .map(|(i, role)| ReplicaState {
            id: i as u64,
            addr: format!("127.0.0.1:{}", 7100 + i),
            up: !role.is_empty(),
            error: role.is_empty().then(|| "connection refused".to_string()),
            role: role.to_string(),
            term: 2,
            lag: Some(if *role == "leader" { 0 } else { lag }),
            ..Default::default()
        })
        .collect();
    ServerState {
        id,
        up: roles.contains(&"leader"),
        replicas,
        ..Default::default()
    }
}

fn cluster(servers: Vec<ServerState>) -> ClusterStatus {
    ClusterStatus {
        servers,
        largest: Vec::new(),
    }
}

#[test]
fn health_of_hand_made_statuses() {
    use Health::{Degraded, Down, Healthy};
    let cases: Vec<(Vec<ServerState>, Health)> = vec![
        (vec![single(0, true), single(1, true)], Healthy),
        (vec![single(0, true), single(1, false)], Down),
        (
            vec![group(0, &["leader", "follower", "follower"], 0)],
            Healthy,
        ),
        (
            vec![group(0, &["leader", "follower", "follower"], LAGGING)],
            Healthy,
        ),
        (
            vec![group(0, &["leader", "follower", "follower"], LAGGING + 1)],
            Degraded,
        ),
        (vec![group(0, &["leader", "follower", ""], 0)], Degraded),
        (vec![group(0, &["", "leader", "follower"], 0)], Degraded),
        // A replica that has not received its group's log yet: its vote would not
        // count, so losing the leader would leave the group without one.
        (
            vec![group(0, &["leader", "follower", "learner"], 0)],
            Degraded,
        ),
        (vec![group(0, &["leader", "learner", ""], 0)], Degraded),
        (
            vec![group(0, &["candidate", "learner", "follower"], 0)],
            Down,
        ),
        (vec![group(0, &["leader", "", ""], 0)], Down),
        (
            vec![group(0, &["candidate", "follower", "follower"], 0)],
            Down,
        ),
        (
            vec![group(0, &["recovering", "follower", "follower"], 0)],
            Down,
        ),
        (vec![group(0, &["leader", "follower", "", ""], 0)], Down),
        (
            vec![group(0, &["leader", "follower", "follower", ""], 0)],
            Degraded,
        ),
        (vec![group(0, &["", "", ""], 0)], Down),
        // The worst server's health is the cluster's.
        (
            vec![single(0, true), group(1, &["leader", "follower", ""], 0)],
            Degraded,
        ),
        (
            vec![group(0, &["leader", "follower", ""], 0), single(1, false)],
            Down,
        ),
    ];
    for (servers, want) in cases {
        let st = cluster(servers);
        assert_eq!(st.health(), want, "{st:#?}");
    }
    assert!(Healthy < Degraded && Degraded < Down);
    // Two replicas that believe they lead: the later term's is the leader.
    let mut s = group(0, &["leader", "leader", "follower"], 0);
    s.replicas[1].term = 3;
    assert_eq!(s.leader().map(|r| r.id), Some(1));
}
