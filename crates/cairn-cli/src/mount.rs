//! `cairn mount DIR MOUNTPOINT` and `cairn umount MOUNTPOINT`: the file system of
//! `cairn::fs` mounted through FUSE (the `fuser` crate, its pure-Rust mount path: mount(2)
//! directly when run as root, else `fusermount3`).
//!
//! The mount runs in the foreground until it is unmounted (`cairn umount`, `umount`,
//! `fusermount3 -u`) or the process gets SIGINT or SIGTERM, which unmount it cleanly;
//! the store is flushed and closed either way. Permission checks are the kernel's
//! (`default_permissions`).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Args;
use fuser::{
    FileAttr, FileType, Filesystem, KernelConfig, MountOption, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow,
};

use cairn::fs::{Attr, Cred, Fs, FsResult, SetAttr, TimeSet};

/// How long the kernel may cache attributes and entries.
const TTL: Duration = Duration::from_secs(1);
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
    /// Set once the session exists: invalidates the kernel's cached attributes when a
    /// change the kernel can't foresee (an access ACL setting the mode) happened.
    notifier: std::sync::Arc<std::sync::Mutex<Option<fuser::Notifier>>>,
    dirs: HashMap<u64, DirHandle>,
    next_fh: u64,
}

fn cred(req: &Request<'_>) -> Cred {
    Cred {
        uid: req.uid(),
        gid: req.gid(),
    }
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

impl Filesystem for CairnFuse {
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
        reply_entry!(reply, self.fs.lookup(&cred(req), parent, name.as_bytes()))
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
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
        let s = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: timeset(atime),
            mtime: timeset(mtime),
        };
        match self.fs.setattr(&cred(req), ino, &s) {
            Ok(a) => reply.attr(&TTL, &fattr(&a)),
            Err(e) => reply.error(e.0),
        }
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
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
        reply_entry!(
            reply,
            self.fs
                .mknod(&cred(req), parent, name.as_bytes(), mode, rdev)
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
        reply_entry!(
            reply,
            self.fs.mkdir(&cred(req), parent, name.as_bytes(), mode)
        )
    }

    fn unlink(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.fs.unlink(&cred(req), parent, name.as_bytes()))
    }

    fn rmdir(&mut self, req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.fs.rmdir(&cred(req), parent, name.as_bytes()))
    }

    fn symlink(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        reply_entry!(
            reply,
            self.fs.symlink(
                &cred(req),
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
        reply_empty(
            reply,
            self.fs.rename(
                &cred(req),
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
        reply_entry!(
            reply,
            self.fs.link(&cred(req), ino, newparent, newname.as_bytes())
        )
    }

    fn open(&mut self, req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        match self.fs.open_file(&cred(req), ino, flags) {
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
        match self.fs.write(ino, offset.max(0) as u64, data) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e.0),
        }
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lo: u64, reply: ReplyEmpty) {
        reply.ok();
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
        reply_empty(reply, self.fs.release(ino))
    }

    fn fsync(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _ds: bool, reply: ReplyEmpty) {
        reply_empty(reply, self.fs.fsync(ino))
    }

    fn opendir(&mut self, req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        if let Err(e) = self.fs.opendir(&cred(req), ino) {
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
        self.dirs.remove(&fh);
        reply.ok();
    }

    fn fsyncdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _ds: bool, reply: ReplyEmpty) {
        reply_empty(reply, self.fs.fsync(ino))
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
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
        let r = self
            .fs
            .setxattr(&cred(req), ino, name.as_bytes(), value, flags as u32);
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
        reply_xattr(reply, size, self.fs.getxattr(ino, name.as_bytes()))
    }

    fn listxattr(&mut self, _req: &Request<'_>, ino: u64, size: u32, reply: ReplyXattr) {
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
        reply_empty(reply, self.fs.removexattr(&cred(req), ino, name.as_bytes()))
    }

    fn access(&mut self, _req: &Request<'_>, _ino: u64, _mask: i32, reply: ReplyEmpty) {
        reply.ok();
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
        let c = cred(req);
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

/// Mount options of every mount.
fn options(allow_other: bool) -> Vec<MountOption> {
    let mut o = vec![
        MountOption::FSName("cairn".into()),
        MountOption::Subtype("cairn".into()),
        MountOption::DefaultPermissions,
        MountOption::RW,
        MountOption::Dev,
        MountOption::Suid,
        MountOption::Exec,
    ];
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
    fs.set_permission_checks(false);
    let notifier = std::sync::Arc::new(std::sync::Mutex::new(None));
    let fuse = CairnFuse {
        fs,
        notifier: notifier.clone(),
        dirs: HashMap::new(),
        next_fh: 0,
    };
    let mut session = fuser::Session::new(fuse, &args.mountpoint, &options(args.allow_other))
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
