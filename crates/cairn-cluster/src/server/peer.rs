//! Calls between servers: the connections, a dispatch that runs a call locally when
//! the target is this server, and the participant side of every call (each one
//! idempotent: coordinators retry them, and replay them after a restart).

use std::sync::Arc;
use std::time::Duration;

use tonic::transport::Channel;

use cairn_fs::{rules, Cred};

use super::node::{errno, now_ms, Batch, Fail, IntentKey, Node, R};
use super::state::Part;
use crate::client::group::Replicas;
use crate::convert::{attr_msg, cred_msg, msg_cred, row_attr};
use crate::giga::home_of;
use crate::proto;
use crate::proto::intent_row::Op;
use crate::proto::meta_client::MetaClient;
use crate::proto::peer_client::PeerClient;
use crate::proto::IntentState;
use crate::rows::{
    entry_key, entry_prefix, ino_prefix, inode_key, link_key, memo_key, partition_key, perms_key,
    prepared_key, PART_ACTIVE, TAG_LINK, TAG_SUBDIR,
};
use crate::transport::MAX_MESSAGE;

/// A server's connections to one replica: its client and server services.
type PeerClients = (MetaClient<Channel>, PeerClient<Channel>);

fn peer_clients(ch: Channel) -> PeerClients {
    let peer = PeerClient::new(ch.clone())
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    (crate::transport::meta_client(ch), peer)
}

/// The connections to one server id: to each replica of its group (lazy: opened on
/// first use, reopened after failures), and the one calls go to.
pub(crate) struct PeerConn(Replicas<PeerClients>);

impl PeerConn {
    /// Lazy connections to the replicas of `s` through `reach` (must be called inside
    /// a tokio runtime).
    pub(crate) fn new(
        reach: &crate::transport::Reach,
        s: &crate::config::ServerInfo,
        connect_timeout: Duration,
        election_timeout: Duration,
    ) -> Result<PeerConn, crate::tls::TlsError> {
        Replicas::new(reach, s, connect_timeout, peer_clients)
            .map(|r| PeerConn(r.with_first_attempt(election_timeout)))
    }

    /// The client-service connection to the replica calls go to, and its index.
    pub(crate) fn meta(&self) -> (usize, MetaClient<Channel>) {
        let (i, (m, _)) = self.0.current();
        (i, m)
    }

    /// The server-service connection to the replica calls go to, and its index.
    pub(crate) fn peer(&self) -> (usize, PeerClient<Channel>) {
        let (i, (_, p)) = self.0.current();
        (i, p)
    }

    /// Whether a call that failed with `s` may find a leader if sent again: a
    /// replicated group's replica that does not lead, or did not answer.
    pub(crate) fn worth_retrying(&self, s: &tonic::Status) -> bool {
        self.0.replicated()
            && (s.metadata().get(crate::NOT_LEADER).is_some()
                || matches!(
                    s.code(),
                    tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
                ))
    }

    /// A call to replica `i` failed with `s`: the next call goes to the leader it
    /// named (connected to first if the cluster file did not list it), or (not the
    /// leader, or not reached) to the next replica. The caller fails this call as
    /// `Fail::Down`; coordinators retry.
    pub(crate) fn failed(&self, i: usize, s: &tonic::Status) {
        if !self.0.replicated() {
            return;
        }
        match s
            .metadata()
            .get(crate::NOT_LEADER)
            .and_then(|v| v.to_str().ok())
        {
            Some(hint) => {
                self.0.follow(i, hint);
            }
            None => self.0.pass_over(i),
        }
    }
}

/// The pause before a call is sent again to a group that had no leader.
pub(crate) const ELECTION_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// Replies that carry a [`proto::Status`].
pub(crate) trait Reply: Default {
    fn status(&self) -> Option<&proto::Status>;
    fn set_status(&mut self, s: proto::Status);
}

macro_rules! replies {
    ($($t:ty),* $(,)?) => {$(
        impl Reply for $t {
            fn status(&self) -> Option<&proto::Status> { self.status.as_ref() }
            fn set_status(&mut self, s: proto::Status) { self.status = Some(s); }
        }
    )*};
}
replies!(
    proto::EntryReply,
    proto::MakeBatchReply,
    proto::AttrReply,
    proto::InoReply,
    proto::Empty,
    proto::ReadDirReply,
    proto::DataReply,
    proto::WriteReply,
    proto::XattrListReply,
    proto::StatFsReply,
    proto::PeerReply,
    proto::MakeDirReply,
    proto::PrepareRmdirReply,
    proto::RenamePrepareReply,
    proto::IntentOutcome,
    proto::LockReply,
);

/// Calls `$method` of server `$target` with `$req`: directly (`$local`) if that is
/// this server, else over gRPC with the peer timeout. A reply's status becomes the
/// error; a transport error is `Fail::Down`.
macro_rules! peer_call {
    ($node:expr, $target:expr, $method:ident, $local:ident, $req:expr) => {{
        let node: &crate::server::node::NodeRef = $node;
        let target: u32 = $target;
        let req = $req;
        if target == node.id {
            node.clone().$local(req).await
        } else {
            match node.peers.get(target as usize) {
                None => Err(crate::server::node::Fail::Errno(libc::EIO)),
                Some(conn) => {
                    // A replicated group without a leader for a moment (an election)
                    // is waited for, up to the peer timeout: every peer call is
                    // idempotent.
                    let until = std::time::Instant::now() + node.peer_timeout;
                    loop {
                        let (at, mut c) = conn.peer();
                        let mut r = tonic::Request::new(req.clone());
                        r.set_timeout(node.peer_timeout);
                        match c.$method(r).await {
                            Ok(rep) => {
                                let rep = rep.into_inner();
                                break match crate::server::node::Fail::from_status(
                                    crate::server::peer::Reply::status(&rep),
                                ) {
                                    Some(f) => Err(f),
                                    None => Ok(rep),
                                };
                            }
                            Err(s) => {
                                conn.failed(at, &s);
                                if conn.worth_retrying(&s) && std::time::Instant::now() < until {
                                    tokio::time::sleep(crate::server::peer::ELECTION_PAUSE).await;
                                    continue;
                                }
                                break Err(crate::server::node::Fail::Down(format!(
                                    "server {target}: {}",
                                    s.message()
                                )));
                            }
                        }
                    }
                }
            }
        }
    }};
}
pub(crate) use peer_call;

impl Node {
    /// Runs a client's operation `f`, whose store work is short unless it waits for a
    /// sync: under `SyncMode::Never` on the calling worker thread (a hand-off to the
    /// blocking pool and back costs two thread wake-ups, more than the operation), else
    /// on a thread that may block ([`Node::blocking`]), so that workers keep serving
    /// while a group commit's fsync runs.
    pub(crate) async fn op<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Node) -> R<T> + Send + 'static,
    ) -> R<T> {
        match self.sync {
            super::SyncMode::Never => f(self),
            super::SyncMode::Always => self.blocking(f).await,
        }
    }

    /// Runs a client's operation `f` that only reads (a lookup, a getattr) on the
    /// calling worker thread under either sync mode: it never waits for a sync, and a
    /// hand-off to the blocking pool and back costs two thread wake-ups, more than the
    /// read (whose store reads are of the page cache, or a disk read as under
    /// `SyncMode::Never`).
    pub(crate) fn read_op<T>(&self, f: impl FnOnce(&Node) -> R<T>) -> R<T> {
        f(self)
    }

    /// Makes an intent just applied (and everything before it) durable before it is
    /// driven, on a thread that may block: a peer must never learn of a change that
    /// a crash of this server could undo (a permissions version reused after a crash
    /// would leave the peers' copies different for good). Under `SyncMode::Always` the
    /// operation's own sync may have done it; the call then finds nothing to sync
    /// unless other writes came meanwhile.
    pub(crate) async fn intent_durable(self: &Arc<Self>) -> R<()> {
        self.blocking(|n| n.durable()).await
    }

    /// Runs `f` on a thread that may block (store reads, writes and syncs).
    pub(crate) async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Node) -> R<T> + Send + 'static,
    ) -> R<T> {
        let n = self.clone();
        if self.inline_store {
            // The simulation: store calls run in the task (deterministic order).
            return f(&n);
        }
        // The thread works in the term of the task that hands it the work.
        let term = super::term::bound_term();
        // And in its lease scope (its changes' revocations are waited for by it).
        let scope = super::grants::current();
        match tokio::task::spawn_blocking(move || {
            super::grants::with_thread_scope(scope, || {
                super::term::with_thread_term(term, || f(&n))
            })
        })
        .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::error!("blocking task failed: {e}");
                errno(libc::EIO)
            }
        }
    }

    /// The header of a call for intent `k`, on behalf of `cred`.
    pub(crate) fn ph(
        &self,
        k: IntentKey,
        cred: Option<(&Cred, bool)>,
    ) -> Option<proto::PeerHeader> {
        Some(proto::PeerHeader {
            cluster_id: self.cluster_id,
            from: self.id,
            intent: Some(proto::IntentId {
                server: k.0,
                id: k.1,
            }),
            cred: cred.map(|(c, _)| cred_msg(c)),
            no_checks: cred.is_some_and(|(_, checks)| !checks),
            term: super::term::bound_term().unwrap_or_else(|| self.leading_term()),
            // Its own leases are not revoked for its own change, here or there.
            client: super::grants::current().map_or(0, |s| s.client()),
        })
    }

    // ---- participant side -----------------------------------------------------------

    /// Makes the directory of a coordinator's mkdir intent (same intent, same
    /// directory), with its partition 0 here (its home).
    pub(crate) async fn p_make_dir(
        self: Arc<Self>,
        r: proto::MakeDirReq,
    ) -> R<proto::MakeDirReply> {
        let k = intent_of(r.h.as_ref())?;
        self.blocking(move |n| {
            let mk = memo_key(k.0, k.1);
            let mut m = n.state();
            if let Some(memo) = n.get::<proto::MemoRow>(&mk)? {
                tracing::debug!(server = n.id, "make dir of {k:?}: {:#x} again", memo.ino);
                let i = n.inode_or_enoent(memo.ino)?;
                return Ok(proto::MakeDirReply {
                    status: None,
                    attr: Some(attr_msg(&n.attr_of(&m, memo.ino, &i))),
                });
            }
            let ino = n.alloc_ino()?;
            let row = proto::InodeRow {
                mode: libc::S_IFDIR | (r.mode & 0o7777),
                uid: r.uid,
                gid: r.gid,
                nlink: 2,
                atime: r.time,
                mtime: r.time,
                ctime: r.time,
                parent: r.parent,
                perms_version: 1,
                ..Default::default()
            };
            let part = Part::new(0, PART_ACTIVE, 0);
            let mut b = Batch::new();
            b.put(&inode_key(ino), &row);
            b.put(&partition_key(ino, 0), &part.row());
            b.put_raw(&link_key(ino, r.parent, &r.name), &[]);
            b.put(
                &mk,
                &proto::MemoRow {
                    ino,
                    created_ms: now_ms(),
                },
            );
            n.apply(b)?;
            tracing::debug!(
                server = n.id,
                "make dir of {k:?}: {ino:#x} for {:#x}/{:?} (term {:?})",
                r.parent,
                String::from_utf8_lossy(&r.name),
                r.h.as_ref().map(|h| h.term)
            );
            m.parts.insert(ino, 0, part);
            drop(m);
            n.durable()?;
            n.point("makedir:after-write")?;
            Ok(proto::MakeDirReply {
                status: None,
                attr: Some(attr_msg(&row_attr(ino, &row))),
            })
        })
        .await
    }

    /// Forgets the memo of a finished mkdir intent.
    pub(crate) async fn p_forget_memo(self: Arc<Self>, r: proto::IntentRef) -> R<proto::PeerReply> {
        let k = intent_of(r.h.as_ref())?;
        self.blocking(move |n| {
            tracing::debug!(server = n.id, "forget memo of {k:?}");
            let mut b = Batch::new();
            b.delete(&memo_key(k.0, k.1));
            n.apply(b)?;
            Ok(proto::PeerReply::default())
        })
        .await
    }

    /// Adds a link row (a coordinator's link intent).
    pub(crate) async fn p_add_link(self: Arc<Self>, r: proto::LinkRef) -> R<proto::AttrReply> {
        self.blocking(move |n| {
            let m = n.state();
            let mut b = Batch::new();
            let a = n.add_link_in(&mut b, r.ino, r.dir, &r.name, r.time)?;
            n.apply(b)?;
            drop(m);
            n.durable()?;
            n.point("addlink:after-write")?;
            Ok(proto::AttrReply {
                status: None,
                attr: Some(attr_msg(&a)),
                lease_ms: 0,
            })
        })
        .await
    }

    /// Drops a link row.
    pub(crate) async fn p_drop_link(self: Arc<Self>, r: proto::LinkRef) -> R<proto::PeerReply> {
        self.blocking(move |n| {
            let m = n.state();
            let mut b = Batch::new();
            n.drop_link_in(&m, &mut b, r.ino, r.dir, &r.name, r.time)?;
            n.apply(b)?;
            drop(m);
            n.durable()?;
            Ok(proto::PeerReply::default())
        })
        .await
    }

    /// Moves a link row (a rename).
    pub(crate) async fn p_move_link(self: Arc<Self>, r: proto::MoveLinkReq) -> R<proto::PeerReply> {
        self.blocking(move |n| {
            let m = n.state();
            let mut b = Batch::new();
            n.move_link_in(&mut b, &r)?;
            tracing::debug!(
                server = n.id,
                intent = ?intent_of(r.h.as_ref()).ok(),
                "move link {:#x}: {:#x} -> {:#x}",
                r.ino,
                r.old_dir,
                r.new_dir
            );
            n.apply(b)?;
            drop(m);
            n.durable()?;
            Ok(proto::PeerReply::default())
        })
        .await
    }

    /// Adds or removes a subdirectory row.
    pub(crate) async fn p_subdir(self: Arc<Self>, r: proto::SubdirReq) -> R<proto::PeerReply> {
        self.blocking(move |n| {
            let mut m = n.state();
            let mut b = Batch::new();
            n.subdir_in(&mut m, &mut b, &r)?;
            tracing::debug!(
                server = n.id,
                intent = ?intent_of(r.h.as_ref()).ok(),
                "subdir {:#x} -> {:#x} add={}",
                r.dir,
                r.child,
                r.add
            );
            n.apply(b)?;
            drop(m);
            n.durable()?;
            Ok(proto::PeerReply::default())
        })
        .await
    }

    /// Prepares the removal of directory `r.dir` here: if its partitions here hold no
    /// entry and nothing else holds them, marks them removing (creates wait).
    pub(crate) async fn p_prepare_rmdir(
        self: Arc<Self>,
        r: proto::RmdirReq,
    ) -> R<proto::PrepareRmdirReply> {
        let k = intent_of(r.h.as_ref())?;
        self.blocking(move |n| {
            let dir = r.dir;
            let mut m = n.state();
            let mut rep = proto::PrepareRmdirReply::default();
            if m.parts.of_dir(dir).next().is_none() {
                return Ok(rep);
            }
            if m.parts
                .of_dir(dir)
                .any(|(_, p)| p.splitting || p.removing.is_some_and(|o| o != k))
            {
                return Err(Fail::Busy);
            }
            let split_pending = m
                .intents
                .any(|i| matches!(&i.op, Some(Op::Split(s)) if s.dir == dir));
            if split_pending || m.names.any_of_dir(dir) {
                return Err(Fail::Busy);
            }
            // Emptiness from the rows themselves, not the counts.
            let any = n.scan(&entry_prefix(dir), None, 1)?;
            rep.entries = if any.is_empty() {
                0
            } else {
                m.parts
                    .of_dir(dir)
                    .map(|(_, p)| p.entries)
                    .sum::<u64>()
                    .max(1)
            };
            if let Some(p0) = m.parts.get(dir, 0) {
                rep.holds_zero = true;
                rep.depth_zero = p0.depth;
            }
            if rep.entries == 0 {
                let mut b = Batch::new();
                for (i, p) in m.parts.of_dir_mut(dir) {
                    p.removing = Some(k);
                    b.put(&partition_key(dir, i), &p.row());
                }
                if let Err(e) = n.apply(b) {
                    for (_, p) in m.parts.of_dir_mut(dir) {
                        p.removing = None;
                    }
                    return Err(e);
                }
                drop(m);
                n.durable()?;
                n.point("prepare-rmdir:after-write")?;
            }
            Ok(rep)
        })
        .await
    }

    /// Removes directory `r.dir` here: its partitions, its permissions copy, and at its
    /// home its inode and link row.
    pub(crate) async fn p_commit_rmdir(self: Arc<Self>, r: proto::RmdirReq) -> R<proto::PeerReply> {
        self.blocking(move |n| {
            let dir = r.dir;
            tracing::debug!(server = n.id, "commit of rmdir of {dir:#x}");
            let mut m = n.state();
            let mut b = Batch::new();
            for i in m.parts.indexes(dir) {
                b.delete(&partition_key(dir, i));
            }
            for (k, _) in n.scan(&entry_prefix(dir), None, usize::MAX)? {
                tracing::error!("rmdir of {dir:#x}: an entry was left: deleting it");
                b.delete(&k);
            }
            b.delete(&perms_key(dir));
            tracing::debug!(
                server = n.id,
                intent = ?intent_of(r.h.as_ref()).ok(),
                "commit rmdir {dir:#x}"
            );
            if home_of(dir) == n.id {
                if let Some(i) = n.inode(dir)? {
                    n.free_rows(&mut b, dir, &i)?;
                }
                for (k, _) in n.scan(&ino_prefix(TAG_LINK, dir), None, usize::MAX)? {
                    b.delete(&k);
                }
                for (k, _) in n.scan(&ino_prefix(TAG_SUBDIR, dir), None, usize::MAX)? {
                    b.delete(&k);
                }
            }
            n.apply(b)?;
            m.parts.remove_dir(dir);
            m.times.forget(dir);
            drop(m);
            n.durable()?;
            Ok(proto::PeerReply::default())
        })
        .await
    }

    /// Undoes a prepared removal of `r.dir` (for the same intent).
    pub(crate) async fn p_abort_rmdir(self: Arc<Self>, r: proto::RmdirReq) -> R<proto::PeerReply> {
        let k = intent_of(r.h.as_ref())?;
        self.blocking(move |n| {
            let dir = r.dir;
            let mut m = n.state();
            let mut b = Batch::new();
            let mut changed = Vec::new();
            for (i, p) in m.parts.of_dir_mut(dir) {
                if p.removing == Some(k) {
                    p.removing = None;
                    b.put(&partition_key(dir, i), &p.row());
                    changed.push(i);
                }
            }
            if changed.is_empty() {
                return Ok(proto::PeerReply::default());
            }
            if let Err(e) = n.apply(b) {
                for i in changed {
                    if let Some(p) = m.parts.get_mut(dir, i) {
                        p.removing = Some(k);
                    }
                }
                return Err(e);
            }
            drop(m);
            n.durable()?;
            Ok(proto::PeerReply::default())
        })
        .await
    }

    /// Prepares a rename's destination name here: checks it (permissions, replace
    /// rules), holds it, and records that durably.
    pub(crate) async fn p_prepare_rename(
        self: Arc<Self>,
        r: proto::RenamePrepareReq,
    ) -> R<proto::RenamePrepareReply> {
        let k = intent_of(r.h.as_ref())?;
        let (cred, checks) = cred_of(r.h.as_ref());
        self.blocking(move |n| {
            let mut m = n.state();
            let pk = prepared_key(k.0, k.1);
            if let Some(p) = n.get::<proto::PreparedRow>(&pk)? {
                tracing::debug!(server = n.id, "prepare of rename {k:?}: asked again");
                // Asked again: the same answer.
                let d = n.dir_perms(p.new_dir)?;
                return Ok(proto::RenamePrepareReply {
                    status: None,
                    target_ino: p.target_ino,
                    target_kind: p.target_kind,
                    dir_mode: d.mode,
                    dir_uid: d.uid,
                });
            }
            rules::check_name(&r.new_name)?;
            let (tino, tkind, d) = n.dest_check(
                &m,
                checks,
                &cred,
                r.new_dir,
                &r.new_name,
                r.flags,
                (r.ino, r.kind),
                None,
            )?;
            tracing::debug!(
                server = n.id,
                "prepare of rename {k:?}: {:?} (target {tino:#x})",
                r.new_name
            );
            if tino == r.ino {
                // The same inode: nothing to do, nothing held.
                return Ok(proto::RenamePrepareReply {
                    status: None,
                    target_ino: tino,
                    target_kind: tkind,
                    dir_mode: d.mode,
                    dir_uid: d.uid,
                });
            }
            let row = proto::PreparedRow {
                state: IntentState::Prepared as i32,
                created_ms: now_ms(),
                new_dir: r.new_dir,
                new_name: r.new_name.clone(),
                flags: r.flags,
                ino: r.ino,
                kind: r.kind,
                target_ino: tino,
                target_kind: tkind,
            };
            m.names.reserve(k, &[(r.new_dir, r.new_name.clone())])?;
            let mut b = Batch::new();
            b.put(&pk, &row);
            if let Err(e) = n.apply(b) {
                m.names.release(k);
                return Err(e);
            }
            drop(m);
            n.durable()?;
            n.point("prepare-rename:after-write")?;
            Ok(proto::RenamePrepareReply {
                status: None,
                target_ino: tino,
                target_kind: tkind,
                dir_mode: d.mode,
                dir_uid: d.uid,
            })
        })
        .await
    }

    /// Writes a prepared rename's destination entry (the name stays held until the
    /// coordinator releases it).
    pub(crate) async fn p_commit_rename(
        self: Arc<Self>,
        r: proto::IntentRef,
    ) -> R<proto::PeerReply> {
        let k = intent_of(r.h.as_ref())?;
        self.blocking(move |n| {
            let pk = prepared_key(k.0, k.1);
            let mut m = n.state();
            let Some(mut p) = n.get::<proto::PreparedRow>(&pk)? else {
                tracing::debug!(server = n.id, "commit of rename {k:?}: nothing prepared");
                return Ok(proto::PeerReply::default());
            };
            if p.state() == IntentState::Committed {
                tracing::debug!(server = n.id, "commit of rename {k:?}: committed before");
                return Ok(proto::PeerReply::default());
            }
            tracing::debug!(server = n.id, "commit of rename {k:?}: {:?}", p.new_name);
            let idx = n.writable_part(&m, p.new_dir, &p.new_name, Some(k))?;
            let ek = entry_key(p.new_dir, &p.new_name);
            let existed = n.contains(&ek);
            let mut b = Batch::new();
            b.put(
                &ek,
                &proto::EntryRow {
                    ino: p.ino,
                    kind: p.kind,
                    token: 0,
                },
            );
            if !existed {
                n.count_entry(&mut m, &mut b, p.new_dir, idx, true);
            }
            p.set_state(IntentState::Committed);
            b.put(&pk, &p);
            n.apply(b)?;
            n.touch_dir(&mut m, p.new_dir, cairn_fs::now_ns());
            drop(m);
            n.durable()?;
            Ok(proto::PeerReply::default())
        })
        .await
    }

    /// Releases a committed rename's destination name.
    pub(crate) async fn p_release_rename(
        self: Arc<Self>,
        r: proto::IntentRef,
    ) -> R<proto::PeerReply> {
        let k = intent_of(r.h.as_ref())?;
        self.blocking(move |n| {
            let pk = prepared_key(k.0, k.1);
            let mut m = n.state();
            tracing::debug!(server = n.id, "release of rename {k:?}");
            if n.contains(&pk) {
                let mut b = Batch::new();
                b.delete(&pk);
                n.apply(b)?;
            }
            m.names.release(k);
            drop(m);
            n.durable()?;
            n.point("release-rename:after-write")?;
            Ok(proto::PeerReply::default())
        })
        .await
    }

    /// Drops a prepared (not committed) rename's destination.
    pub(crate) async fn p_abort_rename(
        self: Arc<Self>,
        r: proto::IntentRef,
    ) -> R<proto::PeerReply> {
        let k = intent_of(r.h.as_ref())?;
        self.blocking(move |n| {
            let pk = prepared_key(k.0, k.1);
            let mut m = n.state();
            tracing::debug!(server = n.id, "abort of rename {k:?}");
            match n.get::<proto::PreparedRow>(&pk)? {
                None => {}
                Some(p) if p.state() == IntentState::Committed => {
                    tracing::error!("abort of committed rename {k:?} refused");
                    return errno(libc::EINVAL);
                }
                Some(_) => {
                    let mut b = Batch::new();
                    b.delete(&pk);
                    n.apply(b)?;
                }
            }
            m.names.release(k);
            drop(m);
            n.durable()?;
            Ok(proto::PeerReply::default())
        })
        .await
    }

    /// Whether an intent this server coordinates still exists.
    pub(crate) async fn p_outcome(self: Arc<Self>, r: proto::IntentRef) -> R<proto::IntentOutcome> {
        let k = intent_of(r.h.as_ref())?;
        if k.0 != self.id {
            return errno(libc::EINVAL);
        }
        let exists = self.state().intents.contains(k.1);
        Ok(proto::IntentOutcome {
            status: None,
            exists,
        })
    }

    /// Replaces the permissions copy of a directory with a newer one.
    pub(crate) async fn p_update_dir_perms(
        self: Arc<Self>,
        r: proto::DirPermsReq,
    ) -> R<proto::PeerReply> {
        self.blocking(move |n| {
            let Some(p) = r.perms else {
                return errno(libc::EINVAL);
            };
            if home_of(r.dir) == n.id {
                return Ok(proto::PeerReply::default());
            }
            let st = n.state();
            n.store_perms(r.dir, &p)?;
            drop(st);
            n.durable()?;
            Ok(proto::PeerReply::default())
        })
        .await
    }

    /// Puts `p` as the permissions copy of `dir` if it is newer than the one kept.
    pub(crate) fn store_perms(&self, dir: u64, p: &proto::DirPerms) -> R<()> {
        let k = perms_key(dir);
        let old = self.get::<proto::DirPerms>(&k)?;
        if old.is_none_or(|o| o.version < p.version) {
            let mut b = Batch::new();
            b.put(&k, p);
            self.apply(b)?;
        }
        Ok(())
    }

    /// Directory times from partitions on other servers.
    pub(crate) async fn p_touch_dirs(self: Arc<Self>, r: proto::TouchReq) -> R<proto::PeerReply> {
        let mut touched = Vec::with_capacity(r.times.len());
        {
            let mut st = self.state();
            for t in r.times {
                if home_of(t.dir) != self.id {
                    continue;
                }
                st.times.merge(true, t.dir, t.mtime, t.ctime);
                touched.push(super::grants::Key::Inode(t.dir));
            }
        }
        // Their attributes changed: kernels that keep them forget them.
        self.grants.changed(touched.into_iter());
        Ok(proto::PeerReply::default())
    }

    /// The cluster's rename lock (server 0): a lease for directory renames across
    /// parents, so that two of them never make a cycle.
    pub(crate) async fn p_rename_lock(self: Arc<Self>, r: proto::LockReq) -> R<proto::LockReply> {
        let k = intent_of(r.h.as_ref())?;
        if self.id != 0 {
            return errno(libc::EINVAL);
        }
        if r.acquire {
            let lease = Duration::from_millis(r.lease_ms.clamp(100, 60_000) as u64);
            let granted = self.rename_lock.acquire(k, lease);
            Ok(proto::LockReply {
                status: None,
                granted,
            })
        } else {
            self.rename_lock.release(k);
            Ok(proto::LockReply {
                status: None,
                granted: true,
            })
        }
    }
}

/// The intent a peer call belongs to (required).
pub(crate) fn intent_of(h: Option<&proto::PeerHeader>) -> R<IntentKey> {
    match h.and_then(|h| h.intent.as_ref()) {
        Some(i) => Ok((i.server, i.id)),
        None => errno(libc::EINVAL),
    }
}

/// The credential and checks flag of a peer call.
pub(crate) fn cred_of(h: Option<&proto::PeerHeader>) -> (Cred, bool) {
    (
        msg_cred(h.and_then(|h| h.cred.as_ref())),
        !h.is_some_and(|h| h.no_checks),
    )
}
