//! `cairn backup-bench`: checkpoints and backups of stores of growing size while a
//! writer runs. For each size: the store is filled with 1 KiB values (or reused from an
//! earlier run), closed and opened again as after a restart; writer threads then put
//! random keys without pause while a checkpoint is taken on the store's file system; the
//! report gives the checkpoint's time, the cut (how long writers were held) and the
//! longest put during the checkpoint against the longest in the second before it. With
//! `--backup`, a full backup is made, 1% of the keys are rewritten, and an incremental
//! backup against the full one reports what it copied, as a share of the store.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use cairn::{Db, Options, WriteBatch};
use clap::Args;

/// Long description of `backup-bench`.
pub const ABOUT: &str = "\
Checkpoint and back up stores of 1, 10, 40 GiB (--sizes) of 1 KiB values while writers
put random keys; report the checkpoint's time, how long writers were held (the cut),
the longest put during it and in the second before it, and with --backup what an
incremental backup after 1% of the keys changed copied. Stores are kept in DIR/store-N
and reused by later runs (delete them to start fresh); copies are removed after each
measurement.";

/// Options of `backup-bench`.
#[derive(Debug, Args)]
pub struct BackupBenchArgs {
    /// Directory for the stores and their copies
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// Store sizes in GiB, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "1,10,40")]
    pub sizes: Vec<u64>,
    /// Writer threads running during the checkpoint
    #[arg(long, default_value_t = 1)]
    pub writers: usize,
    /// Checkpoints per size (each one measured)
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Also a full and an incremental backup per size (needs the store's size free)
    #[arg(long)]
    pub backup: bool,
}

/// Bytes of a value.
const VALUE: usize = 1024;

fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    k[..8].copy_from_slice(&h.to_be_bytes());
    k[8..].copy_from_slice(&i.to_be_bytes());
    k
}

fn value(i: u64, gen: u64) -> Vec<u8> {
    let mut v = vec![(i % 251) as u8; VALUE];
    v[..8].copy_from_slice(&gen.to_le_bytes());
    v
}

/// Runs `backup-bench`.
pub fn run(args: &BackupBenchArgs) -> Result<()> {
    std::fs::create_dir_all(&args.dir).with_context(|| args.dir.display().to_string())?;
    println!(
        "| store | keys | checkpoint (median of {}) | writers held (max) | longest put during / before | files linked / copied |",
        args.rounds
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let mut backups = Vec::new();
    for &gib in &args.sizes {
        let dir = args.dir.join(format!("store-{gib}"));
        let keys = gib * (1 << 30) / (VALUE as u64 + 44);
        fill(&dir, keys)?;
        let db = Db::open(&dir)?;
        let mut times = Vec::new();
        let mut worst_cut = Duration::ZERO;
        let mut during = Duration::ZERO;
        let mut before = Duration::ZERO;
        let mut files = (0, 0);
        for r in 0..args.rounds {
            let dest = args.dir.join(format!("checkpoint-{gib}-{r}"));
            let m = checkpoint_under_writers(&db, &dest, keys, args.writers)?;
            remove(&dest)?;
            times.push(m.took);
            worst_cut = worst_cut.max(m.cut);
            during = during.max(m.longest_during);
            before = before.max(m.longest_before);
            files = (m.linked, m.copied);
        }
        times.sort();
        println!(
            "| {gib} GiB | {keys} | {:.0?} | {:.2?} | {:.2?} / {:.2?} | {} / {} |",
            times[times.len() / 2],
            worst_cut,
            during,
            before,
            files.0,
            files.1
        );
        if args.backup {
            backups.push((gib, incremental(&db, &args.dir, gib, keys)?));
        }
        db.close()?;
    }
    if !backups.is_empty() {
        println!();
        println!("| store | full backup: copied, time | incremental after 1% changed: copied, share of the store, time |");
        println!("|---|---:|---:|");
        for (gib, b) in backups {
            println!(
                "| {gib} GiB | {:.2} GiB, {:.1?} | {:.2} GiB, {:.1}%, {:.1?} |",
                gb(b.full_bytes),
                b.full_time,
                gb(b.inc_bytes),
                100.0 * b.inc_bytes as f64 / b.store_bytes as f64,
                b.inc_time
            );
        }
    }
    Ok(())
}

fn gb(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

fn remove(p: &Path) -> Result<()> {
    if p.exists() {
        std::fs::remove_dir_all(p).with_context(|| p.display().to_string())?;
    }
    Ok(())
}

/// Fills the store at `dir` with `keys` keys unless it already holds them.
fn fill(dir: &Path, keys: u64) -> Result<()> {
    let db = Options::new().open(dir)?;
    if db.stats().total.keys >= keys {
        return Ok(db.close()?);
    }
    let t = Instant::now();
    let mut b = WriteBatch::new();
    for i in 0..keys {
        b.put(key(i), value(i, 0));
        if b.len() == 256 {
            db.write(std::mem::take(&mut b))?;
        }
    }
    db.write(b)?;
    db.close()?;
    eprintln!(
        "filled {} with {keys} keys in {:.1?}",
        dir.display(),
        t.elapsed()
    );
    Ok(())
}

/// What one checkpoint under writers measured.
struct Measured {
    took: Duration,
    cut: Duration,
    longest_during: Duration,
    longest_before: Duration,
    linked: u64,
    copied: u64,
}

/// Takes a checkpoint of `db` into `dest` while `writers` threads put random keys,
/// after a second of writing alone.
fn checkpoint_under_writers(db: &Db, dest: &Path, keys: u64, writers: usize) -> Result<Measured> {
    let stop = AtomicBool::new(false);
    let phase = AtomicU64::new(0); // 0 warm-up, 1 before, 2 during, 3 after
    let longest = [AtomicU64::new(0), AtomicU64::new(0)];
    std::thread::scope(|s| -> Result<Measured> {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let (stop, phase, longest) = (&stop, &phase, &longest);
                s.spawn(move || -> Result<()> {
                    let mut x = 0x2545_F491_4F6C_DD1D_u64 ^ (w as u64 + 1);
                    while !stop.load(Ordering::Relaxed) {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let i = x % keys;
                        let t = Instant::now();
                        db.put(key(i), value(i, 1))?;
                        let ns = t.elapsed().as_nanos() as u64;
                        match phase.load(Ordering::Relaxed) {
                            1 => longest[0].fetch_max(ns, Ordering::Relaxed),
                            2 => longest[1].fetch_max(ns, Ordering::Relaxed),
                            _ => 0,
                        };
                    }
                    Ok(())
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        phase.store(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_secs(1));
        phase.store(2, Ordering::SeqCst);
        let report = db.checkpoint(dest);
        phase.store(3, Ordering::SeqCst);
        stop.store(true, Ordering::SeqCst);
        for h in handles {
            h.join()
                .map_err(|_| anyhow::anyhow!("a writer panicked"))??;
        }
        let report = report?;
        Ok(Measured {
            took: report.took,
            cut: report.cut,
            longest_before: Duration::from_nanos(longest[0].load(Ordering::SeqCst)),
            longest_during: Duration::from_nanos(longest[1].load(Ordering::SeqCst)),
            linked: report.linked_files,
            copied: report.copied_files,
        })
    })
}

/// A full and an incremental backup.
struct Backups {
    store_bytes: u64,
    full_bytes: u64,
    full_time: Duration,
    inc_bytes: u64,
    inc_time: Duration,
}

/// A full backup, 1% of the keys rewritten, an incremental backup against the full one.
fn incremental(db: &Db, root: &Path, gib: u64, keys: u64) -> Result<Backups> {
    let (b0, b1) = (
        root.join(format!("backup-{gib}-full")),
        root.join(format!("backup-{gib}-incremental")),
    );
    remove(&b0)?;
    remove(&b1)?;
    let full = db.backup(&b0, None)?;
    let mut b = WriteBatch::new();
    for i in (0..keys).step_by(100) {
        b.put(key(i), value(i, 2));
        if b.len() == 256 {
            db.write(std::mem::take(&mut b))?;
        }
    }
    db.write(b)?;
    let store_bytes = db.stats().total.disk_bytes;
    let inc = db.backup(&b1, Some(&b0))?;
    remove(&b1)?;
    remove(&b0)?;
    Ok(Backups {
        store_bytes,
        full_bytes: full.copied_bytes,
        full_time: full.took,
        inc_bytes: inc.copied_bytes,
        inc_time: inc.took,
    })
}
