//! File contents: open and release, reads, writes and truncation of data kept inline
//! in the inode row (up to [`INLINE_MAX`] bytes) or in chunk rows of [`CHUNK_SIZE`].

use std::collections::BTreeMap;

use super::errno::{err, Errno, FsResult};
use super::inode::{Attr, Inode, Tx};
use super::layout::{chunk_key, decode_be_u64, ino_prefix, orphan_key, FLAG_CHUNKED, TAG_CHUNK};
use super::perm::{Cred, SetAttr};
use super::rules;
use super::times::now_ns;
use super::{Fs, CHUNK_SIZE, INLINE_MAX};

/// The index of a chunk row of `ino` from its key without the inode prefix; `EIO` for
/// a damaged key (not 8 bytes).
fn chunk_index(ino: u64, k: &[u8]) -> FsResult<u64> {
    decode_be_u64(k).ok_or_else(|| {
        log::error!("fs: inode {ino}: damaged chunk row, key suffix {k:02x?}");
        Errno(libc::EIO)
    })
}

impl Fs {
    /// Opens file `ino` (`flags` as for open(2): the access mode is checked, `O_TRUNC`
    /// truncates). A file unlinked while open keeps its data until [`Fs::release`].
    pub fn open_file(&self, cred: &Cred, ino: u64, flags: i32) -> FsResult<Attr> {
        self.open_as(cred, ino, flags, false)
    }

    /// Opens file `ino` that `cred`'s own create has just made: as
    /// [`Fs::open_file`], but the file's owner is not checked against its mode (as
    /// `open(2)` with `O_CREAT` does not check a file it created).
    pub fn open_created(&self, cred: &Cred, ino: u64, flags: i32) -> FsResult<Attr> {
        self.open_as(cred, ino, flags, true)
    }

    fn open_as(&self, cred: &Cred, ino: u64, flags: i32, created: bool) -> FsResult<Attr> {
        let i = self.inode(ino)?;
        let checks = self.perms_on() && !(created && cred.uid == i.attr.uid);
        if rules::open_check(checks, cred, &i.attr, flags)? {
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
            self.readahead.forget(ino);
            if let Some(i) = self.load(ino)? {
                if i.attr.nlink == 0 {
                    let mut tx = Tx::new();
                    self.free(&mut tx, ino, Some(i.flags))?;
                    tx.batch.delete(&orphan_key(ino));
                    self.commit(tx)?;
                }
            }
        }
        Ok(())
    }

    /// `EACCES` unless `cred` may read or write (`mask`) the contents of `ino` by its
    /// number ([`rules::check_data_access`]); root, and every caller while the
    /// kernel checks permissions, pass without a look at the inode.
    pub(crate) fn check_data(&self, cred: &Cred, ino: u64, mask: u32) -> FsResult<()> {
        if !self.perms_on() || cred.uid == 0 {
            return Ok(());
        }
        rules::check_data_access(true, cred, &self.inode(ino)?.attr, mask)
    }

    fn read_chunk(&self, ino: u64, idx: u64) -> FsResult<Vec<u8>> {
        Ok(self
            .rows
            .get(&chunk_key(ino, idx))?
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
        // A file is at most i64::MAX long; a damaged row may say more, which is read no
        // further (chunk arithmetic stays well inside a u64).
        let end = (offset.saturating_add(size as u64))
            .min(i.attr.size)
            .min(i64::MAX as u64);
        if offset >= end {
            return Ok(Vec::new());
        }
        if !i.chunked() {
            let e = (end as usize).min(i.data.len());
            let mut v = i.data[(offset as usize).min(e)..e].to_vec();
            v.resize((end - offset) as usize, 0);
            return Ok(v);
        }
        let chunks = i.attr.size.div_ceil(CHUNK_SIZE);
        for idx in self
            .readahead
            .on_read(ino, offset / CHUNK_SIZE, (end - 1) / CHUNK_SIZE, chunks)
        {
            self.rows.prefetch(&chunk_key(ino, idx));
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
                tx.batch.put(&chunk_key(ino, idx), &c);
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

    pub(super) fn truncate_in(&self, tx: &mut Tx, i: &mut Inode, size: u64) -> FsResult<()> {
        let ino = i.attr.ino;
        if !i.chunked() {
            if size <= INLINE_MAX as u64 {
                i.data.resize(size as usize, 0);
            } else {
                let data = std::mem::take(&mut i.data);
                if !data.is_empty() {
                    tx.batch.put(&chunk_key(ino, 0), &data);
                }
                i.flags |= FLAG_CHUNKED;
            }
        } else if size == 0 {
            for r in self.rows.scan_prefix(&ino_prefix(TAG_CHUNK, ino), None) {
                let (k, _) = r?;
                tx.batch.delete(&chunk_key(ino, chunk_index(ino, &k)?));
            }
            i.flags &= !FLAG_CHUNKED;
            i.data.clear();
        } else if size < i.attr.size {
            let keep = size.div_ceil(CHUNK_SIZE);
            let p = ino_prefix(TAG_CHUNK, ino);
            let after = (keep.wrapping_sub(1)).to_be_bytes();
            let from = if keep == 0 { None } else { Some(&after[..]) };
            for r in self.rows.scan_prefix(&p, from) {
                let (k, _) = r?;
                tx.batch.delete(&chunk_key(ino, chunk_index(ino, &k)?));
            }
            let last = keep - 1;
            let tail = (size - last * CHUNK_SIZE) as usize;
            let mut c = self.read_chunk(ino, last)?;
            if c.len() > tail {
                c.truncate(tail);
                tx.batch.put(&chunk_key(ino, last), &c);
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
        self.rows.flush()?;
        Ok(())
    }
}
