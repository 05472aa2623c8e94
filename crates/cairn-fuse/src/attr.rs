//! Conversions between `cairn_fs` and the FUSE protocol (attributes, file types,
//! times) and the credentials of a request's caller.

use cairn_fs::{Attr, Cred, TimeSet};

use crate::abi::{self, InHeader};

/// The caller of a request. FUSE requests carry no supplementary groups, so when
/// the file system checks permissions (`groups`) they are read from `/proc/<pid>/status` for
/// a non-root caller (root passes the checks that groups could matter for); when the
/// kernel checks them, the file system needs only the ids, for the owner of new files.
pub(crate) fn cred(h: &InHeader, groups: bool) -> Cred {
    let c = Cred::new(h.uid, h.gid);
    if c.uid == 0 || !groups {
        return c;
    }
    match proc_groups(h.pid) {
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

/// Nanoseconds since the epoch as the protocol's seconds (two's complement before
/// 1970) and nanoseconds.
fn time(ns: i64) -> (u64, u32) {
    (
        ns.div_euclid(1_000_000_000) as u64,
        ns.rem_euclid(1_000_000_000) as u32,
    )
}

/// The protocol's seconds and nanoseconds as nanoseconds since the epoch.
fn ns(secs: u64, nsec: u32) -> i64 {
    (secs as i64)
        .saturating_mul(1_000_000_000)
        .saturating_add(nsec.min(999_999_999) as i64)
}

/// The file-type bits of `mode` (a regular file when they name no known type).
pub(crate) fn kind(mode: u32) -> u32 {
    match mode & libc::S_IFMT {
        t @ (libc::S_IFDIR
        | libc::S_IFLNK
        | libc::S_IFCHR
        | libc::S_IFBLK
        | libc::S_IFIFO
        | libc::S_IFSOCK) => t,
        _ => libc::S_IFREG,
    }
}

/// The protocol's attributes of `a`.
pub(crate) fn fattr(a: &Attr) -> abi::Attr {
    // Directories show the customary 4096 bytes (as ext4 does); their entries are rows.
    let (size, blocks) = if a.is_dir() {
        (4096, 8)
    } else {
        (a.size, a.blocks())
    };
    let (atime, atimensec) = time(a.atime);
    let (mtime, mtimensec) = time(a.mtime);
    let (ctime, ctimensec) = time(a.ctime);
    abi::Attr {
        ino: a.ino,
        size,
        blocks,
        atime,
        mtime,
        ctime,
        atimensec,
        mtimensec,
        ctimensec,
        mode: kind(a.mode) | (a.mode & 0o7777),
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

/// A SETATTR's new access (`now`: `FATTR_ATIME_NOW`) or modification time.
pub(crate) fn timeset(set: bool, now: bool, secs: u64, nsec: u32) -> Option<TimeSet> {
    match (set, now) {
        (_, true) => Some(TimeSet::Now),
        (true, false) => Some(TimeSet::At(ns(secs, nsec))),
        (false, false) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_before_the_epoch_round_trip() {
        for t in [
            0,
            1,
            1_500_000_000,
            -1,
            -1_500_000_000,
            1_700_000_000_123_456_789,
        ] {
            let (s, n) = time(t);
            assert!(n < 1_000_000_000);
            assert_eq!(ns(s, n), t);
        }
    }
}
