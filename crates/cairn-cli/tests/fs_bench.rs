//! Smoke-sized run of `cairn fs-bench` on every target. The FUSE one may be skipped only
//! where FUSE is unavailable (`cairn_fuse::unavailable`, or the mount refused for lack of
//! privilege); any other failure of the mount fails the run and this test.

mod common;

use std::path::Path;
use std::process::Command;

/// Runs `cairn fs-bench ARGS` with its work directory, `--json` file and `--out` in
/// `tmp`, and checks that it succeeded: its standard output and its JSON.
fn fs_bench(tmp: &Path, args: &[&str]) -> (String, serde_json::Value) {
    let json = tmp.join("fs.json");
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("fs-bench")
        .args(args)
        .arg("--dir")
        .arg(tmp.join("work"))
        .arg("--json")
        .arg(&json)
        .arg("--out")
        .arg(tmp.join("out"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    (stdout, all)
}

#[test]
#[allow(clippy::too_many_lines)]
fn fs_bench_smoke() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("out");
    let (stdout, all) = fs_bench(
        tmp.path(),
        &[
            "--files",
            "2000",
            "--intervals",
            "4",
            "--cold",
            "--data-sizes",
            "1,3",
            "--procs",
            "1,2",
            "--everyday",
            "--everyday-dirs",
            "3",
            "--everyday-dd-mib",
            "8",
            "--targets",
            "lib,fuse,fuse-classic,plain",
        ],
    );
    println!("{stdout}");
    let runs = all["metadata"].as_array().unwrap();
    // Unpinned unless --pin: what a user's mount does.
    assert!(all["pinned_cpu"].is_null(), "{all}");
    assert!(stdout.contains("nothing pinned"), "{stdout}");
    // Large files (--cold): written, read warm and cold, on every target that ran.
    let data = all["data"].as_array().unwrap();
    for r in runs {
        let mine: Vec<_> = data.iter().filter(|d| d["target"] == r["target"]).collect();
        assert_eq!(mine.len(), 2, "{}: {data:?}", r["target"]);
        for d in mine {
            for f in ["durable_write_mbps", "warm_read_mbps", "cold_read_mbps"] {
                assert!(d[f].as_f64().unwrap() > 0.0, "{f} of {d}");
            }
        }
    }
    let targets: Vec<&str> = runs.iter().map(|r| r["target"].as_str().unwrap()).collect();
    assert!(
        targets.contains(&"lib") && targets.contains(&"plain"),
        "{targets:?}"
    );
    if !targets.contains(&"fuse") {
        let refused = "fuse: skipped, FUSE is unavailable here: the mount was refused";
        match cairn_fuse::unavailable() {
            // Where FUSE looks usable, only a refusal of the mount itself may skip it.
            None => assert!(stdout.contains(refused), "{stdout}"),
            Some(why) => assert!(
                stdout.contains(&format!("fuse: skipped, FUSE is unavailable here: {why}")),
                "{stdout}"
            ),
        }
        common::skip("fs-bench's fuse target: FUSE is unavailable here");
    }
    // What the figures measure is said beside them.
    let md = std::fs::read_to_string(out_dir.join("results.md")).unwrap();
    assert!(md.contains("- lib calls cairn::fs in this process"), "{md}");
    assert!(md.contains("(plain: "), "{md}");
    // The plain target: a fresh ext4 image where root and mkfs.ext4 allow, else a
    // directory, said with the reason.
    let plain_fs = all["plain_fs"].as_str().unwrap();
    assert!(
        plain_fs.starts_with("a fresh ext4 image") || plain_fs.contains("not a fresh file system"),
        "{plain_fs}"
    );
    // Several processes into one directory: every target but lib, each count.
    let shared = all["shared_directory"].as_array().unwrap();
    for t in targets.iter().filter(|t| **t != "lib") {
        let mine: Vec<_> = shared.iter().filter(|r| r["target"] == *t).collect();
        assert_eq!(mine.len(), 2, "{t}: {shared:?}");
        for r in mine {
            assert_eq!(r["files"], 2000, "{r}");
            for f in ["create_rate", "stat_rate", "unlink_rate"] {
                assert!(r[f].as_f64().unwrap() > 0.0, "{f} of {r}");
            }
        }
    }
    assert!(
        md.contains("| fuse | 2 | 2000 |") || !targets.contains(&"fuse"),
        "{md}"
    );
    // Everyday tools on every target but lib, each step timed.
    let everyday = all["everyday"].as_array().unwrap();
    for t in targets.iter().filter(|t| **t != "lib") {
        let steps: Vec<&str> = everyday
            .iter()
            .filter(|s| s["target"] == *t)
            .map(|s| s["step"].as_str().unwrap())
            .collect();
        assert_eq!(steps.len(), 8, "{t}: {steps:?}");
        assert!(
            steps.contains(&"git status") && steps.contains(&"tar x"),
            "{steps:?}"
        );
    }
    assert!(
        md.contains("everyday tools, a tree of 300 small files"),
        "{md}"
    );
    // Each mount says how its requests travelled.
    for r in runs.iter().filter(|r| r["target"] == "fuse-classic") {
        assert_eq!(r["transport"], "/dev/fuse", "{r}");
    }
    let ring_on = std::fs::read_to_string(cairn_fuse::URING_SWITCH).is_ok_and(|s| s.trim() == "Y");
    for r in runs.iter().filter(|r| r["target"] == "fuse") {
        let want = if ring_on { "io_uring" } else { "/dev/fuse" };
        assert_eq!(r["transport"], want, "{r}");
    }
    assert!(
        md.contains("- allocator: Rust code (cairn, sled, fjall, redb): mimalloc "),
        "{md}"
    );
    for r in runs {
        assert_eq!(r["files"], 2000);
        for f in ["create_rate", "stat_rate", "list_rate", "unlink_rate"] {
            assert!(r[f].as_f64().unwrap() > 0.0, "{f} of {}", r["target"]);
        }
        let series = r["create_series"].as_array().unwrap();
        assert_eq!(series.len(), 4);
        assert_eq!(series[3]["files"], 2000);
        assert!(series.iter().all(|p| p["rate"].as_f64().unwrap() > 0.0));
    }
    // Through FUSE, a create of a new file is a LOOKUP and a CREATE (and a RELEASE).
    if let Some(f) = runs.iter().find(|r| r["target"] == "fuse") {
        // Stats that reached cairn less than once each are said to be the kernel's.
        let stat: f64 = f["fuse_requests"]["stat"]
            .as_object()
            .expect("requests of the stat phase")
            .values()
            .map(|v| v.as_f64().unwrap())
            .sum();
        assert_eq!(
            md.contains("- fuse stat: ") && md.contains("answered from the kernel's attribute"),
            stat < 0.995,
            "{stat} requests per stat:\n{md}"
        );
        if stat == 0.0 {
            assert!(
                md.contains("every stat was answered from the kernel's"),
                "{md}"
            );
        }
        let c = &f["fuse_requests"]["create"];
        assert!(c["LOOKUP"].as_f64().unwrap() >= 0.99, "{c}");
        assert!(c["CREATE"].as_f64().unwrap() >= 0.99, "{c}");
        // FLUSH answers ENOSYS: the kernel sends it once.
        assert!(
            c.get("FLUSH").map_or(0.0, |v| v.as_f64().unwrap()) < 0.01,
            "{c}"
        );
        // Root's mounts check permissions in cairn: no GETATTR of the directory first.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert!(c.get("GETATTR").is_none(), "{c}");
        } else {
            common::skip(
                "fs-bench: creates without a GETATTR of the directory (root's mounts only)",
            );
        }
    }
    // The same JSON in --out, with the table and the plots.
    let again: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("results.json")).unwrap()).unwrap();
    assert_eq!(again, all);
    assert!(std::fs::read_to_string(out_dir.join("results.md"))
        .unwrap()
        .contains("| lib |"));
    for png in [
        "create-rate.png",
        "create-rate-by-files.png",
        "everyday.png",
        "shared-directory.png",
    ] {
        let bytes = std::fs::read(out_dir.join(png)).unwrap();
        assert!(bytes.len() > 1000 && &bytes[1..4] == b"PNG", "{png}");
    }
    // Nothing left behind in the work directory.
    assert_eq!(
        std::fs::read_dir(tmp.path().join("work")).unwrap().count(),
        0
    );
}

/// `--time-limit` stops the creates, `--phase-limit` the stats and unlinks, and the
/// library target reports its memory, index and reopen.
#[test]
fn fs_bench_limits_memory_and_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    // No machine creates 5 million files in 0.3 s: the creates are stopped.
    let (stdout, all) = fs_bench(
        tmp.path(),
        &[
            "--files",
            "5000000",
            "--targets",
            "lib",
            "--time-limit",
            "0.3",
            "--phase-limit",
            "0.02",
        ],
    );
    let r = &all["metadata"][0];
    let files = r["files"].as_u64().unwrap();
    assert!(files > 0 && files < 5_000_000, "{r}");
    assert!(r["stopped_after"].as_f64().unwrap() >= 0.3, "{r}");
    assert!(r["create_secs"].as_f64().unwrap() >= 0.3, "{r}");
    for phase in ["stats_done", "unlinks_done"] {
        let done = r[phase].as_u64().unwrap();
        assert!(done > 0 && done <= files, "{phase}: {r}");
    }
    assert!(stdout.contains("creates stopped after"), "{stdout}");
    // Two rows a file (entry and inode), each at least its key in memory.
    assert!(r["index_bytes_per_file"].as_f64().unwrap() > 30.0, "{r}");
    assert!(r["reopen_secs"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["close_secs"].as_f64().unwrap() > 0.0, "{r}");
    for m in ["memory_after_create", "memory_after_reopen"] {
        assert!(r[m]["rss_bytes"].as_u64().unwrap() > 0, "{m}: {r}");
        assert!(
            r[m]["peak_rss_bytes"].as_u64() >= r[m]["rss_bytes"].as_u64(),
            "{m}: {r}"
        );
    }
    assert!(r["peak_anon_bytes"].as_u64().unwrap() > 0, "{r}");
    assert!(stdout.contains("store closed in"), "{stdout}");
    // A bad limit is refused before anything runs.
    for bad in ["--time-limit=soon", "--phase-limit=-1"] {
        let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["fs-bench", "--files", "10", "--targets", "lib", "--dir"])
            .arg(tmp.path().join("work2"))
            .arg(bad)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        let flag = bad.split('=').next().unwrap();
        assert!(err.contains(flag), "{err}");
    }
}

/// `cairn fs-bench` of 2,000 files, 2 intervals, 1 and 2 processes, on `targets`.
fn small_run(dir: &Path, targets: &str) -> (String, serde_json::Value) {
    fs_bench(
        dir,
        &[
            "--files",
            "2000",
            "--intervals",
            "2",
            "--procs",
            "2",
            "--targets",
            targets,
        ],
    )
}

/// A target's run `r` of [`small_run`]: all its files, every rate in `rates` above
/// zero, and its two-process run in the shared directory.
fn assert_small_run(all: &serde_json::Value, r: &serde_json::Value, rates: &[&str]) {
    assert_eq!(r["files"], 2000, "{r}");
    for f in rates {
        assert!(r[*f].as_f64().unwrap() > 0.0, "{f} of {r}");
    }
    let shared = all["shared_directory"].as_array().unwrap();
    assert!(
        shared
            .iter()
            .any(|s| s["target"] == r["target"] && s["files"] == 2000),
        "{shared:?}"
    );
}

/// The null FUSE server target: creates, stats and unlinks through cairn's FUSE layer
/// with nothing stored, from one and two processes; a create costs it the same
/// requests as the mount's (a LOOKUP answered with a negative entry, a CREATE). And
/// the bindfs target where bindfs and a fresh image can be had, else its skip.
#[test]
fn fs_bench_null_and_bindfs_targets() {
    if cairn_fuse::unavailable().is_some() {
        common::skip("fs-bench's null target: FUSE is unavailable here");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (stdout, all) = small_run(tmp.path(), "null,bindfs");
    let runs = all["metadata"].as_array().unwrap();
    match runs.iter().find(|r| r["target"] == "bindfs") {
        Some(b) => assert!(b["unlink_rate"].as_f64().unwrap() > 0.0, "{b}"),
        None => {
            assert!(stdout.contains("bindfs: skipped"), "{stdout}");
            common::skip("fs-bench's bindfs target: no bindfs or no fresh image here");
        }
    }
    let runs = all["metadata"].as_array().unwrap();
    let Some(r) = runs.iter().find(|r| r["target"] == "null") else {
        assert!(stdout.contains("null: skipped"), "{stdout}");
        common::skip("fs-bench's null target: the mount was refused here");
        return;
    };
    assert_small_run(&all, r, &["create_rate", "stat_rate", "unlink_rate"]);
    let create = &r["fuse_requests"]["create"];
    assert!(create["CREATE"].as_f64().unwrap() >= 1.0, "{r}");
}

/// The passthrough_hp target (libfuse's example over a fresh ext4 image, over io_uring)
/// where scripts/build-peers.sh --passthrough-hp built it: creates, stats, lists and
/// unlinks, from one and two processes, through its mount; the report says which open-file
/// limit it ran under. Else its skip, with the reason.
#[test]
fn fs_bench_passthrough_hp_target() {
    if cairn_fuse::unavailable().is_some() {
        common::skip("fs-bench's passthrough_hp target: FUSE is unavailable here");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (stdout, all) = small_run(tmp.path(), "passthrough_hp");
    let runs = all["metadata"].as_array().unwrap();
    let Some(r) = runs.iter().find(|r| r["target"] == "passthrough_hp") else {
        assert!(stdout.contains("passthrough_hp: skipped"), "{stdout}");
        common::skip("fs-bench's passthrough_hp target: not built here, or no fresh image");
        return;
    };
    assert_small_run(
        &all,
        r,
        &["create_rate", "stat_rate", "list_rate", "unlink_rate"],
    );
    let md = std::fs::read_to_string(tmp.path().join("out/results.md")).unwrap();
    assert!(
        md.contains("passthrough_hp") && md.contains("open-file limit"),
        "{md}"
    );
}

/// The cluster target: three `cairn serve` and `cairn mount --cluster`, and the requests
/// the mount sent to the servers per operation. A create is the kernel's LOOKUP of the
/// new name (answered by the client under the directory's listing) and its CREATE,
/// which goes as one `MAKE` that opens the file too (no `OPEN`), then the RELEASE at
/// close (sent in the background); an unlink is one `REMOVE`.
#[test]
fn fs_bench_cluster_counts_requests() {
    if cairn_fuse::unavailable().is_some() {
        common::skip("fs-bench's cluster target: FUSE is unavailable here");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (stdout, all) = fs_bench(
        tmp.path(),
        &["--files", "300", "--intervals", "2", "--targets", "cluster"],
    );
    let runs = all["metadata"].as_array().unwrap();
    let Some(r) = runs.iter().find(|r| r["target"] == "cluster") else {
        assert!(stdout.contains("cluster: skipped"), "{stdout}");
        common::skip("fs-bench's cluster target: the mount was refused here");
        return;
    };
    assert_eq!(r["files"], 300, "{r}");
    for f in ["create_rate", "stat_rate", "unlink_rate"] {
        assert!(r[f].as_f64().unwrap() > 0.0, "{f} of {r}");
    }
    let sent = &r["sent_requests"];
    let per = |phase: &str, kind: &str| sent[phase][kind].as_f64().unwrap_or(0.0);
    // (A stray retry may add a little; a second request per file may not.)
    let near = |v: f64, want: f64| (want..want + 0.05).contains(&v);
    assert!(near(per("create", "MAKE"), 1.0), "{sent}");
    // The kernel's lookup of each new name is answered by the client under the
    // directory's listing: one reaches a server, for the first file.
    assert!(near(per("create", "LOOKUP"), 0.0), "{sent}");
    assert!(near(per("create", "RELEASE"), 1.0), "{sent}");
    assert_eq!(per("create", "OPEN"), 0.0, "{sent}");
    assert!(near(per("unlink", "REMOVE"), 1.0), "{sent}");
    let total: f64 = sent["create"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_f64().unwrap())
        .sum();
    assert!(near(total, 2.0), "{sent}");
    assert!(
        stdout.contains("cluster: server requests per file, create: 2."),
        "{stdout}"
    );
}
