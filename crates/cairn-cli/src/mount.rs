//! `cairn mount DIR MOUNTPOINT` and `cairn umount MOUNTPOINT`: the file system of
//! `cairn::fs` mounted through FUSE (the `fuser` crate, its pure-Rust mount path: mount(2)
//! directly when run as root, else `fusermount3`).
//!
//! The mount runs in the foreground until it is unmounted (`cairn umount`, `umount`,
//! `fusermount3 -u`) or the process gets SIGINT or SIGTERM, which unmount it cleanly;
//! the store is flushed and closed either way.
//!
//! Requests per operation are kept few, since each one is a round trip through the kernel
//! that costs more than the operation itself (a create of a new file is a LOOKUP, a
//! CREATE and, after the close, a RELEASE the caller doesn't wait for):
//! - the kernel may keep entries and attributes for a day ([`TTL`]): the store is locked
//!   by this process and every change goes through the kernel, which updates or drops
//!   what it cached for the inodes a change touches (the mount tells it about the one
//!   change it can't foresee: an access ACL that sets the mode);
//! - FLUSH answers ENOSYS, so the kernel stops sending it at every close: writes are
//!   stored when they are made, there is nothing to flush;
//! - permissions are checked by `cairn::fs` when only root uses the mount (a root
//!   mount without `--allow-other`: the kernel lets no one else in, and cairn::fs's
//!   rules for root are the kernel's), else by the kernel (`default_permissions`),
//!   which has to fetch a directory's attributes again (a GETATTR) before every create
//!   or unlink in it since the previous one changed them. `--kernel-permissions` forces
//!   the latter.
//!
//! With `CAIRN_FUSE_STATS=FILE` in its environment the mount counts the requests it
//! serves by kind and writes them to FILE (`KIND COUNT` lines) at SIGUSR1 and at
//! unmount; `cairn fs-bench` uses it to report requests per operation.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Args;
use fuser::{
    FileAttr, FileType, Filesystem, KernelConfig, MountOption, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow,
};

use cairn::fs::{Attr, Cred, Fs, FsResult, SetAttr, TimeSet};

/// How long the kernel may cache attributes and entries (see the module documentation).
const TTL: Duration = Duration::from_secs(24 * 3600);
/// Entries fetched from the store per readdir call.
const READDIR_BATCH: usize = 256;

/// Arguments of `mount`.
#[derive(Debug, Args)]
pub struct MountArgs {
    /// Directory of the store (created if needed)
    pub dir: PathBuf,
    /// Where to mount it (an existing directory)
    pub mountpoint: PathBuf,
    /// Let other users than the one mounting use the mount (needs root, or
    /// user_allow_other in /etc/fuse.conf)
    #[arg(long)]
    pub allow_other: bool,
    /// Let the kernel check permissions (`default_permissions`) even on a mount only
    /// root uses (by default cairn checks them there, which saves a request per create
    /// and unlink)
    #[arg(long)]
    pub kernel_permissions: bool,
}

/// Arguments of `umount`.
#[derive(Debug, Args)]
pub struct UmountArgs {
    /// The mount point
    pub mountpoint: PathBuf,
}

/// State of an open directory: the names handed out by the last two readdir replies,
/// by their offset cookies, so that the kernel can resume after any of them.
#[derive(Default)]
struct DirHandle {
    next_cookie: i64,
    recent: HashMap<i64, Vec<u8>>,
    older: HashMap<i64, Vec<u8>>,
}

struct CairnFuse {
    fs: Fs,
    /// Whether `fs` checks permissions (else the kernel does).
    fs_checks: bool,
    /// Set once the session exists: invalidates the kernel's cached attributes when a
    /// change the kernel can't foresee (an access ACL setting the mode) happened.
    notifier: std::sync::Arc<std::sync::Mutex<Option<fuser::Notifier>>>,
    dirs: HashMap<u64, DirHandle>,
    next_fh: u64,
}

/// Kinds of requests, counted for `CAIRN_FUSE_STATS`.
#[derive(Clone, Copy)]
enum Op {
    Lookup,
    Forget,
    BatchForget,
    Getattr,
    Setattr,
    Readlink,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Symlink,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Flush,
    Release,
    Fsync,
    Opendir,
    Readdir,
    Releasedir,
    Fsyncdir,
    Statfs,
    Setxattr,
    Getxattr,
    Listxattr,
    Removexattr,
    Access,
    Create,
}

/// Names of the [`Op`]s, in order (the kernel's, without `FUSE_`).
const OP_NAMES: [&str; 30] = [
    "LOOKUP",
    "FORGET",
    "BATCH_FORGET",
    "GETATTR",
    "SETATTR",
    "READLINK",
    "MKNOD",
    "MKDIR",
    "UNLINK",
    "RMDIR",
    "SYMLINK",
    "RENAME",
    "LINK",
    "OPEN",
    "READ",
    "WRITE",
    "FLUSH",
    "RELEASE",
    "FSYNC",
    "OPENDIR",
    "READDIR",
    "RELEASEDIR",
    "FSYNCDIR",
    "STATFS",
    "SETXATTR",
    "GETXATTR",
    "LISTXATTR",
    "REMOVEXATTR",
    "ACCESS",
    "CREATE",
];

/// Requests served, by [`Op`].
static COUNTS: [AtomicU64; OP_NAMES.len()] = [const { AtomicU64::new(0) }; OP_NAMES.len()];

fn count(op: Op) {
    COUNTS[op as usize].fetch_add(1, Ordering::Relaxed);
}

/// Writes the request counts to `path` (through a temporary file and a rename, so a
/// reader never sees half of them).
fn write_counts(path: &Path) -> std::io::Result<()> {
    let mut text = String::new();
    for (name, c) in OP_NAMES.iter().zip(&COUNTS) {
        text.push_str(&format!("{name} {}\n", c.load(Ordering::Relaxed)));
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Set by SIGUSR1.
static DUMP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigusr1(_: libc::c_int) {
    DUMP.store(true, Ordering::Relaxed);
}

/// With `CAIRN_FUSE_STATS=FILE`: writes the request counts to FILE whenever the process
/// gets SIGUSR1 (a thread checks every 5 ms); returns FILE, to be written at the end too.
fn start_stats() -> Result<Option<PathBuf>> {
    let Some(path) = std::env::var_os("CAIRN_FUSE_STATS").map(PathBuf::from) else {
        return Ok(None);
    };
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    let old = unsafe { libc::signal(libc::SIGUSR1, on_sigusr1 as *const () as libc::sighandler_t) };
    if old == libc::SIG_ERR {
        bail!(
            "installing the SIGUSR1 handler: {}",
            std::io::Error::last_os_error()
        );
    }
    let p = path.clone();
    std::thread::Builder::new()
        .name("cairn-fuse-stats".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(5));
            if DUMP.swap(false, Ordering::Relaxed) {
                if let Err(e) = write_counts(&p) {
                    eprintln!("cairn: writing {}: {e}", p.display());
                }
            }
        })
        .context("starting the stats thread")?;
    Ok(Some(path))
}

/// The caller of a request. FUSE requests carry no supplementary groups, so when
/// cairn::fs checks permissions (`groups`) they are read from `/proc/<pid>/status` for
/// a non-root caller (root passes the checks that groups could matter for); when the
/// kernel checks them, cairn::fs needs only the ids, for the owner of new files.
fn cred(req: &Request<'_>, groups: bool) -> Cred {
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

fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn ns(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i64,
        Err(e) => -(e.duration().as_nanos() as i64),
    }
}

fn kind(mode: u32) -> FileType {
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

fn fattr(a: &Attr) -> FileAttr {
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
fn may_access(c: &Cred, a: &Attr, mask: u32) -> bool {
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

fn timeset(t: Option<TimeOrNow>) -> Option<TimeSet> {
    t.map(|t| match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(t) => TimeSet::At(ns(t)),
    })
}

macro_rules! reply_entry {
    ($reply:expr, $r:expr) => {
        match $r {
            Ok(a) => $reply.entry(&TTL, &fattr(&a), 0),
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
            reply,
            self.fs.lookup(&self.cred(req), parent, name.as_bytes())
        )
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        count(Op::Getattr);
        match self.fs.getattr(ino) {
            Ok(a) => reply.attr(&TTL, &fattr(&a)),
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
            Ok(a) => reply.attr(&TTL, &fattr(&a)),
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
            if let Some(n) = self.notifier.lock().unwrap().as_ref() {
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
            Ok(a) => reply.created(&TTL, &fattr(&a), 0, 0, 0),
            Err(e) => reply.error(e.0),
        }
    }
}

/// Mount options of every mount; `kernel_checks`: `default_permissions`.
fn options(allow_other: bool, kernel_checks: bool) -> Vec<MountOption> {
    let mut o = vec![
        MountOption::FSName("cairn".into()),
        MountOption::Subtype("cairn".into()),
        MountOption::RW,
        MountOption::Dev,
        MountOption::Suid,
        MountOption::Exec,
    ];
    if kernel_checks {
        o.push(MountOption::DefaultPermissions);
    }
    if allow_other {
        o.push(MountOption::AllowOther);
    }
    o
}

/// `cairn mount`: runs until unmounted or signalled.
pub fn mount(args: &MountArgs) -> Result<ExitCode> {
    let fs = Fs::open(&args.dir)
        .map_err(std::io::Error::from)
        .with_context(|| format!("opening {}", args.dir.display()))?;
    // Without allow_other the kernel lets only processes of the mounting user in (real,
    // effective and saved ids all equal): for root, cairn::fs's checks are the
    // kernel's, and they cost no GETATTR of the directory before each create.
    // SAFETY: geteuid has no preconditions.
    let fs_checks =
        !args.allow_other && !args.kernel_permissions && unsafe { libc::geteuid() } == 0;
    fs.set_permission_checks(fs_checks);
    let stats = start_stats()?;
    let notifier = std::sync::Arc::new(std::sync::Mutex::new(None));
    let fuse = CairnFuse {
        fs,
        fs_checks,
        notifier: notifier.clone(),
        dirs: HashMap::new(),
        next_fh: 0,
    };
    let mut session = fuser::Session::new(
        fuse,
        &args.mountpoint,
        &options(args.allow_other, !fs_checks),
    )
    .with_context(|| format!("mounting on {}", args.mountpoint.display()))?;
    *notifier.lock().unwrap() = Some(session.notifier());
    let mut unmounter = session.unmount_callable();
    let mountpoint = args.mountpoint.clone();
    ctrlc::set_handler(move || {
        if let Err(e) = unmounter.unmount() {
            eprintln!("cairn: unmounting {}: {e}", mountpoint.display());
            // Lazy unmount as a last resort, so the session ends.
            let _ = umount_path(&mountpoint, true);
        }
    })
    .context("installing the SIGINT/SIGTERM handler")?;
    eprintln!(
        "cairn: {} mounted on {} (Ctrl-C or `cairn umount {}` to unmount)",
        args.dir.display(),
        args.mountpoint.display(),
        args.mountpoint.display()
    );
    session.run().context("serving the mount")?;
    if !is_mountpoint(&args.mountpoint) {
        // Unmounted from outside (the kernel sent DESTROY first, so the store is
        // flushed): fuser's own unmount at drop would only report EINVAL.
        log::set_max_level(log::LevelFilter::Off);
    }
    drop(session); // unmounts if still mounted, drops the file system: the store closes
    if let Some(p) = stats {
        write_counts(&p).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether `p` is the root of a mount (its device differs from its parent's).
fn is_mountpoint(p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let parent = p.join("..");
    match (std::fs::metadata(p), std::fs::metadata(parent)) {
        (Ok(a), Ok(b)) => a.dev() != b.dev() || a.ino() == b.ino(),
        _ => false,
    }
}

fn umount_path(mp: &Path, lazy: bool) -> Result<()> {
    let c = std::ffi::CString::new(mp.as_os_str().as_bytes())?;
    // SAFETY: umount2 with a NUL-terminated path that outlives the call.
    let rc = unsafe { libc::umount2(c.as_ptr(), if lazy { libc::MNT_DETACH } else { 0 }) };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    for tool in ["fusermount3", "fusermount"] {
        let mut cmd = std::process::Command::new(tool);
        cmd.arg("-u");
        if lazy {
            cmd.arg("-z");
        }
        if let Ok(st) = cmd.arg(mp).status() {
            if st.success() {
                return Ok(());
            }
        }
    }
    bail!("unmounting {}: {err}", mp.display())
}

/// `cairn umount`: unmounts a mount of `cairn mount` (whose process then exits).
pub fn umount(args: &UmountArgs) -> Result<ExitCode> {
    umount_path(&args.mountpoint, false)?;
    Ok(ExitCode::SUCCESS)
}
