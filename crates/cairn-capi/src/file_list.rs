//! What the file store knows of its files without reading them: one file's metadata
//! (`cairn_files_stat`, `cairn_file_reader_stat`), whether it exists, and the files in
//! key order with their metadata (`cairn_files_list`).

use std::time::UNIX_EPOCH;

use cairn_files::{FileIter, FileStat};

use crate::cairn_status;
use crate::db::cairn_db;
use crate::files::{files, reader};
use crate::guard::{bytes, call, found, free_handle, hand_out, Failure};

/// A file version's metadata, filled in by [`cairn_files_stat`],
/// [`cairn_file_reader_stat`] and [`cairn_file_list_next`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct cairn_file_stat {
    /// Length in bytes.
    pub size: u64,
    /// Number of chunks (0 for an empty file).
    pub chunks: u64,
    /// Chunk size the file was written with, in bytes.
    pub chunk_size: u64,
    /// BLAKE3 hash of the content (`cairn_files_put_content`'s key is its hex).
    pub hash: [u8; 32],
    /// When this version was committed, in nanoseconds since the Unix epoch (negative
    /// before it).
    pub created_ns: i64,
    /// The version's unique id (a new write of the key gets a new one), big-endian.
    pub version: [u8; 16],
}

impl From<&FileStat> for cairn_file_stat {
    fn from(s: &FileStat) -> Self {
        let ns = |d: std::time::Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        let created_ns = match s.created.duration_since(UNIX_EPOCH) {
            Ok(after) => ns(after),
            Err(before) => ns(before.duration()).saturating_neg(),
        };
        cairn_file_stat {
            size: s.size,
            chunks: s.chunks,
            chunk_size: s.chunk_size,
            hash: s.hash,
            created_ns,
            version: s.version.to_be_bytes(),
        }
    }
}

/// Writes `stat` to `out`.
///
/// # Safety
/// `out` is null (an error) or writable.
unsafe fn write_stat(out: *mut cairn_file_stat, stat: &FileStat) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::invalid("stat is null"));
    }
    // SAFETY: non-null and writable by the caller's promise.
    unsafe { *out = cairn_file_stat::from(stat) };
    Ok(())
}

/// The metadata of the file `key` in `*stat`: `CAIRN_OK`, or `CAIRN_NOT_FOUND` (and
/// `*stat` untouched) if there is no such file.
///
/// # Safety
/// `db` is live; `key` is valid for `key_len` bytes; `stat` is writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_files_stat(
    db: *const cairn_db,
    key: *const u8,
    key_len: usize,
    stat: *mut cairn_file_stat,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises.
        let (fs, key) = unsafe { (files(db)?, bytes(key, key_len, "key")?) };
        if stat.is_null() {
            return Err(Failure::invalid("stat is null"));
        }
        match fs.stat(key)? {
            Some(s) => {
                // SAFETY: forwarded promise.
                unsafe { write_stat(stat, &s)? };
                Ok(cairn_status::CAIRN_OK)
            }
            None => Ok(cairn_status::CAIRN_NOT_FOUND),
        }
    })
}

/// Whether the file `key` exists: `CAIRN_OK` if so, `CAIRN_NOT_FOUND` if not.
///
/// # Safety
/// `db` is live; `key` is valid for `key_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cairn_files_exists(
    db: *const cairn_db,
    key: *const u8,
    key_len: usize,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises.
        let (fs, key) = unsafe { (files(db)?, bytes(key, key_len, "key")?) };
        Ok(found(fs.exists(key)))
    })
}

/// The metadata of the version a reader reads, in `*stat`.
///
/// # Safety
/// `r` is live; `stat` is writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_file_reader_stat(
    r: *mut crate::files::cairn_file_reader,
    stat: *mut cairn_file_stat,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises.
        unsafe { write_stat(stat, reader(r)?.stat())? };
        Ok(cairn_status::CAIRN_OK)
    })
}

/// The files of a store whose key starts with a prefix, in key order or reverse, with
/// their metadata (opaque). One thread at a time; it may outlive neither its store nor
/// a `cairn_close` of it. Files committed or removed while it runs are seen or not, key
/// by key, as with a store's iterator.
pub struct cairn_file_list {
    items: Box<dyn Iterator<Item = cairn::Result<(Vec<u8>, FileStat)>> + Send>,
    /// The key last handed out, which the pointer given to the caller points into.
    current: Vec<u8>,
}

/// The files whose key starts with `prefix` (all of them for an empty prefix), in key
/// order or, if `reverse`, from the last back; stored in `*out`, to be freed with
/// [`cairn_file_list_free`].
///
/// # Safety
/// `db` is live; `prefix` is valid for `prefix_len` bytes (null if 0); `out` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_files_list(
    db: *const cairn_db,
    prefix: *const u8,
    prefix_len: usize,
    reverse: bool,
    out: *mut *mut cairn_file_list,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises.
        let (fs, prefix) = unsafe { (files(db)?, bytes(prefix, prefix_len, "prefix")?) };
        let it: FileIter = fs.list_prefix(prefix);
        let items: Box<dyn Iterator<Item = _> + Send> = if reverse {
            Box::new(it.rev())
        } else {
            Box::new(it)
        };
        let list = cairn_file_list {
            items,
            current: Vec::new(),
        };
        // SAFETY: forwarded promise.
        unsafe { hand_out(out, list) }
    })
}

/// Advances the list: `CAIRN_OK` with the next file's key in `*key`/`*key_len` (a
/// pointer into the list, valid until its next call or its free) and its metadata in
/// `*stat`, or `CAIRN_END` when there are no more, or an error.
///
/// # Safety
/// `list` is live; `key`, `key_len` and `stat` are writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_file_list_next(
    list: *mut cairn_file_list,
    key: *mut *const u8,
    key_len: *mut usize,
    stat: *mut cairn_file_stat,
) -> cairn_status {
    call(|| {
        // SAFETY: the caller's promise; null is checked.
        let l = unsafe { list.as_mut() }.ok_or_else(|| Failure::invalid("list is null"))?;
        if key.is_null() || key_len.is_null() || stat.is_null() {
            return Err(Failure::invalid("an out pointer is null"));
        }
        let Some(item) = l.items.next() else {
            return Ok(cairn_status::CAIRN_END);
        };
        let (k, s) = item?;
        l.current = k;
        // SAFETY: the three pointers are non-null and writable.
        unsafe {
            (*key, *key_len) = (l.current.as_ptr(), l.current.len());
            write_stat(stat, &s)?;
        }
        Ok(cairn_status::CAIRN_OK)
    })
}

/// Frees a file list. Null is ignored.
///
/// # Safety
/// `list` is null or from [`cairn_files_list`], not freed before.
#[no_mangle]
pub unsafe extern "C" fn cairn_file_list_free(list: *mut cairn_file_list) {
    // SAFETY: the caller passes null or a pointer from cairn_files_list, once.
    unsafe { free_handle(list) }
}
