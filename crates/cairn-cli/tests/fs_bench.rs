//! Smoke-sized run of `cairn fs-bench` on every target (the FUSE one is skipped with a
//! message where FUSE can't be used).

use std::process::Command;

#[test]
fn fs_bench_smoke() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("fs.json");
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["fs-bench", "--files", "2000", "--intervals", "4", "--dir"])
        .arg(tmp.path().join("work"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{stdout}");
    let runs: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let runs = runs.as_array().unwrap();
    let targets: Vec<&str> = runs.iter().map(|r| r["target"].as_str().unwrap()).collect();
    assert!(
        targets.contains(&"lib") && targets.contains(&"plain"),
        "{targets:?}"
    );
    if !targets.contains(&"fuse") {
        assert!(stdout.contains("fuse: skipped"), "{stdout}");
    }
    for r in runs {
        assert_eq!(r["files"], 2000);
        for f in ["create_rate", "stat_rate", "list_rate", "unlink_rate"] {
            assert!(r[f].as_f64().unwrap() > 0.0, "{f} of {}", r["target"]);
        }
        assert_eq!(r["create_series"].as_array().unwrap().len(), 4);
    }
    // Nothing left behind in the work directory.
    assert_eq!(
        std::fs::read_dir(tmp.path().join("work")).unwrap().count(),
        0
    );
}
