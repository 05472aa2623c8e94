//! Operator views of a cluster: [`status`] (what each server holds) and [`check`]
//! (whether the namespace is consistent across the servers).

use std::time::Duration;

use serde::Serialize;

use crate::config::ClusterConfig;
use crate::error::ClientError;

/// One server as seen by [`status`].
#[derive(Clone, Debug, Default, Serialize)]
pub struct ServerState {
    /// Its id.
    pub id: u32,
    /// Its address.
    pub addr: String,
    /// Whether it answered.
    pub up: bool,
    /// Why not, if it did not.
    pub error: Option<String>,
    /// Directory partitions it holds.
    pub partitions: u64,
    /// Directory entries in them.
    pub entries: u64,
    /// Inodes whose home it is.
    pub inodes: u64,
    /// Splits it finished since it started.
    pub splits_done: u64,
    /// Splits it is doing now (or that wait for a peer).
    pub splits_in_flight: u32,
    /// Redirects it sent since it started.
    pub redirects: u64,
    /// Operations across servers it coordinates that are not finished.
    pub intents_pending: u32,
}

/// A directory with many partitions.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LargeDir {
    /// Its inode number.
    pub dir: u64,
    /// Its partitions (over all servers that answered).
    pub partitions: u32,
    /// Its entries (over all servers that answered).
    pub entries: u64,
}

/// What [`status`] returns.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ClusterStatus {
    /// Every server of the cluster file, by id.
    pub servers: Vec<ServerState>,
    /// The largest directories by entries, with their partition counts.
    pub largest: Vec<LargeDir>,
}

/// Asks every server what it holds; a server that does not answer within `timeout` is
/// reported down.
pub fn status(cfg: &ClusterConfig, timeout: Duration) -> ClusterStatus {
    let _ = timeout;
    ClusterStatus {
        servers: cfg
            .servers()
            .iter()
            .map(|s| ServerState {
                id: s.id,
                addr: s.addr.to_string(),
                up: false,
                error: Some("not built yet".into()),
                ..Default::default()
            })
            .collect(),
        largest: Vec::new(),
    }
}

/// What [`check`] found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ClusterCheck {
    /// Each inconsistency found, in words; empty when the cluster is consistent.
    pub problems: Vec<String>,
    /// Servers that did not answer (their rows were not checked).
    pub down: Vec<u32>,
    /// Partitions checked.
    pub partitions: u64,
    /// Entries checked.
    pub entries: u64,
    /// Inodes checked.
    pub inodes: u64,
}

/// Reads every server's rows and checks the namespace: partitions tile each
/// directory's hash space on the servers GIGA+ places them, every entry is in the
/// partition its hash says, every entry's inode exists at its home with a matching
/// link row and every link row has its entry, and nothing is left half done (an
/// incoming partition or an intent older than a grace period). A server that does not
/// answer is listed in `down` and as a problem.
pub fn check(cfg: &ClusterConfig, timeout: Duration) -> Result<ClusterCheck, ClientError> {
    let _ = (cfg, timeout);
    Ok(ClusterCheck {
        problems: vec!["not built yet".into()],
        ..Default::default()
    })
}
