//! File-store throughput against the disk's own bandwidth, measured in the same run.
//!
//! ```text
//! cargo run --release -p cairn --example files_bench -- [DIR] [MiB]
//! ```
//!
//! DIR (default: a temporary directory under the current one) must be on the disk to
//! measure; MiB defaults to 512. Steps: `dd`-style sequential write (1 MiB writes, then
//! fdatasync) and read (after dropping the file's pages from the page cache) of a plain
//! file; then a file of the same size written to cairn with `SyncPolicy::Never` and with
//! `SyncPolicy::Always` (durable at commit), read back (warm, and cold after dropping the
//! store's pages), and removed.

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

/// CPU time (user + system) of this process so far, all threads.
fn cpu() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

thread_local! {
    static CPU_MARK: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

/// Starts a timed phase: wall clock now, CPU mark for [`rate`].
fn start() -> Instant {
    CPU_MARK.with(|m| m.set(cpu()));
    Instant::now()
}

fn rate(bytes: u64, d: Duration) -> String {
    let used = cpu() - CPU_MARK.with(|m| m.get());
    format!(
        "{:7.0} MiB/s ({:.3} s, CPU {:.3} s)",
        bytes as f64 / MIB as f64 / d.as_secs_f64(),
        d.as_secs_f64(),
        used.as_secs_f64()
    )
}

/// Drops the page-cache pages of every file under `dir`.
fn drop_cache(dir: &Path) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(f) = File::open(&p) {
                let _ = f.sync_all();
                // SAFETY: plain syscall on an open descriptor.
                unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            }
        }
    }
}

fn dd(dir: &Path, size: u64) -> (String, String) {
    let path = dir.join("dd.bin");
    let mut src = Source::new(size);
    let mut buf = vec![0u8; MIB as usize];
    let t = start();
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
    let w = rate(size, t.elapsed());
    drop(f);
    drop_cache(dir);
    let t = start();
    let mut f = File::open(&path).unwrap();
    while f.read(&mut buf).unwrap() > 0 {}
    let r = rate(size, t.elapsed());
    fs::remove_file(&path).unwrap();
    (w, r)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let base: PathBuf = args.next().map(PathBuf::from).unwrap_or_else(|| ".".into());
    let mib: u64 = args.next().map(|s| s.parse().unwrap()).unwrap_or(512);
    let size = mib * MIB;
    let tmp = tempfile::tempdir_in(&base).unwrap();
    println!("file store bench: {mib} MiB in {}", tmp.path().display());

    let (w, r) = dd(tmp.path(), size);
    println!("disk  write 1 MiB blocks + fdatasync: {w}");
    println!("disk  read (cold):                    {r}");

    for (name, policy) in [("never", SyncPolicy::Never), ("always", SyncPolicy::Always)] {
        let dir = tmp.path().join(name);
        let db = Options::new().sync(policy).open(&dir).unwrap();
        let files = db.files();
        files.put("warm-up", vec![1u8; 4 << 20]).unwrap();
        let t = start();
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
        let wt = t.elapsed();
        assert_eq!(stat.size, size);
        println!(
            "cairn write, sync {name:6}:             {} (commit {:.3} s)",
            rate(size, wt),
            (wt - streamed).as_secs_f64()
        );
        // Cold: closed, reopened (open scans segments without hint files, which
        // caches them), then dropped from the page cache.
        drop(files);
        drop(db);
        let db = Options::new().sync(policy).open(&dir).unwrap();
        let files = db.files();
        drop_cache(&dir);
        for temp in ["cold", "warm"] {
            let t = start();
            let mut rd = files.open("big").unwrap().unwrap();
            let mut n = 0;
            loop {
                let k = rd.read(&mut buf).unwrap();
                if k == 0 {
                    break;
                }
                n += k as u64;
            }
            assert_eq!(n, size);
            println!(
                "cairn read ({temp}):                    {}",
                rate(size, t.elapsed())
            );
        }
        let t = start();
        assert!(files.remove("big").unwrap());
        println!(
            "cairn remove:                         {:.3} ms",
            t.elapsed().as_secs_f64() * 1e3
        );
        let t = start();
        let gc = files.collect_garbage().unwrap();
        println!(
            "cairn reclaim (background work):      {:.1} ms, {} chunks",
            t.elapsed().as_secs_f64() * 1e3,
            gc.chunks
        );
    }
}
