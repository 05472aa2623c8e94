//! Opening a store: the lock, the manifest (creating a new store in an empty
//! directory), loading every shard in parallel, cutting the writes after a crash back to
//! a prefix (`recovery::find_cut`), and rebuilding the indexes; records only the commit
//! log held are written back into their shards first.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::commitlog::{self, CommitLog};
use crate::core::Core;
use crate::ctx::StoreCtx;
use crate::damage::Damage;
use crate::fsutil::Fs;
use crate::manifest;
use crate::recovery;
use crate::route::{Grouped, Router, GROUP_SHIFT};
use crate::segment::{SegKind, SegmentFile};
use crate::seq::SeqTracker;
use crate::shard::Shard;
use crate::{Error, Options, Result, SyncPolicy};

/// Runs `f` over `items` on up to the machine's parallelism, keeping order.
pub(crate) fn par_map<T: Send, R: Send>(
    items: Vec<T>,
    f: impl Fn(T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    par_map_with(items, |_: &mut (), t| f(t))
}

/// [`par_map`] with a state per worker thread, `S::default()` at first, that `f` gets
/// with every item the worker takes: buffers one item leaves for the next.
pub(crate) fn par_map_with<T: Send, R: Send, S: Default>(
    items: Vec<T>,
    f: impl Fn(&mut S, T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let n = items.len();
    let workers = std::thread::available_parallelism()
        .map(|p| p.get())
        .unwrap_or(2)
        .min(n.max(1));
    let slots: Vec<Mutex<Option<T>>> = items.into_iter().map(|t| Mutex::new(Some(t))).collect();
    let next = AtomicUsize::new(0);
    let mut done: Vec<(usize, Result<R>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut state = S::default();
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        if i >= n {
                            break;
                        }
                        // Each item is taken once.
                        if let Some(item) = slots[i].lock().take() {
                            out.push((i, f(&mut state, item)));
                        }
                    }
                    out
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    done.sort_unstable_by_key(|d| d.0);
    done.into_iter().map(|(_, r)| r).collect()
}

/// Directory of shard `i`.
pub(crate) fn shard_dir(dir: &Path, i: u32) -> PathBuf {
    dir.join("shards").join(format!("{i:04}"))
}

pub(crate) fn open_core(dir: &Path, opts: Options) -> Result<Core> {
    opts.validate()?;
    let fs = opts.fs();
    // A new store directory is made durable in its parent.
    for parent in fs.create_dirs(dir)? {
        fs.sync_dir(&parent)?;
    }
    if dir.join(crate::checkpoint::INCOMPLETE).exists() {
        return Err(Error::format(
            dir,
            "an interrupted checkpoint or backup (it holds CHECKPOINT-INCOMPLETE): make it again",
        ));
    }
    if !dir.join(manifest::MANIFEST).exists() {
        check_creatable(dir)?;
    }
    let lock = lock_store(dir)?;
    let manifest = read_or_create_manifest(&fs, dir, &opts)?;
    let nshards = manifest.shards;
    let mut seqstate = manifest::read_seqstate(dir)?;
    for i in 0..nshards {
        let d = shard_dir(dir, i);
        if !d.is_dir() {
            return Err(Error::corruption(&d, "shard directory is missing"));
        }
    }
    finish_drops(&fs, dir, nshards, &mut seqstate)?;
    // The commit log's frames: durable writes whose records may be missing from
    // their shards.
    let logged = commitlog::recover(dir, nshards)?;
    // Phase 1: load every shard's entries in parallel, put back what only the commit
    // log held, and settle the keys phase 2 cannot change.
    let shape = crate::index::Shape {
        hashed: opts.hash_index,
        numbered: opts.numbered.clone(),
    };
    // Each worker's record buffers serve every shard it loads (`LoadBuffers`).
    let loaded = par_map_with(
        (0..nshards).collect(),
        |bufs: &mut recovery::LoadBuffers, i| {
            let sdir = shard_dir(dir, i);
            let mut l = recovery::load(&fs, i, &sdir, bufs)?;
            let mut missing = l.missing(&logged.by_shard[i as usize], &seqstate);
            if !missing.is_empty() {
                recovery::write_replayed(&fs, i, &sdir, l.next_seg(), &mut missing)?;
                l = recovery::load(&fs, i, &sdir, bufs)?;
            }
            recovery::settle(&mut l, &seqstate, &shape, bufs);
            Ok(l)
        },
    )?;
    let next_seq = cut_to_prefix(&fs, dir, &loaded, &mut seqstate)?;
    let damage: Vec<Damage> = loaded
        .iter()
        .flat_map(|l| l.damage.iter().cloned())
        .collect();
    // Phase 3: rebuild each shard's index in parallel.
    let segment_size = opts.segment_size;
    let built = par_map(loaded, |l| {
        let (id, sdir) = (l.shard, l.dir.clone());
        let fs = &fs;
        recovery::build(l, &seqstate, segment_size, |seg| {
            SegmentFile::create(fs, &sdir, id, seg, SegKind::Data, next_seq)
        })
    })?;
    let mut shards = Vec::with_capacity(built.len());
    let mut to_seal = Vec::new();
    let mut disk = 0;
    for (i, b) in built.into_iter().enumerate() {
        disk += b.state.disk_bytes();
        to_seal.extend(b.to_seal.iter().map(|&s| (i as u32, s)));
        shards.push(Shard::new(
            i as u32,
            shard_dir(dir, i as u32),
            b.state,
            b.unsynced,
        ));
    }
    let seqs = SeqTracker::new(next_seq, seqstate);
    let ctx = StoreCtx::new(dir.to_owned(), opts, fs, shards.len(), seqs, disk, to_seal);
    let mut core = Core {
        router: Router::new(shards.len(), manifest.grouped),
        ctx,
        shards,
        open_damage: damage,
        log: None,
        extensions: Default::default(),
        _lock: Some(lock),
        follower: None,
    };
    // Records found in the segments after a crash may be in the page cache only, and
    // the log is about to forget them: they are made durable first.
    if logged.frames > 0 {
        core.flush()?;
    }
    let size = core.opts.commit_log_size;
    if core.opts.sync == SyncPolicy::Always && size > 0 {
        core.log = Some(CommitLog::start(&core.fs, dir, size, logged.max_gen)?);
    } else if logged.exists {
        commitlog::remove(&core.fs, dir)?;
    }
    Ok(core)
}

/// How long an open waits for the store's lock before it reports [`Error::Locked`].
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// Takes the store's lock (the file `LOCK`): one open store per directory. A lock held
/// by a moment is waited for, up to [`LOCK_WAIT`]: a process that starts a program
/// while it drops one open and opens the store again would otherwise find the lock
/// still held — the starting child shares the parent's open files (and so its lock)
/// from the fork until its exec closes them.
fn lock_store(dir: &Path) -> Result<File> {
    let lock_path = dir.join("LOCK");
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| Error::io(&lock_path, e))?;
    let start = std::time::Instant::now();
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(lock),
            Err(fs::TryLockError::WouldBlock) if start.elapsed() < LOCK_WAIT => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(fs::TryLockError::WouldBlock) => return Err(Error::Locked(dir.to_owned())),
            Err(fs::TryLockError::Error(e)) => return Err(Error::io(&lock_path, e)),
        }
    }
}

/// The store's manifest; a new store is created with the one `opts` describe.
fn read_or_create_manifest(fs: &Fs, dir: &Path, opts: &Options) -> Result<manifest::Manifest> {
    if dir.join(manifest::MANIFEST).exists() {
        let m = manifest::read_manifest(dir)?;
        if let Some(want) = opts.shards {
            if want != m.shards {
                return Err(Error::InvalidArgument(format!(
                    "store at {} has {} shards; the shard count is fixed at creation (asked for {want})",
                    dir.display(),
                    m.shards
                )));
            }
        }
        Ok(m)
    } else {
        // A new store routes the numbered rows it is created with by group.
        let m = manifest::Manifest {
            shards: opts.shards.unwrap_or(crate::options::DEFAULT_SHARDS),
            grouped: opts
                .numbered
                .iter()
                .map(|&region| Grouped {
                    region,
                    shift: GROUP_SHIFT,
                })
                .collect(),
        };
        create_store(fs, dir, &m)?;
        Ok(m)
    }
}

/// Phase 2 of an open: the writes newer than the watermark that survive must be a prefix
/// of the writes made, each batch whole (see `recovery::find_cut`); what is cut off is
/// recorded in `seqstate` (written if it changed). Returns the number of the next write.
fn cut_to_prefix(
    fs: &Fs,
    dir: &Path,
    loaded: &[recovery::Loaded],
    seqstate: &mut manifest::SeqState,
) -> Result<u64> {
    let mut seqs = Vec::new();
    for l in loaded {
        l.seqs_above(seqstate.watermark, &mut seqs);
    }
    let max_seq = loaded
        .iter()
        .map(|l| l.max_seq)
        .chain([seqstate.max_seq()])
        .max()
        .unwrap_or(0);
    let lost_records = loaded.iter().any(|l| l.lost_records);
    let cut = recovery::find_cut(seqs, seqstate, max_seq, lost_records);
    // Whether `SEQSTATE` changed (written once, below).
    let mut seqstate_changed = cut != recovery::Cut::default();
    if seqstate_changed {
        for s in &cut.aborted {
            log::warn!("batch {s} was only partly written before damage; ignoring all of it");
        }
        for &(lo, hi) in &cut.void {
            if lost_records {
                log::warn!("writes {lo}..={hi} are missing after damage");
            } else {
                log::warn!(
                    "write {lo} was lost in a crash; ignoring the writes after it ({lo}..={hi}) \
                     so that the store holds a prefix of its writes"
                );
            }
            seqstate.add_void(lo, hi);
        }
        seqstate.aborted.extend(&cut.aborted);
        seqstate.aborted.sort_unstable();
    }
    // Every segment was created with the number the next write would take then; new
    // writes must not be numbered below any of them, even when the writes numbered
    // after a segment's creation were lost: a compaction output holds copies numbered
    // below its creation, and a tombstone numbered below that would be judged to need
    // no protection from it (`compaction::Other::may_hold_older`), be dropped, and let
    // the copy bring the deleted key back. The numbers skipped are void, so that a
    // later crash does not take them for lost writes.
    let max_created = loaded.iter().map(|l| l.max_created()).max().unwrap_or(0);
    let mut next_seq = max_seq + 1;
    if max_created > next_seq {
        log::warn!(
            "writes {next_seq}..{max_created} were lost in a crash after segments numbered \
             up to {max_created} were made; new writes are numbered from {max_created}"
        );
        seqstate.add_void(next_seq, max_created - 1);
        seqstate_changed = true;
        next_seq = max_created;
    }
    if seqstate_changed {
        manifest::write_seqstate(fs, dir, seqstate)?;
    }
    Ok(next_seq)
}

/// Removes the segments a crash left that were being dropped whole when it happened
/// (`SeqState::dropped`: judged together, their records all dead and below the
/// watermark), so that none of their dead records is loaded without the records that
/// superseded it; then records that none is left. A segment is removed only if its
/// header names the creation number recorded: a later segment that reused the id was
/// created after every record of the dropped one, so its number is higher.
fn finish_drops(
    fs: &Fs,
    dir: &Path,
    nshards: u32,
    seqstate: &mut manifest::SeqState,
) -> Result<()> {
    if seqstate.dropped.is_empty() {
        return Ok(());
    }
    let mut touched = Vec::new();
    for &(shard, seg, created) in &seqstate.dropped {
        if shard >= nshards {
            continue;
        }
        let sdir = shard_dir(dir, shard);
        let path = crate::segment::seg_path(&sdir, seg);
        if !path.exists() {
            continue;
        }
        let same = matches!(
            SegmentFile::open(&path, shard, seg)?,
            Some((f, _, None)) if f.created_seq == created
        );
        if same {
            log::warn!(
                "removing {}: it was being dropped (all its records dead) when the store stopped",
                path.display()
            );
            fs.remove(&path)?;
            fs.remove(&crate::segment::hint_path(&sdir, seg))?;
            touched.push(sdir);
        }
    }
    touched.dedup();
    for d in &touched {
        fs.sync_dir(d)?;
    }
    seqstate.dropped.clear();
    manifest::write_seqstate(fs, dir, seqstate)
}

/// A new store may be created only in an empty directory (or one left by a creation
/// that crashed before writing its manifest).
fn check_creatable(dir: &Path) -> Result<()> {
    let has_data = fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok())
        .any(|e| {
            let name = e.file_name();
            name != "LOCK" && name != "shards" && !name.to_string_lossy().ends_with(".tmp")
        });
    if has_data {
        return Err(Error::format(
            dir,
            "directory is not empty and holds no cairn store (no CAIRN manifest)",
        ));
    }
    Ok(())
}

fn create_store(fs: &Fs, dir: &Path, m: &manifest::Manifest) -> Result<()> {
    let n = m.shards;
    check_creatable(dir)?;
    let shards = dir.join("shards");
    if shards.exists() {
        // A crash during creation may leave shard directories; they must be empty.
        for e in fs::read_dir(&shards)
            .map_err(|e| Error::io(&shards, e))?
            .flatten()
        {
            let non_empty = fs::read_dir(e.path())
                .map(|mut d| d.next().is_some())
                .unwrap_or(true);
            if non_empty {
                return Err(Error::corruption(
                    dir.join(manifest::MANIFEST),
                    "manifest missing but shard directories hold data",
                ));
            }
        }
    }
    for i in 0..n {
        fs.create_dirs(&shard_dir(dir, i))?;
    }
    fs.sync_dir(&shards)?;
    fs.sync_dir(dir)?;
    manifest::write_manifest(fs, dir, m)
}
