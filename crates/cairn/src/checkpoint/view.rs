//! The checkpoint of a read-only view ([`crate::Options::read_only`]): the store is
//! held by another process, so no cut can be taken under its locks; the view is already
//! a consistent prefix of its writes (whole batches), fixed until `Db::catch_up`. Its
//! every record, of every keyspace, is written into a new store of the same shape in
//! the staging directory, which is then closed cleanly (synced, with hint files). A
//! copy record by record: it takes time in proportion to the data, not the files.

use std::mem;
use std::time::{Duration, Instant};

use super::{CheckpointReport, Staging, INCOMPLETE};
use crate::batch::WriteBatch;
use crate::manifest;
use crate::{Db, Options, Result, SyncPolicy};

/// Records of one batch of the copy, and its bytes at most (about).
const BATCH_RECORDS: usize = 1024;
const BATCH_BYTES: usize = 4 << 20;

/// Copies the view `db` holds into `staging` (see the module documentation).
pub(crate) fn copy_view(db: &Db, staging: &Staging) -> Result<CheckpointReport> {
    let start = Instant::now();
    let core = db.core();
    let m = manifest::read_manifest(&core.dir)?;
    let mut opts = Options::new()
        .shards(m.shards)
        .sync(SyncPolicy::Never)
        .close_budget(Duration::ZERO);
    for g in &m.grouped {
        opts = opts.numbered_rows(g.region.ns, g.region.tag);
    }
    // The new store is created in the staging directory, which must hold nothing else;
    // until it is renamed its name says it is incomplete.
    core.fs.remove(&staging.dir.join(INCOMPLETE))?;
    let copy = opts.open(&staging.dir)?;
    let mut report = CheckpointReport {
        upto_seq: core.current_seq(),
        ..CheckpointReport::default()
    };
    for ns in 0..=u8::MAX {
        let (src, dst) = (db.keyspace(ns), copy.keyspace(ns));
        let (mut batch, mut bytes) = (WriteBatch::new(), 0usize);
        for kv in src.iter() {
            let (k, v) = kv?;
            bytes += k.len() + v.len();
            report.copied_bytes += (k.len() + v.len()) as u64;
            batch.put(k, v);
            if batch.len() >= BATCH_RECORDS || bytes >= BATCH_BYTES {
                dst.write(mem::take(&mut batch))?;
                bytes = 0;
            }
        }
        dst.write(batch)?;
    }
    copy.close()?;
    // A lock file is made by every open; a copy holds none (and a backup lists only
    // the store's files).
    core.fs.remove(&staging.dir.join("LOCK"))?;
    report.copied_files = count_files(&staging.dir.join("shards"))?;
    report.took = start.elapsed();
    Ok(report)
}

/// Files under `dir`, recursively.
fn count_files(dir: &std::path::Path) -> Result<u64> {
    let mut n = 0;
    for e in std::fs::read_dir(dir).map_err(|e| crate::Error::io(dir, e))? {
        let e = e.map_err(|e| crate::Error::io(dir, e))?;
        n += match e.path().is_dir() {
            true => count_files(&e.path())?,
            false => 1,
        };
    }
    Ok(n)
}
