//! The mount's read-ahead: the kernel reads ahead of a sequential reader of a FUSE file
//! by its backing device's `read_ahead_kb`, 128 KiB by default, and each read-ahead is
//! one READ request — so a reader of a large file costs a request (a round trip between
//! the kernel and the server) per 128 KiB. The mount raises it to [`READ_AHEAD_KB`]
//! (the largest request the mount accepts, `max_pages` of 1 MiB) when it may (root),
//! measured in DESIGN.md, "Reads that reach the disk".

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Read-ahead of the mount, KiB: one request of 1 MiB.
pub const READ_AHEAD_KB: u32 = 1024;

/// The `major:minor` of the newest mount on `mountpoint`, from /proc/self/mountinfo.
fn device_of(mountpoint: &Path) -> Option<String> {
    let mp = mountpoint.canonicalize().ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            // id parent major:minor root mountpoint ... (octal escapes for spaces)
            let point = f.get(4)?.replace("\\040", " ").replace("\\011", "\t");
            (Path::new(&point) == mp).then(|| f[2].to_string())
        })
        .next_back()
}

/// Sets the read-ahead of the FUSE mount on `mountpoint` to [`READ_AHEAD_KB`] from a
/// thread of its own, a moment after the mount's INIT: the kernel sets the read-ahead
/// when it gets the reply to INIT (to at most what it offered, 128 KiB), which is
/// written after the server's `init` returns, so a value set before would be undone.
pub(crate) fn raise_read_ahead_soon(mountpoint: PathBuf) {
    let spawned = std::thread::Builder::new()
        .name("cairn-readahead".into())
        .spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            raise_read_ahead(&mountpoint);
        });
    if let Err(e) = spawned {
        log::info!("read-ahead stays at the kernel's default: no thread ({e})");
    }
}

/// Sets the read-ahead of the FUSE mount on `mountpoint` to [`READ_AHEAD_KB`]; on
/// failure (not root, no sysfs) says how to do it, and the mount works as before.
fn raise_read_ahead(mountpoint: &Path) {
    let Some(dev) = device_of(mountpoint) else {
        log::info!(
            "read-ahead: the mount on {} is not in /proc/self/mountinfo",
            mountpoint.display()
        );
        return;
    };
    let knob = format!("/sys/class/bdi/{dev}/read_ahead_kb");
    match std::fs::write(&knob, READ_AHEAD_KB.to_string()) {
        Ok(()) => log::debug!(
            "read-ahead of {} set to {READ_AHEAD_KB} KiB",
            mountpoint.display()
        ),
        Err(e) => log::info!(
            "read-ahead of {} stays at the kernel's default ({e}): as root, \
             `echo {READ_AHEAD_KB} > {knob}` makes sequential reads use 1 MiB requests",
            mountpoint.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_is_found_and_a_plain_directory_is_not_a_mount() {
        assert!(device_of(Path::new("/")).is_some());
        let d = std::env::temp_dir().join(format!("cairn-bdi-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let found = device_of(&d);
        std::fs::remove_dir(&d).unwrap();
        assert_eq!(found, None);
    }
}
