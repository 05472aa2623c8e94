//! Who performs an operation ([`Cred`]) and the permission rules: access checks,
//! the sticky bit, and what `setattr` (chmod, chown, utimens, truncate) allows.

use std::sync::atomic::Ordering;

use super::errno::{err, FsResult};
use super::inode::{Attr, Inode, Tx};
use super::rules;
use super::times::now_ns;
use super::Fs;

/// Who performs an operation: the owner of new files and the subject of permission
/// checks. Uid 0 passes every check but executing a file with no execute bit.
///
/// ```
/// use cairn_fs::Cred;
/// let alice = Cred::new(1000, 1000).with_groups(&[27, 100]);
/// assert!(alice.in_group(27) && alice.in_group(1000) && !alice.in_group(5));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cred {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Groups,
}

impl Cred {
    /// The superuser.
    pub const ROOT: Cred = Cred::new(0, 0);

    /// A user with a primary group and no supplementary groups.
    pub const fn new(uid: u32, gid: u32) -> Cred {
        Cred {
            uid,
            gid,
            groups: Groups::NONE,
        }
    }

    /// The same user with these supplementary groups (the first
    /// [`Groups::MAX`] of them).
    pub fn with_groups(self, groups: &[u32]) -> Cred {
        Cred {
            groups: Groups::new(groups),
            ..self
        }
    }

    /// Whether the caller belongs to group `gid` (primary or supplementary).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.as_slice().contains(&gid)
    }
}

/// Supplementary group ids of a [`Cred`], held inline so that `Cred` stays `Copy`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Groups {
    len: u8,
    ids: [u32; Groups::MAX],
}

impl Groups {
    /// Most supplementary groups kept.
    pub const MAX: usize = 32;
    /// No supplementary groups.
    pub const NONE: Groups = Groups {
        len: 0,
        ids: [0; Groups::MAX],
    };

    /// The first [`Groups::MAX`] of `ids`.
    pub fn new(ids: &[u32]) -> Groups {
        let mut g = Groups::NONE;
        let n = ids.len().min(Groups::MAX);
        g.ids[..n].copy_from_slice(&ids[..n]);
        g.len = n as u8;
        g
    }

    /// The group ids.
    pub fn as_slice(&self) -> &[u32] {
        &self.ids[..self.len as usize]
    }
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// How `setattr` sets a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSet {
    /// The current time.
    Now,
    /// This time, in nanoseconds since the epoch.
    At(i64),
}

/// The changes of a `setattr` call; `None` fields are left alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits (the type bits are ignored).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (truncate or extend with zeros).
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<TimeSet>,
    /// New modification time.
    pub mtime: Option<TimeSet>,
}

pub(super) const R: u32 = rules::MAY_READ;
pub(super) const W: u32 = rules::MAY_WRITE;
const X: u32 = rules::MAY_EXEC;

impl Fs {
    /// Turns the permission checks of the operations on or off (on by default). A FUSE
    /// mount with `default_permissions` leaves them to the kernel.
    pub fn set_permission_checks(&self, on: bool) {
        self.perms.store(on, Ordering::Relaxed);
    }

    pub(super) fn perms_on(&self) -> bool {
        self.perms.load(Ordering::Relaxed)
    }

    pub(super) fn check_access(&self, cred: &Cred, a: &Attr, mask: u32) -> FsResult<()> {
        rules::check_access(self.perms.load(Ordering::Relaxed), cred, a, mask)
    }

    /// A directory the caller may search (and, with `write`, change).
    pub(super) fn dir_for(
        &self,
        cred: &Cred,
        tx: &mut Tx,
        ino: u64,
        write: bool,
    ) -> FsResult<Inode> {
        let d = self.tx_get(tx, ino)?;
        if !d.is_dir() {
            return err(libc::ENOTDIR);
        }
        self.check_access(cred, &d.attr, if write { W | X } else { X })?;
        Ok(d)
    }

    pub(super) fn check_sticky(&self, cred: &Cred, dir: &Inode, victim: &Inode) -> FsResult<()> {
        rules::check_sticky(self.perms_on(), cred, &dir.attr, victim.attr.uid)
    }

    /// Changes attributes: chmod, chown, truncate, utimens, under the usual rules
    /// (`EPERM` for a chmod or explicit times by a non-owner or a chown by a non-root
    /// user, `EACCES` for a truncate without write permission).
    pub fn setattr(&self, cred: &Cred, ino: u64, s: &SetAttr) -> FsResult<Attr> {
        let _g = self.lock.lock();
        let mut tx = Tx::new();
        let mut i = self.tx_get(&mut tx, ino)?;
        let now = now_ns();
        rules::apply_setattr(self.perms_on(), cred, &mut i.attr, s, now)?;
        if let Some(size) = s.size {
            self.truncate_in(&mut tx, &mut i, size)?;
        }
        let attr = i.attr.clone();
        self.tx_put(&mut tx, i);
        self.commit(tx)?;
        Ok(attr)
    }
}
