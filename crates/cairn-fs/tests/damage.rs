//! Damaged rows: rows of the file system's layout (FORMAT.md, "File system rows")
//! written straight into the store with keys or values too short for what their tag
//! says they hold. Opening the file system must fail with `EIO` or succeed, its check
//! must report the damage, and no operation may panic.

use cairn::{Db, Keyspace};
use cairn_fs::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const R: Cred = Cred::ROOT;

// Row tags (FORMAT.md).
const LEASE: u8 = b'N';
const DENTRY: u8 = b'D';
const INODE: u8 = b'I';
const CHUNK: u8 = b'C';
const XATTR: u8 = b'X';
const ORPHAN: u8 = b'O';

fn key(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut k = vec![tag];
    for p in parts {
        k.extend_from_slice(p);
    }
    k
}

fn be(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

/// A store with a small tree: a directory, an inline file, a chunked file with an
/// extended attribute, a symbolic link; no deferred directory times left unwritten.
struct Tree {
    _dir: tempfile::TempDir,
    db: Db,
    /// The file system on it, between cases.
    fs: Option<Fs>,
    d: u64,
    small: u64,
    big: u64,
}

impl Tree {
    fn new() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let fs = Fs::open(dir.path()).unwrap();
        let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap().ino;
        let small = fs.create(&R, d, b"s", 0o644).unwrap().ino;
        fs.write(small, 0, b"small file").unwrap();
        let big = fs.create(&R, ROOT, b"b", 0o644).unwrap().ino;
        fs.write(big, 0, &vec![7u8; 3 * CHUNK_SIZE as usize])
            .unwrap();
        fs.setxattr(&R, big, b"user.a", b"value", 0).unwrap();
        fs.symlink(&R, ROOT, b"l", b"d/s").unwrap();
        fs.fsync(ROOT).unwrap();
        assert!(fs.check().unwrap().is_empty());
        let db = fs.db().clone();
        Tree {
            _dir: dir,
            db,
            fs: Some(fs),
            d,
            small,
            big,
        }
    }

    fn ks(&self) -> Keyspace {
        self.db.keyspace(KEYSPACE)
    }

    fn fs(&self) -> &Fs {
        self.fs.as_ref().unwrap()
    }

    /// Writes `rows`, then: the check of the file system open before must not panic
    /// and returns its report; the file system is then made anew on the store (what
    /// `Fs::open` does after opening the engine), which must give `EIO` or open, and
    /// then check and serve reads without panicking. Finally the rows are put back as
    /// they were and the tree must be consistent again. Returns the report of the
    /// first check and, if the file system opened again, that of its check.
    fn damage(&mut self, rows: &[(Vec<u8>, Vec<u8>)]) -> (CheckReport, Option<CheckReport>) {
        let ks = self.ks();
        let before: Vec<_> = rows
            .iter()
            .map(|(k, _)| ks.get(k).unwrap().map(|v| v.to_vec()))
            .collect();
        for (k, v) in rows {
            ks.put(k, v).unwrap();
        }
        let report = self.fs().check().expect("check of a damaged tree");
        self.fs = None;
        let reopened = match Fs::new(self.db.clone()) {
            Ok(fs) => {
                let again = fs.check().expect("check of a damaged tree, reopened");
                exercise(&fs);
                Some(again)
            }
            Err(e) => {
                assert_eq!(e, Errno(libc::EIO));
                None
            }
        };
        for ((k, _), v) in rows.iter().zip(before) {
            match v {
                Some(v) => ks.put(k, v).unwrap(),
                None => ks.delete(k).unwrap(),
            }
        }
        let fs = Fs::new(self.db.clone()).unwrap();
        let after = fs.check().unwrap();
        assert!(after.is_empty(), "repaired, but: {after:?}");
        fs.fsync(ROOT).unwrap();
        self.fs = Some(fs);
        (report, reopened)
    }
}

/// Reads all over the tree, each of which may fail but must not panic.
fn exercise(fs: &Fs) {
    let _ = fs.statfs();
    let mut dirs = vec![ROOT];
    let mut seen = 0;
    while let Some(d) = dirs.pop() {
        let _ = fs.getattr(d);
        let Ok(entries) = fs.readdir(d, None, 1000) else {
            continue;
        };
        for e in entries {
            seen += 1;
            if seen > 100 {
                return;
            }
            let _ = fs.lookup(&R, d, &e.name);
            let Ok(a) = fs.getattr(e.ino) else { continue };
            let _ = fs.read(e.ino, 0, 4096);
            let _ = fs.read(e.ino, CHUNK_SIZE - 5, 10);
            let _ = fs.readlink(e.ino);
            let _ = fs.listxattr(e.ino);
            let _ = fs.getxattr(e.ino, b"user.a");
            if a.is_dir() && e.ino != d {
                dirs.push(e.ino);
            }
        }
    }
}

/// Every row of the tree's kinds, as (key, value) of a real row (or, for an orphan, one
/// of the right shape).
fn templates(t: &Tree) -> Vec<(&'static str, Vec<u8>, Vec<u8>)> {
    let ks = t.ks();
    let real = |k: Vec<u8>| {
        let v = ks.get(&k).unwrap().expect("a row of the tree").to_vec();
        (k, v)
    };
    let mut out = Vec::new();
    let (k, v) = real(key(LEASE, &[]));
    out.push(("lease", k, v));
    let (k, v) = real(key(DENTRY, &[&be(t.d), &0u32.to_be_bytes(), b"s"]));
    out.push(("entry", k, v));
    let (k, v) = real(key(INODE, &[&be(t.small)]));
    out.push(("inode", k, v));
    let (k, v) = real(key(INODE, &[&be(ROOT)]));
    out.push(("root inode", k, v));
    let (k, v) = real(key(CHUNK, &[&be(t.big), &be(1)]));
    out.push(("chunk", k, v));
    let (k, v) = real(key(XATTR, &[&be(t.big), b"user.a"]));
    out.push(("attribute", k, v));
    out.push(("orphan", key(ORPHAN, &[&be(t.small)]), Vec::new()));
    out
}

#[test]
fn truncated_keys_are_reported_and_never_panic() {
    let mut t = Tree::new();
    for (what, k, v) in templates(&t) {
        // A key of a row named by a number and a name (an entry, an attribute) cut
        // within its name is another valid key: only cuts before the name are damage.
        let name_at = match k[0] {
            DENTRY => 13,
            XATTR => 9,
            _ => k.len() - 1,
        };
        for len in 0..=name_at {
            let short = k[..len].to_vec();
            let (report, again) = t.damage(&[(short.clone(), v.clone())]);
            let again = again.unwrap_or_else(|| panic!("{what} key cut to {len}: refused"));
            // A row under the inode tag that is not the tag and an 8-byte number is
            // never read, by the file system or its check (the engine visits inode rows
            // by number only).
            if k[0] == INODE && len > 0 {
                continue;
            }
            assert!(
                !report.is_empty() && !again.is_empty(),
                "{what} key cut to {len} ({short:02x?}) not reported"
            );
        }
    }
}

#[test]
fn truncated_values_are_reported_and_never_panic() {
    let mut t = Tree::new();
    for (what, k, v) in templates(&t) {
        // Values whose length is free (chunks, attributes, orphans) can't be short.
        let fixed = match k[0] {
            LEASE => 8,
            DENTRY => 12,
            INODE => 61,
            _ => continue,
        };
        for len in 0..fixed {
            let (report, again) = t.damage(&[(k.clone(), v[..len].to_vec())]);
            assert!(
                !report.is_empty(),
                "{what} value cut to {len} bytes not reported"
            );
            // Without the lease the free inode numbers are unknown, without the root
            // there is no tree: the file system refuses to open.
            let refuses = k[0] == LEASE || k == key(INODE, &[&be(ROOT)]);
            assert_eq!(again.is_none(), refuses, "{what} value cut to {len} bytes");
            if let Some(again) = again {
                assert!(!again.is_empty(), "{what} value cut to {len}: reopened");
            }
        }
    }
    // A lease too long, or below the first number a file can have, is damage too.
    let lease = key(LEASE, &[]);
    for v in [
        vec![0u8; 9],
        0u64.to_le_bytes().to_vec(),
        1u64.to_le_bytes().to_vec(),
    ] {
        let (report, again) = t.damage(&[(lease.clone(), v.clone())]);
        assert!(!report.is_empty() && again.is_none(), "lease {v:02x?}");
    }
}

#[test]
fn operations_on_damaged_rows_fail_with_eio() {
    let t = Tree::new();
    let ks = t.ks();
    // An entry whose value is too short is damage, not a missing name.
    let entry = key(DENTRY, &[&be(t.d), &0u32.to_be_bytes(), b"s"]);
    let good = ks.get(&entry).unwrap().unwrap().to_vec();
    ks.put(&entry, &good[..5]).unwrap();
    let fs = t.fs();
    assert_eq!(fs.lookup(&R, t.d, b"s"), Err(Errno(libc::EIO)));
    assert_eq!(fs.unlink(&R, t.d, b"s"), Err(Errno(libc::EIO)));
    assert_eq!(fs.readdir(t.d, None, 10), Err(Errno(libc::EIO)));
    ks.put(&entry, &good).unwrap();
    assert_eq!(fs.lookup(&R, t.d, b"s").unwrap().ino, t.small);
    // A chunk key cut short: truncating the file reports it.
    let bad = key(CHUNK, &[&be(t.big), &[0, 0, 1]]);
    ks.put(&bad, b"x").unwrap();
    let to = |n| SetAttr {
        size: Some(n),
        ..Default::default()
    };
    assert_eq!(fs.setattr(&R, t.big, &to(0)), Err(Errno(libc::EIO)));
    assert_eq!(fs.setattr(&R, t.big, &to(10)), Err(Errno(libc::EIO)));
    assert_eq!(fs.getattr(t.big).unwrap().size, 3 * CHUNK_SIZE);
    ks.delete(&bad).unwrap();
    fs.setattr(&R, t.big, &to(10)).unwrap();
    assert_eq!(fs.read(t.big, 0, 100).unwrap(), [7u8; 10]);
    assert!(fs.check().unwrap().is_empty());
    // An inode row too short.
    let inode = key(INODE, &[&be(t.small)]);
    let good = ks.get(&inode).unwrap().unwrap().to_vec();
    ks.put(&inode, &good[..30]).unwrap();
    assert_eq!(fs.getattr(t.small), Err(Errno(libc::EIO)));
    assert_eq!(fs.read(t.small, 0, 10), Err(Errno(libc::EIO)));
    ks.put(&inode, &good).unwrap();
    assert_eq!(fs.read(t.small, 0, 100).unwrap(), b"small file");
    // An inode row whose size is beyond the largest file: reported, and read no
    // further than i64::MAX.
    let inode = key(INODE, &[&be(t.big)]);
    let good = ks.get(&inode).unwrap().unwrap().to_vec();
    let mut huge = good.clone();
    huge[21..29].copy_from_slice(&u64::MAX.to_le_bytes());
    ks.put(&inode, &huge).unwrap();
    assert_eq!(fs.getattr(t.big).unwrap().size, u64::MAX);
    let report = fs.check().unwrap();
    assert!(
        report.iter().any(|p| p.contains("beyond the largest file")),
        "{report:?}"
    );
    assert_eq!(fs.read(t.big, u64::MAX - 10, 5).unwrap(), b"");
    assert_eq!(fs.read(t.big, 5, 3).unwrap(), [7u8; 3]);
    ks.put(&inode, &good).unwrap();
    assert!(fs.check().unwrap().is_empty());
}

#[test]
fn orphan_rows_of_linked_inodes_are_not_freed() {
    let mut t = Tree::new();
    for ino in [ROOT, t.d, t.small, t.big] {
        let (report, again) = t.damage(&[(key(ORPHAN, &[&be(ino)]), Vec::new())]);
        for r in [Some(report), again] {
            let r = r.expect("opens");
            assert!(
                r.iter().any(|p| p.contains("orphan row")),
                "orphan row of {ino}: {r:?}"
            );
        }
    }
    // Each inode survived its reopen with its orphan row (`damage` checks the tree).
    let fs = t.fs();
    assert_eq!(fs.read(t.small, 0, 100).unwrap(), b"small file");
    assert_eq!(fs.getattr(t.big).unwrap().size, 3 * CHUNK_SIZE);
}

#[test]
fn a_store_with_every_kind_of_damage_opens_or_fails_with_eio() {
    let dir = tempfile::tempdir().unwrap();
    let (d, small, big);
    {
        let fs = Fs::open(dir.path()).unwrap();
        d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap().ino;
        small = fs.create(&R, d, b"s", 0o644).unwrap().ino;
        big = fs.create(&R, ROOT, b"b", 0o644).unwrap().ino;
        fs.write(big, 0, &vec![1u8; 2 * CHUNK_SIZE as usize])
            .unwrap();
        let ks = fs.db().keyspace(KEYSPACE);
        let rows: Vec<Vec<u8>> = vec![
            vec![],
            vec![DENTRY],
            key(DENTRY, &[&be(d)[..5]]),
            key(DENTRY, &[&be(d), &[0, 0]]),
            key(DENTRY, &[&be(d), &0u32.to_be_bytes()]),
            key(CHUNK, &[&be(big)[..3]]),
            key(CHUNK, &[&be(big), &[0, 1]]),
            key(XATTR, &[&be(big)[..7]]),
            key(ORPHAN, &[&be(small)[..4]]),
            key(b'Z', &[b"zz"]),
        ];
        for k in &rows {
            ks.put(k, b"").unwrap();
        }
        ks.put(key(DENTRY, &[&be(d), &0u32.to_be_bytes(), b"x"]), [1, 2, 3])
            .unwrap();
        fs.close().unwrap();
    }
    let fs = Fs::open(dir.path()).unwrap();
    let report = fs.check().unwrap();
    assert!(report.len() >= 11, "{report:#?}");
    exercise(&fs);
    assert_eq!(fs.read(big, 0, 3).unwrap(), [1, 1, 1]);
    fs.close().unwrap();
    // And with the lease cut short the store is refused, with EIO.
    {
        let db = Fs::options().open(dir.path()).unwrap();
        db.keyspace(KEYSPACE).put([LEASE], [1, 2, 3]).unwrap();
        db.close().unwrap();
    }
    assert_eq!(Fs::open(dir.path()).err(), Some(Errno(libc::EIO)));
}

#[test]
fn random_short_rows_of_every_tag_never_panic() {
    let t = std::cell::RefCell::new(Tree::new());
    let tags = prop_oneof![
        Just(LEASE),
        Just(DENTRY),
        Just(INODE),
        Just(CHUNK),
        Just(XATTR),
        Just(ORPHAN),
        any::<u8>(),
    ];
    let row = (
        tags,
        prop::collection::vec(any::<u8>(), 0..20),
        prop::collection::vec(any::<u8>(), 0..70),
    );
    let mut runner = TestRunner::new(Config {
        cases: 200,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&prop::collection::vec(row, 1..4), |rows| {
            let rows: Vec<_> = rows
                .into_iter()
                .map(|(tag, tail, v)| (key(tag, &[&tail]), v))
                .collect();
            t.borrow_mut().damage(&rows);
            Ok(())
        })
        .unwrap();
}
