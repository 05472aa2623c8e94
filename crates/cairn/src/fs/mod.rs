//! A POSIX-style file system whose metadata and data are rows of the store, after
//! TableFS: a directory entry is a row keyed by (parent inode, partition, name), every
//! inode has a row of its own with its attributes (and the data of a small file inline),
//! and larger files are split into chunk rows. Every change that touches several rows
//! is one atomic [`crate::WriteBatch`], so a crash never leaves a dangling entry, an
//! orphan inode or a half rename.
//!
//! ```
//! use cairn::fs::{Cred, Fs, ROOT};
//! # let dir = tempfile::tempdir().unwrap();
//! let fs = Fs::open(dir.path())?;
//! let me = Cred::ROOT;
//! let d = fs.mkdir(&me, ROOT, b"docs", 0o755)?;
//! let f = fs.create(&me, d.ino, b"a.txt", 0o644)?;
//! fs.write(f.ino, 0, b"hello")?;
//! assert_eq!(fs.read(f.ino, 0, 100)?, b"hello");
//! let names: Vec<_> = fs.readdir(d.ino, None, 100)?.into_iter().map(|e| e.name).collect();
//! assert_eq!(names, vec![b"a.txt".to_vec()]);
//! # Ok::<(), cairn::fs::Errno>(())
//! ```
//!
//! Errors are errno values ([`Errno`]). One [`Fs`] value must own a store at a time (it
//! serializes the changes of the namespace with a lock of its own).
//!
//! Access times follow Linux's default `relatime` rule: a read of a file, or a listing
//! of a directory from its start, sets the access time when it is not newer than the
//! modification or change time, or is a day old; other reads write nothing.

mod layout;

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::db::{ikey, ns_prefix_bounds, Core, NS_FS};
use crate::record::{u32_at, u64_at};
use crate::{Db, Iter, Options, WriteBatch};
use layout::*;

/// Inode number of the root directory.
pub const ROOT: u64 = 1;
/// Largest size of a file whose data is kept inline in its inode row.
pub const INLINE_MAX: usize = 4096;
/// Size of the chunk rows of larger files.
pub const CHUNK_SIZE: u64 = 64 << 10;
/// Longest name of a directory entry, in bytes.
pub const NAME_MAX: usize = 255;
/// Longest symbolic link target, in bytes.
pub const PATH_MAX: usize = 4095;
/// `rename` flag: fail with `EEXIST` if the target exists.
pub const RENAME_NOREPLACE: u32 = 1;
/// `rename` flag: swap source and target atomically (both must exist).
pub const RENAME_EXCHANGE: u32 = 2;
/// `setxattr` flag: fail with `EEXIST` if the attribute exists.
pub const XATTR_CREATE: u32 = 1;
/// `setxattr` flag: fail with `ENODATA` if the attribute does not exist.
pub const XATTR_REPLACE: u32 = 2;

/// Partition of a directory's entries (GIGA+ splitting; always 0 for now).
const PART: u32 = 0;
/// Inode numbers reserved per durable lease-row update.
const LEASE: u64 = 4096;

/// An errno value (`libc::ENOENT` and so on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

impl std::error::Error for Errno {}

impl From<crate::Error> for Errno {
    fn from(e: crate::Error) -> Errno {
        match e {
            crate::Error::StorageFull(_) => Errno(libc::ENOSPC),
            crate::Error::KeyTooLarge { .. } => Errno(libc::ENAMETOOLONG),
            _ => {
                log::error!("fs: store error: {e}");
                Errno(libc::EIO)
            }
        }
    }
}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> std::io::Error {
        std::io::Error::from_raw_os_error(e.0)
    }
}

/// Result of file system operations.
pub type FsResult<T> = std::result::Result<T, Errno>;

fn err<T>(e: i32) -> FsResult<T> {
    Err(Errno(e))
}

/// Who performs an operation: the owner of new files and the subject of permission
/// checks. Uid 0 passes every check but executing a file with no execute bit.
///
/// ```
/// use cairn::fs::Cred;
/// let alice = Cred::new(1000, 1000).with_groups(&[27, 100]);
/// assert!(alice.in_group(27) && alice.in_group(1000) && !alice.in_group(5));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cred {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Groups,
}

impl Cred {
    /// The superuser.
    pub const ROOT: Cred = Cred::new(0, 0);

    /// A user with a primary group and no supplementary groups.
    pub const fn new(uid: u32, gid: u32) -> Cred {
        Cred {
            uid,
            gid,
            groups: Groups::NONE,
        }
    }

    /// The same user with these supplementary groups (the first
    /// [`Groups::MAX`] of them).
    pub fn with_groups(self, groups: &[u32]) -> Cred {
        Cred {
            groups: Groups::new(groups),
            ..self
        }
    }

    /// Whether the caller belongs to group `gid` (primary or supplementary).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.as_slice().contains(&gid)
    }
}

/// Supplementary group ids of a [`Cred`], held inline so that `Cred` stays `Copy`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Groups {
    len: u8,
    ids: [u32; Groups::MAX],
}

impl Groups {
    /// Most supplementary groups kept.
    pub const MAX: usize = 32;
    /// No supplementary groups.
    pub const NONE: Groups = Groups {
        len: 0,
        ids: [0; Groups::MAX],
    };

    /// The first [`Groups::MAX`] of `ids`.
    pub fn new(ids: &[u32]) -> Groups {
        let mut g = Groups::NONE;
        let n = ids.len().min(Groups::MAX);
        g.ids[..n].copy_from_slice(&ids[..n]);
        g.len = n as u8;
        g
    }

    /// The group ids.
    pub fn as_slice(&self) -> &[u32] {
        &self.ids[..self.len as usize]
    }
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// Attributes of an inode. Times are nanoseconds since the Unix epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Inode number.
    pub ino: u64,
    /// File type and permission bits (`S_IFREG | 0o644` ...).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes (of the data, or of a symbolic link's target).
    pub size: u64,
    /// Number of hard links (for a directory, 2 plus its subdirectories).
    pub nlink: u32,
    /// Device number of a device node.
    pub rdev: u32,
    /// Last access (not updated by reads).
    pub atime: i64,
    /// Last data change.
    pub mtime: i64,
    /// Last status change.
    pub ctime: i64,
}

impl Attr {
    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }

    /// 512-byte blocks the data occupies (rounded up).
    pub fn blocks(&self) -> u64 {
        self.size.div_ceil(512)
    }
}

/// How `setattr` sets a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSet {
    /// The current time.
    Now,
    /// This time, in nanoseconds since the epoch.
    At(i64),
}

/// The changes of a `setattr` call; `None` fields are left alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits (the type bits are ignored).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (truncate or extend with zeros).
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<TimeSet>,
    /// New modification time.
    pub mtime: Option<TimeSet>,
}

/// An entry returned by [`Fs::readdir`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The name, any bytes but '/' and NUL; also the cursor to resume after.
    pub name: Vec<u8>,
    /// The inode it names.
    pub ino: u64,
    /// File type bits (`S_IFDIR` ...).
    pub kind: u32,
}

/// Figures returned by [`Fs::statfs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    /// Block size.
    pub bsize: u32,
    /// Blocks of the underlying disk.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Blocks available to unprivileged users.
    pub bavail: u64,
    /// Inodes (the numbers allocated so far plus the free ones).
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Longest name.
    pub namelen: u32,
}

/// What [`Fs::check`] found: an empty list means a consistent tree.
pub type CheckReport = Vec<String>;

#[derive(Clone, Debug)]
struct Inode {
    attr: Attr,
    flags: u8,
    /// Parent directory of a directory (0 for other types).
    parent: u64,
    /// Inline data (or a symbolic link's target).
    data: Vec<u8>,
}

impl Inode {
    fn encode(&self) -> Vec<u8> {
        let a = &self.attr;
        let mut v = Vec::with_capacity(INODE_HEADER + self.data.len());
        v.push(self.flags);
        for x in [a.mode, a.uid, a.gid, a.nlink, a.rdev] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.extend_from_slice(&a.size.to_le_bytes());
        v.extend_from_slice(&self.parent.to_le_bytes());
        for t in [a.atime, a.mtime, a.ctime] {
            v.extend_from_slice(&t.to_le_bytes());
        }
        v.extend_from_slice(&self.data);
        v
    }

    fn decode(ino: u64, b: &[u8]) -> FsResult<Inode> {
        if b.len() < INODE_HEADER {
            log::error!("fs: inode {ino}: row of {} bytes", b.len());
            return err(libc::EIO);
        }
        Ok(Inode {
            flags: b[0],
            attr: Attr {
                ino,
                mode: u32_at(b, 1),
                uid: u32_at(b, 5),
                gid: u32_at(b, 9),
                nlink: u32_at(b, 13),
                rdev: u32_at(b, 17),
                size: u64_at(b, 21),
                atime: u64_at(b, 37) as i64,
                mtime: u64_at(b, 45) as i64,
                ctime: u64_at(b, 53) as i64,
            },
            parent: u64_at(b, 29),
            data: b[INODE_HEADER..].to_vec(),
        })
    }

    fn is_dir(&self) -> bool {
        self.attr.is_dir()
    }

    fn chunked(&self) -> bool {
        self.flags & FLAG_CHUNKED != 0
    }
}

/// The permission bits a POSIX access ACL (`system.posix_acl_access`, version 2) sets,
/// and whether the bits express it fully (no named entries, no mask).
fn acl_mode(v: &[u8]) -> FsResult<(u32, bool)> {
    if v.len() < 4 || (v.len() - 4) & 7 != 0 || u32_at(v, 0) != 2 {
        return err(libc::EINVAL);
    }
    let (mut user, mut group, mut other, mut mask) = (None, None, None, None);
    let mut minimal = true;
    for e in v[4..].chunks(8) {
        let tag = u16::from_le_bytes([e[0], e[1]]);
        let perm = u16::from_le_bytes([e[2], e[3]]) as u32 & 7;
        match tag {
            0x01 => user = Some(perm),
            0x04 => group = Some(perm),
            0x10 => mask = Some(perm),
            0x20 => other = Some(perm),
            0x02 | 0x08 => minimal = false,
            _ => return err(libc::EINVAL),
        }
    }
    if mask.is_some() {
        minimal = false;
    }
    match (user, group, other) {
        (Some(u), Some(g), Some(o)) => Ok(((u << 6) | (mask.unwrap_or(g) << 3) | o, minimal)),
        _ => err(libc::EINVAL),
    }
}

/// Nanoseconds since the epoch, now.
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

fn check_name(name: &[u8]) -> FsResult<()> {
    if name.is_empty() {
        return err(libc::ENOENT);
    }
    if name.len() > NAME_MAX {
        return err(libc::ENAMETOOLONG);
    }
    if name.contains(&b'/') || name.contains(&0) {
        return err(libc::EINVAL);
    }
    Ok(())
}

/// A name that a create-like call may use: valid, and not "." or "..".
fn check_new_name(name: &[u8]) -> FsResult<()> {
    check_name(name)?;
    if name == b"." || name == b".." {
        return err(libc::EEXIST);
    }
    Ok(())
}

const R: u32 = 4;
const W: u32 = 2;
const X: u32 = 1;

fn allowed(cred: &Cred, a: &Attr, mask: u32) -> bool {
    if cred.uid == 0 {
        return mask & X == 0 || a.is_dir() || a.mode & 0o111 != 0;
    }
    let bits = if cred.uid == a.uid {
        (a.mode >> 6) & 7
    } else if cred.in_group(a.gid) {
        (a.mode >> 3) & 7
    } else {
        a.mode & 7
    };
    bits & mask == mask
}

/// Changes of one operation: inodes read and modified, applied as one batch.
struct Tx {
    inodes: BTreeMap<u64, Option<Inode>>,
    batch: WriteBatch,
    /// A directory whose only change is its times (a file created in it or removed
    /// from it): its row may be written later (see `Fs::dir_cache`).
    times_only: Option<u64>,
}

impl Tx {
    fn new() -> Tx {
        Tx {
            inodes: BTreeMap::new(),
            batch: WriteBatch::new(),
            times_only: None,
        }
    }
}

/// A directory inode as last changed, and how many changes of its times since its
/// row was last written.
#[derive(Clone)]
struct CachedDir {
    inode: Inode,
    unwritten: u32,
}

struct Alloc {
    next: u64,
    lease_end: u64,
}

/// The file system (see the module documentation).
pub struct Fs {
    db: Db,
    /// Serializes every change.
    lock: Mutex<()>,
    alloc: Mutex<Alloc>,
    /// Open counts, for files unlinked while open.
    open: Mutex<HashMap<u64, u32>>,
    perms: AtomicBool,
    /// Directory inodes as last changed, so that creates in a directory don't read its
    /// row each time. Updated only under `lock`. A change of a directory that only
    /// moves its mtime and ctime (a file created in it or removed from it) updates the
    /// cached inode and writes its row only every `DIR_TIMES_EVERY` changes, or at
    /// `fsync`, eviction or close, like Linux's `lazytime`; everything else about the
    /// directory (entries, link count, mode) is written in the operation's batch.
    dir_cache: Mutex<HashMap<u64, CachedDir>>,
}

/// Most directory inodes kept in `dir_cache`.
const DIR_CACHE_MAX: usize = 4096;
/// A directory's row is written at least once per this many changes of its times.
const DIR_TIMES_EVERY: u32 = 64;

impl Drop for Fs {
    /// Writes the deferred directory times before the store closes.
    fn drop(&mut self) {
        if let Err(e) = self.write_dir_times() {
            log::warn!("writing directory times at close: {e}");
        }
    }
}

impl std::fmt::Debug for Fs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fs").field("dir", &self.db.path()).finish()
    }
}

impl Fs {
    /// Opens (creating if needed) a store at `dir` with default options. After a
    /// crash the store keeps a prefix of the changes made (the engine guarantees it), so
    /// an operation that depends on an earlier one never survives without it; `fsync`
    /// makes everything so far durable.
    pub fn open(dir: impl AsRef<Path>) -> FsResult<Fs> {
        let db = Options::new().open(dir)?;
        Fs::new(db)
    }

    /// The file system in an open store, created (an empty root directory) if the
    /// store has none.
    pub fn new(db: Db) -> FsResult<Fs> {
        let core = db.core();
        let lease = core
            .get(&ikey(NS_FS, &lease_key()))?
            .map(|v| u64_at(&v, 0))
            .unwrap_or(ROOT + 1);
        let fs = Fs {
            db,
            lock: Mutex::new(()),
            alloc: Mutex::new(Alloc {
                next: lease,
                lease_end: lease,
            }),
            open: Mutex::new(HashMap::new()),
            perms: AtomicBool::new(true),
            dir_cache: Mutex::new(HashMap::new()),
        };
        if fs.load(ROOT)?.is_none() {
            let t = now_ns();
            let root = Inode {
                attr: Attr {
                    ino: ROOT,
                    mode: libc::S_IFDIR | 0o755,
                    uid: 0,
                    gid: 0,
                    size: 0,
                    nlink: 2,
                    rdev: 0,
                    atime: t,
                    mtime: t,
                    ctime: t,
                },
                flags: 0,
                parent: ROOT,
                data: Vec::new(),
            };
            let mut b = WriteBatch::new();
            b.put_ns(NS_FS, &inode_key(ROOT), &root.encode());
            fs.core().write_batch(b, true)?;
            fs.core().flush()?;
        }
        // Files unlinked while open when the last process ended are freed now.
        let orphans: Vec<u64> = fs
            .scan(&[TAG_ORPHAN], None)
            .map(|r| r.map(|(k, _)| u64::from_be_bytes(k[..8].try_into().unwrap())))
            .collect::<Result<_, _>>()?;
        for ino in orphans {
            let mut tx = Tx::new();
            fs.free(&mut tx, ino, None)?;
            tx.batch.delete_ns(NS_FS, &orphan_key(ino));
            fs.commit(tx)?;
        }
        Ok(fs)
    }

    /// The underlying store.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Turns the permission checks of the operations on or off (on by default). A FUSE
    /// mount with `default_permissions` leaves them to the kernel.
    pub fn set_permission_checks(&self, on: bool) {
        self.perms.store(on, Ordering::Relaxed);
    }

    fn core(&self) -> &Core {
        self.db.core()
    }

    fn core_arc(&self) -> Arc<Core> {
        self.db.core_arc().clone()
    }

    fn scan(&self, prefix: &[u8], after: Option<&[u8]>) -> Iter {
        let (lo, hi) = ns_prefix_bounds(NS_FS, prefix);
        let lo = match after {
            Some(a) => {
                let mut k = ikey(NS_FS, prefix);
                k.extend_from_slice(a);
                Bound::Excluded(k)
            }
            None => lo,
        };
        Iter::new(self.core_arc(), lo, hi, 1 + prefix.len())
    }

    fn load(&self, ino: u64) -> FsResult<Option<Inode>> {
        if let Some(d) = self.dir_cache.lock().get(&ino) {
            return Ok(Some(d.inode.clone()));
        }
        match self.core().get(&ikey(NS_FS, &inode_key(ino)))? {
            Some(v) => Ok(Some(Inode::decode(ino, &v)?)),
            None => Ok(None),
        }
    }

    fn inode(&self, ino: u64) -> FsResult<Inode> {
        self.load(ino)?.ok_or(Errno(libc::ENOENT))
    }

    fn tx_get(&self, tx: &mut Tx, ino: u64) -> FsResult<Inode> {
        if let Some(i) = tx.inodes.get(&ino) {
            return i.clone().ok_or(Errno(libc::ENOENT));
        }
        let i = self.inode(ino)?;
        tx.inodes.insert(ino, Some(i.clone()));
        Ok(i)
    }

    fn tx_put(&self, tx: &mut Tx, i: Inode) {
        tx.inodes.insert(i.attr.ino, Some(i));
    }

    fn commit(&self, mut tx: Tx) -> FsResult<()> {
        let mut cache = self.dir_cache.lock();
        // The directory whose times alone changed is left out of the batch unless its
        // row is due.
        let deferred = tx.times_only.filter(|ino| {
            matches!(cache.get(ino), Some(d) if d.unwritten + 1 < DIR_TIMES_EVERY)
                && matches!(tx.inodes.get(ino), Some(Some(_)))
        });
        for (ino, i) in &tx.inodes {
            match i {
                Some(_) if Some(*ino) == deferred => {}
                Some(i) => {
                    tx.batch.put_ns(NS_FS, &inode_key(*ino), &i.encode());
                }
                None => {
                    tx.batch.delete_ns(NS_FS, &inode_key(*ino));
                }
            }
        }
        let res = self.core().write_batch(tx.batch, true);
        if res.is_err() {
            // What is cached may be ahead of the store now: forget it (unwritten time
            // changes of other directories are written first).
            drop(cache);
            let _ = self.write_dir_times();
            self.dir_cache.lock().clear();
            return Ok(res?);
        }
        if cache.len() >= DIR_CACHE_MAX {
            let dirty = Self::take_unwritten(&mut cache);
            cache.clear();
            self.write_inodes(dirty)?;
        }
        for (ino, i) in tx.inodes {
            match i {
                Some(i) if i.is_dir() => {
                    let unwritten = match cache.get(&ino) {
                        Some(d) if Some(ino) == deferred => d.unwritten + 1,
                        _ => 0,
                    };
                    cache.insert(
                        ino,
                        CachedDir {
                            inode: i,
                            unwritten,
                        },
                    );
                }
                _ => {
                    cache.remove(&ino);
                }
            }
        }
        Ok(())
    }

    /// The cached directories with unwritten time changes, marked written.
    fn take_unwritten(cache: &mut HashMap<u64, CachedDir>) -> Vec<Inode> {
        cache
            .values_mut()
            .filter(|d| d.unwritten > 0)
            .map(|d| {
                d.unwritten = 0;
                d.inode.clone()
            })
            .collect()
    }

    fn write_inodes(&self, inodes: Vec<Inode>) -> FsResult<()> {
        if inodes.is_empty() {
            return Ok(());
        }
        let mut b = WriteBatch::new();
        for i in &inodes {
            b.put_ns(NS_FS, &inode_key(i.attr.ino), &i.encode());
        }
        self.core().write_batch(b, true)?;
        Ok(())
    }

    /// Writes the rows of directories whose time changes were deferred.
    fn write_dir_times(&self) -> FsResult<()> {
        let dirty = Self::take_unwritten(&mut self.dir_cache.lock());
        self.write_inodes(dirty)
    }

    fn get_entry(&self, parent: u64, name: &[u8]) -> FsResult<Option<(u64, u32)>> {
        Ok(self
            .core()
            .get(&ikey(NS_FS, &dentry_key(parent, PART, name)))?
            .and_then(|v| decode_dentry(&v)))
    }

    fn check_access(&self, cred: &Cred, a: &Attr, mask: u32) -> FsResult<()> {
        if !self.perms.load(Ordering::Relaxed) || allowed(cred, a, mask) {
            Ok(())
        } else {
            err(libc::EACCES)
        }
    }

    /// A directory the caller may search (and, with `write`, change).
    fn dir_for(&self, cred: &Cred, tx: &mut Tx, ino: u64, write: bool) -> FsResult<Inode> {
        let d = self.tx_get(tx, ino)?;
        if !d.is_dir() {
            return err(libc::ENOTDIR);
        }
        self.check_access(cred, &d.attr, if write { W | X } else { X })?;
        Ok(d)
    }

    fn alloc_ino(&self) -> FsResult<u64> {
        let mut a = self.alloc.lock();
        if a.next >= a.lease_end {
            let end = a.next + LEASE;
            // No sync needed: a change using a number from this lease is written after
            // it, and the store keeps a prefix of its writes after a crash.
            self.core()
                .put(&ikey(NS_FS, &lease_key()), &end.to_le_bytes(), false)?;
            a.lease_end = end;
        }
        let ino = a.next;
        a.next += 1;
        Ok(ino)
    }

    /// Deletes an inode's row and everything hanging off it (chunks, attributes).
    /// `flags`: the inode's flags if known (only the rows they say exist are looked
    /// for), else every kind is.
    fn free(&self, tx: &mut Tx, ino: u64, flags: Option<u8>) -> FsResult<()> {
        tx.inodes.insert(ino, None);
        let f = flags.unwrap_or(FLAG_CHUNKED | FLAG_XATTRS);
        for (tag, flag) in [(TAG_CHUNK, FLAG_CHUNKED), (TAG_XATTR, FLAG_XATTRS)] {
            if f & flag == 0 {
                continue;
            }
            let p = ino_prefix(tag, ino);
            for r in self.scan(&p, None) {
                let (k, _) = r?;
                let mut full = p.clone();
                full.extend_from_slice(&k);
                tx.batch.delete_ns(NS_FS, &full);
            }
        }
        Ok(())
    }

    /// Drops one link of `i` (already in `tx`); frees it, or marks it an orphan if it
    /// is open, when it was the last.
    fn drop_link(&self, tx: &mut Tx, mut i: Inode, now: i64) -> FsResult<()> {
        i.attr.nlink = if i.is_dir() {
            0
        } else {
            i.attr.nlink.saturating_sub(1)
        };
        i.attr.ctime = now;
        let ino = i.attr.ino;
        if i.attr.nlink == 0 {
            if self.open.lock().get(&ino).copied().unwrap_or(0) > 0 {
                tx.batch.put_ns(NS_FS, &orphan_key(ino), &[]);
                self.tx_put(tx, i);
            } else {
                self.free(tx, ino, Some(i.flags))?;
            }
        } else {
            self.tx_put(tx, i);
        }
        Ok(())
    }

    // ---- lookups ----

    /// The attributes of `name` in directory `parent` ("." and ".." included).
    pub fn lookup(&self, cred: &Cred, parent: u64, name: &[u8]) -> FsResult<Attr> {
        let mut tx = Tx::new();
        let p = self.dir_for(cred, &mut tx, parent, false)?;
        check_name(name)?;
        if name == b"." {
            return Ok(p.attr);
        }
        if name == b".." {
            return self.getattr(p.parent);
        }
        match self.get_entry(parent, name)? {
            Some((ino, _)) => self.getattr(ino),
            None => err(libc::ENOENT),
        }
    }

    /// The attributes of inode `ino`.
    pub fn getattr(&self, ino: u64) -> FsResult<Attr> {
        Ok(self.inode(ino)?.attr)
    }

    /// The parent directory of directory `ino` (the root's is itself).
    pub fn parent_of(&self, ino: u64) -> FsResult<u64> {
        let i = self.inode(ino)?;
        if !i.is_dir() {
            return err(libc::ENOTDIR);
        }
        Ok(i.parent)
    }

    /// Changes attributes: chmod, chown, truncate, utimens, under the usual rules
    /// (`EPERM` for a chmod or explicit times by a non-owner or a chown by a non-root
    /// user, `EACCES` for a truncate without write permission).
    pub fn setattr(&self, cred: &Cred, ino: u64, s: &SetAttr) -> FsResult<Attr> {
        let _g = self.lock.lock();
        let mut tx = Tx::new();
        let mut i = self.tx_get(&mut tx, ino)?;
        let perms = self.perms.load(Ordering::Relaxed);
        let owner = !perms || cred.uid == 0 || cred.uid == i.attr.uid;
        let now = now_ns();
        if let Some(m) = s.mode {
            if !owner {
                return err(libc::EPERM);
            }
            let mut m = m & 0o7777;
            // As Linux does: a caller outside the file's group can't set its setgid bit.
            if perms && cred.uid != 0 && !cred.in_group(i.attr.gid) {
                m &= !libc::S_ISGID;
            }
            i.attr.mode = (i.attr.mode & libc::S_IFMT) | m;
        }
        if s.uid.is_some() || s.gid.is_some() {
            let uid = s.uid.unwrap_or(i.attr.uid);
            let gid = s.gid.unwrap_or(i.attr.gid);
            if perms && cred.uid != 0 {
                if uid != i.attr.uid || cred.uid != i.attr.uid {
                    return err(libc::EPERM);
                }
                if gid != i.attr.gid && !cred.in_group(gid) {
                    return err(libc::EPERM);
                }
            }
            if (uid != i.attr.uid || gid != i.attr.gid) && !i.is_dir() {
                i.attr.mode &= !libc::S_ISUID;
                if i.attr.mode & libc::S_IXGRP != 0 {
                    i.attr.mode &= !libc::S_ISGID;
                }
            }
            i.attr.uid = uid;
            i.attr.gid = gid;
        }
        for (t, is_m) in [(s.atime, false), (s.mtime, true)] {
            let Some(t) = t else { continue };
            let v = match t {
                TimeSet::Now => {
                    if !owner {
                        self.check_access(cred, &i.attr, W)?;
                    }
                    now
                }
                TimeSet::At(v) => {
                    if !owner {
                        return err(libc::EPERM);
                    }
                    v
                }
            };
            if is_m {
                i.attr.mtime = v;
            } else {
                i.attr.atime = v;
            }
        }
        if let Some(size) = s.size {
            match i.attr.mode & libc::S_IFMT {
                libc::S_IFDIR => return err(libc::EISDIR),
                libc::S_IFREG => {}
                _ => return err(libc::EINVAL),
            }
            self.check_access(cred, &i.attr, W)?;
            self.truncate_in(&mut tx, &mut i, size)?;
            if s.mtime.is_none() {
                i.attr.mtime = now;
            }
        }
        i.attr.ctime = now;
        let attr = i.attr.clone();
        self.tx_put(&mut tx, i);
        self.commit(tx)?;
        Ok(attr)
    }

    // ---- creating ----

    fn make(
        &self,
        cred: &Cred,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
        data: Vec<u8>,
    ) -> FsResult<Attr> {
        check_new_name(name)?;
        let _g = self.lock.lock();
        let mut tx = Tx::new();
        let mut p = self.dir_for(cred, &mut tx, parent, true)?;
        if p.attr.nlink == 0 {
            return err(libc::ENOENT);
        }
        let dkey = dentry_key(parent, PART, name);
        if self.core().contains(&ikey(NS_FS, &dkey)) {
            return err(libc::EEXIST);
        }
        let ino = self.alloc_ino()?;
        let now = now_ns();
        let is_dir = mode & libc::S_IFMT == libc::S_IFDIR;
        let mut mode = mode;
        let mut gid = cred.gid;
        if p.attr.mode & libc::S_ISGID != 0 {
            gid = p.attr.gid;
            if is_dir {
                mode |= libc::S_ISGID;
            }
        }
        let i = Inode {
            attr: Attr {
                ino,
                mode,
                uid: cred.uid,
                gid,
                size: data.len() as u64,
                nlink: if is_dir { 2 } else { 1 },
                rdev,
                atime: now,
                mtime: now,
                ctime: now,
            },
            flags: 0,
            parent: if is_dir { parent } else { 0 },
            data,
        };
        let attr = i.attr.clone();
        tx.batch
            .put_ns(NS_FS, &dkey, &encode_dentry(ino, mode & libc::S_IFMT));
        self.tx_put(&mut tx, i);
        if is_dir {
            p.attr.nlink += 1;
        } else {
            tx.times_only = Some(parent);
        }
        p.attr.mtime = now;
        p.attr.ctime = now;
        self.tx_put(&mut tx, p);
        self.commit(tx)?;
        Ok(attr)
    }

    /// Creates a regular file (`mode`: permission bits).
    pub fn create(&self, cred: &Cred, parent: u64, name: &[u8], mode: u32) -> FsResult<Attr> {
        self.make(
            cred,
            parent,
            name,
            libc::S_IFREG | (mode & 0o7777),
            0,
            Vec::new(),
        )
    }

    /// Creates a file node: regular file, device, FIFO or socket (`mode` with its type
    /// bits; no type bits means a regular file).
    pub fn mknod(
        &self,
        cred: &Cred,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
    ) -> FsResult<Attr> {
        let t = match mode & libc::S_IFMT {
            0 => libc::S_IFREG,
            t
            @ (libc::S_IFREG | libc::S_IFCHR | libc::S_IFBLK | libc::S_IFIFO | libc::S_IFSOCK) => t,
            libc::S_IFDIR => return err(libc::EPERM),
            _ => return err(libc::EINVAL),
        };
        if (t == libc::S_IFCHR || t == libc::S_IFBLK) && cred.uid != 0 && self.perms_on() {
            return err(libc::EPERM);
        }
        self.make(cred, parent, name, t | (mode & 0o7777), rdev, Vec::new())
    }

    fn perms_on(&self) -> bool {
        self.perms.load(Ordering::Relaxed)
    }

    /// Creates a directory.
    pub fn mkdir(&self, cred: &Cred, parent: u64, name: &[u8], mode: u32) -> FsResult<Attr> {
        self.make(
            cred,
            parent,
            name,
            libc::S_IFDIR | (mode & 0o7777),
            0,
            Vec::new(),
        )
    }

    /// Creates a symbolic link to `target`.
    pub fn symlink(&self, cred: &Cred, parent: u64, name: &[u8], target: &[u8]) -> FsResult<Attr> {
        if target.is_empty() {
            return err(libc::ENOENT);
        }
        if target.len() > PATH_MAX {
            return err(libc::ENAMETOOLONG);
        }
        self.make(
            cred,
            parent,
            name,
            libc::S_IFLNK | 0o777,
            0,
            target.to_vec(),
        )
    }

    /// The target of symbolic link `ino`.
    pub fn readlink(&self, ino: u64) -> FsResult<Vec<u8>> {
        let i = self.inode(ino)?;
        if i.attr.mode & libc::S_IFMT != libc::S_IFLNK {
            return err(libc::EINVAL);
        }
        Ok(i.data)
    }

    /// Adds a hard link `newname` in `newparent` to inode `ino` (not a directory).
    pub fn link(&self, cred: &Cred, ino: u64, newparent: u64, newname: &[u8]) -> FsResult<Attr> {
        check_new_name(newname)?;
        let _g = self.lock.lock();
        let mut tx = Tx::new();
        let mut i = self.tx_get(&mut tx, ino)?;
        if i.is_dir() {
            return err(libc::EPERM);
        }
        if i.attr.nlink == 0 {
            return err(libc::ENOENT);
        }
        let mut p = self.dir_for(cred, &mut tx, newparent, true)?;
        let dkey = dentry_key(newparent, PART, newname);
        if self.core().contains(&ikey(NS_FS, &dkey)) {
            return err(libc::EEXIST);
        }
        let now = now_ns();
        i.attr.nlink += 1;
        i.attr.ctime = now;
        p.attr.mtime = now;
        p.attr.ctime = now;
        let attr = i.attr.clone();
        tx.batch
            .put_ns(NS_FS, &dkey, &encode_dentry(ino, i.attr.mode));
        self.tx_put(&mut tx, i);
        self.tx_put(&mut tx, p);
        self.commit(tx)?;
        Ok(attr)
    }

    // ---- removing ----

    /// Removes the entry `name` (not a directory) from `parent`; the inode goes with its
    /// last link (or when it is last closed, if it is open).
    pub fn unlink(&self, cred: &Cred, parent: u64, name: &[u8]) -> FsResult<()> {
        check_name(name)?;
        let _g = self.lock.lock();
        let mut tx = Tx::new();
        let mut p = self.dir_for(cred, &mut tx, parent, true)?;
        let Some((ino, _)) = self.get_entry(parent, name)? else {
            return err(libc::ENOENT);
        };
        let i = self.tx_get(&mut tx, ino)?;
        if i.is_dir() {
            return err(libc::EISDIR);
        }
        self.check_sticky(cred, &p, &i)?;
        let now = now_ns();
        tx.batch.delete_ns(NS_FS, &dentry_key(parent, PART, name));
        self.drop_link(&mut tx, i, now)?;
        p.attr.mtime = now;
        p.attr.ctime = now;
        self.tx_put(&mut tx, p);
        tx.times_only = Some(parent);
        self.commit(tx)
    }

    /// A subdirectory moves from directory `from` to `to`: its `..` link moves too.
    fn move_subdir_link(&self, tx: &mut Tx, from: u64, to: u64) -> FsResult<()> {
        let mut f = self.tx_get(tx, from)?;
        f.attr.nlink -= 1;
        self.tx_put(tx, f);
        let mut t = self.tx_get(tx, to)?;
        t.attr.nlink += 1;
        self.tx_put(tx, t);
        Ok(())
    }

    fn check_sticky(&self, cred: &Cred, dir: &Inode, victim: &Inode) -> FsResult<()> {
        if self.perms_on()
            && dir.attr.mode & libc::S_ISVTX != 0
            && cred.uid != 0
            && cred.uid != dir.attr.uid
            && cred.uid != victim.attr.uid
        {
            return err(libc::EPERM);
        }
        Ok(())
    }

    fn is_empty_dir(&self, ino: u64) -> FsResult<bool> {
        match self.scan(&dentry_prefix(ino, PART), None).next() {
            None => Ok(true),
            Some(r) => r.map(|_| false).map_err(Errno::from),
        }
    }

    /// Removes the empty directory `name` from `parent`.
    pub fn rmdir(&self, cred: &Cred, parent: u64, name: &[u8]) -> FsResult<()> {
        check_name(name)?;
        if name == b"." {
            return err(libc::EINVAL);
        }
        if name == b".." {
            return err(libc::ENOTEMPTY);
        }
        let _g = self.lock.lock();
        let mut tx = Tx::new();
        let mut p = self.dir_for(cred, &mut tx, parent, true)?;
        let Some((ino, _)) = self.get_entry(parent, name)? else {
            return err(libc::ENOENT);
        };
        let i = self.tx_get(&mut tx, ino)?;
        if !i.is_dir() {
            return err(libc::ENOTDIR);
        }
        self.check_sticky(cred, &p, &i)?;
        if !self.is_empty_dir(ino)? {
            return err(libc::ENOTEMPTY);
        }
        let now = now_ns();
        tx.batch.delete_ns(NS_FS, &dentry_key(parent, PART, name));
        self.drop_link(&mut tx, i, now)?;
        p.attr.nlink = p.attr.nlink.saturating_sub(1);
        p.attr.mtime = now;
        p.attr.ctime = now;
        self.tx_put(&mut tx, p);
        self.commit(tx)
    }

    /// Whether directory `a` is `d` or one of its ancestors.
    fn is_ancestor(&self, tx: &mut Tx, a: u64, d: u64) -> FsResult<bool> {
        let mut cur = d;
        for _ in 0..1_000_000 {
            if cur == a {
                return Ok(true);
            }
            if cur == ROOT {
                return Ok(false);
            }
            cur = self.tx_get(tx, cur)?.parent;
        }
        err(libc::ELOOP)
    }

    /// Renames `name` in `parent` to `newname` in `newparent`, atomically, replacing
    /// the target if it exists (a directory only by an empty directory). `flags`:
    /// [`RENAME_NOREPLACE`], [`RENAME_EXCHANGE`].
    pub fn rename(
        &self,
        cred: &Cred,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: u32,
    ) -> FsResult<()> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE) != 0
            || flags == RENAME_NOREPLACE | RENAME_EXCHANGE
        {
            return err(libc::EINVAL);
        }
        check_name(name)?;
        check_name(newname)?;
        for n in [name, newname] {
            if n == b"." || n == b".." {
                return err(libc::EBUSY);
            }
        }
        let _g = self.lock.lock();
        let mut tx = Tx::new();
        self.dir_for(cred, &mut tx, parent, true)?;
        self.dir_for(cred, &mut tx, newparent, true)?;
        let Some((sino, _)) = self.get_entry(parent, name)? else {
            return err(libc::ENOENT);
        };
        let dst = self.get_entry(newparent, newname)?;
        let src = self.tx_get(&mut tx, sino)?;
        {
            let p = self.tx_get(&mut tx, parent)?;
            self.check_sticky(cred, &p, &src)?;
        }
        let now = now_ns();
        if flags & RENAME_EXCHANGE != 0 {
            let Some((dino, _)) = dst else {
                return err(libc::ENOENT);
            };
            if dino == sino {
                return Ok(());
            }
            let d = self.tx_get(&mut tx, dino)?;
            if src.is_dir() && parent != newparent && self.is_ancestor(&mut tx, sino, newparent)? {
                return err(libc::EINVAL);
            }
            if d.is_dir() && parent != newparent && self.is_ancestor(&mut tx, dino, parent)? {
                return err(libc::EINVAL);
            }
            tx.batch.put_ns(
                NS_FS,
                &dentry_key(parent, PART, name),
                &encode_dentry(dino, d.attr.mode),
            );
            tx.batch.put_ns(
                NS_FS,
                &dentry_key(newparent, PART, newname),
                &encode_dentry(sino, src.attr.mode),
            );
            let (mut s, mut d) = (src, d);
            if parent != newparent {
                if s.is_dir() {
                    s.parent = newparent;
                    self.move_subdir_link(&mut tx, parent, newparent)?;
                }
                if d.is_dir() {
                    d.parent = parent;
                    self.move_subdir_link(&mut tx, newparent, parent)?;
                }
            }
            s.attr.ctime = now;
            d.attr.ctime = now;
            self.tx_put(&mut tx, s);
            self.tx_put(&mut tx, d);
        } else {
            if let Some((dino, _)) = dst {
                if flags & RENAME_NOREPLACE != 0 {
                    return err(libc::EEXIST);
                }
                if dino == sino {
                    return Ok(());
                }
                let d = self.tx_get(&mut tx, dino)?;
                match (src.is_dir(), d.is_dir()) {
                    (true, false) => return err(libc::ENOTDIR),
                    (false, true) => return err(libc::EISDIR),
                    (true, true) if !self.is_empty_dir(dino)? => return err(libc::ENOTEMPTY),
                    _ => {}
                }
                let np = self.tx_get(&mut tx, newparent)?;
                self.check_sticky(cred, &np, &d)?;
            }
            if src.is_dir() && self.is_ancestor(&mut tx, sino, newparent)? {
                return err(libc::EINVAL);
            }
            if let Some((dino, _)) = dst {
                let d = self.tx_get(&mut tx, dino)?;
                if d.is_dir() {
                    let mut np = self.tx_get(&mut tx, newparent)?;
                    np.attr.nlink -= 1;
                    self.tx_put(&mut tx, np);
                }
                self.drop_link(&mut tx, d, now)?;
            }
            tx.batch.delete_ns(NS_FS, &dentry_key(parent, PART, name));
            tx.batch.put_ns(
                NS_FS,
                &dentry_key(newparent, PART, newname),
                &encode_dentry(sino, src.attr.mode),
            );
            let mut s = self.tx_get(&mut tx, sino)?;
            if s.is_dir() && parent != newparent {
                s.parent = newparent;
                self.move_subdir_link(&mut tx, parent, newparent)?;
            }
            s.attr.ctime = now;
            self.tx_put(&mut tx, s);
        }
        for d in [parent, newparent] {
            let mut p = self.tx_get(&mut tx, d)?;
            p.attr.mtime = now;
            p.attr.ctime = now;
            self.tx_put(&mut tx, p);
        }
        self.commit(tx)
    }

    // ---- directories ----

    /// Up to `limit` entries of directory `ino` in name order, after the name `after`
    /// (the cursor: the last name of the previous call; `None` to start). "." and ".."
    /// are not listed. A name that exists for the whole listing is returned exactly
    /// once, however the directory changes meanwhile; each call costs a scan of only
    /// the entries it returns.
    pub fn readdir(&self, ino: u64, after: Option<&[u8]>, limit: usize) -> FsResult<Vec<DirEntry>> {
        let i = self.inode(ino)?;
        if !i.is_dir() {
            return err(libc::ENOTDIR);
        }
        if after.is_none() {
            self.touch_atime(&i)?;
        }
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        for r in self.scan(&dentry_prefix(ino, PART), after) {
            let (name, v) = r?;
            let Some((ino, kind)) = decode_dentry(&v) else {
                return err(libc::EIO);
            };
            out.push(DirEntry { name, ino, kind });
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// Sets the access time of `seen` (as just read) to now if the `relatime` rule asks
    /// for it (see the module documentation).
    fn touch_atime(&self, seen: &Inode) -> FsResult<()> {
        const DAY_NS: i64 = 24 * 3600 * 1_000_000_000;
        let stale = |a: &Attr, now: i64| {
            a.atime <= a.mtime || a.atime <= a.ctime || now - a.atime >= DAY_NS
        };
        if !stale(&seen.attr, now_ns()) {
            return Ok(());
        }
        let _g = self.lock.lock();
        let mut tx = Tx::new();
        let mut i = match self.tx_get(&mut tx, seen.attr.ino) {
            Ok(i) => i,
            // Removed meanwhile: nothing to record.
            Err(Errno(libc::ENOENT)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let now = now_ns();
        if !stale(&i.attr, now) {
            return Ok(());
        }
        i.attr.atime = now;
        self.tx_put(&mut tx, i);
        self.commit(tx)
    }

    /// Checks that the caller may list directory `ino` (read permission).
    pub fn opendir(&self, cred: &Cred, ino: u64) -> FsResult<()> {
        let i = self.inode(ino)?;
        if !i.is_dir() {
            return err(libc::ENOTDIR);
        }
        self.check_access(cred, &i.attr, R)
    }

    /// Space and inode figures (of the disk the store is on).
    pub fn statfs(&self) -> FsResult<StatFs> {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(self.db.path().as_os_str().as_bytes())
            .map_err(|_| Errno(libc::EINVAL))?;
        // SAFETY: statvfs writes into a zeroed struct of the right type; `path` is a
        // NUL-terminated string that outlives the call.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
            return err(libc::EIO);
        }
        let f = st.f_frsize.max(1) as u64;
        let used = self.alloc.lock().next;
        Ok(StatFs {
            bsize: 4096,
            blocks: st.f_blocks as u64 * f / 4096,
            bfree: st.f_bfree as u64 * f / 4096,
            bavail: st.f_bavail as u64 * f / 4096,
            files: used + (1 << 40),
            ffree: 1 << 40,
            namelen: NAME_MAX as u32,
        })
    }

    // ---- data ----

    /// Opens file `ino` (`flags` as for open(2): the access mode is checked, `O_TRUNC`
    /// truncates). A file unlinked while open keeps its data until [`Fs::release`].
    pub fn open_file(&self, cred: &Cred, ino: u64, flags: i32) -> FsResult<Attr> {
        let i = self.inode(ino)?;
        let acc = flags & libc::O_ACCMODE;
        let mask = match acc {
            libc::O_RDONLY => R,
            libc::O_WRONLY => W,
            _ => R | W,
        };
        if i.is_dir() && (acc != libc::O_RDONLY || flags & libc::O_TRUNC != 0) {
            return err(libc::EISDIR);
        }
        self.check_access(cred, &i.attr, mask)?;
        if flags & libc::O_TRUNC != 0 && acc != libc::O_RDONLY && i.attr.size != 0 {
            self.setattr(
                cred,
                ino,
                &SetAttr {
                    size: Some(0),
                    ..Default::default()
                },
            )?;
        }
        *self.open.lock().entry(ino).or_insert(0) += 1;
        Ok(i.attr)
    }

    /// Closes what [`Fs::open_file`] opened; the last close of an unlinked file frees it.
    pub fn release(&self, ino: u64) -> FsResult<()> {
        let _g = self.lock.lock();
        let last = {
            let mut o = self.open.lock();
            match o.get_mut(&ino) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                Some(_) => {
                    o.remove(&ino);
                    true
                }
                None => false,
            }
        };
        if last {
            if let Some(i) = self.load(ino)? {
                if i.attr.nlink == 0 {
                    let mut tx = Tx::new();
                    self.free(&mut tx, ino, Some(i.flags))?;
                    tx.batch.delete_ns(NS_FS, &orphan_key(ino));
                    self.commit(tx)?;
                }
            }
        }
        Ok(())
    }

    fn read_chunk(&self, ino: u64, idx: u64) -> FsResult<Vec<u8>> {
        Ok(self
            .core()
            .get(&ikey(NS_FS, &chunk_key(ino, idx)))?
            .map(|v| v.into_vec())
            .unwrap_or_default())
    }

    /// Up to `size` bytes of file `ino` from `offset` (fewer at the end of the file).
    pub fn read(&self, ino: u64, offset: u64, size: usize) -> FsResult<Vec<u8>> {
        let i = self.inode(ino)?;
        if i.is_dir() {
            return err(libc::EISDIR);
        }
        self.touch_atime(&i)?;
        let end = (offset.saturating_add(size as u64)).min(i.attr.size);
        if offset >= end {
            return Ok(Vec::new());
        }
        if !i.chunked() {
            let e = (end as usize).min(i.data.len());
            let mut v = i.data[(offset as usize).min(e)..e].to_vec();
            v.resize((end - offset) as usize, 0);
            return Ok(v);
        }
        let mut out = vec![0u8; (end - offset) as usize];
        let mut pos = offset;
        while pos < end {
            let idx = pos / CHUNK_SIZE;
            let cstart = idx * CHUNK_SIZE;
            let cend = (cstart + CHUNK_SIZE).min(end);
            let c = self.read_chunk(ino, idx)?;
            let from = (pos - cstart) as usize;
            let to = (cend - cstart) as usize;
            if from < c.len() {
                let n = to.min(c.len());
                out[(pos - offset) as usize..(pos - offset) as usize + (n - from)]
                    .copy_from_slice(&c[from..n]);
            }
            pos = cend;
        }
        Ok(out)
    }

    /// Writes `data` at `offset` of file `ino` (extending it, with zeros in any gap);
    /// returns the bytes written. The data and the new size are one atomic batch.
    pub fn write(&self, ino: u64, offset: u64, data: &[u8]) -> FsResult<usize> {
        let _g = self.lock.lock();
        let mut tx = Tx::new();
        let mut i = self.tx_get(&mut tx, ino)?;
        if i.is_dir() {
            return err(libc::EISDIR);
        }
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|e| *e <= i64::MAX as u64)
            .ok_or(Errno(libc::EFBIG))?;
        let new_size = i.attr.size.max(end);
        if !i.chunked() && new_size <= INLINE_MAX as u64 {
            i.data.resize(new_size as usize, 0);
            i.data[offset as usize..end as usize].copy_from_slice(data);
        } else {
            let mut pending: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
            if !i.chunked() {
                // Move the inline data into chunk 0.
                if !i.data.is_empty() {
                    pending.insert(0, std::mem::take(&mut i.data));
                }
                i.flags |= FLAG_CHUNKED;
            }
            let mut pos = offset;
            while pos < end {
                let idx = pos / CHUNK_SIZE;
                let cstart = idx * CHUNK_SIZE;
                let cend = (cstart + CHUNK_SIZE).min(end);
                let c = match pending.remove(&idx) {
                    Some(c) => c,
                    None => self.read_chunk(ino, idx)?,
                };
                let mut c = c;
                let to = (cend - cstart) as usize;
                let from = (pos - cstart) as usize;
                if c.len() < to {
                    c.resize(to, 0);
                }
                c[from..to]
                    .copy_from_slice(&data[(pos - offset) as usize..(cend - offset) as usize]);
                pending.insert(idx, c);
                pos = cend;
            }
            for (idx, c) in pending {
                tx.batch.put_ns(NS_FS, &chunk_key(ino, idx), &c);
            }
        }
        let now = now_ns();
        i.attr.size = new_size;
        i.attr.mtime = now;
        i.attr.ctime = now;
        // Writing clears set-user-id (like the kernel's file_remove_privs).
        i.attr.mode &= !libc::S_ISUID;
        self.tx_put(&mut tx, i);
        self.commit(tx)?;
        Ok(data.len())
    }

    fn truncate_in(&self, tx: &mut Tx, i: &mut Inode, size: u64) -> FsResult<()> {
        let ino = i.attr.ino;
        if !i.chunked() {
            if size <= INLINE_MAX as u64 {
                i.data.resize(size as usize, 0);
            } else {
                let data = std::mem::take(&mut i.data);
                if !data.is_empty() {
                    tx.batch.put_ns(NS_FS, &chunk_key(ino, 0), &data);
                }
                i.flags |= FLAG_CHUNKED;
            }
        } else if size == 0 {
            for r in self.scan(&ino_prefix(TAG_CHUNK, ino), None) {
                let (k, _) = r?;
                tx.batch.delete_ns(
                    NS_FS,
                    &chunk_key(ino, u64::from_be_bytes(k[..8].try_into().unwrap())),
                );
            }
            i.flags &= !FLAG_CHUNKED;
            i.data.clear();
        } else if size < i.attr.size {
            let keep = size.div_ceil(CHUNK_SIZE);
            let p = ino_prefix(TAG_CHUNK, ino);
            let after = (keep.wrapping_sub(1)).to_be_bytes();
            let from = if keep == 0 { None } else { Some(&after[..]) };
            for r in self.scan(&p, from) {
                let (k, _) = r?;
                tx.batch.delete_ns(
                    NS_FS,
                    &chunk_key(ino, u64::from_be_bytes(k[..8].try_into().unwrap())),
                );
            }
            let last = keep - 1;
            let tail = (size - last * CHUNK_SIZE) as usize;
            let mut c = self.read_chunk(ino, last)?;
            if c.len() > tail {
                c.truncate(tail);
                tx.batch.put_ns(NS_FS, &chunk_key(ino, last), &c);
            }
        }
        i.attr.size = size;
        Ok(())
    }

    /// Makes every change made so far durable (the whole store is flushed).
    pub fn fsync(&self, _ino: u64) -> FsResult<()> {
        {
            let _g = self.lock.lock();
            self.write_dir_times()?;
        }
        self.core().flush()?;
        Ok(())
    }

    // ---- extended attributes ----

    fn check_xattr_name(name: &[u8]) -> FsResult<()> {
        if name.is_empty() || name.contains(&0) {
            return err(libc::EINVAL);
        }
        if name.len() > 255 {
            return err(libc::ERANGE);
        }
        Ok(())
    }

    /// The value of extended attribute `name` (`ENODATA` if absent).
    pub fn getxattr(&self, ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
        Self::check_xattr_name(name)?;
        self.inode(ino)?;
        match self.core().get(&ikey(NS_FS, &xattr_key(ino, name)))? {
            Some(v) => Ok(v.into_vec()),
            None => err(libc::ENODATA),
        }
    }

    /// Sets extended attribute `name` ([`XATTR_CREATE`], [`XATTR_REPLACE`] flags).
    pub fn setxattr(
        &self,
        cred: &Cred,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: u32,
    ) -> FsResult<()> {
        Self::check_xattr_name(name)?;
        if value.len() > 64 << 10 {
            return err(libc::E2BIG);
        }
        let _g = self.lock.lock();
        let mut tx = Tx::new();
        let mut i = self.tx_get(&mut tx, ino)?;
        self.xattr_perm(cred, &i, name)?;
        let k = xattr_key(ino, name);
        let exists = self.core().contains(&ikey(NS_FS, &k));
        if flags & XATTR_CREATE != 0 && exists {
            return err(libc::EEXIST);
        }
        if flags & XATTR_REPLACE != 0 && !exists {
            return err(libc::ENODATA);
        }
        let mut store = true;
        if name == b"system.posix_acl_access" {
            // As the kernel does for local file systems: the ACL sets the permission
            // bits, and one that the bits express fully is not kept.
            let (mode, minimal) = acl_mode(value)?;
            if self.perms_on() && cred.uid != 0 && cred.uid != i.attr.uid {
                return err(libc::EPERM);
            }
            i.attr.mode = (i.attr.mode & !0o777) | mode;
            if minimal {
                store = false;
                if exists {
                    tx.batch.delete_ns(NS_FS, &k);
                }
            }
        }
        if store {
            tx.batch.put_ns(NS_FS, &k, value);
            i.flags |= FLAG_XATTRS;
        }
        i.attr.ctime = now_ns();
        self.tx_put(&mut tx, i);
        self.commit(tx)
    }

    fn xattr_perm(&self, cred: &Cred, i: &Inode, name: &[u8]) -> FsResult<()> {
        if !self.perms_on() {
            return Ok(());
        }
        if name.starts_with(b"user.") {
            self.check_access(cred, &i.attr, W)
        } else if name.starts_with(b"trusted.") || name.starts_with(b"security.") {
            if cred.uid == 0 {
                Ok(())
            } else {
                err(libc::EPERM)
            }
        } else if cred.uid == 0 || cred.uid == i.attr.uid {
            Ok(())
        } else {
            err(libc::EPERM)
        }
    }

    /// The names of the extended attributes of `ino`.
    pub fn listxattr(&self, ino: u64) -> FsResult<Vec<Vec<u8>>> {
        self.inode(ino)?;
        self.scan(&ino_prefix(TAG_XATTR, ino), None)
            .map(|r| r.map(|(k, _)| k).map_err(Errno::from))
            .collect()
    }

    /// Removes extended attribute `name` (`ENODATA` if absent).
    pub fn removexattr(&self, cred: &Cred, ino: u64, name: &[u8]) -> FsResult<()> {
        Self::check_xattr_name(name)?;
        let _g = self.lock.lock();
        let mut tx = Tx::new();
        let mut i = self.tx_get(&mut tx, ino)?;
        self.xattr_perm(cred, &i, name)?;
        let k = xattr_key(ino, name);
        if !self.core().contains(&ikey(NS_FS, &k)) {
            return err(libc::ENODATA);
        }
        tx.batch.delete_ns(NS_FS, &k);
        i.attr.ctime = now_ns();
        self.tx_put(&mut tx, i);
        self.commit(tx)
    }

    // ---- consistency ----

    /// Checks the whole tree: every entry names an existing inode of its type, every
    /// inode is reachable (or a recorded orphan), link counts and parents match, and no
    /// chunk or attribute outlives its inode. Returns the problems found.
    pub fn check(&self) -> FsResult<CheckReport> {
        let mut problems = Vec::new();
        let mut inodes: BTreeMap<u64, Inode> = BTreeMap::new();
        for r in self.scan(&[TAG_INODE], None) {
            let (k, v) = r?;
            let ino = u64::from_be_bytes(k[..8].try_into().unwrap());
            inodes.insert(ino, Inode::decode(ino, &v)?);
        }
        let mut links: HashMap<u64, u32> = HashMap::new();
        let mut subdirs: HashMap<u64, u32> = HashMap::new();
        for r in self.scan(&[TAG_DENTRY], None) {
            let (k, v) = r?;
            let parent = u64::from_be_bytes(k[..8].try_into().unwrap());
            let name = String::from_utf8_lossy(&k[DENTRY_PREFIX_LEN - 1..]).into_owned();
            let Some((ino, kind)) = decode_dentry(&v) else {
                problems.push(format!("entry {parent}/{name}: bad value"));
                continue;
            };
            match inodes.get(&parent) {
                Some(p) if p.is_dir() => {}
                _ => problems.push(format!("entry {parent}/{name}: parent is not a directory")),
            }
            match inodes.get(&ino) {
                None => problems.push(format!("entry {parent}/{name}: inode {ino} missing")),
                Some(i) => {
                    if i.attr.mode & libc::S_IFMT != kind {
                        problems.push(format!("entry {parent}/{name}: type mismatch"));
                    }
                    if i.is_dir() {
                        *subdirs.entry(parent).or_default() += 1;
                        if i.parent != parent {
                            problems.push(format!(
                                "directory {ino}: parent {} but entry in {parent}",
                                i.parent
                            ));
                        }
                    }
                }
            }
            *links.entry(ino).or_default() += 1;
        }
        let orphans: std::collections::HashSet<u64> = self
            .scan(&[TAG_ORPHAN], None)
            .map(|r| r.map(|(k, _)| u64::from_be_bytes(k[..8].try_into().unwrap())))
            .collect::<Result<_, _>>()?;
        let lease = self
            .core()
            .get(&ikey(NS_FS, &lease_key()))?
            .map(|v| u64_at(&v, 0))
            .unwrap_or(ROOT + 1);
        for (ino, i) in &inodes {
            let n = links.get(ino).copied().unwrap_or(0);
            if *ino >= lease && *ino != ROOT {
                problems.push(format!("inode {ino}: beyond the leased numbers {lease}"));
            }
            if i.is_dir() {
                if *ino != ROOT && n != 1 {
                    problems.push(format!("directory {ino}: {n} entries"));
                }
                let want = 2 + subdirs.get(ino).copied().unwrap_or(0);
                if i.attr.nlink != want {
                    problems.push(format!(
                        "directory {ino}: nlink {} want {want}",
                        i.attr.nlink
                    ));
                }
            } else if n == 0 {
                if !orphans.contains(ino) {
                    problems.push(format!("inode {ino}: orphan (no entry)"));
                }
            } else if i.attr.nlink != n {
                problems.push(format!(
                    "inode {ino}: nlink {} but {n} entries",
                    i.attr.nlink
                ));
            }
            if !i.chunked() && i.data.len() as u64 != i.attr.size {
                problems.push(format!(
                    "inode {ino}: inline data {} size {}",
                    i.data.len(),
                    i.attr.size
                ));
            }
        }
        for tag in [TAG_CHUNK, TAG_XATTR] {
            for r in self.scan(&[tag], None) {
                let (k, v) = r?;
                let ino = u64::from_be_bytes(k[..8].try_into().unwrap());
                match inodes.get(&ino) {
                    None => problems.push(format!("{} row of missing inode {ino}", tag as char)),
                    Some(i) if tag == TAG_CHUNK => {
                        let idx = u64::from_be_bytes(k[8..16].try_into().unwrap());
                        if !i.chunked() || idx * CHUNK_SIZE + v.len() as u64 > i.attr.size {
                            problems.push(format!("inode {ino}: chunk {idx} beyond its size"));
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(problems)
    }
}
