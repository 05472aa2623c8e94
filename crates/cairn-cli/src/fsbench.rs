//! `cairn fs-bench`: the TableFS/GIGA+ metadata experiment (seed 002). Creates N
//! zero-length files in one directory, then stats every file in random order, lists the
//! directory and unlinks every file; on the cairn library (`cairn::fs`), on cairn
//! mounted through FUSE (`cairn mount`, in a child process) and on a plain directory of
//! the disk the store is on (ext4 here), in one run. The create rate is sampled over
//! the run (20 intervals) so that a slowdown as the directory grows shows.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;

use cairn::fs::{Cred, Fs, ROOT};

/// Long description of `fs-bench`.
pub const ABOUT: &str = "\
Create N zero-length files in one directory (default 1,000,000; --large 10,000,000),
sampling the create rate over the run; then stat every file in random order, list the
directory and unlink every file. Targets (--targets): lib (cairn::fs in this process),
fuse (cairn mounted through FUSE by a child `cairn mount`; skipped with a message where
FUSE can't be used), plain (a plain directory under --dir: the disk's own file system,
e.g. ext4). --json writes the figures.";

/// Options of `fs-bench`.
#[derive(Debug, Args)]
pub struct FsBenchArgs {
    /// Files to create [default: 1000000; --large 10000000]
    #[arg(long)]
    files: Option<u64>,
    /// 10,000,000 files
    #[arg(long)]
    large: bool,
    /// Work directory (on the disk to measure); emptied of what the run creates
    #[arg(long, default_value = "./cairn-fs-bench")]
    dir: PathBuf,
    /// Targets, comma-separated: lib, fuse, plain
    #[arg(long, value_delimiter = ',', default_value = "lib,fuse,plain")]
    targets: Vec<String>,
    /// Rate samples over the create phase
    #[arg(long, default_value_t = 20)]
    intervals: u64,
    /// Write the results as JSON to this file
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Results of one target.
#[derive(Debug, Serialize)]
struct TargetRun {
    target: String,
    files: u64,
    /// Creates per second over the whole create phase.
    create_rate: f64,
    /// Creates per second in each interval, with the elapsed seconds at its end.
    create_series: Vec<(f64, f64)>,
    /// Creates per second over the first and the last 10% of the creates.
    first_10pct_rate: f64,
    last_10pct_rate: f64,
    stat_rate: f64,
    list_rate: f64,
    unlink_rate: f64,
}

/// One file system under test.
trait Target {
    fn create(&mut self, name: &str) -> Result<()>;
    fn stat(&mut self, name: &str) -> Result<()>;
    fn list(&mut self) -> Result<u64>;
    fn unlink(&mut self, name: &str) -> Result<()>;
}

struct Lib {
    fs: Fs,
    dir: u64,
}

const ME: Cred = Cred::ROOT;

impl Target for Lib {
    fn create(&mut self, name: &str) -> Result<()> {
        self.fs.create(&ME, self.dir, name.as_bytes(), 0o644)?;
        Ok(())
    }
    fn stat(&mut self, name: &str) -> Result<()> {
        self.fs.lookup(&ME, self.dir, name.as_bytes())?;
        Ok(())
    }
    fn list(&mut self) -> Result<u64> {
        let mut n = 0;
        let mut cursor: Option<Vec<u8>> = None;
        loop {
            let page = self.fs.readdir(self.dir, cursor.as_deref(), 1024)?;
            let Some(last) = page.last() else { break };
            cursor = Some(last.name.clone());
            n += page.len() as u64;
        }
        Ok(n)
    }
    fn unlink(&mut self, name: &str) -> Result<()> {
        self.fs.unlink(&ME, self.dir, name.as_bytes())?;
        Ok(())
    }
}

/// A directory reached through the kernel (the FUSE mount or a plain directory).
struct Posix {
    dir: PathBuf,
}

impl Target for Posix {
    fn create(&mut self, name: &str) -> Result<()> {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.dir.join(name))?;
        Ok(())
    }
    fn stat(&mut self, name: &str) -> Result<()> {
        std::fs::symlink_metadata(self.dir.join(name))?;
        Ok(())
    }
    fn list(&mut self) -> Result<u64> {
        let mut n = 0;
        for e in std::fs::read_dir(&self.dir)? {
            e?;
            n += 1;
        }
        Ok(n)
    }
    fn unlink(&mut self, name: &str) -> Result<()> {
        std::fs::remove_file(self.dir.join(name))?;
        Ok(())
    }
}

fn name(i: u64) -> String {
    format!("f{i:010}")
}

/// Fisher-Yates with xorshift64*: a random order without a dependency.
fn shuffled(n: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for i in (1..v.len()).rev() {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
        v.swap(i, (r % (i as u64 + 1)) as usize);
    }
    v
}

fn run_target(label: &str, t: &mut dyn Target, n: u64, intervals: u64) -> Result<TargetRun> {
    let step = (n / intervals.max(1)).max(1);
    let tenth = (n / 10).max(1);
    let mut series = Vec::new();
    let start = Instant::now();
    let mut last = (start, 0u64);
    let mut first_10 = Duration::ZERO;
    let mut last_10_start = None;
    for i in 0..n {
        if i == n - tenth {
            last_10_start = Some(Instant::now());
        }
        t.create(&name(i))
            .with_context(|| format!("{label}: create {}", name(i)))?;
        let done = i + 1;
        if done == tenth {
            first_10 = start.elapsed();
        }
        if done % step == 0 || done == n {
            let now = Instant::now();
            let rate = (done - last.1) as f64 / now.duration_since(last.0).as_secs_f64();
            series.push((now.duration_since(start).as_secs_f64(), rate));
            last = (now, done);
            eprint!("\r{label}: created {done}/{n}  ({rate:.0}/s)   ");
        }
    }
    let create = start.elapsed();
    let last_10 = last_10_start.map_or(create, |s| s.elapsed());
    eprintln!();
    let order = shuffled(n);
    let t0 = Instant::now();
    for &i in &order {
        t.stat(&name(i)).with_context(|| format!("{label}: stat"))?;
    }
    let stat = t0.elapsed();
    let t0 = Instant::now();
    let listed = t.list()?;
    let list = t0.elapsed();
    if listed != n {
        bail!("{label}: listed {listed} entries, created {n}");
    }
    let t0 = Instant::now();
    for i in 0..n {
        t.unlink(&name(i))
            .with_context(|| format!("{label}: unlink"))?;
    }
    let unlink = t0.elapsed();
    let rate = |k: u64, d: Duration| k as f64 / d.as_secs_f64().max(1e-9);
    Ok(TargetRun {
        target: label.to_string(),
        files: n,
        create_rate: rate(n, create),
        create_series: series,
        first_10pct_rate: rate(tenth, first_10),
        last_10pct_rate: rate(tenth, last_10),
        stat_rate: rate(n, stat),
        list_rate: rate(n, list),
        unlink_rate: rate(n, unlink),
    })
}

fn is_mountpoint(p: &Path) -> bool {
    match (std::fs::metadata(p), std::fs::metadata(p.join(".."))) {
        (Ok(a), Ok(b)) => a.dev() != b.dev(),
        _ => false,
    }
}

/// A child `cairn mount`, unmounted on drop.
struct ChildMount {
    child: std::process::Child,
    mp: PathBuf,
}

impl ChildMount {
    fn start(store: &Path, mp: &Path) -> Result<ChildMount> {
        let exe = std::env::current_exe()?;
        let mut child = Command::new(exe)
            .arg("mount")
            .arg(store)
            .arg(mp)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let start = Instant::now();
        while !is_mountpoint(mp) {
            if child.try_wait()?.is_some() {
                let out = child.wait_with_output()?;
                bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
            }
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                bail!("mount timed out");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(ChildMount {
            child,
            mp: mp.to_path_buf(),
        })
    }
}

impl Drop for ChildMount {
    fn drop(&mut self) {
        // SIGTERM: the child unmounts and closes the store.
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        while self.child.try_wait().ok().flatten().is_none() {
            if start.elapsed() > Duration::from_secs(60) {
                let _ = self.child.kill();
                let _ = Command::new("umount").arg("-l").arg(&self.mp).status();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.wait();
    }
}

/// `cairn fs-bench`.
pub fn run(args: &FsBenchArgs) -> Result<ExitCode> {
    let n = args
        .files
        .unwrap_or(if args.large { 10_000_000 } else { 1_000_000 });
    if n == 0 {
        bail!("--files must be at least 1");
    }
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let mut runs = Vec::new();
    for target in &args.targets {
        let work = args.dir.join(format!("{target}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work)?;
        let r = match target.as_str() {
            "lib" => {
                let fs = Fs::open(work.join("store")).map_err(std::io::Error::from)?;
                let dir = fs.mkdir(&ME, ROOT, b"d", 0o755)?.ino;
                let mut t = Lib { fs, dir };
                Some(run_target("lib", &mut t, n, args.intervals)?)
            }
            "fuse" => {
                let mp = work.join("mnt");
                std::fs::create_dir_all(&mp)?;
                match ChildMount::start(&work.join("store"), &mp) {
                    Err(e) => {
                        println!("fuse: skipped, the mount failed: {e}");
                        None
                    }
                    Ok(m) => {
                        let d = mp.join("d");
                        std::fs::create_dir(&d)?;
                        let r = run_target("fuse", &mut Posix { dir: d }, n, args.intervals);
                        drop(m);
                        Some(r?)
                    }
                }
            }
            "plain" => {
                let d = work.join("d");
                std::fs::create_dir(&d)?;
                Some(run_target(
                    "plain",
                    &mut Posix { dir: d },
                    n,
                    args.intervals,
                )?)
            }
            other => bail!("unknown target {other:?} (lib, fuse, plain)"),
        };
        let _ = std::fs::remove_dir_all(&work);
        runs.extend(r);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "files in one directory: {n}")?;
    writeln!(
        out,
        "| target | create/s | first 10% /s | last 10% /s | last/first | stat/s (random) | list entries/s | unlink/s |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|")?;
    for r in &runs {
        writeln!(
            out,
            "| {} | {:.0} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.0} |",
            r.target,
            r.create_rate,
            r.first_10pct_rate,
            r.last_10pct_rate,
            r.last_10pct_rate / r.first_10pct_rate,
            r.stat_rate,
            r.list_rate,
            r.unlink_rate
        )?;
    }
    for r in &runs {
        let s: Vec<String> = r
            .create_series
            .iter()
            .map(|(t, v)| format!("{t:.2}s:{v:.0}"))
            .collect();
        writeln!(out, "create rate over time, {}: {}", r.target, s.join(" "))?;
    }
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_vec_pretty(&runs)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
