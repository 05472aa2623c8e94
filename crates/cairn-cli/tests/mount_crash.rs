//! The file-system model check through the mount: `cairn mount` serves a store while
//! this test runs the workload of crates/cairn-fs/tests/fsmodel on the mountpoint with
//! plain system calls (open with O_CREAT|O_EXCL, pwrite of bytes no other write
//! writes, ftruncate, mkdir, rename, link, symlink, unlink, rmdir, fsync of the root).
//! The mount process is killed with SIGKILL (after the operations, or in the middle of
//! them), and the store, opened directly, must hold exactly the state after some prefix
//! of the operations (namespace, link groups, every file's content), no shorter than
//! the last fsync, with `Fs::check` clean; a write may have reached the store in part,
//! at a 4 KiB boundary (the kernel splits a `pwrite` into several FUSE requests). The
//! next mount must show that state.
//!
//! Skips (passes, printing why) where FUSE can't be used, like tests/mount.rs.

#[path = "../../cairn-fs/tests/fsmodel/mod.rs"]
mod fsmodel;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fsmodel::{Canon, Gen, Model, Op};

fn cairn() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
}

fn is_mountpoint(p: &Path) -> bool {
    match (std::fs::metadata(p), std::fs::metadata(p.join(".."))) {
        (Ok(a), Ok(b)) => a.dev() != b.dev(),
        _ => false,
    }
}

/// A running `cairn mount`; unmounted (and the process reaped) on drop.
struct Mount {
    child: Option<Child>,
    mp: PathBuf,
}

impl Mount {
    /// Mounts `store` on `mp`; `None` (with a printed reason) where FUSE can't be used.
    fn new(store: &Path, mp: &Path) -> Option<Mount> {
        if let Err(e) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
        {
            println!("SKIP: /dev/fuse can't be used here ({e}); mounted tests skipped");
            return None;
        }
        // The transport scripts/test.sh picks for this pass (see common::TRANSPORT_ENV).
        let transport: Vec<String> = std::env::var("CAIRN_TEST_FUSE_TRANSPORT")
            .map(|t| vec!["--transport".into(), t])
            .unwrap_or_default();
        let child = cairn()
            .arg("mount")
            .arg(store)
            .arg(mp)
            .args(&transport)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut m = Mount {
            child: Some(child),
            mp: mp.to_path_buf(),
        };
        let start = Instant::now();
        while !is_mountpoint(mp) {
            if let Some(st) = m.child.as_mut().unwrap().try_wait().unwrap() {
                let out = m.child.take().unwrap().wait_with_output().unwrap();
                let err = String::from_utf8_lossy(&out.stderr);
                if err.contains("ermission denied") || err.contains("not permitted") {
                    println!(
                        "SKIP: FUSE mount refused here ({}); mounted tests skipped",
                        err.trim()
                    );
                    return None;
                }
                panic!("cairn mount exited with {st}: {err}");
            }
            assert!(start.elapsed() < Duration::from_secs(20), "mount timed out");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(m)
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// Kills the mount process with SIGKILL and undoes the dead mount.
    fn kill(mut self) {
        let mut c = self.child.take().unwrap();
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
        c.wait().unwrap();
        let _ = Command::new("umount").arg("-l").arg(&self.mp).status();
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
        if let Some(mut c) = self.child.take() {
            let start = Instant::now();
            while c.try_wait().unwrap().is_none() {
                if start.elapsed() > Duration::from_secs(20) {
                    let _ = c.kill();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

#[test]
fn killed_mount_keeps_a_prefix_of_the_operations() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, mp) = (tmp.path().join("store"), tmp.path().join("mnt"));
    std::fs::create_dir(&mp).unwrap();
    let mut known = Canon::new();
    let (mut lost, mut kept) = (0, 0);
    for cycle in 0..5u64 {
        let Some(m) = Mount::new(&store, &mp) else {
            return;
        };
        let seen = fsmodel::snapshot_posix(&mp).unwrap();
        assert!(
            seen == known,
            "cycle {cycle}: the mount shows another state than the store held: {}",
            fsmodel::first_difference(&known, &seen)
        );
        let start = Model::from_canon(&known);
        let mut model = start.clone();
        let mut g = Gen(7_000 + cycle);
        let mut done: Vec<Op> = Vec::new();
        let mut synced = 0;
        // Even cycles: the mount is killed once the operations are done; odd ones: in the
        // middle of them, from another thread (the operation in flight then fails).
        let killer = (cycle % 2 == 1).then(|| {
            let pid = m.pid();
            let ms = 20 + 30 * cycle;
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(ms));
                // SAFETY: kill(2) on our own child, reaped only after this thread ends.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            })
        });
        for i in 0..(40 + 10 * cycle + 2000 * (cycle % 2)) {
            let op = model.next_op(&mut g, (cycle << 20) + i);
            model.apply(&op);
            done.push(op.clone());
            if let Err(e) = fsmodel::apply_posix(&mp, &op) {
                assert!(
                    killer.is_some(),
                    "cycle {cycle}: {op:?} through the mount: {e}"
                );
                break;
            }
            if matches!(op, Op::Fsync) {
                synced = done.len();
            }
        }
        if let Some(k) = killer {
            k.join().unwrap();
        }
        m.kill();
        let fs = cairn_fs::Fs::open(&store).unwrap();
        let report = fs.check().unwrap();
        assert!(report.is_empty(), "cycle {cycle}: {report:#?}");
        let got = fsmodel::snapshot_fs(&fs).unwrap();
        let p = fsmodel::check_prefix(
            &start,
            &done,
            &got,
            synced,
            true,
            &format!("cycle {cycle} ({} operations, {synced} synced)", done.len()),
        );
        if p < done.len() - usize::from(cycle % 2 == 1) {
            lost += 1;
        } else {
            kept += 1;
        }
        known = got;
        fs.close().unwrap();
    }
    println!("{kept} kills kept every operation, {lost} lost unsynced ones");
}
