//! Status codes, the thread's last error message, and the wrapper every entry point runs
//! its body in (no panic and no Rust error crosses into C).

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What a call did. `CAIRN_OK` is 0; every other value is an error whose message
/// [`cairn_last_error`] gives (except `CAIRN_NOT_FOUND` and `CAIRN_END`, which are
/// answers, not failures, and leave no message).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum cairn_status {
    /// Success.
    CAIRN_OK = 0,
    /// The key has no value (`cairn_get`, `cairn_get_alloc`).
    CAIRN_NOT_FOUND = 1,
    /// An iterator has no more items.
    CAIRN_END = 2,
    /// The caller's buffer is too small for the value; its length was stored.
    CAIRN_BUFFER_TOO_SMALL = 3,
    /// A null pointer, an invalid option, a path that is not UTF-8, or another invalid
    /// argument.
    CAIRN_INVALID_ARGUMENT = 4,
    /// The key is longer than the limit (64 KiB); nothing was written.
    CAIRN_KEY_TOO_LARGE = 5,
    /// The value is longer than the limit (1 GiB); nothing was written.
    CAIRN_VALUE_TOO_LARGE = 6,
    /// The store is at its `max_size`, or the disk is full; nothing was written.
    CAIRN_STORAGE_FULL = 7,
    /// Another handle, in this or another process, has the store open.
    CAIRN_LOCKED = 8,
    /// Stored data failed its checksum or is damaged.
    CAIRN_CORRUPTION = 9,
    /// The directory holds a store of another format version, or no store.
    CAIRN_FORMAT = 10,
    /// A `cairn_batch_put_new` key had a value; nothing of the batch was written.
    CAIRN_KEY_EXISTS = 11,
    /// The store refuses writes after an earlier failed sync (reopen it), or was opened
    /// read-only.
    CAIRN_READ_ONLY = 12,
    /// The store was closed.
    CAIRN_CLOSED = 13,
    /// An operating-system I/O error.
    CAIRN_IO = 14,
    /// A panic inside cairn, caught at the boundary. The handle stays valid, but the
    /// operation may not have happened.
    CAIRN_PANIC = 15,
    /// `malloc` failed.
    CAIRN_OUT_OF_MEMORY = 16,
    /// An error of a kind this version of the API has no code for.
    CAIRN_OTHER = 17,
    /// A transaction read what another writer changed after its snapshot; its commit
    /// wrote nothing.
    CAIRN_CONFLICT = 18,
}

thread_local! {
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

#[cfg(feature = "test-hooks")]
thread_local! {
    static PANIC_NEXT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// An error of an entry point: its code and message.
pub(crate) struct Failure(pub cairn_status, pub String);

impl Failure {
    pub(crate) fn invalid(msg: impl Into<String>) -> Failure {
        Failure(cairn_status::CAIRN_INVALID_ARGUMENT, msg.into())
    }
}

impl From<cairn::Error> for Failure {
    fn from(e: cairn::Error) -> Failure {
        use cairn::Error as E;
        use cairn_status as S;
        let code = match &e {
            E::KeyTooLarge { .. } => S::CAIRN_KEY_TOO_LARGE,
            E::ValueTooLarge { .. } => S::CAIRN_VALUE_TOO_LARGE,
            E::StorageFull(_) => S::CAIRN_STORAGE_FULL,
            E::Locked(_) => S::CAIRN_LOCKED,
            E::Corruption { .. } => S::CAIRN_CORRUPTION,
            E::Format { .. } => S::CAIRN_FORMAT,
            E::KeyExists { .. } => S::CAIRN_KEY_EXISTS,
            E::InvalidArgument(_) => S::CAIRN_INVALID_ARGUMENT,
            E::ReadOnly(_) | E::OpenedReadOnly(_) => S::CAIRN_READ_ONLY,
            E::Closed => S::CAIRN_CLOSED,
            E::Conflict => S::CAIRN_CONFLICT,
            E::Io { .. } => S::CAIRN_IO,
            _ => S::CAIRN_OTHER,
        };
        Failure(code, e.to_string())
    }
}

fn set_last_error(msg: Option<String>) {
    let msg = msg.map(|m| {
        // A message with a NUL byte (from a path) keeps what precedes it.
        let cut = m.find('\0').unwrap_or(m.len());
        CString::new(&m[..cut]).unwrap_or_default()
    });
    LAST_ERROR.with(|l| *l.borrow_mut() = msg);
}

/// Runs an entry point's body: a panic becomes `CAIRN_PANIC`, an error its code, and
/// either leaves its message for [`cairn_last_error`].
pub(crate) fn call(f: impl FnOnce() -> Result<cairn_status, Failure>) -> cairn_status {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        #[cfg(feature = "test-hooks")]
        if PANIC_NEXT.with(|p| p.replace(false)) {
            panic!("panic injected by cairn_test_panic_next");
        }
        f()
    }));
    match outcome {
        Ok(Ok(status)) => {
            set_last_error(None);
            status
        }
        Ok(Err(Failure(code, msg))) => {
            set_last_error(Some(msg));
            code
        }
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            set_last_error(Some(format!("panic in cairn: {msg}")));
            cairn_status::CAIRN_PANIC
        }
    }
}

/// The bytes at `ptr..ptr+len`, or an error naming `what` if `ptr` is null and `len`
/// is not 0.
///
/// # Safety
/// `ptr` must be null or valid for reads of `len` bytes for `'a`.
pub(crate) unsafe fn bytes<'a>(
    ptr: *const u8,
    len: usize,
    what: &str,
) -> Result<&'a [u8], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Failure::invalid(format!(
            "{what} is null with length {len}"
        )));
    }
    // SAFETY: non-null, and the caller promises `len` readable bytes for 'a.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// A `malloc`ed copy of `data` (at least one byte, so an empty value is a non-null
/// pointer), for the caller to give back with [`cairn_free`].
pub(crate) fn malloc_copy(data: &[u8]) -> Result<*mut u8, Failure> {
    let p = malloc_bytes(data.len())?;
    // SAFETY: `p` has room for data.len() bytes and does not overlap `data`.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
    Ok(p)
}

/// A new `malloc` buffer of `len` bytes (at least one), not yet written, for the caller
/// to fill and C to free with `cairn_free`.
pub(crate) fn malloc_bytes(len: usize) -> Result<*mut u8, Failure> {
    // SAFETY: malloc has no preconditions; the result is checked for null.
    let p = unsafe { libc::malloc(len.max(1)) }.cast::<u8>();
    if p.is_null() {
        return Err(Failure(
            cairn_status::CAIRN_OUT_OF_MEMORY,
            format!("malloc of {len} bytes failed"),
        ));
    }
    Ok(p)
}

/// `CAIRN_OK` if `yes`, else `CAIRN_NOT_FOUND` (the answer of a `contains`).
pub(crate) fn found(yes: bool) -> cairn_status {
    if yes {
        cairn_status::CAIRN_OK
    } else {
        cairn_status::CAIRN_NOT_FOUND
    }
}

/// A get into the caller's buffer `buf` of `cap` bytes, the length stored in `*len`:
/// `CAIRN_NOT_FOUND` if `read` finds no value, `CAIRN_BUFFER_TOO_SMALL` (length stored,
/// nothing copied) if it does not fit. The out pointers are checked before `read` runs.
///
/// # Safety
/// `buf` is valid for `cap` writable bytes (or null with `cap` 0); `len` is writable.
pub(crate) unsafe fn get_into<V: std::ops::Deref<Target = [u8]>>(
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
    read: impl FnOnce() -> Result<Option<V>, Failure>,
) -> Result<cairn_status, Failure> {
    if len.is_null() || (buf.is_null() && cap > 0) {
        return Err(Failure::invalid(
            "len is null, or buf is null with a capacity",
        ));
    }
    let Some(v) = read()? else {
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
}

/// A get into a new buffer stored in `*value` (its length in `*len`), for the caller to
/// free with `cairn_free`; `CAIRN_NOT_FOUND` (and `*value` null) if `read` finds none.
///
/// # Safety
/// `value` and `len` are writable.
pub(crate) unsafe fn get_alloc<V: std::ops::Deref<Target = [u8]>>(
    value: *mut *mut u8,
    len: *mut usize,
    read: impl FnOnce() -> Result<Option<V>, Failure>,
) -> Result<cairn_status, Failure> {
    if value.is_null() || len.is_null() {
        return Err(Failure::invalid("value or len is null"));
    }
    // SAFETY: non-null and writable.
    unsafe { *value = std::ptr::null_mut() };
    let Some(v) = read()? else {
        return Ok(cairn_status::CAIRN_NOT_FOUND);
    };
    let p = malloc_copy(&v)?;
    // SAFETY: both are non-null and writable.
    unsafe { (*value, *len) = (p, v.len()) };
    Ok(cairn_status::CAIRN_OK)
}

/// Stores a new handle in `*out`.
///
/// # Safety
/// `out` is null (an error) or writable.
pub(crate) unsafe fn hand_out<T>(out: *mut *mut T, value: T) -> Result<cairn_status, Failure> {
    if out.is_null() {
        return Err(Failure::invalid("out is null"));
    }
    // SAFETY: non-null and writable by the caller's promise.
    unsafe { *out = Box::into_raw(Box::new(value)) };
    Ok(cairn_status::CAIRN_OK)
}

/// Frees a handle made by [`hand_out`]. Null is ignored.
///
/// # Safety
/// `ptr` is null or from [`hand_out`] for this `T`, not freed before.
pub(crate) unsafe fn free_handle<T>(ptr: *mut T) {
    if !ptr.is_null() {
        // SAFETY: the caller's promise: a Box from hand_out, freed once.
        drop(unsafe { Box::from_raw(ptr) });
    }
}

/// The message of the last error on the calling thread, or null if the last call
/// succeeded (or returned `CAIRN_NOT_FOUND` / `CAIRN_END`). Valid until the thread's
/// next call into cairn; do not free it.
#[no_mangle]
pub extern "C" fn cairn_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ref().map_or(std::ptr::null(), |s| s.as_ptr()))
}

/// The name of a status code (`"CAIRN_OK"`, …), a static string.
#[no_mangle]
pub extern "C" fn cairn_status_name(status: cairn_status) -> *const c_char {
    use cairn_status as S;
    let name: &'static [u8] = match status {
        S::CAIRN_OK => b"CAIRN_OK\0",
        S::CAIRN_NOT_FOUND => b"CAIRN_NOT_FOUND\0",
        S::CAIRN_END => b"CAIRN_END\0",
        S::CAIRN_BUFFER_TOO_SMALL => b"CAIRN_BUFFER_TOO_SMALL\0",
        S::CAIRN_INVALID_ARGUMENT => b"CAIRN_INVALID_ARGUMENT\0",
        S::CAIRN_KEY_TOO_LARGE => b"CAIRN_KEY_TOO_LARGE\0",
        S::CAIRN_VALUE_TOO_LARGE => b"CAIRN_VALUE_TOO_LARGE\0",
        S::CAIRN_STORAGE_FULL => b"CAIRN_STORAGE_FULL\0",
        S::CAIRN_LOCKED => b"CAIRN_LOCKED\0",
        S::CAIRN_CORRUPTION => b"CAIRN_CORRUPTION\0",
        S::CAIRN_FORMAT => b"CAIRN_FORMAT\0",
        S::CAIRN_KEY_EXISTS => b"CAIRN_KEY_EXISTS\0",
        S::CAIRN_READ_ONLY => b"CAIRN_READ_ONLY\0",
        S::CAIRN_CLOSED => b"CAIRN_CLOSED\0",
        S::CAIRN_IO => b"CAIRN_IO\0",
        S::CAIRN_PANIC => b"CAIRN_PANIC\0",
        S::CAIRN_OUT_OF_MEMORY => b"CAIRN_OUT_OF_MEMORY\0",
        S::CAIRN_OTHER => b"CAIRN_OTHER\0",
        S::CAIRN_CONFLICT => b"CAIRN_CONFLICT\0",
    };
    name.as_ptr().cast()
}

/// The library's version, a static string such as `"0.1.0"`.
#[no_mangle]
pub extern "C" fn cairn_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Frees a buffer cairn handed out (`cairn_get_alloc`). Null is ignored.
///
/// # Safety
/// `ptr` is null or a buffer from cairn not freed before.
#[no_mangle]
pub unsafe extern "C" fn cairn_free(ptr: *mut c_void) {
    // SAFETY: the caller passes a pointer from cairn's malloc_copy (or null).
    unsafe { libc::free(ptr) }
}

/// Makes the next call into cairn on this thread panic inside the library (a test hook:
/// the call must return `CAIRN_PANIC`). Only in builds with the `test-hooks` feature.
#[cfg(feature = "test-hooks")]
#[no_mangle]
pub extern "C" fn cairn_test_panic_next() {
    PANIC_NEXT.with(|p| p.set(true));
}
