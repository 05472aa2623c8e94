//! [`check`]: whether the namespace is consistent across the servers, and the
//! replicas of each replicated server with each other.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

use serde::Serialize;

use super::{bounded, conn_at, header, runtime, why};
use crate::config::ClusterConfig;
use crate::error::ClientError;
use crate::giga::{covers, created_depth, home_of, name_hash, rev_range, server_of};
use crate::proto;
use crate::rows::{PART_ACTIVE, PART_INCOMING};
use crate::transport::{Dialer, Reach};

/// Rows per page of a dump.
const DUMP_PAGE: u32 = 20_000;
/// Age beyond which an unfinished operation is a problem for [`check`].
pub const GRACE: Duration = Duration::from_secs(30);

/// What [`check`] found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ClusterCheck {
    /// Each inconsistency found, in words; empty when the cluster is consistent.
    pub problems: Vec<String>,
    /// Servers that did not answer (their rows were not checked).
    pub down: Vec<u32>,
    /// Partitions checked.
    pub partitions: u64,
    /// Entries checked.
    pub entries: u64,
    /// Inodes checked.
    pub inodes: u64,
    /// Operations across servers in progress (younger than the grace period).
    pub in_flight: u64,
    /// Remarks that are not damage, in words: a replica that did not answer, a
    /// replicated server whose replicas could not be compared (still applying, or fewer
    /// than two gave a digest), one without a leader whose rows were read from another
    /// replica.
    pub notes: Vec<String>,
    /// Replicas of replicated servers that did not answer, as (server id, replica id).
    pub replicas_down: Vec<(u32, u64)>,
    /// Replicated servers whose replicas were compared: digests of their states, all
    /// taken at one applied index.
    pub groups_compared: u32,
}

/// Everything one server holds.
#[derive(Default)]
struct Rows {
    partitions: Vec<proto::DumpPartition>,
    entries: Vec<proto::DumpEntry>,
    inodes: Vec<proto::DumpInode>,
    links: Vec<proto::DumpLink>,
    subdirs: Vec<proto::DumpSubdir>,
    intents: Vec<proto::DumpIntent>,
    prepared: Vec<proto::DumpPrepared>,
    strays: Vec<String>,
}

/// The rows of server `id` from its replica at `addr`, a page at a time (each within
/// `timeout`).
async fn dump_one(
    cfg: &ClusterConfig,
    reach: &Reach,
    (id, addr): (u32, SocketAddr),
    timeout: Duration,
) -> Result<Rows, tonic::Status> {
    let mut c =
        conn_at(reach, id, addr, timeout).map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut rows = Rows::default();
    let mut after = Vec::new();
    loop {
        let mut r = tonic::Request::new(proto::DumpReq {
            h: header(cfg),
            after: after.clone(),
            limit: DUMP_PAGE,
        });
        r.set_timeout(timeout);
        let p = bounded(timeout, c.dump(r)).await?.into_inner();
        rows.partitions.extend(p.partitions);
        rows.entries.extend(p.entries);
        rows.inodes.extend(p.inodes);
        rows.links.extend(p.links);
        rows.subdirs.extend(p.subdirs);
        rows.intents.extend(p.intents);
        rows.prepared.extend(p.prepared);
        rows.strays.extend(p.strays);
        if p.next.is_empty() {
            return Ok(rows);
        }
        after = p.next;
    }
}

fn name(n: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(n))
}

/// Reads every server's rows and checks the namespace: partitions tile each
/// directory's hash space on the servers GIGA+ places them, every entry is in the
/// partition its hash says, every entry's inode exists at its home with a matching
/// link row and every link row has its entry, link counts match, and nothing is left
/// half done (an incoming partition, an intent or a prepared name older than
/// [`GRACE`]). A server that does not answer is listed in `down` and as a problem;
/// checks that need its rows are skipped.
///
/// A replicated server's rows are read from its leader (found by asking each replica
/// its status; without a leader, from the replica that applied the most, with a note).
/// Then its replicas are compared: each that answers gives a digest of one consistent
/// cut of its state; taken at one applied index, they must be equal, else a problem
/// names two replicas that differ. While their applied indexes differ, they are asked
/// again (up to 10 times, 0.1 s apart); then a note says they were not compared. A
/// replica that does not answer is listed in `replicas_down` and noted, not a
/// problem.
///
/// `Err` only when a server reads another cluster file, refuses the caller, or the
/// runtime cannot start.
pub fn check(cfg: &ClusterConfig, timeout: Duration) -> Result<ClusterCheck, ClientError> {
    let rt = runtime()?;
    let reach = Reach::client(cfg, None)?;
    rt.block_on(inspect(cfg, &reach, timeout))
}

/// [`check`] from inside a tokio runtime, reaching the servers through `dialer` (the
/// simulation's network; the cluster config must be insecure, see
/// [`crate::transport`]).
pub async fn check_with(
    cfg: &ClusterConfig,
    timeout: Duration,
    dialer: Dialer,
) -> Result<ClusterCheck, ClientError> {
    let reach = Reach::client(cfg, Some(dialer))?;
    inspect(cfg, &reach, timeout).await
}

/// [`check`]: the servers' rows, their checks, then the replicas compared.
async fn inspect(
    cfg: &ClusterConfig,
    reach: &Reach,
    timeout: Duration,
) -> Result<ClusterCheck, ClientError> {
    let mut notes = Vec::new();
    let sources = super::replicas::sources(cfg, reach, timeout, &mut notes).await;
    let dumps = dump_all(cfg, reach, &sources, timeout).await;
    let mut out = verdict(&sources, dumps)?;
    out.notes = notes;
    super::replicas::compare(cfg, reach, timeout, &mut out).await?;
    Ok(out)
}

/// Every server's rows (server `id` from `sources[id]`), one server after the other.
async fn dump_all(
    cfg: &ClusterConfig,
    reach: &Reach,
    sources: &[SocketAddr],
    timeout: Duration,
) -> Vec<Result<Rows, tonic::Status>> {
    let mut v = Vec::new();
    for (id, addr) in (0..cfg.len()).zip(sources) {
        v.push(dump_one(cfg, reach, (id, *addr), timeout).await);
    }
    v
}

/// The checks of [`check`] on the servers' rows (server `id` read from `sources[id]`).
fn verdict(
    sources: &[SocketAddr],
    dumps: Vec<Result<Rows, tonic::Status>>,
) -> Result<ClusterCheck, ClientError> {
    let n = sources.len() as u32;
    let mut out = ClusterCheck::default();
    let up = answers(sources, dumps, &mut out)?;
    let all_up = out.down.is_empty();
    unfinished(&up, &mut out);
    let quiet = out.in_flight == 0;
    let parts = placement(&up, n, quiet, &mut out);
    if all_up && quiet {
        tiling(&parts, &mut out.problems);
    }
    let seen = index_inodes(&up, &mut out);
    let entries = check_entries(&up, &seen, quiet, &mut out);
    if all_up && quiet {
        let p = &mut out.problems;
        check_link_rows(&seen, &entries, p);
        check_inodes(&seen, &parts, p);
        check_subdirs(&seen, &parts, p);
    }
    Ok(out)
}

/// The servers' rows (`None` for a server that did not answer, listed in `down` and as
/// a problem); `Err` when one reads another cluster file or refuses the caller.
fn answers(
    sources: &[SocketAddr],
    dumps: Vec<Result<Rows, tonic::Status>>,
    out: &mut ClusterCheck,
) -> Result<Vec<Option<Rows>>, ClientError> {
    let mut up: Vec<Option<Rows>> = Vec::new();
    for ((id, d), addr) in dumps.into_iter().enumerate().zip(sources) {
        match d {
            Ok(r) => up.push(Some(r)),
            Err(s) if s.code() == tonic::Code::FailedPrecondition => {
                return Err(ClientError::ClusterMismatch {
                    id: id as u32,
                    addr: *addr,
                });
            }
            Err(s) if s.code() == tonic::Code::PermissionDenied => {
                return Err(ClientError::Protocol {
                    id: id as u32,
                    msg: format!("refused: {}", s.message()),
                });
            }
            Err(s) => {
                out.down.push(id as u32);
                out.problems
                    .push(format!("server {id} did not answer: {}", why(&s)));
                up.push(None);
            }
        }
    }
    Ok(up)
}

/// Unfinished operations: those older than [`GRACE`] are problems, the others are
/// counted in flight; and stray rows.
fn unfinished(up: &[Option<Rows>], out: &mut ClusterCheck) {
    let grace = GRACE.as_millis() as u64;
    let p = &mut out.problems;
    for (s, r) in up.iter().enumerate() {
        let Some(r) = r else { continue };
        for i in &r.intents {
            if i.age_ms > grace {
                p.push(format!(
                    "server {s}: intent {} unfinished after {} ms: {}",
                    i.id, i.age_ms, i.what
                ));
            } else {
                out.in_flight += 1;
            }
        }
        for x in &r.prepared {
            if x.age_ms > grace {
                p.push(format!(
                    "server {s}: prepared part of {:?} unfinished after {} ms: {}",
                    x.owner.as_ref().map(|o| (o.server, o.id)),
                    x.age_ms,
                    x.what
                ));
            } else {
                out.in_flight += 1;
            }
        }
        for st in &r.strays {
            p.push(format!("server {s}: {st}"));
        }
    }
}

/// Each directory's partitions: (index, depth, state, server).
type PartsOf = BTreeMap<u64, Vec<(u32, u32, u32, u32)>>;

/// Partitions: each on the server GIGA+ places it, of a possible depth, and (`quiet`:
/// nothing in flight) none left incoming or marked for removal.
fn placement(up: &[Option<Rows>], n: u32, quiet: bool, out: &mut ClusterCheck) -> PartsOf {
    let p = &mut out.problems;
    let mut parts = PartsOf::new();
    for (s, r) in up.iter().enumerate() {
        let Some(r) = r else { continue };
        for q in &r.partitions {
            out.partitions += 1;
            let want = server_of(home_of(q.dir), q.index, n);
            if want != s as u32 {
                p.push(format!(
                    "partition {:#x}/{} is on server {s}; GIGA+ places it on {want}",
                    q.dir, q.index
                ));
            }
            if q.depth > crate::giga::MAX_DEPTH || created_depth(q.index) > q.depth {
                p.push(format!(
                    "partition {:#x}/{} has depth {}",
                    q.dir, q.index, q.depth
                ));
            }
            if q.state == PART_INCOMING && quiet {
                p.push(format!(
                    "server {s}: partition {:#x}/{} is still incoming",
                    q.dir, q.index
                ));
            }
            if q.removing && quiet {
                p.push(format!(
                    "server {s}: partition {:#x}/{} is still marked for removal",
                    q.dir, q.index
                ));
            }
            parts
                .entry(q.dir)
                .or_default()
                .push((q.index, q.depth, q.state, s as u32));
        }
    }
    parts
}

/// Each directory's active partitions cover its hash space exactly once.
fn tiling(parts: &PartsOf, p: &mut Vec<String>) {
    for (dir, ps) in parts {
        let mut ranges: Vec<(u64, u64, u32)> = ps
            .iter()
            .filter(|x| x.2 == PART_ACTIVE)
            .map(|&(i, d, _, _)| {
                let (lo, hi) = rev_range(i, d);
                (lo, hi, i)
            })
            .collect();
        ranges.sort();
        let mut next = 0u64;
        let mut ok = true;
        for (k, &(lo, hi, _)) in ranges.iter().enumerate() {
            if lo != next || (k > 0 && next == 0) {
                ok = false;
            }
            next = hi.wrapping_add(1);
        }
        if ranges.is_empty() || next != 0 || !ok {
            p.push(format!(
                "directory {dir:#x}: its partitions {:?} do not cover the hash space exactly once",
                ps.iter().map(|x| (x.0, x.1)).collect::<Vec<_>>()
            ));
        }
    }
}

/// Inodes (by number), link rows and subdirectory rows of all servers.
struct Seen<'a> {
    inodes: HashMap<u64, &'a proto::DumpInode>,
    links: HashMap<u64, Vec<(u64, &'a [u8])>>,
    subdirs: HashMap<u64, HashSet<u64>>,
    /// Whether each server answered.
    up: Vec<bool>,
}

/// Gathers inodes, link rows and subdirectory rows; an inode held by a server that is
/// not its home is a problem.
fn index_inodes<'a>(up: &'a [Option<Rows>], out: &mut ClusterCheck) -> Seen<'a> {
    let p = &mut out.problems;
    let mut inodes: HashMap<u64, &proto::DumpInode> = HashMap::new();
    let mut links: HashMap<u64, Vec<(u64, &[u8])>> = HashMap::new();
    let mut subdirs: HashMap<u64, HashSet<u64>> = HashMap::new();
    for (s, r) in up.iter().enumerate() {
        let Some(r) = r else { continue };
        for i in &r.inodes {
            let ino = i.attr.as_ref().map_or(0, |a| a.ino);
            if home_of(ino) != s as u32 {
                p.push(format!(
                    "server {s} holds inode {ino:#x} whose home is {}",
                    home_of(ino)
                ));
            }
            inodes.insert(ino, i);
        }
        for l in &r.links {
            links.entry(l.ino).or_default().push((l.dir, &l.name));
        }
        for k in &r.subdirs {
            subdirs.entry(k.dir).or_default().insert(k.child);
        }
    }
    out.inodes = inodes.len() as u64;

    Seen {
        inodes,
        links,
        subdirs,
        up: up.iter().map(Option::is_some).collect(),
    }
}

/// Entries: each in the partition its hash says, held once, and (`quiet`, its home
/// answering) its inode there, of its type, with its link row. Returns the entries
/// seen.
fn check_entries<'a>(
    up: &'a [Option<Rows>],
    seen: &Seen<'_>,
    quiet: bool,
    out: &mut ClusterCheck,
) -> HashSet<(u64, &'a [u8])> {
    let is_up = |s: u32| seen.up.get(s as usize).copied().unwrap_or(false);
    let (inodes, links) = (&seen.inodes, &seen.links);
    let p = &mut out.problems;
    let mut entries: HashSet<(u64, &[u8])> = HashSet::new();
    for (s, r) in up.iter().enumerate() {
        let Some(r) = r else { continue };
        let mine: HashMap<(u64, u32), (u32, u32)> = r
            .partitions
            .iter()
            .map(|q| ((q.dir, q.index), (q.depth, q.state)))
            .collect();
        for e in &r.entries {
            out.entries += 1;
            let h = name_hash(&e.name);
            let owner = mine
                .iter()
                .find(|((d, i), (depth, _))| *d == e.dir && covers(*i, *depth, h));
            match owner {
                None => p.push(format!(
                    "server {s}: entry {:#x}/{} is in no partition of this server",
                    e.dir,
                    name(&e.name)
                )),
                Some((_, (_, st))) if *st != PART_ACTIVE => {
                    if quiet {
                        p.push(format!(
                            "server {s}: entry {:#x}/{} is in an incoming partition",
                            e.dir,
                            name(&e.name)
                        ));
                    }
                    continue;
                }
                Some(_) => {}
            }
            if !entries.insert((e.dir, &e.name)) {
                p.push(format!(
                    "entry {:#x}/{} is held twice",
                    e.dir,
                    name(&e.name)
                ));
            }
            if !is_up(home_of(e.ino)) || !quiet {
                continue;
            }
            match inodes.get(&e.ino) {
                None => p.push(format!(
                    "entry {:#x}/{} names inode {:#x}, which does not exist",
                    e.dir,
                    name(&e.name),
                    e.ino
                )),
                Some(i) => {
                    let kind = i.attr.as_ref().map_or(0, |a| a.mode & libc::S_IFMT);
                    if kind != e.kind {
                        p.push(format!(
                            "entry {:#x}/{} says type {:o}, inode {:#x} is {:o}",
                            e.dir,
                            name(&e.name),
                            e.kind,
                            e.ino,
                            kind
                        ));
                    }
                }
            }
            if !links.get(&e.ino).is_some_and(|v| {
                v.iter()
                    .any(|(d, n)| *d == e.dir && *n == e.name.as_slice())
            }) {
                p.push(format!(
                    "entry {:#x}/{} has no link row at inode {:#x}'s home",
                    e.dir,
                    name(&e.name),
                    e.ino
                ));
            }
        }
    }
    entries
}

/// Every link row has its entry.
fn check_link_rows(seen: &Seen<'_>, entries: &HashSet<(u64, &[u8])>, p: &mut Vec<String>) {
    for (ino, ls) in &seen.links {
        for (d, n) in ls {
            if !entries.contains(&(*d, *n)) {
                p.push(format!(
                    "inode {ino:#x} has a link row {d:#x}/{} with no entry",
                    name(n)
                ));
            }
        }
    }
}

/// Link counts: a directory's is 2 + its subdirectories, with one link row from its
/// parent, counted there, and a partition 0; a file's is its link rows, and a file
/// with none is open.
fn check_inodes(seen: &Seen<'_>, parts: &PartsOf, p: &mut Vec<String>) {
    let (inodes, links, subdirs) = (&seen.inodes, &seen.links, &seen.subdirs);
    for (ino, i) in inodes {
        let Some(a) = i.attr.as_ref() else { continue };
        let ls = links.get(ino).map_or(0, |v| v.len()) as u32;
        if a.mode & libc::S_IFMT == libc::S_IFDIR {
            let subs = subdirs.get(ino).map_or(0, |s| s.len()) as u32;
            if a.nlink != 2 + subs {
                p.push(format!(
                    "directory {ino:#x}: link count {} but {} subdirectories",
                    a.nlink, subs
                ));
            }
            if *ino == cairn_fs::ROOT {
                continue;
            }
            if ls != 1 {
                p.push(format!("directory {ino:#x} has {ls} link rows"));
            }
            if let Some((d, _)) = links.get(ino).and_then(|v| v.first()) {
                if *d != i.parent {
                    p.push(format!(
                        "directory {ino:#x}: parent {:#x} but its entry is in {d:#x}",
                        i.parent
                    ));
                }
                if !subdirs.get(d).is_some_and(|s| s.contains(ino)) {
                    p.push(format!(
                        "directory {ino:#x} is not counted as a subdirectory of {d:#x}"
                    ));
                }
            }
            if !parts.get(ino).is_some_and(|v| v.iter().any(|x| x.0 == 0)) {
                p.push(format!("directory {ino:#x} has no partition 0"));
            }
        } else if a.nlink != ls {
            p.push(format!(
                "inode {ino:#x}: link count {} but {ls} link rows",
                a.nlink
            ));
        } else if ls == 0 && !i.orphan {
            p.push(format!("inode {ino:#x} has no links and is not open"));
        }
    }
}

/// Every subdirectory row names a subdirectory of its directory, and every directory
/// with partitions is a directory.
fn check_subdirs(seen: &Seen<'_>, parts: &PartsOf, p: &mut Vec<String>) {
    let (inodes, subdirs) = (&seen.inodes, &seen.subdirs);
    for (dir, subs) in subdirs {
        for c in subs {
            let ok = inodes.get(c).is_some_and(|i| i.parent == *dir);
            if !ok {
                p.push(format!(
                    "subdirectory row {dir:#x} -> {c:#x} names no such subdirectory"
                ));
            }
        }
    }
    for dir in parts.keys() {
        if !inodes.get(dir).is_some_and(|i| {
            i.attr
                .as_ref()
                .is_some_and(|a| a.mode & libc::S_IFMT == libc::S_IFDIR)
        }) {
            p.push(format!("partitions of {dir:#x}, which is not a directory"));
        }
    }
}
