//! The Markdown report: engines and settings, the disk's limits, a throughput table per
//! suite with each peer's ratio to cairn, details per test, and the targets.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::measure::{Kind, Phase};
use super::{Report, SuiteRun};

/// The whole report as Markdown.
pub fn markdown(report: &Report) -> String {
    let mut md = String::new();
    let cfg = &report.config;
    let _ = writeln!(md, "# cairn bench results\n");
    let _ = writeln!(md, "Command: `{}`  ", report.command);
    let _ = writeln!(
        md,
        "Mode: {}; machine: {} CPUs, {} memory, Linux {}; durability: {}; compression off.\n",
        cfg.mode,
        report.machine.cpus,
        report.machine.memory_bytes.map_or("?".into(), bytes),
        report.machine.kernel.as_deref().unwrap_or("?"),
        if cfg.sync {
            "every write durable before it returns (--sync)"
        } else {
            "no fsync on the write path (data reaches the disk when written back or flushed)"
        }
    );

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

    let disk = report.runs.iter().find(|r| r.suite == "disk");
    if let Some(disk) = disk {
        let _ = writeln!(md, "## The disk's own limits\n");
        if let Some(err) = &disk.error {
            let _ = writeln!(md, "failed: {err}\n");
        } else {
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
    }
    let disk_bw = |kind: Option<Kind>| -> Option<f64> {
        let test = match kind? {
            Kind::Write => "seq_write",
            Kind::Read => "seq_read",
        };
        disk?
            .phases
            .iter()
            .find(|p| p.test == test)
            .map(|p| p.mb_per_sec)
    };

    for suite in suite_names(report) {
        let runs: Vec<&SuiteRun> = report.runs.iter().filter(|r| r.suite == suite).collect();
        let _ = writeln!(md, "## {}\n", suite_title(&suite, report));
        let engines: Vec<&str> = runs.iter().map(|r| r.engine.as_str()).collect();
        let cairn = runs
            .iter()
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
        for (test, title) in tests_of(&runs) {
            let mut row = format!("| {title} |");
            for run in &runs {
                let cell = match (&run.error, find(run, &test)) {
                    (Some(_), _) => "failed".to_string(),
                    (None, None) => "–".to_string(),
                    (None, Some(p)) => {
                        let mut cell = count(p.ops_per_sec);
                        if run.engine != "cairn" {
                            if let Some(c) = cairn
                                .and_then(|c| find(c, &test))
                                .filter(|_| p.ops_per_sec > 0.0)
                            {
                                let _ = write!(cell, " ({})", ratio(c.ops_per_sec / p.ops_per_sec));
                            }
                        }
                        cell
                    }
                };
                let _ = write!(row, " {cell} |");
            }
            let _ = writeln!(md, "{row}");
        }
        md.push('\n');

        let _ = writeln!(
            md,
            "| engine | wall time | peak RSS | write amp (suite) | status |\n|---|---:|---:|---:|---|"
        );
        for run in &runs {
            let _ = writeln!(
                md,
                "| {} | {:.1} s | {} | {} | {} |",
                run.engine,
                run.wall_secs,
                run.peak_rss_bytes.map_or("–".into(), bytes),
                run.total_write_amp
                    .map_or("–".into(), |a| format!("{a:.2}")),
                run.error
                    .as_deref()
                    .map_or("ok".into(), |e| format!("failed: {}", e.replace('|', "/")))
            );
        }
        md.push('\n');

        let _ = writeln!(md, "### Details\n");
        let _ = writeln!(
            md,
            "Latencies are of single operations (HDR histogram). \"slowest interval\" is the lowest \
             throughput of one interval of {} ms over the median one (compaction stalls show here); \
             \"% of disk\" compares MB/s of keys and values with the disk's sequential bandwidth; \
             \"peak RSS\" (VmHWM) includes file pages the engine maps (LMDB, cairn's sealed \
             segments), \"peak anon RSS\" is the heap alone, sampled once per interval.\n",
            report.config.interval_ms
        );
        let _ = writeln!(
            md,
            "| test | engine | ops/s | MB/s | % of disk | p50 | p99 | p99.9 | max | slowest interval | write amp | space amp | peak RSS | peak anon RSS | reopen |"
        );
        let _ = writeln!(md, "|---|---|{}", "---:|".repeat(13));
        for (test, title) in tests_of(&runs) {
            for run in &runs {
                let Some(p) = find(run, &test) else { continue };
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    title,
                    run.engine,
                    count(p.ops_per_sec),
                    p.mb_per_sec,
                    disk_bw(p.kind).map_or("–".into(), |bw| format!(
                        "{:.0}%",
                        100.0 * p.mb_per_sec / bw
                    )),
                    latency(p.latency.p50_ns),
                    latency(p.latency.p99_ns),
                    latency(p.latency.p999_ns),
                    latency(p.latency.max_ns),
                    steadiness(p),
                    p.write_amp.map_or("–".into(), |a| format!("{a:.2}")),
                    p.space_amp.map_or("–".into(), |a| format!("{a:.2}")),
                    p.peak_rss_bytes.map_or("–".into(), bytes),
                    p.peak_anon_rss_bytes.map_or("–".into(), bytes),
                    p.reopen_secs.map_or("–".into(), |s| format!("{:.3} s", s)),
                );
            }
        }
        md.push('\n');
    }

    let targets = targets(report);
    if !targets.is_empty() {
        let _ = writeln!(md, "## Targets of issue 4\n");
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
    md
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
            "HaloDB suite (seed 004): {} records, 8-byte keys, {}-byte values, {} reader threads",
            count(c.records as f64),
            c.value_size,
            c.threads
        ),
        "mmcmap" => format!(
            "mmcmap suite (seed 003): 32-byte a–z keys equal to values, {} threads",
            c.mmcmap_threads
        ),
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

/// The targets that this run can judge: `(target, measured, met)`.
fn targets(report: &Report) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    let get = |suite: &str, engine: &str| {
        report
            .runs
            .iter()
            .find(|r| r.suite == suite && r.engine == engine && r.error.is_none())
    };
    let ratio_of = |suite: &str, test: &str, peer: &str| -> Option<f64> {
        let c = find(get(suite, "cairn")?, test)?;
        let p = find(get(suite, peer)?, test)?;
        (p.ops_per_sec > 0.0).then(|| c.ops_per_sec / p.ops_per_sec)
    };
    let peers: Vec<&str> = report
        .engines
        .iter()
        .map(|e| e.name.as_str())
        .filter(|n| *n != "cairn")
        .collect();
    let t = report.config.threads;
    let specific = [
        ("fill_random", 3.0),
        (&*format!("random_read_{t}"), 2.0),
        ("random_read_32", 2.0),
        ("random_update", 5.0),
        ("read_while_writing.reads", 3.0),
        ("fill_sequential", 1.0),
    ];
    if let Some(halodb) = get("halodb", "cairn") {
        for (test, min) in specific {
            if let Some(r) = ratio_of("halodb", test, "rocksdb") {
                let title = find(halodb, test).map_or(test.to_string(), |p| p.title.clone());
                out.push((
                    format!("HaloDB {title}: cairn ≥ {min}× RocksDB"),
                    ratio(r),
                    r >= min,
                ));
            }
        }
        for peer in peers.iter().filter(|p| **p != "rocksdb") {
            let mut worst: Option<(f64, String)> = None;
            for p in &halodb.phases {
                if let Some(r) = ratio_of("halodb", &p.test, peer) {
                    if worst.as_ref().is_none_or(|(w, _)| r < *w) {
                        worst = Some((r, p.title.clone()));
                    }
                }
            }
            if let Some((r, title)) = worst {
                out.push((
                    format!("HaloDB, every test: cairn ahead of {peer} (worst: {title})"),
                    ratio(r),
                    r >= 1.0,
                ));
            }
        }
    }
    if let Some(mmcmap) = get("mmcmap", "cairn") {
        for peer in &peers {
            let mut worst: Option<(f64, String)> = None;
            for p in mmcmap
                .phases
                .iter()
                .filter(|p| !p.test.starts_with("mixed"))
            {
                if let Some(r) = ratio_of("mmcmap", &p.test, peer) {
                    if worst.as_ref().is_none_or(|(w, _)| r < *w) {
                        worst = Some((r, p.title.clone()));
                    }
                }
            }
            if let Some((r, title)) = worst {
                out.push((
                    format!("mmcmap write/read/delete: cairn ahead of {peer} (worst: {title})"),
                    ratio(r),
                    r >= 1.0,
                ));
            }
        }
        let sizes = &report.config.mmcmap_sizes;
        if let (Some(first), Some(last)) = (sizes.iter().min(), sizes.iter().max()) {
            if first < last {
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
        }
    }
    out
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
    }
}
