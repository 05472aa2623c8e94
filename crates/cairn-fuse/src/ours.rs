//! Whether this session's mount is gone, so that a session that ends never unmounts
//! a mount made on the same mountpoint since.
//!
//! After `umount MOUNTPOINT` the serving process notices the end of its session a
//! moment later, and fuser's session, dropped, then unmounts the mountpoint "if still
//! mounted" — a check (fuser 0.15) that says mounted once the kernel has ended the
//! connection too. A new mount made on the mountpoint in that moment (`umount /mnt;
//! cairn mount … /mnt`) was unmounted by it, and files written after went into the
//! directory beneath. Neither the mount ID nor the device number of the mount table
//! tells the two mounts apart (the kernel gives the freed ones to the next mount); the
//! session's own `/dev/fuse` descriptor does: the kernel ends a mount's connection
//! when it unmounts it, and polling the descriptor then reports `POLLERR`.

use std::os::fd::{AsRawFd, BorrowedFd};

/// Whether the kernel has ended the FUSE connection of `fd` (its mount is unmounted,
/// or the connection was aborted through `/sys/fs/fuse/connections`).
pub(crate) fn connection_ended(fd: BorrowedFd<'_>) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: 0,
        revents: 0,
    };
    loop {
        // SAFETY: poll(2) of one valid pollfd that outlives the call, without waiting.
        let rc = unsafe { libc::poll(&mut p, 1, 0) };
        if rc >= 0 {
            return rc > 0 && p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0;
        }
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            // Unknown: the session ends as fuser ends it.
            return false;
        }
    }
}
