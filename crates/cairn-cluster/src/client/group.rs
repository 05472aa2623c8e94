//! A client's connections to one server id: one per replica of its group, and which
//! one it believes leads. A replica that does not lead refuses a request untouched and
//! names the leader it knows (`crate::NOT_LEADER`); one that cannot be reached is
//! passed over for the next.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock};
use std::time::Duration;

// tokio's clock: real time, or virtual time in the simulation (turmoil pauses it).
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::config::ServerInfo;
use crate::proto::meta_client::MetaClient;
use crate::transport::Reach;

/// Longest the first attempt of a request safe to repeat may take at a replicated
/// group's replica before the client tries another, unless the cluster file says
/// otherwise: the servers' election timeout E (`election_timeout_ms` of the cluster
/// file, 1 s by default). A leader silent that long is one whose followers are electing
/// another (they stand after E to 1.2 E without a word from it), while a live
/// leader answers in milliseconds. Each further attempt of the same request may take
/// twice as long as the one before ([`Replicas::attempt`]), so a leader that is only
/// slow still gets to answer.
pub(crate) const FIRST_ATTEMPT: Duration =
    Duration::from_millis(crate::config::DEFAULT_ELECTION_TIMEOUT_MS);

/// A token for a request that changes something (create, link, unlink, rmdir, rename,
/// write, attribute change), unique to it (nonzero; a random base per process, then
/// counted): a copy of the request that reaches a server after the first was done is
/// answered as done from the server's ledger of done requests, instead of `EEXIST` or
/// `ENOENT` or done twice, so the client may send it again after a lost reply.
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
    /// The first attempt's time ([`FIRST_ATTEMPT`] unless the cluster file says).
    first_attempt: Duration,
    /// The replica that last left a request unanswered, and when: for
    /// the first attempt's time after, a follower that still names it as leader is not
    /// followed back to it (its followers have not yet elected another; the client
    /// tries the others until one has).
    silent: parking_lot::Mutex<Option<(usize, Instant)>>,
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
            first_attempt: FIRST_ATTEMPT,
            silent: parking_lot::Mutex::new(None),
        })
    }

    /// The same, giving a replica `first` to answer a first attempt (the groups'
    /// election timeout).
    pub(crate) fn with_first_attempt(mut self, first: Duration) -> Replicas<T> {
        self.first_attempt = first;
        self
    }

    /// The longest attempt number `n` (from 0) of a request safe to repeat may take
    /// at a replica: the first attempt's time doubled `n` times.
    pub(crate) fn attempt(&self, n: u32) -> Duration {
        self.first_attempt.saturating_mul(1 << n.min(16))
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

    /// Replica `i`'s address (for messages).
    pub(crate) fn addr(&self, i: usize) -> String {
        self.read()
            .get(i)
            .map_or_else(|| format!("#{i}"), |(a, _)| a.to_string())
    }

    /// The first replica's connection.
    pub(crate) fn first(&self) -> T {
        self.read()[0].1.clone()
    }

    /// The replica marked silent ([`Replicas::silenced`]) less than the first
    /// attempt's time ago, if any.
    fn silent(&self) -> Option<usize> {
        let s = self.silent.lock();
        s.filter(|(_, t)| t.elapsed() < self.first_attempt)
            .map(|(j, _)| j)
    }

    /// Replica `i` failed: the next one is tried (unless another request moved on
    /// already), passing over one that was silent a moment ago.
    pub(crate) fn pass_over(&self, i: usize) {
        let n = self.read().len().max(1);
        let mut next = (i + 1) % n;
        if n > 2 && self.silent() == Some(next) {
            next = (next + 1) % n;
        }
        let _ = self
            .at
            .compare_exchange(i, next, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Replica `i` left a request unanswered within its attempt's time: marked silent
    /// for the first attempt's time (a follower naming it as leader meanwhile is not followed
    /// back to it), and the next one is tried.
    pub(crate) fn silenced(&self, i: usize) {
        *self.silent.lock() = Some((i, Instant::now()));
        self.pass_over(i);
    }

    /// Replica `i` refused as not the leader, naming `hint` (may be empty): goes to
    /// the named replica (connected to first if the list did not hold it), else to
    /// the next. Whether the hint named a replica to go to: not one that was silent a
    /// moment ago (the follower has not yet heard of a new leader), which the caller
    /// treats as no hint (a pause, then the next replica).
    pub(crate) fn follow(&self, i: usize, hint: &str) -> bool {
        let Ok(addr) = hint.parse::<SocketAddr>() else {
            self.pass_over(i);
            return false;
        };
        let known = self.read().iter().position(|(r, _)| *r == addr);
        let j = match known {
            Some(j) if self.silent() == Some(j) => None,
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
            first_attempt: FIRST_ATTEMPT,
            silent: parking_lot::Mutex::new(None),
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
