//! Changes of a group's members, online, through openraft's joint consensus: a new
//! replica joins as a learner, is brought up to the leader's log (a snapshot if the
//! log it needs is purged), and only then becomes a voter, so the group's majority
//! never counts a replica that cannot vote yet; a replica leaves in one change. The
//! leader answers `ChangeReplicas` with these. DESIGN.md, "Replication".

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use openraft::{BasicNode, ChangeMembers};

use super::{NodeId, Raft};
use crate::proto;

/// Most replicas a group may have (as the cluster file allows).
pub(crate) const MAX_REPLICAS: usize = 7;

/// Why a change of members was not made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MemberError {
    /// The request cannot be carried out as asked (nothing was changed).
    #[error("{0}")]
    Invalid(String),
    /// The new replica did not catch up in time: it stays a learner (it keeps
    /// receiving the log; the same request again makes it a voter once it has caught
    /// up).
    #[error("replica {id} at {addr} did not catch up within {secs} s; it stays a learner (not a voter) and keeps receiving the log: start it if it is not running, then ask again")]
    Slow { id: NodeId, addr: String, secs: u64 },
    /// Raft refused or failed the change (lost leadership, another change in flight).
    #[error("raft: {0}")]
    Raft(String),
}

/// A group's members as the leader knows them: (id, address, voter).
pub(crate) fn members(raft: &Raft) -> Vec<proto::ReplicaMember> {
    let m = raft.metrics().borrow().clone();
    let config = m.membership_config.membership();
    let voters: BTreeSet<NodeId> = config.voter_ids().collect();
    config
        .nodes()
        .map(|(id, n)| proto::ReplicaMember {
            id: *id,
            addr: n.addr.clone(),
            voter: voters.contains(id),
        })
        .collect()
}

/// Adds replica `id` at `addr`: a learner first, caught up within `wait`, then a voter.
/// Adding a voter already there at that address changes nothing.
pub(crate) async fn add(
    raft: &Raft,
    id: NodeId,
    addr: &str,
    wait: Duration,
) -> Result<(), MemberError> {
    let parsed: SocketAddr = addr
        .parse()
        .map_err(|e| MemberError::Invalid(format!("address {addr:?}: {e}")))?;
    let now = members(raft);
    if let Some(m) = now.iter().find(|m| m.id == id) {
        if m.addr != parsed.to_string() {
            return Err(MemberError::Invalid(format!(
                "replica id {id} is already a member, at {}: give the new replica an id of its own",
                m.addr
            )));
        }
        if m.voter {
            return Ok(());
        }
    } else if let Some(m) = now.iter().find(|m| m.addr == parsed.to_string()) {
        return Err(MemberError::Invalid(format!(
            "{addr} is already replica {} of the group",
            m.id
        )));
    } else if now.len() >= MAX_REPLICAS {
        return Err(MemberError::Invalid(format!(
            "the group has {} replicas already (at most {MAX_REPLICAS})",
            now.len()
        )));
    }
    let deadline = tokio::time::Instant::now() + wait;
    let slow = || MemberError::Slow {
        id,
        addr: parsed.to_string(),
        secs: wait.as_secs(),
    };
    let node = BasicNode::new(parsed.to_string());
    // Not openraft's own wait for the learner (`blocking`): it counts a learner that
    // was sent nothing as caught up while the log is shorter than its lag threshold
    // (5,000 entries), which made a replica that never started a voter.
    let since = match tokio::time::timeout_at(deadline, raft.add_learner(id, node, false)).await {
        Ok(Ok(r)) => r.log_id,
        Ok(Err(e)) => return Err(MemberError::Raft(e.to_string())),
        Err(_) => return Err(slow()),
    };
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let waited = raft
        .wait(Some(left))
        .metrics(
            |m| caught_up(m, id, since.index),
            "the new replica caught up",
        )
        .await;
    if waited.is_err() {
        return Err(slow());
    }
    let voter = ChangeMembers::AddVoterIds(BTreeSet::from([id]));
    raft.change_membership(voter, false)
        .await
        .map(|_| ())
        .map_err(|e| MemberError::Raft(e.to_string()))
}

/// Entries a learner may still lag the leader's log by when it is made a voter.
const CAUGHT_UP_LAG: u64 = 1_000;

/// Whether learner `id` holds the group's log up to the change that took it in (`since`,
/// by snapshot or entries) and is within [`CAUGHT_UP_LAG`] of the leader's last entry;
/// also true once this replica no longer leads (the change that follows then fails
/// with why).
fn caught_up(m: &openraft::RaftMetrics<NodeId, BasicNode>, id: NodeId, since: u64) -> bool {
    let Some(repl) = &m.replication else {
        return true;
    };
    match repl.get(&id) {
        Some(Some(matched)) => {
            let last = m.last_log_index.unwrap_or_default();
            matched.index >= since && last.saturating_sub(matched.index) <= CAUGHT_UP_LAG
        }
        _ => false,
    }
}

/// Removes replica `id` (voter or learner) from the group. Refused if it would leave
/// the group without a voter; removing a replica not in the group changes nothing.
pub(crate) async fn remove(raft: &Raft, id: NodeId) -> Result<(), MemberError> {
    let now = members(raft);
    let Some(m) = now.iter().find(|m| m.id == id) else {
        return Ok(());
    };
    if m.voter && now.iter().filter(|m| m.voter).count() == 1 {
        return Err(MemberError::Invalid(format!(
            "replica {id} is the group's only voter: add another first"
        )));
    }
    let change = if m.voter {
        ChangeMembers::RemoveVoters(BTreeSet::from([id]))
    } else {
        ChangeMembers::RemoveNodes(BTreeSet::from([id]))
    };
    raft.change_membership(change, false)
        .await
        .map(|_| ())
        .map_err(|e| MemberError::Raft(e.to_string()))
}
