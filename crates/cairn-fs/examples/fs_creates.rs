//! Creates N empty files in one directory of a fresh file system and prints the rate:
//! `cargo run --release -p cairn-fs --example fs_creates -- [files] [dir]`.
//! `CAIRN_FS_ENGINE_TX=1` (an experiment, see store.rs) commits each operation as an
//! engine transaction instead of a batch.

use std::time::Instant;

use cairn_fs::{Cred, Fs, ROOT};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let dir = args.get(2).cloned().unwrap_or_else(|| "fs-creates".into());
    let _ = std::fs::remove_dir_all(&dir);
    let fs = Fs::open(&dir)?;
    let me = Cred::ROOT;
    let d = fs.mkdir(&me, ROOT, b"d", 0o755)?;
    let t = Instant::now();
    for i in 0..n {
        fs.create(&me, d.ino, format!("file{i:09}").as_bytes(), 0o644)?;
    }
    let s = t.elapsed().as_secs_f64();
    println!("{n} creates in {s:.2} s: {:.0}/s", n as f64 / s);
    fs.close()?;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
