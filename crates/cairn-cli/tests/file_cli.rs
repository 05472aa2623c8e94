//! End-to-end tests of `cairn file ...`: each runs the built binary on a store in a
//! temporary directory, piping binary data through stdin and stdout.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use tempfile::TempDir;

/// Default chunk size of a new store.
const CHUNK: usize = 128 << 10;

struct Store {
    tmp: TempDir,
}

impl Store {
    fn new() -> Store {
        Store {
            tmp: tempfile::tempdir().unwrap(),
        }
    }

    fn dir(&self) -> PathBuf {
        self.tmp.path().join("db")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// Runs `cairn --db DIR ARGS` with `input` on stdin.
    fn run_with(&self, args: &[&str], input: &[u8]) -> Output {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .env_remove("CAIRN_DB")
            .arg("--db")
            .arg(self.dir())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let input = input.to_vec();
        // Fed from a thread so that a large input cannot deadlock against the output.
        let feeder = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let out = child.wait_with_output().unwrap();
        feeder.join().unwrap();
        out
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, b"")
    }

    /// Runs a command that must succeed; returns its stdout.
    fn ok_with(&self, args: &[&str], input: &[u8]) -> Vec<u8> {
        let out = self.run_with(args, input);
        assert!(
            out.status.success(),
            "cairn {args:?} failed with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    fn ok(&self, args: &[&str]) -> Vec<u8> {
        self.ok_with(args, b"")
    }

    fn ok_text(&self, args: &[&str]) -> String {
        String::from_utf8(self.ok(args)).unwrap()
    }
}

/// Bytes of every value, zeros, newlines and invalid UTF-8 included.
fn binary(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if i % 97 == 0 {
                b'\n'
            } else if i % 89 == 0 {
                0
            } else {
                x as u8
            }
        })
        .collect()
}

fn assert_fails(out: &Output, code: i32, msg: &str) {
    assert_eq!(out.status.code(), Some(code), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(msg), "stderr {err:?} lacks {msg:?}");
    assert_eq!(err.lines().count(), 1, "one error line: {err:?}");
}

#[test]
fn put_from_stdin_and_get_to_stdout_round_trip_binary_data() {
    let s = Store::new();
    for (i, len) in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK + 17]
        .into_iter()
        .enumerate()
    {
        let data = binary(len, i as u64);
        let key = format!("bin/{len}");
        let out = s.ok_with(&["file", "put", "-", "--key", &key], &data);
        assert_eq!(String::from_utf8(out).unwrap(), format!("{key}\n"));
        assert_eq!(s.ok(&["file", "get", &key]), data, "{key}");
        assert_eq!(s.ok(&["file", "get", &key, "-"]), data, "{key}");
    }
}

#[test]
fn put_without_key_uses_the_content_hash_and_stores_once() {
    let s = Store::new();
    let data = binary(3 * CHUNK + 5, 1);
    let src = s.path("input.bin");
    fs::write(&src, &data).unwrap();
    let key = String::from_utf8(s.ok(&["file", "put", src.to_str().unwrap()])).unwrap();
    let key = key.trim_end();
    assert_eq!(key.len(), 64);
    assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
    // The same content from stdin gets the same key, and is stored once.
    let again = String::from_utf8(s.ok_with(&["file", "put", "-"], &data)).unwrap();
    assert_eq!(again.trim_end(), key);
    assert_eq!(s.ok_text(&["file", "ls"]), format!("{key}\n"));
    let stat: serde_json::Value =
        serde_json::from_slice(&s.ok(&["file", "stat", key, "--json"])).unwrap();
    assert_eq!(stat["blake3"], key);
    assert_eq!(stat["size"], data.len() as u64);
    assert_eq!(stat["chunks"], 4);
    assert_eq!(stat["chunk_size"], CHUNK as u64);
    assert_eq!(stat["key"], key);
    // Different content, different key.
    let other = String::from_utf8(s.ok_with(&["file", "put", "-"], b"other")).unwrap();
    assert_ne!(other.trim_end(), key);
}

#[test]
fn get_to_a_path_and_cat_ranges() {
    let s = Store::new();
    let data = binary(3 * CHUNK + 100, 2);
    s.ok_with(&["file", "put", "-", "--key", "f"], &data);
    let dest = s.path("out.bin");
    assert!(s
        .ok(&["file", "get", "f", dest.to_str().unwrap()])
        .is_empty());
    assert_eq!(fs::read(&dest).unwrap(), data);
    // No temporary file is left next to it.
    let names: Vec<_> = fs::read_dir(s.tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(names.iter().all(|n| !n.contains("cairn-tmp")), "{names:?}");
    for b in [0, CHUNK, 2 * CHUNK, 3 * CHUNK] {
        for (off, len) in [(b.saturating_sub(2), 4), (b, 1), (b, CHUNK + 3)] {
            let got = s.ok(&[
                "file",
                "cat",
                "f",
                "--offset",
                &off.to_string(),
                "--length",
                &len.to_string(),
            ]);
            let end = (off + len).min(data.len());
            assert_eq!(got, &data[off..end], "cat {off} {len}");
        }
    }
    let tail = s.ok(&["file", "cat", "f", "--offset", &(3 * CHUNK).to_string()]);
    assert_eq!(tail, &data[3 * CHUNK..]);
    let past = s.ok(&["file", "cat", "f", "--offset", "999999999", "--length", "5"]);
    assert!(past.is_empty());
}

/// The names in directory `dir`.
fn dir_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// `file get KEY PATH` writes into a new file of its own next to PATH: a symbolic link
/// planted where a predictable temporary name would be (PATH.cairn-tmp-PID, the process
/// id: known to whoever starts the process) is neither followed nor replaced.
#[test]
fn get_to_a_path_never_follows_a_planted_link() {
    let s = Store::new();
    let data = binary(2 * CHUNK + 7, 5);
    s.ok_with(&["file", "put", "-", "--key", "f"], &data);
    let victim = s.path("victim");
    fs::write(&victim, b"not to be overwritten").unwrap();
    let dest = s.path("out.bin");
    // The shell plants the link at the name of its own process id, then becomes cairn:
    // the same process, the same id.
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"ln -s "$1" "$2.cairn-tmp-$$" && exec "$0" --db "$3" file get f "$2""#)
        .arg(env!("CARGO_BIN_EXE_cairn"))
        .arg(&victim)
        .arg(&dest)
        .arg(s.dir())
        .env_remove("CAIRN_DB")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let victim_now = fs::read(&victim).unwrap();
    assert!(
        victim_now == b"not to be overwritten",
        "written through the planted link: the victim now holds {} bytes",
        victim_now.len()
    );
    assert!(fs::symlink_metadata(&dest).unwrap().file_type().is_file());
    assert!(
        fs::read(&dest).unwrap() == data,
        "the file got is not the file put"
    );
    // Nothing left behind but the planted link, still pointing at the victim.
    let names = dir_names(s.tmp.path());
    let planted: Vec<_> = names.iter().filter(|n| n.contains("cairn-tmp")).collect();
    assert_eq!(planted.len(), 1, "{names:?}");
    assert_eq!(
        names.len(),
        4,
        "db, victim, out.bin and the link: {names:?}"
    );
    assert_eq!(fs::read_link(s.path(planted[0])).unwrap(), victim);
    // A destination that is a symbolic link is replaced by the file, not written through.
    let link = s.path("link.bin");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    s.ok(&["file", "get", "f", link.to_str().unwrap()]);
    assert!(fs::read(&victim).unwrap() == b"not to be overwritten");
    assert!(fs::symlink_metadata(&link).unwrap().file_type().is_file());
    assert!(fs::read(&link).unwrap() == data);
}

/// A `file get KEY PATH` that fails after writing removes what it wrote.
#[test]
fn get_to_a_path_that_fails_leaves_no_temporary_file() {
    let s = Store::new();
    s.ok_with(&["file", "put", "-", "--key", "f"], &binary(CHUNK + 3, 6));
    // A directory in the way: the file is written whole, then the rename fails.
    let dest = s.path("taken");
    fs::create_dir(&dest).unwrap();
    fs::write(dest.join("inside"), b"x").unwrap();
    let out = s.run(&["file", "get", "f", dest.to_str().unwrap()]);
    assert!(!out.status.success(), "{out:?}");
    assert_eq!(dir_names(s.tmp.path()), ["db", "taken"]);
    assert_eq!(dir_names(&dest), ["inside"]);
    // A directory that doesn't exist: nothing is created.
    let out = s.run(&["file", "get", "f", s.path("none/out").to_str().unwrap()]);
    assert!(!out.status.success(), "{out:?}");
    assert_eq!(dir_names(s.tmp.path()), ["db", "taken"]);
}

#[test]
fn stat_ls_and_rm() {
    let s = Store::new();
    s.ok_with(&["file", "put", "-", "--key", "a/1"], b"one");
    s.ok_with(&["file", "put", "-", "--key", "a/2"], b"");
    s.ok_with(&["file", "put", "-", "--key", "b/1"], &binary(CHUNK + 1, 3));
    s.ok_with(&["put", "a/kv", "value"], b"");
    assert_eq!(s.ok_text(&["file", "ls"]), "a/1\na/2\nb/1\n");
    assert_eq!(s.ok_text(&["file", "ls", "--prefix", "a/"]), "a/1\na/2\n");
    let long = s.ok_text(&["file", "ls", "-l", "--prefix", "b"]);
    let cols: Vec<&str> = long.trim_end().split('\t').collect();
    assert_eq!(cols.len(), 4, "{long:?}");
    assert_eq!(cols[0], (CHUNK + 1).to_string());
    assert!(cols[1].ends_with('Z'));
    assert_eq!(cols[2].len(), 64);
    assert_eq!(cols[3], "b/1");
    let text = s.ok_text(&["file", "stat", "a/1"]);
    assert!(text.contains("size:       3 bytes"), "{text}");
    assert!(text.contains("chunks:     1 of 128.0 KiB"), "{text}");
    // The empty file exists.
    let empty: serde_json::Value =
        serde_json::from_slice(&s.ok(&["file", "stat", "a/2", "--json"])).unwrap();
    assert_eq!(empty["size"], 0);
    assert_eq!(empty["chunks"], 0);
    assert!(s.ok(&["file", "get", "a/2"]).is_empty());
    // Removing.
    assert!(s.ok(&["file", "rm", "a/1"]).is_empty());
    assert_eq!(s.ok_text(&["file", "ls"]), "a/2\nb/1\n");
    assert_eq!(s.ok(&["get", "a/kv"]), b"value");
    let stats: serde_json::Value = serde_json::from_slice(&s.ok(&["stats", "--json"])).unwrap();
    assert_eq!(stats["files"]["files"], 2);
    assert_eq!(stats["files"]["bytes"], (CHUNK + 1) as u64);
}

/// Bytes `du` counts for everything under `dir` (allocated blocks).
fn du(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let m = e.metadata().unwrap();
        total += m.blocks() * 512;
        if m.is_dir() {
            total += du(&e.path());
        }
    }
    total
}

#[test]
fn rm_gives_the_space_back_before_it_returns() {
    // What a user does: put a large file, rm it, and look at the store's size once
    // the process has exited, with nothing else running on the store.
    let s = Store::new();
    let src = s.path("big");
    let data = binary(48 << 20, 17);
    fs::write(&src, &data).unwrap();
    s.ok(&["file", "put", src.to_str().unwrap(), "--key", "a"]);
    s.ok_with(&["file", "put", "-", "--key", "small"], b"stays");
    let before = du(&s.dir());
    assert!(before >= data.len() as u64, "{before}");
    let start = std::time::Instant::now();
    assert!(s.ok(&["file", "rm", "a"]).is_empty());
    let took = start.elapsed();
    let after = du(&s.dir());
    assert!(
        after * 10 <= before,
        "{after} bytes left of {before} after rm"
    );
    // Loosely: rm deletes the chunks and drops dead segments, it copies nothing, so
    // even a loaded machine takes well under this (the target, 50 ms for 1 GiB, is
    // measured separately; see README).
    assert!(
        took < std::time::Duration::from_secs(20),
        "rm took {took:?}"
    );
    assert_eq!(s.ok(&["file", "get", "small"]), b"stays");
    assert_fails(&s.run(&["file", "get", "a"]), 1, "file not found");
    // stats: the file store holds next to nothing, and nothing waits.
    let stats: serde_json::Value = serde_json::from_slice(&s.ok(&["stats", "--json"])).unwrap();
    let files = &stats["files"];
    assert_eq!(files["files"], 1);
    assert_eq!(files["pending_gc"], 0);
    let disk = files["disk_bytes"].as_u64().unwrap();
    let live = files["live_bytes"].as_u64().unwrap();
    let reclaimable = files["reclaimable_bytes"].as_u64().unwrap();
    assert_eq!(live + reclaimable, disk, "{files}");
    assert!(disk < 64 << 10, "{files}");
    let ks = stats["keyspaces"].as_array().unwrap();
    let ks1 = ks.iter().find(|k| k["keyspace"] == 1).expect("keyspace 1");
    assert_eq!(ks1["disk_bytes"].as_u64(), Some(disk));
    assert!(stats["total"]["reclaimable_bytes"].as_u64().unwrap() < 64 << 10);
    let table = s.ok_text(&["stats"]);
    assert!(table.contains("reclaimable"), "{table}");
    assert!(table.contains("1 file store"), "{table}");
    assert!(table.contains("file store: 1 files"), "{table}");
}

#[test]
fn missing_files_are_errors_with_status_1() {
    let s = Store::new();
    s.ok_with(&["file", "put", "-", "--key", "there"], b"x");
    for args in [
        &["file", "get", "nope"][..],
        &["file", "cat", "nope", "--offset", "0", "--length", "1"],
        &["file", "rm", "nope"],
        &["file", "stat", "nope"],
        &["file", "verify", "nope"],
    ] {
        let out = s.run(args);
        assert_fails(&out, 1, "file not found: nope");
        assert!(out.stdout.is_empty());
    }
    // A failed get to a path creates nothing.
    let dest = s.path("never.bin");
    assert_fails(
        &s.run(&["file", "get", "nope", dest.to_str().unwrap()]),
        1,
        "file not found",
    );
    assert!(!dest.exists());
    // A missing input file, a missing store.
    assert_fails(
        &s.run(&["file", "put", "/nonexistent/input"]),
        1,
        "cannot open /nonexistent/input",
    );
    let other = Store::new();
    assert_fails(&other.run(&["file", "ls"]), 1, "no store at");
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for shard in fs::read_dir(dir.join("shards")).unwrap() {
        for f in fs::read_dir(shard.unwrap().path()).unwrap() {
            let p = f.unwrap().path();
            if p.extension().is_some_and(|e| e == "seg") {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn verify_reports_a_damaged_chunk_with_status_2() {
    let s = Store::new();
    // Over 1 MiB, so streamed chunk by chunk: damage stays within the one chunk.
    let data = binary(12 * CHUNK, 4);
    s.ok_with(&["file", "put", "-", "--key", "victim"], &data);
    s.ok_with(&["file", "put", "-", "--key", "fine"], &binary(CHUNK, 5));
    let out = s.ok_text(&["file", "verify"]);
    assert!(out.contains("verified 2 file(s)"), "{out}");
    assert!(out.contains("no damage found"), "{out}");
    // Flip a byte in chunk 2 of "victim".
    let needle = &data[2 * CHUNK + 500..2 * CHUNK + 564];
    let mut flipped = 0;
    for p in segment_files(&s.dir()) {
        let mut b = fs::read(&p).unwrap();
        if let Some(pos) = b.windows(needle.len()).position(|w| w == needle) {
            b[pos + 10] ^= 1;
            fs::write(&p, b).unwrap();
            flipped += 1;
        }
    }
    assert_eq!(flipped, 1);
    let out = s.run(&["file", "verify"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("victim: chunk 2:"), "{text}");
    assert!(text.contains("1 damaged file(s)"), "{text}");
    assert_eq!(s.run(&["file", "verify", "victim"]).status.code(), Some(2));
    assert!(s.run(&["file", "verify", "fine"]).status.success());
    // Reading it fails with a clear error, status 1.
    let out = s.run(&["file", "get", "victim"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("reading file victim") && err.contains("corruption"),
        "{err}"
    );
    // The undamaged chunks still read.
    let head = s.ok(&["file", "cat", "victim", "--length", &CHUNK.to_string()]);
    assert_eq!(head, &data[..CHUNK]);
}

#[test]
fn a_reader_that_goes_away_is_not_an_error() {
    let s = Store::new();
    s.ok_with(
        &["file", "put", "-", "--key", "big"],
        &binary(40 * CHUNK, 6),
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .env_remove("CAIRN_DB")
        .arg("--db")
        .arg(s.dir())
        .args(["file", "get", "big"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 10];
    std::io::Read::read_exact(&mut stdout, &mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
}
