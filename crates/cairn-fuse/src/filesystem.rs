//! The FUSE adapter: [`CairnFuse`] answers the kernel's requests with any
//! [`FileSystem`] (a local `cairn_fs::Fs`, or a cluster's client).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use fuser::{
    FileType, Filesystem, KernelConfig, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
};

use cairn_fs::{Cred, FileSystem, FsResult, SetAttr};

use crate::attr::{cred, fattr, kind, may_access, timeset};
use crate::stats::{count, Op};

/// Entries fetched from the store per readdir call.
const READDIR_BATCH: usize = 256;

/// State of an open directory: the names handed out by the last two readdir replies,
/// by their offset cookies, so that the kernel can resume after any of them.
#[derive(Default)]
struct DirHandle {
    next_cookie: i64,
    recent: HashMap<i64, Vec<u8>>,
    older: HashMap<i64, Vec<u8>>,
}

/// The file system served to the kernel through FUSE.
pub(crate) struct CairnFuse {
    /// Shared with [`crate::Mount`], which closes it once the session is gone.
    fs: SharedFs,
    /// How long the kernel may cache attributes and entries (see the crate documentation).
    ttl: Duration,
    /// Whether `fs` checks permissions (else the kernel does).
    fs_checks: bool,
    /// Set once the session exists: invalidates the kernel's cached attributes when a
    /// change the kernel can't foresee (an access ACL setting the mode) happened.
    notifier: std::sync::Arc<std::sync::Mutex<Option<fuser::Notifier>>>,
    dirs: HashMap<u64, DirHandle>,
    next_fh: u64,
    /// Where the mount is, for raising its read-ahead after INIT.
    mountpoint: std::path::PathBuf,
}

/// The file system a mount serves, shared by the session and the [`crate::Mount`] that
/// closes it (a `Box` inside, since [`FileSystem::close`] takes one).
pub(crate) type SharedFs = std::sync::Arc<Box<dyn FileSystem>>;

macro_rules! reply_entry {
    ($self:expr, $reply:expr, $r:expr) => {
        match $r {
            Ok(a) => $reply.entry(&$self.ttl, &fattr(&a), 0),
            Err(e) => $reply.error(e.0),
        }
    };
}

fn reply_empty(reply: ReplyEmpty, r: FsResult<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e.0),
    }
}

fn reply_xattr(reply: ReplyXattr, size: u32, r: FsResult<Vec<u8>>) {
    match r {
        Err(e) => reply.error(e.0),
        Ok(v) if size == 0 => reply.size(v.len() as u32),
        Ok(v) if v.len() > size as usize => reply.error(libc::ERANGE),
        Ok(v) => reply.data(&v),
    }
}

impl CairnFuse {
    /// Serves `fs`; `ttl`: how long the kernel may cache entries and attributes;
    /// `fs_checks`: whether `fs` checks permissions (else the kernel does); `notifier` is
    /// filled in once the session exists.
    pub(crate) fn new(
        fs: SharedFs,
        ttl: Duration,
        fs_checks: bool,
        notifier: std::sync::Arc<std::sync::Mutex<Option<fuser::Notifier>>>,
        mountpoint: std::path::PathBuf,
    ) -> CairnFuse {
        CairnFuse {
            fs,
            ttl,
            fs_checks,
            notifier,
            dirs: HashMap::new(),
            next_fh: 0,
            mountpoint,
        }
    }

    fn cred(&self, req: &Request<'_>) -> Cred {
        cred(req, self.fs_checks)
    }
}

impl Filesystem for CairnFuse {
    fn forget(&mut self, _req: &Request<'_>, _ino: u64, _nlookup: u64) {
        count(Op::Forget);
    }

    fn batch_forget(&mut self, _req: &Request<'_>, _nodes: &[fuser::fuse_forget_one]) {
        count(Op::BatchForget);
    }

    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        let _ = config.set_max_write(1 << 20);
        crate::bdi::raise_read_ahead_soon(self.mountpoint.clone());
        Ok(())
    }

    fn destroy(&mut self) {
        if let Err(e) = self.fs.fsync(fuser::FUSE_ROOT_ID) {
            log::error!("flush at unmount: {e}");
        }
    }

    fn lookup(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        count(Op::Lookup);
        reply_entry!(
            self,
            reply,
            self.fs.lookup(&self.cred(req), parent, name.as_bytes())
        )
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        count(Op::Getattr);
        match self.fs.getattr(ino) {
            Ok(a) => reply.attr(&self.ttl, &fattr(&a)),
            Err(e) => reply.error(e.0),
        }
    }

    fn setattr(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        count(Op::Setattr);
        let s = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: timeset(atime),
            mtime: timeset(mtime),
        };
        match self.fs.setattr(&self.cred(req), ino, &s) {
            Ok(a) => reply.attr(&self.ttl, &fattr(&a)),
            Err(e) => reply.error(e.0),
        }
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        count(Op::Readlink);
        match self.fs.readlink(ino) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e.0),
        }
    }

    fn mknod(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        count(Op::Mknod);
        reply_entry!(
            self,
            reply,
            self.fs
                .mknod(&self.cred(req), parent, name.as_bytes(), mode, rdev)
        )
    }

    fn mkdir(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        count(Op::Mkdir);
        reply_entry!(
            self,
            reply,
            self.fs
                .mkdir(&self.cred(req), parent, name.as_bytes(), mode)
        )
    }

    fn unlink(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        count(Op::Unlink);
        reply_empty(
            reply,
            self.fs.unlink(&self.cred(req), parent, name.as_bytes()),
        )
    }

    fn rmdir(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        count(Op::Rmdir);
        reply_empty(
            reply,
            self.fs.rmdir(&self.cred(req), parent, name.as_bytes()),
        )
    }

    fn symlink(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        count(Op::Symlink);
        reply_entry!(
            self,
            reply,
            self.fs.symlink(
                &self.cred(req),
                parent,
                link_name.as_bytes(),
                target.as_os_str().as_bytes()
            )
        )
    }

    fn rename(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        count(Op::Rename);
        reply_empty(
            reply,
            self.fs.rename(
                &self.cred(req),
                parent,
                name.as_bytes(),
                newparent,
                newname.as_bytes(),
                flags,
            ),
        )
    }

    fn link(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        count(Op::Link);
        reply_entry!(
            self,
            reply,
            self.fs
                .link(&self.cred(req), ino, newparent, newname.as_bytes())
        )
    }

    fn open(&mut self, req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        count(Op::Open);
        match self.fs.open_file(&self.cred(req), ino, flags) {
            Ok(_) => reply.opened(0, 0),
            Err(e) => reply.error(e.0),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        count(Op::Read);
        match self.fs.read(ino, offset.max(0) as u64, size as usize) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(e.0),
        }
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        count(Op::Write);
        match self.fs.write(ino, offset.max(0) as u64, data) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e.0),
        }
    }

    fn fallocate(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        count(Op::Fallocate);
        reply_empty(
            reply,
            self.fs
                .fallocate(&self.cred(req), ino, offset, length, mode),
        )
    }

    fn copy_file_range(
        &mut self,
        _req: &Request<'_>,
        ino_in: u64,
        _fh_in: u64,
        offset_in: i64,
        ino_out: u64,
        _fh_out: u64,
        offset_out: i64,
        len: u64,
        flags: u32,
        reply: ReplyWrite,
    ) {
        count(Op::CopyFileRange);
        if flags != 0 || offset_in < 0 || offset_out < 0 {
            return reply.error(libc::EINVAL);
        }
        // A reply carries a 32-bit count: copy at most 1 GiB per request (the caller's
        // copy_file_range loop, or the kernel's, asks again for the rest).
        let len = len.min(1 << 30);
        match self
            .fs
            .copy_range(ino_in, offset_in as u64, ino_out, offset_out as u64, len)
        {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e.0),
        }
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lo: u64, reply: ReplyEmpty) {
        // Writes are stored when they are made: nothing to flush. ENOSYS makes the
        // kernel stop sending FLUSH at every close (close still succeeds).
        count(Op::Flush);
        reply.error(libc::ENOSYS);
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        count(Op::Release);
        reply_empty(reply, self.fs.release(ino))
    }

    fn fsync(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _ds: bool, reply: ReplyEmpty) {
        count(Op::Fsync);
        reply_empty(reply, self.fs.fsync(ino))
    }

    fn opendir(&mut self, req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        count(Op::Opendir);
        if let Err(e) = self.fs.opendir(&self.cred(req), ino) {
            return reply.error(e.0);
        }
        self.next_fh += 1;
        let fh = self.next_fh;
        self.dirs.insert(
            fh,
            DirHandle {
                next_cookie: 3,
                ..Default::default()
            },
        );
        reply.opened(fh, 0);
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        count(Op::Readdir);
        let Some(h) = self.dirs.get_mut(&fh) else {
            return reply.error(libc::EBADF);
        };
        // Cookies 1 and 2 are "." and ".."; names get cookies from 3 on.
        if offset < 1 && reply.add(ino, 1, FileType::Directory, ".") {
            return reply.ok();
        }
        if offset < 2 {
            let parent = self.fs.parent_of(ino).unwrap_or(ino);
            if reply.add(parent, 2, FileType::Directory, "..") {
                return reply.ok();
            }
        }
        let mut cursor: Option<Vec<u8>> = if offset <= 2 {
            None
        } else {
            match h.recent.get(&offset).or_else(|| h.older.get(&offset)) {
                Some(n) => Some(n.clone()),
                None => return reply.error(libc::EINVAL),
            }
        };
        let mut batch = HashMap::new();
        'outer: loop {
            let entries = match self.fs.readdir(ino, cursor.as_deref(), READDIR_BATCH) {
                Ok(e) => e,
                Err(e) => return reply.error(e.0),
            };
            if entries.is_empty() {
                break;
            }
            for e in entries {
                let cookie = h.next_cookie;
                if reply.add(e.ino, cookie, kind(e.kind), OsStr::from_bytes(&e.name)) {
                    break 'outer;
                }
                h.next_cookie += 1;
                cursor = Some(e.name.clone());
                batch.insert(cookie, e.name);
            }
        }
        if !batch.is_empty() {
            h.older = std::mem::replace(&mut h.recent, batch);
        }
        reply.ok();
    }

    fn releasedir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        reply: ReplyEmpty,
    ) {
        count(Op::Releasedir);
        self.dirs.remove(&fh);
        reply.ok();
    }

    fn fsyncdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _ds: bool, reply: ReplyEmpty) {
        count(Op::Fsyncdir);
        reply_empty(reply, self.fs.fsync(ino))
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        count(Op::Statfs);
        match self.fs.statfs() {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize,
            ),
            Err(e) => reply.error(e.0),
        }
    }

    fn setxattr(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        count(Op::Setxattr);
        let r = self
            .fs
            .setxattr(&self.cred(req), ino, name.as_bytes(), value, flags as u32);
        let ok = r.is_ok();
        reply_empty(reply, r);
        if ok && name.as_bytes() == b"system.posix_acl_access" {
            if let Some(n) = self
                .notifier
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
            {
                let _ = n.inval_inode(ino, -1, 0);
            }
        }
    }

    fn getxattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        count(Op::Getxattr);
        reply_xattr(reply, size, self.fs.getxattr(ino, name.as_bytes()))
    }

    fn listxattr(&mut self, _req: &Request<'_>, ino: u64, size: u32, reply: ReplyXattr) {
        count(Op::Listxattr);
        let r = self.fs.listxattr(ino).map(|names| {
            let mut v = Vec::new();
            for n in names {
                v.extend_from_slice(&n);
                v.push(0);
            }
            v
        });
        reply_xattr(reply, size, r)
    }

    fn removexattr(&mut self, req: &Request<'_>, ino: u64, name: &OsStr, reply: ReplyEmpty) {
        count(Op::Removexattr);
        reply_empty(
            reply,
            self.fs.removexattr(&self.cred(req), ino, name.as_bytes()),
        )
    }

    fn access(&mut self, req: &Request<'_>, ino: u64, mask: i32, reply: ReplyEmpty) {
        count(Op::Access);
        // With default_permissions the kernel answers access(2) itself.
        if !self.fs_checks {
            return reply.ok();
        }
        match self.fs.getattr(ino) {
            Ok(a) if may_access(&self.cred(req), &a, mask as u32) => reply.ok(),
            Ok(_) => reply.error(libc::EACCES),
            Err(e) => reply.error(e.0),
        }
    }

    fn create(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        count(Op::Create);
        let c = self.cred(req);
        let r = self
            .fs
            .create(&c, parent, name.as_bytes(), mode)
            .and_then(|a| self.fs.open_file(&c, a.ino, flags & !libc::O_TRUNC));
        match r {
            Ok(a) => reply.created(&self.ttl, &fattr(&a), 0, 0, 0),
            Err(e) => reply.error(e.0),
        }
    }
}
