//! End-to-end tests of the `cairn` binary: each test runs it as a child process on a
//! store in a temporary directory.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use tempfile::TempDir;

/// A temporary directory holding a store at `<tmp>/db`.
struct Store {
    tmp: TempDir,
}

impl Store {
    /// A fresh temporary directory; the store itself is created by the first `put`.
    fn new() -> Store {
        Store {
            tmp: tempfile::tempdir().expect("create a temporary directory"),
        }
    }

    /// The store's directory.
    fn dir(&self) -> PathBuf {
        self.tmp.path().join("db")
    }

    /// Runs `cairn --db <dir> ARGS`.
    fn run(&self, args: &[&str]) -> Output {
        run_cairn(&self.dir(), args, None)
    }

    /// Runs `cairn --db <dir> ARGS` with `input` on stdin.
    fn run_with_input(&self, args: &[&str], input: &[u8]) -> Output {
        run_cairn(&self.dir(), args, Some(input))
    }

    /// Runs a command that must succeed and returns its stdout.
    fn ok(&self, args: &[&str]) -> Vec<u8> {
        let out = self.run(args);
        assert_success(&out, args);
        out.stdout
    }

    /// Runs a command that must succeed and returns its stdout as text.
    fn ok_text(&self, args: &[&str]) -> String {
        String::from_utf8(self.ok(args)).expect("stdout is UTF-8")
    }

    /// Puts each pair with one `cairn put` each.
    fn put_all(&self, pairs: &[(&str, &str)]) {
        for (k, v) in pairs {
            self.ok(&["put", "--", k, v]);
        }
    }
}

/// The `cairn` command with a clean environment for the store location.
fn cairn_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
    cmd.env_remove("CAIRN_DB");
    cmd
}

/// Runs `cairn --db DIR ARGS`, feeding `input` (or nothing) to stdin.
fn run_cairn(dir: &Path, args: &[&str], input: Option<&[u8]>) -> Output {
    let mut cmd = cairn_command();
    cmd.arg("--db").arg(dir).args(args);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start cairn");
    {
        let mut stdin = child.stdin.take().expect("stdin is piped");
        if let Some(input) = input {
            stdin.write_all(input).expect("write stdin");
        }
    }
    let out = child.wait_with_output().expect("wait for cairn");
    assert_no_panic(&out);
    out
}

/// Fails the test with the command's output unless it exited 0.
fn assert_success(out: &Output, args: &[&str]) {
    assert!(
        out.status.success(),
        "cairn {args:?} failed with {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Checks that the process did not panic.
fn assert_no_panic(out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "cairn panicked: {stderr}");
}

/// Checks the exit status and that stderr is one `cairn: ` line containing `needle`.
fn assert_error(out: &Output, code: i32, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
    assert!(
        stderr.starts_with("cairn: ") && stderr.lines().count() == 1,
        "stderr is not one `cairn: ` line: {stderr:?}"
    );
    assert!(
        stderr.to_lowercase().contains(&needle.to_lowercase()),
        "stderr {stderr:?} does not mention {needle:?}"
    );
}

#[test]
fn put_get_del_round_trip() {
    let s = Store::new();
    s.ok(&["put", "greeting", "hello world"]);
    assert_eq!(s.ok(&["get", "greeting"]), b"hello world");
    s.ok(&["put", "greeting", "bye"]);
    assert_eq!(s.ok(&["get", "greeting"]), b"bye");
    s.ok(&["put", "--", "-dash", "-v"]);
    assert_eq!(s.ok(&["get", "--", "-dash"]), b"-v");
    s.ok(&["put", "empty", ""]);
    assert_eq!(s.ok(&["get", "empty"]), b"");
    s.ok(&["del", "greeting"]);
    assert_error(&s.run(&["get", "greeting"]), 1, "not found");
    // Deleting an absent key is fine.
    s.ok(&["del", "greeting"]);
    s.ok(&["delete", "empty"]);
    assert_eq!(s.ok_text(&["scan"]), "-dash\t-v\n");
}

#[test]
fn get_of_a_missing_key_exits_1_with_a_message() {
    let s = Store::new();
    s.ok(&["put", "present", "1"]);
    let out = s.run(&["get", "absent"]);
    assert!(out.stdout.is_empty());
    assert_error(&out, 1, "key not found: absent");
}

#[test]
fn put_reads_binary_values_from_stdin() {
    let s = Store::new();
    let all_bytes: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    let out = s.run_with_input(&["put", "bin", "-"], &all_bytes);
    assert_success(&out, &["put", "bin", "-"]);
    assert_eq!(s.ok(&["get", "bin"]), all_bytes);
    // Empty stdin stores an empty value.
    assert_success(&s.run_with_input(&["put", "none", "-"], b""), &["put"]);
    assert_eq!(s.ok(&["get", "none"]), b"");
    // In scan output the value is escaped onto one line.
    let line = s.ok_text(&["scan", "--prefix", "bin"]);
    assert_eq!(line.lines().count(), 1);
    assert!(line.starts_with("bin\t\\x00\\x01\\x02"), "{line}");
    assert!(line.contains("\\t\\n\\x0b\\x0c\\r"), "{line}");
    assert!(line.contains(" !\"#$%&'()*+,-./0123456789"), "{line}");
    assert!(line.contains("[\\\\]^_`"), "{line}");
    assert!(line.contains("\\x7f\\x80\\x81"), "{line}");
}

/// Keys of the scan tests, in key order, with their values.
const SCAN_DATA: &[(&str, &str)] = &[
    ("a", "1"),
    ("b", "2"),
    ("ba", "3"),
    ("bb", "4"),
    ("bc", "5"),
    ("c", "6"),
    ("d", "7"),
];

#[test]
fn scan_shows_the_expected_entries_for_every_flag_combination() {
    let s = Store::new();
    s.put_all(SCAN_DATA);
    let model: BTreeMap<&str, &str> = SCAN_DATA.iter().copied().collect();

    // A few literal outputs, independent of the model below.
    assert_eq!(
        s.ok_text(&["scan"]),
        "a\t1\nb\t2\nba\t3\nbb\t4\nbc\t5\nc\t6\nd\t7\n"
    );
    assert_eq!(
        s.ok_text(&["scan", "--prefix", "b", "-k"]),
        "b\nba\nbb\nbc\n"
    );
    assert_eq!(
        s.ok_text(&[
            "scan",
            "--start",
            "b",
            "--end",
            "c",
            "--reverse",
            "--limit",
            "2"
        ]),
        "bc\t5\nbb\t4\n"
    );
    assert_eq!(s.ok_text(&["scan", "--start", "d", "--end", "a"]), "");

    let prefixes = [None, Some("b")];
    let starts = [None, Some("ba"), Some("bz")];
    let ends = [None, Some("bc")];
    let limits = [None, Some(2)];
    for prefix in prefixes {
        for start in starts {
            for end in ends {
                for limit in limits {
                    for reverse in [false, true] {
                        for keys_only in [false, true] {
                            let mut args = vec!["scan".to_string()];
                            let mut expected: Vec<(&str, &str)> = model
                                .iter()
                                .map(|(k, v)| (*k, *v))
                                .filter(|(k, _)| prefix.is_none_or(|p| k.starts_with(p)))
                                .filter(|(k, _)| start.is_none_or(|a| *k >= a))
                                .filter(|(k, _)| end.is_none_or(|b| *k < b))
                                .collect();
                            for (flag, value) in
                                [("--prefix", prefix), ("--start", start), ("--end", end)]
                            {
                                if let Some(value) = value {
                                    args.extend([flag.to_string(), value.to_string()]);
                                }
                            }
                            if reverse {
                                args.push("--reverse".into());
                                expected.reverse();
                            }
                            if let Some(n) = limit {
                                args.extend(["--limit".to_string(), n.to_string()]);
                                expected.truncate(n);
                            }
                            if keys_only {
                                args.push("--keys-only".into());
                            }
                            let expected: String = expected
                                .iter()
                                .map(|(k, v)| {
                                    if keys_only {
                                        format!("{k}\n")
                                    } else {
                                        format!("{k}\t{v}\n")
                                    }
                                })
                                .collect();
                            let args: Vec<&str> = args.iter().map(String::as_str).collect();
                            assert_eq!(s.ok_text(&args), expected, "cairn {args:?}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn scan_escapes_keys_and_values_onto_one_line() {
    let s = Store::new();
    s.ok(&["put", "tab\tkey", "line1\nline2"]);
    s.ok(&["put", "back\\slash", "grüße"]);
    assert_eq!(
        s.ok_text(&["scan"]),
        "back\\\\slash\tgrüße\ntab\\tkey\tline1\\nline2\n"
    );
}

#[test]
fn stats_table_and_json_report_the_key_count() {
    let s = Store::new();
    s.put_all(&SCAN_DATA[..5]);
    s.ok(&["del", "a"]);
    let table = s.ok_text(&["stats"]);
    let total = table
        .lines()
        .find(|l| l.trim_start().starts_with("total"))
        .expect("a total row");
    assert_eq!(total.split_whitespace().nth(1), Some("4"), "{table}");
    assert!(table.lines().next().is_some_and(|h| h.contains("keys")));
    assert!(
        table.contains("format version 1: every key in the shard its hash names"),
        "{table}"
    );

    let json: serde_json::Value =
        serde_json::from_slice(&s.ok(&["stats", "--json"])).expect("stats --json is JSON");
    assert_eq!(json["total"]["keys"], 4);
    let shards = json["shards"].as_array().expect("a shards array");
    assert!(!shards.is_empty());
    let per_shard: u64 = shards.iter().map(|sh| sh["keys"].as_u64().unwrap()).sum();
    assert_eq!(per_shard, 4);
    assert!(json["total"]["disk_bytes"].as_u64().unwrap() > 0);
    assert_eq!(json["format_version"], 1);
    assert_eq!(json["grouped_rows"], serde_json::json!([]));
}

#[test]
fn stats_of_a_file_system_store_show_its_inode_rows_routed_by_group() {
    let s = Store::new();
    let fs = cairn_fs::Fs::open(s.dir()).expect("a file system store");
    fs.close().expect("closed");
    let table = s.ok_text(&["stats"]);
    assert!(
        table.contains(
            "format version 2: numbered rows of keyspace 2 file system tag 'I' in shards by \
             group of 64 numbers, other keys by hash"
        ),
        "{table}"
    );
    let json: serde_json::Value = serde_json::from_slice(&s.ok(&["stats", "--json"])).unwrap();
    assert_eq!(json["format_version"], 2);
    assert_eq!(json["grouped_rows"], serde_json::json!([[2, 73]]));
}

#[test]
fn compact_keeps_the_data() {
    let s = Store::new();
    for round in 0..3 {
        for (k, v) in SCAN_DATA {
            s.ok(&["put", k, &format!("{v}-{round}")]);
        }
    }
    s.ok(&["del", "c"]);
    let out = s.ok_text(&["compact"]);
    assert!(out.starts_with("compacted:"), "{out}");
    assert_eq!(s.ok(&["get", "bb"]), b"4-2");
    assert_eq!(s.ok_text(&["scan", "-k"]), "a\nb\nba\nbb\nbc\nd\n");
    s.ok(&["flush"]);
}

#[test]
fn verify_of_a_clean_store_exits_0() {
    let s = Store::new();
    s.put_all(SCAN_DATA);
    let out = s.ok_text(&["verify"]);
    assert!(out.contains("no damage found"), "{out}");
}

/// The largest segment file of the store in `dir`.
fn largest_segment(dir: &Path) -> PathBuf {
    let mut best: Option<(u64, PathBuf)> = None;
    for shard in fs::read_dir(dir.join("shards")).expect("shards directory") {
        for file in fs::read_dir(shard.unwrap().path()).unwrap() {
            let path = file.unwrap().path();
            let len = fs::metadata(&path).unwrap().len();
            if path.extension().is_some_and(|e| e == "seg")
                && best.as_ref().is_none_or(|b| len > b.0)
            {
                best = Some((len, path));
            }
        }
    }
    best.expect("a segment file").1
}

#[test]
fn verify_reports_a_flipped_byte_and_exits_2() {
    let s = Store::new();
    let value = "v".repeat(2000);
    for i in 0..64 {
        s.ok(&["put", &format!("key{i:03}"), &value]);
    }
    let seg = largest_segment(&s.dir());
    let mut bytes = fs::read(&seg).unwrap();
    assert!(bytes.len() > 4000, "segment too small: {}", bytes.len());
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    fs::write(&seg, &bytes).unwrap();

    let out = s.run(&["verify"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(2),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let name = seg.strip_prefix(s.dir()).unwrap().display().to_string();
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("damaged: ") && l.contains(&name)),
        "{stdout:?} does not name {name}"
    );
    assert!(stdout.contains("damaged place(s) found"), "{stdout}");
}

#[test]
fn a_torn_tail_is_mentioned_by_verify() {
    let s = Store::new();
    s.ok(&["demo", "--records", "1000"]);
    let seg = largest_segment(&s.dir());
    let len = fs::metadata(&seg).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(len - 7)
        .unwrap();
    let out = s.run(&["verify"]);
    assert!(matches!(out.status.code(), Some(0 | 2)), "{out:?}");
    let name = seg.file_name().unwrap().to_string_lossy().into_owned();
    let all = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(all.contains(&name), "{all}");
}

#[cfg(target_os = "linux")]
#[test]
fn a_failed_output_write_is_an_error() {
    let s = Store::new();
    s.ok(&["put", "k", "v"]);
    let out = cairn_command()
        .arg("--db")
        .arg(s.dir())
        .args(["get", "k"])
        .stdout(fs::File::create("/dev/full").unwrap())
        .output()
        .unwrap();
    assert_error(&out, 1, "writing to standard output");
}

#[test]
fn a_second_process_gets_a_clear_locked_error() {
    let s = Store::new();
    s.ok(&["put", "k", "v"]);
    let held = cairn::Db::open(s.dir()).expect("open in-process");
    // Writes are refused while another process holds the store ...
    for args in [&["put", "k2", "v2"][..], &["del", "k"], &["compact"]] {
        assert_error(&s.run(args), 1, "locked");
    }
    // ... and reads see a read-only snapshot of it, and say so once.
    for args in [&["get", "k"][..], &["scan"], &["verify"]] {
        let out = s.run(args);
        assert_success(&out, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr.matches("in use by another process").count(),
            1,
            "{args:?}: {stderr}"
        );
    }
    assert_eq!(s.run(&["get", "k"]).stdout, b"v");
    drop(held);
    s.ok(&["put", "k2", "v2"]);
    assert_eq!(s.ok(&["get", "k2"]), b"v2");
}

#[test]
fn missing_and_garbage_stores_give_clear_errors() {
    let s = Store::new();
    // No such directory: reading commands do not create a store.
    for args in [
        &["get", "k"][..],
        &["scan"],
        &["stats"],
        &["verify"],
        &["del", "k"],
    ] {
        assert_error(&s.run(args), 1, "no store at");
    }
    assert!(!s.dir().exists());

    // A directory with other files is not turned into a store.
    fs::create_dir_all(s.dir()).unwrap();
    fs::write(s.dir().join("notes.txt"), "mine").unwrap();
    assert_error(&s.run(&["get", "k"]), 1, "not a cairn store");
    assert_error(&s.run(&["put", "k", "v"]), 1, "not empty");
    assert_error(&s.run(&["demo", "--records", "10"]), 1, "not empty");
    assert_eq!(
        fs::read_to_string(s.dir().join("notes.txt")).unwrap(),
        "mine"
    );

    // A manifest full of junk.
    let junk: Vec<u8> = (0..100u32).map(|i| (i * 37 % 251) as u8).collect();
    fs::write(s.dir().join("CAIRN"), &junk).unwrap();
    for args in [
        &["get", "k"][..],
        &["put", "k", "v"],
        &["scan"],
        &["stats", "--json"],
        &["compact"],
        &["verify"],
    ] {
        let out = s.run(args);
        assert_error(&out, 1, "CAIRN");
    }

    // --db naming a regular file.
    let file = s.tmp.path().join("plain-file");
    fs::write(&file, "x").unwrap();
    for args in [&["put", "k", "v"][..], &["get", "k"]] {
        let out = run_cairn(&file, args, None);
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("cairn: "));
    }
}

#[test]
fn oversized_keys_are_rejected_cleanly() {
    let s = Store::new();
    let key = "k".repeat(cairn::MAX_KEY_LEN + 1);
    assert_error(&s.run(&["put", &key, "v"]), 1, "exceeds the limit");
}

#[test]
fn the_store_location_comes_from_cairn_db() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("from-env");
    let status = cairn_command()
        .env("CAIRN_DB", &dir)
        .args(["put", "k", "v"])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(run_cairn(&dir, &["get", "k"], None).stdout, b"v");
}

#[test]
fn usage_errors_and_help() {
    let out = cairn_command().arg("--no-such-flag").output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    let out = cairn_command().arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Exit status"), "{help}");
    let out = cairn_command().args(["help", "scan"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("\\xNN"));
}

#[test]
fn demo_runs_its_checks_and_can_be_repeated() {
    let s = Store::new();
    let out = s.ok_text(&["demo", "--records", "2000"]);
    for step in [
        "put",
        "get",
        "scan all",
        "prefix scan",
        "flush",
        "compact",
        "reopen",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(step)),
            "no {step} in {out}"
        );
    }
    assert!(out.contains("all checks passed"), "{out}");
    assert!(out.contains("index bytes per key"), "{out}");
    // The store is left for inspection, and a second demo may replace it.
    let json: serde_json::Value = serde_json::from_slice(&s.ok(&["stats", "--json"])).unwrap();
    assert_eq!(json["total"]["keys"], 1800);
    let out = s.ok_text(&["demo", "--records", "500", "--value-size", "10"]);
    assert!(out.contains("all checks passed"), "{out}");
}

#[test]
fn a_closed_stdout_ends_scan_quietly() {
    let s = Store::new();
    s.ok(&["demo", "--records", "5000"]);
    let mut child = cairn_command()
        .arg("--db")
        .arg(s.dir())
        .arg("scan")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first.len(), 16 + 1 + 100 + 1, "{first:?}");
    // The reader is dropped here, like `cairn scan | head -1`.
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
