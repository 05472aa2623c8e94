//! Several clients run random namespace operations at once over directories on every
//! server (creates, mkdirs, links, unlinks, rmdirs, renames of files and directories
//! across servers, exchanges) while directories split; afterwards the namespace is
//! consistent on every server and every client sees the same listing.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use cairn_fs::{Cred, Errno, FileSystem, RENAME_EXCHANGE, RENAME_NOREPLACE, ROOT};
use common::Cluster;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const R: Cred = Cred::ROOT;

fn list(fs: &dyn FileSystem, dir: u64) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut cursor: Option<Vec<u8>> = None;
    loop {
        let p = fs.readdir(&R, dir, cursor.as_deref(), 33).unwrap();
        let Some(last) = p.last() else { break };
        cursor = Some(last.name.clone());
        out.extend(p.into_iter().map(|e| e.name));
    }
    out
}

#[test]
fn random_operations_from_many_clients() {
    let c = Cluster::start(3, 24);
    let fs = c.client();
    let dirs: Vec<u64> = (0..5)
        .map(|i| {
            fs.mkdir(&R, ROOT, format!("d{i}").as_bytes(), 0o777)
                .unwrap()
                .ino
        })
        .collect();
    let clients: Vec<_> = (0..4).map(|_| c.client()).collect();
    std::thread::scope(|s| {
        for (t, cl) in clients.iter().enumerate() {
            let dirs = &dirs;
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(t as u64);
                for _ in 0..300 {
                    let d = dirs[rng.random_range(0..dirs.len())];
                    let d2 = dirs[rng.random_range(0..dirs.len())];
                    let n = format!("n{}", rng.random_range(0..40)).into_bytes();
                    let n2 = format!("n{}", rng.random_range(0..40)).into_bytes();
                    let r: Result<(), Errno> = match rng.random_range(0..10) {
                        0..=2 => cl.create(&R, d, &n, 0o644).map(drop),
                        3 => cl.mkdir(&R, d, &n, 0o755).map(drop),
                        4 => cl.rename(&R, d, &n, d2, &n2, 0),
                        5 => cl.rename(&R, d, &n, d2, &n2, RENAME_EXCHANGE),
                        6 => cl.unlink(&R, d, &n),
                        7 => cl.rmdir(&R, d, &n),
                        8 => cl
                            .lookup(&R, d, &n)
                            .and_then(|a| cl.link(&R, a.ino, d2, &n2))
                            .map(drop),
                        _ => cl.lookup(&R, d, &n).and_then(|a| {
                            if a.is_dir() {
                                // A file into a subdirectory, and out again.
                                cl.rename(&R, d2, &n2, a.ino, b"inner", RENAME_NOREPLACE)
                            } else {
                                cl.write(&R, a.ino, 0, b"x").map(drop)
                            }
                        }),
                    };
                    match r {
                        Ok(()) => {}
                        Err(Errno(
                            libc::ENOENT
                            | libc::EEXIST
                            | libc::EISDIR
                            | libc::ENOTDIR
                            | libc::ENOTEMPTY
                            | libc::EPERM
                            | libc::EINVAL,
                        )) => {}
                        Err(e) => panic!("client {t}: unexpected error {e}"),
                    }
                }
            });
        }
    });
    c.check();
    // Every client lists the same names, each once, and finds each by lookup; over
    // the whole tree, link counts as getattr shows them match the entries.
    let mut todo: Vec<u64> = dirs.clone();
    let mut all = Vec::new();
    while let Some(d) = todo.pop() {
        let want = list(&fs, d);
        let set: BTreeSet<_> = want.iter().cloned().collect();
        assert_eq!(set.len(), want.len(), "a name listed twice");
        for cl in &clients {
            let got: BTreeSet<_> = list(cl, d).into_iter().collect();
            assert_eq!(got, set);
        }
        for n in &set {
            let a = fs.lookup(&R, d, n).unwrap();
            if a.is_dir() {
                todo.push(a.ino);
            }
            all.push(a);
        }
    }
    let mut count = std::collections::HashMap::new();
    let mut subdirs = std::collections::HashMap::new();
    for a in &all {
        if a.is_dir() {
            *subdirs.entry(fs.parent_of(a.ino).unwrap()).or_insert(0u32) += 1;
        } else {
            *count.entry(a.ino).or_insert(0u32) += 1;
        }
    }
    for a in &all {
        let want = if a.is_dir() {
            2 + subdirs.get(&a.ino).copied().unwrap_or(0)
        } else {
            count[&a.ino]
        };
        assert_eq!(fs.getattr(a.ino).unwrap().nlink, want, "{a:?}");
    }
    let _ = Duration::ZERO;
    c.shutdown();
}
