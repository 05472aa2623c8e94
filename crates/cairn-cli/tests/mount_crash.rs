//! The file-system model check through the mount: `cairn mount` serves a store while
//! this test runs the workload of crates/cairn-fs/tests/fsmodel on the mountpoint with
//! plain system calls (open with O_CREAT|O_EXCL, pwrite of bytes no other write
//! writes, ftruncate, mkdir, rename, link, symlink, unlink, rmdir, fsync of the root).
//! The mount process is killed with SIGKILL (after the operations, or in the middle of
//! them: once a given number of operations has started, and before the last one; the
//! test asserts both, and that the operations after the kill failed), and the store, opened directly, must hold exactly the state after some prefix
//! of the operations (namespace, link groups, every file's content), no shorter than
//! the last fsync, with `Fs::check` clean; a write may have reached the store in part,
//! at a 4 KiB boundary (the kernel splits a `pwrite` into several FUSE requests). The
//! next mount must show that state.
//!
//! A second test kills a mount that made no fsync at all, some time after the last
//! operation: the periodic write-out (`-o flush_interval`) must have put every
//! operation in the store.
//!
//! Skips where FUSE can't be used, like tests/mount.rs (reported through
//! `common::skip`, a failure with `CAIRN_TEST_NO_SKIP=1`).

mod common;
#[path = "../../cairn-fs/tests/fsmodel/mod.rs"]
mod fsmodel;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use common::Mount;
use fsmodel::{Canon, Gen, Model, Op};

/// A kill of the mount process in the middle of a workload: once the workload has
/// started `after` operations, unless it finished first.
struct Killer {
    /// Operations the workload has started (counted before each one is made).
    started: Arc<AtomicUsize>,
    /// Set by the workload when it has made its last operation.
    finished: Arc<AtomicBool>,
    /// Set just before the kill: an operation that fails from then on failed because
    /// of it.
    killing: Arc<AtomicBool>,
    /// Operations started when the kill was sent (`None`: the workload finished first).
    thread: JoinHandle<Option<usize>>,
}

impl Killer {
    fn start(pid: i32, after: usize) -> Killer {
        let started = Arc::new(AtomicUsize::new(0));
        let finished = Arc::new(AtomicBool::new(false));
        let killing = Arc::new(AtomicBool::new(false));
        let (s, f, k) = (started.clone(), finished.clone(), killing.clone());
        let thread = std::thread::spawn(move || {
            while s.load(Ordering::SeqCst) < after {
                if f.load(Ordering::SeqCst) {
                    return None;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            k.store(true, Ordering::SeqCst);
            let at = s.load(Ordering::SeqCst);
            // SAFETY: kill(2) of our own child, reaped only after this thread ends (so
            // its pid is not reused).
            unsafe { libc::kill(pid, libc::SIGKILL) };
            Some(at)
        });
        Killer {
            started,
            finished,
            killing,
            thread,
        }
    }
}

#[test]
#[allow(clippy::too_many_lines)]
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
        let total = 40 + 10 * cycle + 2000 * (cycle % 2);
        // Even cycles: the mount is killed once the operations are done; odd ones: in the
        // middle of them, from another thread, once `kill_after` operations have started
        // (the operation in flight then fails, and every one after it).
        let kill_after = 25 + 100 * cycle as usize;
        let killer = (cycle % 2 == 1).then(|| Killer::start(m.pid(), kill_after));
        // The first operation that failed (the mount killed).
        let mut failed = None;
        for i in 0..total {
            let op = model.next_op(&mut g, (cycle << 20) + i);
            model.apply(&op);
            done.push(op.clone());
            if let Some(k) = &killer {
                k.started.store(done.len(), Ordering::SeqCst);
            }
            if let Err(e) = fsmodel::apply_posix(&mp, &op) {
                assert!(
                    killer
                        .as_ref()
                        .is_some_and(|k| k.killing.load(Ordering::SeqCst)),
                    "cycle {cycle}: {op:?} through the mount: {e}"
                );
                failed = Some(done.len() - 1);
                break;
            }
            if matches!(op, Op::Fsync) {
                synced = done.len();
            }
        }
        if let Some(k) = killer {
            k.finished.store(true, Ordering::SeqCst);
            let at = k.thread.join().unwrap();
            // The kill landed in the middle: after `kill_after` operations had started,
            // before the last one, and the workload saw it (an operation failed, and
            // none that started before the kill was sent).
            let at = at.unwrap_or_else(|| {
                panic!("cycle {cycle}: the {total} operations finished before the kill")
            });
            assert!(
                at >= kill_after && at < total as usize,
                "cycle {cycle}: killed after {at} of {total} operations started"
            );
            let failed = failed.unwrap_or_else(|| {
                panic!("cycle {cycle}: killed after {at} operations, yet every one succeeded")
            });
            assert!(
                failed + 1 >= at,
                "cycle {cycle}: operation {failed} failed, before the kill (sent with {at} started)"
            );
            println!("cycle {cycle}: killed with {at} of {total} operations started, operation {failed} failed");
        } else {
            assert_eq!(failed, None);
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

/// The periodic write-out: a mount killed with SIGKILL, with no fsync made, more than
/// the write-out interval after its last operation keeps every operation (with the
/// interval 0, none of them reaches the store's files in such a short run).
#[test]
fn killed_mount_keeps_what_the_periodic_write_out_wrote() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, mp) = (tmp.path().join("store"), tmp.path().join("mnt"));
    std::fs::create_dir(&mp).unwrap();
    let interval = Duration::from_secs(1);
    let opt = format!("flush_interval={}", interval.as_secs());
    let Some(m) = Mount::with_args(&store, &mp, &["-o", &opt]) else {
        return;
    };
    let start = Model::from_canon(&Canon::new());
    let mut model = start.clone();
    let mut g = Gen(9_000);
    let mut done: Vec<Op> = Vec::new();
    for i in 0..400 {
        let op = model.next_op(&mut g, i);
        if matches!(op, Op::Fsync) {
            continue;
        }
        model.apply(&op);
        fsmodel::apply_posix(&mp, &op).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        done.push(op);
    }
    std::thread::sleep(3 * interval);
    m.kill();
    let fs = cairn_fs::Fs::open(&store).unwrap();
    let report = fs.check().unwrap();
    assert!(report.is_empty(), "{report:#?}");
    let got = fsmodel::snapshot_fs(&fs).unwrap();
    let n = done.len();
    let p = fsmodel::check_prefix(&start, &done, &got, 0, false, "after the kill");
    assert_eq!(
        p,
        n,
        "the store holds {p} of the {n} operations made {}s before the kill",
        3 * interval.as_secs()
    );
    fs.close().unwrap();
}
