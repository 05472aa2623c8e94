//! How the store's background threads are woken: one notifier ([`Wakeups`]) with its
//! own lock, which guards nothing but the requests pending for the maintenance thread.
//! The seal queue, the shutdown flag and the requests each change before the notifier
//! is told ([`Wakeups::notify`]), and a sleeper checks them under the notifier's lock
//! before it sleeps, so no wake-up is lost between its check and its sleep.

use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// A request to the maintenance thread, pending until it takes it ([`Wakeups::take`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// A shard asked for a spare segment.
    Spare,
    /// A commit log file is full and waits for its checkpoint.
    Checkpoint,
}

/// Why the background threads are woken. Every wake-up wakes every sleeper: the
/// maintenance thread waiting for work, and a thread pausing (the compaction thread when
/// idle, either thread after a failure).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// A rotated segment was queued for sealing (the maintenance thread's work; after
    /// it, compaction may find a segment to compact).
    SealQueued,
    /// The store is closing: every background thread returns.
    Shutdown,
    /// A request for the maintenance thread.
    Request(Request),
}

/// The requests pending, behind the notifier's lock.
#[derive(Default)]
struct Pending {
    spare: bool,
    checkpoint: bool,
}

impl Pending {
    fn flag(&mut self, r: Request) -> &mut bool {
        match r {
            Request::Spare => &mut self.spare,
            Request::Checkpoint => &mut self.checkpoint,
        }
    }
}

/// The background threads' notifier (see the module documentation).
#[derive(Default)]
pub(crate) struct Wakeups {
    pending: Mutex<Pending>,
    cond: Condvar,
}

impl Wakeups {
    /// Wakes the sleepers for `why`; a request is recorded first. The state a sleeper
    /// checks (the seal queue, the shutdown flag) changed before this call. A request
    /// already pending wakes nobody again.
    pub fn notify(&self, why: Wake) {
        let mut p = self.pending.lock();
        if let Wake::Request(r) = why {
            if std::mem::replace(p.flag(r), true) {
                return;
            }
        }
        self.cond.notify_all();
    }

    /// Takes request `r`: returns whether it was pending.
    pub fn take(&self, r: Request) -> bool {
        std::mem::take(self.pending.lock().flag(r))
    }

    /// The maintenance thread's wait for work: returns at once while a request is pending
    /// or `ready` (checked under the notifier's lock) says there is other work or a
    /// shutdown, else sleeps until woken or for `timeout`.
    pub fn wait_for_work(&self, timeout: Duration, ready: impl Fn() -> bool) {
        let mut p = self.pending.lock();
        if !(p.spare || p.checkpoint || ready()) {
            self.cond.wait_for(&mut p, timeout);
        }
    }

    /// Sleeps until the next wake-up, whatever is pending, or for `timeout`; returns at
    /// once if `stop` (checked under the notifier's lock) says the store is closing.
    pub fn pause(&self, timeout: Duration, stop: impl Fn() -> bool) {
        let mut p = self.pending.lock();
        if !stop() {
            self.cond.wait_for(&mut p, timeout);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;

    #[test]
    fn a_request_is_pending_until_taken_once() {
        let w = Wakeups::default();
        w.notify(Wake::Request(Request::Spare));
        w.notify(Wake::Request(Request::Spare));
        assert!(!w.take(Request::Checkpoint));
        assert!(w.take(Request::Spare));
        assert!(!w.take(Request::Spare));
    }

    #[test]
    fn a_pending_request_or_ready_work_ends_the_wait_at_once() {
        let w = Wakeups::default();
        let t = Instant::now();
        w.notify(Wake::Request(Request::Checkpoint));
        w.wait_for_work(Duration::from_secs(30), || false);
        assert!(w.take(Request::Checkpoint));
        w.wait_for_work(Duration::from_secs(30), || true);
        w.pause(Duration::from_secs(30), || true);
        assert!(t.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn a_sleeper_wakes_at_shutdown() {
        let w = Arc::new(Wakeups::default());
        let stop = Arc::new(AtomicBool::new(false));
        let sleeper = {
            let (w, stop) = (w.clone(), stop.clone());
            std::thread::spawn(move || {
                let t = Instant::now();
                while !stop.load(Ordering::SeqCst) {
                    w.pause(Duration::from_secs(30), || stop.load(Ordering::SeqCst));
                }
                t.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        stop.store(true, Ordering::SeqCst);
        w.notify(Wake::Shutdown);
        assert!(sleeper.join().unwrap() < Duration::from_secs(20));
    }
}
