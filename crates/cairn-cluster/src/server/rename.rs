//! rename across servers (see DESIGN.md, "Cluster"): in one local batch when both names
//! are here, else as an intent coordinated by the source name's server (prepared at the
//! destination's server, committed here, finished by follow-ups), and the cluster's
//! rename lock for directories moved across parents.

use std::time::Duration;

use cairn_fs::{rules, Attr, Cred, RENAME_EXCHANGE, RENAME_NOREPLACE};

use super::intent::Driving;
use super::names::decode_entry;
use super::node::{errno, Batch, Fail, IntentKey, Node, NodeRef, R};
use super::peer::peer_call;
use super::state::State;
use crate::giga::{home_of, name_hash, server_of};
use crate::proto;
use crate::proto::follow_up::Call;
use crate::proto::intent_row::Op;
use crate::proto::IntentState;
use crate::rows::{entry_key, intent_key};

/// What the local first step of a rename found.
pub(crate) enum RenameStep {
    /// Done in one local batch (or nothing to do).
    Done,
    /// The owner of this inode (elsewhere) is needed for the sticky-bit rule.
    NeedOwner(u64),
    /// An intent was prepared.
    Intent(u64),
}

/// How often (and how long) a coordinator asks for the rename lock.
const LOCK_TRIES: u32 = 100;
const LOCK_LEASE_MS: u32 = 10_000;

/// Whether rename `row` moves a directory to another parent, and whether it
/// swaps one there (an exchange whose destination, of kind `tkind`, is a directory):
/// either takes the cluster's rename lock.
pub(crate) fn dir_moves(row: &proto::RenameIntent, tkind: u32) -> (bool, bool) {
    let across = row.dir != row.new_dir;
    let exchange = row.flags & RENAME_EXCHANGE != 0;
    (
        across && row.kind_bits == libc::S_IFDIR,
        across && exchange && tkind == libc::S_IFDIR,
    )
}

impl Node {
    /// Asks (or returns) the cluster's rename lock for intent `k`.
    pub(crate) async fn rename_lock(self: &NodeRef, k: IntentKey, acquire: bool) -> bool {
        let tries = if acquire { LOCK_TRIES } else { 1 };
        for _ in 0..tries {
            let req = proto::LockReq {
                h: self.ph(k, None),
                acquire,
                lease_ms: LOCK_LEASE_MS,
            };
            match peer_call!(self, 0, rename_lock, p_rename_lock, req) {
                Ok(r) if r.granted => return true,
                Ok(_) => {}
                Err(e) => {
                    tracing::info!("rename lock: {e:?}");
                    if !acquire {
                        return false;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// The checks of a rename's destination `(dd, d)` held here: writable, permitted,
    /// and the replace rules. Returns the entry there (0 if none) and the directory's
    /// permissions.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn dest_check(
        &self,
        m: &State,
        checks: bool,
        cred: &Cred,
        dd: u64,
        d: &[u8],
        flags: u32,
        src: (u64, u32),
        mine: Option<IntentKey>,
    ) -> R<(u64, u32, Attr)> {
        self.writable_part(m, dd, d, mine)?;
        let dp = self.dir_perms(dd)?;
        rules::check_access(checks, cred, &dp, rules::MAY_WRITE | rules::MAY_EXEC)?;
        let target = match self.get_raw(&entry_key(dd, d))? {
            Some(v) => Some(decode_entry(&v)?),
            None => None,
        };
        let exchange = flags & RENAME_EXCHANGE != 0;
        match target {
            None if exchange => errno(libc::ENOENT),
            None => Ok((0, 0, dp)),
            Some(_) if !exchange && flags & RENAME_NOREPLACE != 0 => errno(libc::EEXIST),
            Some(t) if t.ino == src.0 => Ok((t.ino, t.kind, dp)),
            Some(t) => {
                if !exchange {
                    let sdir = src.1 == libc::S_IFDIR;
                    let tdir = t.kind == libc::S_IFDIR;
                    if sdir && !tdir {
                        return errno(libc::ENOTDIR);
                    }
                    if !sdir && tdir {
                        return errno(libc::EISDIR);
                    }
                }
                Ok((t.ino, t.kind, dp))
            }
        }
    }

    /// The server of name `d` of directory `dd` by this server's (learnt) bitmap.
    fn route(&self, dd: u64, d: &[u8]) -> u32 {
        let h = name_hash(d);
        let i = self.bitmaps.route(dd, h);
        server_of(home_of(dd), i, self.n)
    }

    /// rename (see DESIGN.md, "Cluster"): in one local batch when everything is here,
    /// else with an intent: the destination's server prepares its name, then the
    /// source entry goes (or changes, for an exchange) here, and the follow-ups write
    /// the destination, move link rows, count subdirectories, and drop what was
    /// replaced. Directory moves across parents hold the cluster's rename lock while
    /// the new parent's ancestors are checked.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn rename(
        self: &NodeRef,
        checks: bool,
        cred: Cred,
        sd: u64,
        s: Vec<u8>,
        dd: u64,
        d: Vec<u8>,
        flags: u32,
        token: u64,
    ) -> R<()> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags == RENAME_NOREPLACE | RENAME_EXCHANGE
        {
            return errno(libc::EINVAL);
        }
        rules::check_name(&s)?;
        rules::check_name(&d)?;
        for n in [&s, &d] {
            if n.as_slice() == b"." || n.as_slice() == b".." {
                return errno(libc::EBUSY);
            }
        }
        let exchange = flags & RENAME_EXCHANGE != 0;
        let mut owner: Option<(u64, u32)> = None;
        let mut id = None;
        for _ in 0..4 {
            let (s2, d2) = (s.clone(), d.clone());
            let step = self
                .blocking(move |n| {
                    n.rename_begin(checks, &cred, sd, &s2, dd, &d2, flags, owner, token)
                })
                .await?;
            match step {
                RenameStep::Done => {
                    tracing::debug!(server = self.id, "rename {token:#x}: done here");
                    return Ok(());
                }
                RenameStep::NeedOwner(ino) => {
                    let a = self.attr_anywhere(ino).await?;
                    owner = Some((ino, a.uid));
                }
                RenameStep::Intent(i) => {
                    tracing::debug!(server = self.id, "rename {token:#x}: intent {i}");
                    id = Some(i);
                    break;
                }
            }
        }
        let Some(id) = id else {
            return Err(Fail::Busy);
        };
        let _g = Driving::adopt(self, id);
        self.point("rename:after-intent")?;
        let k = (self.id, id);
        let mut locked = false;
        let res = self
            .rename_prepare(id, checks, &cred, exchange, &mut locked)
            .await;
        let participants = match res {
            Ok(Some(p)) => p,
            Ok(None) => {
                tracing::debug!(server = self.id, "rename {id}: the same inode");
                // The same inode under both names: nothing to do.
                if let Err(a) = self.abort_intent(id).await {
                    tracing::info!(server = self.id, "rename {id}: undone later: {a:?}");
                }
                if locked {
                    self.rename_lock(k, false).await;
                }
                return Ok(());
            }
            Err(e) => {
                tracing::debug!(server = self.id, "rename {id}: refused: {e:?}");
                if let Err(a) = self.abort_intent(id).await {
                    tracing::info!(server = self.id, "rename {id}: undone later: {a:?}");
                }
                if locked {
                    // Refused (a move into its own subtree): others need not wait
                    // for the lease.
                    self.rename_lock(k, false).await;
                }
                return Err(e);
            }
        };
        self.point("rename:after-prepare")?;
        self.blocking(move |n| n.rename_commit(id, participants))
            .await?;
        tracing::debug!(server = self.id, "rename {id}: committed");
        self.point("rename:after-commit")?;
        match self.run_followups(id).await {
            Ok(()) => {
                if locked {
                    self.rename_lock(k, false).await;
                }
                Ok(())
            }
            Err(e) => {
                tracing::info!(server = self.id, "rename {id}: follow-ups later: {e:?}");
                // Done once its new name is there: if that is on another server,
                // the client asks again and is answered once the intent finished
                // (`Node::seen`).
                let remote = self
                    .state()
                    .intents
                    .row(id)
                    .is_ok_and(|r| super::ledger::commits_remotely(&r));
                if remote {
                    Err(Fail::Busy)
                } else {
                    Ok(())
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn rename_begin(
        &self,
        checks: bool,
        cred: &Cred,
        sd: u64,
        s: &[u8],
        dd: u64,
        d: &[u8],
        flags: u32,
        owner: Option<(u64, u32)>,
        token: u64,
    ) -> R<RenameStep> {
        let exchange = flags & RENAME_EXCHANGE != 0;
        let mut m = self.state();
        if self.done_before(&m, token)? {
            return Ok(RenameStep::Done);
        }
        let i1 = self.writable_part(&m, sd, s, None)?;
        let sp = self.dir_perms(sd)?;
        rules::check_access(checks, cred, &sp, rules::MAY_WRITE | rules::MAY_EXEC)?;
        let Some(v) = self.get_raw(&entry_key(sd, s))? else {
            return errno(libc::ENOENT);
        };
        let src = decode_entry(&v)?;
        let sticky = |dirp: &Attr, ino: u64| -> R<Option<RenameStep>> {
            if !(checks && dirp.mode & libc::S_ISVTX != 0 && cred.uid != 0 && cred.uid != dirp.uid)
            {
                return Ok(None);
            }
            let uid = if home_of(ino) == self.id {
                self.inode(ino)?.map(|i| i.uid)
            } else {
                match owner {
                    Some((o, uid)) if o == ino => Some(uid),
                    _ => return Ok(Some(RenameStep::NeedOwner(ino))),
                }
            };
            if let Some(uid) = uid {
                rules::check_sticky(checks, cred, dirp, uid)?;
            }
            Ok(None)
        };
        if let Some(step) = sticky(&sp, src.ino)? {
            return Ok(step);
        }
        // The server of the destination name: here, or as this server's bitmap of
        // the destination directory says (a redirect of our own teaches it).
        let e2 = match self.locate(&m, dd, name_hash(d)) {
            Ok(_) => self.id,
            Err(Fail::Redirect(dir, parts)) => {
                self.bitmaps.learn(dir, parts);
                self.route(dd, d)
            }
            Err(f) => {
                let r = self.route(dd, d);
                if r == self.id {
                    return Err(f);
                }
                r
            }
        };
        let local = e2 == self.id;
        let mut row = proto::RenameIntent {
            dir: sd,
            name: s.to_vec(),
            ino: src.ino,
            kind_bits: src.kind,
            new_dir: dd,
            new_name: d.to_vec(),
            flags,
            target: e2,
            time: cairn_fs::now_ns(),
            ..Default::default()
        };
        if local {
            let (tino, tkind, dp) =
                self.dest_check(&m, checks, cred, dd, d, flags, (src.ino, src.kind), None)?;
            if tino == src.ino {
                return Ok(RenameStep::Done);
            }
            if tino != 0 {
                if let Some(step) = sticky(&dp, tino)? {
                    return Ok(step);
                }
            }
            row.target_ino = tino;
            row.target_kind = tkind;
            // Everything here, nothing to check elsewhere: one batch.
            let simple = !exchange
                && home_of(src.ino) == self.id
                && (src.kind != libc::S_IFDIR || sd == dd)
                && (tino == 0 || (tkind != libc::S_IFDIR && home_of(tino) == self.id));
            if simple {
                self.rename_in_one_batch(&mut m, &row, i1, token)?;
                drop(m);
                self.ack()?;
                return Ok(RenameStep::Done);
            }
        }
        let mut row = proto::IntentRow::new(IntentState::Prepared, Op::Rename(row));
        row.token = token;
        let id = self.begin_intent(&mut m, row, None)?;
        drop(m);
        self.durable()?;
        Ok(RenameStep::Intent(id))
    }

    /// A rename whose names, its inode and the entry it replaces (not a directory) are
    /// all here: one batch, with the request's ledger row.
    fn rename_in_one_batch(
        &self,
        m: &mut State,
        row: &proto::RenameIntent,
        i1: u32,
        token: u64,
    ) -> R<()> {
        let (sd, dd, now) = (row.dir, row.new_dir, row.time);
        let i2 = self.writable_part(m, dd, &row.new_name, None)?;
        let mut b = Batch::new();
        b.delete(&entry_key(sd, &row.name));
        self.count_entry(m, &mut b, sd, i1, false);
        b.put(
            &entry_key(dd, &row.new_name),
            &proto::EntryRow {
                ino: row.ino,
                kind: row.kind_bits,
                token: 0,
            },
        );
        if row.target_ino == 0 {
            self.count_entry(m, &mut b, dd, i2, true);
        } else {
            self.drop_link_in(m, &mut b, row.target_ino, dd, &row.new_name, now)?;
        }
        self.move_link_in(
            &mut b,
            &proto::MoveLinkReq {
                h: None,
                ino: row.ino,
                old_dir: sd,
                old_name: row.name.clone(),
                new_dir: dd,
                new_name: row.new_name.clone(),
                time: now,
            },
        )?;
        m.ledger.record(&mut b, token, now);
        self.apply(b)?;
        self.touch_dir(m, sd, now);
        self.touch_dir(m, dd, now);
        Ok(())
    }

    /// Prepares rename intent `id` beyond its source: the destination name (at its
    /// server, following redirects), the sticky rule there, the removal of a replaced
    /// directory, and (under the rename lock) that no directory moves into itself.
    /// `None`: both names are the same inode.
    async fn rename_prepare(
        self: &NodeRef,
        id: u64,
        checks: bool,
        cred: &Cred,
        exchange: bool,
        locked: &mut bool,
    ) -> R<Option<Vec<u32>>> {
        let k = (self.id, id);
        let Some(Op::Rename(mut row)) = self.intent_row(id)?.op else {
            return errno(libc::EIO);
        };
        let (tino, tkind, dmode, duid) = if row.target == self.id {
            let (tino, tkind) = (row.target_ino, row.target_kind);
            let dp = self.blocking(move |n| n.dir_perms(row.new_dir)).await?;
            // The sticky rule for a local target was checked in the first step.
            (tino, tkind, 0, dp.uid)
        } else {
            let mut tries = 0;
            loop {
                tries += 1;
                let req = proto::RenamePrepareReq {
                    h: self.ph(k, Some((cred, checks))),
                    new_dir: row.new_dir,
                    new_name: row.new_name.clone(),
                    flags: row.flags,
                    ino: row.ino,
                    kind: row.kind_bits,
                };
                match peer_call!(self, row.target, prepare_rename, p_prepare_rename, req) {
                    Ok(rep) => break (rep.target_ino, rep.target_kind, rep.dir_mode, rep.dir_uid),
                    Err(Fail::Redirect(dir, parts)) if tries < 32 && dir == row.new_dir => {
                        self.bitmaps.learn(dir, parts);
                        let e2 = self.route(row.new_dir, &row.new_name);
                        if e2 == self.id {
                            // Its partition is here after all (a split moved it):
                            // start over.
                            return Err(Fail::Busy);
                        }
                        self.blocking(move |n| {
                            n.rewrite_intent(id, |r| {
                                r.rename_mut()?.target = e2;
                                Ok(())
                            })
                        })
                        .await?;
                        row.target = e2;
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        if tino == row.ino {
            return Ok(None);
        }
        // The sticky bit of the destination directory for a remote target.
        if row.target != self.id
            && tino != 0
            && checks
            && dmode & libc::S_ISVTX != 0
            && cred.uid != 0
            && cred.uid != duid
        {
            let a = self.attr_anywhere(tino).await?;
            rules::check_sticky(
                checks,
                cred,
                &Attr {
                    mode: dmode,
                    uid: duid,
                    ..a.clone()
                },
                a.uid,
            )?;
        }
        let mut participants = Vec::new();
        if !exchange && tkind == libc::S_IFDIR && tino != 0 {
            let hx = home_of(tino);
            self.blocking(move |n| {
                n.rewrite_intent(id, |r| {
                    let r = r.rename_mut()?;
                    r.target_ino = tino;
                    r.target_kind = tkind;
                    r.prepared_on = vec![hx];
                    Ok(())
                })
            })
            .await?;
            participants = self.prepare_removal(id, tino).await?;
        } else if tino != 0 && (row.target_ino != tino || row.target_kind != tkind) {
            self.blocking(move |n| {
                n.rewrite_intent(id, |r| {
                    let r = r.rename_mut()?;
                    r.target_ino = tino;
                    r.target_kind = tkind;
                    Ok(())
                })
            })
            .await?;
        }
        let (sd, dd) = (row.dir, row.new_dir);
        let (moves_dir, swaps_dir) = dir_moves(&row, tkind);
        if moves_dir || swaps_dir {
            if !self.rename_lock(k, true).await {
                return Err(Fail::Busy);
            }
            *locked = true;
            if moves_dir && self.is_ancestor(row.ino, dd).await? {
                return errno(libc::EINVAL);
            }
            if swaps_dir && self.is_ancestor(tino, sd).await? {
                return errno(libc::EINVAL);
            }
        }
        Ok(Some(participants))
    }

    /// Commits rename intent `id`: the source entry here (and the destination, if its
    /// name is here too), and the list of follow-ups.
    fn rename_commit(&self, id: u64, participants: Vec<u32>) -> R<()> {
        let k = (self.id, id);
        let mut m = self.state();
        let mut full = m.intents.row(id)?;
        let Some(Op::Rename(row)) = full.op.clone() else {
            return errno(libc::EIO);
        };
        let exchange = row.flags & RENAME_EXCHANGE != 0;
        let (sd, dd) = (row.dir, row.new_dir);
        let (src, skind) = (row.ino, row.kind_bits);
        let (tino, tkind) = (row.target_ino, row.target_kind);
        let now = cairn_fs::now_ns();
        let i1 = self.writable_part(&m, sd, &row.name, Some(k))?;
        let mut b = Batch::new();
        if exchange {
            b.put(
                &entry_key(sd, &row.name),
                &proto::EntryRow {
                    ino: tino,
                    kind: tkind,
                    token: 0,
                },
            );
        } else {
            b.delete(&entry_key(sd, &row.name));
            self.count_entry(&mut m, &mut b, sd, i1, false);
        }
        let remote = row.target != self.id;
        if !remote {
            let i2 = self.writable_part(&m, dd, &row.new_name, Some(k))?;
            b.put(
                &entry_key(dd, &row.new_name),
                &proto::EntryRow {
                    ino: src,
                    kind: skind,
                    token: 0,
                },
            );
            if tino == 0 {
                self.count_entry(&mut m, &mut b, dd, i2, true);
            }
        }
        let f = rename_followups(&row, &participants, remote, now);
        m.ledger.record(&mut b, full.token, now);
        full.set_state(IntentState::Committed);
        full.followups = f;
        b.put(&intent_key(id), &full);
        self.apply(b)?;
        m.intents.put(id, full);
        self.touch_dir(&mut m, sd, now);
        if !remote {
            self.touch_dir(&mut m, dd, now);
        }
        drop(m);
        self.durable()
    }
}

/// The follow-ups of committed rename intent `row` at time `now` (`remote`: its
/// destination name is on another server; `participants`: the servers holding
/// partitions of a directory it replaces): the destination written and released at its
/// server, link rows moved, subdirectories counted, and what was replaced dropped.
fn rename_followups(
    row: &proto::RenameIntent,
    participants: &[u32],
    remote: bool,
    now: i64,
) -> Vec<proto::FollowUp> {
    let exchange = row.flags & RENAME_EXCHANGE != 0;
    let (sd, dd) = (row.dir, row.new_dir);
    let (src, skind) = (row.ino, row.kind_bits);
    let (tino, tkind) = (row.target_ino, row.target_kind);
    let mut f = Vec::new();
    let call = |server: u32, call: Call| proto::FollowUp {
        server,
        call: Some(call),
    };
    if remote {
        f.push(call(
            row.target,
            Call::CommitRename(proto::IntentRef { h: None }),
        ));
    }
    f.push(call(
        home_of(src),
        Call::MoveLink(proto::MoveLinkReq {
            h: None,
            ino: src,
            old_dir: sd,
            old_name: row.name.clone(),
            new_dir: dd,
            new_name: row.new_name.clone(),
            time: now,
        }),
    ));
    if exchange {
        f.push(call(
            home_of(tino),
            Call::MoveLink(proto::MoveLinkReq {
                h: None,
                ino: tino,
                old_dir: dd,
                old_name: row.new_name.clone(),
                new_dir: sd,
                new_name: row.name.clone(),
                time: now,
            }),
        ));
    }
    let subdir = |dir: u64, child: u64, add: bool| {
        call(
            home_of(dir),
            Call::Subdir(proto::SubdirReq {
                h: None,
                dir,
                child,
                add,
                time: now,
            }),
        )
    };
    if skind == libc::S_IFDIR && sd != dd {
        f.push(subdir(sd, src, false));
        f.push(subdir(dd, src, true));
    }
    if exchange && tkind == libc::S_IFDIR && sd != dd {
        f.push(subdir(dd, tino, false));
        f.push(subdir(sd, tino, true));
    }
    if !exchange && tino != 0 {
        if tkind == libc::S_IFDIR {
            for &s in participants {
                f.push(call(
                    s,
                    Call::CommitRmdir(proto::RmdirReq { h: None, dir: tino }),
                ));
            }
            f.push(subdir(dd, tino, false));
        } else {
            f.push(call(
                home_of(tino),
                Call::DropLink(proto::LinkRef {
                    h: None,
                    ino: tino,
                    dir: dd,
                    name: row.new_name.clone(),
                    time: now,
                }),
            ));
        }
    }
    if remote {
        f.push(call(
            row.target,
            Call::ReleaseRename(proto::IntentRef { h: None }),
        ));
    }
    f
}
