//! `cairn replication-bench` through the binary, each experiment tiny: replicas as
//! `cairn serve` processes, the table printed, the JSON written, and no acknowledged
//! create lost. The experiments run one at a time (they share the machine's cores).

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

/// Held by each test while it runs.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `cairn replication-bench EXPERIMENT ARGS` with its work directory and `--json`
/// in `tmp`; checks that it succeeded and left nothing in its work directory. Returns
/// its standard output and its JSON.
fn bench(tmp: &Path, experiment: &str, args: &[&str]) -> (String, serde_json::Value) {
    let json = tmp.join("results.json");
    let work = tmp.join("work");
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("replication-bench")
        .arg(experiment)
        .args(args)
        .arg("--dir")
        .arg(&work)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!work.exists(), "the work directory is left: {work:?}");
    let all = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    (stdout, all)
}

#[test]
fn failover_loses_no_acknowledged_create() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let (out, json) = bench(tmp.path(), "failover", &["--kills", "3", "--every", "2"]);
    assert!(out.contains("| groups × replicas | sync |"), "{out}");
    assert!(out.contains("| 1 × 3 | always | 4 | 3, "), "{out}");
    assert!(out.contains("acknowledged creates lost: 0 "), "{out}");
    assert!(out.contains("cluster check: consistent"), "{out}");
    assert_eq!(json["kills"].as_array().unwrap().len(), 3, "{json}");
    assert!(
        json["counts"]["acknowledged"].as_u64().unwrap() > 0,
        "{json}"
    );
    for k in json["kills"].as_array().unwrap() {
        assert_eq!(k["pauses"].as_array().unwrap().len(), 4, "{k}");
    }
}

#[test]
fn cost_compares_three_replicas_with_one() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let (out, json) = bench(tmp.path(), "cost", &["--seconds", "2", "--rounds", "1"]);
    assert!(out.contains("| round | replicas | sync |"), "{out}");
    assert!(out.contains("| sync | creates/s, 1 replica |"), "{out}");
    let cells = json["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4, "{json}");
    for c in cells {
        assert!(c["creates"].as_u64().unwrap() > 0, "{c}");
        assert!(c["server_cpu_secs"].as_f64().unwrap() > 0.0, "{c}");
        let leaders = c["leader_cpu_secs"].as_f64().unwrap();
        assert!(leaders > 0.0, "{c}");
        // Read a moment after the servers' total: a clock tick of slack.
        assert!(
            leaders <= c["server_cpu_secs"].as_f64().unwrap() + 0.05,
            "{c}"
        );
    }
    assert_eq!(json["ratios"].as_array().unwrap().len(), 2, "{json}");
}

#[test]
fn an_empty_replica_catches_up() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let (out, json) = bench(
        tmp.path(),
        "catch-up",
        &["--entries", "2000", "--before", "2"],
    );
    assert!(out.contains("| entries | sync |"), "{out}");
    assert!(out.contains("| 2000 | always |"), "{out}");
    assert!(out.contains("acknowledged creates lost: 0 "), "{out}");
    assert!(out.contains("cluster check: consistent"), "{out}");
    assert!(json["catch_up_secs"].as_f64().unwrap() > 0.0, "{json}");
    assert!(
        json["verdict"]["acknowledged"].as_u64().unwrap() >= 2000,
        "{json}"
    );
}
