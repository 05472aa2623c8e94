//! `cairn demo`: a self-checking workload that shows what the store does and how fast.
//!
//! Keys are 16 hex digits of a bijective 64-bit mix of the record number, so they are
//! unique, random-looking and cheap to regenerate; values are pseudo-random printable
//! bytes derived from the record number and its version, so every read can be checked
//! without keeping the data in memory.

use std::fs;
use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::escape::escape;
use crate::report::{human_bytes, index_per_key, space_amp, write_amp};

/// Long description of `demo`.
pub const ABOUT: &str = "\
Run a self-checking workload on the store in --db and print, for each step, the number
of operations, the time taken and the operations per second, then the store's statistics.

Steps: write N random keys; read them all back, checking each value; scan everything,
checking order, count and values; scan one prefix; overwrite a quarter of the keys;
delete a tenth; flush; compact; close and reopen the store (timing the open); then read and
scan everything again, checking the result against what was written.

The directory must be new, empty, or a store made by an earlier `cairn demo` (which is
erased first); any other directory is refused, so no other data is ever touched. The
store is left in place afterwards for inspection with `cairn stats`, `cairn scan` etc.
Exit status is 1 if any check fails.";

/// Name of the file that marks a directory as made by `cairn demo`.
const MARKER: &str = "CAIRN-DEMO";

/// Seed of the key and value generators (fixed, so runs are reproducible).
const SEED: u64 = 0x6361_6972_6e20_6465;

/// Prefix used by the prefix-scan step (one hex digit: about 1/16 of the keys).
const SCAN_PREFIX: &[u8] = b"a";

/// Options of `demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Number of records to write
    #[arg(long, value_name = "N", default_value_t = 200_000)]
    records: usize,
    /// Size of each value in bytes
    #[arg(long, value_name = "B", default_value_t = 100)]
    value_size: usize,
}

/// Runs the demo on the store in `dir`, writing progress to `out`.
pub fn run(dir: &Path, args: &DemoArgs, out: &mut impl Write) -> Result<ExitCode> {
    if args.value_size > cairn::MAX_VALUE_LEN {
        bail!(
            "--value-size {} exceeds the limit of {} bytes",
            args.value_size,
            cairn::MAX_VALUE_LEN
        );
    }
    prepare_dir(dir)?;
    let mut w = Workload::new(args.records, args.value_size);
    writeln!(
        out,
        "cairn demo: {} records with {}-byte values in {}\n",
        w.len(),
        w.value_size,
        dir.display()
    )?;
    writeln!(
        out,
        "{:<24} {:>10} {:>12} {:>14}  check",
        "step", "count", "elapsed", "ops/s"
    )?;

    let db = crate::open_store(dir)?;
    mark_dir(dir)?;
    step(out, "put", true, || w.put_all(&db))?;
    step(out, "get (check values)", true, || w.get_all(&db))?;
    step(out, "scan all (check order)", true, || {
        w.scan(db.iter(), b"")
    })?;
    let label = format!("prefix scan \"{}\"", escape(SCAN_PREFIX));
    step(out, &label, true, || {
        w.scan(db.prefix(SCAN_PREFIX), SCAN_PREFIX)
    })?;
    step(out, "overwrite 1/4", true, || w.overwrite(&db, 4))?;
    step(out, "delete 1/10", true, || w.delete(&db, 10))?;
    step(out, "flush", false, || {
        db.flush()?;
        Ok(Checked::ok(w.live()))
    })?;
    step(out, "compact", false, || {
        db.compact()?;
        Ok(Checked::ok(w.live()))
    })?;
    // Write amplification counts from the open, so it is taken before the reopen.
    let written = db.stats().total;
    db.close()?;

    let mut reopened = None;
    step(out, "reopen", false, || {
        reopened = Some(crate::open_store(dir)?);
        Ok(Checked::ok(w.live()))
    })?;
    let db = reopened.context("the store was not reopened")?;
    step(out, "get all after reopen", true, || w.get_all(&db))?;
    step(out, "scan all after reopen", true, || {
        w.scan(db.iter(), b"")
    })?;

    let stats = db.stats().total;
    write_summary(out, &stats, &written)?;
    out.flush()?;
    if stats.keys != w.live() {
        bail!(
            "demo check failed: stats report {} keys, expected {}",
            stats.keys,
            w.live()
        );
    }
    db.close()?;
    writeln!(out, "\nall checks passed")?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Writes the closing figures: `stats` of the reopened store, and the write
/// amplification of `written`, the figures taken before the reopen.
fn write_summary(
    out: &mut impl Write,
    stats: &cairn::ShardStats,
    written: &cairn::ShardStats,
) -> io::Result<()> {
    let rows = [
        ("keys", stats.keys.to_string(), ""),
        ("live bytes", human_bytes(stats.live_bytes), ""),
        ("disk bytes", human_bytes(stats.disk_bytes), ""),
        ("segments", stats.segments.to_string(), ""),
        (
            "write amplification",
            write_amp(written),
            "  (before the reopen)",
        ),
        ("space amplification", space_amp(stats), ""),
        ("index bytes per key", index_per_key(stats), ""),
    ];
    writeln!(out, "\nstore after the demo:")?;
    for (name, value, note) in rows {
        writeln!(out, "  {name:<20} {value:>12}{note}")?;
    }
    Ok(())
}

/// Makes sure `dir` is new, empty or an earlier demo's store (which is erased).
fn prepare_dir(dir: &Path) -> Result<()> {
    let mut entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            return fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()));
        }
        Err(err) => return Err(err).with_context(|| format!("cannot read {}", dir.display())),
    };
    if entries.next().is_none() {
        return Ok(());
    }
    if !dir.join(MARKER).is_file() {
        bail!(
            "{} is not empty and was not made by `cairn demo`; give --db a new or empty directory",
            dir.display()
        );
    }
    // Never erase a store that another process has open.
    match cairn::Db::open(dir) {
        Err(err @ cairn::Error::Locked(_)) => return Err(err.into()),
        // Opened only to see that no one holds it; it is erased next, so an error
        // closing it changes nothing.
        Ok(db) => {
            let _ = db.close();
        }
        Err(_) => {}
    }
    fs::remove_dir_all(dir).with_context(|| format!("cannot erase {}", dir.display()))?;
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

/// Marks `dir` as made by `cairn demo`, so that the next demo may erase it.
fn mark_dir(dir: &Path) -> Result<()> {
    let path = dir.join(MARKER);
    fs::write(
        &path,
        "This store was made by `cairn demo`; the next `cairn demo` here erases it.\n",
    )
    .with_context(|| format!("cannot write {}", path.display()))
}

/// Runs one timed step and prints its line; fails if any of its checks failed.
fn step(
    out: &mut impl Write,
    name: &str,
    show_rate: bool,
    body: impl FnOnce() -> Result<Checked>,
) -> Result<()> {
    let start = Instant::now();
    let checked = body().with_context(|| format!("demo step `{name}`"))?;
    let elapsed = start.elapsed();
    let rate = if show_rate {
        ops_per_sec(checked.count, elapsed)
    } else {
        "-".to_string()
    };
    let verdict = if checked.failures == 0 {
        "ok"
    } else {
        "FAILED"
    };
    writeln!(
        out,
        "{name:<24} {:>10} {:>12} {rate:>14}  {verdict}",
        checked.count,
        duration(elapsed)
    )?;
    out.flush()?;
    if let Some(first) = checked.first_failure {
        bail!(
            "demo check failed in step `{name}`: {} problem(s); first: {first}",
            checked.failures
        );
    }
    Ok(())
}

/// What a step did: how many operations, and which of its checks failed.
#[derive(Debug, Default)]
struct Checked {
    /// Operations done.
    count: u64,
    /// Checks that failed.
    failures: u64,
    /// Description of the first failed check.
    first_failure: Option<String>,
}

impl Checked {
    /// `count` operations, all fine.
    fn ok(count: u64) -> Checked {
        Checked {
            count,
            ..Checked::default()
        }
    }

    /// Records a failed check; the description is built only for the first one.
    fn fail(&mut self, describe: impl FnOnce() -> String) {
        self.failures += 1;
        if self.first_failure.is_none() {
            self.first_failure = Some(describe());
        }
    }
}

/// The state of a record as the demo expects it in the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Written with the value of this version.
    Live(u8),
    /// Deleted.
    Deleted,
}

/// The records of the demo and what the store should hold for each.
struct Workload {
    /// Numeric form of each record's key; the key is its 16 lowercase hex digits.
    ids: Vec<u64>,
    /// Record numbers sorted by key.
    sorted: Vec<usize>,
    /// Expected state of each record.
    states: Vec<State>,
    /// Bytes per value.
    value_size: usize,
}

impl Workload {
    /// `n` records with `value_size`-byte values, none written yet.
    fn new(n: usize, value_size: usize) -> Workload {
        let ids: Vec<u64> = (0..n as u64).map(|i| mix(SEED ^ i)).collect();
        let mut sorted: Vec<usize> = (0..n).collect();
        // Fixed-width hex sorts like the number it encodes.
        sorted.sort_unstable_by_key(|&i| ids[i]);
        Workload {
            ids,
            sorted,
            states: vec![State::Live(0); n],
            value_size,
        }
    }

    /// Number of records.
    fn len(&self) -> usize {
        self.ids.len()
    }

    /// Number of records that should be in the store.
    fn live(&self) -> u64 {
        self.states.iter().filter(|s| **s != State::Deleted).count() as u64
    }

    /// The key of record `i`.
    fn key(&self, i: usize) -> [u8; 16] {
        hex_key(self.ids[i])
    }

    /// The value of version `version` of record `i`.
    fn value(&self, i: usize, version: u8) -> Vec<u8> {
        const ALPHABET: &[u8; 64] =
            b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";
        let mut state = mix(self.ids[i] ^ (u64::from(version) << 56));
        let mut value = Vec::with_capacity(self.value_size + 8);
        while value.len() < self.value_size {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let bits = mix(state);
            value.extend(bits.to_le_bytes().map(|b| ALPHABET[usize::from(b & 63)]));
        }
        value.truncate(self.value_size);
        value
    }

    /// Writes every record (version 0).
    fn put_all(&mut self, db: &cairn::Db) -> Result<Checked> {
        for i in 0..self.len() {
            db.put(self.key(i), self.value(i, 0))?;
            self.states[i] = State::Live(0);
        }
        Ok(Checked::ok(self.len() as u64))
    }

    /// Reads every record (in write order) and checks it against its expected state.
    fn get_all(&self, db: &cairn::Db) -> Result<Checked> {
        let mut checked = Checked::ok(self.len() as u64);
        for i in 0..self.len() {
            let key = self.key(i);
            let got = db.get(key)?;
            match (self.states[i], got) {
                (State::Live(version), Some(value)) => {
                    if *value != *self.value(i, version) {
                        checked.fail(|| format!("wrong value for key {}", escape(&key)));
                    }
                }
                (State::Live(_), None) => {
                    checked.fail(|| format!("key {} is missing", escape(&key)));
                }
                (State::Deleted, Some(_)) => {
                    checked.fail(|| format!("deleted key {} is still there", escape(&key)));
                }
                (State::Deleted, None) => {}
            }
        }
        Ok(checked)
    }

    /// Consumes a scan and checks it against the live records that start with
    /// `prefix`, in key order (an empty prefix for a scan of everything).
    fn scan(&self, iter: cairn::Iter, prefix: &[u8]) -> Result<Checked> {
        let expected: Vec<(usize, u8)> = self
            .sorted
            .iter()
            .filter_map(|&i| match self.states[i] {
                State::Live(version) if self.key(i).starts_with(prefix) => Some((i, version)),
                _ => None,
            })
            .collect();
        let mut checked = Checked::default();
        let mut previous: Option<Vec<u8>> = None;
        for (pos, entry) in iter.enumerate() {
            let (key, value) = entry?;
            let expect = expected.get(pos).copied();
            checked.count += 1;
            if previous.as_ref().is_some_and(|p| *p >= key) {
                checked.fail(|| format!("scan out of order at key {}", escape(&key)));
            }
            if let Some((i, version)) = expect {
                if key != self.key(i) {
                    checked.fail(|| {
                        format!(
                            "scan returned key {} where {} was expected",
                            escape(&key),
                            escape(&self.key(i))
                        )
                    });
                } else if *value != *self.value(i, version) {
                    checked.fail(|| format!("wrong value for key {}", escape(&key)));
                }
            }
            previous = Some(key);
        }
        let count = checked.count;
        if count != expected.len() as u64 {
            checked.fail(|| format!("scan returned {count} entries, expected {}", expected.len()));
        }
        Ok(checked)
    }

    /// Overwrites every `nth` record (those with `i % nth == 1`) with version 1.
    fn overwrite(&mut self, db: &cairn::Db, nth: usize) -> Result<Checked> {
        let mut count = 0;
        for i in (1..self.len()).step_by(nth) {
            db.put(self.key(i), self.value(i, 1))?;
            self.states[i] = State::Live(1);
            count += 1;
        }
        Ok(Checked::ok(count))
    }

    /// Deletes every `nth` record (those with `i % nth == 3`).
    fn delete(&mut self, db: &cairn::Db, nth: usize) -> Result<Checked> {
        let mut count = 0;
        for i in (3..self.len()).step_by(nth) {
            db.delete(self.key(i))?;
            self.states[i] = State::Deleted;
            count += 1;
        }
        Ok(Checked::ok(count))
    }
}

/// A bijective 64-bit mixing function (the splitmix64 finalizer with its increment).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The 16 lowercase hex digits of `id`.
fn hex_key(id: u64) -> [u8; 16] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut key = [0; 16];
    for (n, byte) in key.iter_mut().enumerate() {
        *byte = DIGITS[((id >> (60 - 4 * n)) & 15) as usize];
    }
    key
}

/// An elapsed time with a unit that keeps about four significant digits.
fn duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs >= 1.0 {
        format!("{secs:.3} s")
    } else if secs >= 1e-3 {
        format!("{:.1} ms", secs * 1e3)
    } else {
        format!("{:.1} µs", secs * 1e6)
    }
}

/// Operations per second with thousands separators, or `-` if too fast to measure.
fn ops_per_sec(count: u64, d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs <= 0.0 {
        return "-".to_string();
    }
    let rate = (count as f64 / secs).round() as u64;
    let digits = rate.to_string();
    let mut grouped = String::with_capacity(digits.len() + digits.len() / 3);
    for (n, c) in digits.chars().enumerate() {
        if n > 0 && (digits.len() - n) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    grouped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_sorted_hex() {
        let w = Workload::new(1000, 10);
        let keys: Vec<[u8; 16]> = w.sorted.iter().map(|&i| w.key(i)).collect();
        assert!(keys.windows(2).all(|p| p[0] < p[1]));
        assert_eq!(&hex_key(0x0123_4567_89ab_cdef), b"0123456789abcdef");
    }

    #[test]
    fn values_depend_on_version_and_have_the_size() {
        let w = Workload::new(3, 37);
        assert_eq!(w.value(1, 0).len(), 37);
        assert_ne!(w.value(1, 0), w.value(1, 1));
        assert_eq!(w.value(2, 1), w.value(2, 1));
        assert!(Workload::new(1, 0).value(0, 0).is_empty());
    }

    #[test]
    fn rates_are_grouped() {
        assert_eq!(ops_per_sec(1_234_567, Duration::from_secs(1)), "1,234,567");
        assert_eq!(ops_per_sec(999, Duration::from_secs(1)), "999");
        assert_eq!(ops_per_sec(1000, Duration::from_secs(1)), "1,000");
    }
}
