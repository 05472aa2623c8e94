//! Request counts by kind, for `CAIRN_FUSE_STATS` ([`STATS_ENV`]): with
//! `CAIRN_FUSE_STATS=FILE` in its environment a mount counts the requests it serves by
//! kind and writes them to FILE (`KIND COUNT` lines, see [`parse_counts`]) at SIGUSR1 and
//! at unmount; `cairn fs-bench` uses it to report requests per operation. The requests
//! the file system sent on to others to serve them (a cluster's client: its requests to
//! the servers, [`cairn_fs::FileSystem::requests_sent`]) follow, prefixed [`SENT_PREFIX`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Weak;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use cairn_fs::FileSystem;

/// The environment variable that names the file a mount writes its request counts to.
pub const STATS_ENV: &str = "CAIRN_FUSE_STATS";

/// Kinds of requests, counted for `CAIRN_FUSE_STATS`.
#[derive(Clone, Copy)]
pub(crate) enum Op {
    Lookup,
    Forget,
    BatchForget,
    Getattr,
    Setattr,
    Readlink,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Symlink,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Flush,
    Release,
    Fsync,
    Opendir,
    Readdir,
    ReaddirPlus,
    Releasedir,
    Fsyncdir,
    Statfs,
    Setxattr,
    Getxattr,
    Listxattr,
    Removexattr,
    Access,
    Create,
    Fallocate,
    CopyFileRange,
}

/// Names of the [`Op`]s, in order (the kernel's, without `FUSE_`).
const OP_NAMES: [&str; 33] = [
    "LOOKUP",
    "FORGET",
    "BATCH_FORGET",
    "GETATTR",
    "SETATTR",
    "READLINK",
    "MKNOD",
    "MKDIR",
    "UNLINK",
    "RMDIR",
    "SYMLINK",
    "RENAME",
    "LINK",
    "OPEN",
    "READ",
    "WRITE",
    "FLUSH",
    "RELEASE",
    "FSYNC",
    "OPENDIR",
    "READDIR",
    "READDIRPLUS",
    "RELEASEDIR",
    "FSYNCDIR",
    "STATFS",
    "SETXATTR",
    "GETXATTR",
    "LISTXATTR",
    "REMOVEXATTR",
    "ACCESS",
    "CREATE",
    "FALLOCATE",
    "COPY_FILE_RANGE",
];

/// Requests served, by [`Op`].
static COUNTS: [AtomicU64; OP_NAMES.len()] = [const { AtomicU64::new(0) }; OP_NAMES.len()];

/// Requests served through io_uring and through `/dev/fuse` reads (written as
/// `VIA_URING` and `VIA_DEV`, see [`TRANSPORT_PREFIX`]).
static VIA: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];

/// The prefix of the two lines that count requests by transport rather than by kind
/// (`VIA_URING`, `VIA_DEV`).
pub const TRANSPORT_PREFIX: &str = "VIA_";

/// The prefix of the lines that count the requests the file system sent on, by kind
/// (`SENT_LOOKUP`: a cluster's client's `Lookup` requests to its servers).
pub const SENT_PREFIX: &str = "SENT_";

/// Counts one request served through io_uring (`uring`) or a `/dev/fuse` read.
pub(crate) fn count_via(uring: bool) {
    VIA[usize::from(uring)].fetch_add(1, Ordering::Relaxed);
}

/// Counts one request of kind `op`.
pub(crate) fn count(op: Op) {
    COUNTS[op as usize].fetch_add(1, Ordering::Relaxed);
}

/// Writes the request counts to `path`, and those the file system sent on (`sent`),
/// through a temporary file and a rename, so a reader never sees half of them.
pub(crate) fn write_counts(path: &Path, sent: &[(&str, u64)]) -> std::io::Result<()> {
    let mut text = String::new();
    for (name, c) in OP_NAMES.iter().zip(&COUNTS) {
        text.push_str(&format!("{name} {}\n", c.load(Ordering::Relaxed)));
    }
    for (name, c) in ["DEV", "URING"].iter().zip(&VIA) {
        let n = c.load(Ordering::Relaxed);
        text.push_str(&format!("{TRANSPORT_PREFIX}{name} {n}\n"));
    }
    for (name, n) in sent {
        text.push_str(&format!("{SENT_PREFIX}{name} {n}\n"));
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Set by SIGUSR1.
static DUMP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigusr1(_: libc::c_int) {
    DUMP.store(true, Ordering::Relaxed);
}

/// With `CAIRN_FUSE_STATS=FILE`: writes the request counts to FILE whenever the process
/// gets SIGUSR1 (a thread checks every 5 ms), with the requests `fs` sent on while it
/// lives; returns FILE, to be written at the end too.
pub(crate) fn start_stats(fs: Weak<Box<dyn FileSystem>>) -> Result<Option<PathBuf>> {
    let Some(path) = std::env::var_os(STATS_ENV).map(PathBuf::from) else {
        return Ok(None);
    };
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    let old = unsafe { libc::signal(libc::SIGUSR1, on_sigusr1 as *const () as libc::sighandler_t) };
    if old == libc::SIG_ERR {
        bail!(
            "installing the SIGUSR1 handler: {}",
            std::io::Error::last_os_error()
        );
    }
    let p = path.clone();
    std::thread::Builder::new()
        .name("cairn-fuse-stats".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(5));
            if DUMP.swap(false, Ordering::Relaxed) {
                let sent = fs.upgrade().map(|f| f.requests_sent()).unwrap_or_default();
                if let Err(e) = write_counts(&p, &sent) {
                    eprintln!("cairn: writing {}: {e}", p.display());
                }
            }
        })
        .context("starting the stats thread")?;
    Ok(Some(path))
}

/// Reads a file of request counts as a mount writes it (`KIND COUNT` lines, the kernel's
/// request names without `FUSE_`, such as `LOOKUP 1000`), by kind; lines that are not a
/// kind and a count are left out.
pub fn parse_counts(text: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let mut w = line.split_whitespace();
        if let (Some(k), Some(Ok(v))) = (w.next(), w.next().map(str::parse)) {
            m.insert(k.to_string(), v);
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_back_as_written() {
        let dir = std::env::temp_dir().join(format!("cairn-fuse-stats-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("counts");
        count(Op::Lookup);
        count(Op::Create);
        write_counts(&path, &[("LOOKUP", 7)]).unwrap();
        let counts = parse_counts(&std::fs::read_to_string(&path).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(counts.len(), OP_NAMES.len() + 3);
        assert_eq!(counts["SENT_LOOKUP"], 7);
        assert!(counts["LOOKUP"] >= 1 && counts["CREATE"] >= 1);
        assert_eq!(
            parse_counts("LOOKUP 3\nbad\nGETATTR x\n"),
            BTreeMap::from([("LOOKUP".to_string(), 3)])
        );
    }
}
