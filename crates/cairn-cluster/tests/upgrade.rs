//! A store written by a build of cluster rows version 1 (FORMAT.md, "Cluster rows"):
//! its servers open it, rewrite its intent rows in the current layout before loading
//! them, and drive every pending intent to its end as that build would have.
//!
//! The fixture `tests/fixtures/intents-v1/s{0,1,2}` is the three stores of a cluster of
//! that build (split threshold 50), stopped with an unfinished intent of every kind on
//! server 0. With every server up, the root got directory `a`, then directories named
//! as [`dir_name_on`] picks them with homes on server 1 (prefix `a`, its names on
//! server 1), 2 (`b`), 0 (`p`, `big`) and 1 (`r`); files `f` and `g` in the first
//! (homes 1), `g` then moved to the root; a link `ul` of `f` in the root, a file `x` in
//! the root and 45 entries `e0`.. in `big`. Then, server 1 stopped, server 0
//! coordinated: a mkdir of a directory with its home on 1 (`m` prefix; left prepared), a
//! link of `f` as `lnk` (prepared), the unlink of `ul` (committed, the link row at 1
//! left), the rmdir of the `r` directory (prepared), the rename of `x` into the `a`
//! directory (prepared), the rename of `g` into the `b` directory (committed, its
//! follow-ups left), a chmod of `p` to 0700 (committed, the copies on 1 and 2 left) and
//! 15 more creates in `big`, whose split toward server 1 was prepared; then servers 0
//! and 2 stopped cleanly.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use cairn_cluster::giga::home_of;
use cairn_cluster::proto::intent_row::Op;
use cairn_cluster::proto::{IntentRow, IntentRowV1, IntentState, ServerRow};
use cairn_cluster::server::{self, SyncMode};
use cairn_cluster::{ClusterConfig, ServerError};
use cairn_fs::{Cred, FileSystem, ROOT};
use common::{dir_name_on, e, Cluster};
use prost::Message;

const R: Cred = Cred::ROOT;
const N: u32 = 3;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for ent in std::fs::read_dir(from).unwrap() {
        let ent = ent.unwrap();
        let dst = to.join(ent.file_name());
        if ent.file_type().unwrap().is_dir() {
            copy_dir(&ent.path(), &dst);
        } else {
            std::fs::copy(ent.path(), &dst).unwrap();
        }
    }
}

/// The fixture's stores in new directories, as the stores of a cluster on free ports
/// (the server rows name the new cluster file; nothing else is changed). Not started.
fn fixture_cluster() -> Cluster {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/intents-v1");
    let addrs = common::free_addrs(N as usize);
    let cfg = ClusterConfig::parse(&common::config_text(&addrs)).unwrap();
    let dirs: Vec<tempfile::TempDir> = (0..N).map(|_| tempfile::tempdir().unwrap()).collect();
    for (i, d) in dirs.iter().enumerate() {
        copy_dir(&fixture.join(format!("s{i}")), d.path());
        let db = cairn::Db::open(d.path()).unwrap();
        let ks = db.keyspace(cairn_cluster::KEYSPACE);
        let mut row = ServerRow::decode(&ks.get([b'C']).unwrap().unwrap()[..]).unwrap();
        assert_eq!((row.server_id, row.rows_version), (i as u32, 0));
        row.cluster_id = cfg.cluster_id();
        ks.put([b'C'], row.encode_to_vec()).unwrap();
        db.close().unwrap();
    }
    Cluster {
        dirs,
        cfg,
        servers: (0..N).map(|_| None).collect(),
        threshold: 50,
        per_server: cairn_cluster::giga::DEFAULT_PARTITIONS_PER_SERVER,
        sync: SyncMode::Always,
    }
}

/// The rows version and the intent rows (raw values) of the stopped server's store.
fn rows(dir: &Path) -> (u32, Vec<Vec<u8>>) {
    let db = cairn::Db::open(dir).unwrap();
    let ks = db.keyspace(cairn_cluster::KEYSPACE);
    let server = ServerRow::decode(&ks.get([b'C']).unwrap().unwrap()[..]).unwrap();
    let intents = ks.prefix([b'T']).map(|kv| kv.unwrap().1.to_vec()).collect();
    db.close().unwrap();
    (server.rows_version, intents)
}

/// The kind and state of each intent row of version 2, in the row's order.
fn kinds(intents: &[Vec<u8>]) -> Vec<(&'static str, IntentState)> {
    intents
        .iter()
        .map(|v| {
            let row = IntentRow::decode(&v[..]).expect("a row of version 2");
            let kind = match row.op {
                Some(Op::Mkdir(_)) => "mkdir",
                Some(Op::Link(_)) => "link",
                Some(Op::Unlink(_)) => "unlink",
                Some(Op::Rmdir(_)) => "rmdir",
                Some(Op::Rename(_)) => "rename",
                Some(Op::Split(_)) => "split",
                Some(Op::DirPerms(_)) => "dir-perms",
                None => "none",
            };
            (kind, row.state())
        })
        .collect()
}

/// The mode bits of directory `dir`'s permissions copy in the stopped server's store.
fn perms_copy(path: &Path, dir: u64) -> Option<u32> {
    let db = cairn::Db::open(path).unwrap();
    let ks = db.keyspace(cairn_cluster::KEYSPACE);
    let key = [&[b'A'][..], &dir.to_be_bytes()].concat();
    let mode = ks
        .get(key)
        .unwrap()
        .map(|v| cairn_cluster::proto::DirPerms::decode(&v[..]).unwrap().mode & 0o7777);
    db.close().unwrap();
    mode
}

#[test]
fn intents_of_rows_version_1_are_upgraded_and_finished() {
    let mut c = fixture_cluster();
    // The fixture is what the previous build wrote: version-1 rows, which the current
    // layout does not decode.
    let (v, old) = rows(c.dirs[0].path());
    assert_eq!((v, old.len()), (0, 8));
    for raw in &old {
        let row = IntentRowV1::decode(&raw[..]).unwrap();
        assert!((1..=7).contains(&row.kind), "{row:?}");
        assert!(IntentRow::decode(&raw[..]).is_err());
    }

    // Server 0 alone: it upgrades its store as it opens it, and can finish nothing
    // (every intent waits for server 1 or 2).
    c.restart(0, None);
    c.shutdown_one(0);
    let (v, new) = rows(c.dirs[0].path());
    assert_eq!(v, 2);
    let mut got = kinds(&new);
    got.sort();
    let mut want = vec![
        ("dir-perms", IntentState::Committed),
        ("link", IntentState::Prepared),
        ("mkdir", IntentState::Prepared),
        ("rename", IntentState::Committed),
        ("rename", IntentState::Prepared),
        ("rmdir", IntentState::Prepared),
        ("split", IntentState::Prepared),
        ("unlink", IntentState::Committed),
    ];
    want.sort();
    assert_eq!(got, want);
    for raw in &new {
        assert!(
            IntentRowV1::decode(&raw[..]).is_err(),
            "old builds refuse it"
        );
    }

    // The whole cluster: every intent is driven to its end.
    for i in 0..N as usize {
        c.restart(i, None);
    }
    c.check();
    let fs = c.client();
    let dir = |name: &[u8]| fs.lookup(&R, ROOT, name).unwrap().ino;
    let (a, b) = (
        dir(&dir_name_on(ROOT, "a", 1, N)),
        dir(&dir_name_on(ROOT, "b", 2, N)),
    );
    let (p, big) = (
        dir(&dir_name_on(ROOT, "p", 0, N)),
        dir(&dir_name_on(ROOT, "big", 0, N)),
    );
    let f = fs.lookup(&R, a, b"f").unwrap().ino;
    // mkdir (prepared): rolled forward, the directory made at its home.
    let m = fs.lookup(&R, ROOT, &dir_name_on(ROOT, "m", 1, N)).unwrap();
    assert!(m.is_dir());
    assert_eq!(home_of(m.ino), 1);
    assert_eq!(fs.getattr(m.ino).unwrap().nlink, 2);
    fs.create(&R, m.ino, b"inside", 0o644).unwrap();
    // link (prepared): rolled forward; unlink (committed): its link row dropped.
    assert_eq!(fs.lookup(&R, ROOT, b"lnk").unwrap().ino, f);
    assert_eq!(e(fs.lookup(&R, ROOT, b"ul")), libc::ENOENT);
    assert_eq!(fs.getattr(f).unwrap().nlink, 2);
    // rmdir (prepared): undone, the directory whole and removable.
    let rname = dir_name_on(ROOT, "r", 1, N);
    let r = dir(&rname);
    fs.create(&R, r, b"x", 0o644).unwrap();
    fs.unlink(&R, r, b"x").unwrap();
    fs.rmdir(&R, ROOT, &rname).unwrap();
    // rename of x (prepared): undone, nothing left held.
    let x = fs.lookup(&R, ROOT, b"x").unwrap().ino;
    assert_eq!(e(fs.lookup(&R, a, b"x")), libc::ENOENT);
    fs.rename(&R, ROOT, b"x", a, b"x", 0).unwrap();
    assert_eq!(fs.lookup(&R, a, b"x").unwrap().ino, x);
    // rename of g (committed): finished.
    assert_eq!(e(fs.lookup(&R, ROOT, b"g")), libc::ENOENT);
    let g = fs.lookup(&R, b, b"g").unwrap().ino;
    assert_eq!(fs.getattr(g).unwrap().nlink, 1);
    // chmod (committed): the home has the new mode.
    assert_eq!(fs.getattr(p).unwrap().mode & 0o7777, 0o700);
    // split (prepared): done, a partition of `big` on server 1, no entry lost.
    let mut names = BTreeSet::new();
    let mut cursor: Option<Vec<u8>> = None;
    for _ in 0..100 {
        let page = fs.readdir(&R, big, cursor.as_deref(), 50).unwrap();
        let Some(last) = page.last() else { break };
        cursor = Some(last.name.clone());
        names.extend(page.into_iter().map(|e| e.name));
    }
    let want: BTreeSet<Vec<u8>> = (0..60).map(|i| format!("e{i}").into_bytes()).collect();
    assert_eq!(names, want);
    let st = cairn_cluster::admin::status(&c.cfg, Duration::from_secs(5));
    assert!(st.servers[1].partitions >= 1, "{st:#?}");
    c.check();

    for i in 0..N as usize {
        c.shutdown_one(i);
    }
    for i in 0..N as usize {
        let (v, intents) = rows(c.dirs[i].path());
        assert_eq!((v, intents.len()), (2, 0), "server {i}");
    }
    // The permissions pushed to the other servers.
    for s in [1, 2] {
        assert_eq!(perms_copy(c.dirs[s].path(), p), Some(0o700), "server {s}");
    }
}

/// A store of a later rows version than this build knows is refused, untouched.
#[test]
fn a_later_rows_version_is_refused() {
    let c = fixture_cluster();
    let path = c.dirs[1].path();
    {
        let db = cairn::Db::open(path).unwrap();
        let ks = db.keyspace(cairn_cluster::KEYSPACE);
        let mut row = ServerRow::decode(&ks.get([b'C']).unwrap().unwrap()[..]).unwrap();
        row.rows_version = 3;
        ks.put([b'C'], row.encode_to_vec()).unwrap();
        db.close().unwrap();
    }
    match server::start(c.opts(1, None)) {
        Err(ServerError::RowsVersion { version: 3, .. }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(rows(path).0, 3);
}

/// Intent rows of version 1 in a store that says version 2 (as a build from before
/// version 2, which does not read the version, writes them into a store it opens) are
/// rewritten too.
#[test]
fn version_1_rows_in_a_version_2_store_are_rewritten() {
    let mut c = fixture_cluster();
    let path = c.dirs[0].path();
    {
        let db = cairn::Db::open(path).unwrap();
        let ks = db.keyspace(cairn_cluster::KEYSPACE);
        let mut row = ServerRow::decode(&ks.get([b'C']).unwrap().unwrap()[..]).unwrap();
        row.rows_version = 2;
        ks.put([b'C'], row.encode_to_vec()).unwrap();
        db.close().unwrap();
    }
    c.restart(0, None);
    c.shutdown_one(0);
    let (v, intents) = rows(c.dirs[0].path());
    assert_eq!(v, 2);
    assert_eq!(kinds(&intents).len(), 8);
}
