//! Shared by the tests of the `cairn` binary: reporting a part of a test that can't run
//! on this machine ([`skip`]), and the helpers of the mounted tests (tests/mount.rs on a
//! local store, tests/cluster.rs on a cluster): a `cairn mount` child undone on drop,
//! shell scripts, and the everyday-tools workload compared between a mount and a plain
//! directory. The cluster tests' network (`net`: servers in network namespaces, or on
//! loopback; partitions) and cluster of `cairn serve` processes (`cluster`).
//!
//! Mounts skip (the helpers return `None`, the skip reported through [`skip`]) where FUSE
//! can't be used, as `cairn_fuse::unavailable` and `cairn_fuse::is_refusal` judge it: no
//! usable /dev/fuse, no privilege to mount, or a mount refused with EPERM/EACCES
//! (containers without the capability). Any other failure of a mount fails the test.

#![allow(dead_code)]

pub mod cluster;
pub mod faults;
pub mod groups;
pub mod linear;
pub mod net;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Environment variable naming a file that skipped parts are appended to, one line each
/// (scripts/test.sh sets it and lists the file's lines after the tests).
pub const SKIPS_ENV: &str = "CAIRN_TEST_SKIPS";
/// Environment variable that, set to 1, makes every skip a failure (for machines that
/// must run everything, such as CI with FUSE and the tools installed).
pub const NO_SKIP_ENV: &str = "CAIRN_TEST_NO_SKIP";

/// Reports that `what` was skipped, and why: printed, appended to the file named by
/// [`SKIPS_ENV`], and a failure when [`NO_SKIP_ENV`] is 1.
pub fn skip(what: &str) {
    let line = format!("SKIP: {what}");
    println!("{line}");
    if std::env::var(NO_SKIP_ENV).is_ok_and(|v| v == "1") {
        panic!("{line} ({NO_SKIP_ENV}=1 forbids skipping)");
    }
    if let Some(path) = std::env::var_os(SKIPS_ENV) {
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        if let Err(e) = written {
            panic!("recording a skip in {}: {e}", path.to_string_lossy());
        }
    }
}

pub fn cairn() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
}

pub fn is_mountpoint(p: &Path) -> bool {
    match (std::fs::metadata(p), std::fs::metadata(p.join(".."))) {
        (Ok(a), Ok(b)) => a.dev() != b.dev(),
        _ => false,
    }
}

/// The transport every test mount uses (`cairn mount --transport`), when set:
/// scripts/test.sh runs the mount tests once with io_uring and once with `classic`.
pub const TRANSPORT_ENV: &str = "CAIRN_TEST_FUSE_TRANSPORT";

/// `--transport T` for a `cairn mount` when [`TRANSPORT_ENV`] sets T, else nothing.
pub fn transport_args() -> Vec<String> {
    match std::env::var(TRANSPORT_ENV) {
        Ok(t) => vec!["--transport".into(), t],
        Err(_) => Vec::new(),
    }
}

/// A running `cairn mount`; unmounted (and the process reaped) on drop.
pub struct Mount {
    child: Option<Child>,
    mp: PathBuf,
    /// What the mount wrote to its standard error, read as it comes by a thread of
    /// its own (a pipe nobody read would stop the mount once full).
    stderr: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Mount {
    /// Mounts `store` on `mp`; `None` (with the skip reported) where FUSE can't be used.
    pub fn new(store: &Path, mp: &Path) -> Option<Mount> {
        Mount::with_args(store, mp, &[])
    }

    /// [`Mount::new`] with more arguments of `cairn mount`.
    pub fn with_args(store: &Path, mp: &Path, args: &[&str]) -> Option<Mount> {
        Mount::with_args_env(store, mp, args, &[])
    }

    /// [`Mount::new`] with variables added to the mount process's environment.
    pub fn with_env(store: &Path, mp: &Path, env: &[(&str, &Path)]) -> Option<Mount> {
        Mount::with_args_env(store, mp, &[], env)
    }

    /// [`Mount::with_args`] with variables added to the mount process's environment.
    pub fn with_args_env(
        store: &Path,
        mp: &Path,
        args: &[&str],
        env: &[(&str, &Path)],
    ) -> Option<Mount> {
        let mut all: Vec<OsString> = vec![store.into(), mp.into()];
        all.extend(args.iter().map(OsString::from));
        Mount::spawn_env(&all, mp, env)
    }

    /// Mounts the cluster of `cluster_file` on `mp` (`cairn mount --cluster FILE MP`).
    pub fn cluster(cluster_file: &Path, mp: &Path, args: &[&str]) -> Option<Mount> {
        Mount::cluster_env(cluster_file, mp, args, &[])
    }

    /// [`Mount::cluster`] with variables added to the mount process's environment.
    pub fn cluster_env(
        cluster_file: &Path,
        mp: &Path,
        args: &[&str],
        env: &[(&str, &Path)],
    ) -> Option<Mount> {
        let mut all: Vec<OsString> = vec!["--cluster".into(), cluster_file.into(), mp.into()];
        all.extend(args.iter().map(OsString::from));
        Mount::spawn_env(&all, mp, env)
    }

    /// Whether FUSE can be used here, as `cairn_fuse::unavailable` judges it (else the
    /// skip is reported, see [`skip`]).
    pub fn fuse_usable() -> bool {
        match cairn_fuse::unavailable() {
            None => true,
            Some(why) => {
                skip(&format!("mounted tests: FUSE is unavailable here ({why})"));
                false
            }
        }
    }

    /// Runs `cairn mount ARGS` with `env` added and waits until `mp` is mounted.
    fn spawn_env(args: &[OsString], mp: &Path, env: &[(&str, &Path)]) -> Option<Mount> {
        if !Mount::fuse_usable() {
            return None;
        }
        let chosen = args.iter().any(|a| a == "--transport");
        let transport = if chosen { Vec::new() } else { transport_args() };
        let mut child = cairn()
            .args(["mount", "--foreground"])
            .args(args)
            .args(&transport)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let drain = {
            let (mut from, to) = (child.stderr.take().unwrap(), stderr.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = std::io::Read::read(&mut from, &mut buf) {
                    if n == 0 {
                        break;
                    }
                    to.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            })
        };
        let mut m = Mount {
            child: Some(child),
            mp: mp.to_path_buf(),
            stderr,
        };
        let start = Instant::now();
        while !is_mountpoint(mp) {
            if let Some(st) = m.child.as_mut().unwrap().try_wait().unwrap() {
                m.child = None;
                let _ = drain.join();
                let err = m.log();
                if cairn_fuse::is_refusal(&err) {
                    skip(&format!(
                        "mounted tests: the FUSE mount was refused here ({})",
                        err.trim()
                    ));
                    return None;
                }
                panic!("cairn mount exited with {st}: {err}");
            }
            assert!(start.elapsed() < Duration::from_secs(20), "mount timed out");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(m)
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// What the mount has written to its standard error so far.
    pub fn log(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Kills the mount process with SIGKILL, reaps it and undoes the dead mount (a
    /// lazy unmount).
    pub fn kill(mut self) {
        let mut c = self.child.take().unwrap();
        // SAFETY: kill(2) of our own child, not yet reaped (so its pid is not reused).
        unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
        c.wait().unwrap();
        let _ = Command::new("umount").arg("-l").arg(&self.mp).status();
    }

    /// Waits for the mount process to end (it writes out and syncs what it holds
    /// first: on a disk busy with other work that can take many seconds); its exit
    /// status. Killed after two minutes, which loses what it had not written.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().unwrap();
        let start = Instant::now();
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                return st;
            }
            if start.elapsed() > Duration::from_secs(120) {
                eprintln!(
                    "the mount of {} did not end in 120 s: killed",
                    self.mp.display()
                );
                let _ = c.kill();
                return c.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if is_mountpoint(&self.mp) {
            let _ = cairn().arg("umount").arg(&self.mp).status();
        }
        if is_mountpoint(&self.mp) {
            let _ = Command::new("umount").arg("-l").arg(&self.mp).status();
        }
        if self.child.is_some() {
            self.wait();
        }
    }
}

pub fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("sh")
        .arg("-ec")
        .arg(script)
        .current_dir(dir)
        .env("LC_ALL", "C")
        .env("GIT_AUTHOR_DATE", "2020-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2020-01-01T00:00:00Z")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "in {}: {script}\nstdout: {}\nstderr: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Every entry under `root`: type, permissions, link count of files, mtime where tools
/// preserve it, and the bytes of files and link targets.
pub fn tree(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if rel.ends_with(".git/index") {
                continue; // holds inode and device numbers
            }
            let m = std::fs::symlink_metadata(&p).unwrap();
            let perm = m.permissions().mode() & 0o7777;
            let keep_mtime = rel.starts_with("copy/") || rel.starts_with("untar/");
            let desc = if m.is_dir() {
                stack.push(p.clone());
                format!("dir {perm:o}")
            } else if m.file_type().is_symlink() {
                format!("link -> {:?}", std::fs::read_link(&p).unwrap())
            } else if m.is_file() {
                let data = std::fs::read(&p).unwrap();
                let mt = if keep_mtime && !rel.ends_with("saved.txt") {
                    m.mtime()
                } else {
                    0
                };
                format!(
                    "file {perm:o} nlink={} size={} mtime={mt} data={:x?}",
                    m.nlink(),
                    m.len(),
                    blake(&data)
                )
            } else {
                format!("other {perm:o} {:o}", m.mode() & libc::S_IFMT)
            };
            out.insert(rel, desc);
        }
    }
    out
}

fn blake(d: &[u8]) -> u64 {
    // FNV-1a: enough to compare trees (lengths are compared too).
    let mut h = 0xcbf29ce484222325u64;
    for b in d {
        h = (h ^ *b as u64).wrapping_mul(0x100000001b3);
    }
    h
}

/// The source tree the tools work on.
pub fn make_source(src: &Path) {
    std::fs::create_dir_all(src.join("sub/deeper")).unwrap();
    std::fs::write(src.join("empty"), b"").unwrap();
    std::fs::write(src.join("small.txt"), b"hello\n").unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(src.join("sub/big.bin"), &big).unwrap();
    std::fs::write(src.join("sub/edge4096"), vec![b'x'; 4096]).unwrap();
    std::fs::write(src.join("sub/edge4097"), vec![b'y'; 4097]).unwrap();
    std::fs::write(src.join("sub/deeper/saved.txt"), b"old\n").unwrap();
    std::fs::write(src.join("name with spaces & ümlauts"), b"odd\n").unwrap();
    std::os::unix::fs::symlink("small.txt", src.join("link")).unwrap();
    std::os::unix::fs::symlink("../nowhere", src.join("sub/dangling")).unwrap();
    std::fs::hard_link(src.join("small.txt"), src.join("hard")).unwrap();
    std::fs::set_permissions(
        src.join("small.txt"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    std::fs::set_permissions(
        src.join("sub/deeper"),
        std::fs::Permissions::from_mode(0o750),
    )
    .unwrap();
    let script = src.join("run.sh");
    std::fs::write(&script, b"#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Runs the everyday tools in `t`, with `many` files in the big directory; returns
/// their outputs that must match.
pub fn workload(t: &Path, src: &Path, tarball: &Path, many: u32) -> Vec<String> {
    let s = src.display();
    let mut outs = Vec::new();
    sh(t, &format!("cp -a '{s}' copy"));
    sh(
        t,
        &format!("mkdir untar && tar xf '{}' -C untar", tarball.display()),
    );
    if have("rsync") {
        sh(t, &format!("rsync -a '{s}/' rsynced/"));
    } else {
        skip("rsync not found: the rsync part of the mounted tests (scripts/setup.sh installs it)");
    }
    sh(
        t,
        "mv copy/sub/deeper copy/moved && mv untar/empty untar/empty2",
    );
    // An editor's save: write a temporary file, then rename it over the original.
    sh(
        t,
        "printf 'new contents\\n' > copy/moved/.saved.txt.swp && mv copy/moved/.saved.txt.swp copy/moved/saved.txt",
    );
    sh(t, "rm -r untar/sub");
    outs.push(sh(t, "./copy/run.sh"));
    outs.push(sh(t, "find . | sort"));
    // (Without the "total" line: block allocation differs by design.)
    outs.push(sh(
        t,
        "ls -l copy | tail -n +2 | awk '{print $1, $2, $5, $9, $10, $11}'",
    ));
    sh(t, "du -s . >/dev/null && du -a copy >/dev/null");
    // A big directory.
    sh(
        t,
        &format!(
            "mkdir many && cd many && i=0; while [ $i -lt {many} ]; do : > f$i; i=$((i+1)); done"
        ),
    );
    outs.push(sh(t, "ls -l many | wc -l && ls many | sort | tail -3"));
    sh(t, "rm -r many");
    // What the kernel caches (entries and attributes, kept long) follows every change.
    outs.push(sh(
        t,
        "mkdir cache && cd cache && echo one > a && ln a b && stat -c '%n %h %s %a' a b && \
         rm b && stat -c '%n %h %s %a' a && echo longer >> a && stat -c '%s' a && \
         truncate -s 2 a && stat -c '%s' a && cat a && echo && chmod 604 a && stat -c '%a' a && \
         mkdir d1 d2 && stat -c '%n %h' d1 d2 . && mv d1 d2/ && stat -c '%n %h' d2 d2/d1 . && \
         echo x > c && mv c a && stat -c '%n %h %s' a && cat a && \
         echo y > f && ln f g && mv f a && stat -c '%n %h %s' a g && ls -la | tail -n +2 | awk '{print $1, $2, $5, $9}'",
    ));
    // Permission answers: access(2), and exec of files with and without x bits.
    outs.push(sh(
        t,
        "mkdir perm && cd perm && printf '#!/bin/sh\\necho ran\\n' > s && chmod 644 s && \
         { ./s 2>/dev/null || echo refused; } && { test -x s && echo x || echo no-x; } && \
         { test -x . && echo dir-x; } && chmod 000 s && { test -r s && test -w s && echo rw; } && \
         { cat s >/dev/null && echo read; } && chmod 010 s && ./s && test -x s && echo x && \
         chmod 700 . && echo >> s && echo written",
    ));
    if have("git") {
        sh(
            t,
            "git init -q repo && cp -a copy/sub repo/ && cp copy/small.txt repo/ && cd repo && \
             git add -A && git -c user.name=t -c user.email=t@example.com commit -qm first && \
             echo more >> small.txt && git -c user.name=t -c user.email=t@example.com commit -qam second",
        );
        outs.push(sh(
            t,
            "cd repo && git log --format='%H %s' && git status --porcelain && git fsck 2>&1",
        ));
    } else {
        skip("git not found: the git part of the mounted tests");
    }
    outs
}

/// Runs the workload (`many` files in its big directory) on a plain directory and on
/// the mount `mp`, and compares their outputs and the trees they leave, byte for byte.
pub fn compare_with_plain(tmp: &Path, mp: &Path, many: u32) {
    let (plain, src) = (tmp.join("plain"), tmp.join("src"));
    std::fs::create_dir(&plain).unwrap();
    make_source(&src);
    let tarball = tmp.join("src.tar");
    sh(tmp, &format!("tar cf '{}' -C src .", tarball.display()));
    let on_plain = workload(&plain, &src, &tarball, many);
    let on_mount = workload(mp, &src, &tarball, many);
    assert_eq!(on_plain, on_mount);
    assert_same_tree(&plain, mp);
}

/// Asserts that the trees under `a` and `b` are the same (see [`tree`]).
pub fn assert_same_tree(a: &Path, b: &Path) {
    let (a, b) = (tree(a), tree(b));
    for (k, v) in &a {
        assert_eq!(Some(v), b.get(k), "entry {k}");
    }
    assert_eq!(
        a.len(),
        b.len(),
        "extra entries: {:?}",
        b.keys().filter(|k| !a.contains_key(*k)).collect::<Vec<_>>()
    );
}
