//! GIGA+ splits in process: a directory grows past the threshold and splits over the
//! servers; clients with stale bitmaps are redirected; concurrent creates from several
//! clients while it splits leave every name exactly once.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use cairn_cluster::admin;
use cairn_fs::{Cred, FileSystem, ROOT};
use common::Cluster;

const R: Cred = Cred::ROOT;

fn list(fs: &dyn FileSystem, dir: u64, page: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut cursor: Option<Vec<u8>> = None;
    loop {
        let p = fs.readdir(&R, dir, cursor.as_deref(), page).unwrap();
        let Some(last) = p.last() else { break };
        cursor = Some(last.name.clone());
        out.extend(p.into_iter().map(|e| e.name));
    }
    out
}

#[test]
fn a_directory_splits_over_the_servers() {
    let c = Cluster::start(3, 64);
    let fs = c.client();
    let d = fs.mkdir(&R, ROOT, b"big", 0o755).unwrap();
    let n = 3000;
    for i in 0..n {
        fs.create(&R, d.ino, format!("f{i}").as_bytes(), 0o644)
            .unwrap();
    }
    c.settle(Duration::from_secs(30));
    let st = admin::status(&c.cfg, Duration::from_secs(5));
    let parts: u64 = st.servers.iter().map(|s| s.partitions).sum();
    assert!(parts > 16, "the directory split: {st:#?}");
    assert!(
        st.servers.iter().all(|s| s.up && s.partitions > 1),
        "{st:#?}"
    );
    assert!(st.servers.iter().map(|s| s.splits_done).sum::<u64>() > 10);
    let big = st.largest.iter().find(|l| l.dir == d.ino).expect("listed");
    assert_eq!(big.entries, n);
    // Listing in pages of several sizes: every name once.
    let want: BTreeSet<Vec<u8>> = (0..n).map(|i| format!("f{i}").into_bytes()).collect();
    for page in [1, 7, 100, 5000] {
        let got = list(&fs, d.ino, page);
        assert_eq!(got.len(), n as usize, "page {page}");
        assert_eq!(got.iter().cloned().collect::<BTreeSet<_>>(), want);
    }
    // A new client knows only partition 0: it is redirected, and finds every name.
    let stale = c.client();
    for i in (0..n).step_by(7) {
        let a = stale.lookup(&R, d.ino, format!("f{i}").as_bytes()).unwrap();
        assert_eq!(a.mode & libc::S_IFMT, libc::S_IFREG);
    }
    assert!(stale.redirects() > 0);
    let r1 = stale.redirects();
    for i in (0..n).step_by(7) {
        stale.lookup(&R, d.ino, format!("f{i}").as_bytes()).unwrap();
    }
    assert_eq!(
        stale.redirects(),
        r1,
        "a learnt bitmap is not redirected again"
    );
    // Removing everything empties every partition; the directory can then go.
    for i in 0..n {
        fs.unlink(&R, d.ino, format!("f{i}").as_bytes()).unwrap();
    }
    assert!(list(&fs, d.ino, 100).is_empty());
    assert_eq!(e(fs.lookup(&R, d.ino, b"f1")), libc::ENOENT);
    c.check();
    fs.rmdir(&R, ROOT, b"big").unwrap();
    c.check();
    let st = admin::status(&c.cfg, Duration::from_secs(5));
    assert_eq!(
        st.servers.iter().map(|s| s.partitions).sum::<u64>(),
        1,
        "only the root's"
    );
    c.shutdown();
}

/// Once a directory has its partitions per server, it stops splitting: its partitions
/// grow past the threshold, each server holds its share, and nothing moves any more.
#[test]
fn a_spread_directory_stops_splitting() {
    // Two servers, at most two partitions each: depth 2, partitions 0..4.
    let mut c = Cluster::start(2, 16);
    c.per_server = 2;
    for i in 0..2 {
        c.shutdown_one(i);
        c.restart(i, None);
    }
    let fs = c.client();
    let d = fs.mkdir(&R, ROOT, b"wide", 0o755).unwrap().ino;
    let n = 2000u64;
    for i in 0..n {
        fs.create(&R, d, format!("f{i}").as_bytes(), 0o644).unwrap();
    }
    c.settle(Duration::from_secs(30));
    let st = admin::status(&c.cfg, Duration::from_secs(5));
    let big = st.largest.iter().find(|l| l.dir == d).expect("listed");
    assert_eq!(big.entries, n);
    assert_eq!(
        big.partitions, 4,
        "split to the bound and no further: {st:#?}"
    );
    assert_eq!(st.servers.iter().map(|s| s.splits_done).sum::<u64>(), 3);
    // Each server holds two of the four quarters (the root directory's entry aside).
    for s in &st.servers {
        assert!(
            s.entries.abs_diff(n / 2) < n / 10,
            "server {} holds {} of {n}: {st:#?}",
            s.id,
            s.entries
        );
    }
    // More creates move nothing.
    for i in n..n + 500 {
        fs.create(&R, d, format!("f{i}").as_bytes(), 0o644).unwrap();
    }
    c.settle(Duration::from_secs(30));
    let st = admin::status(&c.cfg, Duration::from_secs(5));
    assert_eq!(st.servers.iter().map(|s| s.splits_done).sum::<u64>(), 3);
    assert_eq!(list(&fs, d, 300).len() as u64, n + 500);
    c.check();
    c.shutdown();
}

fn e<T: std::fmt::Debug>(r: cairn_fs::FsResult<T>) -> i32 {
    r.expect_err("expected an error").0
}

#[test]
fn concurrent_creates_while_splitting() {
    let c = Cluster::start(4, 40);
    let fs = c.client();
    let d = fs.mkdir(&R, ROOT, b"shared", 0o777).unwrap().ino;
    let clients: Vec<_> = (0..4).map(|_| c.client()).collect();
    let per = 400;
    std::thread::scope(|s| {
        for (t, cl) in clients.iter().enumerate() {
            s.spawn(move || {
                for i in 0..per {
                    let name = format!("t{t}-{i}");
                    cl.create(&R, d, name.as_bytes(), 0o644).unwrap();
                    if i % 50 == 0 {
                        // Listings while others create and split.
                        let _ = cl.readdir(&R, d, None, 64).unwrap();
                    }
                }
            });
        }
    });
    let want: BTreeSet<Vec<u8>> = (0..4)
        .flat_map(|t| (0..per).map(move |i| format!("t{t}-{i}").into_bytes()))
        .collect();
    for cl in clients.iter().chain(std::iter::once(&fs)) {
        let got = list(cl, d, 97);
        assert_eq!(got.len(), want.len(), "every name once");
        assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), want);
        for n in want.iter().step_by(13) {
            cl.lookup(&R, d, n).unwrap();
        }
    }
    c.check();
    c.shutdown();
}

/// Threads sharing one client (as the mount's request threads do) create in one
/// directory while it splits: when two of them are redirected by the same split, the
/// second redirect teaches the client nothing new, and must be retried on the route
/// the first one learnt, not reported as an error.
#[test]
fn threads_of_one_client_create_while_splitting() {
    let c = Cluster::start(4, 40);
    let fs = c.client();
    let d = fs.mkdir(&R, ROOT, b"shared", 0o777).unwrap().ino;
    let shared = c.client();
    let (threads, per) = (8, 300);
    std::thread::scope(|s| {
        for t in 0..threads {
            let cl = &shared;
            s.spawn(move || {
                for i in 0..per {
                    let name = format!("t{t}-{i}");
                    cl.create(&R, d, name.as_bytes(), 0o644)
                        .unwrap_or_else(|e| panic!("create {name}: {e}"));
                }
            });
        }
    });
    let want: BTreeSet<Vec<u8>> = (0..threads)
        .flat_map(|t| (0..per).map(move |i| format!("t{t}-{i}").into_bytes()))
        .collect();
    let got = list(&fs, d, 97);
    assert_eq!(got.len(), want.len(), "every name once");
    assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), want);
    c.check();
    c.shutdown();
}

/// A listing in pages while the directory splits under it: every name present for the
/// whole listing is returned exactly once.
#[test]
fn listing_survives_splits() {
    let c = Cluster::start(3, 30);
    let fs = c.client();
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap().ino;
    for i in 0..200 {
        fs.create(&R, d, format!("old{i}").as_bytes(), 0o644)
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut cursor: Option<Vec<u8>> = None;
    let mut round = 0;
    loop {
        let p = fs.readdir(&R, d, cursor.as_deref(), 11).unwrap();
        let Some(last) = p.last() else { break };
        cursor = Some(last.name.clone());
        seen.extend(p.into_iter().map(|e| e.name));
        // Grow the directory (and split it) between pages.
        for k in 0..4 {
            fs.create(&R, d, format!("new{round}-{k}").as_bytes(), 0o644)
                .unwrap();
        }
        round += 1;
    }
    let set: BTreeSet<_> = seen.iter().cloned().collect();
    assert_eq!(set.len(), seen.len(), "no name twice");
    for i in 0..200 {
        assert!(set.contains(format!("old{i}").as_bytes()), "old{i} missing");
    }
    c.check();
    c.shutdown();
}

/// A split directory's new permissions reach every partition before chmod returns:
/// creates on every server are refused, then allowed.
#[test]
fn permissions_of_a_split_directory() {
    let c = Cluster::start(3, 30);
    let fs = c.client();
    let alice = Cred::new(1000, 1000);
    let d = fs.mkdir(&R, ROOT, b"shared", 0o777).unwrap().ino;
    for i in 0..300 {
        fs.create(&R, d, format!("r{i}").as_bytes(), 0o644).unwrap();
    }
    c.settle(Duration::from_secs(30));
    let st = admin::status(&c.cfg, Duration::from_secs(5));
    assert!(
        st.servers.iter().all(|s| s.partitions >= 2),
        "split over every server: {st:#?}"
    );
    let chmod = |m| cairn_fs::SetAttr {
        mode: Some(m),
        ..Default::default()
    };
    fs.setattr(&R, d, &chmod(0o755)).unwrap();
    for i in 0..60 {
        assert_eq!(
            e(fs.create(&alice, d, format!("a{i}").as_bytes(), 0o644)),
            libc::EACCES,
            "a{i}"
        );
    }
    // Search permission too: lookups on every partition are refused.
    fs.setattr(&R, d, &chmod(0o700)).unwrap();
    for i in (0..300).step_by(11) {
        assert_eq!(
            e(fs.lookup(&alice, d, format!("r{i}").as_bytes())),
            libc::EACCES
        );
    }
    fs.setattr(&R, d, &chmod(0o777)).unwrap();
    for i in 0..60 {
        fs.create(&alice, d, format!("a{i}").as_bytes(), 0o644)
            .unwrap();
    }
    c.check();
    c.shutdown();
}

/// Creates in partitions on other servers than the directory's home show in its times
/// within a second (they are sent home in the background).
#[test]
fn times_of_a_split_directory() {
    let c = Cluster::start(3, 20);
    let fs = c.client();
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap().ino;
    for i in 0..200 {
        fs.create(&R, d, format!("x{i}").as_bytes(), 0o644).unwrap();
    }
    c.settle(Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(5));
    let mut last = 0;
    for i in 0..30 {
        last = last.max(
            fs.create(&R, d, format!("y{i}").as_bytes(), 0o644)
                .unwrap()
                .ctime,
        );
    }
    let end = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let a = fs.getattr(d).unwrap();
        if a.mtime >= last {
            assert!(a.ctime >= last);
            break;
        }
        assert!(
            std::time::Instant::now() < end,
            "directory times stay behind"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    c.check();
    c.shutdown();
}

/// Under `SyncMode::Never` the same operations work, and a clean restart keeps them.
#[test]
fn sync_never_and_restart() {
    let mut c = common::Cluster::start_with(2, 50, cairn_cluster::server::SyncMode::Never);
    let fs = c.client();
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap().ino;
    for i in 0..200 {
        fs.create(&R, d, format!("n{i}").as_bytes(), 0o644).unwrap();
    }
    fs.rename(&R, d, b"n1", ROOT, b"moved", 0).unwrap();
    c.settle(Duration::from_secs(30));
    for i in 0..2 {
        c.shutdown_one(i);
        c.restart(i, None);
    }
    let fs = c.client();
    assert_eq!(list(&fs, d, 64).len(), 199);
    assert!(fs.lookup(&R, ROOT, b"moved").is_ok());
    c.check();
    c.shutdown();
}
