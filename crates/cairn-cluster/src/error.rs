//! The errors of starting and running a server, and of connecting a client.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::config::ConfigError;

/// Why a server could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The cluster file is not valid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No server of the cluster file has the address the server listens on.
    #[error("{0} is not the address of any server in the cluster file")]
    NotInCluster(SocketAddr),
    /// The store could not be opened, read or written.
    #[error("store at {dir}: {source}")]
    Store {
        /// The store's directory.
        dir: PathBuf,
        /// The engine's error.
        #[source]
        source: cairn::Error,
    },
    /// The store belongs to another cluster or another server of this one.
    #[error("store at {dir} belongs to {what}; refusing to serve it")]
    WrongStore {
        /// The store's directory.
        dir: PathBuf,
        /// Whose store it is.
        what: String,
    },
    /// The store's rows are damaged (a row that does not decode).
    #[error("store at {dir}: damaged row: {what}")]
    Damaged {
        /// The store's directory.
        dir: PathBuf,
        /// Which row.
        what: String,
    },
    /// The store's rows are of a later layout than this build knows (FORMAT.md,
    /// "Cluster rows").
    #[error("store at {dir}: cluster rows version {version}; this build of cairn reads versions 1 to {max}", max = crate::rows::ROWS_VERSION)]
    RowsVersion {
        /// The store's directory.
        dir: PathBuf,
        /// The store's rows version.
        version: u32,
    },
    /// The host's open wrapper ([`crate::server::ServerOptions::open_with`]) returned
    /// without running the open.
    #[error("the store was not opened: the host's open wrapper did not run the open")]
    OpenSkipped,
    /// The listening socket could not be opened.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The metrics endpoint could not be started.
    #[error("metrics endpoint on {addr}: {msg}")]
    Metrics {
        /// The address.
        addr: SocketAddr,
        /// What went wrong.
        msg: String,
    },
    /// The async runtime or a signal handler could not be set up.
    #[error("runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// TLS could not be set up (certificates, keys, or no `[tls]` without insecure).
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The server stopped with an error.
    #[error("server failed: {0}")]
    Serve(String),
}

/// Why a client could not be set up, or an operator query failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The cluster file is not valid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A server answered that it reads another cluster file.
    #[error("server {id} ({addr}) reads a different cluster file than this client")]
    ClusterMismatch {
        /// The server's id in the client's file.
        id: u32,
        /// Its address.
        addr: SocketAddr,
    },
    /// A server could not be reached within the timeout.
    #[error("server {id} ({addr}) is unreachable: {msg}")]
    Unreachable {
        /// The server's id.
        id: u32,
        /// Its address.
        addr: SocketAddr,
        /// What the transport said.
        msg: String,
    },
    /// The client's async runtime could not be started.
    #[error("runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// TLS could not be set up (certificates, keys, or no `[tls]` without insecure).
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// A server refused a request (an admin's change it cannot make, say).
    #[error("server {id}: {msg}")]
    Refused {
        /// The server's id.
        id: u32,
        /// Why.
        msg: String,
    },
    /// A server answered something unexpected.
    #[error("server {id}: {msg}")]
    Protocol {
        /// The server's id.
        id: u32,
        /// What was wrong.
        msg: String,
    },
}
