//! The mount's [`Invalidator`]: notifications written to the session's `/dev/fuse`
//! (under either transport: the kernel takes notifications only that way), which make
//! the kernel forget an entry or an inode's attributes and data before their time is up
//! (a lease of the file system revoked).
//!
//! The kernel handles a notification within the write(2): it returns once the entry or
//! the inode is forgotten. An entry is forgotten with its directory's lock held, so a
//! request of that directory in flight is waited for; and the kernel answers ENOENT when
//! it had nothing cached, which is no error here.

use std::os::fd::OwnedFd;

use cairn_fs::Invalidator;

use crate::devfuse::write_message;
use crate::reply;

/// Writes the notifications of a mount to (a descriptor of) its `/dev/fuse`.
pub(crate) struct Notifier {
    fd: OwnedFd,
}

impl Notifier {
    /// Notifies through `fd`, a descriptor of the session's `/dev/fuse`.
    pub(crate) fn new(fd: OwnedFd) -> Notifier {
        Notifier { fd }
    }

    /// Writes `message`; what fails (but ENOENT, nothing cached) is logged: `what` says
    /// what was to be forgotten.
    fn send(&self, message: &[u8], what: impl FnOnce() -> String) {
        // write_message takes ENOENT (nothing to forget) as done.
        if let Err(e) = write_message(&self.fd, &[message]) {
            log::debug!("invalidating {}: {e}", what());
        }
    }
}

impl Invalidator for Notifier {
    fn entry(&self, parent: u64, name: &[u8]) {
        self.send(&reply::inval_entry(parent, name), || {
            format!(
                "entry {:?} of directory {parent}",
                String::from_utf8_lossy(name)
            )
        });
    }

    fn inode(&self, ino: u64) {
        self.send(&reply::inval_inode(ino, true), || format!("inode {ino}"));
    }
}
