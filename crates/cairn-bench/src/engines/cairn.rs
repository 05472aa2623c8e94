//! cairn itself, with its default options (16 shards, 64 MiB segments).

use std::path::Path;

use anyhow::Result;
use cairn::{Db, Options, SyncPolicy, WriteBatch};

use crate::engine::{pairs, BatchOp, Engine, EngineSpec, Settings};

pub static SPEC: EngineSpec = EngineSpec {
    name: "cairn",
    library: concat!("cairn ", env!("CARGO_PKG_VERSION"), " (this build)"),
    open,
    non_default_settings,
    block_cache: false,
    durable: true,
};

fn non_default_settings(settings: &Settings) -> Vec<(String, String)> {
    if settings.sync {
        pairs(&[("sync", "SyncPolicy::Always (group commit)".into())])
    } else {
        Vec::new()
    }
}

fn open(dir: &Path, settings: &Settings) -> Result<Box<dyn Engine>> {
    let policy = if settings.sync {
        SyncPolicy::Always
    } else {
        SyncPolicy::Never
    };
    Ok(Box::new(Cairn(Options::new().sync(policy).open(dir)?)))
}

struct Cairn(Db);

impl Engine for Cairn {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.0.put(key, value)?)
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match self.0.get(key)? {
            Some(value) => {
                out.clear();
                out.extend_from_slice(&value);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        Ok(self.0.delete(key)?)
    }

    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<()> {
        let mut batch = WriteBatch::new();
        for op in ops {
            match op {
                BatchOp::Put(k, v) => batch.put(k, v),
                BatchOp::Delete(k) => batch.delete(k),
            };
        }
        Ok(self.0.write(batch)?)
    }

    fn flush(&self) -> Result<()> {
        Ok(self.0.flush()?)
    }

    fn close(self: Box<Self>) -> Result<()> {
        Ok(self.0.close()?)
    }
}
