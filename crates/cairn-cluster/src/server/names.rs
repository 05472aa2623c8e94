//! Operations on names at the server of their partition: lookup, create (of files,
//! nodes and symbolic links: always local), unlink and link (local when the inode's
//! home is here too, else through an intent), and paged listings of a partition.

use cairn_fs::{rules, Attr, Cred, PATH_MAX};
use prost::Message;

use super::node::{errno, Batch, Fail, Node, R};
use super::state::State;
use crate::convert::{attr_msg, row_attr};
use crate::giga::{home_of, name_hash, rev_range};
use crate::proto;
use crate::proto::intent_row::Op;
use crate::proto::IntentState;
use crate::rows::{
    entry_key, entry_pos_key, entry_prefix, inode_key, intent_key, link_key, prefix_successor,
};

/// Most entries one listing call returns.
pub(crate) const READDIR_MAX: usize = 4096;

/// What a create made.
pub(crate) struct Made {
    /// The new entry's attributes (after the open, when opened).
    pub(crate) attr: Attr,
    /// Its partition should now split (at this index).
    pub(crate) split: Option<u32>,
    /// It was made before: a copy of a create whose reply was lost.
    pub(crate) again: bool,
    /// The create's caller has the file open ([`proto::MakeReq`]'s `open`).
    pub(crate) opened: bool,
}

/// What a lookup found.
pub(crate) struct Found {
    pub ino: u64,
    pub kind: u32,
    /// The inode's attributes, when its home is here.
    pub attr: Option<Attr>,
}

/// What the local part of an unlink did or needs.
pub(crate) enum UnlinkStep {
    /// Done; an intent to finish remotely (the inode's link at its home), if any.
    Done(Option<u64>),
    /// The sticky bit needs the owner of this inode, whose home is elsewhere.
    NeedOwner(u64),
}

/// What the local part of a link did.
pub(crate) enum LinkStep {
    Done(Attr),
    /// The request was done before (its reply lost): answered with the inode's
    /// attributes as they are now.
    Answered,
    /// An intent was prepared: the inode's home must add the link.
    Remote(u64),
}

pub(crate) fn decode_entry(v: &[u8]) -> R<proto::EntryRow> {
    proto::EntryRow::decode(v).map_err(|e| {
        tracing::error!("damaged entry row: {e}");
        Fail::Errno(libc::EIO)
    })
}

impl Node {
    /// `ino`'s attributes if its home is here.
    fn local_attr(&self, st: &State, ino: u64) -> R<Option<Attr>> {
        if home_of(ino) != self.id {
            return Ok(None);
        }
        Ok(self.inode(ino)?.map(|i| self.attr_of(st, ino, &i)))
    }

    /// The entry `name` of `dir` (search permission on `dir` needed). "." and ".." are
    /// answered by the directory's home.
    pub(crate) fn lookup(&self, checks: bool, cred: &Cred, dir: u64, name: &[u8]) -> R<Found> {
        if name == b"." || name == b".." {
            self.check_home(dir)?;
            let i = self.inode_or_enoent(dir)?;
            if i.mode & libc::S_IFMT != libc::S_IFDIR {
                return errno(libc::ENOTDIR);
            }
            let m = self.state();
            let a = self.attr_of(&m, dir, &i);
            rules::check_access(checks, cred, &a, rules::MAY_EXEC)?;
            if name == b"." {
                return Ok(Found {
                    ino: dir,
                    kind: libc::S_IFDIR,
                    attr: Some(a),
                });
            }
            let attr = self.local_attr(&m, i.parent)?;
            return Ok(Found {
                ino: i.parent,
                kind: libc::S_IFDIR,
                attr,
            });
        }
        let m = self.state();
        self.locate(&m, dir, name_hash(name))?;
        let p = self.dir_perms(dir)?;
        rules::check_access(checks, cred, &p, rules::MAY_EXEC)?;
        rules::check_name(name)?;
        let Some(v) = self.get_raw(&entry_key(dir, name))? else {
            return errno(libc::ENOENT);
        };
        let e = decode_entry(&v)?;
        let attr = self.local_attr(&m, e.ino)?;
        Ok(Found {
            ino: e.ino,
            kind: e.kind,
            attr,
        })
    }

    /// The partition of `dir` that holds `name` here, as (index, depth), if it has no
    /// entries: every name it covers is absent.
    pub(crate) fn empty_partition(&self, dir: u64, name: &[u8]) -> Option<(u32, u32)> {
        use std::ops::Bound;
        let m = self.state();
        let idx = self.locate(&m, dir, name_hash(name)).ok()?;
        let depth = m.parts.get(dir, idx)?.depth;
        // The rows say, not the partition's count (kept for splits, not exact).
        let (lo, hi) = rev_range(idx, depth);
        let mut last = entry_prefix(dir);
        last.extend_from_slice(&hi.to_be_bytes());
        let end = prefix_successor(&last).map_or(Bound::Unbounded, Bound::Excluded);
        let first = entry_pos_key(dir, lo, b"");
        match self.rows((Bound::Included(first), end)).next() {
            None => Some((idx, depth)),
            Some(_) => None,
        }
    }

    /// The create of request `r` ([`Node::make_applied`], so not synced yet); with
    /// `r.open` the new file is opened too, as [`Node::open`] with `created` opens it.
    /// A create sent again is not opened again (its first copy was), and is answered as
    /// open. An open that fails leaves the file made and unopened: the reply says so,
    /// and the client's `Open` then meets the error.
    pub(crate) fn make_req(&self, checks: bool, cred: &Cred, r: &proto::MakeReq) -> R<Made> {
        let mut made = self.make_applied(
            checks, cred, r.dir, &r.name, r.mode, r.rdev, &r.target, r.token,
        )?;
        if r.open && made.attr.mode & libc::S_IFMT == libc::S_IFREG {
            if made.again {
                made.opened = true;
            } else {
                match self.open(checks, cred, made.attr.ino, r.open_flags, true) {
                    Ok(a) => {
                        made.attr = a;
                        made.opened = true;
                    }
                    Err(Fail::Crashed) => return Err(Fail::Crashed),
                    Err(_) => {}
                }
            }
        }
        Ok(made)
    }

    /// Creates a file, node or symbolic link `name` in `dir` (type in `mode`; a
    /// directory goes through [`Node::mkdir`]), without the sync of `SyncMode::Always`:
    /// the caller makes it durable ([`Node::ack`]) before it replies (a batch syncs once
    /// for all its items).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn make_applied(
        &self,
        checks: bool,
        cred: &Cred,
        dir: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
        target: &[u8],
        token: u64,
    ) -> R<Made> {
        let mode = match mode & libc::S_IFMT {
            libc::S_IFLNK => {
                if target.is_empty() {
                    return errno(libc::ENOENT);
                }
                if target.len() > PATH_MAX {
                    return errno(libc::ENAMETOOLONG);
                }
                libc::S_IFLNK | 0o777
            }
            libc::S_IFDIR => return errno(libc::EINVAL),
            _ => rules::mknod_type(checks, cred, mode)? | (mode & 0o7777),
        };
        rules::check_new_name(name)?;
        let mut m = self.state();
        // Made before (the same create sent again after its reply was lost), whatever
        // became of the name since: answered as made, with the inode as it is now (or
        // as it was made, if gone since).
        if let Some(Some(then)) = self.done_with(&m, token)? {
            let attr = self.local_attr(&m, then.ino)?.unwrap_or(then);
            return Ok(Made {
                attr,
                split: None,
                again: true,
                opened: false,
            });
        }
        let idx = self.writable_part(&m, dir, name, None)?;
        let p = self.dir_perms(dir)?;
        rules::check_access(checks, cred, &p, rules::MAY_WRITE | rules::MAY_EXEC)?;
        let ek = entry_key(dir, name);
        if let Some(ino) = self.made_before(dir, name, token)? {
            // The same create sent again after its reply was lost: made already.
            let attr = self.local_attr(&m, ino)?.ok_or(Fail::Errno(libc::EIO))?;
            return Ok(Made {
                attr,
                split: None,
                again: true,
                opened: false,
            });
        }
        let ino = self.alloc_ino()?;
        let now = cairn_fs::now_ns();
        let (mode, gid) = rules::new_mode_gid(cred, &p, mode);
        let data = if mode & libc::S_IFMT == libc::S_IFLNK {
            target.to_vec()
        } else {
            Vec::new()
        };
        let row = proto::InodeRow {
            mode,
            uid: cred.uid,
            gid,
            size: data.len() as u64,
            nlink: 1,
            rdev: if mode & libc::S_IFMT == libc::S_IFCHR || mode & libc::S_IFMT == libc::S_IFBLK {
                rdev
            } else {
                0
            },
            atime: now,
            mtime: now,
            ctime: now,
            data,
            ..Default::default()
        };
        let mut b = Batch::new();
        b.put(
            &ek,
            &proto::EntryRow {
                ino,
                kind: mode & libc::S_IFMT,
                token,
            },
        );
        b.put(&inode_key(ino), &row);
        b.put_raw(&link_key(ino, dir, name), &[]);
        self.count_entry(&mut m, &mut b, dir, idx, true);
        let attr = row_attr(ino, &row);
        m.ledger.record_attr(&mut b, token, now, &attr);
        self.apply(b)?;
        self.touch_dir(&mut m, dir, now);
        let split = self.wants_split(&m, dir, idx).then_some(idx);
        Ok(Made {
            attr,
            split,
            again: false,
            opened: false,
        })
    }

    /// The local part of unlink: removes the entry; the link at the inode's home goes
    /// in the same batch if that is here, else through an intent (returned).
    pub(crate) fn unlink_local(
        &self,
        checks: bool,
        cred: &Cred,
        dir: u64,
        name: &[u8],
        owner: Option<(u64, u32)>,
        token: u64,
    ) -> R<UnlinkStep> {
        rules::check_name(name)?;
        let mut m = self.state();
        if self.done_before(&m, token)? {
            return Ok(UnlinkStep::Done(None));
        }
        let idx = self.writable_part(&m, dir, name, None)?;
        let p = self.dir_perms(dir)?;
        rules::check_access(checks, cred, &p, rules::MAY_WRITE | rules::MAY_EXEC)?;
        let ek = entry_key(dir, name);
        let Some(v) = self.get_raw(&ek)? else {
            return errno(libc::ENOENT);
        };
        let e = decode_entry(&v)?;
        if e.kind == libc::S_IFDIR {
            return errno(libc::EISDIR);
        }
        let local = home_of(e.ino) == self.id;
        if checks && p.mode & libc::S_ISVTX != 0 && cred.uid != 0 && cred.uid != p.uid {
            let uid = if local {
                self.inode(e.ino)?.map(|i| i.uid)
            } else {
                match owner {
                    Some((ino, uid)) if ino == e.ino => Some(uid),
                    _ => return Ok(UnlinkStep::NeedOwner(e.ino)),
                }
            };
            if let Some(uid) = uid {
                rules::check_sticky(checks, cred, &p, uid)?;
            }
        }
        let now = cairn_fs::now_ns();
        let mut b = Batch::new();
        b.delete(&ek);
        self.count_entry(&mut m, &mut b, dir, idx, false);
        m.ledger.record(&mut b, token, now);
        let intent = if local {
            self.drop_link_in(&m, &mut b, e.ino, dir, name, now)?;
            None
        } else {
            let id = self.alloc_intent()?;
            let mut row = proto::IntentRow::new(
                IntentState::Committed,
                Op::Unlink(proto::UnlinkIntent {
                    dir,
                    name: name.to_vec(),
                    ino: e.ino,
                }),
            );
            row.token = token;
            row.followups = vec![proto::FollowUp {
                server: home_of(e.ino),
                call: Some(proto::follow_up::Call::DropLink(proto::LinkRef {
                    h: None,
                    ino: e.ino,
                    dir,
                    name: name.to_vec(),
                    time: now,
                })),
            }];
            b.put(&intent_key(id), &row);
            Some((id, row))
        };
        // What the server keeps in memory changes only once the rows are written (a
        // task of an ended term is refused here, and must leave the state rebuilt for
        // the new term alone).
        self.apply(b)?;
        let intent = match intent {
            Some((id, row)) => {
                // Free: `writable_part` found no holder under this lock.
                m.names.reserve((self.id, id), &[(dir, name.to_vec())])?;
                m.intents.begin(id, row);
                Some(id)
            }
            None => None,
        };
        self.touch_dir(&mut m, dir, now);
        drop(m);
        if intent.is_none() {
            self.ack()?;
        }
        // With an intent, its caller makes it durable ([`Node::intent_durable`], off
        // the async workers) before the follow-ups.
        Ok(UnlinkStep::Done(intent))
    }

    /// The local part of link: adds the entry, in one batch with the link row if the
    /// inode's home is here; else prepares an intent for the home to add the link.
    pub(crate) fn link_local(
        &self,
        checks: bool,
        cred: &Cred,
        ino: u64,
        dir: u64,
        name: &[u8],
        token: u64,
    ) -> R<(LinkStep, Option<u32>)> {
        rules::check_new_name(name)?;
        if ino == 0 || home_of(ino) >= self.n {
            return errno(libc::ENOENT);
        }
        let mut m = self.state();
        if self.done_before(&m, token)? {
            return Ok((LinkStep::Answered, None));
        }
        let idx = self.writable_part(&m, dir, name, None)?;
        let p = self.dir_perms(dir)?;
        rules::check_access(checks, cred, &p, rules::MAY_WRITE | rules::MAY_EXEC)?;
        let ek = entry_key(dir, name);
        if self.contains(&ek) {
            return errno(libc::EEXIST);
        }
        let now = cairn_fs::now_ns();
        if home_of(ino) == self.id {
            let mut b = Batch::new();
            let a = self.add_link_in(&mut b, ino, dir, name, now)?;
            b.put(
                &ek,
                &proto::EntryRow {
                    ino,
                    kind: a.mode & libc::S_IFMT,
                    token: 0,
                },
            );
            self.count_entry(&mut m, &mut b, dir, idx, true);
            m.ledger.record(&mut b, token, now);
            self.apply(b)?;
            self.touch_dir(&mut m, dir, now);
            let split = self.wants_split(&m, dir, idx).then_some(idx);
            drop(m);
            self.ack()?;
            return Ok((LinkStep::Done(a), split));
        }
        let id = self.alloc_intent()?;
        let mut row = proto::IntentRow::new(
            IntentState::Prepared,
            Op::Link(proto::LinkIntent {
                dir,
                name: name.to_vec(),
                ino,
                time: now,
            }),
        );
        row.token = token;
        m.names.reserve((self.id, id), &[(dir, name.to_vec())])?;
        let mut b = Batch::new();
        b.put(&intent_key(id), &row);
        m.intents.begin(id, row);
        if let Err(e) = self.apply(b) {
            m.names.release((self.id, id));
            m.intents.discard(id);
            return Err(e);
        }
        // Its caller makes the intent durable ([`Node::intent_durable`]) before it
        // is driven.
        Ok((LinkStep::Remote(id), None))
    }

    /// Entries of the partition holding key position `(after_rev, after_name)` of
    /// `dir`, after it, at most `limit`; with the partition and its depth, and whether
    /// it has no more. `cred` needs read permission on `dir`, or to own it
    /// ([`rules::check_data_access`], against this server's copy of its permissions).
    /// With `r.plus`, each entry whose inode's home is here carries its attributes,
    /// for a caller who may also search `dir` (as its lookups would need; the reply's
    /// `plus` says so).
    pub(crate) fn readdir(
        &self,
        checks: bool,
        cred: &Cred,
        r: &proto::ReadDirReq,
    ) -> R<proto::ReadDirReply> {
        let (dir, after_rev, after_name) = (r.dir, r.after_rev, r.after_name.as_slice());
        if after_name.len() > cairn_fs::NAME_MAX {
            return errno(libc::EINVAL);
        }
        let perms = self.dir_perms(dir)?;
        rules::check_data_access(checks, cred, &perms, rules::MAY_READ)?;
        let plus = r.plus && rules::check_access(checks, cred, &perms, rules::MAY_EXEC).is_ok();
        let limit = (r.limit as usize).clamp(1, READDIR_MAX);
        let m = self.state();
        let idx = self.locate(&m, dir, after_rev.reverse_bits())?;
        let depth = m.parts.get(dir, idx).ok_or(Fail::Busy)?.depth;
        let (lo, hi) = rev_range(idx, depth);
        let start = entry_pos_key(dir, after_rev, after_name);
        let mut end_prefix = entry_prefix(dir);
        end_prefix.extend_from_slice(&hi.to_be_bytes());
        let end = prefix_successor(&end_prefix);
        let mut rows = Vec::with_capacity(limit.min(256));
        {
            use std::ops::Bound;
            let hi_b = end.map_or(Bound::Unbounded, Bound::Excluded);
            for r in self.rows((Bound::Excluded(start), hi_b)) {
                rows.push(r?);
                if rows.len() > limit {
                    break;
                }
            }
        }
        drop(m);
        let done = rows.len() <= limit;
        // Every name of the partition: from its start (no name sorts before `lo` and
        // the empty name) to its end.
        let whole = plus && done && after_rev == lo && after_name.is_empty();
        rows.truncate(limit);
        let mut entries = Vec::with_capacity(rows.len());
        let plen = entry_prefix(dir).len() + 8;
        for (k, v) in rows {
            let e = decode_entry(&v)?;
            let attr = match plus {
                true => self
                    .local_attr(&self.state(), e.ino)?
                    .as_ref()
                    .map(attr_msg),
                false => None,
            };
            entries.push(proto::DirEntry {
                name: k[plen..].to_vec(),
                ino: e.ino,
                kind: e.kind,
                token: 0,
                attr,
            });
        }
        if r.from_start && home_of(dir) == self.id {
            self.touch_atime(dir)?;
        }
        Ok(proto::ReadDirReply {
            status: None,
            entries,
            depth,
            done,
            partition: idx,
            lease_ms: 0,
            plus,
            listing: whole,
        })
    }
}
