//! Point reads of values of several sizes, cold (the store's files dropped from the page
//! cache before each read) and warm: microseconds per read and major page faults per
//! read. What the rule for reading a record through the segment's map or with one
//! `pread` was chosen from (DESIGN.md, "Reads that reach the disk").
//!
//! ```text
//! cargo run --release -p cairn --example cold_point_reads [DIR]
//! ```
//!
//! DIR (default: a directory under the system's temporary directory) should be on the
//! disk to measure, not a tmpfs.

use std::time::Instant;

fn majflt() -> u64 {
    // SAFETY: `rusage` is a struct of integers, for which all-zero bytes are valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given, which outlives the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_majflt as u64
}

fn main() -> cairn::Result<()> {
    let base = std::env::args_os()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::env::temp_dir().join(format!("cairn-cold-reads-{}", std::process::id()))
        });
    println!("| value | cold µs/read | faults/read | warm µs/read |");
    println!("|---:|---:|---:|---:|");
    for size in [
        2 << 10,
        4 << 10,
        8 << 10,
        12 << 10,
        16 << 10,
        32 << 10,
        64 << 10,
    ] {
        let dir = base.join(format!("v{size}"));
        let _ = std::fs::remove_dir_all(&dir);
        // About 256 MiB of values, so that random reads are spread over many pages.
        let n = ((256u64 << 20) / size as u64).max(1000);
        {
            let db = cairn::Db::open(&dir)?;
            let v = vec![0xa5u8; size];
            for i in 0..n {
                db.put(i.to_be_bytes(), &v)?;
            }
            db.close()?;
        }
        let db = cairn::Db::open(&dir)?;
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let reads = 300;
        let mut cold = 0.0;
        let f0 = majflt();
        for _ in 0..reads {
            let k = next();
            cairn::evict_page_cache(&dir)?;
            let t = Instant::now();
            let v = db.get(k.to_be_bytes())?.expect("present");
            cold += t.elapsed().as_secs_f64();
            assert_eq!(v.len(), size);
        }
        let faults = (majflt() - f0) as f64 / reads as f64;
        for k in 0..2000u64.min(n) {
            db.get(k.to_be_bytes())?.expect("present");
        }
        let t = Instant::now();
        let warm_reads = 20_000;
        for _ in 0..warm_reads {
            let k = next() % 2000.min(n);
            let v = db.get(k.to_be_bytes())?.expect("present");
            std::hint::black_box(&v[..]);
        }
        // (warm: 2000 keys, read once before, read over and over)
        let warm = t.elapsed().as_secs_f64();
        println!(
            "| {} KiB | {:.0} | {:.1} | {:.2} |",
            size >> 10,
            cold / reads as f64 * 1e6,
            faults,
            warm / warm_reads as f64 * 1e6
        );
        db.close()?;
        std::fs::remove_dir_all(&dir).ok();
    }
    let _ = std::fs::remove_dir_all(&base);
    Ok(())
}
