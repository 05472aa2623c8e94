//! Read-only opens ([`crate::Options::read_only`]): a store that another process may
//! hold open for writing, read without a lock and without writing anything, and followed
//! ([`crate::Db::catch_up`]) as its writer appends, seals, compacts and drops segments.
//!
//! The follower keeps, per shard, what it has read of each segment file ([`Seg`]: how
//! far, the last record read, whether a hint file listed all of it), the records it
//! read that are not visible yet (numbered above the visible prefix: `pending`), and the
//! deletes it applied (`tombs`: a compaction may still write a stale copy of an older
//! put of the key, which must not bring it back). A catch-up ([`attempt`]) reads
//! `SEQSTATE` first, then lists every shard's directory and reads what was appended
//! (`gather`), then works out the new visible prefix — the crash cut's rule — and
//! applies it to the shards' indexes under their write locks, every shard at once
//! (`apply`). DESIGN.md, "Read-only opens", says why this is consistent.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use crate::core::Core;
use crate::ctx::StoreCtx;
use crate::index::{Loc, Shape};
use crate::manifest::{self, SeqState};
use crate::open::shard_dir;
use crate::record::Kind;
use crate::route::Router;
use crate::segment::SegmentFile;
use crate::seq::SeqTracker;
use crate::shard::{Shard, ShardState};
use crate::{Error, Options, Result};

mod apply;
mod gather;
mod load;

/// What one [`crate::Db::catch_up`] added to a read-only view.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CatchUp {
    /// Records made visible (puts and deletes, copies a compaction made included).
    pub records: u64,
    /// Bytes of those records.
    pub bytes: u64,
    /// Records read that are not visible yet: numbered past the first write missing
    /// from the files (still in the writer's buffers, or lost in its crash), held in
    /// memory until the writes before them are there.
    pub held_back: u64,
    /// Every write numbered up to this is in the view (or was voided by the writer's
    /// recovery); none after it is.
    pub visible_seq: u64,
    /// Whether the view was rebuilt from scratch (a reopen in place): the writer
    /// crashed and its reopen voided writes or cut a file back, or the files moved under
    /// the catch-up too often to read a consistent state incrementally.
    pub rebuilt: bool,
    /// Attempts started again from a fresh listing because the writer changed the files
    /// while they were read.
    pub retries: u32,
    /// How long the catch-up took.
    pub took: Duration,
}

/// Attempts of a catch-up that met the writer's changes before it rebuilds instead.
const RETRIES: u32 = 4;

/// Attempts of a fresh load (at open, or a rebuild) before it gives up.
const LOAD_ATTEMPTS: u32 = 20;

/// A record read from a segment, its key in [`Recs::arena`].
#[derive(Clone, Copy, Debug)]
struct Rec {
    key_off: usize,
    key_len: u32,
    kind: Kind,
    seq: u64,
    batch_total: u32,
    loc: Loc,
    /// Read from a compaction's output: a copy of a record that may also be read
    /// where it was first written, so it does not count towards its batch.
    copy: bool,
}

/// Records and their keys.
#[derive(Default)]
struct Recs {
    recs: Vec<Rec>,
    arena: Vec<u8>,
}

impl Recs {
    fn push(&mut self, kind: Kind, seq: u64, batch_total: u32, loc: Loc, key: &[u8], copy: bool) {
        self.recs.push(Rec {
            key_off: self.arena.len(),
            key_len: key.len() as u32,
            kind,
            seq,
            batch_total,
            loc,
            copy,
        });
        self.arena.extend_from_slice(key);
    }

    /// Adds `r`, whose key is in `from`.
    fn push_from(&mut self, from: &Recs, r: &Rec) {
        let key_off = self.arena.len();
        self.arena.extend_from_slice(from.key(r));
        self.recs.push(Rec { key_off, ..*r });
    }

    fn key(&self, r: &Rec) -> &[u8] {
        &self.arena[r.key_off..r.key_off + r.key_len as usize]
    }
}

/// What the follower knows of one segment file it read.
struct Seg {
    file: Arc<SegmentFile>,
    /// The file's inode number, as the directory listing gives it: another file under
    /// the same name is another segment (a writer's reopen reused the id).
    ino: u64,
    /// Bytes read: every record below this is in the view or pending.
    end: u64,
    /// Offset and number of the last record read, read again before reading on: a file
    /// cut back and written again does not hold it any more.
    last: Option<(u64, u64)>,
    /// Its hint file listed every record: nothing more is read from it while the hint
    /// stays.
    hinted: bool,
    /// Index entries that point into it.
    live: u64,
    /// Pending records that point into it.
    held: u64,
    /// No longer in the directory: kept open until nothing points into it.
    gone: bool,
}

impl Seg {
    fn progress(&self) -> gather::Progress {
        gather::Progress {
            end: self.end,
            last: self.last,
            hinted: self.hinted,
        }
    }
}

/// The follower's knowledge of one shard.
#[derive(Default)]
struct ShardView {
    segs: BTreeMap<u32, Seg>,
    /// Records numbered above the visible prefix.
    pending: Recs,
    /// Keys whose newest visible record is a delete: (its number, the round that applied
    /// it).
    tombs: HashMap<Box<[u8]>, (u64, u64)>,
}

/// Everything a read-only open knows beyond its shards' states.
struct View {
    /// Every write numbered up to this is visible (or void), none after it.
    visible: u64,
    /// The `SEQSTATE` the view was built under: a change of its void ranges or aborted
    /// batches means the writer's recovery threw writes away.
    seqstate: SeqState,
    shards: Vec<ShardView>,
    /// Catch-ups made (tombstones remember the one that applied them).
    round: u64,
}

/// The read-only side of a [`Core`].
pub(crate) struct Follower {
    view: Mutex<View>,
    shape: Shape,
}

/// Why an attempt of a catch-up stopped.
enum Halt {
    /// The writer changed the files while they were read: start again from a fresh
    /// listing.
    Race(String),
    /// The writer's recovery changed what the view holds (voided writes, cut a file
    /// back, reused a segment id): rebuild the view.
    Restart(String),
    /// An error to report.
    Fail(Error),
}

impl From<Error> for Halt {
    fn from(e: Error) -> Halt {
        Halt::Fail(e)
    }
}

type Step<T> = std::result::Result<T, Halt>;

/// What an attempt added.
#[derive(Default)]
struct Added {
    records: u64,
    bytes: u64,
    held_back: u64,
}

/// Opens the store in `dir` read-only (see [`Options::read_only`]).
pub(crate) fn open_core(dir: &Path, opts: Options) -> Result<Core> {
    opts.validate()?;
    let mpath = dir.join(manifest::MANIFEST);
    if !mpath.exists() {
        return Err(Error::io(
            mpath,
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no cairn store here (a read-only open creates none)",
            ),
        ));
    }
    let manifest = manifest::read_manifest(dir)?;
    let nshards = manifest.shards;
    for i in 0..nshards {
        let d = shard_dir(dir, i);
        if !d.is_dir() {
            return Err(Error::corruption(&d, "shard directory is missing"));
        }
    }
    let shape = Shape {
        hashed: opts.hash_index,
        numbered: opts.numbered.clone(),
    };
    let (view, states) = load_fresh(dir, nshards, &shape)?;
    let visible = view.visible;
    let disk = states.iter().map(ShardState::disk_bytes).sum();
    let shards: Vec<Shard> = states
        .into_iter()
        .enumerate()
        .map(|(i, st)| Shard::new(i as u32, shard_dir(dir, i as u32), st, Vec::new()))
        .collect();
    let seqs = SeqTracker::new(view.visible + 1, view.seqstate.clone());
    let fs = opts.fs();
    let ctx = StoreCtx::new(
        dir.to_owned(),
        opts,
        fs,
        shards.len(),
        seqs,
        disk,
        Vec::new(),
    );
    // Every write is refused (`Core::refusal` says why).
    ctx.set_closed();
    let core = Core {
        router: Router::new(shards.len(), manifest.grouped),
        ctx,
        shards,
        open_damage: Vec::new(),
        log: None,
        extensions: Default::default(),
        _lock: None,
        follower: Some(Follower {
            view: Mutex::new(view),
            shape,
        }),
    };
    // The writer's compaction may have raised the watermark over records the load did
    // not find (their segments dropped while it listed): the view would then stop short
    // of writes made before the open. One catch-up takes it past them.
    if manifest::read_seqstate(dir)?.watermark > visible {
        catch_up(&core)?;
    }
    Ok(core)
}

/// Loads a read-only view from scratch ([`load::fresh`]). Tries again when the writer
/// changed the files while they were read (removed one between the listing and its
/// read, cut one back).
fn load_fresh(dir: &Path, nshards: u32, shape: &Shape) -> Result<(View, Vec<ShardState>)> {
    let mut why = String::new();
    for _ in 0..LOAD_ATTEMPTS {
        match load::fresh(dir, nshards, shape) {
            Ok(loaded) => return Ok(loaded),
            Err(Halt::Fail(e)) => return Err(e),
            Err(Halt::Race(w) | Halt::Restart(w)) => why = w,
        }
    }
    Err(Error::Io {
        path: dir.to_owned(),
        source: std::io::Error::other(format!(
            "the store's files kept changing while a read-only open read them ({why})"
        )),
    })
}

/// Brings the read-only view of `core` forward (see [`crate::Db::catch_up`]); a store
/// open for writing is always current.
pub(crate) fn catch_up(core: &Core) -> Result<CatchUp> {
    let Some(f) = &core.follower else {
        return Ok(CatchUp::default());
    };
    if core.snaps.oldest() != u64::MAX {
        // The view's changes are not noted for snapshots: it does not move under them.
        return Err(crate::Error::InvalidArgument(
            "a read-only view does not catch up while a snapshot or transaction of it is live"
                .into(),
        ));
    }
    let start = Instant::now();
    let mut view = f.view.lock();
    let states: Vec<&RwLock<ShardState>> = core.shards.iter().map(|s| &s.state).collect();
    let mut out = CatchUp::default();
    loop {
        match attempt(&core.dir, &mut view, &states) {
            Ok(a) => {
                out.records = a.records;
                out.bytes = a.bytes;
                out.held_back = a.held_back;
                break;
            }
            Err(Halt::Fail(e)) => return Err(e),
            Err(Halt::Race(why)) if out.retries < RETRIES => {
                log::debug!("read-only catch-up of {}: {why}; again", core.dir.display());
                out.retries += 1;
            }
            Err(Halt::Race(why) | Halt::Restart(why)) => {
                log::info!(
                    "read-only view of {}: {why}; reading the store again from scratch",
                    core.dir.display()
                );
                rebuild(core, f, &mut view)?;
                out.rebuilt = true;
                out.held_back = view
                    .shards
                    .iter()
                    .map(|s| s.pending.recs.len() as u64)
                    .sum();
                break;
            }
        }
    }
    out.visible_seq = view.visible;
    out.took = start.elapsed();
    Ok(out)
}

/// Replaces the view of `core` and its shards' states with a fresh load, swapped in
/// under every shard's write lock at once.
fn rebuild(core: &Core, f: &Follower, view: &mut View) -> Result<()> {
    let (fresh, states) = load_fresh(&core.dir, core.shards.len() as u32, &f.shape)?;
    let mut locks: Vec<_> = core.shards.iter().map(|s| s.state.write()).collect();
    for (lock, st) in locks.iter_mut().zip(states) {
        **lock = st;
    }
    drop(locks);
    *view = fresh;
    Ok(())
}

/// One attempt of a catch-up: reads `SEQSTATE`, then what every shard's files gained,
/// then applies the new visible prefix. Changes nothing when it stops with [`Halt`].
fn attempt(dir: &Path, view: &mut View, states: &[&RwLock<ShardState>]) -> Step<Added> {
    // Read before the listing: every record numbered up to its watermark was in the
    // files before it was written, so the reads below find each one (or the newer
    // record that let compaction drop it).
    let seqstate = manifest::read_seqstate(dir)?;
    if seqstate.void != view.seqstate.void
        || seqstate.aborted != view.seqstate.aborted
        || seqstate.watermark < view.seqstate.watermark
    {
        return Err(Halt::Restart(
            "the writer's recovery changed SEQSTATE's void ranges or aborted batches".into(),
        ));
    }
    let mut deltas = Vec::with_capacity(view.shards.len());
    for (i, sv) in view.shards.iter().enumerate() {
        deltas.push(gather::shard(&shard_dir(dir, i as u32), i as u32, sv)?);
    }
    let added = apply::round(view, states, &seqstate, deltas)?;
    view.seqstate = seqstate;
    Ok(added)
}
