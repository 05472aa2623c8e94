//! The index's memory per key and its speed, for HaloDB's keys (8 random bytes):
//! `cargo run --release -p cairn --example index_memory -- [keys] [value_size] [key_size]`.
//!
//! Inserts `keys` keys in random order into a new store, prints the index's bytes per
//! key (`Stats::index_bytes_per_key`) and the rates of the inserts and of random point
//! reads; then reopens the store (the index bulk-loaded from the hint files) and prints
//! the same again, with the process's resident memory (all of it, the anonymous part,
//! and its peak). Values are small by default, so the store stays small: the index does
//! not depend on them.

use std::time::Instant;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

fn key_of(k: u64, size: usize) -> Vec<u8> {
    // Random-looking bytes, as HaloDB's benchmark draws them, unique per k.
    let mut x = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5851_F42D_4C95_7F2D;
    let mut out = Vec::with_capacity(size);
    while out.len() < size {
        x ^= x >> 33;
        x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        out.extend_from_slice(&x.to_be_bytes());
    }
    // The first 8 bytes are a bijection of k (unique keys); longer keys repeat the mix.
    out[..8.min(size)]
        .copy_from_slice(&k.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes()[..8.min(size)]);
    out.truncate(size);
    out
}

/// `VmRSS`, `RssAnon` and `VmHWM` of this process, in GiB (Linux; zeros elsewhere).
fn memory() -> (f64, f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kb| kb / (1024.0 * 1024.0))
    };
    (field("VmRSS:"), field("RssAnon:"), field("VmHWM:"))
}

fn main() -> cairn::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(4_000_000);
    let vsize: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(16);
    let ksize: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(8);
    let dir = tempfile::tempdir_in(".").expect("temp dir");
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let value: Vec<u8> = (0..vsize).map(|_| rng.random()).collect();
    let mut order: Vec<u64> = (0..n).collect();
    order.shuffle(&mut rng);
    let reads: Vec<u64> = (0..n.min(2_000_000))
        .map(|_| rng.random_range(0..n))
        .collect();
    let report = |what: &str, db: &cairn::Db| -> cairn::Result<()> {
        let t = Instant::now();
        for &k in &reads {
            let v = db.get(key_of(k, ksize))?;
            assert!(v.is_some(), "key {k} missing");
        }
        let rate = reads.len() as f64 / t.elapsed().as_secs_f64();
        let s = db.stats().total;
        let (rss, anon, hwm) = memory();
        println!(
            "{what:<24} keys {:>10}  index {:>6.2} B/key  random reads {:>10.0}/s  \
             resident {rss:.2} GiB (anonymous {anon:.2}, peak {hwm:.2})",
            s.keys, s.index_bytes_per_key, rate
        );
        Ok(())
    };
    {
        let db = cairn::Db::open(dir.path())?;
        let t = Instant::now();
        for &k in &order {
            db.put(key_of(k, ksize), &value)?;
        }
        let secs = t.elapsed().as_secs_f64();
        println!("inserts {:>10.0}/s", n as f64 / secs);
        report("after random inserts", &db)?;
        db.close()?;
    }
    let t = Instant::now();
    let db = cairn::Db::open(dir.path())?;
    println!("reopened in {:.2} s", t.elapsed().as_secs_f64());
    report("after reopen", &db)?;
    db.close()?;
    Ok(())
}
