//! Leases on what clients' kernels cache (DESIGN.md, "Leases").
//!
//! A client that mounts the cluster opens a lease *session* with each server (the
//! `Leases` stream) and renews it; while its session lasts, the server grants it
//! leases on the names it looks up or makes (found or absent) and on the attributes of
//! the inodes it is answered about, and the client's kernel keeps them for no longer
//! than the session has left. A change of a leased name or inode by anyone else
//! revokes the lease: the holder is told (its kernel forgets the name or the inode),
//! and the change's reply waits until every holder answered or its session ran out.
//! So once a change returns to its caller, no mount shows what it replaced.
//!
//! A session with an unanswered revocation is not renewed, so a holder that stops
//! answering (stopped, cut off) holds up changes of what it leased for at most the
//! lease time. A server that restarts, or a replica that takes the lead, does not know
//! who holds what: every server keeps a durable *horizon* (a row, replicated with the
//! group's rows) beyond which no lease it granted lasts, and changes wait until it has
//! passed ([`Grants::set_grace`]).

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
// tokio's clock: real time, or virtual time in the simulation.
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::proto;
use crate::rows::{be64, TAG_CHUNK, TAG_ENTRY, TAG_INODE, TAG_XATTR};

/// Most (key, holder) pairs a server keeps; past it, it grants no more leases until
/// some end.
const MAX_HOLDS: usize = 2_000_000;

/// The subject of a lease: one name of a directory (whether it exists or not), every
/// name of a directory this server holds, or an inode's attributes and data.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) enum Key {
    /// Name `.1` of directory `.0`.
    Name(u64, Box<[u8]>),
    /// Every name of directory `.0` in the partitions here: granted with a lookup
    /// answered by an empty partition, so that its holder knows the partition's names
    /// are its own creates; revoked by any change of a name of the directory here.
    Listing(u64),
    /// An inode's attributes (and the data its holders' kernels cached).
    Inode(u64),
}

impl Key {
    /// The key a change of row `k` touches, if any: an entry row its name, an inode's
    /// row, data chunk or xattr its inode.
    pub(crate) fn of_row(k: &[u8]) -> Option<Key> {
        match *k.first()? {
            TAG_ENTRY => Some(Key::Name(be64(k, 1)?, k.get(17..)?.into())),
            TAG_INODE | TAG_CHUNK | TAG_XATTR => Some(Key::Inode(be64(k, 1)?)),
            _ => None,
        }
    }

    fn to_msg(&self) -> proto::LeaseKey {
        match self {
            Key::Name(dir, name) => proto::LeaseKey {
                dir: *dir,
                name: name.to_vec(),
                ..Default::default()
            },
            Key::Listing(dir) => proto::LeaseKey {
                dir: *dir,
                listing: true,
                ..Default::default()
            },
            Key::Inode(ino) => proto::LeaseKey {
                ino: *ino,
                ..Default::default()
            },
        }
    }
}

/// Whether a session's stream is open.
enum Link {
    /// Revocations go out on `tx`; `stream` tells this stream from a later one of the
    /// same client.
    Open {
        tx: mpsc::UnboundedSender<proto::LeaseDown>,
        stream: u64,
    },
    /// Gone (the client went away or was cut off): its leases last until the
    /// session's end, unrevoked.
    Closed,
}

/// One client's session.
struct Session {
    link: Link,
    /// Until when the client may hold what it was granted: the receipt of its last
    /// renewal plus the lease time.
    until: Instant,
    /// Revocations sent (numbered from 1).
    sent: u64,
    /// The highest revocation the client answered (it answers in order).
    answered: watch::Sender<u64>,
}

impl Session {
    fn quiet(&self) -> bool {
        *self.answered.borrow() == self.sent
    }
}

/// The lease table: who holds what, and the sessions.
#[derive(Default)]
struct Table {
    held: HashMap<Key, Vec<u64>>,
    sessions: HashMap<u64, Session>,
    holds: usize,
    streams: u64,
    /// Changes so far (one step per [`Grants::changed`] with keys).
    epoch: u64,
    /// The keys of the latest changes, to tell whether a grant's keys changed since
    /// they were read.
    recent: VecDeque<Change>,
    /// The latest epoch of a change whose keys are no longer all remembered.
    forgotten: u64,
}

/// Changes whose keys are remembered ([`Table::recent`]); a grant read before the
/// oldest of them is refused.
const RECENT_CHANGES: usize = 8192;

/// One key of a change: the change's epoch and scope (0: none), the key's hash, and
/// for a name its directory (whose listing it changes).
struct Change {
    epoch: u64,
    scope: u64,
    key: u64,
    dir: Option<u64>,
}

/// A key's hash, as remembered of changes (a collision only refuses a grant).
fn key_hash(k: &Key) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(k)
}

impl Table {
    /// Whether a change since epoch `since` by another scope than `scope` touched one
    /// of `keys` (or one the table no longer remembers may have).
    fn changed_since(&self, keys: &[Key], since: u64, scope: u64) -> bool {
        if self.epoch == since {
            return false;
        }
        if self.forgotten > since {
            return true;
        }
        let hashes: Vec<u64> = keys.iter().map(key_hash).collect();
        self.recent
            .iter()
            .rev()
            .take_while(|c| c.epoch > since)
            .filter(|c| c.scope == 0 || c.scope != scope)
            .any(|c| {
                hashes.contains(&c.key)
                    || keys
                        .iter()
                        .any(|k| matches!(k, Key::Listing(d) if c.dir == Some(*d)))
            })
    }

    /// Remembers key `k` of the change of epoch `self.epoch` in `scope`.
    fn remember(&mut self, k: &Key, scope: u64) {
        let dir = match k {
            Key::Name(d, _) => Some(*d),
            _ => None,
        };
        self.recent.push_back(Change {
            epoch: self.epoch,
            scope,
            key: key_hash(k),
            dir,
        });
        if self.recent.len() > RECENT_CHANGES {
            if let Some(c) = self.recent.pop_front() {
                self.forgotten = c.epoch;
            }
        }
    }

    /// Takes the holds on `k` of others than `client`: who they were.
    fn take_others(&mut self, k: &Key, client: u64) -> Vec<u64> {
        let Some(holders) = self.held.get_mut(k) else {
            return Vec::new();
        };
        let before = holders.len();
        let mut others = Vec::new();
        holders.retain(|&h| {
            let other = h != client;
            if other {
                others.push(h);
            }
            !other
        });
        let gone = before - holders.len();
        if holders.is_empty() {
            self.held.remove(k);
        }
        self.holds -= gone;
        others
    }
}

/// A revocation a change waits for: answered, or the holder's session over.
struct Pending {
    answered: watch::Receiver<u64>,
    seq: u64,
    until: Instant,
}

/// The changes one request (or background step) made, and the revocations they sent.
pub(crate) struct Scope {
    /// The client the request serves (0: none), whose own leases stay.
    client: u64,
    pending: Mutex<Vec<Pending>>,
    /// Whether it changed anything leasable (then it also waits out a grace).
    changed: std::sync::atomic::AtomicBool,
    /// Tells its changes from others' (nonzero, unique).
    id: u64,
}

/// The last scope id given out.
static SCOPES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Scope {
    /// The scope of a request of `client` (0: none).
    pub(crate) fn new(client: u64) -> Arc<Scope> {
        Arc::new(Scope {
            client,
            pending: Mutex::new(Vec::new()),
            changed: std::sync::atomic::AtomicBool::new(false),
            id: SCOPES.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1,
        })
    }

    /// The client it serves.
    pub(crate) fn client(&self) -> u64 {
        self.client
    }

    /// Waits until every revocation its changes sent is answered or outlived, and
    /// past `grace` if it changed anything.
    pub(crate) async fn settled(&self, grace: Option<Instant>) {
        let pending = std::mem::take(&mut *self.pending.lock());
        for mut p in pending {
            let seq = p.seq;
            let _ = tokio::time::timeout_at(p.until, p.answered.wait_for(|a| *a >= seq)).await;
        }
        if let Some(g) = grace {
            if self.changed.load(std::sync::atomic::Ordering::Relaxed) {
                tokio::time::sleep_until(g).await;
            }
        }
    }
}

tokio::task_local! {
    static TASK_SCOPE: Arc<Scope>;
}

thread_local! {
    static THREAD_SCOPE: RefCell<Option<Arc<Scope>>> = const { RefCell::new(None) };
}

/// The scope of the current task (or of the task that handed this thread its work).
pub(crate) fn current() -> Option<Arc<Scope>> {
    TASK_SCOPE
        .try_with(Arc::clone)
        .ok()
        .or_else(|| THREAD_SCOPE.with(|s| s.borrow().clone()))
}

/// `fut` in `scope`.
pub(crate) fn in_scope<F: Future>(scope: Arc<Scope>, fut: F) -> impl Future<Output = F::Output> {
    TASK_SCOPE.scope(scope, fut)
}

/// Runs `f` on this thread in `scope` (that of the task handing it the work).
pub(crate) fn with_thread_scope<T>(scope: Option<Arc<Scope>>, f: impl FnOnce() -> T) -> T {
    /// Puts back what was there before, even if `f` unwinds.
    struct Restore(Option<Arc<Scope>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take();
            THREAD_SCOPE.with(|s| *s.borrow_mut() = prev);
        }
    }
    let _restore = Restore(THREAD_SCOPE.with(|s| s.replace(scope)));
    f()
}

/// A server's leases: the table, the lease time, the horizon and the grace.
pub(crate) struct Grants {
    /// How long a session lasts past a renewal; zero: no leases.
    time: Duration,
    table: Mutex<Table>,
    /// Changes wait until this instant (a restart or a new leader: leases granted
    /// before may still be held).
    grace: Mutex<Option<Instant>>,
    /// The durable horizon (ms since the epoch): no lease lasts beyond it.
    horizon: Mutex<Horizon>,
}

/// The horizon row's state.
#[derive(Clone, Copy, Default)]
struct Horizon {
    durable_ms: i64,
    extending: bool,
}

impl Grants {
    /// Leases of `time` (zero: none granted).
    pub(crate) fn new(time: Duration) -> Grants {
        Grants {
            time,
            table: Mutex::new(Table::default()),
            grace: Mutex::new(None),
            horizon: Mutex::new(Horizon::default()),
        }
    }

    /// The lease time.
    pub(crate) fn time(&self) -> Duration {
        self.time
    }

    /// Forgets every session and lease (a replica that lost or took the lead), and
    /// makes changes wait until `horizon_ms` (the horizon read from the rows) has
    /// passed.
    pub(crate) fn set_grace(&self, horizon_ms: i64) {
        {
            let mut t = self.table.lock();
            t.held.clear();
            t.holds = 0;
            t.sessions.clear();
        }
        let left = horizon_ms - super::node::now_ms();
        *self.grace.lock() = (left > 0).then(|| Instant::now() + ms(left as u64));
        *self.horizon.lock() = Horizon {
            durable_ms: horizon_ms,
            extending: false,
        };
    }

    /// Until when changes wait (`None`: they don't).
    pub(crate) fn grace(&self) -> Option<Instant> {
        let mut g = self.grace.lock();
        if g.is_some_and(|t| t <= Instant::now()) {
            *g = None;
        }
        *g
    }

    /// The horizon to make durable before more leases are granted, if one is due
    /// (and not being made already): the caller writes it and calls
    /// [`Grants::horizon_written`].
    pub(crate) fn horizon_due(&self) -> Option<i64> {
        if self.time.is_zero() {
            return None;
        }
        let t = self.time.as_millis() as i64;
        let now = super::node::now_ms();
        let mut h = self.horizon.lock();
        // Renewals come every T/4: each extends it, so that what is left at a grant
        // stays above T (1.25 T at least) while the next one is written.
        if h.extending || h.durable_ms >= now + t + t / 2 - t / 8 {
            return None;
        }
        h.extending = true;
        Some(now + t + t / 2)
    }

    /// The horizon `ms` is durable (`None`: writing it failed).
    pub(crate) fn horizon_written(&self, ms: Option<i64>) {
        let mut h = self.horizon.lock();
        h.extending = false;
        if let Some(ms) = ms {
            h.durable_ms = h.durable_ms.max(ms);
        }
    }

    /// Opens (or replaces) `client`'s session; returns its stream's number and the
    /// receiver of what to send it.
    pub(crate) fn open(&self, client: u64) -> (u64, mpsc::UnboundedReceiver<proto::LeaseDown>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut t = self.table.lock();
        t.streams += 1;
        let stream = t.streams;
        let now = Instant::now();
        match t.sessions.get_mut(&client) {
            Some(s) => s.link = Link::Open { tx, stream },
            None => {
                t.sessions.insert(
                    client,
                    Session {
                        link: Link::Open { tx, stream },
                        until: now,
                        sent: 0,
                        answered: watch::channel(0).0,
                    },
                );
            }
        }
        (stream, rx)
    }

    /// `client`'s stream `stream` ended: its leases last until its session's end.
    pub(crate) fn closed(&self, client: u64, stream: u64) {
        let mut t = self.table.lock();
        if let Some(s) = t.sessions.get_mut(&client) {
            if matches!(s.link, Link::Open { stream: st, .. } if st == stream) {
                s.link = Link::Closed;
            }
        }
    }

    /// A renewal `n` from `client`: the session lasts the lease time from now, and
    /// the client is told so — unless a revocation is unanswered.
    pub(crate) fn renew(&self, client: u64, n: u64) {
        let mut t = self.table.lock();
        let Some(s) = t.sessions.get_mut(&client) else {
            return;
        };
        let now = Instant::now();
        if !s.quiet() {
            if s.until > now {
                return;
            }
            // Ran out with revocations unanswered (sent on a stream that broke, say):
            // what they revoked is forgotten by now; the session starts afresh.
            let sent = s.sent;
            s.answered.send_replace(sent);
        }
        s.until = now + self.time;
        if let Link::Open { tx, .. } = &s.link {
            let _ = tx.send(proto::LeaseDown {
                renewed: n,
                lease_ms: self.time.as_millis() as u32,
                ..Default::default()
            });
        }
    }

    /// `client` answered revocation `seq`.
    pub(crate) fn answered(&self, client: u64, seq: u64) {
        let t = self.table.lock();
        if let Some(s) = t.sessions.get(&client) {
            s.answered.send_if_modified(|a| {
                let more = seq > *a && seq <= s.sent;
                if more {
                    *a = seq;
                }
                more
            });
        }
    }

    /// The count of changes so far: taken before what a lease covers is read, and
    /// given to [`Grants::grant`].
    pub(crate) fn epoch(&self) -> u64 {
        self.table.lock().epoch
    }

    /// Grants `client` leases on `keys`, read since [`Grants::epoch`] was `since`: if a
    /// change of one of them (a name's: of its directory's listing too) other than the
    /// current scope's own came since, what was read may be older than a change that
    /// revoked nothing of it, and no lease is granted. Returns how long the session has
    /// left in ms, 0 if nothing was granted.
    pub(crate) fn grant(&self, client: u64, keys: Vec<Key>, since: u64) -> u32 {
        if client == 0 || keys.is_empty() || self.time.is_zero() || self.grace().is_some() {
            return 0;
        }
        let scope = current().map_or(0, |s| s.id);
        let now_ms = super::node::now_ms();
        if self.horizon.lock().durable_ms < now_ms + self.time.as_millis() as i64 {
            return 0;
        }
        let mut t = self.table.lock();
        if t.changed_since(&keys, since, scope) {
            return 0;
        }
        let now = Instant::now();
        let left = match t.sessions.get(&client) {
            Some(s) if matches!(s.link, Link::Open { .. }) && s.quiet() && s.until > now => {
                s.until - now
            }
            _ => return 0,
        };
        if t.holds + keys.len() > MAX_HOLDS {
            return 0;
        }
        for key in keys {
            let holders = t.held.entry(key).or_default();
            if !holders.contains(&client) {
                holders.push(client);
                t.holds += 1;
            }
        }
        left.as_millis().clamp(1, u32::MAX as u128) as u32
    }

    /// `keys` changed (in the current scope, if any): the leases on them held by
    /// others than the scope's client are revoked, and the scope will wait for the
    /// answers.
    pub(crate) fn changed(&self, keys: impl Iterator<Item = Key>) {
        let scope = current();
        let client = scope.as_ref().map_or(0, |s| s.client);
        let id = scope.as_ref().map_or(0, |s| s.id);
        let mut by_client: HashMap<u64, Vec<proto::LeaseKey>> = HashMap::new();
        let mut any = false;
        let mut t = self.table.lock();
        for k in keys {
            if !any {
                t.epoch += 1;
            }
            any = true;
            t.remember(&k, id);
            if t.held.is_empty() {
                continue;
            }
            // A name's change also changes its directory's listing here.
            let listing = match &k {
                Key::Name(dir, _) => Some(Key::Listing(*dir)),
                _ => None,
            };
            for k in std::iter::once(k).chain(listing) {
                for h in t.take_others(&k, client) {
                    by_client.entry(h).or_default().push(k.to_msg());
                }
            }
        }
        if let Some(s) = &scope {
            if any {
                s.changed.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        if by_client.is_empty() {
            return;
        }
        let pending = revoke(&mut t, by_client);
        drop(t);
        if let Some(s) = scope {
            s.pending.lock().extend(pending);
        }
    }

    /// Every name of directory `dir` leased here changed (its partition moved away).
    pub(crate) fn changed_dir(&self, dir: u64) {
        let keys: Vec<Key> = {
            let t = self.table.lock();
            t.held
                .keys()
                .filter(|k| matches!(k, Key::Name(d, _) | Key::Listing(d) if *d == dir))
                .cloned()
                .collect()
        };
        self.changed(keys.into_iter());
    }

    /// Forgets sessions that are closed and over, and the leases they held.
    pub(crate) fn sweep(&self) {
        let mut t = self.table.lock();
        let now = Instant::now();
        let before = t.sessions.len();
        t.sessions
            .retain(|_, s| matches!(s.link, Link::Open { .. }) || s.until > now);
        if t.sessions.len() == before {
            return;
        }
        let Table {
            held,
            sessions,
            holds,
            ..
        } = &mut *t;
        held.retain(|_, holders| {
            let n = holders.len();
            holders.retain(|c| sessions.contains_key(c));
            *holds -= n - holders.len();
            !holders.is_empty()
        });
    }

    /// Sessions and holds, for the server's status.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let t = self.table.lock();
        (t.sessions.len(), t.holds)
    }
}

/// Sends each client its revocation of `keys`; what to wait for.
fn revoke(t: &mut Table, by_client: HashMap<u64, Vec<proto::LeaseKey>>) -> Vec<Pending> {
    let now = Instant::now();
    let mut pending = Vec::new();
    for (client, keys) in by_client {
        let Some(s) = t.sessions.get_mut(&client) else {
            continue;
        };
        if s.until <= now {
            continue;
        }
        s.sent += 1;
        let seq = s.sent;
        if let Link::Open { tx, .. } = &s.link {
            let _ = tx.send(proto::LeaseDown {
                seq,
                keys,
                ..Default::default()
            });
        }
        pending.push(Pending {
            answered: s.answered.subscribe(),
            seq,
            until: s.until,
        });
    }
    pending
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(d: u64, n: &str) -> Key {
        Key::Name(d, n.as_bytes().into())
    }

    fn ready(g: &Grants) {
        g.set_grace(0);
        let ms = g.horizon_due().expect("horizon due");
        g.horizon_written(Some(ms));
    }

    #[tokio::test]
    async fn a_change_by_another_revokes_and_waits_for_the_answer() {
        let g = Arc::new(Grants::new(Duration::from_secs(5)));
        ready(&g);
        let (_, mut rx) = g.open(7);
        assert_eq!(
            g.grant(7, vec![name(1, "a")], g.epoch()),
            0,
            "no renewal yet: no lease"
        );
        g.renew(7, 1);
        assert_eq!(rx.recv().await.map(|d| d.renewed), Some(1));
        assert!(g.grant(7, vec![name(1, "a")], g.epoch()) > 0);
        // Its own change keeps its lease and waits for nothing.
        let own = Scope::new(7);
        in_scope(own.clone(), async {
            g.changed(std::iter::once(name(1, "a")))
        })
        .await;
        assert!(own.pending.lock().is_empty());
        // Another's change revokes it; the change waits for the answer.
        let other = Scope::new(8);
        in_scope(other.clone(), async {
            g.changed(std::iter::once(name(1, "a")))
        })
        .await;
        let down = rx.recv().await.expect("revocation");
        assert_eq!(down.seq, 1);
        assert_eq!(down.keys.len(), 1);
        // Unanswered: no renewal, no grant.
        g.renew(7, 2);
        assert_eq!(g.grant(7, vec![name(1, "b")], g.epoch()), 0);
        let waiter = tokio::spawn({
            let other = other.clone();
            async move { other.settled(None).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        g.answered(7, 1);
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("settled once answered")
            .expect("task");
        assert_eq!(g.counts().1, 0);
        // A change between the read and the grant: no lease.
        let since = g.epoch();
        in_scope(Scope::new(8), async {
            g.changed(std::iter::once(name(1, "c")))
        })
        .await;
        g.renew(7, 3);
        assert_eq!(g.grant(7, vec![name(1, "c")], since), 0);
        assert!(g.grant(7, vec![name(1, "c")], g.epoch()) > 0);
    }

    #[tokio::test]
    async fn a_holder_that_does_not_answer_holds_a_change_until_its_session_ends() {
        let g = Grants::new(Duration::from_millis(400));
        ready(&g);
        let (_, mut rx) = g.open(7);
        g.renew(7, 1);
        let _ = rx.recv().await;
        assert!(g.grant(7, vec![Key::Inode(9)], g.epoch()) > 0);
        let s = Scope::new(0);
        in_scope(s.clone(), async {
            g.changed(std::iter::once(Key::Inode(9)))
        })
        .await;
        let start = Instant::now();
        s.settled(None).await;
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(350) && waited <= Duration::from_secs(2),
            "{waited:?}"
        );
    }

    #[tokio::test]
    async fn a_name_changed_by_another_revokes_its_directory_listing() {
        let g = Grants::new(Duration::from_secs(5));
        ready(&g);
        let (_, mut rx) = g.open(7);
        g.renew(7, 1);
        let _ = rx.recv().await;
        assert!(g.grant(7, vec![name(1, "a"), Key::Listing(1)], g.epoch()) > 0);
        // The holder's own create in the directory keeps its listing.
        in_scope(Scope::new(7), async {
            g.changed(std::iter::once(name(1, "b")))
        })
        .await;
        assert_eq!(g.counts().1, 2);
        // Another's create of a name nobody leased revokes it.
        in_scope(Scope::new(8), async {
            g.changed(std::iter::once(name(1, "c")))
        })
        .await;
        let down = rx.recv().await.expect("revocation");
        assert_eq!(down.keys.len(), 1);
        assert!(down.keys[0].listing && down.keys[0].dir == 1);
        assert_eq!(g.counts().1, 1);
        // A partition of the directory moving away revokes a listing too.
        g.answered(7, down.seq);
        g.renew(7, 2);
        let _ = rx.recv().await;
        assert!(g.grant(7, vec![Key::Listing(1)], g.epoch()) > 0);
        g.changed_dir(1);
        let down = rx.recv().await.expect("revocation");
        assert!(down.keys.iter().any(|k| k.listing));
    }

    #[tokio::test]
    async fn only_a_change_of_what_is_granted_refuses_the_grant() {
        let g = Grants::new(Duration::from_secs(5));
        ready(&g);
        let (_, mut rx) = g.open(7);
        g.renew(7, 1);
        let _ = rx.recv().await;
        let other = |k: Key| {
            let g = &g;
            async move { in_scope(Scope::new(8), async { g.changed(std::iter::once(k)) }).await }
        };
        // Read, then another key changed: granted.
        let since = g.epoch();
        other(name(2, "x")).await;
        other(Key::Inode(3)).await;
        assert!(g.grant(7, vec![name(1, "a"), Key::Inode(4)], since) > 0);
        // A change of a key granted, or of a name of a listing granted: refused.
        let since = g.epoch();
        other(Key::Inode(4)).await;
        let down = rx.recv().await.expect("revocation of the inode's lease");
        g.answered(7, down.seq);
        assert_eq!(g.grant(7, vec![name(1, "b"), Key::Inode(4)], since), 0);
        let since = g.epoch();
        other(name(5, "y")).await;
        assert_eq!(g.grant(7, vec![name(5, "z"), Key::Listing(5)], since), 0);
        assert!(g.grant(7, vec![name(5, "z")], since) > 0);
        // The grant's own scope's change of the key: granted.
        let own = Scope::new(7);
        let since = g.epoch();
        let got = in_scope(own, async {
            g.changed(std::iter::once(name(6, "n")));
            g.grant(7, vec![name(6, "n"), Key::Listing(6)], since)
        })
        .await;
        assert!(got > 0);
        // Read before changes the table no longer remembers: refused.
        let since = g.epoch();
        for i in 0..=RECENT_CHANGES as u64 {
            other(Key::Inode(100 + i)).await;
        }
        assert_eq!(g.grant(7, vec![Key::Inode(9)], since), 0);
        assert!(g.grant(7, vec![Key::Inode(9)], g.epoch()) > 0);
    }

    #[test]
    fn rows_map_to_keys() {
        use crate::rows::{chunk_key, entry_key, inode_key, partition_key, xattr_key};
        assert_eq!(Key::of_row(&entry_key(5, b"x")), Some(name(5, "x")));
        assert_eq!(Key::of_row(&inode_key(6)), Some(Key::Inode(6)));
        assert_eq!(Key::of_row(&chunk_key(6, 3)), Some(Key::Inode(6)));
        assert_eq!(Key::of_row(&xattr_key(6, b"user.a")), Some(Key::Inode(6)));
        assert_eq!(Key::of_row(&partition_key(6, 1)), None);
    }

    #[test]
    fn no_lease_past_the_durable_horizon_or_during_grace() {
        let g = Grants::new(Duration::from_secs(5));
        let (_, _rx) = g.open(7);
        g.renew(7, 1);
        assert_eq!(
            g.grant(7, vec![Key::Inode(1)], g.epoch()),
            0,
            "no horizon yet"
        );
        g.set_grace(super::super::node::now_ms() + 10_000);
        assert!(g.grace().is_some());
        assert_eq!(g.grant(7, vec![Key::Inode(1)], g.epoch()), 0, "in grace");
    }
}
