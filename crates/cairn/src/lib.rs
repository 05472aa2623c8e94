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
//! [`Db::files`] is a file store on top of it: values of any size streamed in chunks
//! over all shards, committed atomically, read with range reads ([`files`]).
//!
//! See DESIGN.md for how it works and FORMAT.md for the bytes on disk.

#![deny(missing_docs)]

mod batch;
mod bloom;
mod compaction;
mod db;
mod error;
pub mod fault;
pub mod files;
pub mod fs;
mod fsutil;
mod hash_index;
mod index;
mod iter;
mod manifest;
mod options;
mod record;
mod recovery;
mod segment;
mod shard;
mod stats;
mod value;
mod verify;

pub use batch::WriteBatch;
pub use db::Db;
pub use error::{Error, Result};
pub use iter::Iter;
pub use options::{Options, SyncPolicy};
pub use stats::{ShardStats, Stats};
pub use value::Value;
pub use verify::{Damage, VerifyReport};

/// Largest key, in bytes.
pub const MAX_KEY_LEN: usize = 64 << 10;
/// Largest value, in bytes.
pub const MAX_VALUE_LEN: usize = 1 << 30;
/// Version of the on-disk format written and read by this build (see FORMAT.md).
pub const FORMAT_VERSION: u32 = 1;
