//! A fault schedule (after Jepsen) on a replicated cluster: two groups of three
//! replicas, each replica a `cairn serve` process (`--sync always`) in a network
//! namespace of its own where they can be made (`common::net`), under a mixed workload
//! from four client threads (each its own `cairn_cluster::Client`): creates, unlinks,
//! renames within and across groups, mkdirs, rmdirs, lookups, writes and reads of small
//! files, and creates of unique names in a directory that splits (`--split-threshold
//! 16`). Meanwhile a schedule drawn from a seed (printed; `CAIRN_FAULT_SEED` replays
//! it) injects one fault per cycle, heals it and waits until every group is healthy:
//! SIGKILL of a leader or of a follower (restarted), SIGSTOP of a leader (SIGCONT after
//! a hold), a leader cut from its followers (clients still reach it), one replica of
//! each group cut from the clients, a follower's store deleted (restarted empty, it
//! must rejoin by snapshot: `--snapshot-every 256`), and a follower replaced online by
//! an empty one (`cairn cluster replica remove`, its leader SIGKILLed during the change
//! in half the draws, then `replica add`). The first cycles cover every kind once;
//! `CAIRN_JEPSEN_CYCLES` sets how many (7 by default: each kind once; 200 by hand).
//!
//! Every operation is recorded (call time, return time, outcome: an answer, a definite
//! error, or unknown for `EIO`, Jepsen's `:info`) and after the faults are healed the
//! history, closed by a final lookup of every name and read of every file, is checked
//! for linearizability key by key (`common::linear`): a name as a register of
//! absent / present with an inode (a rename is a removal at its source and a creation
//! at its destination), a file's contents as a register. So an acknowledged operation
//! whose effect is missing, one applied twice, or a stale read fails the test. Then
//! `cairn cluster check` (which compares the replicas of each group) and `cairn cluster
//! status` must exit 0.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cairn_cluster::{Client, Creates};
use cairn_fs::{Cred, Errno, FileSystem, ROOT};

use common::cluster::Rng;
use common::faults::{inject, schedule, Fault, KINDS};
use common::groups::Groups;
use common::linear::{
    self, DataIn, DataModel, DataOut, Keyed, NameIn, NameModel, NameOut, Op, Verdict, VALUE_LEN,
};

const R: Cred = Cred::ROOT;
const GROUPS: usize = 2;
const REPLICAS: usize = 3;
/// `--snapshot-every` of the replicas: small, so that a replica restarted empty finds
/// the log it needs purged and is sent a snapshot.
const SNAPSHOT_EVERY: u64 = 256;
/// The clients' timeout of one operation.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// Client threads of the workload.
const CLIENTS: usize = 4;

// ---- the workload ---------------------------------------------------------------

/// Names of files (`fK.E`) and of directories (`mK.E`) in each group's directory, in
/// each epoch `E` of `EPOCH_SECS` seconds. New names every epoch keep each name's
/// history short, and with it the number of operations of unknown outcome the checker
/// must place (its search grows exponentially with them).
const FILE_NAMES: u64 = 8;
const DIR_NAMES: u64 = 4;
const EPOCH_SECS: u64 = 5;
/// Files whose contents are written and read, in each group's directory (`wK`).
const DATA_FILES: usize = 2;

/// Where the workload works.
struct Layout {
    /// A directory whose home is group g, for each g.
    dirs: [u64; GROUPS],
    /// The directory that splits.
    big: u64,
    /// The files written and read: key and inode.
    data: Vec<(String, u64)>,
}

fn setup(groups: &Groups) -> Layout {
    let c = groups.client(Duration::from_secs(30));
    let mut dirs = [0u64; GROUPS];
    for i in 0..200 {
        if dirs.iter().all(|&d| d != 0) {
            break;
        }
        let a = c
            .mkdir(&R, ROOT, format!("d{i}").as_bytes(), 0o755)
            .unwrap();
        let home = cairn_cluster::giga::home_of(a.ino) as usize;
        if dirs[home] == 0 {
            dirs[home] = a.ino;
        }
    }
    assert!(dirs.iter().all(|&d| d != 0), "no directory on some group");
    let big = c.mkdir(&R, ROOT, b"big", 0o755).unwrap().ino;
    let mut data = Vec::new();
    for (g, &d) in dirs.iter().enumerate() {
        for k in 0..DATA_FILES {
            let a = c.create(&R, d, format!("w{k}").as_bytes(), 0o644).unwrap();
            data.push((format!("g{g}/w{k}"), a.ino));
        }
    }
    Layout { dirs, big, data }
}

/// Counts of outcomes: acknowledged, definite errors (ENOENT, EEXIST), unknown (EIO).
#[derive(Default, Clone, Copy, Debug)]
struct Counts {
    ok: u64,
    failed: u64,
    unknown: u64,
}

/// What one client did.
#[derive(Default)]
struct History {
    names: Keyed<NameIn, NameOut>,
    data: Keyed<DataIn, DataOut>,
    counts: BTreeMap<&'static str, Counts>,
    /// Errors no outcome of the operation explains.
    unexpected: Vec<String>,
    /// How long each operation took.
    latencies: Vec<Duration>,
    /// When each operation of unknown outcome was called (ns from the start), and
    /// what it was.
    unknowns: Vec<(u64, String)>,
}

impl History {
    fn merge(&mut self, other: History) {
        for (k, ops) in other.names {
            self.names.entry(k).or_default().extend(ops);
        }
        for (k, ops) in other.data {
            self.data.entry(k).or_default().extend(ops);
        }
        for (k, c) in other.counts {
            let e = self.counts.entry(k).or_default();
            e.ok += c.ok;
            e.failed += c.failed;
            e.unknown += c.unknown;
        }
        self.unexpected.extend(other.unexpected);
        self.latencies.extend(other.latencies);
        self.unknowns.extend(other.unknowns);
    }
}

/// An operation's outcome as the history records it.
enum Outcome<T> {
    /// Answered (a value, or a definite error the operation's model knows).
    Known(T),
    /// `EIO`: it may or may not have been done.
    Unknown,
}

/// One client thread of the workload.
struct Worker<'a> {
    me: usize,
    client: Client,
    rng: Rng,
    clock: Instant,
    layout: &'a Layout,
    seq: u64,
    /// Unique names of the big directory this worker created (acknowledged).
    mine: Vec<String>,
    /// Whether it changes every name and writes every data file, not only its own.
    shared: bool,
    h: History,
}

impl Worker<'_> {
    fn now(&self) -> u64 {
        self.clock.elapsed().as_nanos() as u64
    }

    /// Runs `f`, timing it; `known` turns its result into an outcome (`None`: an errno
    /// it does not explain).
    fn run<T, O>(
        &mut self,
        what: &'static str,
        f: impl FnOnce(&Client) -> Result<T, Errno>,
        known: impl FnOnce(Result<T, Errno>) -> Option<O>,
    ) -> (u64, u64, Outcome<O>) {
        let t = Instant::now();
        let call = self.now();
        let r = f(&self.client);
        let ret = self.now();
        self.h.latencies.push(t.elapsed());
        let c = self.h.counts.entry(what).or_default();
        let errno = r.as_ref().err().map(|e| e.0);
        let out = match errno {
            Some(libc::EIO) => {
                c.unknown += 1;
                self.h.unknowns.push((call, what.to_string()));
                return (call, ret, Outcome::Unknown);
            }
            Some(_) => {
                c.failed += 1;
                known(r)
            }
            None => {
                c.ok += 1;
                known(r)
            }
        };
        match out {
            Some(o) => (call, ret, Outcome::Known(o)),
            None => {
                let e = errno.unwrap_or(0);
                self.h
                    .unexpected
                    .push(format!("client {}: {what}: errno {e}", self.me));
                (call, ret, Outcome::Unknown)
            }
        }
    }

    fn record_name(
        &mut self,
        key: &str,
        input: NameIn,
        call: u64,
        ret: u64,
        out: Outcome<NameOut>,
    ) {
        let ret = match out {
            Outcome::Known(o) => Some((ret, o)),
            Outcome::Unknown => None,
        };
        self.h.names.entry(key.to_string()).or_default().push(Op {
            client: self.me,
            call,
            ret,
            input,
        });
    }

    /// A name of group `g`'s directory: a file's (`fK`) or a directory's (`mK`); to
    /// change (`mine`), one this client owns (K = me mod CLIENTS) unless names are
    /// shared.
    fn pick_name(&mut self, dir: bool, mine: bool) -> (usize, String) {
        let g = self.rng.below(GROUPS as u64) as usize;
        let epoch = self.clock.elapsed().as_secs() / EPOCH_SECS;
        let count = if dir { DIR_NAMES } else { FILE_NAMES };
        let k = if mine && !self.shared {
            self.me as u64 + CLIENTS as u64 * self.rng.below(count / CLIENTS as u64)
        } else {
            self.rng.below(count)
        };
        (g, format!("{}{k}.{epoch}", if dir { 'm' } else { 'f' }))
    }

    fn make(&mut self, dir: bool) {
        let (g, name) = self.pick_name(dir, true);
        let d = self.layout.dirs[g];
        let (call, ret, out) = self.run(
            if dir { "mkdir" } else { "create" },
            |c| {
                if dir {
                    c.mkdir(&R, d, name.as_bytes(), 0o755)
                } else {
                    c.create(&R, d, name.as_bytes(), 0o644)
                }
            },
            |r| match r {
                Ok(a) => Some(NameOut::Made(a.ino)),
                Err(e) if e.0 == libc::EEXIST => Some(NameOut::Exists),
                Err(_) => None,
            },
        );
        self.record_name(&format!("g{g}/{name}"), NameIn::Make, call, ret, out);
    }

    fn remove(&mut self, dir: bool) {
        let (g, name) = self.pick_name(dir, true);
        let d = self.layout.dirs[g];
        let (call, ret, out) = self.run(
            if dir { "rmdir" } else { "unlink" },
            |c| {
                if dir {
                    c.rmdir(&R, d, name.as_bytes())
                } else {
                    c.unlink(&R, d, name.as_bytes())
                }
            },
            removed,
        );
        self.record_name(&format!("g{g}/{name}"), NameIn::Remove, call, ret, out);
    }

    fn lookup(&mut self) {
        let dir = self.rng.below(3) == 0;
        let (g, name) = self.pick_name(dir, false);
        let d = self.layout.dirs[g];
        let (call, ret, out) = self.run("lookup", |c| c.lookup(&R, d, name.as_bytes()), found);
        // A lookup that failed changed nothing: left out.
        if let Outcome::Known(o) = out {
            self.record_name(
                &format!("g{g}/{name}"),
                NameIn::Lookup,
                call,
                ret,
                Outcome::Known(o),
            );
        }
    }

    /// A rename to another name of the same kind, in the other group's directory as a
    /// rule (across groups), else in the same.
    fn rename(&mut self, dir: bool) {
        let (g, name) = self.pick_name(dir, true);
        let (mut g2, name2) = self.pick_name(dir, true);
        if self.rng.below(4) != 0 {
            g2 = (g + 1) % GROUPS;
        }
        if g2 == g && name2 == name {
            g2 = (g + 1) % GROUPS;
        }
        let (d, d2) = (self.layout.dirs[g], self.layout.dirs[g2]);
        let (call, ret, out) = self.run(
            "rename",
            |c| c.rename(&R, d, name.as_bytes(), d2, name2.as_bytes(), 0),
            |r| match r {
                Ok(()) => Some(NameOut::Moved),
                Err(e) if e.0 == libc::ENOENT => Some(NameOut::NoEnt),
                Err(_) => None,
            },
        );
        let (from, to) = (format!("g{g}/{name}"), format!("g{g2}/{name2}"));
        match out {
            Outcome::Known(NameOut::NoEnt) => {
                // Nothing moved: the destination is untouched (left out there).
                self.record_name(
                    &from,
                    NameIn::MoveOut,
                    call,
                    ret,
                    Outcome::Known(NameOut::NoEnt),
                );
            }
            Outcome::Known(o) => {
                self.record_name(&from, NameIn::MoveOut, call, ret, Outcome::Known(o));
                self.record_name(&to, NameIn::MoveIn, call, ret, Outcome::Known(o));
            }
            Outcome::Unknown => {
                self.record_name(&from, NameIn::MoveOut, call, ret, Outcome::Unknown);
                self.record_name(&to, NameIn::MoveIn, call, ret, Outcome::Unknown);
            }
        }
    }

    /// A write of a new value to a data file: one this client owns (file `i` is client
    /// `i % CLIENTS`'s) unless `CAIRN_FAULT_SHARED=1`, else any file.
    fn write(&mut self) {
        let n = self.layout.data.len() as u64;
        let i = if self.shared {
            self.rng.below(n)
        } else {
            let mine = n
                .saturating_sub(self.me as u64)
                .div_ceil(CLIENTS as u64)
                .max(1);
            (self.me as u64 + CLIENTS as u64 * self.rng.below(mine)) % n
        };
        let (key, ino) = self.layout.data[i as usize].clone();
        self.seq += 1;
        let v = format!("c{}-{:013}", self.me, self.seq).into_bytes();
        assert_eq!(v.len(), VALUE_LEN);
        let (call, ret, out) = self.run(
            "write",
            |c| c.write(&R, ino, 0, &v),
            |r| match r {
                Ok(n) if n == VALUE_LEN => Some(DataOut::Written),
                _ => None,
            },
        );
        let ret = match out {
            Outcome::Known(o) => Some((ret, o)),
            Outcome::Unknown => None,
        };
        self.h.data.entry(key).or_default().push(Op {
            client: self.me,
            call,
            ret,
            input: DataIn::Write(v),
        });
    }

    fn read(&mut self) {
        let (key, ino) =
            self.layout.data[self.rng.below(self.layout.data.len() as u64) as usize].clone();
        let (call, ret, out) = self.run(
            "read",
            |c| c.read(&R, ino, 0, VALUE_LEN),
            |r| r.ok().map(DataOut::Read),
        );
        if let Outcome::Known(o) = out {
            self.h.data.entry(key).or_default().push(Op {
                client: self.me,
                call,
                ret: Some((ret, o)),
                input: DataIn::Read,
            });
        }
    }

    /// A create of a new name in the big directory, or (one time in four) an unlink of
    /// one this worker made.
    fn storm(&mut self) {
        let big = self.layout.big;
        if self.rng.below(4) == 0 && !self.mine.is_empty() {
            let i = self.rng.below(self.mine.len() as u64) as usize;
            let name = self.mine.swap_remove(i);
            let (call, ret, out) =
                self.run("unlink", |c| c.unlink(&R, big, name.as_bytes()), removed);
            self.record_name(&format!("big/{name}"), NameIn::Remove, call, ret, out);
            return;
        }
        self.seq += 1;
        let name = format!("s{}-{}", self.me, self.seq);
        let (call, ret, out) = self.run(
            "create",
            |c| c.create(&R, big, name.as_bytes(), 0o644),
            |r| match r {
                Ok(a) => Some(NameOut::Made(a.ino)),
                Err(_) => None,
            },
        );
        if matches!(out, Outcome::Known(_)) {
            self.mine.push(name.clone());
        }
        self.record_name(&format!("big/{name}"), NameIn::Make, call, ret, out);
    }

    /// Runs operations until `stop` (or `limit` has passed).
    fn work(mut self, stop: &AtomicBool, limit: Duration) -> History {
        while !stop.load(Ordering::Relaxed) && self.clock.elapsed() < limit {
            match self.rng.below(100) {
                0..=14 => self.make(false),
                15..=24 => self.remove(false),
                25..=34 => self.rename(false),
                35..=44 => self.lookup(),
                45..=49 => self.make(true),
                50..=54 => self.remove(true),
                55..=59 => self.rename(true),
                60..=71 => self.write(),
                72..=83 => self.read(),
                _ => self.storm(),
            }
        }
        self.h
    }
}

fn removed(r: Result<(), Errno>) -> Option<NameOut> {
    match r {
        Ok(()) => Some(NameOut::Removed),
        Err(e) if e.0 == libc::ENOENT => Some(NameOut::NoEnt),
        Err(_) => None,
    }
}

fn found(r: Result<cairn_fs::Attr, Errno>) -> Option<NameOut> {
    match r {
        Ok(a) => Some(NameOut::Found(a.ino)),
        Err(e) if e.0 == libc::ENOENT => Some(NameOut::NoEnt),
        Err(_) => None,
    }
}

// ---- after the faults ---------------------------------------------------------

/// Ends the history: a lookup of every name of the groups' directories and a read of
/// every data file (client `CLIENTS`), and the big directory's listing as a lookup of
/// each of its names. Panics on a name listed that no operation made, or listed twice.
fn final_reads(groups: &Groups, layout: &Layout, h: &mut History, clock: Instant) {
    let c = groups.client(Duration::from_secs(30));
    let now = || clock.elapsed().as_nanos() as u64;
    let me = CLIENTS;
    let data: BTreeSet<String> = (0..DATA_FILES).map(|k| format!("w{k}")).collect();
    for (g, &d) in layout.dirs.iter().enumerate() {
        let prefix = format!("g{g}/");
        let keys: Vec<String> = h
            .names
            .keys()
            .filter(|k| k.starts_with(&prefix))
            .cloned()
            .collect();
        for key in keys {
            let name = &key[prefix.len()..];
            let call = now();
            let out = found(c.lookup(&R, d, name.as_bytes()))
                .unwrap_or_else(|| panic!("final lookup of {key} failed"));
            let op = Op {
                client: me,
                call,
                ret: Some((now(), out)),
                input: NameIn::Lookup,
            };
            h.names.entry(key).or_default().push(op);
        }
        for name in list(&c, d) {
            let key = format!("{prefix}{name}");
            assert!(
                data.contains(&name) || h.names.contains_key(&key),
                "{key}: listed, never made"
            );
        }
    }
    for (key, ino) in &layout.data {
        let call = now();
        let data = c
            .read(&R, *ino, 0, VALUE_LEN)
            .unwrap_or_else(|e| panic!("final read of {key}: {e}"));
        let op = Op {
            client: me,
            call,
            ret: Some((now(), DataOut::Read(data))),
            input: DataIn::Read,
        };
        h.data.entry(key.clone()).or_default().push(op);
    }
    let call = now();
    let listed: BTreeMap<String, u64> = list_with_inos(&c, layout.big);
    let ret = now();
    for name in listed.keys() {
        assert!(
            h.names.contains_key(&format!("big/{name}")),
            "big/{name}: listed, never made"
        );
    }
    for (key, ops) in h.names.iter_mut().filter(|(k, _)| k.starts_with("big/")) {
        let out = match listed.get(&key["big/".len()..]) {
            Some(&ino) => NameOut::Found(ino),
            None => NameOut::NoEnt,
        };
        ops.push(Op {
            client: me,
            call,
            ret: Some((ret, out)),
            input: NameIn::Lookup,
        });
    }
}

/// The names of directory `d`.
fn list(c: &Client, d: u64) -> Vec<String> {
    list_with_inos(c, d).into_keys().collect()
}

/// The names of directory `d` with their inodes; panics on a name listed twice.
fn list_with_inos(c: &Client, d: u64) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let mut cursor: Option<Vec<u8>> = None;
    for _ in 0..100_000 {
        let page = c.readdir(&R, d, cursor.as_deref(), 1000).unwrap();
        let Some(last) = page.last() else {
            return out;
        };
        cursor = Some(last.name.clone());
        for e in page {
            let n = String::from_utf8(e.name).unwrap();
            assert!(out.insert(n.clone(), e.ino).is_none(), "{n} listed twice");
        }
    }
    panic!("listing of {d} does not end");
}

/// `p`-th percentile of sorted `v`.
fn percentile(v: &[Duration], p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// A fault injected: its kind, and when (ns from the start) it began and the groups
/// were healthy again.
struct Cycle {
    kind: &'static str,
    from: u64,
    to: u64,
}

/// Runs the schedule's faults, one per cycle, each healed and followed by a wait until
/// every group is healthy.
fn run_faults(
    groups: &mut Groups,
    plan: &[(Fault, u64)],
    rng: &mut Rng,
    clock: Instant,
) -> Vec<Cycle> {
    let mut done = Vec::new();
    for (cycle, (fault, hold)) in plan.iter().enumerate() {
        let hold = *hold;
        let fault = if fault.needs_partitions() && !groups.net.can_cut() {
            common::skip(
                "fault schedule: partitions (servers on loopback), a follower killed instead",
            );
            Fault::KillFollower {
                group: cycle % GROUPS,
                pick: 0,
            }
        } else {
            fault.clone()
        };
        let t = Instant::now();
        let from = clock.elapsed().as_nanos() as u64;
        let (what, wiped) = inject(groups, &fault, Duration::from_millis(hold), rng);
        let healthy = groups.wait_healthy(Duration::from_secs(120));
        println!(
            "cycle {cycle} at {:.1} s: {}: {what}; held {hold} ms, healthy {healthy:.1?} later ({:.1?} in all)",
            from as f64 / 1e9,
            fault.name(),
            t.elapsed()
        );
        if let Some((victim, applied)) = wiped {
            let st = groups.status();
            let addr = groups.net.addr(victim).to_string();
            let r = st.servers[victim / REPLICAS]
                .replicas
                .iter()
                .find(|r| r.addr == addr)
                .unwrap();
            println!(
                "  replica {victim} rejoined at applied index {} ({} snapshot(s) installed)",
                r.applied, r.snapshots_installed
            );
            // Past a few snapshots the log it would need is purged: only a snapshot
            // brings it back.
            if applied >= 3 * SNAPSHOT_EVERY {
                assert!(
                    r.snapshots_installed >= 1,
                    "replica {victim} rejoined without a snapshot"
                );
            }
        }
        let to = clock.elapsed().as_nanos() as u64;
        done.push(Cycle {
            kind: fault.name(),
            from,
            to,
        });
    }
    done
}

/// Sets `stop` when dropped: a panic of the fault runner ends the workload too.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn a_fault_schedule_under_a_mixed_workload() {
    // The test command runs one cycle of each fault kind; long runs are by hand
    // (CAIRN_JEPSEN_CYCLES=200).
    let cycles = std::env::var("CAIRN_JEPSEN_CYCLES")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(KINDS as usize);
    let mut rng = Rng::from_env("CAIRN_FAULT_SEED");
    let plan = schedule(&mut rng, cycles, (GROUPS, REPLICAS));
    println!("schedule of {cycles} cycles: {plan:?}");
    let snapshot_every = SNAPSHOT_EVERY.to_string();
    let args = [
        "--sync",
        "always",
        "--split-threshold",
        "16",
        "--snapshot-every",
        &snapshot_every,
    ];
    let mut groups = Groups::start(GROUPS, REPLICAS, &args);
    groups.wait_healthy(Duration::from_secs(120));
    let layout = setup(&groups);
    // By default each name and file has one client that changes it (all read them);
    // CAIRN_FAULT_SHARED=1 lets every client change every name and write every file (a
    // request sent again after its first copy took effect is answered from the ledger,
    // so it neither undoes nor misreports another client's later change). Shared runs
    // are by hand (CAIRN_FAULT_SHARED=1).
    let shared = std::env::var("CAIRN_FAULT_SHARED").is_ok_and(|v| v == "1");
    println!("names and files shared by the clients: {shared}");
    // How the clients send creates (CAIRN_FAULT_CREATES=stream|batch|single; stream
    // by default, as a mount does).
    let creates = match std::env::var("CAIRN_FAULT_CREATES").as_deref() {
        Ok("batch") => Creates::Batch,
        Ok("single") => Creates::Single,
        _ => Creates::Stream,
    };
    println!("creates sent as: {}", creates.word());
    let clock = Instant::now();
    let stop = AtomicBool::new(false);
    // Every cycle ends within its hold and a wait for health (at most 120 s each).
    let limit = Duration::from_secs(60 + 130 * cycles as u64);
    let workers: Vec<Worker> = (0..CLIENTS)
        .map(|me| Worker {
            me,
            client: groups.client_with(CLIENT_TIMEOUT, creates),
            rng: Rng(rng.next() ^ me as u64),
            clock,
            layout: &layout,
            seq: 0,
            mine: Vec::new(),
            shared,
            h: History::default(),
        })
        .collect();
    let mut h = History::default();
    let histories = Mutex::new(Vec::new());
    let cycles = std::thread::scope(|s| {
        for w in workers {
            let (stop, histories) = (&stop, &histories);
            s.spawn(move || {
                let h = w.work(stop, limit);
                histories.lock().unwrap().push(h);
            });
        }
        let _stop = StopOnDrop(&stop);
        // The workload runs a while before the first fault and after the last.
        std::thread::sleep(Duration::from_secs(1));
        let cycles = run_faults(&mut groups, &plan, &mut rng, clock);
        std::thread::sleep(Duration::from_secs(1));
        cycles
    });
    let ran = clock.elapsed();
    for part in histories.into_inner().unwrap() {
        h.merge(part);
    }
    groups.wait_healthy(Duration::from_secs(120));
    final_reads(&groups, &layout, &mut h, clock);
    report(&h, &cycles, ran);
    assert!(
        h.unexpected.is_empty(),
        "errors no outcome explains: {:?}",
        h.unexpected
    );
    let t = Instant::now();
    let names = linear::check(&NameModel, &h.names);
    let data = linear::check(&DataModel, &h.data);
    println!(
        "linearizability: names {names:?}, contents {data:?} ({} + {} keys, {:.1} s)",
        h.names.len(),
        h.data.len(),
        t.elapsed().as_secs_f64()
    );
    // CAIRN_FAULT_LOGS=DIR keeps the replicas' logs of a run that found a violation.
    if !matches!(
        (&names, &data),
        (Verdict::Linearizable, Verdict::Linearizable)
    ) {
        groups.keep_logs();
    }
    assert!(matches!(names, Verdict::Linearizable), "names: {names:#?}");
    assert!(matches!(data, Verdict::Linearizable), "contents: {data:#?}");
    // The replicas of each group hold the same state (cluster check compares their
    // digests at one applied index), and the namespace is whole; retried while
    // intents of the last faults finish.
    let t = Instant::now();
    loop {
        let (code, text) = groups.cluster_cmd(&["check"]);
        if code == Some(0) {
            assert!(text.contains("consistent"), "{text}");
            break;
        }
        if t.elapsed() >= Duration::from_secs(60) {
            groups.keep_logs();
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "cairn cluster check: {code:?}\n{text}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let (code, text) = groups.cluster_cmd(&["status"]);
    assert_eq!(code, Some(0), "cairn cluster status:\n{text}");
}

/// Prints what the run did: operations by kind and outcome, faults by kind and the
/// unknown outcomes of operations called during each (or a client's timeout after),
/// the longest waits of the clients.
fn report(h: &History, cycles: &[Cycle], ran: Duration) {
    let total: u64 = h.counts.values().map(|c| c.ok + c.failed + c.unknown).sum();
    let unknown: u64 = h.counts.values().map(|c| c.unknown).sum();
    println!(
        "{total} operations in {:.1} s from {CLIENTS} clients, {unknown} of unknown outcome (EIO)",
        ran.as_secs_f64()
    );
    for (k, c) in &h.counts {
        println!(
            "  {k}: {} ok, {} failed, {} unknown",
            c.ok, c.failed, c.unknown
        );
    }
    let mut kinds: BTreeMap<&str, (u32, u64)> = BTreeMap::new();
    let mut outside = 0;
    for (call, _) in &h.unknowns {
        let window = CLIENT_TIMEOUT.as_nanos() as u64;
        match cycles
            .iter()
            .find(|c| c.from <= *call && *call <= c.to + window)
        {
            Some(c) => kinds.entry(c.kind).or_default().1 += 1,
            None => outside += 1,
        }
    }
    for c in cycles {
        kinds.entry(c.kind).or_default().0 += 1;
    }
    println!("faults (count, unknown outcomes during them): {kinds:?}; unknown outcomes outside faults: {outside}");
    let mut l = h.latencies.clone();
    l.sort();
    println!(
        "operation time: p50 {:?}, p99 {:?}, max {:?}",
        percentile(&l, 0.5),
        percentile(&l, 0.99),
        percentile(&l, 1.0)
    );
}

// ---- the checker catches what it must -------------------------------------------

/// An operation of a hand-made history: `ret` `None` for an unknown outcome.
fn op<I, O>(client: usize, call: u64, ret: Option<(u64, O)>, input: I) -> Op<I, O> {
    Op {
        client,
        call,
        ret,
        input,
    }
}

fn names_ok(ops: Vec<Op<NameIn, NameOut>>) -> bool {
    let h = BTreeMap::from([("k".to_string(), ops)]);
    matches!(linear::check(&NameModel, &h), Verdict::Linearizable)
}

fn data_ok(ops: Vec<Op<DataIn, DataOut>>) -> bool {
    let h = BTreeMap::from([("k".to_string(), ops)]);
    matches!(linear::check(&DataModel, &h), Verdict::Linearizable)
}

#[test]
fn the_checker_catches_broken_histories() {
    use NameIn::{Lookup, Make, MoveIn, MoveOut, Remove};
    use NameOut::{Found, Made, Moved, NoEnt, Removed};
    let w = |v: &str| DataIn::Write(v.as_bytes().to_vec());
    let r = |v: &str| DataOut::Read(v.as_bytes().to_vec());
    // An acknowledged create whose name is gone later, nothing having removed it.
    assert!(!names_ok(vec![
        op(0, 0, Some((10, Made(5))), Make),
        op(1, 20, Some((30, NoEnt)), Lookup)
    ]));
    // ... unless an unlink of unknown outcome may have removed it.
    assert!(names_ok(vec![
        op(0, 0, Some((10, Made(5))), Make),
        op(2, 12, None, Remove),
        op(1, 20, Some((30, NoEnt)), Lookup),
    ]));
    // An unlink applied twice: it removes a later create's file.
    assert!(!names_ok(vec![
        op(0, 0, Some((1, Made(1))), Make),
        op(0, 2, Some((3, Removed)), Remove),
        op(1, 4, Some((5, Made(2))), Make),
        op(2, 6, Some((7, NoEnt)), Lookup),
    ]));
    // Overlapping: the lookup may come before the create.
    assert!(names_ok(vec![
        op(0, 0, Some((10, Made(5))), Make),
        op(1, 5, Some((6, NoEnt)), Lookup)
    ]));
    // A name's inode changes with no operation that could change it.
    assert!(!names_ok(vec![
        op(0, 0, None, Make),
        op(1, 5, Some((6, Found(7))), Lookup),
        op(1, 7, Some((8, Found(8))), Lookup),
    ]));
    // A rename in: another inode, pinned by the first lookup after it.
    assert!(names_ok(vec![
        op(0, 0, Some((1, Made(1))), Make),
        op(0, 2, Some((3, Moved)), MoveIn),
        op(1, 4, Some((5, Found(9))), Lookup),
    ]));
    assert!(!names_ok(vec![
        op(0, 2, Some((3, Moved)), MoveIn),
        op(1, 4, Some((5, Found(9))), Lookup),
        op(1, 6, Some((7, Found(10))), Lookup),
    ]));
    // A source still there after its rename was acknowledged.
    assert!(!names_ok(vec![
        op(0, 0, Some((1, Made(1))), Make),
        op(0, 2, Some((3, Moved)), MoveOut),
        op(1, 4, Some((5, Found(1))), Lookup),
    ]));
    // Contents: a stale read, and a read of what was never written.
    assert!(!data_ok(vec![
        op(0, 0, Some((1, DataOut::Written)), w("a")),
        op(0, 2, Some((3, DataOut::Written)), w("b")),
        op(1, 4, Some((5, r("a"))), DataIn::Read),
    ]));
    assert!(!data_ok(vec![op(1, 4, Some((5, r("z"))), DataIn::Read)]));
    // Two overlapping writes may land in either order; a write of unknown outcome
    // may land late, or never.
    for last in ["a", "b"] {
        assert!(data_ok(vec![
            op(0, 0, Some((10, DataOut::Written)), w("a")),
            op(1, 1, Some((9, DataOut::Written)), w("b")),
            op(2, 11, Some((12, r(last))), DataIn::Read),
        ]));
    }
    for seen in [["", "c"], ["c", "c"], ["", ""]] {
        assert!(data_ok(vec![
            op(0, 0, None, w("c")),
            op(1, 5, Some((6, r(seen[0]))), DataIn::Read),
            op(1, 7, Some((8, r(seen[1]))), DataIn::Read),
        ]));
    }
    assert!(!data_ok(vec![
        op(0, 0, None, w("c")),
        op(1, 5, Some((6, r("c"))), DataIn::Read),
        op(1, 7, Some((8, r(""))), DataIn::Read),
    ]));
    // Many creates of unknown outcome: any one may explain a file appearing, none its
    // disappearing again (and the search stays small: they are interchangeable).
    let mut ops: Vec<Op<NameIn, NameOut>> = (0..40).map(|i| op(i, i as u64, None, Make)).collect();
    ops.push(op(50, 100, Some((101, NoEnt)), Lookup));
    ops.push(op(50, 110, Some((111, Found(5))), Lookup));
    assert!(names_ok(ops.clone()));
    ops.push(op(50, 120, Some((121, NoEnt)), Lookup));
    assert!(!names_ok(ops.clone()));
    ops.insert(10, op(60, 10, None, Remove));
    assert!(names_ok(ops));
    // Among many keys, the broken one is named.
    let mut h = BTreeMap::new();
    for k in 0..20 {
        h.insert(
            format!("k{k}"),
            vec![
                op(0, 0, Some((1, Made(k))), Make),
                op(0, 2, Some((3, Found(k))), Lookup),
            ],
        );
    }
    h.get_mut("k7")
        .unwrap()
        .push(op(1, 4, Some((5, NoEnt)), Lookup));
    match linear::check(&NameModel, &h) {
        Verdict::Violation { key, ops } => assert!(key == "k7" && ops.len() == 3, "{key} {ops:?}"),
        v => panic!("not caught: {v:?}"),
    }
}
