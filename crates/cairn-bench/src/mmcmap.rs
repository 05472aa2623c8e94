//! The mmcmap suite (mmcmap's concurrent benchmark): keys equal to values, 32 random bytes a–z. For each size,
//! a fresh store gets every pair written, read and deleted by many threads at once; then
//! the mixed test: a store loaded with pairs gets 80% reads of them and 20% writes of new
//! pairs, concurrently.

use std::fs;
use std::path::Path;

use anyhow::{ensure, Result};

use super::engine::{BatchOp, Engine};
use super::measure::{self, Group, Kind, Phase, Rng, Worker};
use super::{Config, Ctx, SuiteDef};

/// The suite, as the runner knows it.
pub static SUITE: SuiteDef = SuiteDef {
    name: "mmcmap",
    title: "mmcmap suite",
    per_engine: true,
    steps,
    run,
};

/// Bytes of a key (and of its value, which is the key).
const PAIR_SIDE: usize = 32;
/// Pairs per batch while loading the mixed test's store.
const LOAD_BATCH: u64 = 1000;

fn steps(cfg: &Config) -> u64 {
    cfg.mmcmap_sizes.len() as u64 * 3 + 2
}

/// `n` random keys of 32 letters a–z.
fn keys(n: u64, seed: u64) -> Vec<[u8; PAIR_SIDE]> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|_| {
            let mut k = [0u8; PAIR_SIDE];
            for b in &mut k {
                *b = b'a' + rng.below(26) as u8;
            }
            k
        })
        .collect()
}

/// "100k", "1M", "2.5M": a count of pairs, short.
pub fn short_count(n: u64) -> String {
    if n >= 1_000_000 && n % 100_000 == 0 {
        let m = n as f64 / 1e6;
        format!("{m}M")
    } else if n >= 1000 && n % 1000 == 0 {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

fn run(ctx: &Ctx<'_>) -> Result<Vec<Phase>> {
    let cfg = ctx.config;
    let largest = cfg.mmcmap_sizes.iter().copied().max().unwrap_or(0);
    let all = keys(largest.max(cfg.mmcmap_mixed * 6 / 5), cfg.seed ^ 0x33);
    let mut out = Vec::new();
    for &size in &cfg.mmcmap_sizes {
        out.extend(pairs(ctx, &all[..size as usize])?);
    }
    out.extend(mixed(ctx, &all)?);
    Ok(out)
}

/// Bytes of a pair (key and value).
const PAIR: u64 = 2 * PAIR_SIDE as u64;

/// A fresh store gets every one of `keys` written, read and deleted by many threads at
/// once: a phase each.
fn pairs(ctx: &Ctx<'_>, keys: &[[u8; PAIR_SIDE]]) -> Result<Vec<Phase>> {
    let threads = ctx.config.mmcmap_threads;
    let size = keys.len() as u64;
    let label = short_count(size);
    let dir = ctx.dir.join(format!("pairs-{size}"));
    let db = ctx.open(&dir)?;
    let write = |w: &mut Worker| -> Result<u64> {
        let k = &keys[w.global() as usize];
        db.put(k, k)?;
        Ok(PAIR)
    };
    let read = |w: &mut Worker| -> Result<u64> {
        let k = &keys[w.global() as usize];
        if !db.get(k, &mut w.buf)? {
            return Err(measure::missing(k));
        }
        ensure!(w.buf == k, "the value of {k:02x?} is wrong");
        Ok(PAIR)
    };
    let delete = |w: &mut Worker| -> Result<u64> {
        db.delete(&keys[w.global() as usize])?;
        Ok(PAIR_SIDE as u64)
    };
    let phase = |test: &str, kind: Kind, op: &measure::Op<'_>| -> Result<Phase> {
        Ok(super::halodb::one(ctx.run(&[Group {
            test: format!("{test}_{label}"),
            title: format!("concurrent {test}, {label} pairs, {threads} threads"),
            kind,
            threads,
            ops: Some(size),
            op,
        }])?))
    };
    let mut out = Vec::new();
    let mut p = phase("write", Kind::Write, &write)?;
    measure::after_write(&mut p, || db.flush(), &dir, size * PAIR, size * PAIR)?;
    out.push(p);
    ctx.progress(&format!("write {label}"));
    let mut p = phase("read", Kind::Read, &read)?;
    p.write_bytes = None;
    out.push(p);
    ctx.progress(&format!("read {label}"));
    let mut p = phase("delete", Kind::Write, &delete)?;
    measure::after_write(&mut p, || db.flush(), &dir, size * PAIR_SIDE as u64, 0)?;
    out.push(p);
    ctx.progress(&format!("delete {label}"));
    db.close()?;
    fs::remove_dir_all(&dir)?;
    Ok(out)
}

/// The mixed test: a store loaded with the first `--mmcmap-mixed` pairs of `all`, then
/// 80% reads of loaded pairs and 20% writes of new ones, concurrently.
fn mixed(ctx: &Ctx<'_>, all: &[[u8; PAIR_SIDE]]) -> Result<Vec<Phase>> {
    let threads = ctx.config.mmcmap_threads;
    let loaded = ctx.config.mmcmap_mixed;
    let new = loaded / 5;
    let ops = loaded;
    let dir = ctx.dir.join("mixed");
    let db = ctx.open(&dir)?;
    let mut out = vec![load(ctx, &*db, &dir, &all[..loaded as usize])?];
    ctx.progress("mixed load");
    let read = |w: &mut Worker| -> Result<u64> {
        let k = &all[w.rng.below(loaded) as usize];
        if !db.get(k, &mut w.buf)? {
            return Err(measure::missing(k));
        }
        Ok(PAIR)
    };
    let write = |w: &mut Worker| -> Result<u64> {
        let k = &all[(loaded + w.global()) as usize];
        db.put(k, k)?;
        Ok(PAIR)
    };
    let writers = (threads / 5).max(1);
    let readers = (threads - writers).max(1);
    let mut phases = ctx.run(&[
        Group {
            test: "mixed.reads".into(),
            title: format!("mixed 80/20: reads, {readers} threads"),
            kind: Kind::Read,
            threads: readers,
            ops: Some(ops - new),
            op: &read,
        },
        Group {
            test: "mixed.writes".into(),
            title: format!("mixed 80/20: writes of new pairs, {writers} threads"),
            kind: Kind::Write,
            threads: writers,
            ops: Some(new),
            op: &write,
        },
    ])?;
    measure::after_write(
        &mut phases[1],
        || db.flush(),
        &dir,
        new * PAIR,
        (loaded + new) * PAIR,
    )?;
    phases[0].write_bytes = None;
    out.extend(phases);
    ctx.progress("mixed 80/20");
    db.close()?;
    fs::remove_dir_all(&dir)?;
    Ok(out)
}

/// Loads `keys` into `db` (in `dir`). Loading is set-up, so it goes in batches of
/// LOAD_BATCH pairs (each engine's own atomic batch); its figures are scaled to pairs,
/// its latency is per batch.
fn load(ctx: &Ctx<'_>, db: &dyn Engine, dir: &Path, keys: &[[u8; PAIR_SIDE]]) -> Result<Phase> {
    let threads = ctx.config.mmcmap_threads;
    let loaded = keys.len() as u64;
    let label = short_count(loaded);
    let batches = loaded.div_ceil(LOAD_BATCH);
    let load = |w: &mut Worker| -> Result<u64> {
        let first = w.global() * LOAD_BATCH;
        let last = (first + LOAD_BATCH).min(loaded);
        let ops: Vec<BatchOp<'_>> = keys[first as usize..last as usize]
            .iter()
            .map(|k| BatchOp::Put(k, k))
            .collect();
        db.write_batch(&ops)?;
        Ok((last - first) * PAIR)
    };
    let mut p = super::halodb::one(ctx.run(&[Group {
        test: "mixed.load".into(),
        title: format!(
            "mixed: load {label} pairs in batches of {LOAD_BATCH}, {threads} threads (latency per batch)"
        ),
        kind: Kind::Write,
        threads,
        ops: Some(batches),
        op: &load,
    }])?);
    let scale = loaded as f64 / batches.max(1) as f64;
    p.ops = loaded;
    p.ops_per_sec *= scale;
    p.timeline.iter_mut().for_each(|v| *v *= scale);
    measure::after_write(&mut p, || db.flush(), dir, loaded * PAIR, loaded * PAIR)?;
    Ok(p)
}
