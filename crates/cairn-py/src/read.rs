//! What every reader of a store has in common — `Keyspace` (and `Db`), `Snapshot`,
//! `Transaction`: point reads, membership, ordered scans. Each implements [`Reads`];
//! `read_methods!` gives each the same Python methods on top of it, and [`Iter`] is the
//! one lazy iterator every scan hands out.

use std::ops::Bound as Edge;

use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::{bytes_of, OrRaise};

/// The items of a scan, already in the order they are handed out.
type Items = Box<dyn Iterator<Item = cairn::Result<(Vec<u8>, cairn::Value)>> + Send>;

/// Which keys a scan covers.
pub(crate) enum Span {
    /// From the first bound to the second.
    Range(Edge<Vec<u8>>, Edge<Vec<u8>>),
    /// The keys starting with these bytes.
    Prefix(Vec<u8>),
}

impl Span {
    /// Every key.
    pub(crate) fn all() -> Span {
        Span::Range(Edge::Unbounded, Edge::Unbounded)
    }

    /// `start <= key < end`; `None` (absent or Python's `None`) is no bound.
    pub(crate) fn range(
        start: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Span> {
        let edge = |b: Option<&Bound<'_, PyAny>>, incl: bool| -> PyResult<Edge<Vec<u8>>> {
            Ok(match b {
                Some(b) if !b.is_none() => {
                    let v = bytes_of(b)?.into_owned();
                    if incl {
                        Edge::Included(v)
                    } else {
                        Edge::Excluded(v)
                    }
                }
                _ => Edge::Unbounded,
            })
        };
        Ok(Span::Range(edge(start, true)?, edge(end, false)?))
    }

    /// The keys starting with `prefix`.
    pub(crate) fn prefix(prefix: &Bound<'_, PyAny>) -> PyResult<Span> {
        Ok(Span::Prefix(bytes_of(prefix)?.into_owned()))
    }
}

/// Something Python reads a store through. Each method raises `Closed` (or the
/// reader's own error) when the reader is no longer usable.
pub(crate) trait Reads {
    /// The value of `key`, read with the GIL released.
    fn read(&self, py: Python<'_>, key: &[u8]) -> PyResult<Option<cairn::Value>>;

    /// Whether `key` has a value.
    fn has(&self, py: Python<'_>, key: &[u8]) -> PyResult<bool>;

    /// A scan of `span` in key order, as a double-ended iterator boxed by [`Iter::new`].
    fn scan(&self, span: Span, reverse: bool) -> PyResult<Iter>;

    /// `read` as a Python `bytes`, or `None`.
    fn read_bytes<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        Ok(self.read(py, key)?.map(|v| PyBytes::new(py, &v)))
    }
}

/// Which kind of put [`Writes::write_put`] makes.
pub(crate) enum Put {
    /// Sets the key whatever it held.
    Any,
    /// Requires the key to have no value (else `KeyExists`, nothing written).
    New,
}

/// Something Python writes a store through (a keyspace, a transaction).
pub(crate) trait Writes {
    /// Sets `key` to `value` (as `kind` says).
    fn write_put(&self, py: Python<'_>, key: &[u8], value: &[u8], kind: Put) -> PyResult<()>;

    /// Removes `key`.
    fn write_delete(&self, py: Python<'_>, key: &[u8]) -> PyResult<()>;
}

/// A lazy iterator of (key, value) pairs (`bytes`, `bytes`): each key at most once,
/// never skipping a key that exists for the whole scan, whatever writes happen meanwhile
/// (a snapshot's or a transaction's scan sees exactly its snapshot).
#[pyclass(frozen, module = "cairn._cairn")]
pub struct Iter {
    inner: Mutex<Items>,
}

impl Iter {
    /// A scan handing out `items` forward, or from the end back if `reverse`.
    pub(crate) fn new<I>(items: I, reverse: bool) -> Iter
    where
        I: DoubleEndedIterator<Item = cairn::Result<(Vec<u8>, cairn::Value)>> + Send + 'static,
    {
        let inner: Items = if reverse {
            Box::new(items.rev())
        } else {
            Box::new(items)
        };
        Iter {
            inner: Mutex::new(inner),
        }
    }
}

#[pymethods]
impl Iter {
    // Python's iterator protocol, not a constructor (clippy reads `__iter__` of `Iter` as one).
    #[allow(clippy::self_named_constructors)]
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
        match py.detach(|| self.inner.lock().next()) {
            None => Ok(None),
            Some(r) => {
                let (k, v) = r.or_raise()?;
                Ok(Some((PyBytes::new(py, &k), PyBytes::new(py, &v))))
            }
        }
    }
}

/// The Python read methods of a [`Reads`] type — `get`, `[]`, `in`, iteration, `range`,
/// `prefix` — in one `#[pymethods]` block with the type's own methods (`extra`); with
/// `writes`, also the write methods of a [`Writes`] type — `put`, `put_new`, `delete`,
/// `[]=`, `del`.
macro_rules! read_methods {
    (writes $t:ty { $($extra:tt)* }) => {
        read_methods!($t {
            /// Sets the value of `key`.
            fn put(
                &self,
                py: Python<'_>,
                key: &Bound<'_, PyAny>,
                value: &Bound<'_, PyAny>,
            ) -> PyResult<()> {
                let (k, v) = ($crate::bytes_of(key)?, $crate::bytes_of(value)?);
                $crate::read::Writes::write_put(self, py, &k, &v, $crate::read::Put::Any)
            }

            /// Sets the value of `key`, which must have none (checked when it is written:
            /// else `KeyExists`, and nothing is written).
            fn put_new(
                &self,
                py: Python<'_>,
                key: &Bound<'_, PyAny>,
                value: &Bound<'_, PyAny>,
            ) -> PyResult<()> {
                let (k, v) = ($crate::bytes_of(key)?, $crate::bytes_of(value)?);
                $crate::read::Writes::write_put(self, py, &k, &v, $crate::read::Put::New)
            }

            /// Removes `key` (nothing happens if it has no value).
            fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
                $crate::read::Writes::write_delete(self, py, &$crate::bytes_of(key)?)
            }

            fn __setitem__(
                &self,
                py: Python<'_>,
                key: &Bound<'_, PyAny>,
                value: &Bound<'_, PyAny>,
            ) -> PyResult<()> {
                self.put(py, key, value)
            }

            /// Removes `key`; `KeyError` if it has no value (checked first, as a read: a
            /// concurrent put between the check and the delete is deleted).
            fn __delitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
                let k = $crate::bytes_of(key)?;
                if !$crate::read::Reads::has(self, py, &k)? {
                    return Err(pyo3::exceptions::PyKeyError::new_err(key.clone().unbind()));
                }
                $crate::read::Writes::write_delete(self, py, &k)
            }

            $($extra)*
        });
    };
    ($t:ty { $($extra:tt)* }) => {
        #[pymethods]
        impl $t {
            /// The value of `key`, or `default` if it has none.
            #[pyo3(signature = (key, default = None))]
            fn get<'py>(
                &self,
                py: Python<'py>,
                key: &Bound<'py, PyAny>,
                default: Option<Bound<'py, PyAny>>,
            ) -> PyResult<Option<Bound<'py, PyAny>>> {
                let key = $crate::bytes_of(key)?;
                Ok($crate::read::Reads::read_bytes(self, py, &key)?
                    .map(Bound::into_any)
                    .or(default))
            }

            fn __getitem__<'py>(
                &self,
                py: Python<'py>,
                key: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
                let k = $crate::bytes_of(key)?;
                $crate::read::Reads::read_bytes(self, py, &k)?
                    .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(key.clone().unbind()))
            }

            /// Whether `key` has a value (answered from memory).
            fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
                let key = $crate::bytes_of(key)?;
                $crate::read::Reads::has(self, py, &key)
            }

            /// Every (key, value) pair in key order, lazily.
            fn __iter__(&self) -> PyResult<$crate::read::Iter> {
                $crate::read::Reads::scan(self, $crate::read::Span::all(), false)
            }

            /// The pairs with `start <= key < end` (`None`: unbounded), in key order or
            /// reverse.
            #[pyo3(signature = (start = None, end = None, *, reverse = false))]
            fn range(
                &self,
                start: Option<&Bound<'_, PyAny>>,
                end: Option<&Bound<'_, PyAny>>,
                reverse: bool,
            ) -> PyResult<$crate::read::Iter> {
                let span = $crate::read::Span::range(start, end)?;
                $crate::read::Reads::scan(self, span, reverse)
            }

            /// The pairs whose key starts with `prefix`, in key order or reverse.
            #[pyo3(signature = (prefix, *, reverse = false))]
            fn prefix(
                &self,
                prefix: &Bound<'_, PyAny>,
                reverse: bool,
            ) -> PyResult<$crate::read::Iter> {
                let span = $crate::read::Span::prefix(prefix)?;
                $crate::read::Reads::scan(self, span, reverse)
            }

            $($extra)*
        }
    };
}

pub(crate) use read_methods;
