//! `cairn mount` as FUSE file systems are mounted, through the binary as root: the
//! `mount.cairn` helper (`mount -t cairn`, fstab lines through `mount -a -T FILE` and
//! `mount -T FILE DIR`, the options of the systemd unit in docs/mount.md), `umount`,
//! the background mode (returns once the mount serves, survives its starting shell,
//! SIGTERM unmounts), the error paths (nothing left mounted), and the options' effects
//! (mountinfo, requests counted by `CAIRN_FUSE_STATS`, EROFS).
//!
//! They skip (see `common::skip`) where FUSE can't be used or the tests don't run as
//! root (mount(8) and /sbin). The tests that need /sbin/mount.cairn take [`HELPER`] and
//! put back what was there before. Every mount is undone by a Drop guard.

mod common;

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{cairn, is_mountpoint, skip};

/// Held by the tests that use /sbin/mount.cairn.
static HELPER: Mutex<()> = Mutex::new(());

/// Where mount(8) looks for the helper.
const HELPER_PATH: &str = "/sbin/mount.cairn";

/// Whether the mounted tests can run here: FUSE usable and root.
fn can_mount() -> bool {
    if !common::Mount::fuse_usable() {
        return false;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip("mount helper tests: not root (mount(8) and /sbin/mount.cairn need it)");
        return false;
    }
    true
}

/// /sbin/mount.cairn linked to the binary under test while it lives; what was there
/// before is put back on drop.
struct Helper {
    before: Option<PathBuf>,
}

impl Helper {
    fn install() -> Option<Helper> {
        let before = match std::fs::symlink_metadata(HELPER_PATH) {
            Ok(m) if m.file_type().is_symlink() => Some(std::fs::read_link(HELPER_PATH).unwrap()),
            Ok(_) => {
                skip("mount helper tests: /sbin/mount.cairn is a file of someone else's");
                return None;
            }
            Err(_) => None,
        };
        let out = cairn()
            .args(["install-mount-helper", "--dir", "/sbin"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let target = std::fs::read_link(HELPER_PATH).unwrap();
        assert_eq!(
            target,
            std::fs::canonicalize(env!("CARGO_BIN_EXE_cairn")).unwrap()
        );
        Some(Helper { before })
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(HELPER_PATH);
        if let Some(b) = &self.before {
            let _ = std::os::unix::fs::symlink(b, HELPER_PATH);
        }
    }
}

/// A mount point that is unmounted on drop, after which its mount process is waited
/// for (it closes the store once unmounted).
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        if is_mountpoint(&self.0) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
        if is_mountpoint(&self.0) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
        wait_gone(&self.0);
    }
}

/// The process serving the mount on `mp` (a `cairn mount --foreground` naming it).
fn server_of(mp: &Path) -> Option<i32> {
    let mp = mp.as_os_str().as_encoded_bytes();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        if args.contains(&&b"--foreground"[..]) && args.contains(&mp) {
            return Some(pid);
        }
    }
    None
}

/// Waits (up to 20 s) until no process serves `mp`.
fn wait_gone(mp: &Path) {
    let start = Instant::now();
    while server_of(mp).is_some() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the mount process stays"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The line of /proc/self/mountinfo of the mount on `mp`.
fn mountinfo(mp: &Path) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mp = mp.to_str().unwrap();
    text.lines()
        .rfind(|l| l.split(' ').nth(4) == Some(mp))
        .map(str::to_owned)
}

/// `-o` options every test mount gets: the log in `tmp`, and the transport
/// scripts/test.sh chose.
fn base_options(tmp: &Path) -> String {
    let mut o = format!("log={}", tmp.join("mount.log").display());
    if let Ok(t) = std::env::var(common::TRANSPORT_ENV) {
        o.push_str(&format!(",transport={t}"));
    }
    o
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

struct Dirs {
    tmp: tempfile::TempDir,
    store: PathBuf,
    mp: PathBuf,
}

fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().unwrap();
    let (store, mp) = (tmp.path().join("store"), tmp.path().join("mnt"));
    std::fs::create_dir(&mp).unwrap();
    Dirs { tmp, store, mp }
}

#[test]
fn mount_t_cairn_fstab_lines_and_umount() {
    if !can_mount() {
        return;
    }
    let _lock = HELPER.lock().unwrap_or_else(|p| p.into_inner());
    let Some(_helper) = Helper::install() else {
        return;
    };
    let d = dirs();
    let opts = base_options(d.tmp.path());
    // mount -t cairn STORE DIR: returns once the mount serves.
    {
        let _m = Mounted(d.mp.clone());
        run(Command::new("mount")
            .args(["-t", "cairn", "-o", &opts])
            .arg(&d.store)
            .arg(&d.mp));
        let info = mountinfo(&d.mp).expect("mounted");
        // fuser's mount(2) gives type `fuse` and source `cairn` (no subtype).
        assert!(info.contains(" - fuse cairn "), "{info}");
        std::fs::write(d.mp.join("a"), b"one").unwrap();
        // Mounted again right after `umount`, before the old mount process has
        // closed the store (the new one waits for it).
        for _ in 0..3 {
            run(Command::new("umount").arg(&d.mp));
            run(Command::new("mount")
                .args(["-t", "cairn", "-o", &opts])
                .arg(&d.store)
                .arg(&d.mp));
        }
        run(Command::new("umount").arg(&d.mp));
        assert!(!is_mountpoint(&d.mp));
        wait_gone(&d.mp);
    }
    // fstab lines: one mounted by `mount -a`, one `noauto` (systemd's options) mounted
    // by naming its mount point.
    let mp2 = d.tmp.path().join("mnt2");
    std::fs::create_dir(&mp2).unwrap();
    let store2 = d.tmp.path().join("store2");
    let fstab = d.tmp.path().join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "# test fstab\n{} {} cairn defaults,_netdev,nofail,{opts} 0 0\n\
             {} {} cairn defaults,_netdev,nofail,noauto,x-systemd.automount,{opts} 0 0\n",
            d.store.display(),
            d.mp.display(),
            store2.display(),
            mp2.display()
        ),
    )
    .unwrap();
    let _m = Mounted(d.mp.clone());
    let _m2 = Mounted(mp2.clone());
    run(Command::new("mount").arg("-a").arg("-T").arg(&fstab));
    assert!(is_mountpoint(&d.mp));
    assert!(!is_mountpoint(&mp2), "noauto is not mounted by mount -a");
    assert_eq!(std::fs::read(d.mp.join("a")).unwrap(), b"one");
    run(Command::new("mount").arg("-T").arg(&fstab).arg(&mp2));
    assert!(is_mountpoint(&mp2));
    std::fs::write(mp2.join("b"), b"two").unwrap();
    run(Command::new("umount").arg(&mp2));
    run(Command::new("umount").arg(&d.mp));
    assert!(!is_mountpoint(&d.mp) && !is_mountpoint(&mp2));
}

/// The options of the systemd unit in docs/mount.md, as systemd runs them
/// (`mount WHAT WHERE -t cairn -o OPTIONS`).
#[test]
fn the_documented_systemd_unit_mounts() {
    if !can_mount() {
        return;
    }
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/mount.md"))
        .unwrap();
    let field = |name: &str| {
        doc.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("docs/mount.md's unit has no {name}="))
            .to_owned()
    };
    assert_eq!(field("Type"), "cairn");
    let options = field("Options");
    let _lock = HELPER.lock().unwrap_or_else(|p| p.into_inner());
    let Some(_helper) = Helper::install() else {
        return;
    };
    let d = dirs();
    let _m = Mounted(d.mp.clone());
    run(Command::new("mount")
        .arg(&d.store)
        .arg(&d.mp)
        .args(["-t", "cairn", "-o"])
        .arg(format!("{options},{}", base_options(d.tmp.path()))));
    assert!(is_mountpoint(&d.mp));
    std::fs::write(d.mp.join("x"), b"x").unwrap();
}

#[test]
fn a_cluster_through_mount_t_cairn() {
    if !can_mount() {
        return;
    }
    let _lock = HELPER.lock().unwrap_or_else(|p| p.into_inner());
    let Some(_helper) = Helper::install() else {
        return;
    };
    let d = dirs();
    let Some(server) = Server::start(d.tmp.path()) else {
        return;
    };
    let opts = base_options(d.tmp.path());
    {
        let _m = Mounted(d.mp.clone());
        let source = format!("cluster:{}", server.file.display());
        run(Command::new("mount")
            .args([
                "-t",
                "cairn",
                "-o",
                &format!("{opts},timeout=5,nosuid,nodev"),
            ])
            .arg(&source)
            .arg(&d.mp));
        let info = mountinfo(&d.mp).expect("mounted");
        assert!(info.contains("nosuid") && info.contains("nodev"), "{info}");
        std::fs::write(d.mp.join("c"), b"cluster").unwrap();
        run(Command::new("umount").arg(&d.mp));
        wait_gone(&d.mp);
    }
    // The cluster and the client's certificate named by options, the source a label.
    let _m = Mounted(d.mp.clone());
    run(Command::new("mount")
        .args(["-t", "cairn", "-o"])
        .arg(format!(
            "{opts},cluster={},cert={},key={}",
            server.file.display(),
            server.certs.join("client-0.pem").display(),
            server.certs.join("client-0.key").display()
        ))
        .arg("cairn")
        .arg(&d.mp));
    assert_eq!(std::fs::read(d.mp.join("c")).unwrap(), b"cluster");
}

/// One `cairn serve` on loopback (mutual TLS, the certificates `cairn cluster
/// init-certs` makes) and its cluster file.
struct Server {
    child: std::process::Child,
    file: PathBuf,
    certs: PathBuf,
}

impl Server {
    fn start(tmp: &Path) -> Option<Server> {
        let port = cairn_testkit::loopback_addr().port();
        let plain = tmp.join("plain.toml");
        std::fs::write(
            &plain,
            format!("[[server]]\nid = 0\naddr = \"127.0.0.1:{port}\"\n"),
        )
        .unwrap();
        let certs = tmp.join("certs");
        run(cairn()
            .args(["cluster", "init-certs"])
            .arg(&certs)
            .arg("--cluster")
            .arg(&plain)
            .args(["--clients", "1"]));
        let file = certs.join("cluster.toml");
        let child = cairn()
            .arg("serve")
            .arg("--dir")
            .arg(tmp.join("server"))
            .args(["--listen", &format!("127.0.0.1:{port}"), "--sync", "never"])
            .arg("--cluster")
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "serve did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Server { child, file, certs })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn errors_are_reported_and_leave_nothing_mounted() {
    if !can_mount() {
        return;
    }
    let d = dirs();
    let log = format!("--log={}", d.tmp.path().join("mount.log").display());
    let fails = |args: &[&std::ffi::OsStr], want: &str| {
        let out = cairn()
            .arg("mount")
            .arg(&log)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    };
    // A store that is not one: a regular file.
    let file = d.tmp.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    fails(&[file.as_os_str(), d.mp.as_os_str()], "opening");
    assert!(!is_mountpoint(&d.mp));
    // A mount point that does not exist.
    let missing = d.tmp.path().join("missing");
    fails(&[d.store.as_os_str(), missing.as_os_str()], "mounting on");
    // A store another mount holds.
    let _m = Mounted(d.mp.clone());
    let out = cairn()
        .arg("mount")
        .arg(&log)
        .arg(&d.store)
        .arg(&d.mp)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mp2 = d.tmp.path().join("mnt2");
    std::fs::create_dir(&mp2).unwrap();
    fails(&[d.store.as_os_str(), mp2.as_os_str()], "locked");
    assert!(!is_mountpoint(&mp2));
    // Unknown options and bad values: usage errors (64) that name them.
    for o in [
        "frobnicate",
        "entry_timeout=soon",
        "transport=pigeon",
        "ro=1",
    ] {
        let out = cairn()
            .arg("mount")
            .arg(&d.store)
            .arg(&mp2)
            .args(["-o", o])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{o}: {err}");
        assert!(err.contains(o.split('=').next().unwrap()), "{o}: {err}");
    }
    assert!(!is_mountpoint(&mp2));
}

#[test]
fn background_mount_outlives_its_shell_and_sigterm_unmounts() {
    if !can_mount() {
        return;
    }
    let d = dirs();
    let _m = Mounted(d.mp.clone());
    // A shell in a process group of its own starts the mount and ends; then the group
    // gets SIGHUP, as a closed terminal sends it.
    let script = format!(
        "'{}' mount -o '{}' '{}' '{}'",
        env!("CARGO_BIN_EXE_cairn"),
        base_options(d.tmp.path()),
        d.store.display(),
        d.mp.display()
    );
    let mut sh = Command::new("sh");
    std::os::unix::process::CommandExt::process_group(&mut sh, 0);
    let mut sh = sh.arg("-c").arg(script).spawn().unwrap();
    let shell = sh.id() as i32;
    assert!(sh.wait().unwrap().success());
    // SAFETY: kill(2) of a process group, which may be empty by now (ESRCH is fine).
    unsafe { libc::kill(-shell, libc::SIGHUP) };
    std::thread::sleep(Duration::from_millis(300));
    assert!(is_mountpoint(&d.mp));
    std::fs::write(d.mp.join("kept"), b"kept").unwrap();
    let server = server_of(&d.mp).expect("a mount process");
    // It runs in a session of its own.
    // SAFETY: getsid has no preconditions.
    assert_ne!(unsafe { libc::getsid(server) }, unsafe { libc::getsid(0) });
    // SAFETY: kill(2) of the mount process found above, still serving.
    unsafe { libc::kill(server, libc::SIGTERM) };
    wait_gone(&d.mp);
    assert!(!is_mountpoint(&d.mp));
    // Unmounted cleanly: the store is free again.
    run(cairn().arg("--db").arg(&d.store).args(["put", "k", "v"]));
}

/// Request counts of a mount with `options`, after `work` ran on it.
fn counts(options: &str, work: impl FnOnce(&Path)) -> std::collections::HashMap<String, u64> {
    let d = dirs();
    let stats = d.tmp.path().join("counts");
    {
        let _m = Mounted(d.mp.clone());
        let out = cairn()
            .arg("mount")
            .args(["-o", &format!("{},{options}", base_options(d.tmp.path()))])
            .arg(&d.store)
            .arg(&d.mp)
            .env(cairn_fuse::STATS_ENV, &stats)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        work(&d.mp);
    }
    cairn_fuse::parse_counts(&std::fs::read_to_string(&stats).unwrap())
        .into_iter()
        .collect()
}

#[test]
fn options_take_effect() {
    if !can_mount() {
        return;
    }
    // mountinfo: ro, nosuid, nodev, allow_other, default_permissions.
    let d = dirs();
    {
        let _m = Mounted(d.mp.clone());
        let out = cairn()
            .arg("mount")
            .args([
                "-o",
                &format!(
                    "{},ro,nosuid,nodev,allow_other,default_permissions",
                    base_options(d.tmp.path())
                ),
            ])
            .arg(&d.store)
            .arg(&d.mp)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let info = mountinfo(&d.mp).unwrap();
        for o in [
            "ro,",
            "nosuid",
            "nodev",
            "allow_other",
            "default_permissions",
        ] {
            assert!(info.contains(o), "{o}: {info}");
        }
        let err = std::fs::write(d.mp.join("f"), b"x").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EROFS));
        assert_eq!(
            std::fs::create_dir(d.mp.join("d"))
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EROFS)
        );
    }
    // Cached lookups: a name stat'ed 50 times is looked up once by default, every time
    // with entry_timeout=0,attr_timeout=0; an absent one likewise with
    // negative_timeout=0.
    let stat50 = |mp: &Path| {
        std::fs::write(mp.join("here"), b"x").unwrap();
        for _ in 0..50 {
            std::fs::metadata(mp.join("here")).unwrap();
            assert!(std::fs::metadata(mp.join("absent")).is_err());
        }
    };
    let cached = counts("", stat50);
    let uncached = counts("entry_timeout=0,attr_timeout=0,negative_timeout=0", stat50);
    let n = |c: &std::collections::HashMap<String, u64>, k: &str| c.get(k).copied().unwrap_or(0);
    assert!(n(&cached, "LOOKUP") <= 3, "{cached:?}");
    assert!(n(&uncached, "LOOKUP") >= 100, "{uncached:?}");
    let negative_only = counts("negative_timeout=0", stat50);
    let l = n(&negative_only, "LOOKUP");
    assert!((50..100).contains(&l), "{negative_only:?}");
    // writeback_cache: 2000 writes of 10 bytes are a few WRITE requests, not 2000.
    let small_writes = |mp: &Path| {
        let mut f = std::fs::File::create(mp.join("w")).unwrap();
        for _ in 0..2000 {
            f.write_all(b"0123456789").unwrap();
        }
        drop(f);
        assert_eq!(std::fs::metadata(mp.join("w")).unwrap().len(), 20_000);
    };
    let through = counts("", small_writes);
    let cached = counts("writeback_cache", small_writes);
    assert!(n(&through, "WRITE") >= 2000, "{through:?}");
    assert!(n(&cached, "WRITE") <= 10, "{cached:?}");
    // transport=classic: every request comes through /dev/fuse reads.
    let classic = counts("transport=classic", |mp| {
        std::fs::write(mp.join("t"), b"t").unwrap();
    });
    assert_eq!(n(&classic, "VIA_URING"), 0, "{classic:?}");
    assert!(n(&classic, "VIA_DEV") > 0, "{classic:?}");
}

/// Under writeback_cache: appends, truncates and shared mappings (where sshfs's
/// writeback mode had bugs) read back as written, in the mount and after a new one.
#[test]
fn writeback_cache_appends_truncates_and_maps() {
    if !can_mount() {
        return;
    }
    let d = dirs();
    let opts = format!("{},writeback_cache", base_options(d.tmp.path()));
    let mount = || {
        let out = cairn()
            .arg("mount")
            .args(["-o", &opts])
            .arg(&d.store)
            .arg(&d.mp)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        Mounted(d.mp.clone())
    };
    let want: Vec<u8>;
    {
        let _m = mount();
        let p = d.mp.join("f");
        std::fs::write(&p, b"hello").unwrap();
        // O_APPEND, write-only, from two opens.
        for part in [&b" world"[..], b"!"] {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .custom_flags(0)
                .open(&p)
                .unwrap();
            f.write_all(part).unwrap();
        }
        assert_eq!(std::fs::read(&p).unwrap(), b"hello world!");
        // Truncates down and up.
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(5).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"hello");
        f.set_len(8).unwrap();
        drop(f);
        assert_eq!(std::fs::read(&p).unwrap(), b"hello\0\0\0");
        // A shared writable mapping, synced with msync, then an append after it.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        f.set_len(8192).unwrap();
        // SAFETY: a fresh shared mapping of 8192 bytes of an open file, written within
        // its bounds and unmapped before the file is closed.
        unsafe {
            use std::os::fd::AsRawFd;
            let m = libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            );
            assert_ne!(m, libc::MAP_FAILED);
            let s = std::slice::from_raw_parts_mut(m.cast::<u8>(), 8192);
            s[0] = b'J';
            s[4096..4100].copy_from_slice(b"page");
            assert_eq!(libc::msync(m, 8192, libc::MS_SYNC), 0);
            assert_eq!(libc::munmap(m, 8192), 0);
        }
        drop(f);
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"end").unwrap();
        drop(f);
        let mut w = b"Jello\0\0\0".to_vec();
        w.resize(4096, 0);
        w.extend_from_slice(b"page");
        w.resize(8192, 0);
        w.extend_from_slice(b"end");
        assert_eq!(std::fs::read(&p).unwrap(), w);
        want = w;
    }
    wait_gone(&d.mp);
    let _m = mount();
    assert_eq!(std::fs::read(d.mp.join("f")).unwrap(), want);
}
