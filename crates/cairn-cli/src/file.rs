//! `cairn file ...`: the file store (`cairn::files`) from the command line.
//!
//! Content goes in and out as raw bytes, streamed, so files of any size pass through a
//! few MiB of memory. Keys are taken as raw bytes and printed escaped (see
//! `cairn help scan`). A missing file is an error (exit status 1); `verify` exits with
//! status 2 when it finds damage.

use std::collections::hash_map::RandomState;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, IsTerminal, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use cairn_files::{FileReader, FileStat};

use crate::escape::{escape, write_escaped};
use crate::report::human_bytes;
use crate::{open_existing, open_for_reading, open_or_create, stdout, EXIT_DAMAGE};

/// Transfers at least this long get a progress bar (when stderr is a terminal).
const PROGRESS_MIN_BYTES: u64 = 16 << 20;
/// Copy buffer size.
const BUF: usize = 1 << 20;

/// Long description of `file`.
pub const ABOUT: &str = "\
Store, read and manage files: large values streamed in chunks over all shards, each
chunk checksummed, committed atomically (a reader sees the old file or the new one, never
a mix), removed in constant time; `rm` gives the space back before it returns (see
`cairn help file rm`).

File keys are separate from the keys of `put`/`get`. A missing file is an error (exit
status 1). A progress bar is shown on stderr for long transfers when stderr is a
terminal.";

/// Arguments of `file`.
#[derive(Debug, Args)]
pub struct FileArgs {
    /// What to do
    #[command(subcommand)]
    command: FileCommand,
}

/// The subcommands of `file`.
#[derive(Debug, Subcommand)]
enum FileCommand {
    /// Store a file from PATH (`-` = standard input) and print its key; without --key
    /// the key is the BLAKE3 hash of the content (identical content is stored once)
    Put {
        /// The file to store, or `-` for standard input
        path: OsString,
        /// Store under KEY (replacing any file there) instead of the content hash
        #[arg(long, value_name = "KEY")]
        key: Option<OsString>,
    },
    /// Write the content of file KEY to PATH, or to standard output (PATH omitted or `-`)
    Get {
        /// The file's key
        key: OsString,
        /// Where to write it (replaced atomically); `-` or omitted = standard output
        path: Option<OsString>,
    },
    /// Write part of file KEY to standard output, reading only the chunks needed
    Cat {
        /// The file's key
        key: OsString,
        /// First byte to write
        #[arg(long, value_name = "O", default_value_t = 0)]
        offset: u64,
        /// Number of bytes to write (fewer at the end of the file); default: to the end
        #[arg(long, value_name = "L")]
        length: Option<u64>,
    },
    /// Remove file KEY; its space is given back before the command returns (its chunks
    /// deleted and the segments they leave dead dropped, within two seconds; what is
    /// left is reclaimed after the next open)
    Rm {
        /// The file's key
        key: OsString,
    },
    /// Show a file's size, chunks, content hash and creation time
    Stat {
        /// The file's key
        key: OsString,
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
    /// List files in key order, one key per line
    Ls {
        /// Only keys that start with P
        #[arg(long, value_name = "P")]
        prefix: Option<OsString>,
        /// Also show size, creation time and content hash: `SIZE<TAB>CREATED<TAB>BLAKE3<TAB>KEY`
        #[arg(long, short = 'l')]
        long: bool,
    },
    /// Re-read a file (or every file) checking each chunk's checksum and the content
    /// hash; exit status 2 if anything is damaged
    Verify {
        /// The file's key; omitted = every file
        key: Option<OsString>,
    },
}

/// Runs `cairn file ...` on the store in `dir`.
pub fn run(dir: &Path, args: &FileArgs) -> Result<ExitCode> {
    match &args.command {
        FileCommand::Put { path, key } => put(dir, path, key.as_deref())?,
        FileCommand::Get { key, path } => get(dir, key, path.as_deref())?,
        FileCommand::Cat {
            key,
            offset,
            length,
        } => cat(dir, key, *offset, *length)?,
        FileCommand::Rm { key } => rm(dir, key)?,
        FileCommand::Stat { key, json } => stat(dir, key, *json)?,
        FileCommand::Ls { prefix, long } => ls(dir, prefix.as_deref(), *long)?,
        FileCommand::Verify { key } => return verify(dir, key.as_deref()),
    }
    Ok(ExitCode::SUCCESS)
}

fn not_found(key: &[u8]) -> anyhow::Error {
    anyhow::anyhow!("file not found: {}", escape(key))
}

/// A progress bar on stderr for a transfer of `len` bytes (unknown: `None`), or a hidden
/// one when stderr is not a terminal or the transfer is short.
fn progress(len: Option<u64>, what: &str) -> ProgressBar {
    if !io::stderr().is_terminal() || len.is_some_and(|l| l < PROGRESS_MIN_BYTES) {
        return ProgressBar::hidden();
    }
    let bar = match len {
        Some(l) => ProgressBar::new(l).with_style(
            ProgressStyle::with_template(
                "{msg} [{bar:32}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{msg} {spinner} {binary_bytes} {binary_bytes_per_sec}")
                .expect("valid template"),
        ),
    };
    bar.set_message(what.to_string());
    bar
}

/// The cairn error inside an `io::Error` from a file reader or writer, if it holds one.
fn unwrap_io(e: io::Error) -> anyhow::Error {
    if !e.get_ref().is_some_and(|i| i.is::<cairn::Error>()) {
        return e.into();
    }
    match e.into_inner().map(|inner| inner.downcast::<cairn::Error>()) {
        Some(Ok(err)) => (*err).into(),
        _ => anyhow::anyhow!("unreadable error"),
    }
}

/// `file put PATH|- [--key KEY]`.
fn put(dir: &Path, path: &OsStr, key: Option<&OsStr>) -> Result<()> {
    let (input, len, what): (Box<dyn Read>, Option<u64>, String) = if path == "-" {
        (Box::new(io::stdin().lock()), None, "stdin".into())
    } else {
        let p = Path::new(path);
        let f = File::open(p).with_context(|| format!("cannot open {}", p.display()))?;
        let meta = f
            .metadata()
            .with_context(|| format!("cannot read {}", p.display()))?;
        if meta.is_dir() {
            bail!("{} is a directory", p.display());
        }
        (Box::new(f), Some(meta.len()), p.display().to_string())
    };
    let bar = progress(len, &what);
    let input = bar.wrap_read(input);
    let db = open_or_create(dir)?;
    let files = cairn_files::FileStore::new(&db)?;
    let key = match key {
        Some(k) => {
            let k = k.as_encoded_bytes();
            files.put_reader(k, input)?;
            k.to_vec()
        }
        None => files.put_content(input)?.into_bytes(),
    };
    bar.finish_and_clear();
    db.flush()?;
    let mut out = stdout();
    write_escaped(&mut out, &key)?;
    out.write_all(b"\n")?;
    out.flush()?;
    db.close()?;
    Ok(())
}

/// Copies `len` bytes from `r` to `out`, telling read errors (the store's) from write
/// errors (the output's, such as a closed pipe, kept as `io::Error`).
fn copy_out(r: &mut FileReader, out: &mut impl Write, len: u64, bar: &ProgressBar) -> Result<()> {
    let mut buf = vec![0u8; BUF.min(len as usize).max(1)];
    let mut left = len;
    while left > 0 {
        let want = (buf.len() as u64).min(left) as usize;
        let n = match r.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(unwrap_io(e).context(format!("reading file {}", escape(r.key())))),
        };
        out.write_all(&buf[..n])?;
        bar.inc(n as u64);
        left -= n as u64;
    }
    Ok(())
}

/// A writer that moves the progress bar and remembers whether it failed, so that a
/// streamed copy's error can be told as the output's or the store's.
struct Out<'a, W: Write> {
    inner: &'a mut W,
    bar: &'a ProgressBar,
    failed: bool,
}

impl<W: Write> Write for Out<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let r = self.inner.write(buf);
        match &r {
            Ok(n) => self.bar.inc(*n as u64),
            Err(_) => self.failed = true,
        }
        r
    }

    fn flush(&mut self) -> io::Result<()> {
        let r = self.inner.flush();
        self.failed |= r.is_err();
        r
    }
}

/// Streams the whole of `r` to `out`, its chunks read ahead on several threads
/// ([`FileReader::copy_to`]); read errors (the store's) come back as the store's error,
/// write errors (the output's, such as a closed pipe) as `io::Error`.
fn stream_out(r: &mut FileReader, out: &mut impl Write, bar: &ProgressBar) -> Result<()> {
    let mut o = Out {
        inner: out,
        bar,
        failed: false,
    };
    match r.copy_to(&mut o, 0) {
        Ok(_) => Ok(()),
        Err(e) if o.failed => Err(e.into()),
        Err(e) => Err(unwrap_io(e).context(format!("reading file {}", escape(r.key())))),
    }
}

/// `file get KEY [PATH|-]`.
fn get(dir: &Path, key: &OsStr, path: Option<&OsStr>) -> Result<()> {
    let db = open_for_reading(dir)?;
    let key = key.as_encoded_bytes();
    let mut r = cairn_files::FileStore::new(&db)?
        .open(key)?
        .ok_or_else(|| not_found(key))?;
    let size = r.len();
    let bar = progress(Some(size), &escape(key));
    match path.filter(|p| *p != "-") {
        None => {
            let mut out = stdout();
            stream_out(&mut r, &mut out, &bar)?;
            out.flush()?;
        }
        Some(p) => {
            // Written next to PATH and renamed over it once complete, so PATH never
            // holds part of the file.
            let dest = PathBuf::from(p);
            let (f, tmp) = create_temp(&dest)?;
            let res = (|| -> Result<()> {
                let mut w = io::BufWriter::with_capacity(BUF, f);
                stream_out(&mut r, &mut w, &bar).map_err(|e| match e.downcast::<io::Error>() {
                    Ok(io) => anyhow::Error::new(io).context(format!("writing {}", tmp.display())),
                    Err(e) => e,
                })?;
                let f = w
                    .into_inner()
                    .map_err(|e| e.into_error())
                    .with_context(|| format!("writing {}", tmp.display()))?;
                f.sync_all()
                    .with_context(|| format!("syncing {}", tmp.display()))?;
                fs::rename(&tmp, &dest)
                    .with_context(|| format!("renaming {} to {}", tmp.display(), dest.display()))
            })();
            if res.is_err() {
                let _ = fs::remove_file(&tmp);
            }
            res?;
            // The rename is durable once the directory is.
            let dir = match tmp.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            File::open(dir)
                .and_then(|d| d.sync_all())
                .with_context(|| format!("syncing directory {}", dir.display()))?;
        }
    }
    bar.finish_and_clear();
    db.close()?;
    Ok(())
}

/// Creates the file `file get` writes before renaming it to `dest`: in `dest`'s
/// directory (so that the rename is atomic), named `dest` + `.cairn-tmp-` + 64 random
/// bits, and created new (`O_CREAT | O_EXCL`): a symbolic link or a file already at the
/// name is never followed, opened or truncated, and a name taken is passed over for
/// another. Its mode is the usual 0666 less the umask, the mode `dest` gets and would
/// have got from a plain create; the random name, not the mode, keeps others from
/// getting at it first.
fn create_temp(dest: &Path) -> Result<(File, PathBuf)> {
    // 64 bits of SipHash keyed from the system's random source (the standard library's
    // random keys, a different one per `RandomState`); the attempt number, the process
    // and the time only make each input new.
    let random = |attempt: u32| {
        let mut h = RandomState::new().build_hasher();
        h.write_u32(attempt);
        h.write_u32(std::process::id());
        h.write_u128(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.finish()
    };
    let base = dest.file_name().map(OsString::from).unwrap_or_default();
    const ATTEMPTS: u32 = 16;
    for attempt in 0..ATTEMPTS {
        let mut name = base.clone();
        name.push(format!(".cairn-tmp-{:016x}", random(attempt)));
        let tmp = dest.with_file_name(name);
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(
                    anyhow::Error::new(e).context(format!("cannot create {}", tmp.display()))
                )
            }
        }
    }
    bail!(
        "cannot create a temporary file next to {}: {ATTEMPTS} random names taken",
        dest.display()
    )
}

/// `file cat KEY --offset O --length L`.
fn cat(dir: &Path, key: &OsStr, offset: u64, length: Option<u64>) -> Result<()> {
    let db = open_for_reading(dir)?;
    let key = key.as_encoded_bytes();
    let mut r = cairn_files::FileStore::new(&db)?
        .open(key)?
        .ok_or_else(|| not_found(key))?;
    let len = r
        .len()
        .saturating_sub(offset)
        .min(length.unwrap_or(u64::MAX));
    r.seek(SeekFrom::Start(offset))?;
    let bar = progress(Some(len), &escape(key));
    let mut out = stdout();
    copy_out(&mut r, &mut out, len, &bar)?;
    out.flush()?;
    bar.finish_and_clear();
    db.close()?;
    Ok(())
}

/// `file rm KEY`. The close reclaims the file's chunks and drops the segments they
/// leave dead, within the store's close budget (`cairn::Options::close_budget`), so the
/// space is back when the command returns.
fn rm(dir: &Path, key: &OsStr) -> Result<()> {
    let db = open_existing(dir)?;
    let key = key.as_encoded_bytes();
    let files = cairn_files::FileStore::new(&db)?;
    if !files.remove(key)? {
        return Err(not_found(key));
    }
    drop(files);
    db.close()?;
    Ok(())
}

/// `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ` for `t` (UTC).
fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_nanos()
    )
}

/// `file stat KEY [--json]`.
fn stat(dir: &Path, key: &OsStr, json: bool) -> Result<()> {
    let db = open_for_reading(dir)?;
    let key = key.as_encoded_bytes();
    let s = cairn_files::FileStore::new(&db)?
        .stat(key)?
        .ok_or_else(|| not_found(key))?;
    let mut out = stdout();
    if json {
        let v = stat_json(key, &s);
        serde_json::to_writer_pretty(&mut out, &v).map_err(io::Error::from)?;
        out.write_all(b"\n")?;
    } else {
        writeln!(out, "key:        {}", escape(key))?;
        writeln!(
            out,
            "size:       {} bytes ({})",
            s.size,
            human_bytes(s.size)
        )?;
        writeln!(
            out,
            "chunks:     {} of {}",
            s.chunks,
            human_bytes(s.chunk_size)
        )?;
        writeln!(out, "blake3:     {}", s.hash_hex())?;
        writeln!(out, "created:    {}", rfc3339(s.created))?;
        writeln!(out, "version:    {:032x}", s.version)?;
    }
    out.flush()?;
    db.close()?;
    Ok(())
}

/// The JSON form of a file's metadata. The key is a string: as is when it is UTF-8,
/// escaped otherwise (with `key_escaped: true`).
fn stat_json(key: &[u8], s: &FileStat) -> serde_json::Value {
    let (k, escaped) = match std::str::from_utf8(key) {
        Ok(k) => (k.to_string(), false),
        Err(_) => (escape(key), true),
    };
    let created_ns = s
        .created
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    serde_json::json!({
        "key": k,
        "key_escaped": escaped,
        "size": s.size,
        "chunks": s.chunks,
        "chunk_size": s.chunk_size,
        "blake3": s.hash_hex(),
        "created": rfc3339(s.created),
        "created_unix_ns": created_ns,
        "version": format!("{:032x}", s.version),
    })
}

/// `file ls [--prefix P] [-l]`.
fn ls(dir: &Path, prefix: Option<&OsStr>, long: bool) -> Result<()> {
    let db = open_for_reading(dir)?;
    let files = cairn_files::FileStore::new(&db)?;
    let prefix = prefix.map(|p| p.as_encoded_bytes()).unwrap_or_default();
    let mut out = stdout();
    for entry in files.list_prefix(prefix) {
        let (key, s) = entry?;
        if long {
            write!(
                out,
                "{}\t{}\t{}\t",
                s.size,
                rfc3339(s.created),
                s.hash_hex()
            )?;
        }
        write_escaped(&mut out, &key)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    db.close()?;
    Ok(())
}

/// `file verify [KEY]`: one line per damaged place and a summary; exit status 2 on
/// damage.
fn verify(dir: &Path, key: Option<&OsStr>) -> Result<ExitCode> {
    let db = open_for_reading(dir)?;
    let files = cairn_files::FileStore::new(&db)?;
    let keys: Vec<Vec<u8>> = match key {
        Some(k) => vec![k.as_encoded_bytes().to_vec()],
        None => files
            .list()
            .map(|e| e.map(|(k, _)| k))
            .collect::<cairn::Result<_>>()?,
    };
    let mut out = stdout();
    let (mut checked, mut bytes, mut damaged) = (0u64, 0u64, 0u64);
    for k in &keys {
        let Some(check) = files.verify(k)? else {
            if key.is_some() {
                return Err(not_found(k));
            }
            continue; // removed since it was listed
        };
        checked += 1;
        bytes += check.stat.size;
        if !check.is_ok() {
            damaged += 1;
        }
        for d in &check.damage {
            write_escaped(&mut out, k)?;
            writeln!(out, ": {d}")?;
        }
    }
    let verdict = if damaged == 0 {
        "no damage found".to_string()
    } else {
        format!("{damaged} damaged file(s)")
    };
    writeln!(
        out,
        "verified {checked} file(s), {}: {verdict}",
        human_bytes(bytes)
    )?;
    out.flush()?;
    Ok(if damaged == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_DAMAGE)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rfc3339_formats_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
        let t = UNIX_EPOCH + Duration::new(1_700_000_000, 5);
        assert_eq!(rfc3339(t), "2023-11-14T22:13:20.000000005Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000000000Z");
    }
}
