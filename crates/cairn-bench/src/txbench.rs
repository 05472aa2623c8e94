//! `cairn tx-bench`: what snapshots and transactions cost (DESIGN.md, "Snapshots and
//! transactions"), in three experiments:
//!
//! - **snapshot**: random overwrites of a filled store, timed without a snapshot and with
//!   one held from the start of the phase; what the held snapshot pins (versions,
//!   memory per version from the store's figures and from the process's anonymous
//!   memory, disk) and what comes back when it is dropped;
//! - **commit**: one thread, a transaction's `commit` against `Db::write` of a batch of
//!   the same writes (and the whole read-modify-write of each);
//! - **throughput**: transfers (read two accounts, write both) from 1..T threads, on
//!   cairn's transactions and, in a build with `peers`, on RocksDB's
//!   `OptimisticTransactionDB` (`get_for_update` of both, a snapshot per transaction,
//!   the options of the bench's `rocksdb` engine); conflicts retried.
//!
//! Results: Markdown tables on stdout, and JSON with `--json`. With `TXB_CPU` set in
//! the environment, each overwrite phase also prints its wall time and the writer
//! thread's CPU time on stderr (a phase slower by waiting, not by work, shows there).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cairn::{Db, Error, Options, SyncPolicy, WriteBatch};
use clap::Args;
use serde::Serialize;

/// Long description of `tx-bench`.
pub const ABOUT: &str = "\
Measure snapshots and transactions: random overwrites with and without a live snapshot
(and what it pins), a transaction's commit against a plain batch of the same writes, and
transfers per second (read two accounts, write both) on cairn and, in a build with
`--features peers`, on RocksDB's OptimisticTransactionDB with the options of the bench's
`rocksdb` engine (compression off, bloom filter, no sync unless --sync):
  cargo run --release -p cairn-cli --features peers -- tx-bench --dir /tmp/txb
Stores are made fresh in DIR and removed after each experiment.";

/// Options of `tx-bench`.
#[derive(Debug, Args)]
pub struct TxBenchArgs {
    /// Directory for the stores (made fresh, removed after each experiment)
    #[arg(long, value_name = "DIR", default_value = "tx-bench-data")]
    pub dir: PathBuf,
    /// Keys of the snapshot experiment's store
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// Random overwrites per phase of the snapshot experiment [default: --keys]
    #[arg(long)]
    pub ops: Option<u64>,
    /// Bytes of each value
    #[arg(long, default_value_t = 100)]
    pub value: usize,
    /// Accounts of the commit and throughput experiments
    #[arg(long, default_value_t = 100_000)]
    pub accounts: u64,
    /// Transactions per measurement of the commit and throughput experiments
    #[arg(long, default_value_t = 200_000)]
    pub transactions: u64,
    /// Thread counts of the throughput experiment, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    pub threads: Vec<usize>,
    /// Engines of the throughput experiment: cairn, rocksdb [default: all of this build]
    #[arg(long, value_delimiter = ',')]
    pub engines: Option<Vec<String>>,
    /// Experiments, comma-separated: snapshot, commit, throughput [default: all]
    #[arg(long, value_delimiter = ',')]
    pub only: Option<Vec<String>>,
    /// Rounds of each timed phase (the median is reported)
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Durable commits (cairn: SyncPolicy::Always; RocksDB: WriteOptions::sync)
    #[arg(long)]
    pub sync: bool,
    /// Write the results as JSON to FILE too
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Default, Serialize)]
struct Report {
    snapshot: Option<SnapshotCost>,
    commit: Vec<CommitCost>,
    throughput: Vec<Throughput>,
}

#[derive(Debug, Default, Serialize)]
struct SnapshotCost {
    keys: u64,
    ops: u64,
    value: usize,
    ns_per_op_without: f64,
    ns_per_op_with: f64,
    ratio: f64,
    versions_pinned: u64,
    memory_bytes_per_version: f64,
    anon_bytes_per_version: f64,
    key_bytes: usize,
    pinned_bytes: u64,
    disk_bytes_held: u64,
    disk_bytes_after: u64,
}

#[derive(Debug, Default, Serialize)]
struct CommitCost {
    writes: usize,
    batch_write_ns: f64,
    tx_commit_ns: f64,
    commit_ratio: f64,
    rmw_batch_ns: f64,
    rmw_tx_ns: f64,
    rmw_ratio: f64,
}

#[derive(Debug, Default, Serialize)]
struct Throughput {
    engine: String,
    threads: usize,
    transactions: u64,
    per_sec: f64,
    conflicts: u64,
}

/// Runs `tx-bench`.
pub fn run(args: &TxBenchArgs) -> Result<()> {
    if args.accounts < 2 || args.keys == 0 || args.transactions == 0 {
        bail!("tx-bench needs at least 2 --accounts, 1 --keys and 1 --transactions");
    }
    std::fs::create_dir_all(&args.dir).with_context(|| args.dir.display().to_string())?;
    let wants = |e: &str| args.only.as_ref().is_none_or(|o| o.iter().any(|x| x == e));
    let mut report = Report::default();
    println!(
        "tx-bench: {} CPUs, sync {}, values of {} bytes\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        args.sync,
        args.value
    );
    if wants("snapshot") {
        report.snapshot = Some(snapshot_cost(args)?);
    }
    if wants("commit") {
        report.commit = commit_cost(args)?;
    }
    if wants("throughput") {
        report.throughput = throughput(args)?;
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| path.display().to_string())?;
    }
    Ok(())
}

fn options(args: &TxBenchArgs) -> Options {
    Options::new().sync(if args.sync {
        SyncPolicy::Always
    } else {
        SyncPolicy::Never
    })
}

/// A fresh directory `name` under the bench's.
fn fresh(args: &TxBenchArgs, name: &str) -> Result<PathBuf> {
    let d = args.dir.join(name);
    if d.exists() {
        std::fs::remove_dir_all(&d).with_context(|| d.display().to_string())?;
    }
    Ok(d)
}

fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
    k[8..].copy_from_slice(&i.to_be_bytes());
    k
}

/// SplitMix64: the benchmark's random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The process's anonymous resident memory (its heap), from /proc.
fn anon_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb << 10)
}

/// `ops` random overwrites; returns nanoseconds per overwrite.
fn overwrites(db: &Db, keys: u64, ops: u64, value: &[u8], rng: &mut Rng) -> Result<f64> {
    let cpu = thread_cpu();
    let t = Instant::now();
    for _ in 0..ops {
        db.put(key(rng.below(keys)), value)?;
    }
    if std::env::var_os("TXB_CPU").is_some() {
        eprintln!(
            "phase: wall {:?}, the thread's CPU {:?}",
            t.elapsed(),
            thread_cpu().saturating_sub(cpu)
        );
    }
    Ok(t.elapsed().as_nanos() as f64 / ops as f64)
}

/// The calling thread's CPU time.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given, which lives on the stack.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn snapshot_cost(args: &TxBenchArgs) -> Result<SnapshotCost> {
    let dir = fresh(args, "snapshot")?;
    let db = options(args).open(&dir)?;
    let value = vec![7u8; args.value];
    for chunk in (0..args.keys).collect::<Vec<_>>().chunks(1000) {
        let mut b = WriteBatch::new();
        for &i in chunk {
            b.put(key(i), &value);
        }
        db.write(b)?;
    }
    db.flush()?;
    let ops = args.ops.unwrap_or(args.keys);
    let mut rng = Rng(42);
    let (mut without, mut with) = (Vec::new(), Vec::new());
    let mut out = SnapshotCost {
        keys: args.keys,
        ops,
        value: args.value,
        key_bytes: 17,
        ..Default::default()
    };
    // Alternating phases, so that the store's growth and compaction fall on both.
    for _ in 0..args.rounds.max(1) {
        without.push(overwrites(&db, args.keys, ops, &value, &mut rng)?);
        let anon0 = anon_bytes();
        let snap = db.snapshot();
        with.push(overwrites(&db, args.keys, ops, &value, &mut rng)?);
        let anon1 = anon_bytes();
        let st = db.stats();
        let s = &st.snapshots;
        out.versions_pinned = s.versions;
        out.memory_bytes_per_version = s.memory_bytes as f64 / s.versions.max(1) as f64;
        out.anon_bytes_per_version = anon1.saturating_sub(anon0) as f64 / s.versions.max(1) as f64;
        out.pinned_bytes = s.pinned_bytes;
        out.disk_bytes_held = st.total.disk_bytes;
        drop(snap);
        db.compact()?;
        out.disk_bytes_after = db.stats().total.disk_bytes;
    }
    out.ns_per_op_without = median(without);
    out.ns_per_op_with = median(with);
    out.ratio = out.ns_per_op_with / out.ns_per_op_without;
    db.close()?;
    std::fs::remove_dir_all(&dir)?;
    println!("## One live snapshot on random overwrites (1 thread)\n");
    println!("| keys | overwrites a phase | without | with a snapshot | ratio | versions pinned | memory a version (figures / heap) | pinned on disk | disk held → after drop and compact |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {} | {} | {:.0} ns | {:.0} ns | {:.2}× | {} | {:.1} / {:.1} B (key {} B) | {:.1} MiB | {:.1} → {:.1} MiB |\n",
        out.keys,
        out.ops,
        out.ns_per_op_without,
        out.ns_per_op_with,
        out.ratio,
        out.versions_pinned,
        out.memory_bytes_per_version,
        out.anon_bytes_per_version,
        out.key_bytes,
        mib(out.pinned_bytes),
        mib(out.disk_bytes_held),
        mib(out.disk_bytes_after)
    );
    Ok(out)
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

/// Opens a store of `accounts` accounts, each 1000.
fn open_bank(args: &TxBenchArgs, name: &str) -> Result<(Db, PathBuf)> {
    let dir = fresh(args, name)?;
    let db = options(args).open(&dir)?;
    let v = balance_value(1000, args.value);
    for chunk in (0..args.accounts).collect::<Vec<_>>().chunks(1000) {
        let mut b = WriteBatch::new();
        for &i in chunk {
            b.put(key(i), &v);
        }
        db.write(b)?;
    }
    db.flush()?;
    Ok((db, dir))
}

/// An account's value: its balance, padded to `len` bytes.
fn balance_value(n: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len.max(8)];
    v[..8].copy_from_slice(&n.to_le_bytes());
    v
}

fn balance(v: &[u8]) -> u64 {
    v.get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn commit_cost(args: &TxBenchArgs) -> Result<Vec<CommitCost>> {
    let (db, dir) = open_bank(args, "commit")?;
    let mut out = Vec::new();
    for writes in [2usize, 8] {
        let mut c = CommitCost {
            writes,
            ..Default::default()
        };
        let (mut bw, mut tc, mut rb, mut rt) = (vec![], vec![], vec![], vec![]);
        for _ in 0..args.rounds.max(1) {
            let (w, r) = batch_phase(&db, args, writes)?;
            bw.push(w);
            rb.push(r);
            let (w, r) = tx_phase(&db, args, writes)?;
            tc.push(w);
            rt.push(r);
        }
        c.batch_write_ns = median(bw);
        c.tx_commit_ns = median(tc);
        c.commit_ratio = c.tx_commit_ns / c.batch_write_ns;
        c.rmw_batch_ns = median(rb);
        c.rmw_tx_ns = median(rt);
        c.rmw_ratio = c.rmw_tx_ns / c.rmw_batch_ns;
        out.push(c);
    }
    db.close()?;
    std::fs::remove_dir_all(&dir)?;
    println!("## An uncontended commit against a plain batch of the same writes (1 thread)\n");
    println!("| writes | `Db::write` of the batch | `Transaction::commit` | ratio | read-modify-write: gets + batch | transaction | ratio |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for c in &out {
        println!(
            "| {} | {:.0} ns | {:.0} ns | {:.2}× | {:.0} ns | {:.0} ns | {:.2}× |",
            c.writes,
            c.batch_write_ns,
            c.tx_commit_ns,
            c.commit_ratio,
            c.rmw_batch_ns,
            c.rmw_tx_ns,
            c.rmw_ratio
        );
    }
    println!();
    Ok(out)
}

/// Read-modify-writes of `writes` random accounts with `Db::get` and a batch; returns
/// (ns per `write`, ns per whole operation).
fn batch_phase(db: &Db, args: &TxBenchArgs, writes: usize) -> Result<(f64, f64)> {
    let mut rng = Rng(1);
    let mut in_write = Duration::ZERO;
    let t = Instant::now();
    for _ in 0..args.transactions {
        let mut b = WriteBatch::new();
        for _ in 0..writes {
            let k = key(rng.below(args.accounts));
            let n = db.get(k)?.map_or(0, |v| balance(&v));
            b.put(k, balance_value(n + 1, args.value));
        }
        let w = Instant::now();
        db.write(b)?;
        in_write += w.elapsed();
    }
    let n = args.transactions as f64;
    Ok((
        in_write.as_nanos() as f64 / n,
        t.elapsed().as_nanos() as f64 / n,
    ))
}

/// The same read-modify-writes as transactions; returns (ns per `commit`, ns per whole
/// transaction).
fn tx_phase(db: &Db, args: &TxBenchArgs, writes: usize) -> Result<(f64, f64)> {
    let mut rng = Rng(1);
    let mut in_commit = Duration::ZERO;
    let t = Instant::now();
    for _ in 0..args.transactions {
        let mut tx = db.transaction();
        for _ in 0..writes {
            let k = key(rng.below(args.accounts));
            let n = tx.get(k)?.map_or(0, |v| balance(&v));
            tx.put(k, balance_value(n + 1, args.value))?;
        }
        let w = Instant::now();
        tx.commit()?;
        in_commit += w.elapsed();
    }
    let n = args.transactions as f64;
    Ok((
        in_commit.as_nanos() as f64 / n,
        t.elapsed().as_nanos() as f64 / n,
    ))
}

/// One engine's transfer: read accounts `a` and `b`, write both; `Ok(false)` on a
/// conflict (nothing written).
type Transfer<'a> = dyn Fn(u64, u64) -> Result<bool> + Sync + 'a;

fn throughput(args: &TxBenchArgs) -> Result<Vec<Throughput>> {
    let engines = args.engines.clone().unwrap_or_else(|| {
        let mut e = vec!["cairn".to_string()];
        if cfg!(feature = "peers") {
            e.push("rocksdb".into());
        }
        e
    });
    let mut out = Vec::new();
    for engine in &engines {
        for &threads in &args.threads {
            let mut runs = Vec::new();
            for _ in 0..args.rounds.max(1) {
                runs.push(throughput_run(args, engine, threads)?);
            }
            runs.sort_by(|a, b| a.per_sec.total_cmp(&b.per_sec));
            let mid = runs.swap_remove(runs.len() / 2);
            out.push(mid);
        }
    }
    println!(
        "## Transfers per second (read two accounts, write both; {} accounts)\n",
        args.accounts
    );
    println!(
        "| engine | threads | transactions | per second | conflicts retried | cairn ÷ engine |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for t in &out {
        let cairn = out
            .iter()
            .find(|c| c.engine == "cairn" && c.threads == t.threads)
            .map_or(0.0, |c| c.per_sec);
        println!(
            "| {} | {} | {} | {:.0} | {} | {:.2}× |",
            t.engine,
            t.threads,
            t.transactions,
            t.per_sec,
            t.conflicts,
            cairn / t.per_sec
        );
    }
    println!();
    Ok(out)
}

fn throughput_run(args: &TxBenchArgs, engine: &str, threads: usize) -> Result<Throughput> {
    match engine {
        "cairn" => {
            let (db, dir) = open_bank(args, "throughput")?;
            let len = args.value;
            let transfer = |a: u64, b: u64| -> Result<bool> {
                let mut tx = db.transaction();
                let x = tx.get(key(a))?.map_or(0, |v| balance(&v));
                let y = tx.get(key(b))?.map_or(0, |v| balance(&v));
                tx.put(key(a), balance_value(x.saturating_sub(1), len))?;
                tx.put(key(b), balance_value(y + 1, len))?;
                match tx.commit() {
                    Ok(()) => Ok(true),
                    Err(Error::Conflict) => Ok(false),
                    Err(e) => Err(e.into()),
                }
            };
            let r = drive(args, "cairn", threads, &transfer);
            db.close()?;
            std::fs::remove_dir_all(&dir)?;
            r
        }
        #[cfg(feature = "peers")]
        "rocksdb" => rocks_run(args, threads),
        other => {
            bail!("tx-bench has no engine {other} in this build (rocksdb needs --features peers)")
        }
    }
}

/// Runs `args.transactions` transfers over `threads` threads; conflicts are retried.
fn drive(
    args: &TxBenchArgs,
    engine: &str,
    threads: usize,
    transfer: &Transfer<'_>,
) -> Result<Throughput> {
    let next = AtomicU64::new(0);
    let conflicts = AtomicU64::new(0);
    let t = Instant::now();
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|i| {
                let (next, conflicts) = (&next, &conflicts);
                s.spawn(move || -> Result<()> {
                    let mut rng = Rng(1000 + i as u64);
                    while next.fetch_add(1, Ordering::Relaxed) < args.transactions {
                        let a = rng.below(args.accounts);
                        let b = (a + 1 + rng.below(args.accounts - 1)) % args.accounts;
                        while !transfer(a, b)? {
                            conflicts.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| bail!("a transfer thread panicked"))
            })
            .collect()
    });
    let took = t.elapsed();
    for r in results {
        r?;
    }
    Ok(Throughput {
        engine: engine.into(),
        threads,
        transactions: args.transactions,
        per_sec: args.transactions as f64 / took.as_secs_f64(),
        conflicts: conflicts.load(Ordering::Relaxed),
    })
}

#[cfg(feature = "peers")]
fn rocks_run(args: &TxBenchArgs, threads: usize) -> Result<Throughput> {
    use rocksdb::{ErrorKind, OptimisticTransactionOptions};
    let dir = fresh(args, "throughput-rocksdb")?;
    let (db, write) = crate::engines::rocksdb::open_optimistic(&dir, args.sync)?;
    let v = balance_value(1000, args.value);
    for chunk in (0..args.accounts).collect::<Vec<_>>().chunks(1000) {
        let mut b = rocksdb::WriteBatchWithTransaction::<true>::default();
        for &i in chunk {
            b.put(key(i), &v);
        }
        db.write_opt(b, &write)?;
    }
    let mut topts = OptimisticTransactionOptions::default();
    topts.set_snapshot(true);
    let len = args.value;
    let transfer = |a: u64, b: u64| -> Result<bool> {
        let tx = db.transaction_opt(&write, &topts);
        let x = tx.get_for_update(key(a), true)?.map_or(0, |v| balance(&v));
        let y = tx.get_for_update(key(b), true)?.map_or(0, |v| balance(&v));
        tx.put(key(a), balance_value(x.saturating_sub(1), len))?;
        tx.put(key(b), balance_value(y + 1, len))?;
        match tx.commit() {
            Ok(()) => Ok(true),
            Err(e) if matches!(e.kind(), ErrorKind::Busy | ErrorKind::TryAgain) => Ok(false),
            Err(e) => Err(e.into()),
        }
    };
    let r = drive(args, "rocksdb", threads, &transfer);
    drop(db);
    std::fs::remove_dir_all(&dir)?;
    r
}
