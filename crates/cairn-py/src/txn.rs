//! `Snapshot` and `Transaction`: a store as it was at one point, and optimistic
//! transactions over one (DESIGN.md, "Snapshots and transactions").

use parking_lot::{Mutex, RwLock};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::read::{read_methods, Iter, Put, Reads, Span, Writes};
use crate::OrRaise;

/// A keyspace as it was when `snapshot()` was called: every read through it sees
/// exactly that, while writes, compaction and reclamation go on. The store keeps what it
/// may still read until the snapshot is let go of (`release`, the end of its `with`
/// block, or its last reference dropped — iterators made from it keep it too).
#[pyclass(frozen, module = "cairn._cairn")]
pub struct Snapshot {
    /// `None` once released.
    snap: RwLock<Option<cairn::Snapshot>>,
}

impl Snapshot {
    pub(crate) fn new(snap: cairn::Snapshot) -> Snapshot {
        Snapshot {
            snap: RwLock::new(Some(snap)),
        }
    }

    /// The snapshot (a cheap shared handle), or `Closed` once released.
    fn live(&self) -> PyResult<cairn::Snapshot> {
        self.snap
            .read()
            .clone()
            .ok_or_else(|| crate::Closed::new_err("the snapshot was released"))
    }
}

impl Reads for Snapshot {
    fn read(&self, py: Python<'_>, key: &[u8]) -> PyResult<Option<cairn::Value>> {
        let snap = self.live()?;
        py.detach(|| snap.get(key)).or_raise()
    }

    fn has(&self, _py: Python<'_>, key: &[u8]) -> PyResult<bool> {
        // Answered from memory: the GIL is kept.
        self.live()?.contains(key).or_raise()
    }

    fn scan(&self, span: Span, reverse: bool) -> PyResult<Iter> {
        let snap = self.live()?;
        Ok(match span {
            Span::Range(lo, hi) => Iter::new(snap.range::<Vec<u8>, _>((lo, hi)), reverse),
            Span::Prefix(p) => Iter::new(snap.prefix(p), reverse),
        })
    }
}

read_methods!(Snapshot {
    /// The number of the last write it sees (every write takes the next one).
    #[getter]
    fn seq(&self) -> PyResult<u64> {
        Ok(self.live()?.seq())
    }

    /// The keyspace it reads.
    #[getter]
    fn id(&self) -> PyResult<u8> {
        Ok(self.live()?.keyspace_id())
    }

    /// The same point of the store, reading keyspace `id`.
    fn keyspace(&self, id: u8) -> PyResult<Snapshot> {
        Ok(Snapshot::new(self.live()?.keyspace(id)))
    }

    /// Lets the snapshot go (iterators made from it keep it until they are dropped).
    /// Later reads raise `Closed`; releasing twice is allowed.
    fn release(&self) {
        self.snap.write().take();
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, PyTuple>) -> bool {
        self.release();
        false
    }

    fn __repr__(&self) -> String {
        match &*self.snap.read() {
            Some(s) => format!("<cairn.Snapshot seq={} keyspace={}>", s.seq(), s.keyspace_id()),
            None => "<cairn.Snapshot released>".to_owned(),
        }
    }
});

/// Where a transaction is in its life.
enum TxState {
    /// Reading and buffering writes.
    Open(cairn::Transaction),
    /// Its writes were applied.
    Committed,
    /// Rolled back, or its commit failed: nothing of it was written.
    RolledBack,
}

impl TxState {
    fn over(&self) -> &'static str {
        match self {
            TxState::Open(_) => "the transaction is open",
            TxState::Committed => "the transaction has committed",
            TxState::RolledBack => "the transaction was rolled back",
        }
    }
}

/// An optimistic transaction (`Db.transaction()`): reads see the snapshot taken when it
/// began, under its own writes; writes are buffered; `commit` applies them as one
/// atomic batch only if nothing it read — keys it got or asked about, ranges it scanned —
/// was written by anyone since (else it raises `Conflict` and writes nothing). A
/// context manager: commits at the end of a block left normally, rolls back at the end
/// of one left by an exception.
#[pyclass(frozen, module = "cairn._cairn")]
pub struct Transaction {
    state: Mutex<TxState>,
}

impl Transaction {
    pub(crate) fn new(tx: cairn::Transaction) -> Transaction {
        Transaction {
            state: Mutex::new(TxState::Open(tx)),
        }
    }

    /// Runs `f` on the open transaction with the GIL released; `Closed` once it ended.
    fn open<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut cairn::Transaction) -> cairn::Result<R> + Send,
    ) -> PyResult<R> {
        let out = py.detach(|| match &mut *self.state.lock() {
            TxState::Open(tx) => Ok(f(tx)),
            ended => Err(ended.over()),
        });
        out.map_err(crate::Closed::new_err)?.or_raise()
    }
}

impl Reads for Transaction {
    fn read(&self, py: Python<'_>, key: &[u8]) -> PyResult<Option<cairn::Value>> {
        self.open(py, |tx| tx.get(key))
    }

    fn has(&self, py: Python<'_>, key: &[u8]) -> PyResult<bool> {
        self.open(py, |tx| tx.contains(key))
    }

    fn scan(&self, span: Span, reverse: bool) -> PyResult<Iter> {
        match &mut *self.state.lock() {
            TxState::Open(tx) => Ok(match span {
                Span::Range(lo, hi) => Iter::new(tx.range::<Vec<u8>, _>((lo, hi)), reverse),
                Span::Prefix(p) => Iter::new(tx.prefix(p), reverse),
            }),
            ended => Err(crate::Closed::new_err(ended.over())),
        }
    }
}

impl Writes for Transaction {
    fn write_put(&self, py: Python<'_>, key: &[u8], value: &[u8], kind: Put) -> PyResult<()> {
        self.open(py, |tx| match kind {
            Put::Any => tx.put(key, value),
            Put::New => tx.put_new(key, value),
        })
    }

    fn write_delete(&self, py: Python<'_>, key: &[u8]) -> PyResult<()> {
        self.open(py, |tx| tx.delete(key))
    }
}

// Its writes take effect when it commits (`put_new`'s check too).
read_methods!(writes Transaction {
    /// Applies its writes atomically if nothing it read changed since its snapshot;
    /// else raises `Conflict` (or `KeyExists` for a `put_new`) and writes nothing.
    /// Either way the transaction is over.
    pub(crate) fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let tx = {
            let mut st = self.state.lock();
            match std::mem::replace(&mut *st, TxState::RolledBack) {
                TxState::Open(tx) => tx,
                ended => {
                    let msg = ended.over();
                    *st = ended;
                    return Err(crate::Closed::new_err(msg));
                }
            }
        };
        py.detach(|| tx.commit()).or_raise()?;
        *self.state.lock() = TxState::Committed;
        Ok(())
    }

    /// Drops its writes; nothing of it is written. Rolling back an ended transaction
    /// does nothing.
    pub(crate) fn rollback(&self) {
        let mut st = self.state.lock();
        if let TxState::Open(_) = &*st {
            *st = TxState::RolledBack;
        }
    }

    /// Whether it can still read and write (not committed nor rolled back).
    #[getter]
    fn active(&self) -> bool {
        matches!(&*self.state.lock(), TxState::Open(_))
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Commits if the block ended normally (and the transaction is still open), rolls
    /// back if it ended by an exception.
    #[pyo3(signature = (exc_type, _exc = None, _tb = None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let failed = exc_type.is_some_and(|t| !t.is_none());
        if failed || !self.active() {
            self.rollback();
        } else {
            self.commit(py)?;
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match &*self.state.lock() {
            TxState::Open(tx) => format!("<cairn.Transaction open seq={}>", tx.snapshot().seq()),
            TxState::Committed => "<cairn.Transaction committed>".to_owned(),
            TxState::RolledBack => "<cairn.Transaction rolled back>".to_owned(),
        }
    }
});
