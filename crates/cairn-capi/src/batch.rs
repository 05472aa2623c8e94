//! Atomic batches of writes.

use cairn::WriteBatch;

use crate::cairn_status;
use crate::db::{cairn_db, store};
use crate::guard::{bytes, call, free_handle, Failure};

/// A batch of puts and deletes applied atomically by [`cairn_write`] (opaque). One
/// thread at a time.
pub struct cairn_batch {
    batch: WriteBatch,
}

/// A new empty batch; free it with [`cairn_batch_free`].
#[no_mangle]
pub extern "C" fn cairn_batch_new() -> *mut cairn_batch {
    Box::into_raw(Box::new(cairn_batch {
        batch: WriteBatch::new(),
    }))
}

/// Frees a batch. Null is ignored.
///
/// # Safety
/// `batch` is null or from [`cairn_batch_new`], not freed before.
#[no_mangle]
pub unsafe extern "C" fn cairn_batch_free(batch: *mut cairn_batch) {
    // SAFETY: the caller passes null or a pointer from cairn_batch_new, once.
    unsafe { free_handle(batch) }
}

/// Runs `f` on the batch behind `batch`.
///
/// # Safety
/// `batch` is null or live.
unsafe fn with(
    batch: *mut cairn_batch,
    f: impl FnOnce(&mut WriteBatch) -> Result<(), Failure>,
) -> cairn_status {
    call(|| {
        // SAFETY: the caller's promise; null is checked.
        let b = unsafe { batch.as_mut() }.ok_or_else(|| Failure::invalid("batch is null"))?;
        f(&mut b.batch)?;
        Ok(cairn_status::CAIRN_OK)
    })
}

/// Which kind of put [`add_put`] adds.
enum Put {
    /// Sets the key whatever it held.
    Any,
    /// Requires the key to have no value when the batch is written.
    New,
}

/// Adds a put of `kind` to the batch.
///
/// # Safety
/// `batch` is null or live; `key` and `value` are valid for their lengths.
unsafe fn add_put(
    batch: *mut cairn_batch,
    (key, key_len): (*const u8, usize),
    (value, value_len): (*const u8, usize),
    kind: Put,
) -> cairn_status {
    // SAFETY: forwarded promises.
    unsafe {
        with(batch, |b| {
            let (k, v) = (
                bytes(key, key_len, "key")?,
                bytes(value, value_len, "value")?,
            );
            match kind {
                Put::Any => b.put(k, v),
                Put::New => b.put_new(k, v),
            };
            Ok(())
        })
    }
}

/// Adds a put to the batch (a key over the limit fails the batch's write).
///
/// # Safety
/// `batch` is live; `key` and `value` are valid for their lengths.
#[no_mangle]
pub unsafe extern "C" fn cairn_batch_put(
    batch: *mut cairn_batch,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> cairn_status {
    // SAFETY: forwarded promises.
    unsafe { add_put(batch, (key, key_len), (value, value_len), Put::Any) }
}

/// Adds a put that requires the key to have no value when the batch is written (else
/// the write fails with `CAIRN_KEY_EXISTS` and writes nothing).
///
/// # Safety
/// `batch` is live; `key` and `value` are valid for their lengths.
#[no_mangle]
pub unsafe extern "C" fn cairn_batch_put_new(
    batch: *mut cairn_batch,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> cairn_status {
    // SAFETY: forwarded promises.
    unsafe { add_put(batch, (key, key_len), (value, value_len), Put::New) }
}

/// Adds a delete to the batch.
///
/// # Safety
/// `batch` is live; `key` is valid for `key_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cairn_batch_delete(
    batch: *mut cairn_batch,
    key: *const u8,
    key_len: usize,
) -> cairn_status {
    // SAFETY: forwarded promises.
    unsafe {
        with(batch, |b| {
            b.delete(bytes(key, key_len, "key")?);
            Ok(())
        })
    }
}

/// Empties the batch.
///
/// # Safety
/// `batch` is live.
#[no_mangle]
pub unsafe extern "C" fn cairn_batch_clear(batch: *mut cairn_batch) -> cairn_status {
    // SAFETY: forwarded promise.
    unsafe {
        with(batch, |b| {
            b.clear();
            Ok(())
        })
    }
}

/// The number of operations in the batch (0 for null).
///
/// # Safety
/// `batch` is null or live.
#[no_mangle]
pub unsafe extern "C" fn cairn_batch_len(batch: *const cairn_batch) -> usize {
    // SAFETY: the caller's promise.
    unsafe { batch.as_ref() }.map_or(0, |b| b.batch.len())
}

/// Applies the batch atomically: all of it or, on an error, none of it. The batch is
/// empty afterwards either way, ready for reuse.
///
/// # Safety
/// `db` and `batch` are live.
#[no_mangle]
pub unsafe extern "C" fn cairn_write(db: *const cairn_db, batch: *mut cairn_batch) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises; null is checked.
        let (db, b) = unsafe { (store(db)?, batch.as_mut()) };
        let b = b.ok_or_else(|| Failure::invalid("batch is null"))?;
        db.write(std::mem::take(&mut b.batch))?;
        Ok(cairn_status::CAIRN_OK)
    })
}
