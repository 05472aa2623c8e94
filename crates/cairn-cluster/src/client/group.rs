//! A client's connections to one server id: one per replica of its group, and which
//! one it believes leads. A replica that does not lead refuses a request untouched and
//! names the leader it knows (`crate::NOT_LEADER`); one that cannot be reached is
//! passed over for the next.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tonic::transport::Channel;

use crate::config::ServerInfo;
use crate::proto::meta_client::MetaClient;
use crate::transport::Reach;

/// Longest one attempt at a replicated group's replica may take before the client
/// tries another (for requests safe to repeat): about two elections.
pub(crate) const ATTEMPT: Duration = Duration::from_secs(3);

/// A token for a create, unique to it (nonzero; a random base per process, then
/// counted): a copy of the create that reaches a server after the first was made is
/// answered as made instead of `EEXIST`.
pub(crate) fn create_token() -> u64 {
    use std::hash::BuildHasher;
    static BASE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let base = *BASE.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0u64));
    base.wrapping_add(
        NEXT.fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15),
    ) | 1
}

/// The connections to one group.
pub(crate) struct Group {
    replicas: Vec<(SocketAddr, MetaClient<Channel>)>,
    /// The replica requests go to.
    at: AtomicUsize,
}

impl Group {
    /// Lazy connections to every replica of `s` (inside a tokio runtime).
    pub(crate) fn new(
        reach: &Reach,
        s: &ServerInfo,
        connect_timeout: Duration,
    ) -> Result<Group, crate::tls::TlsError> {
        let replicas = reach
            .replica_channels(s, connect_timeout)?
            .into_iter()
            .map(|(a, ch)| (a, crate::transport::meta_client(ch)))
            .collect();
        Ok(Group {
            replicas,
            at: AtomicUsize::new(0),
        })
    }

    /// Whether the group has more than one replica.
    pub(crate) fn replicated(&self) -> bool {
        self.replicas.len() > 1
    }

    /// The replica to send to now: its index and connection.
    pub(crate) fn current(&self) -> (usize, MetaClient<Channel>) {
        let i = self.at.load(Ordering::Relaxed) % self.replicas.len().max(1);
        (i, self.replicas[i].1.clone())
    }

    /// The first replica's connection.
    pub(crate) fn first(&self) -> MetaClient<Channel> {
        self.replicas[0].1.clone()
    }

    /// Replica `i` failed: the next one is tried (unless another request moved on
    /// already).
    pub(crate) fn pass_over(&self, i: usize) {
        let n = self.replicas.len();
        let _ = self
            .at
            .compare_exchange(i, (i + 1) % n, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Replica `i` refused as not the leader, naming `hint` (may be empty): goes to
    /// the named replica if it is one of the group, else to the next. Whether the
    /// hint named a replica.
    pub(crate) fn follow(&self, i: usize, hint: &str) -> bool {
        match hint
            .parse::<SocketAddr>()
            .ok()
            .and_then(|a| self.replicas.iter().position(|(r, _)| *r == a))
        {
            Some(j) => {
                self.at.store(j, Ordering::Relaxed);
                true
            }
            None => {
                self.pass_over(i);
                false
            }
        }
    }
}
