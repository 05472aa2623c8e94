//! The periodic write-out of a mount: a thread that, every interval, asks the file
//! system to make what it holds durable ([`cairn_fs::FileSystem::fsync`] of the root:
//! for a local store, the directory times it deferred and the engine's write buffers,
//! written to the segment files and synced). Without it a store's mount writes out only
//! when a buffer fills, at an fsync and at the unmount, so a killed mount (or a machine
//! losing power) could lose every write acknowledged since. The thread stops, and is
//! joined, before the file system is closed.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often a local store's mount writes out what it holds by default
/// ([`crate::MountOptions::flush_interval`]).
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(5);

/// Whether the last write-out worked: a failure is logged when it starts and when it
/// ends, not at every tick.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Health {
    Writing,
    Failing,
}

/// A running periodic write-out; [`Flusher::stop`] ends it.
pub(crate) struct Flusher {
    /// Dropped (by [`Flusher::stop`]) to wake the thread and end it.
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl Flusher {
    /// Calls `write_out` every `every` on a thread of its own until [`Flusher::stop`];
    /// its failures are logged on standard error (the mount's log).
    pub(crate) fn start(
        every: Duration,
        mut write_out: impl FnMut() -> Result<(), String> + Send + 'static,
    ) -> std::io::Result<Flusher> {
        let (stop, wake) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("cairn-flush".into())
            .spawn(move || {
                let mut health = Health::Writing;
                while let Err(RecvTimeoutError::Timeout) = wake.recv_timeout(every) {
                    let now = match write_out() {
                        Ok(()) => Health::Writing,
                        Err(e) => {
                            if health == Health::Writing {
                                eprintln!("cairn: periodic write-out failed: {e}");
                            }
                            Health::Failing
                        }
                    };
                    if now == Health::Writing && health == Health::Failing {
                        eprintln!("cairn: periodic write-out works again");
                    }
                    health = now;
                }
            })?;
        Ok(Flusher { stop, thread })
    }

    /// Ends the write-outs: waits for one under way, then for the thread.
    pub(crate) fn stop(self) {
        drop(self.stop);
        if self.thread.join().is_err() {
            eprintln!("cairn: the periodic write-out thread panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;

    #[test]
    fn writes_out_every_interval_until_stopped() {
        let calls = Arc::new(AtomicU32::new(0));
        let c = calls.clone();
        let f = Flusher::start(Duration::from_millis(20), move || {
            c.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
        let start = Instant::now();
        while calls.load(Ordering::SeqCst) < 3 {
            assert!(start.elapsed() < Duration::from_secs(10), "no write-outs");
            std::thread::sleep(Duration::from_millis(5));
        }
        f.stop();
        let after = calls.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            after,
            "a write-out after stop"
        );
    }

    #[test]
    fn none_before_the_interval_and_stop_is_prompt() {
        let calls = Arc::new(AtomicU32::new(0));
        let c = calls.clone();
        let f = Flusher::start(Duration::from_secs(3600), move || {
            c.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let start = Instant::now();
        f.stop();
        assert!(start.elapsed() < Duration::from_secs(5), "stop waited");
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn failures_do_not_stop_it() {
        let calls = Arc::new(AtomicU32::new(0));
        let c = calls.clone();
        let f = Flusher::start(Duration::from_millis(10), move || {
            let n = c.fetch_add(1, Ordering::SeqCst);
            if n % 2 == 0 {
                Err("disk full".into())
            } else {
                Ok(())
            }
        })
        .unwrap();
        let start = Instant::now();
        while calls.load(Ordering::SeqCst) < 5 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "stopped after a failure"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        f.stop();
    }
}
