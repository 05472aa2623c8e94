//! `cairn-fuse`: a [`cairn_fs::FileSystem`] mounted through FUSE. The crate speaks the
//! kernel's FUSE protocol itself: it decodes each request, answers it with one call of
//! the file system and encodes the reply, over either transport — FUSE over io_uring
//! (one queue per CPU, Linux 6.14+) where the kernel offers it, else reads and writes
//! of `/dev/fuse` ([`Transport`]). Only the mount and the unmount go through the
//! `fuser` crate (its pure-Rust mount path: mount(2) directly when run as root, else
//! `fusermount3`), which serves no request.
//!
//! ```no_run
//! use std::path::Path;
//! use cairn_fuse::{mount, MountOptions};
//!
//! // The file system of the store in ./store on /mnt/cairn, served in this thread until
//! // it is unmounted (`cairn umount`, `fusermount3 -u`) or the process gets SIGINT or
//! // SIGTERM; the store is closed either way.
//! let m = mount(Path::new("store"), Path::new("/mnt/cairn"), &MountOptions::default())?;
//! m.run()?;
//! # Ok::<(), anyhow::Error>(())
//! ```
//!
//! `cairn mount DIR MOUNTPOINT` and `cairn umount MOUNTPOINT` call [`mount`] (a local
//! store's `cairn_fs::Fs`), [`Mount::run`] and [`umount`]; `cairn mount --cluster FILE
//! MOUNTPOINT` calls [`mount_fs`] with a cluster's client. Every request is one call of
//! the trait (a dynamic call; the file system does the work).
//!
//! Layering: this crate sits on the file system's trait (`cairn-fs`) and is used by the
//! command-line tool (`cairn-cli`) and the benchmarks (`cairn-bench`). It must never
//! depend on the cluster (which reaches it only as a `FileSystem`), `cairn-bench` or
//! `cairn-cli`.
//!
//! A mount runs in the foreground until it is unmounted ([`umount`], `cairn umount`,
//! `umount`, `fusermount3 -u`) or the process gets SIGINT or SIGTERM, which unmount it
//! cleanly; the store is flushed and closed either way. While it serves, a local store's
//! mount writes out what the store holds every [`DEFAULT_FLUSH_INTERVAL`]
//! ([`MountOptions::flush_interval`]), which bounds what a killed mount loses.
//!
//! Requests per operation are kept few, since each one is a round trip through the kernel
//! that costs more than the operation itself (a create of a new file is a LOOKUP, a
//! CREATE and, after the close, a RELEASE the caller doesn't wait for):
//! - on a mount of a local store ([`mount`]) the kernel may keep entries and attributes
//!   for a day: the store is locked by this process and every change goes through the
//!   kernel, which updates or drops what it cached for the inodes a change touches (the
//!   mount tells it about the one change it can't foresee: an access ACL that sets the
//!   mode). A file system that others change too (a cluster, served by [`mount_fs`])
//!   is cached for as long as the file system says ([`FileSystem::entry_validity`],
//!   [`FileSystem::attr_validity`]: what is left of its leases, which it revokes
//!   through the mount's [`cairn_fs::Invalidator`]), else for the mount's timeouts,
//!   [`SHARED_TTL`] by default, so a change made through another client shows within
//!   that time ([`MountOptions::entry_timeout`] and [`MountOptions::attr_timeout`] set
//!   them). A local store's mount also lets the kernel remember absent names
//!   ([`MountOptions::negative_timeout`]), so a lookup of a missing name (a search
//!   path, a `.gitignore` probe) is asked once;
//! - FLUSH answers ENOSYS, so the kernel stops sending it at every close: writes are
//!   stored when they are made, there is nothing to flush;
//! - permissions are checked by the file system when only root uses the mount (a root
//!   mount without [`MountOptions::allow_other`]: the kernel lets no one else in, and
//!   cairn_fs's rules for root are the kernel's), else by the kernel
//!   (`default_permissions`), which has to fetch a directory's attributes again (a
//!   GETATTR) before every create or unlink in it since the previous one changed them.
//!   [`MountOptions::kernel_permissions`] forces the latter.
//!
//! With `CAIRN_FUSE_STATS=FILE` ([`STATS_ENV`]) in its environment the mount counts the
//! requests it serves by kind and writes them to FILE (`KIND COUNT` lines, read with
//! [`parse_counts`]) at SIGUSR1 and at unmount; `cairn fs-bench` uses it to report
//! requests per operation.
//!
//! Modules: `abi` has the protocol's opcodes and structures, `request` decodes a request
//! and `reply` encodes its answer, `filesystem` answers the requests with the file
//! system, `attr` converts between `cairn_fs` and FUSE, `session` makes the INIT
//! handshake and runs a transport (`devfuse`: `/dev/fuse`; `uring`: io_uring queues),
//! `bdi` raises the mount's read-ahead, `stats` counts requests, `flush` writes the file
//! system out periodically, `invalidate` makes the kernel forget what it cached when the
//! file system asks; this file mounts and unmounts.

#![deny(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod abi;
mod attr;
mod bdi;
mod devfuse;
mod filesystem;
mod flush;
mod invalidate;
mod ours;
mod reply;
mod request;
mod session;
mod stats;
mod uring;

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use fuser::MountOption;

use cairn_fs::{FileSystem, Fs};

use crate::filesystem::{CairnFuse, SharedFs};
pub use crate::flush::DEFAULT_FLUSH_INTERVAL;
pub use crate::session::URING_SWITCH;
pub use crate::stats::{parse_counts, SENT_PREFIX, STATS_ENV, TRANSPORT_PREFIX};

/// How long the kernel keeps entries and attributes of a local store's mount ([`mount`]):
/// a day, since every change passes through this mount.
pub const LOCAL_TTL: Duration = Duration::from_secs(24 * 3600);

/// How long the kernel keeps entries and attributes of a [`mount_fs`] mount by default:
/// other clients may change the file system, so what the kernel cached may be this old.
pub const SHARED_TTL: Duration = Duration::from_secs(1);

/// How a store is mounted (the options of `cairn mount`).
#[derive(Clone, Debug, Default)]
pub struct MountOptions {
    /// Let other users than the one mounting use the mount (needs root, or
    /// `user_allow_other` in /etc/fuse.conf).
    pub allow_other: bool,
    /// Let the kernel check permissions (`default_permissions`) even on a mount only root
    /// uses (by default cairn checks them there, which saves a request per create and
    /// unlink).
    pub kernel_permissions: bool,
    /// How long the kernel may keep a name it looked up (`entry_timeout`); `None`:
    /// [`LOCAL_TTL`] for [`mount`], [`SHARED_TTL`] for [`mount_fs`]. Zero makes the
    /// kernel ask for every lookup.
    pub entry_timeout: Option<Duration>,
    /// How long the kernel may keep a file's attributes (`attr_timeout`); `None`: as
    /// for [`MountOptions::entry_timeout`].
    pub attr_timeout: Option<Duration>,
    /// How long the kernel may remember that a name does not exist
    /// (`negative_timeout`); `None`: [`LOCAL_TTL`] for [`mount`] (every create passes
    /// through the kernel, which replaces what it remembered), zero (not remembered)
    /// for [`mount_fs`], where another client may create the name.
    pub negative_timeout: Option<Duration>,
    /// Let the kernel cache writes and send them later, in pages (`writeback_cache`):
    /// fewer, larger WRITE requests for small writes, at the price that a write is
    /// stored only when the kernel sends it (at the latest at close, fsync or unmount).
    pub writeback_cache: bool,
    /// Mount read-only (`ro`): the kernel refuses every change with EROFS.
    pub read_only: bool,
    /// How requests travel between the kernel and the mount.
    pub transport: Transport,
    /// Whether setuid and setgid bits take effect on programs run from the mount
    /// (`suid`/`nosuid`); `None`: yes for [`mount`] (a local store only this host
    /// writes), no for [`mount_fs`] (a shared file system, where a setuid file made
    /// by one client would run with its owner's identity on every host that mounts it).
    pub suid: Option<bool>,
    /// Whether device nodes on the mount may be opened as devices (`dev`/`nodev`);
    /// `None`: yes for [`mount`], no for [`mount_fs`] (as for [`MountOptions::suid`]).
    pub dev: Option<bool>,
    /// How often the mount asks the file system to make what it holds durable
    /// ([`FileSystem::fsync`] of the root: a local store's buffered rows and deferred
    /// directory times written to its files and synced), so that a killed mount or a
    /// power loss loses at most the writes of about this long; `None`:
    /// [`DEFAULT_FLUSH_INTERVAL`] for [`mount`], never for [`mount_fs`] (a cluster's
    /// client holds no writes: each is on the servers when it returns). Zero: never
    /// (only at fsync and unmount). Ignored on a read-only mount.
    pub flush_interval: Option<Duration>,
}

/// How long the kernel may cache what a mount told it (FUSE's `entry_valid`,
/// `attr_valid` and negative entries), as [`MountOptions`] settled them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// A name looked up.
    pub entry: Duration,
    /// A file's attributes.
    pub attr: Duration,
    /// A name's absence; zero: not remembered.
    pub negative: Duration,
}

impl MountOptions {
    /// How often a mount made with these options writes out what the file system
    /// holds (see [`MountOptions::flush_interval`]); `None`: never. `shared` as for
    /// [`MountOptions::timeouts`].
    pub fn flush_every(&self, shared: bool) -> Option<Duration> {
        let every = match self.flush_interval {
            Some(d) => d,
            None if shared => Duration::ZERO,
            None => DEFAULT_FLUSH_INTERVAL,
        };
        (!every.is_zero() && !self.read_only).then_some(every)
    }

    /// The timeouts of a mount made with these options: of a local store's ([`mount`])
    /// or of a file system others change too ([`mount_fs`], `shared`).
    pub fn timeouts(&self, shared: bool) -> Timeouts {
        let default = if shared { SHARED_TTL } else { LOCAL_TTL };
        Timeouts {
            entry: self.entry_timeout.unwrap_or(default),
            attr: self.attr_timeout.unwrap_or(default),
            negative: self.negative_timeout.unwrap_or(if shared {
                Duration::ZERO
            } else {
                LOCAL_TTL
            }),
        }
    }
}

/// How requests travel between the kernel and the mount (`cairn mount --transport`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// io_uring where the kernel offers it (Linux 6.14+ with [`URING_SWITCH`] on),
    /// else `/dev/fuse` reads, saying so once at mount time.
    #[default]
    Auto,
    /// io_uring, or the mount fails when the kernel does not offer it.
    Uring,
    /// `/dev/fuse` reads and writes, one request at a time.
    Classic,
}

impl std::str::FromStr for Transport {
    type Err = String;

    fn from_str(s: &str) -> Result<Transport, String> {
        match s {
            "auto" => Ok(Transport::Auto),
            "uring" | "io_uring" => Ok(Transport::Uring),
            "classic" | "dev" => Ok(Transport::Classic),
            _ => Err(format!("unknown transport {s:?}: auto, uring or classic")),
        }
    }
}

/// fuser's session is used to mount and unmount only; the requests are served by
/// this crate (`session`), so it serves nothing.
struct Unserved;

impl fuser::Filesystem for Unserved {}

/// Mount options of a mount made with `opts`; `kernel_checks`: `default_permissions`;
/// `shared`: a file system others change too ([`mount_fs`]), mounted `nosuid,nodev`
/// unless `opts` says otherwise.
fn options(opts: &MountOptions, kernel_checks: bool, shared: bool) -> Vec<MountOption> {
    let suid = opts.suid.unwrap_or(!shared);
    let dev = opts.dev.unwrap_or(!shared);
    let mut o = vec![
        MountOption::FSName("cairn".into()),
        MountOption::Subtype("cairn".into()),
        if opts.read_only {
            MountOption::RO
        } else {
            MountOption::RW
        },
        if dev {
            MountOption::Dev
        } else {
            MountOption::NoDev
        },
        if suid {
            MountOption::Suid
        } else {
            MountOption::NoSuid
        },
        MountOption::Exec,
    ];
    if kernel_checks {
        o.push(MountOption::DefaultPermissions);
    }
    if opts.allow_other {
        o.push(MountOption::AllowOther);
    }
    o
}

/// A mounted file system, not yet served: [`Mount::run`] serves it until it is
/// unmounted. Dropping it unmounts it and drops the file system.
pub struct Mount {
    /// Mounted the file system; unmounts it when dropped.
    session: fuser::Session<Unserved>,
    /// The session's `/dev/fuse` descriptor, served by this crate.
    fd: std::os::fd::OwnedFd,
    fuse: std::sync::Arc<CairnFuse>,
    /// The file system the session serves, closed ([`FileSystem::close`]) after the
    /// session.
    fs: SharedFs,
    mountpoint: PathBuf,
    stats: Option<PathBuf>,
    transport: Transport,
    writeback: bool,
    /// How often the file system is written out while the mount serves
    /// ([`MountOptions::flush_every`]).
    flush_every: Option<Duration>,
    /// Another descriptor of the session's `/dev/fuse` (shared with the signal
    /// handler): whether the kernel ended the connection ([`ours::connection_ended`]).
    watch: std::sync::Arc<std::os::fd::OwnedFd>,
}

/// Opens (creating if needed) the store in `store` and mounts its file system on
/// `mountpoint` (an existing directory).
///
/// It also installs the process's SIGINT/SIGTERM handler, which unmounts (so
/// [`Mount::run`] returns), and with [`STATS_ENV`] set, a SIGUSR1 handler that writes the
/// request counts; a process can therefore mount once only.
pub fn mount(store: &Path, mountpoint: &Path, opts: &MountOptions) -> Result<Mount> {
    check_mountpoint(mountpoint)?;
    check_transport(opts)?;
    // The engine's error says why a store does not open (locked by another process,
    // not a store, damaged); the file system's would be a bare errno.
    let db = Fs::options()
        .open(store)
        .with_context(|| format!("opening {}", store.display()))?;
    let fs = Fs::new(db)
        .map_err(std::io::Error::from)
        .with_context(|| format!("opening the file system of {}", store.display()))?;
    mount_boxed(Box::new(fs), mountpoint, opts, false)
}

/// Mounts `fs` (any file system: a cluster's client, a local `Fs`) on `mountpoint` (an
/// existing directory). The kernel caches entries and attributes for
/// [`MountOptions::timeouts`], by default [`SHARED_TTL`]; [`Mount::run`] closes `fs`
/// ([`FileSystem::close`]) once unmounted. Mounted `nosuid,nodev` unless
/// [`MountOptions::suid`] or [`MountOptions::dev`] say otherwise, and callers'
/// supplementary groups are always sent (`fs` may check permissions whatever the
/// kernel does). Signal handlers as for [`mount`].
pub fn mount_fs(fs: Box<dyn FileSystem>, mountpoint: &Path, opts: &MountOptions) -> Result<Mount> {
    check_mountpoint(mountpoint)?;
    check_transport(opts)?;
    mount_boxed(fs, mountpoint, opts, true)
}

/// Refuses a mountpoint that cannot take the mount, before anything is opened: one
/// that is missing or not a directory, and a FUSE mount whose serving process is gone
/// (killed: the kernel answers `ENOTCONN`), which must be unmounted first.
fn check_mountpoint(mountpoint: &Path) -> Result<()> {
    let shown = mountpoint.display();
    match std::fs::metadata(mountpoint) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => bail!("{MOUNTING_ON}{shown}: not a directory"),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => bail!(
            "{MOUNTING_ON}{shown}: a mount whose process is gone (killed?) is still there: unmount it first (`umount {shown}`, or `fusermount3 -u {shown}` as a user)"
        ),
        Err(e) => bail!("{MOUNTING_ON}{shown}: {e}"),
    }
}

/// Refuses `Transport::Uring` before anything is opened or mounted where the kernel
/// does not offer it.
fn check_transport(opts: &MountOptions) -> Result<()> {
    if opts.transport == Transport::Uring {
        if let Some(why) = session::uring_unavailable() {
            bail!("--transport uring: {why}");
        }
    }
    Ok(())
}

fn mount_boxed(
    fs: Box<dyn FileSystem>,
    mountpoint: &Path,
    opts: &MountOptions,
    shared: bool,
) -> Result<Mount> {
    // Without allow_other the kernel lets only processes of the mounting user in (real,
    // effective and saved ids all equal): for root, the file system's checks are the
    // kernel's, and they cost no GETATTR of the directory before each create.
    // SAFETY: geteuid has no preconditions.
    let fs_checks =
        !opts.allow_other && !opts.kernel_permissions && unsafe { libc::geteuid() } == 0;
    fs.set_permission_checks(fs_checks);
    let fs: SharedFs = std::sync::Arc::new(fs);
    let stats = stats::start_stats(std::sync::Arc::downgrade(&fs))?;
    let fuse = std::sync::Arc::new(CairnFuse::new(
        fs.clone(),
        opts.timeouts(shared),
        opts.writeback_cache,
        fs_checks,
        shared,
    ));
    let mut session = fuser::Session::new(Unserved, mountpoint, &options(opts, !fs_checks, shared))
        .with_context(|| format!("{MOUNTING_ON}{}", mountpoint.display()))?;
    let fd = {
        use std::os::fd::AsFd;
        session
            .as_fd()
            .try_clone_to_owned()
            .context("duplicating the /dev/fuse descriptor")?
    };
    let mut unmounter = session.unmount_callable();
    let mp = mountpoint.to_path_buf();
    let watch = std::sync::Arc::new(
        fd.try_clone()
            .context("duplicating the /dev/fuse descriptor")?,
    );
    let watch_signal = watch.clone();
    ctrlc::set_handler(move || {
        use std::os::fd::AsFd;
        if ours::connection_ended(watch_signal.as_fd()) {
            // Unmounted already: what is mounted there now is another mount.
            return;
        }
        if let Err(e) = unmounter.unmount() {
            eprintln!("cairn: unmounting {}: {e}", mp.display());
            // Lazy unmount as a last resort, so the session ends.
            let _ = umount_path(&mp, true);
        }
    })
    .context("installing the SIGINT/SIGTERM handler")?;
    Ok(Mount {
        session,
        fd,
        fuse,
        fs,
        mountpoint: mountpoint.to_path_buf(),
        stats,
        transport: opts.transport,
        writeback: opts.writeback_cache,
        flush_every: opts.flush_every(shared),
        watch,
    })
}

impl Mount {
    /// Where the file system is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Serves the mount until it is unmounted ([`umount`] or any other way) or the
    /// process gets SIGINT or SIGTERM; then closes the file system (a local store is
    /// flushed and closed), and with [`STATS_ENV`] set writes the request counts.
    pub fn run(self) -> Result<()> {
        self.run_with(|| {})
    }

    /// As [`Mount::run`], calling `ready` once the kernel's INIT is answered: from
    /// then on the mount serves requests (`cairn mount` in the background returns
    /// then). `ready` is not called when the session ends before. Before `ready`, the
    /// file system gets the mount's [`cairn_fs::Invalidator`]
    /// ([`FileSystem::set_invalidator`]).
    pub fn run_with(self, ready: impl FnOnce()) -> Result<()> {
        let Mount {
            session,
            fd,
            fuse,
            fs,
            mountpoint,
            stats,
            transport,
            writeback,
            flush_every,
            watch,
        } = self;
        // The store is closed (and its error reported) even when serving failed.
        let wants = session::Wants {
            writeback,
            readdirplus: fs.lists_attributes(),
        };
        let served = session::handshake(&fd, transport, wants)
            .and_then(|conn| {
                // From now on the kernel takes notifications: the file system may make
                // it forget what it cached.
                fs.set_invalidator(std::sync::Arc::new(invalidate::Notifier::new(
                    fd.try_clone()?,
                )));
                let flusher = match flush_every {
                    Some(every) => {
                        let fs = fs.clone();
                        let write_out = move || fs.fsync(abi::ROOT_ID).map_err(|e| e.to_string());
                        Some(flush::Flusher::start(every, write_out)?)
                    }
                    None => None,
                };
                ready();
                bdi::raise_read_ahead_soon(mountpoint.clone());
                let served = session::run(fd, fuse, &conn);
                if let Some(f) = flusher {
                    f.stop();
                }
                served
            })
            .map_err(|e| anyhow::anyhow!("serving the mount: {e}"));
        if ours::connection_ended(std::os::fd::AsFd::as_fd(&watch)) {
            // Unmounted from outside (the kernel sent DESTROY first, so the file system
            // is flushed). fuser's session, dropped, would unmount the mountpoint again
            // — another mount, if one was made there since (see `ours`) — so it is not
            // dropped: its descriptor stays open until the process ends.
            std::mem::forget(session);
        } else {
            if !is_mountpoint(&mountpoint) {
                // fuser's own unmount at drop would only report EINVAL.
                log::set_max_level(log::LevelFilter::Off);
            }
            drop(session); // unmounts if still mounted
        }
        let sent = fs.requests_sent();
        let closed = match std::sync::Arc::try_unwrap(fs) {
            // What the file system deferred written, the store closed: errors reported.
            Ok(fs) => fs
                .close()
                .map_err(std::io::Error::from)
                .context("closing the file system"),
            Err(_) => Err(anyhow::anyhow!(
                "the file system is still in use after the session ended"
            )),
        };
        served?;
        closed?;
        if let Some(p) = stats {
            stats::write_counts(&p, &sent).with_context(|| format!("writing {}", p.display()))?;
        }
        Ok(())
    }
}

/// Whether `p` is the root of a mount (its device differs from its parent's).
fn is_mountpoint(p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let parent = p.join("..");
    match (std::fs::metadata(p), std::fs::metadata(parent)) {
        (Ok(a), Ok(b)) => a.dev() != b.dev() || a.ino() == b.ino(),
        _ => false,
    }
}

fn umount_path(mp: &Path, lazy: bool) -> Result<()> {
    let c = std::ffi::CString::new(mp.as_os_str().as_bytes())?;
    // SAFETY: umount2 with a NUL-terminated path that outlives the call.
    let rc = unsafe { libc::umount2(c.as_ptr(), if lazy { libc::MNT_DETACH } else { 0 }) };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    for tool in ["fusermount3", "fusermount"] {
        let mut cmd = std::process::Command::new(tool);
        cmd.arg("-u");
        if lazy {
            cmd.arg("-z");
        }
        if let Ok(st) = cmd.arg(mp).status() {
            if st.success() {
                return Ok(());
            }
        }
    }
    bail!("unmounting {}: {err}", mp.display())
}

/// Unmounts the mount on `mountpoint` (whose serving process then returns from
/// [`Mount::run`]): umount2(2), else `fusermount3 -u` / `fusermount -u`.
pub fn umount(mountpoint: &Path) -> Result<()> {
    umount_path(mountpoint, false)
}

/// Why this process cannot mount FUSE file systems, when that shows without trying:
/// `/dev/fuse` missing or not open for reading and writing, or neither the privilege to
/// call mount(2) (`CAP_SYS_ADMIN`) nor a `fusermount3`/`fusermount` helper on the `PATH`
/// (fuser's two ways to mount). `None` when a mount may work; it can still be refused
/// (see [`is_refusal`]).
pub fn unavailable() -> Option<String> {
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        return Some(format!("/dev/fuse can't be opened ({e})"));
    }
    if has_sys_admin() || fusermount().is_some() {
        return None;
    }
    Some(
        "no CAP_SYS_ADMIN to call mount(2) and no fusermount3 or fusermount on the PATH \
         (Debian's fuse3 package has it)"
            .into(),
    )
}

/// Whether the message of a failed [`mount`] (as `cairn mount` prints it) is a refusal
/// of the mount itself for lack of privilege (EPERM or EACCES, from mount(2) or from the
/// fusermount helper), which means that FUSE can't be used by this process here, as
/// opposed to any other failure (opening the store, say).
pub fn is_refusal(message: &str) -> bool {
    message.split_once(MOUNTING_ON).is_some_and(|(_, why)| {
        why.contains("Operation not permitted") || why.contains("Permission denied")
    })
}

/// How the message of a failed mount(2) or fusermount starts (see [`is_refusal`]).
const MOUNTING_ON: &str = "mounting on ";

/// Whether this process has `CAP_SYS_ADMIN` in its effective set (`/proc/self/status`).
fn has_sys_admin() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}

/// The first `fusermount3` or `fusermount` executable on the `PATH` (or in `/bin`, where
/// fuser looks too).
fn fusermount() -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> = std::env::split_paths(&path)
        .chain([PathBuf::from("/bin")])
        .collect();
    ["fusermount3", "fusermount"].iter().find_map(|tool| {
        dirs.iter().map(|d| d.join(tool)).find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals() {
        assert!(is_refusal(
            "mounting on /m: Operation not permitted (os error 1)"
        ));
        assert!(is_refusal(
            "mounting on /m: fusermount3: failed to open /dev/fuse: Permission denied"
        ));
        assert!(!is_refusal(
            "opening /s: the store is locked by another process"
        ));
        assert!(!is_refusal("opening /s: Permission denied (os error 13)"));
        assert!(!is_refusal("mounting on /m: No such file or directory"));
    }
}
