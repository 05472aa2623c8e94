//! The client's lease sessions (DESIGN.md, "Leases"): a mount's client keeps one with
//! each server, renews it, and answers its revocations by making the mount's kernel
//! forget the names and inodes revoked ([`cairn_fs::Invalidator`]). What a server
//! answered under a lease may be kept by the kernel until the session's end as the
//! client knows it: the send time of its last renewal the server granted, plus the
//! lease time (the server counts from the renewal's receipt, later).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;
// tokio's clock: real time, or virtual time in the simulation.
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

use cairn_fs::{Invalidator, Validity};

use super::group::Group;
use super::Inner;
use crate::proto;

/// Revocations remembered to tell whether a reply's lease was revoked while it
/// travelled (older ones count as revoked).
const RECENT: usize = 4096;
/// Pause before a session is opened again after it ended.
const RECONNECT: Duration = Duration::from_millis(250);

/// A lease's subject, as the client names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Key {
    Name(u64, Vec<u8>),
    Inode(u64),
}

/// Where a session with one server stands.
#[derive(Clone, Copy, Debug)]
enum Standing {
    /// Not (yet) open, or ended: nothing it answers is leased.
    Down,
    /// Open; leases last until this instant.
    Up(Instant),
    /// The server grants no leases (`--lease-time 0`): the mount's timeouts apply.
    Off,
}

/// What the last call on this thread was granted (asked by the mount right after).
#[derive(Default)]
struct Last {
    entry: Option<(u64, Vec<u8>, Validity)>,
    attr: Option<(u64, Validity)>,
}

thread_local! {
    static LAST: RefCell<Last> = RefCell::new(Last::default());
}

/// The client's lease sessions.
pub(super) struct Leases {
    /// This client's id on its sessions (random, nonzero).
    id: u64,
    standing: Vec<Mutex<Standing>>,
    /// Revocations handled so far, and the most recent ones.
    epoch: AtomicU64,
    recent: Mutex<VecDeque<(u64, Key)>>,
    inv: OnceLock<Arc<dyn Invalidator>>,
}

impl Leases {
    /// Sessions with `servers` servers, none open yet.
    pub(super) fn new(servers: usize) -> Leases {
        Leases {
            id: super::group::request_token(),
            standing: (0..servers).map(|_| Mutex::new(Standing::Down)).collect(),
            epoch: AtomicU64::new(0),
            recent: Mutex::new(VecDeque::new()),
            inv: OnceLock::new(),
        }
    }

    /// The id requests carry (`Header.client`): 0 until sessions are opened.
    pub(super) fn id(&self) -> u64 {
        if self.inv.get().is_some() {
            self.id
        } else {
            0
        }
    }

    /// Revocations handled so far: taken before a request whose reply may carry a
    /// lease.
    pub(super) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// How long what server `s` answered under lease `lease_ms` (0: none) about `key`,
    /// asked at epoch `since`, may be kept.
    pub(super) fn validity(&self, s: usize, lease_ms: u32, key: &Key, since: u64) -> Validity {
        if self.inv.get().is_none() {
            return Validity::Configured;
        }
        let until = match self.standing.get(s).map(|m| *m.lock()) {
            Some(Standing::Off) | None => return Validity::Configured,
            Some(Standing::Down) => return Validity::For(Duration::ZERO),
            Some(Standing::Up(until)) => until,
        };
        if lease_ms == 0 || self.revoked_since(since, key) {
            return Validity::For(Duration::ZERO);
        }
        Validity::For(until.saturating_duration_since(Instant::now()))
    }

    fn revoked_since(&self, since: u64, key: &Key) -> bool {
        if self.epoch() == since {
            return false;
        }
        let r = self.recent.lock();
        match r.front() {
            Some((first, _)) if *first <= since + 1 => {
                r.iter().any(|(e, k)| *e > since && k == key)
            }
            _ => true,
        }
    }

    /// Starts the sessions with every server (once): from now on requests carry this
    /// client's id, and revocations are answered through `inv`.
    pub(super) fn start(
        self: &Arc<Self>,
        inv: Arc<dyn Invalidator>,
        client: Weak<Inner>,
        header: proto::Header,
        handle: &tokio::runtime::Handle,
    ) {
        if self.inv.set(inv).is_err() {
            return;
        }
        for s in 0..self.standing.len() {
            let h = proto::Header {
                client: self.id,
                ..header.clone()
            };
            handle.spawn(self.clone().keep(s, client.clone(), h));
        }
    }

    /// Keeps the session with server `s` open for as long as the client lives.
    async fn keep(self: Arc<Self>, s: usize, client: Weak<Inner>, h: proto::Header) {
        // The client's connections, while it lives (the session ends with it).
        let group = |f: &dyn Fn(&Group)| {
            if let Some(c) = client.upgrade() {
                if let Some(g) = c.conns.get(s) {
                    f(g);
                }
            }
        };
        loop {
            let Some((at, conn)) = client
                .upgrade()
                .and_then(|c| c.conns.get(s).map(Group::current))
            else {
                return;
            };
            match self.session(s, conn, h.clone()).await {
                Ended::Off => {
                    *self.standing[s].lock() = Standing::Off;
                    return;
                }
                Ended::Broken => {
                    *self.standing[s].lock() = Standing::Down;
                    group(&|g| g.pass_over(at));
                }
                Ended::Closed => *self.standing[s].lock() = Standing::Down,
            }
            tokio::time::sleep(RECONNECT).await;
        }
    }

    /// One session with server `s` over `conn`, until it ends.
    async fn session(
        &self,
        s: usize,
        mut conn: proto::meta_client::MetaClient<tonic::transport::Channel>,
        h: proto::Header,
    ) -> Ended {
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let mut renewals = Renewals::default();
        let first = proto::LeaseUp {
            h: Some(h),
            renew: renewals.next(),
            revoked: 0,
        };
        if tx.send(first).await.is_err() {
            return Ended::Broken;
        }
        let mut inbound = match conn.leases(ReceiverStream::new(rx)).await {
            Ok(r) => r.into_inner(),
            Err(e) if e.code() == tonic::Code::Unimplemented => return Ended::Off,
            Err(e) => {
                tracing::debug!("server {s}: lease session refused: {}", e.message());
                return Ended::Broken;
            }
        };
        let mut every = Duration::from_millis(500);
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                m = inbound.message() => {
                    let down = match m {
                        Ok(Some(d)) => d,
                        Ok(None) => return Ended::Closed,
                        Err(_) => return Ended::Broken,
                    };
                    if down.renewed != 0 {
                        if let Some(sent) = renewals.granted(down.renewed) {
                            let lease = Duration::from_millis(down.lease_ms.into());
                            *self.standing[s].lock() = Standing::Up(sent + lease);
                            if lease / 4 != every && !lease.is_zero() {
                                every = lease / 4;
                                tick = tokio::time::interval(every);
                            }
                        }
                    }
                    if down.seq != 0 {
                        self.revoke(&down.keys).await;
                        let up = proto::LeaseUp { revoked: down.seq, ..Default::default() };
                        if tx.send(up).await.is_err() {
                            return Ended::Broken;
                        }
                    }
                }
                _ = tick.tick() => {
                    let up = proto::LeaseUp { renew: renewals.next(), ..Default::default() };
                    if tx.send(up).await.is_err() {
                        return Ended::Broken;
                    }
                }
            }
        }
    }

    /// Makes the kernel forget `keys` (on a thread that may block: the kernel may wait
    /// for a directory's lock), noting them as revoked first.
    async fn revoke(&self, keys: &[proto::LeaseKey]) {
        let keys: Vec<Key> = keys
            .iter()
            .map(|k| {
                if k.ino != 0 {
                    Key::Inode(k.ino)
                } else {
                    Key::Name(k.dir, k.name.clone())
                }
            })
            .collect();
        {
            let mut r = self.recent.lock();
            for k in &keys {
                let e = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
                r.push_back((e, k.clone()));
                if r.len() > RECENT {
                    r.pop_front();
                }
            }
        }
        let Some(inv) = self.inv.get().cloned() else {
            return;
        };
        let forgot = tokio::task::spawn_blocking(move || {
            for k in keys {
                match k {
                    Key::Name(dir, name) => inv.entry(dir, &name),
                    Key::Inode(ino) => inv.inode(ino),
                }
            }
        })
        .await;
        if let Err(e) = forgot {
            tracing::warn!("forgetting revoked leases: {e}");
        }
    }
}

/// How a session ended.
enum Ended {
    /// The server grants no leases.
    Off,
    /// The connection failed (the server is down, or not the leader).
    Broken,
    /// The server closed it (stopping, or another session of this client replaced it).
    Closed,
}

/// Renewals sent and not yet answered: their numbers and send times.
#[derive(Default)]
struct Renewals {
    next: u64,
    sent: VecDeque<(u64, Instant)>,
}

impl Renewals {
    /// The number of a renewal sent now.
    fn next(&mut self) -> u64 {
        self.next += 1;
        self.sent.push_back((self.next, Instant::now()));
        if self.sent.len() > 64 {
            self.sent.pop_front();
        }
        self.next
    }

    /// Renewal `n` was granted: when it was sent.
    fn granted(&mut self, n: u64) -> Option<Instant> {
        while let Some((m, t)) = self.sent.pop_front() {
            if m == n {
                return Some(t);
            }
        }
        None
    }
}

/// Records what the call on this thread was granted on an entry.
pub(super) fn note_entry(dir: u64, name: &[u8], v: Validity) {
    LAST.with(|l| l.borrow_mut().entry = Some((dir, name.to_vec(), v)));
}

/// Records what the call on this thread was granted on an inode's attributes.
pub(super) fn note_attr(ino: u64, v: Validity) {
    LAST.with(|l| l.borrow_mut().attr = Some((ino, v)));
}

/// Forgets what the last call on this thread was granted (a new call begins).
pub(super) fn clear() {
    LAST.with(|l| *l.borrow_mut() = Last::default());
}

impl Leases {
    /// What the kernel may keep of what was answered without a lease: nothing while
    /// sessions are kept, else the mount's timeouts.
    fn unleased(&self) -> Validity {
        if self.inv.get().is_some() {
            Validity::For(Duration::ZERO)
        } else {
            Validity::Configured
        }
    }

    /// What the last call on this thread was granted on entry `dir`/`name`.
    pub(super) fn entry_validity(&self, dir: u64, name: &[u8]) -> Validity {
        LAST.with(|l| match &l.borrow().entry {
            Some((d, n, v)) if *d == dir && n == name => *v,
            _ => self.unleased(),
        })
    }

    /// What the last call on this thread was granted on `ino`'s attributes.
    pub(super) fn attr_validity(&self, ino: u64) -> Validity {
        LAST.with(|l| match &l.borrow().attr {
            Some((i, v)) if *i == ino => *v,
            _ => self.unleased(),
        })
    }
}
