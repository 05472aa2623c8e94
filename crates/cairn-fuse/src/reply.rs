//! Encoding replies: what follows the reply header for each kind of answer, and the
//! packing of directory entries. The transports add the header ([`frame`]).

use std::time::Duration;

use zerocopy::IntoBytes;

use crate::abi::{self, Attr, OutHeader};
use crate::Timeouts;

/// The answer to a request: the bytes after the reply header, or an errno.
pub(crate) type Reply = Result<Vec<u8>, i32>;

/// What serving a request produced.
pub(crate) struct Answer {
    /// The reply; `None` for the requests the kernel expects none for (FORGET,
    /// BATCH_FORGET, INTERRUPT).
    pub reply: Option<Reply>,
    /// An inode whose cached attributes the kernel must drop, told after the reply.
    pub inval: Option<u64>,
}

impl Answer {
    pub(crate) fn reply(r: Reply) -> Answer {
        Answer {
            reply: Some(r),
            inval: None,
        }
    }

    pub(crate) fn none() -> Answer {
        Answer {
            reply: None,
            inval: None,
        }
    }
}

/// The reply header of request `unique`, for `len` bytes after it or errno `error`.
pub(crate) fn header(unique: u64, reply: &Reply) -> OutHeader {
    match reply {
        Ok(b) => OutHeader {
            len: (std::mem::size_of::<OutHeader>() + b.len()) as u32,
            error: 0,
            unique,
        },
        Err(e) => OutHeader {
            len: std::mem::size_of::<OutHeader>() as u32,
            error: -e,
            unique,
        },
    }
}

/// The notification that drops the kernel's cached attributes of `ino`, whole.
pub(crate) fn inval_inode(ino: u64) -> Vec<u8> {
    let body = abi::NotifyInvalInode {
        ino,
        off: -1,
        len: 0,
    };
    let h = OutHeader {
        len: (std::mem::size_of::<OutHeader>() + std::mem::size_of_val(&body)) as u32,
        error: abi::NOTIFY_INVAL_INODE,
        unique: 0,
    };
    let mut v = h.as_bytes().to_vec();
    v.extend_from_slice(body.as_bytes());
    v
}

fn split(d: Duration) -> (u64, u32) {
    (d.as_secs(), d.subsec_nanos())
}

/// An entry the kernel keeps for `t.entry` with its attributes for `t.attr`.
pub(crate) fn entry_out(attr: Attr, t: &Timeouts) -> abi::EntryOut {
    let (s, ns) = split(t.entry);
    let (a, ans) = split(t.attr);
    abi::EntryOut {
        nodeid: attr.ino,
        generation: 0,
        entry_valid: s,
        attr_valid: a,
        entry_valid_nsec: ns,
        attr_valid_nsec: ans,
        attr,
    }
}

/// LOOKUP, MKNOD, MKDIR, SYMLINK, LINK.
pub(crate) fn entry(attr: Attr, t: &Timeouts) -> Vec<u8> {
    entry_out(attr, t).as_bytes().to_vec()
}

/// A LOOKUP of a name that does not exist, answered so that the kernel remembers its
/// absence for `ttl` (a negative entry: node id 0) instead of asking again.
pub(crate) fn negative_entry(ttl: Duration) -> Vec<u8> {
    let (s, ns) = split(ttl);
    abi::EntryOut {
        nodeid: 0,
        generation: 0,
        entry_valid: s,
        attr_valid: 0,
        entry_valid_nsec: ns,
        attr_valid_nsec: 0,
        attr: Attr::default(),
    }
    .as_bytes()
    .to_vec()
}

/// GETATTR, SETATTR.
pub(crate) fn attr(attr: Attr, ttl: Duration) -> Vec<u8> {
    let (s, ns) = split(ttl);
    abi::AttrOut {
        attr_valid: s,
        attr_valid_nsec: ns,
        dummy: 0,
        attr,
    }
    .as_bytes()
    .to_vec()
}

fn open_out(fh: u64) -> abi::OpenOut {
    abi::OpenOut {
        fh,
        open_flags: 0,
        backing_id: 0,
    }
}

/// OPEN, OPENDIR.
pub(crate) fn open(fh: u64) -> Vec<u8> {
    open_out(fh).as_bytes().to_vec()
}

/// CREATE: the new entry, then the open file (handle `fh`).
pub(crate) fn create(attr: Attr, t: &Timeouts, fh: u64) -> Vec<u8> {
    let mut v = entry(attr, t);
    v.extend_from_slice(open_out(fh).as_bytes());
    v
}

/// WRITE, COPY_FILE_RANGE.
pub(crate) fn written(n: u32) -> Vec<u8> {
    abi::WriteOut {
        size: n,
        padding: 0,
    }
    .as_bytes()
    .to_vec()
}

/// GETXATTR and LISTXATTR asked with size 0: the size the value needs.
pub(crate) fn xattr_size(n: u32) -> Vec<u8> {
    abi::SizeIn {
        size: n,
        padding: 0,
    }
    .as_bytes()
    .to_vec()
}

/// STATFS.
pub(crate) fn statfs(s: &cairn_fs::StatFs) -> Vec<u8> {
    abi::StatfsOut {
        blocks: s.blocks,
        bfree: s.bfree,
        bavail: s.bavail,
        files: s.files,
        ffree: s.ffree,
        bsize: s.bsize,
        namelen: s.namelen,
        frsize: s.bsize,
        padding: 0,
        spare: [0; 6],
    }
    .as_bytes()
    .to_vec()
}

/// The entries of a READDIR reply, at most the size the kernel asked for.
pub(crate) struct DirBuf {
    buf: Vec<u8>,
    max: usize,
}

impl DirBuf {
    pub(crate) fn new(max: usize) -> DirBuf {
        DirBuf {
            buf: Vec::with_capacity(max.min(1 << 20)),
            max,
        }
    }

    /// Adds an entry (`kind`: the `S_IFMT` bits of its mode); `true` when it did not
    /// fit, and was not added.
    pub(crate) fn add(&mut self, ino: u64, cookie: u64, mode: u32, name: &[u8]) -> bool {
        let len = std::mem::size_of::<abi::Dirent>() + name.len();
        let padded = len.div_ceil(8) * 8;
        if self.buf.len() + padded > self.max {
            return true;
        }
        let d = abi::Dirent {
            ino,
            off: cookie,
            namelen: name.len() as u32,
            kind: (mode & libc::S_IFMT) >> 12,
        };
        self.buf.extend_from_slice(d.as_bytes());
        self.buf.extend_from_slice(name);
        self.buf.resize(self.buf.len() + padded - len, 0);
        false
    }

    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirents_are_padded_and_bounded() {
        let mut d = DirBuf::new(80);
        assert!(!d.add(5, 3, libc::S_IFDIR, b"a"));
        assert!(!d.add(6, 4, libc::S_IFREG, b"bcdefghij"));
        assert!(
            d.add(7, 5, libc::S_IFREG, b"x"),
            "a third does not fit in 80"
        );
        let b = d.into_bytes();
        assert_eq!(b.len(), 32 + 40);
        assert_eq!(u32::from_ne_bytes(b[20..24].try_into().unwrap()), 4);
    }

    #[test]
    fn error_headers_carry_no_body() {
        let h = header(9, &Err(libc::ENOENT));
        assert_eq!((h.len, h.error, h.unique), (16, -libc::ENOENT, 9));
        let h = header(9, &Ok(vec![0; 8]));
        assert_eq!((h.len, h.error), (24, 0));
    }
}
