//! Extended attributes, one row each (`system.posix_acl_access` also sets the
//! permission bits).

use super::errno::{err, Errno, FsResult};
use super::inode::{Inode, Tx};
use super::layout::{ino_prefix, xattr_key, FLAG_XATTRS, TAG_XATTR};
use super::perm::Cred;
use super::rules;
use super::times::now_ns;
use super::{Fs, XATTR_CREATE, XATTR_REPLACE};

impl Fs {
    /// The value of extended attribute `name` (`ENODATA` if absent).
    pub fn getxattr(&self, ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
        self.getxattr_as(&Cred::ROOT, ino, name)
    }

    /// [`Fs::getxattr`] if `cred` may read it ([`rules::xattr_read_access`]).
    pub fn getxattr_as(&self, cred: &Cred, ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
        rules::check_xattr_name(name)?;
        let i = self.inode(ino)?;
        rules::xattr_read_access(self.perms_on(), cred, &i.attr, name)?;
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
        rules::check_xattr_name(name)?;
        if value.len() > rules::XATTR_SIZE_MAX {
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
        if name == rules::ACL_ACCESS {
            // As the kernel does for local file systems: the ACL sets the permission
            // bits, and one that the bits express fully is not kept.
            let (mode, minimal) = rules::acl_mode(value)?;
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
        rules::xattr_access(self.perms_on(), cred, &i.attr, name)
    }

    /// The names of the extended attributes of `ino`; `E2BIG` past
    /// [`rules::XATTR_LIST_MAX`] bytes of names (each with its NUL).
    pub fn listxattr(&self, ino: u64) -> FsResult<Vec<Vec<u8>>> {
        self.listxattr_as(&Cred::ROOT, ino)
    }

    /// [`Fs::listxattr`] as `cred` sees it: `trusted.` names only for root
    /// ([`rules::xattr_listed`]).
    pub fn listxattr_as(&self, cred: &Cred, ino: u64) -> FsResult<Vec<Vec<u8>>> {
        self.inode(ino)?;
        let checks = self.perms_on();
        let mut out = Vec::new();
        let mut bytes = 0;
        for r in self.rows.scan_prefix(&ino_prefix(TAG_XATTR, ino), None) {
            let (name, _) = r.map_err(Errno::from)?;
            if !rules::xattr_listed(checks, cred, &name) {
                continue;
            }
            bytes += name.len() + 1;
            if bytes > rules::XATTR_LIST_MAX {
                return err(libc::E2BIG);
            }
            out.push(name);
        }
        Ok(out)
    }

    /// Removes extended attribute `name` (`ENODATA` if absent).
    pub fn removexattr(&self, cred: &Cred, ino: u64, name: &[u8]) -> FsResult<()> {
        rules::check_xattr_name(name)?;
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
