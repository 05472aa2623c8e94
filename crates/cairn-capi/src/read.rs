//! What the readers of a store — a store's (or keyspace's) handle, a snapshot, a
//! transaction — have in common: each implements [`Reader`], and one function per read
//! entry point serves all three.

use cairn::{Keyspace, Snapshot, Transaction, Value};

use crate::cairn_status;
use crate::guard::{bytes, call, found, get_alloc, get_into, Failure};
use crate::iter::{cairn_iter, hand_out_iter, Span};

/// A scan's items in key order, either end first.
pub(crate) type Scan = Box<dyn DoubleEndedIterator<Item = cairn::Result<(Vec<u8>, Value)>> + Send>;

/// Something C reads a store through.
pub(crate) trait Reader {
    /// The value of `key`.
    fn value(&mut self, key: &[u8]) -> cairn::Result<Option<Value>>;
    /// Whether `key` has a value.
    fn has(&mut self, key: &[u8]) -> cairn::Result<bool>;
    /// The pairs of `span`.
    fn scan(&mut self, span: Span) -> Scan;
}

/// [`Reader`] for a reference type whose `get`, `contains`, `range` and `prefix` are the
/// engine's (`contains` fallible or not, as `$has` wraps it).
macro_rules! reader {
    ($t:ty, $has:expr) => {
        impl Reader for $t {
            fn value(&mut self, key: &[u8]) -> cairn::Result<Option<Value>> {
                self.get(key)
            }

            fn has(&mut self, key: &[u8]) -> cairn::Result<bool> {
                $has(self.contains(key))
            }

            fn scan(&mut self, span: Span) -> Scan {
                match span {
                    Span::Range(lo, hi) => Box::new(self.range::<Vec<u8>, _>((lo, hi))),
                    Span::Prefix(p) => Box::new(self.prefix(p)),
                }
            }
        }
    };
}

reader!(&Keyspace, cairn::Result::Ok);
reader!(&Snapshot, std::convert::identity);
reader!(&mut Transaction, std::convert::identity);

/// `cairn_get` (and its snapshot and transaction forms) on the reader `reader` finds.
///
/// # Safety
/// `key` is valid for `key_len` bytes; `buf` for `cap` writable bytes (or null with
/// `cap` 0); `len` is writable.
pub(crate) unsafe fn read_into<R: Reader>(
    reader: impl FnOnce() -> Result<R, Failure>,
    (key, key_len): (*const u8, usize),
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promise.
        let (mut r, key) = (reader()?, unsafe { bytes(key, key_len, "key")? });
        // SAFETY: forwarded promises.
        unsafe { get_into(buf, cap, len, || Ok(r.value(key)?)) }
    })
}

/// `cairn_get_alloc` (and its forms) on the reader `reader` finds.
///
/// # Safety
/// `key` is valid for `key_len` bytes; `value` and `len` are writable.
pub(crate) unsafe fn read_alloc<R: Reader>(
    reader: impl FnOnce() -> Result<R, Failure>,
    (key, key_len): (*const u8, usize),
    value: *mut *mut u8,
    len: *mut usize,
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promise.
        let (mut r, key) = (reader()?, unsafe { bytes(key, key_len, "key")? });
        // SAFETY: forwarded promises.
        unsafe { get_alloc(value, len, || Ok(r.value(key)?)) }
    })
}

/// `cairn_contains` (and its forms) on the reader `reader` finds.
///
/// # Safety
/// `key` is valid for `key_len` bytes.
pub(crate) unsafe fn read_has<R: Reader>(
    reader: impl FnOnce() -> Result<R, Failure>,
    (key, key_len): (*const u8, usize),
) -> cairn_status {
    call(|| {
        // SAFETY: forwarded promise.
        let (mut r, key) = (reader()?, unsafe { bytes(key, key_len, "key")? });
        Ok(found(r.has(key)?))
    })
}

/// An iterator of `span` on the reader `reader` finds, stored in `*out`.
///
/// # Safety
/// `out` is writable.
pub(crate) unsafe fn read_scan<R: Reader>(
    reader: impl FnOnce() -> Result<R, Failure>,
    span: impl FnOnce() -> Result<Span, Failure>,
    reverse: bool,
    out: *mut *mut cairn_iter,
) -> cairn_status {
    call(|| {
        let mut r = reader()?;
        let items = r.scan(span()?);
        // SAFETY: forwarded promise.
        unsafe { hand_out_iter(items, reverse, out) }
    })
}
