//! `cairn-bench`: the benchmarks of the `cairn` command-line tool, as a library.
//!
//! ```no_run
//! use clap::Parser;
//!
//! /// A binary that answers `bench` (and the child command, see below).
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     bench: cairn_bench::BenchArgs,
//! }
//!
//! // HaloDB's benchmark on cairn alone, small: results.md, results.json and plots in out/.
//! let cli = Cli::parse_from(["bench", "--quick", "--suites", "halodb", "--engines", "cairn", "--out", "out"]);
//! cairn_bench::run(&cli.bench, "the system allocator")?;
//! # Ok::<(), anyhow::Error>(())
//! ```
//!
//! - `cairn bench` ([`run`], [`BenchArgs`]): the published experiments of HaloDB, mmcmap and KFS, run on cairn and on
//!   the engines people pick instead, with identical settings, in one run; results as
//!   JSON, a Markdown table and PNG plots. The peers (RocksDB, LevelDB, LMDB, sled,
//!   fjall, redb) are built only with the `peers` feature.
//! - `cairn fs-bench` ([`fsbench::run`], [`fsbench::FsBenchArgs`]): the file-system
//!   metadata benchmark, on `cairn::fs`, on a FUSE mount of it and on a plain directory.
//!
//! Layering: this crate sits on the engine (`cairn`) and on `cairn-fuse` (whose request
//! counts fs-bench reads); only the command-line tool (`cairn-cli`) uses it. It must
//! never depend on `cairn-cli`.
//!
//! Both benchmarks run parts of themselves in child processes of the running executable,
//! which therefore has to be the `cairn` binary (or one that answers the same
//! subcommands): `bench` runs every (suite, engine) pair as `EXE __bench-child SPEC`
//! ([`CHILD_COMMAND`], which must call [`child`]), so that peak memory and crashes are
//! per engine; the child reports progress on stderr and writes its results to a JSON file
//! that the parent collects. fs-bench's FUSE target mounts the store with
//! `EXE mount STORE MOUNTPOINT` (which must serve it with `cairn_fuse`).
//!
//! Layout of `bench`: `engine` is the one trait every engine implements and `engines`
//! holds one adapter file per engine; each workload suite is one file (`halodb`,
//! `mmcmap`, `kfs`, `disk`) exposing a `SuiteDef`; `measure` runs and measures threads
//! of operations; `children` starts and follows the child processes and is their body;
//! `table` (with the KFS suite's tables in `table/kfs_tables`) and `plot` render the
//! results. [`fsbench`] is fs-bench, with
//! its plots in `fsplot`; `chart` has the drawing helpers both plot modules share.

#![deny(missing_docs, clippy::unwrap_used, clippy::expect_used)]

/// The code examples of the repository's README.md, compiled and run as this crate's
/// doctests (`cargo test -p cairn-bench --doc`): this crate depends on every layer the
/// README shows (engine, file store, file system, cluster).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeExamples;

pub mod backupbench;
mod chart;
mod children;
pub mod cluster;
pub mod clustersim;
mod disk;
mod engine;
mod engines;
pub mod fsbench;
mod fsdata;
mod fseveryday;
mod fsimage;
mod fsplot;
pub mod fsprocs;
mod halodb;
mod kfs;
mod measure;
mod memlimit;
mod mmcmap;
mod plot;
pub mod replbench;
mod servers;
mod synccount;
mod table;
pub mod txbench;

use std::fs;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use self::engine::{Engine, EngineSpec, Settings};
use self::measure::{Group, Phase};

/// Long description of `cairn bench` (its `--help`).
pub const ABOUT: &str = "\
Benchmark cairn against other engines with HaloDB's, mmcmap's and KFS's experiments, each engine in a
child process of its own, and write results.json, results.md and plots/*.png to --out.

Suites (--suites): halodb (HaloDB's benchmark: 8-byte keys, 1 KiB values, --records N: fill
sequential, fill random, random read with --threads T and with 32 threads, random
update, read while writing; for a store larger than memory, so that reads hit the disk,
give it more records than the machine has memory, or confine each engine with
--memory-max: `--records 4000000 --memory-max 1G` is a 4 GB store in 1 GiB), mmcmap
(mmcmap's benchmark: 32-byte a-z keys equal to values, written,
read and deleted concurrently at 100k, 1M, 2M and 4M pairs; then 80% reads / 20% writes
over 1M pairs), kfs (KFS's experiment: files of 8 to 512 MiB in 128 KiB chunks, each
trial writes every size, reads them back and unlinks them, --trials T times; on cairn's
file store with its default shards and with one shard, and on RocksDB and LevelDB holding
the chunks as rows; mean, standard deviation and Welch's t-test per operation and size),
disk (the disk's sequential bandwidth, random 4 KiB reads from 1, T and 32 threads, and
fsync latency, with fio when installed).

Peers (RocksDB, LevelDB, LMDB, sled, fjall, redb) exist only in a build with
`--features peers` (scripts/install-bench-deps.sh installs the libraries they need;
scripts/build-peers.sh --release-rocksdb compiles RocksDB from source without assertions):
  cargo run --release -p cairn-cli --features peers -- bench --quick
RocksDB runs three ways: `rocksdb` (its defaults and a bloom filter), `rocksdb-tuned`
(its tuning guide's OptimizeForPointLookup, with a block cache as large as cairn's peak
heap in the same suite, at most a quarter of --memory-max; LevelDB gets such a cache too) and
`rocksdb-nowal` (tuned, write-ahead log off: an upper bound with weaker durability, a
crash loses the whole memtable; left out of --sync runs).

Every engine gets the same durability (no fsync on the write path; --sync: every write
durable) with one exception: redb makes every 1000th commit durable (it reuses freed
pages only after a durable commit; with none its file grows without bound). Compression
is off, and otherwise each engine has its recommended settings; the report lists every
setting that differs from an engine's defaults, and the allocator each engine got (in a
build with `peers`, mimalloc for all: malloc is replaced in the whole process).";

/// Options of `cairn bench` (a clap [`Args`], flattened into the `bench` subcommand).
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Small sizes that finish in about a minute with every engine
    #[arg(long, conflicts_with = "smoke")]
    quick: bool,
    /// Tiny sizes, cairn only unless --engines says otherwise (what CI runs)
    #[arg(long)]
    smoke: bool,
    /// Records of the HaloDB suite [default: 1000000; --quick 20000; --smoke 2000]
    #[arg(long, value_name = "N")]
    records: Option<u64>,
    /// Operations of each of the HaloDB suite's random-read, random-update and
    /// read-while-writing phases [default: --records]. The fills always write every
    /// record; with a store far larger than memory each random read is a disk read, so
    /// at 40,000,000 records a phase of --records reads would take 20 minutes or more
    /// at this kind of disk's IOPS
    #[arg(long, value_name = "N")]
    ops: Option<u64>,
    /// Reader threads of the HaloDB suite's random read and read-while-writing tests
    #[arg(long, value_name = "T", default_value_t = 4)]
    threads: usize,
    /// Threads of the mmcmap suite
    #[arg(long, value_name = "T", default_value_t = 16)]
    mmcmap_threads: usize,
    /// Durable writes: every write reaches stable storage before it returns
    #[arg(long)]
    sync: bool,
    /// Also read every file of the KFS suite cold: the page cache dropped before each
    /// read (as root `echo 3 > /proc/sys/vm/drop_caches`, else the store's files evicted
    /// with posix_fadvise(DONTNEED); the report says which)
    #[arg(long)]
    cold: bool,
    /// Engines to run, comma-separated [default: every engine of this build]
    #[arg(long, value_name = "a,b,c", value_delimiter = ',')]
    engines: Option<Vec<String>>,
    /// Trials of the KFS suite (KFS's experiment ran 100) [default: 10; --quick 3; --smoke 2]
    #[arg(long, value_name = "N")]
    trials: Option<u64>,
    /// Suites to run, comma-separated: disk, halodb, mmcmap, kfs [default: all]
    #[arg(long, value_name = "a,b,c", value_delimiter = ',')]
    suites: Option<Vec<String>>,
    /// Directory for results.json, results.md and plots/
    #[arg(long, value_name = "DIR", default_value = "bench-out")]
    out: PathBuf,
    /// Directory for the engines' data, removed after each engine [default: OUT/data]
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Length of one interval of the throughput-over-time figures, in milliseconds
    /// [default: 1000; --quick 100; --smoke 50]
    #[arg(long, value_name = "MS")]
    interval_ms: Option<u64>,
    /// Run every engine's process in a memory cgroup limited to SIZE (e.g. 2G), which
    /// counts the page cache it fills: with --records larger than SIZE the store is
    /// larger than the memory the engine may use, so reads reach the disk (root only)
    #[arg(long, value_name = "SIZE", value_parser = memlimit::parse_size)]
    memory_max: Option<u64>,
    /// Measure the disk with the built-in test even when fio is installed
    #[arg(long)]
    no_fio: bool,
    /// Seed of every random choice
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Run nothing: write results.md and plots/ again from OUT/results.json
    #[arg(long)]
    render: bool,
}

/// Everything a child needs to know about the run; written into the JSON too.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Config {
    /// "full", "quick" or "smoke".
    pub mode: String,
    /// Records of the HaloDB suite.
    pub records: u64,
    /// Operations of each HaloDB-suite phase after the fills (`None`: `records`).
    #[serde(default)]
    pub ops: Option<u64>,
    /// Bytes of a HaloDB-suite value.
    pub value_size: usize,
    /// Threads of the HaloDB suite's reads.
    pub threads: usize,
    /// The second, larger, thread count of the random-read test (as in HaloDB's benchmark).
    pub many_threads: usize,
    /// Durable writes.
    pub sync: bool,
    /// Pair counts of the mmcmap suite's concurrent tests.
    pub mmcmap_sizes: Vec<u64>,
    /// Pairs loaded before the mmcmap suite's mixed test (which then writes a fifth more).
    pub mmcmap_mixed: u64,
    /// Threads of the mmcmap suite.
    pub mmcmap_threads: usize,
    /// Interval of the throughput-over-time figures, in milliseconds.
    pub interval_ms: u64,
    /// Size of the disk test's file.
    pub disk_bytes: u64,
    /// Bytes the disk test's random reads span: at least `disk_bytes`, and as many as
    /// the HaloDB suite's store holds (`records` × (key + value)), since a virtual disk
    /// may serve a small span from its host's cache: on this project's VM 4 KiB random
    /// reads ran at 43k/s (4 threads) over 1 GiB and 16k/s over 41 GB. 0: `disk_bytes`.
    #[serde(default)]
    pub disk_rand_span: u64,
    /// Appends with fdatasync of the disk test.
    pub fsyncs: u64,
    /// Whether the disk test may use fio.
    pub use_fio: bool,
    /// Seed of every random choice.
    pub seed: u64,
    /// File sizes of the KFS suite, in bytes.
    #[serde(default)]
    pub kfs_sizes: Vec<u64>,
    /// Trials of the KFS suite.
    #[serde(default)]
    pub kfs_trials: u64,
    /// How the KFS suite drops the page cache before its cold reads (`None`: no cold
    /// reads): "drop_caches" or "fadvise" (see [`measure::drop_page_cache`]).
    #[serde(default)]
    pub cold: Option<String>,
    /// The memory cgroup limit every engine's process ran under (`--memory-max`), bytes.
    #[serde(default)]
    pub memory_max: Option<u64>,
    /// Random 4 KiB direct reads of the disk suite, at each concurrency.
    #[serde(default)]
    pub disk_rand_reads: u64,
    /// The block cache of engines that size one in this child's run, set by the parent
    /// from cairn's run in the same suite ([`Config::block_cache`]; `None`: no cairn
    /// figure, the estimate).
    #[serde(default)]
    pub cache_bytes: Option<u64>,
}

impl Config {
    fn from_args(args: &BenchArgs) -> Result<Config> {
        let (mode, records, sizes, mixed, interval, disk, fsyncs) = if args.smoke {
            ("smoke", 2_000, vec![1_000, 2_000], 1_000, 50, 8 << 20, 20)
        } else if args.quick {
            (
                "quick",
                20_000,
                vec![10_000, 30_000],
                20_000,
                100,
                256 << 20,
                500,
            )
        } else {
            let sizes = vec![100_000, 1_000_000, 2_000_000, 4_000_000];
            ("full", 1_000_000, sizes, 1_000_000, 1000, 1 << 30, 2000)
        };
        if args.threads == 0 || args.mmcmap_threads == 0 {
            bail!("thread counts must be positive");
        }
        let (kfs_sizes, kfs_trials) = kfs::sizes_and_trials(mode);
        let kfs_trials = args.trials.unwrap_or(kfs_trials);
        if kfs_trials == 0 {
            bail!("--trials must be positive");
        }
        let records = args.records.unwrap_or(records);
        let value_size = 1024;
        Ok(Config {
            mode: mode.into(),
            records,
            ops: match args.ops {
                Some(0) => bail!("--ops must be positive"),
                ops => ops,
            },
            value_size,
            threads: args.threads,
            many_threads: 32,
            sync: args.sync,
            mmcmap_sizes: sizes,
            mmcmap_mixed: mixed,
            mmcmap_threads: args.mmcmap_threads,
            interval_ms: args.interval_ms.unwrap_or(interval).max(1),
            disk_bytes: disk,
            disk_rand_span: disk.max(records.saturating_mul(halodb::KEY_SIZE + value_size as u64)),
            fsyncs,
            use_fio: !args.no_fio && !args.smoke,
            seed: args.seed,
            kfs_sizes,
            kfs_trials,
            cold: args.cold.then(|| measure::cold_method().to_string()),
            memory_max: args.memory_max,
            cache_bytes: None,
            disk_rand_reads: match mode {
                "smoke" => 400,
                "quick" => 20_000,
                _ => 200_000,
            },
        })
    }

    /// Bytes the disk suite's random reads span ([`Config::disk_rand_span`], at least
    /// `disk_bytes`).
    pub fn rand_span(&self) -> u64 {
        self.disk_rand_span.max(self.disk_bytes)
    }

    /// The block cache of engines that size one ([`Settings::cache_bytes`]): `cairn_heap`,
    /// cairn's peak heap in the same suite (its index and buffers), or, when cairn has
    /// not run, an estimate of them for the most keys any suite stores at once (64 bytes
    /// per key, about what `cairn stats` reports, plus 64 MiB); at most a quarter of
    /// `--memory-max` (the engine needs memory of its own beside its cache).
    fn block_cache(&self, cairn_heap: Option<u64>) -> u64 {
        let estimate = || {
            let largest = self.mmcmap_sizes.iter().copied().max().unwrap_or(0);
            self.records.max(largest) * 64 + (64 << 20)
        };
        let cache = cairn_heap.unwrap_or_else(estimate);
        self.memory_max.map_or(cache, |limit| cache.min(limit / 4))
    }

    /// An upper bound on the bytes of keys and values any suite stores at once.
    fn expected_bytes(&self) -> u64 {
        let halodb = self.records * (halodb::KEY_SIZE + self.value_size as u64);
        let largest = self.mmcmap_sizes.iter().copied().max().unwrap_or(0);
        let mmcmap = largest.max(self.mmcmap_mixed * 6 / 5) * 64;
        halodb.max(mmcmap)
    }
}

/// One workload suite: a file in this directory with a `static SUITE: SuiteDef`.
pub(crate) struct SuiteDef {
    /// Short name, as given to `--suites`.
    pub name: &'static str,
    /// Human name.
    pub title: &'static str,
    /// Whether it runs once per engine (else once, with no engine).
    pub per_engine: bool,
    /// How many progress steps it reports.
    pub steps: fn(&Config) -> u64,
    /// Runs it in a child process.
    pub run: fn(&Ctx<'_>) -> Result<Vec<Phase>>,
}

/// Every suite, in the order they run. A new suite is one file with a `SuiteDef` and one
/// line here.
fn suites() -> Vec<&'static SuiteDef> {
    vec![&disk::SUITE, &halodb::SUITE, &mmcmap::SUITE, &kfs::SUITE]
}

/// The subjects a per-engine suite runs on `engine`, each in a child of its own: `None`
/// is the engine as it is, a name is a variant of it (the KFS suite's `cairn-1shard`);
/// an empty list skips the engine.
fn subjects(suite: &SuiteDef, engine: &EngineSpec) -> Vec<Option<&'static str>> {
    if suite.name == kfs::SUITE.name {
        kfs::subjects(engine)
    } else {
        vec![None]
    }
}

/// What a suite runs with, in its child process.
pub(crate) struct Ctx<'a> {
    /// The engine under test (none for the disk suite).
    pub engine: Option<&'static EngineSpec>,
    /// The run's configuration.
    pub config: &'a Config,
    /// A directory of the suite's own, removed afterwards.
    pub dir: PathBuf,
    /// What engines are opened with.
    pub settings: Settings,
    /// The variant of the engine under test, when the suite runs several (see
    /// [`subjects`]); it names the run instead of the engine.
    pub variant: Option<String>,
    /// Raw per-trial figures a suite records for the report ([`SuiteRun::samples`]).
    pub samples: Mutex<Vec<Samples>>,
}

impl Ctx<'_> {
    /// Opens (creating) a store of the engine under test in `dir`.
    pub fn open(&self, dir: &Path) -> Result<Box<dyn Engine>> {
        let spec = self.engine.context("this suite has no engine")?;
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        (spec.open)(dir, &self.settings).with_context(|| format!("opening {}", spec.name))
    }

    /// Closes `db` and opens it again; returns it with the seconds the opening took.
    pub fn reopen(&self, db: Box<dyn Engine>, dir: &Path) -> Result<(Box<dyn Engine>, f64)> {
        db.close()?;
        // What the phase before wrote without a sync is written back now, untimed: the
        // kernel would otherwise write it back during the open and the read phases
        // after it (a fill of 40M records leaves gigabytes dirty, and random reads then
        // ran at a quarter of their rate, racing that writeback).
        measure::write_back(dir)?;
        let t = Instant::now();
        let db = self.open(dir)?;
        Ok((db, t.elapsed().as_secs_f64()))
    }

    /// Runs `groups` at once and measures them.
    pub fn run(&self, groups: &[Group<'_>]) -> Result<Vec<Phase>> {
        measure::run(
            groups,
            Duration::from_millis(self.config.interval_ms),
            self.config.seed,
        )
    }

    /// Tells the parent that one step is done.
    pub fn progress(&self, what: &str) {
        let _ = writeln!(io::stderr().lock(), "{PROGRESS}{what}");
    }

    /// Keeps `samples` for the report.
    pub fn record(&self, samples: Samples) {
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(samples);
    }
}

/// Prefix of a child's progress lines on stderr.
const PROGRESS: &str = "@bench-progress ";

/// What the parent tells a child to do.
#[derive(Debug, Serialize, Deserialize)]
struct ChildSpec {
    suite: String,
    engine: Option<String>,
    #[serde(default)]
    variant: Option<String>,
    config: Config,
    dir: PathBuf,
    result: PathBuf,
}

/// The results of one suite on one engine.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct SuiteRun {
    /// Suite name.
    pub suite: String,
    /// Engine name ("disk" for the disk suite).
    pub engine: String,
    /// Each test's figures.
    pub phases: Vec<Phase>,
    /// Wall time of the child, in seconds.
    pub wall_secs: f64,
    /// Peak resident memory of the child.
    pub peak_rss_bytes: Option<u64>,
    /// Bytes the child caused to be written, over the key and value bytes it wrote.
    pub total_write_amp: Option<f64>,
    /// Why the run failed, when it did.
    pub error: Option<String>,
    /// Raw per-trial figures of suites that repeat trials (the KFS suite).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<Samples>,
    /// The block cache the engine was given, for engines that size one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_bytes: Option<u64>,
}

/// One figure of every trial of a test, in trial order.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Samples {
    /// The test, as in [`measure::Phase::test`].
    pub test: String,
    /// The figure of each trial (seconds for a timed operation).
    pub values: Vec<f64>,
}

/// An engine as the report describes it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct EngineInfo {
    /// Short name.
    pub name: String,
    /// Library and version.
    pub library: String,
    /// Settings that differ from the engine's defaults.
    pub non_default_settings: Vec<(String, String)>,
}

/// The machine the run was made on.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Machine {
    /// Logical CPUs.
    pub cpus: usize,
    /// Memory, in bytes.
    pub memory_bytes: Option<u64>,
    /// Kernel release.
    pub kernel: Option<String>,
}

/// Everything `results.json` holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Report {
    /// The command line.
    pub command: String,
    /// Seconds since the epoch when the run started.
    pub started_unix: u64,
    /// The machine.
    pub machine: Machine,
    /// What was run.
    pub config: Config,
    /// The engines and their settings.
    pub engines: Vec<EngineInfo>,
    /// Which allocator the engines' code used (Rust and C), as the binary found at run
    /// time; `None` in results written before it was recorded.
    #[serde(default)]
    pub allocator: Option<String>,
    /// One entry per (suite, engine).
    pub runs: Vec<SuiteRun>,
}

/// The hidden subcommand of the `cairn` binary that runs one suite on one engine, in a
/// child process of [`run`]: `cairn __bench-child SPEC` must call [`child`]`(SPEC)`.
pub const CHILD_COMMAND: &str = "__bench-child";

/// `cairn bench`: runs the chosen suites on the chosen engines, each pair in a child
/// process (see [`CHILD_COMMAND`]), prints the results as Markdown and writes them to
/// `--out`; fails when a run did. `allocator` says which memory allocator the engines
/// get in this binary (the children are the same binary), for the report's header.
pub fn run(args: &BenchArgs, allocator: &str) -> Result<()> {
    // One message with its causes, so that an I/O cause is not taken for a failed write
    // to standard output by the caller.
    run_bench(args, allocator).map_err(|e| anyhow::anyhow!("bench: {e:#}"))
}

fn run_bench(args: &BenchArgs, allocator: &str) -> Result<()> {
    if args.render {
        let path = args.out.join("results.json");
        let report: Report = serde_json::from_slice(
            &fs::read(&path).with_context(|| format!("reading {}", path.display()))?,
        )
        .with_context(|| format!("parsing {}", path.display()))?;
        return finish(&report, &args.out);
    }
    let config = Config::from_args(args)?;
    let engines = select_engines(args)?;
    let suites = select_suites(args)?;
    let out = args.out.clone();
    let data = args.data.clone().unwrap_or_else(|| out.join("data"));
    let scratch = out.join(".children");
    fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;

    let cgroup = match config.memory_max {
        Some(limit) => {
            let cg = memlimit::MemoryCgroup::create(limit)?;
            eprintln!(
                "bench: every engine runs in the memory cgroup {} ({} MiB, page cache included)",
                cg.dir().display(),
                limit >> 20
            );
            Some(cg)
        }
        None => None,
    };
    let mut report = new_report(&config, &engines, allocator);
    let jobs = jobs(&config, &suites, &engines);
    let total: u64 = jobs.iter().map(|(s, _, _)| (s.steps)(&config)).sum();
    let bar = progress_bar(total)?;

    let results = out.join("results.json");
    for (suite, engine, variant) in jobs {
        // cairn's heap in the same suite: anonymous memory, not the file pages it maps.
        let cairn_heap = report
            .runs
            .iter()
            .find(|r| r.suite == suite.name && r.engine == "cairn" && r.error.is_none())
            .and_then(|r| {
                let anon = r.phases.iter().filter_map(|p| p.peak_anon_rss_bytes).max();
                anon.or(r.peak_rss_bytes)
            });
        let config = Config {
            cache_bytes: Some(config.block_cache(cairn_heap)),
            ..config.clone()
        };
        let run = children::run_child(
            suite,
            engine,
            variant,
            &config,
            (&data, &scratch),
            cgroup.as_ref(),
            &bar,
        )?;
        report.runs.push(run);
        write_json(&results, &report)?;
    }
    bar.finish_and_clear();
    let _ = fs::remove_dir_all(&scratch);
    if args.data.is_none() {
        let _ = fs::remove_dir(&data);
    }

    finish(&report, &out)
}

/// The report of a run of `config` on `engines`, with no run yet.
fn new_report(config: &Config, engines: &[&EngineSpec], allocator: &str) -> Report {
    let settings = engine_settings(config);
    Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        started_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        machine: machine(),
        config: config.clone(),
        engines: engines
            .iter()
            .map(|e| EngineInfo {
                name: e.name.into(),
                library: e.library.into(),
                non_default_settings: (e.non_default_settings)(&settings),
            })
            .collect(),
        allocator: Some(allocator.to_string()),
        runs: Vec::new(),
    }
}

/// A job of a run: a suite, the engine it runs on (none for the disk suite) and the
/// engine's variant, if any.
type Job<'a> = (&'a SuiteDef, Option<&'a EngineSpec>, Option<&'static str>);

/// Every (suite, engine, variant) to run, in order; an engine that makes no write
/// durable is left out of --sync.
fn jobs<'a>(config: &Config, suites: &[&'a SuiteDef], engines: &[&'a EngineSpec]) -> Vec<Job<'a>> {
    let mut jobs: Vec<Job<'a>> = Vec::new();
    for suite in suites {
        if !suite.per_engine {
            jobs.push((suite, None, None));
            continue;
        }
        for e in engines {
            if config.sync && !e.durable {
                eprintln!(
                    "bench: {} makes no write durable: left out of --sync",
                    e.name
                );
                continue;
            }
            let variants = subjects(suite, e);
            if variants.is_empty() {
                eprintln!("bench: the {} suite does not run on {}", suite.name, e.name);
            }
            jobs.extend(variants.into_iter().map(|v| (*suite, Some(*e), v)));
        }
    }
    jobs
}

/// A progress bar of `total` steps on a terminal, else a hidden one.
fn progress_bar(total: u64) -> Result<ProgressBar> {
    if !io::stderr().is_terminal() {
        return Ok(ProgressBar::hidden());
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {wide_msg}")
            .context("the progress bar's template")?
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    Ok(bar)
}

/// Writes results.md and the plots of `report` into `out`, prints the Markdown, and
/// fails when a run did.
fn finish(report: &Report, out: &Path) -> Result<()> {
    let markdown = table::markdown(report);
    fs::write(out.join("results.md"), &markdown)?;
    let plots = plot::all(report, &out.join("plots"))?;
    let mut stdout = io::stdout().lock();
    stdout.write_all(markdown.as_bytes())?;
    writeln!(
        stdout,
        "\nwrote {}, {} and {} plot(s) in {}",
        out.join("results.json").display(),
        out.join("results.md").display(),
        plots,
        out.join("plots").display()
    )?;
    stdout.flush()?;
    let failed: Vec<_> = report
        .runs
        .iter()
        .filter(|r| r.error.is_some())
        .map(|r| format!("{}/{}", r.suite, r.engine))
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        bail!("{} run(s) failed: {}", failed.len(), failed.join(", "))
    }
}

/// The settings every engine is opened with.
fn engine_settings(config: &Config) -> Settings {
    Settings {
        sync: config.sync,
        expected_bytes: config.expected_bytes(),
        threads: config
            .many_threads
            .max(config.mmcmap_threads)
            .max(config.threads)
            + 1,
        cache_bytes: config
            .cache_bytes
            .unwrap_or_else(|| config.block_cache(None)),
    }
}

fn select_engines(args: &BenchArgs) -> Result<Vec<&'static EngineSpec>> {
    let names: Vec<String> = match &args.engines {
        Some(names) => names.iter().map(|n| n.trim().to_lowercase()).collect(),
        None if args.smoke => vec!["cairn".into()],
        None => return Ok(engines::all()),
    };
    let mut chosen = Vec::new();
    for name in names.iter().filter(|n| !n.is_empty()) {
        match engines::find(name) {
            Some(spec) if !chosen.iter().any(|c: &&EngineSpec| c.name == spec.name) => {
                chosen.push(spec)
            }
            Some(_) => {}
            None if engines::PEER_NAMES.contains(&name.as_str()) => bail!(
                "engine {name} needs a build with the `peers` feature: \
                 scripts/install-bench-deps.sh && cargo run --release -p cairn-cli \
                 --features peers -- bench ..."
            ),
            None => bail!(
                "unknown engine {name}: known are cairn, {}",
                engines::PEER_NAMES.join(", ")
            ),
        }
    }
    if chosen.is_empty() {
        bail!("--engines names no engine");
    }
    // cairn first: it is what the others are compared with.
    chosen.sort_by_key(|e| e.name != "cairn");
    Ok(chosen)
}

fn select_suites(args: &BenchArgs) -> Result<Vec<&'static SuiteDef>> {
    let Some(names) = &args.suites else {
        return Ok(suites());
    };
    let known = suites();
    let mut chosen = Vec::new();
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        let Some(suite) = known.iter().find(|s| s.name == name) else {
            let names: Vec<_> = known.iter().map(|s| s.name).collect();
            bail!("unknown suite {name}: known are {}", names.join(", "));
        };
        if !chosen.iter().any(|c: &&SuiteDef| c.name == suite.name) {
            chosen.push(*suite);
        }
    }
    // Keep the canonical order (the disk first, so that its limits frame the rest).
    chosen.sort_by_key(|s| known.iter().position(|k| k.name == s.name));
    Ok(chosen)
}

/// `cairn __bench-child SPEC` ([`CHILD_COMMAND`]): runs one suite on one engine as the
/// JSON file `spec_path` written by [`run`] says, and writes its results where it says.
pub fn child(spec_path: &Path) -> Result<()> {
    children::run_child_process(spec_path).map_err(|e| anyhow::anyhow!("{e:#}"))
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let tmp = path.with_extension("json.tmp");
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn machine() -> Machine {
    let memory_bytes = fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|k| k * 1024)
    });
    Machine {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_bytes,
        kernel: fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .map(|s| s.trim().to_string()),
    }
}
