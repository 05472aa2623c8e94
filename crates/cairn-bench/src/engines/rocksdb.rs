//! RocksDB through the `rocksdb` crate 0.20: linked to Debian's librocksdb (7.8, built
//! with assertions on) by default, or compiled from the crate's bundled sources (7.9.2,
//! `NDEBUG`, release) when the build ran with `ROCKSDB_COMPILE=1`
//! (`scripts/build-peers.sh --release-rocksdb`); the report names which.

use std::path::Path;

use anyhow::{bail, Result};
use rocksdb::{BlockBasedOptions, DBCompressionType, Options, WriteBatch, WriteOptions, DB};

use crate::engine::{pairs, BatchOp, Engine, EngineSpec, Settings};

const LIBRARY: &str = match option_env!("ROCKSDB_COMPILE") {
    Some(_) => "RocksDB 7.9.2 compiled from source (librocksdb-sys bundled, NDEBUG, release) via the rocksdb crate 0.20",
    None => "RocksDB 7.8 (Debian librocksdb-dev, assertions on) via the rocksdb crate 0.20",
};

/// RocksDB as most users run it: its defaults, with compression off as for every engine,
/// a bloom filter, and the parallelism of the machine.
pub static SPEC: EngineSpec = EngineSpec {
    name: "rocksdb",
    library: LIBRARY,
    open: |dir, settings| open(dir, settings, Mode::Defaults),
    non_default_settings: |settings| settings_of(settings, Mode::Defaults),
    block_cache: false,
    durable: true,
};

/// RocksDB tuned for point lookups as its tuning guide advises
/// (`Options::OptimizeForPointLookup`: a hash index inside data blocks, a bloom filter,
/// whole-key filtering in the memtable) with a block cache as large as cairn's index and
/// buffers ([`Settings::cache_bytes`]).
pub static SPEC_TUNED: EngineSpec = EngineSpec {
    name: "rocksdb-tuned",
    library: LIBRARY,
    open: |dir, settings| open(dir, settings, Mode::Tuned),
    non_default_settings: |settings| settings_of(settings, Mode::Tuned),
    block_cache: true,
    durable: true,
};

/// `rocksdb-tuned` with its write-ahead log off: an upper bound, not a peer — a crash
/// loses the whole memtable (cairn's log loses at most its last unsynced writes). Left
/// out of `--sync` runs (RocksDB refuses synced writes without a log).
pub static SPEC_NOWAL: EngineSpec = EngineSpec {
    name: "rocksdb-nowal",
    library: LIBRARY,
    open: |dir, settings| open(dir, settings, Mode::NoWal),
    non_default_settings: |settings| settings_of(settings, Mode::NoWal),
    block_cache: true,
    durable: false,
};

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Defaults,
    Tuned,
    NoWal,
}

/// Bloom filter bits per key (RocksDB's tuning guide recommends 10 for point lookups).
const BLOOM_BITS: f64 = 10.0;

fn settings_of(settings: &Settings, mode: Mode) -> Vec<(String, String)> {
    let mut v = vec![
        ("compression", "none".into()),
        (
            "increase_parallelism",
            format!("{} (the machine's CPUs)", cpus()),
        ),
        ("level_compaction_dynamic_level_bytes", "true".into()),
        ("bytes_per_sync", "1 MiB".into()),
    ];
    if mode == Mode::Defaults {
        v.push(("bloom filter", format!("{BLOOM_BITS} bits per key")));
    } else {
        v.push((
            "optimize_for_point_lookup",
            format!(
                "block cache {} MiB (cairn's peak heap in the same suite; the run table gives each run's): \
                 data-block hash index, bloom filter 10 bits per key, memtable whole-key filtering",
                settings.cache_bytes >> 20
            ),
        ));
    }
    if mode == Mode::NoWal {
        v.push(("WriteOptions::disable_wal", "true".into()));
    } else {
        v.push(("WriteOptions::sync", settings.sync.to_string()));
    }
    pairs(&v)
}

fn cpus() -> i32 {
    std::thread::available_parallelism().map_or(2, |n| n.get() as i32)
}

/// RocksDB's `OptimisticTransactionDB` with the options of [`SPEC`] (its defaults, a
/// bloom filter, compression off, the machine's parallelism), and the write options of
/// its commits (`sync`: each one durable), for `cairn tx-bench`.
pub(crate) fn open_optimistic(
    dir: &Path,
    sync: bool,
) -> Result<(rocksdb::OptimisticTransactionDB, WriteOptions)> {
    let settings = Settings {
        sync,
        expected_bytes: 0,
        threads: 1,
        cache_bytes: 0,
    };
    let opts = options(&settings, Mode::Defaults);
    let db = rocksdb::OptimisticTransactionDB::open(&opts, dir)?;
    let mut write = WriteOptions::default();
    write.set_sync(sync);
    Ok((db, write))
}

fn options(settings: &Settings, mode: Mode) -> Options {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.increase_parallelism(cpus());
    opts.set_level_compaction_dynamic_level_bytes(true);
    opts.set_bytes_per_sync(1 << 20);
    if mode == Mode::Defaults {
        let mut table = BlockBasedOptions::default();
        table.set_bloom_filter(BLOOM_BITS, false);
        opts.set_block_based_table_factory(&table);
    } else {
        // In MiB, as RocksDB takes it; at least 1.
        opts.optimize_for_point_lookup((settings.cache_bytes >> 20).max(1));
    }
    // After optimize_for_point_lookup, which leaves compression as it was.
    opts.set_compression_type(DBCompressionType::None);
    opts
}

fn open(dir: &Path, settings: &Settings, mode: Mode) -> Result<Box<dyn Engine>> {
    if mode == Mode::NoWal && settings.sync {
        bail!("rocksdb-nowal cannot make a write durable on its own (its log is off)");
    }
    let opts = options(settings, mode);
    let db = DB::open(&opts, dir)?;
    let wal = mode != Mode::NoWal;
    // Made once, not per write (each is a C++ object allocated by the C API).
    let mut write = WriteOptions::default();
    write.set_sync(settings.sync);
    write.disable_wal(!wal);
    Ok(Box::new(Rocks { db, write, wal }))
}

struct Rocks {
    db: DB,
    write: WriteOptions,
    /// The write-ahead log is on.
    wal: bool,
}

impl Engine for Rocks {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.db.put_opt(key, value, &self.write)?)
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
        Ok(self.db.delete_opt(key, &self.write)?)
    }

    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<()> {
        let mut batch = WriteBatch::default();
        for op in ops {
            match op {
                BatchOp::Put(k, v) => batch.put(k, v),
                BatchOp::Delete(k) => batch.delete(k),
            }
        }
        Ok(self.db.write_opt(batch, &self.write)?)
    }

    fn flush(&self) -> Result<()> {
        if self.wal {
            self.db.flush_wal(true)?;
        }
        Ok(self.db.flush()?)
    }

    fn sync(&self) -> Result<()> {
        if !self.wal {
            // Without a log only a memtable flush makes writes durable.
            return Ok(self.db.flush()?);
        }
        // Every write is in the write-ahead log: syncing it makes them durable.
        Ok(self.db.flush_wal(true)?)
    }
}
