//! The client's [`FileSystem`] operations: each one request or a few, with the leases
//! their answers carry noted for the mount (`super::leases`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

// tokio's clock: real time, or virtual time in the simulation (turmoil pauses it).
use tokio::time::Instant;

use parking_lot::Mutex;

use cairn_fs::{
    rules, Attr, Cred, DirEntry, DirEntryPlus, Errno, FileSystem, FsResult, Invalidator, SetAttr,
    StatFs, TimeSet, Validity,
};

use super::count::Rpc;
use super::leases;
use super::make::What;
use super::{group, Client, IO_CHUNK};
use crate::convert::msg_attr;
use crate::giga::{home_of, name_hash, server_of};
use crate::proto;

/// A lookup's answer that the name is absent: from which server, under what lease, and
/// the empty partition (index, depth) whose listing came with it.
struct Absent {
    server: usize,
    lease_ms: u32,
    empty: Option<(u32, u32)>,
}

/// Attributes a call answered, and how long the kernel may keep them and the entry
/// that led to them.
pub(super) struct Leased {
    pub(super) attr: Attr,
    pub(super) entry: Validity,
    pub(super) attr_v: Validity,
}

impl Leased {
    /// Notes the validities for the mount (on the calling thread) and gives the
    /// attributes.
    pub(super) fn noted(self, dir: u64, name: &[u8]) -> Attr {
        leases::note_entry(dir, name, self.entry);
        leases::note_attr(self.attr.ino, self.attr_v);
        self.attr
    }
}

fn timeset(t: Option<TimeSet>) -> Option<proto::TimeSet> {
    t.map(|t| proto::TimeSet {
        how: Some(match t {
            TimeSet::Now => proto::time_set::How::Now(true),
            TimeSet::At(v) => proto::time_set::How::At(v),
        }),
    })
}

impl Client {
    /// An own change of `keys`: forgotten of what the client keeps once it returned.
    fn own(&self, keys: Vec<leases::Key>) -> leases::OwnChange<'_> {
        self.inner.leases.own_change(keys)
    }

    /// A lookup a server answers (what it leases is kept and noted for the mount).
    fn lookup_asked(&self, cred: &Cred, parent: u64, name: &[u8]) -> FsResult<Attr> {
        let d = self.deadline();
        let req = proto::LookupReq {
            h: self.header(cred),
            dir: parent,
            name: name.to_vec(),
        };
        let since = self.inner.leases.epoch();
        // The lease on an absent name comes with the ENOENT (which `named` keeps).
        let absent: Mutex<Option<Absent>> = Mutex::new(None);
        let (home, n) = (home_of(parent), self.inner.cfg.len());
        let got = self.block_raw(async {
            let (rep, s) = self
                .named(
                    Rpc::Lookup,
                    parent,
                    name_hash(name),
                    true,
                    d,
                    |mut c, t, i| {
                        let mut r = tonic::Request::new(req.clone());
                        r.set_timeout(t);
                        let absent = &absent;
                        async move {
                            let res = c.lookup(r).await;
                            if let Ok(rep) = &res {
                                let rep = rep.get_ref();
                                if rep
                                    .status
                                    .as_ref()
                                    .is_some_and(|s| s.errno == libc::ENOENT as u32)
                                {
                                    *absent.lock() = Some(Absent {
                                        server: server_of(home, i, n) as usize,
                                        lease_ms: rep.lease_ms,
                                        empty: rep.empty.map(|e| (e.index, e.depth)),
                                    });
                                }
                            }
                            res
                        }
                    },
                )
                .await?;
            self.entry_attr_leased(rep, (s, since), (parent, name), d)
                .await
        });
        match got {
            Ok(l) => Ok(l.noted(parent, name)),
            Err(Errno(libc::ENOENT)) => {
                if let Some(a) = absent.lock().take() {
                    let l = &self.inner.leases;
                    let key = leases::Key::Name(parent, name.to_vec());
                    let v = l.validity(a.server, a.lease_ms, &key, since);
                    l.keep_name(a.server, (parent, name), None, (v, since));
                    if let Some(part) = a.empty {
                        let key = leases::Key::Listing(parent);
                        let v = l.validity(a.server, a.lease_ms, &key, since);
                        l.keep_listing(a.server, parent, part, (v, since));
                    }
                    leases::note_entry(parent, name, v);
                }
                Err(Errno(libc::ENOENT))
            }
            Err(e) => Err(e),
        }
    }

    /// A lookup answered from what the client keeps under leases, if it can be.
    fn kept_lookup(&self, parent: u64, name: &[u8]) -> Option<FsResult<Attr>> {
        let (found, entry, attr_v) = self.inner.leases.kept_name(parent, name)?;
        leases::note_entry(parent, name, entry);
        Some(match found {
            Some(a) => {
                leases::note_attr(a.ino, attr_v);
                Ok(a)
            }
            None => Err(Errno(libc::ENOENT)),
        })
    }
}

impl FileSystem for Client {
    fn lookup(&self, cred: &Cred, parent: u64, name: &[u8]) -> FsResult<Attr> {
        leases::clear();
        if name == b"." || name == b".." {
            let d = self.deadline();
            let req = proto::LookupReq {
                h: self.header(cred),
                dir: parent,
                name: name.to_vec(),
            };
            return self.block_raw(async {
                let rep = self
                    .at_home(Rpc::Lookup, parent, true, d, |mut c, t| {
                        let mut r = tonic::Request::new(req.clone());
                        r.set_timeout(t);
                        async move { c.lookup(r).await }
                    })
                    .await?;
                self.entry_attr(rep, d).await
            });
        }
        // A name no server would take is refused as a server would refuse it, not
        // answered absent from a listing.
        rules::check_name(name)?;
        if let Some(got) = self.kept_lookup(parent, name) {
            return got;
        }
        self.lookup_asked(cred, parent, name)
    }

    fn entry_validity(&self, parent: u64, name: &[u8]) -> Validity {
        self.inner.leases.entry_validity(parent, name)
    }

    fn attr_validity(&self, ino: u64) -> Validity {
        self.inner.leases.attr_validity(ino)
    }

    /// Starts the lease sessions with every server: from now on what a server answers
    /// under a lease is kept by the mount's kernel until the lease ends or is revoked,
    /// and releases go in the background (see `release`).
    fn set_invalidator(&self, inv: Arc<dyn Invalidator>) {
        self.inner.mounted.store(true, Ordering::Relaxed);
        let h = proto::Header {
            cluster_id: self.inner.cfg.cluster_id(),
            cred: None,
            no_checks: false,
            client: 0,
        };
        self.inner
            .leases
            .start(inv, Arc::downgrade(&self.inner), h, &self.inner.handle);
    }

    fn getattr(&self, ino: u64) -> FsResult<Attr> {
        self.getattr_blocking(ino)
    }

    fn setattr(&self, cred: &Cred, ino: u64, s: &SetAttr) -> FsResult<Attr> {
        // Nothing an earlier call on this thread was granted is to be handed out with
        // its answer; what was kept of the inode goes once it returned, and the
        // attributes it returns are kept if leased.
        leases::clear();
        let since = self.inner.leases.epoch();
        let d = self.deadline();
        let req = proto::SetAttrReq {
            h: self.header(cred),
            ino,
            mode: s.mode,
            uid: s.uid,
            gid: s.gid,
            size: s.size,
            atime: timeset(s.atime),
            mtime: timeset(s.mtime),
            // Safe to send again with its token (see `group::request_token`).
            token: group::request_token(),
        };
        self.block_raw(async {
            let rep = self
                .at_home(Rpc::SetAttr, ino, true, d, |mut c, t| {
                    let mut r = tonic::Request::new(req.clone());
                    r.set_timeout(t);
                    async move { c.set_attr(r).await }
                })
                .await;
            let l = &self.inner.leases;
            let got = rep.and_then(|r| match r.attr.as_ref() {
                Some(a) => Ok((msg_attr(a), r.lease_ms)),
                None => Err(Errno(libc::EIO)),
            });
            match got {
                Ok((a, lease_ms)) => {
                    let v = l.changed_attr(home_of(ino) as usize, &a, lease_ms, since);
                    leases::note_attr(ino, v);
                    Ok(a)
                }
                Err(e) => {
                    // Its outcome unknown: what was kept of the inode goes.
                    l.forget(leases::Key::Inode(ino));
                    Err(e)
                }
            }
        })
    }

    fn create(&self, cred: &Cred, parent: u64, name: &[u8], mode: u32) -> FsResult<Attr> {
        self.make(
            cred,
            parent,
            name,
            What::node(libc::S_IFREG | (mode & 0o7777)),
        )
    }

    fn create_open(
        &self,
        cred: &Cred,
        parent: u64,
        name: &[u8],
        mode: u32,
        flags: i32,
    ) -> FsResult<Attr> {
        let what = What {
            open: Some(flags),
            ..What::node(libc::S_IFREG | (mode & 0o7777))
        };
        self.make(cred, parent, name, what)
    }

    fn mknod(&self, cred: &Cred, parent: u64, name: &[u8], mode: u32, rdev: u32) -> FsResult<Attr> {
        let t = rules::mknod_type(self.inner.checks.load(Ordering::Relaxed), cred, mode)?;
        let what = What {
            rdev,
            ..What::node(t | (mode & 0o7777))
        };
        self.make(cred, parent, name, what)
    }

    fn mkdir(&self, cred: &Cred, parent: u64, name: &[u8], mode: u32) -> FsResult<Attr> {
        self.make(
            cred,
            parent,
            name,
            What::node(libc::S_IFDIR | (mode & 0o7777)),
        )
    }

    fn symlink(&self, cred: &Cred, parent: u64, name: &[u8], target: &[u8]) -> FsResult<Attr> {
        let what = What {
            target,
            ..What::node(libc::S_IFLNK | 0o777)
        };
        self.make(cred, parent, name, what)
    }

    fn readlink(&self, cred: &Cred, ino: u64) -> FsResult<Vec<u8>> {
        let d = self.deadline();
        let h = self.header(cred);
        self.block_raw(async {
            self.at_home(Rpc::Readlink, ino, true, d, |mut c, t| {
                let mut r = tonic::Request::new(proto::InoReq { h: h.clone(), ino });
                r.set_timeout(t);
                async move { c.readlink(r).await }
            })
            .await
            .map(|r| r.data)
        })
    }

    fn link(&self, cred: &Cred, ino: u64, newparent: u64, newname: &[u8]) -> FsResult<Attr> {
        // Not leased either (see `setattr`).
        leases::clear();
        let _own = self.own(vec![
            leases::Key::Name(newparent, newname.to_vec()),
            leases::Key::Inode(ino),
            leases::Key::Inode(newparent),
        ]);
        let d = self.deadline();
        let h = self.header(cred);
        let name = newname.to_vec();
        let hash = name_hash(&name);
        // Safe to send again with its token (see `group::request_token`).
        let token = group::request_token();
        self.block_raw(async {
            let (rep, _) = self
                .named(Rpc::Link, newparent, hash, true, d, |mut c, t, _| {
                    let mut r = tonic::Request::new(proto::LinkReq {
                        h: h.clone(),
                        ino,
                        dir: newparent,
                        name: name.clone(),
                        token,
                    });
                    r.set_timeout(t);
                    async move { c.link(r).await }
                })
                .await?;
            self.entry_attr(rep, d).await
        })
    }

    fn unlink(&self, cred: &Cred, parent: u64, name: &[u8]) -> FsResult<()> {
        let _own = self.own(self.inner.leases.touched(&[(parent, name)], &[parent]));
        self.remove(cred, parent, name, false)
    }

    fn rmdir(&self, cred: &Cred, parent: u64, name: &[u8]) -> FsResult<()> {
        let _own = self.own(self.inner.leases.touched(&[(parent, name)], &[parent]));
        self.remove(cred, parent, name, true)
    }

    fn rename(
        &self,
        cred: &Cred,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: u32,
    ) -> FsResult<()> {
        if self.inner.leases.listed_only(newparent, newname) {
            // The kernel moves the renamed entry to the new name, keeping it for as
            // long as the old one: that needs a lease on the new name, which an
            // absence answered from a listing is not (any answer will do).
            let _ = self.lookup_asked(cred, newparent, newname);
        }
        let _own = self.own(self.inner.leases.touched(
            &[(parent, name), (newparent, newname)],
            &[parent, newparent],
        ));
        let d = self.deadline();
        let h = self.header(cred);
        let (name, newname) = (name.to_vec(), newname.to_vec());
        let hash = name_hash(&name);
        // Safe to send again with its token (see `group::request_token`).
        let token = group::request_token();
        self.block_raw(async {
            self.named(Rpc::Rename, parent, hash, true, d, |mut c, t, _| {
                let mut r = tonic::Request::new(proto::RenameReq {
                    h: h.clone(),
                    dir: parent,
                    name: name.clone(),
                    new_dir: newparent,
                    new_name: newname.clone(),
                    flags,
                    token,
                });
                r.set_timeout(t);
                async move { c.rename(r).await }
            })
            .await
            .map(drop)
        })
    }

    fn opendir(&self, cred: &Cred, ino: u64) -> FsResult<()> {
        // A caller the attributes kept under a lease let read the directory needs no
        // request (the listing's own requests are checked by their servers); any
        // other answer is the home's.
        let kept = self.inner.leases.kept_attr(ino);
        if kept.is_some_and(|(a, _)| {
            a.is_dir() && rules::check_access(true, cred, &a, rules::MAY_READ).is_ok()
        }) {
            return Ok(());
        }
        let d = self.deadline();
        let h = self.header(cred);
        self.block_raw(async {
            self.at_home(Rpc::OpenDir, ino, true, d, |mut c, t| {
                let mut r = tonic::Request::new(proto::InoReq { h: h.clone(), ino });
                r.set_timeout(t);
                async move { c.open_dir(r).await }
            })
            .await
            .map(drop)
        })
    }

    fn readdir(
        &self,
        cred: &Cred,
        ino: u64,
        after: Option<&[u8]>,
        limit: usize,
    ) -> FsResult<Vec<DirEntry>> {
        let listed = self.list(cred, ino, after, limit, false)?;
        Ok(listed.into_iter().map(|e| e.entry).collect())
    }

    /// Listings carry attributes: the kernel is asked for READDIRPLUS.
    fn lists_attributes(&self) -> bool {
        true
    }

    fn readdir_plus(
        &self,
        cred: &Cred,
        ino: u64,
        after: Option<&[u8]>,
        limit: usize,
    ) -> FsResult<Vec<DirEntryPlus>> {
        self.list(cred, ino, after, limit, true)
    }

    fn parent_of(&self, ino: u64) -> FsResult<u64> {
        if let Some(parent) = self.inner.leases.kept_parent(ino) {
            return Ok(parent);
        }
        let d = self.deadline();
        let h = self.header(&Cred::ROOT);
        self.block_raw(async {
            self.at_home(Rpc::ParentOf, ino, true, d, |mut c, t| {
                let mut r = tonic::Request::new(proto::InoReq { h: h.clone(), ino });
                r.set_timeout(t);
                async move { c.parent_of(r).await }
            })
            .await
            .map(|r| r.ino)
        })
    }

    fn open_file(&self, cred: &Cred, ino: u64, flags: i32) -> FsResult<Attr> {
        let truncates = flags & libc::O_TRUNC != 0;
        let _own = self.own(if truncates {
            vec![leases::Key::Inode(ino)]
        } else {
            Vec::new()
        });
        self.open_as(cred, ino, flags, false)
    }

    fn open_created(&self, cred: &Cred, ino: u64, flags: i32) -> FsResult<Attr> {
        self.open_as(cred, ino, flags, true)
    }

    /// For a mount, sent in the background: close(2) returned already, and the mount
    /// need not wait either (the server only counts the inode's opens down, in any
    /// order with the client's other requests). At most `RELEASES` at once; `close`
    /// waits for them. A program's call returns once the release is done (an unlinked
    /// file is then gone).
    fn release(&self, cred: &Cred, ino: u64) -> FsResult<()> {
        if !self.inner.mounted.load(Ordering::Relaxed) {
            return self.block_raw(self.release_async(cred, ino));
        }
        match self.inner.releases.clone().try_acquire_owned() {
            Ok(permit) => {
                let (c, cred) = (self.clone(), *cred);
                self.inner.handle.spawn(async move {
                    if let Err(e) = c.release_async(&cred, ino).await {
                        tracing::debug!("release of {ino:#x}: {e:?}");
                    }
                    drop(permit);
                });
                Ok(())
            }
            Err(_) => self.block_raw(self.release_async(cred, ino)),
        }
    }

    fn read(&self, cred: &Cred, ino: u64, offset: u64, size: usize) -> FsResult<Vec<u8>> {
        // A read may set the access time.
        let _own = self.own(vec![leases::Key::Inode(ino)]);
        let d = self.deadline();
        let h = self.header(cred);
        self.block_raw(async {
            let mut out = Vec::new();
            let mut off = offset;
            let mut left = size;
            loop {
                let want = left.min(IO_CHUNK);
                let rep = self
                    .at_home(Rpc::Read, ino, true, d, |mut c, t| {
                        let mut r = tonic::Request::new(proto::ReadReq {
                            h: h.clone(),
                            ino,
                            offset: off,
                            size: want as u32,
                        });
                        r.set_timeout(t);
                        async move { c.read(r).await }
                    })
                    .await?;
                let got = rep.data.len();
                out.extend_from_slice(&rep.data);
                left -= got.min(left);
                off += got as u64;
                if got < want || left == 0 {
                    return Ok(out);
                }
            }
        })
    }

    fn write(&self, cred: &Cred, ino: u64, offset: u64, data: &[u8]) -> FsResult<usize> {
        let _own = self.own(vec![leases::Key::Inode(ino)]);
        let d = self.deadline();
        let h = self.header(cred);
        self.block_raw(async {
            if data.is_empty() {
                // Still checks the inode (and extends nothing).
                let rep = self
                    .at_home(Rpc::Write, ino, true, d, |mut c, t| {
                        let mut r = tonic::Request::new(proto::WriteReq {
                            h: h.clone(),
                            ino,
                            offset,
                            data: Vec::new(),
                            token: 0,
                        });
                        r.set_timeout(t);
                        async move { c.write(r).await }
                    })
                    .await?;
                return Ok(rep.written as usize);
            }
            let mut done = 0;
            for chunk in data.chunks(IO_CHUNK) {
                let off = offset.checked_add(done as u64).ok_or(Errno(libc::EFBIG))?;
                // Safe to send again with its token (see `group::request_token`).
                let token = group::request_token();
                let rep = self
                    .at_home(Rpc::Write, ino, true, d, |mut c, t| {
                        let mut r = tonic::Request::new(proto::WriteReq {
                            h: h.clone(),
                            ino,
                            offset: off,
                            data: chunk.to_vec(),
                            token,
                        });
                        r.set_timeout(t);
                        async move { c.write(r).await }
                    })
                    .await?;
                done += rep.written as usize;
            }
            Ok(done)
        })
    }

    fn fsync(&self, _ino: u64) -> FsResult<()> {
        self.fsync_all()
    }

    fn getxattr(&self, cred: &Cred, ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
        self.xattr_call(cred, ino, name, &[], 0, 0)
    }

    fn setxattr(
        &self,
        cred: &Cred,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: u32,
    ) -> FsResult<()> {
        let _own = self.own(vec![leases::Key::Inode(ino)]);
        self.xattr_call(cred, ino, name, value, flags, 1).map(drop)
    }

    fn listxattr(&self, cred: &Cred, ino: u64) -> FsResult<Vec<Vec<u8>>> {
        let d = self.deadline();
        let h = self.header(cred);
        self.block_raw(async {
            self.at_home(Rpc::ListXattr, ino, true, d, |mut c, t| {
                let mut r = tonic::Request::new(proto::InoReq { h: h.clone(), ino });
                r.set_timeout(t);
                async move { c.list_xattr(r).await }
            })
            .await
            .map(|r| r.names)
        })
    }

    fn removexattr(&self, cred: &Cred, ino: u64, name: &[u8]) -> FsResult<()> {
        let _own = self.own(vec![leases::Key::Inode(ino)]);
        self.xattr_call(cred, ino, name, &[], 0, 2).map(drop)
    }

    fn statfs(&self) -> FsResult<StatFs> {
        let d = Instant::now() + self.inner.opts.timeout.min(Duration::from_secs(2));
        let h = self.header(&Cred::ROOT);
        let n = self.inner.cfg.len();
        self.block_raw(async {
            let mut sum: Option<StatFs> = None;
            for s in 0..n {
                let r = self
                    .call(Rpc::StatFs, s, true, d, |mut c, t| {
                        let mut r = tonic::Request::new(proto::StatFsReq { h: h.clone() });
                        r.set_timeout(t);
                        async move { c.stat_fs(r).await }
                    })
                    .await;
                let Ok(r) = r else { continue };
                let t = sum.get_or_insert(StatFs {
                    bsize: r.bsize,
                    blocks: 0,
                    bfree: 0,
                    bavail: 0,
                    files: 0,
                    ffree: 0,
                    namelen: r.namelen,
                });
                t.blocks += r.blocks;
                t.bfree += r.bfree;
                t.bavail += r.bavail;
                t.files = t.files.saturating_add(r.files);
                t.ffree = t.ffree.saturating_add(r.ffree);
            }
            sum.ok_or(Errno(libc::EIO))
        })
    }

    fn set_permission_checks(&self, on: bool) {
        self.inner.checks.store(on, Ordering::Relaxed);
    }

    fn requests_sent(&self) -> Vec<(&'static str, u64)> {
        self.inner.sent.get()
    }

    fn close(self: Box<Self>) -> FsResult<()> {
        self.releases_sent();
        Ok(())
    }
}
