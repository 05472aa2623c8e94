//! fjall 2 (an LSM-tree in Rust), one partition.

use std::path::Path;

use anyhow::Result;
use fjall::{
    CompressionType, Config, Keyspace, PartitionCreateOptions, PartitionHandle, PersistMode,
};

use crate::engine::{pairs, BatchOp, Engine, EngineSpec, Settings};

pub static SPEC: EngineSpec = EngineSpec {
    name: "fjall",
    library: "fjall 2",
    open,
    non_default_settings,
    block_cache: false,
    durable: true,
};

fn non_default_settings(settings: &Settings) -> Vec<(String, String)> {
    let mut out = vec![("partition compression", "CompressionType::None".to_string())];
    if settings.sync {
        out.push((
            "durability",
            "Keyspace::persist(SyncAll) after every write".into(),
        ));
    }
    pairs(&out)
}

fn open(dir: &Path, settings: &Settings) -> Result<Box<dyn Engine>> {
    let keyspace = Config::new(dir).open()?;
    let partition = keyspace.open_partition(
        "bench",
        PartitionCreateOptions::default().compression(CompressionType::None),
    )?;
    Ok(Box::new(Fjall {
        keyspace,
        partition,
        sync: settings.sync,
    }))
}

struct Fjall {
    keyspace: Keyspace,
    partition: PartitionHandle,
    sync: bool,
}

impl Fjall {
    fn durable(&self) -> Result<()> {
        if self.sync {
            self.keyspace.persist(PersistMode::SyncAll)?;
        }
        Ok(())
    }
}

impl Engine for Fjall {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.partition.insert(key, value)?;
        self.durable()
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match self.partition.get(key)? {
            Some(value) => {
                out.clear();
                out.extend_from_slice(&value);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.partition.remove(key)?;
        self.durable()
    }

    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<()> {
        let mut batch = self.keyspace.batch();
        for op in ops {
            match op {
                BatchOp::Put(k, v) => batch.insert(&self.partition, *k, *v),
                BatchOp::Delete(k) => batch.remove(&self.partition, *k),
            }
        }
        batch.commit()?;
        self.durable()
    }

    fn flush(&self) -> Result<()> {
        Ok(self.keyspace.persist(PersistMode::SyncAll)?)
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.keyspace.persist(PersistMode::SyncAll)?;
        Ok(())
    }
}
