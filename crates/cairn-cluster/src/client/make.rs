//! Creates (files, nodes, symbolic links, directories), a create that opens the new
//! file in the same request, and removals, on the client.

use cairn_fs::{Attr, Cred, Errno, FsResult};

use super::count::Rpc;
use super::fs::Leased;
use super::{group, Client, Creates};
use crate::giga::{home_of, name_hash, server_of};
use crate::proto;

/// What a create makes: type and permission bits, device, symbolic link target, and
/// whether the new file is opened in the same request (with these `open(2)` flags).
pub(super) struct What<'a> {
    pub(super) mode: u32,
    pub(super) rdev: u32,
    pub(super) target: &'a [u8],
    pub(super) open: Option<i32>,
}

impl What<'_> {
    /// A file, node, link or directory of `mode`, not opened.
    pub(super) fn node(mode: u32) -> What<'static> {
        What {
            mode,
            rdev: 0,
            target: &[],
            open: None,
        }
    }
}

impl Client {
    /// A create, blocking.
    pub(super) fn make(
        &self,
        cred: &Cred,
        parent: u64,
        name: &[u8],
        what: What<'_>,
    ) -> FsResult<Attr> {
        super::leases::clear();
        let l = self.block_raw(self.make_leased(cred, parent, name, what))?;
        Ok(l.noted(parent, name))
    }

    /// A create; with [`What::open`] the new file is opened too: in the create's own
    /// request where its server does that (`MakeReq.open`), else by an `OPEN` after it.
    pub(super) async fn make_async(
        &self,
        cred: &Cred,
        parent: u64,
        name: &[u8],
        what: What<'_>,
    ) -> FsResult<Attr> {
        self.make_leased(cred, parent, name, what)
            .await
            .map(|l| l.attr)
    }

    /// As [`Client::make_async`], with how long the kernel may keep the new entry and
    /// its attributes.
    async fn make_leased(
        &self,
        cred: &Cred,
        parent: u64,
        name: &[u8],
        what: What<'_>,
    ) -> FsResult<Leased> {
        // What was kept of the name goes now (the kernel holds the directory's lock: no
        // lookup of it runs meanwhile), the new entry is kept as answered; the parent's
        // link count and times change.
        let l = &self.inner.leases;
        l.creating(parent, name);
        let made = self.make_sent(cred, parent, name, what).await;
        l.created(parent, name, made.is_ok());
        made
    }

    /// The create of [`Client::make_leased`], once the name is forgotten.
    async fn make_sent(
        &self,
        cred: &Cred,
        parent: u64,
        name: &[u8],
        what: What<'_>,
    ) -> FsResult<Leased> {
        let l = &self.inner.leases;
        let _own = l.own_change(vec![super::leases::Key::Inode(parent)]);
        let since = self.inner.leases.epoch();
        let d = self.deadline();
        let h = self.header(cred);
        let (name, target) = (name.to_vec(), what.target.to_vec());
        let (mode, rdev) = (what.mode, what.rdev);
        let hash = name_hash(&name);
        // Everything but a mkdir may go on a stream or in a batch.
        let how = if mode & libc::S_IFMT == libc::S_IFDIR {
            Creates::Single
        } else {
            self.inner.opts.creates
        };
        let (home, n) = (home_of(parent), self.inner.cfg.len());
        // With its token a create is safe to send again (a server answers a copy of
        // one it made as made): after its reply was lost, it goes to another replica.
        let token = group::request_token();
        let (rep, at) = self
            .named(Rpc::Make, parent, hash, true, d, |mut c, t, i| {
                let req = proto::MakeReq {
                    token,
                    h: h.clone(),
                    dir: parent,
                    name: name.clone(),
                    mode,
                    rdev,
                    target: target.clone(),
                    open: what.open.is_some(),
                    open_flags: what.open.unwrap_or(0),
                };
                let (b, st) = (self.inner.batcher.clone(), self.inner.streams.clone());
                let s = server_of(home, i, n);
                async move {
                    match how {
                        // A server without streams answers "busy" once: the retry comes
                        // back here and goes as a batch.
                        Creates::Stream if st.supported(s) => st.make(s, &c, req, t).await,
                        Creates::Stream | Creates::Batch => b.make(s, c, req, t).await,
                        Creates::Single => {
                            let mut r = tonic::Request::new(req);
                            r.set_timeout(t);
                            c.make(r).await
                        }
                    }
                }
            })
            .await?;
        match what.open {
            // A server before `MakeReq.open` made the file only.
            Some(flags) if !rep.opened => {
                let attr = self.open_async(cred, rep.ino, flags, true).await?;
                let none = cairn_fs::Validity::For(std::time::Duration::ZERO);
                Ok(Leased {
                    attr,
                    entry: none,
                    attr_v: none,
                })
            }
            _ => {
                self.entry_attr_leased(rep, (at, since), (parent, &name), d)
                    .await
            }
        }
    }

    /// [`FileSystem::create`] from inside a tokio runtime (a client made by
    /// [`Client::in_runtime`]).
    ///
    /// [`FileSystem::create`]: cairn_fs::FileSystem::create
    pub async fn create_async(
        &self,
        cred: &Cred,
        parent: u64,
        name: &[u8],
        mode: u32,
    ) -> FsResult<Attr> {
        let what = What::node(libc::S_IFREG | (mode & 0o7777));
        self.make_async(cred, parent, name, what).await
    }

    /// [`FileSystem::mkdir`] from inside a tokio runtime (a client made by
    /// [`Client::in_runtime`]).
    ///
    /// [`FileSystem::mkdir`]: cairn_fs::FileSystem::mkdir
    pub async fn mkdir_async(
        &self,
        cred: &Cred,
        parent: u64,
        name: &[u8],
        mode: u32,
    ) -> FsResult<Attr> {
        let what = What::node(libc::S_IFDIR | (mode & 0o7777));
        self.make_async(cred, parent, name, what).await
    }

    /// OPEN of `ino` (`created`: by the caller's own create, see [`proto::OpenReq`]).
    pub(super) async fn open_async(
        &self,
        cred: &Cred,
        ino: u64,
        flags: i32,
        created: bool,
    ) -> FsResult<Attr> {
        let d = self.deadline();
        let h = self.header(cred);
        let rep = self
            .at_home(Rpc::Open, ino, false, d, |mut c, t| {
                let mut r = tonic::Request::new(proto::OpenReq {
                    h: h.clone(),
                    ino,
                    flags,
                    created,
                });
                r.set_timeout(t);
                async move { c.open(r).await }
            })
            .await?;
        rep.attr
            .as_ref()
            .map(crate::convert::msg_attr)
            .ok_or(Errno(libc::EIO))
    }

    /// RELEASE of `ino`.
    pub(super) async fn release_async(&self, cred: &Cred, ino: u64) -> FsResult<()> {
        let d = self.deadline();
        let h = self.header(cred);
        self.at_home(Rpc::Release, ino, false, d, |mut c, t| {
            let mut r = tonic::Request::new(proto::InoReq { h: h.clone(), ino });
            r.set_timeout(t);
            async move { c.release(r).await }
        })
        .await
        .map(drop)
    }

    /// Waits (at most the request timeout) until the releases sent in the background
    /// are answered.
    pub(super) fn releases_sent(&self) {
        let sem = self.inner.releases.clone();
        let wait = self.inner.opts.timeout;
        let all = super::RELEASES as u32;
        self.block_raw(async move {
            if tokio::time::timeout(wait, sem.acquire_many(all))
                .await
                .is_err()
            {
                tracing::warn!("releases still unanswered after {wait:?}");
            }
        });
    }

    /// UNLINK or RMDIR: one request to the name's partition.
    pub(super) fn remove(
        &self,
        cred: &Cred,
        parent: u64,
        name: &[u8],
        rmdir: bool,
    ) -> FsResult<()> {
        let d = self.deadline();
        let h = self.header(cred);
        let name = name.to_vec();
        let hash = name_hash(&name);
        // Safe to send again with its token (see `group::request_token`).
        let token = group::request_token();
        self.block_raw(async {
            self.named(Rpc::Remove, parent, hash, true, d, |mut c, t, _| {
                let mut r = tonic::Request::new(proto::RemoveReq {
                    h: h.clone(),
                    dir: parent,
                    name: name.clone(),
                    rmdir,
                    token,
                });
                r.set_timeout(t);
                async move { c.remove(r).await }
            })
            .await
            .map(drop)
        })
    }
}
