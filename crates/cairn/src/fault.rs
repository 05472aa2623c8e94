//! Test hooks on the store's file operations (feature `test-hooks`, not part of the
//! documented API): fault injection ([`FaultInjector`], a hook consulted before every
//! file write, sync and create, so tests can make the store meet `ENOSPC` or `EIO` at a
//! chosen moment) and simulated power loss ([`PowerLoss`]: what a power cut could still
//! lose, and a power switch). Both are implementations of the store's file-system seam
//! (`fsutil::FileOps`), put in place of the plain system calls by
//! [`crate::Options::fault_injector`] and [`crate::Options::power_loss`].

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicI64, Ordering};
use std::sync::Arc;

use crate::fsutil::{FileOps, Fs, OsFiles};
pub use crate::powerloss::{seeds, Loss, PowerLoss, Restart, PAGE};

/// Which kind of file operation a fault applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoOp {
    /// Writing bytes to a file.
    Write,
    /// fsync / fdatasync of a file or directory.
    Sync,
    /// Creating or renaming a file.
    Create,
}

/// Makes chosen file operations fail with a chosen `errno`.
///
/// ```
/// use cairn::fault::{FaultInjector, IoOp};
/// let f = FaultInjector::new();
/// f.fail_after(IoOp::Write, 0, libc::ENOSPC); // the next write fails
/// assert!(f.check(IoOp::Write).is_err());
/// f.clear();
/// assert!(f.check(IoOp::Write).is_ok());
/// ```
#[derive(Debug, Default)]
pub struct FaultInjector {
    /// Bit mask of the operations that fail (1 << op as u8); 0 = off.
    mask: AtomicI32,
    /// Number of matching operations still allowed to succeed; -1 = none left.
    remaining: AtomicI64,
    errno: AtomicI32,
}

fn bit(op: IoOp) -> i32 {
    1 << (op as i32)
}

impl FaultInjector {
    /// An injector that injects nothing until told to.
    pub fn new() -> FaultInjector {
        FaultInjector::default()
    }

    /// After `n` more successful operations of kind `op`, every further one fails with
    /// `errno` until [`FaultInjector::clear`].
    pub fn fail_after(&self, op: IoOp, n: u64, errno: i32) {
        self.errno.store(errno, Ordering::SeqCst);
        self.remaining.store(n as i64, Ordering::SeqCst);
        self.mask.fetch_or(bit(op), Ordering::SeqCst);
    }

    /// Stops injecting faults.
    pub fn clear(&self) {
        self.mask.store(0, Ordering::SeqCst);
    }

    /// Returns the injected error for an operation of kind `op`, if one is due.
    pub fn check(&self, op: IoOp) -> io::Result<()> {
        if self.mask.load(Ordering::Relaxed) & bit(op) == 0 {
            return Ok(());
        }
        if self.remaining.fetch_sub(1, Ordering::SeqCst) > 0 {
            return Ok(());
        }
        self.remaining.store(0, Ordering::SeqCst);
        Err(io::Error::from_raw_os_error(
            self.errno.load(Ordering::SeqCst),
        ))
    }
}

/// The file operations of a store with test hooks: through `power` when given (else the
/// plain system calls), each write, sync and create checked by `fault` first when given.
pub(crate) fn hooked_fs(fault: Option<Arc<FaultInjector>>, power: Option<Arc<PowerLoss>>) -> Fs {
    let inner: Arc<dyn FileOps> = match power {
        Some(p) => p,
        None => Arc::new(OsFiles),
    };
    match fault {
        Some(fault) => Fs::new(Arc::new(Faulty { fault, inner })),
        None => Fs::new(inner),
    }
}

/// File operations that consult a [`FaultInjector`] before each write, sync, create and
/// rename, and pass those allowed to `inner`.
struct Faulty {
    fault: Arc<FaultInjector>,
    inner: Arc<dyn FileOps>,
}

impl FileOps for Faulty {
    fn write_at(&self, file: &File, path: &Path, buf: &[u8], off: u64) -> io::Result<()> {
        self.fault.check(IoOp::Write)?;
        self.inner.write_at(file, path, buf, off)
    }

    fn sync_data(&self, file: &File, path: &Path) -> io::Result<()> {
        self.fault.check(IoOp::Sync)?;
        self.inner.sync_data(file, path)
    }

    fn sync_all(&self, file: &File, path: &Path) -> io::Result<()> {
        self.fault.check(IoOp::Sync)?;
        self.inner.sync_all(file, path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.fault.check(IoOp::Sync)?;
        self.inner.sync_dir(dir)
    }

    fn create_new(&self, path: &Path) -> io::Result<File> {
        self.fault.check(IoOp::Create)?;
        self.inner.create_new(path)
    }

    fn set_len(&self, file: &File, path: &Path, len: u64) -> io::Result<()> {
        self.inner.set_len(file, path, len)
    }

    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir(dir)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.fault.check(IoOp::Create)?;
        self.inner.rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.inner.remove(path)
    }

    fn hard_link(&self, src: &Path, dst: &Path) -> io::Result<()> {
        self.fault.check(IoOp::Create)?;
        self.inner.hard_link(src, dst)
    }

    fn copy_range(&self, src: &File, dst: &File, dst_path: &Path, len: u64) -> io::Result<u64> {
        self.fault.check(IoOp::Write)?;
        self.inner.copy_range(src, dst, dst_path, len)
    }

    /// No spares: a fault "after n operations" then meets the same operations every
    /// run, whatever the maintenance thread's timing.
    fn spares_ahead(&self) -> bool {
        false
    }
}
