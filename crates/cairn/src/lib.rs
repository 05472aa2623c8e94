//! # cairn
//!
//! An embedded key-value store: a log-structured hash design (append-only segment
//! files, every key in an in-memory index, one disk read per lookup) sharded over many
//! size-capped partitions, with ordered range and prefix scans, atomic batches across
//! shards, group commit, checksums on every read, and crash recovery that keeps every
//! intact record.
//!
//! ```
//! use cairn::{Db, WriteBatch};
//! # let dir = tempfile::tempdir().unwrap();
//! let db = Db::open(dir.path())?;
//! db.put("user:1", "ada")?;
//! db.put("user:2", "grace")?;
//! let mut batch = WriteBatch::new();
//! batch.put("user:3", "edsger").delete("user:1");
//! db.write(batch)?;
//! let users: Vec<_> = db.prefix("user:").collect::<Result<_, _>>()?;
//! assert_eq!(users.len(), 2);
//! db.flush()?; // durable
//! # Ok::<(), cairn::Error>(())
//! ```
//!
//! Layers build on it through [`Db::keyspace`] (a key space of their own),
//! [`Db::extension`] (state shared by every handle of an open store) and
//! [`Db::spawn_background`] (threads that stop when the store closes): the file store
//! (crate `cairn-files`) and the file system (crate `cairn-fs`) are built that way. This
//! crate knows nothing of them and must never depend on another cairn crate.
//!
//! See DESIGN.md for how it works and FORMAT.md for the bytes on disk.

#![deny(missing_docs, clippy::unwrap_used, clippy::expect_used)]

// Layers of the engine, lowest first: each module uses only those above it in this
// list (DESIGN.md, "Modules").
mod background;
pub mod backup;
mod batch;
mod bloom;
mod cache;
mod checkpoint;
mod commitlog;
mod compaction;
mod core;
mod ctx;
mod damage;
mod db;
mod error;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod fault;
mod fsutil;
mod hash_index;
mod index;
mod iter;
mod keys;
mod keyspace;
mod loc;
mod manifest;
mod many;
mod numbered;
mod open;
mod options;
#[cfg(feature = "test-hooks")]
mod powerloss;
mod readonly;
mod record;
mod recovery;
mod room;
mod route;
mod segment;
mod seq;
mod shard;
mod snapshot;
mod stats;
mod table_mem;
mod tally;
mod transaction;
mod value;
mod verify;
mod versions;
mod wake;

pub use batch::WriteBatch;
// A benchmark's tool, not the store's: reachable for the benchmarks (cairn-bench, the
// engine's examples, the CLI's cold-read tests), left out of the documented API.
#[doc(hidden)]
pub use cache::evict_page_cache;
pub use checkpoint::{CheckpointReport, INCOMPLETE};
pub use compaction::Reclaimed;
pub use damage::Damage;
pub use db::{Background, Db};
pub use error::{Error, Result};
pub use iter::Iter;
pub use keyspace::{Keyspace, WriteOptions};
pub use options::{Options, SyncPolicy};
pub use readonly::CatchUp;
pub use snapshot::Snapshot;
pub use stats::{ShardStats, SnapshotStats, Stats};
pub use tally::KeyspaceStats;
pub use transaction::{Transaction, TxIter};
pub use value::Value;
pub use verify::VerifyReport;

/// Largest key, in bytes.
pub const MAX_KEY_LEN: usize = 64 << 10;
/// Largest value, in bytes.
pub const MAX_VALUE_LEN: usize = 1 << 30;
/// Bytes of a record's header: a record on disk takes this, plus its key and keyspace
/// byte, plus its value (see FORMAT.md).
pub const RECORD_HEADER_LEN: usize = record::HEADER_LEN;
/// Version of the on-disk format in segment, hint and `SEQSTATE` headers, and in the
/// manifest of a store that routes every key by its hash. A store created with numbered
/// rows declared has a manifest of version 2 (its grouped rows listed); this build reads
/// both (see FORMAT.md).
pub const FORMAT_VERSION: u32 = 1;
