//! Random point reads of a store larger than memory, as the HaloDB suite's `--records
//! 40000000` makes one, without filling it again for every measurement: builds DIR once
//! (N records, 8-byte big-endian keys, 1 KiB values, written in key order) unless it
//! holds them already, then reads random keys from T threads for S seconds and reports
//! reads/s, the process's major page faults per read and the bytes it read from the disk
//! per read (`/proc/self/io` `read_bytes`: page-cache misses, mapped or not), and the
//! machine's busy CPU time per read (`/proc/stat`: the kernel's reclaim included). Each
//! run draws its own random keys.
//!
//! ```text
//! cargo run --release -p cairn --example large_reads -- DIR [N] [THREADS,...] [SECS]
//! ```
//!
//! For example `large_reads /work/big 40000000 1,4,32 20`; compare with the disk's own
//! random 4 KiB reads over the same files, e.g. `fio --name=r --opendir=DIR --direct=1
//! --rw=randread --bs=4k --numjobs=4 --time_based --runtime=20 --group_reporting`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

fn majflt() -> u64 {
    // SAFETY: `rusage` is a struct of integers, for which all-zero bytes are valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given, which outlives the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_majflt as u64
}

fn read_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("read_bytes: ")?.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time busy on the whole machine so far (all CPUs, kernel threads such as
/// `kswapd` included), in clock ticks, from `/proc/stat`.
fn busy_ticks() -> u64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            let f: Vec<u64> = s
                .lines()
                .next()?
                .split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect();
            // user nice system idle iowait irq softirq steal: busy = all but idle, iowait.
            Some(f.iter().sum::<u64>() - f.get(3)? - f.get(4)?)
        })
        .unwrap_or(0)
}

fn main() -> cairn::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let Some(dir) = args.get(1).map(PathBuf::from) else {
        eprintln!("usage: large_reads DIR [N] [THREADS,...] [SECS]");
        std::process::exit(2);
    };
    let n: u64 = args
        .get(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(40_000_000);
    let threads: Vec<usize> = args
        .get(3)
        .map(|s| s.split(',').filter_map(|t| t.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 4, 32]);
    let secs: u64 = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(20);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let value: Vec<u8> = (0..1024).map(|_| rng.random()).collect();

    let t = Instant::now();
    let db = cairn::Db::open(&dir)?;
    println!("opened in {:.1} s", t.elapsed().as_secs_f64());
    if db.get((n - 1).to_be_bytes())?.is_none() {
        let t = Instant::now();
        for i in 0..n {
            db.put(i.to_be_bytes(), &value)?;
        }
        db.flush()?;
        println!("filled {n} records in {:.1} s", t.elapsed().as_secs_f64());
    }
    // Each run draws its own keys: a second run must not find the first one's reads in
    // the page cache.
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let tick_us = 1e6 / 100.0; // USER_HZ
    println!("| threads | reads/s | major faults per read | disk bytes per read | machine CPU µs per read |");
    println!("|---:|---:|---:|---:|---:|");
    for &th in &threads {
        let stop = AtomicBool::new(false);
        let reads = AtomicU64::new(0);
        let (f0, b0, c0) = (majflt(), read_bytes(), busy_ticks());
        let t = Instant::now();
        std::thread::scope(|s| {
            for j in 0..th {
                let (db, stop, reads) = (&db, &stop, &reads);
                s.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(
                        salt ^ (1000 + j as u64 + ((th as u64) << 32)),
                    );
                    let mut mine = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let k: u64 = rng.random_range(0..n);
                        match db.get(k.to_be_bytes()) {
                            Ok(Some(v)) if v.len() == 1024 => mine += 1,
                            other => panic!("key {k}: {other:?}"),
                        }
                    }
                    reads.fetch_add(mine, Ordering::Relaxed);
                });
            }
            std::thread::sleep(Duration::from_secs(secs));
            stop.store(true, Ordering::Relaxed);
        });
        let el = t.elapsed().as_secs_f64();
        let r = reads.load(Ordering::Relaxed).max(1);
        println!(
            "| {th} | {:.0} | {:.2} | {:.0} | {:.1} |",
            r as f64 / el,
            (majflt() - f0) as f64 / r as f64,
            (read_bytes() - b0) as f64 / r as f64,
            (busy_ticks() - c0) as f64 * tick_us / r as f64
        );
    }
    db.close()?;
    Ok(())
}
