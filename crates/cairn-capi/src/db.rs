//! Options, opening and closing a store, and single-key reads and writes.

use std::ffi::{c_char, CStr};
use std::time::Duration;

use cairn::{Db, Options, SyncPolicy};

use crate::cairn_status;
use crate::guard::{bytes, call, malloc_copy, Failure};

/// An open store (opaque). Thread-safe: any number of threads may use one at once.
pub struct cairn_db {
    pub(crate) db: Db,
}

/// Options for [`cairn_open`] (opaque): the defaults of `cairn::Options` until set.
pub struct cairn_options {
    opts: Options,
}

/// When writes reach the disk (`cairn_options_set_sync`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub enum cairn_sync_policy {
    /// Writes are durable only after `cairn_flush` (or a clean close); the default.
    CAIRN_SYNC_NEVER = 0,
    /// A background sync every `interval_ms` milliseconds.
    CAIRN_SYNC_EVERY = 1,
    /// Every write is durable when its call returns (group commit).
    CAIRN_SYNC_ALWAYS = 2,
}

/// New default options; free them with [`cairn_options_free`] (`cairn_open` does not
/// take them).
#[no_mangle]
pub extern "C" fn cairn_options_new() -> *mut cairn_options {
    Box::into_raw(Box::new(cairn_options {
        opts: Options::new(),
    }))
}

/// Frees options. Null is ignored.
///
/// # Safety
/// `opts` is null or from [`cairn_options_new`], not freed before.
#[no_mangle]
pub unsafe extern "C" fn cairn_options_free(opts: *mut cairn_options) {
    if !opts.is_null() {
        // SAFETY: the caller passes a pointer from cairn_options_new, once.
        drop(unsafe { Box::from_raw(opts) });
    }
}

/// Applies `f` to the options behind `opts`.
///
/// # Safety
/// `opts` is null or a live pointer from [`cairn_options_new`].
unsafe fn set(opts: *mut cairn_options, f: impl FnOnce(Options) -> Options) -> cairn_status {
    call(|| {
        // SAFETY: the caller's promise; null is checked.
        let o = unsafe { opts.as_mut() }.ok_or_else(|| Failure::invalid("options is null"))?;
        o.opts = f(std::mem::take(&mut o.opts));
        Ok(cairn_status::CAIRN_OK)
    })
}

/// Shards of a new store (ignored when the store exists).
///
/// # Safety
/// `opts` is null or a live pointer from [`cairn_options_new`].
#[no_mangle]
pub unsafe extern "C" fn cairn_options_set_shards(
    opts: *mut cairn_options,
    n: u32,
) -> cairn_status {
    // SAFETY: forwarded promise.
    unsafe { set(opts, |o| o.shards(n)) }
}

/// Largest segment file, in bytes.
///
/// # Safety
/// `opts` is null or a live pointer from [`cairn_options_new`].
#[no_mangle]
pub unsafe extern "C" fn cairn_options_set_segment_size(
    opts: *mut cairn_options,
    bytes: u64,
) -> cairn_status {
    // SAFETY: forwarded promise.
    unsafe { set(opts, |o| o.segment_size(bytes)) }
}

/// Largest size of the store on disk, in bytes (0: no limit); writes past it fail with
/// `CAIRN_STORAGE_FULL`.
///
/// # Safety
/// `opts` is null or a live pointer from [`cairn_options_new`].
#[no_mangle]
pub unsafe extern "C" fn cairn_options_set_max_size(
    opts: *mut cairn_options,
    bytes: u64,
) -> cairn_status {
    // SAFETY: forwarded promise.
    unsafe {
        set(opts, |o| {
            o.max_size(if bytes == 0 { u64::MAX } else { bytes })
        })
    }
}

/// When writes reach the disk; `interval_ms` is used by `CAIRN_SYNC_EVERY` only.
///
/// # Safety
/// `opts` is null or a live pointer from [`cairn_options_new`].
#[no_mangle]
pub unsafe extern "C" fn cairn_options_set_sync(
    opts: *mut cairn_options,
    policy: cairn_sync_policy,
    interval_ms: u64,
) -> cairn_status {
    let policy = match policy {
        cairn_sync_policy::CAIRN_SYNC_NEVER => SyncPolicy::Never,
        cairn_sync_policy::CAIRN_SYNC_EVERY => {
            SyncPolicy::Every(Duration::from_millis(interval_ms))
        }
        cairn_sync_policy::CAIRN_SYNC_ALWAYS => SyncPolicy::Always,
    };
    // SAFETY: forwarded promise.
    unsafe { set(opts, |o| o.sync(policy)) }
}

/// Whether background threads compact segments (default on).
///
/// # Safety
/// `opts` is null or a live pointer from [`cairn_options_new`].
#[no_mangle]
pub unsafe extern "C" fn cairn_options_set_background_compaction(
    opts: *mut cairn_options,
    on: bool,
) -> cairn_status {
    // SAFETY: forwarded promise.
    unsafe { set(opts, |o| o.background_compaction(on)) }
}

/// Opens the store read-only, following its writer (if `on`).
///
/// # Safety
/// `opts` is null or a live pointer from [`cairn_options_new`].
#[no_mangle]
pub unsafe extern "C" fn cairn_options_set_read_only(
    opts: *mut cairn_options,
    on: bool,
) -> cairn_status {
    // SAFETY: forwarded promise.
    unsafe { set(opts, |o| if on { o.read_only() } else { o }) }
}

/// Opens (creating if missing) the store in directory `path` (a NUL-terminated UTF-8
/// string) with `opts` (null: defaults; not taken, free them after). On success stores
/// the handle in `*out`; close it with [`cairn_close`].
///
/// # Safety
/// `path` is a NUL-terminated string; `opts` is null or live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_open(
    path: *const c_char,
    opts: *const cairn_options,
    out: *mut *mut cairn_db,
) -> cairn_status {
    call(|| {
        if path.is_null() || out.is_null() {
            return Err(Failure::invalid("path or out is null"));
        }
        // SAFETY: non-null and NUL-terminated by the caller's promise.
        let path = unsafe { CStr::from_ptr(path) }
            .to_str()
            .map_err(|_| Failure::invalid("path is not UTF-8"))?;
        // SAFETY: null or live by the caller's promise.
        let options = unsafe { opts.as_ref() }.map_or_else(Options::new, |o| o.opts.clone());
        let db = options.open(path)?;
        // SAFETY: `out` is non-null and writable by the caller's promise.
        unsafe { *out = Box::into_raw(Box::new(cairn_db { db })) };
        Ok(cairn_status::CAIRN_OK)
    })
}

/// Closes the store (flushing it) and frees the handle, whatever the status. Null is
/// ignored. No other thread may be using the handle.
///
/// # Safety
/// `db` is null or from [`cairn_open`], not closed before.
#[no_mangle]
pub unsafe extern "C" fn cairn_close(db: *mut cairn_db) -> cairn_status {
    if db.is_null() {
        return cairn_status::CAIRN_OK;
    }
    // SAFETY: the caller passes a pointer from cairn_open, once.
    let handle = unsafe { Box::from_raw(db) };
    call(move || Ok(handle.db.close().map(|()| cairn_status::CAIRN_OK)?))
}

/// The store behind `db`, or an error if null.
///
/// # Safety
/// `db` is null or a live handle from [`cairn_open`].
pub(crate) unsafe fn store<'a>(db: *const cairn_db) -> Result<&'a Db, Failure> {
    // SAFETY: the caller's promise.
    unsafe { db.as_ref() }
        .map(|d| &d.db)
        .ok_or_else(|| Failure::invalid("db is null"))
}

/// Reads the value of a key into the caller's buffer `buf` of `cap` bytes, storing its
/// length in `*len`. Returns `CAIRN_NOT_FOUND` if the key has no value, and
/// `CAIRN_BUFFER_TOO_SMALL` (with `*len` set, nothing copied) if it does not fit.
///
/// # Safety
/// `db` is live; `key` is valid for `key_len` bytes; `buf` for `cap` writable bytes (or
/// null with `cap` 0); `len` is writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_get(
    db: *const cairn_db,
    key: *const u8,
    key_len: usize,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises.
        let (db, key) = unsafe { (store(db)?, bytes(key, key_len, "key")?) };
        if len.is_null() || (buf.is_null() && cap > 0) {
            return Err(Failure::invalid(
                "len is null, or buf is null with a capacity",
            ));
        }
        let Some(v) = db.get(key)? else {
            return Ok(cairn_status::CAIRN_NOT_FOUND);
        };
        // SAFETY: `len` is non-null and writable.
        unsafe { *len = v.len() };
        if v.len() > cap {
            return Ok(cairn_status::CAIRN_BUFFER_TOO_SMALL);
        }
        // SAFETY: `buf` has `cap >= v.len()` writable bytes, apart from the value's.
        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), buf, v.len()) };
        Ok(cairn_status::CAIRN_OK)
    })
}

/// Reads the value of a key into a new buffer stored in `*value` (its length in
/// `*len`), to be freed with `cairn_free`. Returns `CAIRN_NOT_FOUND` if the key has no
/// value (then `*value` is null).
///
/// # Safety
/// `db` is live; `key` is valid for `key_len` bytes; `value` and `len` are writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_get_alloc(
    db: *const cairn_db,
    key: *const u8,
    key_len: usize,
    value: *mut *mut u8,
    len: *mut usize,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises.
        let (db, key) = unsafe { (store(db)?, bytes(key, key_len, "key")?) };
        if value.is_null() || len.is_null() {
            return Err(Failure::invalid("value or len is null"));
        }
        // SAFETY: both are non-null and writable.
        unsafe { *value = std::ptr::null_mut() };
        let Some(v) = db.get(key)? else {
            return Ok(cairn_status::CAIRN_NOT_FOUND);
        };
        let p = malloc_copy(&v)?;
        // SAFETY: both are non-null and writable.
        unsafe { (*value, *len) = (p, v.len()) };
        Ok(cairn_status::CAIRN_OK)
    })
}

/// Whether a key has a value: `CAIRN_OK` if so, `CAIRN_NOT_FOUND` if not.
///
/// # Safety
/// `db` is live; `key` is valid for `key_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cairn_contains(
    db: *const cairn_db,
    key: *const u8,
    key_len: usize,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises.
        let (db, key) = unsafe { (store(db)?, bytes(key, key_len, "key")?) };
        Ok(if db.contains(key)? {
            cairn_status::CAIRN_OK
        } else {
            cairn_status::CAIRN_NOT_FOUND
        })
    })
}

/// Sets the value of a key.
///
/// # Safety
/// `db` is live; `key` and `value` are valid for their lengths.
#[no_mangle]
pub unsafe extern "C" fn cairn_put(
    db: *const cairn_db,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises.
        let (db, key, value) = unsafe {
            (
                store(db)?,
                bytes(key, key_len, "key")?,
                bytes(value, value_len, "value")?,
            )
        };
        db.put(key, value)?;
        Ok(cairn_status::CAIRN_OK)
    })
}

/// Removes a key (no error if it had no value).
///
/// # Safety
/// `db` is live; `key` is valid for `key_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cairn_delete(
    db: *const cairn_db,
    key: *const u8,
    key_len: usize,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises.
        let (db, key) = unsafe { (store(db)?, bytes(key, key_len, "key")?) };
        db.delete(key)?;
        Ok(cairn_status::CAIRN_OK)
    })
}

/// Runs `f` on the store behind `db`.
///
/// # Safety
/// `db` is null or live.
unsafe fn on_store(db: *const cairn_db, f: impl FnOnce(&Db) -> cairn::Result<()>) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promise.
        f(unsafe { store(db)? })?;
        Ok(cairn_status::CAIRN_OK)
    })
}

/// Makes every write so far durable.
///
/// # Safety
/// `db` is live.
#[no_mangle]
pub unsafe extern "C" fn cairn_flush(db: *const cairn_db) -> cairn_status {
    // SAFETY: forwarded promise.
    unsafe { on_store(db, Db::flush) }
}

/// Compacts every segment with space to give back, now.
///
/// # Safety
/// `db` is live.
#[no_mangle]
pub unsafe extern "C" fn cairn_compact(db: *const cairn_db) -> cairn_status {
    // SAFETY: forwarded promise.
    unsafe { on_store(db, Db::compact) }
}

/// Gives back the space of overwritten and deleted records (whole segments dropped,
/// others compacted).
///
/// # Safety
/// `db` is live.
#[no_mangle]
pub unsafe extern "C" fn cairn_reclaim(db: *const cairn_db) -> cairn_status {
    // SAFETY: forwarded promise.
    unsafe { on_store(db, |d| d.reclaim().map(|_| ())) }
}
