//! Ranges of a file as wholes: `fallocate(2)` (allocate, keep the size, punch a hole) and
//! `copy_file_range(2)` done by the file system itself, so that the bytes never travel
//! to the caller and back. [`FileSystem`] gives every file system both in terms of its
//! other operations; [`Fs`] punches holes by deleting whole chunk rows.

use crate::errno::err;
use crate::layout::chunk_key;
use crate::{Attr, Cred, Errno, FileSystem, Fs, FsResult, SetAttr, CHUNK_SIZE};

/// `FALLOC_FL_KEEP_SIZE`: allocate (or punch) without changing the file's size.
pub const FALLOC_FL_KEEP_SIZE: i32 = libc::FALLOC_FL_KEEP_SIZE;
/// `FALLOC_FL_PUNCH_HOLE`: make a range read as zeros and free its space (with
/// [`FALLOC_FL_KEEP_SIZE`], as Linux requires).
pub const FALLOC_FL_PUNCH_HOLE: i32 = libc::FALLOC_FL_PUNCH_HOLE;

/// The largest piece a copy or a zeroing moves at once.
const PIECE: u64 = 1 << 20;

/// What a `fallocate` call asks for, once its arguments are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Falloc {
    /// Mode 0: the file is at least `end` bytes long afterwards.
    Extend { end: u64 },
    /// `FALLOC_FL_KEEP_SIZE`: space for the range, no visible change.
    Reserve,
    /// `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`: the range reads as zeros.
    Punch { offset: u64, end: u64 },
}

/// Checks the arguments of `fallocate` as Linux does: `EINVAL` for an empty or negative
/// range, `EFBIG` past the largest file, `EOPNOTSUPP` for modes cairn does not support
/// (zero range, collapse, insert, unshare) and for a punch without `KEEP_SIZE`.
pub(crate) fn check_falloc(offset: i64, len: i64, mode: i32) -> FsResult<Falloc> {
    if offset < 0 || len <= 0 {
        return err(libc::EINVAL);
    }
    let end = (offset as u64)
        .checked_add(len as u64)
        .filter(|e| *e <= i64::MAX as u64)
        .ok_or(Errno(libc::EFBIG))?;
    match mode {
        0 => Ok(Falloc::Extend { end }),
        FALLOC_FL_KEEP_SIZE => Ok(Falloc::Reserve),
        m if m == FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE => Ok(Falloc::Punch {
            offset: offset as u64,
            end,
        }),
        _ => err(libc::EOPNOTSUPP),
    }
}

/// The checks every file system makes before it allocates: a regular file, and (for
/// allocation) as much free space on the disk as the range asks for — a log-structured
/// store writes a chunk only when it is written, so this is the promise `fallocate`
/// makes (later writes in the range will not fail for lack of space) as far as a store
/// shared with other writers can keep it.
fn prepare<F: FileSystem + ?Sized>(fs: &F, ino: u64, what: Falloc, len: u64) -> FsResult<Attr> {
    let a = fs.getattr(ino)?;
    match a.mode & libc::S_IFMT {
        libc::S_IFREG => {}
        libc::S_IFDIR => return err(libc::EISDIR),
        _ => return err(libc::ENODEV),
    }
    if !matches!(what, Falloc::Punch { .. }) {
        let st = fs.statfs()?;
        if st.bavail.saturating_mul(st.bsize as u64) < len {
            return err(libc::ENOSPC);
        }
    }
    Ok(a)
}

/// `fallocate` through a [`FileSystem`]'s other operations (a punched range is written
/// as zeros).
pub(crate) fn fallocate_generic<F: FileSystem + ?Sized>(
    fs: &F,
    cred: &Cred,
    ino: u64,
    offset: i64,
    len: i64,
    mode: i32,
) -> FsResult<()> {
    let what = check_falloc(offset, len, mode)?;
    let a = prepare(fs, ino, what, len as u64)?;
    match what {
        Falloc::Reserve => Ok(()),
        Falloc::Extend { end } => extend(fs, cred, &a, end),
        Falloc::Punch { offset, end } => {
            let end = end.min(a.size);
            let mut pos = offset;
            while pos < end {
                let n = (end - pos).min(PIECE);
                fs.write(cred, ino, pos, &vec![0u8; n as usize])?;
                pos += n;
            }
            Ok(())
        }
    }
}

fn extend<F: FileSystem + ?Sized>(fs: &F, cred: &Cred, a: &Attr, end: u64) -> FsResult<()> {
    if end > a.size {
        fs.setattr(
            cred,
            a.ino,
            &SetAttr {
                size: Some(end),
                ..Default::default()
            },
        )?;
    }
    Ok(())
}

/// `copy_file_range` through a [`FileSystem`]'s reads and writes: up to `len` bytes of
/// `ino_in` from `off_in` to `ino_out` at `off_out`, in pieces of 1 MiB; returns the bytes
/// copied (fewer than `len` at the end of the source, 0 past it). Overlapping ranges of
/// one file are `EINVAL`, as in Linux.
pub(crate) fn copy_range_generic<F: FileSystem + ?Sized>(
    fs: &F,
    cred: &Cred,
    ino_in: u64,
    off_in: u64,
    ino_out: u64,
    off_out: u64,
    len: u64,
) -> FsResult<u64> {
    let src = fs.getattr(ino_in)?;
    let dst = fs.getattr(ino_out)?;
    if src.mode & libc::S_IFMT == libc::S_IFDIR || dst.mode & libc::S_IFMT == libc::S_IFDIR {
        return err(libc::EISDIR);
    }
    if src.mode & libc::S_IFMT != libc::S_IFREG || dst.mode & libc::S_IFMT != libc::S_IFREG {
        return err(libc::EINVAL);
    }
    let n = len.min(src.size.saturating_sub(off_in));
    off_out
        .checked_add(n)
        .filter(|e| *e <= i64::MAX as u64)
        .ok_or(Errno(libc::EFBIG))?;
    if ino_in == ino_out && off_in < off_out + n && off_out < off_in + n {
        return err(libc::EINVAL);
    }
    let mut done = 0;
    while done < n {
        let piece = fs.read(cred, ino_in, off_in + done, (n - done).min(PIECE) as usize)?;
        if piece.is_empty() {
            break; // the source shrank meanwhile
        }
        fs.write(cred, ino_out, off_out + done, &piece)?;
        done += piece.len() as u64;
    }
    Ok(done)
}

impl Fs {
    /// `fallocate(2)` on file `ino`: mode 0 makes the file at least `offset + len` bytes
    /// long (the new bytes read as zeros); [`FALLOC_FL_KEEP_SIZE`] changes nothing
    /// visible; both fail with `ENOSPC` when the disk has less free space than the range.
    /// `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE` makes the range read as zeros and
    /// frees the chunks it covers whole (the partial chunks at its ends are rewritten).
    /// Other modes are `EOPNOTSUPP`.
    ///
    /// ```
    /// use cairn_fs::{Cred, Fs, ROOT, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let fs = Fs::open(dir.path())?;
    /// let f = fs.create(&Cred::ROOT, ROOT, b"f", 0o644)?;
    /// fs.fallocate(&Cred::ROOT, f.ino, 0, 1 << 20, 0)?;
    /// assert_eq!(fs.getattr(f.ino)?.size, 1 << 20);
    /// fs.write(f.ino, 0, &[7u8; 300_000])?;
    /// fs.fallocate(&Cred::ROOT, f.ino, 1000, 200_000, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)?;
    /// assert_eq!(fs.read(f.ino, 999, 3)?, [7, 0, 0]);
    /// assert_eq!(fs.read(f.ino, 200_999, 2)?, [0, 7]);
    /// # Ok::<(), cairn_fs::Errno>(())
    /// ```
    pub fn fallocate(
        &self,
        cred: &Cred,
        ino: u64,
        offset: i64,
        len: i64,
        mode: i32,
    ) -> FsResult<()> {
        let what = check_falloc(offset, len, mode)?;
        let a = prepare(self, ino, what, len as u64)?;
        match what {
            Falloc::Reserve => Ok(()),
            Falloc::Extend { end } => extend(self, cred, &a, end),
            Falloc::Punch { offset, end } => self.punch(ino, offset, end),
        }
    }

    /// Zeros `[offset, end)` of `ino` (clipped to its size): whole chunks are deleted
    /// (a missing chunk reads as zeros), the partial ones at the ends are zeroed in part;
    /// one atomic batch with the new times.
    fn punch(&self, ino: u64, offset: u64, end: u64) -> FsResult<()> {
        let _g = self.lock.lock();
        let mut tx = crate::inode::Tx::new();
        let mut i = self.tx_get(&mut tx, ino)?;
        let end = end.min(i.attr.size);
        if offset >= end {
            return Ok(());
        }
        if !i.chunked() {
            let e = (end as usize).min(i.data.len());
            let s = (offset as usize).min(e);
            i.data[s..e].fill(0);
        } else {
            let mut pos = offset;
            while pos < end {
                let idx = pos / CHUNK_SIZE;
                let cstart = idx * CHUNK_SIZE;
                let cend = (cstart + CHUNK_SIZE).min(end);
                let key = chunk_key(ino, idx);
                if pos == cstart && (cend == cstart + CHUNK_SIZE || cend == i.attr.size) {
                    tx.batch.delete(&key);
                } else if let Some(v) = self.rows.get(&key)? {
                    let mut c = v.into_vec();
                    let from = ((pos - cstart) as usize).min(c.len());
                    let to = ((cend - cstart) as usize).min(c.len());
                    c[from..to].fill(0);
                    tx.batch.put(&key, &c);
                }
                pos = cend;
            }
        }
        let now = crate::now_ns();
        i.attr.mtime = now;
        i.attr.ctime = now;
        self.tx_put(&mut tx, i);
        self.commit(tx)
    }

    /// `copy_file_range(2)` inside the store: up to `len` bytes of `ino_in` from
    /// `off_in` to `ino_out` at `off_out`; returns the bytes copied (0 past the end of
    /// the source). Overlapping ranges of one file are `EINVAL`. No caller is
    /// checked: this is the embedding process's own call (the [`FileSystem`] one
    /// checks its caller).
    pub fn copy_range(
        &self,
        ino_in: u64,
        off_in: u64,
        ino_out: u64,
        off_out: u64,
        len: u64,
    ) -> FsResult<u64> {
        copy_range_generic(self, &Cred::ROOT, ino_in, off_in, ino_out, off_out, len)
    }
}
