//! The null FUSE server of `cairn fs-bench --targets null`: cairn's own FUSE layer
//! (`cairn_fuse::mount_fs`, the same transports, decoding and replies as `cairn mount`)
//! serving a file system that does no work — every request answered at once with the
//! smallest valid answer, nothing stored. It is the floor no FUSE file system can beat
//! on this kernel: what a create, stat or unlink costs in round trips alone.
//!
//! What it answers: a lookup finds nothing (the kernel remembers that, as on a local
//! store's mount); a create, mkdir, mknod or symlink succeeds with a new inode number;
//! getattr answers a directory or a symbolic link for one made so (its number says
//! it), a regular file for anything else;
//! unlink, rmdir, rename, opens, releases and fsync succeed; reads return no bytes,
//! writes take every byte; listings are empty (so the benchmark's list phase does not
//! apply to it). The kernel keeps entries and attributes as long as on a local store's
//! mount ([`cairn_fuse::LOCAL_TTL`]), so stats of created files are its cache's.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Result;

use cairn_fs::{Attr, Cred, DirEntry, Errno, FileSystem, FsResult, SetAttr, StatFs, ROOT};

/// The hidden subcommand that serves the null file system on a mount point, in the
/// foreground until unmounted or SIGTERM (`cairn __null-mount MOUNTPOINT`).
pub const NULL_COMMAND: &str = "__null-mount";

/// Mounts the null file system on `mountpoint` and serves it until it is unmounted or
/// the process gets SIGINT or SIGTERM. With [`cairn_fuse::STATS_ENV`] set, it counts
/// requests as `cairn mount` does.
pub fn serve_null(mountpoint: &Path, transport: cairn_fuse::Transport) -> Result<()> {
    let opts = cairn_fuse::MountOptions {
        entry_timeout: Some(cairn_fuse::LOCAL_TTL),
        attr_timeout: Some(cairn_fuse::LOCAL_TTL),
        negative_timeout: Some(cairn_fuse::LOCAL_TTL),
        transport,
        ..Default::default()
    };
    let fs = NullFs {
        next_ino: AtomicU64::new(ROOT + 1),
    };
    cairn_fuse::mount_fs(Box::new(fs), mountpoint, &opts)?.run()
}

/// A file system that does no work (see the module documentation).
struct NullFs {
    next_ino: AtomicU64,
}

/// Inode numbers carry their file's type, so that getattr answers the type the kernel
/// was told at creation without anything being stored (the kernel fails an inode
/// whose type changes): bit 62 marks a directory, bit 61 a symbolic link.
const DIR_BIT: u64 = 1 << 62;
const LINK_BIT: u64 = 1 << 61;

impl NullFs {
    /// Attributes of a new inode of type and mode `mode`.
    fn new_inode(&self, mode: u32) -> Attr {
        let n = self.next_ino.fetch_add(1, Ordering::Relaxed);
        let ino = match mode & libc::S_IFMT {
            libc::S_IFDIR => n | DIR_BIT,
            libc::S_IFLNK => n | LINK_BIT,
            _ => n,
        };
        attr(ino, mode)
    }
}

/// Attributes of inode `ino` with type and mode `mode`, owned by root.
fn attr(ino: u64, mode: u32) -> Attr {
    let dir = mode & libc::S_IFMT == libc::S_IFDIR;
    Attr {
        ino,
        mode,
        uid: 0,
        gid: 0,
        size: 0,
        nlink: if dir { 2 } else { 1 },
        rdev: 0,
        atime: 0,
        mtime: 0,
        ctime: 0,
    }
}

/// The attributes getattr answers for `ino` (its type from its number).
fn any(ino: u64) -> Attr {
    if ino == ROOT || ino & DIR_BIT != 0 {
        attr(ino, libc::S_IFDIR | 0o755)
    } else if ino & LINK_BIT != 0 {
        attr(ino, libc::S_IFLNK | 0o777)
    } else {
        attr(ino, libc::S_IFREG | 0o644)
    }
}

impl FileSystem for NullFs {
    fn lookup(&self, _: &Cred, _: u64, _: &[u8]) -> FsResult<Attr> {
        Err(Errno(libc::ENOENT))
    }
    fn getattr(&self, ino: u64) -> FsResult<Attr> {
        Ok(any(ino))
    }
    fn setattr(&self, _: &Cred, ino: u64, _: &SetAttr) -> FsResult<Attr> {
        Ok(any(ino))
    }
    fn create(&self, _: &Cred, _: u64, _: &[u8], mode: u32) -> FsResult<Attr> {
        Ok(self.new_inode(libc::S_IFREG | (mode & 0o7777)))
    }
    fn mknod(&self, _: &Cred, _: u64, _: &[u8], mode: u32, _: u32) -> FsResult<Attr> {
        Ok(self.new_inode(mode))
    }
    fn mkdir(&self, _: &Cred, _: u64, _: &[u8], mode: u32) -> FsResult<Attr> {
        Ok(self.new_inode(libc::S_IFDIR | (mode & 0o7777)))
    }
    fn symlink(&self, _: &Cred, _: u64, _: &[u8], _: &[u8]) -> FsResult<Attr> {
        Ok(self.new_inode(libc::S_IFLNK | 0o777))
    }
    fn readlink(&self, _: &Cred, _: u64) -> FsResult<Vec<u8>> {
        Ok(b"x".to_vec())
    }
    fn link(&self, _: &Cred, ino: u64, _: u64, _: &[u8]) -> FsResult<Attr> {
        Ok(any(ino))
    }
    fn unlink(&self, _: &Cred, _: u64, _: &[u8]) -> FsResult<()> {
        Ok(())
    }
    fn rmdir(&self, _: &Cred, _: u64, _: &[u8]) -> FsResult<()> {
        Ok(())
    }
    fn rename(&self, _: &Cred, _: u64, _: &[u8], _: u64, _: &[u8], _: u32) -> FsResult<()> {
        Ok(())
    }
    fn opendir(&self, _: &Cred, _: u64) -> FsResult<()> {
        Ok(())
    }
    fn readdir(&self, _: &Cred, _: u64, _: Option<&[u8]>, _: usize) -> FsResult<Vec<DirEntry>> {
        Ok(Vec::new())
    }
    fn parent_of(&self, _: u64) -> FsResult<u64> {
        Ok(ROOT)
    }
    fn open_file(&self, _: &Cred, ino: u64, _: i32) -> FsResult<Attr> {
        Ok(any(ino))
    }
    fn open_created(&self, _: &Cred, ino: u64, _: i32) -> FsResult<Attr> {
        Ok(any(ino))
    }
    fn release(&self, _: &Cred, _: u64) -> FsResult<()> {
        Ok(())
    }
    fn read(&self, _: &Cred, _: u64, _: u64, _: usize) -> FsResult<Vec<u8>> {
        Ok(Vec::new())
    }
    fn write(&self, _: &Cred, _: u64, _: u64, data: &[u8]) -> FsResult<usize> {
        Ok(data.len())
    }
    fn fsync(&self, _: u64) -> FsResult<()> {
        Ok(())
    }
    fn getxattr(&self, _: &Cred, _: u64, _: &[u8]) -> FsResult<Vec<u8>> {
        Err(Errno(libc::ENODATA))
    }
    fn setxattr(&self, _: &Cred, _: u64, _: &[u8], _: &[u8], _: u32) -> FsResult<()> {
        Ok(())
    }
    fn listxattr(&self, _: &Cred, _: u64) -> FsResult<Vec<Vec<u8>>> {
        Ok(Vec::new())
    }
    fn removexattr(&self, _: &Cred, _: u64, _: &[u8]) -> FsResult<()> {
        Err(Errno(libc::ENODATA))
    }
    fn statfs(&self) -> FsResult<StatFs> {
        Ok(StatFs {
            bsize: 4096,
            blocks: 1 << 20,
            bfree: 1 << 20,
            bavail: 1 << 20,
            files: 1 << 30,
            ffree: 1 << 30,
            namelen: 255,
        })
    }
    fn set_permission_checks(&self, _: bool) {}
    fn close(self: Box<Self>) -> FsResult<()> {
        Ok(())
    }
}
