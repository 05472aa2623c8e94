//! Encoding replies: what follows the reply header for each kind of answer, and the
//! packing of directory entries. The transports add the header ([`frame`]).

use std::time::Duration;

use zerocopy::IntoBytes;

use crate::abi::{self, Attr, OutHeader};

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

/// The notification that drops the kernel's cached attributes of `ino`, and with
/// `pages` its cached data too (the kernel drops the pages from offset 0 to the end; an
/// offset below 0 leaves them).
pub(crate) fn inval_inode(ino: u64, pages: bool) -> Vec<u8> {
    let body = abi::NotifyInvalInode {
        ino,
        off: if pages { 0 } else { -1 },
        len: 0,
    };
    notification(abi::NOTIFY_INVAL_INODE, &[body.as_bytes()])
}

/// The notification that drops the kernel's cached entry `name` of directory `parent`
/// (the name's inode, or its absence).
pub(crate) fn inval_entry(parent: u64, name: &[u8]) -> Vec<u8> {
    let body = abi::NotifyInvalEntry {
        parent,
        namelen: name.len() as u32,
        flags: 0,
    };
    notification(abi::NOTIFY_INVAL_ENTRY, &[body.as_bytes(), name, &[0]])
}

/// A notification of kind `code`: its header, then `parts`.
fn notification(code: i32, parts: &[&[u8]]) -> Vec<u8> {
    let len = std::mem::size_of::<OutHeader>() + parts.iter().map(|p| p.len()).sum::<usize>();
    let h = OutHeader {
        len: len as u32,
        error: code,
        unique: 0,
    };
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(h.as_bytes());
    for p in parts {
        v.extend_from_slice(p);
    }
    v
}

fn split(d: Duration) -> (u64, u32) {
    (d.as_secs(), d.subsec_nanos())
}

/// How long the kernel may keep an entry and its inode's attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EntryTtl {
    /// The name's inode.
    pub entry: Duration,
    /// The inode's attributes.
    pub attr: Duration,
}

/// An entry the kernel keeps for `t.entry` with its attributes for `t.attr`.
pub(crate) fn entry_out(attr: Attr, t: EntryTtl) -> abi::EntryOut {
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
pub(crate) fn entry(attr: Attr, t: EntryTtl) -> Vec<u8> {
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
pub(crate) fn create(attr: Attr, t: EntryTtl, fh: u64) -> Vec<u8> {
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

/// The entries of a READDIR or READDIRPLUS reply, at most the size the kernel asked
/// for.
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
        self.push(&[], ino, cookie, mode, name)
    }

    /// Adds a READDIRPLUS entry: as [`DirBuf::add`], preceded by the entry the kernel
    /// may keep (`None`: listed only, the kernel keeps nothing of it).
    pub(crate) fn add_plus(
        &mut self,
        entry: Option<abi::EntryOut>,
        (ino, cookie): (u64, u64),
        mode: u32,
        name: &[u8],
    ) -> bool {
        let e = entry.unwrap_or_default();
        self.push(e.as_bytes(), ino, cookie, mode, name)
    }

    /// Adds `head`, a dirent and `name`, padded to 8 bytes; `true` when it did not fit.
    fn push(&mut self, head: &[u8], ino: u64, cookie: u64, mode: u32, name: &[u8]) -> bool {
        let len = head.len() + std::mem::size_of::<abi::Dirent>() + name.len();
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
        self.buf.extend_from_slice(head);
        self.buf.extend_from_slice(d.as_bytes());
        self.buf.extend_from_slice(name);
        self.buf.resize(self.buf.len() + padded - len, 0);
        false
    }

    /// The bytes left for entries.
    pub(crate) fn room(&self) -> usize {
        self.max.saturating_sub(self.buf.len())
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
    fn plus_entries_carry_their_entry_before_the_dirent() {
        let mut d = DirBuf::new(400);
        let mut e = abi::EntryOut {
            nodeid: 9,
            entry_valid: 2,
            ..Default::default()
        };
        e.attr.ino = 9;
        assert!(!d.add_plus(Some(e), (9, 3), libc::S_IFREG, b"abc"));
        assert!(!d.add_plus(None, (10, 4), libc::S_IFDIR, b"."));
        assert!(
            d.add_plus(None, (11, 5), libc::S_IFREG, b"x"),
            "a third does not fit in 400"
        );
        let b = d.into_bytes();
        // 128 bytes of entry, 24 of dirent, the name, padded: 160 each.
        assert_eq!(b.len(), 2 * 160);
        assert_eq!(u64::from_ne_bytes(b[0..8].try_into().unwrap()), 9);
        assert_eq!(u64::from_ne_bytes(b[16..24].try_into().unwrap()), 2);
        assert_eq!(u64::from_ne_bytes(b[128..136].try_into().unwrap()), 9);
        assert_eq!(u64::from_ne_bytes(b[136..144].try_into().unwrap()), 3);
        assert_eq!(&b[152..155], b"abc");
        assert_eq!(u64::from_ne_bytes(b[160..168].try_into().unwrap()), 0);
        assert_eq!(u64::from_ne_bytes(b[288..296].try_into().unwrap()), 10);
    }

    #[test]
    fn error_headers_carry_no_body() {
        let h = header(9, &Err(libc::ENOENT));
        assert_eq!((h.len, h.error, h.unique), (16, -libc::ENOENT, 9));
        let h = header(9, &Ok(vec![0; 8]));
        assert_eq!((h.len, h.error), (24, 0));
    }

    #[test]
    fn notifications_are_framed_as_the_kernel_reads_them() {
        let v = inval_entry(7, b"abc");
        // Header (16), parent (8), namelen (4), flags (4), name, NUL.
        assert_eq!(v.len(), 16 + 16 + 3 + 1);
        assert_eq!(u32::from_ne_bytes(v[0..4].try_into().unwrap()), 36);
        assert_eq!(i32::from_ne_bytes(v[4..8].try_into().unwrap()), 3);
        assert_eq!(u64::from_ne_bytes(v[8..16].try_into().unwrap()), 0);
        assert_eq!(u64::from_ne_bytes(v[16..24].try_into().unwrap()), 7);
        assert_eq!(u32::from_ne_bytes(v[24..28].try_into().unwrap()), 3);
        assert_eq!(u32::from_ne_bytes(v[28..32].try_into().unwrap()), 0);
        assert_eq!(&v[32..], b"abc\0");
        let v = inval_inode(9, true);
        assert_eq!(v.len(), 16 + 24);
        assert_eq!(i32::from_ne_bytes(v[4..8].try_into().unwrap()), 2);
        assert_eq!(u64::from_ne_bytes(v[16..24].try_into().unwrap()), 9);
        assert_eq!(i64::from_ne_bytes(v[24..32].try_into().unwrap()), 0);
        let v = inval_inode(9, false);
        assert_eq!(i64::from_ne_bytes(v[24..32].try_into().unwrap()), -1);
    }
}
