//! One shard: its segments, its in-memory index, its write buffer, and the write, read,
//! flush and group-commit paths; sealing and hint files are in `hints`. Keys are routed
//! to shards by hash (see `db.rs`); everything here concerns a single shard.
//!
//! Locking: `io` (a mutex) serialises file writes, syncs and segment rotation of the
//! shard; `state` (a read-write lock) guards the in-memory state and is never held during
//! I/O, so readers never wait for a writer's disk I/O. Lock order: `io` before `state`;
//! batches take several `state` locks in shard order.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock};

use crate::ctx::StoreCtx;
use crate::index::{Index, Loc};
use crate::options::SyncPolicy;
use crate::record::{self, Kind};
use crate::segment::{SegKind, SegmentFile, SEG_HEADER_LEN};
use crate::seq::{Cover, ShardSeqs, Taken};
use crate::tally::Tally;
use crate::value::Value;
use crate::versions::{Live, Released, Summary, Versions};
use crate::{Error, Result};

mod compact;
mod hints;
mod layout;
mod meta;

pub(crate) use compact::{entry_loc, CompactionGuard, Copied, DropCandidate, Other, Victim};
pub(crate) use meta::SegMeta;
use meta::{Spare, SpareCell};

/// Id of a new store's first data segment in each shard.
pub(crate) const FIRST_SEGMENT: u32 = 1;

/// Bytes mapped past a segment's size cap, for the records that overshoot it.
const APPEND_MAP_SLACK: u64 = 4 << 20;

/// The segment being appended to.
pub(crate) struct Active {
    pub id: u32,
    pub file: Arc<SegmentFile>,
    /// File offset of `buf[0]`.
    pub buf_start: u64,
    /// Records appended but not yet handed to the file.
    pub buf: Vec<u8>,
}

impl Active {
    /// The active segment `file`, holding `len` bytes, capped at `segment_size`.
    pub fn new(file: Arc<SegmentFile>, len: u64, segment_size: u64) -> Active {
        file.map_for_append(segment_size.max(len) + APPEND_MAP_SLACK);
        Active {
            id: file.id,
            file,
            buf_start: len,
            buf: Vec::new(),
        }
    }

    pub fn end(&self) -> u64 {
        self.buf_start + self.buf.len() as u64
    }
}

/// Bytes taken from the write buffer whose write to the file is in progress (or failed
/// and will be retried). Readers serve records in this range from memory.
#[derive(Clone)]
pub(crate) struct Pending {
    pub seg: u32,
    pub start: u64,
    pub data: Arc<Vec<u8>>,
    pub file: Arc<SegmentFile>,
}

/// In-memory state of a shard, behind its read-write lock.
pub(crate) struct ShardState {
    pub index: Index,
    pub segs: BTreeMap<u32, SegMeta>,
    pub active: Active,
    pub pending: Option<Pending>,
    pub next_seg: u32,
    /// Bytes of live records (the index's records).
    pub live_bytes: u64,
    /// `live_bytes` by keyspace.
    pub live_by_ns: Tally,
    /// Live keys by keyspace.
    pub keys_by_ns: Tally,
    /// Set after a failed fsync: the shard refuses writes until reopened.
    pub failed: Option<String>,
    /// The last flush failed; writes retry it before appending.
    pub write_stuck: bool,
    /// Where the shard's records stand: appended, taken by a sync, durable.
    pub seqs: ShardSeqs,
    /// The active segment whose hint file, written at the last clean close, was kept
    /// by open because it still describes the file exactly. The hint goes (its removal
    /// made durable) before the first byte that changes the file; a close that finds it
    /// still here writes none.
    pub kept_hint: Option<u32>,
    /// The old versions live snapshots may read (`versions`).
    pub versions: Versions,
}

/// Where the bytes of a record can be read.
pub(crate) enum Source {
    /// Copied from memory (write buffer or pending write).
    Bytes(Vec<u8>),
    /// In a segment file.
    File(Arc<SegmentFile>),
}

impl ShardState {
    /// Whether `seg` is the active segment with nothing buffered or in flight and no
    /// reader holding its file: the file is held by `active` and by its `SegMeta`, and a
    /// third holder may still read through the map, which must not reach past the end
    /// of the file ([`Shard::empty_active`]).
    fn can_empty_active(&self, seg: u32) -> bool {
        self.active.id == seg
            && self.active.buf.is_empty()
            && self.pending.is_none()
            && Arc::strong_count(&self.active.file) <= 2
            && self.segs.get(&seg).is_some_and(|m| m.pinned == 0)
    }

    /// Finds where the record at `loc` lives right now.
    pub fn source(&self, loc: Loc) -> Result<Source> {
        let (off, end) = (loc.off as u64, loc.off as u64 + loc.len as u64);
        if let Some(p) = &self.pending {
            if p.seg == loc.seg && off >= p.start && end <= p.start + p.data.len() as u64 {
                let s = (off - p.start) as usize;
                return Ok(Source::Bytes(p.data[s..s + loc.len as usize].to_vec()));
            }
        }
        if loc.seg == self.active.id && off >= self.active.buf_start {
            let s = (off - self.active.buf_start) as usize;
            if let Some(b) = self.active.buf.get(s..s + loc.len as usize) {
                return Ok(Source::Bytes(b.to_vec()));
            }
        }
        match self.segs.get(&loc.seg) {
            Some(m) => Ok(Source::File(m.file.clone())),
            // An old version a snapshot reads, in a segment removed since.
            None if self.versions.retired.contains_key(&loc.seg) => {
                Ok(Source::File(self.versions.retired[&loc.seg].file.clone()))
            }
            None => Err(Error::corruption(
                format!("segment {}", loc.seg),
                "index points at a segment that does not exist",
            )),
        }
    }

    /// Accounts the record at `loc`, of keyspace `ns`, as superseded by the record
    /// numbered `by`.
    fn mark_dead(&mut self, ns: u8, loc: Loc, by: u64) {
        if let Some(m) = self.segs.get_mut(&loc.seg) {
            m.dead += loc.len as u64;
            m.superseded_seq = m.superseded_seq.max(by);
        }
        self.live_bytes -= loc.len as u64;
        self.live_by_ns.sub(ns, loc.len as u64);
    }

    /// Appends one record to the write buffer and updates the index. `logged`: the
    /// record also goes to the commit log, which makes it durable. `live`: the live
    /// snapshots, if any, for which the version it supersedes is noted. Returns the end
    /// position of the record.
    pub fn append(
        &mut self,
        op: &Prepared<'_>,
        seq: u64,
        batch_total: u32,
        logged: bool,
        live: Option<Live>,
    ) -> (u32, u64) {
        let off = self.active.end();
        let len = record::encode(
            &mut self.active.buf,
            op.kind,
            seq,
            batch_total,
            op.key,
            op.value,
            op.dcrc,
        ) as u64;
        let loc = Loc {
            seg: self.active.id,
            off: off as u32,
            len: len as u32,
        };
        // The active segment has its metadata (`recovery::build`, rotation).
        let Some(meta) = self.segs.get_mut(&self.active.id) else {
            debug_assert!(false, "active segment has metadata");
            return (self.active.id, off + len);
        };
        let ns = Tally::ns(op.key);
        meta.size += len;
        meta.bytes.add(ns, len);
        meta.max_seq = meta.max_seq.max(seq);
        if live.is_some_and(|l| l.newest >= meta.mark.1) {
            meta.mark = (off as u32, seq);
        }
        self.seqs.append(seq, logged);
        let old = match op.kind {
            Kind::Put => {
                self.live_bytes += len;
                self.live_by_ns.add(ns, len);
                let old = self.index.insert(op.key, loc);
                match old {
                    Some(old) => self.mark_dead(ns, old, seq),
                    None => self.keys_by_ns.add(ns, 1),
                }
                Some(old)
            }
            Kind::Delete => {
                meta.tomb += len;
                let old = self.index.remove(op.key);
                if let Some(old) = old {
                    self.keys_by_ns.sub(ns, 1);
                    self.mark_dead(ns, old, seq);
                }
                // A delete of an absent key changed nothing (a batch may keep one).
                old.map(Some)
            }
        };
        if let (Some(live), Some(old)) = (live, old) {
            self.note_version(op.key, old, seq, live);
        }
        (self.active.id, off + len)
    }

    /// Notes, for the live snapshots, that the write numbered `seq` superseded `old` of
    /// `key` (`None`: it had no value), pinning the record in its segment.
    fn note_version(&mut self, key: &[u8], old: Option<Loc>, seq: u64, live: Live) {
        let meta = old.and_then(|l| Some((l, self.segs.get_mut(&l.seg)?)));
        // A version written after the newest live snapshot was taken is seen by none.
        if let Some((l, m)) = &meta {
            if l.off >= m.mark.0 && m.mark.1 > live.newest {
                return;
            }
        }
        if self.versions.record(key, old, seq, live).is_some() {
            if let Some((l, m)) = meta {
                m.pinned += l.len as u64;
            }
        }
    }

    /// Lets go of the old versions no live snapshot needs (`oldest`: at most the number
    /// of every live snapshot, `u64::MAX` when none is); see [`Versions::prune`].
    pub fn prune_versions(&mut self, oldest: u64, force: bool) -> Released {
        let mut out = Released::default();
        let segs = &mut self.segs;
        self.versions.prune(
            oldest,
            force,
            |l| {
                if let Some(m) = segs.get_mut(&l.seg) {
                    m.pinned = m.pinned.saturating_sub(l.len as u64);
                }
            },
            &mut out,
        );
        out
    }

    /// The location a snapshot at `seq` (`None`: the present) sees for `key`: from the
    /// notes, or the index's (`exact`: its ordered side; else the hash side's guess).
    pub fn locate(&self, key: &[u8], seq: Option<u64>, exact: bool) -> Option<Loc> {
        if let Some(s) = seq {
            if let Some(v) = self.versions.at(key, s) {
                return v;
            }
        }
        match exact {
            true => self.index.get(key),
            false => self.index.candidate(key),
        }
    }

    /// Bytes of all segment and hint files.
    pub fn disk_bytes(&self) -> u64 {
        self.segs.values().map(|m| m.size + m.hint_size).sum()
    }
}

/// A write prepared outside the lock: checksum already computed.
pub(crate) struct Prepared<'a> {
    pub kind: Kind,
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub dcrc: u32,
}

impl<'a> Prepared<'a> {
    pub fn new(kind: Kind, key: &'a [u8], value: &'a [u8]) -> Prepared<'a> {
        Prepared {
            kind,
            key,
            value,
            dcrc: record::data_crc(key, value),
        }
    }

    pub fn record_len(&self) -> u64 {
        (record::HEADER_LEN + self.key.len() + self.value.len()) as u64
    }
}

/// State of the shard's file I/O, behind its mutex.
pub(crate) struct IoState {
    /// Rotated-out segments not yet synced.
    pub unsynced: Vec<Arc<SegmentFile>>,
    /// Rotated-out segments to hand to the sealer once their last bytes are written.
    pub rotated: Vec<u32>,
    /// The next active segment, created ahead of time by the maintenance thread so that
    /// a rotation does not wait for a file creation's syncs.
    pub spare: Option<Arc<SegmentFile>>,
    /// End of what the active segment's file holds: its data, then the zeros laid out
    /// ahead of durable small appends (`layout`), cut off at rotation and close.
    pub laid: u64,
}

/// What [`Shard::take_buffer`] took.
struct TakenBuffer {
    /// The buffer, to write to its file.
    pending: Option<Pending>,
    /// The segment rotated out, and the end of its data.
    rotated: Option<(Arc<SegmentFile>, u64)>,
    /// With `sync`: what the caller's sync makes durable.
    taken: Option<Taken>,
    /// The size at which the active segment rotates.
    cap: u64,
}

/// Files a sync took and must make durable, and what their sync makes durable.
pub(crate) struct ToSync {
    files: Vec<Arc<SegmentFile>>,
    taken: Taken,
}

/// One shard of the store.
pub(crate) struct Shard {
    pub id: u32,
    pub dir: PathBuf,
    pub state: RwLock<ShardState>,
    pub io: Mutex<IoState>,
    /// Serialises the shard's syncs. Held during `fdatasync` while `io` is not, so that
    /// appends and write-outs of the shard (another writer's, or a streaming file
    /// writer's) go on while a sync runs. Lock order: `sync` before `io`.
    sync: Mutex<()>,
    /// Where the spare segment stands.
    spare: SpareCell,
    /// A thread holds the right to compact the shard (`compact`); `compaction_done` is
    /// signalled when it gives it back.
    compacting: Mutex<bool>,
    compaction_done: Condvar,
    user_bytes: AtomicU64,
    written_bytes: AtomicU64,
    /// The old versions kept for snapshots, at a glance (published under `state`).
    pub notes: Summary,
}

impl Shard {
    pub fn new(id: u32, dir: PathBuf, state: ShardState, unsynced: Vec<Arc<SegmentFile>>) -> Shard {
        let laid = state.active.end();
        Shard {
            id,
            dir,
            state: RwLock::new(state),
            io: Mutex::new(IoState {
                unsynced,
                rotated: Vec::new(),
                spare: None,
                laid,
            }),
            sync: Mutex::new(()),
            spare: SpareCell::new(),
            compacting: Mutex::new(false),
            compaction_done: Condvar::new(),
            user_bytes: AtomicU64::new(0),
            written_bytes: AtomicU64::new(0),
            notes: Summary::default(),
        }
    }

    /// Counts bytes written to this shard's files (for write amplification).
    pub fn note_write(&self, n: u64) {
        self.written_bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts key and value bytes a caller wrote to this shard.
    pub fn note_user(&self, n: u64) {
        self.user_bytes.fetch_add(n, Ordering::Relaxed);
    }

    pub fn user_bytes(&self) -> u64 {
        self.user_bytes.load(Ordering::Relaxed)
    }

    pub fn written_bytes(&self) -> u64 {
        self.written_bytes.load(Ordering::Relaxed)
    }

    /// Reads the value of `key`, verifying the record's checksums.
    ///
    /// The location comes from the index's hash side, which may name another key's record
    /// when two keys share a hash tag: the record's key is checked (as every read checks
    /// it), and on any mismatch or error the ordered index, which is exact, decides.
    pub fn get(&self, key: &[u8]) -> Result<Option<Value>> {
        self.get_at(key, None)
    }

    /// Reads the value of `key` as a snapshot taken at `seq` sees it (`None`: now), as
    /// [`Shard::get`] does.
    pub fn get_at(&self, key: &[u8], seq: Option<u64>) -> Result<Option<Value>> {
        match self.candidate(key, seq)? {
            Some((loc, src)) => self.read_candidate(key, seq, loc, src),
            None => Ok(None),
        }
    }

    /// The first half of [`Shard::get_at`]: where `key`'s record probably is (from the
    /// index's hash side), and where its bytes can be read; `None` if `key` has no value.
    pub(crate) fn candidate(&self, key: &[u8], seq: Option<u64>) -> Result<Option<(Loc, Source)>> {
        let st = self.state.read();
        match st.locate(key, seq, false) {
            Some(loc) => Ok(Some((loc, st.source(loc)?))),
            None => Ok(None),
        }
    }

    /// The second half of [`Shard::get_at`]: reads the record a [`Shard::candidate`]
    /// found, and asks the exact index if it is not `key`'s.
    pub(crate) fn read_candidate(
        &self,
        key: &[u8],
        seq: Option<u64>,
        loc: Loc,
        src: Source,
    ) -> Result<Option<Value>> {
        match read_value(src, loc, key) {
            Ok(value) => Ok(Some(value)),
            Err(first) => {
                let (exact, src) = {
                    let st = self.state.read();
                    let Some(exact) = st.locate(key, seq, true) else {
                        return Ok(None);
                    };
                    (exact, st.source(exact)?)
                };
                if exact == loc {
                    return Err(first);
                }
                read_value(src, exact, key).map(Some)
            }
        }
    }

    /// Before an append: refuses writes once an fsync failed, and writes out a full
    /// buffer (or rotates a full segment, or retries a failed write) first, so a write
    /// that meets an I/O error is refused before anything of it is applied. A full
    /// buffer sends every shard's buffer to the kernel, so that no shard keeps old
    /// writes in memory while later ones reach the files (a crash would cut the later
    /// ones off: see `recovery::find_cut`). Returns whether the caller must do that
    /// (`Core::write_out`): the shard cannot reach its siblings.
    pub fn prepare_write(&self, core: &StoreCtx) -> Result<bool> {
        if let Some(f) = core.failure() {
            return Err(Error::ReadOnly(f));
        }
        let (full, rotate, half) = {
            let st = self.state.read();
            let end = st.active.end();
            let cap = self.segment_cap(core, st.active.id);
            (
                st.write_stuck || st.active.buf.len() >= core.opts.write_buffer,
                end >= cap,
                end >= cap / 2,
            )
        };
        if half
            && self.spare.get() == Spare::None
            && core.fs.spares_ahead()
            && self.spare.advance(Spare::None, Spare::Asked)
        {
            core.want_spare();
        }
        if full {
            return Ok(true);
        } else if rotate {
            self.flush(core, false)?;
        }
        Ok(false)
    }

    /// The size at which the active segment `active` is rotated: `segment_size`, except
    /// for a new store's first segments, which are staggered over the shards (shard `i`
    /// of `n` at `1 - i/2n` of it). Keys spread evenly over the shards fill their
    /// segments at the same pace; without this, every shard would rotate, and have a
    /// segment sealed and later compacted, at the same moment, in bursts of `n`.
    fn segment_cap(&self, core: &StoreCtx, active: u32) -> u64 {
        let size = core.opts.segment_size;
        let n = core.shard_count as u64;
        if active != FIRST_SEGMENT || n <= 1 {
            return size;
        }
        size - size / (2 * n) * self.id as u64
    }

    /// Whether every record of this shard numbered up to `seq` is durable.
    pub fn durable_upto(&self, seq: u64) -> bool {
        self.state.read().seqs.is_durable(seq, Cover::All)
    }

    /// Group commit: returns once every record of this shard numbered up to `seq` that
    /// `cover` names is durable, sharing the sync with other writers. What is needed is
    /// checked again once `sync` is held: writers arriving while a sync runs wait for it
    /// there and then find their records durable.
    pub fn sync_upto(&self, core: &StoreCtx, seq: u64, cover: Cover) -> Result<()> {
        let durable = || self.state.read().seqs.is_durable(seq, cover);
        if durable() {
            return Ok(());
        }
        let _sync = self.sync.lock();
        if durable() {
            return Ok(());
        }
        self.flush_and_sync(core)
    }

    /// Writes the buffer to the file (rotating the segment when full); with `sync`, also
    /// makes everything appended so far durable.
    pub fn flush(&self, core: &StoreCtx, sync: bool) -> Result<()> {
        if sync {
            let _sync = self.sync.lock();
            return self.flush_and_sync(core);
        }
        let mut io = self.io.lock();
        self.flush_locked(core, &mut io, false, false).map(|_| ())
    }

    /// Writes the buffer out under `io`, then syncs with `io` released. The caller holds
    /// `sync`.
    fn flush_and_sync(&self, core: &StoreCtx) -> Result<()> {
        let to_sync = {
            let mut io = self.io.lock();
            self.flush_locked(core, &mut io, true, false)?
        };
        match to_sync {
            Some(t) => self.sync_files(core, t),
            None => Ok(()),
        }
    }

    /// Makes the files a sync took durable; then every record it took is. A failure
    /// makes the shard (and the store) read-only.
    fn sync_files(&self, core: &StoreCtx, t: ToSync) -> Result<()> {
        for f in &t.files {
            self.sync_file(core, f)?;
        }
        self.state.write().seqs.synced(t.taken);
        Ok(())
    }

    /// fdatasync of one segment file; a failure makes the shard (and the store)
    /// read-only.
    fn sync_file(&self, core: &StoreCtx, f: &SegmentFile) -> Result<()> {
        core.fs.sync_data(&f.file, &f.path).inspect_err(|e| {
            // After a failed fsync the kernel may have dropped the dirty pages: nothing
            // written since the last good sync can be trusted to be on disk, so the
            // shard stops accepting writes until reopened.
            let msg = format!("fsync failed on shard {}: {e}", self.id);
            self.state.write().failed = Some(msg.clone());
            core.fail(msg);
        })
    }

    /// Writes the buffer out and syncs every file of the shard that may hold unsynced
    /// records, except the segments `skip` (which compaction is dropping whole), so that
    /// every record appended so far is durable unless it is in one of those. Counts
    /// nothing as durable for the group commit (a record in a segment left out is not),
    /// so a writer waiting for its records still syncs them. Used before a whole drop.
    pub fn sync_all_but(&self, core: &StoreCtx, skip: &[u32]) -> Result<()> {
        let _sync = self.sync.lock();
        let files: Vec<Arc<SegmentFile>> = {
            let mut io = self.io.lock();
            self.flush_locked(core, &mut io, false, false)?;
            let active = self.state.read().active.file.clone();
            io.unsynced
                .iter()
                .filter(|f| !skip.contains(&f.id))
                .cloned()
                .chain([active])
                .collect()
        };
        for f in &files {
            self.sync_file(core, f)?;
        }
        Ok(())
    }

    /// Seals the active segment early when its stale fraction reached `threshold`, so
    /// that compaction can reclaim it (used by `Db::compact`). Returns whether it did.
    pub fn rotate_if_stale(&self, core: &StoreCtx, threshold: f64) -> Result<bool> {
        let mut io = self.io.lock();
        let stale = {
            let st = self.state.read();
            let m = &st.segs[&st.active.id];
            st.active.end() > SEG_HEADER_LEN && m.stale_fraction() >= threshold
        };
        if stale {
            self.flush_locked(core, &mut io, false, true)?;
        }
        Ok(stale)
    }

    /// Rotates the active segment out when it holds at least `min` bytes, so that it
    /// can be sealed (before a checkpoint: a sealed segment is linked, not copied).
    /// Returns the segment rotated out.
    pub fn rotate_if_at_least(&self, core: &StoreCtx, min: u64) -> Result<Option<u32>> {
        let mut io = self.io.lock();
        let (end, id) = {
            let st = self.state.read();
            (st.active.end(), st.active.id)
        };
        if end < min.max(SEG_HEADER_LEN + 1) {
            return Ok(None);
        }
        self.flush_locked(core, &mut io, false, true)?;
        Ok((self.state.read().active.id != id).then_some(id))
    }

    /// Rotates the active segment out when it holds at least `min` bytes and at least
    /// `threshold` of them are stale, so that its dead bytes do not wait until it fills
    /// (used by `Db::reclaim` and by the compaction thread for idle shards). When its
    /// accounting says it holds nothing live, it is marked `dropping` before the
    /// rotation, so that the maintenance thread does not seal it (which would write its
    /// dead bytes to disk): the caller then owns it and must drop it whole or give it
    /// back (see `compaction::unclaim`). Returns the rotated segment and whether it was
    /// claimed so.
    pub fn rotate_for_reclaim(
        &self,
        core: &StoreCtx,
        min: u64,
        threshold: f64,
    ) -> Result<Option<(u32, bool)>> {
        let mut io = self.io.lock();
        let (id, claimed) = {
            let mut st = self.state.write();
            let (end, id) = (st.active.end(), st.active.id);
            let Some(m) = st.segs.get_mut(&id) else {
                return Ok(None);
            };
            if end < min.max(SEG_HEADER_LEN + 1) || m.stale_fraction() < threshold {
                return Ok(None);
            }
            let claimed = m.all_stale() && m.claim_drop();
            (id, claimed)
        };
        if let Err(e) = self.flush_locked(core, &mut io, false, true) {
            if claimed {
                if let Some(m) = self.state.write().segs.get_mut(&id) {
                    m.unclaim_drop();
                }
            }
            return Err(e);
        }
        if self.state.read().active.id == id {
            // Not rotated after all (nothing to write): give it back.
            if claimed {
                if let Some(m) = self.state.write().segs.get_mut(&id) {
                    m.unclaim_drop();
                }
            }
            return Ok(None);
        }
        Ok(Some((id, claimed)))
    }

    /// A new file holding only `old`'s header, renamed over it; returns it opened. The
    /// old file is replaced, not cut: a read-only process reading the store
    /// (`Options::read_only`) keeps reading the records it has open in it. The new file
    /// and the rename are synced before the segment takes appends again. A crash before
    /// that brings the old file back, with records that are all dead and below the
    /// watermark, which is the state before; and the unlinks its tombstones relied on
    /// were synced before (`compaction::retire`).
    fn replace_with_header(&self, core: &StoreCtx, old: &SegmentFile) -> Result<SegmentFile> {
        let header =
            crate::fsutil::read_exact_at(&old.file, &old.path, 0, SEG_HEADER_LEN as usize)?;
        let tmp = crate::fsutil::tmp_path(&old.path);
        core.fs.remove(&tmp)?;
        let f = core.fs.create_new(&tmp)?;
        core.fs.write_at(&f, &tmp, &header, 0)?;
        core.fs.sync_data(&f, &tmp)?;
        drop(f);
        core.fs.rename(&tmp, &old.path)?;
        // Durable before the segment takes appends again: a lost rename would bring the
        // old file back under records synced into the new one.
        core.fs.sync_dir(&self.dir)?;
        match SegmentFile::open(&old.path, self.id, old.id)? {
            Some((file, _, None)) => Ok(file),
            _ => Err(Error::corruption(
                &old.path,
                "the emptied active segment does not read back as its header",
            )),
        }
    }

    /// At a clean close, gives back the space of the active segment, every record of
    /// which was found droppable (and is below the recorded watermark): the file is
    /// replaced by one holding only its header ([`Shard::replace_with_header`]), which
    /// stays the active segment, so the next open needs no new segment id. Writes are refused by then; the caller holds no handle to the file.
    /// Returns the bytes freed, or `None` (nothing done) when the segment is not the
    /// active one, has buffered bytes, or is still used by a reader (a value or an
    /// iterator holding its file, whose map must stay readable).
    pub fn empty_active(&self, core: &StoreCtx, seg: u32) -> Result<Option<u64>> {
        let mut io = self.io.lock();
        if !self.state.read().can_empty_active(seg) {
            return Ok(None);
        }
        self.drop_kept_hint(core, seg)?;
        let mut st = self.state.write();
        let st = &mut *st;
        // Checked again: a write may have been buffered while the hint went.
        if !st.can_empty_active(seg) {
            return Ok(None);
        }
        let Some(m) = st.segs.get_mut(&seg) else {
            return Ok(None);
        };
        let file = Arc::new(self.replace_with_header(core, &st.active.file)?);
        io.laid = SEG_HEADER_LEN;
        let freed = m.size.saturating_sub(SEG_HEADER_LEN);
        st.active = Active::new(file.clone(), SEG_HEADER_LEN, core.opts.segment_size);
        let mut fresh = SegMeta::new(file, SEG_HEADER_LEN);
        fresh.created_seq = m.created_seq;
        *m = fresh;
        st.active.buf_start = SEG_HEADER_LEN;
        Ok(Some(freed))
    }

    /// Writes the buffer to the file and runs `f` on the state while no write is in
    /// flight, so every byte below `active.buf_start` is in the file.
    pub fn with_flushed<R>(&self, core: &StoreCtx, f: impl FnOnce(&ShardState) -> R) -> Result<R> {
        let mut io = self.io.lock();
        self.flush_locked(core, &mut io, false, false)?;
        let st = self.state.read();
        Ok(f(&st))
    }

    fn write_pending(&self, core: &StoreCtx, p: &Pending) -> Result<()> {
        self.drop_kept_hint(core, p.seg)?;
        match core
            .fs
            .write_at(&p.file.file, &p.file.path, &p.data, p.start)
        {
            Ok(()) => {
                self.note_write(p.data.len() as u64);
                let mut st = self.state.write();
                st.pending = None;
                st.write_stuck = false;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Writes the buffer to the file (rotating the segment if full, or with `rotate`).
    /// With `sync`, takes every unsynced file for the caller to sync once `io` is
    /// released ([`Shard::sync_files`]), and marks everything appended so far as covered
    /// by that sync.
    fn flush_locked(
        &self,
        core: &StoreCtx,
        io: &mut IoState,
        sync: bool,
        rotate: bool,
    ) -> Result<Option<ToSync>> {
        let res = self.flush_inner(core, io, sync, rotate);
        if res.is_err() {
            // Refuse new writes until a flush succeeds (see `check_writable`).
            self.state.write().write_stuck = true;
        }
        res
    }

    fn flush_inner(
        &self,
        core: &StoreCtx,
        io: &mut IoState,
        sync: bool,
        rotate: bool,
    ) -> Result<Option<ToSync>> {
        // A write that failed earlier goes first, so file order is kept.
        let stuck = self.state.read().pending.clone();
        if let Some(p) = stuck {
            self.write_pending(core, &p)?;
        }
        let new_file = self.rotation_file(core, io, rotate)?;
        let out = self.take_buffer(core, new_file, sync);
        if let Some((r, end)) = &out.rotated {
            self.note_write(SEG_HEADER_LEN);
            core.add_disk_used(SEG_HEADER_LEN);
            io.unsynced.push(r.clone());
            io.rotated.push(r.id);
            // Its zeros past `end` (which the pending write, to it, reaches) go before the
            // sealer reads its length, and before that write, so that a failed write
            // (retried later) leaves no zeros behind either. The new active holds its
            // header.
            self.cut_layout(core, io, r, *end)?;
            io.laid = SEG_HEADER_LEN;
        }
        if let Some(p) = &out.pending {
            self.write_pending(core, p)?;
        }
        if sync && core.opts.sync == SyncPolicy::Always {
            // The end of what is in the file: records appended meanwhile by other
            // writers (buffered, `io` is held here) are not.
            let (file, end) = {
                let st = self.state.read();
                (st.active.file.clone(), st.active.buf_start)
            };
            let flushed = out.pending.as_ref().map_or(0, |p| p.data.len() as u64);
            self.lay_out(core, io, &file, end, flushed, out.cap);
        }
        let to_sync = out.taken.map(|taken| {
            let mut files = std::mem::take(&mut io.unsynced);
            files.push(self.state.read().active.file.clone());
            ToSync { files, taken }
        });
        // Every byte of the rotated-out segments is in their files now.
        for id in io.rotated.drain(..) {
            core.queue_seal(self.id, id);
        }
        Ok(to_sync)
    }

    /// The file of the next active segment if the active one rotates now (it is full, or
    /// `rotate` and it holds a record): the spare, or a new file. Refuses a failed shard.
    fn rotation_file(
        &self,
        core: &StoreCtx,
        io: &mut IoState,
        rotate: bool,
    ) -> Result<Option<Arc<SegmentFile>>> {
        let rotate_now = {
            let st = self.state.read();
            if let Some(f) = &st.failed {
                return Err(Error::ReadOnly(f.clone()));
            }
            let end = st.active.end();
            end >= self.segment_cap(core, st.active.id) || (rotate && end > SEG_HEADER_LEN)
        };
        if !rotate_now {
            return Ok(None);
        }
        let spare = io.spare.take();
        // A shard that rotated once will likely rotate again: the next spare is
        // asked for now, so that it has a whole segment's time to be made.
        if core.fs.spares_ahead() {
            self.spare.set(Spare::Asked);
            core.want_spare();
        } else {
            self.spare.set(Spare::None);
        }
        match spare {
            Some(f) => Ok(Some(f)),
            None => {
                let id = {
                    let mut st = self.state.write();
                    st.next_seg += 1;
                    st.next_seg - 1
                };
                Ok(Some(Arc::new(SegmentFile::create(
                    &core.fs,
                    &self.dir,
                    self.id,
                    id,
                    SegKind::Data,
                    core.current_seq(),
                )?)))
            }
        }
    }

    /// Under the state lock: takes the write buffer for writing (it becomes `pending`),
    /// with `sync` takes every record appended so far for the caller's sync
    /// ([`ShardSeqs::take`]), and rotates to `new_file` if given.
    fn take_buffer(
        &self,
        core: &StoreCtx,
        new_file: Option<Arc<SegmentFile>>,
        sync: bool,
    ) -> TakenBuffer {
        let mut st = self.state.write();
        let taken = sync.then(|| st.seqs.take());
        let data = std::mem::take(&mut st.active.buf);
        let pending = (!data.is_empty()).then(|| Pending {
            seg: st.active.id,
            start: st.active.buf_start,
            data: Arc::new(data),
            file: st.active.file.clone(),
        });
        if let Some(p) = &pending {
            st.active.buf_start += p.data.len() as u64;
            st.pending = Some(p.clone());
        }
        let old_end = st.active.end();
        let rotated = new_file.map(|nf| {
            let mut meta = SegMeta::new(nf.clone(), SEG_HEADER_LEN);
            // A spare was created earlier than now; every record it will hold is
            // numbered from here on.
            meta.created_seq = nf.created_seq.max(core.current_seq());
            st.segs.insert(nf.id, meta);
            let old = std::mem::replace(
                &mut st.active,
                Active::new(nf, SEG_HEADER_LEN, core.opts.segment_size),
            );
            (old.file, old_end)
        });
        let cap = self.segment_cap(core, st.active.id);
        TakenBuffer {
            pending,
            rotated,
            taken,
            cap,
        }
    }

    /// Creates the spare segment if one was asked for (called by the maintenance
    /// thread). Its header says it was created at the current sequence number, earlier
    /// than any record it will hold, which only makes compaction keep tombstones more
    /// conservatively. A crash leaves it as an empty segment that open handles like any
    /// other.
    pub fn make_spare(&self, core: &StoreCtx) {
        if self.spare.get() != Spare::Asked {
            return;
        }
        let id = {
            let mut st = self.state.write();
            st.next_seg += 1;
            st.next_seg - 1
        };
        let created = SegmentFile::create(
            &core.fs,
            &self.dir,
            self.id,
            id,
            SegKind::Data,
            core.current_seq(),
        );
        let file = match created {
            Ok(f) => Arc::new(f),
            Err(e) => {
                log::warn!("creating a spare segment for shard {}: {e}", self.id);
                self.spare.advance(Spare::Asked, Spare::Failed);
                return;
            }
        };
        let mut io = self.io.lock();
        // A rotation that found no spare meanwhile made a newer active segment itself:
        // this one is too old to follow it.
        let usable = io.spare.is_none()
            && self.spare.get() == Spare::Asked
            && id > self.state.read().active.id;
        if usable {
            io.spare = Some(file);
            self.spare.set(Spare::Ready);
        } else {
            drop(io);
            let _ = core.fs.remove(&file.path);
        }
    }

    /// Removes an unused spare segment (at a clean close).
    pub fn drop_spare(&self, core: &StoreCtx) -> Result<()> {
        let spare = self.io.lock().spare.take();
        self.spare.set(Spare::None);
        match spare {
            Some(f) => core.fs.remove(&f.path),
            None => Ok(()),
        }
    }
}

/// Reads and checks the record at `loc` from `src`, expecting a put of `key`.
pub(crate) fn read_value(src: Source, loc: Loc, key: &[u8]) -> Result<Value> {
    let f = match src {
        Source::Bytes(buf) => {
            let start = check_record(&buf, loc, key, || PathBuf::from("<write buffer>"))?;
            return Ok(Value::new(buf, start));
        }
        Source::File(f) => f,
    };
    // A sealed segment serves the value through its map (no copy) or with one `pread`
    // (one disk request for the whole record): `SegmentFile::prefer_pread` decides.
    if let Some(m) = f.mapped() {
        let (off, len) = (loc.off as u64, loc.len as u64);
        let timer = SegmentFile::read_timer(off);
        if f.prefer_pread(off, len) {
            let buf = f.pread_at(off, len as usize)?;
            let start = check_record(&buf, loc, key, || f.path.clone())?;
            f.note_read(timer);
            return Ok(Value::new(buf, start));
        }
        if let Some(bytes) = m.get(off as usize..(off + len) as usize) {
            let start = check_record(bytes, loc, key, || f.path.clone())?;
            f.note_read(timer);
            return Ok(Value::mapped(f, off as usize + start, (off + len) as usize));
        }
    }
    let buf = f.read_at(loc.off as u64, loc.len as usize)?;
    let start = check_record(&buf, loc, key, || f.path.clone())?;
    Ok(Value::new(buf, start))
}

/// Checks that `bytes` hold an intact put of `key` as the index described it; returns
/// where its value starts.
fn check_record(bytes: &[u8], loc: Loc, key: &[u8], path: impl Fn() -> PathBuf) -> Result<usize> {
    let rec = record::decode(bytes)
        .map_err(|e| Error::corruption(path(), format!("record at offset {}: {e}", loc.off)))?;
    if rec.key != key || rec.header.kind != Kind::Put || rec.header.record_len() != loc.len as u64 {
        return Err(Error::corruption(
            path(),
            format!("record at offset {} is not the indexed one", loc.off),
        ));
    }
    Ok(record::HEADER_LEN + rec.key.len())
}
