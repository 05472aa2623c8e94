//! The FUSE adapter: [`CairnFuse`] answers the kernel's requests, decoded by
//! `request`, with any [`FileSystem`] (a local `cairn_fs::Fs`, or a cluster's client).
//! It is shared by every thread of either transport (`devfuse`, `uring`), so it takes
//! `&self`; its only state is the open files and directories: who opened each, whose
//! credential the reads, writes, listings and release of that open carry (the kernel
//! sends a release as root, and a read or write as whichever process does it).
//!
//! Every reply that carries an entry or attributes says how long the kernel may keep
//! them as the file system says right after answering ([`FileSystem::entry_validity`],
//! [`FileSystem::attr_validity`]: what is left of its leases), else as the mount's
//! [`Timeouts`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_fs::{Cred, DirEntry, DirEntryPlus, FileSystem, FsResult, SetAttr, Validity};

use crate::abi::{self, fattr as fa, InHeader};
use crate::attr::{cred, fattr, kind, may_access, timeset};
use crate::reply::{self, Answer, DirBuf, EntryTtl, Reply};
use crate::request::Op;
use crate::stats::{count, Op as Count};
use crate::Timeouts;

/// Entries fetched from the store per readdir call, at most.
const READDIR_BATCH: usize = 256;
/// The smallest READDIR entry: a dirent and a one-byte name, padded.
const ENTRY_MIN: usize = 32;
/// The smallest READDIRPLUS entry: an entry, a dirent and a one-byte name, padded.
const PLUS_ENTRY_MIN: usize = 160;

/// State of an open directory: the names handed out by the last two readdir replies,
/// by their offset cookies, so that the kernel can resume after any of them.
struct DirHandle {
    /// Who opened the directory: its listings are made as this caller.
    cred: Cred,
    next_cookie: u64,
    recent: HashMap<u64, Vec<u8>>,
    older: HashMap<u64, Vec<u8>>,
    /// The cookie after which the last listing ended: the kernel's next call, from
    /// there, is answered empty without asking the file system.
    end: Option<u64>,
}

/// The file system served to the kernel through FUSE.
pub(crate) struct CairnFuse {
    /// Shared with [`crate::Mount`], which closes it once the session is gone.
    fs: SharedFs,
    /// How long the kernel may cache entries, attributes and absent names (see the
    /// crate documentation).
    times: Timeouts,
    /// Whether the kernel caches writes (`writeback_cache`): it then reads pages of
    /// files opened write-only and applies `O_APPEND` itself.
    writeback: bool,
    /// Whether `fs` checks permissions (else the kernel does).
    fs_checks: bool,
    /// Whether a caller's supplementary groups are read and sent: where `fs` checks
    /// permissions, or may check them whatever the kernel does (a cluster's servers
    /// check every request of a client whose certificate does not allow root).
    groups: bool,
    dirs: Mutex<HashMap<u64, Arc<Mutex<DirHandle>>>>,
    /// The open files: who opened each (by file handle).
    files: Mutex<HashMap<u64, Cred>>,
    next_fh: AtomicU64,
}

/// The file system a mount serves, shared by the session and the [`crate::Mount`] that
/// closes it (a `Box` inside, since [`FileSystem::close`] takes one).
pub(crate) type SharedFs = Arc<Box<dyn FileSystem>>;

fn empty(r: FsResult<()>) -> Reply {
    r.map(|()| Vec::new()).map_err(|e| e.0)
}

fn xattr(size: u32, r: FsResult<Vec<u8>>) -> Reply {
    match r {
        Err(e) => Err(e.0),
        Ok(v) if size == 0 => Ok(reply::xattr_size(v.len() as u32)),
        Ok(v) if v.len() > size as usize => Err(libc::ERANGE),
        Ok(v) => Ok(v),
    }
}

impl CairnFuse {
    /// Serves `fs`; `times`: how long the kernel may cache entries, attributes and
    /// absent names; `writeback`: whether the kernel caches writes; `fs_checks`:
    /// whether `fs` checks permissions (else the kernel does); `groups`: whether
    /// callers' supplementary groups are sent even when the kernel checks.
    pub(crate) fn new(
        fs: SharedFs,
        times: Timeouts,
        writeback: bool,
        fs_checks: bool,
        groups: bool,
    ) -> CairnFuse {
        CairnFuse {
            fs,
            times,
            writeback,
            fs_checks,
            groups: groups || fs_checks,
            dirs: Mutex::new(HashMap::new()),
            files: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(0),
        }
    }

    fn cred(&self, h: &InHeader) -> Cred {
        cred(h, self.groups)
    }

    /// Records an open file made by `cred`: its handle.
    fn opened(&self, cred: Cred) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed) + 1;
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(fh, cred);
        fh
    }

    /// Who opened file handle `fh` (the request's caller for a handle this mount did
    /// not give out).
    fn opener(&self, h: &InHeader, fh: u64) -> Cred {
        let known = self
            .files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh)
            .copied();
        known.unwrap_or_else(|| self.cred(h))
    }

    /// How long the kernel may keep the entry `parent`/`name` of inode `ino` and its
    /// attributes, as the file system says for the call it just answered on this
    /// thread.
    fn entry_ttl(&self, parent: u64, name: &[u8], ino: u64) -> EntryTtl {
        EntryTtl {
            entry: ttl(self.fs.entry_validity(parent, name), self.times.entry),
            attr: ttl(self.fs.attr_validity(ino), self.times.attr),
        }
    }

    /// The reply of a call that made or found the entry `parent`/`name`.
    fn entry(&self, parent: u64, name: &[u8], r: FsResult<cairn_fs::Attr>) -> Reply {
        r.map(|a| reply::entry(fattr(&a), self.entry_ttl(parent, name, a.ino)))
            .map_err(|e| e.0)
    }

    /// The reply of a call that answered the attributes of `ino`.
    fn attr(&self, ino: u64, r: FsResult<cairn_fs::Attr>) -> Reply {
        r.map(|a| {
            let t = ttl(self.fs.attr_validity(ino), self.times.attr);
            reply::attr(fattr(&a), t)
        })
        .map_err(|e| e.0)
    }

    /// LOOKUP: an absent name is answered as a negative entry the kernel keeps for as
    /// long as the file system says, else for [`Timeouts::negative`]; a plain ENOENT
    /// (nothing kept) when that is zero.
    fn lookup(&self, h: &InHeader, name: &[u8]) -> Reply {
        match self.fs.lookup(&self.cred(h), h.nodeid, name) {
            Err(e) if e.0 == libc::ENOENT => {
                let kept = ttl(self.fs.entry_validity(h.nodeid, name), self.times.negative);
                if kept.is_zero() {
                    Err(libc::ENOENT)
                } else {
                    Ok(reply::negative_entry(kept))
                }
            }
            r => self.entry(h.nodeid, name, r),
        }
    }

    /// The flags a file is opened with: with the kernel caching writes, a write-only
    /// open may be read (the kernel fills partly written pages) and `O_APPEND` is the
    /// kernel's to apply (it sends the offset of the end).
    fn open_flags(&self, flags: u32) -> i32 {
        let mut f = flags as i32;
        if self.writeback {
            if f & libc::O_ACCMODE == libc::O_WRONLY {
                f = (f & !libc::O_ACCMODE) | libc::O_RDWR;
            }
            f &= !libc::O_APPEND;
        }
        f
    }

    /// Serves one request (not INIT, which the session answers).
    pub(crate) fn handle(&self, h: &InHeader, op: Op<'_>) -> Answer {
        if let Some(c) = counted(&op) {
            count(c);
        }
        let ino = h.nodeid;
        let r = match op {
            Op::Forget | Op::BatchForget | Op::Interrupt => return Answer::none(),
            Op::Setxattr { name, value, flags } => {
                let r = empty(self.fs.setxattr(&self.cred(h), ino, name, value, flags));
                // An access ACL may have set the mode: the kernel's cached one is stale.
                let inval = (r.is_ok() && name == b"system.posix_acl_access").then_some(ino);
                return Answer {
                    reply: Some(r),
                    inval,
                };
            }
            Op::Init { .. } => Err(libc::EIO),
            Op::Destroy => {
                if let Err(e) = self.fs.fsync(abi::ROOT_ID) {
                    log::error!("flush at unmount: {e}");
                }
                Ok(Vec::new())
            }
            Op::Lookup { name } => self.lookup(h, name),
            Op::Getattr => self.attr(ino, self.fs.getattr(ino)),
            Op::Setattr(s) => self.setattr(h, &s),
            Op::Readlink => self.fs.readlink(&self.cred(h), ino).map_err(|e| e.0),
            Op::Mknod { mode, rdev, name } => self.entry(
                ino,
                name,
                self.fs.mknod(&self.cred(h), ino, name, mode, rdev),
            ),
            Op::Mkdir { mode, name } => {
                self.entry(ino, name, self.fs.mkdir(&self.cred(h), ino, name, mode))
            }
            Op::Unlink { name } => empty(self.fs.unlink(&self.cred(h), ino, name)),
            Op::Rmdir { name } => empty(self.fs.rmdir(&self.cred(h), ino, name)),
            Op::Symlink { name, target } => {
                self.entry(ino, name, self.fs.symlink(&self.cred(h), ino, name, target))
            }
            Op::Rename {
                newdir,
                flags,
                name,
                newname,
            } => empty(
                self.fs
                    .rename(&self.cred(h), ino, name, newdir, newname, flags),
            ),
            Op::Link { oldnodeid, name } => {
                self.entry(ino, name, self.fs.link(&self.cred(h), oldnodeid, ino, name))
            }
            Op::Open { flags } => {
                let c = self.cred(h);
                self.fs
                    .open_file(&c, ino, self.open_flags(flags))
                    .map(|_| reply::open(self.opened(c)))
                    .map_err(|e| e.0)
            }
            Op::Create { mode, flags, name } => self.create(h, name, mode, flags),
            Op::Read { fh, offset, size } => self
                .fs
                .read(
                    &self.opener(h, fh),
                    ino,
                    offset.min(i64::MAX as u64),
                    size as usize,
                )
                .map_err(|e| e.0),
            Op::Write { fh, offset, data } => self
                .fs
                .write(&self.opener(h, fh), ino, offset.min(i64::MAX as u64), data)
                .map(|n| reply::written(n as u32))
                .map_err(|e| e.0),
            Op::Fallocate(f) => empty(self.fs.fallocate(
                &self.cred(h),
                ino,
                f.offset as i64,
                f.length as i64,
                f.mode as i32,
            )),
            Op::CopyFileRange(c) => self.copy_file_range(h, &c),
            // Writes are stored when they are made: nothing to flush. ENOSYS makes the
            // kernel stop sending FLUSH at every close (close still succeeds).
            Op::Flush => Err(libc::ENOSYS),
            Op::Release { fh } => {
                let c = self.opener(h, fh);
                self.files
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&fh);
                empty(self.fs.release(&c, ino))
            }
            Op::Fsync | Op::Fsyncdir => empty(self.fs.fsync(ino)),
            Op::Opendir => self.opendir(h),
            Op::Readdir { fh, offset, size } => self.readdir(ino, fh, offset, size, false),
            Op::ReaddirPlus { fh, offset, size } => self.readdir(ino, fh, offset, size, true),
            Op::Releasedir { fh } => {
                self.dirs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&fh);
                Ok(Vec::new())
            }
            Op::Statfs => self.fs.statfs().map(|s| reply::statfs(&s)).map_err(|e| e.0),
            Op::Getxattr { name, size } => xattr(size, self.fs.getxattr(&self.cred(h), ino, name)),
            Op::Listxattr { size } => self.listxattr(h, size),
            Op::Removexattr { name } => empty(self.fs.removexattr(&self.cred(h), ino, name)),
            Op::Access { mask } => self.access(h, mask),
            Op::Other(code) => {
                log::debug!("FUSE opcode {code} is not served");
                Err(libc::ENOSYS)
            }
        };
        Answer::reply(r)
    }

    fn setattr(&self, h: &InHeader, s: &abi::SetattrIn) -> Reply {
        let v = s.valid;
        let set = SetAttr {
            mode: (v & fa::MODE != 0).then_some(s.mode),
            uid: (v & fa::UID != 0).then_some(s.uid),
            gid: (v & fa::GID != 0).then_some(s.gid),
            size: (v & fa::SIZE != 0).then_some(s.size),
            atime: timeset(
                v & fa::ATIME != 0,
                v & fa::ATIME_NOW != 0,
                s.atime,
                s.atimensec,
            ),
            mtime: timeset(
                v & fa::MTIME != 0,
                v & fa::MTIME_NOW != 0,
                s.mtime,
                s.mtimensec,
            ),
        };
        self.attr(h.nodeid, self.fs.setattr(&self.cred(h), h.nodeid, &set))
    }

    fn create(&self, h: &InHeader, name: &[u8], mode: u32, flags: u32) -> Reply {
        let c = self.cred(h);
        let flags = self.open_flags(flags) & !libc::O_TRUNC;
        let a = self.fs.create_open(&c, h.nodeid, name, mode, flags);
        a.map(|a| {
            let t = self.entry_ttl(h.nodeid, name, a.ino);
            reply::create(fattr(&a), t, self.opened(c))
        })
        .map_err(|e| e.0)
    }

    fn copy_file_range(&self, h: &InHeader, c: &abi::CopyFileRangeIn) -> Reply {
        let (off_in, off_out) = (c.off_in as i64, c.off_out as i64);
        if c.flags != 0 || off_in < 0 || off_out < 0 {
            return Err(libc::EINVAL);
        }
        // A reply carries a 32-bit count: copy at most 1 GiB per request (the caller's
        // copy_file_range loop, or the kernel's, asks again for the rest).
        let len = c.len.min(1 << 30);
        self.fs
            .copy_range(
                &self.opener(h, c.fh_out),
                h.nodeid,
                c.off_in,
                c.nodeid_out,
                c.off_out,
                len,
            )
            .map(|n| reply::written(n as u32))
            .map_err(|e| e.0)
    }

    fn listxattr(&self, h: &InHeader, size: u32) -> Reply {
        let r = self.fs.listxattr(&self.cred(h), h.nodeid).map(|names| {
            let mut v = Vec::new();
            for n in names {
                v.extend_from_slice(&n);
                v.push(0);
            }
            v
        });
        xattr(size, r)
    }

    fn access(&self, h: &InHeader, mask: u32) -> Reply {
        // With default_permissions the kernel answers access(2) itself.
        if !self.fs_checks {
            return Ok(Vec::new());
        }
        match self.fs.getattr(h.nodeid) {
            Ok(a) if may_access(&self.cred(h), &a, mask) => Ok(Vec::new()),
            Ok(_) => Err(libc::EACCES),
            Err(e) => Err(e.0),
        }
    }

    fn opendir(&self, h: &InHeader) -> Reply {
        let cred = self.cred(h);
        self.fs.opendir(&cred, h.nodeid).map_err(|e| e.0)?;
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed) + 1;
        let handle = DirHandle {
            cred,
            next_cookie: 3,
            recent: HashMap::new(),
            older: HashMap::new(),
            end: None,
        };
        self.dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(fh, Arc::new(Mutex::new(handle)));
        Ok(reply::open(fh))
    }

    /// READDIR, or with `plus` READDIRPLUS: each entry with what the kernel may keep of
    /// it, as the file system listed it ([`FileSystem::readdir_plus`]).
    fn readdir(&self, ino: u64, fh: u64, offset: u64, size: u32, plus: bool) -> Reply {
        let handle = self
            .dirs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh)
            .cloned()
            .ok_or(libc::EBADF)?;
        let mut h = handle.lock().unwrap_or_else(|p| p.into_inner());
        if offset > 0 && h.end == Some(offset) {
            // The listing ended there: the kernel's call that finds the end asks the
            // file system nothing.
            return Ok(Vec::new());
        }
        let mut out = DirBuf::new(size as usize);
        let dot = |ino: u64, name: &[u8]| {
            DirEntryPlus::bare(DirEntry {
                name: name.to_vec(),
                ino,
                kind: libc::S_IFDIR,
            })
        };
        // Cookies 1 and 2 are "." and ".."; names get cookies from 3 on.
        if offset < 1 && self.put(&mut out, &dot(ino, b"."), 1, plus) {
            return Ok(out.into_bytes());
        }
        if offset < 2 {
            let parent = self.fs.parent_of(ino).unwrap_or(ino);
            if self.put(&mut out, &dot(parent, b".."), 2, plus) {
                return Ok(out.into_bytes());
            }
        }
        let cursor: Option<Vec<u8>> = if offset <= 2 {
            None
        } else {
            match h.recent.get(&offset).or_else(|| h.older.get(&offset)) {
                Some(n) => Some(n.clone()),
                None => return Err(libc::EINVAL),
            }
        };
        let listed = self.fill(&mut h, (ino, cursor), &mut out, plus)?;
        h.end = match listed {
            Listed::Ended(None) => Some(offset.max(2)),
            Listed::Ended(last) => last,
            Listed::More => None,
        };
        Ok(out.into_bytes())
    }

    /// Adds to `out` the entries of directory `ino` after `cursor`, as many as fit,
    /// asking the file system for about as many as `out` has room for (its listing
    /// ends where it returns fewer).
    fn fill(
        &self,
        h: &mut DirHandle,
        (ino, mut cursor): (u64, Option<Vec<u8>>),
        out: &mut DirBuf,
        plus: bool,
    ) -> Result<Listed, i32> {
        let smallest = if plus { PLUS_ENTRY_MIN } else { ENTRY_MIN };
        let mut batch = HashMap::new();
        let mut last = None;
        let listed = loop {
            if out.room() < smallest {
                break Listed::More;
            }
            let limit = (out.room() / smallest).clamp(1, READDIR_BATCH);
            let entries = if plus {
                self.fs.readdir_plus(&h.cred, ino, cursor.as_deref(), limit)
            } else {
                self.fs
                    .readdir(&h.cred, ino, cursor.as_deref(), limit)
                    .map(|v| v.into_iter().map(DirEntryPlus::bare).collect())
            }
            .map_err(|e| e.0)?;
            let ended = entries.len() < limit;
            let mut full = false;
            for e in entries {
                let cookie = h.next_cookie;
                if self.put(out, &e, cookie, plus) {
                    full = true;
                    break;
                }
                h.next_cookie += 1;
                cursor = Some(e.entry.name.clone());
                last = Some(cookie);
                batch.insert(cookie, e.entry.name);
            }
            match (full, ended) {
                (true, _) => break Listed::More,
                (false, true) => break Listed::Ended(last),
                (false, false) => {}
            }
        };
        if !batch.is_empty() {
            h.older = std::mem::replace(&mut h.recent, batch);
        }
        Ok(listed)
    }

    /// Adds entry `e` to `out` with `cookie`, with what the kernel may keep of it when
    /// `plus`; `true` when it did not fit.
    fn put(&self, out: &mut DirBuf, e: &DirEntryPlus, cookie: u64, plus: bool) -> bool {
        let (ino, kind, name) = (e.entry.ino, kind(e.entry.kind), &e.entry.name);
        if !plus {
            return out.add(ino, cookie, kind, name);
        }
        let kept = e.attr.as_ref().map(|a| {
            let t = EntryTtl {
                entry: ttl(e.entry_valid, self.times.entry),
                attr: ttl(e.attr_valid, self.times.attr),
            };
            reply::entry_out(fattr(a), t)
        });
        out.add_plus(kept, (ino, cookie), kind, name)
    }
}

/// Where a reply's listing stopped.
enum Listed {
    /// At the end of the directory, after the entry with this cookie (`None`: no entry
    /// in this reply).
    Ended(Option<u64>),
    /// Where the reply was full: more may follow.
    More,
}

/// How long the kernel may keep an answer the file system said is valid `v`;
/// `configured`: the mount's timeout for it.
fn ttl(v: Validity, configured: Duration) -> Duration {
    match v {
        Validity::Configured => configured,
        Validity::For(d) => d,
    }
}

/// The kind `op` is counted as, for `CAIRN_FUSE_STATS` (none for the requests that
/// serve the session rather than the file system).
fn counted(op: &Op<'_>) -> Option<Count> {
    Some(match op {
        Op::Init { .. } | Op::Destroy | Op::Interrupt | Op::Other(_) => return None,
        Op::Forget => Count::Forget,
        Op::BatchForget => Count::BatchForget,
        Op::Lookup { .. } => Count::Lookup,
        Op::Getattr => Count::Getattr,
        Op::Setattr(_) => Count::Setattr,
        Op::Readlink => Count::Readlink,
        Op::Mknod { .. } => Count::Mknod,
        Op::Mkdir { .. } => Count::Mkdir,
        Op::Unlink { .. } => Count::Unlink,
        Op::Rmdir { .. } => Count::Rmdir,
        Op::Symlink { .. } => Count::Symlink,
        Op::Rename { .. } => Count::Rename,
        Op::Link { .. } => Count::Link,
        Op::Open { .. } => Count::Open,
        Op::Read { .. } => Count::Read,
        Op::Write { .. } => Count::Write,
        Op::Fallocate(_) => Count::Fallocate,
        Op::CopyFileRange(_) => Count::CopyFileRange,
        Op::Flush => Count::Flush,
        Op::Release { .. } => Count::Release,
        Op::Fsync => Count::Fsync,
        Op::Opendir => Count::Opendir,
        Op::Readdir { .. } => Count::Readdir,
        Op::ReaddirPlus { .. } => Count::ReaddirPlus,
        Op::Releasedir { .. } => Count::Releasedir,
        Op::Fsyncdir => Count::Fsyncdir,
        Op::Statfs => Count::Statfs,
        Op::Setxattr { .. } => Count::Setxattr,
        Op::Getxattr { .. } => Count::Getxattr,
        Op::Listxattr { .. } => Count::Listxattr,
        Op::Removexattr { .. } => Count::Removexattr,
        Op::Access { .. } => Count::Access,
        Op::Create { .. } => Count::Create,
    })
}
