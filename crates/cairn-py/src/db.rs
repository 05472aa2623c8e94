//! `Db`, `Keyspace`, `WriteBatch` and the iterator.

use std::borrow::Cow;
use std::ops::Bound as Edge;
use std::path::PathBuf;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::files::FileStore;
use crate::{bytes_of, dict_of, OrRaise};

/// Pairs handed to Python: (key, value) as `bytes`.
type Pair<'py> = (Bound<'py, PyBytes>, Bound<'py, PyBytes>);

/// A key space of a store (`Db.keyspace(id)`), and the base class of `Db` (keyspace 0):
/// point reads and writes, atomic batches, ordered scans.
#[pyclass(subclass, frozen, module = "cairn._cairn")]
pub struct Keyspace {
    /// `None` once the store was closed through this object (`Db.close`).
    ks: RwLock<Option<cairn::Keyspace>>,
}

impl Keyspace {
    /// Runs `f` on the keyspace with the GIL released.
    fn with<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&cairn::Keyspace) -> cairn::Result<R> + Send,
    ) -> PyResult<R> {
        py.detach(|| match &*self.ks.read() {
            Some(ks) => f(ks),
            None => Err(cairn::Error::Closed),
        })
        .or_raise()
    }

    /// A handle of the store (for operations on the whole store).
    fn db(&self) -> PyResult<cairn::Db> {
        match &*self.ks.read() {
            Some(ks) => Ok(ks.db().clone()),
            None => Err(crate::Closed::new_err("the store is closed")),
        }
    }

    fn scan(
        &self,
        reverse: bool,
        f: impl FnOnce(&cairn::Keyspace) -> cairn::Iter,
    ) -> PyResult<Iter> {
        match &*self.ks.read() {
            Some(ks) => Ok(Iter {
                inner: Mutex::new(f(ks)),
                reverse,
            }),
            None => Err(crate::Closed::new_err("the store is closed")),
        }
    }
}

fn edge(b: Option<&Bound<'_, PyAny>>, included: bool) -> PyResult<Edge<Vec<u8>>> {
    Ok(match b {
        None => Edge::Unbounded,
        Some(b) if b.is_none() => Edge::Unbounded,
        Some(b) => {
            let v = bytes_of(b)?.into_owned();
            if included {
                Edge::Included(v)
            } else {
                Edge::Excluded(v)
            }
        }
    })
}

#[pymethods]
impl Keyspace {
    /// The keyspace number (0 for the `Db` itself).
    #[getter]
    fn id(&self) -> PyResult<u8> {
        match &*self.ks.read() {
            Some(ks) => Ok(ks.id()),
            None => Err(crate::Closed::new_err("the store is closed")),
        }
    }

    /// The value of `key`, or `default` if it has none.
    #[pyo3(signature = (key, default = None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let key = bytes_of(key)?;
        match self.with(py, |ks| ks.get(&*key))? {
            Some(v) => Ok(Some(PyBytes::new(py, &v).into_any())),
            None => Ok(default),
        }
    }

    /// Sets the value of `key`.
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (key, value) = (bytes_of(key)?, bytes_of(value)?);
        self.with(py, |ks| ks.put(&*key, &*value))
    }

    /// Sets the value of `key` only if it has none; raises `KeyExists` otherwise.
    fn put_new(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (key, value) = (bytes_of(key)?, bytes_of(value)?);
        self.with(py, |ks| {
            let mut b = cairn::WriteBatch::new();
            b.put_new(&*key, &*value);
            ks.write(b)
        })
    }

    /// Removes `key` (nothing happens if it has no value).
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = bytes_of(key)?;
        self.with(py, |ks| ks.delete(&*key))
    }

    /// Applies a `WriteBatch` atomically (and empties it).
    fn write(&self, py: Python<'_>, batch: &WriteBatch) -> PyResult<()> {
        let b = std::mem::take(&mut *batch.b.lock());
        self.with(py, |ks| ks.write(b))
    }

    /// Whether `key` has a value (answered from memory).
    fn __contains__(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = bytes_of(key)?;
        match &*self.ks.read() {
            Some(ks) => Ok(ks.contains(&*key)),
            None => Err(crate::Closed::new_err("the store is closed")),
        }
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let k = bytes_of(key)?;
        match self.with(py, |ks| ks.get(&*k))? {
            Some(v) => Ok(PyBytes::new(py, &v)),
            None => Err(PyKeyError::new_err(key.clone().unbind())),
        }
    }

    fn __setitem__(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.put(py, key, value)
    }

    /// Removes `key`; `KeyError` if it had no value (checked first: a concurrent put
    /// between the check and the delete is deleted).
    fn __delitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        if !self.__contains__(key)? {
            return Err(PyKeyError::new_err(key.clone().unbind()));
        }
        self.delete(py, key)
    }

    /// Live keys in this keyspace (from the store's counters, not a scan).
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let n = self.with(py, |ks| Ok(ks.db().stats().keyspace(ks.id()).keys))?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// Every (key, value) pair in key order, lazily.
    fn __iter__(&self) -> PyResult<Iter> {
        self.scan(false, cairn::Keyspace::iter)
    }

    /// The pairs with `start <= key < end` (`None`: unbounded), in key order or reverse.
    #[pyo3(signature = (start = None, end = None, *, reverse = false))]
    fn range(
        &self,
        start: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
        reverse: bool,
    ) -> PyResult<Iter> {
        let (lo, hi) = (edge(start, true)?, edge(end, false)?);
        self.scan(reverse, |ks| ks.range::<Vec<u8>, _>((lo, hi)))
    }

    /// The pairs whose key starts with `prefix`, in key order or reverse.
    #[pyo3(signature = (prefix, *, reverse = false))]
    fn prefix(&self, prefix: &Bound<'_, PyAny>, reverse: bool) -> PyResult<Iter> {
        let p = bytes_of(prefix)?;
        self.scan(reverse, |ks| ks.prefix(&*p))
    }
}

/// A cairn store, open on a directory: keyspace 0 plus what concerns the whole store.
/// A context manager that closes the store at the end of its block.
#[pyclass(extends = Keyspace, subclass, frozen, module = "cairn._cairn")]
pub struct Db {
    path: PathBuf,
}

/// Applies the keyword options of `Db(...)`.
fn sync_policy(sync: &Bound<'_, PyAny>) -> PyResult<cairn::SyncPolicy> {
    if sync.is_instance_of::<PyString>() {
        let s: String = sync.extract()?;
        return match s.as_str() {
            "never" => Ok(cairn::SyncPolicy::Never),
            "always" => Ok(cairn::SyncPolicy::Always),
            other => Err(PyValueError::new_err(format!(
                "sync must be 'never', 'always' or an interval in seconds, not {other:?}"
            ))),
        };
    }
    let secs: f64 = sync
        .extract()
        .map_err(|_| PyTypeError::new_err("sync must be 'never', 'always' or seconds"))?;
    Duration::try_from_secs_f64(secs)
        .map(cairn::SyncPolicy::Every)
        .map_err(|e| PyValueError::new_err(format!("sync interval: {e}")))
}

#[pymethods]
impl Db {
    /// Opens (creating if missing) the store in directory `path`.
    #[new]
    #[pyo3(signature = (path, *, shards = None, segment_size = None, sync = None,
        max_size = None, background_compaction = None, compaction_threshold = None,
        read_only = false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        shards: Option<u32>,
        segment_size: Option<u64>,
        sync: Option<&Bound<'_, PyAny>>,
        max_size: Option<u64>,
        background_compaction: Option<bool>,
        compaction_threshold: Option<f64>,
        read_only: bool,
    ) -> PyResult<PyClassInitializer<Db>> {
        let mut o = cairn::Options::new();
        if let Some(n) = shards {
            o = o.shards(n);
        }
        if let Some(n) = segment_size {
            o = o.segment_size(n);
        }
        if let Some(s) = sync {
            o = o.sync(sync_policy(s)?);
        }
        if let Some(n) = max_size {
            o = o.max_size(n);
        }
        if let Some(on) = background_compaction {
            o = o.background_compaction(on);
        }
        if let Some(f) = compaction_threshold {
            o = o.compaction_threshold(f);
        }
        if read_only {
            o = o.read_only();
        }
        let db = py.detach(|| o.open(&path)).or_raise()?;
        let base = Keyspace {
            ks: RwLock::new(Some(db.keyspace(0))),
        };
        Ok(PyClassInitializer::from(base).add_subclass(Db { path }))
    }

    /// The store's directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(slf: PyRef<'_, Self>) -> bool {
        slf.as_super().ks.read().is_none()
    }

    /// Keyspace `id` (0 to 255) of this store: keys of its own, the same operations.
    /// Keyspaces 1 to 3 belong to cairn's own layers (1 is the file store).
    fn keyspace(slf: PyRef<'_, Self>, id: u8) -> PyResult<Keyspace> {
        let db = slf.as_super().db()?;
        Ok(Keyspace {
            ks: RwLock::new(Some(db.keyspace(id))),
        })
    }

    /// The file store of this store (keyspace 1): chunked files, streamed.
    #[getter]
    fn files(slf: PyRef<'_, Self>, py: Python<'_>) -> PyResult<FileStore> {
        let db = slf.as_super().db()?;
        FileStore::open(py, db)
    }

    /// Makes every write so far durable.
    fn flush(slf: PyRef<'_, Self>, py: Python<'_>) -> PyResult<()> {
        slf.as_super().with(py, |ks| ks.db().flush())
    }

    /// Compacts every segment with space to give back, now.
    fn compact(slf: PyRef<'_, Self>, py: Python<'_>) -> PyResult<()> {
        slf.as_super().with(py, |ks| ks.db().compact())
    }

    /// Gives back the space of overwritten and deleted records; returns what it did.
    fn reclaim<'py>(slf: PyRef<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let r = slf.as_super().with(py, |ks| ks.db().reclaim())?;
        let d = pyo3::types::PyDict::new(py);
        d.set_item("rotated", r.rotated)?;
        d.set_item("segments", r.segments)?;
        d.set_item("bytes", r.bytes)?;
        Ok(d.into_any())
    }

    /// Size and amplification figures, as a dict (`total`, `shards`, `keyspaces`, …).
    fn stats<'py>(slf: PyRef<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let s = slf.as_super().with(py, |ks| Ok(ks.db().stats()))?;
        dict_of(py, &s)
    }

    /// Closes the store (flushing it). Later calls raise `Closed`; closing twice is
    /// allowed.
    fn close(slf: PyRef<'_, Self>, py: Python<'_>) -> PyResult<()> {
        let base: &Keyspace = slf.as_super();
        py.detach(|| {
            let Some(ks) = base.ks.write().take() else {
                return Ok(());
            };
            let db = ks.db().clone();
            drop(ks);
            db.close()
        })
        .or_raise()
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(
        slf: PyRef<'_, Self>,
        py: Python<'_>,
        _exc: &Bound<'_, pyo3::types::PyTuple>,
    ) -> PyResult<bool> {
        Db::close(slf, py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("cairn.Db({:?})", self.path)
    }
}

/// A lazy iterator of (key, value) pairs (`bytes`, `bytes`): each key at most once,
/// never skipping a key that exists for the whole scan, whatever writes happen meanwhile.
#[pyclass(frozen, module = "cairn._cairn")]
pub struct Iter {
    inner: Mutex<cairn::Iter>,
    reverse: bool,
}

#[pymethods]
impl Iter {
    // Python's iterator protocol, not a constructor (clippy reads `__iter__` of `Iter` as one).
    #[allow(clippy::self_named_constructors)]
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Pair<'py>>> {
        let next = py.detach(|| {
            let mut it = self.inner.lock();
            if self.reverse {
                it.next_back()
            } else {
                it.next()
            }
        });
        match next {
            None => Ok(None),
            Some(r) => {
                let (k, v) = r.or_raise()?;
                Ok(Some((PyBytes::new(py, &k), PyBytes::new(py, &v))))
            }
        }
    }
}

/// Puts and deletes applied atomically by `Db.write` (or a keyspace's `write`): all of
/// them or none. Methods return the batch, for chaining.
#[pyclass(frozen, module = "cairn._cairn")]
pub struct WriteBatch {
    b: Mutex<cairn::WriteBatch>,
}

fn chain<'a, 'py>(
    slf: &'a Bound<'py, WriteBatch>,
    f: impl FnOnce(&mut cairn::WriteBatch, Cow<'_, [u8]>, Option<Cow<'_, [u8]>>),
    key: &Bound<'_, PyAny>,
    value: Option<&Bound<'_, PyAny>>,
) -> PyResult<&'a Bound<'py, WriteBatch>> {
    let key = bytes_of(key)?;
    let value = value.map(bytes_of).transpose()?;
    f(&mut slf.get().b.lock(), key, value);
    Ok(slf)
}

#[pymethods]
impl WriteBatch {
    #[new]
    fn new() -> WriteBatch {
        WriteBatch {
            b: Mutex::new(cairn::WriteBatch::new()),
        }
    }

    /// Adds a put.
    fn put<'py>(
        slf: Bound<'py, Self>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, Self>> {
        chain(
            &slf,
            |b, k, v| {
                b.put(k, v.unwrap_or_default());
            },
            key,
            Some(value),
        )?;
        Ok(slf)
    }

    /// Adds a put that requires `key` to have no value when the batch is written
    /// (else the write raises `KeyExists` and writes nothing).
    fn put_new<'py>(
        slf: Bound<'py, Self>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, Self>> {
        chain(
            &slf,
            |b, k, v| {
                b.put_new(k, v.unwrap_or_default());
            },
            key,
            Some(value),
        )?;
        Ok(slf)
    }

    /// Adds a delete.
    fn delete<'py>(slf: Bound<'py, Self>, key: &Bound<'_, PyAny>) -> PyResult<Bound<'py, Self>> {
        chain(
            &slf,
            |b, k, _| {
                b.delete(k);
            },
            key,
            None,
        )?;
        Ok(slf)
    }

    /// Empties the batch.
    fn clear(&self) {
        self.b.lock().clear();
    }

    fn __len__(&self) -> usize {
        self.b.lock().len()
    }
}
