//! Crash safety in process: a server stops as if killed at a named point of a split or
//! of an operation across servers (the test hook `Hooks::crash_at`), restarts
//! on the same store, and the namespace is as before or as after the operation, with
//! no entry lost or listed twice (`admin::check`). And a directory's home loses the
//! power (the test hook `Hooks::power_loss`) right after a chmod: the
//! permissions copies on the other servers still follow the home.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use cairn_cluster::giga::{home_of, server_of};
use cairn_cluster::Client;
use cairn_fs::{Cred, FileSystem, FsResult, ROOT};
use common::{dir_name_on, e, Cluster};

const R: Cred = Cred::ROOT;
const N: u32 = 3;

/// Directories `a` and `b` in the root whose homes (and so whose names) are on
/// servers 1 and 2.
fn dirs_a1_b2(fs: &Client) -> (u64, u64) {
    let mk = |prefix: &str, home: u32| {
        fs.mkdir(&R, ROOT, &dir_name_on(ROOT, prefix, home, N), 0o755)
            .unwrap()
            .ino
    };
    (mk("a", 1), mk("b", 2))
}

/// Every name in `dir` (pages of 50; at most 100,000 pages).
fn list(fs: &dyn FileSystem, dir: u64) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut cursor: Option<Vec<u8>> = None;
    for _ in 0..100_000 {
        let p = fs.readdir(&R, dir, cursor.as_deref(), 50).unwrap();
        let Some(last) = p.last() else {
            return out;
        };
        cursor = Some(last.name.clone());
        out.extend(p.into_iter().map(|e| e.name));
    }
    panic!("directory {dir:#x}: no end after 100,000 pages");
}

/// Runs `op` with a short-timeout client while server `victim` is armed with
/// `point`; waits for the crash, restarts the server, settles and checks.
fn crash_during(
    c: &mut Cluster,
    victim: usize,
    point: &str,
    op: impl FnOnce(&Client) -> FsResult<()> + Send,
) -> FsResult<()> {
    c.arm(victim, point);
    let fs = c.client_timeout(Duration::from_secs(3));
    let res = std::thread::scope(|s| {
        let h = s.spawn(|| op(&fs));
        assert!(
            c.wait_crashed(victim, Duration::from_secs(20)),
            "server {victim} never reached {point}"
        );
        h.join().unwrap()
    });
    c.kill(victim);
    c.restart(victim, None);
    c.check();
    res
}

#[test]
fn mkdir_across_servers() {
    let mut c = Cluster::start(N as usize, 1000);
    let fs = c.client();
    // The root's entries are on server 0; the new directory's home is elsewhere.
    for (k, (victim, point)) in [
        (0, "mkdir:after-intent"),
        (1, "makedir:after-write"),
        (0, "mkdir:after-makedir"),
        (0, "mkdir:after-commit"),
        (0, "followups:done"),
    ]
    .into_iter()
    .enumerate()
    {
        let name = dir_name_on(ROOT, &format!("m{k}-"), 1, N);
        let n2 = name.clone();
        let r = crash_during(&mut c, victim, point, move |fs| {
            fs.mkdir(&R, ROOT, &n2, 0o755).map(drop)
        });
        // The intent was durable before anything else: the mkdir rolls forward.
        let d = fs
            .lookup(&R, ROOT, &name)
            .unwrap_or_else(|e| panic!("{point}: {e} ({r:?})"));
        assert!(d.is_dir());
        assert_eq!(home_of(d.ino), 1);
        assert_eq!(fs.getattr(d.ino).unwrap().nlink, 2);
        fs.create(&R, d.ino, b"inside", 0o644).unwrap();
        assert_eq!(list(&fs, d.ino), vec![b"inside".to_vec()]);
    }
    assert_eq!(fs.getattr(ROOT).unwrap().nlink, 2 + 5);
    c.check();
    c.shutdown();
}

#[test]
fn link_and_unlink_across_servers() {
    let mut c = Cluster::start(N as usize, 1000);
    let fs = c.client();
    let (a, b) = dirs_a1_b2(&fs);
    let f = fs.create(&R, a, b"f", 0o644).unwrap().ino;
    assert_eq!(home_of(f), 1);
    fs.write(&R, f, 0, b"data").unwrap();
    // link b/lK -> f: coordinated by server 2 (b's entries), the inode's home is 1.
    for (k, (victim, point)) in [
        (2, "link:after-intent"),
        (1, "addlink:after-write"),
        (2, "link:after-addlink"),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("l{k}");
        let n2 = name.clone();
        let r = crash_during(&mut c, victim, point, move |fs| {
            fs.link(&R, f, b, n2.as_bytes()).map(drop)
        });
        // A prepared link rolls forward once the inode's home added its link.
        let l = fs
            .lookup(&R, b, name.as_bytes())
            .unwrap_or_else(|e| panic!("{point}: {e} ({r:?})"));
        assert_eq!(l.ino, f);
        assert_eq!(fs.getattr(f).unwrap().nlink, 2 + k as u32);
    }
    // unlink b/lK: the entry goes first, the link row at the inode's home after.
    for (k, (victim, point)) in [(2, "unlink:after-commit"), (2, "followups:done")]
        .into_iter()
        .enumerate()
    {
        let name = format!("l{k}");
        let n2 = name.clone();
        crash_during(&mut c, victim, point, move |fs| {
            fs.unlink(&R, b, n2.as_bytes())
        })
        .ok();
        assert_eq!(e(fs.lookup(&R, b, name.as_bytes())), libc::ENOENT);
        assert_eq!(fs.getattr(f).unwrap().nlink, 3 - k as u32);
    }
    assert_eq!(fs.read(&R, f, 0, 10).unwrap(), b"data");
    c.check();
    c.shutdown();
}

#[test]
fn rmdir_across_servers() {
    let mut c = Cluster::start(N as usize, 1000);
    let fs = c.client();
    let cases = [
        (0, "rmdir:after-intent", false),
        (1, "prepare-rmdir:after-write", false),
        (0, "rmdir:after-prepare", false),
        (0, "rmdir:after-commit", true),
        (0, "followups:done", true),
    ];
    for (k, (victim, point, gone)) in cases.into_iter().enumerate() {
        let name = dir_name_on(ROOT, &format!("r{k}-"), 1, N);
        let d = fs.mkdir(&R, ROOT, &name, 0o755).unwrap().ino;
        let n2 = name.clone();
        let r = crash_during(&mut c, victim, point, move |fs| fs.rmdir(&R, ROOT, &n2));
        if gone {
            assert_eq!(e(fs.lookup(&R, ROOT, &name)), libc::ENOENT, "{point}");
            assert_eq!(e(fs.getattr(d)), libc::ENOENT, "{point}");
        } else {
            // Undone: the directory is whole and usable (not left marked for removal).
            assert!(r.is_err(), "{point}");
            assert_eq!(fs.lookup(&R, ROOT, &name).unwrap().ino, d, "{point}");
            fs.create(&R, d, b"x", 0o644).unwrap();
            fs.unlink(&R, d, b"x").unwrap();
            fs.rmdir(&R, ROOT, &name).unwrap();
        }
    }
    assert_eq!(fs.getattr(ROOT).unwrap().nlink, 2);
    c.check();
    c.shutdown();
}

/// The server of the partition holding `name` in an unsplit directory `dir`.
fn entry_server(dir: u64) -> u32 {
    home_of(dir)
}

#[test]
fn rename_across_servers() {
    let mut c = Cluster::start(N as usize, 1000);
    let fs = c.client();
    let (a, b) = dirs_a1_b2(&fs);
    assert_eq!((entry_server(a), entry_server(b)), (1, 2));
    let cases = [
        (1, "rename:after-intent", false),
        (2, "prepare-rename:after-write", false),
        (1, "rename:after-prepare", false),
        (1, "rename:after-commit", true),
        (1, "followups:done", true),
    ];
    for (k, (victim, point, moved)) in cases.into_iter().enumerate() {
        let src = format!("s{k}");
        let dst = format!("d{k}");
        let f = fs.create(&R, a, src.as_bytes(), 0o644).unwrap().ino;
        // A file to replace at the destination (its inode's home is server 2).
        let old = fs.create(&R, b, dst.as_bytes(), 0o644).unwrap().ino;
        let (s2, d2) = (src.clone(), dst.clone());
        let r = crash_during(&mut c, victim, point, move |fs| {
            fs.rename(&R, a, s2.as_bytes(), b, d2.as_bytes(), 0)
        });
        if moved {
            assert_eq!(e(fs.lookup(&R, a, src.as_bytes())), libc::ENOENT, "{point}");
            assert_eq!(fs.lookup(&R, b, dst.as_bytes()).unwrap().ino, f, "{point}");
            assert_eq!(
                e(fs.getattr(old)),
                libc::ENOENT,
                "{point}: replaced inode gone"
            );
        } else {
            assert!(r.is_err(), "{point}");
            assert_eq!(fs.lookup(&R, a, src.as_bytes()).unwrap().ino, f, "{point}");
            assert_eq!(
                fs.lookup(&R, b, dst.as_bytes()).unwrap().ino,
                old,
                "{point}"
            );
            // Nothing is left held: the rename now succeeds.
            fs.rename(&R, a, src.as_bytes(), b, dst.as_bytes(), 0)
                .unwrap();
        }
        assert_eq!(fs.getattr(f).unwrap().nlink, 1);
    }
    c.check();
    c.shutdown();
}

#[test]
fn directory_rename_across_servers() {
    let mut c = Cluster::start(N as usize, 1000);
    let fs = c.client();
    let (a, b) = dirs_a1_b2(&fs);
    for (k, (victim, point, moved)) in [
        (1, "rename:after-prepare", false),
        (1, "rename:after-commit", true),
    ]
    .into_iter()
    .enumerate()
    {
        let sname = dir_name_on(a, &format!("sub{k}-"), 0, N);
        let sub = fs.mkdir(&R, a, &sname, 0o755).unwrap().ino;
        fs.create(&R, sub, b"inner", 0o644).unwrap();
        // An empty directory to replace.
        let tname = format!("t{k}");
        let t = fs.mkdir(&R, b, tname.as_bytes(), 0o755).unwrap().ino;
        let (s2, t2) = (sname.clone(), tname.clone());
        let _ = crash_during(&mut c, victim, point, move |fs| {
            fs.rename(&R, a, &s2, b, t2.as_bytes(), 0)
        });
        if moved {
            assert_eq!(fs.lookup(&R, b, tname.as_bytes()).unwrap().ino, sub);
            assert_eq!(fs.parent_of(sub).unwrap(), b);
            assert_eq!(e(fs.getattr(t)), libc::ENOENT);
        } else {
            assert_eq!(fs.lookup(&R, a, &sname).unwrap().ino, sub);
            assert_eq!(fs.lookup(&R, b, tname.as_bytes()).unwrap().ino, t);
            fs.rename(&R, a, &sname, b, tname.as_bytes(), 0).unwrap();
        }
        assert_eq!(fs.lookup(&R, sub, b"..").unwrap().ino, b);
        assert_eq!(list(&fs, sub), vec![b"inner".to_vec()]);
    }
    assert_eq!(fs.getattr(a).unwrap().nlink, 2);
    assert_eq!(fs.getattr(b).unwrap().nlink, 4);
    c.check();
    c.shutdown();
}

/// The destination's server stops right after it released a rename's destination
/// name, before its reply: the coordinator retries. The released name is used at once
/// (the moved directory removed) while the coordinator still waits to retry; the retry
/// must not replay the rename's earlier steps on it (it used to re-add the
/// subdirectory row of a directory already removed, and re-write the entry).
#[test]
fn rename_retry_after_the_destination_was_released() {
    let mut c = Cluster::start(N as usize, 1000);
    let fs = c.client();
    // a's names on server 1, b's on server 2, the moved directory's home server 0.
    let (a, b) = dirs_a1_b2(&fs);
    for k in 0..3 {
        let sname = dir_name_on(a, &format!("s{k}-"), 0, N);
        let sub = fs.mkdir(&R, a, &sname, 0o755).unwrap().ino;
        c.arm(2, "release-rename:after-write");
        let cl = c.client_timeout(Duration::from_secs(3));
        let s2 = sname.clone();
        std::thread::scope(|s| {
            let h = s.spawn(|| cl.rename(&R, a, &s2, b, b"moved", 0));
            assert!(c.wait_crashed(2, Duration::from_secs(20)));
            // Down long enough for the coordinator's retries to back off.
            std::thread::sleep(Duration::from_millis(1500));
            c.kill(2);
            c.restart(2, None);
            // The rename is done as far as the destination knows: use the name now.
            fs.rmdir(&R, b, b"moved").unwrap();
            let _ = h.join().unwrap();
        });
        assert_eq!(e(fs.getattr(sub)), libc::ENOENT);
        assert_eq!(e(fs.lookup(&R, b, b"moved")), libc::ENOENT);
        assert_eq!(e(fs.lookup(&R, a, &sname)), libc::ENOENT);
        c.check();
        assert_eq!(e(fs.lookup(&R, b, b"moved")), libc::ENOENT);
        assert_eq!(fs.getattr(b).unwrap().nlink, 2);
        assert_eq!(fs.getattr(a).unwrap().nlink, 2);
    }
    c.shutdown();
}

/// Splits of a directory whose home is server 0 (its partition 0 there, partition 1 on
/// server 1): the source or the target stops at every point of the protocol.
#[test]
fn split_crash_points() {
    let cases = [
        (0, "split:before-accept"),
        (1, "accept:after-write"),
        (0, "split:after-accept"),
        (0, "split:commit-unsynced"),
        (0, "split:after-commit"),
        (1, "activate:before"),
        (0, "followups:done"),
    ];
    for (victim, point) in cases {
        let mut c = Cluster::start(N as usize, 50);
        let fs = c.client();
        let dname = dir_name_on(ROOT, "big", 0, N);
        let d = fs.mkdir(&R, ROOT, &dname, 0o755).unwrap().ino;
        assert_eq!(server_of(home_of(d), 1, N), 1);
        // Below the threshold, then armed; the next creates trigger the split.
        let mut made: BTreeSet<Vec<u8>> = BTreeSet::new();
        for i in 0..50 {
            let n = format!("f{i}").into_bytes();
            fs.create(&R, d, &n, 0o644).unwrap();
            made.insert(n);
        }
        c.arm(victim, point);
        let w = c.client_timeout(Duration::from_secs(2));
        let mut maybe = BTreeSet::new();
        for i in 50..120 {
            let n = format!("f{i}").into_bytes();
            match w.create(&R, d, &n, 0o644) {
                Ok(_) => {
                    made.insert(n);
                }
                Err(_) => {
                    maybe.insert(n);
                }
            }
            if c.servers[victim].as_ref().unwrap().crashed() {
                break;
            }
        }
        assert!(
            c.wait_crashed(victim, Duration::from_secs(20)),
            "server {victim} never reached {point}"
        );
        c.kill(victim);
        c.restart(victim, None);
        c.check();
        let fs = c.client();
        let got = list(&fs, d);
        let set: BTreeSet<Vec<u8>> = got.iter().cloned().collect();
        assert_eq!(set.len(), got.len(), "{point}: a name listed twice");
        for n in &made {
            assert!(
                set.contains(n),
                "{point}: {:?} lost",
                String::from_utf8_lossy(n)
            );
            fs.lookup(&R, d, n).unwrap();
        }
        for n in &set {
            assert!(
                made.contains(n) || maybe.contains(n),
                "{point}: unknown {n:?}"
            );
        }
        // The split finished (or is redone) and the directory keeps working.
        for i in 200..300 {
            fs.create(&R, d, format!("f{i}").as_bytes(), 0o644).unwrap();
        }
        c.check();
        let st = cairn_cluster::admin::status(&c.cfg, Duration::from_secs(5));
        assert!(
            st.servers[1].partitions >= 1,
            "{point}: the split moved a partition to server 1: {st:#?}"
        );
        c.shutdown();
    }
}

/// What a client was told of one operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Told {
    /// Acknowledged: it happened.
    Acked,
    /// Refused with this errno (the server answered): it did not happen.
    Refused(i32),
    /// `EIO`: a server died or did not answer in time; it may have happened (an
    /// operation across servers may even finish after the restart).
    Unknown,
}

fn told<T>(r: FsResult<T>) -> Told {
    match r {
        Ok(_) => Told::Acked,
        Err(e) if e.0 == libc::EIO => Told::Unknown,
        Err(e) => Told::Refused(e.0),
    }
}

/// Where a directory of a [`Chain`] is once every operation has finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// In the directory it was made in.
    From,
    /// In the directory it was renamed to.
    To,
    /// In neither.
    Gone,
}

/// One client's mkdir of `name` in `from`, rename of it to the same name in `to`, and
/// rmdir of it there, each with what the client was told.
#[derive(Debug)]
struct Chain {
    from: u64,
    to: u64,
    name: Vec<u8>,
    mkdir: Told,
    rename: Told,
    rmdir: Told,
}

impl Chain {
    /// The places the directory may be in, given what the client was told: each
    /// acknowledged operation happened, each refused one did not, an unknown one did or
    /// did not; a rename happened only after the mkdir, an rmdir only after the
    /// rename. Empty when what the client was told is itself impossible (an
    /// acknowledged rename of a directory whose mkdir was refused).
    fn allowed(&self) -> Vec<Place> {
        let may = |t: Told| match t {
            Told::Acked => &[true][..],
            Told::Refused(_) => &[false][..],
            Told::Unknown => &[false, true][..],
        };
        let mut out = Vec::new();
        for &made in may(self.mkdir) {
            for &moved in may(self.rename) {
                for &removed in may(self.rmdir) {
                    if (moved && !made) || (removed && !moved) {
                        continue;
                    }
                    let p = match (made, moved, removed) {
                        (_, _, true) => Place::Gone,
                        (_, true, false) => Place::To,
                        (true, false, false) => Place::From,
                        (false, false, false) => Place::Gone,
                    };
                    if !out.contains(&p) {
                        out.push(p);
                    }
                }
            }
        }
        out
    }

    /// Where the directory is (never under both names).
    fn place(&self, fs: &Client) -> Place {
        let at = |dir: u64| match fs.lookup(&R, dir, &self.name) {
            Ok(e) => {
                assert!(e.is_dir(), "{self:?}: not a directory");
                true
            }
            Err(e) if e.0 == libc::ENOENT => false,
            Err(e) => panic!("{self:?}: lookup in {dir:#x}: {e}"),
        };
        match (at(self.from), at(self.to)) {
            (true, false) => Place::From,
            (false, true) => Place::To,
            (false, false) => Place::Gone,
            (true, true) => panic!("{self:?}: under both names"),
        }
    }

    /// Asserts that the directory is where what the client was told allows.
    fn assert_consistent(&self, fs: &Client, when: &str) {
        let allowed = self.allowed();
        assert!(!allowed.is_empty(), "{when}: impossible outcomes {self:?}");
        let p = self.place(fs);
        assert!(
            allowed.contains(&p),
            "{when}: {:?} is {p:?}, allowed {allowed:?}: {self:?}",
            String::from_utf8_lossy(&self.name)
        );
    }
}

/// What one client of the storm did: the creates it was told were made, and its
/// chains of directory operations.
#[derive(Default)]
struct Storm {
    acked: Vec<(u64, Vec<u8>)>,
    chains: Vec<Chain>,
}

/// One client's part of cycle `cycle` of the storm: up to 150 creates, and a chain
/// every tenth, round the directories `dirs`, until `deadline`.
fn storm_client(cl: &Client, dirs: &[u64], cycle: u64, t: usize, deadline: Instant) -> Storm {
    let mut out = Storm::default();
    for i in 0..150u64 {
        if Instant::now() > deadline {
            break;
        }
        let d = dirs[(i as usize + t) % dirs.len()];
        let n = format!("c{cycle}-t{t}-{i}").into_bytes();
        if cl.create(&R, d, &n, 0o644).is_ok() {
            out.acked.push((d, n.clone()));
        }
        if i % 10 == 5 {
            let m = format!("c{cycle}-t{t}-m{i}").into_bytes();
            let d2 = dirs[(i as usize + t + 1) % dirs.len()];
            let mkdir = told(cl.mkdir(&R, d, &m, 0o755));
            let rename = told(cl.rename(&R, d, &m, d2, &m, 0));
            let rmdir = told(cl.rmdir(&R, d2, &m));
            out.chains.push(Chain {
                from: d,
                to: d2,
                name: m,
                mkdir,
                rename,
                rmdir,
            });
        }
    }
    out
}

/// Servers killed at random moments (not at a named point) during a mixed workload
/// from several clients; after each restart the namespace is consistent, every
/// acknowledged create is there, and each directory made, moved and removed is where
/// what its client was told allows (an acknowledged mkdir made it, an acknowledged
/// rename moved it, an acknowledged rmdir removed it, a refused one did nothing, an
/// unknown one either).
#[test]
fn random_kills_during_a_storm() {
    let mut c = Cluster::start(N as usize, 40);
    let fs = c.client();
    let dirs: Vec<u64> = (0..3)
        .map(|i| {
            fs.mkdir(&R, ROOT, format!("d{i}").as_bytes(), 0o777)
                .unwrap()
                .ino
        })
        .collect();
    let mut made: BTreeSet<(u64, Vec<u8>)> = BTreeSet::new();
    let mut chains: Vec<Chain> = Vec::new();
    for cycle in 0..4u64 {
        let victim = (cycle % N as u64) as usize;
        let clients: Vec<Client> = (0..3)
            .map(|_| c.client_timeout(Duration::from_secs(3)))
            .collect();
        // Each client stops issuing operations after this (each takes at most its
        // timeout): the cycle is bounded in time as well as in count.
        let deadline = Instant::now() + Duration::from_secs(60);
        let storms: Vec<Storm> = std::thread::scope(|s| {
            let hs: Vec<_> = clients
                .iter()
                .enumerate()
                .map(|(t, cl)| {
                    let dirs = &dirs;
                    s.spawn(move || storm_client(cl, dirs, cycle, t, deadline))
                })
                .collect();
            std::thread::sleep(Duration::from_millis(300 + 150 * cycle));
            c.kill(victim);
            // Down for a moment while the clients go on, then back.
            std::thread::sleep(Duration::from_millis(400));
            c.restart(victim, None);
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        c.check();
        let fs = c.client();
        let mut told_of = [0usize; 3];
        for st in storms {
            made.extend(st.acked);
            for ch in st.chains {
                ch.assert_consistent(&fs, &format!("cycle {cycle}"));
                for t in [ch.mkdir, ch.rename, ch.rmdir] {
                    told_of[match t {
                        Told::Acked => 0,
                        Told::Refused(_) => 1,
                        Told::Unknown => 2,
                    }] += 1;
                }
                chains.push(ch);
            }
        }
        eprintln!(
            "cycle {cycle}: directory operations acknowledged, refused, unknown: {told_of:?}"
        );
        for (d, n) in &made {
            fs.lookup(&R, *d, n).unwrap_or_else(|e| {
                panic!("cycle {cycle}: {:?} lost: {e}", String::from_utf8_lossy(n))
            });
        }
        for d in &dirs {
            let got = list(&fs, *d);
            let set: BTreeSet<_> = got.iter().collect();
            assert_eq!(set.len(), got.len(), "cycle {cycle}: a name listed twice");
        }
    }
    // Nothing a later cycle's kills did changed what was told before.
    let fs = c.client();
    for ch in &chains {
        ch.assert_consistent(&fs, "at the end");
    }
    assert!(
        chains.iter().any(|ch| ch.mkdir == Told::Acked),
        "no directory operation was acknowledged: the storm tested nothing"
    );
    c.check();
    c.shutdown();
}

/// A directory's permissions as a row holds them: (mode bits, version), if the row is
/// there.
type PermsRow = Option<(u32, u64)>;

/// The permissions rows of directory `dir` in the store at `path` (its server
/// stopped): the copy kept for another server's directory (`A dir`) and the inode
/// (`I dir`, at its home).
fn perms_rows(path: &std::path::Path, dir: u64) -> (PermsRow, PermsRow) {
    use prost::Message;
    let db = cairn::Db::open(path).unwrap();
    let ks = db.keyspace(cairn_cluster::KEYSPACE);
    let key = |tag: u8| [&[tag][..], &dir.to_be_bytes()].concat();
    let copy = ks.get(key(b'A')).unwrap().map(|v| {
        let p = cairn_cluster::proto::DirPerms::decode(&v[..]).unwrap();
        (p.mode & 0o7777, p.version)
    });
    let inode = ks.get(key(b'I')).unwrap().map(|v| {
        let i = cairn_cluster::proto::InodeRow::decode(&v[..]).unwrap();
        (i.mode & 0o7777, i.perms_version)
    });
    (copy, inode)
}

/// Under `SyncMode::Never` a chmod of a directory is acknowledged before its home made
/// it durable, and its new permissions go to every other server with a version. The
/// home loses the power right after one (`cairn::fault::PowerLoss`: everything not
/// synced is lost) and comes back; the next chmod must reach every copy. Were the
/// copies sent before the home's row (and its version) was durable, the home would
/// give the lost version to the second chmod and the other servers, which keep a copy
/// only if its version is newer, would keep the first mode for good.
#[test]
fn chmod_after_a_power_cut_of_the_directory_home() {
    let mut c = Cluster::start_with(N as usize, 1000, cairn_cluster::server::SyncMode::Never);
    let fs = c.client();
    let d = fs
        .mkdir(&R, ROOT, &dir_name_on(ROOT, "p", 1, N), 0o755)
        .unwrap()
        .ino;
    assert_eq!(home_of(d), 1);
    // Server 1 again, its store's files through a power-loss record from now on; the
    // clean shutdown made the directory durable.
    let stash = tempfile::tempdir().unwrap();
    let power = std::sync::Arc::new(cairn::fault::PowerLoss::new(stash.path().join("s")).unwrap());
    c.restart_with(1, |o| o.hooks.power_loss = Some(power.clone()));

    let chmod = |mode: u32| {
        let s = cairn_fs::SetAttr {
            mode: Some(mode),
            ..Default::default()
        };
        let a = fs.setattr(&R, d, &s).unwrap();
        assert_eq!(a.mode & 0o7777, mode);
    };
    chmod(0o700);
    // The power goes off on server 1 with the chmod acknowledged: what it did not sync
    // is lost.
    power.cut();
    c.kill(1);
    let lost = power.restart(cairn::fault::Loss::Unsynced, 1).unwrap();
    eprintln!("power cut of server 1: {lost}");
    c.restart(1, None);

    chmod(0o750);
    assert_eq!(fs.getattr(d).unwrap().mode & 0o7777, 0o750);
    c.check();

    // Every server's rows, the servers stopped.
    for i in 0..N as usize {
        c.shutdown_one(i);
    }
    let (_, home) = perms_rows(c.dirs[1].path(), d);
    let (mode, version) = home.expect("the directory's inode at its home");
    assert_eq!(mode, 0o750);
    let show = |p: PermsRow| match p {
        Some((m, v)) => format!("mode {m:o} version {v}"),
        None => "no copy".to_string(),
    };
    for s in [0, 2] {
        let (copy, _) = perms_rows(c.dirs[s].path(), d);
        assert!(
            copy == Some((mode, version)),
            "server {s} keeps {} of directory {d:#x}'s permissions; its home has {}",
            show(copy),
            show(home)
        );
    }
}

/// The disk of a directory's home fills up (every write of its store fails with
/// `ENOSPC`) under `SyncMode::Always`. The engine keeps a write that failed in memory
/// (readers see it; the disk may never hold it), so the server must not answer the
/// create `ENOSPC` and then show the file: it stops serving, the create's outcome is
/// unknown to its client (`EIO` after the timeout), and nothing is answered from the
/// failed state. Restarted with room on the disk, it serves again: what it
/// acknowledged is there, the create in question is wholly there or wholly absent.
#[test]
fn a_full_disk_stops_the_server_instead_of_showing_what_failed() {
    let mut c = Cluster::start_with(N as usize, 1000, cairn_cluster::server::SyncMode::Always);
    let fs = c.client();
    let d = fs
        .mkdir(&R, ROOT, &dir_name_on(ROOT, "q", 1, N), 0o755)
        .unwrap()
        .ino;
    assert_eq!(home_of(d), 1);
    let fault = std::sync::Arc::new(cairn::fault::FaultInjector::new());
    c.restart_with(1, |o| o.hooks.fault = Some(fault.clone()));
    for i in 0..20 {
        fs.create(&R, d, format!("f{i}").as_bytes(), 0o644).unwrap();
    }

    fault.fail_after(cairn::fault::IoOp::Write, 0, libc::ENOSPC);
    let quick = c.client_timeout(Duration::from_secs(2));
    let made = quick.create(&R, d, b"x", 0o644);
    assert_eq!(e(made), libc::EIO, "the create's outcome is unknown");
    assert_eq!(
        e(quick.lookup(&R, d, b"x")),
        libc::EIO,
        "served from the failed state"
    );
    assert!(c.servers[1].as_ref().unwrap().crashed(), "still serving");

    c.kill(1);
    fault.clear();
    c.restart(1, None);
    for i in 0..20 {
        fs.lookup(&R, d, format!("f{i}").as_bytes()).unwrap();
    }
    match fs.lookup(&R, d, b"x") {
        Ok(_) | Err(cairn_fs::Errno(libc::ENOENT)) => {}
        Err(other) => panic!("x after the restart: {other:?}"),
    }
    fs.create(&R, d, b"y", 0o644).unwrap();
    c.check();
}
