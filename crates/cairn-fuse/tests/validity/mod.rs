//! Shared by the tests of how long the kernel keeps what a file system answers
//! (`validity_classic.rs`, `validity_uring.rs`: one transport each, since a process
//! mounts once, see `cairn_fuse::mount`).
//!
//! A local `cairn_fs::Fs` is served through [`Leased`], a wrapper that says every answer
//! may be kept for as long as the test sets ([`Validity::For`] 60 s, or 0, or
//! [`Validity::Configured`]) and keeps the mount's [`Invalidator`]. The test changes the
//! file system behind the kernel's back (through the `Fs` itself), shows that the mount
//! still answers what the kernel kept, past the mount's own timeouts (one second), then
//! has the kernel forget it through the invalidator and shows the change.
//!
//! Skips (reported as the other mounted tests report them: printed, appended to the file
//! named by `CAIRN_TEST_SKIPS`, a failure under `CAIRN_TEST_NO_SKIP=1`) where FUSE, or
//! FUSE over io_uring, can't be used here.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cairn_fs::{
    Attr, Cred, DirEntry, FileSystem, Fs, FsResult, Invalidator, SetAttr, StatFs, Validity, ROOT,
};
use cairn_fuse::{MountOptions, Transport};

/// How long a wait for the mount may take before the test fails.
const WAIT: Duration = Duration::from_secs(20);
/// How long the whole test may take before the connection is aborted (a stuck request
/// then fails with ENOTCONN instead of hanging the test).
const DEADLINE: Duration = Duration::from_secs(120);
/// What [`Leased`] says while a test keeps answers long.
const LONG: Duration = Duration::from_secs(60);
/// [`Leased::ttl`] for [`Validity::Configured`].
const CONFIGURED: u64 = u64::MAX;

/// What the test and the mount's [`Leased`] share.
struct Shared {
    fs: Fs,
    /// The validity of every answer, in milliseconds; [`CONFIGURED`]:
    /// [`Validity::Configured`].
    ttl: AtomicU64,
    /// The mount's invalidator, once it serves.
    inv: Mutex<Option<Arc<dyn Invalidator>>>,
}

impl Shared {
    fn validity(&self) -> Validity {
        match self.ttl.load(Ordering::SeqCst) {
            CONFIGURED => Validity::Configured,
            ms => Validity::For(Duration::from_millis(ms)),
        }
    }

    fn set(&self, v: Validity) {
        let ms = match v {
            Validity::Configured => CONFIGURED,
            Validity::For(d) => d.as_millis() as u64,
        };
        self.ttl.store(ms, Ordering::SeqCst);
    }

    fn inv(&self) -> Arc<dyn Invalidator> {
        self.inv
            .lock()
            .unwrap()
            .clone()
            .expect("the mount hands its invalidator over before it is ready")
    }
}

/// A local file system whose answers the kernel may keep as [`Shared::ttl`] says.
struct Leased(Arc<Shared>);

impl Leased {
    fn fs(&self) -> &dyn FileSystem {
        &self.0.fs
    }
}

impl FileSystem for Leased {
    fn lookup(&self, c: &Cred, parent: u64, name: &[u8]) -> FsResult<Attr> {
        self.fs().lookup(c, parent, name)
    }
    fn getattr(&self, ino: u64) -> FsResult<Attr> {
        self.fs().getattr(ino)
    }
    fn setattr(&self, c: &Cred, ino: u64, s: &SetAttr) -> FsResult<Attr> {
        self.fs().setattr(c, ino, s)
    }
    fn create(&self, c: &Cred, parent: u64, name: &[u8], mode: u32) -> FsResult<Attr> {
        self.fs().create(c, parent, name, mode)
    }
    fn mknod(&self, c: &Cred, p: u64, name: &[u8], mode: u32, rdev: u32) -> FsResult<Attr> {
        self.fs().mknod(c, p, name, mode, rdev)
    }
    fn mkdir(&self, c: &Cred, parent: u64, name: &[u8], mode: u32) -> FsResult<Attr> {
        self.fs().mkdir(c, parent, name, mode)
    }
    fn symlink(&self, c: &Cred, parent: u64, name: &[u8], target: &[u8]) -> FsResult<Attr> {
        self.fs().symlink(c, parent, name, target)
    }
    fn readlink(&self, c: &Cred, ino: u64) -> FsResult<Vec<u8>> {
        self.fs().readlink(c, ino)
    }
    fn link(&self, c: &Cred, ino: u64, newparent: u64, newname: &[u8]) -> FsResult<Attr> {
        self.fs().link(c, ino, newparent, newname)
    }
    fn unlink(&self, c: &Cred, parent: u64, name: &[u8]) -> FsResult<()> {
        self.fs().unlink(c, parent, name)
    }
    fn rmdir(&self, c: &Cred, parent: u64, name: &[u8]) -> FsResult<()> {
        self.fs().rmdir(c, parent, name)
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
        self.fs().rename(c, parent, name, newparent, newname, flags)
    }
    fn opendir(&self, c: &Cred, ino: u64) -> FsResult<()> {
        self.fs().opendir(c, ino)
    }
    fn readdir(
        &self,
        c: &Cred,
        ino: u64,
        after: Option<&[u8]>,
        limit: usize,
    ) -> FsResult<Vec<DirEntry>> {
        self.fs().readdir(c, ino, after, limit)
    }
    fn parent_of(&self, ino: u64) -> FsResult<u64> {
        self.fs().parent_of(ino)
    }
    fn open_file(&self, c: &Cred, ino: u64, flags: i32) -> FsResult<Attr> {
        self.fs().open_file(c, ino, flags)
    }
    fn open_created(&self, c: &Cred, ino: u64, flags: i32) -> FsResult<Attr> {
        self.fs().open_created(c, ino, flags)
    }
    fn release(&self, c: &Cred, ino: u64) -> FsResult<()> {
        self.fs().release(c, ino)
    }
    fn read(&self, c: &Cred, ino: u64, offset: u64, size: usize) -> FsResult<Vec<u8>> {
        self.fs().read(c, ino, offset, size)
    }
    fn write(&self, c: &Cred, ino: u64, offset: u64, data: &[u8]) -> FsResult<usize> {
        self.fs().write(c, ino, offset, data)
    }
    fn fsync(&self, ino: u64) -> FsResult<()> {
        self.fs().fsync(ino)
    }
    fn getxattr(&self, c: &Cred, ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
        self.fs().getxattr(c, ino, name)
    }
    fn setxattr(&self, c: &Cred, ino: u64, name: &[u8], value: &[u8], flags: u32) -> FsResult<()> {
        self.fs().setxattr(c, ino, name, value, flags)
    }
    fn listxattr(&self, c: &Cred, ino: u64) -> FsResult<Vec<Vec<u8>>> {
        self.fs().listxattr(c, ino)
    }
    fn removexattr(&self, c: &Cred, ino: u64, name: &[u8]) -> FsResult<()> {
        self.fs().removexattr(c, ino, name)
    }
    fn statfs(&self) -> FsResult<StatFs> {
        self.fs().statfs()
    }
    fn set_permission_checks(&self, on: bool) {
        self.fs().set_permission_checks(on)
    }
    fn entry_validity(&self, _parent: u64, _name: &[u8]) -> Validity {
        self.0.validity()
    }
    fn attr_validity(&self, _ino: u64) -> Validity {
        self.0.validity()
    }
    fn set_invalidator(&self, inv: Arc<dyn Invalidator>) {
        *self.0.inv.lock().unwrap() = Some(inv);
    }
    fn close(self: Box<Self>) -> FsResult<()> {
        // The test holds the file system too; the last one to let go closes it.
        match Arc::try_unwrap(self.0) {
            Ok(s) => Box::new(s.fs).close(),
            Err(_) => Ok(()),
        }
    }
}

/// Reports that `what` was skipped, as the mounted tests of `cairn` do.
fn skip(what: &str) {
    let line = format!("SKIP: {what}");
    println!("{line}");
    if std::env::var("CAIRN_TEST_NO_SKIP").is_ok_and(|v| v == "1") {
        panic!("{line} (CAIRN_TEST_NO_SKIP=1 forbids skipping)");
    }
    if let Some(path) = std::env::var_os("CAIRN_TEST_SKIPS") {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(format!("{line}\n").as_bytes()).unwrap();
    }
}

/// A mount served by a thread of the test; unmounted when dropped (a failed test).
struct Mounted {
    mp: PathBuf,
    server: Option<JoinHandle<anyhow::Result<()>>>,
    /// Tells the watchdog that the test is done.
    done: Option<Sender<()>>,
}

impl Mounted {
    /// Mounts `fs` on `mp` through `transport`; `None` (the skip reported) where the
    /// mount is refused here.
    fn start(fs: Leased, mp: &Path, transport: Transport) -> Option<Mounted> {
        let opts = MountOptions {
            transport,
            ..MountOptions::default()
        };
        let (tx, rx) = channel::<Result<(), String>>();
        let at = mp.to_path_buf();
        let server = std::thread::spawn(move || {
            let m = match cairn_fuse::mount_fs(Box::new(fs), &at, &opts) {
                Ok(m) => m,
                Err(e) => {
                    let _ = tx.send(Err(format!("{e:#}")));
                    return Ok(());
                }
            };
            let ready = tx.clone();
            let r = m.run_with(move || {
                let _ = ready.send(Ok(()));
            });
            if let Err(e) = &r {
                let _ = tx.send(Err(format!("{e:#}")));
            }
            r
        });
        let mut m = Mounted {
            mp: mp.to_path_buf(),
            server: Some(server),
            done: None,
        };
        match rx.recv_timeout(WAIT) {
            Ok(Ok(())) => {}
            Ok(Err(e)) if cairn_fuse::is_refusal(&e) => {
                skip(&format!("mounting is refused here: {e}"));
                m.mp = PathBuf::new();
                return None;
            }
            Ok(Err(e)) if e.contains("no ring can be made here") => {
                skip(&format!("FUSE over io_uring: {e}"));
                m.mp = PathBuf::new();
                return None;
            }
            Ok(Err(e)) => panic!("mounting on {}: {e}", mp.display()),
            Err(e) => panic!("the mount on {} is not ready: {e}", mp.display()),
        }
        m.done = Some(watchdog(mp));
        Some(m)
    }

    /// Unmounts and checks that the mount served without error.
    fn finish(mut self) {
        drop(self.done.take());
        cairn_fuse::umount(&self.mp).unwrap();
        let server = self.server.take().unwrap();
        let r = wait_for(server);
        r.expect("the mount's thread ended").unwrap();
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        drop(self.done.take());
        if self.mp.as_os_str().is_empty() {
            return;
        }
        if let Some(server) = self.server.take() {
            if cairn_fuse::umount(&self.mp).is_err() {
                let c = std::ffi::CString::new(self.mp.as_os_str().as_encoded_bytes()).unwrap();
                // SAFETY: umount2 with a NUL-terminated path that outlives the call.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
            let _ = wait_for(server);
        }
    }
}

/// The result of `t`, if it ends within [`WAIT`].
fn wait_for<T>(t: JoinHandle<T>) -> Option<T> {
    let start = Instant::now();
    while !t.is_finished() && start.elapsed() < WAIT {
        std::thread::sleep(Duration::from_millis(10));
    }
    t.is_finished().then(|| t.join().unwrap())
}

/// Aborts the FUSE connection of the mount on `mp` unless told (or dropped) within
/// [`DEADLINE`]: a request stuck in the mount then fails instead of hanging the test.
fn watchdog(mp: &Path) -> Sender<()> {
    let dev = std::fs::metadata(mp).unwrap().dev();
    let (tx, rx) = channel::<()>();
    std::thread::spawn(move || {
        if let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(DEADLINE) {
            let abort = format!("/sys/fs/fuse/connections/{}/abort", libc::minor(dev));
            eprintln!("the test is stuck: aborting the FUSE connection ({abort})");
            let _ = std::fs::write(abort, "1");
        }
    });
    tx
}

/// The inode number and permission bits of `p` as the mount answers them; `None`: absent.
fn stat(p: &Path) -> Option<(u64, u32)> {
    match std::fs::metadata(p) {
        Ok(m) => Some((m.ino(), m.mode() & 0o7777)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => panic!("stat {}: {e}", p.display()),
    }
}

/// Sets the mode of `ino` behind the kernel's back.
fn chmod(fs: &Fs, ino: u64, mode: u32) {
    let s = SetAttr {
        mode: Some(mode),
        ..SetAttr::default()
    };
    fs.setattr(&Cred::ROOT, ino, &s).unwrap();
}

/// The test, on a mount served through `transport`.
pub fn kept_for_the_validity_until_invalidated(transport: Transport) {
    if let Some(why) = cairn_fuse::unavailable() {
        skip(&format!("mounted tests: FUSE is unavailable here ({why})"));
        return;
    }
    if transport == Transport::Uring {
        let on = std::fs::read_to_string(cairn_fuse::URING_SWITCH);
        if !on.as_ref().is_ok_and(|s| s.trim() == "Y") {
            skip(&format!(
                "FUSE over io_uring is off here ({}: {on:?})",
                cairn_fuse::URING_SWITCH
            ));
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mp = dir.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let shared = Arc::new(Shared {
        fs: Fs::open(dir.path().join("store")).unwrap(),
        ttl: AtomicU64::new(LONG.as_millis() as u64),
        inv: Mutex::new(None),
    });
    let Some(m) = Mounted::start(Leased(shared.clone()), &mp, transport) else {
        return;
    };
    kept_long(&shared, &mp);
    not_kept(&shared, &mp);
    drop(shared);
    m.finish();
}

/// With [`Validity::For`] 60 s, the kernel answers what it kept past the mount's own
/// timeouts (one second; none for absent names) until the invalidator makes it forget.
fn kept_long(s: &Shared, mp: &Path) {
    let fs = &s.fs;
    let me = Cred::ROOT;
    let f = fs.create(&me, ROOT, b"f", 0o644).unwrap().ino;
    let g = fs.create(&me, ROOT, b"g", 0o644).unwrap().ino;
    let d = fs.create(&me, ROOT, b"d", 0o644).unwrap().ino;
    fs.write(d, 0, b"hello").unwrap();
    // What the kernel keeps: f's attributes, g's entry, n's absence, d's data.
    assert_eq!(stat(&mp.join("f")), Some((f, 0o644)));
    assert_eq!(stat(&mp.join("g")), Some((g, 0o644)));
    assert_eq!(stat(&mp.join("n")), None);
    let mut data = std::fs::File::open(mp.join("d")).unwrap();
    let mut read = String::new();
    data.read_to_string(&mut read).unwrap();
    assert_eq!(read, "hello");

    // Behind the kernel's back.
    chmod(fs, f, 0o600);
    fs.unlink(&me, ROOT, b"g").unwrap();
    let g2 = fs.create(&me, ROOT, b"g", 0o640).unwrap().ino;
    assert_ne!(g2, g);
    let n = fs.create(&me, ROOT, b"n", 0o644).unwrap().ino;
    fs.write(d, 0, b"HELLO").unwrap();
    // Past the mount's own timeouts: still what the kernel kept.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(stat(&mp.join("f")), Some((f, 0o644)), "f's attributes kept");
    assert_eq!(stat(&mp.join("g")), Some((g, 0o644)), "g's entry kept");
    assert_eq!(stat(&mp.join("n")), None, "n's absence kept");
    assert_eq!(pread(&mut data), "hello", "d's data kept");

    let inv = s.inv();
    inv.inode(f);
    assert_eq!(
        stat(&mp.join("f")),
        Some((f, 0o600)),
        "f's attributes forgotten"
    );
    inv.entry(ROOT, b"g");
    assert_eq!(
        stat(&mp.join("g")),
        Some((g2, 0o640)),
        "g's entry forgotten"
    );
    inv.entry(ROOT, b"n");
    assert_eq!(
        stat(&mp.join("n")),
        Some((n, 0o644)),
        "n's absence forgotten"
    );
    inv.inode(d);
    assert_eq!(pread(&mut data), "HELLO", "d's data forgotten");
    // Nothing cached (g's old inode, a name never looked up): nothing to forget.
    inv.inode(g);
    inv.entry(ROOT, b"never-looked-up");
    inv.inode(1 << 40);
}

/// With [`Validity::For`] 0 the kernel keeps nothing, and with
/// [`Validity::Configured`] the mount's timeouts hold (for [`cairn_fuse::mount_fs`]: no
/// absent name kept): a change behind its back shows at once.
fn not_kept(s: &Shared, mp: &Path) {
    let (fs, me) = (&s.fs, Cred::ROOT);
    s.set(Validity::For(Duration::ZERO));
    let z = fs.create(&me, ROOT, b"z", 0o644).unwrap().ino;
    assert_eq!(stat(&mp.join("z")), Some((z, 0o644)));
    assert_eq!(stat(&mp.join("y")), None);
    chmod(fs, z, 0o600);
    let y = fs.create(&me, ROOT, b"y", 0o644).unwrap().ino;
    assert_eq!(
        stat(&mp.join("z")),
        Some((z, 0o600)),
        "z's attributes not kept"
    );
    assert_eq!(
        stat(&mp.join("y")),
        Some((y, 0o644)),
        "y's absence not kept"
    );

    s.set(Validity::Configured);
    assert_eq!(stat(&mp.join("x")), None);
    let x = fs.create(&me, ROOT, b"x", 0o644).unwrap().ino;
    assert_eq!(
        stat(&mp.join("x")),
        Some((x, 0o644)),
        "x's absence not kept"
    );
}

/// The first bytes of `f` read again from its start, through the kernel's cache.
fn pread(f: &mut std::fs::File) -> String {
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut b = [0u8; 5];
    f.read_exact(&mut b).unwrap();
    String::from_utf8_lossy(&b).into_owned()
}
