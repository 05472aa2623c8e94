//! The replicas of replicated servers for [`check`](super::check): which replica each
//! server's rows are read from (its leader), and the replicas of each server compared
//! by digests of their states.

use std::net::SocketAddr;
use std::time::Duration;

use super::{ask, why, Answer, ClusterCheck};
use crate::config::{ClusterConfig, ServerInfo};
use crate::error::ClientError;
use crate::transport::Reach;

/// Times the replicas of a server are asked for digests while their applied indexes
/// differ.
const ROUNDS: usize = 10;
/// Pause between two rounds.
const PAUSE: Duration = Duration::from_millis(100);

fn replicated(s: &ServerInfo) -> bool {
    s.replicas.len() > 1
}

/// Where to read each server's rows: for a replicated one, its leader (found by asking
/// every replica its status), or without a leader the replica that applied the most
/// (with a note in `notes`); else, and when no replica answers, its address in the
/// cluster file.
pub(super) async fn sources(
    cfg: &ClusterConfig,
    reach: &Reach,
    timeout: Duration,
    notes: &mut Vec<String>,
) -> Vec<SocketAddr> {
    let answers = if cfg.replicated() {
        ask(cfg, reach, timeout, false, replicated).await
    } else {
        Vec::new()
    };
    let mut out = Vec::new();
    for (i, s) in cfg.servers().iter().enumerate() {
        let group = answers.get(i).map(Vec::as_slice).unwrap_or_default();
        out.push(source(s, group, notes));
    }
    out
}

/// The replica of `s` to read rows from, by the replicas' answers.
fn source(s: &ServerInfo, answers: &[Answer], notes: &mut Vec<String>) -> SocketAddr {
    let up: Vec<(SocketAddr, &crate::proto::ReplicaStatus)> = s
        .replicas
        .iter()
        .zip(answers)
        .filter_map(|(r, a)| Some((r.addr, a.as_ref().ok()?.replica.as_ref()?)))
        .collect();
    let leader = up
        .iter()
        .filter(|(_, x)| x.role == "leader")
        .max_by_key(|(_, x)| x.term);
    if let Some((addr, _)) = leader {
        return *addr;
    }
    match up.iter().max_by_key(|(_, x)| x.applied) {
        Some((addr, x)) => {
            notes.push(format!(
                "group {}: no leader; its rows were read from replica {} ({addr}), which may lag",
                s.id, x.replica
            ));
            *addr
        }
        None => s.addr,
    }
}

/// What the digests of one server's replicas say.
enum Outcome {
    /// Taken at one index: the problems found (replicas whose digest differs from the
    /// first's).
    Compared(Vec<String>),
    /// Fewer than two replicas gave a digest: a note.
    Skipped(String),
    /// Taken at different indexes: (replica id, index) of each.
    Applying(Vec<(u64, u64)>),
}

/// Compares the replicas of each replicated server (see [`check`](super::check)):
/// problems, notes, `replicas_down` and `groups_compared` of `out`. `Err` when a
/// replica reads another cluster file.
pub(super) async fn compare(
    cfg: &ClusterConfig,
    reach: &Reach,
    timeout: Duration,
    out: &mut ClusterCheck,
) -> Result<(), ClientError> {
    let mut pending: Vec<u32> = cfg
        .servers()
        .iter()
        .filter(|s| replicated(s))
        .map(|s| s.id)
        .collect();
    for round in 1..=ROUNDS {
        if pending.is_empty() {
            break;
        }
        if round > 1 {
            tokio::time::sleep(PAUSE).await;
        }
        let answers = ask(cfg, reach, timeout, true, |s| pending.contains(&s.id)).await;
        let mut again = Vec::new();
        for (s, group) in cfg.servers().iter().zip(&answers) {
            if !pending.contains(&s.id) {
                continue;
            }
            let outcome = judge(s, group)?;
            if matches!(outcome, Outcome::Applying(_)) && round < ROUNDS {
                again.push(s.id);
                continue;
            }
            missing(s, group, out);
            match outcome {
                Outcome::Compared(p) => {
                    out.groups_compared += 1;
                    out.problems.extend(p);
                }
                Outcome::Skipped(note) => out.notes.push(note),
                Outcome::Applying(at) => {
                    let at: Vec<String> = at
                        .iter()
                        .map(|(r, i)| format!("{i} (replica {r})"))
                        .collect();
                    out.notes.push(format!(
                        "group {}: replicas not compared (still applying: indexes {})",
                        s.id,
                        at.join(", ")
                    ));
                }
            }
        }
        pending = again;
    }
    Ok(())
}

/// The digests of server `s`'s replicas. `Err` when one reads another cluster file.
fn judge(s: &ServerInfo, answers: &[Answer]) -> Result<Outcome, ClientError> {
    // (replica id, applied index, rows, digest)
    let mut got: Vec<(u64, u64, u64, u64)> = Vec::new();
    for (r, a) in s.replicas.iter().zip(answers) {
        match a {
            Ok(reply) => {
                if let Some(x) = reply.replica.as_ref().filter(|x| x.digested) {
                    got.push((r.id, x.digest_applied, x.digest_rows, x.digest));
                }
            }
            Err(e) if e.code() == tonic::Code::FailedPrecondition => {
                return Err(ClientError::ClusterMismatch {
                    id: s.id,
                    addr: r.addr,
                });
            }
            Err(_) => {}
        }
    }
    let Some(&(first, at, rows, digest)) = got.first() else {
        return Ok(Outcome::Skipped(format!(
            "group {}: replicas not compared (none gave a digest)",
            s.id
        )));
    };
    if got.len() < 2 {
        return Ok(Outcome::Skipped(format!(
            "group {}: replicas not compared (only replica {first} of {} gave a digest)",
            s.id,
            s.replicas.len()
        )));
    }
    if got.iter().any(|x| x.1 != at) {
        return Ok(Outcome::Applying(got.iter().map(|x| (x.0, x.1)).collect()));
    }
    Ok(Outcome::Compared(
        got.iter()
            .filter(|x| (x.2, x.3) != (rows, digest))
            .map(|x| {
                format!(
                    "group {}: replicas {first} and {} differ at index {at}",
                    s.id, x.0
                )
            })
            .collect(),
    ))
}

/// Replicas of `s` that did not answer (listed in `replicas_down` and noted) or gave
/// no digest (noted).
fn missing(s: &ServerInfo, answers: &[Answer], out: &mut ClusterCheck) {
    for (r, a) in s.replicas.iter().zip(answers) {
        match a {
            Err(e) => {
                out.replicas_down.push((s.id, r.id));
                out.notes.push(format!(
                    "group {}: replica {} ({}) did not answer: {}",
                    s.id,
                    r.id,
                    r.addr,
                    why(e)
                ));
            }
            Ok(reply) if !reply.replica.as_ref().is_some_and(|x| x.digested) => {
                out.notes.push(format!(
                    "group {}: replica {} ({}) gave no digest",
                    s.id, r.id, r.addr
                ));
            }
            Ok(_) => {}
        }
    }
}
