//! # cairn-cluster
//!
//! One cairn namespace spread over many metadata servers, after GIGA+ and IndexFS: each
//! directory is split incrementally by hash into partitions that live on different
//! servers; clients cache a bitmap of each directory's partitions and servers correct
//! stale ones; splits and operations that touch two servers are crash-safe. Each server
//! keeps its rows in its own cairn store (keyspace [`KEYSPACE`]).
//!
//! ```
//! use std::{net::TcpListener, time::Duration};
//! use cairn_cluster::{admin, server, tls, Client, ClusterConfig, ServerInfo};
//! use cairn_fs::{Cred, FileSystem, ROOT};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! // Two servers on free local ports; a CA, their certificates, a client's, and the
//! // cluster file that names them all.
//! let servers: Vec<ServerInfo> = (0..2)
//!     .map(|id| Ok(ServerInfo::single(id, TcpListener::bind("127.0.0.1:0")?.local_addr()?)))
//!     .collect::<std::io::Result<_>>()?;
//! let file = tls::init_certs(&dir.path().join("certs"), &servers, &[tls::ClientCert::admin("ops")])?;
//! let cfg = ClusterConfig::load(&file)?;
//! let running = servers
//!     .iter()
//!     .map(|s| server::start(server::ServerOptions::new(dir.path().join(format!("srv{}", s.id)), s.addr, cfg.clone())))
//!     .collect::<Result<Vec<_>, _>>()?;
//!
//! let fs = Client::connect(&file)?; // every cairn_fs::FileSystem operation, blocking
//! let docs = fs.mkdir(&Cred::ROOT, ROOT, b"docs", 0o755)?;
//! fs.create(&Cred::ROOT, docs.ino, b"a.txt", 0o644)?;
//! assert!(admin::check(&cfg, Duration::from_secs(5))?.problems.is_empty());
//! for s in running {
//!     s.shutdown()?; // drain, close the store
//! }
//! # Ok(())
//! # }
//! ```
//!
//! - [`server`]: run a metadata server ([`server::start`], [`server::run_until_signal`]).
//! - [`client`]: [`client::Client`], the operations of [`cairn_fs::FileSystem`] on a
//!   cluster.
//! - [`admin`]: [`admin::status`] and [`admin::check`] for operators.
//! - [`tls`]: mutual TLS, identities from certificates, test certificates.
//! - [`transport`]: how parties reach a server; the seam for a simulated network.
//!
//! This crate uses the engine (`cairn`) and the file system's types and rules
//! (`cairn-fs`) through their public APIs. It must never depend on the FUSE adapter,
//! the benchmarks or the CLI.

#![deny(missing_docs, clippy::unwrap_used, clippy::expect_used)]
#![forbid(unsafe_code)]

pub mod admin;
mod batch;
pub mod client;
pub mod config;
mod convert;
mod error;
pub mod giga;
mod raft;
mod rows;
pub mod server;
mod stream;
pub mod tls;
pub mod transport;

/// The generated gRPC code of `proto/cluster.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("cairn.cluster.v1");
}

pub use client::{Client, ClientOptions, Creates};
pub use config::{ClusterConfig, ConfigError, ReplicaInfo, ServerInfo, TlsPaths};
pub use error::{ClientError, ServerError};
pub use tls::TlsError;

/// The gRPC metadata key of a replica's refusal because it does not lead its group
/// (its value: the address of the replica it believes leads, or empty): nothing was
/// done, and the request may be sent to the leader as is.
pub const NOT_LEADER: &str = "cairn-leader";

/// The keyspace of a server's store that holds its cluster rows (see FORMAT.md).
pub const KEYSPACE: u8 = 3;
