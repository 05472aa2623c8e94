//! A server's state: its store (rows in keyspace [`crate::KEYSPACE`]), the partitions it
//! holds and their in-memory flags, names held by operations across servers, leases,
//! open counts, pending directory times; and the helpers every operation uses.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use prost::Message;

use cairn::{Db, Keyspace, WriteBatch, WriteOptions};
use cairn_fs::{Attr, Errno};

use super::state::{LearntBitmaps, Lease, Leases, RenameLock, State};
use super::SyncMode;
use crate::convert::{busy_status, row_attr};
use crate::giga::{self, covers, home_of, name_hash, MAX_DEPTH};
use crate::proto;
use crate::raft::overlay::Seen;
use crate::rows::{
    inode_key, partition_key, perms_key, prefix_successor, single, PART_ACTIVE, TAG_INO_LEASE,
    TAG_INTENT_LEASE,
};

/// Why an operation did not succeed (inside the server).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fail {
    /// An errno for the caller.
    Errno(i32),
    /// The name or partition is held for a moment: retry.
    Busy,
    /// The name is in a partition this server does not hold: here is its bitmap of the
    /// directory.
    Redirect(u64, Vec<u32>),
    /// A peer did not answer; the operation could not be done (now).
    Down(String),
    /// The server stopped (test crash point, or shutting down): nothing more is written.
    Crashed,
    /// This replica does not lead its group (any more): nothing was done, or — for a
    /// change already proposed — the next leader decides whether it stands.
    NotLeader,
    /// The call came from a leader its group has replaced (a later one called here
    /// already): refused, nothing done.
    Superseded,
}

impl Fail {
    /// The wire status of this failure.
    pub(crate) fn to_status(&self) -> proto::Status {
        match self {
            Fail::Errno(e) => proto::Status {
                errno: *e as u32,
                ..Default::default()
            },
            Fail::Busy => busy_status(),
            Fail::Redirect(dir, parts) => proto::Status {
                redirect: Some(proto::Bitmap {
                    dir: *dir,
                    partitions: parts.clone(),
                }),
                ..Default::default()
            },
            Fail::Down(_) | Fail::Crashed | Fail::NotLeader | Fail::Superseded => proto::Status {
                errno: libc::EIO as u32,
                ..Default::default()
            },
        }
    }

    /// The failure a wire status says, if any.
    pub(crate) fn from_status(s: Option<&proto::Status>) -> Option<Fail> {
        let s = s?;
        if let Some(b) = &s.redirect {
            return Some(Fail::Redirect(b.dir, b.partitions.clone()));
        }
        if s.retry {
            return Some(Fail::Busy);
        }
        if s.errno != 0 {
            return Some(Fail::Errno(s.errno as i32));
        }
        None
    }
}

impl From<Errno> for Fail {
    fn from(e: Errno) -> Fail {
        Fail::Errno(e.0)
    }
}

impl From<cairn::Error> for Fail {
    fn from(e: cairn::Error) -> Fail {
        match e {
            cairn::Error::StorageFull(_) => Fail::Errno(libc::ENOSPC),
            cairn::Error::Closed => Fail::Crashed,
            cairn::Error::OpenedReadOnly(_) => Fail::Errno(libc::EROFS),
            e => {
                tracing::error!("store error: {e}");
                Fail::Errno(libc::EIO)
            }
        }
    }
}

/// Result of server operations.
pub(crate) type R<T> = Result<T, Fail>;

pub(crate) fn errno<T>(e: i32) -> R<T> {
    Err(Fail::Errno(e))
}

/// An intent's identity: (coordinating server, number).
pub(crate) type IntentKey = (u32, u64);

/// Counters for status and metrics.
#[derive(Default)]
pub(crate) struct Counters {
    splits_done: AtomicU64,
    /// Entries those splits gave their new partitions.
    entries_moved: AtomicU64,
    redirects: AtomicU64,
}

impl Counters {
    /// A split finished here as its source, giving `moved` entries to its new
    /// partition.
    pub(crate) fn split_done(&self, moved: u64) {
        self.splits_done.fetch_add(1, Ordering::Relaxed);
        self.entries_moved.fetch_add(moved, Ordering::Relaxed);
        metrics::counter!("cairn_splits_total").increment(1);
    }

    /// A request was redirected.
    pub(crate) fn redirected(&self) {
        self.redirects.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("cairn_redirects_total").increment(1);
    }

    /// Splits finished here as the source.
    pub(crate) fn splits_done(&self) -> u64 {
        self.splits_done.load(Ordering::Relaxed)
    }

    /// Entries the splits finished here gave their new partitions.
    pub(crate) fn entries_moved(&self) -> u64 {
        self.entries_moved.load(Ordering::Relaxed)
    }

    /// Requests redirected.
    pub(crate) fn redirects(&self) -> u64 {
        self.redirects.load(Ordering::Relaxed)
    }
}

/// What a node is made with: its place in the cluster and its settings.
pub(crate) struct NodeConfig {
    pub id: u32,
    pub n: u32,
    pub cluster_id: u64,
    pub sync: SyncMode,
    pub threshold: u64,
    pub split_depth: u32,
    pub peer_timeout: Duration,
    pub inline_store: bool,
    /// How long a client's lease session lasts past a renewal (zero: no leases).
    pub lease_time: Duration,
}

/// The state of a running server. Its settings are plain values; what changes is in
/// parts with methods of their own ([`State`] under one lock, the leases, the rename
/// lock, the learnt bitmaps, the counters), and its rows change only through
/// [`Node::apply`].
pub(crate) struct Node {
    pub id: u32,
    pub n: u32,
    pub cluster_id: u64,
    pub sync: SyncMode,
    pub threshold: u64,
    /// Depth past which partitions do not split ([`giga::split_depth_limit`]).
    pub split_depth: u32,
    pub peer_timeout: Duration,
    /// Store calls run in the calling task instead of the blocking pool (the
    /// simulation, whose single thread must see them in a fixed order).
    pub inline_store: bool,
    pub peers: Vec<super::peer::PeerConn>,
    pub counters: Counters,
    /// The cluster's rename lock (used on server 0 only).
    pub rename_lock: RenameLock,
    /// Directory bitmaps learnt from peers' redirects (for a rename's destination).
    pub bitmaps: LearntBitmaps,
    /// The highest term seen from each group's leaders (calls of earlier ones are
    /// refused: `super::fence`).
    pub fences: super::fence::Fences,
    /// The leases granted to clients on what their kernels cache (`super::grants`).
    pub grants: super::grants::Grants,
    /// Where its rows are: its own store, or its group's replicated state.
    rows: RowStore,
    /// What the server keeps in memory (see [`State`]).
    state: Mutex<State>,
    /// The number leases (taken while the state's lock may be held: after it).
    leases: Mutex<Leases>,
    /// Set when the server stops (a crash point, a kill, a shutdown): nothing more is
    /// written.
    crashed: AtomicBool,
    /// Wakes the background task that drives unfinished intents.
    wake: tokio::sync::Notify,
    /// Set when the server stops: its streams of creates end (`super::stream`).
    stop_streams: tokio::sync::watch::Sender<bool>,
    /// Why the store failed a write, once it has ([`Node::store_failed`]).
    failure: tokio::sync::watch::Sender<Option<String>>,
    /// The test hooks.
    #[cfg(feature = "test-hooks")]
    hooks: super::Hooks,
}

/// Where a server's rows live.
pub(crate) enum RowStore {
    /// A group of one: its own store's keyspace, written directly.
    Local(Keyspace),
    /// A replica of a group: changes are proposed to the group and applied once
    /// committed; the leader's reads see its pending changes over the store.
    Replicated(Arc<crate::raft::Replica>),
}

/// Changes of rows (key, new value; `None`: delete), applied atomically by
/// [`Node::apply`].
#[derive(Default)]
pub(crate) struct Batch(pub Vec<(Vec<u8>, Option<Vec<u8>>)>);

impl Batch {
    pub(crate) fn new() -> Batch {
        Batch(Vec::new())
    }
    pub(crate) fn put<M: Message>(&mut self, key: &[u8], m: &M) {
        self.0.push((key.to_vec(), Some(m.encode_to_vec())));
    }
    pub(crate) fn put_raw(&mut self, key: &[u8], v: &[u8]) {
        self.0.push((key.to_vec(), Some(v.to_vec())));
    }
    pub(crate) fn delete(&mut self, key: &[u8]) {
        self.0.push((key.to_vec(), None));
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    fn write_batch(self) -> WriteBatch {
        let mut wb = WriteBatch::new();
        for (k, v) in self.0 {
            match v {
                Some(v) => wb.put(k, v),
                None => wb.delete(k),
            };
        }
        wb
    }
}

/// Local inode numbers handed out per durable lease update.
const INO_LEASE: u64 = 4096;
/// Intent numbers handed out per lease update.
const INTENT_LEASE: u64 = 1024;

/// Milliseconds since the epoch, now.
pub(crate) fn now_ms() -> i64 {
    cairn_fs::now_ns() / 1_000_000
}

impl Node {
    /// A node of `cfg` over keyspace `ks` with connections `peers`, holding nothing yet
    /// (recovery fills its state).
    pub(crate) fn new(cfg: NodeConfig, rows: RowStore, peers: Vec<super::peer::PeerConn>) -> Node {
        Node {
            id: cfg.id,
            n: cfg.n,
            cluster_id: cfg.cluster_id,
            sync: cfg.sync,
            threshold: cfg.threshold,
            split_depth: cfg.split_depth,
            peer_timeout: cfg.peer_timeout,
            inline_store: cfg.inline_store,
            peers,
            counters: Counters::default(),
            rename_lock: RenameLock::default(),
            bitmaps: LearntBitmaps::default(),
            fences: super::fence::Fences::default(),
            grants: super::grants::Grants::new(cfg.lease_time),
            rows,
            state: Mutex::new(State::default()),
            leases: Mutex::new(Leases::default()),
            crashed: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
            stop_streams: tokio::sync::watch::channel(false).0,
            failure: tokio::sync::watch::channel(None).0,
            #[cfg(feature = "test-hooks")]
            hooks: super::Hooks::default(),
        }
    }

    /// The node with test hooks `hooks`.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn with_hooks(mut self, hooks: super::Hooks) -> Node {
        self.hooks = hooks;
        self
    }

    /// Whether `MakeStream` answers UNIMPLEMENTED (a test hook: an older server).
    pub(crate) fn without_streams(&self) -> bool {
        #[cfg(feature = "test-hooks")]
        return self.hooks.without_streams;
        #[cfg(not(feature = "test-hooks"))]
        false
    }

    pub(crate) fn db(&self) -> Db {
        self.ks().db().clone()
    }

    /// The keyspace of its rows (for a replica: the state keyspace in use).
    fn ks(&self) -> Keyspace {
        match &self.rows {
            RowStore::Local(ks) => ks.clone(),
            RowStore::Replicated(r) => r.core.state(),
        }
    }

    /// The replica this server is, if its group is replicated.
    pub(crate) fn replica(&self) -> Option<&Arc<crate::raft::Replica>> {
        match &self.rows {
            RowStore::Local(_) => None,
            RowStore::Replicated(r) => Some(r),
        }
    }

    /// Whether this server serves requests: always for a group of one; for a
    /// replica, while it leads (and has rebuilt its state).
    pub(crate) fn serving(&self) -> R<()> {
        match &self.rows {
            RowStore::Local(_) => Ok(()),
            RowStore::Replicated(r) => match r.role() {
                crate::raft::Role::Leading(_) => Ok(()),
                _ => Err(Fail::NotLeader),
            },
        }
    }

    /// Before a reply: for a replica, waits until what the operation did and saw is
    /// committed and this replica still leads (`Replica::settle`).
    /// A task bound to a term settles in it: if the term ended (even if this replica
    /// leads a later one), what it did may have been dropped.
    pub(crate) async fn settle(&self) -> R<()> {
        match &self.rows {
            RowStore::Local(_) => Ok(()),
            RowStore::Replicated(r) => r
                .settle(super::term::bound_term())
                .await
                .map_err(|_| Fail::NotLeader),
        }
    }

    /// The term the calling task works in: the one it is bound to (`super::term`), else
    /// the one this server serves requests in.
    pub(crate) fn task_term(&self) -> R<u64> {
        match super::term::bound_term() {
            Some(term) => Ok(term),
            None => self.serving_term(),
        }
    }

    /// The term this server serves requests in (0 for a group of one); `NotLeader`
    /// if it serves none.
    pub(crate) fn serving_term(&self) -> R<u64> {
        match &self.rows {
            RowStore::Local(_) => Ok(0),
            RowStore::Replicated(r) => match r.role() {
                crate::raft::Role::Leading(term) => Ok(term),
                _ => Err(Fail::NotLeader),
            },
        }
    }

    /// Resets what the server keeps in memory (a replica that lost or gained the
    /// lead: it is rebuilt from the rows).
    pub(crate) fn reset_state(&self) {
        *self.state.lock() = State::default();
    }

    /// Locks what the server keeps in memory.
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Sets the number leases (at recovery): the next local inode number and the next
    /// intent number.
    pub(crate) fn set_leases(&self, ino: u64, intent: u64) {
        let mut l = self.leases.lock();
        l.ino = Lease::at(ino);
        l.intent = Lease::at(intent);
    }

    /// The next local inode number never handed out.
    pub(crate) fn inos_used(&self) -> u64 {
        self.leases.lock().ino.next()
    }

    /// Wakes the background runner of intents.
    pub(crate) fn wake_runner(&self) {
        self.wake.notify_one();
    }

    /// Waits until [`Node::wake_runner`] is called.
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Ends the server's streams of creates (it stops).
    pub(crate) fn stop_streams(&self) {
        self.stop_streams.send_replace(true);
    }

    /// Watches whether the server's streams of creates must end.
    /// The store failed a write or a sync of this server's own rows (a group of one):
    /// the server stops serving. The engine keeps a write that failed in memory, where
    /// readers see it, and writes it with the next durable write if the disk has room
    /// again (`cairn::Error::StorageFull`): answering `ENOSPC` ("not done") and serving
    /// on would show changes the disk may never hold — a restart would undo them. So
    /// nothing more is served or written; the operation's outcome is unknown to its
    /// client (`EIO` after its timeout, as with a server that died), and
    /// `run_until_signal` ends the process with the reason, for the operator to restart
    /// it once the disk has room (recovery then keeps what the disk holds).
    fn store_failed(&self, e: cairn::Error) -> Fail {
        if matches!(e, cairn::Error::Closed) {
            return Fail::Crashed;
        }
        let why = format!("the store failed a write: {e}");
        tracing::error!(server = self.id, "{why}; this server stops serving");
        self.crashed.store(true, Ordering::SeqCst);
        self.failure.send_replace(Some(why));
        Fail::Crashed
    }

    /// Why the store failed a write, once it has ([`Node::store_failed`]).
    pub(crate) fn failure(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.failure.subscribe()
    }

    pub(crate) fn streams_stop(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stop_streams.subscribe()
    }

    /// Marks the server stopped (nothing more is written) or, `false`, running again
    /// (a shutdown's last writes).
    pub(crate) fn set_stopped(&self, stopped: bool) {
        self.crashed.store(stopped, Ordering::SeqCst);
    }

    /// The rows of `range`, in order.
    pub(crate) fn rows(
        &self,
        range: (std::ops::Bound<Vec<u8>>, std::ops::Bound<Vec<u8>>),
    ) -> RowIter {
        match &self.rows {
            RowStore::Local(ks) => Box::new(
                ks.range::<Vec<u8>, _>(range)
                    .map(|r| r.map(|(k, v)| (k, v.into_vec())).map_err(Fail::from)),
            ),
            RowStore::Replicated(r) => Box::new(r.core.range(range).map(|r| r.map_err(Fail::from))),
        }
    }

    /// The suffixes after `prefix` of the keys of rows starting with it, in order.
    pub(crate) fn suffixes(&self, prefix: &[u8]) -> Box<dyn Iterator<Item = R<Vec<u8>>> + Send> {
        match &self.rows {
            RowStore::Local(ks) => Box::new(
                ks.prefix_suffixes(prefix)
                    .map(|r| r.map(|(k, _)| k).map_err(Fail::from)),
            ),
            RowStore::Replicated(_) => {
                let n = prefix.len();
                Box::new(
                    self.rows(prefix_range(prefix))
                        .map(move |r| r.map(|(k, _)| k[n..].to_vec())),
                )
            }
        }
    }

    // ---- store access ---------------------------------------------------------------

    /// The row `key` decoded as `M` (a row that does not decode is damage: `EIO`).
    pub(crate) fn get<M: Message + Default>(&self, key: &[u8]) -> R<Option<M>> {
        match self.get_raw(key)? {
            None => Ok(None),
            Some(v) => match M::decode(&v[..]) {
                Ok(m) => Ok(Some(m)),
                Err(e) => {
                    tracing::error!("damaged row {key:?}: {e}");
                    errno(libc::EIO)
                }
            },
        }
    }

    pub(crate) fn get_raw(&self, key: &[u8]) -> R<Option<Vec<u8>>> {
        match &self.rows {
            RowStore::Local(ks) => Ok(ks.get(key)?.map(|v| v.into_vec())),
            RowStore::Replicated(r) => match r.core.seen(key) {
                Seen::Pending(v) => Ok(v),
                Seen::Store => Ok(r.core.state().get(key)?.map(|v| v.into_vec())),
            },
        }
    }

    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        match &self.rows {
            RowStore::Local(ks) => ks.contains(key),
            RowStore::Replicated(r) => match r.core.seen(key) {
                Seen::Pending(v) => v.is_some(),
                Seen::Store => r.core.state().contains(key),
            },
        }
    }

    /// Keys (whole) and values of the rows starting with `prefix`, in order, after the
    /// whole key `after` if given, at most `limit`.
    pub(crate) fn scan(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> R<Vec<(Vec<u8>, Vec<u8>)>> {
        use std::ops::Bound;
        let lo = match after {
            Some(a) => Bound::Excluded(a.to_vec()),
            None => Bound::Included(prefix.to_vec()),
        };
        let hi = prefix_successor(prefix).map_or(Bound::Unbounded, Bound::Excluded);
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        for r in self.rows((lo, hi)) {
            let (k, v) = r?;
            out.push((k, v));
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// The whole keys of the rows starting with `prefix`, after `after` if given, in
    /// order: what a delete of them needs, without holding their values (a file's
    /// chunks may be far larger than memory).
    pub(crate) fn keys(&self, prefix: &[u8], after: Option<&[u8]>) -> R<Vec<Vec<u8>>> {
        self.fold_keys(prefix, after, Vec::new(), |mut v, k| {
            v.push(k);
            v
        })
    }

    /// Folds `f` over the whole keys of the rows starting with `prefix` (after `after`
    /// if given), one value in memory at a time.
    pub(crate) fn fold_keys<T>(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        init: T,
        mut f: impl FnMut(T, Vec<u8>) -> T,
    ) -> R<T> {
        use std::ops::Bound;
        let lo = match after {
            Some(a) => Bound::Excluded(a.to_vec()),
            None => Bound::Included(prefix.to_vec()),
        };
        let hi = prefix_successor(prefix).map_or(Bound::Unbounded, Bound::Excluded);
        let mut acc = init;
        match &self.rows {
            RowStore::Local(ks) => {
                for r in ks.range::<Vec<u8>, _>((lo, hi)) {
                    acc = f(acc, r?.0);
                }
            }
            RowStore::Replicated(_) => {
                for r in self.rows((lo, hi)) {
                    acc = f(acc, r?.0);
                }
            }
        }
        Ok(acc)
    }

    /// Keys of the rows in `[lo, hi)` (whole keys), in order.
    pub(crate) fn scan_range(&self, lo: &[u8], hi: Option<&[u8]>) -> R<Vec<(Vec<u8>, Vec<u8>)>> {
        use std::ops::Bound;
        let hi = hi.map_or(Bound::Unbounded, |h| Bound::Excluded(h.to_vec()));
        let mut out = Vec::new();
        for r in self.rows((Bound::Included(lo.to_vec()), hi)) {
            out.push(r?);
        }
        Ok(out)
    }

    /// Applies `b` atomically (not waiting for the disk).
    pub(crate) fn apply(&self, b: Batch) -> R<()> {
        if self.crashed.load(Ordering::SeqCst) {
            return Err(Fail::Crashed);
        }
        if b.is_empty() {
            return Ok(());
        }
        let touched: Vec<super::grants::Key> =
            b.0.iter()
                .filter_map(|(k, _)| super::grants::Key::of_row(k))
                .collect();
        match &self.rows {
            RowStore::Local(ks) => ks
                .write_with(b.write_batch(), WriteOptions::new().defer_sync())
                .map_err(|e| self.store_failed(e)),
            // A task bound to a term proposes only in it (`super::term`).
            RowStore::Replicated(r) => match super::term::bound_term() {
                Some(term) => r.core.propose_in(term, b.0),
                None => r.core.propose(b.0),
            }
            .map(drop)
            .map_err(|_| Fail::NotLeader),
        }?;
        // Seen by every reader from now on: the leases on what changed are revoked.
        self.grants.changed(touched.into_iter());
        Ok(())
    }

    /// Makes everything applied so far durable (group commit). Steps of splits and of
    /// operations across servers call this whatever the sync mode.
    pub(crate) fn durable(&self) -> R<()> {
        if self.crashed.load(Ordering::SeqCst) {
            return Err(Fail::Crashed);
        }
        if let RowStore::Replicated(r) = &self.rows {
            // Committed: on a majority of the group (on their disks under
            // `--sync always`; under `--sync never` the leader's log is synced too).
            let (term, seq) = r
                .core
                .proposed_as(super::term::bound_term())
                .ok_or(Fail::NotLeader)?;
            r.core
                .wait_blocking(term, seq)
                .map_err(|_| Fail::NotLeader)?;
        }
        self.db().sync_written().map_err(|e| self.store_failed(e))?;
        if self.crashed.load(Ordering::SeqCst) {
            return Err(Fail::Crashed);
        }
        Ok(())
    }

    /// Makes a client's change durable before the reply under `SyncMode::Always`.
    pub(crate) fn ack(&self) -> R<()> {
        if self.replica().is_some() {
            // The reply waits for the group instead (`Replica::settle`, after the
            // operation, off the store's thread).
            return if self.crashed.load(Ordering::SeqCst) {
                Err(Fail::Crashed)
            } else {
                Ok(())
            };
        }
        match self.sync {
            SyncMode::Always => self.durable(),
            SyncMode::Never => {
                if self.crashed.load(Ordering::SeqCst) {
                    return Err(Fail::Crashed);
                }
                Ok(())
            }
        }
    }

    /// A crash point: `Crashed` once the server stopped; with the test hooks, the
    /// server stops here as if killed if they say so.
    pub(crate) fn point(&self, name: &str) -> R<()> {
        if self.crashed.load(Ordering::SeqCst) {
            return Err(Fail::Crashed);
        }
        #[cfg(feature = "test-hooks")]
        if self.hooks.stops_at(self.id, name) {
            tracing::warn!(
                server = self.id,
                "crash point {name}: stopping as if killed"
            );
            self.crashed.store(true, Ordering::SeqCst);
            return Err(Fail::Crashed);
        }
        #[cfg(not(feature = "test-hooks"))]
        let _ = name;
        Ok(())
    }

    pub(crate) fn is_crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    // ---- numbers --------------------------------------------------------------------

    /// A new inode number of this server.
    pub(crate) fn alloc_ino(&self) -> R<u64> {
        // No sync needed: a row using a number of this lease is written after it,
        // and the store keeps a prefix of its writes after a crash.
        let local = self
            .leases
            .lock()
            .ino
            .take(INO_LEASE, |end| self.put_lease(TAG_INO_LEASE, end))?;
        Ok(giga::make_ino(self.id, local))
    }

    /// A new intent number (never reused: participants key their rows by it).
    pub(crate) fn alloc_intent(&self) -> R<u64> {
        self.leases
            .lock()
            .intent
            .take(INTENT_LEASE, |end| self.put_lease(TAG_INTENT_LEASE, end))
    }

    /// Writes the end of a lease of numbers (row `tag`).
    fn put_lease(&self, tag: u8, end: u64) -> R<()> {
        let mut b = Batch::new();
        b.put_raw(&single(tag), &end.to_le_bytes());
        self.apply(b)
    }

    // ---- inodes ---------------------------------------------------------------------

    /// The inode row of `ino` (whose home must be here).
    pub(crate) fn inode(&self, ino: u64) -> R<Option<proto::InodeRow>> {
        self.get(&inode_key(ino))
    }

    /// The inode row of `ino`, or `ENOENT`.
    pub(crate) fn inode_or_enoent(&self, ino: u64) -> R<proto::InodeRow> {
        self.inode(ino)?.ok_or(Fail::Errno(libc::ENOENT))
    }

    /// The attributes of an inode row, with a directory's pending times.
    pub(crate) fn attr_of(&self, st: &State, ino: u64, i: &proto::InodeRow) -> Attr {
        let mut a = row_attr(ino, i);
        if let Some((mt, ct)) = st.times.pending(ino) {
            a.mtime = a.mtime.max(mt);
            a.ctime = a.ctime.max(ct);
        }
        a
    }

    /// Records that directory `dir` changed at `t` (an entry added or removed): its
    /// times are written later (here, or sent to its home).
    pub(crate) fn touch_dir(&self, st: &mut State, dir: u64, t: i64) {
        let home = home_of(dir) == self.id;
        st.times.touch(home, dir, t);
        if home {
            self.grants
                .changed(std::iter::once(super::grants::Key::Inode(dir)));
        }
    }

    /// Folds a directory's pending times into its row (before a change of the row that
    /// sets times itself).
    pub(crate) fn fold_times(&self, st: &mut State, ino: u64, i: &mut proto::InodeRow) {
        if let Some((mt, ct)) = st.times.take(ino) {
            i.mtime = i.mtime.max(mt);
            i.ctime = i.ctime.max(ct);
        }
    }

    // ---- partitions -----------------------------------------------------------------

    /// The partition of `dir` held here that owns names of hash `h`, or why not:
    /// `Redirect` when this server holds an ancestor of the owner, `ENOENT`/`ENOTDIR`
    /// when it holds none of the directory's partitions.
    pub(crate) fn locate(&self, st: &State, dir: u64, h: u64) -> R<u32> {
        for r in (0..=MAX_DEPTH).rev() {
            let i = (h & ((1u64 << r) - 1)) as u32;
            if let Some(p) = st.parts.get(dir, i) {
                // A split's copy not yet activated: the name is unavailable for a
                // moment (its owner is this partition soon, or the split's source
                // until it commits).
                if p.state != PART_ACTIVE {
                    return Err(Fail::Busy);
                }
                if covers(i, p.depth, h) {
                    return Ok(i);
                }
                // An ancestor of the owner: the owner is elsewhere.
                self.counters.redirected();
                return Err(Fail::Redirect(dir, st.parts.bitmap(dir)));
            }
        }
        self.no_partition(dir)
    }

    /// Why this server holds no partition of `dir` for a name: at the directory's
    /// home, `ENOTDIR` for a non-directory, else `ENOENT`.
    pub(crate) fn no_partition<T>(&self, dir: u64) -> R<T> {
        if home_of(dir) == self.id {
            if let Some(i) = self.inode(dir)? {
                if i.mode & libc::S_IFMT != libc::S_IFDIR {
                    return errno(libc::ENOTDIR);
                }
            }
        }
        errno(libc::ENOENT)
    }

    /// The partition of name `name` in `dir`, held here, for a change: it must be
    /// active and not held by a split or an rmdir, and the name not held by another
    /// operation (unless by `mine`).
    pub(crate) fn writable_part(
        &self,
        st: &State,
        dir: u64,
        name: &[u8],
        mine: Option<IntentKey>,
    ) -> R<u32> {
        let idx = self.locate(st, dir, name_hash(name))?;
        st.parts.get(dir, idx).ok_or(Fail::Busy)?.writable()?;
        if let Some(k) = st.names.holder(dir, name) {
            if Some(k) != mine {
                return Err(Fail::Busy);
            }
        }
        Ok(idx)
    }

    /// The permissions of directory `dir` as this server knows them: its inode if
    /// its home is here, else the copy kept with its partitions.
    pub(crate) fn dir_perms(&self, dir: u64) -> R<Attr> {
        if home_of(dir) == self.id {
            let i = self.inode_or_enoent(dir)?;
            if i.mode & libc::S_IFMT != libc::S_IFDIR {
                return errno(libc::ENOTDIR);
            }
            return Ok(row_attr(dir, &i));
        }
        match self.get::<proto::DirPerms>(&perms_key(dir))? {
            Some(p) => Ok(Attr {
                ino: dir,
                mode: libc::S_IFDIR | (p.mode & 0o7777),
                uid: p.uid,
                gid: p.gid,
                size: 0,
                nlink: 2,
                rdev: 0,
                atime: 0,
                mtime: 0,
                ctime: 0,
            }),
            None => {
                tracing::error!("no permissions copy of directory {dir:#x}");
                errno(libc::EIO)
            }
        }
    }

    /// The permissions copy of `dir` to hand to another server.
    pub(crate) fn perms_copy(&self, dir: u64) -> R<proto::DirPerms> {
        if home_of(dir) == self.id {
            let i = self.inode_or_enoent(dir)?;
            return Ok(proto::DirPerms {
                mode: i.mode & 0o7777,
                uid: i.uid,
                gid: i.gid,
                version: i.perms_version,
            });
        }
        self.get::<proto::DirPerms>(&perms_key(dir))?
            .ok_or(Fail::Errno(libc::EIO))
    }

    /// Adds one (`add`) or takes one from the entries of partition `idx` of `dir` and
    /// puts its row.
    pub(crate) fn count_entry(&self, st: &mut State, b: &mut Batch, dir: u64, idx: u32, add: bool) {
        if let Some(row) = st.parts.count_entry(dir, idx, add) {
            b.put(&partition_key(dir, idx), &row);
        }
    }

    /// Whether partition `(dir, idx)` has outgrown the threshold and may split.
    pub(crate) fn wants_split(&self, st: &State, dir: u64, idx: u32) -> bool {
        st.parts.get(dir, idx).is_some_and(|p| {
            p.entries > self.threshold
                && p.state == PART_ACTIVE
                && !p.splitting
                && p.removing.is_none()
                && p.depth < self.split_depth
        })
    }
}

/// Shared handle.
pub(crate) type NodeRef = Arc<Node>;

/// Rows in key order (keys whole, values).
pub(crate) type RowIter = Box<dyn Iterator<Item = R<(Vec<u8>, Vec<u8>)>> + Send>;

/// The range of keys starting with `prefix`.
fn prefix_range(prefix: &[u8]) -> (std::ops::Bound<Vec<u8>>, std::ops::Bound<Vec<u8>>) {
    use std::ops::Bound;
    (
        Bound::Included(prefix.to_vec()),
        prefix_successor(prefix).map_or(Bound::Unbounded, Bound::Excluded),
    )
}
