//! The Python benchmark's workload through the Rust API, read the way the Python loop
//! reads (crates/cairn-py/bench/peers.py): N 8-byte big-endian keys made in order as
//! separate heap objects, put in a shuffled order with a 100-byte value, flushed; then N
//! gets of keys drawn at random from them, walked from a list of references (each get
//! touches its key's object: a cache miss, as a Python `bytes` in a list is); then the
//! same keys read by `Db::get_many` in runs of `batch`.
//! `cargo run --release -p cairn --example keylist -- [records] [batch] [reps]` (batch 0:
//! no `get_many`).

use std::time::Instant;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

fn main() -> cairn::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let batch: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(64);
    let reps: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let dir = tempfile::tempdir_in(".").expect("temp dir");
    let db = cairn::Db::open(dir.path())?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let value: Vec<u8> = (0..100).map(|_| rng.random()).collect();
    // One heap object per key, made in key order (as Python makes its `bytes`).
    let mut keys: Vec<Box<[u8]>> = (0..n as u64)
        .map(|k| k.to_be_bytes().to_vec().into_boxed_slice())
        .collect();
    keys.shuffle(&mut rng);
    let reads: Vec<&[u8]> = (0..n).map(|_| &*keys[rng.random_range(0..n)]).collect();
    let rate = |ops: usize, t: Instant| ops as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    for k in &keys {
        db.put(k, &value)?;
    }
    db.flush()?;
    println!("fill random {:.0} ops/s", rate(n, t));
    for _ in 0..reps {
        let t = Instant::now();
        for k in &reads {
            let v = db.get(k)?.expect("present");
            assert_eq!(v.len(), value.len());
        }
        println!("get list {:.0} ops/s", rate(n, t));
        if batch > 0 {
            let t = Instant::now();
            for run in reads.chunks(batch) {
                for v in db.get_many(run)? {
                    assert_eq!(v.expect("present").len(), value.len());
                }
            }
            println!("get_many list {:.0} ops/s", rate(n, t));
        }
    }
    Ok(())
}
