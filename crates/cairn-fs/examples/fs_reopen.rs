//! How long a file-system store of N files in one directory takes to open:
//! `cargo run --release -p cairn-fs --example fs_reopen -- [files] [dir] [rounds]`.
//! Creates the files on the first run (named as `cairn fs-bench` names them), closes the
//! store, then opens and closes it `rounds` times (default 3), printing each open's time
//! and the process's resident memory after it. Run it under `perf record` to profile an
//! open.

use std::time::Instant;

use cairn_fs::{Cred, Fs, ROOT};

fn rss_gib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages as f64 * 4096.0 / (1u64 << 30) as f64
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let dir = args.get(2).cloned().unwrap_or_else(|| "fs-reopen".into());
    let rounds: u32 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(3);
    let me = Cred::ROOT;
    let fs = Fs::open(&dir)?;
    let d = match fs.lookup(&me, ROOT, b"d") {
        Ok(a) => a.ino,
        Err(_) => fs.mkdir(&me, ROOT, b"d", 0o755)?.ino,
    };
    let have = fs.readdir(d, None, 1)?.len();
    if have == 0 {
        let t = Instant::now();
        for i in 0..n {
            fs.create(&me, d, format!("f{i:010}").as_bytes(), 0o644)?;
        }
        println!("created {n} files in {:.1} s", t.elapsed().as_secs_f64());
    }
    let t = Instant::now();
    fs.close()?;
    println!("close: {:.2} s", t.elapsed().as_secs_f64());
    for _ in 0..rounds {
        let t = Instant::now();
        let fs = Fs::open(&dir)?;
        println!(
            "open: {:.2} s, resident {:.2} GiB",
            t.elapsed().as_secs_f64(),
            rss_gib()
        );
        fs.close()?;
    }
    Ok(())
}
