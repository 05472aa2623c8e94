//! A small read at a random offset of a file whose data is not in the page cache costs
//! one disk read — through the file store and through the file system (`cairn::fs`):
//! the chunk holding it is read with one `pread`, not page by page through a map (16
//! faults, each a disk round trip, for a 64 KiB chunk). Counted per thread: major page
//! faults (`getrusage(RUSAGE_THREAD)`) and bytes read from the disk
//! (`/proc/thread-self/io`, `read_bytes`).
//!
//! The store's files are dropped from the page cache with
//! [`cairn::evict_page_cache`]; where that leaves the data cached (a tmpfs, a file
//! system that ignores the advice), the test reports a skip.

mod common;

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use cairn_fs::{Cred, Fs, ROOT};

const FILE_BYTES: u64 = 48 << 20;
const PAGE: u64 = 4096;

/// (bytes this thread read from the disk, its major page faults), or `None` where the
/// kernel does not count them.
fn thread_io() -> Option<(u64, u64)> {
    let io = std::fs::read_to_string("/proc/thread-self/io").ok()?;
    let read_bytes = io
        .lines()
        .find_map(|l| l.strip_prefix("read_bytes: "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: rusage is plain integers, for which all zero bytes are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage only writes the struct it is given, which outlives the call.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return None;
    }
    Some((read_bytes, ru.ru_majflt as u64))
}

/// Deterministic incompressible-looking bytes.
fn data(len: u64, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Drops the store at `dir` from the page cache, runs `before` (reads a caller has
/// made before the one measured), then `read`, and returns the bytes the thread read
/// from the disk and the major page faults it took during `read`; `None` where they
/// can't be counted or the cache could not be dropped (nothing read from the disk).
fn cold(dir: &Path, before: impl FnOnce(), read: impl FnOnce()) -> Option<(u64, u64)> {
    cairn::evict_page_cache(dir).expect("evicting");
    before();
    let b = thread_io()?;
    read();
    let a = thread_io()?;
    Some((a.0 - b.0, a.1 - b.1)).filter(|(bytes, _)| *bytes > 0)
}

/// The checks of one cold read: no page fault, at most one chunk (and the pages its
/// record straddles) from the disk.
fn check(what: &str, n: u64, res: Option<(u64, u64)>, chunk: u64) -> bool {
    let Some((bytes, faults)) = res else {
        common::skip(&format!(
            "cold_read ({what}): the page cache could not be dropped or I/O is not counted here"
        ));
        return false;
    };
    assert_eq!(
        faults, 0,
        "{what}, read {n}: a cold 4 KiB read took {faults} page faults"
    );
    let most = chunk + 2 * PAGE;
    assert!(
        bytes <= most,
        "{what}, read {n}: {bytes} bytes from disk for 4 KiB (at most {most})"
    );
    true
}

/// Offsets of the reads: inside chunks, none at a chunk's start.
const OFFSETS: [u64; 3] = [20_000_037, 41_000_001, 3_333_333];

#[test]
fn a_small_cold_read_of_the_file_system_is_one_disk_read() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let me = Cred::ROOT;
    let body = data(FILE_BYTES, 7);
    let ino = {
        let fs = Fs::open(tmp.path()).unwrap();
        let f = fs.create(&me, ROOT, b"big", 0o644).unwrap();
        for (i, piece) in body.chunks(1 << 20).enumerate() {
            fs.write(f.ino, (i as u64) << 20, piece).unwrap();
        }
        fs.close().unwrap();
        f.ino
    };
    let fs = Fs::open(tmp.path()).unwrap();
    for (n, off) in OFFSETS.into_iter().enumerate() {
        let mut got = Vec::new();
        // The inode's row is read before (a mount has it: open and getattr came first);
        // the data is what must cost one read.
        let res = cold(
            tmp.path(),
            || {
                fs.getattr(ino).unwrap();
            },
            || got = fs.read(ino, off, 4096).unwrap(),
        );
        assert_eq!(got, &body[off as usize..off as usize + 4096], "read {n}");
        if !check("fs", n as u64, res, cairn_fs::CHUNK_SIZE) {
            break;
        }
    }
    fs.close().unwrap();
}

#[test]
fn a_small_cold_read_of_the_file_store_is_one_disk_read() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let body = data(FILE_BYTES, 11);
    {
        let db = cairn::Db::open(tmp.path()).unwrap();
        let store = cairn_files::FileStore::new(&db).unwrap();
        store.put("big", &body).unwrap();
        db.close().unwrap();
    }
    let db = cairn::Db::open(tmp.path()).unwrap();
    let store = cairn_files::FileStore::new(&db).unwrap();
    let chunk = store.chunk_size();
    for (n, off) in OFFSETS.into_iter().enumerate() {
        let mut r = store.open("big").unwrap().expect("the file");
        let mut got = vec![0u8; 4096];
        let res = cold(
            tmp.path(),
            || {},
            || {
                r.seek(SeekFrom::Start(off)).unwrap();
                r.read_exact(&mut got).unwrap();
            },
        );
        assert_eq!(got, &body[off as usize..off as usize + 4096], "read {n}");
        if !check("files", n as u64, res, chunk) {
            break;
        }
    }
    db.close().unwrap();
}
