//! The KFS suite's part of the report: a table per operation of file sizes × subjects
//! with Welch's t-tests against cairn, the stores' sizes on disk, and its targets.

use std::fmt::Write as _;

use super::{bytes, duration, p_value, ratio, seconds};
use crate::kfs::{self, samples, size_label, summarize, test_name, welch_p, Summary};
use crate::{Report, SuiteRun};

/// The KFS suite: per operation, a table of file sizes × subjects; then the store's size.
pub(super) fn kfs_section(
    md: &mut String,
    report: &Report,
    runs: &[&SuiteRun],
    disk_write: Option<f64>,
) {
    let cfg = &report.config;
    kfs_intro(md, report);
    let cairn = runs
        .iter()
        .copied()
        .find(|r| r.engine == "cairn" && r.error.is_none());
    for op in kfs::FIGURES {
        let ran = |r: &&SuiteRun| {
            cfg.kfs_sizes
                .iter()
                .any(|s| samples(r, &test_name(op, *s)).is_some_and(|v| !v.is_empty()))
        };
        if !runs.iter().any(ran) {
            continue;
        }
        let with_disk = op == kfs::DURABLE_WRITE && cairn.is_some();
        kfs_figure(
            md,
            report,
            runs,
            op,
            cairn,
            disk_write.filter(|_| with_disk),
        );
    }
    kfs_store_table(md, report, runs);
}

/// What the KFS suite does, and how durable its writes are.
fn kfs_intro(md: &mut String, report: &Report) {
    let cfg = &report.config;
    let _ = writeln!(
        md,
        "Each trial writes one file of every size (128 KiB chunks of random bytes), then reads \
         them all back, then unlinks them all, one operation at a time; {} trials on one store \
         per subject. A cell is the mean ± standard deviation of one operation's time over the \
         trials and the MB/s of that mean; for the others also their mean time over cairn's \
         (above 1× cairn is faster) and the two-sided p-value of Welch's t-test against cairn. \
         cairn-1shard is cairn with one shard. RocksDB and LevelDB hold each chunk as a row \
         keyed by file id ‖ chunk index (big-endian): a put per chunk, a get per chunk until \
         the first missing one, an unlink is one batch of deletes. Durability: {}. \
         Each write is also timed until the store has made it durable (*durable write*: \
         the write, then cairn's `Db::flush`, RocksDB's write-ahead log synced, LevelDB an \
         empty synced batch); only those times are compared with the disk's bandwidth, \
         which the disk suite measures with direct I/O.\n",
        cfg.kfs_trials,
        if cfg.sync {
            "each file durable at its end (cairn: SyncPolicy::Always, its commit syncs; \
             the others: puts without sync, then a sync: RocksDB syncs its write-ahead log, \
             LevelDB writes an empty synced batch)"
        } else {
            "none asked for (cairn: SyncPolicy::Never; the others: puts without sync), so \
             a *write* is timed until the data is in the page cache"
        }
    );
}

/// One operation of the KFS suite: a row per file size, a column per subject, and with
/// `disk_write` (the disk's sequential write bandwidth, for durable writes) cairn's share
/// of it.
fn kfs_figure(
    md: &mut String,
    report: &Report,
    runs: &[&SuiteRun],
    op: &str,
    cairn: Option<&SuiteRun>,
    disk_write: Option<f64>,
) {
    let cfg = &report.config;
    let _ = writeln!(md, "### {}\n", kfs::figure_heading(op, cfg.sync));
    if op == kfs::COLD_READ {
        let how = match cfg.cold.as_deref() {
            Some("drop_caches") => "`echo 3 > /proc/sys/vm/drop_caches` (as root)",
            _ => "the store's files evicted with `posix_fadvise(DONTNEED)` (not root)",
        };
        let _ = writeln!(md, "Page cache dropped before each read: {how}.\n");
    }
    let with_disk = disk_write.is_some();
    let names: Vec<&str> = runs.iter().map(|r| r.engine.as_str()).collect();
    let _ = writeln!(
        md,
        "| file size | {} |{}",
        names.join(" | "),
        if with_disk {
            " cairn, % of disk write bandwidth |"
        } else {
            ""
        }
    );
    let _ = writeln!(
        md,
        "|---|{}{}",
        "---:|".repeat(names.len()),
        if with_disk { "---:|" } else { "" }
    );
    for &size in &cfg.kfs_sizes {
        let test = test_name(op, size);
        let base = cairn.and_then(|c| samples(c, &test));
        let mut row = format!("| {} |", size_label(size));
        for run in runs {
            let _ = write!(row, " {} |", kfs_cell(run, op, size, base));
        }
        if let Some(bw) = disk_write {
            let pct = match base.and_then(summarize) {
                Some(s) if s.mean > 0.0 && bw > 0.0 => {
                    format!("{:.0}%", 100.0 * size as f64 / s.mean / 1e6 / bw)
                }
                _ => "–".into(),
            };
            let _ = write!(row, " {pct} |");
        }
        let _ = writeln!(md, "{row}");
    }
    md.push('\n');
}

/// `run`'s time for operation `op` on files of `size`: mean ± standard deviation, MB/s,
/// and for a peer its ratio to cairn's (`base`, cairn's samples) with Welch's p-value.
fn kfs_cell(run: &SuiteRun, op: &str, size: u64, base: Option<&[f64]>) -> String {
    let values = samples(run, &test_name(op, size));
    let s = match (&run.error, values.and_then(summarize)) {
        (Some(_), _) => return "failed".to_string(),
        (None, None) => return "–".to_string(),
        (None, Some(s)) => s,
    };
    let mut cell = duration(s.mean, s.sd);
    // An unlink moves no data: its MB/s would mean nothing.
    if op != "unlink" {
        let mbps = size as f64 / s.mean.max(1e-12) / 1e6;
        let _ = write!(cell, ", {mbps:.0} MB/s");
    }
    if run.engine != "cairn" {
        if let (Some(b), Some(v)) = (base, values) {
            if let Some(c) = summarize(b).filter(|c| c.mean > 0.0) {
                let _ = write!(
                    cell,
                    "; {}, {}",
                    ratio(s.mean / c.mean),
                    p_value(welch_p(b, v))
                );
            }
        }
    }
    cell
}

/// The KFS stores' bytes on disk after the trials' unlinks and once closed.
fn kfs_store_table(md: &mut String, report: &Report, runs: &[&SuiteRun]) {
    let trial: u64 = report.config.kfs_sizes.iter().sum();
    let _ = writeln!(
        md,
        "### Store on disk\n\nBytes the store took on disk (allocated blocks, as `du` counts) \
         right after each trial's unlinks, with no pause (cairn reclaims removed files in \
         the background, the others by compaction), and once the store was closed after \
         the last trial. A trial writes {} of files.\n",
        bytes(trial)
    );
    let _ = writeln!(
        md,
        "| subject | after trial 1 | after the last trial | most | closed |\n|---|---:|---:|---:|---:|"
    );
    for run in runs {
        let Some(v) = samples(run, kfs::STORE_BYTES).filter(|v| !v.is_empty()) else {
            continue;
        };
        let most = v.iter().copied().fold(0.0, f64::max);
        let closed = samples(run, kfs::STORE_BYTES_CLOSED)
            .and_then(|c| c.first())
            .map_or("–".to_string(), |c| bytes(*c as u64));
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {closed} |",
            run.engine,
            bytes(v[0] as u64),
            bytes(v[v.len() - 1] as u64),
            bytes(most as u64)
        );
    }
    md.push('\n');
}

/// The store-size target of the KFS suite: cairn's store right after the last trial's
/// unlinks at most RocksDB's (when RocksDB ran) and at most [`kfs::STORE_TARGET`] times
/// the bytes a trial writes.
pub(super) fn kfs_store_target(report: &Report, out: &mut Vec<(String, String, bool)>) {
    let last = |engine: &str| {
        report
            .runs
            .iter()
            .find(|r| r.suite == kfs::SUITE.name && r.engine == engine && r.error.is_none())
            .and_then(|r| samples(r, kfs::STORE_BYTES))
            .and_then(|v| v.last().copied())
    };
    let Some(cairn) = last("cairn") else {
        return;
    };
    let trial = report.config.kfs_sizes.iter().sum::<u64>() as f64;
    let rocksdb = last("rocksdb");
    let mut measured = format!(
        "cairn {}, {:.2}× a trial's {}",
        bytes(cairn as u64),
        cairn / trial.max(1.0),
        bytes(trial as u64)
    );
    let mut met = cairn <= kfs::STORE_TARGET * trial;
    let mut target = format!(
        "KFS store after the last trial's unlinks: cairn ≤ {}× a trial's data",
        kfs::STORE_TARGET
    );
    if let Some(r) = rocksdb {
        target.push_str(" and ≤ RocksDB's");
        measured.push_str(&format!("; RocksDB {}", bytes(r as u64)));
        met &= cairn <= r;
    }
    out.push((target, measured, met));
}

/// The KFS suite's targets: cairn's mean and standard deviation below every other
/// subject's at every size of each operation with p < 0.05, and its largest durable
/// writes at 70% of the disk's sequential write bandwidth or more.
pub(super) fn kfs_targets(report: &Report, out: &mut Vec<(String, String, bool)>) {
    let kfs_runs = || {
        report
            .runs
            .iter()
            .filter(|r| r.suite == kfs::SUITE.name && r.error.is_none())
    };
    let Some(cairn) = kfs_runs().find(|r| r.engine == "cairn") else {
        return;
    };
    let sizes = &report.config.kfs_sizes;
    for other in kfs_runs().filter(|r| r.engine != "cairn") {
        for op in kfs::FIGURES {
            let (mut met, mut total, mut misses) = (0, 0, Vec::new());
            for &size in sizes {
                let test = test_name(op, size);
                let (Some(a), Some(b)) = (samples(cairn, &test), samples(other, &test)) else {
                    continue;
                };
                let (Some(sa), Some(sb)) = (summarize(a), summarize(b)) else {
                    continue;
                };
                total += 1;
                let why = kfs_misses(sa, sb, welch_p(a, b));
                if why.is_empty() {
                    met += 1;
                } else {
                    misses.push(format!("{} ({})", size_label(size), why.join(", ")));
                }
            }
            if total > 0 {
                let measured = if misses.is_empty() {
                    format!("{met}/{total} sizes")
                } else {
                    format!("{met}/{total} sizes; missed: {}", misses.join("; "))
                };
                out.push((
                    format!(
                        "KFS {}: cairn's mean and stddev below {}'s at every size, p < 0.05",
                        op.replace('_', " "),
                        other.engine
                    ),
                    measured,
                    misses.is_empty(),
                ));
            }
        }
    }
    let disk = report
        .runs
        .iter()
        .find(|r| r.suite == "disk" && r.error.is_none())
        .and_then(|d| d.phases.iter().find(|p| p.test == "seq_write"))
        .map(|p| p.mb_per_sec)
        .filter(|bw| *bw > 0.0);
    if let (Some(&largest), Some(bw)) = (sizes.iter().max(), disk) {
        let test = test_name(kfs::DURABLE_WRITE, largest);
        if let Some(s) = samples(cairn, &test)
            .and_then(summarize)
            .filter(|s| s.mean > 0.0)
        {
            let mbps = largest as f64 / s.mean / 1e6;
            out.push((
                format!(
                    "KFS {} durable writes: cairn ≥ 70% of the disk's sequential write \
                     bandwidth",
                    size_label(largest)
                ),
                format!("{:.0}% ({mbps:.0} of {bw:.0} MB/s)", 100.0 * mbps / bw),
                mbps >= 0.7 * bw,
            ));
        }
    }
}

/// Why cairn (`c`) does not beat another subject (`o`) at one size: empty when its mean
/// and standard deviation are both lower and the difference is significant.
fn kfs_misses(c: Summary, o: Summary, p: Option<f64>) -> Vec<String> {
    let mut why = Vec::new();
    if c.mean >= o.mean {
        why.push(format!("mean {} vs {}", seconds(c.mean), seconds(o.mean)));
    }
    if c.sd >= o.sd {
        why.push(format!("stddev {} vs {}", seconds(c.sd), seconds(o.sd)));
    }
    match p {
        Some(p) if p < 0.05 => {}
        p => why.push(p_value(p)),
    }
    why
}
