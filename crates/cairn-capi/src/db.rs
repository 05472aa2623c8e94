//! Options, opening and closing a store, and single-key reads and writes.

use std::ffi::{c_char, CStr};
use std::time::Duration;

use cairn::{Db, Keyspace, Options, SyncPolicy};

use crate::cairn_status;
use crate::guard::{bytes, call, free_handle, hand_out, Failure};
use crate::read::{read_alloc, read_has, read_into};

/// An open store, or one keyspace of it (opaque). Thread-safe: any number of threads
/// may use one at once. Every read and write goes to its keyspace (0 for the handle
/// `cairn_open` gives, `id` for one from [`cairn_keyspace`]); flush, compaction, stats
/// and the file store are the whole store's.
pub struct cairn_db {
    pub(crate) ks: Keyspace,
    role: Role,
}

/// What closing a handle does.
enum Role {
    /// The handle of `cairn_open`: closing it closes the store.
    Store,
    /// A keyspace's handle: closing it only frees it.
    View,
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
    // SAFETY: the caller passes null or a pointer from cairn_options_new, once.
    unsafe { free_handle(opts) }
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

/// Fraction of a sealed segment's bytes that must be stale before compaction rewrites
/// it (in (0, 1], default 0.5); a value outside that range makes `cairn_open` fail with
/// `CAIRN_INVALID_ARGUMENT`.
///
/// # Safety
/// `opts` is null or a live pointer from [`cairn_options_new`].
#[no_mangle]
pub unsafe extern "C" fn cairn_options_set_compaction_threshold(
    opts: *mut cairn_options,
    fraction: f64,
) -> cairn_status {
    // SAFETY: forwarded promise.
    unsafe { set(opts, |o| o.compaction_threshold(fraction)) }
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
        let handle = cairn_db {
            ks: db.keyspace(0),
            role: Role::Store,
        };
        // SAFETY: `out` is writable by the caller's promise.
        unsafe { hand_out(out, handle) }
    })
}

/// A handle of keyspace `id` (0 to 255) of the store behind `db`, stored in `*out`: its
/// own keys, the same operations (keyspaces 1 to 3 belong to cairn's own layers; 1 is
/// the file store). Close it with [`cairn_close`], which frees the handle and leaves the
/// store open; it may not outlive the store's own handle.
///
/// # Safety
/// `db` is live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_keyspace(
    db: *const cairn_db,
    id: u8,
    out: *mut *mut cairn_db,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises.
        let ks = unsafe { store(db)? }.db().keyspace(id);
        // SAFETY: forwarded promise.
        unsafe {
            hand_out(
                out,
                cairn_db {
                    ks,
                    role: Role::View,
                },
            )
        }
    })
}

/// Frees the handle, whatever the status; for the handle of `cairn_open`, first closes
/// the store (flushing it; every keyspace handle of it then fails with `CAIRN_CLOSED`).
/// Null is ignored. No other thread may be using the handle.
///
/// # Safety
/// `db` is null or from [`cairn_open`] / [`cairn_keyspace`], not closed before.
#[no_mangle]
pub unsafe extern "C" fn cairn_close(db: *mut cairn_db) -> cairn_status {
    if db.is_null() {
        return cairn_status::CAIRN_OK;
    }
    // SAFETY: the caller passes a pointer from cairn_open or cairn_keyspace, once.
    let handle = unsafe { Box::from_raw(db) };
    call(move || match handle.role {
        Role::Store => Ok(handle
            .ks
            .db()
            .clone()
            .close()
            .map(|()| cairn_status::CAIRN_OK)?),
        Role::View => Ok(cairn_status::CAIRN_OK),
    })
}

/// The keyspace behind `db`, or an error if null.
///
/// # Safety
/// `db` is null or a live handle from [`cairn_open`] / [`cairn_keyspace`].
pub(crate) unsafe fn store<'a>(db: *const cairn_db) -> Result<&'a Keyspace, Failure> {
    // SAFETY: the caller's promise.
    unsafe { db.as_ref() }
        .map(|d| &d.ks)
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
    // SAFETY: forwarded promises.
    unsafe { read_into(|| store(db), (key, key_len), buf, cap, len) }
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
    // SAFETY: forwarded promises.
    unsafe { read_alloc(|| store(db), (key, key_len), value, len) }
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
    // SAFETY: forwarded promises.
    unsafe { read_has(|| store(db), (key, key_len)) }
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
        f(unsafe { store(db)? }.db())?;
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
