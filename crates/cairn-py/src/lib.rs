//! # cairn for Python
//!
//! The extension module `cairn._cairn` of the Python package `cairn-store` (imported as
//! `cairn`; `python/cairn/__init__.py` adds the `io` classes of the file store on top).
//! Every call that can touch the disk or wait runs with the GIL released; keys and
//! values are `bytes`-like, read without a copy when they are `bytes`. Errors are the
//! `cairn.Error` hierarchy, one class per kind of `cairn::Error`.

#![deny(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod db;
mod files;
mod read;
mod txn;

use std::borrow::Cow;

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyString};

create_exception!(
    cairn,
    Error,
    PyException,
    "Base class of every error cairn raises."
);
create_exception!(
    cairn,
    KeyTooLarge,
    Error,
    "The key is longer than 64 KiB; nothing was written."
);
create_exception!(
    cairn,
    ValueTooLarge,
    Error,
    "The value is longer than 1 GiB; nothing was written."
);
create_exception!(
    cairn,
    StorageFull,
    Error,
    "The store is at its max_size, or the disk is full."
);
create_exception!(
    cairn,
    Locked,
    Error,
    "Another handle, in this or another process, has the store open."
);
create_exception!(
    cairn,
    Corruption,
    Error,
    "Stored data failed its checksum or is damaged."
);
create_exception!(
    cairn,
    FormatError,
    Error,
    "The directory holds a store of another format, or no store."
);
create_exception!(
    cairn,
    KeyExists,
    Error,
    "put_new found the key already had a value; nothing was written."
);
create_exception!(
    cairn,
    InvalidArgument,
    Error,
    "An option or argument is invalid."
);
create_exception!(
    cairn,
    ReadOnly,
    Error,
    "The store refuses writes (an earlier failed sync, or opened read-only)."
);
create_exception!(
    cairn,
    Closed,
    Error,
    "The store is closed, or the snapshot or transaction used is over."
);
create_exception!(
    cairn,
    Conflict,
    Error,
    "A transaction read what another writer changed since; it wrote nothing."
);
create_exception!(cairn, IoError, Error, "An operating-system I/O error.");

/// The Python exception for a cairn error.
pub(crate) fn to_py(e: cairn::Error) -> PyErr {
    use cairn::Error as E;
    let msg = e.to_string();
    match e {
        E::KeyTooLarge { .. } => KeyTooLarge::new_err(msg),
        E::ValueTooLarge { .. } => ValueTooLarge::new_err(msg),
        E::StorageFull(_) => StorageFull::new_err(msg),
        E::Locked(_) => Locked::new_err(msg),
        E::Corruption { .. } => Corruption::new_err(msg),
        E::Format { .. } => FormatError::new_err(msg),
        E::KeyExists { .. } => KeyExists::new_err(msg),
        E::InvalidArgument(_) => InvalidArgument::new_err(msg),
        E::ReadOnly(_) | E::OpenedReadOnly(_) => ReadOnly::new_err(msg),
        E::Closed => Closed::new_err(msg),
        E::Conflict => Conflict::new_err(msg),
        E::Io { .. } => IoError::new_err(msg),
        _ => Error::new_err(msg),
    }
}

/// Result of a cairn call, as a Python result.
pub(crate) trait OrRaise<T> {
    /// The value, or the matching `cairn.Error`.
    fn or_raise(self) -> PyResult<T>;
}

impl<T> OrRaise<T> for cairn::Result<T> {
    fn or_raise(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// The bytes of a `bytes`-like argument: borrowed from a `bytes` object, copied from
/// anything else with the buffer protocol (`bytearray`, `memoryview`, …). `str` and `int`
/// are refused (`bytes(3)` would be three zero bytes).
pub(crate) fn bytes_of<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Cow::Borrowed(b.as_bytes()));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(Cow::Owned(b.to_vec()));
    }
    if obj.is_instance_of::<PyString>() || obj.hasattr("__index__")? {
        return Err(PyTypeError::new_err(format!(
            "a bytes-like object is required, not '{}'",
            obj.get_type().name()?
        )));
    }
    let copy = obj.py().get_type::<PyBytes>().call1((obj,))?;
    let copy = copy.cast::<PyBytes>()?;
    Ok(Cow::Owned(copy.as_bytes().to_vec()))
}

/// A serde value (a stats record) as Python objects: maps become dicts.
pub(crate) fn to_python<'py>(
    py: Python<'py>,
    v: &serde_json::Value,
) -> PyResult<Bound<'py, PyAny>> {
    use serde_json::Value as V;
    Ok(match v {
        V::Null => py.None().into_bound(py),
        V::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        V::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u.into_pyobject(py)?.into_any(),
            (None, Some(i)) => i.into_pyobject(py)?.into_any(),
            _ => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        V::String(s) => s.into_pyobject(py)?.into_any(),
        V::Array(a) => {
            let list = PyList::empty(py);
            for x in a {
                list.append(to_python(py, x)?)?;
            }
            list.into_any()
        }
        V::Object(m) => {
            let d = PyDict::new(py);
            for (k, x) in m {
                d.set_item(k, to_python(py, x)?)?;
            }
            d.into_any()
        }
    })
}

/// A serializable record as a Python dict.
pub(crate) fn dict_of<'py>(
    py: Python<'py>,
    v: &impl serde::Serialize,
) -> PyResult<Bound<'py, PyAny>> {
    let v = serde_json::to_value(v).map_err(|e| Error::new_err(e.to_string()))?;
    to_python(py, &v)
}

#[pymodule]
fn _cairn(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("KeyTooLarge", py.get_type::<KeyTooLarge>())?;
    m.add("ValueTooLarge", py.get_type::<ValueTooLarge>())?;
    m.add("StorageFull", py.get_type::<StorageFull>())?;
    m.add("Locked", py.get_type::<Locked>())?;
    m.add("Corruption", py.get_type::<Corruption>())?;
    m.add("FormatError", py.get_type::<FormatError>())?;
    m.add("KeyExists", py.get_type::<KeyExists>())?;
    m.add("InvalidArgument", py.get_type::<InvalidArgument>())?;
    m.add("ReadOnly", py.get_type::<ReadOnly>())?;
    m.add("Closed", py.get_type::<Closed>())?;
    m.add("IoError", py.get_type::<IoError>())?;
    m.add("Conflict", py.get_type::<Conflict>())?;
    m.add("MAX_KEY_LEN", cairn::MAX_KEY_LEN)?;
    m.add("MAX_VALUE_LEN", cairn::MAX_VALUE_LEN)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<db::Keyspace>()?;
    m.add_class::<db::Db>()?;
    m.add_class::<read::Iter>()?;
    m.add_class::<txn::Snapshot>()?;
    m.add_class::<txn::Transaction>()?;
    m.add_class::<db::WriteBatch>()?;
    m.add_class::<files::FileStore>()?;
    m.add_class::<files::RawWriter>()?;
    m.add_class::<files::RawReader>()?;
    Ok(())
}
