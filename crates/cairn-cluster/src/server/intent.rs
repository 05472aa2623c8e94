//! Operations that touch two or more servers, coordinated by the server of the first
//! name with a durable intent (`T` row): mkdir (the new directory's home makes it),
//! link and unlink of an inode whose home is elsewhere, rmdir (every server holding a
//! partition of the directory prepares its removal), rename (the destination name's
//! server prepares it), and the push of a directory's new permissions.
//!
//! An intent is *prepared* (names held, nothing visible yet) and then *committed* in
//! one batch with the coordinator's own change of entries; from then on it only rolls
//! forward: its follow-ups (idempotent calls: drop or move a link row, count a
//! subdirectory, write or release a rename's destination, remove a directory's
//! partitions) are made until all succeed, and the intent is deleted. A prepared intent
//! found after a crash is finished (mkdir, link: their next step is idempotent) or
//! undone (rmdir, rename). The names an intent touches stay held until it is deleted,
//! so that no later operation on them can interleave with its follow-ups.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use cairn_fs::{rules, Attr, Cred, ROOT};

use super::intent_rows::kind_name;
use super::names::decode_entry;
use super::node::{errno, Batch, Fail, IntentKey, Node, NodeRef, R};
use super::peer::peer_call;
use super::rename::dir_moves;
use super::state::State;
use crate::convert::{cred_msg, msg_attr};
use crate::giga::{dir_home, home_of};
use crate::proto;
use crate::proto::follow_up::Call;
use crate::proto::intent_row::Op;
use crate::proto::IntentState;
use crate::rows::{entry_key, intent_key};

/// While alive, the holder drives intent `id`; dropped, the intent (if not finished)
/// is left to the background runner.
pub(crate) struct Driving {
    node: NodeRef,
    id: u64,
    /// The term the driving task is bound to (`super::term`), if any.
    term: Option<u64>,
}

impl Driving {
    /// Takes over intent `id`, already marked as driven (by whoever created it).
    pub(crate) fn adopt(node: &NodeRef, id: u64) -> Driving {
        Driving {
            node: node.clone(),
            id,
            term: super::term::bound_term(),
        }
    }
}

impl Drop for Driving {
    fn drop(&mut self) {
        // A task of an ended term leaves the marks of the state rebuilt since alone:
        // the intent may be driven there by the new term's runner.
        if self.term.is_some() && self.node.serving_term().ok() != self.term {
            return;
        }
        let pending = self.node.state().intents.stop_driving(self.id);
        if pending {
            self.node.wake_runner();
        }
    }
}

/// What the local first step of an rmdir found.
pub(crate) enum RmdirStep {
    NeedOwner(u64),
    Intent(u64, u64),
    /// The request was done before (its reply lost).
    Done,
}

/// Whether follow-up `f` releases something another server holds for its intent
/// (after it, the calls before it must not be replayed).
fn releases(f: &proto::FollowUp) -> bool {
    matches!(f.call, Some(Call::ReleaseRename(_)))
}

/// How a mkdir's first step ended.
enum Made {
    /// Its intent, to drive.
    Intent(u64),
    /// The entry was made by an earlier copy of the same request: its inode, and the
    /// attributes it was made with if the ledger keeps them.
    Before(u64, Option<Attr>),
}

impl Node {
    /// The names intent `row` holds on this server.
    pub(crate) fn intent_names(&self, row: &proto::IntentRow) -> Vec<(u64, Vec<u8>)> {
        match &row.op {
            Some(Op::Mkdir(i)) => vec![(i.dir, i.name.clone())],
            Some(Op::Link(i)) => vec![(i.dir, i.name.clone())],
            Some(Op::Unlink(i)) => vec![(i.dir, i.name.clone())],
            Some(Op::Rmdir(i)) => vec![(i.dir, i.name.clone())],
            Some(Op::Rename(i)) => {
                let mut v = vec![(i.dir, i.name.clone())];
                if i.target == self.id {
                    v.push((i.new_dir, i.new_name.clone()));
                }
                v
            }
            Some(Op::Split(_) | Op::DirPerms(_)) | None => Vec::new(),
        }
    }

    pub(crate) fn intent_row(&self, id: u64) -> R<proto::IntentRow> {
        self.state().intents.row(id)
    }

    /// Writes intent `id` anew (a later step's state), durably; `f` refuses a row of
    /// another kind than it changes.
    pub(crate) fn rewrite_intent(
        &self,
        id: u64,
        f: impl FnOnce(&mut proto::IntentRow) -> R<()>,
    ) -> R<()> {
        let mut m = self.state();
        let mut row = m.intents.row(id)?;
        f(&mut row)?;
        let mut b = Batch::new();
        b.put(&intent_key(id), &row);
        self.apply(b)?;
        m.intents.put(id, row);
        drop(m);
        self.durable()
    }

    /// Records a new intent (its names held) and makes it durable.
    pub(crate) fn begin_intent(
        &self,
        st: &mut State,
        row: proto::IntentRow,
        extra: Option<Batch>,
    ) -> R<u64> {
        let id = self.alloc_intent()?;
        let names = self.intent_names(&row);
        st.names.reserve((self.id, id), &names)?;
        let mut b = extra.unwrap_or_default();
        b.put(&intent_key(id), &row);
        if let Err(e) = self.apply(b) {
            st.names.release((self.id, id));
            return Err(e);
        }
        st.intents.begin(id, row);
        Ok(id)
    }

    /// Deletes a finished (or undone) intent and frees its names.
    pub(crate) fn finish_intent(&self, id: u64) -> R<()> {
        let mut m = self.state();
        let mut b = Batch::new();
        b.delete(&intent_key(id));
        self.apply(b)?;
        m.intents.finish(id);
        m.names.release((self.id, id));
        Ok(())
    }

    // ---- remote reads -----------------------------------------------------------------

    /// The attributes of `ino` from its home.
    pub(crate) async fn attr_anywhere(self: &NodeRef, ino: u64) -> R<Attr> {
        let h = home_of(ino);
        if h == self.id {
            return self.blocking(move |n| n.getattr(ino)).await;
        }
        let conn = self
            .peers
            .get(h as usize)
            .ok_or(Fail::Errno(libc::ENOENT))?;
        let (at, mut c) = conn.meta();
        let mut r = tonic::Request::new(proto::InoReq {
            h: Some(self.header()),
            ino,
        });
        r.set_timeout(self.peer_timeout);
        let rep = c
            .get_attr(r)
            .await
            .map_err(|s| {
                conn.failed(at, &s);
                Fail::Down(format!("server {h}: {}", s.message()))
            })?
            .into_inner();
        if let Some(f) = Fail::from_status(rep.status.as_ref()) {
            return Err(f);
        }
        rep.attr
            .as_ref()
            .map(msg_attr)
            .ok_or(Fail::Errno(libc::EIO))
    }

    /// The parent of directory `ino`, from its home.
    async fn parent_anywhere(self: &NodeRef, ino: u64) -> R<u64> {
        let h = home_of(ino);
        if h == self.id {
            return self.blocking(move |n| n.parent_of(ino)).await;
        }
        let conn = self
            .peers
            .get(h as usize)
            .ok_or(Fail::Errno(libc::ENOENT))?;
        let (at, mut c) = conn.meta();
        let mut r = tonic::Request::new(proto::InoReq {
            h: Some(self.header()),
            ino,
        });
        r.set_timeout(self.peer_timeout);
        let rep = c
            .parent_of(r)
            .await
            .map_err(|s| {
                conn.failed(at, &s);
                Fail::Down(format!("server {h}: {}", s.message()))
            })?
            .into_inner();
        if let Some(f) = Fail::from_status(rep.status.as_ref()) {
            return Err(f);
        }
        Ok(rep.ino)
    }

    /// A client header for this server's own requests (as root).
    pub(crate) fn header(&self) -> proto::Header {
        proto::Header {
            cluster_id: self.cluster_id,
            cred: Some(cred_msg(&Cred::ROOT)),
            no_checks: false,
            // On behalf of the client being served, if any (its own leases stay).
            client: super::grants::current().map_or(0, |s| s.client()),
        }
    }

    /// Whether directory `a` is `d` or one of its ancestors (walking parents from `d`
    /// to the root, each at its home).
    pub(crate) async fn is_ancestor(self: &NodeRef, a: u64, d: u64) -> R<bool> {
        let mut cur = d;
        for _ in 0..4096 {
            if cur == a {
                return Ok(true);
            }
            if cur == ROOT {
                return Ok(false);
            }
            cur = self.parent_anywhere(cur).await?;
        }
        errno(libc::ELOOP)
    }

    // ---- follow-ups --------------------------------------------------------------------

    async fn followup(self: &NodeRef, k: IntentKey, f: &proto::FollowUp) -> R<()> {
        let h = self.ph(k, None);
        let s = f.server;
        match f.call.clone() {
            Some(Call::DropLink(mut r)) => {
                r.h = h;
                peer_call!(self, s, drop_link, p_drop_link, r).map(drop)
            }
            Some(Call::MoveLink(mut r)) => {
                r.h = h;
                peer_call!(self, s, move_link, p_move_link, r).map(drop)
            }
            Some(Call::Subdir(mut r)) => {
                r.h = h;
                peer_call!(self, s, subdir, p_subdir, r).map(drop)
            }
            Some(Call::CommitRmdir(mut r)) => {
                r.h = h;
                peer_call!(self, s, commit_rmdir, p_commit_rmdir, r).map(drop)
            }
            Some(Call::CommitRename(mut r)) => {
                r.h = h;
                peer_call!(self, s, commit_rename, p_commit_rename, r).map(drop)
            }
            Some(Call::ReleaseRename(mut r)) => {
                r.h = h;
                peer_call!(self, s, release_rename, p_release_rename, r).map(drop)
            }
            Some(Call::DirPerms(mut r)) => {
                r.h = h;
                peer_call!(self, s, update_dir_perms, p_update_dir_perms, r).map(drop)
            }
            Some(Call::Activate(mut r)) => {
                r.h = h;
                peer_call!(self, s, activate_partition, p_activate_partition, r).map(drop)
            }
            Some(Call::ForgetMemo(mut r)) => {
                r.h = h;
                peer_call!(self, s, forget_memo, p_forget_memo, r).map(drop)
            }
            None => Ok(()),
        }
    }

    /// Makes the follow-up calls of committed intent `id` (in order), then deletes it.
    pub(crate) async fn run_followups(self: &NodeRef, id: u64) -> R<()> {
        let row = self.intent_row(id)?;
        let k = (self.id, id);
        let start = (row.followups_done as usize).min(row.followups.len());
        for (i, f) in row.followups.iter().enumerate().skip(start) {
            if releases(f) && i > start {
                // Once this call is made, the names it releases may change hands: a
                // retry (its reply lost, this server restarted) must not replay the
                // calls before it. Recorded durably before it is sent.
                self.blocking(move |n| n.followups_done(id, i as u32))
                    .await?;
            }
            match self.followup(k, f).await {
                Ok(()) => {}
                Err(Fail::Errno(e)) => {
                    // An idempotent call refused for good (the inode or partition is
                    // gone): nothing is left to do there.
                    tracing::warn!(
                        server = self.id,
                        "{} intent {id}: follow-up on server {}: errno {e}; skipped",
                        kind_name(row.kind()),
                        f.server
                    );
                }
                Err(e) => return Err(e),
            }
        }
        self.point("followups:done")?;
        tracing::debug!(
            server = self.id,
            "{} intent {id}: finished",
            kind_name(row.kind())
        );
        self.blocking(move |n| n.finish_intent(id)).await
    }

    /// Records that the first `done` follow-ups of intent `id` are made (durably).
    fn followups_done(&self, id: u64, done: u32) -> R<()> {
        let mut m = self.state();
        let Some(row) = m.intents.followups_done(id, done) else {
            return errno(libc::EIO);
        };
        let mut b = Batch::new();
        b.put(&intent_key(id), &row);
        self.apply(b)?;
        drop(m);
        self.durable()
    }

    /// Makes the follow-ups of committed intent `id` (created by this request) now,
    /// leaving them to the background runner if a server does not answer.
    pub(crate) async fn drive_now(self: &NodeRef, id: u64) {
        let _g = Driving::adopt(self, id);
        if let Err(e) = self.run_followups(id).await {
            tracing::info!(server = self.id, "intent {id}: follow-ups later: {e:?}");
        }
    }

    /// Drives intent `id` one step further (the background runner, or recovery).
    pub(crate) async fn drive(self: &NodeRef, id: u64) -> R<()> {
        let row = self.intent_row(id)?;
        match (row.state(), &row.op) {
            (IntentState::Committed, Some(Op::Rename(r))) => {
                self.run_followups(id).await?;
                // The cluster's rename lock, if this rename took it (a directory
                // moved across parents), is released now rather than at the end
                // of its lease (releasing a lock held by another is a no-op).
                let (moves, swaps) = dir_moves(r, r.target_kind);
                if moves || swaps {
                    self.rename_lock((self.id, id), false).await;
                }
                Ok(())
            }
            (IntentState::Committed, Some(_)) => self.run_followups(id).await,
            (IntentState::Prepared, Some(Op::Mkdir(_))) => self.drive_mkdir(id).await.map(drop),
            (IntentState::Prepared, Some(Op::Link(_))) => self.drive_link(id).await.map(drop),
            (IntentState::Prepared, Some(Op::Split(_))) => self.split_run(id).await,
            (IntentState::Prepared, Some(Op::Rmdir(_) | Op::Rename(_))) => {
                tracing::info!(
                    server = self.id,
                    "intent {id}: prepared {} undone (token {:#x})",
                    kind_name(row.kind()),
                    row.token
                );
                self.abort_intent(id).await
            }
            // Unlinks and permission pushes are committed when written; a row without
            // a kind or a state was never written by a server.
            (s, _) => {
                tracing::error!(
                    "intent {id}: {} in state {s:?} unknown; dropped",
                    kind_name(row.kind())
                );
                self.blocking(move |n| n.finish_intent(id)).await
            }
        }
    }

    /// Undoes prepared rmdir or rename intent `id` on every server it prepared.
    pub(crate) async fn abort_intent(self: &NodeRef, id: u64) -> R<()> {
        let row = self.intent_row(id)?;
        let k = (self.id, id);
        let mut first_err = None;
        // The rename's destination server (if not this one), the directory whose
        // removal was prepared (if any) and where.
        let (target, removed, prepared_on) = match &row.op {
            Some(Op::Rmdir(i)) => (None, i.ino, &i.prepared_on[..]),
            Some(Op::Rename(i)) => (
                Some(i.target).filter(|&t| t != self.id),
                if i.target_kind == libc::S_IFDIR {
                    i.target_ino
                } else {
                    0
                },
                &i.prepared_on[..],
            ),
            // Nothing another server holds for the other kinds.
            _ => (None, 0, &[][..]),
        };
        if let Some(target) = target {
            let r = proto::IntentRef {
                h: self.ph(k, None),
            };
            if let Err(e) = peer_call!(self, target, abort_rename, p_abort_rename, r) {
                match e {
                    Fail::Errno(_) => tracing::warn!("abort of rename {id}: {e:?}"),
                    e => first_err = Some(e),
                }
            }
        }
        if removed != 0 {
            for &s in prepared_on {
                let r = proto::RmdirReq {
                    h: self.ph(k, None),
                    dir: removed,
                };
                if let Err(e) = peer_call!(self, s, abort_rmdir, p_abort_rmdir, r) {
                    match e {
                        Fail::Errno(_) => tracing::warn!("abort of rmdir {id}: {e:?}"),
                        e => first_err = first_err.or(Some(e)),
                    }
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        if matches!(row.op, Some(Op::Rename(_))) {
            self.rename_lock(k, false).await;
        }
        self.blocking(move |n| n.finish_intent(id)).await
    }

    // ---- mkdir ---------------------------------------------------------------------

    /// If `name` in `dir` exists: the inode of the entry when a create with `token` made
    /// it (the same request sent again after its reply was lost), else `EEXIST`.
    pub(crate) fn made_before(&self, dir: u64, name: &[u8], token: u64) -> R<Option<u64>> {
        let Some(v) = self.get_raw(&entry_key(dir, name))? else {
            return Ok(None);
        };
        let e = crate::server::names::decode_entry(&v)?;
        if token != 0 && e.token == token {
            Ok(Some(e.ino))
        } else {
            errno(libc::EEXIST)
        }
    }

    /// mkdir: an intent here, the directory made at its home, then the entry here.
    pub(crate) async fn mkdir(
        self: &NodeRef,
        checks: bool,
        cred: Cred,
        dir: u64,
        name: Vec<u8>,
        mode: u32,
        token: u64,
    ) -> R<Attr> {
        let id = self
            .blocking(move |n| {
                rules::check_new_name(&name)?;
                let mut m = n.state();
                // Made before, whatever became of the name since (the ledger).
                if let Some(Some(a)) = n.done_with(&m, token)? {
                    return Ok(Made::Before(a.ino, Some(a)));
                }
                n.writable_part(&m, dir, &name, None)?;
                let p = n.dir_perms(dir)?;
                rules::check_access(checks, &cred, &p, rules::MAY_WRITE | rules::MAY_EXEC)?;
                if let Some(ino) = n.made_before(dir, &name, token)? {
                    return Ok(Made::Before(ino, None));
                }
                let (mode, gid) = rules::new_mode_gid(&cred, &p, libc::S_IFDIR | (mode & 0o7777));
                let row = proto::IntentRow::new(
                    IntentState::Prepared,
                    Op::Mkdir(proto::MkdirIntent {
                        dir,
                        name: name.clone(),
                        mode,
                        uid: cred.uid,
                        gid,
                        time: cairn_fs::now_ns(),
                        target: dir_home(dir, &name, n.n),
                        ino: 0,
                        token,
                    }),
                );
                let id = n.begin_intent(&mut m, row, None)?;
                drop(m);
                n.durable()?;
                Ok(Made::Intent(id))
            })
            .await?;
        let id = match id {
            Made::Intent(id) => id,
            // The same mkdir sent again after its reply was lost: made already.
            Made::Before(ino, then) => {
                return match (self.attr_anywhere(ino).await, then) {
                    // Removed since: answered as it was made.
                    (Err(Fail::Errno(libc::ENOENT)), Some(a)) => Ok(a),
                    (r, _) => r,
                };
            }
        };
        let _g = Driving::adopt(self, id);
        self.point("mkdir:after-intent")?;
        self.drive_mkdir(id).await
    }

    /// The rest of a prepared mkdir: make the directory (idempotent), commit the entry,
    /// make the follow-ups.
    pub(crate) async fn drive_mkdir(self: &NodeRef, id: u64) -> R<Attr> {
        let row = self.intent_row(id)?;
        let Some(Op::Mkdir(mk)) = row.op else {
            return errno(libc::EIO);
        };
        let req = proto::MakeDirReq {
            h: self.ph((self.id, id), None),
            parent: mk.dir,
            name: mk.name,
            mode: mk.mode,
            uid: mk.uid,
            gid: mk.gid,
            time: mk.time,
        };
        let rep = peer_call!(self, mk.target, make_dir, p_make_dir, req)?;
        let attr = rep
            .attr
            .as_ref()
            .map(msg_attr)
            .ok_or(Fail::Errno(libc::EIO))?;
        self.point("mkdir:after-makedir")?;
        // The parent's link count is the home's business; the new directory's own is 2.
        let mut attr = attr;
        attr.nlink = 2;
        let made = attr.clone();
        let split = self.blocking(move |n| n.mkdir_commit(id, &made)).await?;
        tracing::debug!(server = self.id, "mkdir {id}: committed {:#x}", attr.ino);
        if let Some((d, i)) = split {
            self.spawn_split(d, i);
        }
        self.point("mkdir:after-commit")?;
        if let Err(e) = self.run_followups(id).await {
            tracing::info!(server = self.id, "mkdir {id}: follow-ups later: {e:?}");
        }
        Ok(attr)
    }

    /// Commits mkdir intent `id`, whose directory (attributes `made`) its home made:
    /// the entry here, the request's ledger row, and the follow-ups (count the
    /// subdirectory at the parent's home, forget the memo at the new home). Returns the
    /// partition to split, if it grew past the threshold.
    fn mkdir_commit(&self, id: u64, made: &Attr) -> R<Option<(u64, u32)>> {
        let ino = made.ino;
        let mut m = self.state();
        let mut row = m.intents.row(id)?;
        // Committed once: a second driver's directory (there is none while one task
        // drives an intent per term) must never replace the entry's.
        if row.state() != IntentState::Prepared {
            return Err(Fail::Busy);
        }
        let Some(Op::Mkdir(mk)) = &mut row.op else {
            return errno(libc::EIO);
        };
        mk.ino = ino;
        let (dir, time, target) = (mk.dir, mk.time, mk.target);
        let ek = entry_key(dir, &mk.name);
        let idx = self.writable_part(&m, dir, &mk.name, Some((self.id, id)))?;
        let mut b = Batch::new();
        b.put(
            &ek,
            &proto::EntryRow {
                ino,
                kind: libc::S_IFDIR,
                token: mk.token,
            },
        );
        self.count_entry(&mut m, &mut b, dir, idx, true);
        m.ledger
            .record_attr(&mut b, mk.token, cairn_fs::now_ns(), made);
        row.set_state(IntentState::Committed);
        row.followups = vec![
            proto::FollowUp {
                server: home_of(dir),
                call: Some(Call::Subdir(proto::SubdirReq {
                    h: None,
                    dir,
                    child: ino,
                    add: true,
                    time,
                })),
            },
            proto::FollowUp {
                server: target,
                call: Some(Call::ForgetMemo(proto::IntentRef { h: None })),
            },
        ];
        b.put(&intent_key(id), &row);
        self.apply(b)?;
        m.intents.put(id, row);
        self.touch_dir(&mut m, dir, time);
        let split = self.wants_split(&m, dir, idx).then_some((dir, idx));
        drop(m);
        self.durable()?;
        Ok(split)
    }

    // ---- link ----------------------------------------------------------------------

    /// The rest of a prepared link: the inode's home adds the link (idempotent), then
    /// the entry is committed; refused by the home (inode gone, a directory), undone.
    pub(crate) async fn drive_link(self: &NodeRef, id: u64) -> R<Attr> {
        let row = self.intent_row(id)?;
        let Some(Op::Link(link)) = row.op.clone() else {
            return errno(libc::EIO);
        };
        let req = proto::LinkRef {
            h: self.ph((self.id, id), None),
            ino: link.ino,
            dir: link.dir,
            name: link.name.clone(),
            time: link.time,
        };
        let rep = match peer_call!(self, home_of(link.ino), add_link, p_add_link, req) {
            Ok(r) => r,
            Err(Fail::Errno(e)) => {
                self.blocking(move |n| n.finish_intent(id)).await?;
                return errno(e);
            }
            Err(e) => return Err(e),
        };
        let attr = rep
            .attr
            .as_ref()
            .map(msg_attr)
            .ok_or(Fail::Errno(libc::EIO))?;
        self.point("link:after-addlink")?;
        let kind = attr.mode & libc::S_IFMT;
        let split = self
            .blocking(move |n| {
                let mut m = n.state();
                if !m.intents.contains(id) {
                    return errno(libc::EIO);
                }
                let idx = n.writable_part(&m, link.dir, &link.name, Some((n.id, id)))?;
                let mut b = Batch::new();
                b.put(
                    &entry_key(link.dir, &link.name),
                    &proto::EntryRow {
                        ino: link.ino,
                        kind,
                        token: 0,
                    },
                );
                n.count_entry(&mut m, &mut b, link.dir, idx, true);
                b.delete(&intent_key(id));
                m.ledger.record(&mut b, row.token, cairn_fs::now_ns());
                n.apply(b)?;
                m.intents.finish(id);
                m.names.release((n.id, id));
                n.touch_dir(&mut m, link.dir, link.time);
                let split = n.wants_split(&m, link.dir, idx).then_some((link.dir, idx));
                drop(m);
                n.durable()?;
                Ok(split)
            })
            .await?;
        if let Some((d, i)) = split {
            self.spawn_split(d, i);
        }
        Ok(attr)
    }

    // ---- rmdir ---------------------------------------------------------------------

    /// rmdir: an intent here; every server holding a partition of the directory
    /// prepares its removal (all empty); the entry goes here; then the partitions and
    /// the inode.
    pub(crate) async fn rmdir(
        self: &NodeRef,
        checks: bool,
        cred: Cred,
        dir: u64,
        name: Vec<u8>,
        token: u64,
    ) -> R<()> {
        rules::check_name(&name)?;
        if name == b"." {
            return errno(libc::EINVAL);
        }
        if name == b".." {
            return errno(libc::ENOTEMPTY);
        }
        let mut owner: Option<(u64, u32)> = None;
        let mut step = None;
        for _ in 0..3 {
            let name = name.clone();
            let s = self
                .blocking(move |n| n.rmdir_begin(checks, &cred, dir, &name, owner, token))
                .await?;
            match s {
                RmdirStep::NeedOwner(ino) => {
                    let a = self.attr_anywhere(ino).await?;
                    owner = Some((ino, a.uid));
                }
                s @ RmdirStep::Intent(..) => {
                    step = Some(s);
                    break;
                }
                RmdirStep::Done => return Ok(()),
            }
        }
        let Some(RmdirStep::Intent(id, child)) = step else {
            return Err(Fail::Busy);
        };
        let _g = Driving::adopt(self, id);
        self.point("rmdir:after-intent")?;
        let participants = match self.prepare_removal(id, child).await {
            Ok(p) => p,
            Err(e) => {
                if let Err(a) = self.abort_intent(id).await {
                    tracing::info!(server = self.id, "rmdir {id}: undone later: {a:?}");
                }
                return Err(e);
            }
        };
        self.point("rmdir:after-prepare")?;
        self.blocking(move |n| n.rmdir_commit(id, child, &participants))
            .await?;
        self.point("rmdir:after-commit")?;
        if let Err(e) = self.run_followups(id).await {
            tracing::info!(server = self.id, "rmdir {id}: follow-ups later: {e:?}");
        }
        Ok(())
    }

    /// Commits rmdir intent `id` of directory `child`, prepared on `participants`: the
    /// entry goes here; the follow-ups remove its partitions and uncount it at its
    /// parent's home.
    fn rmdir_commit(&self, id: u64, child: u64, participants: &[u32]) -> R<()> {
        let mut m = self.state();
        let mut row = m.intents.row(id)?;
        let Some(Op::Rmdir(rm)) = &row.op else {
            return errno(libc::EIO);
        };
        let dir = rm.dir;
        let idx = self.writable_part(&m, dir, &rm.name, Some((self.id, id)))?;
        let mut b = Batch::new();
        b.delete(&entry_key(dir, &rm.name));
        self.count_entry(&mut m, &mut b, dir, idx, false);
        m.ledger.record(&mut b, row.token, cairn_fs::now_ns());
        row.set_state(IntentState::Committed);
        let mut f: Vec<proto::FollowUp> = participants
            .iter()
            .map(|&s| proto::FollowUp {
                server: s,
                call: Some(Call::CommitRmdir(proto::RmdirReq {
                    h: None,
                    dir: child,
                })),
            })
            .collect();
        f.push(proto::FollowUp {
            server: home_of(dir),
            call: Some(Call::Subdir(proto::SubdirReq {
                h: None,
                dir,
                child,
                add: false,
                time: cairn_fs::now_ns(),
            })),
        });
        row.followups = f;
        b.put(&intent_key(id), &row);
        self.apply(b)?;
        m.intents.put(id, row);
        self.touch_dir(&mut m, dir, cairn_fs::now_ns());
        drop(m);
        self.durable()
    }

    fn rmdir_begin(
        &self,
        checks: bool,
        cred: &Cred,
        dir: u64,
        name: &[u8],
        owner: Option<(u64, u32)>,
        token: u64,
    ) -> R<RmdirStep> {
        let mut m = self.state();
        if self.done_before(&m, token)? {
            return Ok(RmdirStep::Done);
        }
        self.writable_part(&m, dir, name, None)?;
        let p = self.dir_perms(dir)?;
        rules::check_access(checks, cred, &p, rules::MAY_WRITE | rules::MAY_EXEC)?;
        let Some(v) = self.get_raw(&entry_key(dir, name))? else {
            return errno(libc::ENOENT);
        };
        let e = decode_entry(&v)?;
        if e.kind != libc::S_IFDIR {
            return errno(libc::ENOTDIR);
        }
        if checks && p.mode & libc::S_ISVTX != 0 && cred.uid != 0 && cred.uid != p.uid {
            let uid = if home_of(e.ino) == self.id {
                self.inode(e.ino)?.map(|i| i.uid)
            } else {
                match owner {
                    Some((ino, uid)) if ino == e.ino => Some(uid),
                    _ => return Ok(RmdirStep::NeedOwner(e.ino)),
                }
            };
            if let Some(uid) = uid {
                rules::check_sticky(checks, cred, &p, uid)?;
            }
        }
        let mut row = proto::IntentRow::new(
            IntentState::Prepared,
            Op::Rmdir(proto::RmdirIntent {
                dir,
                name: name.to_vec(),
                ino: e.ino,
                prepared_on: vec![home_of(e.ino)],
            }),
        );
        row.token = token;
        let id = self.begin_intent(&mut m, row, None)?;
        drop(m);
        self.durable()?;
        Ok(RmdirStep::Intent(id, e.ino))
    }

    /// Prepares the removal of directory `child` for intent `id`: at its home first;
    /// if its partition 0 was ever split, on every server. Returns the servers that
    /// prepared it. `ENOTEMPTY` if any partition holds an entry.
    pub(crate) async fn prepare_removal(self: &NodeRef, id: u64, child: u64) -> R<Vec<u32>> {
        let k = (self.id, id);
        let hc = home_of(child);
        let req = proto::RmdirReq {
            h: self.ph(k, None),
            dir: child,
        };
        let rep = peer_call!(self, hc, prepare_rmdir, p_prepare_rmdir, req)?;
        if rep.entries > 0 {
            return errno(libc::ENOTEMPTY);
        }
        if !rep.holds_zero {
            tracing::error!("rmdir: server {hc} holds no partition 0 of directory {child:#x}");
            return errno(libc::EIO);
        }
        if rep.depth_zero == 0 {
            return Ok(vec![hc]);
        }
        let all: Vec<u32> = (0..self.n).collect();
        let all2 = all.clone();
        self.blocking(move |n| {
            n.rewrite_intent(id, |r| {
                *r.prepared_on_mut()? = all2;
                Ok(())
            })
        })
        .await?;
        let mut tasks = Vec::new();
        for s in all.iter().copied().filter(|&s| s != hc) {
            let node = self.clone();
            let req = proto::RmdirReq {
                h: self.ph(k, None),
                dir: child,
            };
            tasks.push(tokio::spawn(async move {
                peer_call!(&node, s, prepare_rmdir, p_prepare_rmdir, req)
            }));
        }
        let mut err = None;
        let mut nonempty = false;
        for t in tasks {
            match t.await {
                Ok(Ok(rep)) => nonempty |= rep.entries > 0,
                Ok(Err(e)) => err = err.or(Some(e)),
                Err(_) => err = err.or(Some(Fail::Errno(libc::EIO))),
            }
        }
        if nonempty {
            return errno(libc::ENOTEMPTY);
        }
        if let Some(e) = err {
            return Err(e);
        }
        Ok(all)
    }

    // ---- the background runner ---------------------------------------------------------

    /// Drives every unfinished intent not driven by a request, with a growing pause
    /// between attempts of each, until the server stops.
    pub(crate) async fn intent_runner(self: Arc<Self>) {
        loop {
            tokio::select! {
                // Fixed order (no random branch choice): the simulation replays a seed.
                biased;
                _ = self.woken() => {}
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
            if self.is_crashed() {
                return;
            }
            // Driven in the term whose state they were taken from (`super::term`):
            // the role is read before and after, and a state is rebuilt only after
            // the role changed.
            let Ok(term) = self.serving_term() else {
                continue;
            };
            let now = Instant::now();
            let ids = self.state().intents.take_due(now);
            if self.serving_term().ok() != Some(term) {
                continue;
            }
            for id in ids {
                let node = self.clone();
                tokio::spawn(super::term::in_term(term, async move {
                    let g = Driving::adopt(&node, id);
                    let res = node.drive(id).await;
                    let pause = node.state().intents.attempted(id, res.is_err());
                    if let Some(pause) = pause {
                        tracing::debug!(
                            server = node.id,
                            "intent {id}: retry in {pause:?}: {res:?}"
                        );
                    }
                    drop(g);
                }));
            }
        }
    }
}
