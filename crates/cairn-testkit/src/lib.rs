//! Helpers shared by cairn's tests and benchmarks.
//!
//! [`loopback_addrs`] hands out loopback addresses for servers a test starts later.
//! Asking the kernel for a free port (binding port 0, then closing) is racy here: such a
//! port is in the *ephemeral* range, which the kernel also gives to every outgoing
//! connection — a replica's Raft client, a test's client, another test's server — so
//! that, between the probe and the server's own `bind`, the port may become the local
//! end of some connection and the server fails with `AddrInUse`. The ports handed out
//! here lie below the ephemeral range, so no outgoing connection takes them; a
//! process-wide counter (starting at a point derived from the process id, so that
//! concurrent test processes start far apart) keeps the threads of one process apart,
//! and each port is probed once so that one still held by a listener is skipped.
//!
//! ```
//! let addrs = cairn_testkit::loopback_addrs(3);
//! assert_eq!(addrs.len(), 3);
//! assert!(addrs.iter().all(|a| a.ip().is_loopback()));
//! ```
#![deny(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU32, Ordering};

/// The first port handed out, inclusive.
const LOW: u32 = 20_000;
/// The end of the ports handed out, exclusive: the usual start of Linux's ephemeral
/// range (`net.ipv4.ip_local_port_range`), or the actual start if it is lower and
/// leaves room.
const HIGH: u32 = 32_768;

/// The next offset into `LOW..high`, shared by every thread of the process.
static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);

/// The end of the range to hand out from: below the kernel's ephemeral ports.
fn high() -> u32 {
    let start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .next()
                .and_then(|p| p.parse::<u32>().ok())
        });
    match start {
        Some(s) if s > LOW + 1_000 => s.min(HIGH),
        _ => HIGH,
    }
}

/// `n` loopback addresses (127.0.0.1) whose ports no listener holds now and that
/// outgoing connections never take; distinct from every address handed out before in
/// this process (until the range of ~12,000 ports wraps).
///
/// # Panics
/// If no free port is found after probing the whole range twice (a test helper: the
/// test cannot go on).
pub fn loopback_addrs(n: usize) -> Vec<SocketAddr> {
    let span = high() - LOW;
    let _ = NEXT.compare_exchange(
        u32::MAX,
        (std::process::id().wrapping_mul(2_654_435_761)) % span,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    take(&NEXT, span, n)
}

/// `n` bindable addresses from `LOW..LOW + span`, from the offset `next` onwards.
fn take(next: &AtomicU32, span: u32, n: usize) -> Vec<SocketAddr> {
    let mut out = Vec::with_capacity(n);
    let mut probes = 0u32;
    while out.len() < n {
        assert!(
            probes < 2 * span,
            "no free loopback port in {LOW}..{}",
            LOW + span
        );
        probes += 1;
        let port = LOW + next.fetch_add(1, Ordering::Relaxed) % span;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port as u16));
        if TcpListener::bind(addr).is_ok() {
            out.push(addr);
        }
    }
    out
}

/// One address as [`loopback_addrs`] gives them.
pub fn loopback_addr() -> SocketAddr {
    loopback_addrs(1)[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_distinct_bindable_and_below_the_ephemeral_range() {
        let a = loopback_addrs(50);
        let mut ports: Vec<u16> = a.iter().map(SocketAddr::port).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 50);
        assert!(ports
            .iter()
            .all(|&p| u32::from(p) >= LOW && u32::from(p) < high()));
        for addr in a {
            TcpListener::bind(addr).unwrap();
        }
    }

    #[test]
    fn a_held_port_is_skipped() {
        let held = TcpListener::bind(loopback_addr()).unwrap();
        let port = held.local_addr().unwrap().port();
        // A counter that points at the held port: it must be skipped.
        let next = AtomicU32::new(u32::from(port) - LOW);
        let got = take(&next, high() - LOW, 1)[0];
        assert_ne!(got.port(), port);
    }
}
