//! A fresh file system for `fs-bench`'s kernel targets (`plain`: ext4, `xfs`,
//! `btrfs`): an image file of the work directory's disk, made with the file system's
//! `mkfs` (default options — ext4's journal on, with enough inodes for the run) and
//! loop-mounted, so the kernel file system is measured new rather than aged by earlier
//! runs on the root disk. Needs root and the mkfs tool (Debian's e2fsprogs, xfsprogs,
//! btrfs-progs); else `plain` is a directory of the work directory's file system, and
//! the report says so.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// A loop-mounted fresh file system image; unmounted and deleted on drop.
pub struct FreshImage {
    image: PathBuf,
    mountpoint: PathBuf,
    /// What it is, for the report.
    pub description: String,
}

/// The `mkfs.KIND` program: found on `PATH` or in `/sbin`, `/usr/sbin` (where Debian
/// puts it, often not on a user's `PATH`).
fn mkfs(kind: &str) -> Option<PathBuf> {
    let tool = format!("mkfs.{kind}");
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .chain(["/sbin".into(), "/usr/sbin".into()])
        .map(|d| d.join(&tool))
        .find(|p| p.is_file())
}

/// Why a fresh `kind` image (ext4, xfs, btrfs) can't be made here (not root, no
/// mkfs tool), or `None`.
pub fn unavailable(kind: &str) -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (mount -o loop needs it)".into());
    }
    let package = match kind {
        "xfs" => "xfsprogs",
        "btrfs" => "btrfs-progs",
        _ => "e2fsprogs",
    };
    mkfs(kind)
        .is_none()
        .then(|| format!("no mkfs.{kind} (Debian's {package})"))
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl FreshImage {
    /// Makes a `kind` (ext4, xfs, btrfs) image of `bytes` with room for `files` inodes
    /// in `work` and mounts it on `work/KIND-mnt`.
    pub fn make(work: &Path, kind: &str, bytes: u64, files: u64) -> Result<FreshImage> {
        let image = work.join(format!("{kind}.img"));
        let mountpoint = work.join(format!("{kind}-mnt"));
        std::fs::create_dir_all(&mountpoint)?;
        let f = std::fs::File::create(&image)
            .with_context(|| format!("creating {}", image.display()))?;
        f.set_len(bytes)?;
        drop(f);
        let inodes = files + files / 10 + 100_000;
        let (args, how): (Vec<String>, String) = match kind {
            "ext4" => (
                vec!["-q".into(), "-F".into(), "-N".into(), inodes.to_string()],
                format!("mkfs.ext4 -N {inodes}, default options, journal on"),
            ),
            "xfs" => (
                vec!["-q".into(), "-f".into()],
                "mkfs.xfs, default options".into(),
            ),
            "btrfs" => (
                vec!["-q".into(), "-f".into()],
                "mkfs.btrfs, default options".into(),
            ),
            other => bail!("no fresh image of {other:?} (ext4, xfs, btrfs)"),
        };
        let tool = mkfs(kind)
            .with_context(|| format!("no mkfs.{kind} on PATH, in /sbin or in /usr/sbin"))?;
        run(Command::new(tool).args(&args).arg(&image))?;
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&mountpoint))?;
        Ok(FreshImage {
            description: format!(
                "a fresh {kind} image ({} GiB, {how}), loop-mounted",
                bytes >> 30
            ),
            image,
            mountpoint,
        })
    }

    /// Where the file system is mounted.
    pub fn path(&self) -> &Path {
        &self.mountpoint
    }
}

impl Drop for FreshImage {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mountpoint).status();
        let _ = std::fs::remove_file(&self.image);
    }
}
