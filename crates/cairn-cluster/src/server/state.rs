//! What a server keeps in memory beside its rows, in typed parts: the partitions it
//! holds ([`Partitions`]), the names operations across servers hold
//! ([`Reservations`]), the bookkeeping of the intents it coordinates ([`Intents`]),
//! pending directory times ([`DirTimes`]) and open counts ([`Opens`]), all under the
//! one lock of [`State`]; beside it, each under a lock of its own, the number leases
//! ([`Leases`]), the cluster's rename lock ([`RenameLock`]) and the bitmaps learnt
//! from redirects ([`LearntBitmaps`]).
//!
//! Every part changes only through its own methods; the rows that go with a change
//! are written by `Node::apply`, by the caller, while it holds the state's lock.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

// tokio's clock: real time in a server, virtual time in the simulation (turmoil pauses
// it), so that retries and leases follow the simulated schedule.
use tokio::time::Instant;

use parking_lot::Mutex;

use super::node::{Fail, IntentKey, R};
use crate::giga::{self, covers, name_hash};
use crate::proto;
use crate::rows::PART_ACTIVE;

/// What the server keeps in memory under `Node`'s state lock. The lock also orders the
/// read-modify-write of rows (an inode's, a partition's): a change reads its rows,
/// decides, applies its batch and updates these parts without letting another in.
#[derive(Default)]
pub(crate) struct State {
    /// The partitions held here.
    pub parts: Partitions,
    /// Names held by operations across servers.
    pub names: Reservations,
    /// Intents this server coordinates that are not finished.
    pub intents: Intents,
    /// Directory times newer than their rows.
    pub times: DirTimes,
    /// Opens of inodes whose home is here.
    pub opens: Opens,
    /// The requests done here, by their clients' tokens (their rows' order).
    pub ledger: super::ledger::Ledger,
}

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
    /// A new partition of depth `depth` in state `state`, with `entries` entries.
    pub(crate) fn new(depth: u32, state: u32, entries: u64) -> Part {
        Part {
            depth,
            state,
            entries,
            splitting: false,
            removing: None,
        }
    }

    /// Its row.
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

/// The partitions held here, by (directory, index).
#[derive(Default)]
pub(crate) struct Partitions(BTreeMap<(u64, u32), Part>);

impl Partitions {
    /// Partition `idx` of `dir`.
    pub(crate) fn get(&self, dir: u64, idx: u32) -> Option<&Part> {
        self.0.get(&(dir, idx))
    }

    /// Partition `idx` of `dir`, to change (its row is the caller's to write).
    pub(crate) fn get_mut(&mut self, dir: u64, idx: u32) -> Option<&mut Part> {
        self.0.get_mut(&(dir, idx))
    }

    /// Holds partition `idx` of `dir` (replacing what was held).
    pub(crate) fn insert(&mut self, dir: u64, idx: u32, p: Part) {
        self.0.insert((dir, idx), p);
    }

    /// Sets whether a split is moving the entries of partition `idx` of `dir`.
    pub(crate) fn set_splitting(&mut self, dir: u64, idx: u32, on: bool) {
        if let Some(p) = self.0.get_mut(&(dir, idx)) {
            p.splitting = on;
        }
    }

    /// Forgets every partition of `dir`.
    pub(crate) fn remove_dir(&mut self, dir: u64) {
        for idx in self.indexes(dir) {
            self.0.remove(&(dir, idx));
        }
    }

    /// Every partition held, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = ((u64, u32), &Part)> {
        self.0.iter().map(|(k, p)| (*k, p))
    }

    /// The partitions of `dir` held here, by index.
    pub(crate) fn of_dir(&self, dir: u64) -> impl Iterator<Item = (u32, &Part)> {
        self.0
            .range((dir, 0)..=(dir, u32::MAX))
            .map(|(&(_, i), p)| (i, p))
    }

    /// The partitions of `dir` held here, to change.
    pub(crate) fn of_dir_mut(&mut self, dir: u64) -> impl Iterator<Item = (u32, &mut Part)> {
        self.0
            .range_mut((dir, 0)..=(dir, u32::MAX))
            .map(|(&(_, i), p)| (i, p))
    }

    /// The indexes of the partitions of `dir` held here.
    pub(crate) fn indexes(&self, dir: u64) -> Vec<u32> {
        self.of_dir(dir).map(|(i, _)| i).collect()
    }

    /// Partitions held.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Entries of all partitions held.
    pub(crate) fn entries(&self) -> u64 {
        self.0.values().map(|p| p.entries).sum()
    }

    /// Partitions still incoming (a split's target before it activates).
    pub(crate) fn incoming(&self) -> usize {
        self.0
            .values()
            .filter(|p| p.state == crate::rows::PART_INCOMING)
            .count()
    }

    /// Whether a split of any partition is moving entries now.
    pub(crate) fn any_splitting(&self) -> bool {
        self.0.values().any(|p| p.splitting)
    }

    /// Clears the prepared removal of intent `k` from every partition: the rows of
    /// those changed, to write.
    pub(crate) fn release_removing(
        &mut self,
        k: IntentKey,
    ) -> Vec<((u64, u32), proto::PartitionRow)> {
        let mut out = Vec::new();
        for (key, p) in &mut self.0 {
            if p.removing == Some(k) {
                p.removing = None;
                out.push((*key, p.row()));
            }
        }
        out
    }

    /// The owners of prepared removals of partitions held here.
    pub(crate) fn removing(&self) -> Vec<IntentKey> {
        self.0.values().filter_map(|p| p.removing).collect()
    }

    /// Adds one (`add`) or takes one from the entries of partition `idx` of `dir`: its
    /// new row, to write (none if it is not held).
    pub(crate) fn count_entry(
        &mut self,
        dir: u64,
        idx: u32,
        add: bool,
    ) -> Option<proto::PartitionRow> {
        let p = self.0.get_mut(&(dir, idx))?;
        if add {
            p.entries += 1;
        } else {
            p.entries = p.entries.saturating_sub(1);
        }
        Some(p.row())
    }

    /// This server's bitmap of `dir`: the active partitions it holds and the
    /// partitions their splits created.
    pub(crate) fn bitmap(&self, dir: u64) -> Vec<u32> {
        let mut out = Vec::new();
        for (i, p) in self.of_dir(dir) {
            if p.state != PART_ACTIVE {
                continue;
            }
            out.push(i);
            for d in giga::created_depth(i)..p.depth {
                out.push(giga::child(i, d));
            }
        }
        out
    }
}

/// Names held by operations across servers (an intent here, or a prepared part of
/// another server's): changes of them wait.
#[derive(Default)]
pub(crate) struct Reservations(BTreeMap<(u64, Vec<u8>), IntentKey>);

impl Reservations {
    /// The intent that holds `name` of `dir`, if any.
    pub(crate) fn holder(&self, dir: u64, name: &[u8]) -> Option<IntentKey> {
        self.0.get(&(dir, name.to_vec())).copied()
    }

    /// Holds `names` for intent `k` (they must be free or already its own).
    pub(crate) fn reserve(&mut self, k: IntentKey, names: &[(u64, Vec<u8>)]) -> R<()> {
        if names.iter().any(|n| self.0.get(n).is_some_and(|&o| o != k)) {
            return Err(Fail::Busy);
        }
        for n in names {
            self.0.insert(n.clone(), k);
        }
        Ok(())
    }

    /// Frees the names held by intent `k`.
    pub(crate) fn release(&mut self, k: IntentKey) {
        self.0.retain(|_, v| *v != k);
    }

    /// Whether any name of `dir` in partition range `(idx, depth)` is held.
    pub(crate) fn any_in(&self, dir: u64, idx: u32, depth: u32) -> bool {
        self.0
            .range((dir, Vec::new())..)
            .take_while(|((d, _), _)| *d == dir)
            .any(|((_, name), _)| covers(idx, depth, name_hash(name)))
    }

    /// Whether any name of `dir` is held.
    pub(crate) fn any_of_dir(&self, dir: u64) -> bool {
        self.0
            .range((dir, Vec::new())..)
            .next()
            .is_some_and(|((d, _), _)| *d == dir)
    }
}

/// The intents this server coordinates that are not finished (their rows as last
/// written), which of them a task drives now, and when the background runner may try
/// each again.
#[derive(Default)]
pub(crate) struct Intents {
    rows: BTreeMap<u64, proto::IntentRow>,
    driving: BTreeSet<u64>,
    retry: BTreeMap<u64, (Instant, Duration)>,
}

impl Intents {
    /// A copy of intent `id`'s row (`EIO` if there is none).
    pub(crate) fn row(&self, id: u64) -> R<proto::IntentRow> {
        self.rows.get(&id).cloned().ok_or(Fail::Errno(libc::EIO))
    }

    /// Whether intent `id` is not finished.
    pub(crate) fn contains(&self, id: u64) -> bool {
        self.rows.contains_key(&id)
    }

    /// Unfinished intents.
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether some unfinished intent's row satisfies `f`.
    pub(crate) fn any(&self, f: impl Fn(&proto::IntentRow) -> bool) -> bool {
        self.rows.values().any(f)
    }

    /// An unfinished intent whose row satisfies `f`, if any.
    pub(crate) fn find(&self, f: impl Fn(&proto::IntentRow) -> bool) -> Option<&proto::IntentRow> {
        self.rows.values().find(|r| f(r))
    }

    /// Unfinished intents whose rows satisfy `f`.
    pub(crate) fn count(&self, f: impl Fn(&proto::IntentRow) -> bool) -> usize {
        self.rows.values().filter(|r| f(r)).count()
    }

    /// Records intent `id`'s row as written (a known intent's later state, or one
    /// found at recovery).
    pub(crate) fn put(&mut self, id: u64, row: proto::IntentRow) {
        self.rows.insert(id, row);
    }

    /// Records a new intent that its creator drives.
    pub(crate) fn begin(&mut self, id: u64, row: proto::IntentRow) {
        self.rows.insert(id, row);
        self.driving.insert(id);
    }

    /// Forgets a new intent whose row could not be written.
    pub(crate) fn discard(&mut self, id: u64) {
        self.rows.remove(&id);
        self.driving.remove(&id);
    }

    /// Forgets a finished intent (its row deleted).
    pub(crate) fn finish(&mut self, id: u64) {
        self.rows.remove(&id);
        self.retry.remove(&id);
    }

    /// Records that the first `done` follow-ups of intent `id` are made: its new row.
    pub(crate) fn followups_done(&mut self, id: u64, done: u32) -> Option<proto::IntentRow> {
        let row = self.rows.get_mut(&id)?;
        row.followups_done = done;
        Some(row.clone())
    }

    /// Intent `id` is no longer driven by a task: whether it is still unfinished.
    pub(crate) fn stop_driving(&mut self, id: u64) -> bool {
        self.driving.remove(&id);
        self.rows.contains_key(&id)
    }

    /// The unfinished intents that no task drives and whose pause is over at `now`,
    /// marked driven.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<u64> {
        let ids: Vec<u64> = self
            .rows
            .keys()
            .copied()
            .filter(|id| !self.driving.contains(id))
            .filter(|id| self.retry.get(id).is_none_or(|(at, _)| *at <= now))
            .collect();
        self.driving.extend(ids.iter().copied());
        ids
    }

    /// After an attempt to drive intent `id`: if it failed and the intent is not
    /// finished, the pause before the next attempt (growing, at most 5 s).
    pub(crate) fn attempted(&mut self, id: u64, failed: bool) -> Option<Duration> {
        if failed && self.rows.contains_key(&id) {
            let pause = self
                .retry
                .get(&id)
                .map_or(Duration::from_millis(100), |(_, p)| {
                    (*p * 2).min(Duration::from_secs(5))
                });
            self.retry.insert(id, (Instant::now() + pause, pause));
            Some(pause)
        } else {
            self.retry.remove(&id);
            None
        }
    }
}

/// Times of directories changed here (an entry added or removed), newer than their
/// rows: those whose home is here are written later, the others sent to their homes.
#[derive(Default)]
pub(crate) struct DirTimes {
    /// Directories whose home is here: (mtime, ctime).
    local: BTreeMap<u64, (i64, i64)>,
    /// Directories whose home is elsewhere.
    remote: BTreeMap<u64, (i64, i64)>,
}

fn merge(map: &mut BTreeMap<u64, (i64, i64)>, dir: u64, mtime: i64, ctime: i64) {
    let e = map.entry(dir).or_insert((mtime, ctime));
    e.0 = e.0.max(mtime);
    e.1 = e.1.max(ctime);
}

impl DirTimes {
    /// Records that directory `dir` (whose home is here if `local`) changed at `t`.
    pub(crate) fn touch(&mut self, local: bool, dir: u64, t: i64) {
        self.merge(local, dir, t, t);
    }

    /// Merges times of `dir` (whose home is here if `local`).
    pub(crate) fn merge(&mut self, local: bool, dir: u64, mtime: i64, ctime: i64) {
        let map = if local {
            &mut self.local
        } else {
            &mut self.remote
        };
        merge(map, dir, mtime, ctime);
    }

    /// The pending times of local directory `dir`.
    pub(crate) fn pending(&self, dir: u64) -> Option<(i64, i64)> {
        self.local.get(&dir).copied()
    }

    /// Takes the pending times of local directory `dir` (its row is being written).
    pub(crate) fn take(&mut self, dir: u64) -> Option<(i64, i64)> {
        self.local.remove(&dir)
    }

    /// Takes the pending times of all local directories.
    pub(crate) fn take_local(&mut self) -> Vec<(u64, (i64, i64))> {
        std::mem::take(&mut self.local).into_iter().collect()
    }

    /// Takes the pending times of all directories whose home is elsewhere.
    pub(crate) fn take_remote(&mut self) -> Vec<(u64, (i64, i64))> {
        std::mem::take(&mut self.remote).into_iter().collect()
    }

    /// Forgets the times of `dir` (removed).
    pub(crate) fn forget(&mut self, dir: u64) {
        self.local.remove(&dir);
        self.remote.remove(&dir);
    }
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

/// Numbers handed out from a durable lease: those below `end` may be used; past it,
/// a new lease is written first.
#[derive(Default)]
pub(crate) struct Lease {
    next: u64,
    end: u64,
}

impl Lease {
    /// A lease that starts (and ends) at `at`: the first number taken writes a lease.
    pub(crate) fn at(at: u64) -> Lease {
        Lease { next: at, end: at }
    }

    /// The next number never handed out.
    pub(crate) fn next(&self) -> u64 {
        self.next
    }

    /// A new number; when the lease is used up, `persist` first makes a lease of
    /// `step` more durable (called with its new end).
    pub(crate) fn take(&mut self, step: u64, persist: impl FnOnce(u64) -> R<()>) -> R<u64> {
        if self.next >= self.end {
            let end = self.next + step;
            persist(end)?;
            self.end = end;
        }
        let n = self.next;
        self.next += 1;
        Ok(n)
    }
}

/// The leases of local inode numbers and of intent numbers.
#[derive(Default)]
pub(crate) struct Leases {
    pub ino: Lease,
    pub intent: Lease,
}

/// The cluster's rename lock (held on server 0): a lease for directory renames across
/// parents, so that two of them never make a cycle.
#[derive(Default)]
pub(crate) struct RenameLock(Mutex<Option<(IntentKey, Instant)>>);

impl RenameLock {
    /// Takes (or renews) the lock for `k` for `lease`: whether it was free (or `k`'s,
    /// or expired).
    pub(crate) fn acquire(&self, k: IntentKey, lease: Duration) -> bool {
        let mut l = self.0.lock();
        let now = Instant::now();
        let free = match *l {
            None => true,
            Some((h, exp)) => h == k || exp <= now,
        };
        if free {
            *l = Some((k, now + lease));
        }
        free
    }

    /// Releases the lock if `k` holds it.
    pub(crate) fn release(&self, k: IntentKey) {
        let mut l = self.0.lock();
        if matches!(*l, Some((h, _)) if h == k) {
            *l = None;
        }
    }
}

/// Directory bitmaps learnt from peers' redirects (for a rename's destination).
#[derive(Default)]
pub(crate) struct LearntBitmaps(Mutex<HashMap<u64, giga::Bitmap>>);

impl LearntBitmaps {
    /// Merges a bitmap of directory `dir` learnt from a redirect.
    pub(crate) fn learn(&self, dir: u64, parts: Vec<u32>) {
        let mut bm = self.0.lock();
        if bm.len() > 100_000 && !bm.contains_key(&dir) {
            bm.clear();
        }
        bm.entry(dir).or_default().merge(parts);
    }

    /// The partition of names of hash `h` in `dir` by what was learnt (0 if nothing).
    pub(crate) fn route(&self, dir: u64, h: u64) -> u32 {
        self.0.lock().get(&dir).map_or(0, |b| b.route(h))
    }
}
