//! redb 2 (a copy-on-write B-tree in Rust), one table.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Result;
use redb::{Database, Durability, TableDefinition};

use crate::engine::{pairs, BatchOp, Engine, EngineSpec, Settings};

pub static SPEC: EngineSpec = EngineSpec {
    name: "redb",
    library: "redb 2",
    open,
    non_default_settings,
    block_cache: false,
    durable: true,
};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bench");

/// Without --sync, one commit in this many is durable: redb reuses freed pages only after
/// a durable commit, so that a file written only with `Durability::None` grows without
/// bound.
const DURABLE_EVERY: u64 = 1000;

fn non_default_settings(settings: &Settings) -> Vec<(String, String)> {
    let mut out = vec![(
        "transactions",
        "one write transaction per put/delete; one read transaction per get".to_string(),
    )];
    if !settings.sync {
        out.push((
            "durability",
            format!(
                "Durability::None, every {DURABLE_EVERY}th commit Durability::Immediate \
                 (redb frees pages only in durable commits)"
            ),
        ));
    }
    pairs(&out)
}

fn open(dir: &Path, settings: &Settings) -> Result<Box<dyn Engine>> {
    let db = Database::create(dir.join("bench.redb"))?;
    let txn = db.begin_write()?;
    txn.open_table(TABLE)?;
    txn.commit()?;
    Ok(Box::new(Redb {
        db,
        sync: settings.sync,
        commits: AtomicU64::new(0),
    }))
}

struct Redb {
    db: Database,
    sync: bool,
    commits: AtomicU64,
}

impl Redb {
    fn write(
        &self,
        f: impl FnOnce(&mut redb::Table<'_, &[u8], &[u8]>) -> Result<()>,
    ) -> Result<()> {
        let mut txn = self.db.begin_write()?;
        let n = self.commits.fetch_add(1, Ordering::Relaxed);
        if !self.sync && (n + 1) % DURABLE_EVERY != 0 {
            txn.set_durability(Durability::None);
        }
        {
            let mut table = txn.open_table(TABLE)?;
            f(&mut table)?;
        }
        txn.commit()?;
        Ok(())
    }
}

impl Engine for Redb {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write(|t| {
            t.insert(key, value)?;
            Ok(())
        })
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(TABLE)?;
        match table.get(key)? {
            Some(value) => {
                out.clear();
                out.extend_from_slice(value.value());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.write(|t| {
            t.remove(key)?;
            Ok(())
        })
    }

    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<()> {
        self.write(|t| {
            for op in ops {
                match op {
                    BatchOp::Put(k, v) => {
                        t.insert(*k, *v)?;
                    }
                    BatchOp::Delete(k) => {
                        t.remove(*k)?;
                    }
                }
            }
            Ok(())
        })
    }

    fn flush(&self) -> Result<()> {
        // A durable (empty) commit makes every earlier commit durable.
        let txn = self.db.begin_write()?;
        txn.commit()?;
        Ok(())
    }
}
