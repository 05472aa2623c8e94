//! A client's connections to one server id: one per replica of its group, and which
//! one it believes leads. A replica that does not lead refuses a request untouched and
//! names the leader it knows (`crate::NOT_LEADER`); one that cannot be reached is
//! passed over for the next.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use tonic::transport::Channel;

use crate::config::ServerInfo;
use crate::proto::meta_client::MetaClient;
use crate::transport::Reach;

/// Longest one attempt at a replicated group's replica may take before the client
/// tries another (for requests safe to repeat): about two elections.
pub(crate) const ATTEMPT: Duration = Duration::from_secs(3);

/// A token for a request that changes a name (create, link, unlink, rmdir, rename),
/// unique to it (nonzero; a random base per process, then counted): a copy of the
/// request that reaches a server after the first was done is answered as done (the
/// entry a create made holds its token; the others are in the server's ledger of done
/// requests) instead of `EEXIST` or `ENOENT`, so the client may send it again after a
/// lost reply.
pub(crate) fn request_token() -> u64 {
    use std::hash::BuildHasher;
    static BASE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let base = *BASE.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0u64));
    base.wrapping_add(
        NEXT.fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15),
    ) | 1
}

/// The connections to one group: a client's to the replicas' `Meta` service.
pub(crate) type Group = Replicas<MetaClient<Channel>>;

/// [`Group`]'s connections to every replica of `s` (lazy; inside a tokio runtime).
pub(crate) fn group(
    reach: &Reach,
    s: &ServerInfo,
    connect_timeout: Duration,
) -> Result<Group, crate::tls::TlsError> {
    Replicas::new(reach, s, connect_timeout, crate::transport::meta_client)
}

/// Most replicas a set keeps connections to: those of the cluster file, then leaders
/// that replicas named and the file did not list (a replica added since), up to this.
const MOST: usize = 16;

/// The connections to one server id's replicas (lazy: opened on first use, reopened
/// after failures), and the one requests go to. A replica that does not lead names
/// the one it believes does; a named replica the cluster file did not list (added to
/// the group since) is connected to and kept.
pub(crate) struct Replicas<T> {
    group: u32,
    reach: Reach,
    connect_timeout: Duration,
    make: fn(Channel) -> T,
    list: RwLock<Vec<(SocketAddr, T)>>,
    /// The replica requests go to.
    at: AtomicUsize,
}

impl<T: Clone> Replicas<T> {
    /// Lazy connections to every replica of `s`, each made by `make` from its channel
    /// (inside a tokio runtime).
    pub(crate) fn new(
        reach: &Reach,
        s: &ServerInfo,
        connect_timeout: Duration,
        make: fn(Channel) -> T,
    ) -> Result<Replicas<T>, crate::tls::TlsError> {
        let list = reach
            .replica_channels(s, connect_timeout)?
            .into_iter()
            .map(|(a, ch)| (a, make(ch)))
            .collect();
        Ok(Replicas {
            group: s.id,
            reach: reach.clone(),
            connect_timeout,
            make,
            list: RwLock::new(list),
            at: AtomicUsize::new(0),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<(SocketAddr, T)>> {
        self.list.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the group has more than one replica.
    pub(crate) fn replicated(&self) -> bool {
        self.read().len() > 1
    }

    /// The replica to send to now: its index and connection.
    pub(crate) fn current(&self) -> (usize, T) {
        let list = self.read();
        let i = self.at.load(Ordering::Relaxed) % list.len().max(1);
        (i, list[i].1.clone())
    }

    /// The first replica's connection.
    pub(crate) fn first(&self) -> T {
        self.read()[0].1.clone()
    }

    /// Replica `i` failed: the next one is tried (unless another request moved on
    /// already).
    pub(crate) fn pass_over(&self, i: usize) {
        let n = self.read().len().max(1);
        let _ = self
            .at
            .compare_exchange(i, (i + 1) % n, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Replica `i` refused as not the leader, naming `hint` (may be empty): goes to
    /// the named replica (connected to first if the list did not hold it), else to
    /// the next. Whether the hint named a replica.
    pub(crate) fn follow(&self, i: usize, hint: &str) -> bool {
        let Ok(addr) = hint.parse::<SocketAddr>() else {
            self.pass_over(i);
            return false;
        };
        let known = self.read().iter().position(|(r, _)| *r == addr);
        let j = match known {
            Some(j) => Some(j),
            None => self.learn(addr),
        };
        match j {
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

    /// Connects to a replica at `addr` the list does not hold; its index.
    fn learn(&self, addr: SocketAddr) -> Option<usize> {
        let ch = self
            .reach
            .channel_to(self.group, addr, self.connect_timeout)
            .ok()?;
        let mut list = self.list.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(j) = list.iter().position(|(r, _)| *r == addr) {
            return Some(j);
        }
        if list.len() >= MOST {
            return None;
        }
        tracing::info!(
            group = self.group,
            "following a leader the cluster file does not list: {addr}"
        );
        list.push((addr, (self.make)(ch)));
        Some(list.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::ReplicaInfo;

    /// A replica named as leader that the list did not hold is connected to and kept;
    /// a hint that is no address passes over to the next replica.
    #[tokio::test]
    async fn follows_a_leader_the_file_does_not_list() {
        let a = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        let s = ServerInfo::group(
            3,
            vec![
                ReplicaInfo { id: 0, addr: a(1) },
                ReplicaInfo { id: 1, addr: a(2) },
            ],
        )
        .unwrap();
        let dial: crate::transport::Dialer = Arc::new(|addr: SocketAddr, _| {
            tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                .unwrap()
                .connect_lazy()
        });
        let r: Replicas<SocketAddr> = Replicas {
            group: 3,
            reach: Reach::Custom(dial),
            connect_timeout: Duration::from_secs(1),
            make: |_| SocketAddr::from(([127, 0, 0, 1], 0)),
            list: RwLock::new(vec![]),
            at: AtomicUsize::new(0),
        };
        *r.list.write().unwrap() = s.replicas.iter().map(|x| (x.addr, x.addr)).collect();
        assert!(r.follow(0, &a(2).to_string()));
        assert_eq!(r.current().0, 1);
        assert!(r.follow(1, &a(9).to_string()));
        assert_eq!(r.current().0, 2);
        assert_eq!(r.read().len(), 3);
        assert!(r.follow(0, &a(9).to_string()), "known now");
        assert_eq!(r.read().len(), 3);
        assert!(!r.follow(2, "nonsense"));
        assert_eq!(r.current().0, 0);
    }
}
