//! A server's state: its store (rows in keyspace [`crate::KEYSPACE`]), the partitions it
//! holds and their in-memory flags, names held by operations across servers, leases,
//! open counts, pending directory times; and the helpers every operation uses.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

// tokio's clock: real time in a server, virtual time in the simulation (turmoil pauses
// it), so that retries and leases follow the simulated schedule.
use tokio::time::Instant;

use parking_lot::Mutex;
use prost::Message;

use cairn::{Db, Keyspace, WriteBatch, WriteOptions};
use cairn_fs::{Attr, Cred, Errno};

use super::SyncMode;
use crate::giga::{self, covers, created_depth, home_of, name_hash, MAX_DEPTH};
use crate::proto;
use crate::rows::*;

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
}

impl Fail {
    /// The wire status of this failure.
    pub(crate) fn to_status(&self) -> proto::Status {
        match self {
            Fail::Errno(e) => proto::Status {
                errno: *e as u32,
                ..Default::default()
            },
            Fail::Busy => proto::Status {
                errno: libc::EAGAIN as u32,
                retry: true,
                ..Default::default()
            },
            Fail::Redirect(dir, parts) => proto::Status {
                redirect: Some(proto::Bitmap {
                    dir: *dir,
                    partitions: parts.clone(),
                }),
                ..Default::default()
            },
            Fail::Down(_) | Fail::Crashed => proto::Status {
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

/// A partition held here, as kept in memory.
#[derive(Clone, Debug)]
pub(crate) struct Part {
    pub depth: u32,
    pub state: u32,
    pub entries: u64,
    /// A split of this partition is moving its entries: changes of its names wait.
    pub splitting: bool,
    /// An rmdir of the directory is prepared.
    pub removing: Option<IntentKey>,
}

impl Part {
    pub(crate) fn row(&self) -> proto::PartitionRow {
        proto::PartitionRow {
            depth: self.depth,
            state: self.state,
            entries: self.entries,
            removing: self
                .removing
                .map(|(server, id)| proto::IntentId { server, id }),
        }
    }

    /// Whether changes of names in this partition may go ahead now.
    pub(crate) fn writable(&self) -> R<()> {
        if self.state != PART_ACTIVE || self.splitting || self.removing.is_some() {
            return Err(Fail::Busy);
        }
        Ok(())
    }
}

/// What the server keeps in memory, under [`Node::mu`].
#[derive(Default)]
pub(crate) struct Mem {
    pub parts: BTreeMap<(u64, u32), Part>,
    /// Names held by operations across servers (an intent here, or a prepared part of
    /// another server's): changes of them wait.
    pub reserved: BTreeMap<(u64, Vec<u8>), IntentKey>,
    pub ino_next: u64,
    pub ino_end: u64,
    pub intent_next: u64,
    pub intent_end: u64,
    /// Opens of inodes whose home is here.
    pub open: Opens,
    /// Times of directories whose home is here, newer than their rows.
    pub dir_times: BTreeMap<u64, (i64, i64)>,
    /// Times of directories whose home is elsewhere, to send there.
    pub remote_times: BTreeMap<u64, (i64, i64)>,
    /// Intents this server coordinates that are not finished.
    pub intents: BTreeMap<u64, proto::IntentRow>,
    /// Intents a task is driving now.
    pub driving: BTreeSet<u64>,
    /// The cluster's rename lock (server 0 only): holder and expiry.
    pub rename_lock: Option<(IntentKey, Instant)>,
    /// When the background runner may try an intent again, and the pause after that.
    pub retry: BTreeMap<u64, (Instant, Duration)>,
}

/// The opens of inodes whose home is here, counted by the uid that made them, so that
/// a release ends only an open of its own caller (a release in another's name would
/// free a file unlinked while someone has it open).
#[derive(Default)]
pub(crate) struct Opens(HashMap<u64, Vec<(u32, u32)>>);

impl Opens {
    /// One more open of `ino` by `uid`.
    pub(crate) fn add(&mut self, ino: u64, uid: u32) {
        let v = self.0.entry(ino).or_default();
        match v.iter_mut().find(|(u, _)| *u == uid) {
            Some((_, n)) => *n += 1,
            None => v.push((uid, 1)),
        }
    }

    /// Ends one open of `ino` by `uid`: whether it was the last open of `ino` by
    /// anyone (false when `uid` had none).
    pub(crate) fn remove(&mut self, ino: u64, uid: u32) -> bool {
        let Some(v) = self.0.get_mut(&ino) else {
            return false;
        };
        let Some(at) = v.iter().position(|(u, _)| *u == uid) else {
            return false;
        };
        v[at].1 -= 1;
        if v[at].1 == 0 {
            v.swap_remove(at);
        }
        if v.is_empty() {
            self.0.remove(&ino);
            return true;
        }
        false
    }

    /// Whether anyone has `ino` open.
    pub(crate) fn is_open(&self, ino: u64) -> bool {
        self.0.contains_key(&ino)
    }
}

/// Counters for status and metrics.
#[derive(Default)]
pub(crate) struct Counters {
    pub splits_done: AtomicU64,
    /// Entries those splits gave their new partitions.
    pub entries_moved: AtomicU64,
    pub redirects: AtomicU64,
}

/// The state of a running server.
pub(crate) struct Node {
    pub id: u32,
    pub n: u32,
    pub cluster_id: u64,
    pub ks: Keyspace,
    pub sync: SyncMode,
    pub threshold: u64,
    /// Depth past which partitions do not split ([`giga::split_depth_limit`]).
    pub split_depth: u32,
    pub peer_timeout: Duration,
    pub mu: Mutex<Mem>,
    pub peers: Vec<super::peer::PeerConn>,
    pub crash_at: Option<String>,
    pub crash_hook: Option<super::CrashHook>,
    /// Test hook ([`super::ServerOptions::without_streams`]): `MakeStream` answers
    /// UNIMPLEMENTED.
    pub without_streams: bool,
    pub crashed: AtomicBool,
    pub counters: Counters,
    /// Wakes the background task that drives unfinished intents.
    pub wake: tokio::sync::Notify,
    /// Set when the server stops: its streams of creates end (`super::stream`).
    pub stop_streams: tokio::sync::watch::Sender<bool>,
    /// Directory bitmaps learnt from peers' redirects (for a rename's destination).
    pub bitmaps: Mutex<HashMap<u64, giga::Bitmap>>,
    /// Store calls run in the calling task instead of the blocking pool (the
    /// simulation, whose single thread must see them in a fixed order).
    pub inline_store: bool,
}

/// Changes of rows, applied atomically by [`Node::apply`].
pub(crate) struct Batch(pub WriteBatch);

impl Batch {
    pub(crate) fn new() -> Batch {
        Batch(WriteBatch::new())
    }
    pub(crate) fn put<M: Message>(&mut self, key: &[u8], m: &M) {
        self.0.put(key, m.encode_to_vec());
    }
    pub(crate) fn put_raw(&mut self, key: &[u8], v: &[u8]) {
        self.0.put(key, v);
    }
    pub(crate) fn delete(&mut self, key: &[u8]) {
        self.0.delete(key);
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
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
    pub(crate) fn db(&self) -> &Db {
        self.ks.db()
    }

    // ---- store access ---------------------------------------------------------------

    /// The row `key` decoded as `M` (a row that does not decode is damage: `EIO`).
    pub(crate) fn get<M: Message + Default>(&self, key: &[u8]) -> R<Option<M>> {
        match self.ks.get(key)? {
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
        Ok(self.ks.get(key)?.map(|v| v.into_vec()))
    }

    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        self.ks.contains(key)
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
        for r in self.ks.range::<Vec<u8>, _>((lo, hi)) {
            let (k, v) = r?;
            out.push((k, v.into_vec()));
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
        for r in self.ks.range::<Vec<u8>, _>((lo, hi)) {
            acc = f(acc, r?.0);
        }
        Ok(acc)
    }

    /// Keys of the rows in `[lo, hi)` (whole keys), in order.
    pub(crate) fn scan_range(&self, lo: &[u8], hi: Option<&[u8]>) -> R<Vec<(Vec<u8>, Vec<u8>)>> {
        use std::ops::Bound;
        let hi = hi.map_or(Bound::Unbounded, |h| Bound::Excluded(h.to_vec()));
        let mut out = Vec::new();
        for r in self
            .ks
            .range::<Vec<u8>, _>((Bound::Included(lo.to_vec()), hi))
        {
            let (k, v) = r?;
            out.push((k, v.into_vec()));
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
        self.ks
            .write_with(b.0, WriteOptions::new().defer_sync())
            .map_err(Fail::from)
    }

    /// Makes everything applied so far durable (group commit). Steps of splits and of
    /// operations across servers call this whatever the sync mode.
    pub(crate) fn durable(&self) -> R<()> {
        if self.crashed.load(Ordering::SeqCst) {
            return Err(Fail::Crashed);
        }
        self.db().sync_written().map_err(Fail::from)?;
        if self.crashed.load(Ordering::SeqCst) {
            return Err(Fail::Crashed);
        }
        Ok(())
    }

    /// Makes a client's change durable before the reply under `SyncMode::Always`.
    pub(crate) fn ack(&self) -> R<()> {
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

    /// The test hook: at the named point, the server stops as if killed.
    pub(crate) fn point(&self, name: &str) -> R<()> {
        if self.crashed.load(Ordering::SeqCst) {
            return Err(Fail::Crashed);
        }
        if self.crash_at.as_deref() == Some(name)
            || self
                .crash_hook
                .as_ref()
                .is_some_and(|h| (h.0)(self.id, name))
        {
            tracing::warn!(
                server = self.id,
                "crash point {name}: stopping as if killed"
            );
            self.crashed.store(true, Ordering::SeqCst);
            return Err(Fail::Crashed);
        }
        Ok(())
    }

    pub(crate) fn is_crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    // ---- numbers --------------------------------------------------------------------

    /// A new inode number of this server.
    pub(crate) fn alloc_ino(&self, m: &mut Mem) -> R<u64> {
        if m.ino_next >= m.ino_end {
            let end = m.ino_next + INO_LEASE;
            // No sync needed: a row using a number of this lease is written after it,
            // and the store keeps a prefix of its writes after a crash.
            let mut b = Batch::new();
            b.put_raw(&single(TAG_INO_LEASE), &end.to_le_bytes());
            self.apply(b)?;
            m.ino_end = end;
        }
        let ino = giga::make_ino(self.id, m.ino_next);
        m.ino_next += 1;
        Ok(ino)
    }

    /// A new intent number (never reused: participants key their rows by it).
    pub(crate) fn alloc_intent(&self, m: &mut Mem) -> R<u64> {
        if m.intent_next >= m.intent_end {
            let end = m.intent_next + INTENT_LEASE;
            let mut b = Batch::new();
            b.put_raw(&single(TAG_INTENT_LEASE), &end.to_le_bytes());
            self.apply(b)?;
            m.intent_end = end;
        }
        let id = m.intent_next;
        m.intent_next += 1;
        Ok(id)
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
    pub(crate) fn attr_of(&self, m: &Mem, ino: u64, i: &proto::InodeRow) -> Attr {
        let mut a = row_attr(ino, i);
        if let Some(&(mt, ct)) = m.dir_times.get(&ino) {
            a.mtime = a.mtime.max(mt);
            a.ctime = a.ctime.max(ct);
        }
        a
    }

    /// Records that directory `dir` changed at `t` (an entry added or removed): its
    /// times are written later (here, or sent to its home).
    pub(crate) fn touch_dir(&self, m: &mut Mem, dir: u64, t: i64) {
        let map = if home_of(dir) == self.id {
            &mut m.dir_times
        } else {
            &mut m.remote_times
        };
        let e = map.entry(dir).or_insert((t, t));
        e.0 = e.0.max(t);
        e.1 = e.1.max(t);
    }

    /// Folds a directory's pending times into its row (before a change of the row that
    /// sets times itself).
    pub(crate) fn fold_times(&self, m: &mut Mem, ino: u64, i: &mut proto::InodeRow) {
        if let Some((mt, ct)) = m.dir_times.remove(&ino) {
            i.mtime = i.mtime.max(mt);
            i.ctime = i.ctime.max(ct);
        }
    }

    // ---- partitions -----------------------------------------------------------------

    /// The partition of `dir` held here that owns names of hash `h`, or why not:
    /// `Redirect` when this server holds an ancestor of the owner, `ENOENT`/`ENOTDIR`
    /// when it holds none of the directory's partitions.
    pub(crate) fn locate(&self, m: &Mem, dir: u64, h: u64) -> R<u32> {
        for r in (0..=MAX_DEPTH).rev() {
            let i = (h & ((1u64 << r) - 1)) as u32;
            if let Some(p) = m.parts.get(&(dir, i)) {
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
                self.counters.redirects.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("cairn_redirects_total").increment(1);
                return Err(Fail::Redirect(dir, self.bitmap(m, dir)));
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
        m: &Mem,
        dir: u64,
        name: &[u8],
        mine: Option<IntentKey>,
    ) -> R<u32> {
        let idx = self.locate(m, dir, name_hash(name))?;
        m.parts[&(dir, idx)].writable()?;
        if let Some(&k) = m.reserved.get(&(dir, name.to_vec())) {
            if Some(k) != mine {
                return Err(Fail::Busy);
            }
        }
        Ok(idx)
    }

    /// This server's bitmap of `dir`: the active partitions it holds and the
    /// partitions their splits created.
    pub(crate) fn bitmap(&self, m: &Mem, dir: u64) -> Vec<u32> {
        let mut out = Vec::new();
        for (&(_, i), p) in m.parts.range((dir, 0)..=(dir, u32::MAX)) {
            if p.state != PART_ACTIVE {
                continue;
            }
            out.push(i);
            for d in created_depth(i)..p.depth {
                out.push(giga::child(i, d));
            }
        }
        out
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

    /// Adds `delta` (±1) to the entries of partition `idx` of `dir` and puts its row.
    pub(crate) fn count_entry(&self, m: &mut Mem, b: &mut Batch, dir: u64, idx: u32, add: bool) {
        if let Some(p) = m.parts.get_mut(&(dir, idx)) {
            if add {
                p.entries += 1;
            } else {
                p.entries = p.entries.saturating_sub(1);
            }
            b.put(&partition_key(dir, idx), &p.row());
        }
    }

    /// Whether partition `(dir, idx)` has outgrown the threshold and may split.
    pub(crate) fn wants_split(&self, m: &Mem, dir: u64, idx: u32) -> bool {
        match m.parts.get(&(dir, idx)) {
            Some(p) => {
                p.entries > self.threshold
                    && p.state == PART_ACTIVE
                    && !p.splitting
                    && p.removing.is_none()
                    && p.depth < self.split_depth
            }
            None => false,
        }
    }

    /// Holds `names` for intent `k` (they must be free or already its own).
    pub(crate) fn reserve(&self, m: &mut Mem, k: IntentKey, names: &[(u64, Vec<u8>)]) -> R<()> {
        for n in names {
            if let Some(&o) = m.reserved.get(n) {
                if o != k {
                    return Err(Fail::Busy);
                }
            }
        }
        for n in names {
            m.reserved.insert(n.clone(), k);
        }
        Ok(())
    }

    /// Frees the names held by intent `k`.
    pub(crate) fn unreserve(&self, m: &mut Mem, k: IntentKey) {
        m.reserved.retain(|_, v| *v != k);
    }

    /// Whether any name of `dir` in partition range `(idx, depth)` is held.
    pub(crate) fn has_reserved_in(&self, m: &Mem, dir: u64, idx: u32, depth: u32) -> bool {
        m.reserved
            .range((dir, Vec::new())..)
            .take_while(|((d, _), _)| *d == dir)
            .any(|((_, name), _)| covers(idx, depth, name_hash(name)))
    }

    /// Whether any name of `dir` is held.
    pub(crate) fn has_reserved_dir(&self, m: &Mem, dir: u64) -> bool {
        m.reserved
            .range((dir, Vec::new())..)
            .next()
            .is_some_and(|((d, _), _)| *d == dir)
    }
}

/// The attributes of an inode row.
pub(crate) fn row_attr(ino: u64, i: &proto::InodeRow) -> Attr {
    Attr {
        ino,
        mode: i.mode,
        uid: i.uid,
        gid: i.gid,
        size: i.size,
        nlink: i.nlink,
        rdev: i.rdev,
        atime: i.atime,
        mtime: i.mtime,
        ctime: i.ctime,
    }
}

/// Copies attributes into an inode row.
pub(crate) fn set_row_attr(i: &mut proto::InodeRow, a: &Attr) {
    i.mode = a.mode;
    i.uid = a.uid;
    i.gid = a.gid;
    i.size = a.size;
    i.nlink = a.nlink;
    i.rdev = a.rdev;
    i.atime = a.atime;
    i.mtime = a.mtime;
    i.ctime = a.ctime;
}

/// The wire form of attributes.
pub(crate) fn attr_msg(a: &Attr) -> proto::Attr {
    proto::Attr {
        ino: a.ino,
        mode: a.mode,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        nlink: a.nlink,
        rdev: a.rdev,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
    }
}

/// Attributes from the wire.
pub(crate) fn msg_attr(a: &proto::Attr) -> Attr {
    Attr {
        ino: a.ino,
        mode: a.mode,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        nlink: a.nlink,
        rdev: a.rdev,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
    }
}

/// A credential from the wire.
pub(crate) fn msg_cred(c: Option<&proto::Cred>) -> Cred {
    match c {
        Some(c) => Cred::new(c.uid, c.gid).with_groups(&c.groups),
        // No credential: nobody (65534), who passes only "other" checks.
        None => Cred::new(65534, 65534),
    }
}

/// The wire form of a credential.
pub(crate) fn cred_msg(c: &Cred) -> proto::Cred {
    proto::Cred {
        uid: c.uid,
        gid: c.gid,
        groups: c.groups.as_slice().to_vec(),
    }
}

/// Shared handle.
pub(crate) type NodeRef = Arc<Node>;

/// Entries a client asks for per listing call.
pub(crate) const READDIR_PAGE: usize = 1024;
