//! `cairn cluster replica add|remove`: a change of a replicated server's members, sent
//! to its group's leader (found by asking the replicas the cluster file lists and
//! following their hints, so a leader the file does not list yet is found too).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{bounded, conn_at, header, runtime};
use crate::config::ClusterConfig;
use crate::error::ClientError;
use crate::proto;
use crate::transport::Reach;

/// A change of a group's members.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaChange {
    /// Replica `id` at `addr` joins: a learner until it holds the leader's log, then a
    /// voter.
    Add {
        /// Its id in the group (unique in the group's history).
        id: u64,
        /// Where it listens.
        addr: SocketAddr,
    },
    /// Replica `id` leaves the group.
    Remove {
        /// Its id in the group.
        id: u64,
    },
}

/// One member of a group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Member {
    /// Its id in the group.
    pub id: u64,
    /// Where it listens.
    pub addr: String,
    /// A voter (else a learner, catching up).
    pub voter: bool,
}

/// A group's members after a change, as its leader tells them.
#[derive(Clone, Debug, Serialize)]
pub struct Members {
    /// The server id (group).
    pub group: u32,
    /// The leader's term.
    pub term: u64,
    /// The leader's replica id.
    pub leader: u64,
    /// Every member.
    pub members: Vec<Member>,
}

/// Makes `change` to server `group`'s replicas and returns its members once the change
/// is committed. The request goes to the group's leader; waiting for an added replica
/// to catch up is bounded by `catch_up`, the whole by `catch_up` plus 30 s. Needs a
/// client certificate that allows uid 0.
pub fn change_replicas(
    cfg: &ClusterConfig,
    group: u32,
    change: ReplicaChange,
    catch_up: Duration,
) -> Result<Members, ClientError> {
    let s = cfg.server(group).ok_or_else(|| ClientError::Refused {
        id: group,
        msg: format!("the cluster file has no server {group}"),
    })?;
    let listed: Vec<SocketAddr> = s.replicas.iter().map(|r| r.addr).collect();
    let rt = runtime()?;
    let reach = Reach::client(cfg, None)?;
    let (kind, id, addr) = match change {
        ReplicaChange::Add { id, addr } => (proto::ReplicaChange::Add, id, addr.to_string()),
        ReplicaChange::Remove { id } => (proto::ReplicaChange::Remove, id, String::new()),
    };
    let req = proto::ChangeReplicasReq {
        h: header(cfg),
        group,
        change: kind as i32,
        id,
        addr,
        timeout_ms: catch_up.as_millis().min(u128::from(u64::MAX)) as u64,
    };
    let call = Duration::from_secs(30) + catch_up;
    let deadline = Instant::now() + call;
    rt.block_on(async {
        let mut at = Leader::new(listed);
        for _ in 0..200 {
            let Some(addr) = at.next(Instant::now() >= deadline) else {
                break;
            };
            let answer = match conn_at(&reach, group, addr, Duration::from_secs(5)) {
                Ok(mut c) => {
                    let mut r = tonic::Request::new(req.clone());
                    r.set_timeout(call);
                    bounded(call, c.change_replicas(r)).await
                }
                Err(e) => Err(tonic::Status::unavailable(e.to_string())),
            };
            match answer {
                Ok(rep) => return Ok(members_of(group, rep.into_inner())),
                Err(st) => at.failed(addr, &st, group)?,
            }
            if at.round_done() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Err(ClientError::Refused {
            id: group,
            msg: format!("no replica of server {group} led it within {call:?}"),
        })
    })
}

/// Which replica to ask next: the one a refusal named, else the next of the list.
struct Leader {
    list: Vec<SocketAddr>,
    named: Option<SocketAddr>,
    i: usize,
    tried: usize,
}

impl Leader {
    fn new(list: Vec<SocketAddr>) -> Leader {
        Leader {
            list,
            named: None,
            i: 0,
            tried: 0,
        }
    }

    fn next(&mut self, late: bool) -> Option<SocketAddr> {
        if late || self.list.is_empty() {
            return None;
        }
        self.tried += 1;
        Some(self.named.take().unwrap_or_else(|| {
            let a = self.list[self.i % self.list.len()];
            self.i += 1;
            a
        }))
    }

    /// Whether every listed replica was asked since the last pause.
    fn round_done(&mut self) -> bool {
        if self.tried >= self.list.len() {
            self.tried = 0;
            return true;
        }
        false
    }

    /// The replica at `addr` refused with `st`: a refusal that is an answer ends the
    /// request; one of a replica that does not lead names the next to ask.
    fn failed(
        &mut self,
        addr: SocketAddr,
        st: &tonic::Status,
        group: u32,
    ) -> Result<(), ClientError> {
        use tonic::Code;
        if let Some(hint) = st.metadata().get(crate::NOT_LEADER) {
            self.named = hint
                .to_str()
                .ok()
                .and_then(|h| h.parse().ok())
                .filter(|a| *a != addr);
            return Ok(());
        }
        let msg = match st.code() {
            Code::Unavailable | Code::Unknown | Code::Cancelled => return Ok(()),
            Code::FailedPrecondition => format!("{addr} reads a different cluster file"),
            _ => st.message().to_string(),
        };
        Err(ClientError::Refused { id: group, msg })
    }
}

fn members_of(group: u32, r: proto::ChangeReplicasReply) -> Members {
    Members {
        group,
        term: r.term,
        leader: r.leader,
        members: r
            .members
            .into_iter()
            .map(|m| Member {
                id: m.id,
                addr: m.addr,
                voter: m.voter,
            })
            .collect(),
    }
}
