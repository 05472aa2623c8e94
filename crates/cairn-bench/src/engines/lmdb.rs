//! LMDB through `heed` (which builds LMDB's C source, the "mdb.master" branch).

use std::path::Path;

use anyhow::Result;
use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions};

use crate::engine::{pairs, BatchOp, Engine, EngineSpec, Settings};

pub static SPEC: EngineSpec = EngineSpec {
    name: "lmdb",
    library: "LMDB (mdb.master) via heed 0.22",
    open,
    non_default_settings,
    block_cache: false,
    durable: true,
};

/// The map (the largest the file may grow to): room for four times the data, at least
/// 1 GiB. LMDB needs it up front; it is only address space until pages are written.
fn map_size(settings: &Settings) -> usize {
    let bytes = (settings.expected_bytes.saturating_mul(4)).max(1 << 30);
    (bytes.div_ceil(1 << 20) << 20) as usize
}

fn non_default_settings(settings: &Settings) -> Vec<(String, String)> {
    let mut out = vec![("map_size", format!("{} MiB", map_size(settings) >> 20))];
    if !settings.sync {
        out.push(("flags", "MDB_NOSYNC (no fsync at commit)".into()));
    }
    if max_readers(settings) != DEFAULT_MAX_READERS {
        out.push(("max_readers", format!("{}", max_readers(settings))));
    }
    out.push((
        "transactions",
        "one write transaction per put/delete; one read transaction per get".into(),
    ));
    pairs(&out)
}

/// LMDB's default number of reader slots.
const DEFAULT_MAX_READERS: u32 = 126;

/// Reader slots: one per thread that may read at once, with room to spare.
fn max_readers(settings: &Settings) -> u32 {
    (settings.threads as u32 + 8).max(DEFAULT_MAX_READERS)
}

fn open(dir: &Path, settings: &Settings) -> Result<Box<dyn Engine>> {
    let mut options = EnvOpenOptions::new();
    options
        .map_size(map_size(settings))
        .max_dbs(1)
        .max_readers(max_readers(settings));
    if !settings.sync {
        // SAFETY: NO_SYNC only gives up durability across a crash of the machine, which is
        // what the benchmark's default asks of every engine.
        unsafe {
            options.flags(EnvFlags::NO_SYNC);
        }
    }
    // SAFETY: the directory is used by this process only, and opened once at a time.
    let env = unsafe { options.open(dir)? };
    let mut txn = env.write_txn()?;
    let db: Database<Bytes, Bytes> = env.create_database(&mut txn, None)?;
    txn.commit()?;
    Ok(Box::new(Lmdb { env, db }))
}

struct Lmdb {
    env: Env,
    db: Database<Bytes, Bytes>,
}

impl Engine for Lmdb {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut txn = self.env.write_txn()?;
        self.db.put(&mut txn, key, value)?;
        Ok(txn.commit()?)
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let txn = self.env.read_txn()?;
        match self.db.get(&txn, key)? {
            Some(value) => {
                out.clear();
                out.extend_from_slice(value);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        let mut txn = self.env.write_txn()?;
        self.db.delete(&mut txn, key)?;
        Ok(txn.commit()?)
    }

    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<()> {
        let mut txn = self.env.write_txn()?;
        for op in ops {
            match op {
                BatchOp::Put(k, v) => self.db.put(&mut txn, k, v)?,
                BatchOp::Delete(k) => {
                    self.db.delete(&mut txn, k)?;
                }
            }
        }
        Ok(txn.commit()?)
    }

    fn flush(&self) -> Result<()> {
        Ok(self.env.force_sync()?)
    }

    fn close(self: Box<Self>) -> Result<()> {
        // heed keeps environments open per path; wait until this one is really closed,
        // so that it can be opened again.
        let Lmdb { env, .. } = *self;
        env.prepare_for_closing().wait();
        Ok(())
    }
}
