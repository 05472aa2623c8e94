//! The namespace: directory entries (rows keyed by parent and name), lookups, the
//! calls that create, link, remove and rename entries, and directory listings.

use super::errno::{err, Errno, FsResult};
use super::inode::{Attr, Inode, Tx};
use super::layout::{decode_dentry, dentry_key, dentry_prefix, encode_dentry};
use super::perm::{Cred, R};
use super::rules;
use super::times::now_ns;
use super::{Fs, PATH_MAX, RENAME_EXCHANGE, RENAME_NOREPLACE, ROOT};

/// Partition of a directory's entries (GIGA+ splitting; always 0 for now).
const PART: u32 = 0;

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

use super::rules::{check_name, check_new_name};

impl Fs {
    /// The inode and type of entry `name` of `parent`; `EIO` for a damaged entry row
    /// (a value too short), which is not taken for a missing one.
    fn get_entry(&self, parent: u64, name: &[u8]) -> FsResult<Option<(u64, u32)>> {
        let Some(v) = self.rows.get(&dentry_key(parent, PART, name))? else {
            return Ok(None);
        };
        match decode_dentry(&v) {
            Some(e) => Ok(Some(e)),
            None => {
                log::error!("fs: directory {parent}: damaged entry row, value {v:02x?}");
                err(libc::EIO)
            }
        }
    }

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

    /// The parent directory of directory `ino` (the root's is itself).
    pub fn parent_of(&self, ino: u64) -> FsResult<u64> {
        let i = self.inode(ino)?;
        if !i.is_dir() {
            return err(libc::ENOTDIR);
        }
        Ok(i.parent)
    }

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
        // Whether the name is free is checked by the write itself (`put_new`), so the
        // name is looked up once (a cache miss in a large directory), not once here and
        // again by the insert. A create that finds the name taken has used an inode
        // number for nothing.
        let ino = self.alloc_ino()?;
        let now = now_ns();
        let is_dir = mode & libc::S_IFMT == libc::S_IFDIR;
        let (mode, gid) = rules::new_mode_gid(cred, &p.attr, mode);
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
            .put_new(&dkey, &encode_dentry(ino, mode & libc::S_IFMT));
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
        let t = rules::mknod_type(self.perms_on(), cred, mode)?;
        self.make(cred, parent, name, t | (mode & 0o7777), rdev, Vec::new())
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
        // The name's check is the write's (`put_new`), as for a create.
        let dkey = dentry_key(newparent, PART, newname);
        let now = now_ns();
        i.attr.nlink += 1;
        i.attr.ctime = now;
        p.attr.mtime = now;
        p.attr.ctime = now;
        let attr = i.attr.clone();
        tx.batch.put_new(&dkey, &encode_dentry(ino, i.attr.mode));
        self.tx_put(&mut tx, i);
        self.tx_put(&mut tx, p);
        self.commit(tx)?;
        Ok(attr)
    }

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
        tx.batch.delete(&dentry_key(parent, PART, name));
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
        f.attr.nlink = f.attr.nlink.saturating_sub(1);
        self.tx_put(tx, f);
        let mut t = self.tx_get(tx, to)?;
        t.attr.nlink += 1;
        self.tx_put(tx, t);
        Ok(())
    }

    fn is_empty_dir(&self, ino: u64) -> FsResult<bool> {
        match self
            .rows
            .scan_prefix(&dentry_prefix(ino, PART), None)
            .next()
        {
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
        tx.batch.delete(&dentry_key(parent, PART, name));
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
            tx.batch.put(
                &dentry_key(parent, PART, name),
                &encode_dentry(dino, d.attr.mode),
            );
            tx.batch.put(
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
                    np.attr.nlink = np.attr.nlink.saturating_sub(1);
                    self.tx_put(&mut tx, np);
                }
                self.drop_link(&mut tx, d, now)?;
            }
            tx.batch.delete(&dentry_key(parent, PART, name));
            tx.batch.put(
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
        for r in self.rows.scan_prefix(&dentry_prefix(ino, PART), after) {
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

    /// Checks that the caller may list directory `ino` (read permission).
    pub fn opendir(&self, cred: &Cred, ino: u64) -> FsResult<()> {
        let i = self.inode(ino)?;
        if !i.is_dir() {
            return err(libc::ENOTDIR);
        }
        self.check_access(cred, &i.attr, R)
    }
}
