//! Conversions between the wire's messages (and stored rows) and the file system's
//! types, for the client and the server alike.

use cairn_fs::{Attr, Cred};

use crate::proto;

/// The attributes of an inode row.
pub(crate) fn row_attr(ino: u64, i: &proto::InodeRow) -> Attr {
    Attr {
        ino,
        mode: i.mode,
        uid: i.uid,
        gid: i.gid,
        size: i.size,
        nlink: i.nlink,
        rdev: i.rdev,
        atime: i.atime,
        mtime: i.mtime,
        ctime: i.ctime,
    }
}

/// Copies attributes into an inode row.
pub(crate) fn set_row_attr(i: &mut proto::InodeRow, a: &Attr) {
    i.mode = a.mode;
    i.uid = a.uid;
    i.gid = a.gid;
    i.size = a.size;
    i.nlink = a.nlink;
    i.rdev = a.rdev;
    i.atime = a.atime;
    i.mtime = a.mtime;
    i.ctime = a.ctime;
}

/// The wire form of attributes.
pub(crate) fn attr_msg(a: &Attr) -> proto::Attr {
    proto::Attr {
        ino: a.ino,
        mode: a.mode,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        nlink: a.nlink,
        rdev: a.rdev,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
    }
}

/// Attributes from the wire.
pub(crate) fn msg_attr(a: &proto::Attr) -> Attr {
    Attr {
        ino: a.ino,
        mode: a.mode,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        nlink: a.nlink,
        rdev: a.rdev,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
    }
}

/// A credential from the wire.
pub(crate) fn msg_cred(c: Option<&proto::Cred>) -> Cred {
    match c {
        Some(c) => Cred::new(c.uid, c.gid).with_groups(&c.groups),
        // No credential: nobody (65534), who passes only "other" checks.
        None => Cred::new(65534, 65534),
    }
}

/// The wire form of a credential.
pub(crate) fn cred_msg(c: &Cred) -> proto::Cred {
    proto::Cred {
        uid: c.uid,
        gid: c.gid,
        groups: c.groups.as_slice().to_vec(),
    }
}

/// The wire status "busy: retry" (nothing was done).
pub(crate) fn busy_status() -> proto::Status {
    proto::Status {
        errno: libc::EAGAIN as u32,
        retry: true,
        ..Default::default()
    }
}
