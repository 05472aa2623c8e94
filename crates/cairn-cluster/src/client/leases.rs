//! The client's lease sessions (DESIGN.md, "Leases"): a mount's client keeps one with
//! each server, renews it, and answers its revocations by making the mount's kernel
//! forget the names and inodes revoked ([`cairn_fs::Invalidator`]). What a server
//! answered under a lease may be kept by the kernel until the session's end as the
//! client knows it: the send time of its last renewal the server granted, plus the
//! lease time (the server counts from the renewal's receipt, later).
//!
//! The client also keeps what it was answered under a lease (`Kept`): once the
//! kernel's time for an answer is out, the kernel asks the mount again, and while the
//! lease holds (its session renewed, nothing revoked) the client answers itself, for a
//! new stretch of the session, without a request. Its own changes drop what they touch
//! from it (the servers revoke nothing of a client's own): names precisely; attributes
//! of the inode changed, and after an unlink, rmdir, rename or link (whose inodes'
//! link counts and times it does not all know) every attribute it kept.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;
// tokio's clock: real time, or virtual time in the simulation.
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;

use cairn_fs::{Attr, DirEntry, DirEntryPlus, Invalidator, Validity};

use super::group::Group;
use super::names::KeptNames;
use super::Inner;
use crate::proto;

/// Revocations remembered to tell whether a reply's lease was revoked while it
/// travelled (older ones count as revoked).
const RECENT: usize = 4096;
/// Pause before a session is opened again after it ended.
const RECONNECT: Duration = Duration::from_millis(250);
/// Names, and inodes' attributes, kept at most (all are dropped beyond).
const KEPT: usize = 1 << 20;
/// What a session must have left for what it leased to be handed out.
const MARGIN: Duration = Duration::from_millis(20);

/// A lease's subject, as the client names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Key {
    Name(u64, Vec<u8>),
    /// Every name of a directory a server holds (see [`Leases::keep_listing`]).
    Listing(u64),
    Inode(u64),
    /// Every inode's attributes (the client's own change of some it does not know).
    AllInodes,
    /// Everything (a session ran out or ended: what was kept under it may have been
    /// changed since without a word).
    All,
}

impl Key {
    /// Whether forgetting `self` forgets `key`.
    fn covers(&self, key: &Key) -> bool {
        match self {
            Key::All => true,
            Key::AllInodes => matches!(key, Key::Inode(_) | Key::AllInodes),
            // A name of a directory changed: so did its listing.
            Key::Name(dir, _) => self == key || *key == Key::Listing(*dir),
            _ => self == key,
        }
    }
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
    /// Revocations handled so far, and the most recent ones with what is kept.
    epoch: AtomicU64,
    recent: Mutex<Kept>,
    inv: OnceLock<Arc<dyn Invalidator>>,
}

impl Leases {
    /// Sessions with `servers` servers, none open yet.
    pub(super) fn new(servers: usize) -> Leases {
        Leases {
            id: super::group::request_token(),
            standing: (0..servers).map(|_| Mutex::new(Standing::Down)).collect(),
            epoch: AtomicU64::new(0),
            recent: Mutex::new(Kept::default()),
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
        self.recent.lock().revoked_since(since, key)
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
            let ended = self.session(s, conn, h.clone()).await;
            // What was kept under the session may have changed since without a word.
            self.forget(Key::All);
            match ended {
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
                            let lapsed = matches!(
                                *self.standing[s].lock(),
                                Standing::Up(until) if until <= Instant::now()
                            );
                            if lapsed {
                                // It ran out before this renewal: the server may have
                                // let changes pass without revoking what was kept.
                                self.forget(Key::All);
                            }
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
                } else if k.listing {
                    Key::Listing(k.dir)
                } else {
                    Key::Name(k.dir, k.name.clone())
                }
            })
            .collect();
        {
            let mut r = self.recent.lock();
            for k in &keys {
                let e = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
                r.revoked(e, k);
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
                    // The kernel was told no absence on a listing's word alone.
                    Key::Listing(_) | Key::AllInodes | Key::All => {}
                }
            }
        })
        .await;
        if let Err(e) = forgot {
            tracing::warn!("forgetting revoked leases: {e}");
        }
    }
}

/// What the client keeps of answers under leases, and the latest revocations.
#[derive(Default)]
struct Kept {
    revoked: VecDeque<(u64, Key)>,
    /// A name's inode (`None`: absent) and the server that leased it.
    names: KeptNames,
    /// An inode's attributes and the server that leased them.
    attrs: HashMap<u64, (usize, Attr)>,
    /// Directories' partitions whose names the client knows all of, by the server that
    /// leased their listing: (server, lowest and highest name position covered). A
    /// name there that `names` does not keep is absent.
    listings: HashMap<u64, Vec<(usize, u64, u64)>>,
    /// Names the client's own creates made in directories it keeps listings of whose
    /// replies carried no lease on the name: present (the listing's lease covers every
    /// name of the directory there), though not answered from here.
    made: HashMap<u64, std::collections::HashSet<Vec<u8>>>,
    /// A directory's entry in its parent, as a lookup or listing found it: the parent
    /// while `names` keeps that entry leading to the directory (a directory has one
    /// entry; a rename of it revokes the name).
    parents: HashMap<u64, (u64, Vec<u8>)>,
}

impl Kept {
    fn revoked_since(&self, since: u64, key: &Key) -> bool {
        self.revoked_since_but(since, key, 0)
    }

    /// As [`Kept::revoked_since`], not counting revocation `except` (an own change's).
    fn revoked_since_but(&self, since: u64, key: &Key, except: u64) -> bool {
        match self.revoked.front() {
            // Newest last (every epoch is taken under the lock that notes it): only
            // the revocations after `since` are looked at.
            Some((first, _)) if *first <= since + 1 => self
                .revoked
                .iter()
                .rev()
                .take_while(|(e, _)| *e > since)
                .any(|(e, k)| *e != except && k.covers(key)),
            _ => true,
        }
    }

    /// `k` was revoked as revocation `e`: noted, and forgotten (a name with its
    /// directory's listings: the name may now be there, or its change have failed).
    fn revoked(&mut self, e: u64, k: &Key) {
        self.note(e, k);
        match k {
            Key::Name(dir, name) => {
                self.names.remove(*dir, name);
                self.drop_listings(*dir);
            }
            Key::Listing(dir) => self.drop_listings(*dir),
            Key::Inode(ino) => {
                self.attrs.remove(ino);
            }
            Key::AllInodes => self.attrs.clear(),
            Key::All => {
                self.names.clear();
                self.attrs.clear();
                self.listings.clear();
                self.made.clear();
                self.parents.clear();
            }
        }
    }

    /// Keeps `attr` as server `s` leased it (all are dropped beyond [`KEPT`]).
    fn put_attr(&mut self, s: usize, attr: &Attr) {
        if self.attrs.len() >= KEPT {
            self.attrs.clear();
        }
        self.attrs.insert(attr.ino, (s, attr.clone()));
    }

    /// Forgets `dir`'s listings, and the names made there that they vouched for.
    fn drop_listings(&mut self, dir: u64) {
        self.listings.remove(&dir);
        self.made.remove(&dir);
    }

    /// Notes revocation `e` of `k` (for answers in flight).
    fn note(&mut self, e: u64, k: &Key) {
        self.revoked.push_back((e, k.clone()));
        if self.revoked.len() > RECENT {
            self.revoked.pop_front();
        }
    }

    /// Whether a listing kept says `dir`/`name` is absent (it keeps no such name), and
    /// the server that leased the listing.
    fn listed_absent(&self, dir: u64, name: &[u8]) -> Option<usize> {
        if self.made.get(&dir).is_some_and(|m| m.contains(name)) {
            return None;
        }
        let pos = crate::giga::rev(crate::giga::name_hash(name));
        self.listings
            .get(&dir)?
            .iter()
            .find(|&&(_, lo, hi)| lo <= pos && pos <= hi)
            .map(|&(s, _, _)| s)
    }
}

impl Leases {
    /// Whether `key` was revoked since epoch `since` (under the kept answers' lock).
    fn revoked_in(&self, k: &Kept, since: u64, key: &Key) -> bool {
        self.epoch() != since && k.revoked_since(since, key)
    }

    /// Keeps that `dir`/`name` is `found` (`None`: absent), as server `s` answered at
    /// epoch `since` under a lease (`v`).
    pub(super) fn keep_name(
        &self,
        s: usize,
        (dir, name): (u64, &[u8]),
        found: Option<u64>,
        (v, since): (Validity, u64),
    ) {
        if !leased(v) {
            return;
        }
        let mut k = self.recent.lock();
        if self.revoked_in(&k, since, &Key::Name(dir, name.to_vec())) {
            return;
        }
        if k.names.len() >= KEPT {
            // Everything goes, as if revoked: the listings say what is there by the
            // names kept, and one read before now must not be kept after it.
            let e = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
            k.revoked(e, &Key::All);
        }
        k.names.insert(dir, name, (s, found));
    }

    /// Keeps that server `s`'s partition `(index, depth)` of `dir` held no name when it
    /// answered at epoch `since`, under a listing lease (`v`): from now on the client's
    /// own creates there are all its names (they are kept; anything else revokes it).
    pub(super) fn keep_listing(
        &self,
        s: usize,
        dir: u64,
        (index, depth): (u32, u32),
        (v, since): (Validity, u64),
    ) {
        if !leased(v) || depth > crate::giga::MAX_DEPTH || u64::from(index) >> depth != 0 {
            return;
        }
        let (lo, hi) = crate::giga::rev_range(index, depth);
        let mut k = self.recent.lock();
        if self.revoked_in(&k, since, &Key::Listing(dir)) {
            return;
        }
        let ranges = k.listings.entry(dir).or_default();
        if !ranges.contains(&(s, lo, hi)) {
            ranges.push((s, lo, hi));
        }
    }

    /// An own create of `dir`/`name` is sent: what was kept of the name goes (counted as
    /// a revocation), the directory's listings stay — see [`Leases::created`].
    pub(super) fn creating(&self, dir: u64, name: &[u8]) {
        let mut k = self.recent.lock();
        let e = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        let key = Key::Name(dir, name.to_vec());
        k.note(e, &key);
        k.names.remove(dir, name);
    }

    /// An own create of `dir`/`name` returned, `made` (or failed: `false`). A name
    /// made without a lease on it is noted as present under the directory's listings;
    /// after a failure (its outcome may be unknown) they no longer tell all its names.
    pub(super) fn created(&self, dir: u64, name: &[u8], made: bool) {
        {
            let mut k = self.recent.lock();
            if !k.listings.contains_key(&dir) {
                return;
            }
            if made {
                if !matches!(k.names.get(dir, name), Some((_, Some(_)))) {
                    k.made.entry(dir).or_default().insert(name.to_vec());
                }
                return;
            }
        }
        self.forget(Key::Listing(dir));
    }

    /// Keeps `attr` as server `s` answered it at epoch `since` under a lease (`v`).
    pub(super) fn keep_attr(&self, s: usize, attr: &Attr, (v, since): (Validity, u64)) {
        if !leased(v) {
            return;
        }
        let mut k = self.recent.lock();
        if self.revoked_in(&k, since, &Key::Inode(attr.ino)) {
            return;
        }
        k.put_attr(s, attr);
    }

    /// An own change of `attr.ino`'s attributes returned `attr`, which server `s`
    /// leased (`lease_ms`) to a request sent at epoch `since`: what was kept of the
    /// inode is forgotten (as [`Leases::forget`] does), then `attr` kept unless another
    /// revocation of it came since. Returns how long the kernel may keep it.
    pub(super) fn changed_attr(
        &self,
        s: usize,
        attr: &Attr,
        lease_ms: u32,
        since: u64,
    ) -> Validity {
        let key = Key::Inode(attr.ino);
        let mut k = self.recent.lock();
        let own = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        k.revoked(own, &key);
        let Some(left) = self.left(s) else {
            return self.unleased();
        };
        if lease_ms == 0 || k.revoked_since_but(since, &key, own) {
            return Validity::For(Duration::ZERO);
        }
        k.put_attr(s, attr);
        Validity::For(left)
    }

    /// How long server `s`'s session has left, if it is open and not about to end.
    fn left(&self, s: usize) -> Option<Duration> {
        match self.standing.get(s).map(|m| *m.lock()) {
            Some(Standing::Up(until)) => {
                let left = until.saturating_duration_since(Instant::now());
                (left > MARGIN).then_some(left)
            }
            _ => None,
        }
    }

    /// What the client keeps of `dir`/`name` — found (with its attributes kept too) or
    /// absent (`None`) — with how long the kernel may keep the entry and the
    /// attributes; `None` when it must ask a server.
    pub(super) fn kept_name(
        &self,
        dir: u64,
        name: &[u8],
    ) -> Option<(Option<Attr>, Validity, Validity)> {
        let k = self.recent.lock();
        let Some((s, found)) = k.names.get(dir, name) else {
            // Absent by a listing: the kernel is told so for this call only (a revoked
            // listing names no name for it to forget).
            let s = k.listed_absent(dir, name)?;
            self.left(s)?;
            let none = Validity::For(Duration::ZERO);
            return Some((None, none, none));
        };
        let entry = Validity::For(self.left(s)?);
        match found {
            None => Some((None, entry, Validity::For(Duration::ZERO))),
            Some(ino) => {
                let (a, attr) = k.attrs.get(&ino)?;
                Some((Some(attr.clone()), entry, Validity::For(self.left(*a)?)))
            }
        }
    }

    /// Up to `limit` entries of `dir` after position `after` (a position and a name),
    /// answered from what is kept: only where a listing lease says the client knows
    /// every name of the partition there, every name found is kept under a lease with
    /// its attributes, and no own create of the directory went unleased. `end` is the
    /// partition's last position when its names after `after` are all in `entries`.
    /// `None`: a server must be asked.
    pub(super) fn kept_listing(
        &self,
        dir: u64,
        after: (u64, &[u8]),
        limit: usize,
        plus: bool,
    ) -> Option<KeptListing> {
        let k = self.recent.lock();
        if k.made.get(&dir).is_some_and(|m| !m.is_empty()) {
            return None;
        }
        let &(s, _, hi) = k
            .listings
            .get(&dir)?
            .iter()
            .find(|&&(_, lo, hi)| lo <= after.0 && after.0 <= hi)?;
        self.left(s)?;
        let mut entries = Vec::new();
        for f in k.names.found_after(dir, after, hi) {
            if entries.len() == limit {
                return Some(KeptListing { entries, end: None });
            }
            let entry_left = self.left(f.server)?;
            let (a, attr) = k.attrs.get(&f.ino)?;
            let attr_left = self.left(*a)?;
            let entry = DirEntry {
                name: f.name.to_vec(),
                ino: f.ino,
                kind: attr.mode & libc::S_IFMT,
            };
            entries.push(match plus {
                true => DirEntryPlus {
                    entry,
                    attr: Some(attr.clone()),
                    entry_valid: Validity::For(entry_left),
                    attr_valid: Validity::For(attr_left),
                },
                false => DirEntryPlus::bare(entry),
            });
        }
        Some(KeptListing {
            entries,
            end: Some(hi),
        })
    }

    /// Notes that directory `child` is entry `name` of `dir` (as a lookup or listing
    /// just kept it): its parent, while that entry is kept.
    pub(super) fn keep_parent(&self, child: u64, (dir, name): (u64, &[u8])) {
        let mut k = self.recent.lock();
        if k.parents.len() >= KEPT {
            k.parents.clear();
        }
        k.parents.insert(child, (dir, name.to_vec()));
    }

    /// The parent of directory `ino`, if the client keeps its entry under a lease.
    pub(super) fn kept_parent(&self, ino: u64) -> Option<u64> {
        let k = self.recent.lock();
        let (dir, name) = k.parents.get(&ino)?;
        match k.names.get(*dir, name) {
            Some((s, Some(i))) if i == ino => self.left(s).map(|_| *dir),
            _ => None,
        }
    }

    /// Whether `dir`/`name` is absent only by a listing (no lease on the name itself).
    pub(super) fn listed_only(&self, dir: u64, name: &[u8]) -> bool {
        let k = self.recent.lock();
        k.names.get(dir, name).is_none() && k.listed_absent(dir, name).is_some()
    }

    /// The attributes of `ino` the client keeps, with how long the kernel may keep
    /// them; `None` when it must ask a server.
    pub(super) fn kept_attr(&self, ino: u64) -> Option<(Attr, Validity)> {
        let k = self.recent.lock();
        let (s, attr) = k.attrs.get(&ino)?;
        Some((attr.clone(), Validity::For(self.left(*s)?)))
    }

    /// What an own change of `names` in directories `parents` touches: the names, the
    /// parents' attributes, and the attributes of the inodes the names led to — every
    /// inode's where one of the names is not kept (its inode unknown: its link count
    /// and times change too).
    pub(super) fn touched(&self, names: &[(u64, &[u8])], parents: &[u64]) -> Vec<Key> {
        let k = self.recent.lock();
        let mut keys: Vec<Key> = parents.iter().map(|&p| Key::Inode(p)).collect();
        for &(dir, name) in names {
            keys.push(Key::Name(dir, name.to_vec()));
            match k.names.get(dir, name) {
                Some((_, Some(ino))) => keys.push(Key::Inode(ino)),
                // Absent under a lease: no inode (a rename's free destination).
                Some((_, None)) => {}
                None => keys.push(Key::AllInodes),
            }
        }
        keys
    }

    /// The client's own change of `key` (done): forgotten, and counted as a
    /// revocation, so that an answer read before it is neither kept nor leased to the
    /// kernel.
    pub(super) fn forget(&self, key: Key) {
        let mut k = self.recent.lock();
        let e = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        k.revoked(e, &key);
    }
}

/// The client's own change of `keys`, forgotten when this is dropped (after the change
/// returned, whatever it returned).
pub(super) struct OwnChange<'a> {
    leases: &'a Leases,
    keys: Vec<Key>,
}

impl Drop for OwnChange<'_> {
    fn drop(&mut self) {
        for k in self.keys.drain(..) {
            self.leases.forget(k);
        }
    }
}

impl Leases {
    /// An own change of `keys` begins: they are forgotten once it returned.
    pub(super) fn own_change(&self, keys: Vec<Key>) -> OwnChange<'_> {
        OwnChange { leases: self, keys }
    }
}

/// Whether `v` is a lease with some time left.
fn leased(v: Validity) -> bool {
    matches!(v, Validity::For(d) if d > MARGIN)
}

/// A round of a listing answered from what the client keeps
/// ([`Leases::kept_listing`]).
pub(super) struct KeptListing {
    pub(super) entries: Vec<DirEntryPlus>,
    /// The last position of the partition listed, when the entries reach it.
    pub(super) end: Option<u64>,
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
