//! Mounted tests of `cairn mount`: everyday tools on the mount and on a plain directory,
//! trees compared byte for byte; clean unmounts by `cairn umount` and SIGTERM; no loss of
//! fsynced data when the mount process is killed.
//!
//! They skip (pass, printing why) where FUSE can't be used: no /dev/fuse, or a mount
//! refused with EPERM/EACCES (containers without the capability). Every mount is undone
//! by a Drop guard, so a failing test never leaves one behind.

mod common;

use std::io::Write;
use std::process::Command;

use common::{cairn, compare_with_plain, is_mountpoint, tree, Mount};

#[test]
fn everyday_tools_match_a_plain_directory() {
    everyday_tools(&[]);
}

/// The same with the kernel checking permissions (`default_permissions`), as on a mount
/// by another user than root or with --allow-other.
#[test]
fn everyday_tools_with_kernel_permission_checks() {
    everyday_tools(&["--kernel-permissions"]);
}

fn everyday_tools(mount_args: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let (store, mp) = (tmp.path().join("store"), tmp.path().join("mnt"));
    std::fs::create_dir(&mp).unwrap();
    let Some(m) = Mount::with_args(&store, &mp, mount_args) else {
        return;
    };
    compare_with_plain(tmp.path(), &mp, 3000);
    // Everything is still there after an unmount and a new mount.
    drop(m);
    assert!(!is_mountpoint(&mp));
    let Some(_m) = Mount::new(&store, &mp) else {
        return;
    };
    assert_eq!(tree(&tmp.path().join("plain")), tree(&mp));
}

#[test]
fn umount_and_sigterm_unmount_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, mp) = (tmp.path().join("store"), tmp.path().join("mnt"));
    std::fs::create_dir(&mp).unwrap();
    let Some(mut m) = Mount::new(&store, &mp) else {
        return;
    };
    std::fs::write(mp.join("a"), b"one").unwrap();
    let st = cairn().arg("umount").arg(&mp).status().unwrap();
    assert!(st.success());
    assert!(m.wait().success());
    assert!(!is_mountpoint(&mp));
    let Some(mut m) = Mount::new(&store, &mp) else {
        return;
    };
    assert_eq!(std::fs::read(mp.join("a")).unwrap(), b"one");
    std::fs::write(mp.join("b"), b"two").unwrap();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(m.pid(), libc::SIGTERM) };
    assert!(m.wait().success());
    assert!(!is_mountpoint(&mp));
    let Some(_m) = Mount::new(&store, &mp) else {
        return;
    };
    assert_eq!(std::fs::read(mp.join("b")).unwrap(), b"two");
}

#[test]
fn fsynced_data_survives_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let (store, mp) = (tmp.path().join("store"), tmp.path().join("mnt"));
    std::fs::create_dir(&mp).unwrap();
    let Some(mut m) = Mount::new(&store, &mp) else {
        return;
    };
    let data: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
    {
        std::fs::create_dir(mp.join("d")).unwrap();
        let mut f = std::fs::File::create(mp.join("d/f")).unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
    }
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(m.pid(), libc::SIGKILL) };
    m.wait();
    let _ = Command::new("umount").arg("-l").arg(&mp).status();
    let Some(_m) = Mount::new(&store, &mp) else {
        return;
    };
    assert_eq!(std::fs::read(mp.join("d/f")).unwrap(), data);
}
