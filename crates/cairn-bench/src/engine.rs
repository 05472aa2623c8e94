//! The one trait every benchmarked engine implements, and the settings they share.
//!
//! Adding an engine is one file in `engines/` with a [`EngineSpec`] and one line in
//! [`crate::engines::all`].

use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

/// Settings that every engine is opened with, so that they are compared alike.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Settings {
    /// Durable writes: a write returns only once it is on stable storage. Off by default:
    /// no engine syncs on the write path, data reaches the disk when the OS writes it back
    /// (except redb, whose adapter makes every 1000th commit durable: see its settings).
    pub sync: bool,
    /// Roughly how many bytes of keys and values the workload will store at once, for
    /// engines that must size a file or map up front (LMDB).
    pub expected_bytes: u64,
    /// Threads the workload runs at most at once.
    pub threads: usize,
    /// Bytes of memory for a block cache, for an engine variant tuned to use one
    /// (`rocksdb-tuned`): cairn's peak heap (anonymous memory: its index and buffers,
    /// measured) in the same suite when cairn ran before it, at most a quarter of a
    /// `--memory-max` limit; else an estimate of them (64 bytes per key plus 64 MiB).
    #[serde(default)]
    pub cache_bytes: u64,
}

/// One write of a batch.
pub enum BatchOp<'a> {
    /// Store a value.
    Put(&'a [u8], &'a [u8]),
    /// Remove a key (no suite batches deletes yet; adapters support it already).
    #[allow(dead_code)]
    Delete(&'a [u8]),
}

/// An open store. Every method may be called from many threads at once.
///
/// Closing is dropping (see [`Engine::close`]); reopening is opening the same directory
/// again with the same [`EngineSpec`].
pub trait Engine: Send + Sync {
    /// Stores `value` under `key`, durably when [`Settings::sync`] is set.
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()>;

    /// Copies the value of `key` into `out` (replacing its contents) and returns true, or
    /// returns false when the key is absent.
    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;

    /// Removes `key` (absent keys are not an error).
    fn delete(&self, key: &[u8]) -> Result<()>;

    /// Applies `ops` as one atomic batch when the engine has batches; by default one by one.
    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<()> {
        for op in ops {
            match op {
                BatchOp::Put(k, v) => self.put(k, v)?,
                BatchOp::Delete(k) => self.delete(k)?,
            }
        }
        Ok(())
    }

    /// Makes every write so far durable on disk (and, for engines that buffer, written).
    fn flush(&self) -> Result<()>;

    /// Makes every write so far durable with the least work the engine needs for that
    /// (RocksDB: a synced write-ahead log, no memtable flush); by default [`Engine::flush`].
    fn sync(&self) -> Result<()> {
        self.flush()
    }

    /// Closes the store, reporting errors that a plain drop would swallow.
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// How to open one engine, and what it is.
pub struct EngineSpec {
    /// Short name, as given to `--engines`.
    pub name: &'static str,
    /// Library and version, for the report.
    pub library: &'static str,
    /// Opens (creating if needed) a store in `dir`.
    pub open: fn(dir: &Path, settings: &Settings) -> Result<Box<dyn Engine>>,
    /// Every setting that differs from the engine's defaults, as `(name, value)`, so that
    /// the report says how each engine was configured.
    pub non_default_settings: fn(settings: &Settings) -> Vec<(String, String)>,
    /// Whether the engine sizes a block cache from [`Settings::cache_bytes`] (the report
    /// then gives the size each run got).
    pub block_cache: bool,
    /// Whether the engine can make every write durable (`--sync`); one that cannot (a
    /// write-ahead log turned off) is left out of `--sync` runs.
    pub durable: bool,
}

/// `(name, value)` pairs from string slices.
pub fn pairs(items: &[(&str, String)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.clone()))
        .collect()
}
