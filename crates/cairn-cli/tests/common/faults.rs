//! Faults of replicated groups ([`super::groups::Groups`]) for a fault schedule: kinds,
//! a schedule drawn from a seed, and their injection and healing.

use std::process::Stdio;
use std::time::{Duration, Instant};

use super::cluster::Rng;
use super::groups::Groups;

/// One fault. Targets are drawn with the schedule; which replica leads is seen when
/// the fault is injected.
#[derive(Clone, Debug)]
pub enum Fault {
    /// SIGKILL the leader of the group, restart it after the hold.
    KillLeader { group: usize },
    /// SIGKILL a follower (the `pick`-th), restart it after the hold.
    KillFollower { group: usize, pick: usize },
    /// SIGSTOP the leader, SIGCONT after the hold.
    PauseLeader { group: usize },
    /// Cut the leader from its followers both ways; clients still reach it.
    IsolateLeader { group: usize },
    /// Cut replica `picks[g]` of each group from the clients (their answers are lost).
    CutClients { picks: Vec<usize> },
    /// SIGKILL a follower, delete its store, restart it empty at once.
    WipeFollower { group: usize, pick: usize },
    /// Replace a follower by an empty replica at the same address (a new id), online
    /// (`cluster replica remove`, then `add`), the leader SIGKILLed during the removal
    /// if `kill_leader`.
    ReplaceFollower {
        group: usize,
        pick: usize,
        kill_leader: bool,
    },
}

/// Kinds of [`Fault`].
pub const KINDS: u64 = 7;

impl Fault {
    /// A fault of `kind` (`0..KINDS`) on groups of `shape` = (groups, replicas).
    pub fn draw(kind: u64, rng: &mut Rng, shape: (usize, usize)) -> Fault {
        let (groups, replicas) = shape;
        let group = rng.below(groups as u64) as usize;
        let pick = rng.below(replicas as u64 - 1) as usize;
        match kind {
            0 => Fault::KillLeader { group },
            1 => Fault::KillFollower { group, pick },
            2 => Fault::PauseLeader { group },
            3 => Fault::IsolateLeader { group },
            4 => Fault::CutClients {
                picks: (0..groups)
                    .map(|_| rng.below(replicas as u64) as usize)
                    .collect(),
            },
            5 => Fault::WipeFollower { group, pick },
            _ => Fault::ReplaceFollower {
                group,
                pick,
                kill_leader: rng.below(2) == 0,
            },
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Fault::KillLeader { .. } => "kill-leader",
            Fault::KillFollower { .. } => "kill-follower",
            Fault::PauseLeader { .. } => "pause-leader",
            Fault::IsolateLeader { .. } => "isolate-leader",
            Fault::CutClients { .. } => "cut-clients",
            Fault::WipeFollower { .. } => "wipe-follower",
            Fault::ReplaceFollower { .. } => "replace-follower",
        }
    }

    pub fn needs_partitions(&self) -> bool {
        matches!(self, Fault::IsolateLeader { .. } | Fault::CutClients { .. })
    }
}

/// `cycles` faults with their holds (ms): the first `KINDS` cover every kind once in
/// a drawn order, the others are drawn freely.
pub fn schedule(rng: &mut Rng, cycles: usize, shape: (usize, usize)) -> Vec<(Fault, u64)> {
    let mut kinds: Vec<u64> = (0..KINDS).collect();
    for i in (1..kinds.len()).rev() {
        kinds.swap(i, rng.below(i as u64 + 1) as usize);
    }
    (0..cycles)
        .map(|c| {
            let kind = kinds.get(c).copied().unwrap_or_else(|| rng.below(KINDS));
            let fault = Fault::draw(kind, rng, shape);
            // Pauses and cuts of a leader outlast an election timeout (1 s).
            let hold = match fault {
                Fault::PauseLeader { .. } | Fault::IsolateLeader { .. } => 1500 + rng.below(2000),
                _ => 300 + rng.below(1700),
            };
            (fault, hold)
        })
        .collect()
}

/// The followers of group `g` when `leader` leads it.
fn followers(replicas: usize, g: usize, leader: usize) -> Vec<usize> {
    (replicas * g..replicas * (g + 1))
        .filter(|&i| i != leader)
        .collect()
}

/// Injects `fault`, holds it `hold`, heals it. Returns what it did, for the log, and
/// (for a wiped replica) the replica and the leader's applied index when it was wiped.
pub fn inject(
    groups: &mut Groups,
    fault: &Fault,
    hold: Duration,
    rng: &mut Rng,
) -> (String, Option<(usize, u64)>) {
    let n = groups.replicas();
    let leader_of = |groups: &Groups, g: usize, rng: &mut Rng| {
        groups
            .leader(g)
            .unwrap_or_else(|| n * g + rng.below(n as u64) as usize)
    };
    match *fault {
        Fault::KillLeader { group } | Fault::KillFollower { group, .. } => {
            let l = leader_of(groups, group, rng);
            let victim = match *fault {
                Fault::KillFollower { pick, .. } => followers(n, group, l)[pick],
                _ => l,
            };
            groups.kill(victim);
            std::thread::sleep(hold);
            groups.spawn(victim);
            (format!("SIGKILL replica {victim} (leader {l})"), None)
        }
        Fault::PauseLeader { group } => {
            let l = leader_of(groups, group, rng);
            groups.pause(l);
            std::thread::sleep(hold);
            groups.resume(l);
            (format!("SIGSTOP/SIGCONT leader {l}"), None)
        }
        Fault::IsolateLeader { group } => {
            let l = leader_of(groups, group, rng);
            for f in followers(n, group, l) {
                groups.net.cut(Some(l), Some(f)).unwrap();
                groups.net.cut(Some(f), Some(l)).unwrap();
            }
            std::thread::sleep(hold);
            groups.net.heal().unwrap();
            (format!("leader {l} cut from its followers"), None)
        }
        Fault::CutClients { ref picks } => {
            let cut: Vec<usize> = picks.iter().enumerate().map(|(g, p)| n * g + p).collect();
            for &i in &cut {
                groups.net.cut(Some(i), None).unwrap();
            }
            std::thread::sleep(hold);
            groups.net.heal().unwrap();
            (format!("replicas {cut:?} cut from the clients"), None)
        }
        Fault::ReplaceFollower {
            group,
            pick,
            kill_leader,
        } => {
            let l = leader_of(groups, group, rng);
            let victim = followers(n, group, l)[pick];
            let what = replace(groups, (group, victim), kill_leader.then_some(l), rng);
            std::thread::sleep(hold);
            (format!("{what} (leader {l})"), None)
        }
        Fault::WipeFollower { group, pick } => {
            let l = leader_of(groups, group, rng);
            let applied = groups.status().servers[group]
                .leader()
                .map_or(0, |r| r.applied);
            let victim = followers(n, group, l)[pick];
            groups.kill(victim);
            std::fs::remove_dir_all(groups.store(victim)).unwrap();
            groups.spawn(victim);
            std::thread::sleep(hold);
            (
                format!("replica {victim} wiped and restarted empty (leader {l} at {applied})"),
                Some((victim, applied)),
            )
        }
    }
}

/// Starts `cairn cluster replica ARGS --group G` on the cluster file.
fn replica_cmd(groups: &Groups, group: usize, args: &[&str]) -> std::process::Child {
    super::cairn()
        .args(["cluster", "replica"])
        .args(args)
        .arg("--cluster")
        .arg(&groups.file)
        .args(["--group", &group.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a started command: whether it succeeded, and its output.
fn finished(c: std::process::Child) -> (bool, String) {
    let out = c.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn file_lists(groups: &Groups, addr: &str) -> bool {
    std::fs::read_to_string(&groups.file)
        .unwrap()
        .contains(addr)
}

/// Takes replica `victim` of `group` out of its group online (the removal run again
/// until the cluster file no longer lists it: a leader lost mid-change may leave the
/// group in its joint configuration, which the next run finishes), SIGKILLing `leader`
/// 0–300 ms into the first run if given; then deletes its store and takes it back in,
/// empty, at the same address under a new id (ids are never reused), restarted once
/// `add` has written it into the file; `add` returns once it caught up and votes.
/// What it did, for the log.
fn replace(
    groups: &mut Groups,
    (group, victim): (usize, usize),
    leader: Option<usize>,
    rng: &mut Rng,
) -> String {
    let addr = groups.net.addr(victim).to_string();
    let mut tries = 0;
    while file_lists(groups, &addr) {
        tries += 1;
        assert!(tries <= 20, "replica {victim} could not be removed");
        let child = replica_cmd(groups, group, &["remove", &addr]);
        if let (Some(l), 1) = (leader, tries) {
            std::thread::sleep(Duration::from_millis(rng.below(300)));
            groups.kill(l);
            std::thread::sleep(Duration::from_millis(500));
            groups.spawn(l);
        }
        let (ok, text) = finished(child);
        if !ok {
            println!("  remove {addr}: {}", text.trim());
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    groups.kill(victim);
    std::fs::remove_dir_all(groups.store(victim)).unwrap();
    let mut add = replica_cmd(groups, group, &["add", &addr, "--timeout", "90"]);
    let t = Instant::now();
    while !file_lists(groups, &addr) {
        if add.try_wait().unwrap().is_some() {
            panic!("replica add {addr} ended early: {}", finished(add).1);
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "add never wrote the file"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    groups.spawn(victim);
    let (ok, text) = finished(add);
    assert!(ok, "replica add {addr}: {text}");
    groups.reload();
    format!(
        "replica {victim} removed ({tries} run(s){}), wiped, added back empty",
        if leader.is_some() {
            ", leader SIGKILLed during the first"
        } else {
            ""
        }
    )
}
