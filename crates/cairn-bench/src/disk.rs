//! The disk's own limits, measured in the same run: sequential write and read bandwidth
//! (1 MiB blocks, direct I/O), random 4 KiB direct reads from 1, T and 32 threads (each
//! with one read in flight, as the HaloDB suite's readers: what one disk read per lookup
//! can reach) over a file as large as the HaloDB suite's store ([`Config::rand_span`]:
//! a virtual disk serves a small span faster, from its host's cache), and the latency
//! of an append followed by fdatasync. With `fio` on the
//! PATH it does the measuring; otherwise a built-in equivalent.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value as Json;

use super::measure::{self, Group, Kind, Latency, Phase, Worker};
use super::{Config, Ctx, SuiteDef};

/// The suite, as the runner knows it.
pub static SUITE: SuiteDef = SuiteDef {
    name: "disk",
    title: "the disk's own limits",
    per_engine: false,
    steps,
    run,
};

/// Block size of the bandwidth tests.
const BLOCK: usize = 1 << 20;
/// Size of one append of the fsync test.
const SYNC_WRITE: usize = 4096;
/// Size of one random read.
const RAND_READ: usize = 4096;

fn steps(config: &Config) -> u64 {
    3 + rand_read_threads(config).len() as u64
}

/// The concurrencies of the random-read test: 1, the HaloDB suite's T and 32.
fn rand_read_threads(config: &Config) -> Vec<usize> {
    let mut t = vec![1, config.threads, config.many_threads];
    t.sort_unstable();
    t.dedup();
    t
}

/// The phase name and title of random reads from `threads` threads over `span` bytes.
fn rand_read_names(threads: usize, span: u64, how: &str) -> (String, String) {
    (
        format!("rand_read_{threads}"),
        format!(
            "random read, 4 KiB blocks, direct, {threads} thread{}, over {}{how}",
            if threads == 1 { "" } else { "s" },
            super::table::bytes(span)
        ),
    )
}

/// Whether `fio` can be run.
pub fn have_fio() -> bool {
    Command::new("fio")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run(ctx: &Ctx<'_>) -> Result<Vec<Phase>> {
    fs::create_dir_all(&ctx.dir)?;
    let phases = if ctx.config.use_fio && have_fio() {
        with_fio(ctx)?
    } else {
        built_in(ctx)?
    };
    fs::remove_dir_all(&ctx.dir)?;
    Ok(phases)
}

/// A buffer of `len` bytes aligned for direct I/O, filled with random bytes.
struct Aligned {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize, seed: u64) -> Aligned {
        let mut raw = vec![0u8; len + 4096];
        let start = raw.as_ptr().align_offset(4096);
        let mut rng = measure::Rng::new(seed);
        for b in &mut raw {
            *b = rng.next_u64() as u8;
        }
        Aligned { raw, start, len }
    }

    fn bytes(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }
}

fn built_in(ctx: &Ctx<'_>) -> Result<Vec<Phase>> {
    let path = ctx.dir.join("disk-test.dat");
    let blocks = (ctx.config.disk_bytes / BLOCK as u64).max(1);
    let block = Aligned::new(BLOCK, ctx.config.seed);
    let mut out = Vec::new();

    // Sequential write, direct, then fsync (inside the measured time: the last op).
    let file = open_direct(&path, true)?;
    let write = |w: &mut Worker| -> Result<u64> {
        file.write_all_at(block.bytes(), w.global() * BLOCK as u64)?;
        if w.global() + 1 == blocks {
            file.sync_all()?;
        }
        Ok(BLOCK as u64)
    };
    out.push(bandwidth(
        ctx,
        "seq_write",
        "sequential write, 1 MiB blocks, direct",
        Kind::Write,
        blocks,
        &write,
    )?);
    ctx.progress("sequential write");
    drop(file);

    // Sequential read, direct.
    let file = open_direct(&path, false)?;
    let read = |w: &mut Worker| -> Result<u64> {
        if w.buf.len() < BLOCK + 4096 {
            w.buf.resize(BLOCK + 4096, 0);
        }
        let start = w.buf.as_ptr().align_offset(4096);
        let offset = w.global() * BLOCK as u64;
        file.read_exact_at(&mut w.buf[start..start + BLOCK], offset)?;
        Ok(BLOCK as u64)
    };
    out.push(bandwidth(
        ctx,
        "seq_read",
        "sequential read, 1 MiB blocks, direct",
        Kind::Read,
        blocks,
        &read,
    )?);
    ctx.progress("sequential read");

    rand_reads(ctx, &file, &path, blocks, &block, &mut out)?;
    drop(file);
    fs::remove_file(&path)?;
    out.push(append_fsync(ctx, &path)?);
    fs::remove_file(&path)?;
    Ok(out)
}

/// Random 4 KiB reads of `file` (at `path`, `blocks` blocks written), direct, each
/// thread with one in flight, over the span: the file grown to it first (written, not
/// allocated: a hole or an unwritten extent would be read without touching the disk).
fn rand_reads(
    ctx: &Ctx<'_>,
    file: &File,
    path: &Path,
    blocks: u64,
    block: &Aligned,
    out: &mut Vec<Phase>,
) -> Result<()> {
    let span = ctx.config.rand_span();
    if span > blocks * BLOCK as u64 {
        let grow = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .or_else(|_| OpenOptions::new().write(true).open(path))?;
        for b in blocks..span.div_ceil(BLOCK as u64) {
            grow.write_all_at(block.bytes(), b * BLOCK as u64)?;
        }
        grow.sync_all()?;
    }
    let pages = (span.max(blocks * BLOCK as u64) / RAND_READ as u64).max(1);
    let rand_read = |w: &mut Worker| -> Result<u64> {
        if w.buf.len() < 2 * RAND_READ {
            w.buf.resize(2 * RAND_READ, 0);
        }
        let start = w.buf.as_ptr().align_offset(4096);
        let offset = w.rng.below(pages) * RAND_READ as u64;
        file.read_exact_at(&mut w.buf[start..start + RAND_READ], offset)?;
        Ok(RAND_READ as u64)
    };
    for threads in rand_read_threads(ctx.config) {
        let (test, title) = rand_read_names(threads, pages * RAND_READ as u64, "");
        let mut p = super::halodb::one(ctx.run(&[Group {
            test,
            title: title.clone(),
            kind: Kind::Read,
            threads,
            ops: Some(ctx.config.disk_rand_reads.max(threads as u64)),
            op: &rand_read,
        }])?);
        p.write_bytes = None;
        out.push(p);
        ctx.progress(&title);
    }
    Ok(())
}

/// Appends 4 KiB and fdatasync, one at a time, to a new file at `path`.
fn append_fsync(ctx: &Ctx<'_>, path: &Path) -> Result<Phase> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(path)?;
    let page = Aligned::new(SYNC_WRITE, ctx.config.seed ^ 1);
    let sync = |w: &mut Worker| -> Result<u64> {
        file.write_all_at(page.bytes(), w.global() * SYNC_WRITE as u64)?;
        file.sync_data()?;
        Ok(SYNC_WRITE as u64)
    };
    let mut p = super::halodb::one(ctx.run(&[Group {
        test: "fsync".into(),
        title: "append 4 KiB + fdatasync".into(),
        kind: Kind::Write,
        threads: 1,
        ops: Some(ctx.config.fsyncs),
        op: &sync,
    }])?);
    p.write_bytes = None;
    ctx.progress("fsync latency");
    Ok(p)
}

fn bandwidth(
    ctx: &Ctx<'_>,
    test: &str,
    title: &str,
    kind: Kind,
    blocks: u64,
    op: &measure::Op<'_>,
) -> Result<Phase> {
    let mut p = super::halodb::one(ctx.run(&[Group {
        test: test.into(),
        title: title.into(),
        kind,
        threads: 1,
        ops: Some(blocks),
        op,
    }])?);
    p.write_bytes = None;
    Ok(p)
}

fn open_direct(path: &Path, write: bool) -> Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true);
    if write {
        opts.write(true).create(true).truncate(true);
    }
    match opts.clone().custom_flags(libc::O_DIRECT).open(path) {
        Ok(f) => Ok(f),
        // Some file systems (tmpfs) refuse direct I/O: measure through the page cache.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(opts.open(path)?),
        Err(e) => Err(e).with_context(|| format!("opening {}", path.display())),
    }
}

fn with_fio(ctx: &Ctx<'_>) -> Result<Vec<Phase>> {
    let file = ctx.dir.join("fio-test.dat");
    let size = format!("{}", ctx.config.disk_bytes.max(BLOCK as u64));
    let file_arg = format!("--filename={}", file.display());
    let common = [
        file_arg.as_str(),
        "--ioengine=psync",
        "--output-format=json",
        "--numjobs=1",
    ];
    let mut out = Vec::new();
    let jobs = [
        (
            "seq_write",
            "sequential write, 1 MiB blocks, direct (fio)",
            "write",
            Kind::Write,
            vec![
                "--name=seq_write",
                "--rw=write",
                "--bs=1M",
                "--direct=1",
                "--end_fsync=1",
            ],
        ),
        (
            "seq_read",
            "sequential read, 1 MiB blocks, direct (fio)",
            "read",
            Kind::Read,
            vec!["--name=seq_read", "--rw=read", "--bs=1M", "--direct=1"],
        ),
    ];
    for (test, title, side, kind, args) in jobs {
        let json = fio(&common, &args, &format!("--size={size}"))?;
        out.push(fio_phase(
            &json["jobs"][0][side],
            test.into(),
            title.into(),
            kind,
            1,
        ));
        ctx.progress(title);
    }
    fio_rand_reads(ctx, &mut out)?;
    out.push(fio_fsync(ctx, &common)?);
    ctx.progress("fsync latency");
    let _ = fs::remove_file(&file);
    Ok(out)
}

/// A phase of what fio reports of one side (`read` or `write`) of a job.
fn fio_phase(stats: &Json, test: String, title: String, kind: Kind, threads: usize) -> Phase {
    Phase {
        test,
        title,
        kind: Some(kind),
        threads,
        ops: stats["total_ios"].as_u64().unwrap_or(0),
        bytes: stats["io_bytes"].as_u64().unwrap_or(0),
        secs: stats["runtime"].as_f64().unwrap_or(0.0) / 1000.0,
        ops_per_sec: stats["iops"].as_f64().unwrap_or(0.0),
        mb_per_sec: stats["bw_bytes"].as_f64().unwrap_or(0.0) / 1e6,
        latency: fio_latency(&stats["clat_ns"]),
        ..Phase::default()
    }
}

/// fio's random 4 KiB direct reads, on their own file as large as the span (fio writes
/// it before the first job and reuses it).
fn fio_rand_reads(ctx: &Ctx<'_>, out: &mut Vec<Phase>) -> Result<()> {
    let span = ctx.config.rand_span();
    let rand_file = ctx.dir.join("fio-rand.dat");
    let rand_arg = format!("--filename={}", rand_file.display());
    let rand_common = [
        rand_arg.as_str(),
        "--ioengine=psync",
        "--output-format=json",
    ];
    for threads in rand_read_threads(ctx.config) {
        let (test, title) = rand_read_names(threads, span, " (fio)");
        let per_job = (ctx.config.disk_rand_reads / threads as u64).max(1);
        let jobs = format!("--numjobs={threads}");
        let ios = format!("--number_ios={per_job}");
        let json = fio(
            &rand_common,
            &[
                "--name=rand_read",
                "--rw=randread",
                "--bs=4k",
                "--direct=1",
                "--thread",
                "--group_reporting",
                "--norandommap",
                &jobs,
                &ios,
            ],
            &format!("--size={span}"),
        )?;
        let stats = &json["jobs"][0]["read"];
        out.push(fio_phase(stats, test, title.clone(), Kind::Read, threads));
        ctx.progress(&title);
    }
    let _ = fs::remove_file(&rand_file);
    Ok(())
}

/// fio's appends of 4 KiB, each followed by fdatasync.
fn fio_fsync(ctx: &Ctx<'_>, common: &[&str]) -> Result<Phase> {
    let sync_size = format!("--size={}", ctx.config.fsyncs * SYNC_WRITE as u64);
    let json = fio(
        common,
        &["--name=fsync", "--rw=write", "--bs=4k", "--fdatasync=1"],
        &sync_size,
    )?;
    let job = &json["jobs"][0];
    let lat = &job["sync"]["lat_ns"];
    let ops = lat["N"].as_u64().unwrap_or(0);
    let write_ns = job["write"]["lat_ns"]["mean"].as_f64().unwrap_or(0.0);
    let mut latency = fio_latency(lat);
    // The latency of one append-and-sync is the write's plus the sync's.
    latency.mean_ns += write_ns;
    let secs = job["write"]["runtime"].as_f64().unwrap_or(0.0) / 1000.0;
    Ok(Phase {
        test: "fsync".into(),
        title: "append 4 KiB + fdatasync (fio; percentiles of the fdatasync)".into(),
        kind: Some(Kind::Write),
        threads: 1,
        ops,
        bytes: ops * SYNC_WRITE as u64,
        secs,
        ops_per_sec: if secs > 0.0 { ops as f64 / secs } else { 0.0 },
        mb_per_sec: if secs > 0.0 {
            (ops * SYNC_WRITE as u64) as f64 / secs / 1e6
        } else {
            0.0
        },
        latency,
        ..Phase::default()
    })
}

fn fio(common: &[&str], args: &[&str], size: &str) -> Result<Json> {
    let output = Command::new("fio")
        .args(common)
        .args(args)
        .arg(size)
        .output()
        .context("running fio")?;
    if !output.status.success() {
        bail!(
            "fio {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    // fio may print notes before its JSON.
    let text = String::from_utf8_lossy(&output.stdout);
    let start = text.find('{').context("fio printed no JSON")?;
    serde_json::from_str(&text[start..]).context("parsing fio's JSON output")
}

fn fio_latency(lat: &Json) -> Latency {
    let pct = |q: &str| lat["percentile"][q].as_u64().unwrap_or(0);
    Latency {
        mean_ns: lat["mean"].as_f64().unwrap_or(0.0),
        p50_ns: pct("50.000000"),
        p99_ns: pct("99.000000"),
        p999_ns: pct("99.900000"),
        max_ns: lat["max"].as_u64().unwrap_or(0),
    }
}
