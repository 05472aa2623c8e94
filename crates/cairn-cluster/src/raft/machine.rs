//! The state machine of a replica: the server's rows, in the state keyspace in use
//! ([`crate::KEYSPACE`] or [`super::ALT_KEYSPACE`]), with the last applied log id and
//! the membership in row [`TAG_APPLIED`] of the same batch as the entries' rows (so a
//! crash keeps them together: the engine keeps a prefix of its writes).
//!
//! Snapshots: an engine checkpoint of the store taken between two applies (a moment's
//! work: hard links), whose state rows are then written, off the apply path, to a file
//! (FORMAT.md, "Replication": rows in key order, then their count and digest); openraft
//! streams it in pieces. A received snapshot is written into the state keyspace not in
//! use and checked against its digest; then one write makes it the one in use, and the
//! old one is cleared. A crash before that write leaves the old state, and the half
//! written keyspace is cleared at the next open.

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError};

use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, ErrorSubject, ErrorVerb, OptionalSend, RaftLogId, SnapshotMeta,
    StoredMembership,
};
use prost::Message;

use cairn::{Db, Keyspace, WriteBatch, WriteOptions};

use super::replica::Core;
use super::{decode, encode, io_err, Change, LogId, NodeId, StorageError, TypeConfig};
use crate::proto;
use crate::rows::{single, TAG_APPLIED};

/// What a replica's state says it has applied.
pub(crate) type Applied = (Option<LogId>, StoredMembership<NodeId, BasicNode>);

/// Row of the log keyspace: the state keyspace in use (one byte).
const ACTIVE: &[u8] = b"S";
/// Row of the log keyspace: the current snapshot's meta.
const SNAPSHOT: &[u8] = b"M";

/// Held while a snapshot is recorded as current and the files of others are removed.
static SAVING: std::sync::Mutex<()> = std::sync::Mutex::new(());
/// The first bytes of a snapshot file.
const MAGIC: &[u8; 8] = b"CRNSNAP1";
/// Rows written per batch when installing or clearing.
const BATCH_ROWS: usize = 4096;

/// The state keyspace in use in `db` (and clears the other one, left half written by
/// a crash during an install).
pub(crate) fn open_active(db: &Db) -> Result<Keyspace, cairn::Error> {
    let id = active_id(db)?;
    clear(&db.keyspace(other_state(id)))?;
    Ok(db.keyspace(id))
}

/// The id of the state keyspace in use in `db` (row `S` of the log keyspace).
fn active_id(db: &Db) -> Result<u8, cairn::Error> {
    Ok(match db.keyspace(super::LOG_KEYSPACE).get(ACTIVE)? {
        Some(v) if v.first() == Some(&super::ALT_KEYSPACE) => super::ALT_KEYSPACE,
        _ => crate::KEYSPACE,
    })
}

/// The state keyspace that is not `id`.
fn other_state(id: u8) -> u8 {
    if id == crate::KEYSPACE {
        super::ALT_KEYSPACE
    } else {
        crate::KEYSPACE
    }
}

/// Deletes every row of `ks`.
fn clear(ks: &Keyspace) -> Result<(), cairn::Error> {
    loop {
        let keys: Vec<Vec<u8>> = ks
            .iter()
            .take(BATCH_ROWS)
            .map(|r| r.map(|(k, _)| k))
            .collect::<Result<_, _>>()?;
        if keys.is_empty() {
            return Ok(());
        }
        let mut b = WriteBatch::new();
        for k in keys {
            b.delete(k);
        }
        ks.write_with(b, WriteOptions::new().defer_sync().frees_space())?;
    }
}

/// The applied state recorded in `ks`.
pub(crate) fn read_applied(ks: &Keyspace) -> Result<Applied, String> {
    match ks.get(single(TAG_APPLIED)).map_err(|e| e.to_string())? {
        None => Ok((None, StoredMembership::default())),
        Some(v) => decode(&v),
    }
}

/// Digest of rows, as FORMAT.md says (also what `cluster check` compares).
#[derive(Default)]
pub(crate) struct Digest {
    h: xxhash_rust::xxh3::Xxh3,
    rows: u64,
}

impl Digest {
    pub(crate) fn add(&mut self, k: &[u8], v: &[u8]) {
        self.h.update(&(k.len() as u32).to_le_bytes());
        self.h.update(k);
        self.h.update(&(v.len() as u32).to_le_bytes());
        self.h.update(v);
        self.rows += 1;
    }
    pub(crate) fn finish(&self) -> (u64, u64) {
        (self.rows, self.h.digest())
    }
}

/// The state machine of a replica.
pub(crate) struct Machine {
    core: Arc<Core>,
    applied: Applied,
    built: u64,
}

impl Machine {
    /// The state machine over `core`'s state keyspace.
    pub(crate) fn new(core: Arc<Core>) -> Result<Machine, String> {
        let applied = read_applied(&core.state())?;
        // Snapshot files a crash left half written.
        if let Ok(rd) = std::fs::read_dir(&core.snapshots) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().ends_with(".part") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        Ok(Machine {
            core,
            applied,
            built: 0,
        })
    }

    fn snapshot_path(&self, id: &str) -> PathBuf {
        self.core.snapshots.join(format!("{id}.snap"))
    }
}

impl RaftStateMachine<TypeConfig> for Machine {
    type SnapshotBuilder = Builder;

    async fn applied_state(&mut self) -> Result<Applied, StorageError> {
        Ok(self.applied.clone())
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut b = WriteBatch::new();
        let mut changes: Vec<Change> = Vec::new();
        let mut n = 0;
        for e in entries {
            n += 1;
            let id = *e.get_log_id();
            self.applied.0 = Some(id);
            match e.payload {
                EntryPayload::Blank => {}
                // A proposal of an earlier term that Raft appended in a later one (it
                // waited in the proposer while its leader lost the term and won another):
                // its rows were made against that term's view, which a later leader's
                // changes may have overtaken, and its reply was a failure. Skipped.
                EntryPayload::Normal(c) if c.term != id.leader_id.term => {
                    tracing::warn!(
                        "entry {id}: {c} was proposed in term {}, not the entry's: skipped",
                        c.term
                    );
                    metrics::counter!("cairn_raft_stale_proposals_total").increment(1);
                }
                EntryPayload::Normal(c) => {
                    for (k, v) in &c.rows {
                        match v {
                            Some(v) => b.put(k, v),
                            None => b.delete(k),
                        };
                    }
                    changes.push(c);
                }
                EntryPayload::Membership(m) => {
                    self.applied.1 = StoredMembership::new(Some(id), m);
                }
            }
        }
        if n == 0 {
            return Ok(Vec::new());
        }
        let meta = encode(&self.applied)
            .map_err(|e| io_err(ErrorSubject::StateMachine, ErrorVerb::Write, e))?;
        b.put(single(TAG_APPLIED), meta);
        self.core
            .state()
            .write_with(b, WriteOptions::new().defer_sync())
            .map_err(|e| io_err(ErrorSubject::StateMachine, ErrorVerb::Write, e))?;
        self.core.applied(&changes, self.applied.0);
        Ok(vec![(); n])
    }

    async fn get_snapshot_builder(&mut self) -> Builder {
        self.built += 1;
        let cut = self.core.snapshots.join(format!("cut-{}", self.built));
        let _ = std::fs::remove_dir_all(&cut);
        let state_id = self.core.state().id();
        let taken = self
            .core
            .db
            .checkpoint(&cut)
            .map(|_| ())
            .map_err(|e| e.to_string());
        Builder {
            core: self.core.clone(),
            cut,
            taken,
            state_id,
            applied: self.applied.clone(),
            n: self.built,
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<tokio::fs::File>, StorageError> {
        let path = self.core.snapshots.join("incoming.snap");
        let f = tokio::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .await
            .map_err(|e| io_err(ErrorSubject::Snapshot(None), ErrorVerb::Write, e))?;
        Ok(Box::new(f))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<tokio::fs::File>,
    ) -> Result<(), StorageError> {
        let subject = || ErrorSubject::Snapshot(Some(meta.signature()));
        // Whatever openraft wrote through the handle reaches the file before it is read.
        snapshot
            .sync_all()
            .await
            .map_err(|e| io_err(subject(), ErrorVerb::Write, e))?;
        drop(snapshot);
        let incoming = self.core.snapshots.join("incoming.snap");
        let core = self.core.clone();
        let applied: Applied = (meta.last_log_id, meta.last_membership.clone());
        let path = self.snapshot_path(&meta.snapshot_id);
        let a = applied.clone();
        tokio::task::spawn_blocking(move || install(&core, &incoming, &path, &a))
            .await
            .map_err(|e| io_err(subject(), ErrorVerb::Write, e))?
            .map_err(|e| io_err(subject(), ErrorVerb::Write, e))?;
        self.save_current(meta)
            .map_err(|e| io_err(subject(), ErrorVerb::Write, e))?;
        self.applied = applied;
        self.core.installed(self.applied.0);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let log = self.core.db.keyspace(super::LOG_KEYSPACE);
        let read = || -> Result<Option<SnapshotMeta<NodeId, BasicNode>>, String> {
            match log.get(SNAPSHOT).map_err(|e| e.to_string())? {
                None => Ok(None),
                Some(v) => decode(&v).map(Some),
            }
        };
        let Some(meta) =
            read().map_err(|e| io_err(ErrorSubject::Snapshot(None), ErrorVerb::Read, e))?
        else {
            return Ok(None);
        };
        match tokio::fs::File::open(self.snapshot_path(&meta.snapshot_id)).await {
            Ok(f) => Ok(Some(Snapshot {
                meta,
                snapshot: Box::new(f),
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(ErrorSubject::Snapshot(None), ErrorVerb::Read, e)),
        }
    }
}

impl Machine {
    /// Records `meta` as the current snapshot and removes older snapshot files.
    fn save_current(&self, meta: &SnapshotMeta<NodeId, BasicNode>) -> Result<(), String> {
        save_current(&self.core, meta)
    }
}

fn save_current(core: &Core, meta: &SnapshotMeta<NodeId, BasicNode>) -> Result<(), String> {
    let _one = SAVING.lock().unwrap_or_else(PoisonError::into_inner);
    record_current(core, meta)
}

/// Gives the snapshot file written at `part` its name `path` and records it, in one
/// hold of `SAVING`; returns it opened: the recording of a newer snapshot (one
/// installed from the leader while this one was built) removes its name, but an open
/// file outlives its name.
fn save_built(
    core: &Core,
    meta: &SnapshotMeta<NodeId, BasicNode>,
    part: &Path,
    path: &Path,
) -> Result<std::fs::File, String> {
    let _one = SAVING.lock().unwrap_or_else(PoisonError::into_inner);
    std::fs::rename(part, path).map_err(|e| format!("{}: {e}", path.display()))?;
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    record_current(core, meta)?;
    Ok(f)
}

/// Records `meta` as the current snapshot unless the one recorded is newer (a snapshot
/// is built in a task of its own while the replica goes on, so one installed meanwhile
/// may be newer than the one just built), then removes the files of all others; files
/// still being written (`.part`) stay.
fn record_current(core: &Core, meta: &SnapshotMeta<NodeId, BasicNode>) -> Result<(), String> {
    let log = core.db.keyspace(super::LOG_KEYSPACE);
    let recorded: Option<SnapshotMeta<NodeId, BasicNode>> =
        match log.get(SNAPSHOT).map_err(|e| e.to_string())? {
            Some(v) => Some(decode(&v)?),
            None => None,
        };
    let current = match recorded {
        Some(r) if r.last_log_id > meta.last_log_id => r,
        _ => {
            log.put(SNAPSHOT, encode(meta)?)
                .map_err(|e| e.to_string())?;
            core.db.sync_written().map_err(|e| e.to_string())?;
            meta.clone()
        }
    };
    let keep = format!("{}.snap", current.snapshot_id);
    if let Ok(rd) = std::fs::read_dir(&core.snapshots) {
        for e in rd.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".snap") && name != keep && name != "incoming.snap" {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    Ok(())
}

/// Installs the snapshot file `incoming` into the state keyspace not in use, makes it
/// the one in use, clears the old one, and keeps the file as `path`.
fn install(core: &Core, incoming: &Path, path: &Path, applied: &Applied) -> Result<(), String> {
    let old = core.state();
    let new_id = other_state(old.id());
    let new = core.db.keyspace(new_id);
    clear(&new).map_err(|e| e.to_string())?;
    let res = (|| {
        let f = std::fs::File::open(incoming).map_err(|e| e.to_string())?;
        let mut b = WriteBatch::new();
        read_rows(f, |k, v| {
            if k != single(TAG_APPLIED) {
                b.put(k, v);
            }
            if b.len() >= BATCH_ROWS {
                new.write_with(std::mem::take(&mut b), WriteOptions::new().defer_sync())
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        })?;
        b.put(single(TAG_APPLIED), encode(applied)?);
        new.write_with(b, WriteOptions::new().defer_sync())
            .map_err(|e| e.to_string())?;
        core.db.sync_written().map_err(|e| e.to_string())
    })();
    if let Err(e) = res {
        let _ = clear(&new);
        return Err(format!("snapshot refused: {e}"));
    }
    let log = core.db.keyspace(super::LOG_KEYSPACE);
    log.put(ACTIVE, [new_id]).map_err(|e| e.to_string())?;
    core.db.sync_written().map_err(|e| e.to_string())?;
    core.set_state(new);
    clear(&old).map_err(|e| e.to_string())?;
    std::fs::rename(incoming, path).map_err(|e| e.to_string())?;
    Ok(())
}

/// Reads a snapshot file, calling `row` for each row in order, and checks its end
/// (count and digest): an error if it is missing, wrong, or anything follows it.
pub(crate) fn read_rows(
    f: std::fs::File,
    mut row: impl FnMut(&[u8], &[u8]) -> Result<(), String>,
) -> Result<(u64, u64), String> {
    let mut r = BufReader::new(f);
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)
        .map_err(|e| format!("header: {e}"))?;
    if &magic != MAGIC {
        return Err("not a cairn snapshot (bad header)".into());
    }
    let mut digest = Digest::default();
    let mut buf = Vec::new();
    loop {
        let len = read_varint(&mut r)?.ok_or("the snapshot ends without its end record")?;
        if len > 64 << 20 {
            return Err(format!("a snapshot record of {len} bytes"));
        }
        buf.resize(len as usize, 0);
        r.read_exact(&mut buf).map_err(|e| format!("record: {e}"))?;
        let item = proto::SnapshotItem::decode(&buf[..]).map_err(|e| e.to_string())?;
        match item.item {
            Some(proto::snapshot_item::Item::Row(x)) => {
                digest.add(&x.key, &x.value);
                row(&x.key, &x.value)?;
            }
            Some(proto::snapshot_item::Item::End(end)) => {
                if (end.rows, end.digest) != digest.finish() {
                    return Err("the snapshot's digest does not match its rows".into());
                }
                if read_varint(&mut r)?.is_some() {
                    return Err("bytes after the snapshot's end record".into());
                }
                return Ok(digest.finish());
            }
            None => return Err("an empty snapshot record".into()),
        }
    }
}

/// A protobuf varint, or `None` at a clean end of the file.
fn read_varint(r: &mut impl Read) -> Result<Option<u64>, String> {
    let mut v = 0u64;
    for i in 0..10 {
        let mut b = [0u8; 1];
        match r.read(&mut b) {
            Ok(0) if i == 0 => return Ok(None),
            Ok(0) => return Err("the snapshot ends inside a length".into()),
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
        v |= u64::from(b[0] & 0x7f) << (7 * i);
        if b[0] & 0x80 == 0 {
            return Ok(Some(v));
        }
    }
    Err("a bad length in the snapshot".into())
}

/// A digest of one consistent cut of the replica's state: the applied index, the
/// number of rows and their digest (the applied-state row left out), from an engine
/// checkpoint (the rows and the applied index are written in one batch, so any cut
/// agrees with itself).
pub(crate) fn digest(core: &Core) -> Result<(u64, u64, u64), String> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let cut = core
        .snapshots
        .join(format!("digest-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cut);
    let res = (|| {
        core.db.checkpoint(&cut).map_err(|e| e.to_string())?;
        let db = cairn::Options::new()
            .read_only()
            .open(&cut)
            .map_err(|e| e.to_string())?;
        let ks = db.keyspace(active_id(&db).map_err(|e| e.to_string())?);
        let applied = read_applied(&ks)?.0.map_or(0, |l| l.index);
        let mut d = Digest::default();
        let skip = single(TAG_APPLIED);
        for r in ks.iter() {
            let (k, v) = r.map_err(|e| e.to_string())?;
            if k != skip {
                d.add(&k, &v);
            }
        }
        let (rows, digest) = d.finish();
        Ok((applied, rows, digest))
    })();
    let _ = std::fs::remove_dir_all(&cut);
    res
}

/// Builds a snapshot from a checkpoint taken between two applies.
pub(crate) struct Builder {
    core: Arc<Core>,
    cut: PathBuf,
    taken: Result<(), String>,
    state_id: u8,
    applied: Applied,
    n: u64,
}

impl RaftSnapshotBuilder<TypeConfig> for Builder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let subject = ErrorSubject::Snapshot(None);
        self.taken
            .clone()
            .map_err(|e| io_err(subject.clone(), ErrorVerb::Read, e))?;
        let last = self.applied.0;
        let id = match last {
            Some(l) => format!("{}-{}-{}", l.leader_id.term, l.index, self.n),
            None => format!("0-0-{}", self.n),
        };
        let path = self.core.snapshots.join(format!("{id}.snap"));
        let part = path.with_extension("part");
        let (cut, state_id) = (self.cut.clone(), self.state_id);
        let p = part.clone();
        let written = tokio::task::spawn_blocking(move || {
            let r = write_snapshot(&cut, state_id, &p);
            let _ = std::fs::remove_dir_all(&cut);
            r
        })
        .await
        .map_err(|e| io_err(subject.clone(), ErrorVerb::Write, e))?;
        written.map_err(|e| io_err(subject.clone(), ErrorVerb::Write, e))?;
        let meta = SnapshotMeta {
            last_log_id: last,
            last_membership: self.applied.1.clone(),
            snapshot_id: id,
        };
        let f = save_built(&self.core, &meta, &part, &path)
            .map_err(|e| io_err(subject, ErrorVerb::Write, e))?;
        let f = tokio::fs::File::from_std(f);
        self.core.snapshot_built();
        Ok(Snapshot {
            meta,
            snapshot: Box::new(f),
        })
    }
}

/// Writes the rows of state keyspace `state_id` of the checkpoint at `cut` to a
/// snapshot file at `part` (synced; [`save_built`] names it).
fn write_snapshot(cut: &Path, state_id: u8, part: &Path) -> Result<(), String> {
    let db = cairn::Options::new()
        .read_only()
        .open(cut)
        .map_err(|e| format!("opening the checkpoint: {e}"))?;
    let ks = db.keyspace(state_id);
    let f = std::fs::File::create(part).map_err(|e| e.to_string())?;
    let mut w = BufWriter::new(f);
    w.write_all(MAGIC).map_err(|e| e.to_string())?;
    let mut digest = Digest::default();
    let mut buf = Vec::new();
    for r in ks.iter() {
        let (k, v) = r.map_err(|e| e.to_string())?;
        digest.add(&k, &v);
        let item = proto::SnapshotItem {
            item: Some(proto::snapshot_item::Item::Row(proto::SnapshotRow {
                key: k,
                value: v.into_vec(),
            })),
        };
        buf.clear();
        item.encode_length_delimited(&mut buf)
            .map_err(|e| e.to_string())?;
        w.write_all(&buf).map_err(|e| e.to_string())?;
    }
    let (rows, digest) = digest.finish();
    let end = proto::SnapshotItem {
        item: Some(proto::snapshot_item::Item::End(proto::SnapshotEnd {
            rows,
            digest,
        })),
    };
    buf.clear();
    end.encode_length_delimited(&mut buf)
        .map_err(|e| e.to_string())?;
    w.write_all(&buf).map_err(|e| e.to_string())?;
    let f = w.into_inner().map_err(|e| e.to_string())?;
    f.sync_all().map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use openraft::CommittedLeaderId;

    use super::*;

    fn entry(term: u64, index: u64, proposed_in: u64, key: &[u8]) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 0), index),
            payload: EntryPayload::Normal(Change {
                term: proposed_in,
                seq: index,
                rows: vec![(key.to_vec(), Some(b"v".to_vec()))],
            }),
        }
    }

    /// A replica's core over a new store in `dir`, and the receiver of its proposals.
    fn core_in(dir: &std::path::Path) -> (Arc<Core>, tokio::sync::mpsc::UnboundedReceiver<Change>) {
        let db = cairn::Options::default().open(dir.join("store")).unwrap();
        let state = open_active(&db).unwrap();
        Core::new(db, state, dir.join("snapshots"))
    }

    /// An entry whose change was proposed in another term than the entry's is not
    /// applied; the others are, and the applied index covers both.
    #[tokio::test]
    async fn a_proposal_of_an_ended_term_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let (core, _rx) = core_in(dir.path());
        let mut m = Machine::new(core.clone()).unwrap();
        m.apply(vec![entry(3, 1, 2, b"stale"), entry(3, 2, 3, b"fresh")])
            .await
            .unwrap();
        let st = core.state();
        assert_eq!(st.get(b"stale").unwrap(), None);
        assert_eq!(st.get(b"fresh").unwrap().as_deref(), Some(&b"v"[..]));
        assert_eq!(m.applied_state().await.unwrap().0.map(|l| l.index), Some(2));
    }

    fn meta(term: u64, index: u64, id: &str) -> SnapshotMeta<NodeId, BasicNode> {
        SnapshotMeta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(term, 0), index)),
            last_membership: StoredMembership::default(),
            snapshot_id: id.to_string(),
        }
    }

    fn current(core: &Core) -> String {
        let log = core.db.keyspace(super::super::LOG_KEYSPACE);
        let m: SnapshotMeta<NodeId, BasicNode> =
            decode(&log.get(SNAPSHOT).unwrap().unwrap()).unwrap();
        m.snapshot_id
    }

    /// An older snapshot does not replace the current one nor remove its file; a newer
    /// one replaces it and removes the older files, but not one still being written;
    /// a built one is returned open even when a newer one is current.
    #[tokio::test]
    async fn the_newer_snapshot_stays_current() {
        let dir = tempfile::tempdir().unwrap();
        let (core, _rx) = core_in(dir.path());
        std::fs::create_dir_all(&core.snapshots).unwrap();
        let snap = |id: &str| core.snapshots.join(format!("{id}.snap"));
        for id in ["3-90-1", "3-100-0"] {
            std::fs::write(snap(id), id).unwrap();
        }
        let part = core.snapshots.join("4-120-2.part");
        std::fs::write(&part, "4-120-2").unwrap();
        save_current(&core, &meta(3, 100, "3-100-0")).unwrap();
        save_current(&core, &meta(3, 90, "3-90-1")).unwrap();
        assert_eq!(current(&core), "3-100-0");
        assert!(snap("3-100-0").exists() && !snap("3-90-1").exists() && part.exists());

        save_built(&core, &meta(4, 120, "4-120-2"), &part, &snap("4-120-2")).unwrap();
        assert_eq!(current(&core), "4-120-2");
        assert!(!snap("3-100-0").exists() && snap("4-120-2").exists());

        // Built from a state older than the one installed meanwhile.
        let part = core.snapshots.join("4-110-3.part");
        std::fs::write(&part, "4-110-3").unwrap();
        let mut f = save_built(&core, &meta(4, 110, "4-110-3"), &part, &snap("4-110-3")).unwrap();
        assert_eq!(current(&core), "4-120-2");
        assert!(!snap("4-110-3").exists() && snap("4-120-2").exists());
        let mut text = String::new();
        f.read_to_string(&mut text).unwrap();
        assert_eq!(text, "4-110-3");
    }

    /// A task bound to a term proposes only while this replica leads that term: not
    /// after it lost it, nor once it leads a later one.
    #[tokio::test]
    async fn a_proposal_bound_to_an_ended_term_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (core, mut rx) = core_in(dir.path());
        let rows = || vec![(b"k".to_vec(), Some(b"v".to_vec()))];
        assert!(core.propose_in(3, rows()).is_err());
        core.begin_term(3);
        assert_eq!(core.propose_in(3, rows()).map(|(t, _)| t), Ok(3));
        assert!(core.propose_in(2, rows()).is_err());
        core.end_term();
        assert!(core.propose_in(3, rows()).is_err());
        core.begin_term(5);
        assert!(core.propose_in(3, rows()).is_err());
        assert_eq!(core.propose(rows()).map(|(t, _)| t), Ok(5));
        let sent: Vec<u64> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|c| c.term)
            .collect();
        assert_eq!(sent, vec![3, 5]);
    }
}
