//! File-store throughput against the disk's own bandwidth, measured in the same run.
//!
//! ```text
//! cargo run --release -p cairn-files --example files_bench -- [DIR] [MiB] [ROUNDS]
//! ```
//!
//! DIR (default: the current directory; a temporary directory is made in it) must be on
//! the disk to measure; MiB defaults to 512, ROUNDS to 3. Each round measures, one after
//! the other:
//!
//! - the disk, `dd`-style, the better of two ways each: a plain file written with 1 MiB
//!   writes and `fdatasync`, or with 1 MiB `O_DIRECT` writes; read back with 1 MiB reads
//!   after its pages were dropped from the page cache, or with 1 MiB `O_DIRECT` reads;
//! - cairn with `SyncPolicy::Never` and with `SyncPolicy::Always` (durable at commit):
//!   one file of the same size streamed in through `FileWriter` (1 MiB writes) and
//!   committed; the store closed and reopened, its pages dropped, the file read back
//!   cold (1 MiB reads), then warm; then removed (the caller's time), and its chunks
//!   reclaimed (the background collector's work, run in the foreground here).
//!
//! Every figure of every round is printed, then the best and the median per figure and
//! the ratios to the disk's figures of the same rounds (other load on the machine only
//! ever makes a figure worse, so the best shows what the code can do).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cairn::{Options, SyncPolicy};

const MIB: u64 = 1 << 20;

/// A reader yielding `left` bytes copied from a pattern buffer (cheap to produce).
struct Source {
    pattern: Vec<u8>,
    pos: usize,
    left: u64,
}

impl Source {
    fn new(len: u64) -> Source {
        let mut x = 0x1234_5678_9abc_def1u64;
        let pattern = (0..(4 * MIB as usize + 13))
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        Source {
            pattern,
            pos: 0,
            left: len,
        }
    }
}

impl Read for Source {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf
            .len()
            .min(self.left as usize)
            .min(self.pattern.len() - self.pos);
        buf[..n].copy_from_slice(&self.pattern[self.pos..self.pos + n]);
        self.pos = (self.pos + n) % self.pattern.len();
        self.left -= n as u64;
        Ok(n)
    }
}

/// Drops the page-cache pages of every file under `dir` (after syncing them).
fn drop_cache(dir: &Path) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(f) = File::open(&p) {
                let _ = f.sync_all();
                // SAFETY: an advisory system call on an open descriptor.
                unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            }
        }
    }
}

/// Reads `r` to its end in 1 MiB reads; returns the byte count.
fn drain(mut r: impl Read) -> u64 {
    let mut buf = vec![0u8; MIB as usize];
    let mut n = 0;
    loop {
        match r.read(&mut buf).unwrap() {
            0 => return n,
            k => n += k as u64,
        }
    }
}

/// One figure: a duration, and the bytes it moved (0 for latencies).
#[derive(Clone, Copy, Default)]
struct Fig {
    secs: f64,
    bytes: u64,
}

impl Fig {
    fn new(d: Duration, bytes: u64) -> Fig {
        Fig {
            secs: d.as_secs_f64(),
            bytes,
        }
    }

    fn mib_s(self) -> f64 {
        self.bytes as f64 / MIB as f64 / self.secs
    }

    fn show(self) -> String {
        if self.bytes == 0 {
            format!("{:9.3} ms", self.secs * 1e3)
        } else {
            format!("{:6.0} MiB/s ({:.3} s)", self.mib_s(), self.secs)
        }
    }
}

const NAMES: [&str; 14] = [
    "disk write (best of 2 ways)",
    "disk read (best of 2 ways)",
    "never: write",
    "never: read (cold)",
    "never: read (warm)",
    "never: remove",
    "never: 64 KiB file, each",
    "always: write (durable)",
    "always: of which commit",
    "always: read (cold)",
    "always: read (warm)",
    "always: remove",
    "always: 64 KiB file, each",
    "reclaim 1 file (background)",
];

/// A 4096-aligned buffer of `len` bytes, for `O_DIRECT`.
struct Aligned {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        Aligned { ptr, layout }
    }

    fn buf(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points at `layout.size()` initialised bytes owned by `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// The disk at its best, for the ratios: the faster of buffered writes + `fdatasync`
/// and `O_DIRECT` writes (1 MiB), and of buffered cold reads and `O_DIRECT` reads.
fn disk(dir: &Path, size: u64, out: &mut Vec<Fig>) {
    let mut figs = Vec::new();
    dd(dir, size, &mut figs);
    direct(dir, size, &mut figs);
    let best = |a: Fig, b: Fig| if a.secs <= b.secs { a } else { b };
    out.push(best(figs[0], figs[2]));
    out.push(best(figs[1], figs[3]));
}

/// `dd oflag=direct` and `iflag=direct` with 1 MiB blocks.
fn direct(dir: &Path, size: u64, out: &mut Vec<Fig>) {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("direct.bin");
    let mut src = Source::new(size);
    let mut a = Aligned::new(MIB as usize);
    let t = Instant::now();
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .unwrap();
    let mut left = size;
    while left > 0 {
        src.read_exact(a.buf()).unwrap();
        f.write_all(a.buf()).unwrap();
        left -= MIB;
    }
    f.sync_data().unwrap();
    out.push(Fig::new(t.elapsed(), size));
    drop(f);
    let t = Instant::now();
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .unwrap();
    let mut n = 0;
    loop {
        match f.read(a.buf()).unwrap() {
            0 => break,
            k => n += k as u64,
        }
    }
    assert_eq!(n, size);
    out.push(Fig::new(t.elapsed(), size));
    fs::remove_file(&path).unwrap();
}

fn dd(dir: &Path, size: u64, out: &mut Vec<Fig>) {
    let path = dir.join("dd.bin");
    let mut src = Source::new(size);
    let mut buf = vec![0u8; MIB as usize];
    let t = Instant::now();
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    let mut left = size;
    while left > 0 {
        src.read_exact(&mut buf).unwrap();
        f.write_all(&buf).unwrap();
        left -= MIB;
    }
    f.sync_data().unwrap();
    out.push(Fig::new(t.elapsed(), size));
    drop(f);
    drop_cache(dir);
    let t = Instant::now();
    assert_eq!(drain(File::open(&path).unwrap()), size);
    out.push(Fig::new(t.elapsed(), size));
    fs::remove_file(&path).unwrap();
}

fn cairn_round(dir: &Path, policy: SyncPolicy, size: u64, out: &mut Vec<Fig>) -> Fig {
    let db = Options::new().sync(policy).open(dir).unwrap();
    let files = cairn_files::FileStore::new(&db).unwrap();
    files.put("warm-up", vec![1u8; 4 << 20]).unwrap();
    let t = Instant::now();
    let mut w = files.create("big").unwrap();
    let mut src = Source::new(size);
    let mut buf = vec![0u8; MIB as usize];
    loop {
        let n = src.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        w.write_all(&buf[..n]).unwrap();
    }
    let streamed = t.elapsed();
    let stat = w.commit().unwrap();
    let took = t.elapsed();
    assert_eq!(stat.size, size);
    out.push(Fig::new(took, size));
    if policy == SyncPolicy::Always {
        out.push(Fig::new(took - streamed, 0));
    }
    // Cold: closed, reopened (open scans segments that have no hint file yet, which
    // caches them), and then dropped from the page cache.
    drop(files);
    drop(db);
    let db = Options::new().sync(policy).open(dir).unwrap();
    let files = cairn_files::FileStore::new(&db).unwrap();
    drop_cache(dir);
    for _ in ["cold", "warm"] {
        let t = Instant::now();
        assert_eq!(drain(files.open("big").unwrap().unwrap()), size);
        out.push(Fig::new(t.elapsed(), size));
    }
    let t = Instant::now();
    assert!(files.remove("big").unwrap());
    out.push(Fig::new(t.elapsed(), 0));
    // The background collector may already be at it; wait for it to be done.
    let t = Instant::now();
    files.collect_garbage().unwrap();
    let reclaim = Fig::new(t.elapsed(), 0);
    assert_eq!(
        cairn_files::FileStore::new(&db)
            .unwrap()
            .stats()
            .unwrap()
            .pending_gc,
        0
    );
    // Small files, one writer: the time per file.
    let data = vec![7u8; SMALL_FILE];
    let t = Instant::now();
    for i in 0..SMALL_FILES {
        files.put(format!("small/{i}"), &data).unwrap();
    }
    out.push(Fig::new(t.elapsed() / SMALL_FILES, 0));
    reclaim
}

/// Small files written per round and policy, and their size.
const SMALL_FILES: u32 = 500;
const SMALL_FILE: usize = 64 << 10;

fn main() {
    let mut args = std::env::args().skip(1);
    let base: PathBuf = args.next().map(PathBuf::from).unwrap_or_else(|| ".".into());
    let mib: u64 = args.next().map(|s| s.parse().unwrap()).unwrap_or(512);
    let rounds: usize = args.next().map(|s| s.parse().unwrap()).unwrap_or(3);
    let size = mib * MIB;
    let tmp = tempfile::tempdir_in(&base).unwrap();
    println!(
        "file store bench: a {mib} MiB file, {rounds} round(s), in {}",
        tmp.path().display()
    );
    let mut all: Vec<Vec<Fig>> = Vec::new();
    for round in 0..rounds {
        let mut figs = Vec::new();
        disk(tmp.path(), size, &mut figs);
        let mut reclaim = Fig::default();
        for (name, policy) in [("never", SyncPolicy::Never), ("always", SyncPolicy::Always)] {
            let dir = tmp.path().join(format!("{name}-{round}"));
            reclaim = cairn_round(&dir, policy, size, &mut figs);
            fs::remove_dir_all(&dir).unwrap();
        }
        figs.push(reclaim);
        println!("round {round}:");
        for (n, f) in NAMES.iter().zip(&figs) {
            println!("  {n:28} {}", f.show());
        }
        all.push(figs);
    }
    // Best (shortest time) and median per figure.
    let pick = |i: usize, median: bool| -> Fig {
        let mut v: Vec<Fig> = all.iter().map(|r| r[i]).collect();
        v.sort_by(|a, b| a.secs.total_cmp(&b.secs));
        if median {
            v[v.len() / 2]
        } else {
            v[0]
        }
    };
    println!("summary (best / median of {rounds}):");
    for (i, n) in NAMES.iter().enumerate() {
        println!(
            "  {n:28} {} / {}",
            pick(i, false).show(),
            pick(i, true).show()
        );
    }
    for median in [false, true] {
        let (dw, dr) = (pick(0, median), pick(1, median));
        println!(
            "ratios to the disk ({}): never write {:.0}%, always write {:.0}%, never read cold {:.0}%, always read cold {:.0}%",
            if median { "medians" } else { "bests" },
            100.0 * pick(2, median).mib_s() / dw.mib_s(),
            100.0 * pick(7, median).mib_s() / dw.mib_s(),
            100.0 * pick(3, median).mib_s() / dr.mib_s(),
            100.0 * pick(9, median).mib_s() / dr.mib_s(),
        );
    }
}
