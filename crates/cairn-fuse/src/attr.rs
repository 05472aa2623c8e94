//! Conversions between `cairn_fs` and the FUSE protocol (attributes, file types,
//! times) and the credentials of a request's caller.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType, Request, TimeOrNow};

use cairn_fs::{Attr, Cred, TimeSet};

/// The caller of a request. FUSE requests carry no supplementary groups, so when
/// the file system checks permissions (`groups`) they are read from `/proc/<pid>/status` for
/// a non-root caller (root passes the checks that groups could matter for); when the
/// kernel checks them, the file system needs only the ids, for the owner of new files.
pub(crate) fn cred(req: &Request<'_>, groups: bool) -> Cred {
    let c = Cred::new(req.uid(), req.gid());
    if c.uid == 0 || !groups {
        return c;
    }
    match proc_groups(req.pid()) {
        Some(groups) => c.with_groups(&groups),
        None => c,
    }
}

/// The supplementary groups of process `pid`, from the `Groups:` line of its status.
fn proc_groups(pid: u32) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Groups:"))?;
    line["Groups:".len()..]
        .split_whitespace()
        .map(|g| g.parse().ok())
        .collect()
}

pub(crate) fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

pub(crate) fn ns(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i64,
        Err(e) => -(e.duration().as_nanos() as i64),
    }
}

pub(crate) fn kind(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

pub(crate) fn fattr(a: &Attr) -> FileAttr {
    // Directories show the customary 4096 bytes (as ext4 does); their entries are rows.
    let (size, blocks) = if a.is_dir() {
        (4096, 8)
    } else {
        (a.size, a.blocks())
    };
    FileAttr {
        ino: a.ino,
        size,
        blocks,
        atime: time(a.atime),
        mtime: time(a.mtime),
        ctime: time(a.ctime),
        crtime: time(a.ctime),
        kind: kind(a.mode),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: 4096,
        flags: 0,
    }
}

/// Whether `c` may access `a` as `mask` (R_OK, W_OK, X_OK bits) asks, by the rules of
/// the kernel's generic_permission for a caller with no supplementary groups (the only
/// callers when cairn checks permissions are root's processes).
pub(crate) fn may_access(c: &Cred, a: &Attr, mask: u32) -> bool {
    let mask = mask & 7;
    if c.uid == 0 {
        return mask & 1 == 0 || a.is_dir() || a.mode & 0o111 != 0;
    }
    let bits = if c.uid == a.uid {
        a.mode >> 6
    } else if c.gid == a.gid {
        a.mode >> 3
    } else {
        a.mode
    } & 7;
    bits & mask == mask
}

pub(crate) fn timeset(t: Option<TimeOrNow>) -> Option<TimeSet> {
    t.map(|t| match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(t) => TimeSet::At(ns(t)),
    })
}
