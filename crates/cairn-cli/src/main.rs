//! `cairn`: the command-line tool of the cairn storage engine.
//!
//! Each subcommand opens the store named by `--db`, does one thing and closes it again.
//! Errors are reported as one `cairn: <error>` line on stderr; the exit statuses are
//! listed in [`AFTER_HELP`].
//!
//! This crate is the binary only: argument parsing, printing and exit statuses, and the
//! commands on the store itself (`file`, `demo`). `mount`/`umount` are served by
//! `cairn_fuse`, `bench`/`fs-bench` by `cairn_bench`; both run children of this binary
//! (`cairn mount`, `cairn __bench-child`), see their crate documentation. `serve`,
//! `cluster` and `mount --cluster` use `cairn_cluster` (module `cluster`). It is the top
//! layer: it may use every cairn crate, and no crate may depend on it.

mod allocator;
mod backup;
mod cluster;
mod demo;
mod escape;
mod file;
mod mount;
mod replica;
mod report;

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, BufWriter, Read, StdoutLock, Write};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, CommandFactory, Parser, Subcommand};

use crate::escape::{escape, write_escaped};

/// Exit status for an invalid command line (`EX_USAGE` of sysexits.h).
const EXIT_USAGE: u8 = 64;
/// Exit status of `verify` when it found damage, and of `cluster check` when it found
/// a problem.
const EXIT_DAMAGE: u8 = 2;

/// Text shown after `--help`: exit statuses and conventions.
const AFTER_HELP: &str = "\
Exit status:
  0   success
  1   an error (one line `cairn: <error>` on stderr), including `get` of an absent key;
      `cluster status` found the cluster degraded
  2   `verify` found damage, `cluster check` found the cluster inconsistent, or
      `cluster status` found it down
  64  invalid command line

Keys and values given as arguments are used as raw bytes. Put `--` before a KEY or
VALUE that starts with '-'. Output that may hold arbitrary bytes (`scan`, messages)
shows them escaped: see `cairn help scan`.";

/// Long description of `scan`, including the escaping rules of its output.
const SCAN_ABOUT: &str = "\
Print entries in key order, one `KEY<TAB>VALUE` line each (or just KEY with --keys-only).

--start is inclusive and --end exclusive; with --prefix only keys that start with P are
shown, further limited by --start and --end when those are given too.

Keys and values are printed so that every entry is exactly one line: printable UTF-8
is shown as is; a backslash is shown as \\\\; tab, newline and carriage return as \\t, \\n
and \\r; any other control character and any byte that is not valid UTF-8 as \\xNN
(two hex digits). Use `cairn get KEY` for a value's exact bytes.";

/// The command line of `cairn`.
#[derive(Debug, Parser)]
#[command(
    name = "cairn",
    version,
    about = "Command-line tool for the cairn key-value store",
    after_help = AFTER_HELP
)]
struct Cli {
    /// Directory of the store
    #[arg(
        long,
        value_name = "DIR",
        env = "CAIRN_DB",
        hide_env_values = true,
        default_value = "./cairn-data",
        global = true
    )]
    db: PathBuf,

    /// What to do
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Store VALUE under KEY, replacing any previous value (creates the store if needed)
    Put {
        /// The key
        key: OsString,
        /// The value; `-` reads all of standard input as raw bytes
        value: OsString,
    },
    /// Write the value of KEY to stdout as raw bytes (no newline added)
    Get {
        /// The key
        key: OsString,
    },
    /// Delete KEY (deleting an absent key is not an error)
    #[command(visible_alias = "delete")]
    Del {
        /// The key
        key: OsString,
    },
    /// Print entries in key order, one per line
    #[command(long_about = SCAN_ABOUT)]
    Scan(ScanArgs),
    /// Show keys, live, reclaimable and on-disk bytes, amplification and index memory
    /// per shard and in total, then per keyspace and for the file store
    Stats {
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Rewrite segments to reclaim the space of overwritten and deleted entries
    Compact,
    /// Make all written data durable on disk
    Flush,
    /// Check every record's checksum; exit status 2 if anything is damaged
    Verify,
    /// Make a consistent copy of the store in a new directory while it is in use
    #[command(long_about = backup::CHECKPOINT_ABOUT)]
    Checkpoint(backup::CheckpointArgs),
    /// Back the store up (incrementally), or verify or restore a backup
    #[command(long_about = backup::BACKUP_ABOUT)]
    Backup(backup::BackupArgs),
    /// Store, read, list, verify and remove files (streamed, chunked, checksummed)
    #[command(long_about = file::ABOUT)]
    File(file::FileArgs),
    /// Run a self-checking workload and print timings and statistics
    #[command(long_about = demo::ABOUT)]
    Demo(demo::DemoArgs),
    /// Benchmark cairn and other engines with HaloDB's, mmcmap's and KFS's experiments (see --help)
    #[command(long_about = cairn_bench::ABOUT)]
    Bench(cairn_bench::BenchArgs),
    /// Mount the file system of store DIR, or of a cluster, on MOUNTPOINT through FUSE
    /// (in the background; -o options as mount(8) takes them)
    #[command(long_about = mount::ABOUT)]
    Mount(mount::MountArgs),
    /// Unmount a `cairn mount`
    Umount(UmountArgs),
    /// Link /sbin/mount.cairn to this program, so that `mount -t cairn` and fstab lines
    /// of type `cairn` work
    InstallMountHelper(mount::InstallHelperArgs),
    /// File-system metadata benchmark: N files in one directory (library, FUSE, plain)
    #[command(long_about = cairn_bench::fsbench::ABOUT)]
    FsBench(cairn_bench::fsbench::FsBenchArgs),
    /// Run one metadata server of a cluster (foreground; see --help)
    #[command(long_about = cluster::SERVE_ABOUT)]
    Serve(cluster::ServeArgs),
    /// A running cluster: `status` (servers, partitions, splits), `check` (consistency)
    #[command(long_about = cluster::CLUSTER_ABOUT)]
    Cluster(cluster::ClusterArgs),
    /// One suite on one engine, in a child process of `bench`
    #[command(name = cairn_bench::CHILD_COMMAND, hide = true)]
    BenchChild { spec: PathBuf },
    /// Concurrent creates into one directory on 1, 2, 4 ... metadata servers (processes)
    #[command(long_about = cairn_bench::cluster::ABOUT)]
    ClusterBench(cairn_bench::cluster::ClusterBenchArgs),
    /// Simulate 64 and 256 metadata servers in one process (virtual time) and project
    /// the aggregate create rate
    #[command(long_about = cairn_bench::clustersim::ABOUT)]
    ClusterSim(cairn_bench::clustersim::ClusterSimArgs),
    /// Replication: failover pauses, the cost of 3 replicas, an empty replica's catch-up
    #[command(long_about = cairn_bench::replbench::ABOUT)]
    ReplicationBench(cairn_bench::replbench::ReplBenchArgs),
    /// Checkpoints and backups of 1, 10 and 40 GiB stores while writers run
    #[command(long_about = cairn_bench::backupbench::ABOUT)]
    BackupBench(cairn_bench::backupbench::BackupBenchArgs),
    /// Snapshots and transactions: a live snapshot's cost, commits against batches,
    /// transfers per second against RocksDB's OptimisticTransactionDB
    #[command(long_about = cairn_bench::txbench::ABOUT)]
    TxBench(cairn_bench::txbench::TxBenchArgs),
    /// One client process of `cluster-bench`
    #[command(name = cairn_bench::cluster::CLIENT_COMMAND, hide = true)]
    ClusterBenchClient(cairn_bench::cluster::ClientArgs),
    /// The null FUSE server of `fs-bench --targets null`, in the foreground
    #[command(name = cairn_bench::fsbench::NULL_COMMAND, hide = true)]
    NullMount { mountpoint: PathBuf },
    /// One process of `fs-bench --procs`
    #[command(name = cairn_bench::fsprocs::WORKER_COMMAND, hide = true)]
    FsBenchWorker(cairn_bench::fsprocs::WorkerArgs),
}

/// Options of `scan`.
#[derive(Debug, Args)]
struct ScanArgs {
    /// Only keys that start with P
    #[arg(long, value_name = "P")]
    prefix: Option<OsString>,
    /// First key to show (inclusive)
    #[arg(long, value_name = "KEY")]
    start: Option<OsString>,
    /// Key to stop before (exclusive)
    #[arg(long, value_name = "KEY")]
    end: Option<OsString>,
    /// Show at most N entries
    #[arg(long, short = 'n', value_name = "N")]
    limit: Option<usize>,
    /// Go from the last key to the first
    #[arg(long, short = 'r')]
    reverse: bool,
    /// Print keys only
    #[arg(long, short = 'k')]
    keys_only: bool,
}

/// Arguments of `umount`.
#[derive(Debug, Args)]
struct UmountArgs {
    /// The mount point
    mountpoint: PathBuf,
}

/// Prints the library's warnings and errors (such as a torn tail cut off while opening)
/// on stderr as `cairn: warning: ...` lines.
struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            let level = match record.level() {
                log::Level::Error => "error",
                _ => "warning",
            };
            let _ = writeln!(io::stderr().lock(), "cairn: {level}: {}", record.args());
        }
    }

    fn flush(&self) {}
}

/// The logger installed by `main`.
static LOGGER: StderrLogger = StderrLogger;

fn main() -> ExitCode {
    allocator::no_transparent_huge_pages();
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
    let argv = match command_line() {
        Ok(Some(argv)) => argv,
        Ok(None) => return ExitCode::SUCCESS,
        Err(usage) => {
            let _ = writeln!(io::stderr().lock(), "{usage}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let cli = match Cli::try_parse_from(&argv).and_then(check_args) {
        Ok(cli) => cli,
        Err(err) => {
            // Help and version requests go to stdout and succeed; usage errors do not.
            let code = if err.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    match run(cli, &argv) {
        Ok(code) => code,
        // The reader went away (`cairn scan | head`): nothing left to do, not a failure.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            let line = error_line(&err);
            mount::notify_failure(&line);
            let _ = writeln!(io::stderr().lock(), "cairn: {line}");
            ExitCode::FAILURE
        }
    }
}

/// The command line as `cairn` takes it: this process's, or, when it runs as
/// `mount.cairn` (mount(8)'s helper), the `cairn mount` command line for that one.
/// `Ok(None)`: nothing to do; `Err`: a usage message.
fn command_line() -> Result<Option<Vec<OsString>>, String> {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let name = argv
        .first()
        .map(Path::new)
        .and_then(Path::file_name)
        .unwrap_or_default();
    if name == mount::HELPER_NAME {
        return mount::helper_argv(&argv);
    }
    Ok(Some(argv))
}

/// Whether this process runs as root (effective user id 0).
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Usage errors that clap's declarations can't express: `mount` takes DIR MOUNTPOINT,
/// or MOUNTPOINT alone with --cluster, and its -o options must be known ones.
fn check_args(mut cli: Cli) -> Result<Cli, clap::Error> {
    if let Command::Mount(m) = &mut cli.command {
        let usage = |msg: &str| {
            let mut cmd = Cli::command();
            let mount = cmd.find_subcommand_mut("mount").map(|c| c.clone());
            match mount {
                Some(mut c) => c.error(clap::error::ErrorKind::ValueValidation, msg),
                None => cmd.error(clap::error::ErrorKind::ValueValidation, msg),
            }
        };
        m.apply_options().map_err(|e| usage(&e))?;
        m.check().map_err(|e| usage(&e))?;
    }
    Ok(cli)
}

/// Runs one command and returns the exit status for success or a reported finding.
/// `argv`: the command line (for a background mount to start itself with).
fn run(cli: Cli, argv: &[OsString]) -> Result<ExitCode> {
    let dir = cli.db.as_path();
    match cli.command {
        Command::Put { key, value } => put(dir, &key, &value)?,
        Command::Get { key } => get(dir, &key)?,
        Command::Del { key } => del(dir, &key)?,
        Command::Scan(args) => scan(dir, &args)?,
        Command::Stats { json } => stats(dir, json)?,
        Command::Compact => compact(dir)?,
        Command::Flush => flush(dir)?,
        Command::Verify => return verify(dir),
        Command::Checkpoint(args) => backup::checkpoint(dir, &args)?,
        Command::Backup(args) => return backup::run(dir, &args),
        Command::File(args) => return file::run(dir, &args),
        Command::Demo(args) => return demo::run(dir, &args, &mut stdout()),
        Command::Bench(args) => cairn_bench::run(&args, &allocator::describe())?,
        Command::BenchChild { spec } => cairn_bench::child(&spec)?,
        Command::Mount(args) => return mount::run(&args, argv.get(1..).unwrap_or_default()),
        Command::Umount(args) => cairn_fuse::umount(&args.mountpoint)?,
        Command::InstallMountHelper(args) => mount::install_helper(&args)?,
        Command::FsBench(args) => cairn_bench::fsbench::run(
            &args,
            &allocator::describe(),
            allocator::huge_pages_while_dyn,
        )?,
        Command::Serve(args) => cluster::serve(&args)?,
        Command::Cluster(args) => return cluster::run(&args, &mut stdout()),
        Command::ClusterBench(args) => cairn_bench::cluster::run(&args)?,
        Command::ClusterSim(args) => cairn_bench::clustersim::run(&args)?,
        Command::ReplicationBench(args) => cairn_bench::replbench::run(&args)?,
        Command::BackupBench(args) => cairn_bench::backupbench::run(&args)?,
        Command::TxBench(args) => cairn_bench::txbench::run(&args)?,
        Command::ClusterBenchClient(args) => cairn_bench::cluster::client(&args)?,
        Command::FsBenchWorker(args) => cairn_bench::fsprocs::worker(&args)?,
        Command::NullMount { mountpoint } => {
            cairn_bench::fsbench::serve_null(&mountpoint, cairn_fuse::Transport::Auto)?
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `put KEY VALUE`.
fn put(dir: &Path, key: &OsStr, value: &OsStr) -> Result<()> {
    let value = if value == "-" {
        read_stdin_value()?
    } else {
        value.as_encoded_bytes().to_vec()
    };
    let db = open_or_create(dir)?;
    db.put(key.as_encoded_bytes(), &value)?;
    db.flush()?;
    db.close()?;
    Ok(())
}

/// Reads all of stdin, refusing more than [`cairn::MAX_VALUE_LEN`] bytes.
fn read_stdin_value() -> Result<Vec<u8>> {
    let limit = cairn::MAX_VALUE_LEN as u64;
    let mut value = Vec::new();
    io::stdin()
        .lock()
        .take(limit + 1)
        .read_to_end(&mut value)
        .context("reading the value from standard input")?;
    if value.len() as u64 > limit {
        bail!("value on standard input exceeds the limit of {limit} bytes");
    }
    Ok(value)
}

/// `get KEY`.
fn get(dir: &Path, key: &OsStr) -> Result<()> {
    let db = open_for_reading(dir)?;
    let key = key.as_encoded_bytes();
    let Some(value) = db.get(key)? else {
        bail!("key not found: {}", escape(key));
    };
    let mut out = stdout();
    out.write_all(&value)?;
    out.flush()?;
    db.close()?;
    Ok(())
}

/// `del KEY`.
fn del(dir: &Path, key: &OsStr) -> Result<()> {
    let db = open_existing(dir)?;
    db.delete(key.as_encoded_bytes())?;
    db.flush()?;
    db.close()?;
    Ok(())
}

/// `scan`.
fn scan(dir: &Path, args: &ScanArgs) -> Result<()> {
    let db = open_for_reading(dir)?;
    let mut out = stdout();
    let limit = args.limit.unwrap_or(usize::MAX);
    if let Some((lower, upper)) = scan_bounds(args) {
        let iter = db.range((lower, upper));
        if args.reverse {
            print_entries(&mut out, iter.rev().take(limit), args.keys_only)?;
        } else {
            print_entries(&mut out, iter.take(limit), args.keys_only)?;
        }
    }
    out.flush()?;
    db.close()?;
    Ok(())
}

/// A lower and an upper key bound, as `Db::range` takes them.
type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// Key bounds of a scan: the intersection of `--start`/`--end` with the keys that have
/// `--prefix`. `None` when that range is empty.
fn scan_bounds(args: &ScanArgs) -> Option<KeyRange> {
    let bytes = |s: &Option<OsString>| s.as_deref().map(|s| s.as_encoded_bytes().to_vec());
    let prefix = bytes(&args.prefix);
    // Both lower candidates are inclusive, so the larger one wins.
    let lower = bytes(&args.start).max(prefix.clone());
    // Both upper candidates are exclusive (None = unbounded), so the smaller one wins.
    let upper = match (bytes(&args.end), prefix.and_then(|p| prefix_end(&p))) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if let (Some(lo), Some(hi)) = (&lower, &upper) {
        if lo >= hi {
            return None;
        }
    }
    Some((
        lower.map_or(Bound::Unbounded, Bound::Included),
        upper.map_or(Bound::Unbounded, Bound::Excluded),
    ))
}

/// The smallest key greater than every key that starts with `prefix`, or `None` when
/// there is none (the prefix is empty or all `0xff`).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Prints scan entries as escaped `key<TAB>value` lines (or just keys).
fn print_entries(
    out: &mut impl Write,
    entries: impl Iterator<Item = cairn::Result<(Vec<u8>, cairn::Value)>>,
    keys_only: bool,
) -> Result<()> {
    for entry in entries {
        let (key, value) = entry?;
        write_escaped(out, &key)?;
        if !keys_only {
            out.write_all(b"\t")?;
            write_escaped(out, &value)?;
        }
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// `stats [--json]`.
fn stats(dir: &Path, json: bool) -> Result<()> {
    let db = open_for_reading(dir)?;
    let stats = db.stats();
    let files = cairn_files::FileStore::new(&db)?.stats()?;
    let mut out = stdout();
    if json {
        /// The store's figures with the file store's beside them.
        #[derive(serde::Serialize)]
        struct All<'a> {
            #[serde(flatten)]
            store: &'a cairn::Stats,
            files: cairn_files::FileStats,
        }
        let all = All {
            store: &stats,
            files,
        };
        serde_json::to_writer_pretty(&mut out, &all).map_err(io::Error::from)?;
        out.write_all(b"\n")?;
    } else {
        report::write_stats_table(&mut out, &stats)?;
        writeln!(out)?;
        report::write_space_table(&mut out, &stats, &files)?;
    }
    out.flush()?;
    db.close()?;
    Ok(())
}

/// `compact`: compacts and prints the disk usage before and after.
fn compact(dir: &Path) -> Result<()> {
    let db = open_existing(dir)?;
    let before = db.stats().total.disk_bytes;
    db.compact()?;
    let after = db.stats().total;
    let mut out = stdout();
    writeln!(
        out,
        "compacted: disk {} -> {} ({} keys, {} live)",
        report::human_bytes(before),
        report::human_bytes(after.disk_bytes),
        after.keys,
        report::human_bytes(after.live_bytes),
    )?;
    out.flush()?;
    db.close()?;
    Ok(())
}

/// `flush`.
fn flush(dir: &Path) -> Result<()> {
    let db = open_existing(dir)?;
    db.flush()?;
    db.close()?;
    Ok(())
}

/// `verify`: prints each damaged place and a summary; exit status 2 on damage.
fn verify(dir: &Path) -> Result<ExitCode> {
    let mut out = stdout();
    let report = match open_for_reading_raw(dir)? {
        Ok(db) => {
            let mut report = db.verify()?;
            // Damage skipped while opening may since have been repaired (a torn tail is
            // cut off), so it is reported too, with what sealing found meanwhile; a
            // place both found is reported once, with the opening's (or sealing's) more
            // telling description.
            let opened = db.damage();
            report.damage.retain(|d| {
                !opened
                    .iter()
                    .any(|o| o.path == d.path && o.offset == d.offset)
            });
            report.damage.splice(0..0, opened);
            db.close()?;
            report
        }
        // Damage severe enough to stop the store from opening is still a finding.
        Err(cairn::Error::Corruption { path, detail }) => cairn::VerifyReport {
            files_checked: 0,
            records_checked: 0,
            damage: vec![cairn::Damage {
                path,
                offset: None,
                detail: format!("{detail} (the store cannot be opened)"),
            }],
        },
        Err(err) => return Err(err.into()),
    };
    for damage in &report.damage {
        report::write_damage(&mut out, damage)?;
    }
    let verdict = if report.is_clean() {
        "no damage found".to_string()
    } else {
        format!("{} damaged place(s) found", report.damage.len())
    };
    writeln!(
        out,
        "verified {} files, {} records: {verdict}",
        report.files_checked, report.records_checked
    )?;
    out.flush()?;
    Ok(if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_DAMAGE)
    })
}

/// Opens the store in `dir`, creating it if needed.
///
/// A directory that holds other files is refused here already, so that not even the
/// store's lock file is left behind in it.
fn open_or_create(dir: &Path) -> Result<cairn::Db> {
    if dir.is_dir() && !dir.join(MANIFEST).exists() {
        let foreign = fs::read_dir(dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .filter_map(Result::ok)
            .any(|entry| entry.file_name() != "LOCK" && entry.file_name() != "shards");
        if foreign {
            bail!(
                "{} is not empty and holds no cairn store (no {MANIFEST} manifest); \
                 choose a new or empty directory",
                dir.display()
            );
        }
    }
    Ok(open_store(dir)?)
}

/// Opens (creating if needed) the store in `dir` as the binary's commands do: with
/// transparent huge pages on while it opens ([`allocator::huge_pages_while`]).
fn open_store(dir: &Path) -> cairn::Result<cairn::Db> {
    allocator::huge_pages_while(|| cairn::Db::open(dir))
}

/// Name of the manifest file that every cairn store has in its directory.
const MANIFEST: &str = "CAIRN";

/// Opens the store in `dir`, but refuses to create one where there is none, so that a
/// mistyped `--db` for a reading command is reported rather than silently made.
fn open_existing(dir: &Path) -> Result<cairn::Db> {
    Ok(open_existing_raw(dir)??)
}

/// Like [`open_existing`], but keeps the library's error apart from the check that a
/// store exists, so that callers can look at it.
fn open_existing_raw(dir: &Path) -> Result<cairn::Result<cairn::Db>> {
    if !dir.exists() {
        bail!(
            "no store at {}: the directory does not exist (`put` creates a store; set --db or CAIRN_DB)",
            dir.display()
        );
    }
    if !dir.join(MANIFEST).exists() {
        bail!(
            "no store at {}: it has no {MANIFEST} manifest, so it is not a cairn store",
            dir.display()
        );
    }
    Ok(open_store(dir))
}

/// Opens the store in `dir` for a command that only reads: as [`open_existing`]
/// does, or, when another process holds it open (`cairn mount`, `cairn serve`, a
/// program writing it), read-only (`cairn::Options::read_only`): a snapshot of what
/// that process has written to its files as of now, which the command says on
/// standard error.
fn open_for_reading(dir: &Path) -> Result<cairn::Db> {
    Ok(open_for_reading_raw(dir)??)
}

/// Like [`open_for_reading`], but keeps the library's error apart from the check that
/// a store exists, so that callers can look at it.
fn open_for_reading_raw(dir: &Path) -> Result<cairn::Result<cairn::Db>> {
    Ok(match open_existing_raw(dir)? {
        Err(cairn::Error::Locked(_)) => {
            eprintln!(
                "cairn: the store at {} is in use by another process; reading a snapshot as of now",
                dir.display()
            );
            allocator::huge_pages_while(|| cairn::Options::new().read_only().open(dir))
        }
        other => other,
    })
}

/// Buffered standard output.
fn stdout() -> BufWriter<StdoutLock<'static>> {
    BufWriter::with_capacity(64 << 10, io::stdout().lock())
}

/// Whether `err` is a failed write to a reader that has gone away.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.downcast_ref::<io::Error>()
        .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
}

/// One line describing `err` and its causes, skipping causes that the text already
/// includes (cairn's errors quote their I/O cause themselves).
fn error_line(err: &anyhow::Error) -> String {
    // Every other I/O error gets context where it happens, so a bare one (the outermost
    // error itself, not one under a context: `err.is` would match both) comes from
    // writing the output.
    let mut line = if err.chain().next().is_some_and(|e| e.is::<io::Error>()) {
        format!("writing to standard output: {err}")
    } else {
        err.to_string()
    };
    for cause in err.chain().skip(1) {
        let cause = cause.to_string();
        if !line.contains(&cause) {
            line.push_str(": ");
            line.push_str(&cause);
        }
    }
    line.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(prefix: Option<&str>, start: Option<&str>, end: Option<&str>) -> ScanArgs {
        ScanArgs {
            prefix: prefix.map(OsString::from),
            start: start.map(OsString::from),
            end: end.map(OsString::from),
            limit: None,
            reverse: false,
            keys_only: false,
        }
    }

    fn inc(s: &str) -> Bound<Vec<u8>> {
        Bound::Included(s.as_bytes().to_vec())
    }

    fn exc(s: &str) -> Bound<Vec<u8>> {
        Bound::Excluded(s.as_bytes().to_vec())
    }

    #[test]
    fn prefix_end_increments_last_byte() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }

    #[test]
    fn bounds_intersect_prefix_and_range() {
        let all = (Bound::Unbounded, Bound::Unbounded);
        assert_eq!(scan_bounds(&args(None, None, None)), Some(all));
        assert_eq!(
            scan_bounds(&args(Some("b"), None, None)),
            Some((inc("b"), exc("c")))
        );
        assert_eq!(
            scan_bounds(&args(Some("b"), Some("b5"), Some("z"))),
            Some((inc("b5"), exc("c")))
        );
        assert_eq!(
            scan_bounds(&args(Some("b"), Some("a"), Some("b5"))),
            Some((inc("b"), exc("b5")))
        );
        assert_eq!(scan_bounds(&args(Some("b"), Some("c"), None)), None);
        assert_eq!(scan_bounds(&args(None, Some("x"), Some("x"))), None);
        assert_eq!(scan_bounds(&args(None, Some("y"), Some("x"))), None);
    }
}
