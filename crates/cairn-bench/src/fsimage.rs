//! A fresh file system for `fs-bench`'s plain target: an image file of the work
//! directory's disk, made with `mkfs.ext4` (default options, journal on, enough inodes
//! for the run) and loop-mounted, so the kernel file system is measured new rather than
//! aged by earlier runs on the root disk. Needs root and mkfs.ext4; else the plain
//! target is a directory of the work directory's file system, and the report says so.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// A loop-mounted fresh ext4 image; unmounted and deleted on drop.
pub struct FreshExt4 {
    image: PathBuf,
    mountpoint: PathBuf,
    /// What it is, for the report.
    pub description: String,
}

/// Why a fresh image can't be made here (not root, no mkfs.ext4), or `None`.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (mount -o loop needs it)".into());
    }
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .chain(["/sbin".into(), "/usr/sbin".into()])
        .any(|d| d.join("mkfs.ext4").is_file());
    (!found).then(|| "no mkfs.ext4 (Debian's e2fsprogs)".into())
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

impl FreshExt4 {
    /// Makes an image of `bytes` with room for `files` inodes in `work` and mounts it on
    /// `work/plain-mnt`.
    pub fn make(work: &Path, bytes: u64, files: u64) -> Result<FreshExt4> {
        let image = work.join("plain.img");
        let mountpoint = work.join("plain-mnt");
        std::fs::create_dir_all(&mountpoint)?;
        let f = std::fs::File::create(&image)
            .with_context(|| format!("creating {}", image.display()))?;
        f.set_len(bytes)?;
        drop(f);
        let inodes = files + files / 10 + 100_000;
        run(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-N", &inodes.to_string()])
            .arg(&image))?;
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&mountpoint))?;
        Ok(FreshExt4 {
            description: format!(
                "a fresh ext4 image ({} GiB, mkfs.ext4 -N {inodes}, default options, journal \
                 on), loop-mounted",
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

impl Drop for FreshExt4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mountpoint).status();
        let _ = std::fs::remove_file(&self.image);
    }
}
