//! Operator views of a cluster: [`status`] (what each server holds, and for a
//! replicated server each replica's place in its group), [`ClusterStatus::health`], and
//! [`check`] (whether the namespace is consistent across the servers, and the replicas
//! of each group with each other).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Serialize;

use crate::config::{ClusterConfig, ServerInfo};
use crate::error::ClientError;
use crate::proto;
use crate::proto::meta_client::MetaClient;
use crate::transport::Reach;

mod check;
mod members;
mod replicas;

pub use check::{check, check_with, ClusterCheck, GRACE};
pub use members::{change_replicas, Member, Members, ReplicaChange};

/// One server as seen by [`status`]. For a replicated server (a group of replicas) the
/// fields but `replicas` come from the answer of its leader: `up` says whether a leader
/// answered, and `addr` is the leader's address when one did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ServerState {
    /// Its id.
    pub id: u32,
    /// Its address.
    pub addr: String,
    /// Whether it answered.
    pub up: bool,
    /// Why not, if it did not.
    pub error: Option<String>,
    /// Directory partitions it holds.
    pub partitions: u64,
    /// Directory entries in them.
    pub entries: u64,
    /// Inodes whose home it is.
    pub inodes: u64,
    /// Splits it finished since it started.
    pub splits_done: u64,
    /// Splits it is doing now (or that wait for a peer).
    pub splits_in_flight: u32,
    /// Redirects it sent since it started.
    pub redirects: u64,
    /// Operations across servers it coordinates that are not finished (splits
    /// included).
    pub intents_pending: u32,
    /// Names it holds for other servers' unfinished renames.
    pub prepared_pending: u32,
    /// Partitions it received from a split that are not active yet.
    pub incoming_partitions: u32,
    /// It answered with only what it keeps in memory, the certificate not allowing uid
    /// 0: `inodes` and `prepared_pending` are unknown (0 here) and its largest
    /// directories are left out of [`ClusterStatus::largest`].
    pub partial: bool,
    /// The replicas of a replicated server, in the cluster file's order; empty for a
    /// server of one replica (left out of JSON then).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<ReplicaState>,
}

/// One replica of a replicated server as seen by [`status`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReplicaState {
    /// Its id within its group (its Raft node id).
    pub id: u64,
    /// Its address.
    pub addr: String,
    /// Whether it answered.
    pub up: bool,
    /// Why not, if it did not.
    pub error: Option<String>,
    /// Its role in the group: `leader`, `recovering` (elected, rebuilding its state),
    /// `follower`, `candidate`, `learner` or `stopping`; empty when it did not answer.
    pub role: String,
    /// The Raft term it is in.
    pub term: u64,
    /// The replica it believes leads the group (its id), if it knows one.
    pub leader: Option<u64>,
    /// Index of the last log entry applied to its state.
    pub applied: u64,
    /// Entries it is behind its leader: the leader's applied index minus this
    /// replica's (or, when it did not answer, minus the last index the leader knows it
    /// holds); `None` when no leader answered or the leader knows nothing of it.
    pub lag: Option<u64>,
    /// Snapshots of its state it built since it started.
    pub snapshots_built: u64,
    /// Snapshots from a leader it installed since it started.
    pub snapshots_installed: u64,
}

/// A directory with many partitions.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LargeDir {
    /// Its inode number.
    pub dir: u64,
    /// Its partitions (over all servers that answered).
    pub partitions: u32,
    /// Its entries (over all servers that answered).
    pub entries: u64,
}

/// What [`status`] returns.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ClusterStatus {
    /// Every server of the cluster file, by id.
    pub servers: Vec<ServerState>,
    /// The largest directories by entries, with their partition counts (from the
    /// servers that answered in full).
    pub largest: Vec<LargeDir>,
}

/// Whether a cluster (or one server) serves, from [`status`]: see
/// [`ClusterStatus::health`]. Ordered from best to worst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// Every replica of every server answered, every replicated server has a leader,
    /// every replica is a voter that holds its group's log, and none lags more than
    /// [`LAGGING`] entries behind its leader.
    Healthy,
    /// Every server serves (each replicated one has a leader and a majority of its
    /// replicas up), but some replica is down, lags more than [`LAGGING`] entries, or
    /// answers as a learner: one that has not yet received its group's log (it started
    /// after the group formed, or lost its store) or is being added. A learner's vote
    /// does not count, so the group may not survive losing another replica.
    Degraded,
    /// Some server cannot serve: a server of one replica that did not answer, or a
    /// replicated server without a leader or without a majority of its replicas up.
    Down,
}

/// Entries behind its leader beyond which a replica makes its server
/// [`Health::Degraded`].
pub const LAGGING: u64 = 1000;

impl ReplicaState {
    /// Whether this replica, though it may have answered, weakens its group: it lags
    /// more than [`LAGGING`] entries behind its leader, or answered as a learner (an
    /// empty replica votes for no candidate whose log is longer than a new group's, so
    /// until a leader has sent it the log it cannot help elect one).
    pub fn weak(&self) -> bool {
        self.lag.unwrap_or(0) > LAGGING || (self.up && self.role == "learner")
    }
}

impl ServerState {
    /// The replica that answered as its group's leader (of the latest term, should two
    /// believe they lead); `None` for a server of one replica.
    pub fn leader(&self) -> Option<&ReplicaState> {
        self.replicas
            .iter()
            .filter(|r| r.up && r.role == "leader")
            .max_by_key(|r| r.term)
    }

    /// This server's [`Health`]: for a server of one replica, [`Health::Healthy`] if it
    /// answered, else [`Health::Down`]; for a replicated one, [`Health::Down`] without
    /// a leader or a majority of its replicas up, [`Health::Degraded`] with a replica
    /// down, lagging more than [`LAGGING`] entries or a learner, else
    /// [`Health::Healthy`].
    pub fn health(&self) -> Health {
        if self.replicas.is_empty() {
            return if self.up {
                Health::Healthy
            } else {
                Health::Down
            };
        }
        let n = self.replicas.len();
        let up = self.replicas.iter().filter(|r| r.up).count();
        if self.leader().is_none() || up <= n / 2 {
            Health::Down
        } else if up < n || self.replicas.iter().any(ReplicaState::weak) {
            Health::Degraded
        } else {
            Health::Healthy
        }
    }
}

impl ClusterStatus {
    /// The cluster's [`Health`]: its worst server's ([`Health::Healthy`] with every
    /// server so).
    pub fn health(&self) -> Health {
        self.servers
            .iter()
            .map(ServerState::health)
            .max()
            .unwrap_or(Health::Healthy)
    }
}

/// How many directories [`status`] lists.
const LARGEST: usize = 10;

fn runtime() -> Result<tokio::runtime::Runtime, ClientError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ClientError::Runtime)
}

/// A lazy connection to the replica of server `group` at `addr` (inside a tokio
/// runtime); its calls are bounded by [`bounded`].
fn conn_at(
    reach: &Reach,
    group: u32,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<MetaClient<tonic::transport::Channel>, crate::tls::TlsError> {
    let ch = reach.channel_to(group, addr, timeout)?;
    Ok(MetaClient::new(ch).max_decoding_message_size(crate::transport::MAX_MESSAGE))
}

/// `call`, failed with DEADLINE_EXCEEDED if it takes longer than `timeout`.
async fn bounded<T>(
    timeout: Duration,
    call: impl std::future::Future<Output = Result<T, tonic::Status>>,
) -> Result<T, tonic::Status> {
    match tokio::time::timeout(timeout, call).await {
        Ok(r) => r,
        Err(_) => Err(tonic::Status::deadline_exceeded(format!(
            "no answer within {timeout:?}"
        ))),
    }
}

fn header(cfg: &ClusterConfig) -> Option<proto::Header> {
    Some(proto::Header {
        cluster_id: cfg.cluster_id(),
        cred: None,
        no_checks: false,
        client: 0,
    })
}

fn why(s: &tonic::Status) -> String {
    if s.code() == tonic::Code::FailedPrecondition {
        return "reads a different cluster file".into();
    }
    // Transport errors (a refused handshake, say) say why in their sources.
    let mut m = s.message().to_string();
    let mut e = std::error::Error::source(s);
    while let Some(x) = e {
        let t = x.to_string();
        if !m.contains(&t) {
            m = format!("{m}: {t}");
        }
        e = x.source();
    }
    m
}

/// One status answer, or why there is none.
type Answer = Result<proto::ServerStatusReply, tonic::Status>;

/// Each replica's answer to a status request (`digest`: with a digest of its state),
/// asked of all at once, each within `timeout`: by server, then replica, in the cluster
/// file's order. Servers that `which` leaves out get no answers (an empty list).
async fn ask(
    cfg: &ClusterConfig,
    reach: &Reach,
    timeout: Duration,
    digest: bool,
    which: impl Fn(&ServerInfo) -> bool,
) -> Vec<Vec<Answer>> {
    let mut tasks = Vec::new();
    for s in cfg.servers() {
        let mut group = Vec::new();
        let asked = if which(s) { s.replicas.as_slice() } else { &[] };
        for r in asked {
            let c = conn_at(reach, s.id, r.addr, timeout);
            let h = header(cfg);
            group.push(tokio::spawn(async move {
                let mut c = c.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
                let mut req = tonic::Request::new(proto::ServerStatusReq {
                    h,
                    top: LARGEST as u32 * 4,
                    digest,
                });
                req.set_timeout(timeout);
                bounded(timeout, c.server_status(req))
                    .await
                    .map(tonic::Response::into_inner)
            }));
        }
        tasks.push(group);
    }
    let mut out = Vec::new();
    for group in tasks {
        let mut v = Vec::new();
        for t in group {
            v.push(
                t.await
                    .unwrap_or_else(|e| Err(tonic::Status::internal(e.to_string()))),
            );
        }
        out.push(v);
    }
    out
}

/// Asks every replica of every server (all at once) what it holds and, for a
/// replicated server, its place in its group; one that does not answer within
/// `timeout` is reported down. A server answers in full only to a client certificate
/// that allows uid 0; to another it answers what it keeps in memory, marked
/// [`ServerState::partial`]. [`ClusterStatus::health`] sums it up.
pub fn status(cfg: &ClusterConfig, timeout: Duration) -> ClusterStatus {
    let answers = match runtime().and_then(|rt| Ok((rt, Reach::client(cfg, None)?))) {
        Ok((rt, reach)) => rt.block_on(ask(cfg, &reach, timeout, false, |_| true)),
        Err(e) => cfg
            .servers()
            .iter()
            .map(|s| {
                s.replicas
                    .iter()
                    .map(|_| Err(tonic::Status::unavailable(e.to_string())))
                    .collect()
            })
            .collect(),
    };
    assemble(cfg, answers)
}

/// The status of the cluster from every replica's answer.
fn assemble(cfg: &ClusterConfig, answers: Vec<Vec<Answer>>) -> ClusterStatus {
    let mut out = ClusterStatus::default();
    let mut dirs: HashMap<u64, (u32, u64)> = HashMap::new();
    for (s, group) in cfg.servers().iter().zip(answers) {
        let (st, reply) = if s.replicas.len() > 1 {
            group_state(s, group)
        } else {
            single_state(s, group)
        };
        for d in reply.map(|r| r.largest).unwrap_or_default() {
            let e = dirs.entry(d.dir).or_default();
            e.0 += d.partitions;
            e.1 += d.entries;
        }
        out.servers.push(st);
    }
    let mut largest: Vec<LargeDir> = dirs
        .into_iter()
        .map(|(dir, (partitions, entries))| LargeDir {
            dir,
            partitions,
            entries,
        })
        .collect();
    largest.sort_by(|a, b| b.entries.cmp(&a.entries).then(a.dir.cmp(&b.dir)));
    largest.truncate(LARGEST);
    out.largest = largest;
    out
}

/// A server's fields from its answer.
fn fill(st: &mut ServerState, r: &proto::ServerStatusReply) {
    st.up = true;
    st.partitions = r.partitions;
    st.entries = r.entries;
    st.inodes = r.inodes;
    st.splits_done = r.splits_done;
    st.splits_in_flight = r.splits_in_flight;
    st.redirects = r.redirects;
    st.intents_pending = r.intents_pending;
    st.prepared_pending = r.prepared_pending;
    st.incoming_partitions = r.incoming_partitions;
    st.partial = r.partial;
}

/// A server of one replica, and its answer if it gave one.
fn single_state(
    s: &ServerInfo,
    answers: Vec<Answer>,
) -> (ServerState, Option<proto::ServerStatusReply>) {
    let mut st = ServerState {
        id: s.id,
        addr: s.addr.to_string(),
        ..Default::default()
    };
    match answers.into_iter().next() {
        Some(Ok(r)) => {
            fill(&mut st, &r);
            return (st, Some(r));
        }
        Some(Err(e)) => st.error = Some(why(&e)),
        None => st.error = Some("not asked".into()),
    }
    (st, None)
}

/// A replicated server: each replica's state, and the server's from its leader's
/// answer (returned too), if a leader answered.
fn group_state(
    s: &ServerInfo,
    answers: Vec<Answer>,
) -> (ServerState, Option<proto::ServerStatusReply>) {
    let mut st = ServerState {
        id: s.id,
        addr: s.addr.to_string(),
        ..Default::default()
    };
    let mut replies = Vec::new();
    for (r, a) in s.replicas.iter().zip(answers) {
        let mut rs = ReplicaState {
            id: r.id,
            addr: r.addr.to_string(),
            ..Default::default()
        };
        match a {
            Ok(reply) => {
                rs.up = true;
                if let Some(x) = &reply.replica {
                    rs.role.clone_from(&x.role);
                    rs.term = x.term;
                    rs.leader = x.leader.checked_sub(1);
                    rs.applied = x.applied;
                    rs.snapshots_built = x.snapshots_built;
                    rs.snapshots_installed = x.snapshots_installed;
                }
                replies.push(Some(reply));
            }
            Err(e) => {
                rs.error = Some(why(&e));
                replies.push(None);
            }
        }
        st.replicas.push(rs);
    }
    let lead = st
        .leader()
        .and_then(|l| st.replicas.iter().position(|r| r.id == l.id));
    let Some((i, reply)) = lead.and_then(|i| Some((i, replies.get_mut(i)?.take()?))) else {
        st.error = Some(no_leader(&st.replicas));
        return (st, None);
    };
    fill(&mut st, &reply);
    st.addr.clone_from(&st.replicas[i].addr);
    let members = reply
        .replica
        .as_ref()
        .map(|x| x.members.as_slice())
        .unwrap_or_default();
    lags(&mut st.replicas, i, members);
    (st, Some(reply))
}

/// Why a replicated server has no leader that answered.
fn no_leader(replicas: &[ReplicaState]) -> String {
    let up: Vec<&ReplicaState> = replicas.iter().filter(|r| r.up).collect();
    if up.is_empty() {
        let first = replicas.first().and_then(|r| r.error.as_deref());
        return format!("no replica answered: {}", first.unwrap_or("no answer"));
    }
    let roles: Vec<&str> = up
        .iter()
        .map(|r| if r.role.is_empty() { "?" } else { &r.role })
        .collect();
    format!(
        "no leader ({} of {} replicas up: {})",
        up.len(),
        replicas.len(),
        roles.join(", ")
    )
}

/// Each replica's lag behind the leader `lead`: by its own applied index if it
/// answered, else by what the leader knows it holds (`members`).
fn lags(replicas: &mut [ReplicaState], lead: usize, members: &[proto::ReplicaProgress]) {
    let top = replicas.get(lead).map_or(0, |l| l.applied);
    for (i, r) in replicas.iter_mut().enumerate() {
        let at = if i == lead || r.up {
            Some(r.applied)
        } else {
            members
                .iter()
                .find(|m| m.replica == r.id)
                .and_then(|m| m.matched.checked_sub(1))
        };
        r.lag = at.map(|a| top.saturating_sub(a));
    }
}
