//! The create storm of `replication-bench`: threads of this process, each creating
//! files `f0`, `f1` ... one after another in a directory of its own through one
//! [`Client`] (at most a given rate, or as fast as they are answered), recording every
//! create's start, end and result; the pauses the threads saw; and the check, with a
//! fresh client, that every acknowledged create's name exists.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use cairn_cluster::Client;
use cairn_fs::{Cred, FileSystem};
use serde::Serialize;

/// Most creates one thread records (a bound on memory: 24 bytes each).
const MAX_RECORDS: usize = 50_000_000;
/// An error answered faster than this is followed by a pause of this long (so that a
/// thread does not spin on errors).
const ERROR_BACKOFF: Duration = Duration::from_millis(5);
/// Names asked for per listing call when checking.
const LIST_PAGE: usize = 10_000;

/// One create: when it started and ended (microseconds from the storm's start) and its
/// result (`errno` 0: acknowledged).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rec {
    /// Start, µs.
    pub start: u64,
    /// End, µs.
    pub end: u64,
    /// 0, or the error number it failed with.
    pub errno: i32,
}

/// What one thread did: its directory and its creates, `f{i}` the i-th.
#[derive(Debug, Default)]
pub(crate) struct ThreadLog {
    /// Its directory.
    pub dir: u64,
    /// Its creates in order.
    pub recs: Vec<Rec>,
}

impl ThreadLog {
    /// Ends of its acknowledged creates, µs (ascending: one create at a time).
    pub(crate) fn acked_ends(&self) -> Vec<u64> {
        self.recs
            .iter()
            .filter(|r| r.errno == 0)
            .map(|r| r.end)
            .collect()
    }
}

/// Creates by result, over all threads.
#[derive(Debug, Default, Serialize, Clone)]
pub(crate) struct Counts {
    /// Acknowledged.
    pub acknowledged: u64,
    /// Failed with EIO: the client cannot know whether they were done.
    pub ambiguous: u64,
    /// Failed otherwise: (errno, count).
    pub other: Vec<(i32, u64)>,
}

impl Counts {
    /// The counts of `logs`' creates.
    pub(crate) fn of(logs: &[ThreadLog]) -> Counts {
        let mut c = Counts::default();
        let mut other = std::collections::BTreeMap::new();
        for r in logs.iter().flat_map(|l| &l.recs) {
            match r.errno {
                0 => c.acknowledged += 1,
                libc::EIO => c.ambiguous += 1,
                e => *other.entry(e).or_insert(0) += 1,
            }
        }
        c.other = other.into_iter().collect();
        c
    }

    /// Creates that failed otherwise than with EIO.
    pub(crate) fn others(&self) -> u64 {
        self.other.iter().map(|x| x.1).sum()
    }
}

/// Running storm threads; told to stop when dropped.
pub(crate) struct Storm {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<ThreadLog>>,
    /// The storm's start: the zero of every record's times.
    pub t0: Instant,
}

impl Storm {
    /// Starts a thread per directory in `dirs`, each creating at most `rate` files a
    /// second (`None`: as fast as answered) for at most `limit`.
    pub(crate) fn start(
        client: &Client,
        dirs: &[u64],
        rate: Option<f64>,
        limit: Duration,
    ) -> Storm {
        let stop = Arc::new(AtomicBool::new(false));
        let t0 = Instant::now();
        let threads = dirs
            .iter()
            .map(|&dir| {
                let (c, stop) = (client.clone(), stop.clone());
                std::thread::spawn(move || create_loop(&c, dir, (rate, limit), t0, &stop))
            })
            .collect();
        Storm { stop, threads, t0 }
    }

    /// Microseconds since the storm's start.
    pub(crate) fn now(&self) -> u64 {
        self.t0.elapsed().as_micros() as u64
    }

    /// Stops the threads (each finishes the create it is in, at most the client's
    /// timeout) and returns what each did.
    pub(crate) fn finish(mut self) -> Result<Vec<ThreadLog>> {
        self.stop.store(true, Ordering::Relaxed);
        std::mem::take(&mut self.threads)
            .into_iter()
            .map(|t| {
                t.join()
                    .map_err(|_| anyhow::anyhow!("a storm thread panicked"))
            })
            .collect()
    }
}

impl Drop for Storm {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One storm thread's loop (see [`Storm::start`]).
fn create_loop(
    c: &Client,
    dir: u64,
    (rate, limit): (Option<f64>, Duration),
    t0: Instant,
    stop: &AtomicBool,
) -> ThreadLog {
    let mut log = ThreadLog {
        dir,
        recs: Vec::new(),
    };
    let us = |t: Instant| t.duration_since(t0).as_micros() as u64;
    let begun = Instant::now();
    while !stop.load(Ordering::Relaxed) && begun.elapsed() < limit && log.recs.len() < MAX_RECORDS {
        if let Some(r) = rate {
            let due = begun + Duration::from_secs_f64(log.recs.len() as f64 / r);
            let now = Instant::now();
            if due > now {
                std::thread::sleep((due - now).min(Duration::from_millis(100)));
                continue;
            }
        }
        let name = format!("f{}", log.recs.len());
        let start = Instant::now();
        let res = c.create(&Cred::ROOT, dir, name.as_bytes(), 0o644);
        let end = Instant::now();
        let errno = match res {
            Ok(_) => 0,
            Err(e) => e.0,
        };
        log.recs.push(Rec {
            start: us(start),
            end: us(end),
            errno,
        });
        if errno != 0 && end - start < ERROR_BACKOFF {
            std::thread::sleep(ERROR_BACKOFF);
        }
    }
    log
}

/// A time without acknowledged creates: from one's end to the next's, µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Gap {
    /// Its length.
    pub len: u64,
    /// Its start and end.
    pub from: u64,
    pub to: u64,
}

/// The longest gap between consecutive acknowledged creates (`ends`, ascending) that
/// ends in the window `(from, to]` (each gap belongs to the window of its end); the
/// gap before the first create starts at `origin`, and one still open at `to` (no
/// create after) ends there.
pub(crate) fn longest_gap(ends: &[u64], origin: u64, (from, to): (u64, u64)) -> Gap {
    let first = ends.partition_point(|&e| e <= from);
    let last = ends.partition_point(|&e| e <= to);
    let mut best = Gap {
        len: 0,
        from,
        to: from,
    };
    let mut prev = if first == 0 { origin } else { ends[first - 1] };
    for &e in &ends[first..last] {
        if e.saturating_sub(prev) > best.len {
            best = Gap {
                len: e - prev,
                from: prev,
                to: e,
            };
        }
        prev = e;
    }
    if last == ends.len() && to.saturating_sub(prev) > best.len {
        best = Gap {
            len: to - prev,
            from: prev,
            to,
        };
    }
    best
}

/// The value at quantile `q` of `v` (nearest rank; 0 if empty).
pub(crate) fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return 0.0;
    }
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

/// What the check of the acknowledged creates found.
#[derive(Debug, Default, Serialize, Clone)]
pub(crate) struct Verdict {
    /// Acknowledged creates checked.
    pub acknowledged: u64,
    /// Acknowledged creates whose name does not exist.
    pub lost: u64,
    /// The first few of them, as `dir/name`.
    pub lost_names: Vec<String>,
    /// When the lost creates were acknowledged: the first's and the last's end,
    /// seconds of the storm's clock.
    pub lost_between: Option<(f64, f64)>,
    /// Creates that failed with EIO, and how many of them were done after all.
    pub ambiguous: u64,
    /// See `ambiguous`.
    pub ambiguous_done: u64,
    /// Names in the directories that no thread tried to create.
    pub unexpected: u64,
}

/// Lists every thread's directory with `client` and checks that each acknowledged
/// create's name is there.
pub(crate) fn verify(client: &Client, logs: &[ThreadLog]) -> Result<Verdict> {
    let mut v = Verdict::default();
    for log in logs {
        let (present, unexpected) = present(client, log.dir, "f", log.recs.len())?;
        v.unexpected += unexpected;
        for (i, r) in log.recs.iter().enumerate() {
            match r.errno {
                0 => {
                    v.acknowledged += 1;
                    if !present[i] {
                        v.lost += 1;
                        let t = r.end as f64 / 1e6;
                        v.lost_between = Some(match v.lost_between {
                            Some((a, b)) => (a.min(t), b.max(t)),
                            None => (t, t),
                        });
                        if v.lost_names.len() < 20 {
                            v.lost_names.push(format!("{:#x}/f{i}", log.dir));
                        }
                    }
                }
                libc::EIO => {
                    v.ambiguous += 1;
                    v.ambiguous_done += u64::from(present[i]);
                }
                _ => {}
            }
        }
    }
    Ok(v)
}

/// Which of the names `{prefix}0` .. `{prefix}{n-1}` directory `dir` holds, and how many
/// other names it holds.
pub(crate) fn present(
    client: &Client,
    dir: u64,
    prefix: &str,
    n: usize,
) -> Result<(Vec<bool>, u64)> {
    let mut seen = vec![false; n];
    let mut unexpected = 0;
    let mut after: Option<Vec<u8>> = None;
    // Bounded: every page but the last holds LIST_PAGE names.
    for _ in 0..=(n / LIST_PAGE + 1_000) {
        let page = client
            .readdir(&Cred::ROOT, dir, after.as_deref(), LIST_PAGE)
            .map_err(|e| anyhow::anyhow!("listing directory {dir:#x}: {e}"))?;
        let Some(last) = page.last() else {
            return Ok((seen, unexpected));
        };
        after = Some(last.name.clone());
        for e in &page {
            let i = std::str::from_utf8(&e.name)
                .ok()
                .and_then(|s| s.strip_prefix(prefix))
                .and_then(|s| s.parse::<usize>().ok())
                .filter(|&i| i < n);
            match i {
                Some(i) => seen[i] = true,
                None => unexpected += 1,
            }
        }
    }
    Err(anyhow::anyhow!(
        "directory {dir:#x}: its listing does not end"
    ))
    .context("checking the acknowledged creates")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_gap_over_a_window() {
        let ends = [10, 20, 30, 100, 110];
        let len = |w| longest_gap(&ends, 0, w).len;
        // Each gap belongs to the window of its end: 30..100 to one holding 100.
        assert_eq!(len((40, 50)), 0);
        assert_eq!(len((95, 105)), 70);
        assert_eq!(
            longest_gap(&ends, 0, (95, 105)),
            Gap {
                len: 70,
                from: 30,
                to: 100
            }
        );
        assert_eq!(len((25, 35)), 10);
        // Before the first create: from the origin.
        assert_eq!(len((0, 10)), 10);
        assert_eq!(len((0, 5)), 0);
        // After the last: open to the window's end.
        assert_eq!(len((105, 200)), 90);
        assert_eq!(len((100, 110)), 10);
        assert_eq!(longest_gap(&[], 0, (5, 50)).len, 50);
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let v = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(quantile(&v, 0.5), 3.0);
        assert_eq!(quantile(&v, 0.99), 5.0);
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }
}
