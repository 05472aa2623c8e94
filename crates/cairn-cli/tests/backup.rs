//! `cairn checkpoint` and `cairn backup` through the binary: a checkpoint and backups
//! of a store with key-value data and files, an incremental backup, verify (clean and
//! damaged) and restore.

mod common;

use std::path::Path;
use std::process::Output;

use common::cairn;

fn run(db: &Path, args: &[&str], input: Option<&[u8]>) -> Output {
    use std::io::Write;
    let mut cmd = cairn();
    cmd.arg("--db").arg(db).args(args).env_remove("CAIRN_DB");
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("run cairn");
    let mut stdin = child.stdin.take().expect("stdin");
    if let Some(i) = input {
        stdin.write_all(i).expect("write stdin");
    }
    drop(stdin);
    child.wait_with_output().expect("wait for cairn")
}

fn ok(db: &Path, args: &[&str]) -> Vec<u8> {
    ok_with(db, args, None)
}

fn ok_with(db: &Path, args: &[&str], input: Option<&[u8]>) -> Vec<u8> {
    let out = run(db, args, input);
    assert!(
        out.status.success(),
        "cairn {args:?}: {:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn checkpoint_backup_verify_restore_through_the_binary() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let p = |n: &str| tmp.path().join(n).to_str().unwrap().to_owned();
    for i in 0..50 {
        ok(&db, &["put", &format!("k{i:02}"), &format!("v{i}")]);
    }
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let key = String::from_utf8(ok_with(
        &db,
        &["file", "put", "-", "--key", "big"],
        Some(&data),
    ))
    .unwrap();
    assert!(key.contains("big"), "{key}");

    let out = String::from_utf8(ok(&db, &["checkpoint", &p("cp")])).unwrap();
    assert!(out.starts_with("checkpoint of"), "{out}");
    let out = String::from_utf8(ok(&db, &["backup", &p("b0")])).unwrap();
    assert!(out.contains("files copied"), "{out}");
    ok(&db, &["put", "k00", "changed"]);
    let out = String::from_utf8(ok(&db, &["backup", &p("b1"), "--incremental", &p("b0")])).unwrap();
    assert!(out.contains("linked from the base"), "{out}");

    // Each copy holds its own point: key-value data and files.
    for (copy, k00) in [("cp", "v0"), ("b0", "v0"), ("b1", "changed")] {
        let copy_db = tmp.path().join(copy);
        let got = if copy == "cp" {
            ok(&copy_db, &["get", "k00"])
        } else {
            let out = String::from_utf8(ok(&db, &["backup", "verify", &p(copy)])).unwrap();
            assert!(out.contains("no damage found"), "{out}");
            let to = format!("{}-restored", p(copy));
            ok(&db, &["backup", "restore", &p(copy), &to]);
            assert_eq!(ok(Path::new(&to), &["file", "get", "big"]), data);
            ok(Path::new(&to), &["get", "k00"])
        };
        assert_eq!(got, k00.as_bytes(), "{copy}");
    }
    assert_eq!(ok(&tmp.path().join("cp"), &["file", "get", "big"]), data);

    // A destination that exists and is not empty is refused, clearly.
    let out = run(&db, &["backup", &p("b0")], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not empty"),
        "{out:?}"
    );
    // Damage in a backup: verify exits 2 and names the file; restore refuses.
    let shard = std::fs::read_dir(tmp.path().join("b1/shards")).unwrap();
    let mut damaged = None;
    for d in shard {
        for f in std::fs::read_dir(d.unwrap().path()).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|e| e == "seg") && f.metadata().unwrap().len() > 100_000 {
                damaged = Some(f);
            }
        }
    }
    let seg = damaged.expect("a segment of the file's chunks");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[70_000] ^= 1;
    std::fs::write(&seg, &bytes).unwrap();
    let out = run(&db, &["backup", "verify", &p("b1")], None);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(seg.file_name().unwrap().to_str().unwrap())
    );
    let out = run(&db, &["backup", "restore", &p("b1"), &p("r")], None);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(!tmp.path().join("r").exists());
    // Not a backup at all.
    let out = run(&db, &["backup", "verify", &p("cp")], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a backup"),
        "{out:?}"
    );
}

/// A store held by `cairn mount`: `stats`, `verify` and `backup` read it read-only while
/// it is mounted; the restored backup, mounted, holds the files written before.
#[test]
fn backup_of_a_mounted_store() {
    use common::Mount;
    if !Mount::fuse_usable() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (store, mp) = (tmp.path().join("store"), tmp.path().join("mp"));
    std::fs::create_dir(&mp).unwrap();
    let Some(mount) = Mount::new(&store, &mp) else {
        return;
    };
    std::fs::create_dir(mp.join("docs")).unwrap();
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    for i in 0..50 {
        std::fs::write(mp.join(format!("docs/f{i}")), &body[..(i * 6000)]).unwrap();
    }
    // What the mount wrote reaches the files when a file is synced.
    std::fs::File::open(mp.join("docs/f49"))
        .unwrap()
        .sync_all()
        .unwrap();
    let stats = run(&store, &["stats"], None);
    assert!(stats.status.success(), "{stats:?}");
    assert!(String::from_utf8_lossy(&stats.stderr).contains("in use by another process"));
    for args in [&["verify"][..], &["scan"], &["file", "ls"]] {
        let out = run(&store, args, None);
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("in use by another process"));
    }
    // Writes are refused while the mount holds the store.
    let put = run(&store, &["put", "k", "v"], None);
    assert!(!put.status.success(), "{put:?}");
    let b = tmp.path().join("backup");
    let out = run(&store, &["backup", b.to_str().unwrap()], None);
    assert!(out.status.success(), "{out:?}");
    drop(mount);
    let restored = tmp.path().join("restored");
    ok(&store, &["backup", "verify", b.to_str().unwrap()]);
    ok(
        &store,
        &[
            "backup",
            "restore",
            b.to_str().unwrap(),
            restored.to_str().unwrap(),
        ],
    );
    let Some(again) = Mount::new(&restored, &mp) else {
        return;
    };
    for i in 0..50 {
        let got = std::fs::read(mp.join(format!("docs/f{i}"))).unwrap();
        assert_eq!(got, &body[..(i * 6000)], "docs/f{i}");
    }
    drop(again);
}
