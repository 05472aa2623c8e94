//! `cairn bench --smoke` through the built binary: it finishes quickly and writes sane
//! JSON, Markdown and plots.

mod common;

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

fn cairn() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
}

fn phases<'a>(json: &'a Value, suite: &str) -> &'a Vec<Value> {
    let run = json["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .find(|r| r["suite"] == suite)
        .unwrap_or_else(|| panic!("no {suite} run"));
    assert!(run["error"].is_null(), "{suite} failed: {}", run["error"]);
    run["phases"].as_array().expect("phases")
}

fn phase<'a>(phases: &'a [Value], test: &str) -> &'a Value {
    phases
        .iter()
        .find(|p| p["test"] == test)
        .unwrap_or_else(|| panic!("no phase {test}"))
}

fn num(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} of {} is not a number", v["test"]))
}

/// Runs `cairn bench ARGS --out OUT`, which must succeed, and returns its results.json.
fn bench_json(args: &[&str], out: &Path) -> Value {
    let output = cairn()
        .arg("bench")
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "bench {args:?} failed: {stderr}");
    serde_json::from_slice(&fs::read(out.join("results.json")).unwrap()).unwrap()
}

/// Checks the figures every measured phase must have.
fn check_phase(p: &Value) {
    let name = &p["test"];
    assert!(num(p, "ops") > 0.0, "{name}: no operations");
    assert!(num(p, "ops_per_sec") > 0.0, "{name}: no throughput");
    assert!(num(p, "secs") > 0.0, "{name}: no time");
    let lat = &p["latency"];
    let (p50, p99, p999, max) = (
        num(lat, "p50_ns"),
        num(lat, "p99_ns"),
        num(lat, "p999_ns"),
        num(lat, "max_ns"),
    );
    assert!(
        p50 > 0.0 && p50 <= p99 && p99 <= p999 && p999 <= max,
        "{name}: {lat}"
    );
}

/// Whether `/proc/self/io` counts the writes of a file in `dir` (it does not on tmpfs, or
/// without the kernel's I/O accounting): what the bench's write amplification is made of.
fn io_accounting_works(dir: &Path) -> bool {
    let written = || -> Option<u64> {
        fs::read_to_string("/proc/self/io")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("write_bytes:"))?
            .trim()
            .parse()
            .ok()
    };
    let Some(before) = written() else {
        return false;
    };
    let path = dir.join("io-probe");
    let mut f = fs::File::create(&path).unwrap();
    f.write_all(&vec![7u8; 1 << 20]).unwrap();
    f.sync_all().unwrap();
    drop(f);
    fs::remove_file(&path).unwrap();
    written().is_some_and(|after| after - before >= 1 << 20)
}

#[test]
#[allow(clippy::too_many_lines)]
fn smoke_run_writes_sane_results() {
    let dir = tempfile::tempdir().unwrap();
    let accounting = io_accounting_works(dir.path());
    let out = dir.path().join("out");
    let started = Instant::now();
    let output = cairn()
        .args(["bench", "--smoke", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "bench --smoke failed: {stderr}");
    assert!(elapsed < Duration::from_secs(30), "smoke took {elapsed:?}");

    let json: Value = serde_json::from_slice(&fs::read(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(json["config"]["mode"], "smoke");
    // Which allocator the engines got, as the binary found it.
    let allocator = json["allocator"].as_str().expect("allocator");
    assert!(
        allocator.starts_with("Rust code (cairn, sled, fjall, redb): mimalloc "),
        "{allocator}"
    );
    // The binary turns transparent huge pages off unless told otherwise: but for the
    // index's tables where the kernel can (6.18 on), everywhere on older kernels; on
    // while a store opens.
    if cfg!(target_os = "linux") && std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        assert!(
            allocator.ends_with(
                "transparent huge pages only in the index's tables (PR_SET_THP_DISABLE \
                 except advised; as the kernel's mode decides while a store opens)"
            ) || allocator.ends_with(
                "transparent huge pages off (PR_SET_THP_DISABLE), on while a store opens"
            ),
            "{allocator}"
        );
    }
    let engines = json["engines"].as_array().unwrap();
    assert_eq!(engines.len(), 1, "smoke runs cairn alone");
    assert_eq!(engines[0]["name"], "cairn");

    let halodb = phases(&json, "halodb");
    let records = json["config"]["records"].as_f64().unwrap();
    for test in [
        "fill_sequential",
        "fill_random",
        "random_read_4",
        "random_read_32",
        "random_update",
        "read_while_writing.reads",
        "read_while_writing.writes",
    ] {
        check_phase(phase(halodb, test));
    }
    for test in ["fill_sequential", "fill_random", "random_update"] {
        let p = phase(halodb, test);
        assert_eq!(num(p, "ops"), records, "{test}");
        // Every record written: 8-byte key and 1024-byte value.
        assert_eq!(num(p, "bytes"), records * 1032.0, "{test}");
        assert!(num(p, "space_amp") >= 0.9, "{test}: {}", p["space_amp"]);
        assert!(num(p, "disk_bytes") > 0.0);
        // Every record reaches the disk at least once (the flush is counted too);
        // without I/O accounting there is no figure rather than a wrong one.
        if accounting {
            assert!(num(p, "write_amp") >= 1.0, "{test}: {}", p["write_amp"]);
        } else {
            assert!(p["write_amp"].is_null(), "{test}: {}", p["write_amp"]);
        }
    }
    for test in ["fill_sequential", "fill_random"] {
        assert!(num(phase(halodb, test), "reopen_secs") > 0.0);
    }
    assert!(num(phase(halodb, "random_read_32"), "threads") == 32.0);

    let mmcmap = phases(&json, "mmcmap");
    for test in [
        "write_1k",
        "read_1k",
        "delete_1k",
        "write_2k",
        "read_2k",
        "delete_2k",
        "mixed.load",
        "mixed.reads",
        "mixed.writes",
    ] {
        check_phase(phase(mmcmap, test));
    }
    assert_eq!(num(phase(mmcmap, "mixed.writes"), "ops"), 200.0);
    assert_eq!(num(phase(mmcmap, "mixed.reads"), "ops"), 800.0);

    // The KFS suite: cairn and cairn with one shard, every (operation, size) measured in
    // every trial; a write also timed until it is durable, which takes longer.
    let sizes: Vec<u64> = json["config"]["kfs_sizes"]
        .as_array()
        .expect("kfs_sizes")
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    let trials = json["config"]["kfs_trials"].as_u64().unwrap();
    assert!(!sizes.is_empty() && trials >= 2, "{}", json["config"]);
    for subject in ["cairn", "cairn-1shard"] {
        let run = json["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["suite"] == "kfs" && r["engine"] == subject)
            .unwrap_or_else(|| panic!("no kfs run on {subject}"));
        assert!(run["error"].is_null(), "kfs on {subject}: {}", run["error"]);
        let kfs = run["phases"].as_array().unwrap();
        let samples = run["samples"].as_array().expect("kfs samples");
        for op in ["write", "durable_write", "read", "unlink"] {
            for size in &sizes {
                let test = format!("{op}_{}MiB", size >> 20);
                let p = phase(kfs, &test);
                check_phase(p);
                assert_eq!(num(p, "ops"), trials as f64, "{test}");
                assert_eq!(num(p, "bytes"), (size * trials) as f64, "{test}");
                let values = samples
                    .iter()
                    .find(|s| s["test"] == test.as_str())
                    .unwrap_or_else(|| panic!("no samples of {test}"))["values"]
                    .as_array()
                    .unwrap();
                assert_eq!(values.len() as u64, trials, "{test}");
                assert!(values.iter().all(|v| v.as_f64().unwrap() > 0.0), "{test}");
            }
        }
        assert!(samples.iter().any(|s| s["test"] == "store_bytes"));
        for size in &sizes {
            let values = |test: String| -> Vec<f64> {
                samples.iter().find(|s| s["test"] == test.as_str()).unwrap()["values"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap())
                    .collect()
            };
            let (w, d) = (
                values(format!("write_{}MiB", size >> 20)),
                values(format!("durable_write_{}MiB", size >> 20)),
            );
            assert!(w.iter().zip(&d).all(|(w, d)| d >= w), "{w:?} {d:?}");
        }
        let durable = phase(kfs, "durable_write_4MiB");
        if accounting {
            assert!(num(durable, "write_amp") >= 1.0, "{durable}");
        }
        assert!(phase(kfs, "write_4MiB")["write_amp"].is_null());
        let closed = samples
            .iter()
            .find(|s| s["test"] == "store_bytes_closed")
            .expect("store size after close")["values"]
            .as_array()
            .unwrap();
        assert_eq!(closed.len(), 1);
        assert!(closed[0].as_f64().unwrap() > 0.0);
    }

    let disk = phases(&json, "disk");
    for test in ["seq_write", "seq_read", "fsync"] {
        let p = phase(disk, test);
        check_phase(p);
        assert!(num(p, "mb_per_sec") > 0.0);
    }

    let md = fs::read_to_string(out.join("results.md")).unwrap();
    for needle in [
        "# cairn bench results",
        "## The disk's own limits",
        "## HaloDB suite: 2,000 records",
        "| fill random |",
        "| read while writing: reads, 4 threads |",
        "## mmcmap suite",
        "| p50 | p99 | p99.9 | max |",
        "## KFS suite: files of 1 MiB to 4 MiB, 2 trials",
        "### write (until it returns, no sync: to the page cache)",
        "### durable write (the write, then the sync that makes it durable)",
        "### read",
        "### unlink",
        "| file size | cairn | cairn-1shard | cairn, % of disk write bandwidth |",
        "| 4 MiB |",
        "KFS 4 MiB durable writes: cairn ≥ 70% of the disk's sequential write bandwidth",
        "durability: no fsync on the write path, so write figures are to the page cache",
        "Allocator: Rust code (cairn, sled, fjall, redb): mimalloc ",
        "| flush after |",
        "KFS unlink: cairn's mean and stddev below cairn-1shard's",
        "KFS store after the last trial's unlinks: cairn ≤ 1.2× a trial's data",
        "| subject | after trial 1 | after the last trial | most | closed |",
    ] {
        assert!(md.contains(needle), "results.md lacks {needle:?}:\n{md}");
    }
    assert!(!md.contains("failed"), "{md}");
    check_tables(&md);
    assert!(String::from_utf8_lossy(&output.stdout).contains("| fill sequential |"));

    let plots: Vec<_> = fs::read_dir(out.join("plots")).unwrap().collect();
    assert!(!plots.is_empty(), "no plots");
    for op in ["write", "durable_write", "read", "unlink"] {
        assert!(
            out.join(format!("plots/kfs-{op}.png")).exists(),
            "no kfs {op} plot"
        );
    }
    for plot in plots {
        let path = plot.unwrap().path();
        check_png(&path);
    }
    assert!(!out.join("data").exists(), "engine data left behind");

    // --render writes the Markdown and the plots again from results.json alone.
    fs::remove_file(out.join("results.md")).unwrap();
    fs::remove_dir_all(out.join("plots")).unwrap();
    let output = cairn()
        .args(["bench", "--render", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(fs::read_to_string(out.join("results.md")).unwrap(), md);
    assert!(fs::read_dir(out.join("plots")).unwrap().count() > 0);
}

/// Every row of every Markdown table has as many cells as its header.
fn check_tables(md: &str) {
    let mut header_cells = None;
    for line in md.lines() {
        if line.starts_with('|') {
            let cells = line.matches('|').count();
            match header_cells {
                None => header_cells = Some(cells),
                Some(n) => assert_eq!(cells, n, "row does not fit its header: {line}"),
            }
        } else {
            header_cells = None;
        }
    }
}

fn check_png(path: &Path) {
    let bytes = fs::read(path).unwrap();
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} is no PNG",
        path.display()
    );
    assert!(bytes.len() > 2000, "{} is nearly empty", path.display());
}

#[test]
#[cfg_attr(
    feature = "peers",
    ignore = "a build with the `peers` feature has the peers"
)]
fn peers_need_the_feature() {
    let dir = tempfile::tempdir().unwrap();
    let output = cairn()
        .args(["bench", "--smoke", "--engines", "cairn,rocksdb", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--features peers"), "{stderr}");
}

#[test]
fn unknown_suite_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let output = cairn()
        .args(["bench", "--smoke", "--suites", "nope", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown suite nope"));
}

/// `--sync` fills count the engine's fsyncs: a single durable writer into cairn makes one
/// `fdatasync` per write (no other writer to share it with), and the report shows the
/// column. Where the kernel's counters are out of reach (not root) the figure is absent
/// and the test reports the skip (`common::skip`) instead of checking it.
#[test]
fn sync_run_reports_writes_per_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let json = bench_json(&["--smoke", "--sync", "--suites", "halodb"], &out);
    let halodb = phases(&json, "halodb");
    let one = phase(halodb, "fill_random");
    let md = fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("writes per fsync"), "{md}");
    if one["writes_per_sync"].is_null() {
        // SAFETY: geteuid has no preconditions.
        assert_ne!(unsafe { libc::geteuid() }, 0, "root, yet no fsync count");
        common::skip("bench --sync: the writes per fsync (the kernel's counters need root)");
        return;
    }
    let wps = num(one, "writes_per_sync");
    assert!(
        (0.8..=1.25).contains(&wps),
        "1 durable writer: {wps} writes per fsync"
    );
    for test in ["fill_random_4_writers", "fill_random_32_writers"] {
        let p = phase(halodb, test);
        assert!(num(p, "syncs") >= 1.0, "{test}: {}", p["syncs"]);
        assert!(num(p, "writes_per_sync") > 0.0, "{test}");
    }
}

/// `--ops` caps the HaloDB suite's phases after the fills (what makes a store far
/// larger than memory measurable in minutes): the fills still write every record, the
/// reads, updates and reads-while-writing make `--ops` operations, and the report says so;
/// `--ops 0` is refused.
#[test]
fn ops_caps_the_phases_after_the_fills() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let args = [
        "--smoke",
        "--suites",
        "halodb",
        "--records",
        "3000",
        "--ops",
        "500",
    ];
    let json = bench_json(&args, &out);
    assert_eq!(json["config"]["ops"], 500);
    let halodb = phases(&json, "halodb");
    for (test, ops) in [
        ("fill_sequential", 3000.0),
        ("fill_random", 3000.0),
        ("random_read_4", 500.0),
        ("random_read_32", 500.0),
        ("random_update", 500.0),
        ("read_while_writing.reads", 500.0),
    ] {
        assert_eq!(num(phase(halodb, test), "ops"), ops, "{test}");
    }
    let md = fs::read_to_string(out.join("results.md")).unwrap();
    assert!(
        md.contains("500 operations per phase after the fills"),
        "{md}"
    );
    let refused = cairn()
        .args(["bench", "--smoke", "--ops", "0", "--out"])
        .arg(dir.path().join("zero"))
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--ops must be positive"));
}

/// The disk suite's random reads span as many bytes as the HaloDB suite's store
/// (`--records` × 1,032 B) when that is more than its own file: a virtual disk serves a
/// small span from its host's cache, so the disk's IOPS next to a large store's reads
/// must be read over a span as large.
#[test]
fn disk_random_reads_span_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let json = bench_json(&["--smoke", "--suites", "disk", "--records", "20000"], &out);
    assert_eq!(json["config"]["disk_rand_span"], 20_000 * 1_032);
    let disk = phases(&json, "disk");
    for t in [1, 4, 32] {
        let p = phase(disk, &format!("rand_read_{t}"));
        let title = p["title"].as_str().unwrap();
        assert!(title.contains("over 19.7 MiB"), "{title}");
        check_phase(p);
    }
}

/// `cairn cluster-bench` through the binary: server and client processes, every way of
/// sending creates interleaved, a sane JSON (each run's creates/s, its peak and its
/// last tenth, per server CPU), a table whose rows fit, and both plots.
#[test]
fn cluster_bench_writes_sane_results() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, out) = (tmp.path().join("work"), tmp.path().join("out"));
    let t = Instant::now();
    let o = cairn()
        .args(["cluster-bench", "--servers", "1,2", "--clients", "1"])
        .args(["--threads", "4", "--files", "3000", "--no-lib"])
        .args(["--creates", "stream,batch,single"])
        .arg("--dir")
        .arg(&work)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        t.elapsed() < Duration::from_secs(120),
        "took {:?}",
        t.elapsed()
    );
    let json: Value =
        serde_json::from_str(&fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 6, "2 server counts × 3 ways");
    for r in runs {
        let rate = num(r, "creates_per_sec");
        let peak = num(r, "peak_creates_per_sec");
        let last = num(r, "last_tenth_creates_per_sec");
        assert!(rate > 0.0 && peak >= rate * 0.5, "{r}");
        assert!(last > 0.0 && last <= peak * 3.0, "{r}");
        assert!(num(r, "creates_per_server_cpu_sec") > 0.0, "{r}");
        let tl = r["timeline"].as_array().unwrap();
        let made = tl.last().unwrap()[1].as_u64().unwrap();
        assert_eq!(made, 3000, "the timeline ends with every create: {r}");
        match r["creates"].as_str().unwrap() {
            "stream" => assert!(r["creates_per_request"].is_null()),
            _ => assert!(num(r, "creates_per_request") >= 1.0),
        }
    }
    let md = fs::read_to_string(out.join("results.md")).unwrap();
    check_tables(&md);
    check_png(&out.join("creates-over-time.png"));
    check_png(&out.join("creates-per-server-cpu.png"));
}
