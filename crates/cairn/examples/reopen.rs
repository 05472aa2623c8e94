//! Measures how long a store of N keys takes to open:
//! `cargo run --release -p cairn --example reopen -- [keys] [value_size] [dir]`.
//! Fills the store on the first run (or when it holds fewer keys), then times reopens.

use std::time::Instant;

fn main() -> cairn::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let vsize: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100);
    let dir = args
        .get(3)
        .cloned()
        .unwrap_or_else(|| "reopen-store".into());
    let t = Instant::now();
    let db = cairn::Db::open(&dir)?;
    println!(
        "open: {:.3} s, {} keys",
        t.elapsed().as_secs_f64(),
        db.stats().total.keys
    );
    if db.stats().total.keys < n {
        let value = vec![0x5au8; vsize];
        let t = Instant::now();
        for i in 0..n {
            // Spread keys like a hash would, so every shard gets random inserts.
            let k = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            db.put(k.to_be_bytes(), &value)?;
        }
        db.flush()?;
        println!("fill: {:.1} s", t.elapsed().as_secs_f64());
    }
    drop(db);
    for _ in 0..3 {
        let t = Instant::now();
        let db = cairn::Db::open(&dir)?;
        let el = t.elapsed().as_secs_f64();
        println!("reopen: {el:.3} s, {} keys", db.stats().total.keys);
    }
    Ok(())
}
