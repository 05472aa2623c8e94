//! Tests of the file store (`cairn_files::FileStore`, opened on a `cairn::Db`).
//!
//! Most tests use 4 KiB chunks so that files of many chunks stay small. Content is made
//! by [`content`]: it starts with its id and size and continues with bytes derived from
//! the id, so any file read back can be checked to be exactly one version ever written.
//! The crash and memory tests re-run this test binary as a child process (selected with
//! environment variables) and kill or measure it.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cairn::{Db, Error, Options, SyncPolicy};
use cairn_files::{FileOptions, FileStat, FileStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CS: usize = 4096;

fn opts() -> Options {
    Options::new().shards(4)
}

/// The file store of a test store, with [`CS`]-byte chunks.
trait Files {
    fn files(&self) -> FileStore;
}

impl Files for Db {
    fn files(&self) -> FileStore {
        FileStore::with_options(self, FileOptions::new().chunk_size(CS as u64)).unwrap()
    }
}

/// Deterministic content of version `id`: `id` and `size` (little-endian, as far as they
/// fit), then xorshift bytes seeded by `id`.
fn content(id: u64, size: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(size);
    let mut head = id.to_le_bytes().to_vec();
    head.extend_from_slice(&(size as u64).to_le_bytes());
    v.extend_from_slice(&head[..size.min(16)]);
    let mut x = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while v.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = (size - v.len()).min(8);
        v.extend_from_slice(&x.to_le_bytes()[..n]);
    }
    v
}

/// The id of `data` if it is exactly `content(id, len)` for the id in its header.
fn content_id(data: &[u8]) -> Option<u64> {
    if data.len() < 16 {
        return None;
    }
    let id = u64::from_le_bytes(data[..8].try_into().unwrap());
    (content(id, data.len()) == data).then_some(id)
}

fn blake3_of(data: &[u8]) -> [u8; 32] {
    *blake3::hash(data).as_bytes()
}

/// Runs the collector and checks that the store holds exactly the settings row, the
/// files' metadata and their chunks: nothing orphaned, nothing pending. Assumes no
/// key-value keys in the store.
fn assert_no_orphans(db: &Db) {
    let files = db.files();
    files.collect_garbage().unwrap();
    let st = db.stats();
    let fst = files.stats().unwrap();
    assert_eq!(fst.pending_gc, 0, "garbage left: {fst:?}");
    let listed: Vec<(Vec<u8>, FileStat)> = files.list().collect::<Result<_, _>>().unwrap();
    assert_eq!(fst.files, listed.len() as u64);
    assert_eq!(fst.bytes, listed.iter().map(|(_, s)| s.size).sum::<u64>());
    assert_eq!(
        fst.chunks,
        listed.iter().map(|(_, s)| s.chunks).sum::<u64>()
    );
    assert_eq!(
        st.total.keys,
        1 + fst.files + fst.chunks,
        "stored rows other than settings, metadata and live chunks: {:?}",
        fst
    );
}

fn sizes() -> Vec<usize> {
    vec![
        0,
        1,
        CS - 1,
        CS,
        CS + 1,
        3 * CS,
        100 * CS + 7,
        (1 << 20) - 1,
        1 << 20,
        (1 << 20) + 1,
        300 * CS + 123,
    ]
}

#[test]
fn round_trips_of_every_boundary_size() {
    let dir = tempfile::tempdir().unwrap();
    let mut expected = BTreeMap::new();
    {
        let db = opts().open(dir.path()).unwrap();
        let files = db.files();
        assert_eq!(files.chunk_size(), CS as u64);
        for (i, &size) in sizes().iter().enumerate() {
            let key = format!("f{i:02}-{size}");
            let data = content(i as u64, size);
            let stat = files.put(&key, &data).unwrap();
            assert_eq!(stat.size, size as u64);
            assert_eq!(stat.chunks, size.div_ceil(CS) as u64);
            assert_eq!(stat.chunk_size, CS as u64);
            assert_eq!(stat.hash, blake3_of(&data));
            assert_eq!(files.stat(&key).unwrap().as_ref(), Some(&stat));
            assert_eq!(files.read(&key).unwrap().as_deref(), Some(&data[..]));
            // Through Read, in odd-sized pieces.
            let mut r = files.open(&key).unwrap().unwrap();
            assert_eq!(r.len(), size as u64);
            let mut back = Vec::new();
            let mut buf = vec![0u8; 1000];
            loop {
                let n = r.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                back.extend_from_slice(&buf[..n]);
            }
            assert_eq!(back, data, "{key}");
            assert!(files.verify(&key).unwrap().unwrap().is_ok());
            expected.insert(key, data);
        }
        assert_no_orphans(&db);
    }
    // Everything is still there after reopening, and the totals are rebuilt exactly.
    let db = opts().open(dir.path()).unwrap();
    let files = db.files();
    for (k, v) in &expected {
        assert_eq!(files.read(k).unwrap().as_deref(), Some(&v[..]), "{k}");
    }
    let st = db.files().stats().unwrap();
    assert_eq!(st.files, expected.len() as u64);
    assert_eq!(
        st.bytes,
        expected.values().map(|v| v.len() as u64).sum::<u64>()
    );
    assert_no_orphans(&db);
}

#[test]
fn empty_file_exists_and_is_not_missing() {
    let dir = tempfile::tempdir().unwrap();
    let db = opts().open(dir.path()).unwrap();
    let files = db.files();
    assert!(files.stat("empty").unwrap().is_none());
    assert!(files.open("empty").unwrap().is_none());
    files.create("empty").unwrap().commit().unwrap();
    let s = files.stat("empty").unwrap().unwrap();
    assert_eq!((s.size, s.chunks), (0, 0));
    assert_eq!(s.hash, blake3_of(b""));
    assert!(files.exists("empty"));
    assert_eq!(files.read("empty").unwrap(), Some(Vec::new()));
    assert_eq!(files.read_range("empty", 0, 10).unwrap(), Some(Vec::new()));
    let mut r = files.open("empty").unwrap().unwrap();
    assert_eq!(r.read(&mut [0u8; 8]).unwrap(), 0);
    assert!(files.remove("empty").unwrap());
    assert!(!files.remove("empty").unwrap());
    assert!(!files.exists("empty"));
}

#[test]
fn range_reads_at_every_chunk_boundary() {
    let dir = tempfile::tempdir().unwrap();
    let db = opts().open(dir.path()).unwrap();
    let files = db.files();
    // Large enough to be streamed (not the small-file path), with a partial last chunk.
    let size = 300 * CS + 100;
    let data = content(7, size);
    files.put("big", &data).unwrap();
    let small = content(8, 5 * CS + 3);
    files.put("small", &small).unwrap();
    for (key, data) in [("big", &data), ("small", &small)] {
        let size = data.len() as u64;
        let chunks = size.div_ceil(CS as u64);
        let mut r = files.open(key).unwrap().unwrap();
        for i in 0..=chunks {
            let b = i * CS as u64;
            for (off, len) in [
                (b.saturating_sub(1), 2),
                (b, 1),
                (b, CS as u64),
                (b.saturating_sub(3), CS as u64 + 6),
                (b, 0),
                (b.saturating_sub(CS as u64), 2 * CS as u64 + 1),
            ] {
                let want = &data[(off.min(size)) as usize..((off + len).min(size)) as usize];
                let got = files.read_range(key, off, len).unwrap().unwrap();
                assert_eq!(got, want, "{key} read_range({off}, {len})");
                // The same through Seek + Read.
                r.seek(SeekFrom::Start(off)).unwrap();
                let mut buf = vec![0u8; len as usize];
                let mut n = 0;
                while n < buf.len() {
                    let k = r.read(&mut buf[n..]).unwrap();
                    if k == 0 {
                        break;
                    }
                    n += k;
                }
                assert_eq!(&buf[..n], want, "{key} seek+read({off}, {len})");
            }
        }
        // Past the end and relative seeks.
        assert_eq!(files.read_range(key, size + 10, 5).unwrap().unwrap(), b"");
        assert_eq!(r.seek(SeekFrom::End(-1)).unwrap(), size - 1);
        let mut one = [0u8; 1];
        r.read_exact(&mut one).unwrap();
        assert_eq!(one[0], data[data.len() - 1]);
        assert_eq!(r.seek(SeekFrom::Current(-2)).unwrap(), size - 2);
        assert!(r.seek(SeekFrom::Current(-(size as i64) - 5)).is_err());
    }
    assert!(files.read_range("nope", 0, 1).unwrap().is_none());
}

#[test]
fn overwrite_while_a_reader_is_open_keeps_the_old_version_readable() {
    let dir = tempfile::tempdir().unwrap();
    let db = opts().open(dir.path()).unwrap();
    let files = db.files();
    files.put("anchor", b"").unwrap();
    let v1 = content(1, 400 * CS + 5); // streamed path
    let v2 = content(2, 3 * CS); // small path, shorter
    files.put("k", &v1).unwrap();
    let mut r = files.open("k").unwrap().unwrap();
    let mut first = vec![0u8; v1.len() / 2];
    r.read_exact(&mut first).unwrap();
    // Overwrite with a shorter file, then remove it too, while the reader is open.
    files.put("k", &v2).unwrap();
    assert_eq!(files.read("k").unwrap().unwrap(), v2);
    let gc = files.collect_garbage().unwrap();
    assert_eq!(gc.deferred, 1, "the open reader's version is left alone");
    assert!(files.remove("k").unwrap());
    files.collect_garbage().unwrap();
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).unwrap();
    first.extend_from_slice(&rest);
    assert_eq!(first, v1, "the reader read the old version to its end");
    assert_eq!(r.stat().hash, blake3_of(&v1));
    drop(r);
    // Letting go of the version wakes the collector; either it or this pass reclaims
    // the 401 chunks.
    assert_no_orphans(&db);
    assert_eq!(db.files().stats().unwrap().chunks, 0);
}

#[test]
fn large_files_written_in_pieces_of_any_size_round_trip() {
    // A large file's chunks are stored by storer threads (one per group of shards, one
    // with one shard) while the writer hashes; whole chunks written at a chunk boundary
    // are taken from the caller's bytes. Any mix of piece sizes gives the same file.
    for shards in [1, 4] {
        let dir = tempfile::tempdir().unwrap();
        let db = Options::new().shards(shards).open(dir.path()).unwrap();
        let files = db.files();
        let data = content(9, 700 * CS + 123);
        let pieces = [CS, 1, 3 * CS + 5, 2 * CS, 17, CS - 1, 5 * CS];
        let mut w = files.create("big").unwrap();
        let (mut at, mut i) = (0, 0);
        while at < data.len() {
            let n = pieces[i % pieces.len()].min(data.len() - at);
            w.write_all(&data[at..at + n]).unwrap();
            at += n;
            i += 1;
        }
        let stat = w.commit().unwrap();
        assert_eq!(stat.size, data.len() as u64);
        assert_eq!(stat.hash, blake3_of(&data));
        assert_eq!(files.read("big").unwrap().unwrap(), data, "{shards} shards");
        assert!(files.verify("big").unwrap().unwrap().is_ok());
        // Overwritten by whole chunks only, then removed: nothing left over.
        let again = content(10, 400 * CS);
        let mut w = files.create("big").unwrap();
        for c in again.chunks(CS) {
            w.write_all(c).unwrap();
        }
        assert_eq!(w.commit().unwrap().hash, blake3_of(&again));
        assert_eq!(files.read("big").unwrap().unwrap(), again);
        assert_no_orphans(&db);
        assert!(files.remove("big").unwrap());
        assert_no_orphans(&db);
    }
}

#[test]
fn the_background_collector_reclaims_removed_files_on_its_own() {
    // A remove does not wake the collector (it polls for a while after open and after
    // work, and is woken only when dormant): the chunks go without `collect_garbage`.
    let dir = tempfile::tempdir().unwrap();
    let db = opts().open(dir.path()).unwrap();
    let files = db.files();
    let wait_collected = |what: &str| {
        let t = Instant::now();
        while db.files().stats().unwrap().pending_gc > 0 {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "{what}: not collected"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    // Right after open.
    std::thread::sleep(Duration::from_millis(50));
    files.put("a", content(1, 300 * CS)).unwrap();
    assert!(files.remove("a").unwrap());
    wait_collected("collector after open");
    // Active, right after its last pass: a burst of removes is collected too.
    for i in 0..5u64 {
        files.put(format!("b{i}"), content(i, 50 * CS + 1)).unwrap();
    }
    for i in 0..5u64 {
        assert!(files.remove(format!("b{i}")).unwrap());
    }
    wait_collected("active collector");
    assert_eq!(db.files().stats().unwrap().chunks, 0);
}

#[test]
fn removed_files_segments_are_dropped_whole_in_the_background() {
    // Segments holding only removed files' chunks (and the tombstones of earlier ones)
    // go whole, sealed or not, and nothing live goes with them.
    let dir = tempfile::tempdir().unwrap();
    let opts = || opts().segment_size(256 << 10);
    let keep = content(77, 200 * CS + 5);
    {
        let db = opts().open(dir.path()).unwrap();
        let files = db.files();
        files.put("keep", &keep).unwrap();
        for round in 0..4u64 {
            for i in 0..6u64 {
                files
                    .put(format!("f{i}"), content(round * 10 + i, 150 * CS))
                    .unwrap();
            }
            for i in 0..6u64 {
                assert!(files.remove(format!("f{i}")).unwrap());
            }
        }
        files.collect_garbage().unwrap();
        let t = Instant::now();
        while db.stats().total.disk_bytes > 6 * keep.len() as u64 {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "not reclaimed: {:?}",
                db.stats().total
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(files.read("keep").unwrap().unwrap(), keep);
        assert!(db.verify().unwrap().is_clean());
        assert_no_orphans(&db);
    }
    let db = opts().open(dir.path()).unwrap();
    assert_eq!(db.files().read("keep").unwrap().unwrap(), keep);
    assert!(db.verify().unwrap().is_clean());
    assert_no_orphans(&db);
}

/// Bytes of the segment and hint files of the store in `dir`.
fn store_bytes(dir: &Path) -> u64 {
    segment_files(dir)
        .iter()
        .chain(
            walk(dir)
                .iter()
                .filter(|p| p.extension().is_some_and(|e| e == "hint")),
        )
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum()
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_remove_then_close_gives_the_space_back() {
    // What a short-lived program (`cairn file rm`) does: open, remove, close at once.
    // The collector finishes at close and the close drops what that leaves dead.
    let dir = tempfile::tempdir().unwrap();
    let opts = || opts().segment_size(1 << 20);
    let keep = content(5, 3 * CS + 1);
    let big = content(6, 2000 * CS);
    {
        let db = opts().open(dir.path()).unwrap();
        let files = db.files();
        files.put("keep", &keep).unwrap();
        files.put("big", &big).unwrap();
        drop(files);
        db.close().unwrap();
    }
    let before = store_bytes(dir.path());
    assert!(before >= big.len() as u64, "{before}");
    {
        let db = opts().open(dir.path()).unwrap();
        assert!(db.files().remove("big").unwrap());
        db.close().unwrap();
    }
    let after = store_bytes(dir.path());
    assert!(after * 10 <= before, "{after} of {before} bytes left");
    let db = opts().open(dir.path()).unwrap();
    // No garbage row is left for the next open: the collector finished at close.
    let rows = db.keyspace(cairn_files::KEYSPACE).prefix("g").count();
    assert_eq!(rows, 0);
    assert_eq!(db.files().read("keep").unwrap().unwrap(), keep);
    assert!(db.files().stat("big").unwrap().is_none());
    assert!(db.verify().unwrap().is_clean());
    assert_no_orphans(&db);
}

#[test]
fn stats_show_live_reclaimable_and_disk_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let db = opts()
        .segment_size(256 << 10)
        .background_compaction(false)
        .open(dir.path())
        .unwrap();
    let files = db.files();
    let a = content(1, 100 * CS + 3);
    let b = content(2, 200 * CS);
    files.put("a", &a).unwrap();
    files.put("b", &b).unwrap();
    files.collect_garbage().unwrap();
    let s = files.stats().unwrap();
    assert_eq!(s.bytes, (a.len() + b.len()) as u64);
    // Each chunk record: a 28-byte header, the keyspace byte and a 21-byte key.
    assert!(s.live_bytes >= s.bytes + 301 * 50, "{s:?}");
    assert!(s.live_bytes < s.bytes + 301 * 50 + 1000, "{s:?}");
    assert_eq!(s.live_bytes + s.reclaimable_bytes, s.disk_bytes, "{s:?}");
    assert_eq!(s.pending_bytes, 0);
    // Removed, not collected yet: waiting for the collector, still on disk.
    assert!(files.remove("b").unwrap());
    let s = files.stats().unwrap();
    assert_eq!(s.pending_gc, 1);
    assert!(s.pending_bytes >= 200 * (CS as u64 + 50), "{s:?}");
    assert!(s.reclaimable_bytes >= s.pending_bytes, "{s:?}");
    assert!(s.disk_bytes >= s.bytes + s.pending_bytes, "{s:?}");
    assert_eq!(s.live_bytes + s.reclaimable_bytes, s.disk_bytes, "{s:?}");
    // Collected and dropped: gone from disk.
    files.collect_garbage().unwrap();
    db.reclaim().unwrap();
    db.compact().unwrap();
    let s = files.stats().unwrap();
    assert_eq!((s.pending_gc, s.pending_bytes), (0, 0));
    assert!(s.disk_bytes < s.bytes + 101 * 50 + (64 << 10), "{s:?}");
    assert_eq!(s.live_bytes + s.reclaimable_bytes, s.disk_bytes, "{s:?}");
    // The engine's figures for the file store's keyspace say the same.
    let ks = db.stats().keyspace(cairn_files::KEYSPACE);
    assert_eq!(ks.disk_bytes, s.disk_bytes);
}

#[test]
fn writer_dropped_without_commit_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = opts().open(dir.path()).unwrap();
    let files = db.files();
    files.put("anchor", b"").unwrap();
    files.put("k", b"old").unwrap();
    for size in [0, 10, 3 * CS, 600 * CS + 1] {
        let mut w = files.create("k").unwrap();
        w.write_all(&content(3, size)).unwrap();
        assert_eq!(w.bytes_written(), size as u64);
        assert_eq!(
            files.read("k").unwrap().unwrap(),
            b"old",
            "nothing visible before commit"
        );
        drop(w);
        assert_eq!(files.read("k").unwrap().unwrap(), b"old");
        let mut w = files.create("new").unwrap();
        w.write_all(&content(4, size)).unwrap();
        w.abort();
        assert!(files.stat("new").unwrap().is_none());
        assert_no_orphans(&db);
    }
    assert_eq!(files.list().count(), 2);
}

#[test]
fn remove_is_atomic_and_chunks_are_reclaimed() {
    let dir = tempfile::tempdir().unwrap();
    let db = opts().open(dir.path()).unwrap();
    let files = db.files();
    files.put("anchor", b"").unwrap();
    let data = content(5, 2000 * CS);
    files.put("big", &data).unwrap();
    let before = db.stats();
    assert_eq!(files.stats().unwrap().chunks, 2000);
    let t = Instant::now();
    assert!(files.remove("big").unwrap());
    let took = t.elapsed();
    assert!(took < Duration::from_millis(100), "remove took {took:?}");
    assert!(files.stat("big").unwrap().is_none());
    assert!(files.read("big").unwrap().is_none());
    assert_eq!(db.files().stats().unwrap().bytes, 0);
    assert_no_orphans(&db);
    // The space comes back with compaction, once the background collector has deleted
    // the chunks (it runs concurrently, so compact until it has caught up).
    let start = Instant::now();
    let mut after = db.stats();
    while after.total.disk_bytes >= before.total.disk_bytes / 4
        && start.elapsed() < Duration::from_secs(20)
    {
        db.compact().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        after = db.stats();
    }
    assert!(
        after.total.disk_bytes < before.total.disk_bytes / 4,
        "{} -> {}",
        before.total.disk_bytes,
        after.total.disk_bytes
    );
}

#[test]
fn put_content_stores_identical_content_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = opts().open(dir.path()).unwrap();
    let files = db.files();
    files.put("anchor", b"").unwrap();
    for size in [0, 100, 2 * CS + 1, 400 * CS] {
        let data = content(size as u64, size);
        let k1 = files.put_content(&data[..]).unwrap();
        assert_eq!(k1, blake3::hash(&data).to_hex().as_str());
        let s1 = files.stat(&k1).unwrap().unwrap();
        let k2 = files.put_content(&data[..]).unwrap();
        assert_eq!(k1, k2);
        let s2 = files.stat(&k2).unwrap().unwrap();
        assert_eq!(s1.version, s2.version, "the first copy is kept");
        assert_eq!(files.read(&k1).unwrap().unwrap(), data);
        assert_eq!(s1.hash_hex(), k1);
    }
    assert_eq!(db.files().stats().unwrap().files, 5);
    assert_no_orphans(&db);
}

#[test]
fn list_and_list_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let db = opts().open(dir.path()).unwrap();
    let files = db.files();
    db.put("a/kv-key", "not a file").unwrap();
    for k in ["a/1", "a/2", "b/1", "a/3", "c"] {
        files.put(k, k.as_bytes()).unwrap();
    }
    let keys = |it: cairn_files::FileIter| -> Vec<String> {
        it.map(|r| String::from_utf8(r.unwrap().0).unwrap())
            .collect()
    };
    assert_eq!(keys(files.list()), ["a/1", "a/2", "a/3", "b/1", "c"]);
    assert_eq!(keys(files.list_prefix("a/")), ["a/1", "a/2", "a/3"]);
    let rev: Vec<String> = files
        .list_prefix("a/")
        .rev()
        .map(|r| String::from_utf8(r.unwrap().0).unwrap())
        .collect();
    assert_eq!(rev, ["a/3", "a/2", "a/1"]);
    assert_eq!(keys(files.list_prefix("zz")), Vec::<String>::new());
    let (_, s) = files.list_prefix("b").next().unwrap().unwrap();
    assert_eq!(s.size, 3);
    // File keys and key-value keys live apart.
    assert_eq!(db.iter().count(), 1);
    assert!(!files.exists("a/kv-key"));
}

#[test]
fn chunk_size_is_fixed_at_first_use() {
    let with = |cs: u64| FileOptions::new().chunk_size(cs);
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path()).unwrap();
        let files = FileStore::with_options(&db, with(8192)).unwrap();
        files.put("x", content(1, 20_000)).unwrap();
    }
    // No explicit size: the stored one is used.
    {
        let db = Db::open(dir.path()).unwrap();
        let files = FileStore::new(&db).unwrap();
        assert_eq!(files.chunk_size(), 8192);
        assert_eq!(files.stat("x").unwrap().unwrap().chunks, 3);
    }
    // The same explicit size is fine, a different one is refused.
    let db = Db::open(dir.path()).unwrap();
    FileStore::with_options(&db, with(8192)).unwrap();
    match FileStore::with_options(&db, with(4096)) {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("chunk size"), "{msg}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    drop(db);
    let db = Db::open(dir.path()).unwrap();
    match FileStore::with_options(&db, with(4096)) {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("chunk size"), "{msg}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    for bad in [0, 100, 1 << 30] {
        assert!(matches!(
            FileStore::with_options(&db, with(bad)),
            Err(Error::InvalidArgument(_))
        ));
    }
    // A store that never stored a file takes a new size.
    let dir2 = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir2.path()).unwrap();
        FileStore::with_options(&db, with(4096)).unwrap();
    }
    let db = Db::open(dir2.path()).unwrap();
    assert_eq!(
        FileStore::with_options(&db, with(1024))
            .unwrap()
            .chunk_size(),
        1024
    );
    assert_eq!(cairn_files::DEFAULT_CHUNK_SIZE, 128 << 10);
}

#[test]
fn key_limits() {
    let dir = tempfile::tempdir().unwrap();
    let db = opts().open(dir.path()).unwrap();
    let files = db.files();
    let long = vec![b'k'; cairn_files::MAX_FILE_KEY_LEN];
    files.put(&long, b"x").unwrap();
    assert_eq!(files.read(&long).unwrap().unwrap(), b"x");
    let too_long = vec![b'k'; cairn_files::MAX_FILE_KEY_LEN + 1];
    assert!(matches!(
        files.create(&too_long),
        Err(Error::KeyTooLarge { .. })
    ));
    assert!(files.stat(&too_long).unwrap().is_none());
    // Binary keys, the empty key.
    files.put([0u8, 255, 10], b"bin").unwrap();
    files.put(b"", b"empty key").unwrap();
    assert_eq!(files.read(b"").unwrap().unwrap(), b"empty key");
    assert_eq!(files.read([0u8, 255, 10]).unwrap().unwrap(), b"bin");
}

// ---------------------------------------------------------------------------------------
// Damage
// ---------------------------------------------------------------------------------------

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for shard in std::fs::read_dir(dir.join("shards")).unwrap() {
        for f in std::fs::read_dir(shard.unwrap().path()).unwrap() {
            let p = f.unwrap().path();
            if p.extension().is_some_and(|e| e == "seg") {
                out.push(p);
            }
        }
    }
    out
}

/// Flips one byte of the stored copy of `needle` (which must occur exactly once).
fn flip_stored_bytes(dir: &Path, needle: &[u8]) {
    let mut hits = Vec::new();
    for p in segment_files(dir) {
        let b = std::fs::read(&p).unwrap();
        if let Some(pos) = b.windows(needle.len()).position(|w| w == needle) {
            hits.push((p, pos));
        }
    }
    assert_eq!(hits.len(), 1, "needle found {} times", hits.len());
    let (p, pos) = &hits[0];
    let mut b = std::fs::read(p).unwrap();
    b[pos + needle.len() / 2] ^= 0x40;
    std::fs::write(p, b).unwrap();
}

/// A streamed read (`copy_to`: chunks read ahead on several threads, written in
/// order) gives exactly the file's bytes from any position, for files of 0 to many
/// chunks and any number of threads; an output that fails part way stops it (the
/// workers end, nothing hangs) with the output's error.
#[test]
fn streamed_reads_give_the_whole_file_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let db = opts().open(dir.path()).unwrap();
    let files = db.files();
    for (i, size) in [0, 1, CS - 1, CS, CS + 1, 37 * CS + 123, 300 * CS]
        .into_iter()
        .enumerate()
    {
        let data = content(i as u64, size);
        let key = format!("f{i}");
        files.put(&key, &data).unwrap();
        for threads in [0, 1, 2, 7] {
            for from in [0, 1, size / 2, size.saturating_sub(1), size] {
                let from = from.min(size);
                let mut r = files.open(&key).unwrap().unwrap();
                r.seek(SeekFrom::Start(from as u64)).unwrap();
                let mut out = Vec::new();
                let n = r.copy_to(&mut out, threads).unwrap();
                assert_eq!(
                    n as usize,
                    size - from,
                    "{key} from {from}, {threads} threads"
                );
                assert!(out == data[from..], "{key} from {from}, {threads} threads");
                // The reader is at the end afterwards.
                let mut rest = Vec::new();
                r.read_to_end(&mut rest).unwrap();
                assert!(rest.is_empty());
            }
        }
    }
    /// Accepts `left` bytes, then fails.
    struct Failing {
        left: usize,
    }
    impl Write for Failing {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.left == 0 {
                return Err(io::Error::new(io::ErrorKind::BrokenPipe, "closed"));
            }
            let n = buf.len().min(self.left);
            self.left -= n;
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut r = files.open("f6").unwrap().unwrap();
    let err = r
        .copy_to(&mut Failing { left: 10 * CS + 5 }, 3)
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
}

#[test]
fn corrupted_chunk_fails_reads_and_is_reported_by_verify() {
    let dir = tempfile::tempdir().unwrap();
    let data = content(11, 40 * CS + 9);
    let other = content(12, 5 * CS);
    {
        let db = opts().open(dir.path()).unwrap();
        db.files().put("victim", &data).unwrap();
        db.files().put("other", &other).unwrap();
    }
    // Damage chunk 17 on disk.
    let at = 17 * CS + 1000;
    flip_stored_bytes(dir.path(), &data[at..at + 64]);
    let db = opts().open(dir.path()).unwrap();
    let files = db.files();
    // A whole read fails, with InvalidData carrying Error::Corruption.
    let mut r = files.open("victim").unwrap().unwrap();
    let err = io::copy(&mut r, &mut io::sink()).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    assert!(
        matches!(
            err.get_ref().and_then(|e| e.downcast_ref::<Error>()),
            Some(Error::Corruption { .. })
        ),
        "{err:?}"
    );
    // So does a streamed read (chunks read ahead on several threads), whatever the
    // number of threads, and it writes nothing past the damage.
    for threads in [1, 2, 5] {
        let mut r = files.open("victim").unwrap().unwrap();
        let mut out = Vec::new();
        let err = r.copy_to(&mut out, threads).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err:?}");
        assert!(
            out.len() <= 17 * CS,
            "{} bytes written past the damage",
            out.len()
        );
        assert_eq!(out[..], data[..out.len()]);
    }
    assert!(matches!(
        files.read_range("victim", 17 * CS as u64, 10),
        Err(Error::Corruption { .. })
    ));
    // Other chunks still read.
    assert_eq!(
        files
            .read_range("victim", 3 * CS as u64, CS as u64)
            .unwrap()
            .unwrap(),
        &data[3 * CS..4 * CS]
    );
    let check = files.verify("victim").unwrap().unwrap();
    assert!(!check.is_ok());
    assert_eq!(check.damage.len(), 1, "{:?}", check.damage);
    assert_eq!(check.damage[0].chunk, Some(17));
    assert!(files.verify("other").unwrap().unwrap().is_ok());
    assert!(files.verify("missing").unwrap().is_none());
}

#[test]
fn storage_full_leaves_no_partial_file() {
    let dir = tempfile::tempdir().unwrap();
    let max = 2u64 << 20;
    let db = opts()
        .max_size(max)
        .segment_size(256 << 10)
        .open(dir.path())
        .unwrap();
    let files = db.files();
    files.put("anchor", b"").unwrap();
    files.put("keep", content(1, 10 * CS)).unwrap();
    // Streamed: fails part way.
    let big = content(2, 4 << 20);
    match files.put("big", &big) {
        Err(Error::StorageFull(_)) => {}
        other => panic!("expected StorageFull, got {other:?}"),
    }
    assert!(files.stat("big").unwrap().is_none());
    // Through Write: the error is an io::Error of kind StorageFull, and the writer is
    // poisoned.
    let mut w = files.create("big2").unwrap();
    let err = w.write_all(&big).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::StorageFull);
    assert!(w.commit().is_err());
    assert!(files.stat("big2").unwrap().is_none());
    assert_eq!(files.read("keep").unwrap().unwrap(), content(1, 10 * CS));
    // The store is full, yet files can be removed, and the collector reclaims the
    // partial writes.
    assert!(files.remove("keep").unwrap());
    assert_no_orphans(&db);
    db.compact().unwrap();
    // Space is back: a 1 MiB file fits again.
    let again = content(3, 1 << 20);
    files.put("again", &again).unwrap();
    assert_eq!(files.read("again").unwrap().unwrap(), again);
    assert!(db.stats().total.disk_bytes <= max);
}

// ---------------------------------------------------------------------------------------
// Concurrency
// ---------------------------------------------------------------------------------------

/// Counts a finished thread even if it panicked.
struct DoneOnDrop<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for DoneOnDrop<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn many_threads_writing_and_reading_different_and_equal_keys() {
    let dir = tempfile::tempdir().unwrap();
    let db = opts().open(dir.path()).unwrap();
    let files = db.files();
    files.put("anchor", b"").unwrap();
    let threads = 6;
    let rounds = 40;
    // Every version ever committed per key, to check that readers see one of them.
    let written: Arc<Mutex<HashMap<String, Vec<u64>>>> = Arc::default();
    let done = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        // A collector racing the background one and the writers.
        s.spawn(|| {
            while done.load(std::sync::atomic::Ordering::SeqCst) < threads as usize {
                files.collect_garbage().unwrap();
            }
        });
        for t in 0..threads {
            let done = DoneOnDrop(&done);
            let files = files.clone();
            let written = written.clone();
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(t);
                for i in 0..rounds {
                    let id = t * 1000 + i;
                    let shared = rng.random_bool(0.5);
                    let key = if shared {
                        format!("shared-{}", rng.random_range(0..3))
                    } else {
                        format!("own-{t}-{}", rng.random_range(0..4))
                    };
                    let size = if rng.random_bool(0.1) {
                        rng.random_range(260 * CS..400 * CS)
                    } else {
                        rng.random_range(16..30 * CS)
                    };
                    let data = content(id, size);
                    let mut w = files.create(&key).unwrap();
                    for piece in data.chunks(7777) {
                        w.write_all(piece).unwrap();
                    }
                    written
                        .lock()
                        .unwrap()
                        .entry(key.clone())
                        .or_default()
                        .push(id);
                    w.commit().unwrap();
                    // Read some key back, whole or in part.
                    let rk = format!("shared-{}", rng.random_range(0..3));
                    if let Some(mut r) = files.open(&rk).unwrap() {
                        let mut buf = Vec::new();
                        r.read_to_end(&mut buf).unwrap();
                        let got = content_id(&buf).expect("a whole, single version");
                        assert!(written.lock().unwrap()[&rk].contains(&got));
                        assert_eq!(blake3_of(&buf), r.stat().hash);
                    }
                    if !shared && rng.random_bool(0.2) {
                        files.remove(&key).unwrap();
                    }
                    if rng.random_bool(0.1) {
                        files.put_content(&content(7, 3000)[..]).unwrap();
                    }
                }
                drop(done);
            });
        }
    });
    for r in files.list() {
        let (k, s) = r.unwrap();
        let data = files.read(&k).unwrap().unwrap();
        assert_eq!(blake3_of(&data), s.hash);
        if k != b"anchor" && data.len() != 3000 {
            assert!(content_id(&data).is_some());
        }
    }
    assert_no_orphans(&db);
    drop(files);
    drop(db);
    let db = opts().open(dir.path()).unwrap();
    assert_no_orphans(&db);
}

// ---------------------------------------------------------------------------------------
// Crashes: the child writes, overwrites and removes files until it is killed.
// ---------------------------------------------------------------------------------------

const CRASH_DIR: &str = "CAIRN_FILES_CRASH_DIR";
const CRASH_SYNC: &str = "CAIRN_FILES_CRASH_SYNC";
const CRASH_SEED: &str = "CAIRN_FILES_CRASH_SEED";
const MEM_DIR: &str = "CAIRN_FILES_MEM_DIR";

/// Held while spawning a child, so that it does not inherit (until its exec) a store
/// lock that another test of this process holds.
static FORK_GUARD: Mutex<()> = Mutex::new(());

fn fork_guard() -> MutexGuard<'static, ()> {
    FORK_GUARD.lock().unwrap_or_else(|e| e.into_inner())
}

/// Small segments, so that a run rotates, seals, drops and compacts many of them (spare
/// segments, segments dropped whole before they were sealed) while it is killed.
fn crash_opts(always: bool) -> Options {
    opts().segment_size(512 << 10).sync(if always {
        SyncPolicy::Always
    } else {
        SyncPolicy::Never
    })
}

fn emit(line: String) {
    let mut out = io::stdout().lock();
    out.write_all(format!("{line}\n").as_bytes()).unwrap();
    out.flush().unwrap();
}

/// The child: `@@W key id size` before a write, `@@C key id` after its commit,
/// `@@X key` before a remove and `@@D key` after it.
#[test]
#[ignore = "child process of the crash tests, which run it with --ignored"]
fn child_crash_worker() {
    let Ok(dir) = std::env::var(CRASH_DIR) else {
        return;
    };
    let mode = std::env::var(CRASH_SYNC).unwrap();
    let always = mode != "never";
    let seed: u64 = std::env::var(CRASH_SEED).unwrap().parse().unwrap();
    let db = crash_opts(always).open(&dir).unwrap();
    let files = db.files();
    if mode == "pause" {
        // Killed for sure in the middle of streaming a new version over an old one.
        files.put("k", content(1, 50 * CS)).unwrap();
        let mut w = files.create("k").unwrap();
        w.write_all(&content(2, 600 * CS)).unwrap();
        emit("@@P".into());
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let mut rng = StdRng::seed_from_u64(seed);
    emit("@@R".into());
    for i in 0.. {
        let key = format!("k{}", rng.random_range(0..6));
        if rng.random_bool(0.3) {
            emit(format!("@@X {key}"));
            files.remove(&key).unwrap();
            emit(format!("@@D {key}"));
        } else {
            let id = seed * 1_000_000 + i;
            let size = if rng.random_bool(0.5) {
                rng.random_range(16..8 * CS)
            } else {
                rng.random_range(300 * CS..900 * CS)
            };
            emit(format!("@@W {key} {id} {size}"));
            let data = content(id, size);
            let mut w = files.create(&key).unwrap();
            for piece in data.chunks(64 << 10) {
                w.write_all(piece).unwrap();
            }
            w.commit().unwrap();
            emit(format!("@@C {key} {id}"));
        }
    }
}

/// Runs a child on `dir` for about `ms` milliseconds after it opened the store, kills
/// it, and returns its report lines.
fn run_crash_child(dir: &Path, mode: &str, seed: u64, ms: u64) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    let guard = fork_guard();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "child_crash_worker",
            "--nocapture",
            "--test-threads=1",
        ])
        .arg("--ignored")
        .env(CRASH_DIR, dir)
        .env(CRASH_SYNC, mode)
        .env(CRASH_SEED, seed.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    drop(guard);
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        // Only whole lines are reports (each is written with one `write`).
        while matches!(r.read_until(b'\n', &mut buf), Ok(n) if n > 0) && buf.ends_with(b"\n") {
            let line = String::from_utf8_lossy(&buf).trim_end().to_string();
            buf.clear();
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let start = Instant::now();
    let mut deadline: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) || now - start > Duration::from_secs(30) {
            break;
        }
        match rx.recv_timeout(Duration::from_millis(5)) {
            Ok(l) => {
                // The harness prints the test name before the first line, on the same line.
                if l.ends_with("@@R") {
                    deadline = Some(Instant::now() + Duration::from_millis(ms));
                }
                let pause = l.ends_with("@@P");
                lines.push(l);
                if pause {
                    break;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => break,
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // What the child wrote before it died counts too.
    lines.extend(rx.iter());
    reader.join().unwrap();
    lines
}

/// What a key may hold after a crash.
#[derive(Clone, Debug, PartialEq)]
enum State {
    Absent,
    Version(u64),
}

/// Runs `cycles` kill-and-check cycles (or `CAIRN_FILES_CRASH_CYCLES`, for longer runs
/// by hand).
fn crash_cycles(always: bool, cycles: u64, base_seed: u64) {
    let cycles = std::env::var("CAIRN_FILES_CRASH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cycles);
    let dir = tempfile::tempdir().unwrap();
    // The state of each key as last checked.
    let mut known: HashMap<String, State> = HashMap::new();
    {
        let db = crash_opts(always).open(dir.path()).unwrap();
        db.files().put("anchor", b"").unwrap();
    }
    let mut killed_writing = 0;
    // The size of every version any child announced, in any cycle.
    let mut sizes = HashMap::new();
    for cycle in 0..cycles {
        let seed = base_seed + cycle;
        let ms = 60 + (seed * 37) % 200;
        let mode = if always { "always" } else { "never" };
        let lines = run_crash_child(dir.path(), mode, seed, ms);
        if lines.last().is_some_and(|l| l.starts_with("@@W")) {
            killed_writing += 1;
        }
        // Allowed states per key: every state from the last guaranteed one on.
        let mut allowed: HashMap<String, Vec<State>> = known
            .iter()
            .map(|(k, s)| (k.clone(), vec![s.clone()]))
            .collect();
        for l in &lines {
            let p: Vec<&str> = l.split(' ').collect();
            match p[0] {
                "@@W" => {
                    let (key, id) = (p[1].to_string(), p[2].parse::<u64>().unwrap());
                    sizes.insert(id, p[3].parse::<usize>().unwrap());
                    allowed
                        .entry(key)
                        .or_insert_with(|| vec![State::Absent])
                        .push(State::Version(id));
                }
                "@@C" if always => {
                    let id = p[2].parse::<u64>().unwrap();
                    allowed.insert(p[1].to_string(), vec![State::Version(id)]);
                }
                "@@X" => {
                    allowed
                        .entry(p[1].to_string())
                        .or_insert_with(|| vec![State::Absent])
                        .push(State::Absent);
                }
                "@@D" if always => {
                    allowed.insert(p[1].to_string(), vec![State::Absent]);
                }
                _ => {}
            }
        }
        let db = crash_opts(always).open(dir.path()).unwrap();
        let files = db.files();
        assert!(db.verify().unwrap().is_clean());
        known.clear();
        for (key, states) in &allowed {
            let state = match files.read(key).unwrap() {
                None => State::Absent,
                Some(data) => {
                    let id = content_id(&data).unwrap_or_else(|| {
                        panic!(
                            "cycle {cycle}: {key} holds {} bytes that are no whole version",
                            data.len()
                        )
                    });
                    assert_eq!(
                        sizes.get(&id),
                        Some(&data.len()),
                        "cycle {cycle}: {key} holds version {id}"
                    );
                    assert!(files.verify(key).unwrap().unwrap().is_ok());
                    State::Version(id)
                }
            };
            assert!(
                states.contains(&state),
                "cycle {cycle} ({}): {key} is {state:?}, allowed {states:?}",
                if always { "always" } else { "never" }
            );
            known.insert(key.clone(), state);
        }
        for r in files.list() {
            let (k, _) = r.unwrap();
            let k = String::from_utf8(k).unwrap();
            assert!(
                k == "anchor" || allowed.contains_key(&k),
                "unexpected file {k}"
            );
        }
        assert_no_orphans(&db);
    }
    // Streaming big files takes most of the child's time, so most kills hit a write.
    assert!(killed_writing > 0, "no cycle was killed while writing");
}

#[test]
fn sigkill_in_the_middle_of_streaming_an_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let lines = run_crash_child(dir.path(), "pause", 0, 10_000);
    assert!(lines.last().unwrap().ends_with("@@P"), "{lines:?}");
    let db = crash_opts(true).open(dir.path()).unwrap();
    let files = db.files();
    assert_eq!(files.read("k").unwrap().unwrap(), content(1, 50 * CS));
    assert!(files.verify("k").unwrap().unwrap().is_ok());
    // The 600 streamed chunks are reclaimed (by the background collector started at
    // open, or by this pass).
    assert_no_orphans(&db);
    assert_eq!(db.files().stats().unwrap().chunks, 50);
}

#[test]
fn sigkill_during_writes_and_removes_sync_always() {
    crash_cycles(true, 6, 100);
}

/// Under `SyncPolicy::Never` this once left chunk rows that no meta, intent or gc row
/// named (a later write surviving an earlier one in another shard); the store now keeps
/// a prefix of its writes after a crash, which rules that out.
#[test]
fn sigkill_during_writes_and_removes_sync_never() {
    crash_cycles(false, 5, 200);
}

// ---------------------------------------------------------------------------------------
// Streaming: memory stays small whatever the file size.
// ---------------------------------------------------------------------------------------

/// A reader yielding `left` bytes of a cheap pattern.
struct Generator {
    left: u64,
    x: u64,
}

impl Read for Generator {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (buf.len() as u64).min(self.left) as usize;
        for c in buf[..n].chunks_mut(8) {
            self.x = self.x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            c.copy_from_slice(&self.x.to_le_bytes()[..c.len()]);
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Anonymous resident memory of this process, in KiB.
fn rss_anon_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A hashing sink.
struct HashSink(blake3::Hasher);

impl Write for HashSink {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.update(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The child: streams 1 GiB in and out with the default chunk size and reports memory.
#[test]
#[ignore = "child process of streaming_a_gigabyte_uses_little_memory, which runs it with --ignored"]
fn child_memory_worker() {
    let Ok(dir) = std::env::var(MEM_DIR) else {
        return;
    };
    let size: u64 = 1 << 30;
    let db = Db::open(&dir).unwrap();
    // The default chunk size (128 KiB), not the tests' 4 KiB.
    let files = FileStore::new(&db).unwrap();
    files.put("warm-up", content(1, 3 << 20)).unwrap();
    files.read("warm-up").unwrap();
    let before = rss_anon_kib();
    let t = Instant::now();
    let stat = files
        .put_reader("huge", Generator { left: size, x: 1 })
        .unwrap();
    let after_write = rss_anon_kib();
    let write_time = t.elapsed();
    let t = Instant::now();
    let mut r = files.open("huge").unwrap().unwrap();
    let mut sink = HashSink(blake3::Hasher::new());
    let n = io::copy(&mut r, &mut sink).unwrap();
    let after_read = rss_anon_kib();
    let read_time = t.elapsed();
    assert_eq!(n, size);
    assert_eq!(stat.size, size);
    assert_eq!(*sink.0.finalize().as_bytes(), stat.hash);
    emit(format!("@@M {before} {after_write} {after_read}"));
    eprintln!("wrote 1 GiB in {write_time:?}, read in {read_time:?}");
}

#[test]
fn streaming_a_gigabyte_uses_little_memory() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let guard = fork_guard();
    let child = Command::new(exe)
        .args([
            "--exact",
            "child_memory_worker",
            "--nocapture",
            "--test-threads=1",
        ])
        .arg("--ignored")
        .env(MEM_DIR, dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(guard);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("@@M ").map(|(_, r)| r))
        .expect("child reported memory");
    let v: Vec<u64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
    let (before, write, read) = (v[0], v[1], v[2]);
    // 1 GiB went through; the process grew by a few MiB at most (index entries of
    // 8192 chunks, shard write buffers).
    assert!(
        write < before + 24 * 1024,
        "writing 1 GiB: RssAnon {before} -> {write} KiB"
    );
    assert!(
        read < before + 24 * 1024,
        "reading 1 GiB: RssAnon {before} -> {read} KiB"
    );
}
