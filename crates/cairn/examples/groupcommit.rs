//! Durable-write throughput under `SyncPolicy::Always` with 1 and with many writer
//! threads (group commit): `cargo run --release -p cairn --example groupcommit -- [secs]`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn run(threads: usize, secs: f64) -> cairn::Result<f64> {
    let dir = tempfile::tempdir_in(".").expect("temp dir");
    let db = cairn::Options::new()
        .sync(cairn::SyncPolicy::Always)
        .open(dir.path())?;
    let done = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    let t = Instant::now();
    std::thread::scope(|s| {
        for i in 0..threads {
            let (db, done, ops) = (&db, &done, &ops);
            s.spawn(move || {
                let mut n = 0u64;
                while !done.load(Ordering::Relaxed) {
                    db.put(format!("t{i}-{n}"), [7u8; 100]).expect("put");
                    n += 1;
                }
                ops.fetch_add(n, Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs));
        done.store(true, Ordering::Relaxed);
    });
    Ok(ops.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64())
}

fn main() -> cairn::Result<()> {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let one = run(1, secs)?;
    println!("1 writer:   {one:>9.0} durable puts/s");
    for t in [4, 32] {
        let r = run(t, secs)?;
        println!("{t} writers: {r:>9.0} durable puts/s ({:.1}x)", r / one);
    }
    Ok(())
}
