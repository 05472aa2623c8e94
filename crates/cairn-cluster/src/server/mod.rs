//! A metadata server: holds partitions of directories, the inodes whose home it is and
//! their data, in its own cairn store; serves clients and its peers over gRPC; splits
//! partitions that grow past the threshold; coordinates operations that touch two
//! servers with durable intents, and finishes them after a crash.

mod embed;
mod fence;
mod grants;
#[cfg(feature = "test-hooks")]
mod hooks;
mod house;
mod inode;
mod intent;
mod intent_rows;
mod ledger;
mod names;
pub(crate) mod node;
mod peer;
mod rename;
mod replicated;
mod sessions;
mod split;
mod state;
mod stream;
mod svc;
mod term;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prost::Message;

use cairn::{Options, SyncPolicy};

use crate::config::ClusterConfig;
use crate::error::ServerError;
use crate::giga;
use crate::proto;
use crate::rows::{
    be32, be64, inode_key, orphan_key, partition_key, single, PART_ACTIVE, TAG_INO_LEASE,
    TAG_INTENT, TAG_INTENT_LEASE, TAG_ORPHAN, TAG_PARTITION, TAG_PREPARED, TAG_SERVER,
};
use crate::transport::MAX_MESSAGE;
use node::{Batch, Node, NodeConfig, NodeRef};
use state::Part;

pub use embed::{start_embedded, Embedded, PartitionInfo, Probe};
#[cfg(feature = "test-hooks")]
pub use hooks::{CrashFn, CrashHook, Hooks, SPLIT_CRASH_POINTS};
pub use ledger::LEDGER_TTL;

/// When a change is durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// A reply is sent once the change is on stable storage (group commit: concurrent
    /// requests share fsyncs).
    Always,
    /// Replies do not wait for the disk; a crash keeps a prefix of the changes (the
    /// engine's rule). Steps of splits and of operations that touch two servers are
    /// made durable whatever the mode.
    Never,
}

/// Default entries of a partition above which it splits.
pub const DEFAULT_SPLIT_THRESHOLD: u64 = 8192;

/// How long [`ServerHandle::shutdown`] (and SIGTERM on `cairn serve`) waits for requests
/// in flight and for clients to close their connections before closing the store.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How long a client's lease session lasts past a renewal by default
/// ([`ServerOptions::lease_time`]).
pub const DEFAULT_LEASE_TIME: Duration = Duration::from_secs(5);

/// How to run a server.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Directory of its cairn store (created if needed).
    pub dir: PathBuf,
    /// Address to listen on; the server's id is that of the cluster file's server with
    /// this address (or, for an unspecified IP such as 0.0.0.0, the one with this port).
    pub listen: SocketAddr,
    /// The cluster.
    pub cluster: ClusterConfig,
    /// When replies wait for the disk.
    pub sync: SyncMode,
    /// Where to serve Prometheus metrics (`/metrics`), if anywhere.
    pub metrics: Option<SocketAddr>,
    /// Entries of a partition above which it splits.
    pub split_threshold: u64,
    /// Partitions per server a directory splits into at most (0: no bound but
    /// [`giga::MAX_DEPTH`]); see [`giga::split_depth_limit`]. Once a directory is spread,
    /// its partitions grow past the threshold instead of moving entries.
    pub partitions_per_server: u32,
    /// Timeout of a call to another server.
    pub peer_timeout: Duration,
    /// Longest a request may run before it is answered DEADLINE_EXCEEDED ("timeout
    /// expired"); the operation itself still finishes or rolls back as usual.
    pub request_timeout: Duration,
    /// Longest a new connection may take to complete its TLS handshake.
    pub handshake_timeout: Duration,
    /// Requests of one connection served at once (more wait their turn).
    pub max_requests_per_connection: usize,
    /// Threads of the server's runtime: they serve the connections (TLS, HTTP/2) and,
    /// under `SyncMode::Never`, the store calls; under `SyncMode::Always` store calls
    /// and syncs run on a pool beside them. Default 1: on a 2-core machine shared with
    /// clients, one thread served 1.1–1.4× the creates/s of two at 1.6× the creates
    /// per server-CPU-second (no request crosses threads; DESIGN.md, "A server"). A
    /// server with cores of its own may want more.
    pub workers: usize,
    /// How the host opens the store: called with the open, which it runs inside what the
    /// host sets up for opens (the `cairn` binary allows transparent huge pages only
    /// while a store opens). `None`: the open runs as is.
    pub open_with: Option<fn(&mut dyn FnMut())>,
    /// A replicated group's election timeout E: a follower that hears nothing from a
    /// leader for E to 1.2 E (at random; up to 2.4 E after it saw a replica with a
    /// longer log) stands for election; a leader serves reads without asking a
    /// majority for 0.4 E after the last time a majority answered. Default: the
    /// cluster file's `election_timeout_ms`, else 1 s.
    pub election_timeout: Duration,
    /// A replicated group's replica snapshots its state (and drops the log before it)
    /// every this many entries. Default 100,000.
    pub snapshot_every: u64,
    /// How long a client's lease session lasts past its last renewal
    /// ([`DEFAULT_LEASE_TIME`]): the longest a mount's kernel keeps a name or
    /// attributes it was granted, the longest a change waits for a client that stopped
    /// answering, and about the longest changes wait after a restart or a failover
    /// while leases of before may be held. Zero: no leases (mounts' kernels keep what
    /// they are told for their own timeouts, and see others' changes that late).
    pub lease_time: Duration,
    /// Test hooks (cargo feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub hooks: Hooks,
}

impl ServerOptions {
    /// Options with the defaults: `SyncMode::Always`, no metrics endpoint, split
    /// threshold [`DEFAULT_SPLIT_THRESHOLD`], at most
    /// [`giga::DEFAULT_PARTITIONS_PER_SERVER`] partitions of a directory per server,
    /// peer timeout 5 s, request timeout 30 s,
    /// handshake timeout 5 s, 128 requests at once per connection; mutual TLS unless the
    /// cluster config is insecure ([`ClusterConfig::set_insecure`]).
    pub fn new(
        dir: impl Into<PathBuf>,
        listen: SocketAddr,
        cluster: ClusterConfig,
    ) -> ServerOptions {
        ServerOptions {
            dir: dir.into(),
            listen,
            election_timeout: cluster.election_timeout(),
            cluster,
            sync: SyncMode::Always,
            metrics: None,
            split_threshold: DEFAULT_SPLIT_THRESHOLD,
            partitions_per_server: giga::DEFAULT_PARTITIONS_PER_SERVER,
            peer_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(5),
            max_requests_per_connection: 128,
            workers: 1,
            open_with: None,
            snapshot_every: 100_000,
            lease_time: DEFAULT_LEASE_TIME,
            #[cfg(feature = "test-hooks")]
            hooks: Hooks::default(),
        }
    }
}

/// A running server (in this process).
pub struct ServerHandle {
    addr: SocketAddr,
    node: NodeRef,
    rt: Option<tokio::runtime::Runtime>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    serve: Option<tokio::task::JoinHandle<Result<(), tonic::transport::Error>>>,
    refused: Arc<AtomicU64>,
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("id", &self.node.id)
            .field("addr", &self.addr)
            .finish()
    }
}

impl ServerHandle {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// This server's id in the cluster file (its group's).
    pub fn id(&self) -> u32 {
        self.node.id
    }

    /// For a replica of a replicated group, its place in the group (role, term,
    /// applied index, snapshots) and, with `digest`, a digest of one consistent cut of
    /// its state (reads the whole store); `None` for a group of one.
    pub fn replica_status(&self, digest: bool) -> Option<proto::ReplicaStatus> {
        self.node.replica().map(|r| r.status(digest))
    }

    /// Whether this server serves requests: always for a group of one; for a replica
    /// of a replicated group, while it leads the group (and has taken up its term).
    pub fn leads(&self) -> bool {
        self.node.serving().is_ok()
    }

    /// Connections refused since it started (no certificate, one not signed by the
    /// cluster's CA, expired, of the wrong purpose, or no handshake in time); also the
    /// metric `cairn_tls_refused_total{reason}`.
    pub fn refused_connections(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Stops accepting requests, finishes those in flight, stops the background work
    /// (an unfinished split or intent is finished at the next start), writes what was
    /// deferred, and closes the store.
    ///
    /// Waits at most [`SHUTDOWN_GRACE`] for requests in flight and open connections.
    pub fn shutdown(mut self) -> Result<(), ServerError> {
        let Some(rt) = self.rt.take() else {
            return Err(ServerError::Serve("the server is stopped already".into()));
        };
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // Streams of creates are never done on their own: they end now.
        self.node.stop_streams();
        // Requests in flight get SHUTDOWN_GRACE to finish; connections still open then
        // (a client that keeps an idle connection and never answers the GOAWAY) are
        // dropped with the runtime rather than waited for.
        let served = self.serve.take().and_then(|t| {
            let wait = async move { tokio::time::timeout(SHUTDOWN_GRACE, t).await.ok() };
            if tokio::runtime::Handle::try_current().is_ok() {
                std::thread::scope(|s| s.spawn(|| rt.block_on(wait)).join())
                    .unwrap_or_else(|e| std::panic::resume_unwind(e))
            } else {
                rt.block_on(wait)
            }
        });
        // Background tasks stop at their next step; everything they did is durable.
        self.node.set_stopped(true);
        stop_runtime(rt);
        self.node.set_stopped(false);
        let node = &self.node;
        let dir = node.db().path().to_path_buf();
        let res = node
            .write_dir_times()
            .map_err(|f| ServerError::Serve(format!("writing directory times: {f:?}")));
        node.set_stopped(true);
        let closed = node.db().clone().close();
        res?;
        closed.map_err(|source| ServerError::Store { dir, source })?;
        match served {
            Some(Ok(Err(e))) => Err(ServerError::Serve(e.to_string())),
            Some(Err(e)) => Err(ServerError::Serve(e.to_string())),
            _ => Ok(()),
        }
    }

    /// Test hook (feature `test-hooks`): stops the server as if killed at this instant: nothing more is
    /// written (whatever was written stays, as the kernel would keep it), no request is
    /// finished, the store's lock is released.
    #[cfg(feature = "test-hooks")]
    pub fn kill(mut self) {
        self.node.set_stopped(true);
        if let Some(rt) = self.rt.take() {
            stop_runtime(rt);
        }
    }

    /// Test hook (feature `test-hooks`): whether the server stopped at its crash point.
    #[cfg(feature = "test-hooks")]
    pub fn crashed(&self) -> bool {
        self.node.is_crashed()
    }

    /// Test hook (feature `test-hooks`): intents this server coordinates that are not
    /// finished (and splits due but not started), and partitions it holds that are still
    /// incoming.
    #[cfg(feature = "test-hooks")]
    pub fn pending(&self) -> (usize, usize) {
        let st = self.node.state();
        let due = st
            .parts
            .iter()
            .filter(|&((d, i), _)| self.node.wants_split(&st, d, i))
            .count();
        (st.intents.len() + due, st.parts.incoming())
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            if let Some(stop) = self.stop.take() {
                let _ = stop.send(());
            }
            self.node.set_stopped(true);
            stop_runtime(rt);
        }
    }
}

/// Stops a server's runtime, waiting (up to 10 s) for its tasks; from inside another
/// runtime (where blocking is not allowed), on a thread of its own.
fn stop_runtime(rt: tokio::runtime::Runtime) {
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|s| {
            s.spawn(move || rt.shutdown_timeout(Duration::from_secs(10)));
        });
    } else {
        rt.shutdown_timeout(Duration::from_secs(10));
    }
}

/// The server (group) id and replica id of the replica that listens on `listen`
/// ([`ClusterConfig::locate`]).
fn server_id(cfg: &ClusterConfig, listen: SocketAddr) -> Result<(u32, u64), ServerError> {
    cfg.locate(listen).ok_or(ServerError::NotInCluster(listen))
}

fn store_err(dir: &std::path::Path) -> impl Fn(cairn::Error) -> ServerError + '_ {
    move |source| ServerError::Store {
        dir: dir.to_path_buf(),
        source,
    }
}

fn fail_err(dir: &std::path::Path, what: &str, f: node::Fail) -> ServerError {
    ServerError::Damaged {
        dir: dir.to_path_buf(),
        what: format!("{what}: {f:?}"),
    }
}

/// The engine's options of the server's store: its sync mode (and the test hooks' file
/// operations).
fn engine_options(opts: &ServerOptions) -> Options {
    let engine = Options::new().sync(match opts.sync {
        SyncMode::Always => SyncPolicy::Always,
        SyncMode::Never => SyncPolicy::Never,
    });
    #[cfg(feature = "test-hooks")]
    let engine = match &opts.hooks.power_loss {
        Some(power) => engine.power_loss(power.clone()),
        None => engine,
    };
    #[cfg(feature = "test-hooks")]
    let engine = match &opts.hooks.fault {
        Some(fault) => engine.fault_injector(fault.clone()),
        None => engine,
    };
    engine
}

/// Starts a server: opens its store, recovers its state, listens, and returns once it
/// serves. Operations that another server must help finish (intents of a crashed run)
/// are completed in the background as soon as the peers answer.
pub fn start(opts: ServerOptions) -> Result<ServerHandle, ServerError> {
    let cfg = opts.cluster.clone();
    let me = server_id(&cfg, opts.listen)?;
    let (id, replica) = me;
    let dir = opts.dir.clone();
    // TLS first: a server that cannot authenticate touches no store.
    let refused = Arc::new(AtomicU64::new(0));
    let acceptor = if cfg.insecure() {
        tracing::warn!(
            server = id,
            "--insecure: plain TCP, no authentication: anyone who reaches {} can read and change the namespace",
            opts.listen
        );
        None
    } else {
        Some(crate::tls::Acceptor::new(
            &cfg,
            me,
            opts.handshake_timeout,
            refused.clone(),
        )?)
    };
    let reach = crate::transport::Reach::server(&cfg, me, None)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(opts.workers.clamp(1, 256))
        .max_blocking_threads(64)
        .enable_all()
        .thread_name(format!("cairn-server-{id}"))
        .build()
        .map_err(ServerError::Runtime)?;
    let engine = engine_options(&opts);
    let peers = {
        let _g = rt.enter();
        peers(&opts, &reach)?
    };
    let replicated = cfg.server(id).is_some_and(|s| s.replicas.len() > 1);
    let (node, raft_svc) = match opts.open_with {
        _ if replicated => {
            let (node, svc) = replicated::open(&opts, id, replica, engine, peers, &reach, &rt)?;
            (node, Some(svc))
        }
        None => (open_node(&opts, id, engine, peers, false)?, None),
        Some(open_with) => {
            let mut args = Some((engine, peers));
            let mut node = None;
            open_with(&mut || {
                if let Some((engine, peers)) = args.take() {
                    node = Some(open_node(&opts, id, engine, peers, false));
                }
            });
            (node.ok_or(ServerError::OpenSkipped)??, None)
        }
    };
    let listener =
        std::net::TcpListener::bind(opts.listen).map_err(|source| ServerError::Listen {
            addr: opts.listen,
            source,
        })?;
    let addr = listener
        .local_addr()
        .map_err(|source| ServerError::Listen {
            addr: opts.listen,
            source,
        })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| ServerError::Listen {
            addr: opts.listen,
            source,
        })?;
    if let Some(maddr) = opts.metrics {
        let _g = rt.enter();
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(maddr)
            .install()
            .map_err(|e| ServerError::Metrics {
                addr: maddr,
                msg: e.to_string(),
            })?;
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serve = {
        let router = router(&opts, &node, raft_svc, acceptor.is_some());
        let _g = rt.enter();
        let listener =
            tokio::net::TcpListener::from_std(listener).map_err(|source| ServerError::Listen {
                addr: opts.listen,
                source,
            })?;
        let stop = async {
            let _ = stop_rx.await;
        };
        match acceptor {
            Some(a) => rt.spawn(router.serve_with_incoming_shutdown(a.incoming(listener), stop)),
            // TCP_NODELAY on every accepted connection (the TLS accept loop sets it
            // too): a reply goes out as several small HTTP/2 frames, which Nagle's
            // algorithm would hold back for the peer's ACK. (`Server::tcp_nodelay`
            // applies only to listeners tonic binds itself.)
            None => rt.spawn(router.serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                stop,
            )),
        }
    };
    rt.spawn(node.clone().intent_runner());
    rt.spawn(node.clone().housekeeping());
    node.wake_runner();
    tracing::info!(server = id, "serving on {addr} (store {})", dir.display());
    Ok(ServerHandle {
        addr,
        node,
        rt: Some(rt),
        stop: Some(stop_tx),
        serve: Some(serve),
        refused,
    })
}

/// The connection to each server of the cluster, through `reach` (inside a tokio
/// runtime).
fn peers(
    opts: &ServerOptions,
    reach: &crate::transport::Reach,
) -> Result<Vec<peer::PeerConn>, ServerError> {
    let t = opts.peer_timeout.min(Duration::from_secs(2));
    Ok(opts
        .cluster
        .servers()
        .iter()
        .map(|s| peer::PeerConn::new(reach, s, t, opts.election_timeout))
        .collect::<Result<Vec<_>, crate::tls::TlsError>>()?)
}

/// Opens a server's store (with `engine`'s options), refuses another cluster's or
/// another server's, and recovers its state into a new node.
fn open_node(
    opts: &ServerOptions,
    id: u32,
    engine: Options,
    peers: Vec<peer::PeerConn>,
    inline_store: bool,
) -> Result<NodeRef, ServerError> {
    let cfg = &opts.cluster;
    let dir = opts.dir.clone();
    let db = engine.open(&dir).map_err(store_err(&dir))?;
    let ks = db.keyspace(crate::KEYSPACE);
    drop(db);
    check_owner(&ks, cfg, id, &dir)?;
    let node = Node::new(
        NodeConfig {
            id,
            n: cfg.len(),
            cluster_id: cfg.cluster_id(),
            sync: opts.sync,
            threshold: opts.split_threshold.max(2),
            split_depth: giga::split_depth_limit(cfg.len(), opts.partitions_per_server),
            peer_timeout: opts.peer_timeout,
            inline_store,
            lease_time: opts.lease_time,
        },
        node::RowStore::Local(ks),
        peers,
    );
    #[cfg(feature = "test-hooks")]
    let node = node.with_hooks(opts.hooks.clone());
    let node = Arc::new(node);
    recover(&node).map_err(|f| fail_err(&dir, "recovery", f))?;
    Ok(node)
}

/// Refuses a store of another cluster or of another server (group) of this one,
/// upgrades rows of an older layout, and marks a new store as server `id`'s.
pub(super) fn check_owner(
    ks: &cairn::Keyspace,
    cfg: &ClusterConfig,
    id: u32,
    dir: &std::path::Path,
) -> Result<(), ServerError> {
    let dir = dir.to_path_buf();
    // Whose store: refuse another cluster's or another server's.
    let want = proto::ServerRow {
        cluster_id: cfg.cluster_id(),
        server_id: id,
        servers: cfg.len(),
        rows_version: crate::rows::ROWS_VERSION,
    };
    match ks.get(single(TAG_SERVER)).map_err(store_err(&dir))? {
        Some(v) => {
            let have = proto::ServerRow::decode(&v[..]).map_err(|e| ServerError::Damaged {
                dir: dir.clone(),
                what: format!("server row: {e}"),
            })?;
            if have.cluster_id != want.cluster_id {
                return Err(ServerError::WrongStore {
                    dir,
                    what: format!(
                        "a cluster of {} servers with another cluster file (id {:#x}, this file's is {:#x})",
                        have.servers, have.cluster_id, want.cluster_id
                    ),
                });
            }
            if have.server_id != id {
                return Err(ServerError::WrongStore {
                    dir,
                    what: format!(
                        "server {} of this cluster (this address is server {id})",
                        have.server_id
                    ),
                });
            }
            // Rows of an older layout are rewritten now, before they are loaded.
            intent_rows::upgrade_rows(ks, &dir, have)?;
        }
        None => {
            ks.put(single(TAG_SERVER), want.encode_to_vec())
                .map_err(store_err(&dir))?;
            ks.db().flush().map_err(store_err(&dir))?;
        }
    }
    Ok(())
}

/// The gRPC server of a node: its two services behind the interceptors that learn who
/// calls (`secure`: from the TLS connection's certificates; else everyone is trusted),
/// with the request timeout and per-connection limits of `opts`.
fn router(
    opts: &ServerOptions,
    node: &NodeRef,
    raft: Option<crate::raft::net::RaftSvc>,
    secure: bool,
) -> tonic::transport::server::Router {
    use tonic::service::interceptor::InterceptedService;
    let callers = std::sync::Arc::new(crate::tls::Callers::default());
    let peer_callers = callers.clone();
    let raft_callers = callers.clone();
    let meta = InterceptedService::new(
        proto::meta_server::MetaServer::new(svc::MetaSvc(node.clone()))
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE),
        move |mut req: tonic::Request<()>| {
            let who = svc::caller(secure, &callers, &req)?;
            req.extensions_mut().insert(who);
            Ok(req)
        },
    );
    let peer = InterceptedService::new(
        proto::peer_server::PeerServer::new(svc::PeerSvc(node.clone()))
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE),
        move |mut req: tonic::Request<()>| match svc::caller(secure, &peer_callers, &req)? {
            crate::tls::Caller::Client(_) => Err(tonic::Status::permission_denied(
                "the server-to-server service is for servers' certificates only",
            )),
            who => {
                req.extensions_mut().insert(who);
                Ok(req)
            }
        },
    );
    tonic::transport::Server::builder()
        .timeout(opts.request_timeout)
        .concurrency_limit_per_connection(opts.max_requests_per_connection.max(1))
        .max_concurrent_streams(Some(2 * opts.max_requests_per_connection.max(1) as u32))
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .add_service(meta)
        .add_service(peer)
        .add_optional_service(raft.map(|r| {
            InterceptedService::new(
                proto::raft_server::RaftServer::new(r)
                    .max_decoding_message_size(MAX_MESSAGE)
                    .max_encoding_message_size(MAX_MESSAGE),
                move |mut req: tonic::Request<()>| match svc::caller(secure, &raft_callers, &req)? {
                    crate::tls::Caller::Client(_) => Err(tonic::Status::permission_denied(
                        "the raft service is for servers' certificates only",
                    )),
                    who => {
                        req.extensions_mut().insert(who);
                        Ok(req)
                    }
                },
            )
        }))
}

/// Loads what the server keeps in memory from its rows, creates the root directory on
/// server 0 of a new cluster, and frees files unlinked while open by the last run.
fn recover(node: &Node) -> Result<(), node::Fail> {
    use node::Fail;
    let damaged = |what: &str| {
        tracing::error!("damaged {what} row");
        Fail::Errno(libc::EIO)
    };
    let mut st = node.state();
    let first_local = if node.id == 0 { 2 } else { 1 };
    let lease = |tag: u8| -> Result<Option<u64>, Fail> {
        Ok(node.get_raw(&single(tag))?.and_then(|v| {
            v.get(..8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
        }))
    };
    node.set_leases(
        lease(TAG_INO_LEASE)?.unwrap_or(first_local),
        lease(TAG_INTENT_LEASE)?.unwrap_or(1),
    );
    // Leases the last run (or leader) granted may still be held: changes wait them out.
    node.grants.set_grace(node.read_horizon()?);
    for (k, v) in node.scan(&[TAG_PARTITION], None, usize::MAX)? {
        let (Some(dir), Some(idx)) = (be64(&k, 1), be32(&k, 9)) else {
            return Err(damaged("partition key"));
        };
        let p = proto::PartitionRow::decode(&v[..]).map_err(|_| damaged("partition"))?;
        let mut part = Part::new(p.depth, p.state, p.entries);
        part.removing = p.removing.map(|r| (r.server, r.id));
        st.parts.insert(dir, idx, part);
    }
    for (k, v) in node.scan(&[TAG_INTENT], None, usize::MAX)? {
        let id = be64(&k, 1).ok_or_else(|| damaged("intent key"))?;
        let row = proto::IntentRow::decode(&v[..]).map_err(|_| damaged("intent"))?;
        let names = node.intent_names(&row);
        if let Err(e) = st.names.reserve((node.id, id), &names) {
            tracing::error!(
                "intent {id} holds a name already held: {:?}",
                held_by(&st, &names)
            );
            return Err(e);
        }
        st.intents.put(id, row);
    }
    st.ledger = node.load_ledger()?;
    node.load_fences()?;
    for (k, v) in node.scan(&[TAG_PREPARED], None, usize::MAX)? {
        let (Some(s), Some(id)) = (be32(&k, 1), be64(&k, 5)) else {
            return Err(damaged("prepared key"));
        };
        let p = proto::PreparedRow::decode(&v[..]).map_err(|_| damaged("prepared"))?;
        let names = [(p.new_dir, p.new_name)];
        if let Err(e) = st.names.reserve((s, id), &names) {
            tracing::error!(
                "the rename destination prepared for intent {id} of server {s} is held \
                 already: {:?}",
                held_by(&st, &names)
            );
            return Err(e);
        }
    }
    if node.id == 0 && node.inode(cairn_fs::ROOT)?.is_none() {
        let t = cairn_fs::now_ns();
        let root = proto::InodeRow {
            mode: libc::S_IFDIR | 0o755,
            nlink: 2,
            atime: t,
            mtime: t,
            ctime: t,
            parent: cairn_fs::ROOT,
            perms_version: 1,
            ..Default::default()
        };
        let part = Part::new(0, PART_ACTIVE, 0);
        let mut b = Batch::new();
        b.put(&inode_key(cairn_fs::ROOT), &root);
        b.put(&partition_key(cairn_fs::ROOT, 0), &part.row());
        node.apply(b)?;
        st.parts.insert(cairn_fs::ROOT, 0, part);
    }
    let orphans: Vec<u64> = node
        .scan(&[TAG_ORPHAN], None, usize::MAX)?
        .into_iter()
        .filter_map(|(k, _)| be64(&k, 1))
        .collect();
    for ino in orphans {
        let mut b = Batch::new();
        if let Some(i) = node.inode(ino)? {
            if i.nlink == 0 {
                node.free_rows(&mut b, ino, &i)?;
            }
        }
        b.delete(&orphan_key(ino));
        node.apply(b)?;
    }
    drop(st);
    node.durable()?;
    Ok(())
}

/// Who holds each of `names` (a recovery's report of rows that disagree).
fn held_by(st: &state::State, names: &[(u64, Vec<u8>)]) -> Vec<String> {
    names
        .iter()
        .map(|(d, n)| {
            format!(
                "{d:#x}/{} by {:?}",
                String::from_utf8_lossy(n),
                st.names.holder(*d, n)
            )
        })
        .collect()
}

/// Runs a server until SIGTERM or SIGINT, then drains it (stop accepting, finish what
/// is in flight, close the store) and returns.
pub fn run_until_signal(opts: ServerOptions) -> Result<(), ServerError> {
    let h = start(opts)?;
    let rt =
        h.rt.as_ref()
            .ok_or_else(|| ServerError::Serve("the server is stopped already".into()))?;
    let mut failure = h.node.failure();
    let failed = rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let failed = failure.wait_for(Option::is_some);
        tokio::select! {
            _ = term.recv() => Ok::<_, std::io::Error>(None),
            _ = int.recv() => Ok(None),
            f = failed => Ok(f.ok().and_then(|f| f.clone())),
        }
    });
    let failed: Option<String> = failed.map_err(ServerError::Runtime)?;
    match failed {
        None => {
            tracing::info!(server = h.id(), "signal received: draining");
            h.shutdown()
        }
        Some(why) => {
            // The store is closed (which writes what it can); the next start
            // recovers what the disk holds.
            let dir = h.node.db().path().to_path_buf();
            if let Err(e) = h.shutdown() {
                tracing::error!("stopping after the store failed: {e}");
            }
            Err(ServerError::Serve(format!(
                "stopped: {why} (store {}); restart the server once the disk has room",
                dir.display()
            )))
        }
    }
}
