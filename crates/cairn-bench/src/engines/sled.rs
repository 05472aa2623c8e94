//! sled 0.34 (the latest stable release), default configuration.

use std::path::Path;

use anyhow::Result;

use crate::engine::{pairs, BatchOp, Engine, EngineSpec, Settings};

pub static SPEC: EngineSpec = EngineSpec {
    name: "sled",
    library: "sled 0.34",
    open,
    non_default_settings,
    block_cache: false,
    durable: true,
};

fn non_default_settings(settings: &Settings) -> Vec<(String, String)> {
    if settings.sync {
        pairs(&[(
            "durability",
            "Db::flush after every write (sled has no synchronous write option)".into(),
        )])
    } else {
        // sled's default flushes every 500 ms in the background, without fsync on the
        // write path.
        Vec::new()
    }
}

fn open(dir: &Path, settings: &Settings) -> Result<Box<dyn Engine>> {
    let db = sled::Config::new().path(dir).open()?;
    Ok(Box::new(Sled {
        db,
        sync: settings.sync,
    }))
}

struct Sled {
    db: sled::Db,
    sync: bool,
}

impl Sled {
    fn durable(&self) -> Result<()> {
        if self.sync {
            self.db.flush()?;
        }
        Ok(())
    }
}

impl Engine for Sled {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db.insert(key, value)?;
        self.durable()
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        match self.db.get(key)? {
            Some(value) => {
                out.clear();
                out.extend_from_slice(&value);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.db.remove(key)?;
        self.durable()
    }

    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<()> {
        let mut batch = sled::Batch::default();
        for op in ops {
            match op {
                BatchOp::Put(k, v) => batch.insert(*k, *v),
                BatchOp::Delete(k) => batch.remove(*k),
            }
        }
        self.db.apply_batch(batch)?;
        self.durable()
    }

    fn flush(&self) -> Result<()> {
        self.db.flush()?;
        Ok(())
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.db.flush()?;
        Ok(())
    }
}
