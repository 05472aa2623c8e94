//! A metadata server: holds partitions of directories, the inodes whose home it is and
//! their data, in its own cairn store; serves clients and its peers over gRPC; splits
//! partitions that grow past the threshold; coordinates operations that touch two
//! servers with durable intents, and finishes them after a crash.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::ClusterConfig;
use crate::error::ServerError;

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
    /// Timeout of a call to another server.
    pub peer_timeout: Duration,
    /// Test hook: stop as if killed when reaching this named point (see DESIGN.md,
    /// "Cluster", crash points).
    #[doc(hidden)]
    pub crash_at: Option<String>,
}

impl ServerOptions {
    /// Options with the defaults: `SyncMode::Always`, no metrics endpoint, split
    /// threshold [`DEFAULT_SPLIT_THRESHOLD`], peer timeout 5 s.
    pub fn new(
        dir: impl Into<PathBuf>,
        listen: SocketAddr,
        cluster: ClusterConfig,
    ) -> ServerOptions {
        ServerOptions {
            dir: dir.into(),
            listen,
            cluster,
            sync: SyncMode::Always,
            metrics: None,
            split_threshold: DEFAULT_SPLIT_THRESHOLD,
            peer_timeout: Duration::from_secs(5),
            crash_at: None,
        }
    }
}

/// A running server (in this process).
pub struct ServerHandle {
    addr: SocketAddr,
}

impl ServerHandle {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting requests, finishes those in flight, and closes the store.
    pub fn shutdown(self) -> Result<(), ServerError> {
        Err(ServerError::Serve("not built yet".into()))
    }
}

/// Starts a server: opens its store, recovers its state, listens, and returns once it
/// serves. Operations that another server must help finish (intents of a crashed run)
/// are completed in the background as soon as the peers answer.
pub fn start(opts: ServerOptions) -> Result<ServerHandle, ServerError> {
    let _ = opts;
    Err(ServerError::Serve("not built yet".into()))
}

/// Runs a server until SIGTERM or SIGINT, then drains it (stop accepting, finish what
/// is in flight, close the store) and returns.
pub fn run_until_signal(opts: ServerOptions) -> Result<(), ServerError> {
    let h = start(opts)?;
    h.shutdown()
}
