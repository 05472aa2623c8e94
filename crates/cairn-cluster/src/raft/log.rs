//! The Raft log and vote of a replica, in keyspace [`super::LOG_KEYSPACE`] of its store
//! (FORMAT.md, "Replication"): entry `i` under `b'L' + be64(i)`, the vote under `b'V'`,
//! the last committed log id under `b'C'`, the last purged one under `b'P'`.
//!
//! Entries are appended with the engine's deferred sync; under `--sync always` a
//! flusher thread makes them durable with one `sync_written` for every append waiting
//! (group commit) before openraft counts them, so an entry a majority acknowledged is on
//! a majority's disks. A vote is synced before it is used, whatever the mode.

// The storage traits return openraft's `StorageError` (large): the helpers here do too.
#![allow(clippy::result_large_err)]

use std::collections::VecDeque;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::{mpsc, Arc, Mutex, PoisonError};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{Entry, ErrorSubject, ErrorVerb, OptionalSend, RaftLogId, Vote};

use cairn::{Db, Keyspace, WriteBatch, WriteOptions};

use super::{decode, encode, io_err, LogId, NodeId, StorageError, TypeConfig};

const ENTRY: u8 = b'L';
const VOTE: &[u8] = b"V";
const COMMITTED: &[u8] = b"C";
const PURGED: &[u8] = b"P";

fn entry_key(i: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = ENTRY;
    k[1..].copy_from_slice(&i.to_be_bytes());
    k
}

/// Entries the tail keeps at most, and bytes of their rows.
const TAIL_ENTRIES: usize = 4096;
const TAIL_BYTES: usize = 8 << 20;

/// The newest entries of the log, as appended: the leader sends each entry to every
/// follower and applies it, and every replica applies what it appended, moments after
/// the append — read from here, not scanned and decoded from the store again. Always
/// a contiguous run ending at the last entry appended since the replica started (or
/// empty); truncation and purging follow the store's.
struct Tail {
    entries: VecDeque<Entry<TypeConfig>>,
    bytes: usize,
    /// At most this many entries.
    cap: usize,
}

impl Default for Tail {
    fn default() -> Tail {
        Tail {
            entries: VecDeque::new(),
            bytes: 0,
            cap: TAIL_ENTRIES,
        }
    }
}

impl Tail {
    fn first(&self) -> Option<u64> {
        self.entries.front().map(|e| e.get_log_id().index)
    }

    fn push(&mut self, e: Entry<TypeConfig>) {
        let i = e.get_log_id().index;
        if self.entries.back().map(|b| b.get_log_id().index + 1) != Some(i) {
            self.clear();
        }
        self.bytes += entry_bytes(&e);
        self.entries.push_back(e);
        while self.entries.len() > self.cap || self.bytes > TAIL_BYTES {
            if self.pop_front().is_none() {
                break;
            }
        }
    }

    fn pop_front(&mut self) -> Option<Entry<TypeConfig>> {
        let e = self.entries.pop_front()?;
        self.bytes -= entry_bytes(&e);
        Some(e)
    }

    fn pop_back(&mut self) -> Option<Entry<TypeConfig>> {
        let e = self.entries.pop_back()?;
        self.bytes -= entry_bytes(&e);
        Some(e)
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    /// Drops entries from index `i` on.
    fn truncate(&mut self, i: u64) {
        while self
            .entries
            .back()
            .is_some_and(|e| e.get_log_id().index >= i)
        {
            self.pop_back();
        }
    }

    /// Drops entries up to index `i`.
    fn purge(&mut self, i: u64) {
        while self
            .entries
            .front()
            .is_some_and(|e| e.get_log_id().index <= i)
        {
            self.pop_front();
        }
    }

    /// Entries `lo..=hi` if the tail holds all of them that the log holds (it ends at
    /// the log's last entry, so one past its end is past the log's too).
    fn get(&self, lo: u64, hi: u64) -> Option<Vec<Entry<TypeConfig>>> {
        let first = self.first()?;
        let end = first + self.entries.len() as u64;
        if lo < first || lo >= end {
            return None;
        }
        let skip = usize::try_from(lo - first).ok()?;
        let take = usize::try_from(hi.saturating_sub(lo).saturating_add(1)).unwrap_or(usize::MAX);
        Some(self.entries.iter().skip(skip).take(take).cloned().collect())
    }
}

fn entry_bytes(e: &Entry<TypeConfig>) -> usize {
    match &e.payload {
        openraft::EntryPayload::Normal(c) => c
            .rows
            .iter()
            .map(|(k, v)| 48 + k.len() + v.as_ref().map_or(0, Vec::len))
            .sum::<usize>(),
        _ => 256,
    }
}

/// A replica's log (cheap to clone: a reader is a clone).
#[derive(Clone)]
pub(crate) struct LogStore {
    ks: Keyspace,
    /// Appends waiting for their sync (`None`: no sync, `--sync never`).
    flusher: Option<mpsc::Sender<LogFlushed<TypeConfig>>>,
    /// The newest entries, shared by the log and its readers.
    tail: Arc<Mutex<Tail>>,
}

impl LogStore {
    /// The log in `db`; `sync`: appends are durable before they count.
    pub(crate) fn new(db: &Db, sync: bool) -> LogStore {
        let flusher = sync.then(|| {
            let (tx, rx) = mpsc::channel::<LogFlushed<TypeConfig>>();
            let db = db.clone();
            std::thread::Builder::new()
                .name("cairn-raft-sync".into())
                .spawn(move || flush_loop(&db, &rx))
                .map(|_| tx)
        });
        LogStore {
            ks: db.keyspace(super::LOG_KEYSPACE),
            flusher: flusher.and_then(Result::ok),
            tail: Arc::default(),
        }
    }

    fn tail(&self) -> std::sync::MutexGuard<'_, Tail> {
        self.tail.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get_raw<T: serde::de::DeserializeOwned>(
        &self,
        key: &[u8],
        subject: ErrorSubject<NodeId>,
    ) -> Result<Option<T>, StorageError> {
        match self.ks.get(key) {
            Ok(None) => Ok(None),
            Ok(Some(v)) => decode(&v)
                .map(Some)
                .map_err(|e| io_err(subject, ErrorVerb::Read, e)),
            Err(e) => Err(io_err(subject, ErrorVerb::Read, e)),
        }
    }

    fn put_raw<T: serde::Serialize>(
        &self,
        key: &[u8],
        v: &T,
        subject: ErrorSubject<NodeId>,
    ) -> Result<(), StorageError> {
        let b = encode(v).map_err(|e| io_err(subject.clone(), ErrorVerb::Write, e))?;
        self.ks
            .put_with(key, b, WriteOptions::new().defer_sync())
            .map_err(|e| io_err(subject, ErrorVerb::Write, e))
    }

    fn last_entry(&self) -> Result<Option<LogId>, StorageError> {
        let hi = entry_key(u64::MAX);
        let range = (Bound::Included(vec![ENTRY]), Bound::Included(hi.to_vec()));
        match self.ks.range::<Vec<u8>, _>(range).next_back() {
            None => Ok(None),
            Some(Err(e)) => Err(io_err(ErrorSubject::Logs, ErrorVerb::Read, e)),
            Some(Ok((_, v))) => {
                let e: Entry<TypeConfig> =
                    decode(&v).map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, e))?;
                Ok(Some(*e.get_log_id()))
            }
        }
    }

    /// Deletes entries `[from, to]`.
    fn delete_range(&self, from: u64, to: u64) -> Result<(), StorageError> {
        let range = (
            Bound::Included(entry_key(from).to_vec()),
            Bound::Included(entry_key(to).to_vec()),
        );
        let mut b = WriteBatch::new();
        for r in self.ks.range::<Vec<u8>, _>(range) {
            let (k, _) = r.map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Delete, e))?;
            b.delete(k);
            if b.len() >= 4096 {
                self.write(std::mem::take(&mut b))?;
            }
        }
        self.write(b)
    }

    /// Writes `entries` (deferred sync) and keeps them in the tail; how many.
    fn put_entries(
        &self,
        entries: impl IntoIterator<Item = Entry<TypeConfig>>,
    ) -> Result<u32, StorageError> {
        let mut b = WriteBatch::new();
        let mut kept = Vec::new();
        for e in entries {
            let v = encode(&e).map_err(|err| io_err(ErrorSubject::Logs, ErrorVerb::Write, err))?;
            b.put(entry_key(e.get_log_id().index), v);
            kept.push(e);
        }
        let n = u32::try_from(kept.len()).unwrap_or(u32::MAX);
        {
            // Held over the write: a reader sees the store and the tail agree.
            let mut tail = self.tail();
            if let Err(e) = self.write(b) {
                tail.clear();
                return Err(e);
            }
            for e in kept {
                tail.push(e);
            }
        }
        Ok(n)
    }

    fn write(&self, b: WriteBatch) -> Result<(), StorageError> {
        if b.is_empty() {
            return Ok(());
        }
        self.ks
            .write_with(b, WriteOptions::new().defer_sync())
            .map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Write, e))
    }
}

/// The flusher: one sync for every append waiting, then their callbacks, in order.
fn flush_loop(db: &Db, rx: &mpsc::Receiver<LogFlushed<TypeConfig>>) {
    while let Ok(first) = rx.recv() {
        let mut waiting = vec![first];
        waiting.extend(rx.try_iter());
        let res = db.sync_written().map_err(std::io::Error::other);
        for cb in waiting {
            cb.log_io_completed(
                res.as_ref()
                    .map(|_| ())
                    .map_err(|e| std::io::Error::other(e.to_string())),
            );
        }
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError> {
        let lo = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let last = match range.end_bound() {
            Bound::Included(&i) => Some(i),
            Bound::Excluded(&i) => i.checked_sub(1),
            Bound::Unbounded => Some(u64::MAX),
        };
        match last {
            None => return Ok(Vec::new()),
            Some(last) if last < lo => return Ok(Vec::new()),
            Some(last) => {
                if let Some(v) = self.tail().get(lo, last) {
                    return Ok(v);
                }
            }
        }
        let hi = match range.end_bound() {
            Bound::Included(&i) => Bound::Included(entry_key(i).to_vec()),
            Bound::Excluded(&i) => Bound::Excluded(entry_key(i).to_vec()),
            Bound::Unbounded => Bound::Included(entry_key(u64::MAX).to_vec()),
        };
        let mut out = Vec::new();
        for r in self
            .ks
            .range::<Vec<u8>, _>((Bound::Included(entry_key(lo).to_vec()), hi))
        {
            let (_, v) = r.map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, e))?;
            out.push(decode(&v).map_err(|e| io_err(ErrorSubject::Logs, ErrorVerb::Read, e))?);
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let purged: Option<LogId> = self.get_raw(PURGED, ErrorSubject::Logs)?;
        let last = self.last_entry()?.or(purged);
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        self.put_raw(VOTE, vote, ErrorSubject::Vote)?;
        // A vote is never forgotten: synced whatever the mode.
        self.ks
            .db()
            .sync_written()
            .map_err(|e| io_err(ErrorSubject::Vote, ErrorVerb::Write, e))
    }

    /// The vote, read back *uncommitted*: a replica that led when it stopped does not
    /// take up its term again at start (openraft restores a leader from a committed
    /// vote for itself), it waits for an election like the others. A leader sends
    /// entries before its own append is durable, and followers may commit them
    /// without it; if it died before syncing them, its log came back without entries
    /// the group holds. Leading the same term with that log, it would append other
    /// entries under the same log ids — which followers take for the ones they hold —
    /// and an acknowledged change would be lost. An election in a new term is won
    /// only by a replica whose log holds every committed entry. The vote's term and
    /// candidate are kept, so it still never votes twice in a term.
    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        let vote: Option<Vote<NodeId>> = self.get_raw(VOTE, ErrorSubject::Vote)?;
        Ok(vote.map(|v| Vote {
            leader_id: v.leader_id,
            committed: false,
        }))
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.put_raw(COMMITTED, &committed, ErrorSubject::Store)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self
            .get_raw::<Option<LogId>>(COMMITTED, ErrorSubject::Store)?
            .flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let n = self.put_entries(entries)?;
        // Proposals per append: how well concurrent changes share a write (and a sync).
        metrics::histogram!("cairn_raft_entries_per_append").record(f64::from(n));
        match &self.flusher {
            Some(tx) => {
                if let Err(mpsc::SendError(cb)) = tx.send(callback) {
                    cb.log_io_completed(Err(std::io::Error::other("the log's flusher stopped")));
                }
            }
            None => callback.log_io_completed(Ok(())),
        }
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut tail = self.tail();
        tail.truncate(log_id.index);
        self.delete_range(log_id.index, u64::MAX)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut tail = self.tail();
        tail.purge(log_id.index);
        self.put_raw(PURGED, &log_id, ErrorSubject::Logs)?;
        self.delete_range(0, log_id.index)
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, EntryPayload};
    use proptest::prelude::*;

    use super::*;
    use crate::raft::Change;

    fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 0), index),
            payload: EntryPayload::Normal(Change {
                term,
                seq: index,
                rows: vec![(index.to_be_bytes().to_vec(), Some(vec![term as u8; 3]))],
            }),
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Append(u64),
        Truncate(u64),
        Purge(u64),
        Read(u64, u64),
        Reopen,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u64..12).prop_map(Op::Append),
            1 => (0u64..40).prop_map(Op::Truncate),
            1 => (0u64..40).prop_map(Op::Purge),
            4 => (0u64..80, 0u64..30).prop_map(|(a, n)| Op::Read(a, n)),
            1 => Just(Op::Reopen),
        ]
    }

    fn bytes(v: &[Entry<TypeConfig>]) -> Vec<Vec<u8>> {
        v.iter().map(|e| encode(e).unwrap()).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Reads answered from the tail are the entries the store holds: through
        /// appends (a later term overwriting after a truncation), truncations, purges,
        /// reopenings and the tail's own eviction.
        #[test]
        fn reads_match_a_model(ops in proptest::collection::vec(op(), 1..60)) {
            let dir = tempfile::tempdir().unwrap();
            let db = cairn::Options::default().open(dir.path().join("s")).unwrap();
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let small = || LogStore { tail: Arc::new(Mutex::new(Tail { cap: 16, ..Tail::default() })), ..LogStore::new(&db, false) };
            let mut log = small();
            let mut model: std::collections::BTreeMap<u64, Entry<TypeConfig>> = Default::default();
            let mut purged = 0u64;
            let mut term = 1u64;
            for op in ops {
                match op {
                    Op::Append(n) => {
                        let next = model.keys().next_back().map_or(purged + 1, |i| i + 1);
                        let es: Vec<_> = (next..next + n).map(|i| entry(term, i)).collect();
                        for e in &es {
                            model.insert(e.log_id.index, e.clone());
                        }
                        log.put_entries(es).unwrap();
                    }
                    Op::Truncate(k) => {
                        let i = purged + 1 + k;
                        rt.block_on(log.truncate(LogId::new(CommittedLeaderId::new(term, 0), i))).unwrap();
                        model.retain(|&j, _| j < i);
                        term += 1;
                    }
                    Op::Purge(k) => {
                        let last = model.keys().next_back().copied().unwrap_or(purged);
                        let i = (purged + k).min(last);
                        rt.block_on(log.purge(LogId::new(CommittedLeaderId::new(term, 0), i))).unwrap();
                        model.retain(|&j, _| j > i);
                        purged = purged.max(i);
                    }
                    Op::Read(lo, n) => {
                        let got = rt.block_on(log.try_get_log_entries(lo..lo + n)).unwrap();
                        let want: Vec<_> = model.range(lo..lo + n).map(|(_, e)| e.clone()).collect();
                        prop_assert_eq!(bytes(&got), bytes(&want));
                        let got = rt.block_on(log.try_get_log_entries(lo..)).unwrap();
                        let want: Vec<_> = model.range(lo..).map(|(_, e)| e.clone()).collect();
                        prop_assert_eq!(bytes(&got), bytes(&want));
                    }
                    Op::Reopen => log = small(),
                }
            }
        }
    }
}
