//! Ordered iteration, of a store, a snapshot or a transaction.

use std::ops::Bound;

use cairn::Value;

use crate::cairn_status;
use crate::db::{cairn_db, store};
use crate::guard::{bytes, call, free_handle, hand_out, Failure};
use crate::read::read_scan;

/// The items of a scan, already in the order they are handed out.
type Items = Box<dyn Iterator<Item = cairn::Result<(Vec<u8>, Value)>> + Send>;

/// An iterator over key-value pairs in key order or reverse (opaque). One thread at a
/// time; it may outlive neither its store nor a `cairn_close` of it (it may outlive the
/// snapshot or transaction it was made from). Writes made while a store's iterator runs
/// are seen or not, key by key, as with `cairn::Db::iter`; a snapshot's or a
/// transaction's sees exactly its snapshot (and the transaction's writes made before).
pub struct cairn_iter {
    items: Items,
    /// The item last handed out, which the pointers given to the caller point into.
    current: Option<(Vec<u8>, Value)>,
}

/// Which keys a scan covers.
pub(crate) enum Span {
    /// From the first bound to the second.
    Range(Bound<Vec<u8>>, Bound<Vec<u8>>),
    /// The keys starting with these bytes.
    Prefix(Vec<u8>),
}

/// `start..end` from C: a null pointer is no bound on that side.
///
/// # Safety
/// `start` and `end` are null or valid for their lengths.
pub(crate) unsafe fn range_span(
    (start, start_len): (*const u8, usize),
    (end, end_len): (*const u8, usize),
) -> Result<Span, Failure> {
    let bound = |p: *const u8, len: usize, what: &str| -> Result<Option<Vec<u8>>, Failure> {
        if p.is_null() {
            return Ok(None);
        }
        // SAFETY: non-null, valid for `len` bytes by the caller's promise.
        Ok(Some(unsafe { bytes(p, len, what)? }.to_vec()))
    };
    let lo = bound(start, start_len, "start")?.map_or(Bound::Unbounded, Bound::Included);
    let hi = bound(end, end_len, "end")?.map_or(Bound::Unbounded, Bound::Excluded);
    Ok(Span::Range(lo, hi))
}

/// The keys starting with `prefix`, from C.
///
/// # Safety
/// `prefix` is valid for `len` bytes.
pub(crate) unsafe fn prefix_span(prefix: *const u8, len: usize) -> Result<Span, Failure> {
    // SAFETY: forwarded promise.
    Ok(Span::Prefix(
        unsafe { bytes(prefix, len, "prefix")? }.to_vec(),
    ))
}

/// Hands out, in `*out`, an iterator over `items`, forward or from the end back.
///
/// # Safety
/// `out` is writable.
pub(crate) unsafe fn hand_out_iter<I>(
    items: I,
    reverse: bool,
    out: *mut *mut cairn_iter,
) -> Result<cairn_status, Failure>
where
    I: DoubleEndedIterator<Item = cairn::Result<(Vec<u8>, Value)>> + Send + 'static,
{
    let items: Items = if reverse {
        Box::new(items.rev())
    } else {
        Box::new(items)
    };
    let it = cairn_iter {
        items,
        current: None,
    };
    // SAFETY: forwarded promise.
    unsafe { hand_out(out, it) }
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
    // SAFETY: forwarded promises.
    unsafe {
        read_scan(
            || store(db),
            || range_span((start, start_len), (end, end_len)),
            reverse,
            out,
        )
    }
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
    // SAFETY: forwarded promises.
    unsafe {
        read_scan(
            || store(db),
            || prefix_span(prefix, prefix_len),
            reverse,
            out,
        )
    }
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
        let Some(item) = it.items.next() else {
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
/// `iter` is null or from one of the `cairn_*iter_*` functions, not freed before.
#[no_mangle]
pub unsafe extern "C" fn cairn_iter_free(iter: *mut cairn_iter) {
    // SAFETY: the caller passes null or a pointer from this API, once.
    unsafe { free_handle(iter) }
}
