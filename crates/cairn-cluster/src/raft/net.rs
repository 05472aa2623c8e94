//! Raft messages between the replicas of a group: service `Raft` of
//! `proto/cluster.proto`, each message openraft's request or reply in bincode. The
//! server side answers only a server certificate of its own group, and a message
//! of another cluster or group, or one that does not decode, is refused (and counted)
//! before openraft sees it.

use std::net::SocketAddr;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, RaftLogId};
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::{decode, encode, encoded_len, LogId, NodeId, Raft, TypeConfig};
use crate::proto;
use crate::proto::raft_client::RaftClient;
use crate::tls::Caller;
use crate::transport::{Reach, MAX_MESSAGE};

type RpcErr<E = openraft::error::Infallible> = RPCError<NodeId, BasicNode, RaftError<NodeId, E>>;

/// Makes the connection to each replica of the group.
pub(crate) struct Factory {
    pub reach: Reach,
    pub group: u32,
    pub cluster_id: u64,
    pub connect_timeout: Duration,
}

impl RaftNetworkFactory<TypeConfig> for Factory {
    type Network = Conn;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Conn {
        let client = node
            .addr
            .parse::<SocketAddr>()
            .map_err(|e| format!("replica {target}: address {:?}: {e}", node.addr))
            .and_then(|addr| {
                self.reach
                    .channel_to(self.group, addr, self.connect_timeout)
                    .map_err(|e| e.to_string())
            })
            .map(|ch| {
                RaftClient::new(ch)
                    .max_decoding_message_size(MAX_MESSAGE)
                    .max_encoding_message_size(MAX_MESSAGE)
            });
        Conn {
            target,
            group: self.group,
            cluster_id: self.cluster_id,
            client,
        }
    }
}

/// The connection to one replica.
pub(crate) struct Conn {
    target: NodeId,
    group: u32,
    cluster_id: u64,
    client: Result<RaftClient<Channel>, String>,
}

/// Which call of service `Raft`.
#[derive(Clone, Copy)]
enum Call {
    Append,
    Vote,
    Snapshot,
}

impl Conn {
    /// Sends `req` as call `which` and decodes the reply as `Result<Rep, RaftError<E>>`.
    async fn call<Req, Rep, E>(
        &mut self,
        which: Call,
        req: &Req,
        ttl: Duration,
    ) -> Result<Rep, RpcErr<E>>
    where
        Req: serde::Serialize,
        Rep: serde::de::DeserializeOwned,
        E: std::error::Error + serde::de::DeserializeOwned,
    {
        let client = match &self.client {
            Ok(c) => c.clone(),
            Err(e) => {
                return Err(RPCError::Unreachable(Unreachable::new(
                    &std::io::Error::other(e.clone()),
                )))
            }
        };
        let body = encode(req)
            .map_err(|e| RPCError::Network(NetworkError::new(&std::io::Error::other(e))))?;
        let mut r = Request::new(proto::RaftMsg {
            cluster_id: self.cluster_id,
            group: self.group,
            body,
        });
        // A backstop: openraft drops the call at its own deadline first.
        r.set_timeout(ttl * 2);
        let mut c = client;
        let rep = match which {
            Call::Append => c.append(r).await,
            Call::Vote => c.vote(r).await,
            Call::Snapshot => c.snapshot(r).await,
        };
        let rep = rep.map_err(|s| {
            let e = std::io::Error::other(format!("replica {}: {}", self.target, s.message()));
            // Unreachable (connection refused, host down) makes openraft back off;
            // anything else is retried at the next heartbeat.
            match s.code() {
                tonic::Code::Unavailable => RPCError::Unreachable(Unreachable::new(&e)),
                _ => RPCError::Network(NetworkError::new(&e)),
            }
        })?;
        let res: Result<Rep, RaftError<NodeId, E>> = decode(&rep.into_inner().body)
            .map_err(|e| RPCError::Network(NetworkError::new(&std::io::Error::other(e))))?;
        res.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Conn {
    /// After an unreachable replica: tried again every 100 ms (openraft's default
    /// waits 500 ms, longer than a short election timeout: a replica back from a
    /// restart would stand for election before it heard from the leader).
    fn backoff(&self) -> openraft::network::Backoff {
        openraft::network::Backoff::new(std::iter::repeat(Duration::from_millis(100)))
    }

    /// Sends as many of the entries as fit in [`APPEND_BYTES`] (at least one); when
    /// some were left out, a success is reported as a partial one up to the last sent,
    /// and openraft sends the rest next.
    async fn append_entries(
        &mut self,
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcErr> {
        let cut = fit(&mut rpc.entries, APPEND_BYTES);
        let rep = self.call(Call::Append, &rpc, option.hard_ttl()).await?;
        Ok(match (rep, cut) {
            (AppendEntriesResponse::Success, Some(last)) => {
                AppendEntriesResponse::PartialSuccess(Some(last))
            }
            (rep, _) => rep,
        })
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RpcErr<InstallSnapshotError>> {
        metrics::counter!("cairn_raft_snapshot_chunks_sent_total").increment(1);
        self.call(Call::Snapshot, &rpc, option.hard_ttl()).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RpcErr> {
        self.call(Call::Vote, &rpc, option.hard_ttl()).await
    }
}

/// Encoded bytes of entries above which an append message takes no more: a quarter of
/// a message's limit, so that the message with its envelope always fits.
const APPEND_BYTES: usize = MAX_MESSAGE / 4;

/// Keeps the longest prefix of `entries` (at least one) whose encoded size is within
/// `budget`; returns the log id of the last kept if any were dropped.
fn fit(entries: &mut Vec<openraft::Entry<TypeConfig>>, budget: usize) -> Option<LogId> {
    let mut bytes = 0usize;
    let keep = entries
        .iter()
        .position(|e| {
            bytes = bytes.saturating_add(encoded_len(e));
            bytes > budget
        })
        .map(|i| i.max(1))?;
    if keep >= entries.len() {
        return None;
    }
    entries.truncate(keep);
    entries.last().map(|e| *e.get_log_id())
}

/// The server side of service `Raft` on one replica.
pub(crate) struct RaftSvc {
    pub raft: Raft,
    pub group: u32,
    pub cluster_id: u64,
}

/// Refused messages (malformed, of another cluster or group), for status and metrics.
pub(crate) static REFUSED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn refuse(why: &str) -> Status {
    REFUSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    metrics::counter!("cairn_raft_refused_total").increment(1);
    tracing::warn!("raft message refused: {why}");
    Status::invalid_argument(why.to_string())
}

impl RaftSvc {
    /// A replica whose log is empty (nothing from a leader yet: a new group's, or one
    /// whose store was lost and that restarted empty) votes only for a candidate
    /// forming a new group (a log of at most the first membership). Were it to vote
    /// for a candidate with a longer log, the entries it had acknowledged before its
    /// store was lost — possibly counted for a majority — and the vote it had cast in
    /// that term would count for nothing: a candidate lacking committed entries, or a
    /// second leader of one term, could be elected. It votes normally once a leader
    /// has sent it the log or a snapshot. The refusal (not granted, with its own vote)
    /// is what a candidate gets from a replica whose log is longer than its own.
    fn refuse_while_empty(&self, r: &VoteRequest<NodeId>) -> Option<VoteResponse<NodeId>> {
        let m = self.raft.metrics().borrow().clone();
        let empty = m.last_log_index.unwrap_or(0) == 0
            && m.last_applied.is_none_or(|l| l.index == 0)
            && m.snapshot.is_none();
        let forming = r.last_log_id.is_none_or(|l| l.index == 0);
        if !empty || forming || m.vote == r.vote {
            return None;
        }
        metrics::counter!("cairn_raft_votes_refused_while_empty_total").increment(1);
        tracing::info!(
            group = self.group,
            "vote for {} refused: this replica has no log yet (a leader must send it first)",
            r.vote
        );
        Some(VoteResponse::new(m.vote, None, false))
    }

    /// Checks who sent `req` and that it is for this group, and decodes its body.
    fn open<T: serde::de::DeserializeOwned>(
        &self,
        req: Request<proto::RaftMsg>,
    ) -> Result<T, Status> {
        match req.extensions().get::<Caller>() {
            Some(Caller::Trusted) => {}
            Some(Caller::Server(g)) if *g == self.group => {}
            _ => {
                return Err(Status::permission_denied(
                    "raft messages are for the replicas of this group only",
                ))
            }
        }
        let m = req.into_inner();
        if m.cluster_id != self.cluster_id {
            return Err(refuse("a raft message of another cluster"));
        }
        if m.group != self.group {
            return Err(refuse("a raft message for another group"));
        }
        decode(&m.body).map_err(|e| refuse(&format!("a raft message that does not decode: {e}")))
    }
}

fn reply<T: serde::Serialize>(v: &T) -> Result<Response<proto::RaftMsg>, Status> {
    let body = encode(v).map_err(Status::internal)?;
    Ok(Response::new(proto::RaftMsg {
        cluster_id: 0,
        group: 0,
        body,
    }))
}

#[tonic::async_trait]
impl proto::raft_server::Raft for RaftSvc {
    async fn append(
        &self,
        req: Request<proto::RaftMsg>,
    ) -> Result<Response<proto::RaftMsg>, Status> {
        let r: AppendEntriesRequest<TypeConfig> = self.open(req)?;
        reply(&self.raft.append_entries(r).await)
    }

    async fn vote(&self, req: Request<proto::RaftMsg>) -> Result<Response<proto::RaftMsg>, Status> {
        let r: VoteRequest<NodeId> = self.open(req)?;
        if let Some(refused) = self.refuse_while_empty(&r) {
            return reply(&Ok::<_, RaftError<NodeId>>(refused));
        }
        reply(&self.raft.vote(r).await)
    }

    async fn snapshot(
        &self,
        req: Request<proto::RaftMsg>,
    ) -> Result<Response<proto::RaftMsg>, Status> {
        let r: InstallSnapshotRequest<TypeConfig> = self.open(req)?;
        reply(&self.raft.install_snapshot(r).await)
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};

    use super::{encoded_len, fit};
    use crate::raft::Change;

    fn entries(sizes: &[usize]) -> Vec<Entry<super::TypeConfig>> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| Entry {
                log_id: LogId::new(CommittedLeaderId::new(1, 0), i as u64 + 1),
                payload: EntryPayload::Normal(Change {
                    term: 1,
                    seq: i as u64,
                    rows: vec![(b"k".to_vec(), Some(vec![0; n]))],
                }),
            })
            .collect()
    }

    #[test]
    fn an_append_keeps_what_fits_and_at_least_one_entry() {
        let one = encoded_len(&entries(&[1000])[0]);
        let mut e = entries(&[1000, 1000, 1000, 1000]);
        assert_eq!(fit(&mut e, 10 * one), None);
        assert_eq!(e.len(), 4);
        let last = fit(&mut e, 2 * one + one / 2).unwrap();
        assert_eq!((e.len(), last.index), (2, 2));
        let mut big = entries(&[5000, 10]);
        assert_eq!(fit(&mut big, one).map(|l| l.index), Some(1));
        assert_eq!(big.len(), 1);
        let mut lone = entries(&[5000]);
        assert_eq!(fit(&mut lone, one), None);
    }
}
