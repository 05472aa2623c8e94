//! Point reads that miss the page cache go around it (DESIGN.md, "Reads that reach the
//! disk").
//!
//! A store far larger than memory keeps the page cache full. A cold point read through
//! the cache (`pread` of a descriptor opened normally) must first find a page to put the
//! record in — reclaim, which on a small machine is a CPU's worth of work at the disk's
//! rate of random reads — and the page it fills is as likely to be read again as any
//! other of the store's millions, so it mostly displaces one that was just as useful. A
//! read with `O_DIRECT` goes from the disk to the caller's buffer and leaves the cache as
//! it was.
//!
//! So a point read of a record within a few pages first asks whether its pages are
//! cached ([`resident`]: `mincore` of the segment's map, about a microsecond; not
//! `preadv2(RWF_NOWAIT)`, which starts the kernel's read of a missing page before it
//! answers `EAGAIN`); a cached record is read with `pread`. A miss while the cache is full
//! ([`cache_full`]: free memory under 1/16 of the machine's) reads the record's
//! 4 KiB-aligned span with `O_DIRECT` — unless the same page missed recently
//! ([`Ghosts`]): a page asked for twice within the last few million misses is worth
//! caching (a hot key of a skewed workload), and its second miss reads it through the
//! cache. This is the "second chance" of 2Q and ARC's ghost lists, kept as two
//! generations of a bitmap instead of a list.
//!
//! Everything here is an optimisation: a file system without `O_DIRECT`, a `mincore`
//! that cannot answer or a direct read that fails for any reason falls back to the
//! plain `pread` the caller would have made.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
#[cfg(test)]
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Alignment of a direct read's offset, length and buffer: a multiple of every logical
/// block size in use (512 and 4096 bytes).
pub const ALIGN: u64 = 4096;

/// Whether every page of `len` bytes at `off` of a file mapped at `map` is in the page
/// cache (`mincore`, about a microsecond; no disk read, no readahead). `None` when the
/// kernel cannot say (the caller then reads through the cache). Spans of up to 8 pages.
pub fn resident(map: &[u8], off: u64, len: usize) -> Option<bool> {
    let page = super::page_size();
    let end = off.checked_add(len as u64)?;
    if len == 0 || end > map.len() as u64 {
        return None;
    }
    let start = off / page * page;
    let pages = (end - start).div_ceil(page) as usize;
    let mut vec = [0u8; 8];
    if pages > vec.len() {
        return None;
    }
    // SAFETY: `start..end` lies within the map (checked above) and starts on a page
    // boundary (the map does); `vec` has room for a byte per page of it.
    let r = unsafe {
        libc::mincore(
            map.as_ptr().add(start as usize) as *mut libc::c_void,
            (end - start) as usize,
            vec.as_mut_ptr(),
        )
    };
    (r == 0).then(|| vec[..pages].iter().all(|v| v & 1 == 1))
}

/// Whether the page cache is full: the machine's free memory under 1/16 of its total,
/// or this process's memory cgroup (v2) within 1/16 of its limit (which counts the
/// page cache its processes read) — so that a page read into the cache costs the
/// reclaim of another. While it is not, a cold read goes through the cache as any read
/// would (it costs nothing to keep the page, and a store that fits in memory warms up
/// as fast as before). Asked of the kernel (`sysinfo`, the cgroup's `memory.max` and
/// `memory.current`) at most every 100 ms.
pub fn cache_full() -> bool {
    #[cfg(test)]
    if FORCE_FULL.load(Ordering::Relaxed) {
        return true;
    }
    // The last answer (low bit) and when it was found (the rest, in ms of CLOCK_MONOTONIC_COARSE).
    static LAST: AtomicU64 = AtomicU64::new(0);
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    let now = ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000 + 1;
    let last = LAST.load(Ordering::Relaxed);
    if last != 0 && now.saturating_sub(last >> 1) < 100 {
        return last & 1 == 1;
    }
    // SAFETY: sysinfo fills the struct it is given.
    let mut si: libc::sysinfo = unsafe { std::mem::zeroed() };
    let machine =
        (unsafe { libc::sysinfo(&mut si) } == 0).then(|| (si.freeram as u64, si.totalram as u64));
    let full = is_full(machine, cgroup_memory());
    LAST.store(now << 1 | full as u64, Ordering::Relaxed);
    full
}

/// The rule of [`cache_full`]: from the machine's free and total memory (units alike)
/// and a cgroup's limit and use in bytes.
fn is_full(machine: Option<(u64, u64)>, cgroup: Option<(u64, u64)>) -> bool {
    machine.is_some_and(|(free, total)| free < total / 16)
        || cgroup.is_some_and(|(max, cur)| cur > max - max / 16)
}

/// The memory limit of this process's cgroup (v2) and what it holds, if it has a limit.
fn cgroup_memory() -> Option<(u64, u64)> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    let dir = DIR
        .get_or_init(|| {
            let s = std::fs::read_to_string("/proc/self/cgroup").ok()?;
            let rel = s.lines().find_map(|l| l.strip_prefix("0::"))?;
            Some(Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/')))
        })
        .as_ref()?;
    cgroup_figures(dir)
}

/// `memory.max` and `memory.current` of the cgroup directory `dir`; `None` without a
/// limit ("max") or without the files.
fn cgroup_figures(dir: &Path) -> Option<(u64, u64)> {
    let read = |f: &str| -> Option<u64> {
        // "max" (no limit) does not parse: no answer.
        std::fs::read_to_string(dir.join(f))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    Some((read("memory.max")?, read("memory.current")?))
}

/// Tests: the cache counts as full whatever the machine's memory.
#[cfg(test)]
pub static FORCE_FULL: AtomicBool = AtomicBool::new(false);

/// A second descriptor of a segment, opened `O_DIRECT`, made at its first cold read.
#[derive(Debug, Default)]
pub struct Direct {
    /// `None` once opening or reading it failed: this segment reads through the cache.
    file: OnceLock<Option<File>>,
}

impl Direct {
    /// Whether this segment reads around the cache (false before its first cold read,
    /// and where `O_DIRECT` is refused).
    #[cfg(test)]
    pub fn opened(&self) -> bool {
        self.file.get().is_some_and(|f| f.is_some())
    }

    /// Reads `len` bytes at `off` of the segment (`file`, at `path`) from the disk
    /// around the page cache. Returns the buffer and where the bytes start in it (the
    /// read covers whole aligned blocks), or `None` when a direct read is not possible
    /// here (the caller then reads through the cache).
    pub fn read(&self, file: &File, path: &Path, off: u64, len: usize) -> Option<(Vec<u8>, usize)> {
        let direct = self.file.get_or_init(|| open_direct(file, path)).as_ref()?;
        let start = off / ALIGN * ALIGN;
        let end = (off + len as u64).div_ceil(ALIGN) * ALIGN;
        let span = (end - start) as usize;
        // An aligned window of an ordinary buffer: no allocator tricks, at the price of
        // up to one block of slack.
        let mut buf = vec![0u8; span + ALIGN as usize];
        let skew = buf.as_ptr().align_offset(ALIGN as usize);
        let mut got = 0;
        while got < span {
            match direct.read_at(&mut buf[skew + got..skew + span], start + got as u64) {
                // The end of the file: enough if the record is inside.
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => {
                    // Alignment this device does not take, or an I/O error: the
                    // buffered read will say which, and this segment stops trying.
                    return None;
                }
            }
            // A direct read returns whole blocks; a partial one means the end.
            if got % ALIGN as usize != 0 {
                break;
            }
        }
        let at = skew + (off - start) as usize;
        if got < (off - start) as usize + len {
            return None;
        }
        buf.truncate(at + len);
        Some((buf, at))
    }
}

/// Opens the segment again with `O_DIRECT`: through `/proc/self/fd` (the same file even
/// if compaction has unlinked it), else by path.
fn open_direct(file: &File, path: &Path) -> Option<File> {
    let open = |p: &Path| {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(p)
            .ok()
    };
    let proc = format!("/proc/self/fd/{}", file.as_raw_fd());
    open(Path::new(&proc)).or_else(|| open(path))
}

/// Pages that missed the cache recently: two generations of a bitmap indexed by a hash
/// of (segment, page). A page's first miss sets its bit and is read around the cache; a
/// miss that finds the bit set (in either generation) is read through it. The current
/// generation takes [`GHOST_GEN`] misses, then becomes the previous one and a cleared
/// bitmap takes its place — so "recently" is the last one to two generations of misses
/// (2–4 million), and a page's bit is set by others (a collision) at most ~22% of the
/// time.
pub struct Ghosts {
    gens: [Box<[AtomicU64]>; 2],
    /// The generation taking misses (its low bit), bumped at each turn.
    current: AtomicUsize,
    /// Misses set in the current generation.
    filled: AtomicUsize,
}

/// Bits per generation (2 MiB each).
const GHOST_BITS: usize = 1 << 24;
/// Misses per generation (2M): an eighth of its bits, so a page that never missed finds
/// its bit set in one of the two generations at most ~22% of the time (11% in each).
const GHOST_GEN: usize = GHOST_BITS / 8;

impl Ghosts {
    fn new() -> Ghosts {
        let gen = || (0..GHOST_BITS / 64).map(|_| AtomicU64::new(0)).collect();
        Ghosts {
            gens: [gen(), gen()],
            current: AtomicUsize::new(0),
            filled: AtomicUsize::new(0),
        }
    }

    /// The process's ghosts, made at the first cold read.
    pub fn get() -> &'static Ghosts {
        static GHOSTS: OnceLock<Ghosts> = OnceLock::new();
        GHOSTS.get_or_init(Ghosts::new)
    }

    /// Notes a miss of `page` of the segment identified by `seg`; true when it missed
    /// recently already (read it through the cache this time).
    pub fn missed_again(&self, seg: usize, page: u64) -> bool {
        let h = hash(seg as u64, page);
        let (word, bit) = ((h as usize / 64) % (GHOST_BITS / 64), 1u64 << (h % 64));
        let cur = self.current.load(Ordering::Relaxed) & 1;
        let before = self.gens[cur][word].fetch_or(bit, Ordering::Relaxed);
        if before & bit != 0 || self.gens[cur ^ 1][word].load(Ordering::Relaxed) & bit != 0 {
            return true;
        }
        if self.filled.fetch_add(1, Ordering::Relaxed) + 1 == GHOST_GEN {
            // This thread turns the generations: the older one is cleared and takes the
            // misses from now on. Racing misses may land in either; a heuristic only.
            let old = cur ^ 1;
            for w in self.gens[old].iter() {
                w.store(0, Ordering::Relaxed);
            }
            self.current.store(old, Ordering::Relaxed);
            self.filled.store(0, Ordering::Relaxed);
        }
        false
    }
}

/// A 64-bit mix of a segment's identity and a page number (the finaliser of
/// SplitMix64).
fn hash(seg: u64, page: u64) -> u64 {
    let mut z = seg
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(page)
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_missed_twice_is_read_through_the_cache() {
        let g = Ghosts::new();
        assert!(!g.missed_again(1, 10));
        assert!(g.missed_again(1, 10));
        assert!(!g.missed_again(1, 11));
        assert!(!g.missed_again(2, 10));
        // Strangers collide at most ~11% of the time in a full generation.
        let mut again = 0;
        for p in 0..GHOST_GEN as u64 - 10 {
            again += g.missed_again(3, 1_000_000 + p) as usize;
        }
        assert!(again < GHOST_GEN / 16, "{again} collisions");
        // Two turns later, pages that missed before are forgotten (but for
        // collisions).
        let g = Ghosts::new();
        for p in 0..1000 {
            assert!(!g.missed_again(6, p));
        }
        // (Misses that collide do not count towards a turn.)
        for p in 0..3 * GHOST_GEN as u64 {
            g.missed_again(7, p);
        }
        let forgotten = (0..1000).filter(|&p| !g.missed_again(6, p)).count();
        assert!(forgotten > 750, "{forgotten} of 1000 forgotten");
    }

    #[test]
    fn the_cache_is_full_when_memory_or_the_cgroup_is() {
        assert!(!is_full(Some((100, 1000)), None));
        assert!(is_full(Some((50, 1000)), None));
        assert!(!is_full(Some((100, 1000)), Some((1 << 30, 900 << 20))));
        assert!(is_full(Some((100, 1000)), Some((1 << 30, 1000 << 20))));
        assert!(!is_full(None, None));
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(cgroup_figures(dir.path()), None);
        std::fs::write(dir.path().join("memory.max"), "max\n").unwrap();
        std::fs::write(dir.path().join("memory.current"), "12345\n").unwrap();
        assert_eq!(cgroup_figures(dir.path()), None, "no limit");
        std::fs::write(dir.path().join("memory.max"), "536870912\n").unwrap();
        assert_eq!(cgroup_figures(dir.path()), Some((536870912, 12345)));
    }

    #[test]
    fn direct_reads_return_the_bytes_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..3 * ALIGN as usize + 100)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        std::fs::write(&path, &data).unwrap();
        let file = File::open(&path).unwrap();
        let d = Direct::default();
        for (off, len) in [
            (0, 10),
            (4000, 200),
            (4096, 4096),
            (5000, 7000),
            (12300, 88),
        ] {
            match d.read(&file, &path, off, len) {
                Some((buf, at)) => {
                    assert_eq!(&buf[at..at + len], &data[off as usize..off as usize + len]);
                    assert_eq!(buf.len(), at + len);
                }
                // A file system without O_DIRECT (tmpfs): the caller reads through the
                // cache.
                None => assert!(open_direct(&file, &path).is_none()),
            }
        }
        // Past the end: no bytes, no panic.
        assert!(d.read(&file, &path, data.len() as u64 - 10, 20).is_none());
    }
}
