//! RocksDB through the `rocksdb` crate 0.20: linked to Debian's librocksdb (7.8, built
//! with assertions on) by default, or compiled from the crate's bundled sources (7.9.2,
//! `NDEBUG`, release) when the build ran with `ROCKSDB_COMPILE=1`
//! (`scripts/build-peers.sh --release-rocksdb`); the report names which.

use std::path::Path;

use anyhow::Result;
use rocksdb::{BlockBasedOptions, DBCompressionType, Options, WriteBatch, WriteOptions, DB};

use crate::engine::{pairs, BatchOp, Engine, EngineSpec, Settings};

pub static SPEC: EngineSpec = EngineSpec {
    name: "rocksdb",
    library: match option_env!("ROCKSDB_COMPILE") {
        Some(_) => "RocksDB 7.9.2 compiled from source (librocksdb-sys bundled, NDEBUG, release) via the rocksdb crate 0.20",
        None => "RocksDB 7.8 (Debian librocksdb-dev, assertions on) via the rocksdb crate 0.20",
    },
    open,
    non_default_settings,
};

/// Bloom filter bits per key (RocksDB's tuning guide recommends 10 for point lookups).
const BLOOM_BITS: f64 = 10.0;

fn non_default_settings(settings: &Settings) -> Vec<(String, String)> {
    pairs(&[
        ("compression", "none".into()),
        (
            "increase_parallelism",
            format!("{} (the machine's CPUs)", cpus()),
        ),
        ("level_compaction_dynamic_level_bytes", "true".into()),
        ("bloom filter", format!("{BLOOM_BITS} bits per key")),
        ("bytes_per_sync", "1 MiB".into()),
        ("WriteOptions::sync", settings.sync.to_string()),
    ])
}

fn cpus() -> i32 {
    std::thread::available_parallelism().map_or(2, |n| n.get() as i32)
}

fn open(dir: &Path, settings: &Settings) -> Result<Box<dyn Engine>> {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.set_compression_type(DBCompressionType::None);
    opts.increase_parallelism(cpus());
    opts.set_level_compaction_dynamic_level_bytes(true);
    opts.set_bytes_per_sync(1 << 20);
    let mut table = BlockBasedOptions::default();
    table.set_bloom_filter(BLOOM_BITS, false);
    opts.set_block_based_table_factory(&table);
    let db = DB::open(&opts, dir)?;
    Ok(Box::new(Rocks {
        db,
        sync: settings.sync,
    }))
}

struct Rocks {
    db: DB,
    sync: bool,
}

impl Rocks {
    fn write_options(&self) -> WriteOptions {
        let mut wo = WriteOptions::default();
        wo.set_sync(self.sync);
        wo
    }
}

impl Engine for Rocks {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.db.put_opt(key, value, &self.write_options())?)
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match self.db.get_pinned(key)? {
            Some(value) => {
                out.clear();
                out.extend_from_slice(&value);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        Ok(self.db.delete_opt(key, &self.write_options())?)
    }

    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<()> {
        let mut batch = WriteBatch::default();
        for op in ops {
            match op {
                BatchOp::Put(k, v) => batch.put(k, v),
                BatchOp::Delete(k) => batch.delete(k),
            }
        }
        Ok(self.db.write_opt(batch, &self.write_options())?)
    }

    fn flush(&self) -> Result<()> {
        self.db.flush_wal(true)?;
        Ok(self.db.flush()?)
    }

    fn sync(&self) -> Result<()> {
        // Every write is in the write-ahead log: syncing it makes them durable.
        Ok(self.db.flush_wal(true)?)
    }
}
