//! The file store (keyspace 1 of a store: files of any size under byte-string keys,
//! written in a stream and committed atomically, read with seeks) and the stats of the
//! store and of the file store, as JSON.

use std::ffi::c_char;
use std::io::{Read, Seek, SeekFrom, Write};

use cairn_files::{FileReader, FileStore, FileWriter};

use crate::cairn_status;
use crate::db::{cairn_db, store};
use crate::guard::{bytes, call, found, free_handle, get_alloc, hand_out, malloc_copy, Failure};

/// The file store of the store behind `db` (any of its handles).
///
/// # Safety
/// `db` is null or live.
pub(crate) unsafe fn files(db: *const cairn_db) -> Result<FileStore, Failure> {
    // SAFETY: forwarded promise.
    Ok(FileStore::new(unsafe { store(db)? }.db())?)
}

/// An I/O error of a file stream, as a status.
fn io_failure(e: &std::io::Error) -> Failure {
    Failure(cairn_status::CAIRN_IO, e.to_string())
}

/// Stores `text` NUL-terminated in a new buffer at `*out`, for `cairn_free`.
///
/// # Safety
/// `out` is null (an error) or writable.
unsafe fn hand_out_text(out: *mut *mut c_char, text: &str) -> Result<cairn_status, Failure> {
    if out.is_null() {
        return Err(Failure::invalid("out is null"));
    }
    let mut z = text.as_bytes().to_vec();
    z.push(0);
    let p = malloc_copy(&z)?;
    // SAFETY: non-null and writable.
    unsafe { *out = p.cast() };
    Ok(cairn_status::CAIRN_OK)
}

/// The store's size and amplification figures (`cairn::Stats`: totals, shards,
/// keyspaces, snapshots) as a NUL-terminated JSON object in a new buffer at `*json`,
/// freed with `cairn_free`.
///
/// # Safety
/// `db` is live; `json` is writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_stats_json(
    db: *const cairn_db,
    json: *mut *mut c_char,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promise.
        let stats = unsafe { store(db)? }.db().stats();
        let text = serde_json::to_string(&stats).map_err(|e| Failure::invalid(e.to_string()))?;
        // SAFETY: forwarded promise.
        unsafe { hand_out_text(json, &text) }
    })
}

/// The file store's totals (`cairn_files::FileStats`) as JSON, as [`cairn_stats_json`].
///
/// # Safety
/// `db` is live; `json` is writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_files_stats_json(
    db: *const cairn_db,
    json: *mut *mut c_char,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promise.
        let stats = unsafe { files(db)? }.stats()?;
        let text = serde_json::to_string(&stats).map_err(|e| Failure::invalid(e.to_string()))?;
        // SAFETY: forwarded promise.
        unsafe { hand_out_text(json, &text) }
    })
}

/// Stores `data` as the file `key`, replacing any previous version atomically.
///
/// # Safety
/// `db` is live; `key` and `data` are valid for their lengths.
#[no_mangle]
pub unsafe extern "C" fn cairn_files_put(
    db: *const cairn_db,
    key: *const u8,
    key_len: usize,
    data: *const u8,
    data_len: usize,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises.
        let (fs, key, data) = unsafe {
            (
                files(db)?,
                bytes(key, key_len, "key")?,
                bytes(data, data_len, "data")?,
            )
        };
        fs.put(key, data)?;
        Ok(cairn_status::CAIRN_OK)
    })
}

/// Stores `data` under the hex BLAKE3 hash of its content (stored once however often it
/// is put), and hands that key out NUL-terminated in a new buffer at `*key`, freed with
/// `cairn_free`.
///
/// # Safety
/// `db` is live; `data` is valid for `data_len` bytes; `key` is writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_files_put_content(
    db: *const cairn_db,
    data: *const u8,
    data_len: usize,
    key: *mut *mut c_char,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises.
        let (fs, data) = unsafe { (files(db)?, bytes(data, data_len, "data")?) };
        let hex = fs.put_content(data)?;
        // SAFETY: forwarded promise.
        unsafe { hand_out_text(key, &hex) }
    })
}

/// The whole content of the file `key` in a new buffer at `*data` (its length in
/// `*len`), freed with `cairn_free`; `CAIRN_NOT_FOUND` (and `*data` null) if there is no
/// such file.
///
/// # Safety
/// `db` is live; `key` is valid for `key_len` bytes; `data` and `len` are writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_files_read(
    db: *const cairn_db,
    key: *const u8,
    key_len: usize,
    data: *mut *mut u8,
    len: *mut usize,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises.
        let (fs, key) = unsafe { (files(db)?, bytes(key, key_len, "key")?) };
        // SAFETY: forwarded promises.
        unsafe { get_alloc(data, len, || Ok(fs.read(key)?)) }
    })
}

/// Removes the file `key`: `CAIRN_OK` if it existed, `CAIRN_NOT_FOUND` if not.
///
/// # Safety
/// `db` is live; `key` is valid for `key_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cairn_files_remove(
    db: *const cairn_db,
    key: *const u8,
    key_len: usize,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises.
        let (fs, key) = unsafe { (files(db)?, bytes(key, key_len, "key")?) };
        Ok(found(fs.remove(key)?))
    })
}

/// A new version of a file, written in a stream (opaque): nothing of it is visible until
/// [`cairn_file_commit`]. One thread at a time.
pub struct cairn_file_writer {
    w: FileWriter,
}

/// Begins a new version of the file `key`, stored in `*out`; end it with
/// [`cairn_file_commit`] or [`cairn_file_abort`].
///
/// # Safety
/// `db` is live; `key` is valid for `key_len` bytes; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_file_create(
    db: *const cairn_db,
    key: *const u8,
    key_len: usize,
    out: *mut *mut cairn_file_writer,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises.
        unsafe {
            let w = files(db)?.create(bytes(key, key_len, "key")?)?;
            hand_out(out, cairn_file_writer { w })
        }
    })
}

/// Appends `data` to the new version.
///
/// # Safety
/// `w` is live; `data` is valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cairn_file_write(
    w: *mut cairn_file_writer,
    data: *const u8,
    len: usize,
) -> cairn_status {
    call(|| {
        // SAFETY: the caller's promises; null is checked.
        let (w, data) = unsafe {
            (
                w.as_mut()
                    .ok_or_else(|| Failure::invalid("writer is null"))?,
                bytes(data, len, "data")?,
            )
        };
        w.w.write_all(data).map_err(|e| io_failure(&e))?;
        Ok(cairn_status::CAIRN_OK)
    })
}

/// Commits the new version atomically (replacing any earlier one) and frees the writer,
/// whatever the status; on an error nothing of it is visible.
///
/// # Safety
/// `w` is from [`cairn_file_create`], not ended before.
#[no_mangle]
pub unsafe extern "C" fn cairn_file_commit(w: *mut cairn_file_writer) -> cairn_status {
    if w.is_null() {
        return call(|| Err(Failure::invalid("writer is null")));
    }
    // SAFETY: the caller passes a pointer from cairn_file_create, once.
    let w = unsafe { Box::from_raw(w) };
    call(move || {
        w.w.commit()?;
        Ok(cairn_status::CAIRN_OK)
    })
}

/// Drops what was written and frees the writer. Null is ignored.
///
/// # Safety
/// `w` is null or from [`cairn_file_create`], not ended before.
#[no_mangle]
pub unsafe extern "C" fn cairn_file_abort(w: *mut cairn_file_writer) {
    // SAFETY: the caller passes null or a pointer from cairn_file_create, once; dropping
    // an uncommitted writer aborts it.
    unsafe { free_handle(w) }
}

/// A committed version of a file, readable and seekable (opaque); it keeps reading the
/// version it opened even if the file is overwritten or removed meanwhile. One thread at
/// a time.
pub struct cairn_file_reader {
    r: FileReader,
}

/// Opens the file `key` for reading, stored in `*out` (free it with
/// [`cairn_file_reader_free`]); `CAIRN_NOT_FOUND` if there is no such file.
///
/// # Safety
/// `db` is live; `key` is valid for `key_len` bytes; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_file_open(
    db: *const cairn_db,
    key: *const u8,
    key_len: usize,
    out: *mut *mut cairn_file_reader,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises.
        unsafe {
            match files(db)?.open(bytes(key, key_len, "key")?)? {
                Some(r) => hand_out(out, cairn_file_reader { r }),
                None => Ok(cairn_status::CAIRN_NOT_FOUND),
            }
        }
    })
}

/// The reader behind `r`.
///
/// # Safety
/// `r` is null or live.
pub(crate) unsafe fn reader<'a>(r: *mut cairn_file_reader) -> Result<&'a mut FileReader, Failure> {
    // SAFETY: the caller's promise.
    unsafe { r.as_mut() }
        .map(|r| &mut r.r)
        .ok_or_else(|| Failure::invalid("reader is null"))
}

/// Reads up to `cap` bytes at the reader's position into `buf`, the count in `*n` (0 at
/// the end of the file), and moves the position past them.
///
/// # Safety
/// `r` is live; `buf` is valid for `cap` writable bytes; `n` is writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_file_reader_read(
    r: *mut cairn_file_reader,
    buf: *mut u8,
    cap: usize,
    n: *mut usize,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promise.
        let r = unsafe { reader(r)? };
        if n.is_null() || (buf.is_null() && cap > 0) {
            return Err(Failure::invalid(
                "n is null, or buf is null with a capacity",
            ));
        }
        let got = if cap == 0 {
            0
        } else {
            // SAFETY: non-null and valid for `cap` writable bytes by the caller's promise.
            let out = unsafe { std::slice::from_raw_parts_mut(buf, cap) };
            r.read(out).map_err(|e| io_failure(&e))?
        };
        // SAFETY: non-null and writable.
        unsafe { *n = got };
        Ok(cairn_status::CAIRN_OK)
    })
}

/// Moves the reader to byte `offset` from the start of the file.
///
/// # Safety
/// `r` is live.
#[no_mangle]
pub unsafe extern "C" fn cairn_file_reader_seek(
    r: *mut cairn_file_reader,
    offset: u64,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promise.
        let r = unsafe { reader(r)? };
        r.seek(SeekFrom::Start(offset))
            .map_err(|e| io_failure(&e))?;
        Ok(cairn_status::CAIRN_OK)
    })
}

/// The size of the file version the reader reads, in bytes (0 for null).
///
/// # Safety
/// `r` is null or live.
#[no_mangle]
pub unsafe extern "C" fn cairn_file_reader_size(r: *const cairn_file_reader) -> u64 {
    // SAFETY: the caller's promise.
    unsafe { r.as_ref() }.map_or(0, |r| r.r.len())
}

/// Frees a reader. Null is ignored.
///
/// # Safety
/// `r` is null or from [`cairn_file_open`], not freed before.
#[no_mangle]
pub unsafe extern "C" fn cairn_file_reader_free(r: *mut cairn_file_reader) {
    // SAFETY: the caller passes null or a pointer from cairn_file_open, once.
    unsafe { free_handle(r) }
}
