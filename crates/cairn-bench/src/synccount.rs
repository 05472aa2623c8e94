//! Counting the `fsync` and `fdatasync` calls of this process, for "writes per fsync"
//! of the durable fills, the same way for every engine: the kernel's `sys_enter_fsync`
//! and `sys_enter_fdatasync` tracepoints, counted by `perf_event_open` with `inherit`
//! set, opened by the benchmark child's main thread before any engine starts a thread,
//! so that every thread of the child is counted (a thread's count joins its parent's
//! when it exits). No engine exposes such a count itself.
//!
//! Needs the tracepoints' ids from tracefs and permission to count them (root, or
//! `perf_event_paranoid` ≤ 1 with access to tracefs). When tracefs is not mounted and
//! this process is root, it is mounted at `/sys/kernel/tracing` (its usual place; it
//! changes nothing else). Otherwise the count is unavailable and the report says why.

use std::fs::File;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::OnceLock;

/// Where tracefs is usually mounted.
const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// `PERF_TYPE_TRACEPOINT` of `linux/perf_event.h`.
const PERF_TYPE_TRACEPOINT: u64 = 2;
/// `PERF_ATTR_SIZE_VER0`: the first 64 bytes of `struct perf_event_attr`, all this needs.
const PERF_ATTR_SIZE_VER0: u64 = 64;
/// The `inherit` bit of the attribute's flags word (bit 0 is `disabled`, left clear).
const PERF_ATTR_FLAG_INHERIT: u64 = 1 << 1;
/// `PERF_FLAG_FD_CLOEXEC`.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

static COUNTER: OnceLock<Result<Vec<File>, String>> = OnceLock::new();

fn tracepoint_id(name: &str) -> Result<u64, String> {
    for root in TRACEFS {
        let p = Path::new(root)
            .join("events/syscalls")
            .join(name)
            .join("id");
        if let Ok(s) = std::fs::read_to_string(&p) {
            return s
                .trim()
                .parse()
                .map_err(|e| format!("{}: {e}", p.display()));
        }
    }
    Err(format!(
        "tracepoint syscalls/{name} not found (tracefs not mounted at {}, or no permission)",
        TRACEFS[0]
    ))
}

/// Mounts tracefs at its usual place when it is not mounted and this process is root.
fn mount_tracefs() {
    let events = Path::new(TRACEFS[0]).join("events");
    // SAFETY: geteuid has no preconditions.
    if events.exists() || unsafe { libc::geteuid() } != 0 {
        return;
    }
    let (src, target, fstype) = (c"nodev", c"/sys/kernel/tracing", c"tracefs");
    // SAFETY: the strings are NUL-terminated and outlive the call; no data argument. A
    // failure shows as the tracepoints not being found.
    unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        );
    }
}

fn open_one(id: u64) -> Result<File, String> {
    let mut attr = [0u64; 8];
    attr[0] = PERF_TYPE_TRACEPOINT | (PERF_ATTR_SIZE_VER0 << 32);
    attr[1] = id;
    attr[5] = PERF_ATTR_FLAG_INHERIT;
    // SAFETY: `attr` is a zeroed perf_event_attr of PERF_ATTR_SIZE_VER0 bytes that lives
    // through the call; pid 0 / cpu -1: this thread (and, inherited, its descendants) on
    // any CPU; no group.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            0 as libc::pid_t,
            -1 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(format!(
            "perf_event_open: {} (needs root or kernel.perf_event_paranoid <= 1)",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: a new descriptor that nothing else owns.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
}

/// Starts counting, once per process; call from the main thread before any engine
/// starts threads. Later calls do nothing.
pub fn start() {
    COUNTER.get_or_init(|| {
        mount_tracefs();
        ["sys_enter_fsync", "sys_enter_fdatasync"]
            .into_iter()
            .map(|name| tracepoint_id(name).and_then(open_one))
            .collect()
    });
}

/// `fsync` plus `fdatasync` calls by this process's threads since [`start`], or why
/// there is no count.
pub fn syncs() -> Result<u64, String> {
    let files = COUNTER
        .get()
        .ok_or_else(|| "sync counting was not started".to_string())?
        .as_ref()
        .map_err(Clone::clone)?;
    let mut total = 0;
    for f in files {
        let mut b = [0u8; 8];
        (&*f)
            .read_exact(&mut b)
            .map_err(|e| format!("reading a perf counter: {e}"))?;
        total += u64::from_ne_bytes(b);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where counting works here, the fdatasyncs of a thread started after `start` are
    /// counted exactly; where it does not, the reason is given.
    #[test]
    fn counts_the_syncs_of_a_later_thread() {
        start();
        let Ok(before) = syncs() else {
            eprintln!("skipped: {}", syncs().unwrap_err());
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::thread::spawn(move || {
            let f = File::create(path).unwrap();
            for _ in 0..5 {
                f.sync_data().unwrap();
            }
            f.sync_all().unwrap();
        })
        .join()
        .unwrap();
        let n = syncs().unwrap() - before;
        assert!(n >= 6, "counted {n} syncs, 6 made");
    }
}
