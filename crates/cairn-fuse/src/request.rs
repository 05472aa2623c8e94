//! Decoding the kernel's requests, from either transport: a request is its header, the
//! fixed structure of its opcode and the rest (names, data). Read from `/dev/fuse` the
//! three follow one another in one buffer ([`Body::joined`]); from an io_uring ring entry
//! the fixed structure sits in the header buffer and the rest in the payload buffer
//! ([`Body::split`]). A request that does not decode is answered EIO, never trusted.

use zerocopy::FromBytes;

use crate::abi::{self, op, InHeader};

/// The bytes of a request after its header.
pub(crate) struct Body<'a> {
    fixed: &'a [u8],
    rest: &'a [u8],
    joined: bool,
}

impl<'a> Body<'a> {
    /// A request read from `/dev/fuse`: `bytes` follow the header.
    pub(crate) fn joined(bytes: &'a [u8]) -> Body<'a> {
        Body {
            fixed: bytes,
            rest: bytes,
            joined: true,
        }
    }

    /// A request from a ring entry: `fixed` is the entry's `op_in` area, `rest` its
    /// payload.
    pub(crate) fn split(fixed: &'a [u8], rest: &'a [u8]) -> Body<'a> {
        Body {
            fixed,
            rest,
            joined: false,
        }
    }

    /// The opcode's fixed structure.
    fn take<T: FromBytes>(&mut self) -> Result<T, i32> {
        let (t, after) = T::read_from_prefix(self.fixed).map_err(|_| libc::EIO)?;
        if self.joined {
            self.rest = after;
        }
        Ok(t)
    }

    /// The next NUL-terminated string of the rest, without its NUL.
    fn name(&mut self) -> Result<&'a [u8], i32> {
        let end = self.rest.iter().position(|&b| b == 0).ok_or(libc::EIO)?;
        let s = &self.rest[..end];
        self.rest = &self.rest[end + 1..];
        Ok(s)
    }

    /// The next `n` bytes of the rest.
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], i32> {
        if self.rest.len() < n {
            return Err(libc::EIO);
        }
        let (b, after) = self.rest.split_at(n);
        self.rest = after;
        Ok(b)
    }
}

/// A request's operation, decoded.
#[derive(Debug)]
pub(crate) enum Op<'a> {
    Init {
        major: u32,
        minor: u32,
        max_readahead: u32,
        flags: u64,
    },
    Destroy,
    Interrupt,
    Forget,
    BatchForget,
    Lookup {
        name: &'a [u8],
    },
    Getattr,
    Setattr(abi::SetattrIn),
    Readlink,
    Symlink {
        name: &'a [u8],
        target: &'a [u8],
    },
    Mknod {
        mode: u32,
        rdev: u32,
        name: &'a [u8],
    },
    Mkdir {
        mode: u32,
        name: &'a [u8],
    },
    Unlink {
        name: &'a [u8],
    },
    Rmdir {
        name: &'a [u8],
    },
    Rename {
        newdir: u64,
        flags: u32,
        name: &'a [u8],
        newname: &'a [u8],
    },
    Link {
        oldnodeid: u64,
        name: &'a [u8],
    },
    Open {
        flags: u32,
    },
    Read {
        fh: u64,
        offset: u64,
        size: u32,
    },
    Write {
        fh: u64,
        offset: u64,
        data: &'a [u8],
    },
    Statfs,
    Release {
        fh: u64,
    },
    Fsync,
    Setxattr {
        name: &'a [u8],
        value: &'a [u8],
        flags: u32,
    },
    Getxattr {
        name: &'a [u8],
        size: u32,
    },
    Listxattr {
        size: u32,
    },
    Removexattr {
        name: &'a [u8],
    },
    Flush,
    Opendir,
    Readdir {
        fh: u64,
        offset: u64,
        size: u32,
    },
    /// A listing whose entries carry their attributes (asked for only where the file
    /// system lists them: `init::DO_READDIRPLUS`).
    ReaddirPlus {
        fh: u64,
        offset: u64,
        size: u32,
    },
    Releasedir {
        fh: u64,
    },
    Fsyncdir,
    Access {
        mask: u32,
    },
    Create {
        mode: u32,
        flags: u32,
        name: &'a [u8],
    },
    Fallocate(abi::FallocateIn),
    CopyFileRange(abi::CopyFileRangeIn),
    /// An opcode cairn does not serve (answered ENOSYS).
    Other(u32),
}

/// Decodes the operation of a request with header `h`; Err(errno) when its bytes are
/// short or malformed.
pub(crate) fn decode<'a>(h: &InHeader, mut b: Body<'a>) -> Result<Op<'a>, i32> {
    Ok(match h.opcode {
        op::INIT => {
            let i: abi::InitIn = b.take()?;
            // flags2 follows the 16 bytes of the old structure (7.36 on).
            let flags2 = match u32::read_from_prefix(b.rest) {
                Ok((f, _)) if i.minor >= 36 && i.flags as u64 & abi::init::INIT_EXT != 0 => f,
                _ => 0,
            };
            Op::Init {
                major: i.major,
                minor: i.minor,
                max_readahead: i.max_readahead,
                flags: i.flags as u64 | (flags2 as u64) << 32,
            }
        }
        op::DESTROY => Op::Destroy,
        op::INTERRUPT => Op::Interrupt,
        op::FORGET => Op::Forget,
        op::BATCH_FORGET => Op::BatchForget,
        op::LOOKUP => Op::Lookup { name: b.name()? },
        op::GETATTR => Op::Getattr,
        op::SETATTR => Op::Setattr(b.take()?),
        op::READLINK => Op::Readlink,
        op::SYMLINK => {
            let name = b.name()?;
            Op::Symlink {
                name,
                target: b.name()?,
            }
        }
        op::MKNOD => {
            let m: abi::MknodIn = b.take()?;
            Op::Mknod {
                mode: m.mode,
                rdev: m.rdev,
                name: b.name()?,
            }
        }
        op::MKDIR => {
            let m: abi::MkdirIn = b.take()?;
            Op::Mkdir {
                mode: m.mode,
                name: b.name()?,
            }
        }
        op::UNLINK => Op::Unlink { name: b.name()? },
        op::RMDIR => Op::Rmdir { name: b.name()? },
        op::RENAME | op::RENAME2 => {
            let (newdir, flags) = if h.opcode == op::RENAME {
                (b.take::<abi::RenameIn>()?.newdir, 0)
            } else {
                let r: abi::Rename2In = b.take()?;
                (r.newdir, r.flags)
            };
            let name = b.name()?;
            Op::Rename {
                newdir,
                flags,
                name,
                newname: b.name()?,
            }
        }
        op::LINK => {
            let l: abi::LinkIn = b.take()?;
            Op::Link {
                oldnodeid: l.oldnodeid,
                name: b.name()?,
            }
        }
        other => decode_files(other, b)?,
    })
}

/// Decodes the operations on open files and directories, extended attributes and the
/// file system as a whole (the rest of [`decode`]).
fn decode_files(opcode: u32, mut b: Body<'_>) -> Result<Op<'_>, i32> {
    Ok(match opcode {
        op::OPEN => Op::Open {
            flags: b.take::<abi::OpenIn>()?.flags,
        },
        op::READ => {
            let r: abi::IoIn = b.take()?;
            Op::Read {
                fh: r.fh,
                offset: r.offset,
                size: r.size,
            }
        }
        op::WRITE => {
            let w: abi::IoIn = b.take()?;
            Op::Write {
                fh: w.fh,
                offset: w.offset,
                data: b.bytes(w.size as usize)?,
            }
        }
        op::STATFS => Op::Statfs,
        op::RELEASE => Op::Release {
            fh: b.take::<abi::ReleaseIn>()?.fh,
        },
        op::FSYNC => Op::Fsync,
        op::SETXATTR => {
            let s: abi::SetxattrIn = b.take()?;
            let name = b.name()?;
            Op::Setxattr {
                name,
                value: b.bytes(s.size as usize)?,
                flags: s.flags,
            }
        }
        op::GETXATTR => {
            let s: abi::SizeIn = b.take()?;
            Op::Getxattr {
                name: b.name()?,
                size: s.size,
            }
        }
        op::LISTXATTR => Op::Listxattr {
            size: b.take::<abi::SizeIn>()?.size,
        },
        op::REMOVEXATTR => Op::Removexattr { name: b.name()? },
        op::FLUSH => Op::Flush,
        op::OPENDIR => Op::Opendir,
        op::READDIR => {
            let r: abi::IoIn = b.take()?;
            Op::Readdir {
                fh: r.fh,
                offset: r.offset,
                size: r.size,
            }
        }
        op::READDIRPLUS => {
            let r: abi::IoIn = b.take()?;
            Op::ReaddirPlus {
                fh: r.fh,
                offset: r.offset,
                size: r.size,
            }
        }
        op::RELEASEDIR => Op::Releasedir {
            fh: b.take::<abi::ReleaseIn>()?.fh,
        },
        op::FSYNCDIR => Op::Fsyncdir,
        op::ACCESS => Op::Access {
            mask: b.take::<abi::SizeIn>()?.size,
        },
        op::CREATE => {
            let c: abi::CreateIn = b.take()?;
            Op::Create {
                mode: c.mode,
                flags: c.flags,
                name: b.name()?,
            }
        }
        op::FALLOCATE => Op::Fallocate(b.take()?),
        op::COPY_FILE_RANGE => Op::CopyFileRange(b.take()?),
        other => Op::Other(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::IntoBytes;

    fn header(opcode: u32) -> InHeader {
        InHeader {
            len: 0,
            opcode,
            unique: 7,
            nodeid: 1,
            uid: 0,
            gid: 0,
            pid: 1,
            total_extlen: 0,
            padding: 0,
        }
    }

    /// The same MKDIR decodes alike from one buffer and from a ring entry's two.
    #[test]
    fn joined_and_split_agree() {
        let m = abi::MkdirIn {
            mode: 0o755,
            umask: 0o22,
        };
        let mut joined = m.as_bytes().to_vec();
        joined.extend_from_slice(b"dir\0");
        let mut fixed = [0u8; abi::URING_OP_IN_SZ];
        fixed[..8].copy_from_slice(m.as_bytes());
        for b in [Body::joined(&joined), Body::split(&fixed, b"dir\0")] {
            match decode(&header(op::MKDIR), b).unwrap() {
                Op::Mkdir { mode, name } => assert_eq!((mode, name), (0o755, &b"dir"[..])),
                o => panic!("{o:?}"),
            }
        }
    }

    /// Short or unterminated requests are refused, not read past their end.
    #[test]
    fn malformed_requests_are_errors() {
        assert_eq!(
            decode(&header(op::LOOKUP), Body::joined(b"no-nul")).unwrap_err(),
            libc::EIO
        );
        assert_eq!(
            decode(&header(op::SETATTR), Body::joined(&[0; 10])).unwrap_err(),
            libc::EIO
        );
        let w = abi::IoIn {
            fh: 0,
            offset: 0,
            size: 100,
            io_flags: 0,
            lock_owner: 0,
            flags: 0,
            padding: 0,
        };
        let mut short = w.as_bytes().to_vec();
        short.extend_from_slice(&[1; 10]);
        assert_eq!(
            decode(&header(op::WRITE), Body::joined(&short)).unwrap_err(),
            libc::EIO
        );
        assert!(matches!(
            decode(&header(9999), Body::joined(&[])).unwrap(),
            Op::Other(9999)
        ));
    }
}
