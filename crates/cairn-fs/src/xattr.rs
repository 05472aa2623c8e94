//! Extended attributes, one row each (`system.posix_acl_access` also sets the
//! permission bits).

use super::errno::{err, Errno, FsResult};
use super::inode::{Inode, Tx};
use super::layout::*;
use super::perm::{Cred, W};
use super::times::now_ns;
use super::{Fs, XATTR_CREATE, XATTR_REPLACE};

/// The permission bits a POSIX access ACL (`system.posix_acl_access`, version 2) sets,
/// and whether the bits express it fully (no named entries, no mask).
fn acl_mode(v: &[u8]) -> FsResult<(u32, bool)> {
    if v.len() < 4 || (v.len() - 4) & 7 != 0 || u32_at(v, 0) != 2 {
        return err(libc::EINVAL);
    }
    let (mut user, mut group, mut other, mut mask) = (None, None, None, None);
    let mut minimal = true;
    for e in v[4..].chunks(8) {
        let tag = u16::from_le_bytes([e[0], e[1]]);
        let perm = u16::from_le_bytes([e[2], e[3]]) as u32 & 7;
        match tag {
            0x01 => user = Some(perm),
            0x04 => group = Some(perm),
            0x10 => mask = Some(perm),
            0x20 => other = Some(perm),
            0x02 | 0x08 => minimal = false,
            _ => return err(libc::EINVAL),
        }
    }
    if mask.is_some() {
        minimal = false;
    }
    match (user, group, other) {
        (Some(u), Some(g), Some(o)) => Ok(((u << 6) | (mask.unwrap_or(g) << 3) | o, minimal)),
        _ => err(libc::EINVAL),
    }
}

impl Fs {
    fn check_xattr_name(name: &[u8]) -> FsResult<()> {
        if name.is_empty() || name.contains(&0) {
            return err(libc::EINVAL);
        }
        if name.len() > 255 {
            return err(libc::ERANGE);
        }
        Ok(())
    }

    /// The value of extended attribute `name` (`ENODATA` if absent).
    pub fn getxattr(&self, ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
        Self::check_xattr_name(name)?;
        self.inode(ino)?;
        match self.rows.get(&xattr_key(ino, name))? {
            Some(v) => Ok(v.into_vec()),
            None => err(libc::ENODATA),
        }
    }

    /// Sets extended attribute `name` ([`XATTR_CREATE`], [`XATTR_REPLACE`] flags).
    pub fn setxattr(
        &self,
        cred: &Cred,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: u32,
    ) -> FsResult<()> {
        Self::check_xattr_name(name)?;
        if value.len() > 64 << 10 {
            return err(libc::E2BIG);
        }
        let _g = self.lock.lock();
        let mut tx = Tx::new();
        let mut i = self.tx_get(&mut tx, ino)?;
        self.xattr_perm(cred, &i, name)?;
        let k = xattr_key(ino, name);
        let exists = self.rows.contains(&k);
        if flags & XATTR_CREATE != 0 && exists {
            return err(libc::EEXIST);
        }
        if flags & XATTR_REPLACE != 0 && !exists {
            return err(libc::ENODATA);
        }
        let mut store = true;
        if name == b"system.posix_acl_access" {
            // As the kernel does for local file systems: the ACL sets the permission
            // bits, and one that the bits express fully is not kept.
            let (mode, minimal) = acl_mode(value)?;
            if self.perms_on() && cred.uid != 0 && cred.uid != i.attr.uid {
                return err(libc::EPERM);
            }
            i.attr.mode = (i.attr.mode & !0o777) | mode;
            if minimal {
                store = false;
                if exists {
                    tx.batch.delete(&k);
                }
            }
        }
        if store {
            tx.batch.put(&k, value);
            i.flags |= FLAG_XATTRS;
        }
        i.attr.ctime = now_ns();
        self.tx_put(&mut tx, i);
        self.commit(tx)
    }

    fn xattr_perm(&self, cred: &Cred, i: &Inode, name: &[u8]) -> FsResult<()> {
        if !self.perms_on() {
            return Ok(());
        }
        if name.starts_with(b"user.") {
            self.check_access(cred, &i.attr, W)
        } else if name.starts_with(b"trusted.") || name.starts_with(b"security.") {
            if cred.uid == 0 {
                Ok(())
            } else {
                err(libc::EPERM)
            }
        } else if cred.uid == 0 || cred.uid == i.attr.uid {
            Ok(())
        } else {
            err(libc::EPERM)
        }
    }

    /// The names of the extended attributes of `ino`.
    pub fn listxattr(&self, ino: u64) -> FsResult<Vec<Vec<u8>>> {
        self.inode(ino)?;
        self.rows
            .scan_prefix(&ino_prefix(TAG_XATTR, ino), None)
            .map(|r| r.map(|(k, _)| k).map_err(Errno::from))
            .collect()
    }

    /// Removes extended attribute `name` (`ENODATA` if absent).
    pub fn removexattr(&self, cred: &Cred, ino: u64, name: &[u8]) -> FsResult<()> {
        Self::check_xattr_name(name)?;
        let _g = self.lock.lock();
        let mut tx = Tx::new();
        let mut i = self.tx_get(&mut tx, ino)?;
        self.xattr_perm(cred, &i, name)?;
        let k = xattr_key(ino, name);
        if !self.rows.contains(&k) {
            return err(libc::ENODATA);
        }
        tx.batch.delete(&k);
        i.attr.ctime = now_ns();
        self.tx_put(&mut tx, i);
        self.commit(tx)
    }
}
