//! The file system's shared suite (`cairn_fs::conformance`, the same cases `Fs` passes
//! in crates/cairn-fs/tests/fs.rs) on a cluster of three in-process servers through
//! `cairn_cluster::Client`, each case on a fresh cluster, with `cairn_cluster::admin::check`
//! as the consistency check. A small split threshold makes the big directories split
//! over every server.
//!
//! The cluster's documented differences from `Fs` (DESIGN.md, "Cluster") are in
//! [`PROFILE`]; the suite checks the documented behaviour there instead of `Fs`'s.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use cairn_cluster::server::{ServerHandle, ServerOptions};
use cairn_cluster::{Client, ClientOptions, ClusterConfig};
use cairn_fs::conformance::{Profile, Target};
use cairn_fs::FileSystem;

/// How the cluster differs from `cairn_fs::Fs` (each documented in DESIGN.md).
const PROFILE: Profile = Profile {
    name: "cairn_cluster::Client (3 servers)",
    // Listings are in name-hash order, the order of the partitions.
    readdir_in_name_order: false,
    // Enough to split a directory many times at the threshold below.
    big_directory_entries: 4_000,
    checks_can_be_switched_off: true,
};

/// The cluster through a client certificate that allows uids 1000-1999 only (root's
/// calls through an admin certificate): its requests are checked whatever it asks.
const RESTRICTED: Profile = Profile {
    name: "cairn_cluster::Client (3 servers, certificate for uids 1000-1999)",
    checks_can_be_switched_off: false,
    ..PROFILE
};

/// Entries of a partition above which it splits, in these tests.
const SPLIT_THRESHOLD: u64 = 200;

/// Free TCP ports on 127.0.0.1, below the ephemeral range (see `cairn_testkit`).
fn free_ports(n: usize) -> Vec<u16> {
    cairn_testkit::loopback_addrs(n)
        .iter()
        .map(|a| a.port())
        .collect()
}

/// A cluster of in-process servers with a client, on fresh stores.
struct InProcess {
    servers: Vec<ServerHandle>,
    client: Client,
    cfg: ClusterConfig,
    /// The test certificates and the servers' addresses (for clients of other
    /// certificates).
    certs: std::path::PathBuf,
    addrs: Vec<SocketAddr>,
    _dir: tempfile::TempDir,
}

impl InProcess {
    fn new(n: usize) -> InProcess {
        let dir = tempfile::tempdir().unwrap();
        for attempt in 0.. {
            let ports = free_ports(n);
            // Mutual TLS, as a client whose certificate allows every uid.
            let certs = dir.path().join(format!("certs{attempt}"));
            cairn_cluster::tls::test_certs(&certs, n as u32).unwrap();
            let addrs: Vec<SocketAddr> = ports
                .iter()
                .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
                .collect();
            let cfg = ClusterConfig::parse(&cairn_cluster::tls::test_cluster_text(
                &certs, &addrs, "admin",
            ))
            .unwrap();
            let mut servers = Vec::new();
            let mut failed = None;
            for (i, p) in ports.iter().enumerate() {
                let listen: SocketAddr = format!("127.0.0.1:{p}").parse().unwrap();
                let store = dir.path().join(format!("a{attempt}-s{i}"));
                let mut opts = ServerOptions::new(store, listen, cfg.clone());
                opts.split_threshold = SPLIT_THRESHOLD;
                match cairn_cluster::server::start(opts) {
                    Ok(h) => servers.push(h),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            match failed {
                None => {
                    let copts = ClientOptions {
                        timeout: Duration::from_secs(20),
                        ..ClientOptions::default()
                    };
                    let client = Client::with_config(cfg.clone(), copts).unwrap();
                    return InProcess {
                        servers,
                        client,
                        cfg,
                        certs,
                        addrs,
                        _dir: dir,
                    };
                }
                // A port taken meanwhile: try other ports.
                Some(e) if attempt < 5 && e.to_string().contains("listening on") => {
                    for s in servers {
                        let _ = s.shutdown();
                    }
                }
                Some(e) => panic!("starting the cluster: {e}"),
            }
        }
        unreachable!()
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        for s in self.servers.drain(..) {
            if let Err(e) = s.shutdown() {
                eprintln!("shutting a server down: {e}");
            }
        }
    }
}

impl Target for InProcess {
    fn fs(&self) -> &dyn FileSystem {
        &self.client
    }

    fn profile(&self) -> &Profile {
        &PROFILE
    }

    fn check(&self) -> Vec<String> {
        match cairn_cluster::admin::check(&self.cfg, Duration::from_secs(20)) {
            Ok(c) => c.problems,
            Err(e) => vec![format!("check failed: {e}")],
        }
    }
}

cairn_fs::conformance_tests!(InProcess::new(3));

/// The permission cases of the suite through a client certificate that allows uids
/// 1000-1999 only (every gid but 0): the servers check each request of it as the
/// suite expects, whatever the client asks.
mod restricted {
    use super::*;
    use cairn_fs::{Attr, Cred, DirEntry, FsResult, Invalidator, SetAttr, StatFs, Validity};
    use std::cell::Cell;
    use std::sync::Arc;

    thread_local! {
        /// Whether the last call of this thread went through the admin client (whose
        /// validities then answer for it).
        static BY_ADMIN: Cell<bool> = const { Cell::new(false) };
    }

    /// Root's calls through the admin certificate, everyone else's through the
    /// restricted one.
    struct ByCred {
        admin: Client,
        user: Client,
    }

    impl ByCred {
        fn of(&self, cred: &Cred) -> &Client {
            let admin = cred.uid == 0;
            BY_ADMIN.with(|b| b.set(admin));
            if admin {
                &self.admin
            } else {
                &self.user
            }
        }

        /// The user client, for calls made through it whoever asks.
        fn user(&self) -> &Client {
            BY_ADMIN.with(|b| b.set(false));
            &self.user
        }

        /// The client that answered this thread's last call.
        fn last(&self) -> &Client {
            if BY_ADMIN.with(Cell::get) {
                &self.admin
            } else {
                &self.user
            }
        }
    }

    impl FileSystem for ByCred {
        fn lookup(&self, c: &Cred, parent: u64, name: &[u8]) -> FsResult<Attr> {
            self.of(c).lookup(c, parent, name)
        }
        fn getattr(&self, ino: u64) -> FsResult<Attr> {
            self.user().getattr(ino)
        }
        fn setattr(&self, c: &Cred, ino: u64, s: &SetAttr) -> FsResult<Attr> {
            self.of(c).setattr(c, ino, s)
        }
        fn create(&self, c: &Cred, parent: u64, name: &[u8], mode: u32) -> FsResult<Attr> {
            self.of(c).create(c, parent, name, mode)
        }
        fn mknod(&self, c: &Cred, p: u64, name: &[u8], mode: u32, rdev: u32) -> FsResult<Attr> {
            self.of(c).mknod(c, p, name, mode, rdev)
        }
        fn mkdir(&self, c: &Cred, parent: u64, name: &[u8], mode: u32) -> FsResult<Attr> {
            self.of(c).mkdir(c, parent, name, mode)
        }
        fn symlink(&self, c: &Cred, parent: u64, name: &[u8], target: &[u8]) -> FsResult<Attr> {
            self.of(c).symlink(c, parent, name, target)
        }
        fn readlink(&self, c: &Cred, ino: u64) -> FsResult<Vec<u8>> {
            self.of(c).readlink(c, ino)
        }
        fn link(&self, c: &Cred, ino: u64, newparent: u64, newname: &[u8]) -> FsResult<Attr> {
            self.of(c).link(c, ino, newparent, newname)
        }
        fn unlink(&self, c: &Cred, parent: u64, name: &[u8]) -> FsResult<()> {
            self.of(c).unlink(c, parent, name)
        }
        fn rmdir(&self, c: &Cred, parent: u64, name: &[u8]) -> FsResult<()> {
            self.of(c).rmdir(c, parent, name)
        }
        fn rename(
            &self,
            c: &Cred,
            parent: u64,
            name: &[u8],
            newparent: u64,
            newname: &[u8],
            flags: u32,
        ) -> FsResult<()> {
            self.of(c)
                .rename(c, parent, name, newparent, newname, flags)
        }
        fn opendir(&self, c: &Cred, ino: u64) -> FsResult<()> {
            self.of(c).opendir(c, ino)
        }
        fn readdir(
            &self,
            c: &Cred,
            ino: u64,
            after: Option<&[u8]>,
            limit: usize,
        ) -> FsResult<Vec<DirEntry>> {
            self.of(c).readdir(c, ino, after, limit)
        }
        fn parent_of(&self, ino: u64) -> FsResult<u64> {
            self.user.parent_of(ino)
        }
        fn open_file(&self, c: &Cred, ino: u64, flags: i32) -> FsResult<Attr> {
            self.of(c).open_file(c, ino, flags)
        }
        fn open_created(&self, c: &Cred, ino: u64, flags: i32) -> FsResult<Attr> {
            self.of(c).open_created(c, ino, flags)
        }
        fn release(&self, c: &Cred, ino: u64) -> FsResult<()> {
            self.of(c).release(c, ino)
        }
        fn read(&self, c: &Cred, ino: u64, offset: u64, size: usize) -> FsResult<Vec<u8>> {
            self.of(c).read(c, ino, offset, size)
        }
        fn write(&self, c: &Cred, ino: u64, offset: u64, data: &[u8]) -> FsResult<usize> {
            self.of(c).write(c, ino, offset, data)
        }
        fn fsync(&self, ino: u64) -> FsResult<()> {
            self.admin.fsync(ino)
        }
        fn getxattr(&self, c: &Cred, ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
            self.of(c).getxattr(c, ino, name)
        }
        fn setxattr(
            &self,
            c: &Cred,
            ino: u64,
            name: &[u8],
            value: &[u8],
            flags: u32,
        ) -> FsResult<()> {
            self.of(c).setxattr(c, ino, name, value, flags)
        }
        fn listxattr(&self, c: &Cred, ino: u64) -> FsResult<Vec<Vec<u8>>> {
            self.of(c).listxattr(c, ino)
        }
        fn removexattr(&self, c: &Cred, ino: u64, name: &[u8]) -> FsResult<()> {
            self.of(c).removexattr(c, ino, name)
        }
        fn statfs(&self) -> FsResult<StatFs> {
            self.user.statfs()
        }
        fn set_permission_checks(&self, on: bool) {
            self.admin.set_permission_checks(on);
            self.user.set_permission_checks(on);
        }
        fn entry_validity(&self, parent: u64, name: &[u8]) -> Validity {
            self.last().entry_validity(parent, name)
        }
        fn attr_validity(&self, ino: u64) -> Validity {
            self.last().attr_validity(ino)
        }
        fn set_invalidator(&self, inv: Arc<dyn Invalidator>) {
            self.admin.set_invalidator(inv.clone());
            self.user.set_invalidator(inv);
        }
        fn close(self: Box<Self>) -> FsResult<()> {
            Ok(())
        }
    }

    struct Restricted {
        cluster: InProcess,
        fs: ByCred,
    }

    impl Restricted {
        fn new() -> Restricted {
            let cluster = InProcess::new(3);
            let text =
                cairn_cluster::tls::test_cluster_text(&cluster.certs, &cluster.addrs, "u1000");
            let user = Client::with_config(
                ClusterConfig::parse(&text).unwrap(),
                ClientOptions {
                    timeout: Duration::from_secs(20),
                    ..ClientOptions::default()
                },
            )
            .unwrap();
            let admin = Client::with_config(cluster.cfg.clone(), ClientOptions::default()).unwrap();
            Restricted {
                cluster,
                fs: ByCred { admin, user },
            }
        }
    }

    impl Target for Restricted {
        fn fs(&self) -> &dyn FileSystem {
            &self.fs
        }
        fn profile(&self) -> &Profile {
            &RESTRICTED
        }
        fn check(&self) -> Vec<String> {
            self.cluster.check()
        }
    }

    #[test]
    fn permissions() {
        cairn_fs::conformance::permissions(&Restricted::new());
    }

    #[test]
    fn supplementary_groups() {
        cairn_fs::conformance::supplementary_groups(&Restricted::new());
    }

    #[test]
    fn data_access_by_inode() {
        cairn_fs::conformance::data_access_by_inode(&Restricted::new());
    }

    #[test]
    fn xattrs() {
        cairn_fs::conformance::xattrs(&Restricted::new());
    }

    #[test]
    fn setattr_chmod_chown_truncate_utimens() {
        cairn_fs::conformance::setattr_chmod_chown_truncate_utimens(&Restricted::new());
    }
}

/// One server alone is a cluster too.
#[test]
fn single_server_cluster() {
    let c = InProcess::new(1);
    cairn_fs::conformance::rename_cases(&c);
    cairn_fs::conformance::readdir_cursor_and_changes(&c);
}

/// Several clients at once, creating in one directory while it splits: every client
/// then sees the same names, all of them, each once.
#[test]
fn concurrent_clients_see_one_namespace() {
    let c = InProcess::new(3);
    let d = c
        .client
        .mkdir(&ROOT_CRED, cairn_fs::ROOT, b"shared", 0o755)
        .unwrap();
    let clients: Vec<Client> = (0..4)
        .map(|_| {
            Client::with_config(
                c.cfg.clone(),
                ClientOptions {
                    timeout: Duration::from_secs(20),
                    ..ClientOptions::default()
                },
            )
            .unwrap()
        })
        .collect();
    const PER: u32 = 1500;
    std::thread::scope(|s| {
        for (k, cl) in clients.iter().enumerate() {
            s.spawn(move || {
                for i in 0..PER {
                    let name = format!("k{k}-{i}");
                    if i % 50 == 0 {
                        cl.mkdir(&ROOT_CRED, d.ino, name.as_bytes(), 0o755).unwrap();
                    } else {
                        cl.create(&ROOT_CRED, d.ino, name.as_bytes(), 0o644)
                            .unwrap();
                    }
                }
            });
        }
    });
    let want: BTreeSet<Vec<u8>> = (0..clients.len())
        .flat_map(|k| (0..PER).map(move |i| format!("k{k}-{i}").into_bytes()))
        .collect();
    for (k, cl) in clients.iter().enumerate() {
        let listed = list(cl, d.ino, 333);
        let set: BTreeSet<Vec<u8>> = listed.iter().cloned().collect();
        assert_eq!(set.len(), listed.len(), "client {k}: a name listed twice");
        assert_eq!(set, want, "client {k}");
        // Lookups of names the others made.
        for other in 0..clients.len() {
            let n = format!("k{other}-{}", PER - 1);
            cl.lookup(&ROOT_CRED, d.ino, n.as_bytes()).unwrap();
        }
    }
    assert!(c.check().is_empty(), "{:#?}", c.check());
}

/// A listing that runs while other clients create (and the directory splits) returns
/// every name that existed when it started, each once.
#[test]
fn listing_during_splits_sees_every_name_once() {
    let c = InProcess::new(3);
    let d = c
        .client
        .mkdir(&ROOT_CRED, cairn_fs::ROOT, b"grow", 0o755)
        .unwrap();
    for i in 0..400 {
        c.client
            .create(&ROOT_CRED, d.ino, format!("old{i}").as_bytes(), 0o644)
            .unwrap();
    }
    let writer = Client::with_config(c.cfg.clone(), ClientOptions::default()).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && i < 3_000 {
                writer
                    .create(&ROOT_CRED, d.ino, format!("new{i}").as_bytes(), 0o644)
                    .unwrap();
                i += 1;
            }
        });
        for round in 0..3 {
            let listed = list(&c.client, d.ino, 17);
            let set: BTreeSet<Vec<u8>> = listed.iter().cloned().collect();
            assert_eq!(
                set.len(),
                listed.len(),
                "round {round}: a name listed twice"
            );
            for i in 0..400 {
                assert!(
                    set.contains(format!("old{i}").as_bytes()),
                    "round {round}: old{i} missing"
                );
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert!(c.check().is_empty(), "{:#?}", c.check());
}

const ROOT_CRED: cairn_fs::Cred = cairn_fs::Cred::ROOT;

/// Every name of directory `dir`, listed in pages of `page`.
fn list(fs: &dyn FileSystem, dir: u64, page: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut cursor: Option<Vec<u8>> = None;
    loop {
        let entries = fs
            .readdir(&ROOT_CRED, dir, cursor.as_deref(), page)
            .unwrap();
        let Some(last) = entries.last() else { break };
        cursor = Some(last.name.clone());
        out.extend(entries.into_iter().map(|e| e.name));
    }
    out
}
