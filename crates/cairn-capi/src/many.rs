//! Many point reads in one call (`cairn::Keyspace::get_many`): the memory accesses of
//! different keys overlap, so a batch reads faster than a `cairn_get` each once the
//! store outgrows the CPU's caches.

use crate::cairn_status;
use crate::db::{cairn_db, store};
use crate::guard::{bytes, call, malloc_bytes, Failure};

/// The length `cairn_get_many` reports for a key that has no value.
pub const CAIRN_ABSENT: usize = usize::MAX;

/// Reads the values of `n` keys (`keys[i]`, `key_lens[i]` bytes long) in one call, each
/// as `cairn_get` reads it (not one point in time across keys: a snapshot is). The
/// values are handed out one after another in a single new buffer at `*values` (freed
/// with `cairn_free`, even when every key is absent), and `value_lens[i]` is the length
/// of key `i`'s value, or `CAIRN_ABSENT` if it has none (it then takes no room in the
/// buffer): value `i` starts at the sum of the lengths before it that are not absent.
/// On an error nothing is handed out. A key longer than the maximum reads as absent.
///
/// # Safety
/// `db` is live; `keys` and `key_lens` are valid for `n` elements, each `keys[i]` for
/// `key_lens[i]` bytes; `value_lens` is valid for `n` writable elements; `values` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn cairn_get_many(
    db: *const cairn_db,
    keys: *const *const u8,
    key_lens: *const usize,
    n: usize,
    values: *mut *mut u8,
    value_lens: *mut usize,
) -> cairn_status {
    call(|| {
        if values.is_null()
            || (n > 0 && (keys.is_null() || key_lens.is_null() || value_lens.is_null()))
        {
            return Err(Failure::invalid("an array or out pointer is null"));
        }
        // SAFETY: forwarded promise.
        let ks = unsafe { store(db)? };
        let mut list: Vec<&[u8]> = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: `keys` and `key_lens` hold `n` elements by the caller's promise,
            // and each key its length in bytes.
            list.push(unsafe { bytes(*keys.add(i), *key_lens.add(i), "a key")? });
        }
        let found = ks.get_many(&list)?;
        let total = found.iter().flatten().map(|v| v.len()).sum();
        // The values go straight into the buffer handed out (one copy each).
        let p = malloc_bytes(total)?;
        let mut at = 0;
        for (i, v) in found.iter().enumerate() {
            let len = v.as_ref().map_or(CAIRN_ABSENT, |v| {
                // SAFETY: `p` has room for `total` bytes, the sum of the values'
                // lengths, of which `at` are written; `v` does not overlap it.
                unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), p.add(at), v.len()) };
                at += v.len();
                v.len()
            });
            // SAFETY: `value_lens` holds `n` writable elements by the caller's promise.
            unsafe { *value_lens.add(i) = len };
        }
        // SAFETY: non-null and writable.
        unsafe { *values = p };
        Ok(cairn_status::CAIRN_OK)
    })
}
