//! Memory of the process that serves a target of `cairn fs-bench`: its resident set
//! (anonymous and file-backed parts) and peak, from `/proc/PID/status`, and for the
//! library target the engine's own count of its index.

use serde::Serialize;

use crate::measure;

/// The memory of the process serving a target, at one moment.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct Memory {
    /// Resident set (`VmRSS`), bytes.
    pub rss_bytes: u64,
    /// Its anonymous part (`RssAnon`: the heap, the index), bytes.
    pub anon_bytes: u64,
    /// Its file-backed part (`RssFile`: mapped segment pages; the kernel drops them
    /// when memory is short), bytes.
    pub file_bytes: u64,
    /// Peak resident set since the target started (`VmHWM`), bytes.
    pub peak_rss_bytes: u64,
}

impl Memory {
    /// The memory of process `pid` (`None`: this process), or `None` where `/proc`
    /// can't tell (not Linux, the process gone).
    pub(super) fn of(pid: Option<i32>) -> Option<Memory> {
        let path = match pid {
            Some(p) => format!("/proc/{p}/status"),
            None => "/proc/self/status".into(),
        };
        let text = std::fs::read_to_string(path).ok()?;
        let field = |name: &str| measure::status_field_kib(&text, name).map(|k| k * 1024);
        Some(Memory {
            rss_bytes: field("VmRSS:")?,
            anon_bytes: field("RssAnon:")?,
            file_bytes: field("RssFile:")?,
            peak_rss_bytes: field("VmHWM:")?,
        })
    }
}

/// Watches the anonymous memory of a process (`RssAnon`, which `/proc` keeps no peak
/// of) every 100 ms on a thread of its own until dropped: [`PeakAnon::peak`] is the
/// highest seen. The heap and the index are anonymous; mapped segment pages are not,
/// and the kernel drops those under pressure, so this is the memory a store needs.
pub(super) struct PeakAnon {
    peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PeakAnon {
    /// Starts watching process `pid` (`None`: this one).
    pub(super) fn start(pid: Option<i32>) -> PeakAnon {
        use std::sync::atomic::Ordering::Relaxed;
        let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("fs-bench-memory".into())
            .spawn(move || {
                while !s.load(Relaxed) {
                    if let Some(m) = Memory::of(pid) {
                        p.fetch_max(m.anon_bytes, Relaxed);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
            })
            .ok();
        PeakAnon { peak, stop, thread }
    }

    /// The highest anonymous memory seen so far, bytes (0 if none could be read).
    pub(super) fn peak(&self) -> u64 {
        self.peak.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for PeakAnon {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `bytes` as GiB or MiB, for the report.
pub(super) fn human(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.0} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let Some(m) = Memory::of(None) else { return };
        assert!(m.rss_bytes > 0);
        assert!(m.peak_rss_bytes >= m.rss_bytes);
        assert!(m.anon_bytes + m.file_bytes <= m.rss_bytes + (1 << 20));
    }

    #[test]
    fn human_units() {
        assert_eq!(human(3 << 30), "3.00 GiB");
        assert_eq!(human(5 << 20), "5 MiB");
    }
}
