//! Ordered iteration.

use std::ops::Bound;

use cairn::{Iter, Value};

use crate::cairn_status;
use crate::db::{cairn_db, store};
use crate::guard::{bytes, call, Failure};

/// An iterator over key-value pairs in key order or reverse (opaque). One thread at a
/// time; it may outlive neither its store nor a `cairn_close` of it. Writes made while
/// it runs are seen or not, key by key, as with `cairn::Db::iter`.
pub struct cairn_iter {
    iter: Iter,
    reverse: bool,
    /// The item last handed out, which the pointers given to the caller point into.
    current: Option<(Vec<u8>, Value)>,
}

fn make(iter: Iter, reverse: bool, out: *mut *mut cairn_iter) -> Result<cairn_status, Failure> {
    if out.is_null() {
        return Err(Failure::invalid("out is null"));
    }
    let it = Box::new(cairn_iter {
        iter,
        reverse,
        current: None,
    });
    // SAFETY: `out` is non-null and writable by the caller's promise.
    unsafe { *out = Box::into_raw(it) };
    Ok(cairn_status::CAIRN_OK)
}

/// An iterator over the keys from `start` (inclusive) to `end` (exclusive), in key
/// order or, if `reverse`, from the end down. A null `start` (or `end`) means no bound
/// on that side. Stored in `*out`; free it with [`cairn_iter_free`].
///
/// # Safety
/// `db` is live; `start` and `end` are null or valid for their lengths; `out` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_iter_range(
    db: *const cairn_db,
    start: *const u8,
    start_len: usize,
    end: *const u8,
    end_len: usize,
    reverse: bool,
    out: *mut *mut cairn_iter,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promise.
        let db = unsafe { store(db)? };
        let bound = |p: *const u8, len: usize, what: &str| -> Result<Option<Vec<u8>>, Failure> {
            if p.is_null() {
                return Ok(None);
            }
            // SAFETY: non-null, valid for `len` bytes by the caller's promise.
            Ok(Some(unsafe { bytes(p, len, what)? }.to_vec()))
        };
        let lo = bound(start, start_len, "start")?.map_or(Bound::Unbounded, Bound::Included);
        let hi = bound(end, end_len, "end")?.map_or(Bound::Unbounded, Bound::Excluded);
        make(db.range::<Vec<u8>, _>((lo, hi)), reverse, out)
    })
}

/// An iterator over the keys that start with `prefix`, in key order or reverse. Stored
/// in `*out`; free it with [`cairn_iter_free`].
///
/// # Safety
/// `db` is live; `prefix` is valid for `prefix_len` bytes; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_iter_prefix(
    db: *const cairn_db,
    prefix: *const u8,
    prefix_len: usize,
    reverse: bool,
    out: *mut *mut cairn_iter,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises.
        let (db, prefix) = unsafe { (store(db)?, bytes(prefix, prefix_len, "prefix")?) };
        make(db.prefix(prefix), reverse, out)
    })
}

/// Advances the iterator: `CAIRN_OK` with the next key and value in `*key`/`*key_len`
/// and `*value`/`*value_len` (pointers into the iterator, valid until its next call or
/// its free), or `CAIRN_END` when there are no more, or an error.
///
/// # Safety
/// `iter` is live; the four out pointers are writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_iter_next(
    iter: *mut cairn_iter,
    key: *mut *const u8,
    key_len: *mut usize,
    value: *mut *const u8,
    value_len: *mut usize,
) -> cairn_status {
    call(|| {
        // SAFETY: the caller's promise; null is checked.
        let it = unsafe { iter.as_mut() }.ok_or_else(|| Failure::invalid("iter is null"))?;
        if key.is_null() || key_len.is_null() || value.is_null() || value_len.is_null() {
            return Err(Failure::invalid("an out pointer is null"));
        }
        it.current = None;
        let next = if it.reverse {
            it.iter.next_back()
        } else {
            it.iter.next()
        };
        let Some(item) = next else {
            return Ok(cairn_status::CAIRN_END);
        };
        let (k, v) = it.current.insert(item?);
        // SAFETY: the four pointers are non-null and writable.
        unsafe {
            (*key, *key_len) = (k.as_ptr(), k.len());
            (*value, *value_len) = (v.as_ptr(), v.len());
        }
        Ok(cairn_status::CAIRN_OK)
    })
}

/// Frees an iterator. Null is ignored.
///
/// # Safety
/// `iter` is null or from `cairn_iter_range` / `cairn_iter_prefix`, not freed before.
#[no_mangle]
pub unsafe extern "C" fn cairn_iter_free(iter: *mut cairn_iter) {
    if !iter.is_null() {
        // SAFETY: the caller passes a pointer from this API, once.
        drop(unsafe { Box::from_raw(iter) });
    }
}
