//! # cairn-cluster
//!
//! One cairn namespace spread over many metadata servers, after GIGA+ and IndexFS
//! (seed 002): each directory is split incrementally by hash into partitions that live on
//! different servers; clients cache a bitmap of each directory's partitions and servers
//! correct stale ones; splits and operations that touch two servers are crash-safe.
//! Each server keeps its rows in its own cairn store (keyspace [`KEYSPACE`]).
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

#![deny(missing_docs)]

pub mod admin;
mod batch;
pub mod client;
pub mod config;
mod error;
pub mod giga;
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
pub use config::{ClusterConfig, ConfigError, ServerInfo, TlsPaths};
pub use error::{ClientError, ServerError};
pub use tls::TlsError;

/// The keyspace of a server's store that holds its cluster rows (see FORMAT.md).
pub const KEYSPACE: u8 = 3;
