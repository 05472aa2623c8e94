//! `cairn fs-bench`: the TableFS/GIGA+ metadata experiment (the huge-directory create run of the TableFS and GIGA+ papers). Creates N
//! zero-length files in one directory, then stats every file in random order, lists the
//! directory and unlinks every file; on the cairn library (`cairn::fs`), on cairn
//! mounted through FUSE (`cairn mount`, in a child process, through io_uring or
//! /dev/fuse) and on kernel file systems (fresh ext4, XFS and btrfs images, `fsimage`),
//! in one run. The create rate is sampled over the run (--intervals) so that a slowdown
//! as the directory grows shows. `fsprocs` and `fseveryday` add the several-process
//! and everyday-tool phases.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;

use cairn_fs::{Fs, ROOT};

use crate::{fsdata, fsplot};

/// Long description of `cairn fs-bench` (its `--help`).
pub const ABOUT: &str = "\
Create N zero-length files in one directory (default 1,000,000; --large 10,000,000),
sampling the create rate over the run; then stat every file in random order, list the
directory and unlink every file. Targets (--targets): lib (cairn::fs in this process),
fuse (cairn mounted by a child `cairn mount` as a user starts it: FUSE over io_uring
where the kernel offers it), fuse-classic (the same through /dev/fuse reads), null (a
null FUSE server: cairn's FUSE layer answering every request at once, storing nothing,
the floor of any FUSE file system; creates, stats and unlinks only); cluster (three
`cairn serve` on loopback with their defaults, TLS and --sync always, mounted by a child
`cairn mount --cluster`; the requests the mount sent to the servers per operation are
reported too); bindfs (a fresh
ext4 image reached through `bindfs`, a FUSE passthrough people use; skipped where bindfs
or the image is missing); passthrough_hp (the same through libfuse's passthrough_hp over
io_uring, built by scripts/build-peers.sh --passthrough-hp; it keeps a descriptor per
inode, so it is skipped where --files passes the open-file limit it can be given); fuse, fuse-classic, null and cluster are skipped with a message where FUSE is
unavailable (no usable /dev/fuse, no privilege to mount, the mount refused with EPERM/EACCES; any other failure of the mount fails the
run); plain, xfs, btrfs (fresh loop-mounted ext4, XFS and btrfs images made in --dir
with default options, as root; where that can't be done plain is a directory under
--dir, said in the report, and xfs and btrfs are skipped). Everything is synced to disk
before each target, so none pays for another's writeback. For the fuse targets the FUSE
requests per operation, and the transport that served them, are reported too.

--time-limit cairn stops each kernel target's creates after the wall time cairn needed
(as the TableFS paper's 100-million-file run did) and --phase-limit SECS its stats and unlinks;
the rates are then over the files reached. The library and mount targets report their
process's memory after the creates (resident, anonymous, peak) and the library its index
bytes per file and the time to close and reopen the store (the later phases run on the
reopened store).

--procs 1,2,4 repeats creates, stats and unlinks from several processes at once into one
shared directory; --everyday times tar x, find, du, git add -A, git status and rm -r of a
50,000-file tree and dd of 1 GiB in and out on the fuse and kernel targets.

Nothing is pinned by default: the scheduler places the threads, as it does for a user.
With --pin the thread that makes the calls runs on one CPU for every target, and so does
the FUSE server's thread: each FUSE request wakes the server and its reply wakes the
caller, and a wakeup across CPUs can cost far more than the request itself on a VM, so
the pinned figure shows the mount without that cost. No user's mount runs pinned; say
which one a figure is.

Writes results.json, results.md and the plots create-rate.png (creates/s over time, a
line per target, log scale), create-rate-by-files.png (against files created), and with
--procs or --everyday shared-directory.png and everyday.png, to --out. --large takes
about an hour and 25 GB of free memory for the kernel's caches of the fuse and kernel
targets (which the kernel shrinks when it needs to).";

mod cluster;
mod memory;
mod mount;
mod null;
mod phases;
mod report;
mod targets;

use memory::Memory;
use mount::{ChildMount, FuseStats};
pub use null::{serve_null, NULL_COMMAND};
use phases::{run_target, Phases};
use report::markdown;
use targets::{Lib, Posix, ME};

/// Options of `cairn fs-bench` (a clap [`Args`], flattened into the `fs-bench`
/// subcommand).
#[derive(Debug, Args)]
pub struct FsBenchArgs {
    /// Files to create [default: 1000000; --large 10000000]
    #[arg(long, conflicts_with = "large")]
    files: Option<u64>,
    /// 10,000,000 files
    #[arg(long)]
    large: bool,
    /// Work directory (on the disk to measure); emptied of what the run creates
    #[arg(long, default_value = "./cairn-fs-bench")]
    dir: PathBuf,
    /// Targets, comma-separated: lib, fuse (the mount as `cairn mount` starts it: FUSE
    /// over io_uring where the kernel offers it), fuse-classic (the mount through
    /// /dev/fuse reads, `--transport classic`), null (the null FUSE server: cairn's FUSE
    /// layer answering every request at once, the floor), cluster (three `cairn serve`
    /// with their defaults on loopback, mounted with `cairn mount --cluster`), bindfs
    /// (a fresh ext4 image through bindfs, a FUSE passthrough), passthrough_hp (the
    /// same through libfuse's passthrough_hp over io_uring), plain (ext4), xfs,
    /// btrfs (fresh loop-mounted images; see --plain-fs)
    #[arg(long, value_delimiter = ',', default_value = "lib,fuse,plain")]
    targets: Vec<String>,
    /// Rate samples over the create phase
    #[arg(long, default_value_t = 50)]
    intervals: u64,
    /// Directory for results.json, results.md and the plots
    #[arg(long, value_name = "DIR", default_value = "fs-bench-out")]
    out: PathBuf,
    /// Also write the results as JSON to this file
    #[arg(long)]
    json: Option<PathBuf>,
    /// Pin the calling thread and the FUSE server's thread to one CPU (not what a user's
    /// mount does; the default leaves them to the scheduler)
    #[arg(long, conflicts_with = "no_pin")]
    pin: bool,
    /// Leave the threads to the scheduler (the default; kept for older commands)
    #[arg(long, hide = true)]
    no_pin: bool,
    /// Also large files through each target (after the metadata phases; --files 0 for
    /// these only): write one file of each --data-sizes and fsync it, read it back
    #[arg(long)]
    data: bool,
    /// Also creates, stats and unlinks from this many processes at once into one shared
    /// directory (comma-separated counts, e.g. 1,2,4; --files in all) on every target but
    /// lib
    #[arg(long, value_delimiter = ',')]
    procs: Vec<u64>,
    /// Also everyday tools on every target but lib: tar x, find, du, git add -A, git
    /// status, rm -r of a tree of 50,000 small files, dd of 1 GiB in and out (cold)
    #[arg(long)]
    everyday: bool,
    /// Directories of 100 files in the --everyday tree (tests use a small one)
    #[arg(long, default_value_t = crate::fseveryday::TREE_DIRS, hide = true)]
    everyday_dirs: u64,
    /// MiB of the --everyday dd file (tests use a small one)
    #[arg(long, default_value_t = 1024, hide = true)]
    everyday_dd_mib: u64,
    /// The plain target's file system: `image` (a fresh loop-mounted ext4 image made
    /// in --dir; needs root and mkfs.ext4), `dir` (a directory of --dir's file system,
    /// however aged), `auto` (image where it can be made)
    #[arg(long, value_name = "KIND", default_value = "auto")]
    plain_fs: String,
    /// Sizes of the --data files, MiB
    #[arg(long, value_delimiter = ',', default_value = "8,64,1024")]
    data_sizes: Vec<u64>,
    /// With the --data files (implied): read each again after dropping the page cache
    /// (as root drop_caches, else posix_fadvise(DONTNEED); the report says which)
    #[arg(long)]
    cold: bool,
    /// When a target's create phase stops: `none` (after every file), `cairn` (the
    /// kernel targets plain, xfs and btrfs stop after the wall time the slowest cairn
    /// target before them needed, as the TableFS paper's 100-million-file run did), or a number
    /// of seconds (every target). A stopped target's other phases run over the files it
    /// created.
    #[arg(long, value_name = "LIMIT", default_value = "none")]
    time_limit: String,
    /// Stop the stat (random order) and unlink phases of each target after this many
    /// seconds; their rates are then over the files they reached (at 100 million files
    /// a store far larger than the page cache makes each random stat a disk read)
    #[arg(long, value_name = "SECS")]
    phase_limit: Option<f64>,
}

/// When the create phases stop (`--time-limit`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum TimeLimit {
    None,
    /// The kernel targets stop after the longest create phase of the cairn targets
    /// run before them.
    Cairn,
    Secs(f64),
}

impl TimeLimit {
    fn parse(s: &str) -> Result<TimeLimit> {
        match s {
            "none" => Ok(TimeLimit::None),
            "cairn" => Ok(TimeLimit::Cairn),
            _ => match s.parse::<f64>() {
                Ok(v) if v > 0.0 && v.is_finite() => Ok(TimeLimit::Secs(v)),
                _ => bail!("--time-limit is none, cairn or a number of seconds > 0, not {s:?}"),
            },
        }
    }

    /// The limit of `target`'s create phase after the `earlier` runs.
    fn of(self, target: &str, earlier: &[TargetRun]) -> Option<Duration> {
        match self {
            TimeLimit::None => None,
            TimeLimit::Secs(s) => Some(Duration::from_secs_f64(s)),
            TimeLimit::Cairn if is_kernel(target) => earlier
                .iter()
                .filter(|r| !is_kernel(&r.target))
                .map(|r| r.create_secs)
                .reduce(f64::max)
                .map(Duration::from_secs_f64),
            TimeLimit::Cairn => None,
        }
    }
}

/// Whether `target` is a kernel file system (not cairn).
fn is_kernel(target: &str) -> bool {
    matches!(target, "plain" | "xfs" | "btrfs")
}

/// The create rate at the end of one interval of the create phase.
#[derive(Debug, Serialize)]
struct Sample {
    /// Seconds since the first create.
    seconds: f64,
    /// Files created so far.
    files: u64,
    /// Creates per second over the interval.
    rate: f64,
}

/// Results of one target.
#[derive(Debug, Serialize)]
struct TargetRun {
    target: String,
    /// Files created (fewer than asked when `stopped_after` is set).
    files: u64,
    /// The create phase was stopped after this many seconds by --time-limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    stopped_after: Option<f64>,
    /// Creates per second over the whole create phase.
    create_rate: f64,
    /// The create rate over each interval.
    create_series: Vec<Sample>,
    /// Creates per second over the first and the last 10% of the creates.
    first_10pct_rate: f64,
    last_10pct_rate: f64,
    stat_rate: f64,
    list_rate: f64,
    unlink_rate: f64,
    /// Seconds of each phase.
    create_secs: f64,
    stat_secs: f64,
    list_secs: f64,
    unlink_secs: f64,
    /// fuse: FUSE requests per file by phase and kind (`create` → `LOOKUP` → 1.0).
    #[serde(skip_serializing_if = "Option::is_none")]
    fuse_requests: Option<BTreeMap<String, BTreeMap<String, f64>>>,
    /// cluster: the requests the mount sent to the servers per file, by phase and
    /// kind (`create` → `MAKE` → 1.0).
    #[serde(skip_serializing_if = "Option::is_none")]
    sent_requests: Option<BTreeMap<String, BTreeMap<String, f64>>>,
    /// fuse: how the requests travelled: `io_uring` when the mount served most of
    /// them through its rings, else `/dev/fuse`.
    #[serde(skip_serializing_if = "Option::is_none")]
    transport: Option<String>,
    /// lib and fuse: the serving process's memory after the create phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_after_create: Option<Memory>,
    /// lib: the engine's index (ordered and hash sides, blooms) per file created, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    index_bytes_per_file: Option<f64>,
    /// lib: seconds to close the store after the creates, and to open it again (the
    /// stats, listing and unlinks then run on the reopened store), and the memory after
    /// the open.
    #[serde(skip_serializing_if = "Option::is_none")]
    close_secs: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reopen_secs: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_after_reopen: Option<Memory>,
    /// lib and fuse: the highest anonymous memory (`RssAnon`) of the serving process
    /// over the creates and the reopen, sampled every 100 ms, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    peak_anon_bytes: Option<u64>,
    /// Stats and unlinks made (fewer than `files` when --phase-limit stopped them).
    stats_done: u64,
    unlinks_done: u64,
}

/// What a run does beside each target's single-process phases, and what it found: the
/// kernel targets' file systems (what `--plain-fs` asked for, and what each was), the
/// several-process phases (`--procs`) and the everyday tools (`--everyday`) with their
/// results.
struct Extras {
    kind: String,
    why_not: Option<String>,
    description: Option<String>,
    /// The file systems of the xfs and btrfs targets, by target.
    others: Vec<(String, String)>,
    /// Targets asked for and not run here, and why (also in the report, so that a
    /// missing row is explained where the rows are read).
    skipped: Vec<(String, String)>,
    procs: Vec<u64>,
    procs_runs: Vec<crate::fsprocs::ProcsRun>,
    /// `--everyday`: the tarball and its number of files; the dd size, MiB; the steps
    /// measured.
    everyday: Option<(PathBuf, u64)>,
    dd_mib: u64,
    everyday_steps: Vec<crate::fseveryday::Step>,
}

impl Extras {
    /// Target `target` is not run here, for `why`: said now and in the report.
    fn skip(&mut self, target: &str, why: String) {
        println!("{target}: skipped, {why}");
        self.skipped.push((target.to_string(), why));
    }

    /// The everyday tools and the several-process phases on `target`, in new
    /// directories of `root`.
    fn run_on(&mut self, target: &str, root: &Path, n: u64) -> Result<()> {
        // The null server stores nothing for the everyday tools to read back.
        let everyday = self.everyday.as_ref().filter(|_| target != "null");
        if let Some((tar, files)) = everyday {
            let steps = crate::fseveryday::run(target, root, tar, *files, self.dd_mib)?;
            for s in &steps {
                println!("{target}, {}: {:.2} s", s.step, s.seconds);
            }
            self.everyday_steps.extend(steps);
        }
        for &p in &self.procs {
            let d = root.join(format!("shared-{p}"));
            std::fs::create_dir(&d)?;
            let r = crate::fsprocs::run(target, &d, p, n)?;
            println!(
                "{target}, {p} processes: create {:.0}/s, stat {:.0}/s, unlink {:.0}/s",
                r.create_rate, r.stat_rate, r.unlink_rate
            );
            self.procs_runs.push(r);
            std::fs::remove_dir(&d)?;
        }
        Ok(())
    }
}

/// How the running binary opens a store: it runs its argument (an open) inside what the
/// binary sets up for opens. The `cairn` binary allows transparent huge pages only while
/// a store opens (its `allocator` module), as its `mount` does; the `lib` target's reopen
/// goes through this, so that it times the open a user's command does.
pub type OpenWith = fn(&mut dyn FnMut());

/// A target's metadata run (none with `--files 0`, or when it was skipped) and its
/// large-file runs.
type TargetResult = (Option<TargetRun>, Vec<fsdata::DataRun>);

/// Runs one target in `work` (created and removed here).
fn run_one(
    target: &str,
    work: &Path,
    phases: &Phases,
    data: &Data,
    extras: &mut Extras,
    open_with: OpenWith,
) -> Result<TargetResult> {
    let _ = std::fs::remove_dir_all(work);
    std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    // Start from a clean page cache: none of an earlier target's writeback.
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    match target {
        "lib" => run_lib(work, phases, data, open_with),
        "fuse" | "fuse-classic" | "null" | "cluster" => {
            run_fuse(target, work, phases, data, extras)
        }
        "plain" | "xfs" | "btrfs" | "bindfs" | "passthrough_hp" => {
            run_kernel(target, work, phases, data, extras)
        }
        other => bail!("unknown target {other:?} ({TARGETS})"),
    }
}

/// The names of the targets.
const TARGETS: &str =
    "lib, fuse, fuse-classic, null, cluster, plain, xfs, btrfs, bindfs, passthrough_hp";

/// The `lib` target: `cairn::fs` in this process, on a store in `work`.
fn run_lib(work: &Path, phases: &Phases, data: &Data, open_with: OpenWith) -> Result<TargetResult> {
    let fs = Fs::open(work.join("store")).map_err(std::io::Error::from)?;
    let dir = fs.mkdir(&ME, ROOT, b"d", 0o755)?.ino;
    let mut t = Lib {
        fs,
        dir,
        path: work.join("store"),
        open_with,
    };
    let r = (phases.n > 0)
        .then(|| run_target("lib", &mut t, phases, None))
        .transpose()?;
    let store = work.join("store");
    let data_runs = data.run("lib", &fsdata::DataTarget::Lib { fs: &t.fs, store })?;
    Ok((r, data_runs))
}

/// The `fuse` and `fuse-classic` targets: a store in `work` mounted by a child
/// `cairn mount`; `null`: the null FUSE server in a child (`null.rs`; no list, data
/// or everyday phases, which need stored files). Skipped where FUSE is unavailable.
fn run_fuse(
    target: &str,
    work: &Path,
    phases: &Phases,
    data: &Data,
    extras: &mut Extras,
) -> Result<TargetResult> {
    let transport = if target == "fuse-classic" {
        "classic"
    } else {
        "auto"
    };
    let mp = work.join("mnt");
    std::fs::create_dir_all(&mp)?;
    let stats = work.join("fuse-requests");
    if let Some(why) = cairn_fuse::unavailable() {
        extras.skip(target, format!("FUSE is unavailable here: {why}"));
        return Ok((None, Vec::new()));
    }
    // The cluster target's servers outlive its mount (dropped after it).
    let mut servers = None;
    let started = match target {
        "null" => ChildMount::start_null(&mp, &stats),
        "cluster" => cluster::start(work).and_then(|c| {
            let m = ChildMount::start_cluster(&c.file, &mp, &stats);
            servers = Some(c);
            m
        }),
        _ => ChildMount::start(&work.join("store"), &mp, &stats, transport),
    };
    let m = match started {
        // Only a refusal for lack of privilege means FUSE can't be used here; any other
        // failure of the mount is a failure of the run.
        Err(e) if cairn_fuse::is_refusal(&format!("{e:#}")) => {
            extras.skip(
                target,
                format!("FUSE is unavailable here: the mount was refused: {e:#}"),
            );
            return Ok((None, Vec::new()));
        }
        Err(e) => return Err(e.context("fuse: the mount failed")),
        Ok(m) => m,
    };
    let n = phases.n;
    let d = mp.join("d");
    std::fs::create_dir(&d)?;
    let s = FuseStats {
        pid: m.child.id() as i32,
        path: stats,
    };
    let r = (n > 0)
        .then(|| {
            let mut t = Posix {
                dir: d,
                server: Some(s.pid),
            };
            run_target(target, &mut t, phases, Some(&s))
        })
        .transpose()
        .and_then(|r| {
            extras.run_on(target, &mp, n)?;
            Ok(r)
        });
    let t = fsdata::DataTarget::Posix {
        dir: mp.clone(),
        store: servers.is_none().then(|| work.join("store")),
    };
    let d = r.and_then(|r| {
        let runs = if target == "null" {
            Vec::new()
        } else {
            data.run(target, &t)?
        };
        Ok((r, runs))
    });
    let via = s.read();
    drop(m);
    drop(servers);
    let (mut r, data_runs) = d?;
    if let (Some(r), Some(c)) = (r.as_mut(), via) {
        let get = |k: &str| c.get(&format!("{}{k}", cairn_fuse::TRANSPORT_PREFIX));
        let ring = get("URING").copied().unwrap_or(0);
        let dev = get("DEV").copied().unwrap_or(0);
        r.transport = Some(if ring > dev { "io_uring" } else { "/dev/fuse" }.into());
    }
    Ok((r, data_runs))
}

/// The kernel targets `plain`, `xfs` and `btrfs`: a fresh loop-mounted image made in
/// `work` where one can be made (else, for plain, a directory of `work`'s file system);
/// `bindfs` and `passthrough_hp`: a fresh ext4 image reached through that FUSE
/// passthrough (skipped without it, or, for passthrough_hp, with more files than the
/// open-file limit allows it: it keeps a descriptor per inode).
fn run_kernel(
    target: &str,
    work: &Path,
    phases: &Phases,
    data: &Data,
    extras: &mut Extras,
) -> Result<TargetResult> {
    let n = phases.n;
    let bytes = (data.sizes.iter().sum::<u64>() * 3 / 2 + n * 2048 + (2 << 30)).max(4 << 30);
    let kind = match target {
        "plain" | "bindfs" | "passthrough_hp" => "ext4",
        t => t,
    };
    let peer = mount::Peer::of(target);
    // The everyday tree's inodes need descriptors too: its files, and as many loose
    // objects once `git add -A` has run (over the limit, passthrough_hp's closes fail
    // with EBADF and git with them).
    let everyday = extras.everyday.as_ref().map_or(0, |(_, files)| 2 * *files);
    if let Some(why) = peer.and_then(|p| p.unavailable(n.max(everyday))) {
        extras.skip(target, why);
        return Ok((None, Vec::new()));
    }
    let make = || crate::fsimage::FreshImage::make(work, kind, bytes, n);
    let image = match (target, extras.kind.as_str()) {
        ("plain", "dir") => None,
        ("plain", "image") => Some(make()?),
        ("plain", _) => match crate::fsimage::unavailable(kind) {
            None => Some(make()?),
            Some(why) => {
                extras.why_not = Some(why);
                None
            }
        },
        _ => match crate::fsimage::unavailable(kind) {
            None => Some(make()?),
            Some(why) => {
                extras.skip(target, format!("no fresh {kind} image here: {why}"));
                return Ok((None, Vec::new()));
            }
        },
    };
    let description = match &image {
        Some(i) => i.description.clone(),
        None => format!(
            "a directory on {} (not a fresh file system: {})",
            file_system_of(work),
            extras.why_not.as_deref().unwrap_or("--plain-fs dir")
        ),
    };
    if target == "plain" {
        extras.description = Some(description);
    } else {
        let d = peer.map_or(description.clone(), |p| p.describe(&description));
        extras.others.push((target.to_string(), d));
    }
    let root = image.as_ref().map_or(work, |i| i.path());
    // bindfs, passthrough_hp: the fresh image reached through a mount of it.
    let bind = peer
        .map(|p| mount::PeerMount::mount(p, root, &work.join(target)))
        .transpose()?;
    let root = bind.as_ref().map_or(root, |b| b.mp.as_path());
    let d = root.join("d");
    std::fs::create_dir(&d)?;
    let mut t = Posix {
        dir: d,
        server: None,
    };
    let r = (n > 0)
        .then(|| run_target(target, &mut t, phases, None))
        .transpose()?;
    extras.run_on(target, root, n)?;
    let t = fsdata::DataTarget::Posix {
        dir: root.to_path_buf(),
        store: None,
    };
    let data_runs = data.run(target, &t)?;
    drop(bind);
    drop(image);
    Ok((r, data_runs))
}

/// The large-file phase asked for: sizes in bytes (none: no phase), and cold reads.
struct Data {
    sizes: Vec<u64>,
    cold: bool,
}

impl Data {
    fn run(&self, label: &str, t: &fsdata::DataTarget<'_>) -> Result<Vec<fsdata::DataRun>> {
        if self.sizes.is_empty() {
            return Ok(Vec::new());
        }
        fsdata::run(label, t, &self.sizes, self.cold)
    }
}

/// The file system `dir` is on, by its `statfs` type ("ext4, or ext2/ext3", "xfs"…).
fn file_system_of(dir: &Path) -> String {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return "unknown file system".into();
    };
    // SAFETY: `statfs` is plain data, for which all zeroes is a valid value; statfs(2)
    // fills it for a NUL-terminated path that outlives the call.
    let (rc, st) = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        (libc::statfs(c.as_ptr(), &mut st), st)
    };
    if rc != 0 {
        return "unknown file system".into();
    }
    match st.f_type as u64 {
        0xEF53 => "ext4, or ext2/ext3".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        0x0102_1994 => "tmpfs".into(),
        0x794C_7630 => "overlayfs".into(),
        0x2FC1_2FC1 => "zfs".into(),
        0x6573_5546 => "a FUSE file system".into(),
        other => format!("file system type {other:#x}"),
    }
}

/// What a run does, from its arguments (checked).
struct Plan {
    /// Files of the metadata phases.
    n: u64,
    data: Data,
    /// The CPU the calling thread and the FUSE server run on (--pin).
    pin: Option<usize>,
    time_limit: TimeLimit,
    phase_limit: Option<Duration>,
}

impl Plan {
    /// Checks `args`, makes the work and output directories, says what is pinned.
    fn of(args: &FsBenchArgs) -> Result<Plan> {
        let n = args
            .files
            .unwrap_or(if args.large { 10_000_000 } else { 1_000_000 });
        let data = Data {
            sizes: if args.data || args.cold {
                args.data_sizes.iter().map(|m| m << 20).collect()
            } else {
                Vec::new()
            },
            cold: args.cold,
        };
        if data.sizes.contains(&0) {
            bail!("--data-sizes must be at least 1 MiB each");
        }
        if n == 0 && data.sizes.is_empty() {
            bail!("--files must be at least 1 (0 only with --data or --cold)");
        }
        if args.intervals == 0 {
            bail!("--intervals must be at least 1");
        }
        for t in &args.targets {
            if !TARGETS.split(", ").any(|k| k == t) {
                bail!("unknown target {t:?} ({TARGETS})");
            }
        }
        std::fs::create_dir_all(&args.dir)
            .with_context(|| format!("creating {}", args.dir.display()))?;
        std::fs::create_dir_all(&args.out)
            .with_context(|| format!("creating {}", args.out.display()))?;
        // The CPU this thread runs on now (the FUSE server joins it).
        // SAFETY: sched_getcpu has no preconditions.
        let pin = args
            .pin
            .then(|| unsafe { libc::sched_getcpu() }.max(0) as usize);
        match pin {
            Some(cpu) => eprintln!(
                "the calling thread and the FUSE server run on CPU {cpu} (--pin; without it: anywhere)"
            ),
            None => eprintln!("threads not pinned"),
        }
        if !["auto", "image", "dir"].contains(&args.plain_fs.as_str()) {
            bail!("--plain-fs is auto, image or dir, not {:?}", args.plain_fs);
        }
        let time_limit = TimeLimit::parse(&args.time_limit)?;
        let phase_limit = match args.phase_limit {
            Some(s) if s > 0.0 && s.is_finite() => Some(Duration::from_secs_f64(s)),
            Some(s) => bail!("--phase-limit takes seconds > 0, not {s}"),
            None => None,
        };
        if args.procs.contains(&0) {
            bail!("--procs takes process counts of at least 1");
        }
        Ok(Plan {
            n,
            data,
            pin,
            time_limit,
            phase_limit,
        })
    }
}

impl Extras {
    /// Nothing found yet; with --everyday, the tree's tarball made in `--dir`.
    fn new(args: &FsBenchArgs) -> Result<Extras> {
        let mut extras = Extras {
            kind: args.plain_fs.clone(),
            why_not: None,
            description: None,
            others: Vec::new(),
            skipped: Vec::new(),
            procs: args.procs.clone(),
            procs_runs: Vec::new(),
            everyday: None,
            dd_mib: args.everyday_dd_mib.max(1),
            everyday_steps: Vec::new(),
        };
        if args.everyday {
            extras.everyday = Some(
                crate::fseveryday::make_tarball(&args.dir, args.everyday_dirs.max(1))
                    .context("making the everyday tree")?,
            );
        }
        Ok(extras)
    }
}

/// `cairn fs-bench`: runs every target, prints the results as Markdown and writes them
/// and the plots to `--out`. The fuse target runs `EXE mount STORE MOUNTPOINT` with the
/// running executable (see the crate documentation). `allocator` says which memory
/// allocator this binary uses, for the report; `open_with` is how it opens a store.
pub fn run(args: &FsBenchArgs, allocator: &str, open_with: OpenWith) -> Result<()> {
    let plan = Plan::of(args)?;
    let mut extras = Extras::new(args)?;
    let mut runs = Vec::new();
    let mut data_runs = Vec::new();
    for target in &args.targets {
        let work = args.dir.join(format!("{target}-{}", std::process::id()));
        let phases = Phases {
            n: plan.n,
            intervals: args.intervals,
            pin: plan.pin,
            limit: plan.time_limit.of(target, &runs),
            phase_limit: plan.phase_limit,
        };
        if let Some(l) = phases.limit {
            eprintln!(
                "{target}: creates stop after {:.0} s (--time-limit {})",
                l.as_secs_f64(),
                args.time_limit
            );
        }
        let r = run_one(target, &work, &phases, &plan.data, &mut extras, open_with);
        let _ = std::fs::remove_dir_all(&work);
        let (r, d) = r?;
        runs.extend(r);
        data_runs.extend(d);
    }
    let plain_fs = extras
        .description
        .clone()
        .unwrap_or_else(|| file_system_of(&args.dir));
    let results = Results {
        plan: &plan,
        runs: &runs,
        data_runs: &data_runs,
        extras: &extras,
        plain_fs: &plain_fs,
    };
    let md = results.markdown(allocator);
    if let Some((tar, _)) = &extras.everyday {
        let _ = std::fs::remove_file(tar);
    }
    let mut written = results.write(args, &md)?;
    results.plot(args, &mut written)?;
    let mut out = std::io::stdout().lock();
    out.write_all(md.as_bytes())?;
    let w: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
    writeln!(out, "\nwritten: {}", w.join(", "))?;
    Ok(())
}

/// Everything a run found, to report.
struct Results<'a> {
    plan: &'a Plan,
    runs: &'a [TargetRun],
    data_runs: &'a [fsdata::DataRun],
    extras: &'a Extras,
    /// What the plain target's file system was.
    plain_fs: &'a str,
}

impl Results<'_> {
    /// The report: the metadata phases, the targets skipped, the several-process phases,
    /// the everyday tools, the large files.
    fn markdown(&self, allocator: &str) -> String {
        let (n, extras, plain_fs) = (self.plan.n, self.extras, self.plain_fs);
        let mut md = if n > 0 {
            let mut md = markdown(n, self.runs, plain_fs, allocator);
            for (t, d) in &extras.others {
                md.push_str(&format!("- {t}: {d}\n"));
            }
            md.push_str(&match self.plan.pin {
                Some(cpu) => format!(
                    "\nthe calling thread and the FUSE server's thread pinned to CPU {cpu} (--pin): \
                     not how a user's mount runs\n"
                ),
                None => "\nnothing pinned: the scheduler placed the threads, as for a user\n".into(),
            });
            md
        } else {
            String::new()
        };
        // Targets asked for and skipped, with or without a metadata run (`--files 0`).
        md.push_str(&report::skipped(&extras.skipped));
        if !extras.procs_runs.is_empty() {
            md.push_str(&crate::fsprocs::markdown(&extras.procs_runs));
        }
        if let Some((_, files)) = &extras.everyday {
            md.push_str(&crate::fseveryday::markdown(&extras.everyday_steps, *files));
        }
        if !self.data_runs.is_empty() {
            md.push_str(&fsdata::markdown(self.data_runs, self.plan.data.cold));
            md.push_str(&format!("plain: {plain_fs}; not pinned\n"));
        }
        md
    }

    /// Writes results.md and results.json to `--out` (and the JSON to `--json`): the
    /// files written to `--out`.
    fn write(&self, args: &FsBenchArgs, md: &str) -> Result<Vec<PathBuf>> {
        let extras = self.extras;
        let json = serde_json::to_vec_pretty(&serde_json::json!({
            "pinned_cpu": self.plan.pin,
            "plain_fs": extras.description,
            "other_fs": extras.others,
            "skipped": extras.skipped,
            "shared_directory": extras.procs_runs,
            "everyday": extras.everyday_steps,
            "metadata": self.runs,
            "data": self.data_runs,
        }))?;
        let mut written = Vec::new();
        for (name, bytes) in [("results.md", md.as_bytes()), ("results.json", &json)] {
            let p = args.out.join(name);
            std::fs::write(&p, bytes).with_context(|| format!("writing {}", p.display()))?;
            written.push(p);
        }
        if let Some(p) = &args.json {
            std::fs::write(p, &json).with_context(|| format!("writing {}", p.display()))?;
        }
        Ok(written)
    }

    /// Draws the plots into `--out`, adding their files to `written`.
    fn plot(&self, args: &FsBenchArgs, written: &mut Vec<PathBuf>) -> Result<()> {
        let (extras, runs) = (self.extras, self.runs);
        if !extras.everyday_steps.is_empty() {
            let p = args.out.join("everyday.png");
            let files = extras.everyday.as_ref().map_or(0, |e| e.1);
            crate::fseveryday::plot(&p, &extras.everyday_steps, files)?;
            written.push(p);
        }
        if !extras.procs_runs.is_empty() {
            let p = args.out.join("shared-directory.png");
            crate::fsprocs::plot(&p, &extras.procs_runs)?;
            written.push(p);
        }
        if runs.is_empty() {
            return Ok(());
        }
        let points: Vec<Vec<(f64, u64, f64)>> = runs
            .iter()
            .map(|r| {
                r.create_series
                    .iter()
                    .map(|p| (p.seconds, p.files, p.rate))
                    .collect()
            })
            .collect();
        let series: Vec<fsplot::Series<'_>> = runs
            .iter()
            .zip(&points)
            .map(|(r, p)| fsplot::Series {
                label: &r.target,
                average: r.create_rate,
                points: p,
            })
            .collect();
        let heading = format!(
            "{} zero-length files in one directory: create rate",
            crate::chart::short(self.plan.n as f64)
        );
        for (name, x) in [
            ("create-rate.png", fsplot::XAxis::Seconds),
            ("create-rate-by-files.png", fsplot::XAxis::Files),
        ] {
            let p = args.out.join(name);
            fsplot::create_rate(&p, &heading, x, &series)?;
            written.push(p);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skipped_targets_are_named_in_the_report() {
        assert_eq!(report::skipped(&[]), "");
        let s = report::skipped(&[
            (
                "xfs".into(),
                "no fresh xfs image here: no mkfs.xfs (Debian's xfsprogs)".into(),
            ),
            (
                "fuse".into(),
                "FUSE is unavailable here: no /dev/fuse".into(),
            ),
        ]);
        assert_eq!(s.lines().count(), 2);
        assert!(s.starts_with("- xfs: asked for and not run: skipped, no fresh xfs image"));
        assert!(s.contains("- fuse: asked for and not run: skipped, FUSE is unavailable"));
    }

    fn run(target: &str, create_secs: f64) -> TargetRun {
        TargetRun {
            target: target.into(),
            files: 10,
            stopped_after: None,
            create_rate: 1.0,
            create_series: Vec::new(),
            first_10pct_rate: 1.0,
            last_10pct_rate: 1.0,
            stat_rate: 1.0,
            list_rate: 1.0,
            unlink_rate: 1.0,
            create_secs,
            stat_secs: 1.0,
            list_secs: 1.0,
            unlink_secs: 1.0,
            fuse_requests: None,
            sent_requests: None,
            transport: None,
            memory_after_create: None,
            index_bytes_per_file: None,
            close_secs: None,
            reopen_secs: None,
            memory_after_reopen: None,
            peak_anon_bytes: None,
            stats_done: 10,
            unlinks_done: 10,
        }
    }

    #[test]
    fn time_limits() {
        let secs = Duration::from_secs_f64;
        assert_eq!(TimeLimit::parse("none").unwrap(), TimeLimit::None);
        assert_eq!(TimeLimit::parse("cairn").unwrap(), TimeLimit::Cairn);
        assert_eq!(TimeLimit::parse("2.5").unwrap(), TimeLimit::Secs(2.5));
        for bad in ["0", "-1", "soon", "inf", "NaN"] {
            assert!(TimeLimit::parse(bad).is_err(), "{bad}");
        }
        let earlier = [run("lib", 3.0), run("plain", 50.0), run("fuse", 7.0)];
        // Kernel targets stop after the slowest cairn target before them.
        assert_eq!(TimeLimit::Cairn.of("xfs", &earlier), Some(secs(7.0)));
        assert_eq!(TimeLimit::Cairn.of("btrfs", &earlier[..1]), Some(secs(3.0)));
        // Nothing to go by yet, and cairn targets are never stopped by it.
        assert_eq!(TimeLimit::Cairn.of("plain", &[]), None);
        assert_eq!(TimeLimit::Cairn.of("fuse", &earlier), None);
        assert_eq!(TimeLimit::Secs(2.0).of("lib", &earlier), Some(secs(2.0)));
        assert_eq!(TimeLimit::None.of("plain", &earlier), None);
    }

    #[test]
    fn tenths_of_the_marks() {
        use phases::tenths;
        let s = Duration::from_secs;
        // 100 files: the first 10 took 1 s, the last 10 took 5 s.
        let marks = [(0, s(0)), (10, s(1)), (50, s(3)), (90, s(5)), (100, s(10))];
        let (first, last) = tenths(&marks, 100);
        assert!((first - 10.0).abs() < 1e-9, "{first}");
        assert!((last - 2.0).abs() < 1e-9, "{last}");
        // Marks coarser than a tenth: the nearest ones outside it.
        let marks = [(0, s(0)), (40, s(2)), (100, s(8))];
        let (first, last) = tenths(&marks, 100);
        assert!((first - 20.0).abs() < 1e-9, "{first}");
        assert!((last - 10.0).abs() < 1e-9, "{last}");
    }
}
