//! Snapshots: a store as it was at one point, read while writes go on.

use cairn::Snapshot;

use crate::cairn_status;
use crate::db::{cairn_db, store};
use crate::guard::{call, free_handle, hand_out, Failure};
use crate::iter::{cairn_iter, prefix_span, range_span};
use crate::read::{read_alloc, read_has, read_into, read_scan};

/// The keyspace of a handle as it was when [`cairn_snapshot_new`] took it (opaque):
/// every read through it sees exactly that, while writes, compaction and reclamation go
/// on. The store keeps what it may still read until the snapshot (and every iterator
/// made from it) is freed. Thread-safe, as `cairn_db`; it may not outlive the store's
/// handle.
pub struct cairn_snapshot {
    snap: Snapshot,
}

/// The snapshot behind `snap`.
///
/// # Safety
/// `snap` is null or live.
unsafe fn live<'a>(snap: *const cairn_snapshot) -> Result<&'a Snapshot, Failure> {
    // SAFETY: the caller's promise.
    unsafe { snap.as_ref() }
        .map(|s| &s.snap)
        .ok_or_else(|| Failure::invalid("snapshot is null"))
}

/// A snapshot of the keyspace of `db` as it is now, stored in `*out` (O(1), never
/// waiting for a writer); free it with [`cairn_snapshot_free`].
///
/// # Safety
/// `db` is live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_snapshot_new(
    db: *const cairn_db,
    out: *mut *mut cairn_snapshot,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promises.
        unsafe {
            let snap = store(db)?.snapshot();
            hand_out(out, cairn_snapshot { snap })
        }
    })
}

/// Frees a snapshot (its iterators go on). Null is ignored.
///
/// # Safety
/// `snap` is null or from [`cairn_snapshot_new`], not freed before.
#[no_mangle]
pub unsafe extern "C" fn cairn_snapshot_free(snap: *mut cairn_snapshot) {
    // SAFETY: the caller passes null or a pointer from cairn_snapshot_new, once.
    unsafe { free_handle(snap) }
}

/// The number of the last write the snapshot sees (every write takes the next one); 0
/// for null.
///
/// # Safety
/// `snap` is null or live.
#[no_mangle]
pub unsafe extern "C" fn cairn_snapshot_seq(snap: *const cairn_snapshot) -> u64 {
    // SAFETY: the caller's promise.
    unsafe { live(snap) }.map_or(0, Snapshot::seq)
}

/// `cairn_get` at the snapshot.
///
/// # Safety
/// As `cairn_get`, with `snap` live.
#[no_mangle]
pub unsafe extern "C" fn cairn_snapshot_get(
    snap: *const cairn_snapshot,
    key: *const u8,
    key_len: usize,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> cairn_status {
    // SAFETY: forwarded promises.
    unsafe { read_into(|| live(snap), (key, key_len), buf, cap, len) }
}

/// `cairn_get_alloc` at the snapshot.
///
/// # Safety
/// As `cairn_get_alloc`, with `snap` live.
#[no_mangle]
pub unsafe extern "C" fn cairn_snapshot_get_alloc(
    snap: *const cairn_snapshot,
    key: *const u8,
    key_len: usize,
    value: *mut *mut u8,
    len: *mut usize,
) -> cairn_status {
    // SAFETY: forwarded promises.
    unsafe { read_alloc(|| live(snap), (key, key_len), value, len) }
}

/// Whether a key had a value at the snapshot: `CAIRN_OK` or `CAIRN_NOT_FOUND`.
///
/// # Safety
/// `snap` is live; `key` is valid for `key_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cairn_snapshot_contains(
    snap: *const cairn_snapshot,
    key: *const u8,
    key_len: usize,
) -> cairn_status {
    // SAFETY: forwarded promises.
    unsafe { read_has(|| live(snap), (key, key_len)) }
}

/// `cairn_iter_range` at the snapshot.
///
/// # Safety
/// As `cairn_iter_range`, with `snap` live.
#[no_mangle]
pub unsafe extern "C" fn cairn_snapshot_iter_range(
    snap: *const cairn_snapshot,
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
            || live(snap),
            || range_span((start, start_len), (end, end_len)),
            reverse,
            out,
        )
    }
}

/// `cairn_iter_prefix` at the snapshot.
///
/// # Safety
/// As `cairn_iter_prefix`, with `snap` live.
#[no_mangle]
pub unsafe extern "C" fn cairn_snapshot_iter_prefix(
    snap: *const cairn_snapshot,
    prefix: *const u8,
    prefix_len: usize,
    reverse: bool,
    out: *mut *mut cairn_iter,
) -> cairn_status {
    // SAFETY: forwarded promises.
    unsafe {
        read_scan(
            || live(snap),
            || prefix_span(prefix, prefix_len),
            reverse,
            out,
        )
    }
}
