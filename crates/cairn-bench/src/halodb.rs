//! The HaloDB suite (HaloDB's published benchmark): 8-byte keys, 1 KiB values, N records: fill sequential,
//! fill random, random reads with T and with 32 threads, random updates, and reads by T
//! threads while one thread updates.

use std::fs;
use std::path::Path;

use anyhow::{ensure, Result};

use super::engine::Engine;
use super::measure::{self, mix64, Group, Kind, Permutation, Phase, Worker};
use super::{Config, Ctx, SuiteDef};

/// The suite, as the runner knows it.
pub static SUITE: SuiteDef = SuiteDef {
    name: "halodb",
    title: "HaloDB suite",
    per_engine: true,
    steps,
    run,
};

/// Bytes of a key.
pub const KEY_SIZE: u64 = 8;

fn steps(cfg: &Config) -> u64 {
    6 + if cfg.sync { WRITERS.len() as u64 } else { 0 }
}

/// Writer threads of the durable fills (`--sync` only), each into a store of its own:
/// how the engine shares its syncs between concurrent writers (group commit).
const WRITERS: [usize; 2] = [4, 32];

/// The key of record `i`: its number, big-endian, so that sequential numbers are sorted.
fn key(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

/// Values of a fixed size, cut from a random buffer at places that depend on the record
/// and its version, so that they differ without costing time to make.
pub struct Values {
    buf: Vec<u8>,
    size: usize,
}

impl Values {
    /// Values of `size` bytes.
    pub fn new(size: usize, seed: u64) -> Values {
        let mut rng = measure::Rng::new(seed);
        let buf = (0..(1 << 20) + size)
            .map(|_| rng.next_u64() as u8)
            .collect();
        Values { buf, size }
    }

    /// The value of record `i` at `version`.
    pub fn get(&self, i: u64, version: u64) -> &[u8] {
        let off = (mix64(i ^ version.rotate_left(40)) % (1 << 20)) as usize;
        &self.buf[off..off + self.size]
    }
}

fn run(ctx: &Ctx<'_>) -> Result<Vec<Phase>> {
    let cfg = ctx.config;
    let n = cfg.records;
    ensure!(n > 0, "--records must be positive");
    let s = Suite {
        ctx,
        n,
        vsize: cfg.value_size,
        rec: KEY_SIZE + cfg.value_size as u64,
        values: Values::new(cfg.value_size, cfg.seed),
        // Operations of each phase after the fills (reads, updates, read while writing).
        ops: cfg.ops.unwrap_or(n),
        order: Permutation::new(n, cfg.seed),
    };
    let mut out = Vec::new();
    // 1. Fill sequential, into a store of its own.
    out.push(s.fill_sequential()?);
    // 2. Fill random: the same records in a random order, from one writer into the
    // store the rest of the suite uses; with --sync first from 4 and from 32 writers,
    // each into a store of its own (every write durable before it returns: how the
    // engine shares its syncs between concurrent writers).
    if cfg.sync {
        for writers in WRITERS {
            let dir = ctx.dir.join(format!("fill-random-{writers}"));
            let (db, p) = s.fill_random(&dir, writers)?;
            db.close()?;
            fs::remove_dir_all(&dir)?;
            out.push(p);
            ctx.progress(&format!("fill random, {writers} writers"));
        }
    }
    let dir = ctx.dir.join("fill-random");
    let (db, mut p) = s.fill_random(&dir, 1)?;
    measure::after_write(&mut p, || db.flush(), &dir, n * s.rec, n * s.rec)?;
    let (db, secs) = ctx.reopen(db, &dir)?;
    p.reopen_secs = Some(secs);
    out.push(p);
    ctx.progress("fill random");
    // 3 and 4. Random reads with T threads, then with 32.
    for threads in [cfg.threads, cfg.many_threads] {
        out.push(s.random_reads(&*db, threads)?);
        ctx.progress(&format!("random read, {threads} threads"));
    }
    // 5. Random updates.
    out.push(s.random_updates(&*db, &dir)?);
    ctx.progress("random update");
    // 6. T threads read while one thread updates, until the readers are done.
    out.extend(s.read_while_writing(&*db, &dir)?);
    ctx.progress("read while writing");
    db.close()?;
    fs::remove_dir_all(&dir)?;
    Ok(out)
}

/// One run of the suite on one engine: its settings, and the records it writes.
struct Suite<'c, 'a> {
    ctx: &'c Ctx<'a>,
    /// Records.
    n: u64,
    /// Bytes of a value.
    vsize: usize,
    /// Bytes of a record (key and value).
    rec: u64,
    values: Values,
    /// Operations of each phase after the fills.
    ops: u64,
    /// The order of the random fills.
    order: Permutation,
}

impl Suite<'_, '_> {
    /// Fills a store of its own in key order, flushes, reopens and removes it.
    fn fill_sequential(&self) -> Result<Phase> {
        let (ctx, n, rec) = (self.ctx, self.n, self.rec);
        let dir = ctx.dir.join("fill-sequential");
        let db = ctx.open(&dir)?;
        let fill_seq = |w: &mut Worker| -> Result<u64> {
            let i = w.global();
            db.put(&key(i), self.values.get(i, 0))?;
            Ok(rec)
        };
        let mut p = one(ctx.run(&[Group {
            test: "fill_sequential".into(),
            title: "fill sequential".into(),
            kind: Kind::Write,
            threads: 1,
            ops: Some(n),
            op: &fill_seq,
        }])?);
        measure::after_write(&mut p, || db.flush(), &dir, n * rec, n * rec)?;
        let (db, secs) = ctx.reopen(db, &dir)?;
        p.reopen_secs = Some(secs);
        db.close()?;
        fs::remove_dir_all(&dir)?;
        ctx.progress("fill sequential");
        Ok(p)
    }

    /// Fills a new store in `dir` in random order from `writers` threads; with --sync,
    /// counts the syncs the fill made.
    fn fill_random(&self, dir: &Path, writers: usize) -> Result<(Box<dyn Engine>, Phase)> {
        let ctx = self.ctx;
        let db = ctx.open(dir)?;
        let fill = |w: &mut Worker| -> Result<u64> {
            let i = self.order.at(w.global());
            db.put(&key(i), self.values.get(i, 0))?;
            Ok(self.rec)
        };
        let (test, title) = match writers {
            1 => ("fill_random".into(), "fill random".into()),
            w => (
                format!("fill_random_{w}_writers"),
                format!("fill random, {w} writers"),
            ),
        };
        let syncs_before = crate::synccount::syncs();
        let mut p = one(ctx.run(&[Group {
            test,
            title,
            kind: Kind::Write,
            threads: writers,
            ops: Some(self.n),
            op: &fill,
        }])?);
        if ctx.config.sync {
            if let (Ok(a), Ok(b)) = (syncs_before, crate::synccount::syncs()) {
                let syncs = b.saturating_sub(a);
                p.syncs = Some(syncs);
                p.writes_per_sync = (syncs > 0).then(|| p.ops as f64 / syncs as f64);
            }
        }
        Ok((db, p))
    }

    /// Reads a random record of `db`, checking its size.
    fn read(&self, db: &dyn Engine, w: &mut Worker) -> Result<u64> {
        let k = key(w.rng.below(self.n));
        if !db.get(&k, &mut w.buf)? {
            return Err(measure::missing(&k));
        }
        ensure!(
            w.buf.len() == self.vsize,
            "value of {k:02x?} has the wrong size"
        );
        Ok(KEY_SIZE + w.buf.len() as u64)
    }

    /// Random reads of `db` from `threads` threads.
    fn random_reads(&self, db: &dyn Engine, threads: usize) -> Result<Phase> {
        let read = |w: &mut Worker| self.read(db, w);
        let mut p = one(self.ctx.run(&[Group {
            test: format!("random_read_{threads}"),
            title: format!("random read, {threads} threads"),
            kind: Kind::Read,
            threads,
            ops: Some(self.ops),
            op: &read,
        }])?);
        p.write_bytes = None;
        Ok(p)
    }

    /// Random updates of `db` (in `dir`) from one thread, then its flush.
    fn random_updates(&self, db: &dyn Engine, dir: &Path) -> Result<Phase> {
        let update = |w: &mut Worker| -> Result<u64> {
            let i = w.rng.below(self.n);
            db.put(&key(i), self.values.get(i, 1 + w.index))?;
            Ok(self.rec)
        };
        let mut p = one(self.ctx.run(&[Group {
            test: "random_update".into(),
            title: "random update".into(),
            kind: Kind::Write,
            threads: 1,
            ops: Some(self.ops),
            op: &update,
        }])?);
        let (ops, rec) = (self.ops, self.rec);
        measure::after_write(&mut p, || db.flush(), dir, ops * rec, self.n * rec)?;
        Ok(p)
    }

    /// T threads read `db` (in `dir`) while one thread updates it, until the readers
    /// are done: the readers' phase and the writer's.
    fn read_while_writing(&self, db: &dyn Engine, dir: &Path) -> Result<Vec<Phase>> {
        let threads = self.ctx.config.threads;
        let read = |w: &mut Worker| self.read(db, w);
        let background_update = |w: &mut Worker| -> Result<u64> {
            let i = w.rng.below(self.n);
            db.put(&key(i), self.values.get(i, 1 << 40 | w.index))?;
            Ok(self.rec)
        };
        let mut phases = self.ctx.run(&[
            Group {
                test: "read_while_writing.reads".into(),
                title: format!("read while writing: reads, {threads} threads"),
                kind: Kind::Read,
                threads,
                ops: Some(self.ops),
                op: &read,
            },
            Group {
                test: "read_while_writing.writes".into(),
                title: "read while writing: writes, 1 thread".into(),
                kind: Kind::Write,
                threads: 1,
                ops: None,
                op: &background_update,
            },
        ])?;
        let written = phases[1].bytes;
        measure::after_write(
            &mut phases[1],
            || db.flush(),
            dir,
            written,
            self.n * self.rec,
        )?;
        phases[0].write_bytes = None;
        Ok(phases)
    }
}

/// The only phase of a one-group run.
pub fn one(mut phases: Vec<Phase>) -> Phase {
    phases.remove(0)
}
