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

use cairn_fs::{Attr, Cred, Errno, FsResult, Validity};

use crate::batch::Batcher;
use crate::config::ClusterConfig;
use crate::convert::{cred_msg, msg_attr};
use crate::error::ClientError;
use crate::giga::{home_of, Bitmap};
use crate::proto;
use crate::stream::Streams;
use crate::transport::{Dialer, Reach};
use count::{Counts, Rpc};
use fs::Leased;

mod count;
mod fs;
pub(crate) mod group;
mod leases;
mod list;
mod make;
mod names;
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
/// Releases sent in the background at once (more wait for theirs).
const RELEASES: usize = 64;
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
    /// Room for releases in the background.
    releases: Arc<tokio::sync::Semaphore>,
    /// Whether a mount serves the client (`FileSystem::set_invalidator` was called):
    /// its releases go in the background.
    mounted: AtomicBool,
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
                releases: Arc::new(tokio::sync::Semaphore::new(RELEASES)),
                mounted: AtomicBool::new(false),
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
    /// [`cairn_fs::FileSystem`] calls must not be used from that runtime's thread; its async
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
                releases: Arc::new(tokio::sync::Semaphore::new(RELEASES)),
                mounted: AtomicBool::new(false),
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
        let home = home_of(ino) as usize;
        let l = &self.inner.leases;
        let v = l.validity(home, rep.lease_ms, &leases::Key::Inode(ino), since);
        l.keep_attr(home, &a, (v, since));
        Ok((a, v))
    }

    fn getattr_blocking(&self, ino: u64) -> FsResult<Attr> {
        leases::clear();
        if let Some((a, v)) = self.inner.leases.kept_attr(ino) {
            leases::note_attr(ino, v);
            return Ok(a);
        }
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
                let (attr, v) = (msg_attr(a), l.validity(s as usize, lease, &key, since));
                l.keep_attr(s as usize, &attr, (v, since));
                (attr, v)
            }
            None => self.getattr_leased(ino, deadline).await?,
        };
        l.keep_name(s as usize, (dir, name), Some(ino), (entry, since));
        if attr.is_dir() {
            l.keep_parent(ino, (dir, name));
        }
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
