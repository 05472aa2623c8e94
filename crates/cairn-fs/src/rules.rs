//! The rules of the file system that do not depend on where its rows are stored: valid
//! names, access checks, the sticky bit, what `setattr` (chmod, chown, utimens,
//! truncate) allows, new files' mode and group, node types, `open` access modes,
//! extended attribute names and permissions, POSIX access ACLs, and `relatime`.
//! [`Fs`](crate::Fs) applies them to its store; the cluster's servers apply the same
//! functions to theirs, so both behave alike.
//!
//! ```
//! use cairn_fs::{rules, Attr, Cred};
//! let dir = Attr { ino: 1, mode: libc::S_IFDIR | 0o755, uid: 0, gid: 0, size: 0,
//!                  nlink: 2, rdev: 0, atime: 0, mtime: 0, ctime: 0 };
//! let alice = Cred::new(1000, 1000);
//! assert!(rules::may_access(&alice, &dir, rules::MAY_EXEC));
//! assert!(!rules::may_access(&alice, &dir, rules::MAY_WRITE | rules::MAY_EXEC));
//! ```

use crate::errno::{err, FsResult};
use crate::{Attr, Cred, SetAttr, TimeSet, NAME_MAX};

/// Access mask bit: read.
pub const MAY_READ: u32 = 4;
/// Access mask bit: write.
pub const MAY_WRITE: u32 = 2;
/// Access mask bit: execute (search, for a directory).
pub const MAY_EXEC: u32 = 1;

/// Whether `cred` may access an inode of attributes `a` as `mask` asks (owner, group
/// or other bits; supplementary groups count; root passes all but execute without any
/// execute bit on a non-directory).
pub fn may_access(cred: &Cred, a: &Attr, mask: u32) -> bool {
    if cred.uid == 0 {
        return mask & MAY_EXEC == 0 || a.is_dir() || a.mode & 0o111 != 0;
    }
    let bits = if cred.uid == a.uid {
        (a.mode >> 6) & 7
    } else if cred.in_group(a.gid) {
        (a.mode >> 3) & 7
    } else {
        a.mode & 7
    };
    bits & mask == mask
}

/// `EACCES` unless checks are off or [`may_access`] allows it.
pub fn check_access(checks: bool, cred: &Cred, a: &Attr, mask: u32) -> FsResult<()> {
    if !checks || may_access(cred, a, mask) {
        Ok(())
    } else {
        err(libc::EACCES)
    }
}

/// `EACCES` unless checks are off or `cred` may read (`MAY_READ`) or write
/// (`MAY_WRITE`) the contents of inode `a` (a file's data, a directory's entries)
/// named by its inode number alone, as an NFS server decides: by the permission bits,
/// or by owning it — the owner keeps access to what it opened, whatever the bits say
/// since (it could set them back anyway) — and, for reading a regular file, by
/// execute permission (running a program reads it). Used for the requests that
/// follow an open: the check `open(2)` made is not repeated with the kernel's
/// knowledge of the open, so each request is checked on its own.
///
/// ```
/// use cairn_fs::{rules, Attr, Cred};
/// let secret = Attr { ino: 9, mode: libc::S_IFREG | 0o600, uid: 0, gid: 0, size: 5,
///                     nlink: 1, rdev: 0, atime: 0, mtime: 0, ctime: 0 };
/// assert!(rules::check_data_access(true, &Cred::new(1000, 1000), &secret, rules::MAY_READ).is_err());
/// let mine = Attr { mode: libc::S_IFREG | 0o444, uid: 1000, ..secret };
/// assert!(rules::check_data_access(true, &Cred::new(1000, 1000), &mine, rules::MAY_WRITE).is_ok());
/// ```
pub fn check_data_access(checks: bool, cred: &Cred, a: &Attr, mask: u32) -> FsResult<()> {
    let allowed = !checks
        || cred.uid == a.uid
        || may_access(cred, a, mask)
        || (mask == MAY_READ
            && a.mode & libc::S_IFMT == libc::S_IFREG
            && may_access(cred, a, MAY_EXEC));
    if allowed {
        Ok(())
    } else {
        err(libc::EACCES)
    }
}

/// A name an entry may have: 1..=255 bytes ([`NAME_MAX`]), no `/`, no NUL (`ENOENT`
/// for an empty one, `ENAMETOOLONG`, `EINVAL`).
pub fn check_name(name: &[u8]) -> FsResult<()> {
    if name.is_empty() {
        return err(libc::ENOENT);
    }
    if name.len() > NAME_MAX {
        return err(libc::ENAMETOOLONG);
    }
    if name.contains(&b'/') || name.contains(&0) {
        return err(libc::EINVAL);
    }
    Ok(())
}

/// A name that a create-like call may use: valid, and not "." or ".." (`EEXIST`).
pub fn check_new_name(name: &[u8]) -> FsResult<()> {
    check_name(name)?;
    if name == b"." || name == b".." {
        return err(libc::EEXIST);
    }
    Ok(())
}

/// `EPERM` if the sticky bit of directory `dir` forbids `cred` to remove or replace an
/// entry owned by `victim_uid` (checks on, not root, owning neither).
pub fn check_sticky(checks: bool, cred: &Cred, dir: &Attr, victim_uid: u32) -> FsResult<()> {
    if checks
        && dir.mode & libc::S_ISVTX != 0
        && cred.uid != 0
        && cred.uid != dir.uid
        && cred.uid != victim_uid
    {
        return err(libc::EPERM);
    }
    Ok(())
}

/// The mode and group of a new inode of `mode` (type and permission bits) made by
/// `cred` in directory `parent`: a setgid directory gives its group, and its setgid
/// bit to new directories.
pub fn new_mode_gid(cred: &Cred, parent: &Attr, mode: u32) -> (u32, u32) {
    let mut mode = mode;
    let mut gid = cred.gid;
    if parent.mode & libc::S_ISGID != 0 {
        gid = parent.gid;
        if mode & libc::S_IFMT == libc::S_IFDIR {
            mode |= libc::S_ISGID;
        }
    }
    (mode, gid)
}

/// The type bits of a node `mknod` may make from `mode` (no type bits: a regular
/// file): `EPERM` for a directory or, for a non-root caller with checks on, a device;
/// `EINVAL` for an unknown type.
pub fn mknod_type(checks: bool, cred: &Cred, mode: u32) -> FsResult<u32> {
    let t = match mode & libc::S_IFMT {
        0 => libc::S_IFREG,
        t @ (libc::S_IFREG | libc::S_IFCHR | libc::S_IFBLK | libc::S_IFIFO | libc::S_IFSOCK) => t,
        libc::S_IFDIR => return err(libc::EPERM),
        _ => return err(libc::EINVAL),
    };
    if (t == libc::S_IFCHR || t == libc::S_IFBLK) && cred.uid != 0 && checks {
        return err(libc::EPERM);
    }
    Ok(t)
}

/// The access an `open(2)` with `flags` needs of inode `a` (`EISDIR` for writing or
/// truncating a directory, `EACCES`), and whether it truncates (`O_TRUNC` with write
/// access on a non-empty file).
pub fn open_check(checks: bool, cred: &Cred, a: &Attr, flags: i32) -> FsResult<bool> {
    let acc = flags & libc::O_ACCMODE;
    let mask = match acc {
        libc::O_RDONLY => MAY_READ,
        libc::O_WRONLY => MAY_WRITE,
        _ => MAY_READ | MAY_WRITE,
    };
    if a.is_dir() && (acc != libc::O_RDONLY || flags & libc::O_TRUNC != 0) {
        return err(libc::EISDIR);
    }
    check_access(checks, cred, a, mask)?;
    Ok(flags & libc::O_TRUNC != 0 && acc != libc::O_RDONLY && a.size != 0)
}

/// Applies the attribute changes of `s` to `a` under the usual rules (`EPERM` for a
/// chmod or explicit times by a non-owner or a chown by a non-root user, `EACCES` for
/// a truncate or `touch` without write permission, `EISDIR`/`EINVAL` for truncating a
/// directory or a non-regular file, `EFBIG` for a size beyond `i64::MAX`, the largest
/// `off_t`), and sets `ctime` to `now` (and `mtime`, for a truncate without an explicit
/// one). `a.size` is left alone: the caller truncates the data to `s.size` and sets it.
/// Nothing is changed when an error is returned.
pub fn apply_setattr(
    checks: bool,
    cred: &Cred,
    a: &mut Attr,
    s: &SetAttr,
    now: i64,
) -> FsResult<()> {
    let mut n = a.clone();
    let owner = !checks || cred.uid == 0 || cred.uid == n.uid;
    if let Some(m) = s.mode {
        if !owner {
            return err(libc::EPERM);
        }
        let mut m = m & 0o7777;
        // As Linux does: a caller outside the file's group can't set its setgid bit.
        if checks && cred.uid != 0 && !cred.in_group(n.gid) {
            m &= !libc::S_ISGID;
        }
        n.mode = (n.mode & libc::S_IFMT) | m;
    }
    if s.uid.is_some() || s.gid.is_some() {
        let uid = s.uid.unwrap_or(n.uid);
        let gid = s.gid.unwrap_or(n.gid);
        if checks && cred.uid != 0 {
            if uid != n.uid || cred.uid != n.uid {
                return err(libc::EPERM);
            }
            if gid != n.gid && !cred.in_group(gid) {
                return err(libc::EPERM);
            }
        }
        if (uid != n.uid || gid != n.gid) && !n.is_dir() {
            n.mode &= !libc::S_ISUID;
            if n.mode & libc::S_IXGRP != 0 {
                n.mode &= !libc::S_ISGID;
            }
        }
        n.uid = uid;
        n.gid = gid;
    }
    for (t, is_m) in [(s.atime, false), (s.mtime, true)] {
        let Some(t) = t else { continue };
        let v = match t {
            TimeSet::Now => {
                if !owner {
                    check_access(checks, cred, &n, MAY_WRITE)?;
                }
                now
            }
            TimeSet::At(v) => {
                if !owner {
                    return err(libc::EPERM);
                }
                v
            }
        };
        if is_m {
            n.mtime = v;
        } else {
            n.atime = v;
        }
    }
    if s.size.is_some() {
        match n.mode & libc::S_IFMT {
            libc::S_IFDIR => return err(libc::EISDIR),
            libc::S_IFREG => {}
            _ => return err(libc::EINVAL),
        }
        check_access(checks, cred, &n, MAY_WRITE)?;
        if s.size.is_some_and(|z| z > i64::MAX as u64) {
            // `st_size` is signed: no file is larger than the largest `off_t`.
            return err(libc::EFBIG);
        }
        if s.mtime.is_none() {
            n.mtime = now;
        }
    }
    n.ctime = now;
    *a = n;
    Ok(())
}

/// A valid extended attribute name: not empty, no NUL (`EINVAL`), at most 255 bytes
/// (`ERANGE`).
pub fn check_xattr_name(name: &[u8]) -> FsResult<()> {
    if name.is_empty() || name.contains(&0) {
        return err(libc::EINVAL);
    }
    if name.len() > 255 {
        return err(libc::ERANGE);
    }
    Ok(())
}

/// Largest extended attribute value.
pub const XATTR_SIZE_MAX: usize = 64 << 10;

/// Whether `cred` may set or remove extended attribute `name` of inode `a`: `user.`
/// needs write permission, `trusted.` and `security.` root, others the owner.
pub fn xattr_access(checks: bool, cred: &Cred, a: &Attr, name: &[u8]) -> FsResult<()> {
    if !checks {
        return Ok(());
    }
    if name.starts_with(b"user.") {
        check_access(checks, cred, a, MAY_WRITE)
    } else if name.starts_with(b"trusted.") || name.starts_with(b"security.") {
        if cred.uid == 0 {
            Ok(())
        } else {
            err(libc::EPERM)
        }
    } else if cred.uid == 0 || cred.uid == a.uid {
        Ok(())
    } else {
        err(libc::EPERM)
    }
}

/// Whether `cred` may read extended attribute `name` of inode `a`, as Linux decides:
/// `trusted.` names are root's alone (`ENODATA` to anyone else, as if absent), `user.`
/// ones need read permission (`EACCES`), `security.` and `system.` ones (ACLs,
/// capabilities, labels) are readable by anyone who reaches the inode.
pub fn xattr_read_access(checks: bool, cred: &Cred, a: &Attr, name: &[u8]) -> FsResult<()> {
    if !checks || cred.uid == 0 {
        return Ok(());
    }
    if name.starts_with(b"trusted.") {
        err(libc::ENODATA)
    } else if name.starts_with(b"user.") {
        check_access(checks, cred, a, MAY_READ)
    } else {
        Ok(())
    }
}

/// Whether `cred` may see the name of extended attribute `name` in a listing: every
/// name but `trusted.` ones, which only root sees (as Linux lists them).
pub fn xattr_listed(checks: bool, cred: &Cred, name: &[u8]) -> bool {
    !checks || cred.uid == 0 || !name.starts_with(b"trusted.")
}

/// Most bytes a listing of extended attribute names may take (each name and its NUL),
/// Linux's `XATTR_LIST_MAX`: a longer list is `E2BIG`.
pub const XATTR_LIST_MAX: usize = 64 << 10;

/// The extended attribute that holds a POSIX access ACL.
pub const ACL_ACCESS: &[u8] = b"system.posix_acl_access";

/// The permission bits a POSIX access ACL (`system.posix_acl_access`, version 2) sets,
/// and whether the bits express it fully (no named entries, no mask): then, as the
/// kernel does for local file systems, the ACL is not kept.
pub fn acl_mode(v: &[u8]) -> FsResult<(u32, bool)> {
    if v.len() < 4 || (v.len() - 4) & 7 != 0 || u32::from_le_bytes([v[0], v[1], v[2], v[3]]) != 2 {
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

/// Whether a read at `now` should set the access time of `a` (Linux's `relatime`: the
/// access time is not newer than the modification or change time, or is a day old).
pub fn relatime_due(a: &Attr, now: i64) -> bool {
    const DAY_NS: i64 = 24 * 3600 * 1_000_000_000;
    a.atime <= a.mtime || a.atime <= a.ctime || now - a.atime >= DAY_NS
}
