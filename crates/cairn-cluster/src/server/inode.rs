//! Operations on inodes at their home server: attributes, open and release, data
//! (inline or in chunk rows), extended attributes, symbolic links, and the link rows
//! that count hard links (added, dropped and moved by other servers' intents).

use std::collections::BTreeMap;

use cairn_fs::{rules, Attr, Cred, SetAttr, CHUNK_SIZE, INLINE_MAX, XATTR_CREATE, XATTR_REPLACE};

use super::node::{errno, Batch, Fail, Node, R};
use super::state::State;
use crate::convert::{row_attr, set_row_attr};
use crate::giga::home_of;
use crate::proto;
use crate::rows::{
    chunk_key, ino_prefix, inode_key, intent_key, link_key, orphan_key, subdir_key, xattr_key,
    TAG_CHUNK, TAG_XATTR,
};

fn is_dir(i: &proto::InodeRow) -> bool {
    i.mode & libc::S_IFMT == libc::S_IFDIR
}

impl Node {
    /// `ENOENT` unless `ino`'s home is this server.
    pub(crate) fn check_home(&self, ino: u64) -> R<()> {
        if ino == 0 || home_of(ino) != self.id {
            return errno(libc::ENOENT);
        }
        Ok(())
    }

    /// The attributes of `ino`.
    pub(crate) fn getattr(&self, ino: u64) -> R<Attr> {
        self.check_home(ino)?;
        let i = self.inode_or_enoent(ino)?;
        let m = self.state();
        Ok(self.attr_of(&m, ino, &i))
    }

    /// chmod, chown, truncate, utimens (of no client request: no token).
    pub(crate) fn setattr(&self, checks: bool, cred: &Cred, ino: u64, s: &SetAttr) -> R<Attr> {
        let (a, intent) = self.setattr_full(checks, cred, ino, s, 0)?;
        if intent.is_some() {
            self.durable()?;
            // Left to the background runner.
            if let Some(id) = intent {
                self.state().intents.stop_driving(id);
            }
            self.wake_runner();
        }
        Ok(a)
    }

    /// chmod, chown, truncate, utimens. A directory's new permissions are sent to
    /// every other server (their partitions keep a copy) by an intent, returned (its
    /// caller drives it). A copy of request `token` done before (its reply lost) is
    /// answered from the ledger, not done again: with the attributes as they are now,
    /// or as they were after it if the inode is gone since.
    pub(crate) fn setattr_full(
        &self,
        checks: bool,
        cred: &Cred,
        ino: u64,
        s: &SetAttr,
        token: u64,
    ) -> R<(Attr, Option<u64>)> {
        self.check_home(ino)?;
        let mut m = self.state();
        if let Some(then) = self.done_with(&m, token)? {
            let current = self.inode(ino)?.map(|i| self.attr_of(&m, ino, &i));
            return current
                .or(then)
                .map(|a| (a, None))
                .ok_or(Fail::Errno(libc::ENOENT));
        }
        let mut i = self.inode_or_enoent(ino)?;
        self.fold_times(&mut m, ino, &mut i);
        let mut a = row_attr(ino, &i);
        let now = cairn_fs::now_ns();
        rules::apply_setattr(checks, cred, &mut a, s, now)?;
        let mut b = Batch::new();
        if let Some(size) = s.size {
            self.truncate_in(&mut b, ino, &mut i, size)?;
        }
        let perms_changed = is_dir(&i) && (a.mode != i.mode || a.uid != i.uid || a.gid != i.gid);
        let size = i.size;
        set_row_attr(&mut i, &a);
        i.size = size;
        let mut intent = None;
        if perms_changed {
            i.perms_version += 1;
            if self.n > 1 {
                intent = Some(self.perms_intent(&mut m, &mut b, ino, &i)?);
            }
        }
        b.put(&inode_key(ino), &i);
        m.ledger.record_attr(&mut b, token, now, &row_attr(ino, &i));
        if let Err(e) = self.apply(b) {
            if let Some(id) = intent {
                m.intents.discard(id);
            }
            return Err(e);
        }
        let attr = self.attr_of(&m, ino, &i);
        drop(m);
        if intent.is_none() {
            self.ack()?;
        }
        // With an intent, its caller makes it durable ([`Node::intent_durable`])
        // before any peer hears of the new permissions version.
        Ok((attr, intent))
    }

    /// An intent (committed at once) to send directory `dir`'s new permissions to
    /// every other server.
    fn perms_intent(&self, st: &mut State, b: &mut Batch, dir: u64, i: &proto::InodeRow) -> R<u64> {
        let id = self.alloc_intent()?;
        let perms = proto::DirPerms {
            mode: i.mode & 0o7777,
            uid: i.uid,
            gid: i.gid,
            version: i.perms_version,
        };
        let followups = (0..self.n)
            .filter(|&s| s != self.id)
            .map(|s| proto::FollowUp {
                server: s,
                call: Some(proto::follow_up::Call::DirPerms(proto::DirPermsReq {
                    h: None,
                    dir,
                    perms: Some(perms),
                })),
            })
            .collect();
        let mut row = proto::IntentRow::new(
            proto::IntentState::Committed,
            proto::intent_row::Op::DirPerms(proto::DirPermsIntent { dir }),
        );
        row.followups = followups;
        b.put(&intent_key(id), &row);
        st.intents.begin(id, row);
        Ok(id)
    }

    /// Opens `ino` (`open(2)` flags: access checked, `O_TRUNC` applied). `created`:
    /// the caller's own create just made it, and its owner is not checked against its
    /// mode (as `open(2)` with `O_CREAT` does not check a file it created).
    pub(crate) fn open(
        &self,
        checks: bool,
        cred: &Cred,
        ino: u64,
        flags: i32,
        created: bool,
    ) -> R<Attr> {
        self.check_home(ino)?;
        let i = self.inode_or_enoent(ino)?;
        let a = {
            let m = self.state();
            self.attr_of(&m, ino, &i)
        };
        let open_checks = checks && !(created && cred.uid == a.uid);
        let a = if rules::open_check(open_checks, cred, &a, flags)? {
            let s = SetAttr {
                size: Some(0),
                ..Default::default()
            };
            self.setattr(open_checks, cred, ino, &s)?
        } else {
            a
        };
        self.state().opens.add(ino, cred.uid);
        Ok(a)
    }

    /// Closes one open of `ino` made by `cred`'s uid (nothing if it made none); the
    /// last close of an unlinked file frees it.
    pub(crate) fn release(&self, cred: &Cred, ino: u64) -> R<()> {
        self.check_home(ino)?;
        let mut m = self.state();
        if m.opens.remove(ino, cred.uid) {
            if let Some(i) = self.inode(ino)? {
                if i.nlink == 0 && !is_dir(&i) {
                    let mut b = Batch::new();
                    self.free_rows(&mut b, ino, &i)?;
                    b.delete(&orphan_key(ino));
                    self.apply(b)?;
                }
            }
        }
        Ok(())
    }

    /// Deletes an inode's rows: the inode, its chunks, its extended attributes.
    pub(crate) fn free_rows(&self, b: &mut Batch, ino: u64, i: &proto::InodeRow) -> R<()> {
        b.delete(&inode_key(ino));
        for (tag, on) in [(TAG_CHUNK, i.chunked), (TAG_XATTR, i.xattrs)] {
            if !on {
                continue;
            }
            for k in self.keys(&ino_prefix(tag, ino), None)? {
                b.delete(&k);
            }
        }
        Ok(())
    }

    /// The target of symbolic link `ino`.
    pub(crate) fn readlink(&self, ino: u64) -> R<Vec<u8>> {
        self.check_home(ino)?;
        let i = self.inode_or_enoent(ino)?;
        if i.mode & libc::S_IFMT != libc::S_IFLNK {
            return errno(libc::EINVAL);
        }
        Ok(i.data)
    }

    /// The parent of directory `ino`.
    pub(crate) fn parent_of(&self, ino: u64) -> R<u64> {
        self.check_home(ino)?;
        let i = self.inode_or_enoent(ino)?;
        if !is_dir(&i) {
            return errno(libc::ENOTDIR);
        }
        Ok(i.parent)
    }

    /// `EACCES` unless `cred` may read (`MAY_READ`) or write (`MAY_WRITE`) what inode
    /// `i` holds, named by its number ([`rules::check_data_access`]).
    fn data_access(
        &self,
        checks: bool,
        cred: &Cred,
        ino: u64,
        i: &proto::InodeRow,
        mask: u32,
    ) -> R<()> {
        rules::check_data_access(checks, cred, &row_attr(ino, i), mask)?;
        Ok(())
    }

    /// Checks that `cred` may list directory `ino`.
    pub(crate) fn opendir(&self, checks: bool, cred: &Cred, ino: u64) -> R<()> {
        self.check_home(ino)?;
        let i = self.inode_or_enoent(ino)?;
        if !is_dir(&i) {
            return errno(libc::ENOTDIR);
        }
        rules::check_access(checks, cred, &row_attr(ino, &i), rules::MAY_READ)?;
        Ok(())
    }

    /// Sets the access time of `ino` if `relatime` asks (a read of it).
    pub(crate) fn touch_atime(&self, ino: u64) -> R<()> {
        let now = cairn_fs::now_ns();
        let m = self.state();
        let Some(mut i) = self.inode(ino)? else {
            return Ok(());
        };
        if !rules::relatime_due(&self.attr_of(&m, ino, &i), now) {
            return Ok(());
        }
        i.atime = now;
        let mut b = Batch::new();
        b.put(&inode_key(ino), &i);
        self.apply(b)
    }

    fn read_chunk(&self, ino: u64, idx: u64) -> R<Vec<u8>> {
        Ok(self.get_raw(&chunk_key(ino, idx))?.unwrap_or_default())
    }

    /// Up to `size` bytes of `ino` from `offset`, if `cred` may read them.
    pub(crate) fn read(
        &self,
        checks: bool,
        cred: &Cred,
        ino: u64,
        offset: u64,
        size: usize,
    ) -> R<Vec<u8>> {
        self.check_home(ino)?;
        let i = self.inode_or_enoent(ino)?;
        if is_dir(&i) {
            return errno(libc::EISDIR);
        }
        self.data_access(checks, cred, ino, &i, rules::MAY_READ)?;
        {
            let m = self.state();
            if rules::relatime_due(&self.attr_of(&m, ino, &i), cairn_fs::now_ns()) {
                drop(m);
                self.touch_atime(ino)?;
            }
        }
        let end = offset.saturating_add(size as u64).min(i.size);
        if offset >= end {
            return Ok(Vec::new());
        }
        if !i.chunked {
            let e = (end as usize).min(i.data.len());
            let mut v = i.data[(offset as usize).min(e)..e].to_vec();
            v.resize((end - offset) as usize, 0);
            return Ok(v);
        }
        let mut out = vec![0u8; (end - offset) as usize];
        let mut pos = offset;
        while pos < end {
            let idx = pos / CHUNK_SIZE;
            let cstart = idx * CHUNK_SIZE;
            let cend = (cstart + CHUNK_SIZE).min(end);
            let c = self.read_chunk(ino, idx)?;
            let from = (pos - cstart) as usize;
            let to = (cend - cstart) as usize;
            if from < c.len() {
                let n = to.min(c.len());
                let at = (pos - offset) as usize;
                out[at..at + (n - from)].copy_from_slice(&c[from..n]);
            }
            pos = cend;
        }
        Ok(out)
    }

    /// Writes `data` at `offset` of `ino`, if `cred` may; the data, the new size and
    /// the ledger row of request `token` are one batch. A copy of a write done before
    /// (its reply lost) is answered as done and not written again: it could land after
    /// another client's later write to the same bytes.
    pub(crate) fn write(
        &self,
        checks: bool,
        cred: &Cred,
        ino: u64,
        offset: u64,
        data: &[u8],
        token: u64,
    ) -> R<u64> {
        self.check_home(ino)?;
        let mut m = self.state();
        if self.done_before(&m, token)? {
            return Ok(data.len() as u64);
        }
        let mut i = self.inode_or_enoent(ino)?;
        if is_dir(&i) {
            return errno(libc::EISDIR);
        }
        self.data_access(checks, cred, ino, &i, rules::MAY_WRITE)?;
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|e| *e <= i64::MAX as u64)
            .ok_or(Fail::Errno(libc::EFBIG))?;
        let new_size = i.size.max(end);
        let mut b = Batch::new();
        if !i.chunked && new_size <= INLINE_MAX as u64 {
            i.data.resize(new_size as usize, 0);
            i.data[offset as usize..end as usize].copy_from_slice(data);
        } else {
            let mut pending: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
            if !i.chunked {
                if !i.data.is_empty() {
                    pending.insert(0, std::mem::take(&mut i.data));
                }
                i.chunked = true;
            }
            let mut pos = offset;
            while pos < end {
                let idx = pos / CHUNK_SIZE;
                let cstart = idx * CHUNK_SIZE;
                let cend = (cstart + CHUNK_SIZE).min(end);
                let mut c = match pending.remove(&idx) {
                    Some(c) => c,
                    None => self.read_chunk(ino, idx)?,
                };
                let to = (cend - cstart) as usize;
                let from = (pos - cstart) as usize;
                if c.len() < to {
                    c.resize(to, 0);
                }
                c[from..to]
                    .copy_from_slice(&data[(pos - offset) as usize..(cend - offset) as usize]);
                pending.insert(idx, c);
                pos = cend;
            }
            for (idx, c) in pending {
                b.put_raw(&chunk_key(ino, idx), &c);
            }
        }
        let now = cairn_fs::now_ns();
        i.size = new_size;
        i.mtime = now;
        i.ctime = now;
        // Writing clears set-user-id (like the kernel's file_remove_privs).
        i.mode &= !libc::S_ISUID;
        b.put(&inode_key(ino), &i);
        m.ledger.record(&mut b, token, now);
        self.apply(b)?;
        drop(m);
        self.ack()?;
        Ok(data.len() as u64)
    }

    /// Truncates (or extends) the data of `i` to `size`, adding the chunk changes to `b`.
    pub(crate) fn truncate_in(
        &self,
        b: &mut Batch,
        ino: u64,
        i: &mut proto::InodeRow,
        size: u64,
    ) -> R<()> {
        if !i.chunked {
            if size <= INLINE_MAX as u64 {
                i.data.resize(size as usize, 0);
            } else {
                let data = std::mem::take(&mut i.data);
                if !data.is_empty() {
                    b.put_raw(&chunk_key(ino, 0), &data);
                }
                i.chunked = true;
            }
        } else if size == 0 {
            for k in self.keys(&ino_prefix(TAG_CHUNK, ino), None)? {
                b.delete(&k);
            }
            i.chunked = false;
            i.data.clear();
        } else if size < i.size {
            let keep = size.div_ceil(CHUNK_SIZE);
            let after = chunk_key(ino, keep - 1);
            for k in self.keys(&ino_prefix(TAG_CHUNK, ino), Some(&after))? {
                b.delete(&k);
            }
            let last = keep - 1;
            let tail = (size - last * CHUNK_SIZE) as usize;
            let mut c = self.read_chunk(ino, last)?;
            if c.len() > tail {
                c.truncate(tail);
                b.put_raw(&chunk_key(ino, last), &c);
            }
        }
        i.size = size;
        Ok(())
    }

    /// Makes everything durable (the directory times written first).
    pub(crate) fn fsync(&self) -> R<()> {
        self.write_dir_times()?;
        self.durable()
    }

    /// The value of extended attribute `name` of `ino`, if `cred` may read it.
    pub(crate) fn getxattr(&self, checks: bool, cred: &Cred, ino: u64, name: &[u8]) -> R<Vec<u8>> {
        rules::check_xattr_name(name)?;
        self.check_home(ino)?;
        let i = self.inode_or_enoent(ino)?;
        rules::xattr_read_access(checks, cred, &row_attr(ino, &i), name)?;
        self.get_raw(&xattr_key(ino, name))?
            .ok_or(Fail::Errno(libc::ENODATA))
    }

    /// Sets extended attribute `name` of `ino`; returns the intent that sends a
    /// directory's new permissions (an access ACL) to the other servers, if any (its
    /// caller drives it).
    pub(crate) fn setxattr(
        &self,
        checks: bool,
        cred: &Cred,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: u32,
    ) -> R<Option<u64>> {
        rules::check_xattr_name(name)?;
        if value.len() > rules::XATTR_SIZE_MAX {
            return errno(libc::E2BIG);
        }
        self.check_home(ino)?;
        let mut m = self.state();
        let mut i = self.inode_or_enoent(ino)?;
        rules::xattr_access(checks, cred, &row_attr(ino, &i), name)?;
        let k = xattr_key(ino, name);
        let exists = self.contains(&k);
        if flags & XATTR_CREATE != 0 && exists {
            return errno(libc::EEXIST);
        }
        if flags & XATTR_REPLACE != 0 && !exists {
            return errno(libc::ENODATA);
        }
        let mut b = Batch::new();
        let mut store = true;
        let mut perms_changed = false;
        if name == rules::ACL_ACCESS {
            let (mode, minimal) = rules::acl_mode(value)?;
            if checks && cred.uid != 0 && cred.uid != i.uid {
                return errno(libc::EPERM);
            }
            let new_mode = (i.mode & !0o777) | mode;
            perms_changed = is_dir(&i) && new_mode != i.mode;
            i.mode = new_mode;
            if minimal {
                store = false;
                if exists {
                    b.delete(&k);
                }
            }
        }
        if store {
            b.put_raw(&k, value);
            i.xattrs = true;
        }
        self.fold_times(&mut m, ino, &mut i);
        i.ctime = cairn_fs::now_ns();
        let mut intent = None;
        if perms_changed {
            i.perms_version += 1;
            if self.n > 1 {
                intent = Some(self.perms_intent(&mut m, &mut b, ino, &i)?);
            }
        }
        b.put(&inode_key(ino), &i);
        if let Err(e) = self.apply(b) {
            if let Some(id) = intent {
                m.intents.discard(id);
            }
            return Err(e);
        }
        drop(m);
        if intent.is_none() {
            self.ack()?;
        }
        Ok(intent)
    }

    /// The names of the extended attributes of `ino` that `cred` may see
    /// ([`rules::xattr_listed`]); `E2BIG` past [`rules::XATTR_LIST_MAX`] bytes of
    /// them, found without reading more than that.
    pub(crate) fn listxattr(&self, checks: bool, cred: &Cred, ino: u64) -> R<Vec<Vec<u8>>> {
        self.check_home(ino)?;
        self.inode_or_enoent(ino)?;
        let p = ino_prefix(TAG_XATTR, ino);
        let mut names = Vec::new();
        let mut bytes = 0;
        for name in self.suffixes(&p) {
            let name = name?;
            if !rules::xattr_listed(checks, cred, &name) {
                continue;
            }
            bytes += name.len() + 1;
            if bytes > rules::XATTR_LIST_MAX {
                return errno(libc::E2BIG);
            }
            names.push(name);
        }
        Ok(names)
    }

    /// Removes extended attribute `name` of `ino`.
    pub(crate) fn removexattr(&self, checks: bool, cred: &Cred, ino: u64, name: &[u8]) -> R<()> {
        rules::check_xattr_name(name)?;
        self.check_home(ino)?;
        let mut m = self.state();
        let mut i = self.inode_or_enoent(ino)?;
        rules::xattr_access(checks, cred, &row_attr(ino, &i), name)?;
        let k = xattr_key(ino, name);
        if !self.contains(&k) {
            return errno(libc::ENODATA);
        }
        let mut b = Batch::new();
        b.delete(&k);
        self.fold_times(&mut m, ino, &mut i);
        i.ctime = cairn_fs::now_ns();
        b.put(&inode_key(ino), &i);
        self.apply(b)?;
        drop(m);
        self.ack()
    }

    // ---- link rows (calls of other servers' intents, and local ones) ------------------

    /// Adds the link `(dir, name)` to `ino` (idempotent): `ENOENT` if the inode is gone
    /// or unlinked, `EPERM` for a directory, `EMLINK` past 65,000 links.
    pub(crate) fn add_link_in(
        &self,
        b: &mut Batch,
        ino: u64,
        dir: u64,
        name: &[u8],
        now: i64,
    ) -> R<Attr> {
        self.check_home(ino)?;
        let mut i = self.inode_or_enoent(ino)?;
        if is_dir(&i) {
            return errno(libc::EPERM);
        }
        let lk = link_key(ino, dir, name);
        if !self.contains(&lk) {
            if i.nlink == 0 {
                return errno(libc::ENOENT);
            }
            if i.nlink >= 65_000 {
                return errno(libc::EMLINK);
            }
            i.nlink += 1;
            i.ctime = now;
            b.put_raw(&lk, &[]);
            b.put(&inode_key(ino), &i);
        }
        Ok(row_attr(ino, &i))
    }

    /// Drops the link `(dir, name)` of `ino` (idempotent); the inode goes with its last
    /// link, or becomes an orphan if open.
    pub(crate) fn drop_link_in(
        &self,
        st: &State,
        b: &mut Batch,
        ino: u64,
        dir: u64,
        name: &[u8],
        now: i64,
    ) -> R<()> {
        self.check_home(ino)?;
        let lk = link_key(ino, dir, name);
        if !self.contains(&lk) {
            return Ok(());
        }
        b.delete(&lk);
        let Some(mut i) = self.inode(ino)? else {
            return Ok(());
        };
        i.nlink = i.nlink.saturating_sub(1);
        i.ctime = now;
        if i.nlink == 0 {
            if st.opens.is_open(ino) {
                b.put_raw(&orphan_key(ino), &[]);
                b.put(&inode_key(ino), &i);
            } else {
                self.free_rows(b, ino, &i)?;
            }
        } else {
            b.put(&inode_key(ino), &i);
        }
        Ok(())
    }

    /// Moves the link `(old_dir, old_name)` of `ino` to `(new_dir, new_name)` if it is
    /// still there (idempotent); a directory's parent follows.
    pub(crate) fn move_link_in(&self, b: &mut Batch, r: &proto::MoveLinkReq) -> R<()> {
        self.check_home(r.ino)?;
        let old = link_key(r.ino, r.old_dir, &r.old_name);
        if !self.contains(&old) {
            return Ok(());
        }
        b.delete(&old);
        b.put_raw(&link_key(r.ino, r.new_dir, &r.new_name), &[]);
        if let Some(mut i) = self.inode(r.ino)? {
            if is_dir(&i) {
                i.parent = r.new_dir;
            }
            i.ctime = i.ctime.max(r.time);
            b.put(&inode_key(r.ino), &i);
        }
        Ok(())
    }

    /// Adds or removes subdirectory `child` of `dir` (idempotent): a directory's link
    /// count is 2 + its subdirectories.
    pub(crate) fn subdir_in(&self, st: &mut State, b: &mut Batch, r: &proto::SubdirReq) -> R<()> {
        self.check_home(r.dir)?;
        let k = subdir_key(r.dir, r.child);
        let has = self.contains(&k);
        if has == r.add {
            return Ok(());
        }
        let Some(mut i) = self.inode(r.dir)? else {
            return Ok(());
        };
        self.fold_times(st, r.dir, &mut i);
        if r.add {
            b.put_raw(&k, &[]);
            i.nlink += 1;
        } else {
            b.delete(&k);
            i.nlink = i.nlink.saturating_sub(1).max(2);
        }
        b.put(&inode_key(r.dir), &i);
        Ok(())
    }
}
