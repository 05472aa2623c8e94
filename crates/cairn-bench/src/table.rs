//! The Markdown report: engines and settings, the disk's limits, a throughput table per
//! suite with each peer's ratio to cairn, details per test (for the KFS suite: mean ±
//! standard deviation per operation and size, with Welch's t-test against cairn), and
//! the targets cairn is held to.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::kfs::{self, size_label};
use super::measure::{Kind, Phase};
use super::{Report, SuiteRun};

mod kfs_tables;

use kfs_tables::{kfs_section, kfs_store_target, kfs_targets};

/// The whole report as Markdown.
pub fn markdown(report: &Report) -> String {
    let mut md = String::new();
    header(&mut md, report);
    engines_table(&mut md, report);
    let disk = report.runs.iter().find(|r| r.suite == "disk");
    if let Some(disk) = disk {
        disk_table(&mut md, disk);
    }
    for suite in suite_names(report) {
        let runs: Vec<&SuiteRun> = report.runs.iter().filter(|r| r.suite == suite).collect();
        let _ = writeln!(md, "## {}\n", suite_title(&suite, report));
        if suite == kfs::SUITE.name {
            kfs_section(
                &mut md,
                report,
                &runs,
                disk_bandwidth(disk, Some(Kind::Write)),
            );
            runs_table(&mut md, &runs);
            continue;
        }
        throughput_table(&mut md, &runs);
        if suite == "halodb" {
            if let Some(disk) = disk {
                reads_against_disk(&mut md, &runs, disk);
            }
        }
        runs_table(&mut md, &runs);
        details_table(&mut md, report, &runs, disk);
    }
    targets_table(&mut md, report);
    md
}

/// The command, the machine, the memory limit, the allocator.
fn header(md: &mut String, report: &Report) {
    let cfg = &report.config;
    let _ = writeln!(md, "# cairn bench results\n");
    let _ = writeln!(md, "Command: `{}`  ", report.command);
    let _ = writeln!(
        md,
        "Mode: {}; machine: {} CPUs, {} memory, Linux {}; durability: {}; compression off.  ",
        cfg.mode,
        report.machine.cpus,
        report.machine.memory_bytes.map_or("?".into(), bytes),
        report.machine.kernel.as_deref().unwrap_or("?"),
        durability(report)
    );
    if let Some(limit) = cfg.memory_max {
        let _ = writeln!(
            md,
            "Memory: every engine's process ran in a memory cgroup limited to {} (page \
             cache included, `--memory-max`); the HaloDB suite's store holds {} of keys and \
             values.  ",
            bytes(limit),
            bytes(cfg.records * (super::halodb::KEY_SIZE + cfg.value_size as u64))
        );
    }
    let _ = writeln!(
        md,
        "Allocator: {}. (RocksDB's documentation recommends jemalloc; no engine has it \
         here.)\n",
        report
            .allocator
            .as_deref()
            .unwrap_or("not recorded (results written before the allocator was)")
    );
}

/// Each engine, its library and the settings it runs with that differ from its defaults.
fn engines_table(md: &mut String, report: &Report) {
    let _ = writeln!(md, "## Engines\n");
    let _ = writeln!(
        md,
        "| engine | library | settings that differ from its defaults |"
    );
    let _ = writeln!(md, "|---|---|---|");
    for e in &report.engines {
        let settings = if e.non_default_settings.is_empty() {
            "none".to_string()
        } else {
            e.non_default_settings
                .iter()
                .map(|(k, v)| format!("{k} = {v}"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let _ = writeln!(md, "| {} | {} | {} |", e.name, e.library, settings);
    }
    md.push('\n');
}

/// The disk suite: the disk's own bandwidth, operations and latencies.
fn disk_table(md: &mut String, disk: &SuiteRun) {
    let _ = writeln!(md, "## The disk's own limits\n");
    if let Some(err) = &disk.error {
        let _ = writeln!(md, "failed: {err}\n");
        return;
    }
    let _ = writeln!(
        md,
        "| measurement | MB/s | ops/s | p50 | p99 | p99.9 | max |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|");
    for p in &disk.phases {
        let _ = writeln!(
            md,
            "| {} | {:.0} | {} | {} | {} | {} | {} |",
            p.title,
            p.mb_per_sec,
            count(p.ops_per_sec),
            latency(p.latency.p50_ns),
            latency(p.latency.p99_ns),
            latency(p.latency.p999_ns),
            latency(p.latency.max_ns)
        );
    }
    md.push('\n');
}

/// The disk's sequential bandwidth, MB/s, in the direction of a phase of `kind`.
fn disk_bandwidth(disk: Option<&SuiteRun>, kind: Option<Kind>) -> Option<f64> {
    let test = match kind? {
        Kind::Write => "seq_write",
        Kind::Read => "seq_read",
    };
    disk?
        .phases
        .iter()
        .find(|p| p.test == test)
        .map(|p| p.mb_per_sec)
}

/// A suite's operations per second, a column per engine, with cairn's ratio to each peer.
fn throughput_table(md: &mut String, runs: &[&SuiteRun]) {
    let engines: Vec<&str> = runs.iter().map(|r| r.engine.as_str()).collect();
    let cairn = runs
        .iter()
        .copied()
        .find(|r| r.engine == "cairn" && r.error.is_none());
    let _ = writeln!(
        md,
        "Throughput in operations per second{}.\n",
        if cairn.is_some() && engines.len() > 1 {
            "; in brackets, cairn's throughput divided by the peer's (above 1× cairn is faster)"
        } else {
            ""
        }
    );
    let _ = writeln!(md, "| test | {} |", engines.join(" | "));
    let _ = writeln!(md, "|---|{}", "---:|".repeat(engines.len()));
    for (test, title) in tests_of(runs) {
        let mut row = format!("| {title} |");
        for run in runs {
            let _ = write!(row, " {} |", throughput_cell(run, cairn, &test));
        }
        let _ = writeln!(md, "{row}");
    }
    md.push('\n');
}

/// `run`'s operations per second in `test`, and cairn's ratio to them for a peer.
fn throughput_cell(run: &SuiteRun, cairn: Option<&SuiteRun>, test: &str) -> String {
    match (&run.error, find(run, test)) {
        (Some(_), _) => "failed".to_string(),
        (None, None) => "–".to_string(),
        (None, Some(p)) => {
            let mut cell = count(p.ops_per_sec);
            if run.engine != "cairn" {
                if let Some(c) = cairn
                    .and_then(|c| find(c, test))
                    .filter(|_| p.ops_per_sec > 0.0)
                {
                    let _ = write!(cell, " ({})", ratio(c.ops_per_sec / p.ops_per_sec));
                }
            }
            cell
        }
    }
}

/// Every figure of every test of a suite, a row per engine.
fn details_table(md: &mut String, report: &Report, runs: &[&SuiteRun], disk: Option<&SuiteRun>) {
    let _ = writeln!(md, "### Details\n");
    let _ = writeln!(
        md,
        "Latencies are of single operations (HDR histogram). \"slowest interval\" is the lowest \
         throughput of one interval of {} ms over the median one (compaction stalls show here); \
         \"% of disk\" compares MB/s of keys and values with the disk's sequential bandwidth \
         (without --sync a write's MB/s is to the page cache, not to the disk); \"flush \
         after\" is the time the flush after a write phase took, which the phase's own \
         figures leave out; \"peak RSS\" (VmHWM) includes file pages the engine maps (LMDB, \
         cairn's sealed segments), \"peak anon RSS\" is the heap alone, sampled once per \
         interval; \"writes per fsync\" (durable fills of --sync) is the fill's writes over \
         the fsync and fdatasync calls of the engine's process meanwhile, counted by the \
         kernel's syscall tracepoints (– where they cannot be counted: not root).\n",
        report.config.interval_ms
    );
    let _ = writeln!(
        md,
        "| test | engine | ops/s | MB/s | % of disk | p50 | p99 | p99.9 | max | slowest interval | flush after | write amp | space amp | peak RSS | peak anon RSS | reopen | writes per fsync |"
    );
    let _ = writeln!(md, "|---|---|{}", "---:|".repeat(15));
    for (test, title) in tests_of(runs) {
        for run in runs {
            let Some(p) = find(run, &test) else { continue };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                title,
                run.engine,
                count(p.ops_per_sec),
                p.mb_per_sec,
                disk_bandwidth(disk, p.kind).map_or("–".into(), |bw| format!(
                    "{:.0}%",
                    100.0 * p.mb_per_sec / bw
                )),
                latency(p.latency.p50_ns),
                latency(p.latency.p99_ns),
                latency(p.latency.p999_ns),
                latency(p.latency.max_ns),
                steadiness(p),
                p.flush_secs.map_or("–".into(), seconds),
                p.write_amp.map_or("–".into(), |a| format!("{a:.2}")),
                p.space_amp.map_or("–".into(), |a| format!("{a:.2}")),
                p.peak_rss_bytes.map_or("–".into(), bytes),
                p.peak_anon_rss_bytes.map_or("–".into(), bytes),
                p.reopen_secs.map_or("–".into(), |s| format!("{:.3} s", s)),
                p.writes_per_sync.map_or("–".into(), |w| format!("{w:.2}")),
            );
        }
    }
    md.push('\n');
}

/// The targets this run can judge, and whether each is met.
fn targets_table(md: &mut String, report: &Report) {
    let targets = targets(report);
    if targets.is_empty() {
        return;
    }
    let _ = writeln!(md, "## Targets\n");
    let _ = writeln!(md, "| target | measured | met |\n|---|---:|---|");
    for (what, value, met) in targets {
        let _ = writeln!(
            md,
            "| {what} | {value} | {} |",
            if met { "yes" } else { "**no**" }
        );
    }
    md.push('\n');
}

/// The durability of the run's writes, with the engines whose settings make an exception.
fn durability(report: &Report) -> String {
    if report.config.sync {
        return "every write durable before it returns (--sync)".into();
    }
    let mut s = String::from(
        "no fsync on the write path, so write figures are to the page cache (data reaches \
         the disk when written back or flushed; the flush after a write phase is timed \
         apart)",
    );
    for e in &report.engines {
        for (k, v) in &e.non_default_settings {
            if k == "durability" {
                let _ = write!(s, "; except {}: {v}", e.name);
            }
        }
    }
    s
}

/// Wall time, peak memory, write amplification and status of each run of a suite.
fn runs_table(md: &mut String, runs: &[&SuiteRun]) {
    let _ = writeln!(
        md,
        "| engine | wall time | peak RSS | write amp (suite) | status |\n|---|---:|---:|---:|---|"
    );
    for run in runs {
        let _ = writeln!(
            md,
            "| {} | {:.1} s | {} | {} | {} |",
            run.engine,
            run.wall_secs,
            run.peak_rss_bytes.map_or("–".into(), bytes),
            run.total_write_amp
                .map_or("–".into(), |a| format!("{a:.2}")),
            match (&run.error, run.cache_bytes) {
                (Some(e), _) => format!("failed: {}", e.replace('|', "/")),
                (None, Some(c)) => format!("ok; block cache {}", bytes(c)),
                (None, None) => "ok".into(),
            }
        );
    }
    md.push('\n');
}

/// The unit, its scale and the decimals that show a time of `mean` seconds.
fn time_format(mean: f64) -> (f64, &'static str, usize) {
    let (scale, unit) = if mean >= 1.0 {
        (1.0, "s")
    } else if mean >= 1e-3 {
        (1e3, "ms")
    } else {
        (1e6, "µs")
    };
    let m = mean * scale;
    let digits = if m >= 100.0 {
        0
    } else if m >= 10.0 {
        1
    } else {
        2
    };
    (scale, unit, digits)
}

/// "12.3 ± 0.4 ms", "1.23 ± 0.05 s": a mean and a standard deviation of seconds.
fn duration(mean: f64, sd: f64) -> String {
    let (scale, unit, digits) = time_format(mean);
    format!("{:.digits$} ± {:.digits$} {unit}", mean * scale, sd * scale)
}

/// "12.3 ms", "1.23 s", "45.6 µs".
fn seconds(x: f64) -> String {
    let (scale, unit, digits) = time_format(x);
    format!("{:.digits$} {unit}", x * scale)
}

/// "p = 0.012", "p < 0.001", or "p = –" when it cannot be computed.
fn p_value(p: Option<f64>) -> String {
    match p {
        Some(p) if p < 0.001 => "p < 0.001".into(),
        Some(p) => format!("p = {p:.3}"),
        None => "p = –".into(),
    }
}

/// Suites with engines, in the order they ran.
fn suite_names(report: &Report) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for run in report.runs.iter().filter(|r| r.suite != "disk") {
        if !names.contains(&run.suite) {
            names.push(run.suite.clone());
        }
    }
    names
}

fn suite_title(suite: &str, report: &Report) -> String {
    let c = &report.config;
    match suite {
        "halodb" => format!(
            "HaloDB suite: {} records, 8-byte keys, {}-byte values, {} reader threads{}",
            count(c.records as f64),
            c.value_size,
            c.threads,
            match c.ops {
                Some(ops) if ops != c.records => format!(
                    ", {} operations per phase after the fills",
                    count(ops as f64)
                ),
                _ => String::new(),
            }
        ),
        "mmcmap" => format!(
            "mmcmap suite: 32-byte a–z keys equal to values, {} threads",
            c.mmcmap_threads
        ),
        "kfs" => match (c.kfs_sizes.iter().min(), c.kfs_sizes.iter().max()) {
            (Some(a), Some(b)) => format!(
                "KFS suite: files of {} to {}, {} trials",
                size_label(*a),
                size_label(*b),
                c.kfs_trials
            ),
            _ => "KFS suite".into(),
        },
        other => other.to_string(),
    }
}

/// `(test, title)` of every test of `runs`, in the order they ran.
fn tests_of(runs: &[&SuiteRun]) -> Vec<(String, String)> {
    let mut seen = BTreeSet::new();
    let mut tests = Vec::new();
    for run in runs {
        for p in &run.phases {
            if seen.insert(p.test.clone()) {
                tests.push((p.test.clone(), p.title.clone()));
            }
        }
    }
    tests
}

fn find<'a>(run: &'a SuiteRun, test: &str) -> Option<&'a Phase> {
    run.phases.iter().find(|p| p.test == test)
}

/// The targets this run can judge: `(target, measured, met)`.
fn targets(report: &Report) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    let peers: Vec<&str> = report
        .engines
        .iter()
        .map(|e| e.name.as_str())
        .filter(|n| *n != "cairn")
        .collect();
    if let Some(halodb) = cairn_run(report, "halodb") {
        halodb_targets(report, halodb, &peers, &mut out);
    }
    if let Some(mmcmap) = cairn_run(report, "mmcmap") {
        mmcmap_targets(report, mmcmap, &peers, &mut out);
    }
    kfs_targets(report, &mut out);
    kfs_store_target(report, &mut out);
    out
}

/// The run of `suite` on `engine` that did not fail.
fn run_of<'a>(report: &'a Report, suite: &str, engine: &str) -> Option<&'a SuiteRun> {
    report
        .runs
        .iter()
        .find(|r| r.suite == suite && r.engine == engine && r.error.is_none())
}

/// The run of `suite` on cairn that did not fail.
fn cairn_run<'a>(report: &'a Report, suite: &str) -> Option<&'a SuiteRun> {
    run_of(report, suite, "cairn")
}

/// cairn's throughput in `test` of `suite` over `peer`'s.
fn ratio_of(report: &Report, suite: &str, test: &str, peer: &str) -> Option<f64> {
    let c = find(cairn_run(report, suite)?, test)?;
    let p = find(run_of(report, suite, peer)?, test)?;
    (p.ops_per_sec > 0.0).then(|| c.ops_per_sec / p.ops_per_sec)
}

/// The lowest ratio of cairn's throughput to `peer`'s over the phases of cairn's run
/// `run` of `suite` that `keep` keeps, with the phase's title.
fn worst_ratio(
    report: &Report,
    suite: &str,
    run: &SuiteRun,
    peer: &str,
    keep: impl Fn(&Phase) -> bool,
) -> Option<(f64, String)> {
    let mut worst: Option<(f64, String)> = None;
    for p in run.phases.iter().filter(|p| keep(p)) {
        if let Some(r) = ratio_of(report, suite, &p.test, peer) {
            if worst.as_ref().is_none_or(|(w, _)| r < *w) {
                worst = Some((r, p.title.clone()));
            }
        }
    }
    worst
}

/// The HaloDB suite's targets: cairn's ratio to RocksDB in the tests HaloDB published,
/// and ahead of every other peer in every test.
fn halodb_targets(
    report: &Report,
    halodb: &SuiteRun,
    peers: &[&str],
    out: &mut Vec<(String, String, bool)>,
) {
    let t = report.config.threads;
    let specific = [
        ("fill_random", 3.0),
        (&*format!("random_read_{t}"), 2.0),
        ("random_read_32", 2.0),
        ("random_update", 5.0),
        ("read_while_writing.reads", 3.0),
        ("fill_sequential", 1.0),
    ];
    for (test, min) in specific {
        if let Some(r) = ratio_of(report, "halodb", test, "rocksdb") {
            let title = find(halodb, test).map_or(test.to_string(), |p| p.title.clone());
            out.push((
                format!("HaloDB {title}: cairn ≥ {min}× RocksDB"),
                ratio(r),
                r >= min,
            ));
        }
    }
    for peer in peers.iter().filter(|p| **p != "rocksdb") {
        if let Some((r, title)) = worst_ratio(report, "halodb", halodb, peer, |_| true) {
            out.push((
                format!("HaloDB, every test: cairn ahead of {peer} (worst: {title})"),
                ratio(r),
                r >= 1.0,
            ));
        }
    }
}

/// The mmcmap suite's targets: cairn ahead of every peer in writes, reads and deletes,
/// and its throughput at the largest size at least 80% of that at the smallest.
fn mmcmap_targets(
    report: &Report,
    mmcmap: &SuiteRun,
    peers: &[&str],
    out: &mut Vec<(String, String, bool)>,
) {
    for peer in peers {
        let not_mixed = |p: &Phase| !p.test.starts_with("mixed");
        if let Some((r, title)) = worst_ratio(report, "mmcmap", mmcmap, peer, not_mixed) {
            out.push((
                format!("mmcmap write/read/delete: cairn ahead of {peer} (worst: {title})"),
                ratio(r),
                r >= 1.0,
            ));
        }
    }
    let sizes = &report.config.mmcmap_sizes;
    let (Some(first), Some(last)) = (sizes.iter().min(), sizes.iter().max()) else {
        return;
    };
    if first >= last {
        return;
    }
    for op in ["write", "read", "delete"] {
        let at = |n: u64| {
            let test = format!("{op}_{}", super::mmcmap::short_count(n));
            find(mmcmap, &test).map(|p| p.ops_per_sec)
        };
        if let (Some(a), Some(b)) = (at(*first), at(*last)) {
            out.push((
                format!(
                    "mmcmap steady: cairn's {op} ops/s at {} pairs ≥ 80% of at {}",
                    super::mmcmap::short_count(*last),
                    super::mmcmap::short_count(*first)
                ),
                format!("{:.0}%", 100.0 * b / a),
                b >= 0.8 * a,
            ));
        }
    }
}

/// "1.23×".
fn ratio(r: f64) -> String {
    if r >= 10.0 {
        format!("{r:.0}×")
    } else {
        format!("{r:.2}×")
    }
}

/// The lowest interval's throughput over the median interval's, e.g. "0.42×".
fn steadiness(p: &Phase) -> String {
    // The last interval is usually partial, and the first includes warm-up.
    if p.timeline.len() < 4 {
        return "–".into();
    }
    let inner = &p.timeline[..p.timeline.len() - 1];
    let mut sorted = inner.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    if median <= 0.0 {
        return "–".into();
    }
    format!("{:.2}×", sorted[0] / median)
}

/// 1234567.8 → "1,234,568".
pub fn count(x: f64) -> String {
    let n = x.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Nanoseconds, short: "850 ns", "12.3 µs", "4.56 ms", "1.23 s".
pub fn latency(ns: u64) -> String {
    let x = ns as f64;
    if ns == 0 {
        "–".into()
    } else if x < 1e3 {
        format!("{ns} ns")
    } else if x < 1e6 {
        format!("{:.1} µs", x / 1e3)
    } else if x < 1e9 {
        format!("{:.2} ms", x / 1e6)
    } else {
        format!("{:.2} s", x / 1e9)
    }
}

/// Bytes, binary units: "12.3 MiB".
pub fn bytes(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = n as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < units.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{x:.1} {}", units[u])
    }
}

/// The HaloDB suite's random reads next to the disk's own random 4 KiB reads from as
/// many threads: with one disk read per lookup, a store larger than memory can reach
/// the disk's figure and no more.
fn reads_against_disk(md: &mut String, runs: &[&SuiteRun], disk: &SuiteRun) {
    let disk_iops = |threads: usize| {
        disk.phases
            .iter()
            .find(|p| p.test == format!("rand_read_{threads}"))
            .map(|p| p.ops_per_sec)
    };
    let mut rows = Vec::new();
    for (test, title) in tests_of(runs) {
        if !(test.starts_with("random_read_") || test == "read_while_writing.reads") {
            continue;
        }
        let Some(threads) = runs.iter().find_map(|r| find(r, &test)).map(|p| p.threads) else {
            continue;
        };
        let Some(iops) = disk_iops(threads) else {
            continue;
        };
        let mut row = format!("| {title} | {} |", count(iops));
        for run in runs {
            let cell = match find(run, &test) {
                Some(p) if run.error.is_none() && iops > 0.0 => {
                    format!("{:.0}%", 100.0 * p.ops_per_sec / iops)
                }
                _ => "–".into(),
            };
            let _ = write!(row, " {cell} |");
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "Reads against the disk's own random 4 KiB direct reads from as many threads (the \
         disk suite): each engine's reads/s as a share of the disk's. In a store larger \
         than the memory it may use, a lookup that costs one disk read reaches 100%; a \
         share above 100% means part of the store was cached.\n"
    );
    let engines: Vec<&str> = runs.iter().map(|r| r.engine.as_str()).collect();
    let _ = writeln!(md, "| test | disk reads/s | {} |", engines.join(" | "));
    let _ = writeln!(md, "|---|---:|{}", "---:|".repeat(engines.len()));
    for row in rows {
        let _ = writeln!(md, "{row}");
    }
    md.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(count(1234567.4), "1,234,567");
        assert_eq!(count(12.0), "12");
        assert_eq!(latency(850), "850 ns");
        assert_eq!(latency(12_345), "12.3 µs");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
        assert_eq!(ratio(2.345), "2.35×");
        assert_eq!(duration(0.0123, 0.0004), "12.3 ± 0.4 ms");
        assert_eq!(duration(1.234, 0.05), "1.23 ± 0.05 s");
        assert_eq!(seconds(0.0000456), "45.6 µs");
        assert_eq!(p_value(Some(0.0001)), "p < 0.001");
        assert_eq!(p_value(None), "p = –");
    }
}
