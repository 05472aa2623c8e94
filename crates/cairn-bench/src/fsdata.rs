//! `cairn fs-bench --data` / `--cold`: large files through each target — write one file
//! of each size in 1 MiB writes and make it durable (`fsync`), read it back warm (just
//! written: in the page cache), and with `--cold` read it again after dropping the page
//! cache (as root `echo 3 > /proc/sys/vm/drop_caches`; otherwise `posix_fadvise
//! (DONTNEED)` of the file and of the store's files, which leaves pages a process has
//! mapped). Reads are 1 MiB `read`s, as `dd bs=1M` makes them; every MiB read is checked.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use cairn_fs::{Fs, ROOT};

use crate::measure;

/// Bytes of one write or read.
const IO: usize = 1 << 20;

/// Results of one file through one target.
#[derive(Debug, Serialize)]
pub(crate) struct DataRun {
    pub target: String,
    pub bytes: u64,
    /// MB/s of the writes and the fsync after them.
    pub durable_write_mbps: f64,
    /// MB/s of a read right after the write.
    pub warm_read_mbps: f64,
    /// MB/s of a read after the page cache was dropped (`--cold`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cold_read_mbps: Option<f64>,
}

/// A file system that large files go through.
pub(crate) enum DataTarget<'a> {
    /// `cairn::fs` in this process, on the store at `store`.
    Lib { fs: &'a Fs, store: PathBuf },
    /// A directory reached through the kernel; `store`: the cairn store behind it (fuse).
    Posix {
        dir: PathBuf,
        store: Option<PathBuf>,
    },
}

/// One MiB of the file: random-looking, its index in the first 8 bytes.
fn piece(pool: &[u8], i: u64) -> Vec<u8> {
    let mut v = pool.to_vec();
    v[..8].copy_from_slice(&i.to_le_bytes());
    v
}

fn check(buf: &[u8], i: u64, what: &str) -> Result<()> {
    if buf.len() < 8 || buf[..8] != i.to_le_bytes() {
        bail!("{what}: MiB {i} read back wrong");
    }
    Ok(())
}

impl DataTarget<'_> {
    fn write(&self, name: &str, bytes: u64, pool: &[u8]) -> Result<()> {
        let pieces = bytes.div_ceil(IO as u64);
        match self {
            DataTarget::Lib { fs, .. } => {
                let f = fs.create(&cairn_fs::Cred::ROOT, ROOT, name.as_bytes(), 0o644)?;
                for i in 0..pieces {
                    fs.write(f.ino, i * IO as u64, &piece(pool, i))?;
                }
                fs.fsync(f.ino)?;
            }
            DataTarget::Posix { dir, .. } => {
                let mut f = std::fs::File::create(dir.join(name))?;
                for i in 0..pieces {
                    f.write_all(&piece(pool, i))?;
                }
                f.sync_all()?;
            }
        }
        Ok(())
    }

    fn read(&self, name: &str, bytes: u64) -> Result<()> {
        let pieces = bytes.div_ceil(IO as u64);
        match self {
            DataTarget::Lib { fs, .. } => {
                let ino = fs.lookup(&cairn_fs::Cred::ROOT, ROOT, name.as_bytes())?.ino;
                for i in 0..pieces {
                    let b = fs.read(ino, i * IO as u64, IO)?;
                    check(&b, i, name)?;
                }
            }
            DataTarget::Posix { dir, .. } => {
                let mut f = std::fs::File::open(dir.join(name))?;
                let mut b = vec![0u8; IO];
                for i in 0..pieces {
                    f.read_exact(&mut b)?;
                    check(&b, i, name)?;
                }
            }
        }
        Ok(())
    }

    /// Drops the page cache of the file `name` and of the store behind it.
    fn drop_cache(&self, name: &str) -> Result<()> {
        if measure::cold_method() == "drop_caches" {
            return measure::drop_page_cache(Path::new("/"));
        }
        match self {
            DataTarget::Lib { store, .. } => measure::drop_page_cache(store),
            DataTarget::Posix { dir, store } => {
                let f = std::fs::File::open(dir.join(name))?;
                f.sync_all()?;
                use std::os::unix::io::AsRawFd;
                // SAFETY: an advisory call on a descriptor `f` keeps open.
                unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
                match store {
                    Some(s) => measure::drop_page_cache(s),
                    None => Ok(()),
                }
            }
        }
    }
}

/// Writes, reads warm and (with `cold`) reads cold one file of each of `sizes` through
/// `target`, removing each afterwards.
pub(crate) fn run(
    label: &str,
    target: &DataTarget<'_>,
    sizes: &[u64],
    cold: bool,
) -> Result<Vec<DataRun>> {
    let mut pool = vec![0u8; IO];
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for b in pool.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let mut out = Vec::new();
    for &bytes in sizes {
        let name = format!("data-{bytes}");
        let mbps = |t: Instant| bytes as f64 / t.elapsed().as_secs_f64().max(1e-9) / 1e6;
        eprint!("{label}: {} MiB: write", bytes >> 20);
        let t = Instant::now();
        target
            .write(&name, bytes, &pool)
            .with_context(|| format!("{label}: writing {name}"))?;
        let durable_write_mbps = mbps(t);
        eprint!(", read");
        let t = Instant::now();
        target
            .read(&name, bytes)
            .with_context(|| format!("{label}: reading {name}"))?;
        let warm_read_mbps = mbps(t);
        let cold_read_mbps = if cold {
            eprint!(", cold read");
            target
                .drop_cache(&name)
                .with_context(|| format!("{label}: dropping the page cache"))?;
            let t = Instant::now();
            target
                .read(&name, bytes)
                .with_context(|| format!("{label}: reading {name} cold"))?;
            Some(mbps(t))
        } else {
            None
        };
        eprintln!();
        match target {
            DataTarget::Lib { fs, .. } => {
                fs.unlink(&cairn_fs::Cred::ROOT, ROOT, name.as_bytes())?
            }
            DataTarget::Posix { dir, .. } => std::fs::remove_file(dir.join(&name))?,
        }
        out.push(DataRun {
            target: label.to_string(),
            bytes,
            durable_write_mbps,
            warm_read_mbps,
            cold_read_mbps,
        });
    }
    Ok(out)
}

/// The results as a Markdown table.
pub(crate) fn markdown(runs: &[DataRun], cold: bool) -> String {
    let mut s = String::from("\nlarge files (1 MiB writes then fsync; 1 MiB reads; MB/s):\n\n");
    s.push_str("| target | file | durable write | read, warm |");
    s.push_str(if cold {
        " read, cold |\n|---|---:|---:|---:|---:|\n"
    } else {
        "\n|---|---:|---:|---:|\n"
    });
    for r in runs {
        s.push_str(&format!(
            "| {} | {} MiB | {:.0} | {:.0} |",
            r.target,
            r.bytes >> 20,
            r.durable_write_mbps,
            r.warm_read_mbps
        ));
        if cold {
            s.push_str(&match r.cold_read_mbps {
                Some(v) => format!(" {v:.0} |"),
                None => " – |".into(),
            });
        }
        s.push('\n');
    }
    if cold {
        s.push_str(&format!(
            "\ncold reads: the page cache dropped before each ({})\n",
            if measure::cold_method() == "drop_caches" {
                "`echo 3 > /proc/sys/vm/drop_caches`, as root"
            } else {
                "posix_fadvise(DONTNEED) of the file and the store's files: not root"
            }
        ));
    }
    s
}
