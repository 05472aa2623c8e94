//! [`FileSystem`]: the operations of a POSIX-style namespace, as one trait, so that the
//! FUSE adapter and the tests serve or check a local [`Fs`] and a remote namespace (the
//! cluster's client) the same way. Errors are Linux errnos ([`Errno`]).
//!
//! A file system that holds leases on what it answers (a cluster's client) says how long
//! the kernel of a mount may keep each answer ([`Validity`], through
//! [`FileSystem::entry_validity`] and [`FileSystem::attr_validity`]), and makes the
//! kernel forget an answer whose lease was revoked through the mount's [`Invalidator`].

use std::sync::Arc;
use std::time::Duration;

use crate::{Attr, Cred, DirEntry, FsResult, SetAttr, StatFs};
#[allow(unused_imports)]
use crate::{Errno, Fs};

/// How long the kernel may keep an answer of the file system: an entry (a name's inode,
/// or that the name does not exist) or a file's attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validity {
    /// As long as the mount's options say (its entry, attribute and negative timeouts).
    Configured,
    /// Exactly this long (say, what is left of a lease the file system holds); zero: not kept.
    For(Duration),
}

/// An entry of a listing with what the file system knows of its inode
/// ([`FileSystem::readdir_plus`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntryPlus {
    /// The entry.
    pub entry: DirEntry,
    /// Its inode's attributes, if the listing had them at hand.
    pub attr: Option<Attr>,
    /// How long the kernel may keep the entry (the name's inode).
    pub entry_valid: Validity,
    /// How long the kernel may keep the attributes.
    pub attr_valid: Validity,
}

impl DirEntryPlus {
    /// `entry` alone: no attributes, nothing for the kernel to keep.
    pub fn bare(entry: DirEntry) -> DirEntryPlus {
        DirEntryPlus {
            entry,
            attr: None,
            entry_valid: Validity::For(Duration::ZERO),
            attr_valid: Validity::For(Duration::ZERO),
        }
    }
}

/// Makes a mount's kernel forget what it cached. A mount hands one to its file system
/// ([`FileSystem::set_invalidator`]) once it serves requests. Calls may come from any thread, at
/// the same time; each returns once the kernel has forgotten (or had nothing to forget). They
/// must not be made from inside a request of the same mount on the same directory (the kernel
/// holds that directory's lock while the request is served).
pub trait Invalidator: Send + Sync {
    /// Forget the entry `name` of directory `parent` (found or absent).
    fn entry(&self, parent: u64, name: &[u8]);
    /// Forget the attributes of `ino` and the data it cached of it.
    fn inode(&self, ino: u64);
}

/// The operations of a file system, by inode number. [`Fs`] implements it on a local
/// store; `cairn_cluster::Client` on a cluster of metadata servers.
pub trait FileSystem: Send + Sync {
    /// The entry `name` of directory `parent` (search permission on `parent` needed).
    fn lookup(&self, cred: &Cred, parent: u64, name: &[u8]) -> FsResult<Attr>;

    /// The attributes of `ino`.
    fn getattr(&self, ino: u64) -> FsResult<Attr>;

    /// Changes the attributes of `ino` as `s` says (chmod, chown, truncate, utimens rules).
    fn setattr(&self, cred: &Cred, ino: u64, s: &SetAttr) -> FsResult<Attr>;

    /// Creates the regular file `name` in `parent` (EEXIST if the name is taken).
    fn create(&self, cred: &Cred, parent: u64, name: &[u8], mode: u32) -> FsResult<Attr>;

    /// Creates a node of the type in `mode` (regular, FIFO, socket, device).
    fn mknod(&self, cred: &Cred, parent: u64, name: &[u8], mode: u32, rdev: u32) -> FsResult<Attr>;

    /// Creates the directory `name` in `parent`.
    fn mkdir(&self, cred: &Cred, parent: u64, name: &[u8], mode: u32) -> FsResult<Attr>;

    /// Creates the symbolic link `name` in `parent` pointing to `target`.
    fn symlink(&self, cred: &Cred, parent: u64, name: &[u8], target: &[u8]) -> FsResult<Attr>;

    /// The target of the symbolic link `ino` (no permission of the link's own is
    /// checked, as on Linux).
    fn readlink(&self, cred: &Cred, ino: u64) -> FsResult<Vec<u8>>;

    /// Adds the hard link `newname` in `newparent` to `ino`.
    fn link(&self, cred: &Cred, ino: u64, newparent: u64, newname: &[u8]) -> FsResult<Attr>;

    /// Removes the non-directory entry `name` of `parent`.
    fn unlink(&self, cred: &Cred, parent: u64, name: &[u8]) -> FsResult<()>;

    /// Removes the empty directory `name` of `parent`.
    fn rmdir(&self, cred: &Cred, parent: u64, name: &[u8]) -> FsResult<()>;

    /// Moves `parent/name` to `newparent/newname` atomically (`flags`: `RENAME_NOREPLACE`, `RENAME_EXCHANGE`).
    fn rename(
        &self,
        cred: &Cred,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: u32,
    ) -> FsResult<()>;

    /// Checks that `cred` may list directory `ino`.
    fn opendir(&self, cred: &Cred, ino: u64) -> FsResult<()>;

    /// Up to `limit` entries of directory `ino` after the entry named `after` (from the start with `None`), without `.` and `..`, in an order of the implementation's choosing that a listing resumed after any name returned keeps.
    /// `cred` needs read permission on the directory, or to own it ([`crate::rules::check_data_access`]).
    fn readdir(
        &self,
        cred: &Cred,
        ino: u64,
        after: Option<&[u8]>,
        limit: usize,
    ) -> FsResult<Vec<DirEntry>>;

    /// Whether listings should carry the entries' attributes ([`FileSystem::readdir_plus`]):
    /// a mount then asks its kernel for `READDIRPLUS`, so that a listing followed by a
    /// stat of each entry (`ls -l`, `du`) costs no request per entry. `false` by default.
    fn lists_attributes(&self) -> bool {
        false
    }

    /// As [`FileSystem::readdir`], with the attributes of the entries the file system
    /// has at hand and how long the kernel may keep each entry and its attributes. An
    /// entry without attributes is listed only (the kernel looks it up if it needs
    /// more). By default, [`FileSystem::readdir`]'s entries without attributes.
    fn readdir_plus(
        &self,
        cred: &Cred,
        ino: u64,
        after: Option<&[u8]>,
        limit: usize,
    ) -> FsResult<Vec<DirEntryPlus>> {
        Ok(self
            .readdir(cred, ino, after, limit)?
            .into_iter()
            .map(DirEntryPlus::bare)
            .collect())
    }

    /// The parent of directory `ino` (the root is its own parent).
    fn parent_of(&self, ino: u64) -> FsResult<u64>;

    /// Opens `ino` with `open(2)` `flags` (access checked, `O_TRUNC` applied).
    fn open_file(&self, cred: &Cred, ino: u64, flags: i32) -> FsResult<Attr>;

    /// Opens `ino`, which `cred`'s own create has just made, as `open(2)` with
    /// `O_CREAT` does: the access mode is not checked against the new file's mode (a
    /// file created read-only may be written through this open). Only the file's
    /// owner may open it so; anyone else is checked as by [`FileSystem::open_file`].
    fn open_created(&self, cred: &Cred, ino: u64, flags: i32) -> FsResult<Attr>;

    /// Creates file `name` in `parent` and opens it as `open(2)` with `O_CREAT` does
    /// ([`FileSystem::create`], then [`FileSystem::open_created`] with `flags`): the
    /// attributes after the open. A file system that can do both in one step (a
    /// cluster's client, in one request) overrides it.
    fn create_open(
        &self,
        cred: &Cred,
        parent: u64,
        name: &[u8],
        mode: u32,
        flags: i32,
    ) -> FsResult<Attr> {
        let a = self.create(cred, parent, name, mode)?;
        self.open_created(cred, a.ino, flags)
    }

    /// Closes one open of `ino` that `cred` made.
    fn release(&self, cred: &Cred, ino: u64) -> FsResult<()>;

    /// Up to `size` bytes of `ino` from `offset` (fewer at the end). `cred`: the
    /// caller that opened the file, checked by [`crate::rules::check_data_access`].
    fn read(&self, cred: &Cred, ino: u64, offset: u64, size: usize) -> FsResult<Vec<u8>>;

    /// Writes `data` at `offset` of `ino`. `cred`: the caller that opened the file,
    /// checked by [`crate::rules::check_data_access`].
    fn write(&self, cred: &Cred, ino: u64, offset: u64, data: &[u8]) -> FsResult<usize>;

    /// Makes the changes of `ino` (and everything acknowledged before) durable.
    fn fsync(&self, ino: u64) -> FsResult<()>;

    /// The extended attribute `name` of `ino` ([`crate::rules::xattr_read_access`]).
    fn getxattr(&self, cred: &Cred, ino: u64, name: &[u8]) -> FsResult<Vec<u8>>;

    /// Sets the extended attribute `name` (`flags`: `XATTR_CREATE`, `XATTR_REPLACE`).
    fn setxattr(
        &self,
        cred: &Cred,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: u32,
    ) -> FsResult<()>;

    /// The names of the extended attributes of `ino` that `cred` may see
    /// ([`crate::rules::xattr_listed`]); `E2BIG` past [`crate::rules::XATTR_LIST_MAX`] bytes.
    fn listxattr(&self, cred: &Cred, ino: u64) -> FsResult<Vec<Vec<u8>>>;

    /// Removes the extended attribute `name` of `ino`.
    fn removexattr(&self, cred: &Cred, ino: u64, name: &[u8]) -> FsResult<()>;

    /// Space and inode figures.
    fn statfs(&self) -> FsResult<StatFs>;

    /// `fallocate(2)` on file `ino` (see [`Fs::fallocate`] for the modes). By default
    /// through the other operations: a punched range is written as zeros.
    fn fallocate(&self, cred: &Cred, ino: u64, offset: i64, len: i64, mode: i32) -> FsResult<()> {
        crate::space::fallocate_generic(self, cred, ino, offset, len, mode)
    }

    /// `copy_file_range(2)` inside the file system: up to `len` bytes of `ino_in` from
    /// `off_in` to `ino_out` at `off_out`; returns the bytes copied (see
    /// [`Fs::copy_range`]). By default through reads and writes of 1 MiB.
    fn copy_range(
        &self,
        cred: &Cred,
        ino_in: u64,
        off_in: u64,
        ino_out: u64,
        off_out: u64,
        len: u64,
    ) -> FsResult<u64> {
        crate::space::copy_range_generic(self, cred, ino_in, off_in, ino_out, off_out, len)
    }

    /// Whether the file system checks permissions itself (else the kernel does).
    fn set_permission_checks(&self, on: bool);

    /// How long the kernel may keep the entry `parent`/`name` that a call on this thread just
    /// answered (a lookup, found or absent; a create, mknod, mkdir, symlink or link of it).
    fn entry_validity(&self, _parent: u64, _name: &[u8]) -> Validity {
        Validity::Configured
    }

    /// How long the kernel may keep the attributes of `ino` that a call on this thread just
    /// answered.
    fn attr_validity(&self, _ino: u64) -> Validity {
        Validity::Configured
    }

    /// Hands the file system its mount's [`Invalidator`] (called once, when the mount starts
    /// serving).
    fn set_invalidator(&self, _inv: Arc<dyn Invalidator>) {}

    /// The requests this file system has sent to others to serve the calls so far, by
    /// kind (a cluster's client: its requests to the servers, such as `("LOOKUP", 12)`);
    /// empty for one that serves its calls itself, as [`Fs`] does.
    fn requests_sent(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Closes the file system, writing what it deferred, and returns the first error
    /// (a drop can only log it).
    fn close(self: Box<Self>) -> FsResult<()>;
}

impl FileSystem for Fs {
    fn lookup(&self, cred: &Cred, parent: u64, name: &[u8]) -> FsResult<Attr> {
        Fs::lookup(self, cred, parent, name)
    }

    fn getattr(&self, ino: u64) -> FsResult<Attr> {
        Fs::getattr(self, ino)
    }

    fn setattr(&self, cred: &Cred, ino: u64, s: &SetAttr) -> FsResult<Attr> {
        Fs::setattr(self, cred, ino, s)
    }

    fn create(&self, cred: &Cred, parent: u64, name: &[u8], mode: u32) -> FsResult<Attr> {
        Fs::create(self, cred, parent, name, mode)
    }

    fn mknod(&self, cred: &Cred, parent: u64, name: &[u8], mode: u32, rdev: u32) -> FsResult<Attr> {
        Fs::mknod(self, cred, parent, name, mode, rdev)
    }

    fn mkdir(&self, cred: &Cred, parent: u64, name: &[u8], mode: u32) -> FsResult<Attr> {
        Fs::mkdir(self, cred, parent, name, mode)
    }

    fn symlink(&self, cred: &Cred, parent: u64, name: &[u8], target: &[u8]) -> FsResult<Attr> {
        Fs::symlink(self, cred, parent, name, target)
    }

    fn readlink(&self, _cred: &Cred, ino: u64) -> FsResult<Vec<u8>> {
        Fs::readlink(self, ino)
    }

    fn link(&self, cred: &Cred, ino: u64, newparent: u64, newname: &[u8]) -> FsResult<Attr> {
        Fs::link(self, cred, ino, newparent, newname)
    }

    fn unlink(&self, cred: &Cred, parent: u64, name: &[u8]) -> FsResult<()> {
        Fs::unlink(self, cred, parent, name)
    }

    fn rmdir(&self, cred: &Cred, parent: u64, name: &[u8]) -> FsResult<()> {
        Fs::rmdir(self, cred, parent, name)
    }

    fn rename(
        &self,
        cred: &Cred,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: u32,
    ) -> FsResult<()> {
        Fs::rename(self, cred, parent, name, newparent, newname, flags)
    }

    fn opendir(&self, cred: &Cred, ino: u64) -> FsResult<()> {
        Fs::opendir(self, cred, ino)
    }

    fn readdir(
        &self,
        cred: &Cred,
        ino: u64,
        after: Option<&[u8]>,
        limit: usize,
    ) -> FsResult<Vec<DirEntry>> {
        self.check_data(cred, ino, crate::rules::MAY_READ)?;
        Fs::readdir(self, ino, after, limit)
    }

    fn parent_of(&self, ino: u64) -> FsResult<u64> {
        Fs::parent_of(self, ino)
    }

    fn open_file(&self, cred: &Cred, ino: u64, flags: i32) -> FsResult<Attr> {
        Fs::open_file(self, cred, ino, flags)
    }

    fn open_created(&self, cred: &Cred, ino: u64, flags: i32) -> FsResult<Attr> {
        Fs::open_created(self, cred, ino, flags)
    }

    fn release(&self, _cred: &Cred, ino: u64) -> FsResult<()> {
        Fs::release(self, ino)
    }

    fn read(&self, cred: &Cred, ino: u64, offset: u64, size: usize) -> FsResult<Vec<u8>> {
        self.check_data(cred, ino, crate::rules::MAY_READ)?;
        Fs::read(self, ino, offset, size)
    }

    fn write(&self, cred: &Cred, ino: u64, offset: u64, data: &[u8]) -> FsResult<usize> {
        self.check_data(cred, ino, crate::rules::MAY_WRITE)?;
        Fs::write(self, ino, offset, data)
    }

    fn fsync(&self, ino: u64) -> FsResult<()> {
        Fs::fsync(self, ino)
    }

    fn fallocate(&self, cred: &Cred, ino: u64, offset: i64, len: i64, mode: i32) -> FsResult<()> {
        Fs::fallocate(self, cred, ino, offset, len, mode)
    }

    fn getxattr(&self, cred: &Cred, ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
        Fs::getxattr_as(self, cred, ino, name)
    }

    fn setxattr(
        &self,
        cred: &Cred,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: u32,
    ) -> FsResult<()> {
        Fs::setxattr(self, cred, ino, name, value, flags)
    }

    fn listxattr(&self, cred: &Cred, ino: u64) -> FsResult<Vec<Vec<u8>>> {
        Fs::listxattr_as(self, cred, ino)
    }

    fn removexattr(&self, cred: &Cred, ino: u64, name: &[u8]) -> FsResult<()> {
        Fs::removexattr(self, cred, ino, name)
    }

    fn statfs(&self) -> FsResult<StatFs> {
        Fs::statfs(self)
    }

    fn set_permission_checks(&self, on: bool) {
        Fs::set_permission_checks(self, on)
    }

    fn close(self: Box<Self>) -> FsResult<()> {
        Fs::close(*self)
    }
}
