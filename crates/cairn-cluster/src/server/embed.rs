//! A server inside the caller's tokio runtime, on connections the caller supplies and
//! reaching its peers through the caller's [`Dialer`]: the simulation of
//! `cairn cluster-sim` runs hundreds of them in one process on a simulated network.
//! The server's code is the same as [`super::start`]'s; only the runtime, the
//! listener and the peer channels differ, and store calls run in the calling task
//! (no blocking pool) so that one thread sees them in a fixed order.

use std::sync::{Arc, Weak};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_stream::Stream;
use tonic::transport::server::Connected;

use super::node::Node;
use super::{open_node, peers, router, server_id, ServerError, ServerOptions};
use crate::transport::{Dialer, Reach};

/// A server started by [`start_embedded`]. Dropping it marks the server crashed (its
/// tasks write nothing more); the caller drops its runtime's tasks to stop them, as a
/// SIGKILL would.
pub struct Embedded {
    node: Arc<Node>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl std::fmt::Debug for Embedded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedded")
            .field("id", &self.node.id)
            .finish()
    }
}

/// Starts a server in the current tokio runtime: opens its store with `engine`'s
/// options (their sync policy is replaced by `opts.sync`'s), recovers, serves the
/// connections of `incoming` and reaches its peers through `dialer`. Its tasks are
/// spawned with `tokio::spawn`; the metrics endpoint of `opts` is not started.
pub fn start_embedded<S, IO, E>(
    opts: ServerOptions,
    engine: cairn::Options,
    incoming: S,
    dialer: Dialer,
) -> Result<Embedded, ServerError>
where
    S: Stream<Item = Result<IO, E>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    let me = server_id(&opts.cluster, opts.listen)?;
    let id = me.0;
    let engine = engine.sync(match opts.sync {
        super::SyncMode::Always => cairn::SyncPolicy::Always,
        super::SyncMode::Never => cairn::SyncPolicy::Never,
    });
    // The caller's connections carry no TLS: only an insecure cluster config is
    // accepted (Reach refuses a dialer otherwise), and callers are trusted as under
    // `--insecure`.
    let reach = Reach::server(&opts.cluster, me, Some(dialer))?;
    let peers = peers(&opts, &reach)?;
    let node = open_node(&opts, id, engine, peers, true)?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(
        router(&opts, &node, None, false).serve_with_incoming_shutdown(incoming, async {
            let _ = stop_rx.await;
        }),
    );
    tokio::spawn(node.clone().intent_runner());
    tokio::spawn(node.clone().housekeeping());
    node.wake_runner();
    Ok(Embedded {
        node,
        stop: Some(stop_tx),
    })
}

impl Embedded {
    /// This server's id.
    pub fn id(&self) -> u32 {
        self.node.id
    }

    /// A handle that reads this server's state without keeping it alive.
    pub fn probe(&self) -> Probe {
        Probe {
            node: Arc::downgrade(&self.node),
        }
    }
}

impl Drop for Embedded {
    fn drop(&mut self) {
        self.node.set_stopped(true);
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// One partition a server holds, as [`Probe::partitions`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionInfo {
    /// The directory's inode.
    pub dir: u64,
    /// The partition's index.
    pub index: u32,
    /// Its GIGA+ depth.
    pub depth: u32,
    /// Entries it holds.
    pub entries: u64,
    /// Whether a split of it is moving entries now.
    pub splitting: bool,
    /// Whether it is still incoming (a split's target before activation).
    pub incoming: bool,
}

/// Reads an [`Embedded`] server's state; answers `None` once the server is gone.
#[derive(Clone, Debug)]
pub struct Probe {
    node: Weak<Node>,
}

impl Probe {
    /// The partitions the server holds.
    pub fn partitions(&self) -> Option<Vec<PartitionInfo>> {
        let node = self.node.upgrade()?;
        let st = node.state();
        Some(
            st.parts
                .iter()
                .map(|((dir, index), p)| PartitionInfo {
                    dir,
                    index,
                    depth: p.depth,
                    entries: p.entries,
                    splitting: p.splitting,
                    incoming: p.state == crate::rows::PART_INCOMING,
                })
                .collect(),
        )
    }

    /// Splits this server finished as the source since it started.
    pub fn splits_done(&self) -> Option<u64> {
        let node = self.node.upgrade()?;
        Some(node.counters.splits_done())
    }

    /// Entries the splits it finished as the source gave their new partitions (the
    /// upper half of each, moved to another server or relabelled in place).
    pub fn entries_moved(&self) -> Option<u64> {
        let node = self.node.upgrade()?;
        Some(node.counters.entries_moved())
    }

    /// Whether a split of one of its partitions is moving entries now.
    pub fn splitting(&self) -> bool {
        self.node
            .upgrade()
            .is_some_and(|n| n.state().parts.any_splitting())
    }

    /// Redirects the server answered since it started.
    pub fn redirects(&self) -> Option<u64> {
        let node = self.node.upgrade()?;
        Some(node.counters.redirects())
    }
}
