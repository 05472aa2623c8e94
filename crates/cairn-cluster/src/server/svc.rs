//! The gRPC services: checks of every request's header (the cluster file's identity),
//! the run of each request that waits in a task of its own (so that a client going away
//! never cuts an operation in the middle), metrics, and the mapping of results to
//! replies.

use std::future::Future;
use std::task::Poll;
use std::time::Instant;

use tonic::{Request, Response, Status, Streaming};

use cairn_fs::{Cred, SetAttr, TimeSet};

use super::grants::{Key, Scope};
use super::intent::Driving;
use super::names::{LinkStep, UnlinkStep};
use super::node::{errno, Fail, Node, NodeRef, R};
use super::peer::Reply;
use crate::batch::MAX_BATCH;
use crate::convert::{attr_msg, msg_cred};
use crate::proto;
use crate::proto::meta_server::Meta;
use crate::proto::peer_server::Peer;
use crate::tls::{Caller, Callers, Limits};

/// Largest read or write of one request.
pub(crate) const MAX_IO: usize = 8 << 20;

/// The client-facing service.
pub(crate) struct MetaSvc(pub NodeRef);
/// The server-to-server service.
pub(crate) struct PeerSvc(pub NodeRef);

fn mismatch() -> Status {
    Status::failed_precondition(
        "cluster file differs: this server reads another list of servers than the caller",
    )
}

/// The lease session of the client a request comes from (0: none).
fn client_of(h: Option<&proto::Header>) -> u64 {
    h.map_or(0, |h| h.client)
}

/// Runs `fut` in a task of its own, for `client` (0: none; its changes revoke no lease
/// of its own, and its reply waits for the revocations they sent), and maps its
/// outcome to a reply.
async fn run<Rep: Reply + Send + 'static>(
    node: &NodeRef,
    op: &'static str,
    client: u64,
    fut: impl Future<Output = R<Rep>> + Send + 'static,
) -> Result<Response<Rep>, Status> {
    if node.is_crashed() {
        return Err(Status::unavailable("server stopping"));
    }
    // Bound to the term it began in (`super::term`): it changes, calls and settles in
    // that term only.
    let Ok(term) = node.serving_term() else {
        return Err(not_leader(node));
    };
    let start = Instant::now();
    // Polled once here: an operation that never waits (a create under `--sync never`)
    // finishes in that poll, with no task to spawn and wake. One that waits goes on in
    // a task of its own, so that a client going away cannot cut it in the middle (no
    // await lies between the first poll and the spawn).
    let scope = Scope::new(client);
    let mut fut = Box::pin(super::term::in_term(
        term,
        super::grants::in_scope(scope.clone(), fut),
    ));
    let first = std::future::poll_fn(|cx| {
        let poll = std::panic::AssertUnwindSafe(|| fut.as_mut().poll(cx));
        Poll::Ready(std::panic::catch_unwind(poll))
    })
    .await;
    let res = match first {
        Ok(Poll::Ready(r)) => Ok(r),
        Ok(Poll::Pending) => tokio::spawn(fut).await.map_err(|e| e.to_string()),
        Err(_) => Err("the operation panicked".to_string()),
    };
    // A replica's reply waits until what the operation did and saw is committed.
    let res = match res {
        Ok(r)
            if !matches!(r, Err(Fail::Crashed))
                && super::term::in_term(term, node.settle()).await.is_err() =>
        {
            Ok(Err(Fail::NotLeader))
        }
        res => res,
    };
    // Once changed, no client's kernel shows what it replaced (`super::grants`).
    scope.settled(node.grants.grace()).await;
    metrics::counter!("cairn_ops_total", "op" => op).increment(1);
    metrics::histogram!("cairn_op_seconds", "op" => op).record(start.elapsed().as_secs_f64());
    match res {
        Ok(Ok(rep)) => Ok(Response::new(rep)),
        Ok(Err(Fail::Crashed)) => Err(Status::unavailable("server stopping")),
        Ok(Err(Fail::Superseded)) => Err(Status::failed_precondition(
            "the calling server no longer leads its group: a later leader called already",
        )),
        Ok(Err(Fail::NotLeader)) => Err(lost_lead()),
        Ok(Err(f)) => {
            if let Fail::Down(why) = &f {
                tracing::info!(server = node.id, "{op}: {why}");
            }
            let mut r = Rep::default();
            r.set_status(f.to_status());
            Ok(Response::new(r))
        }
        Err(e) => {
            tracing::error!(server = node.id, "{op}: task failed: {e}");
            Err(Status::internal("request task failed"))
        }
    }
}

/// The reply of a replica that lost the lead of its group while a request was being
/// done (UNAVAILABLE without `cairn-leader`): it may or may not have been done.
pub(crate) fn lost_lead() -> Status {
    Status::unavailable(
        "the replica lost the lead of its group during the operation: it may or may not have been done",
    )
}

/// The refusal of a replica that does not lead its group: nothing was done; the
/// metadata `cairn-leader` names the replica it believes leads (empty if it knows
/// none), and tells the client the request may be sent elsewhere as is.
pub(crate) fn not_leader(node: &Node) -> Status {
    let hint = node
        .replica()
        .and_then(|r| r.leader_hint())
        .unwrap_or_default();
    let mut s = Status::unavailable("not the leader of its group");
    if let Ok(v) = hint.parse() {
        s.metadata_mut().insert(crate::NOT_LEADER, v);
    }
    s
}

/// Who sent a request, from its TLS certificate (any party, under `--insecure`); a
/// request whose certificate gives no identity is refused (UNAUTHENTICATED).
pub(crate) fn caller<T>(
    secure: bool,
    callers: &Callers,
    req: &Request<T>,
) -> Result<Caller, Status> {
    if !secure {
        return Ok(Caller::Trusted);
    }
    let certs = req.peer_certs();
    callers
        .of(certs.as_deref().map(Vec::as_slice))
        .map_err(Status::unauthenticated)
}

/// The caller the interceptor recorded (none: a caller allowed no id, whose requests
/// run as nobody), and the message.
fn who<T>(req: Request<T>) -> (Caller, T) {
    let who = req
        .extensions()
        .get::<Caller>()
        .cloned()
        .unwrap_or(Caller::Client(Limits::nothing()));
    (who, req.into_inner())
}

/// Makes `items` (creates, mknods, symlinks; a mkdir is refused with `EINVAL`) in order
/// on the store's thread, with one sync ([`Node::ack`]) for all of them before the
/// reply, and starts the splits they call for: one reply per item. A batch and a group
/// of streamed creates both go through here.
///
/// Bound to the caller's term, or (a stream's group) to the term served now.
pub(crate) async fn make_items(
    n: NodeRef,
    items: Vec<(bool, Cred, proto::MakeReq)>,
) -> R<Vec<proto::EntryReply>> {
    let term = n.task_term()?;
    let client = items
        .first()
        .and_then(|(_, _, it)| it.h.as_ref())
        .map_or(0, |h| h.client);
    let scope = Scope::new(client);
    let grace = n.grants.grace();
    let made = super::term::in_term(
        term,
        super::grants::in_scope(scope.clone(), make_items_in(n, client, items)),
    )
    .await;
    scope.settled(grace).await;
    made
}

async fn make_items_in(
    n: NodeRef,
    client: u64,
    items: Vec<(bool, Cred, proto::MakeReq)>,
) -> R<Vec<proto::EntryReply>> {
    let since = n.grants.epoch();
    let made = n
        .op(move |n| {
            let mut made = Vec::with_capacity(items.len());
            for (checks, cred, r) in items {
                let res = if r.mode & libc::S_IFMT == libc::S_IFDIR {
                    // A directory takes the path across servers: never batched.
                    errno(libc::EINVAL)
                } else {
                    n.make_req(checks, &cred, &r)
                };
                match res {
                    // Lost the lead (or stopping) with items proposed: the group may
                    // or may not have been done, said for all of it (each item's copy
                    // is answered by its token), never as an item's `EIO`.
                    Err(f @ (Fail::Crashed | Fail::NotLeader)) => return Err(f),
                    res => made.push((r.dir, r.name, res)),
                }
            }
            if made.iter().any(|(_, _, r)| r.is_ok()) {
                n.ack()?;
            }
            Ok(made)
        })
        .await?;
    n.settle().await?;
    let mut out = Vec::with_capacity(made.len());
    let mut splits = std::collections::BTreeSet::new();
    for (dir, name, res) in made {
        out.push(match res {
            Ok(m) => {
                if let Some(idx) = m.split {
                    splits.insert((dir, idx));
                }
                proto::EntryReply {
                    opened: m.opened,
                    lease_ms: super::sessions::made_lease(&n, client, dir, name, &m.attr, since),
                    ..entry_reply(&m.attr)
                }
            }
            Err(f) => proto::EntryReply {
                status: Some(f.to_status()),
                ..Default::default()
            },
        });
    }
    for (dir, idx) in splits {
        n.spawn_split(dir, idx);
    }
    Ok(out)
}

/// The credential and checks flag a client's request runs with, once its cluster id is
/// right: the header's, limited by the caller's certificate (see [`Caller::apply`]).
pub(crate) fn header(
    node: &Node,
    who: &Caller,
    h: Option<&proto::Header>,
) -> Result<(bool, Cred), Status> {
    match h {
        Some(h) if h.cluster_id == node.cluster_id => {
            Ok(who.apply(!h.no_checks, msg_cred(h.cred.as_ref())))
        }
        _ => Err(mismatch()),
    }
}

impl MetaSvc {
    /// [`header`] on this service's node.
    fn hdr(&self, who: &Caller, h: Option<&proto::Header>) -> Result<(bool, Cred), Status> {
        header(&self.0, who, h)
    }

    /// Refuses a caller that may not read the server's rows or status.
    fn admin(&self, who: &Caller) -> Result<(), Status> {
        if who.is_admin() {
            Ok(())
        } else {
            Err(Status::permission_denied(
                "reading a server's rows needs a certificate that allows uid 0",
            ))
        }
    }
}

fn timeset(t: Option<&proto::TimeSet>) -> Option<TimeSet> {
    match t?.how? {
        proto::time_set::How::Now(_) => Some(TimeSet::Now),
        proto::time_set::How::At(v) => Some(TimeSet::At(v)),
    }
}

/// The reply to a create, mknod, symlink, mkdir or link that made entry `a`.
fn entry_reply(a: &cairn_fs::Attr) -> proto::EntryReply {
    proto::EntryReply {
        status: None,
        ino: a.ino,
        kind: a.mode & libc::S_IFMT,
        attr: Some(attr_msg(a)),
        opened: false,
        lease_ms: 0,
        empty: None,
    }
}

fn attr_reply(a: cairn_fs::Attr) -> proto::AttrReply {
    proto::AttrReply {
        status: None,
        attr: Some(attr_msg(&a)),
        lease_ms: 0,
    }
}

#[tonic::async_trait]
impl Meta for MetaSvc {
    async fn lookup(
        &self,
        req: Request<proto::LookupReq>,
    ) -> Result<Response<proto::EntryReply>, Status> {
        let (who, r) = who(req);
        let (checks, cred) = self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        let client = client_of(r.h.as_ref());
        run(&self.0, "lookup", client, async move {
            let since = n.grants.epoch();
            let dots = r.name == b"." || r.name == b"..";
            let name = || Key::Name(r.dir, r.name.as_slice().into());
            match n.read_op(|n| n.lookup(checks, &cred, r.dir, &r.name)) {
                Ok(f) => {
                    let mut keys = Vec::with_capacity(2);
                    if !dots {
                        keys.push(name());
                    }
                    if f.attr.is_some() {
                        keys.push(Key::Inode(f.ino));
                    }
                    Ok(proto::EntryReply {
                        status: None,
                        ino: f.ino,
                        kind: f.kind,
                        attr: f.attr.as_ref().map(attr_msg),
                        opened: false,
                        lease_ms: n.grants.grant(client, keys, since),
                        empty: None,
                    })
                }
                // An absent name is leased too (the kernel remembers its absence);
                // in an empty partition, with the directory's listing here.
                Err(Fail::Errno(libc::ENOENT)) if !dots => {
                    // The rows are scanned only where a lease could be granted.
                    let leasing = client != 0 && !n.grants.time().is_zero();
                    let empty = leasing.then(|| n.empty_partition(r.dir, &r.name)).flatten();
                    let mut keys = vec![name()];
                    keys.extend(empty.map(|_| Key::Listing(r.dir)));
                    let lease_ms = n.grants.grant(client, keys, since);
                    Ok(proto::EntryReply {
                        status: Some(Fail::Errno(libc::ENOENT).to_status()),
                        lease_ms,
                        empty: empty
                            .filter(|_| lease_ms > 0)
                            .map(|(index, depth)| proto::EmptyPartition { index, depth }),
                        ..Default::default()
                    })
                }
                Err(f) => Err(f),
            }
        })
        .await
    }

    async fn get_attr(
        &self,
        req: Request<proto::InoReq>,
    ) -> Result<Response<proto::AttrReply>, Status> {
        let (who, r) = who(req);
        self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        let client = client_of(r.h.as_ref());
        run(&self.0, "getattr", client, async move {
            let since = n.grants.epoch();
            let a = n.read_op(|n| n.getattr(r.ino))?;
            Ok(proto::AttrReply {
                lease_ms: n.grants.grant(client, vec![Key::Inode(a.ino)], since),
                ..attr_reply(a)
            })
        })
        .await
    }

    async fn set_attr(
        &self,
        req: Request<proto::SetAttrReq>,
    ) -> Result<Response<proto::AttrReply>, Status> {
        let (who, r) = who(req);
        let (checks, cred) = self.hdr(&who, r.h.as_ref())?;
        let s = SetAttr {
            mode: r.mode,
            uid: r.uid,
            gid: r.gid,
            size: r.size,
            atime: timeset(r.atime.as_ref()),
            mtime: timeset(r.mtime.as_ref()),
        };
        let n = self.0.clone();
        let client = client_of(r.h.as_ref());
        run(&self.0, "setattr", client, async move {
            let since = n.grants.epoch();
            let (a, intent) = n
                .op(move |n| n.setattr_full(checks, &cred, r.ino, &s, r.token))
                .await?;
            if let Some(id) = intent {
                n.intent_durable().await?;
                n.drive_now(id).await;
            }
            // The caller's client keeps the attributes it made (leased as a stat's).
            let lease_ms = n.grants.grant(client, vec![Key::Inode(a.ino)], since);
            Ok(proto::AttrReply {
                lease_ms,
                ..attr_reply(a)
            })
        })
        .await
    }

    async fn make(
        &self,
        req: Request<proto::MakeReq>,
    ) -> Result<Response<proto::EntryReply>, Status> {
        let (who, r) = who(req);
        let (checks, cred) = self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        let op = if r.mode & libc::S_IFMT == libc::S_IFDIR {
            "mkdir"
        } else {
            "create"
        };
        let client = client_of(r.h.as_ref());
        run(&self.0, op, client, async move {
            let since = n.grants.epoch();
            let (dir, name) = (r.dir, r.name.clone());
            let a = if r.mode & libc::S_IFMT == libc::S_IFDIR {
                n.mkdir(checks, cred, r.dir, r.name, r.mode, r.token)
                    .await?
            } else {
                let m = n
                    .op(move |n| {
                        let m = n.make_req(checks, &cred, &r)?;
                        n.ack()?;
                        Ok(m)
                    })
                    .await?;
                if let Some(idx) = m.split {
                    n.spawn_split(dir, idx);
                }
                return Ok(proto::EntryReply {
                    opened: m.opened,
                    lease_ms: super::sessions::made_lease(&n, client, dir, name, &m.attr, since),
                    ..entry_reply(&m.attr)
                });
            };
            Ok(proto::EntryReply {
                lease_ms: super::sessions::made_lease(&n, client, dir, name, &a, since),
                ..entry_reply(&a)
            })
        })
        .await
    }

    async fn make_batch(
        &self,
        req: Request<proto::MakeBatchReq>,
    ) -> Result<Response<proto::MakeBatchReply>, Status> {
        let (who, r) = who(req);
        if r.items.len() > MAX_BATCH {
            return Err(Status::invalid_argument(format!(
                "a batch of {} creates; at most {MAX_BATCH}",
                r.items.len()
            )));
        }
        let mut items = Vec::with_capacity(r.items.len());
        for it in r.items {
            let (checks, cred) = self.hdr(&who, it.h.as_ref())?;
            items.push((checks, cred, it));
        }
        let count = items.len() as u64;
        let client = items
            .first()
            .and_then(|(_, _, it)| it.h.as_ref())
            .map_or(0, |h| h.client);
        let n = self.0.clone();
        let rep = run(&self.0, "make_batch", client, async move {
            Ok(proto::MakeBatchReply {
                status: None,
                items: make_items(n, items).await?,
            })
        })
        .await;
        metrics::counter!("cairn_ops_total", "op" => "create").increment(count);
        rep
    }

    type MakeStreamStream = super::stream::Replies;

    async fn make_stream(
        &self,
        req: Request<Streaming<proto::StreamedMake>>,
    ) -> Result<Response<Self::MakeStreamStream>, Status> {
        if self.0.is_crashed() {
            return Err(Status::unavailable("server stopping"));
        }
        if self.0.without_streams() {
            return Err(Status::unimplemented("MakeStream is not served here"));
        }
        if self.0.serving().is_err() {
            return Err(not_leader(&self.0));
        }
        let (who, inbound) = who(req);
        Ok(Response::new(super::stream::serve(
            self.0.clone(),
            who,
            inbound,
        )))
    }

    async fn link(
        &self,
        req: Request<proto::LinkReq>,
    ) -> Result<Response<proto::EntryReply>, Status> {
        let (who, r) = who(req);
        let (checks, cred) = self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        run(&self.0, "link", client_of(r.h.as_ref()), async move {
            let (dir, name) = (r.dir, r.name.clone());
            let (step, split) = n
                .op(move |n| n.link_local(checks, &cred, r.ino, r.dir, &r.name, r.token))
                .await?;
            if let Some(idx) = split {
                n.spawn_split(dir, idx);
            }
            let a = match step {
                LinkStep::Done(a) => a,
                LinkStep::Answered => n.attr_anywhere(r.ino).await?,
                LinkStep::Remote(id) => {
                    let _g = Driving::adopt(&n, id);
                    n.intent_durable().await?;
                    n.point("link:after-intent")?;
                    n.drive_link(id).await?
                }
            };
            let _ = name;
            Ok(entry_reply(&a))
        })
        .await
    }

    async fn remove(
        &self,
        req: Request<proto::RemoveReq>,
    ) -> Result<Response<proto::Empty>, Status> {
        let (who, r) = who(req);
        let (checks, cred) = self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        let op = if r.rmdir { "rmdir" } else { "unlink" };
        run(&self.0, op, client_of(r.h.as_ref()), async move {
            if r.rmdir {
                n.rmdir(checks, cred, r.dir, r.name, r.token).await?;
                return Ok(proto::Empty::default());
            }
            let mut owner = None;
            for _ in 0..3 {
                let name = r.name.clone();
                let step = n
                    .op(move |n| n.unlink_local(checks, &cred, r.dir, &name, owner, r.token))
                    .await?;
                match step {
                    UnlinkStep::Done(None) => return Ok(proto::Empty::default()),
                    UnlinkStep::Done(Some(id)) => {
                        let _g = Driving::adopt(&n, id);
                        n.intent_durable().await?;
                        n.point("unlink:after-commit")?;
                        if let Err(e) = n.run_followups(id).await {
                            tracing::info!(server = n.id, "unlink {id}: follow-ups later: {e:?}");
                        }
                        return Ok(proto::Empty::default());
                    }
                    UnlinkStep::NeedOwner(ino) => {
                        let a = n.attr_anywhere(ino).await?;
                        owner = Some((ino, a.uid));
                    }
                }
            }
            Err(Fail::Busy)
        })
        .await
    }

    async fn rename(
        &self,
        req: Request<proto::RenameReq>,
    ) -> Result<Response<proto::Empty>, Status> {
        let (who, r) = who(req);
        let (checks, cred) = self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        run(&self.0, "rename", client_of(r.h.as_ref()), async move {
            n.rename(
                checks, cred, r.dir, r.name, r.new_dir, r.new_name, r.flags, r.token,
            )
            .await?;
            Ok(proto::Empty::default())
        })
        .await
    }

    async fn open_dir(
        &self,
        req: Request<proto::InoReq>,
    ) -> Result<Response<proto::Empty>, Status> {
        let (who, r) = who(req);
        let (checks, cred) = self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        run(&self.0, "opendir", client_of(r.h.as_ref()), async move {
            n.op(move |n| n.opendir(checks, &cred, r.ino)).await?;
            Ok(proto::Empty::default())
        })
        .await
    }

    async fn read_dir(
        &self,
        req: Request<proto::ReadDirReq>,
    ) -> Result<Response<proto::ReadDirReply>, Status> {
        let (who, r) = who(req);
        let (checks, cred) = self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        let client = client_of(r.h.as_ref());
        run(&self.0, "readdir", client, async move {
            let since = n.grants.epoch();
            let dir = r.dir;
            let mut rep = n.op(move |n| n.readdir(checks, &cred, &r)).await?;
            super::sessions::listing_lease(&n, client, dir, &mut rep, since);
            Ok(rep)
        })
        .await
    }

    async fn parent_of(
        &self,
        req: Request<proto::InoReq>,
    ) -> Result<Response<proto::InoReply>, Status> {
        let (who, r) = who(req);
        self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        run(&self.0, "parent", client_of(r.h.as_ref()), async move {
            let ino = n.op(move |n| n.parent_of(r.ino)).await?;
            Ok(proto::InoReply { status: None, ino })
        })
        .await
    }

    async fn readlink(
        &self,
        req: Request<proto::InoReq>,
    ) -> Result<Response<proto::DataReply>, Status> {
        let (who, r) = who(req);
        self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        run(&self.0, "readlink", client_of(r.h.as_ref()), async move {
            let data = n.op(move |n| n.readlink(r.ino)).await?;
            Ok(proto::DataReply { status: None, data })
        })
        .await
    }

    async fn open(
        &self,
        req: Request<proto::OpenReq>,
    ) -> Result<Response<proto::AttrReply>, Status> {
        let (who, r) = who(req);
        let (checks, cred) = self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        run(&self.0, "open", client_of(r.h.as_ref()), async move {
            n.op(move |n| n.open(checks, &cred, r.ino, r.flags, r.created))
                .await
                .map(attr_reply)
        })
        .await
    }

    async fn release(&self, req: Request<proto::InoReq>) -> Result<Response<proto::Empty>, Status> {
        let (who, r) = who(req);
        let (_, cred) = self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        run(&self.0, "release", client_of(r.h.as_ref()), async move {
            n.op(move |n| n.release(&cred, r.ino)).await?;
            Ok(proto::Empty::default())
        })
        .await
    }

    async fn read(
        &self,
        req: Request<proto::ReadReq>,
    ) -> Result<Response<proto::DataReply>, Status> {
        let (who, r) = who(req);
        let (checks, cred) = self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        run(&self.0, "read", client_of(r.h.as_ref()), async move {
            let size = (r.size as usize).min(MAX_IO);
            let data = n
                .op(move |n| n.read(checks, &cred, r.ino, r.offset, size))
                .await?;
            Ok(proto::DataReply { status: None, data })
        })
        .await
    }

    async fn write(
        &self,
        req: Request<proto::WriteReq>,
    ) -> Result<Response<proto::WriteReply>, Status> {
        let (who, r) = who(req);
        let (checks, cred) = self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        run(&self.0, "write", client_of(r.h.as_ref()), async move {
            if r.data.len() > MAX_IO {
                return errno(libc::EFBIG);
            }
            let written = n
                .op(move |n| n.write(checks, &cred, r.ino, r.offset, &r.data, r.token))
                .await?;
            Ok(proto::WriteReply {
                status: None,
                written,
            })
        })
        .await
    }

    async fn fsync(&self, req: Request<proto::InoReq>) -> Result<Response<proto::Empty>, Status> {
        let (who, r) = who(req);
        self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        run(&self.0, "fsync", client_of(r.h.as_ref()), async move {
            n.blocking(|n| n.fsync()).await?;
            Ok(proto::Empty::default())
        })
        .await
    }

    async fn get_xattr(
        &self,
        req: Request<proto::XattrReq>,
    ) -> Result<Response<proto::DataReply>, Status> {
        let (who, r) = who(req);
        let (checks, cred) = self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        run(&self.0, "getxattr", client_of(r.h.as_ref()), async move {
            let data = n
                .op(move |n| n.getxattr(checks, &cred, r.ino, &r.name))
                .await?;
            Ok(proto::DataReply { status: None, data })
        })
        .await
    }

    async fn set_xattr(
        &self,
        req: Request<proto::XattrReq>,
    ) -> Result<Response<proto::Empty>, Status> {
        let (who, r) = who(req);
        let (checks, cred) = self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        run(&self.0, "setxattr", client_of(r.h.as_ref()), async move {
            let intent = n
                .op(move |n| n.setxattr(checks, &cred, r.ino, &r.name, &r.value, r.flags))
                .await?;
            if let Some(id) = intent {
                n.intent_durable().await?;
                n.drive_now(id).await;
            }
            Ok(proto::Empty::default())
        })
        .await
    }

    async fn list_xattr(
        &self,
        req: Request<proto::InoReq>,
    ) -> Result<Response<proto::XattrListReply>, Status> {
        let (who, r) = who(req);
        let (checks, cred) = self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        run(&self.0, "listxattr", client_of(r.h.as_ref()), async move {
            let names = n.op(move |n| n.listxattr(checks, &cred, r.ino)).await?;
            Ok(proto::XattrListReply {
                status: None,
                names,
            })
        })
        .await
    }

    async fn remove_xattr(
        &self,
        req: Request<proto::XattrReq>,
    ) -> Result<Response<proto::Empty>, Status> {
        let (who, r) = who(req);
        let (checks, cred) = self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        run(
            &self.0,
            "removexattr",
            client_of(r.h.as_ref()),
            async move {
                n.op(move |n| n.removexattr(checks, &cred, r.ino, &r.name))
                    .await?;
                Ok(proto::Empty::default())
            },
        )
        .await
    }

    async fn stat_fs(
        &self,
        req: Request<proto::StatFsReq>,
    ) -> Result<Response<proto::StatFsReply>, Status> {
        let (who, r) = who(req);
        self.hdr(&who, r.h.as_ref())?;
        let n = self.0.clone();
        run(&self.0, "statfs", client_of(r.h.as_ref()), async move {
            n.blocking(|n| n.statfs()).await
        })
        .await
    }

    async fn server_status(
        &self,
        req: Request<proto::ServerStatusReq>,
    ) -> Result<Response<proto::ServerStatusReply>, Status> {
        let (who, r) = who(req);
        self.hdr(&who, r.h.as_ref())?;
        let whole = who.is_admin();
        let n = self.0.clone();
        let rep =
            tokio::spawn(
                async move { n.blocking(move |n| n.status(r.top, whole, r.digest)).await },
            )
            .await
            .map_err(|_| Status::internal("status task failed"))?
            .map_err(|f| Status::internal(format!("status: {f:?}")))?;
        Ok(Response::new(rep))
    }

    async fn dump(
        &self,
        req: Request<proto::DumpReq>,
    ) -> Result<Response<proto::DumpReply>, Status> {
        let (who, r) = who(req);
        self.hdr(&who, r.h.as_ref())?;
        self.admin(&who)?;
        let n = self.0.clone();
        let rep = tokio::spawn(async move {
            n.blocking(move |n| n.dump(&r.after, r.limit as usize))
                .await
        })
        .await
        .map_err(|_| Status::internal("dump task failed"))?
        .map_err(|f| Status::internal(format!("dump: {f:?}")))?;
        Ok(Response::new(rep))
    }

    type LeasesStream = super::sessions::Downs;

    async fn leases(
        &self,
        req: Request<Streaming<proto::LeaseUp>>,
    ) -> Result<Response<Self::LeasesStream>, Status> {
        if self.0.is_crashed() {
            return Err(Status::unavailable("server stopping"));
        }
        if self.0.serving().is_err() {
            return Err(not_leader(&self.0));
        }
        let (who, mut inbound) = who(req);
        let first = inbound
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("a lease session with no first message"))?;
        self.hdr(&who, first.h.as_ref())?;
        let client = client_of(first.h.as_ref());
        super::sessions::start(self.0.clone(), client, first, inbound).map(Response::new)
    }

    async fn change_replicas(
        &self,
        req: Request<proto::ChangeReplicasReq>,
    ) -> Result<Response<proto::ChangeReplicasReply>, Status> {
        let (who, r) = who(req);
        self.hdr(&who, r.h.as_ref())?;
        if !who.is_admin() {
            return Err(Status::permission_denied(
                "changing a group's replicas needs a certificate that allows uid 0",
            ));
        }
        super::replicated::change_replicas(&self.0, r)
            .await
            .map(Response::new)
    }
}

impl PeerSvc {
    /// Checks a peer call's header: the cluster's id, and a sender that is the server
    /// its certificate names (a server may not speak for another).
    fn hdr(&self, who: &Caller, h: Option<&proto::PeerHeader>) -> Result<(), Status> {
        let h = match h {
            Some(h) if h.cluster_id == self.0.cluster_id => h,
            _ => return Err(mismatch()),
        };
        if h.from >= self.0.n {
            return Err(Status::invalid_argument("unknown server id"));
        }
        match who {
            Caller::Trusted => Ok(()),
            Caller::Server(id) if *id == h.from => Ok(()),
            _ => Err(Status::permission_denied(format!(
                "a call as server {} from a certificate that is not server-{}",
                h.from, h.from
            ))),
        }
    }
}

macro_rules! peer_service {
    ($($method:ident($req:ty) -> $rep:ty => $local:ident, $op:literal;)*) => {
        #[tonic::async_trait]
        impl Peer for PeerSvc {
            $(
                async fn $method(&self, req: Request<$req>) -> Result<Response<$rep>, Status> {
                    let (who, r) = who(req);
                    self.hdr(&who, r.h.as_ref())?;
                    let (from, term) = r.h.as_ref().map_or((0, 0), |h| (h.from, h.term));
                    let n = self.0.clone();
                    let client = r.h.as_ref().map_or(0, |h| h.client);
                    run(&self.0, $op, client, async move {
                        let _fence = n.fence_enter(from, term).await?;
                        n.$local(r).await
                    })
                    .await
                }
            )*

            async fn accept_partition(
                &self,
                req: Request<Streaming<proto::PartitionChunk>>,
            ) -> Result<Response<proto::PeerReply>, Status> {
                let (who, mut s) = who(req);
                let mut chunks = Vec::new();
                let mut bytes = 0usize;
                while let Some(c) = s.message().await? {
                    self.hdr(&who, c.h.as_ref())?;
                    bytes += c.entries.iter().map(|e| e.name.len() + 16).sum::<usize>();
                    if bytes > 256 << 20 {
                        return Err(Status::resource_exhausted("partition transfer too large"));
                    }
                    let last = c.last;
                    chunks.push(c);
                    if last {
                        break;
                    }
                }
                let (from, term) = chunks
                    .first()
                    .and_then(|c| c.h.as_ref())
                    .map_or((0, 0), |h| (h.from, h.term));
                let n = self.0.clone();
                run(&self.0, "peer_accept", 0, async move {
                    let _fence = n.fence_enter(from, term).await?;
                    n.p_accept_partition(chunks).await
                })
                .await
            }
        }
    };
}

peer_service! {
    make_dir(proto::MakeDirReq) -> proto::MakeDirReply => p_make_dir, "peer_make_dir";
    forget_memo(proto::IntentRef) -> proto::PeerReply => p_forget_memo, "peer_forget_memo";
    activate_partition(proto::PartitionRef) -> proto::PeerReply => p_activate_partition, "peer_activate";
    add_link(proto::LinkRef) -> proto::AttrReply => p_add_link, "peer_add_link";
    drop_link(proto::LinkRef) -> proto::PeerReply => p_drop_link, "peer_drop_link";
    move_link(proto::MoveLinkReq) -> proto::PeerReply => p_move_link, "peer_move_link";
    subdir(proto::SubdirReq) -> proto::PeerReply => p_subdir, "peer_subdir";
    prepare_rmdir(proto::RmdirReq) -> proto::PrepareRmdirReply => p_prepare_rmdir, "peer_prepare_rmdir";
    commit_rmdir(proto::RmdirReq) -> proto::PeerReply => p_commit_rmdir, "peer_commit_rmdir";
    abort_rmdir(proto::RmdirReq) -> proto::PeerReply => p_abort_rmdir, "peer_abort_rmdir";
    prepare_rename(proto::RenamePrepareReq) -> proto::RenamePrepareReply => p_prepare_rename, "peer_prepare_rename";
    commit_rename(proto::IntentRef) -> proto::PeerReply => p_commit_rename, "peer_commit_rename";
    release_rename(proto::IntentRef) -> proto::PeerReply => p_release_rename, "peer_release_rename";
    abort_rename(proto::IntentRef) -> proto::PeerReply => p_abort_rename, "peer_abort_rename";
    outcome(proto::IntentRef) -> proto::IntentOutcome => p_outcome, "peer_outcome";
    update_dir_perms(proto::DirPermsReq) -> proto::PeerReply => p_update_dir_perms, "peer_dir_perms";
    touch_dirs(proto::TouchReq) -> proto::PeerReply => p_touch_dirs, "peer_touch_dirs";
    rename_lock(proto::LockReq) -> proto::LockReply => p_rename_lock, "peer_rename_lock";
}
