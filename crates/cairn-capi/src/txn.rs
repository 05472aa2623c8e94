//! Optimistic transactions: reads of a snapshot under their own writes, committed as one
//! batch only if nothing they read changed.

use std::ffi::c_void;

use cairn::Transaction;

use crate::cairn_status;
use crate::db::{cairn_db, store};
use crate::guard::{bytes, call, free_handle, hand_out, Failure};
use crate::iter::{cairn_iter, prefix_span, range_span};
use crate::read::{read_alloc, read_has, read_into, read_scan};

/// A transaction (opaque) on the keyspace of the handle it began on: reads see the
/// snapshot taken when it began, under its own writes; writes are buffered until
/// [`cairn_txn_commit`], which applies them atomically only if nothing it read (keys it
/// got or asked about, ranges it scanned) was written by anyone since — else
/// `CAIRN_CONFLICT`, and nothing is written. One thread at a time; free it with
/// [`cairn_txn_free`] (which rolls back one not committed).
pub struct cairn_txn {
    state: TxState,
}

/// Where a transaction is in its life.
enum TxState {
    /// Reading and buffering writes.
    Open(Transaction),
    /// Lent to the function [`cairn_transact`] runs, for that call: the transaction
    /// lives in `cairn_transact`, which commits it.
    Lent(*mut Transaction),
    /// Its writes were applied.
    Committed,
    /// Rolled back, or its commit failed: nothing of it was written.
    RolledBack,
}

/// The open transaction behind `txn`; `CAIRN_CLOSED` once it ended.
///
/// # Safety
/// `txn` is null or live.
unsafe fn open<'a>(txn: *mut cairn_txn) -> Result<&'a mut Transaction, Failure> {
    // SAFETY: the caller's promise.
    let t = unsafe { txn.as_mut() }.ok_or_else(|| Failure::invalid("txn is null"))?;
    match &mut t.state {
        TxState::Open(tx) => Ok(tx),
        // SAFETY: a lent transaction outlives the call its handle is lent for, and
        // the handle is used on that call's thread only (cairn_transact's promise).
        TxState::Lent(tx) => Ok(unsafe { &mut **tx }),
        TxState::Committed => Err(Failure(
            cairn_status::CAIRN_CLOSED,
            "the transaction has committed".into(),
        )),
        TxState::RolledBack => Err(Failure(
            cairn_status::CAIRN_CLOSED,
            "the transaction was rolled back".into(),
        )),
    }
}

/// Begins a transaction on the keyspace of `db`, stored in `*out`.
///
/// # Safety
/// `db` is live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_txn_begin(
    db: *const cairn_db,
    out: *mut *mut cairn_txn,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises.
        unsafe {
            let tx = store(db)?.transaction();
            hand_out(
                out,
                cairn_txn {
                    state: TxState::Open(tx),
                },
            )
        }
    })
}

/// Frees a transaction, rolling it back if it was not committed. Null is ignored.
///
/// # Safety
/// `txn` is null or from [`cairn_txn_begin`], not freed before.
#[no_mangle]
pub unsafe extern "C" fn cairn_txn_free(txn: *mut cairn_txn) {
    // SAFETY: the caller passes null or a pointer from cairn_txn_begin, once.
    unsafe { free_handle(txn) }
}

/// Applies its writes atomically if nothing it read changed since its snapshot: else
/// `CAIRN_CONFLICT` (or `CAIRN_KEY_EXISTS` for a `cairn_txn_put_new`) and nothing is
/// written. Either way the transaction is over: later calls on it return
/// `CAIRN_CLOSED`; free it with [`cairn_txn_free`].
///
/// # Safety
/// `txn` is live.
#[no_mangle]
pub unsafe extern "C" fn cairn_txn_commit(txn: *mut cairn_txn) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promise; `open` checks null and the state.
        unsafe { open(txn)? };
        // SAFETY: live and open (checked just above).
        let t = unsafe { &mut *txn };
        if let TxState::Lent(_) = t.state {
            return Err(lent());
        }
        let TxState::Open(tx) = std::mem::replace(&mut t.state, TxState::RolledBack) else {
            return Err(Failure::invalid("the transaction is not open"));
        };
        tx.commit()?;
        t.state = TxState::Committed;
        Ok(cairn_status::CAIRN_OK)
    })
}

/// Drops its writes; the transaction is over (nothing of it is written). Rolling back
/// one that ended does nothing.
///
/// # Safety
/// `txn` is live.
#[no_mangle]
pub unsafe extern "C" fn cairn_txn_rollback(txn: *mut cairn_txn) -> cairn_status {
    call(|| {
        // SAFETY: the caller's promise; null is checked.
        let t = unsafe { txn.as_mut() }.ok_or_else(|| Failure::invalid("txn is null"))?;
        match t.state {
            TxState::Open(_) => t.state = TxState::RolledBack,
            TxState::Lent(_) => return Err(lent()),
            TxState::Committed | TxState::RolledBack => {}
        }
        Ok(cairn_status::CAIRN_OK)
    })
}

fn lent() -> Failure {
    Failure::invalid(
        "a transaction of cairn_transact ends when its function returns: return CAIRN_OK to \
         commit it, another status to roll it back",
    )
}

/// The function [`cairn_transact`] runs: reads and writes through `txn`, then returns
/// `CAIRN_OK` to commit, `CAIRN_CONFLICT` to start over in a new transaction, or any
/// other status to roll back and have `cairn_transact` return it.
pub type cairn_txn_fn =
    Option<unsafe extern "C" fn(txn: *mut cairn_txn, ctx: *mut c_void) -> cairn_status>;

/// Runs `f(txn, ctx)` in a transaction on the keyspace of `db` and commits it, again
/// in a new transaction as long as the commit (or `f`) ends in `CAIRN_CONFLICT`,
/// backing off a little more each time (up to a millisecond) — as `Db::transact`
/// does. Returns `CAIRN_OK` once a commit succeeded; the status `f` returned if it
/// was neither `CAIRN_OK` nor `CAIRN_CONFLICT` (nothing written); or the commit's
/// error. `f` may run several times: its effects outside the transaction should be
/// harmless to repeat. `txn` is valid only during that call of `f`, on its thread:
/// `f` must not commit, roll back or free it (commit and rollback return
/// `CAIRN_INVALID_ARGUMENT`), nor keep it.
///
/// ```c
/// static cairn_status bump(cairn_txn *tx, void *ctx) {
///   uint64_t n = 0; size_t len = 0;
///   cairn_status s = cairn_txn_get(tx, (const uint8_t *)"hits", 4, (uint8_t *)&n, 8, &len);
///   if (s != CAIRN_OK && s != CAIRN_NOT_FOUND) return s;
///   n++;
///   *(uint64_t *)ctx = n;
///   return cairn_txn_put(tx, (const uint8_t *)"hits", 4, (const uint8_t *)&n, 8);
/// }
/// /* ... */ uint64_t seen; cairn_transact(db, bump, &seen);
/// ```
///
/// # Safety
/// `db` is live; `f` is a function that keeps the promises above; `ctx` is what `f`
/// expects.
#[no_mangle]
pub unsafe extern "C" fn cairn_transact(
    db: *const cairn_db,
    f: cairn_txn_fn,
    ctx: *mut c_void,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promise.
        let ks = unsafe { store(db)? };
        let f = f.ok_or_else(|| Failure::invalid("f is null"))?;
        let mut refused = None;
        let out = ks.transact(|tx| {
            let mut handle = cairn_txn {
                state: TxState::Lent(tx as *mut Transaction),
            };
            // SAFETY: the caller's promise on `f` and `ctx`; the handle and the
            // transaction it lends outlive the call.
            let s = unsafe { f(&mut handle, ctx) };
            match s {
                cairn_status::CAIRN_OK => Ok(()),
                cairn_status::CAIRN_CONFLICT => Err(cairn::Error::Conflict),
                other => {
                    refused = Some(other);
                    Err(cairn::Error::InvalidArgument(String::new()))
                }
            }
        });
        match (out, refused) {
            (_, Some(s)) => Err(Failure(
                s,
                format!("the transaction's function returned {s:?}: rolled back"),
            )),
            (Ok(()), None) => Ok(cairn_status::CAIRN_OK),
            (Err(e), None) => Err(e.into()),
        }
    })
}

/// `cairn_get` in the transaction (its own write of the key, else its snapshot's).
///
/// # Safety
/// As `cairn_get`, with `txn` live.
#[no_mangle]
pub unsafe extern "C" fn cairn_txn_get(
    txn: *mut cairn_txn,
    key: *const u8,
    key_len: usize,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> cairn_status {
    // SAFETY: forwarded promises.
    unsafe { read_into(|| open(txn), (key, key_len), buf, cap, len) }
}

/// `cairn_get_alloc` in the transaction.
///
/// # Safety
/// As `cairn_get_alloc`, with `txn` live.
#[no_mangle]
pub unsafe extern "C" fn cairn_txn_get_alloc(
    txn: *mut cairn_txn,
    key: *const u8,
    key_len: usize,
    value: *mut *mut u8,
    len: *mut usize,
) -> cairn_status {
    // SAFETY: forwarded promises.
    unsafe { read_alloc(|| open(txn), (key, key_len), value, len) }
}

/// Whether a key has a value in the transaction: `CAIRN_OK` or `CAIRN_NOT_FOUND`.
///
/// # Safety
/// `txn` is live; `key` is valid for `key_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cairn_txn_contains(
    txn: *mut cairn_txn,
    key: *const u8,
    key_len: usize,
) -> cairn_status {
    // SAFETY: forwarded promises.
    unsafe { read_has(|| open(txn), (key, key_len)) }
}

/// Runs a write `f` on the open transaction.
///
/// # Safety
/// `txn` is null or live.
unsafe fn write(
    txn: *mut cairn_txn,
    f: impl FnOnce(&mut Transaction) -> Result<(), Failure>,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promise.
        f(unsafe { open(txn)? })?;
        Ok(cairn_status::CAIRN_OK)
    })
}

/// Sets a key when the transaction commits.
///
/// # Safety
/// `txn` is live; `key` and `value` are valid for their lengths.
#[no_mangle]
pub unsafe extern "C" fn cairn_txn_put(
    txn: *mut cairn_txn,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> cairn_status {
    // SAFETY: forwarded promises.
    unsafe {
        write(txn, |tx| {
            Ok(tx.put(
                bytes(key, key_len, "key")?,
                bytes(value, value_len, "value")?,
            )?)
        })
    }
}

/// Sets a key that must have no value when the transaction commits (else the commit
/// returns `CAIRN_KEY_EXISTS` and writes nothing).
///
/// # Safety
/// `txn` is live; `key` and `value` are valid for their lengths.
#[no_mangle]
pub unsafe extern "C" fn cairn_txn_put_new(
    txn: *mut cairn_txn,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> cairn_status {
    // SAFETY: forwarded promises.
    unsafe {
        write(txn, |tx| {
            Ok(tx.put_new(
                bytes(key, key_len, "key")?,
                bytes(value, value_len, "value")?,
            )?)
        })
    }
}

/// Deletes a key when the transaction commits.
///
/// # Safety
/// `txn` is live; `key` is valid for `key_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cairn_txn_delete(
    txn: *mut cairn_txn,
    key: *const u8,
    key_len: usize,
) -> cairn_status {
    // SAFETY: forwarded promises.
    unsafe { write(txn, |tx| Ok(tx.delete(bytes(key, key_len, "key")?)?)) }
}

/// `cairn_iter_range` in the transaction: its writes over its snapshot, as they are
/// when the iterator is made. The whole range counts as read (an insert into it by
/// another writer before the commit is a conflict).
///
/// # Safety
/// As `cairn_iter_range`, with `txn` live.
#[no_mangle]
pub unsafe extern "C" fn cairn_txn_iter_range(
    txn: *mut cairn_txn,
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
            || open(txn),
            || range_span((start, start_len), (end, end_len)),
            reverse,
            out,
        )
    }
}

/// `cairn_iter_prefix` in the transaction (every key with the prefix counts as read).
///
/// # Safety
/// As `cairn_iter_prefix`, with `txn` live.
#[no_mangle]
pub unsafe extern "C" fn cairn_txn_iter_prefix(
    txn: *mut cairn_txn,
    prefix: *const u8,
    prefix_len: usize,
    reverse: bool,
    out: *mut *mut cairn_iter,
) -> cairn_status {
    // SAFETY: forwarded promises.
    unsafe {
        read_scan(
            || open(txn),
            || prefix_span(prefix, prefix_len),
            reverse,
            out,
        )
    }
}
