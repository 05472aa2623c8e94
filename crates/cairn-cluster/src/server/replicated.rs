//! A server that is one replica of a replicated group: its store holds the Raft log
//! and the state keyspaces (`DIR/store`), snapshot files live in `DIR/snapshots`; it
//! serves requests only while it leads, after rebuilding what it keeps in memory from
//! the rows once every earlier entry is applied; it drops all of that when it stops
//! leading. DESIGN.md, "Replication".

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::{BasicNode, ServerState};

use cairn::Options;

use super::node::{Fail, Node, NodeConfig, NodeRef, RowStore};
use super::{ServerError, ServerOptions};
use crate::config::ClusterConfig;
use crate::raft::machine::{self, Machine};
use crate::raft::net::{Factory, RaftSvc};
use crate::raft::replica::Core;
use crate::raft::{log::LogStore, Change, NodeId, Raft, Replica, Role};

/// The Raft settings of a group whose followers stand for election after hearing
/// nothing from a leader for `E` = `opts.election_timeout` to 1.2 E.
///
/// openraft's follower waits its leader lease (`election_timeout_max`) plus a random
/// election timeout (`election_timeout_min..max`) after the last word of a leader, and
/// another 2 × `election_timeout_max` while its log is shorter than one a replica refused
/// its vote with (third_party/README.md): with min 0.4 E and max 0.6 E that is E to 1.2 E
/// (to 2.4 E). The
/// leader's own lease for reads (0.4 E, see `open`) ends before a follower's (0.6 E).
/// Heartbeats go every E / 8, which is also openraft's deadline for an append (room
/// for a sync under `--sync always` and a TLS handshake).
fn raft_config(
    cfg: &ClusterConfig,
    group: u32,
    opts: &ServerOptions,
) -> Result<openraft::Config, String> {
    let range = crate::config::ELECTION_TIMEOUT_MS;
    let e = u64::try_from(opts.election_timeout.as_millis())
        .unwrap_or(u64::MAX)
        .clamp(*range.start(), *range.end());
    openraft::Config {
        cluster_name: format!("cairn-{:x}-{group}", cfg.cluster_id()),
        election_timeout_min: e * 2 / 5,
        election_timeout_max: e * 3 / 5,
        heartbeat_interval: (e / 8).max(5),
        install_snapshot_timeout: 10_000,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(opts.snapshot_every.max(16)),
        max_in_snapshot_log_to_keep: opts.snapshot_every.max(16) / 2,
        snapshot_max_chunk_size: 4 << 20,
        max_payload_entries: 1024,
        ..Default::default()
    }
    .validate()
    .map_err(|e| e.to_string())
}

/// Opens replica `replica` of group `group`: its store, its Raft instance (made
/// a member of the group the cluster file lists, if new), and the node over them.
/// Returns the node and the Raft service to serve.
pub(crate) fn open(
    opts: &ServerOptions,
    group: u32,
    replica: NodeId,
    engine: Options,
    peers: Vec<super::peer::PeerConn>,
    reach: &crate::transport::Reach,
    rt: &tokio::runtime::Runtime,
) -> Result<(NodeRef, RaftSvc), ServerError> {
    let cfg = &opts.cluster;
    let dir = opts.dir.join("store");
    let snapshots = opts.dir.join("snapshots");
    std::fs::create_dir_all(&snapshots).map_err(|source| ServerError::Store {
        dir: snapshots.clone(),
        source: cairn::Error::Io {
            path: snapshots.clone(),
            source,
        },
    })?;
    let db = engine.open(&dir).map_err(super::store_err(&dir))?;
    let state = machine::open_active(&db).map_err(super::store_err(&dir))?;
    super::check_owner(&state, cfg, group, &dir)?;
    let (core, proposals) = Core::new(db.clone(), state, snapshots);
    let damaged = |what: String| ServerError::Damaged {
        dir: dir.clone(),
        what,
    };
    let log = LogStore::new(&db, opts.sync == super::SyncMode::Always);
    let sm = Machine::new(core.clone()).map_err(|e| damaged(format!("applied state: {e}")))?;
    let config =
        raft_config(cfg, group, opts).map_err(|e| damaged(format!("raft settings: {e}")))?;
    let net = Factory {
        reach: reach.clone(),
        group,
        cluster_id: cfg.cluster_id(),
        connect_timeout: opts.peer_timeout.min(Duration::from_secs(2)),
    };
    tracing::info!(
        "replica {replica} of server {group}: election timeout {} ms",
        opts.election_timeout.as_millis()
    );
    let raft = rt
        .block_on(Raft::new(replica, Arc::new(config), net, log, sm))
        .map_err(|e| damaged(format!("starting raft: {e}")))?;
    let members: BTreeMap<NodeId, BasicNode> = cfg
        .server(group)
        .map(|s| {
            s.replicas
                .iter()
                .map(|r| (r.id, BasicNode::new(r.addr.to_string())))
                .collect()
        })
        .unwrap_or_default();
    // A new group is formed by its first replica (lowest id): it writes the first
    // membership and stands for election at once. The others wait to hear from a
    // leader; were each to form the group, one starting late would stand in the
    // leader's term and unseat it.
    let first = members.keys().next().copied();
    rt.block_on(async {
        if first == Some(replica) && !raft.is_initialized().await.unwrap_or(true) {
            if let Err(e) = raft.initialize(members).await {
                tracing::debug!("raft initialize: {e}");
            }
        }
    });
    let lease = opts.election_timeout * 2 / 5;
    let rep = Arc::new(Replica::new(core, raft.clone(), replica, group, lease));
    let node = Node::new(
        NodeConfig {
            id: group,
            n: cfg.len(),
            cluster_id: cfg.cluster_id(),
            sync: opts.sync,
            threshold: opts.split_threshold.max(2),
            split_depth: crate::giga::split_depth_limit(cfg.len(), opts.partitions_per_server),
            peer_timeout: opts.peer_timeout,
            inline_store: false,
            lease_time: opts.lease_time,
        },
        RowStore::Replicated(rep),
        peers,
    );
    #[cfg(feature = "test-hooks")]
    let node = node.with_hooks(opts.hooks.clone());
    let node = Arc::new(node);
    rt.spawn(propose(raft.clone(), proposals));
    rt.spawn(watch_role(node.clone()));
    let svc = RaftSvc {
        raft,
        group,
        cluster_id: cfg.cluster_id(),
    };
    Ok((node, svc))
}

/// Hands the leader's proposals to Raft in the order they were made. A proposal of a
/// term that ended is still handed over: Raft appends it in a later term or refuses
/// it, and the state machine skips an entry whose change's term is not the entry's.
/// Proposals that queued while Raft took the previous one go as one entry
/// ([`combine`]). Raft's answers (the entry's log id, or why it was refused) are read
/// by a second task, in order; the replies waiting for them watch the applied progress
/// instead.
async fn propose(raft: Raft, mut rx: tokio::sync::mpsc::UnboundedReceiver<Change>) {
    type Answer = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
    let (answers, mut read) = tokio::sync::mpsc::unbounded_channel::<Answer>();
    tokio::spawn(async move {
        while let Some(answer) = read.recv().await {
            answer.await;
        }
    });
    let mut held = None;
    loop {
        let first = match held.take() {
            Some(c) => c,
            None => match rx.recv().await {
                Some(c) => c,
                None => return,
            },
        };
        let (c, n) = combine(first, &mut rx, &mut held);
        metrics::counter!("cairn_raft_proposals_total").increment(n);
        metrics::histogram!("cairn_raft_proposals_per_entry").record(n as f64);
        let (term, seq) = (c.term, c.seq);
        match raft.client_write_ff(c).await {
            Ok(rx) => {
                let _ = answers.send(Box::pin(async move {
                    match rx.await {
                        Ok(Ok(r)) => tracing::trace!("proposal {term}/{seq}: {}", r.log_id),
                        Ok(Err(e)) => tracing::debug!("proposal {term}/{seq} refused: {e}"),
                        Err(e) => tracing::debug!("proposal {term}/{seq}: {e}"),
                    }
                }));
            }
            Err(e) => {
                tracing::warn!("raft stopped: {e}");
                return;
            }
        }
    }
}

/// Bytes of rows (keys and values) above which [`combine`] takes no more proposals
/// into one entry: an entry stays far below a message's limit.
const ENTRY_BYTES: usize = 1 << 20;

/// `first` and the proposals of the same term queued behind it, as one change: their
/// rows in order, the number of the last. Applying it is applying them one after the
/// other (a later row of a key overrides an earlier one), and the leader's overlay
/// retires each row up to that number. A proposal of another term is left in `held`
/// for the next entry (the state machine judges each entry by its change's term).
/// Returns the change and how many proposals it holds.
fn combine(
    mut first: Change,
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Change>,
    held: &mut Option<Change>,
) -> (Change, u64) {
    let mut n = 1;
    let mut bytes = rows_bytes(&first.rows);
    while bytes < ENTRY_BYTES {
        match rx.try_recv() {
            Ok(c) if c.term == first.term => {
                bytes += rows_bytes(&c.rows);
                first.seq = c.seq;
                first.rows.extend(c.rows);
                n += 1;
            }
            Ok(c) => {
                *held = Some(c);
                break;
            }
            Err(_) => break,
        }
    }
    (first, n)
}

fn rows_bytes(rows: &[(Vec<u8>, Option<Vec<u8>>)]) -> usize {
    rows.iter()
        .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
        .sum()
}

/// Follows the replica's Raft state: takes up a term it wins, steps down from one it
/// loses.
async fn watch_role(node: NodeRef) {
    let Some(r) = node.replica().cloned() else {
        return;
    };
    let mut m = r.raft.metrics();
    loop {
        let (leads, term) = {
            let b = m.borrow_and_update();
            let applied = b.last_applied.map_or(0, |a| a.index);
            let last = b.last_log_index.unwrap_or(0);
            metrics::gauge!("cairn_raft_term").set(b.current_term as f64);
            metrics::gauge!("cairn_raft_applied_index").set(applied as f64);
            metrics::gauge!("cairn_raft_last_log_index").set(last as f64);
            metrics::gauge!("cairn_raft_apply_lag").set(last.saturating_sub(applied) as f64);
            metrics::gauge!("cairn_raft_leader")
                .set(f64::from(u8::from(b.state == ServerState::Leader)));
            (
                b.state == ServerState::Leader && b.current_leader == Some(r.id),
                b.current_term,
            )
        };
        match (leads, r.role()) {
            (true, Role::Follower) => start_term(&node, &r, term),
            (true, Role::Recovering(t) | Role::Leading(t)) if t != term => {
                step_down(&node, &r);
                start_term(&node, &r, term);
            }
            (false, Role::Recovering(_) | Role::Leading(_)) => step_down(&node, &r),
            _ => {}
        }
        if node.is_crashed() || m.changed().await.is_err() {
            step_down(&node, &r);
            return;
        }
    }
}

fn step_down(node: &Node, r: &Replica) {
    if r.role() != Role::Follower {
        tracing::info!(group = r.group, replica = r.id, "no longer leading");
    }
    r.set_role(Role::Follower);
    r.core.end_term();
    node.reset_state();
}

/// Takes up term `term`: once every earlier entry is applied (Raft's read index of the
/// term, its first entry), rebuilds the state from the rows and serves.
fn start_term(node: &NodeRef, r: &Arc<Replica>, term: u64) {
    metrics::counter!("cairn_raft_leader_changes_total").increment(1);
    r.set_role(Role::Recovering(term));
    node.reset_state();
    r.core.begin_term(term);
    let (node, r) = (node.clone(), r.clone());
    tokio::spawn(async move {
        // Asked again while the term lasts: a majority that did not answer in time
        // (appends timed out on a loaded machine, a follower still restarting) may
        // answer the next time, and Raft keeps this replica the leader meanwhile; to
        // give up would leave the group with a leader that never serves.
        while let Err(e) = r.raft.ensure_linearizable().await {
            if r.role() != Role::Recovering(term) || node.is_crashed() {
                tracing::info!(group = r.group, "term {term}: not taken up: {e}");
                return;
            }
            tracing::info!(group = r.group, "term {term}: not taken up yet: {e}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Retried while the term lasts: a store error may pass (a full disk freed).
        while r.role() == Role::Recovering(term) && !node.is_crashed() {
            match node.blocking(super::recover).await {
                Ok(()) => {
                    if r.change_role(Role::Recovering(term), Role::Leading(term)) {
                        tracing::info!(group = r.group, replica = r.id, "leading in term {term}");
                        node.wake_runner();
                    }
                    return;
                }
                Err(Fail::NotLeader) => return,
                Err(f) => {
                    tracing::error!(group = r.group, "term {term}: recovery failed: {f:?}");
                    node.reset_state();
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    });
}

/// How long an added replica may take to catch up when the request does not say.
const CATCH_UP: Duration = Duration::from_secs(600);

/// `ChangeReplicas` (checked as an admin's by the caller): adds or removes a replica of
/// this server's group, when this replica leads it; the group's members once done.
pub(crate) async fn change_replicas(
    node: &NodeRef,
    r: crate::proto::ChangeReplicasReq,
) -> Result<crate::proto::ChangeReplicasReply, tonic::Status> {
    use crate::proto::ReplicaChange;
    use crate::raft::members::{self, MemberError};
    use tonic::Status;
    let Some(rep) = node.replica().cloned() else {
        return Err(Status::invalid_argument(format!(
            "server {} is a server of one replica: its replicas are the cluster file's",
            node.id
        )));
    };
    if r.group != node.id {
        return Err(Status::invalid_argument(format!(
            "this is a replica of server {}, not of server {}",
            node.id, r.group
        )));
    }
    if !matches!(rep.role(), Role::Leading(_)) {
        return Err(super::svc::not_leader(node));
    }
    let wait = match r.timeout_ms {
        0 => CATCH_UP,
        ms => Duration::from_millis(ms),
    };
    let done = match ReplicaChange::try_from(r.change) {
        Ok(ReplicaChange::Add) => members::add(&rep.raft, r.id, &r.addr, wait).await,
        Ok(ReplicaChange::Remove) => members::remove(&rep.raft, r.id).await,
        Err(_) => Err(MemberError::Invalid(format!("unknown change {}", r.change))),
    };
    match done {
        Ok(()) => {
            let m = rep.raft.metrics().borrow().clone();
            Ok(crate::proto::ChangeReplicasReply {
                members: members::members(&rep.raft),
                term: m.current_term,
                leader: m.current_leader.unwrap_or(rep.id),
            })
        }
        Err(e @ MemberError::Invalid(_)) => Err(Status::invalid_argument(e.to_string())),
        Err(e @ MemberError::Slow { .. }) => Err(Status::deadline_exceeded(e.to_string())),
        Err(e @ MemberError::Raft(_)) => Err(Status::aborted(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::{combine, Change, ENTRY_BYTES};

    fn change(term: u64, seq: u64, key: &str, bytes: usize) -> Change {
        Change {
            term,
            seq,
            rows: vec![(key.as_bytes().to_vec(), Some(vec![0; bytes]))],
        }
    }

    #[test]
    fn queued_proposals_of_one_term_become_one_entry_in_order() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for (seq, key) in [(11, "b"), (12, "a"), (13, "b")] {
            tx.send(change(7, seq, key, 10)).unwrap();
        }
        tx.send(change(8, 1, "c", 10)).unwrap();
        tx.send(change(8, 2, "d", 10)).unwrap();
        let mut held = None;
        let (c, n) = combine(change(7, 10, "a", 10), &mut rx, &mut held);
        assert_eq!((c.term, c.seq, n), (7, 13, 4));
        let keys: Vec<&[u8]> = c.rows.iter().map(|(k, _)| k.as_slice()).collect();
        assert_eq!(keys, [b"a", b"b", b"a", b"b"]);
        // The next term's first proposal waits for the next entry, and takes the rest.
        let next = held.take().unwrap();
        assert_eq!((next.term, next.seq), (8, 1));
        let (c, n) = combine(next, &mut rx, &mut held);
        assert_eq!((c.term, c.seq, n, held), (8, 2, 2, None));
    }

    #[test]
    fn an_entry_stops_growing_at_its_size_bound() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for seq in 2..10 {
            tx.send(change(1, seq, "k", ENTRY_BYTES / 3)).unwrap();
        }
        let mut held = None;
        // Each a third of the bound and a byte: the third one crosses it.
        let (c, n) = combine(change(1, 1, "k", ENTRY_BYTES / 3), &mut rx, &mut held);
        assert_eq!((n, c.seq), (3, 3));
        let (c, n) = combine(rx.try_recv().unwrap(), &mut rx, &mut held);
        assert_eq!((n, c.seq), (3, 6));
    }
}
