//! The fuse targets' mount: a child `cairn mount` as a user starts it ([`ChildMount`]),
//! and the FUSE request counts it keeps ([`FuseStats`]).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
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

/// `bindfs SOURCE MOUNTPOINT` with its defaults, as people run it (a FUSE passthrough
/// of another directory, in the background); unmounted on drop.
pub(super) struct Bindfs {
    pub(super) mp: PathBuf,
}

impl Bindfs {
    /// Mounts `source` on `mp` (created); `bindfs` returns once it is mounted.
    pub(super) fn mount(source: &Path, mp: &Path) -> Result<Bindfs> {
        std::fs::create_dir_all(mp)?;
        let out = Command::new("bindfs")
            .arg(source)
            .arg(mp)
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() || !is_mountpoint(mp) {
            bail!(
                "bindfs {} {}: {}",
                source.display(),
                mp.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(Bindfs {
            mp: mp.to_path_buf(),
        })
    }
}

impl Drop for Bindfs {
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
