//! A replica's shared parts: the state keyspace in use, the leader's pending changes
//! and proposals, and the progress that waiting replies watch.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::sync::{mpsc, watch};

use cairn::{Db, Keyspace};

use super::overlay::{Merged, Overlay, Seen};
use super::{Change, LogId, NodeId, Raft};

/// Rows of a change: keys and new values (`None`: deleted).
pub(crate) type Rows = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// Where a replica stands, as replies waiting for their changes see it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Progress {
    /// The term this replica leads (proposes in), if any.
    pub leading: Option<u64>,
    /// The last of that term's proposals applied.
    pub seq: u64,
    /// The index of the last entry applied.
    pub applied: u64,
}

/// The leader's proposals of its term.
struct Pending {
    leading: Option<u64>,
    /// The last proposal's number.
    last: u64,
    overlay: Overlay,
}

/// What the state machine and the server share.
pub(crate) struct Core {
    pub db: Db,
    state: RwLock<Keyspace>,
    /// Where snapshot files live.
    pub snapshots: PathBuf,
    pending: Mutex<Pending>,
    proposals: mpsc::UnboundedSender<Change>,
    progress: watch::Sender<Progress>,
    /// Snapshots built and installed here (status, metrics).
    pub built: AtomicU64,
    pub installed: AtomicU64,
}

/// Why a change could not be proposed or waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NotLeading;

impl Core {
    /// The core over `db` (state keyspace `state`), and the receiver of its proposals.
    pub(crate) fn new(
        db: Db,
        state: Keyspace,
        snapshots: PathBuf,
    ) -> (Arc<Core>, mpsc::UnboundedReceiver<Change>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let core = Core {
            db,
            state: RwLock::new(state),
            snapshots,
            pending: Mutex::new(Pending {
                leading: None,
                last: 0,
                overlay: Overlay::default(),
            }),
            proposals: tx,
            progress: watch::channel(Progress::default()).0,
            built: AtomicU64::new(0),
            installed: AtomicU64::new(0),
        };
        (Arc::new(core), rx)
    }

    /// The state keyspace in use.
    pub(crate) fn state(&self) -> Keyspace {
        self.state.read().clone()
    }

    pub(crate) fn set_state(&self, ks: Keyspace) {
        *self.state.write() = ks;
    }

    /// Entries up to `last` were applied, with these changes.
    pub(crate) fn applied(&self, changes: &[Change], last: Option<LogId>) {
        let mut p = self.pending.lock();
        let mut seq = None;
        for c in changes {
            if p.leading == Some(c.term) {
                p.overlay.retire(c.seq, &c.rows);
                seq = Some(c.seq);
            }
        }
        drop(p);
        self.progress.send_modify(|g| {
            if let Some(s) = seq {
                g.seq = g.seq.max(s);
            }
            if let Some(l) = last {
                g.applied = l.index;
            }
        });
    }

    /// A snapshot up to `last` was installed.
    pub(crate) fn installed(&self, last: Option<LogId>) {
        self.installed.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("cairn_raft_snapshots_installed_total").increment(1);
        self.progress
            .send_modify(|g| g.applied = last.map_or(0, |l| l.index));
    }

    /// A snapshot was built.
    pub(crate) fn snapshot_built(&self) {
        self.built.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("cairn_raft_snapshots_built_total").increment(1);
    }

    /// This replica leads `term` from now, nothing is pending. Proposals are numbered
    /// from the clock (nanoseconds), not from 1: a replica restarted while its vote
    /// was committed may lead the same term again, and the entries of its earlier life
    /// in that term must never count as this life's proposals.
    pub(crate) fn begin_term(&self, term: u64) {
        let base = u64::try_from(cairn_fs::now_ns()).unwrap_or(0);
        let mut p = self.pending.lock();
        let base = base.max(p.last);
        p.leading = Some(term);
        p.last = base;
        p.overlay.clear();
        drop(p);
        self.progress.send_modify(|g| {
            g.leading = Some(term);
            g.seq = base;
        });
    }

    /// This replica leads no term: its pending changes are dropped, and replies waiting
    /// for them fail.
    pub(crate) fn end_term(&self) {
        let mut p = self.pending.lock();
        p.leading = None;
        p.overlay.clear();
        drop(p);
        self.progress.send_modify(|g| g.leading = None);
    }

    /// Proposes `rows` in this replica's term: visible at once to its reads, applied
    /// once committed. Returns (term, number).
    pub(crate) fn propose(&self, rows: Rows) -> Result<(u64, u64), NotLeading> {
        self.propose_as(None, rows)
    }

    /// Proposes `rows` in the term led, if it is `want` (when given).
    fn propose_as(&self, want: Option<u64>, rows: Rows) -> Result<(u64, u64), NotLeading> {
        let mut p = self.pending.lock();
        let term = p.leading.ok_or(NotLeading)?;
        if want.is_some_and(|w| w != term) {
            return Err(NotLeading);
        }
        p.last += 1;
        let seq = p.last;
        p.overlay.insert(seq, &rows);
        // Sent under the lock: proposals reach the log in the order of their numbers.
        self.proposals
            .send(Change { term, seq, rows })
            .map_err(|_| NotLeading)?;
        Ok((term, seq))
    }

    /// As [`Core::propose`], only if this replica still leads `term` (a task of an
    /// earlier term must not change what a later one rebuilt).
    pub(crate) fn propose_in(&self, term: u64, rows: Rows) -> Result<(u64, u64), NotLeading> {
        self.propose_as(Some(term), rows)
    }

    /// The term led and its last proposal's number.
    pub(crate) fn proposed(&self) -> Option<(u64, u64)> {
        let p = self.pending.lock();
        p.leading.map(|t| (t, p.last))
    }

    /// As [`Core::proposed`], only if the term led is `want` (when given): a task of an
    /// ended term has nothing to wait for (what it proposed may have been dropped).
    pub(crate) fn proposed_as(&self, want: Option<u64>) -> Option<(u64, u64)> {
        self.proposed()
            .filter(|&(term, _)| want.is_none_or(|w| w == term))
    }

    /// Waits until proposal `seq` of `term` is applied; `NotLeading` if the term ended
    /// first (the change may or may not be committed by the next leader).
    pub(crate) async fn wait(&self, term: u64, seq: u64) -> Result<(), NotLeading> {
        let mut rx = self.progress.subscribe();
        let p = rx
            .wait_for(|g| g.leading != Some(term) || g.seq >= seq)
            .await
            .map_err(|_| NotLeading)?;
        if p.leading == Some(term) {
            Ok(())
        } else {
            Err(NotLeading)
        }
    }

    /// [`Core::wait`] from a thread that may block (not a runtime worker).
    pub(crate) fn wait_blocking(&self, term: u64, seq: u64) -> Result<(), NotLeading> {
        match tokio::runtime::Handle::try_current() {
            Ok(h) => h.block_on(self.wait(term, seq)),
            Err(_) => Err(NotLeading),
        }
    }

    /// What the pending changes say of `key`.
    pub(crate) fn seen(&self, key: &[u8]) -> Seen {
        let p = self.pending.lock();
        if p.overlay.is_empty() {
            return Seen::Store;
        }
        p.overlay.get(key)
    }

    /// The rows of `range`: the store's under the pending changes.
    pub(crate) fn range(
        &self,
        range: (std::ops::Bound<Vec<u8>>, std::ops::Bound<Vec<u8>>),
    ) -> impl Iterator<Item = cairn::Result<(Vec<u8>, Vec<u8>)>> {
        // The pending rows first: a row applied meanwhile is in the store before it
        // leaves the overlay, so it is seen either way.
        let pending = {
            let p = self.pending.lock();
            if p.overlay.is_empty() {
                Vec::new()
            } else {
                p.overlay.range(range.clone())
            }
        };
        let store = self
            .state()
            .range::<Vec<u8>, _>(range)
            .map(|r| r.map(|(k, v)| (k, v.into_vec())));
        Merged::new(store, pending)
    }
}

/// A replica's role in its group, as the server acts on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Another replica leads (or none yet): requests are refused with a hint.
    Follower,
    /// Elected for this term; rebuilding what the server keeps in memory from the
    /// rows once every earlier entry is applied. Proposals (recovery's own) are
    /// accepted, requests not yet.
    Recovering(u64),
    /// Serving requests in this term.
    Leading(u64),
}

/// A replica of a group: its Raft instance, its core, its role.
pub(crate) struct Replica {
    pub core: Arc<Core>,
    pub raft: Raft,
    pub id: NodeId,
    pub group: u32,
    /// How long after a majority last answered the leader still serves reads without
    /// asking them again (less than an election timeout).
    pub lease: Duration,
    role: Mutex<Role>,
}

impl Replica {
    pub(crate) fn new(
        core: Arc<Core>,
        raft: Raft,
        id: NodeId,
        group: u32,
        lease: Duration,
    ) -> Replica {
        Replica {
            core,
            raft,
            id,
            group,
            lease,
            role: Mutex::new(Role::Follower),
        }
    }

    pub(crate) fn role(&self) -> Role {
        *self.role.lock()
    }

    pub(crate) fn set_role(&self, r: Role) {
        *self.role.lock() = r;
    }

    /// Sets the role to `to` only if it is `from`.
    pub(crate) fn change_role(&self, from: Role, to: Role) -> bool {
        let mut r = self.role.lock();
        if *r == from {
            *r = to;
            true
        } else {
            false
        }
    }

    /// The address of the replica this one believes leads, if known and not itself.
    pub(crate) fn leader_hint(&self) -> Option<String> {
        let m = self.raft.metrics().borrow().clone();
        let leader = m.current_leader?;
        if leader == self.id {
            return None;
        }
        m.membership_config
            .membership()
            .get_node(&leader)
            .map(|n| n.addr.clone())
    }

    /// This replica's place in its group, for status; with `digest`, also a digest of
    /// one consistent cut of its state (reads the whole store: for `cluster check`).
    pub(crate) fn status(&self, digest: bool) -> crate::proto::ReplicaStatus {
        let m = self.raft.metrics().borrow().clone();
        let role = match (m.state, self.role()) {
            (_, Role::Leading(_)) => "leader",
            (_, Role::Recovering(_)) => "recovering",
            (openraft::ServerState::Follower, _) => "follower",
            (openraft::ServerState::Candidate, _) => "candidate",
            (openraft::ServerState::Learner, _) => "learner",
            (openraft::ServerState::Leader, _) => "recovering",
            (openraft::ServerState::Shutdown, _) => "stopping",
        };
        let members = match &m.replication {
            Some(rep) => rep
                .iter()
                .map(|(id, matched)| crate::proto::ReplicaProgress {
                    replica: *id,
                    addr: m
                        .membership_config
                        .membership()
                        .get_node(id)
                        .map(|n| n.addr.clone())
                        .unwrap_or_default(),
                    matched: matched.map_or(0, |l| l.index + 1),
                })
                .collect(),
            None => Vec::new(),
        };
        let mut s = crate::proto::ReplicaStatus {
            replica: self.id,
            role: role.to_string(),
            term: m.current_term,
            leader: m.current_leader.map_or(0, |l| l + 1),
            applied: m.last_applied.map_or(0, |l| l.index),
            last_log: m.last_log_index.unwrap_or(0),
            snapshots_built: self.core.built.load(std::sync::atomic::Ordering::Relaxed),
            snapshots_installed: self
                .core
                .installed
                .load(std::sync::atomic::Ordering::Relaxed),
            members,
            refused: super::net::REFUSED.load(std::sync::atomic::Ordering::Relaxed),
            ..Default::default()
        };
        if digest {
            match super::machine::digest(&self.core) {
                Ok((applied, rows, d)) => {
                    s.digested = true;
                    s.digest_applied = applied;
                    s.digest_rows = rows;
                    s.digest = d;
                }
                Err(e) => tracing::warn!("digest of replica {}: {e}", self.id),
            }
        }
        s
    }

    /// Before a reply: waits until every change proposed so far is applied (what the
    /// reply says was seen by a majority), and, for a read, that this replica still
    /// leads: within its lease, or by asking a majority (ReadIndex).
    /// `bound`: the term the operation ran in, if it is bound to one (it fails if
    /// this replica leads another now).
    pub(crate) async fn settle(&self, bound: Option<u64>) -> Result<(), NotLeading> {
        let Some((term, seq)) = self.core.proposed_as(bound) else {
            return Err(NotLeading);
        };
        if seq > self.core.progress.borrow().seq {
            tracing::debug!("settle: wait {term}/{seq}");
            self.core.wait(term, seq).await?;
            tracing::debug!("settle: waited {term}/{seq}");
        }
        let fresh = {
            let m = self.raft.metrics();
            let m = m.borrow();
            m.current_term == term
                && m.millis_since_quorum_ack
                    .is_some_and(|ms| u128::from(ms) < self.lease.as_millis())
        };
        if !fresh {
            tracing::debug!("settle: read index");
            self.raft
                .ensure_linearizable()
                .await
                .map_err(|_| NotLeading)?;
            tracing::debug!("settle: read index done");
        }
        if self.role() == Role::Leading(term) {
            Ok(())
        } else {
            Err(NotLeading)
        }
    }
}
