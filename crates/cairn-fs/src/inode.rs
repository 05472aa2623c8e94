//! Inode rows: attributes, their encoding, loading, and the changes of one
//! operation ([`Tx`]) applied as one batch; inode numbers; freeing an inode.

use std::collections::BTreeMap;

use super::errno::{err, Errno, FsResult};
use super::layout::{
    ino_prefix, inode_key, lease_key, orphan_key, u32_at, u64_at, FLAG_CHUNKED, FLAG_XATTRS,
    INODE_HEADER, TAG_CHUNK, TAG_XATTR,
};
use super::store::Batch;
use super::times::{CachedDir, DIR_CACHE_MAX, DIR_TIMES_EVERY};
use super::Fs;

/// Inode numbers reserved per durable lease-row update.
const LEASE: u64 = 4096;

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

#[derive(Clone, Debug)]
pub(super) struct Inode {
    pub(super) attr: Attr,
    pub(super) flags: u8,
    /// Parent directory of a directory (0 for other types).
    pub(super) parent: u64,
    /// Inline data (or a symbolic link's target).
    pub(super) data: Vec<u8>,
}

impl Inode {
    pub(super) fn encode(&self) -> Vec<u8> {
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

    pub(super) fn decode(ino: u64, b: &[u8]) -> FsResult<Inode> {
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

    pub(super) fn is_dir(&self) -> bool {
        self.attr.is_dir()
    }

    pub(super) fn chunked(&self) -> bool {
        self.flags & FLAG_CHUNKED != 0
    }
}

/// Changes of one operation: inodes read and modified, applied as one batch.
pub(super) struct Tx {
    pub(super) inodes: BTreeMap<u64, Option<Inode>>,
    pub(super) batch: Batch,
    /// A directory whose only change is its times (a file created in it or removed
    /// from it): its row may be written later (see `Fs::dir_cache`).
    pub(super) times_only: Option<u64>,
}

impl Tx {
    pub(super) fn new() -> Tx {
        Tx {
            inodes: BTreeMap::new(),
            batch: Batch::new(),
            times_only: None,
        }
    }
}

impl Fs {
    pub(super) fn load(&self, ino: u64) -> FsResult<Option<Inode>> {
        if let Some(d) = self.dir_cache.lock().get(&ino) {
            return Ok(Some(d.inode.clone()));
        }
        match self.rows.get(&inode_key(ino))? {
            Some(v) => Ok(Some(Inode::decode(ino, &v)?)),
            None => Ok(None),
        }
    }

    pub(super) fn inode(&self, ino: u64) -> FsResult<Inode> {
        self.load(ino)?.ok_or(Errno(libc::ENOENT))
    }

    /// The attributes of inode `ino`.
    pub fn getattr(&self, ino: u64) -> FsResult<Attr> {
        Ok(self.inode(ino)?.attr)
    }

    pub(super) fn tx_get(&self, tx: &mut Tx, ino: u64) -> FsResult<Inode> {
        if let Some(i) = tx.inodes.get(&ino) {
            return i.clone().ok_or(Errno(libc::ENOENT));
        }
        let i = self.inode(ino)?;
        tx.inodes.insert(ino, Some(i.clone()));
        Ok(i)
    }

    pub(super) fn tx_put(&self, tx: &mut Tx, i: Inode) {
        tx.inodes.insert(i.attr.ino, Some(i));
    }

    /// Applies `tx`: the rows of the inodes it changed and its other changes, as one
    /// synced batch, but for a directory whose times alone changed while its row is not
    /// due (see `Fs::dir_cache`); then brings the directory cache up to date.
    pub(super) fn commit(&self, mut tx: Tx) -> FsResult<()> {
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
                    tx.batch.put(&inode_key(*ino), &i.encode());
                }
                None => {
                    tx.batch.delete(&inode_key(*ino));
                }
            }
        }
        let res = self.rows.write(tx.batch, true);
        if let Err(cairn::Error::KeyExists { .. }) = res {
            // A name that had to be new was taken: nothing was written, nothing cached
            // changed.
            return Err(Errno(libc::EEXIST));
        }
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

    pub(super) fn alloc_ino(&self) -> FsResult<u64> {
        let mut a = self.alloc.lock();
        if a.next >= a.lease_end {
            // Only a damaged lease row comes near the end of the numbers.
            let end = a.next.checked_add(LEASE).ok_or(Errno(libc::ENOSPC))?;
            // No sync needed: a change using a number from this lease is written after
            // it, and the store keeps a prefix of its writes after a crash.
            self.rows.put(&lease_key(), &end.to_le_bytes(), false)?;
            a.lease_end = end;
        }
        let ino = a.next;
        a.next += 1;
        Ok(ino)
    }

    /// Deletes an inode's row and everything hanging off it (chunks, attributes).
    /// `flags`: the inode's flags if known (only the rows they say exist are looked
    /// for), else every kind is.
    pub(super) fn free(&self, tx: &mut Tx, ino: u64, flags: Option<u8>) -> FsResult<()> {
        tx.inodes.insert(ino, None);
        let f = flags.unwrap_or(FLAG_CHUNKED | FLAG_XATTRS);
        for (tag, flag) in [(TAG_CHUNK, FLAG_CHUNKED), (TAG_XATTR, FLAG_XATTRS)] {
            if f & flag == 0 {
                continue;
            }
            let p = ino_prefix(tag, ino);
            for r in self.rows.scan_prefix(&p, None) {
                let (k, _) = r?;
                let mut full = p.clone();
                full.extend_from_slice(&k);
                tx.batch.delete(&full);
            }
        }
        Ok(())
    }

    /// Drops one link of `i` (already in `tx`); frees it, or marks it an orphan if it
    /// is open, when it was the last.
    pub(super) fn drop_link(&self, tx: &mut Tx, mut i: Inode, now: i64) -> FsResult<()> {
        i.attr.nlink = if i.is_dir() {
            0
        } else {
            i.attr.nlink.saturating_sub(1)
        };
        i.attr.ctime = now;
        let ino = i.attr.ino;
        if i.attr.nlink == 0 {
            if self.open.lock().get(&ino).copied().unwrap_or(0) > 0 {
                tx.batch.put(&orphan_key(ino), &[]);
                self.tx_put(tx, i);
            } else {
                self.free(tx, ino, Some(i.flags))?;
            }
        } else {
            self.tx_put(tx, i);
        }
        Ok(())
    }
}
