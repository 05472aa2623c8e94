//! The KFS suite (KFS's file experiment): files of 8 to 512 MiB cut into 128 KiB chunks.
//! Each trial writes one file of every size, then reads them all back, then unlinks them
//! all (the order of KFS's `perf/` scripts), timing each operation on its own; the trial
//! is repeated `--trials` times on one store, which so takes about 1 GiB of writes per
//! trial. The subjects: cairn's file store with its default shards (`cairn`) and with
//! one shard (`cairn-1shard`), and RocksDB and LevelDB holding the chunks as rows keyed
//! by file id ‖ chunk index (big-endian). The report gives the mean and standard
//! deviation of each (operation, size) and Welch's two-sided t-test against cairn.
//!
//! A write is timed twice: until the store's write call returns (the commit, for cairn;
//! without `--sync` the data may be in the page cache only) and until the store has then
//! also made it durable (`durable_write`: cairn's `Db::flush`, RocksDB's write-ahead log
//! synced, LevelDB an empty synced batch). Only the second can be held against the
//! disk's bandwidth, which the disk suite measures with direct I/O.
//!
//! `cairn-1shard` is the same engine with the same options but one shard, so the pair
//! shows what the partitioning itself buys: with several shards a large file's chunks
//! are stored by two threads, each for its own shards (one with one shard), and a new
//! store's first segments rotate at staggered sizes; everything else is the same code
//! (spare segments, whole-segment reclamation of removed files, the collector). Every
//! subject gets the same treatment: no sync within a write (unless `--sync`), the sync
//! after each write, nothing dropped from the page cache, trials back to back with no
//! pause, so background work (cairn's collector and compaction, the LSM engines'
//! flushes and compactions) runs while the next operations are timed, as in KFS's experiment.
//! (Before the durable figure, writes were not followed by a sync, so reads raced the
//! kernel's writeback of the files just written: figures from before are not
//! comparable.)

use std::fs;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use cairn::{Db, Options, SyncPolicy};
use cairn_files::FileStore;
use statrs::distribution::{ContinuousCDF, StudentsT};

use super::engine::{BatchOp, Engine, EngineSpec, Settings};
use super::measure::{self, mix64, Kind, Latency, Phase, Rng};
use super::{Config, Ctx, Samples, SuiteDef, SuiteRun};

/// The suite, as the runner knows it.
pub static SUITE: SuiteDef = SuiteDef {
    name: "kfs",
    title: "KFS suite",
    per_engine: true,
    steps,
    run,
};

/// Bytes of a chunk (KFS's `C` constant).
pub const CHUNK: usize = 128 << 10;
/// The operations of a trial, in the order they run (`cold_read` only with `--cold`).
pub const OPS: [&str; 4] = ["write", "read", COLD_READ, "unlink"];
/// A read after the page cache was dropped (`--cold`).
pub const COLD_READ: &str = "cold_read";
/// The figure of a write made durable: the write's time plus that of the sync after it.
pub const DURABLE_WRITE: &str = "durable_write";
/// The timed figures of every file size, in the order the report shows them.
pub const FIGURES: [&str; 5] = ["write", DURABLE_WRITE, "read", COLD_READ, "unlink"];
/// The name of cairn with one shard.
pub const ONE_SHARD: &str = "cairn-1shard";
/// The test holding the store's bytes on disk after each trial.
pub const STORE_BYTES: &str = "store_bytes";
/// The test holding the store's bytes on disk once it is closed after the last trial.
pub const STORE_BYTES_CLOSED: &str = "store_bytes_closed";
/// The store after the last trial's unlinks should take at most this many times the
/// bytes one trial writes (its files), and no more than RocksDB's.
pub const STORE_TARGET: f64 = 1.2;
/// Bytes of the random pool that file contents are cut from.
const POOL: usize = 8 << 20;

/// File sizes and trials of a mode ("full", "quick", "smoke").
pub fn sizes_and_trials(mode: &str) -> (Vec<u64>, u64) {
    let mib = |v: &[u64]| v.iter().map(|m| m << 20).collect::<Vec<_>>();
    match mode {
        "smoke" => (mib(&[1, 2, 4]), 2),
        "quick" => (mib(&[8, 16, 32, 64]), 3),
        _ => (mib(&[8, 16, 32, 64, 128, 256, 512]), 10),
    }
}

/// The subjects of this suite on `engine` (see `crate::subjects`).
pub fn subjects(engine: &EngineSpec) -> Vec<Option<&'static str>> {
    match engine.name {
        "cairn" => vec![None, Some(ONE_SHARD)],
        "rocksdb" | "leveldb" => vec![None],
        _ => Vec::new(),
    }
}

fn steps(cfg: &Config) -> u64 {
    cfg.kfs_trials * (OPS.len() as u64 - u64::from(cfg.cold.is_none()))
}

/// "8MiB", as in test names.
fn short_size(bytes: u64) -> String {
    if bytes % (1 << 20) == 0 {
        format!("{}MiB", bytes >> 20)
    } else {
        format!("{}KiB", bytes.div_ceil(1 << 10))
    }
}

/// "8 MiB", for people.
pub fn size_label(bytes: u64) -> String {
    let s = short_size(bytes);
    let split = s.len() - 3;
    format!("{} {}", &s[..split], &s[split..])
}

/// The test of operation `op` on files of `size` bytes, e.g. `write_8MiB`.
pub fn test_name(op: &str, size: u64) -> String {
    format!("{op}_{}", short_size(size))
}

/// The heading of one of the [`FIGURES`] in the report and its plots.
pub fn figure_heading(figure: &str, sync: bool) -> &str {
    match figure {
        "write" if sync => "write (durable when it returns: --sync)",
        "write" => "write (until it returns, no sync: to the page cache)",
        DURABLE_WRITE => "durable write (the write, then the sync that makes it durable)",
        "read" => "read (warm: the files were just written, in the page cache)",
        COLD_READ => "read, cold (the page cache dropped before each read: --cold)",
        other => other,
    }
}

/// What one of the [`FIGURES`] times, for the report: "write a 8 MiB file (until the
/// write returns, no sync: the page cache)".
pub fn figure_title(figure: &str, size: u64, sync: bool) -> String {
    let size = size_label(size);
    match figure {
        "write" if sync => format!("write a {size} file (durable when it returns: --sync)"),
        "write" => format!("write a {size} file (until it returns, no sync: to the page cache)"),
        DURABLE_WRITE => format!("write a {size} file and make it durable"),
        COLD_READ => format!("read a {size} file, page cache dropped before"),
        op => format!("{op} a {size} file"),
    }
}

/// The recorded values of `test` in `run`.
pub fn samples<'a>(run: &'a SuiteRun, test: &str) -> Option<&'a [f64]> {
    run.samples
        .iter()
        .find(|s| s.test == test)
        .map(|s| s.values.as_slice())
}

/// Mean and sample standard deviation of some values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Number of values.
    pub n: usize,
    /// Their mean.
    pub mean: f64,
    /// Their sample standard deviation (n − 1 in the denominator; 0 for one value).
    pub sd: f64,
}

/// The [`Summary`] of `xs`, `None` when empty.
pub fn summarize(xs: &[f64]) -> Option<Summary> {
    if xs.is_empty() {
        return None;
    }
    let n = xs.len();
    let mean = xs.iter().sum::<f64>() / n as f64;
    let sd = if n > 1 {
        let ss: f64 = xs.iter().map(|x| (x - mean) * (x - mean)).sum();
        (ss / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    Some(Summary { n, mean, sd })
}

/// The two-sided p-value of Welch's t-test that `a` and `b` have the same mean; `None`
/// when either has fewer than two values.
pub fn welch_p(a: &[f64], b: &[f64]) -> Option<f64> {
    let (sa, sb) = (summarize(a)?, summarize(b)?);
    if sa.n < 2 || sb.n < 2 {
        return None;
    }
    let va = sa.sd * sa.sd / sa.n as f64;
    let vb = sb.sd * sb.sd / sb.n as f64;
    let se2 = va + vb;
    if se2 <= 0.0 {
        // No spread at all: the means are the same or certainly not.
        return Some(if sa.mean == sb.mean { 1.0 } else { 0.0 });
    }
    let t = (sa.mean - sb.mean) / se2.sqrt();
    let df = se2 * se2 / (va * va / (sa.n - 1) as f64 + vb * vb / (sb.n - 1) as f64);
    let dist = StudentsT::new(0.0, 1.0, df).ok()?;
    let p = 2.0 * dist.sf(t.abs());
    p.is_finite().then_some(p.clamp(0.0, 1.0))
}

/// Random bytes that file contents are cut from: chunk `c` of file `id` starts at a
/// place that depends on both, so that contents differ without costing time to make.
struct Pool(Vec<u8>);

impl Pool {
    fn new(seed: u64) -> Pool {
        let mut rng = Rng::new(seed);
        let mut buf = Vec::with_capacity(POOL + CHUNK);
        while buf.len() < POOL + CHUNK {
            buf.extend_from_slice(&rng.next_u64().to_le_bytes());
        }
        Pool(buf)
    }

    /// The content of chunk `index` of file `id`, `len` bytes (at most [`CHUNK`]).
    fn chunk(&self, id: u64, index: u64, len: usize) -> &[u8] {
        let off = (mix64(id ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15)) % POOL as u64) as usize;
        &self.0[off..off + len]
    }

    /// Checks that `got` is chunk `index` of file `id`: its length and its first and last
    /// 64 bytes (a full comparison would cost a noticeable share of a read).
    fn check(&self, id: u64, index: u64, len: usize, got: &[u8]) -> Result<()> {
        ensure!(
            got.len() == len,
            "chunk {index} of file {id:016x} has {} bytes, not {len}",
            got.len()
        );
        let want = self.chunk(id, index, len);
        let k = len.min(64);
        ensure!(
            got[..k] == want[..k] && got[len - k..] == want[len - k..],
            "chunk {index} of file {id:016x} has the wrong content"
        );
        Ok(())
    }
}

/// Bytes of chunk `index` of a file of `size` bytes.
fn chunk_len(size: u64, index: u64) -> usize {
    (size - index * CHUNK as u64).min(CHUNK as u64) as usize
}

/// A store of files under test.
trait Files {
    /// Writes file `id` of `size` bytes, visible (and durable with --sync) on return.
    fn write(&self, id: u64, size: u64, pool: &Pool) -> Result<()>;
    /// Reads file `id` of `size` bytes back, checking it.
    fn read(&self, id: u64, size: u64, pool: &Pool, buf: &mut Vec<u8>) -> Result<()>;
    /// Removes file `id` of `size` bytes.
    fn unlink(&self, id: u64, size: u64) -> Result<()>;
    /// Makes every write so far durable.
    fn sync(&self) -> Result<()>;
    /// Closes the store.
    fn close(self: Box<Self>) -> Result<()>;
}

/// cairn's file store.
struct CairnFiles {
    db: Db,
    files: FileStore,
}

fn file_key(id: u64) -> String {
    format!("{id:016x}")
}

impl Files for CairnFiles {
    fn write(&self, id: u64, size: u64, pool: &Pool) -> Result<()> {
        let mut w = self.files.create(file_key(id))?;
        for c in 0..size.div_ceil(CHUNK as u64) {
            w.write_all(pool.chunk(id, c, chunk_len(size, c)))?;
        }
        let stat = w.commit()?;
        ensure!(
            stat.size == size,
            "file {id:016x} stored {} bytes",
            stat.size
        );
        Ok(())
    }

    fn read(&self, id: u64, size: u64, pool: &Pool, buf: &mut Vec<u8>) -> Result<()> {
        let mut r = self
            .files
            .open(file_key(id))?
            .with_context(|| format!("file {id:016x} is missing"))?;
        buf.resize(CHUNK, 0);
        for c in 0..size.div_ceil(CHUNK as u64) {
            let len = chunk_len(size, c);
            r.read_exact(&mut buf[..len])?;
            pool.check(id, c, len, &buf[..len])?;
        }
        ensure!(r.read(&mut buf[..1])? == 0, "file {id:016x} is too long");
        Ok(())
    }

    fn unlink(&self, id: u64, _size: u64) -> Result<()> {
        ensure!(
            self.files.remove(file_key(id))?,
            "file {id:016x} is missing"
        );
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        Ok(self.db.flush()?)
    }

    fn close(self: Box<Self>) -> Result<()> {
        let CairnFiles { db, files } = *self;
        drop(files);
        db.close()?;
        Ok(())
    }
}

/// A key-value engine holding each chunk as a row, as KFS did in LevelDB.
struct Rows {
    db: Box<dyn Engine>,
    /// Make each file durable at its end (--sync).
    sync: bool,
}

/// The row of chunk `index` of file `id`: both big-endian.
fn row_key(id: u64, index: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&id.to_be_bytes());
    k[8..].copy_from_slice(&index.to_be_bytes());
    k
}

impl Files for Rows {
    fn write(&self, id: u64, size: u64, pool: &Pool) -> Result<()> {
        for c in 0..size.div_ceil(CHUNK as u64) {
            self.db
                .put(&row_key(id, c), pool.chunk(id, c, chunk_len(size, c)))?;
        }
        if self.sync {
            self.db.sync()?;
        }
        Ok(())
    }

    fn read(&self, id: u64, size: u64, pool: &Pool, buf: &mut Vec<u8>) -> Result<()> {
        // As KFS does: the file ends at its first missing chunk.
        let chunks = size.div_ceil(CHUNK as u64);
        let mut c = 0;
        while self.db.get(&row_key(id, c), buf)? {
            ensure!(c < chunks, "file {id:016x} is too long");
            pool.check(id, c, chunk_len(size, c), buf)?;
            c += 1;
        }
        ensure!(c == chunks, "file {id:016x} ends at chunk {c} of {chunks}");
        Ok(())
    }

    fn unlink(&self, id: u64, size: u64) -> Result<()> {
        // One atomic batch of every chunk's delete (KFS read each chunk, then deleted
        // it, one at a time).
        let keys: Vec<[u8; 16]> = (0..size.div_ceil(CHUNK as u64))
            .map(|c| row_key(id, c))
            .collect();
        let ops: Vec<BatchOp<'_>> = keys.iter().map(|k| BatchOp::Delete(k)).collect();
        self.db.write_batch(&ops)?;
        if self.sync {
            self.db.sync()?;
        }
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.db.sync()
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.db.close()
    }
}

fn open(ctx: &Ctx<'_>, dir: &Path) -> Result<Box<dyn Files>> {
    let spec = ctx.engine.context("the KFS suite needs an engine")?;
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let sync = ctx.config.sync;
    match (spec.name, ctx.variant.as_deref()) {
        ("cairn", variant) => {
            let policy = if sync {
                SyncPolicy::Always
            } else {
                SyncPolicy::Never
            };
            let mut options = Options::new().sync(policy);
            match variant {
                None => {}
                Some(ONE_SHARD) => options = options.shards(1),
                Some(other) => bail!("unknown variant {other} of cairn"),
            }
            let db = options.open(dir)?;
            let files = FileStore::new(&db)?;
            Ok(Box::new(CairnFiles { db, files }))
        }
        (name, None) => {
            // No sync on each put: with --sync a file is made durable at its end.
            let settings = Settings {
                sync: false,
                ..ctx.settings.clone()
            };
            let db = (spec.open)(dir, &settings).with_context(|| format!("opening {name}"))?;
            Ok(Box::new(Rows { db, sync }))
        }
        (name, Some(v)) => bail!("unknown variant {v} of {name}"),
    }
}

fn run(ctx: &Ctx<'_>) -> Result<Vec<Phase>> {
    let cfg = ctx.config;
    let sizes = &cfg.kfs_sizes;
    let trials = cfg.kfs_trials;
    ensure!(!sizes.is_empty(), "the KFS suite has no file sizes");
    ensure!(trials > 0, "--trials must be positive");
    ensure!(sizes.iter().all(|s| *s > 0), "file sizes must be positive");
    let pool = Pool::new(cfg.seed ^ 0x6b66_7300);
    let dir = ctx.dir.join("store");
    let store = open(ctx, &dir)?;
    let mut ids = Rng::new(mix64(cfg.seed ^ 0x4b46_5300));
    let mut times = Times::new(sizes.len(), trials);
    let mut store_bytes = Vec::with_capacity(trials as usize);
    let mut buf = Vec::with_capacity(CHUNK);
    for trial in 1..=trials {
        // Random ids, as KFS's reference ids.
        let files: Vec<(u64, u64)> = sizes.iter().map(|s| (ids.next_u64(), *s)).collect();
        for op in OPS {
            if op == COLD_READ && cfg.cold.is_none() {
                continue;
            }
            for (i, &(id, size)) in files.iter().enumerate() {
                let file = Trial {
                    trial,
                    op,
                    size,
                    id,
                };
                times.time(&*store, &dir, &pool, &mut buf, i, file)?;
            }
            ctx.progress(&format!("trial {trial}/{trials}: {op}"));
        }
        store_bytes.push(measure::disk_usage(&dir)? as f64);
    }
    store.close()?;
    let closed = measure::disk_usage(&dir)? as f64;
    fs::remove_dir_all(&dir)?;
    let phases = times.phases(ctx)?;
    ctx.record(Samples {
        test: STORE_BYTES.into(),
        values: store_bytes,
    });
    ctx.record(Samples {
        test: STORE_BYTES_CLOSED.into(),
        values: vec![closed],
    });
    Ok(phases)
}

/// One operation of a trial: on file `id` of `size` bytes.
struct Trial {
    trial: u64,
    op: &'static str,
    size: u64,
    id: u64,
}

/// The index of figure `name` in [`FIGURES`].
fn figure(name: &str) -> usize {
    FIGURES.iter().position(|f| *f == name).unwrap_or(0)
}

/// The times of a run: one per trial for each figure and size, and the bytes the
/// durable writes sent to storage.
struct Times {
    /// `secs[figure][size]`, figures as in [`FIGURES`].
    secs: Vec<Vec<Vec<f64>>>,
    /// Per size, the bytes its writes and their syncs sent to storage (`None`: unknown).
    io_written: Vec<Option<u64>>,
}

impl Times {
    fn new(sizes: usize, trials: u64) -> Times {
        Times {
            secs: vec![vec![Vec::with_capacity(trials as usize); sizes]; FIGURES.len()],
            io_written: vec![Some(0u64); sizes],
        }
    }

    /// Times operation `t` on `store`, the `i`-th size; a write also until it is durable.
    fn time(
        &mut self,
        store: &dyn Files,
        dir: &Path,
        pool: &Pool,
        buf: &mut Vec<u8>,
        i: usize,
        t: Trial,
    ) -> Result<()> {
        let Trial {
            trial,
            op,
            size,
            id,
        } = t;
        if op == COLD_READ {
            measure::drop_page_cache(dir)?;
        }
        let io_before = measure::proc_write_bytes();
        let t = Instant::now();
        match op {
            "write" => store.write(id, size, pool),
            "read" | COLD_READ => store.read(id, size, pool, buf),
            _ => store.unlink(id, size),
        }
        .with_context(|| format!("trial {trial}: {op} {}", size_label(size)))?;
        self.secs[figure(op)][i].push(t.elapsed().as_secs_f64());
        if op == "write" {
            // Then durable: the same write's time until the sync after it ends.
            store
                .sync()
                .with_context(|| format!("trial {trial}: sync {}", size_label(size)))?;
            self.secs[figure(DURABLE_WRITE)][i].push(t.elapsed().as_secs_f64());
            self.io_written[i] = match (self.io_written[i], io_before, measure::proc_write_bytes())
            {
                (Some(sum), Some(a), Some(b)) => Some(sum + b.saturating_sub(a)),
                _ => None,
            };
        }
        Ok(())
    }

    /// A phase per figure and size that has times; the times themselves go to the
    /// report as samples (for the t-tests).
    fn phases(mut self, ctx: &Ctx<'_>) -> Result<Vec<Phase>> {
        let cfg = ctx.config;
        let trials = cfg.kfs_trials;
        let durable_at = figure(DURABLE_WRITE);
        let peak = measure::peak_rss();
        let mut phases = Vec::new();
        for (fi, fig) in FIGURES.iter().enumerate() {
            for (i, &size) in cfg.kfs_sizes.iter().enumerate() {
                let times = std::mem::take(&mut self.secs[fi][i]);
                if times.is_empty() {
                    continue;
                }
                let total: f64 = times.iter().sum::<f64>().max(1e-9);
                let mut hist = measure::new_hist()?;
                for s in &times {
                    let _ = hist.record(((s * 1e9) as u64).max(1));
                }
                let mut latency = Latency::of(&hist);
                latency.mean_ns = total * 1e9 / times.len() as f64;
                let test = test_name(fig, size);
                let bytes = size * trials;
                let kind = if *fig == "read" || *fig == COLD_READ {
                    Kind::Read
                } else {
                    Kind::Write
                };
                // The bytes written to storage are those of the write and its sync.
                let write_bytes = if fi == durable_at {
                    measure::accounted(self.io_written[i], bytes)
                } else {
                    None
                };
                phases.push(Phase {
                    test: test.clone(),
                    title: figure_title(fig, size, cfg.sync),
                    kind: Some(kind),
                    threads: 1,
                    ops: trials,
                    bytes,
                    secs: total,
                    ops_per_sec: trials as f64 / total,
                    mb_per_sec: bytes as f64 / total / 1e6,
                    latency,
                    write_bytes,
                    write_amp: write_bytes.map(|w| w as f64 / bytes as f64),
                    peak_rss_bytes: peak,
                    ..Phase::default()
                });
                ctx.record(Samples {
                    test,
                    values: times,
                });
            }
        }
        Ok(phases)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_and_welch() {
        let s = summarize(&[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(s.n, 4);
        assert!((s.mean - 2.5).abs() < 1e-12);
        assert!((s.sd - 1.290_994_448_735_805_6).abs() < 1e-12);
        assert!(summarize(&[]).is_none());
        // t = -2.377, df = 20.49: p = 0.027293 (the t density integrated numerically)
        let a = [
            27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0,
        ];
        let b = [
            27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9,
        ];
        let p = welch_p(&a, &b).unwrap();
        assert!((p - 0.027_293).abs() < 1e-4, "{p}");
        assert_eq!(welch_p(&a, &b), welch_p(&b, &a));
        assert!(welch_p(&[1.0], &b).is_none());
        assert_eq!(welch_p(&[1.0, 1.0], &[1.0, 1.0]), Some(1.0));
        assert_eq!(welch_p(&[1.0, 1.0], &[2.0, 2.0]), Some(0.0));
    }

    #[test]
    fn names_and_chunks() {
        assert_eq!(test_name("write", 8 << 20), "write_8MiB");
        assert_eq!(size_label(512 << 20), "512 MiB");
        assert_eq!(size_label(1536), "2 KiB");
        assert_eq!(chunk_len(3 * CHUNK as u64 + 5, 3), 5);
        assert_eq!(chunk_len(3 * CHUNK as u64, 2), CHUNK);
        let pool = Pool::new(1);
        let c = pool.chunk(7, 3, CHUNK).to_vec();
        assert!(pool.check(7, 3, CHUNK, &c).is_ok());
        assert!(pool.check(7, 4, CHUNK, &c).is_err());
        assert!(c.iter().any(|b| *b != 0));
    }
}
