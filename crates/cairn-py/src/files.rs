//! The file store: `Db.files`, and the raw writer and reader that `cairn.FileWriter`
//! and `cairn.FileReader` (python/cairn/__init__.py) make into `io` file objects.

use std::io::{Read, Seek, SeekFrom, Write};
use std::time::UNIX_EPOCH;

use parking_lot::Mutex;
use pyo3::exceptions::{PyFileNotFoundError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::{bytes_of, dict_of, OrRaise};

/// A file's metadata as a dict: size, chunks, chunk_size, hash (hex), created (seconds
/// since the epoch), version.
fn stat_dict<'py>(py: Python<'py>, s: &cairn_files::FileStat) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("size", s.size)?;
    d.set_item("chunks", s.chunks)?;
    d.set_item("chunk_size", s.chunk_size)?;
    d.set_item("hash", s.hash_hex())?;
    let created = s
        .created
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    d.set_item("created", created)?;
    d.set_item("version", s.version)?;
    Ok(d)
}

/// The file store of a `Db` (`db.files`): files of any size under byte-string keys,
/// written in a stream and committed atomically, read with seeks.
#[pyclass(frozen, module = "cairn._cairn")]
pub struct FileStore {
    fs: cairn_files::FileStore,
}

impl FileStore {
    pub(crate) fn open(py: Python<'_>, db: cairn::Db) -> PyResult<FileStore> {
        let fs = py.detach(|| cairn_files::FileStore::new(&db)).or_raise()?;
        Ok(FileStore { fs })
    }
}

#[pymethods]
impl FileStore {
    /// A raw writer of a new version of `key` (use `cairn.FileStore.create`, which wraps
    /// it in a file object).
    fn create_raw(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<RawWriter> {
        let key = bytes_of(key)?;
        let w = py.detach(|| self.fs.create(&*key)).or_raise()?;
        Ok(RawWriter {
            w: Mutex::new(WriterState::Open(Box::new(w))),
        })
    }

    /// A raw reader of `key` (use `cairn.FileStore.open`); `FileNotFoundError` if none.
    fn open_raw(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<RawReader> {
        let k = bytes_of(key)?;
        match py.detach(|| self.fs.open(&*k)).or_raise()? {
            Some(r) => Ok(RawReader { r: Mutex::new(r) }),
            None => Err(PyFileNotFoundError::new_err(key.clone().unbind())),
        }
    }

    /// Stores `data` as the file `key`, replacing any previous version atomically;
    /// returns its stat.
    fn put<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let (key, data) = (bytes_of(key)?, bytes_of(data)?);
        let st = py.detach(|| self.fs.put(&*key, &*data)).or_raise()?;
        stat_dict(py, &st)
    }

    /// Stores `data` under the hex BLAKE3 hash of its content and returns that key
    /// (content already stored is not stored again).
    fn put_content(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<String> {
        let data = bytes_of(data)?;
        py.detach(|| self.fs.put_content(&*data)).or_raise()
    }

    /// The whole content of `key`, or `None` if there is no such file.
    fn read<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = bytes_of(key)?;
        let data = py.detach(|| self.fs.read(&*key)).or_raise()?;
        Ok(data.map(|d| PyBytes::new(py, &d)))
    }

    /// The stat of `key`, or `None`.
    fn stat<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let key = bytes_of(key)?;
        let st = py.detach(|| self.fs.stat(&*key)).or_raise()?;
        st.map(|s| stat_dict(py, &s)).transpose()
    }

    /// Whether `key` exists.
    fn exists(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.fs.exists(&*bytes_of(key)?))
    }

    /// Removes `key`; returns whether it existed.
    fn remove(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = bytes_of(key)?;
        py.detach(|| self.fs.remove(&*key)).or_raise()
    }

    /// The keys of the files whose key starts with `prefix`, in order.
    #[pyo3(signature = (prefix = None))]
    fn keys<'py>(
        &self,
        py: Python<'py>,
        prefix: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let prefix = prefix.map(bytes_of).transpose()?.unwrap_or_default();
        let keys = py
            .detach(|| {
                self.fs
                    .list_prefix(&*prefix)
                    .map(|r| r.map(|(k, _)| k))
                    .collect::<cairn::Result<Vec<_>>>()
            })
            .or_raise()?;
        Ok(keys.iter().map(|k| PyBytes::new(py, k)).collect())
    }

    /// Totals of the file store, as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let st = py.detach(|| self.fs.stats()).or_raise()?;
        dict_of(py, &st)
    }
}

/// Where a writer is in its life.
enum WriterState {
    Open(Box<cairn_files::FileWriter>),
    Committed(cairn_files::FileStat),
    Aborted,
}

/// The raw writer of one new file version: `write`, then `commit` (or `abort`).
#[pyclass(frozen, module = "cairn._cairn")]
pub struct RawWriter {
    w: Mutex<WriterState>,
}

fn not_open() -> PyErr {
    PyValueError::new_err("I/O operation on closed file")
}

#[pymethods]
impl RawWriter {
    /// Appends `data`; returns its length.
    fn write(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<usize> {
        let data = bytes_of(data)?;
        py.detach(|| match &mut *self.w.lock() {
            WriterState::Open(w) => w.write_all(&data).map(|()| data.len()).map_err(PyErr::from),
            _ => Err(not_open()),
        })
    }

    /// Bytes written so far.
    fn tell(&self) -> PyResult<u64> {
        match &*self.w.lock() {
            WriterState::Open(w) => Ok(w.bytes_written()),
            WriterState::Committed(s) => Ok(s.size),
            WriterState::Aborted => Err(not_open()),
        }
    }

    /// Makes the file visible atomically and returns its stat; once.
    fn commit<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let st = py.detach(|| {
            let mut g = self.w.lock();
            match std::mem::replace(&mut *g, WriterState::Aborted) {
                WriterState::Open(w) => {
                    let st = w.commit().or_raise()?;
                    *g = WriterState::Committed(st.clone());
                    Ok(st)
                }
                WriterState::Committed(st) => {
                    *g = WriterState::Committed(st.clone());
                    Ok(st)
                }
                WriterState::Aborted => Err(not_open()),
            }
        })?;
        stat_dict(py, &st)
    }

    /// Drops what was written; nothing of it becomes visible.
    fn abort(&self, py: Python<'_>) {
        py.detach(|| {
            let mut g = self.w.lock();
            if let WriterState::Open(w) = std::mem::replace(&mut *g, WriterState::Aborted) {
                w.abort();
            }
        });
    }
}

/// The raw reader of one committed file version: `read`, `seek`, `tell`.
#[pyclass(frozen, module = "cairn._cairn")]
pub struct RawReader {
    r: Mutex<cairn_files::FileReader>,
}

#[pymethods]
impl RawReader {
    /// Up to `n` bytes from the position (fewer at the end; empty at or past it).
    fn read<'py>(&self, py: Python<'py>, n: usize) -> PyResult<Bound<'py, PyBytes>> {
        let data = py.detach(|| {
            let mut r = self.r.lock();
            let left = r.len().saturating_sub(r.position());
            let n = n.min(usize::try_from(left).unwrap_or(usize::MAX));
            let mut buf = vec![0u8; n];
            let mut got = 0;
            while got < n {
                match r.read(&mut buf[got..]) {
                    Ok(0) => break,
                    Ok(k) => got += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            buf.truncate(got);
            Ok(buf)
        })?;
        Ok(PyBytes::new(py, &data))
    }

    /// Moves the position (`whence` 0: from the start, 1: from here, 2: from the end);
    /// returns the new position.
    #[pyo3(signature = (offset, whence = 0))]
    fn seek(&self, py: Python<'_>, offset: i64, whence: i32) -> PyResult<u64> {
        let pos = match whence {
            0 => SeekFrom::Start(
                u64::try_from(offset)
                    .map_err(|_| PyValueError::new_err("negative seek position"))?,
            ),
            1 => SeekFrom::Current(offset),
            2 => SeekFrom::End(offset),
            _ => return Err(PyValueError::new_err(format!("invalid whence ({whence})"))),
        };
        Ok(py.detach(|| self.r.lock().seek(pos))?)
    }

    /// The position.
    fn tell(&self) -> u64 {
        self.r.lock().position()
    }

    /// The file's length.
    #[getter]
    fn size(&self) -> u64 {
        self.r.lock().len()
    }

    /// The stat of the version being read.
    fn stat<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stat_dict(py, self.r.lock().stat())
    }
}
