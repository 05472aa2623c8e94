//! The client: the operations of [`cairn_fs::FileSystem`] on a cluster, with a cache of
//! each directory's GIGA+ bitmap corrected by the servers' redirects.
//!
//! Each call is blocking (the client runs a small tokio runtime of its own) and takes
//! at most [`ClientOptions::timeout`]: a server that is down, or a name held by an
//! unfinished operation for longer, gives `EIO`. Requests that are safe to repeat
//! (reads, and the changes — creates, links, unlinks, rmdirs, renames, writes and
//! attribute changes — which carry a token the server answers a copy by) are retried
//! after any transport error; the others only when the connection
//! could not be opened (so the request was never sent).

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

// tokio's clock: real time, or virtual time in the simulation (turmoil pauses it).
use tokio::time::Instant;

use parking_lot::Mutex;

use cairn_fs::{
    rules, Attr, Cred, DirEntry, Errno, FileSystem, FsResult, Invalidator, SetAttr, StatFs,
    TimeSet, Validity,
};

use crate::batch::Batcher;
use crate::config::ClusterConfig;
use crate::convert::{cred_msg, msg_attr};
use crate::error::ClientError;
use crate::giga::{home_of, name_hash, rev, rev_range, server_of, Bitmap};
use crate::proto;
use crate::stream::Streams;
use crate::transport::{Dialer, Reach};
use count::{Counts, Rpc};
use make::What;

mod count;
pub(crate) mod group;
mod leases;
mod make;
mod route;

/// How a client behaves.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// How long an operation may take, retries included, before it fails with `EIO`.
    pub timeout: Duration,
    /// Longest wait to open a connection to a server.
    pub connect_timeout: Duration,
    /// How creates, mknods and symlinks travel to their server (mkdirs always go alone).
    pub creates: Creates,
}

/// How a client sends its creates (and mknods and symlinks) to a server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Creates {
    /// As messages on one long-lived stream per server (`MakeStream`; DESIGN.md,
    /// "Streamed creates"): no request of their own, and what is made while others are
    /// on the wire leaves in the same write. A server without streams gets
    /// [`Creates::Batch`].
    #[default]
    Stream,
    /// Each in a request of its own while fewer than four are in flight to the server;
    /// beyond, those made meanwhile go together in one request (`MakeBatch`;
    /// DESIGN.md, "Batched creates").
    Batch,
    /// Each in a request of its own (`Make`).
    Single,
}

impl Creates {
    /// The word for it on a command line and in reports.
    pub fn word(self) -> &'static str {
        match self {
            Creates::Stream => "stream",
            Creates::Batch => "batch",
            Creates::Single => "single",
        }
    }
}

impl std::str::FromStr for Creates {
    type Err = String;

    /// `stream`, `batch` or `single` ([`Creates::word`]).
    fn from_str(s: &str) -> Result<Creates, String> {
        [Creates::Stream, Creates::Batch, Creates::Single]
            .into_iter()
            .find(|c| c.word() == s)
            .ok_or_else(|| format!("{s}: not stream, batch or single"))
    }
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            creates: Creates::Stream,
        }
    }
}

/// Most redirects one operation follows (each moves it at least one level deeper).
const MAX_REDIRECTS: usize = 32;
/// Bytes of data per read or write request.
const IO_CHUNK: usize = 4 << 20;
/// Entries asked for per listing call.
const READDIR_PAGE: usize = 1024;
/// Directories whose bitmaps are cached (the cache is emptied beyond).
const BITMAP_CACHE: usize = 100_000;

struct Inner {
    rt: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
    conns: Vec<group::Group>,
    cfg: ClusterConfig,
    opts: ClientOptions,
    bitmaps: Mutex<HashMap<u64, Bitmap>>,
    redirects: AtomicU64,
    checks: AtomicBool,
    /// Creates queued while a request to their server is in flight (`crate::batch`).
    batcher: Arc<Batcher>,
    /// Streams of creates, one per server (`crate::stream`).
    streams: Arc<Streams>,
    /// Requests sent, by kind.
    sent: Counts,
    /// The lease sessions (a mount's client keeps them).
    leases: Arc<leases::Leases>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// A client of a cluster (cheap to clone; blocking calls, on a runtime of its own;
/// must not be called from inside another tokio runtime's worker).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("servers", &self.inner.cfg.len())
            .finish()
    }
}

impl Client {
    /// A client of the cluster described by the cluster file at `cluster_file`.
    pub fn connect(cluster_file: &Path) -> Result<Client, ClientError> {
        Client::with_config(ClusterConfig::load(cluster_file)?, ClientOptions::default())
    }

    /// A client of cluster `cfg`. Every server that answers within the connect timeout
    /// is asked whether it reads the same cluster file (`ClusterMismatch` if not);
    /// servers that are down are connected to later, when needed.
    pub fn with_config(cfg: ClusterConfig, opts: ClientOptions) -> Result<Client, ClientError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("cairn-client")
            .build()
            .map_err(ClientError::Runtime)?;
        let handle = rt.handle().clone();
        let reach = Reach::client(&cfg, None)?;
        let conns = {
            let _g = rt.enter();
            Client::channels(&cfg, &opts, &reach)?
        };
        let batcher = Arc::new(Batcher::new(conns.len(), handle.clone()));
        let cfg_len = conns.len();
        let streams = Arc::new(Streams::new(conns.len(), handle.clone()));
        let c = Client {
            inner: Arc::new(Inner {
                rt: Some(rt),
                handle,
                conns,
                cfg,
                opts,
                bitmaps: Mutex::new(HashMap::new()),
                redirects: AtomicU64::new(0),
                checks: AtomicBool::new(true),
                batcher,
                streams,
                sent: Counts::default(),
                leases: Arc::new(leases::Leases::new(cfg_len)),
            }),
        };
        c.probe()?;
        Ok(c)
    }

    /// The channel to each server (inside a tokio runtime).
    fn channels(
        cfg: &ClusterConfig,
        opts: &ClientOptions,
        reach: &Reach,
    ) -> Result<Vec<group::Group>, crate::tls::TlsError> {
        cfg.servers()
            .iter()
            .map(|s| {
                group::group(reach, s, opts.connect_timeout)
                    .map(|g| g.with_first_attempt(cfg.election_timeout()))
            })
            .collect()
    }

    /// A client of cluster `cfg` inside the current tokio runtime (it must be called
    /// in one), reaching the servers through `dialer`. Its blocking
    /// [`FileSystem`] calls must not be used from that runtime's thread; its async
    /// ones ([`Client::create_async`], [`Client::mkdir_async`]) may. Servers are not
    /// probed for their cluster file here (they refuse another's on each request).
    ///
    /// # Errors
    ///
    /// [`ClientError::Tls`] unless `cfg` is insecure: a dialer's connections carry no
    /// TLS (see [`crate::transport`]).
    pub fn in_runtime(
        cfg: ClusterConfig,
        opts: ClientOptions,
        dialer: Dialer,
    ) -> Result<Client, ClientError> {
        let reach = Reach::client(&cfg, Some(dialer))?;
        let conns = Client::channels(&cfg, &opts, &reach)?;
        let handle = tokio::runtime::Handle::current();
        let batcher = Arc::new(Batcher::new(conns.len(), handle.clone()));
        let cfg_len = conns.len();
        let streams = Arc::new(Streams::new(conns.len(), handle.clone()));
        Ok(Client {
            inner: Arc::new(Inner {
                rt: None,
                handle,
                conns,
                cfg,
                opts,
                bitmaps: Mutex::new(HashMap::new()),
                redirects: AtomicU64::new(0),
                checks: AtomicBool::new(true),
                batcher,
                streams,
                sent: Counts::default(),
                leases: Arc::new(leases::Leases::new(cfg_len)),
            }),
        })
    }

    /// Asks every server that answers whether it reads the same cluster file.
    fn probe(&self) -> Result<(), ClientError> {
        let inner = self.inner.clone();
        let t = self.inner.opts.connect_timeout;
        let res: Vec<(u32, Result<(), tonic::Status>)> = self.block_raw(async move {
            let mut tasks = Vec::new();
            for (i, c) in inner.conns.iter().enumerate() {
                let mut c = c.first();
                let h = proto::Header {
                    cluster_id: inner.cfg.cluster_id(),
                    cred: None,
                    no_checks: false,
                    client: 0,
                };
                tasks.push(tokio::spawn(async move {
                    let mut r = tonic::Request::new(proto::StatFsReq { h: Some(h) });
                    r.set_timeout(t);
                    (i as u32, c.stat_fs(r).await.map(drop))
                }));
            }
            let mut out = Vec::new();
            for t in tasks {
                if let Ok(r) = t.await {
                    out.push(r);
                }
            }
            out
        });
        for (id, r) in res {
            if let Err(s) = r {
                if s.code() == tonic::Code::FailedPrecondition {
                    let addr = self.inner.cfg.servers()[id as usize].addr;
                    return Err(ClientError::ClusterMismatch { id, addr });
                }
            }
        }
        Ok(())
    }

    /// Redirects received so far (requests sent with a stale bitmap).
    pub fn redirects(&self) -> u64 {
        self.inner.redirects.load(Ordering::Relaxed)
    }

    /// Batches of creates sent so far (`MakeBatch` requests: creates queued while a
    /// request to their server was in flight), and the creates they carried.
    pub fn batches(&self) -> (u64, u64) {
        self.inner.batcher.stats()
    }

    /// Streams of creates opened so far (one per server, again after one ended), and
    /// the creates sent on them.
    pub fn streams(&self) -> (u64, u64) {
        self.inner.streams.stats()
    }

    /// The cluster this client talks to.
    pub fn config(&self) -> &ClusterConfig {
        &self.inner.cfg
    }

    /// Runs `f` to completion on the client's runtime.
    fn block_raw<T: Send>(&self, f: impl Future<Output = T> + Send) -> T {
        if tokio::runtime::Handle::try_current().is_ok() {
            // Called from inside a runtime: block a thread of our own instead.
            let h = self.inner.handle.clone();
            std::thread::scope(|s| {
                s.spawn(move || h.block_on(f))
                    .join()
                    .unwrap_or_else(|e| std::panic::resume_unwind(e))
            })
        } else {
            self.inner.handle.block_on(f)
        }
    }

    /// OPEN of `ino`, blocking (`created`: by the caller's own create).
    fn open_as(&self, cred: &Cred, ino: u64, flags: i32, created: bool) -> FsResult<Attr> {
        self.block_raw(self.open_async(cred, ino, flags, created))
    }

    fn header(&self, cred: &Cred) -> Option<proto::Header> {
        Some(proto::Header {
            cluster_id: self.inner.cfg.cluster_id(),
            cred: Some(cred_msg(cred)),
            no_checks: !self.inner.checks.load(Ordering::Relaxed),
            client: self.inner.leases.id(),
        })
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.inner.opts.timeout
    }

    async fn getattr_async(&self, ino: u64, deadline: Instant) -> FsResult<Attr> {
        self.getattr_leased(ino, deadline).await.map(|(a, _)| a)
    }

    /// A GETATTR of `ino` at its home, and how long the kernel may keep the answer.
    async fn getattr_leased(&self, ino: u64, deadline: Instant) -> FsResult<(Attr, Validity)> {
        let since = self.inner.leases.epoch();
        let h = self.header(&Cred::ROOT);
        let rep = self
            .at_home(Rpc::GetAttr, ino, true, deadline, |mut c, t| {
                let mut r = tonic::Request::new(proto::InoReq { h: h.clone(), ino });
                r.set_timeout(t);
                async move { c.get_attr(r).await }
            })
            .await?;
        let a = rep.attr.as_ref().map(msg_attr).ok_or(Errno(libc::EIO))?;
        let v = self.inner.leases.validity(
            home_of(ino) as usize,
            rep.lease_ms,
            &leases::Key::Inode(ino),
            since,
        );
        Ok((a, v))
    }

    fn getattr_blocking(&self, ino: u64) -> FsResult<Attr> {
        leases::clear();
        let d = self.deadline();
        let (a, v) = self.block_raw(self.getattr_leased(ino, d))?;
        leases::note_attr(ino, v);
        Ok(a)
    }

    /// An entry reply made attributes (asking the inode's home when the entry's
    /// server is not it).
    async fn entry_attr(&self, rep: proto::EntryReply, deadline: Instant) -> FsResult<Attr> {
        match rep.attr.as_ref() {
            Some(a) => Ok(msg_attr(a)),
            None => self.getattr_async(rep.ino, deadline).await,
        }
    }

    /// As [`Client::entry_attr`] for a reply of server `s` asked at lease epoch
    /// `since`, with how long the kernel may keep the entry `dir`/`name` and the
    /// attributes.
    async fn entry_attr_leased(
        &self,
        rep: proto::EntryReply,
        (s, since): (u32, u64),
        (dir, name): (u64, &[u8]),
        deadline: Instant,
    ) -> FsResult<Leased> {
        let l = &self.inner.leases;
        let entry = l.validity(
            s as usize,
            rep.lease_ms,
            &leases::Key::Name(dir, name.to_vec()),
            since,
        );
        let ino = rep.ino;
        let (attr, attr_v) = match rep.attr.as_ref() {
            // The lease covers the attributes only where the server is the inode's home
            // (a directory made elsewhere comes with its attributes, unleased).
            Some(a) => {
                let lease = if home_of(ino) == s { rep.lease_ms } else { 0 };
                let key = leases::Key::Inode(ino);
                (msg_attr(a), l.validity(s as usize, lease, &key, since))
            }
            None => self.getattr_leased(ino, deadline).await?,
        };
        Ok(Leased {
            attr,
            entry,
            attr_v,
        })
    }

    fn xattr_call(
        &self,
        cred: &Cred,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: u32,
        op: u8,
    ) -> FsResult<Vec<u8>> {
        let d = self.deadline();
        let h = self.header(cred);
        let req = proto::XattrReq {
            h,
            ino,
            name: name.to_vec(),
            value: value.to_vec(),
            flags,
        };
        self.block_raw(async {
            match op {
                0 => self
                    .at_home(Rpc::GetXattr, ino, true, d, |mut c, t| {
                        let mut r = tonic::Request::new(req.clone());
                        r.set_timeout(t);
                        async move { c.get_xattr(r).await }
                    })
                    .await
                    .map(|r| r.data),
                1 => self
                    .at_home(Rpc::SetXattr, ino, true, d, |mut c, t| {
                        let mut r = tonic::Request::new(req.clone());
                        r.set_timeout(t);
                        async move { c.set_xattr(r).await }
                    })
                    .await
                    .map(|_| Vec::new()),
                _ => self
                    .at_home(Rpc::RemoveXattr, ino, false, d, |mut c, t| {
                        let mut r = tonic::Request::new(req.clone());
                        r.set_timeout(t);
                        async move { c.remove_xattr(r).await }
                    })
                    .await
                    .map(|_| Vec::new()),
            }
        })
    }

    /// Fsync on every server (everything acknowledged so far becomes durable).
    fn fsync_all(&self) -> FsResult<()> {
        let d = self.deadline();
        let h = self.header(&Cred::ROOT);
        let n = self.inner.cfg.len();
        self.block_raw(async {
            let mut futs = Vec::new();
            for s in 0..n {
                let h = h.clone();
                futs.push(self.call(Rpc::Fsync, s, true, d, move |mut c, t| {
                    let mut r = tonic::Request::new(proto::InoReq {
                        h: h.clone(),
                        ino: 0,
                    });
                    r.set_timeout(t);
                    async move { c.fsync(r).await }
                }));
            }
            for f in futs {
                f.await.map_err(Errno::from)?;
            }
            Ok(())
        })
    }
}

/// Attributes a call answered, and how long the kernel may keep them and the entry
/// that led to them.
struct Leased {
    attr: Attr,
    entry: Validity,
    attr_v: Validity,
}

impl Leased {
    /// Notes the validities for the mount (on the calling thread) and gives the
    /// attributes.
    fn noted(self, dir: u64, name: &[u8]) -> Attr {
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

impl FileSystem for Client {
    fn lookup(&self, cred: &Cred, parent: u64, name: &[u8]) -> FsResult<Attr> {
        leases::clear();
        let d = self.deadline();
        let req = proto::LookupReq {
            h: self.header(cred),
            dir: parent,
            name: name.to_vec(),
        };
        if name == b"." || name == b".." {
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
        let since = self.inner.leases.epoch();
        // The lease on an absent name comes with the ENOENT (which `named` keeps).
        let absent: Mutex<Option<(u32, u32)>> = Mutex::new(None);
        let (home, n) = (home_of(parent), self.inner.cfg.len());
        let got = self.block_raw(async {
            let (rep, s) = self
                .named_at(
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
                                    *absent.lock() = Some((server_of(home, i, n), rep.lease_ms));
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
                if let Some((s, ms)) = *absent.lock() {
                    let key = leases::Key::Name(parent, name.to_vec());
                    let v = self.inner.leases.validity(s as usize, ms, &key, since);
                    leases::note_entry(parent, name, v);
                }
                Err(Errno(libc::ENOENT))
            }
            Err(e) => Err(e),
        }
    }

    fn entry_validity(&self, parent: u64, name: &[u8]) -> Validity {
        self.inner.leases.entry_validity(parent, name)
    }

    fn attr_validity(&self, ino: u64) -> Validity {
        self.inner.leases.attr_validity(ino)
    }

    /// Starts the lease sessions with every server: from now on what a server answers
    /// under a lease is kept by the mount's kernel until the lease ends or is revoked.
    fn set_invalidator(&self, inv: Arc<dyn Invalidator>) {
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
                .await?;
            rep.attr.as_ref().map(msg_attr).ok_or(Errno(libc::EIO))
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
        let d = self.deadline();
        let h = self.header(cred);
        let name = newname.to_vec();
        let hash = name_hash(&name);
        // Safe to send again with its token (see `group::request_token`).
        let token = group::request_token();
        self.block_raw(async {
            let rep = self
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
        self.remove(cred, parent, name, false)
    }

    fn rmdir(&self, cred: &Cred, parent: u64, name: &[u8]) -> FsResult<()> {
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
        if limit == 0 {
            return Ok(Vec::new());
        }
        let d = self.deadline();
        let h = self.header(cred);
        let mut pos: (u64, Vec<u8>) = match after {
            Some(n) => (rev(name_hash(n)), n.to_vec()),
            None => (0, Vec::new()),
        };
        let mut first = after.is_none();
        self.block_raw(async {
            let mut out: Vec<DirEntry> = Vec::new();
            // Each round reads one partition (or the rest of one): bounded by the
            // partitions a directory may have, and by the deadline.
            for _ in 0..(1u64 << 25) {
                let want = (limit - out.len()).min(READDIR_PAGE) as u32;
                let (prev, name) = (pos.0, pos.1.clone());
                let rep = self
                    .named(
                        Rpc::ReadDir,
                        ino,
                        pos.0.reverse_bits(),
                        true,
                        d,
                        |mut c, t, i| {
                            let mut r = tonic::Request::new(proto::ReadDirReq {
                                h: h.clone(),
                                dir: ino,
                                partition: i,
                                after_rev: prev,
                                after_name: name.clone(),
                                limit: want,
                                from_start: first,
                            });
                            r.set_timeout(t);
                            async move { c.read_dir(r).await }
                        },
                    )
                    .await?;
                first = false;
                let last = rep.entries.last().map(|e| e.name.clone());
                out.extend(rep.entries.into_iter().map(|e| DirEntry {
                    name: e.name,
                    ino: e.ino,
                    kind: e.kind,
                }));
                if out.len() >= limit {
                    return Ok(out);
                }
                if !rep.done {
                    let Some(l) = last else {
                        return Err(Errno(libc::EIO));
                    };
                    pos = (rev(name_hash(&l)), l);
                    continue;
                }
                let (lo, hi) = rev_range(rep.partition, rep.depth);
                if rep.depth > crate::giga::MAX_DEPTH || lo > prev || hi < prev {
                    // The partition served must own the position asked for.
                    tracing::error!("{ino:#x}: a listing reply for a partition off the position");
                    return Err(Errno(libc::EIO));
                }
                if hi == u64::MAX {
                    return Ok(out);
                }
                pos = (hi + 1, Vec::new());
                if Instant::now() >= d {
                    return Err(Errno(libc::EIO));
                }
            }
            Err(Errno(libc::EIO))
        })
    }

    fn parent_of(&self, ino: u64) -> FsResult<u64> {
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
        self.open_as(cred, ino, flags, false)
    }

    fn open_created(&self, cred: &Cred, ino: u64, flags: i32) -> FsResult<Attr> {
        self.open_as(cred, ino, flags, true)
    }

    fn release(&self, cred: &Cred, ino: u64) -> FsResult<()> {
        let d = self.deadline();
        let h = self.header(cred);
        self.block_raw(async {
            self.at_home(Rpc::Release, ino, false, d, |mut c, t| {
                let mut r = tonic::Request::new(proto::InoReq { h: h.clone(), ino });
                r.set_timeout(t);
                async move { c.release(r).await }
            })
            .await
            .map(drop)
        })
    }

    fn read(&self, cred: &Cred, ino: u64, offset: u64, size: usize) -> FsResult<Vec<u8>> {
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
        Ok(())
    }
}
