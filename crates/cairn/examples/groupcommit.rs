//! Durable-write throughput under `SyncPolicy::Always` with 1 and with many writer
//! threads (group commit):
//! `cargo run --release -p cairn --example groupcommit -- [secs] [value bytes] [log size]`
//! (defaults 3 s, 100 bytes, the default commit log; log size 0 turns the log off).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn run(threads: usize, secs: f64, vsize: usize, log: Option<u64>) -> cairn::Result<(f64, f64)> {
    let dir = tempfile::tempdir_in(".").expect("temp dir");
    let mut o = cairn::Options::new().sync(cairn::SyncPolicy::Always);
    if let Some(l) = log {
        o = o.commit_log_size(l);
    }
    let db = o.open(dir.path())?;
    let done = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    let value = vec![7u8; vsize];
    let t = Instant::now();
    std::thread::scope(|s| {
        for i in 0..threads {
            let (db, done, ops, value) = (&db, &done, &ops, &value);
            s.spawn(move || {
                let mut n = 0u64;
                while !done.load(Ordering::Relaxed) {
                    db.put(format!("t{i}-{n}"), value).expect("put");
                    n += 1;
                }
                ops.fetch_add(n, Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs));
        done.store(true, Ordering::Relaxed);
    });
    let n = ops.load(Ordering::Relaxed) as f64;
    let syncs = db.stats().commit_log_syncs as f64;
    Ok((n / t.elapsed().as_secs_f64(), n / syncs.max(1.0)))
}

fn main() -> cairn::Result<()> {
    let arg = |i: usize| std::env::args().nth(i);
    let secs: f64 = arg(1).and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let vsize: usize = arg(2).and_then(|s| s.parse().ok()).unwrap_or(100);
    let log: Option<u64> = arg(3).and_then(|s| s.parse().ok());
    let mut one = 0.0;
    for t in [1, 4, 32] {
        let (r, per) = run(t, secs, vsize, log)?;
        if t == 1 {
            one = r;
        }
        let per = if log == Some(0) {
            String::new()
        } else {
            format!(", {per:.1} writes per log sync")
        };
        println!(
            "{t:>2} writer(s): {r:>9.0} durable puts/s ({:.1}x){per}",
            r / one
        );
    }
    Ok(())
}
