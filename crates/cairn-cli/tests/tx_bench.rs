//! `cairn tx-bench` through the built binary, tiny: every experiment runs, the tables
//! print, and the JSON holds sane figures (a snapshot pinned versions and gave them back;
//! every transaction committed).

use std::process::Command;

use serde_json::Value;

#[test]
fn tx_bench_runs_small_and_reports_sane_figures() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("tx.json");
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args([
            "tx-bench",
            "--keys",
            "3000",
            "--accounts",
            "500",
            "--transactions",
            "2000",
        ])
        .args([
            "--threads",
            "1,3",
            "--rounds",
            "1",
            "--engines",
            "cairn",
            "--dir",
        ])
        .arg(dir.path().join("data"))
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
    for title in ["live snapshot", "plain batch", "Transfers per second"] {
        assert!(stdout.contains(title), "no {title:?} table:\n{stdout}");
    }
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let snap = &v["snapshot"];
    assert!(snap["versions_pinned"].as_u64().unwrap() > 0);
    assert!(snap["ns_per_op_with"].as_f64().unwrap() > 0.0);
    assert!(
        snap["disk_bytes_after"].as_u64().unwrap() <= snap["disk_bytes_held"].as_u64().unwrap()
    );
    assert_eq!(v["commit"].as_array().unwrap().len(), 2);
    let runs = v["throughput"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for r in runs {
        assert_eq!(r["transactions"].as_u64(), Some(2000));
        assert!(r["per_sec"].as_f64().unwrap() > 0.0);
    }
}
