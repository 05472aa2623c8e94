//! The fuse targets' mount: a child `cairn mount` as a user starts it ([`ChildMount`]),
//! and the FUSE request counts it keeps ([`FuseStats`]); the FUSE passthroughs measured
//! beside it ([`Peer`], mounted by [`PeerMount`]).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

/// The request counts of a child `cairn mount` (`CAIRN_FUSE_STATS`, [`cairn_fuse::STATS_ENV`]).
pub(super) struct FuseStats {
    pub(super) pid: i32,
    pub(super) path: PathBuf,
}

impl FuseStats {
    /// The counts so far, by kind; `None` if the mount didn't answer.
    pub(super) fn read(&self) -> Option<BTreeMap<String, u64>> {
        let _ = std::fs::remove_file(&self.path);
        // SAFETY: kill(2) on our own child; it handles SIGUSR1 (see cairn_fuse::STATS_ENV).
        unsafe { libc::kill(self.pid, libc::SIGUSR1) };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if let Ok(text) = std::fs::read_to_string(&self.path) {
                return Some(cairn_fuse::parse_counts(&text));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        None
    }
}

/// Requests per file between two counts (kinds that occurred only): with `sent` false
/// the FUSE requests the mount served, with `sent` true the requests it sent on to
/// serve them (a cluster mount's to its servers), by kind without the prefix.
pub(super) fn per_file(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    n: u64,
    sent: bool,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .filter_map(|(k, v)| {
            let kind = match k.strip_prefix(cairn_fuse::SENT_PREFIX) {
                Some(kind) if sent => kind,
                None if !sent && !k.starts_with(cairn_fuse::TRANSPORT_PREFIX) => k,
                _ => return None,
            };
            let d = v.saturating_sub(before.get(k).copied().unwrap_or(0));
            (d > 0).then(|| (kind.to_string(), d as f64 / n as f64))
        })
        .collect()
}

fn is_mountpoint(p: &Path) -> bool {
    match (std::fs::metadata(p), std::fs::metadata(p.join(".."))) {
        (Ok(a), Ok(b)) => a.dev() != b.dev(),
        _ => false,
    }
}

/// A child `cairn mount`, unmounted on drop.
pub(super) struct ChildMount {
    pub(super) child: std::process::Child,
    mp: PathBuf,
}

impl ChildMount {
    /// Mounts `store` on `mp` with `transport` (`cairn mount --transport`), the request
    /// counts going to `stats`.
    pub(super) fn start(
        store: &Path,
        mp: &Path,
        stats: &Path,
        transport: &str,
    ) -> Result<ChildMount> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.args(["mount", "--foreground"])
            .arg(store)
            .arg(mp)
            .args(["--transport", transport]);
        ChildMount::spawn(cmd, mp, stats)
    }

    /// Mounts the cluster of `cluster_file` on `mp` (`cairn mount --cluster`, its
    /// defaults), the request counts going to `stats`.
    pub(super) fn start_cluster(
        cluster_file: &Path,
        mp: &Path,
        stats: &Path,
    ) -> Result<ChildMount> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.args(["mount", "--foreground", "--cluster"])
            .arg(cluster_file)
            .arg(mp);
        ChildMount::spawn(cmd, mp, stats)
    }

    /// Serves the null file system (`super::null`) on `mp` through FUSE over io_uring
    /// where the kernel offers it, the request counts going to `stats`.
    pub(super) fn start_null(mp: &Path, stats: &Path) -> Result<ChildMount> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg(super::NULL_COMMAND).arg(mp);
        ChildMount::spawn(cmd, mp, stats)
    }

    /// Runs `cmd` (a mount in the foreground) and waits until `mp` is mounted.
    fn spawn(mut cmd: Command, mp: &Path, stats: &Path) -> Result<ChildMount> {
        let mut child = cmd
            .env(cairn_fuse::STATS_ENV, stats)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let start = Instant::now();
        while !is_mountpoint(mp) {
            if child.try_wait()?.is_some() {
                let out = child.wait_with_output()?;
                bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
            }
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                let _ = child.wait();
                bail!("mount timed out");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(ChildMount {
            child,
            mp: mp.to_path_buf(),
        })
    }
}

impl Drop for ChildMount {
    fn drop(&mut self) {
        // SIGTERM: the child unmounts and closes the store (for a large store that
        // writes its hint files: allow minutes).
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        while self.child.try_wait().ok().flatten().is_none() {
            if start.elapsed() > Duration::from_secs(600) {
                eprintln!("fuse: the mount did not end in 10 minutes; killing it");
                let _ = self.child.kill();
                let _ = Command::new("umount").arg("-l").arg(&self.mp).status();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.wait();
    }
}

/// A FUSE passthrough people run over another directory, measured beside cairn's mount
/// (`--targets bindfs,passthrough_hp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Peer {
    /// Debian's `bindfs` with its defaults.
    Bindfs,
    /// libfuse's `example/passthrough_hp` (scripts/build-peers.sh --passthrough-hp),
    /// over FUSE over io_uring (`-o io_uring`) with its defaults otherwise.
    PassthroughHp,
}

/// Descriptors a passthrough_hp run keeps beside one per file: the root, its
/// directories, the io_uring queues, the process's own.
const SPARE_FDS: u64 = 4096;

impl Peer {
    /// The peer that target `name` measures, if any.
    pub(super) fn of(name: &str) -> Option<Peer> {
        match name {
            "bindfs" => Some(Peer::Bindfs),
            "passthrough_hp" => Some(Peer::PassthroughHp),
            _ => None,
        }
    }

    /// The program: a name looked up on the `PATH`.
    fn program(self) -> &'static str {
        match self {
            Peer::Bindfs => "bindfs",
            Peer::PassthroughHp => "passthrough_hp",
        }
    }

    /// Why the peer can't serve a run of `files` files here (it is not installed, or,
    /// for passthrough_hp, which keeps a descriptor open per inode the kernel knows,
    /// the run would pass the open-file limit it can have); `None`: it can.
    pub(super) fn unavailable(self, files: u64) -> Option<String> {
        let installed = Command::new(self.program())
            .arg(match self {
                Peer::Bindfs => "--version",
                Peer::PassthroughHp => "--help",
            })
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !installed {
            return Some(match self {
                Peer::Bindfs => "bindfs is not installed (scripts/install-bench-deps.sh)".into(),
                Peer::PassthroughHp => "passthrough_hp is not on the PATH (scripts/build-peers.sh \
                                        --passthrough-hp builds it)"
                    .into(),
            });
        }
        let limit = fd_limit();
        (self == Peer::PassthroughHp && files + SPARE_FDS > limit).then(|| {
            format!(
                "passthrough_hp keeps a descriptor per file: {files} files (+{SPARE_FDS}) pass \
                 the open-file limit it can have here, {limit}"
            )
        })
    }

    /// How the report names what the peer serves: the fresh image `image` reached
    /// through it.
    pub(super) fn describe(self, image: &str) -> String {
        match self {
            Peer::Bindfs => format!("{image} reached through bindfs (its defaults)"),
            Peer::PassthroughHp => format!(
                "{image} reached through libfuse's passthrough_hp (-o io_uring, its defaults \
                 otherwise: a descriptor per inode, open-file limit {})",
                fd_limit()
            ),
        }
    }
}

/// The open-file limit a child can be given: with `CAP_SYS_RESOURCE` the kernel's
/// ceiling (`/proc/sys/fs/nr_open`), else this process's hard limit (a container's
/// root may lack the capability).
fn fd_limit() -> u64 {
    const CAP_SYS_RESOURCE: u32 = 24;
    let hard = rlimit_nofile().1;
    let raises = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_RESOURCE) != 0);
    if !raises {
        return hard;
    }
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .map_or(hard, |n: u64| n.max(hard))
}

/// This process's open-file limits (soft, hard).
fn rlimit_nofile() -> (u64, u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given, which outlives the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return (1024, 1024);
    }
    (r.rlim_cur, r.rlim_max)
}

/// A [`Peer`] serving a directory on a mount point, in the background (both return
/// once mounted); unmounted on drop.
pub(super) struct PeerMount {
    pub(super) mp: PathBuf,
}

impl PeerMount {
    /// Mounts `source` on `mp` (created) through `peer`.
    pub(super) fn mount(peer: Peer, source: &Path, mp: &Path) -> Result<PeerMount> {
        std::fs::create_dir_all(mp)?;
        let mut cmd = Command::new(peer.program());
        cmd.arg(source).arg(mp).stdin(Stdio::null());
        if peer == Peer::PassthroughHp {
            cmd.args(["-o", "io_uring"]);
            let limit = fd_limit();
            // SAFETY: setrlimit is async-signal-safe and touches no memory of this
            // process but the struct on the child's stack; called before exec only.
            unsafe {
                cmd.pre_exec(move || {
                    let r = libc::rlimit {
                        rlim_cur: limit,
                        rlim_max: limit,
                    };
                    // Failing, passthrough_hp runs with the limit it inherits.
                    libc::setrlimit(libc::RLIMIT_NOFILE, &r);
                    Ok(())
                });
            }
        }
        let out = cmd.output()?;
        if !out.status.success() || !is_mountpoint(mp) {
            bail!(
                "{} {} {}: {}",
                peer.program(),
                source.display(),
                mp.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(PeerMount {
            mp: mp.to_path_buf(),
        })
    }
}

impl Drop for PeerMount {
    fn drop(&mut self) {
        if Command::new("umount")
            .arg(&self.mp)
            .status()
            .map_or(true, |s| !s.success())
        {
            let _ = Command::new("umount").arg("-l").arg(&self.mp).status();
        }
    }
}
