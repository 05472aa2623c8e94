//! Test hooks on the store's file operations: fault injection ([`FaultInjector`], a
//! hook consulted before every file write, sync and create, so tests can make the store
//! meet `ENOSPC` or `EIO` at a chosen moment) and simulated power loss ([`PowerLoss`]:
//! what a power cut could still lose, and a power switch).

use std::io;

pub use crate::powerloss::{seeds, Loss, PowerLoss, Restart, PAGE};
use std::sync::atomic::{AtomicI32, AtomicI64, Ordering};

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
