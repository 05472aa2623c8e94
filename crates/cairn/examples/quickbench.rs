//! A quick measurement of the HaloDB-style workloads on cairn alone:
//! `cargo run --release -p cairn --example quickbench -- [records] [value_size] [threads]`.
//! The side-by-side comparison with other engines is `cairn bench`.

use std::time::Instant;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

fn main() -> cairn::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let vsize: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let threads: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(4);
    let dir = tempfile::tempdir_in(".").expect("temp dir");
    let db = cairn::Db::open(dir.path())?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let value: Vec<u8> = (0..vsize).map(|_| rng.random()).collect();
    let mut keys: Vec<u64> = (0..n).collect();
    keys.shuffle(&mut rng);
    let report = |name: &str, ops: u64, t: Instant| {
        let s = t.elapsed().as_secs_f64();
        println!(
            "{name:<22} {ops:>10} ops {s:>8.2} s {:>12.0} ops/s {:>8.1} MB/s",
            ops as f64 / s,
            ops as f64 * (8 + vsize) as f64 / s / 1e6
        );
    };
    let t = Instant::now();
    for k in &keys {
        db.put(k.to_be_bytes(), &value)?;
    }
    db.flush()?;
    report("fill random", n, t);
    let t = Instant::now();
    let per = n / threads as u64;
    std::thread::scope(|s| {
        for i in 0..threads {
            let db = db.clone();
            s.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(i as u64);
                for _ in 0..per {
                    let k: u64 = rng.random_range(0..n);
                    let v = db.get(k.to_be_bytes()).expect("get").expect("present");
                    assert_eq!(v.len(), vsize);
                }
            });
        }
    });
    report(&format!("random read x{threads}"), per * threads as u64, t);
    let t = Instant::now();
    for _ in 0..n {
        let k: u64 = rng.random_range(0..n);
        db.put(k.to_be_bytes(), &value)?;
    }
    db.flush()?;
    report("random overwrite", n, t);
    let t = Instant::now();
    let c = db.iter().count();
    report("full scan", c as u64, t);
    let s = db.stats();
    println!(
        "keys {} disk {} MB wamp {:.2} samp {:.2} index {:.1} B/key",
        s.total.keys,
        s.total.disk_bytes / 1_000_000,
        s.total.write_amplification,
        s.total.space_amplification,
        s.total.index_bytes_per_key
    );
    drop(db);
    let t = Instant::now();
    let db = cairn::Db::open(dir.path())?;
    println!(
        "reopen {:.3} s, {} keys",
        t.elapsed().as_secs_f64(),
        db.stats().total.keys
    );
    Ok(())
}
