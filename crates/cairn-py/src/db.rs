//! `Db`, `Keyspace`, `WriteBatch` and the iterator.

use std::path::PathBuf;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::files::FileStore;
use crate::read::{read_methods, Iter, Put, Reads, Span, Writes};
use crate::txn::{Snapshot, Transaction};
use crate::{bytes_of, dict_of, OrRaise};

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

    /// A handle of the keyspace, or `Closed`.
    fn keyspace(&self) -> PyResult<cairn::Keyspace> {
        match &*self.ks.read() {
            Some(ks) => Ok(ks.clone()),
            None => Err(crate::Closed::new_err("the store is closed")),
        }
    }

    /// A handle of the store (for operations on the whole store).
    fn db(&self) -> PyResult<cairn::Db> {
        Ok(self.keyspace()?.db().clone())
    }
}

impl Reads for Keyspace {
    fn read(&self, py: Python<'_>, key: &[u8]) -> PyResult<Option<cairn::Value>> {
        self.with(py, |ks| ks.get(key))
    }

    fn has(&self, _py: Python<'_>, key: &[u8]) -> PyResult<bool> {
        // Answered from the in-memory index: the GIL is kept.
        Ok(self.keyspace()?.contains(key))
    }

    fn scan(&self, span: Span, reverse: bool) -> PyResult<Iter> {
        let ks = self.keyspace()?;
        Ok(match span {
            Span::Range(lo, hi) => Iter::new(ks.range::<Vec<u8>, _>((lo, hi)), reverse),
            Span::Prefix(p) => Iter::new(ks.prefix(p), reverse),
        })
    }
}

impl Writes for Keyspace {
    fn write_put(&self, py: Python<'_>, key: &[u8], value: &[u8], kind: Put) -> PyResult<()> {
        self.with(py, |ks| match kind {
            Put::Any => ks.put(key, value),
            Put::New => {
                let mut b = cairn::WriteBatch::new();
                b.put_new(key, value);
                ks.write(b)
            }
        })
    }

    fn write_delete(&self, py: Python<'_>, key: &[u8]) -> PyResult<()> {
        self.with(py, |ks| ks.delete(key))
    }
}

read_methods!(writes Keyspace {
    /// The keyspace number (0 for the `Db` itself).
    #[getter]
    fn id(&self) -> PyResult<u8> {
        Ok(self.keyspace()?.id())
    }

    /// Applies a `WriteBatch` atomically (and empties it).
    fn write(&self, py: Python<'_>, batch: &WriteBatch) -> PyResult<()> {
        let b = std::mem::take(&mut *batch.b.lock());
        self.with(py, |ks| ks.write(b))
    }

    /// The values of `keys` (an iterable of bytes-like keys) as a list in their order,
    /// `None` where a key has none: one call for many gets, faster than a `get` each when
    /// the store does not fit the CPU's caches (the memory accesses of different keys
    /// overlap). Not one point in time across keys (a `Snapshot` is).
    fn get_many<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, pyo3::types::PyList>> {
        let objs: Vec<Bound<'py, PyAny>> = keys.try_iter()?.collect::<PyResult<_>>()?;
        let keys: Vec<_> = objs.iter().map(bytes_of).collect::<PyResult<_>>()?;
        let values = self.with(py, |ks| ks.get_many(&keys))?;
        let items = values
            .iter()
            .map(|v| v.as_ref().map(|v| pyo3::types::PyBytes::new(py, v)));
        pyo3::types::PyList::new(py, items)
    }

    /// Live keys in this keyspace (from the store's counters, not a scan).
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let n = self.with(py, |ks| Ok(ks.db().stats().keyspace(ks.id()).keys))?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// The keyspace as it is now, while writes go on: a `Snapshot` with the same read
    /// methods (a context manager that lets it go at the end of its block).
    fn snapshot(&self) -> PyResult<Snapshot> {
        Ok(Snapshot::new(self.keyspace()?.snapshot()))
    }

    /// A `Transaction` on this keyspace: reads of a snapshot under its own writes,
    /// committed atomically only if nothing it read changed meanwhile (else `Conflict`).
    /// A context manager: commits at the end of a block left normally, rolls back at
    /// the end of one left by an exception.
    fn transaction(&self) -> PyResult<Transaction> {
        Ok(Transaction::new(self.keyspace()?.transaction()))
    }

    /// Runs `fn(tx)` in a transaction and commits it, again in a new transaction as long
    /// as `fn` or the commit raises `Conflict` (backing off a little more each time, up
    /// to a millisecond); returns what `fn` returned. Any other exception rolls back and
    /// ends it. `fn` may run several times.
    fn transact(&self, py: Python<'_>, f: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let mut attempt: u32 = 0;
        loop {
            let tx = Bound::new(py, self.transaction()?)?;
            let out = f.call1((tx.clone(),)).and_then(|v| {
                tx.get().commit(py)?;
                Ok(v.unbind())
            });
            tx.get().rollback();
            match out {
                Err(e) if e.is_instance_of::<crate::Conflict>(py) => {
                    attempt = attempt.saturating_add(1);
                    py.detach(|| backoff(attempt));
                }
                other => return other,
            }
        }
    }
});

/// The pause before a transaction's next attempt: a yield for the first few, then
/// 2^attempt microseconds up to about a millisecond (as `cairn::Db::transact`).
fn backoff(attempt: u32) {
    if attempt < 4 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(1u64 << attempt.min(10)));
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

/// Puts and deletes applied atomically by `Db.write` (or a keyspace's `write`): all of
/// them or none. Methods return the batch, for chaining.
#[pyclass(frozen, module = "cairn._cairn")]
pub struct WriteBatch {
    b: Mutex<cairn::WriteBatch>,
}

impl WriteBatch {
    /// Adds a put of `kind` of `key` and `value` to the batch behind `slf`.
    fn add_put<'py>(
        slf: Bound<'py, Self>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        kind: Put,
    ) -> PyResult<Bound<'py, Self>> {
        let (k, v) = (bytes_of(key)?, bytes_of(value)?);
        {
            let mut b = slf.get().b.lock();
            match kind {
                Put::Any => b.put(k, v),
                Put::New => b.put_new(k, v),
            };
        }
        Ok(slf)
    }
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
        WriteBatch::add_put(slf, key, value, Put::Any)
    }

    /// Adds a put that requires `key` to have no value when the batch is written
    /// (else the write raises `KeyExists` and writes nothing).
    fn put_new<'py>(
        slf: Bound<'py, Self>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, Self>> {
        WriteBatch::add_put(slf, key, value, Put::New)
    }

    /// Adds a delete.
    fn delete<'py>(slf: Bound<'py, Self>, key: &Bound<'_, PyAny>) -> PyResult<Bound<'py, Self>> {
        slf.get().b.lock().delete(bytes_of(key)?);
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
