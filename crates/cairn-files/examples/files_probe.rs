//! A probe for profiling large file writes: the KFS suite's treatment of one file size,
//! in a loop, in a process of its own.
//!
//! ```text
//! cargo build --release -p cairn-files --example files_probe
//! perf record -g -- target/release/examples/files_probe DIR [MiB] [FILES] [SHARDS]
//! ```
//!
//! In a new store under DIR (default: the current directory; removed at the end) with
//! SHARDS shards (default 16) and `SyncPolicy::Never`, it writes FILES files (default 10)
//! of MiB MiB each (default 512) through `cairn_files` in 128 KiB pieces of random bytes,
//! one after the other, as `cairn bench --suites kfs` does; after each write it reads the
//! file back twice and removes it. Nothing is synced and nothing is dropped from the page
//! cache, so the reads run against what the write left in memory, and the background
//! work (the collector, compaction) runs while the next file is written. It prints the
//! time of every step of every file: the write until its commit returns, then the flush
//! that makes it durable (`Db::flush`), the first read, the second read and the remove.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Instant;

use cairn::{Options, SyncPolicy};
use cairn_files::FileStore;

const PIECE: usize = 128 << 10;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let base: PathBuf = args.next().map_or_else(|| ".".into(), PathBuf::from);
    let mut number = |default: u64| -> Result<u64, Box<dyn std::error::Error>> {
        Ok(args
            .next()
            .map(|s| s.parse())
            .transpose()?
            .unwrap_or(default))
    };
    let (mib, files, shards) = (number(512)?, number(10)?, number(16)?);
    if mib == 0 || files == 0 || shards == 0 {
        return Err("MiB, FILES and SHARDS must be positive".into());
    }
    let size = mib << 20;
    let tmp = tempfile::tempdir_in(&base)?;
    let db = Options::new()
        .shards(u32::try_from(shards)?)
        .sync(SyncPolicy::Never)
        .open(tmp.path())?;
    let store = FileStore::new(&db)?;
    println!(
        "pid {}: {files} files of {mib} MiB, {shards} shards, in {}",
        std::process::id(),
        tmp.path().display()
    );
    // Random bytes to cut pieces from (xorshift), a little more than a piece long so that
    // pieces start at different places.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let pool: Vec<u8> = (0..4 * PIECE + 4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut buf = vec![0u8; PIECE];
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    for i in 0..files {
        let key = format!("probe-{i}");
        let t = Instant::now();
        let mut w = store.create(&key)?;
        let mut left = size;
        let mut piece = 0usize;
        while left > 0 {
            let n = (left as usize).min(PIECE);
            let at = (piece * 4099) % (pool.len() - PIECE);
            w.write_all(&pool[at..at + n])?;
            left -= n as u64;
            piece += 1;
        }
        let stat = w.commit()?;
        let write = ms(t);
        if stat.size != size {
            return Err(format!("{key}: stored {} bytes, not {size}", stat.size).into());
        }
        let t = Instant::now();
        db.flush()?;
        let flush = ms(t);
        let mut reads = [0.0; 2];
        for read in &mut reads {
            let t = Instant::now();
            let mut r = store
                .open(&key)?
                .ok_or("the file just written is missing")?;
            let mut total = 0u64;
            loop {
                let n = r.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                total += n as u64;
            }
            *read = ms(t);
            if total != size {
                return Err(format!("{key}: read {total} bytes, not {size}").into());
            }
        }
        let t = Instant::now();
        store.remove(&key)?;
        let remove = ms(t);
        println!(
            "file {i}: write {write:.1} ms ({:.0} MB/s), flush {flush:.1} ms, \
             first read {:.1} ms, second read {:.1} ms, remove {remove:.3} ms",
            size as f64 / write / 1e3,
            reads[0],
            reads[1]
        );
    }
    drop(store);
    db.close()?;
    Ok(())
}
