//! Creates sent together — in batches (`MakeBatch`: what one client's threads make
//! while requests to their server are in flight) or as messages on a stream
//! (`MakeStream`, made by the server in groups of what arrived together): each still
//! gets its own answer — its own inode, EEXIST for a name another create took, a
//! redirect while the directory splits, a permission error for a caller who may not
//! write there.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use std::time::Duration;

use cairn_cluster::Creates;
use cairn_fs::{Cred, FileSystem, ROOT};
use common::Cluster;

const R: Cred = Cred::ROOT;
const THREADS: usize = 16;
const EACH: usize = 150;
const DUPS: usize = 40;

#[test]
fn creates_from_many_threads_go_in_batches_each_with_its_own_answer() {
    each_create_gets_its_own_answer(Creates::Batch);
}

#[test]
fn creates_from_many_threads_go_on_streams_each_with_its_own_answer() {
    each_create_gets_its_own_answer(Creates::Stream);
}

fn each_create_gets_its_own_answer(how: Creates) {
    // `--sync always`: each request waits for a sync, so with 16 threads creates queue
    // behind the 4 requests a client keeps in flight to a server (and arrive at a
    // server's stream while it syncs the group before). A low split threshold: the
    // directory splits while they go.
    let c = Cluster::start(2, 64);
    let fs = c.client_with(Duration::from_secs(10), how);
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap().ino;
    // A directory only root may write into.
    let locked = fs.mkdir(&R, ROOT, b"locked", 0o755).unwrap().ino;
    let user = Cred {
        uid: 1000,
        gid: 1000,
        groups: cairn_fs::Groups::new(&[]),
    };
    let made: Mutex<BTreeMap<Vec<u8>, u64>> = Mutex::new(BTreeMap::new());
    let dup_wins: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (fs, made, dup_wins, user) = (&fs, &made, &dup_wins, &user);
            s.spawn(move || {
                for k in 0..EACH {
                    let name = format!("t{t}-{k}").into_bytes();
                    let a = fs.create(&R, d, &name, 0o644).unwrap();
                    made.lock().unwrap().insert(name.clone(), a.ino);
                    if k < DUPS {
                        // Every thread creates the same names: one wins each.
                        let dup = format!("dup-{k}").into_bytes();
                        match fs.create(&R, d, &dup, 0o644) {
                            Ok(a) => {
                                made.lock().unwrap().insert(dup.clone(), a.ino);
                                dup_wins.lock().unwrap().push(dup);
                            }
                            Err(e) => assert_eq!(e.0, libc::EEXIST, "{dup:?}"),
                        }
                    }
                    if k % 50 == 0 {
                        let e = fs.create(user, locked, &name, 0o644).unwrap_err();
                        assert_eq!(e.0, libc::EACCES);
                    }
                }
            });
        }
    });
    let (batches, batched) = fs.batches();
    let (streams, streamed) = fs.streams();
    // Every create but the two mkdirs (mkdirs always go alone).
    let creates = (THREADS * (EACH + DUPS + EACH.div_ceil(50))) as u64;
    match how {
        Creates::Batch => {
            assert!(
                batches > 0 && batched >= 2 * batches,
                "no creates went together: {batches} batches of {batched}"
            );
            assert_eq!(streams, 0);
        }
        _ => {
            assert_eq!(batches, 0, "no batches beside streams");
            // One stream per server, opened at the first create there.
            assert_eq!(streams, 2, "one stream per server");
            // Redirected creates are sent again: at least one message per create.
            assert!(streamed >= creates, "{streamed} streamed of {creates}");
        }
    }
    let made = made.into_inner().unwrap();
    let mut wins = dup_wins.into_inner().unwrap();
    wins.sort();
    let mut want: Vec<Vec<u8>> = (0..DUPS).map(|k| format!("dup-{k}").into_bytes()).collect();
    want.sort();
    assert_eq!(wins, want, "each duplicated name is created exactly once");
    assert_eq!(made.len(), THREADS * EACH + DUPS);
    let inos: BTreeSet<u64> = made.values().copied().collect();
    assert_eq!(inos.len(), made.len(), "every create its own inode");
    // Each reply was the answer to its own create.
    let fresh = c.client();
    for (name, ino) in &made {
        assert_eq!(fresh.lookup(&R, d, name).unwrap().ino, *ino, "{name:?}");
    }
    assert!(fs.readdir(&R, locked, None, 10).unwrap().is_empty());
    assert!(fresh.redirects() > 0, "the directory split");
    c.check();
}

/// A server built before streamed creates answers `MakeStream` UNIMPLEMENTED (as a
/// tonic server without the method does): a client that streams by default then sends
/// that server its creates as requests and batches — none lost, none made twice — and
/// goes on streaming to the server that takes streams.
#[test]
fn a_server_without_streams_gets_its_creates_as_batches() {
    let mut c = Cluster::start(2, 64);
    c.shutdown_one(1);
    let mut o = c.opts(1, None);
    o.hooks.without_streams = true;
    c.servers[1] = Some(cairn_cluster::server::start(o).unwrap());
    let fs = c.client_with(Duration::from_secs(10), Creates::Stream);
    let d = fs.mkdir(&R, ROOT, b"d", 0o755).unwrap().ino;
    let made: Mutex<BTreeMap<Vec<u8>, u64>> = Mutex::new(BTreeMap::new());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (fs, made) = (&fs, &made);
            s.spawn(move || {
                for k in 0..EACH {
                    let name = format!("t{t}-{k}").into_bytes();
                    let a = fs.create(&R, d, &name, 0o644).unwrap();
                    made.lock().unwrap().insert(name, a.ino);
                }
            });
        }
    });
    let made = made.into_inner().unwrap();
    assert_eq!(made.len(), THREADS * EACH);
    let inos: BTreeSet<u64> = made.values().copied().collect();
    assert_eq!(inos.len(), made.len(), "every create its own inode");
    let (streams, _) = fs.streams();
    let (batches, batched) = fs.batches();
    // One stream to each server: server 1 refused its one, and no other was tried.
    assert_eq!(streams, 2, "streams opened");
    assert!(
        batches > 0 && batched >= 2 * batches,
        "server 1's creates went in batches: {batches} of {batched}"
    );
    let status = cairn_cluster::admin::status(&c.cfg, Duration::from_secs(5));
    let held: Vec<u64> = status.servers.iter().map(|s| s.entries).collect();
    assert!(held.iter().all(|&e| e > 0), "entries per server {held:?}");
    let fresh = c.client();
    for (name, ino) in &made {
        assert_eq!(fresh.lookup(&R, d, name).unwrap().ino, *ino, "{name:?}");
    }
    c.check();
}
