//! # cairn-fs
//!
//! A POSIX-style file system whose metadata and data are rows of a cairn store, after
//! TableFS: a directory entry is a row keyed by (parent inode, partition, name), every
//! inode has a row of its own with its attributes (and the data of a small file inline),
//! and larger files are split into chunk rows. Every change that touches several rows
//! is one atomic [`cairn::WriteBatch`], so a crash never leaves a dangling entry, an
//! orphan inode or a half rename.
//!
//! ```
//! use cairn_fs::{Cred, Fs, ROOT};
//! # let dir = tempfile::tempdir().unwrap();
//! let fs = Fs::open(dir.path())?;
//! let me = Cred::ROOT;
//! let d = fs.mkdir(&me, ROOT, b"docs", 0o755)?;
//! let f = fs.create(&me, d.ino, b"a.txt", 0o644)?;
//! fs.write(f.ino, 0, b"hello")?;
//! assert_eq!(fs.read(f.ino, 0, 100)?, b"hello");
//! let names: Vec<_> = fs.readdir(d.ino, None, 100)?.into_iter().map(|e| e.name).collect();
//! assert_eq!(names, vec![b"a.txt".to_vec()]);
//! # Ok::<(), cairn_fs::Errno>(())
//! ```
//!
//! Errors are errno values ([`Errno`]). One [`Fs`] value must own a store at a time (it
//! serializes the changes of the namespace with a lock of its own).
//!
//! Access times follow Linux's default `relatime` rule: a read of a file, or a listing
//! of a directory from its start, sets the access time when it is not newer than the
//! modification or change time, or is a day old; other reads write nothing.
//!
//! The rows live in keyspace [`KEYSPACE`] of the store and are reached only through the
//! engine's public API (`store` below). This crate must never depend on the file store
//! (`cairn-files`), the FUSE adapter, the cluster, the benchmarks or the CLI.

#![deny(missing_docs, clippy::unwrap_used, clippy::expect_used)]
#![forbid(unsafe_code)]

// The code is split by concern: `namespace` (entries: lookup, create, link, remove,
// rename, listing), `inode` (inode rows and the changes of an operation), `data` (file
// contents, inline or in chunks), `space` (fallocate and copy_file_range), `xattr`, `perm` (credentials and permission rules),
// `times` (clock, access times, deferred directory times), `check` (the consistency
// check), `layout` (row keys and encodings) and `store` (the only contact with the
// engine).

mod api;
mod check;
#[cfg(feature = "testsuite")]
pub mod conformance;
mod data;
mod errno;
mod inode;
mod layout;
mod namespace;
mod perm;
mod readahead;
pub mod rules;
mod space;
mod store;
mod times;
mod xattr;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use parking_lot::Mutex;

use cairn::{Db, Options};
use inode::{Inode, Tx};
use layout::{
    decode_be_u64, decode_lease, inode_key, lease_key, orphan_key, TAG_INODE, TAG_ORPHAN,
};
use store::{Batch, Rows};
use times::CachedDir;

pub use api::{DirEntryPlus, FileSystem, Invalidator, Validity};
pub use check::CheckReport;
pub use errno::{Errno, FsResult};
pub use inode::Attr;
pub use namespace::DirEntry;
pub use perm::{Cred, Groups, SetAttr, TimeSet};
pub use space::{FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE};
pub use times::now_ns;

/// The keyspace of a store that holds the file system's rows (see FORMAT.md).
pub const KEYSPACE: u8 = 2;

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

struct Alloc {
    next: u64,
    lease_end: u64,
}

/// The file system (see the module documentation).
///
/// Dropping it writes the deferred directory times and lets go of its store handle (the
/// store closes with its last handle, see [`cairn::Db::close`]); errors then can only be
/// logged. [`Fs::close`] does the same and returns them.
pub struct Fs {
    rows: Rows,
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
    /// Sequential readers of files and the chunks prefetched ahead of them.
    readahead: readahead::ReadAhead,
}

impl std::fmt::Debug for Fs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fs")
            .field("dir", &self.rows.db().path())
            .finish()
    }
}

impl Fs {
    /// Opens (creating if needed) a store at `dir` with default options. After a
    /// crash the store keeps a prefix of the changes made (the engine guarantees it), so
    /// an operation that depends on an earlier one never survives without it; `fsync`
    /// makes everything so far durable.
    pub fn open(dir: impl AsRef<Path>) -> FsResult<Fs> {
        let db = Fs::options().open(dir)?;
        Fs::new(db)
    }

    /// The engine options [`Fs::open`] opens a store with: the defaults, with the
    /// file system's inode rows declared numbered rows
    /// ([`cairn::Options::numbered_rows`]), which keeps them out of the ordered index,
    /// and in a store created with them routes them to shards by group of 64 inode
    /// numbers (recorded in the store). A store opened otherwise and given to
    /// [`Fs::new`] works the same, with more memory and CPU per inode.
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let db = cairn_fs::Fs::options().sync(cairn::SyncPolicy::Always).open(dir.path())?;
    /// let fs = cairn_fs::Fs::new(db)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn options() -> Options {
        Options::new().numbered_rows(KEYSPACE, TAG_INODE)
    }

    /// The file system in an open store, created (an empty root directory) if the
    /// store has none.
    pub fn new(db: Db) -> FsResult<Fs> {
        let rows = Rows::new(db);
        let lease = match rows.get(&lease_key())? {
            None => ROOT + 1,
            // A damaged lease can't say which numbers are free: refuse the store rather
            // than hand out a number in use (the root's, say).
            Some(v) => match decode_lease(&v) {
                Some(l) if l > ROOT => l,
                _ => {
                    log::error!("fs: damaged inode-number lease row: {:02x?}", &v[..]);
                    return Err(Errno(libc::EIO));
                }
            },
        };
        let fs = Fs {
            rows,
            lock: Mutex::new(()),
            alloc: Mutex::new(Alloc {
                next: lease,
                lease_end: lease,
            }),
            open: Mutex::new(HashMap::new()),
            perms: AtomicBool::new(true),
            dir_cache: Mutex::new(HashMap::new()),
            readahead: Default::default(),
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
            let mut b = Batch::new();
            b.put(&inode_key(ROOT), &root.encode());
            fs.rows.write(b, true)?;
            fs.rows.flush()?;
        }
        // Files unlinked while open when the last process ended are freed now. A
        // damaged orphan row names no inode: it is left for `check` to report (freeing
        // an orphan is only reclaiming space, so the file system opens without it).
        let mut orphans = Vec::new();
        for r in fs.rows.scan_prefix(&[TAG_ORPHAN], None) {
            let (k, _) = r?;
            match decode_be_u64(&k) {
                // Nor is a row that names the root or a linked file (its nlink is 0 in
                // the batch that writes its orphan row) trusted to free it.
                Some(ino)
                    if ino == ROOT || matches!(fs.load(ino), Ok(Some(i)) if i.attr.nlink > 0) =>
                {
                    log::error!("fs: orphan row of linked inode {ino}: left as is")
                }
                Some(ino) => orphans.push(ino),
                None => log::error!("fs: damaged orphan row, key O{k:02x?}: left as is"),
            }
        }
        for ino in orphans {
            let mut tx = Tx::new();
            fs.free(&mut tx, ino, None)?;
            tx.batch.delete(&orphan_key(ino));
            fs.commit(tx)?;
        }
        Ok(fs)
    }

    /// The underlying store.
    pub fn db(&self) -> &Db {
        self.rows.db()
    }

    /// Space and inode figures (of the disk the store is on).
    pub fn statfs(&self) -> FsResult<StatFs> {
        let st = rustix::fs::statvfs(self.rows.db().path()).map_err(|_| Errno(libc::EIO))?;
        let f = st.f_frsize.max(1);
        let used = self.alloc.lock().next;
        Ok(StatFs {
            bsize: 4096,
            blocks: st.f_blocks * f / 4096,
            bfree: st.f_bfree * f / 4096,
            bavail: st.f_bavail * f / 4096,
            files: used.saturating_add(1 << 40),
            ffree: 1 << 40,
            namelen: NAME_MAX as u32,
        })
    }
}
