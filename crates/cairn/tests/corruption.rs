//! Damage to the files of a store.
//!
//! Every test builds a store, closes it, damages something precisely, and then checks
//! what the store does: reads of damaged records fail with `Error::Corruption` (never
//! wrong data), every intact record survives a reopen, and `verify` and `open_damage`
//! name the damaged file. I/O faults while a store runs are `io_faults.rs`'s.

use std::fs;
use std::path::{Path, PathBuf};

use cairn::{Db, Error, Options, WriteBatch};

mod store_model;
use store_model::{assert_no_wrong_data, check_model, key, value, Model};

// ---------------------------------------------------------------------------------------
// On-disk helpers (see FORMAT.md): segment header 40 bytes, record header 28 bytes.
// ---------------------------------------------------------------------------------------

const SEG_HEADER: u64 = 40;
const REC_HEADER: u64 = 28;

/// One record as found by walking a segment file by its header lengths.
#[derive(Clone, Debug)]
struct Rec {
    off: u64,
    len: u64,
    /// The user key (the stored key without its namespace byte).
    key: Vec<u8>,
    /// Length of the stored key, namespace byte included.
    key_len: u64,
    val_len: u64,
}

/// Namespace byte that starts every stored key of the public key-value API.
const USER_NAMESPACE: u8 = 0;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// Walks an undamaged segment file and lists its records.
fn records(path: &Path) -> Vec<Rec> {
    let b = fs::read(path).unwrap();
    assert!(
        b.len() as u64 >= SEG_HEADER,
        "{} is too short",
        path.display()
    );
    assert_eq!(&b[0..8], b"CAIRNSEG");
    let mut out = Vec::new();
    let mut pos = SEG_HEADER as usize;
    while pos + REC_HEADER as usize <= b.len() {
        let key_len = (u32_at(&b, pos + 12) & 0x00ff_ffff) as u64;
        let val_len = u32_at(&b, pos + 16) as u64;
        let len = REC_HEADER + key_len + val_len;
        assert!(
            pos as u64 + len <= b.len() as u64,
            "record at {pos} runs past the end"
        );
        let k = pos + REC_HEADER as usize;
        assert_eq!(b[k], USER_NAMESPACE, "record at {pos} is not a user key");
        out.push(Rec {
            off: pos as u64,
            len,
            key: b[k + 1..k + key_len as usize].to_vec(),
            key_len,
            val_len,
        });
        pos += len as usize;
    }
    assert_eq!(pos, b.len(), "{} has trailing bytes", path.display());
    out
}

fn shard_dir(store: &Path, i: u32) -> PathBuf {
    store.join("shards").join(format!("{i:04}"))
}

fn shard_dirs(store: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(store.join("shards"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

/// Segment files of a shard directory, by id.
fn segments(shard: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(shard)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    v.sort();
    v
}

fn hint_of(seg: &Path) -> PathBuf {
    seg.with_extension("hint")
}

/// Segments of a shard that have a hint file (sealed), excluding the newest segment.
fn sealed_segments(shard: &Path) -> Vec<PathBuf> {
    let segs = segments(shard);
    let n = segs.len();
    segs.into_iter()
        .take(n.saturating_sub(1))
        .filter(|s| hint_of(s).exists())
        .collect()
}

fn xor_byte(path: &Path, off: u64, mask: u8) {
    let mut b = fs::read(path).unwrap();
    b[off as usize] ^= mask;
    fs::write(path, b).unwrap();
}

fn truncate(path: &Path, len: u64) {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// The LevelDB-style masked CRC used by every cairn file.
fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Rewrites the trailing masked CRC of a small store file (`CAIRN`, `SEQSTATE`, hints).
fn reseal(b: &mut [u8]) {
    let n = b.len() - 4;
    let crc = mask(crc32c::crc32c(&b[..n]));
    b[n..].copy_from_slice(&crc.to_le_bytes());
}

// ---------------------------------------------------------------------------------------
// Store helpers
// ---------------------------------------------------------------------------------------

/// Small segments so every shard has several sealed ones; no background compaction so
/// files stay where the test put them.
fn opts() -> Options {
    Options::new()
        .shards(2)
        .segment_size(8 << 10)
        .background_compaction(false)
}

/// Writes `n` distinct keys once each, seals every rotated segment and closes the store.
/// With `n >= 1000` every shard ends up with several sealed segments.
fn build(dir: &Path, n: u32) -> Model {
    let db = opts().open(dir).unwrap();
    let mut model = Model::new();
    for i in 0..n {
        db.put(key(i), value(i, 0)).unwrap();
        model.insert(key(i), value(i, 0));
    }
    db.flush().unwrap();
    db.compact().unwrap(); // seals the queued segments: they get hint files
    drop(db);
    for sd in shard_dirs(dir).iter().filter(|_| n >= 1000) {
        assert!(
            sealed_segments(sd).len() >= 3,
            "test setup wants several sealed segments in {}",
            sd.display()
        );
    }
    model
}

/// Waits (up to 10 s) for a background thread to make `cond` true.
fn wait_for(cond: impl Fn() -> bool, what: &str) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(
            start.elapsed().as_secs() < 10,
            "timed out waiting for: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Picks a sealed segment in the middle of shard 0 and a record in the middle of it.
fn pick_middle(dir: &Path) -> (PathBuf, Rec, Vec<Rec>) {
    let sealed = sealed_segments(&shard_dir(dir, 0));
    let seg = sealed[sealed.len() / 2].clone();
    let recs = records(&seg);
    assert!(recs.len() >= 5, "segment has {} records", recs.len());
    let r = recs[recs.len() / 2].clone();
    (seg, r, recs)
}

// ---------------------------------------------------------------------------------------
// (a) a flipped byte inside a record in the middle of a sealed segment
// ---------------------------------------------------------------------------------------

#[test]
fn flipped_value_byte_in_sealed_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = build(dir.path(), 1500);
    let (seg, r, recs) = pick_middle(dir.path());
    xor_byte(&seg, r.off + REC_HEADER + r.key_len + r.val_len / 2, 0x40);

    // With the hint file the index still points at the damaged record: reads fail.
    {
        let db = opts().open(dir.path()).unwrap();
        match db.get(&r.key) {
            Err(Error::Corruption { path, .. }) => assert_eq!(path, seg),
            other => panic!("get of the damaged record: {other:?}"),
        }
        check_model(&db, &model, &[&r.key]);
        let report = db.verify().unwrap();
        assert!(
            report
                .damage
                .iter()
                .any(|d| d.path == seg && d.offset == Some(r.off)),
            "verify does not name {} at {}: {:?}",
            seg.display(),
            r.off,
            report.damage
        );
        // A segment with damage must not be dropped by a compaction either.
        let _ = db.compact();
        check_model(&db, &model, &[&r.key]);
    }
    // Reopen again (still with the hint): nothing lost.
    {
        let db = opts().open(dir.path()).unwrap();
        assert!(matches!(db.get(&r.key), Err(Error::Corruption { .. })));
        check_model(&db, &model, &[&r.key]);
    }
    // Without the hint the segment is scanned: the damaged record is skipped, and every
    // record after it in the same segment is kept.
    fs::remove_file(hint_of(&seg)).unwrap();
    {
        let db = opts().open(dir.path()).unwrap();
        assert!(
            db.open_damage()
                .iter()
                .any(|d| d.path == seg && d.offset == Some(r.off)),
            "open_damage: {:?}",
            db.open_damage()
        );
        assert_no_wrong_data(&db, &r.key, &[]);
        check_model(&db, &model, &[&r.key]);
        let after: Vec<_> = recs.iter().filter(|x| x.off > r.off).collect();
        assert!(!after.is_empty());
        for x in after {
            assert!(db.get(&x.key).unwrap().is_some());
        }
        assert!(!db.verify().unwrap().is_clean());
        db.put("after", "damage").unwrap();
    }
    model.insert(b"after".to_vec(), b"damage".to_vec());
    let db = opts().open(dir.path()).unwrap();
    check_model(&db, &model, &[&r.key]);
}

/// The latest version of a key is damaged and an older version exists in an earlier
/// segment. Reading the key must not silently return the superseded value — with the
/// hint file it fails with `Corruption`; the same must hold when the segment is rescanned.
#[test]
fn damaged_latest_version_never_resurrects_older_value_with_hint() {
    let dir = tempfile::tempdir().unwrap();
    let (seg, r, model) = damaged_latest_version(dir.path());
    let db = opts().open(dir.path()).unwrap();
    assert!(hint_of(&seg).exists());
    assert!(
        matches!(db.get(&r.key), Err(Error::Corruption { .. })),
        "{:?}",
        db.get(&r.key)
    );
    check_model(&db, &model, &[&r.key]);
}

#[test]
fn damaged_latest_version_never_resurrects_older_value_without_hint() {
    let dir = tempfile::tempdir().unwrap();
    let (seg, r, model) = damaged_latest_version(dir.path());
    fs::remove_file(hint_of(&seg)).unwrap();
    let db = opts().open(dir.path()).unwrap();
    let got = db.get(&r.key);
    assert!(
        matches!(got, Err(Error::Corruption { .. })),
        "the newest version of {} is damaged; get returned {:?} (an older, overwritten value)",
        String::from_utf8_lossy(&r.key),
        got
    );
    check_model(&db, &model, &[&r.key]);
}

/// Writes keys, overwrites them all, damages the value of one overwrite that sits in a
/// sealed segment. Returns the segment, the record and the model of the latest values.
fn damaged_latest_version(dir: &Path) -> (PathBuf, Rec, Model) {
    // Threshold 0.9: the half-stale first-round segments are kept by the compaction
    // that seals the rest.
    let db = opts().compaction_threshold(0.9).open(dir).unwrap();
    let mut model = Model::new();
    for round in 0..2 {
        for i in (0..1000).filter(|i| round == 0 || i % 2 == 0) {
            db.put(key(i), value(i, round)).unwrap();
            model.insert(key(i), value(i, round));
        }
    }
    db.flush().unwrap();
    db.compact().unwrap();
    drop(db);
    // A sealed segment holding only round-1 (latest) values.
    let sd = shard_dir(dir, 0);
    let sealed = sealed_segments(&sd);
    let is_round_1 = |s: &PathBuf| {
        let b = fs::read(s).unwrap();
        records(s).iter().all(|r| {
            let v = (r.off + REC_HEADER + r.key_len) as usize;
            b[v..].starts_with(b"v1-")
        })
    };
    let seg = sealed
        .iter()
        .rev()
        .find(|s| is_round_1(s))
        .expect("a sealed segment of overwrites")
        .clone();
    let recs = records(&seg);
    let r = recs[recs.len() / 2].clone();
    let b = fs::read(&seg).unwrap();
    let v = &b[(r.off + REC_HEADER + r.key_len) as usize..(r.off + r.len) as usize];
    assert!(v.starts_with(b"v1-"), "picked an older version");
    xor_byte(&seg, r.off + REC_HEADER + r.key_len + 3, 0x01);
    (seg, r, model)
}

// ---------------------------------------------------------------------------------------
// (b) a flipped byte in a record header: its length cannot be trusted
// ---------------------------------------------------------------------------------------

fn header_flip(hint: bool, field_off: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut model = build(dir.path(), 1500);
    let (seg, r, recs) = pick_middle(dir.path());
    xor_byte(&seg, r.off + field_off, 0x80);
    if !hint {
        fs::remove_file(hint_of(&seg)).unwrap();
    }
    for round in 0..2 {
        let db = opts().open(dir.path()).unwrap();
        if hint {
            match db.get(&r.key) {
                Err(Error::Corruption { path, .. }) => assert_eq!(path, seg),
                other => panic!("get of the damaged record: {other:?}"),
            }
        } else {
            assert_no_wrong_data(&db, &r.key, &[]);
            if round == 0 {
                assert!(
                    db.open_damage().iter().any(|d| d.path == seg),
                    "open_damage: {:?}",
                    db.open_damage()
                );
            }
        }
        // Every record after the damaged one, in the same segment and elsewhere, is there.
        for x in recs.iter().filter(|x| x.off > r.off) {
            assert_eq!(
                db.get(&x.key).unwrap().as_deref(),
                Some(model[&x.key].as_slice())
            );
        }
        check_model(&db, &model, &[&r.key]);
        let report = db.verify().unwrap();
        assert!(
            report.damage.iter().any(|d| d.path == seg),
            "verify: {:?}",
            report.damage
        );
        db.put(format!("new{round}"), "x").unwrap();
        model.insert(format!("new{round}").into_bytes(), b"x".to_vec());
    }
    let db = opts().open(dir.path()).unwrap();
    check_model(&db, &model, &[&r.key]);
}

#[test]
fn flipped_length_in_header_without_hint_resynchronises() {
    // Top byte of val_len: the record would claim ~2 GiB.
    header_flip(false, 19);
}

#[test]
fn flipped_seq_in_header_without_hint_resynchronises() {
    header_flip(false, 5);
}

#[test]
fn flipped_header_with_hint() {
    header_flip(true, 19);
}

/// Several damaged headers in one segment, including the first and the last record.
#[test]
fn many_damaged_headers_in_one_segment() {
    let dir = tempfile::tempdir().unwrap();
    let model = build(dir.path(), 1500);
    let (seg, _, recs) = pick_middle(dir.path());
    let mut bad: Vec<&Rec> = recs.iter().step_by(3).collect();
    if (recs.len() - 1) % 3 != 0 {
        bad.extend(recs.last());
    }
    for r in &bad {
        xor_byte(&seg, r.off + 13, 0xff); // key length
    }
    fs::remove_file(hint_of(&seg)).unwrap();
    let bad_keys: Vec<&[u8]> = bad.iter().map(|r| r.key.as_slice()).collect();
    let db = opts().open(dir.path()).unwrap();
    for k in &bad_keys {
        assert_no_wrong_data(&db, k, &[]);
    }
    check_model(&db, &model, &bad_keys);
    drop(db);
    let db = opts().open(dir.path()).unwrap();
    check_model(&db, &model, &bad_keys);
}

/// A stretch of zeroes (a lost page) in the middle of a segment without a hint: the scan
/// resynchronises after it and keeps every record that follows.
#[test]
fn zeroed_block_in_segment_without_hint() {
    let dir = tempfile::tempdir().unwrap();
    let model = build(dir.path(), 1500);
    let (seg, _, recs) = pick_middle(dir.path());
    let (from, to) = (recs[1].off + 5, recs[recs.len() - 2].off - 3);
    assert!(to > from);
    let mut b = fs::read(&seg).unwrap();
    b[from as usize..to as usize].fill(0);
    fs::write(&seg, b).unwrap();
    fs::remove_file(hint_of(&seg)).unwrap();
    let lost: Vec<&[u8]> = recs
        .iter()
        .filter(|r| r.off + r.len > from && r.off < to)
        .map(|r| r.key.as_slice())
        .collect();
    let db = opts().open(dir.path()).unwrap();
    assert!(db
        .open_damage()
        .iter()
        .any(|d| d.path == seg && d.offset == Some(recs[1].off)));
    for k in &lost {
        assert_no_wrong_data(&db, k, &[]);
    }
    // The last record, after the zeroes, is kept.
    let last = recs.last().unwrap();
    assert_eq!(
        db.get(&last.key).unwrap().as_deref(),
        Some(model[&last.key].as_slice())
    );
    check_model(&db, &model, &lost);
}

/// A sealed segment cut short (its hint now describes more bytes than there are): the
/// hint is not trusted, the segment is scanned, and every record before the cut is kept.
#[test]
fn truncated_sealed_segment() {
    let dir = tempfile::tempdir().unwrap();
    let model = build(dir.path(), 1500);
    let (seg, r, recs) = pick_middle(dir.path());
    truncate(&seg, r.off + 17);
    let lost: Vec<&[u8]> = recs
        .iter()
        .filter(|x| x.off >= r.off)
        .map(|x| x.key.as_slice())
        .collect();
    {
        let db = opts().open(dir.path()).unwrap();
        assert!(db.open_damage().iter().any(|d| d.path == hint_of(&seg)));
        for k in &lost {
            assert!(db.get(k).unwrap().is_none());
        }
        check_model(&db, &model, &lost);
        for x in recs.iter().filter(|x| x.off < r.off) {
            assert!(db.get(&x.key).unwrap().is_some());
        }
    }
    let db = opts().open(dir.path()).unwrap();
    check_model(&db, &model, &lost);
}

/// Compaction of a segment with a damaged live record: `compact` reports the damage,
/// the segment (and the damaged record's key, still failing with `Corruption`) is kept,
/// every other record is moved intact, and the store reopens with all of it.
#[test]
fn compaction_of_damaged_segment_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    {
        let db = opts().compaction_threshold(0.9).open(dir.path()).unwrap();
        for i in 0..1500 {
            db.put(key(i), value(i, 0)).unwrap();
            model.insert(key(i), value(i, 0));
        }
        // Most keys overwritten: the first segments become about 80% stale.
        for i in (0..1500).filter(|i| i % 5 != 0) {
            db.put(key(i), value(i, 1)).unwrap();
            model.insert(key(i), value(i, 1));
        }
        db.flush().unwrap();
        db.compact().unwrap(); // seals only, nothing is 90% stale
    }
    // A live record (i % 5 == 0, never overwritten) in the first sealed segment of shard 0.
    let seg = sealed_segments(&shard_dir(dir.path(), 0)).remove(0);
    let bytes = fs::read(&seg).unwrap();
    let r = records(&seg)
        .into_iter()
        .find(|r| {
            let v = (r.off + REC_HEADER + r.key_len) as usize;
            bytes[v..].starts_with(b"v0-") && model[&r.key].starts_with(b"v0-")
        })
        .expect("a live record in the first segment");
    xor_byte(&seg, r.off + REC_HEADER + r.key_len + 1, 0x20);
    {
        let db = opts().compaction_threshold(0.5).open(dir.path()).unwrap();
        let e = db.compact().unwrap_err();
        match &e {
            Error::Corruption { path, .. } => assert_eq!(path, &seg),
            other => panic!("compact of a damaged segment: {other:?}"),
        }
        assert!(seg.exists(), "the damaged segment was removed");
        assert!(matches!(db.get(&r.key), Err(Error::Corruption { .. })));
        check_model(&db, &model, &[&r.key]);
        // Not retried automatically, and everything else is compactable.
        db.compact().unwrap();
        check_model(&db, &model, &[&r.key]);
        assert!(db.verify().unwrap().damage.iter().any(|d| d.path == seg));
        // What compaction found is on record, not only logged.
        assert!(
            db.damage()
                .iter()
                .any(|d| d.path == seg && d.detail.contains("compaction")),
            "{:?}",
            db.damage()
        );
    }
    let db = opts().open(dir.path()).unwrap();
    assert!(matches!(db.get(&r.key), Err(Error::Corruption { .. })));
    check_model(&db, &model, &[&r.key]);
}

/// Damage that the background sealing finds (it lists a rotated segment's records for
/// the hint file) is reported by `Db::damage` and `Db::verify`, not only logged.
#[test]
fn damage_found_while_sealing_is_reported() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new()
        .shards(1)
        .segment_size(16 << 10)
        .background_compaction(false)
        .write_buffer(1 << 10)
        .open(dir.path())
        .unwrap();
    for i in 0..40 {
        db.put(key(i), value(i, 0)).unwrap();
    }
    db.flush().unwrap();
    // Flip a bit of a record's sequence number in the active segment, in place.
    let seg = segments(&shard_dir(dir.path(), 0)).remove(0);
    let recs = records(&seg);
    let r = recs[recs.len() / 2].clone();
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&seg)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, r.off + 5).unwrap();
    f.write_all_at(&[b[0] ^ 0x40], r.off + 5).unwrap();
    drop(f);
    // Fill the segment up: it rotates and the maintenance thread seals it.
    for i in 40..400 {
        db.put(key(i), value(i, 0)).unwrap();
    }
    db.flush().unwrap();
    wait_for(
        || db.damage().iter().any(|d| d.path == seg),
        "the damage found while sealing to be reported",
    );
    let d = db.damage().into_iter().find(|d| d.path == seg).unwrap();
    assert_eq!(d.offset, Some(r.off), "{d}");
    assert!(d.detail.contains("sealing"), "{d}");
    assert!(db.open_damage().is_empty());
    assert!(db.verify().unwrap().damage.iter().any(|v| v.path == seg));
    assert!(matches!(db.get(&r.key), Err(Error::Corruption { .. })));
}

/// A flipped byte in a segment's 40-byte header. The records after it are intact and
/// self-checking; losing all of them to one bad header byte would be the HaloDB failure
/// in another place. At the least the loss must be reported and no key may silently
/// read as absent or as an older value.
#[test]
fn flipped_segment_header_byte_keeps_records() {
    let dir = tempfile::tempdir().unwrap();
    let model = build(dir.path(), 1500);
    let (seg, _, recs) = pick_middle(dir.path());
    xor_byte(&seg, 26, 0x01); // created_seq
    let db = opts().open(dir.path()).unwrap();
    assert!(db.open_damage().iter().any(|d| d.path == seg));
    for r in &recs {
        let got = db.get(&r.key);
        assert!(
            matches!(&got, Ok(Some(v)) if v.as_ref() == model[&r.key].as_slice())
                || matches!(got, Err(Error::Corruption { .. })),
            "key {} of the segment with the damaged header reads as {got:?}",
            String::from_utf8_lossy(&r.key)
        );
    }
    check_model(&db, &model, &[]);
}

// ---------------------------------------------------------------------------------------
// (c) torn tail of the active segment
// ---------------------------------------------------------------------------------------

fn torn_tail(cut_into_record: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut model = build(dir.path(), 1200);
    let sd = shard_dir(dir.path(), 1);
    let active = segments(&sd).pop().unwrap();
    let recs = records(&active);
    assert!(recs.len() >= 2, "active segment has {} records", recs.len());
    let last = recs.last().unwrap().clone();
    truncate(&active, last.off + cut_into_record);
    model.remove(&last.key);
    {
        let db = opts().open(dir.path()).unwrap();
        assert!(db.get(&last.key).unwrap().is_none());
        check_model(&db, &model, &[]);
        assert!(db.verify().unwrap().is_clean());
        // The torn bytes are cut off, so new records follow the last intact one.
        assert_eq!(fs::metadata(&active).unwrap().len(), last.off);
        for i in 0..50 {
            db.put(format!("more{i}"), "y").unwrap();
            model.insert(format!("more{i}").into_bytes(), b"y".to_vec());
        }
    }
    let db = opts().open(dir.path()).unwrap();
    check_model(&db, &model, &[]);
    assert!(db.verify().unwrap().is_clean());
    assert!(db.open_damage().is_empty(), "{:?}", db.open_damage());
}

#[test]
fn torn_tail_inside_header() {
    torn_tail(11);
}

#[test]
fn torn_tail_inside_value() {
    torn_tail(REC_HEADER + 12);
}

#[test]
fn garbage_tail_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let model = build(dir.path(), 1200);
    let sd = shard_dir(dir.path(), 0);
    let active = segments(&sd).pop().unwrap();
    let len = fs::metadata(&active).unwrap().len();
    let mut b = fs::read(&active).unwrap();
    b.extend(std::iter::repeat_n(0u8, 100));
    b.extend((0..100u32).map(|i| (i * 37) as u8));
    fs::write(&active, b).unwrap();
    let db = opts().open(dir.path()).unwrap();
    check_model(&db, &model, &[]);
    assert_eq!(fs::metadata(&active).unwrap().len(), len);
    assert!(db.verify().unwrap().is_clean());
}

// ---------------------------------------------------------------------------------------
// (d) damaged hint files, (e) missing hint files
// ---------------------------------------------------------------------------------------

fn damaged_hint(damage: impl Fn(&Path)) {
    let dir = tempfile::tempdir().unwrap();
    let model = build(dir.path(), 1500);
    let (seg, _, _) = pick_middle(dir.path());
    let hint = hint_of(&seg);
    damage(&hint);
    {
        let db = opts().open(dir.path()).unwrap();
        assert!(
            db.open_damage().iter().any(|d| d.path == hint),
            "open_damage does not name {}: {:?}",
            hint.display(),
            db.open_damage()
        );
        check_model(&db, &model, &[]);
        db.compact().unwrap();
        wait_for(|| hint.exists(), "hint rebuilt");
        let report = db.verify().unwrap();
        assert!(report.is_clean(), "{:?}", report.damage);
    }
    let db = opts().open(dir.path()).unwrap();
    assert!(db.open_damage().is_empty(), "{:?}", db.open_damage());
    check_model(&db, &model, &[]);
}

#[test]
fn hint_with_flipped_byte() {
    damaged_hint(|h| {
        let n = fs::metadata(h).unwrap().len();
        xor_byte(h, n / 2, 0x08);
    });
}

#[test]
fn hint_truncated() {
    damaged_hint(|h| {
        let n = fs::metadata(h).unwrap().len();
        truncate(h, n - 7);
    });
}

#[test]
fn hint_empty() {
    damaged_hint(|h| truncate(h, 0));
}

/// A hint whose checksum is right but which describes another segment.
#[test]
fn hint_of_another_segment() {
    let dir = tempfile::tempdir().unwrap();
    let model = build(dir.path(), 1500);
    let sealed = sealed_segments(&shard_dir(dir.path(), 0));
    let (a, b) = (&sealed[0], &sealed[1]);
    fs::copy(hint_of(a), hint_of(b)).unwrap();
    let db = opts().open(dir.path()).unwrap();
    assert!(db.open_damage().iter().any(|d| d.path == hint_of(b)));
    check_model(&db, &model, &[]);
}

/// A hint with a valid checksum that lists an entry pointing past the segment end.
#[test]
fn hint_with_valid_checksum_but_wrong_length() {
    let dir = tempfile::tempdir().unwrap();
    let model = build(dir.path(), 1500);
    let (seg, _, _) = pick_middle(dir.path());
    let hint = hint_of(&seg);
    let mut b = fs::read(&hint).unwrap();
    // data_len (offset 24) no longer matches the segment: the hint must not be used.
    b[24] ^= 0x01;
    reseal(&mut b);
    fs::write(&hint, b).unwrap();
    let db = opts().open(dir.path()).unwrap();
    assert!(db.open_damage().iter().any(|d| d.path == hint));
    check_model(&db, &model, &[]);
}

#[test]
fn missing_hints_are_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let model = build(dir.path(), 1500);
    let mut removed = Vec::new();
    for sd in shard_dirs(dir.path()) {
        for s in sealed_segments(&sd) {
            fs::remove_file(hint_of(&s)).unwrap();
            removed.push(hint_of(&s));
        }
    }
    {
        let db = opts().open(dir.path()).unwrap();
        assert!(db.open_damage().is_empty(), "{:?}", db.open_damage());
        check_model(&db, &model, &[]);
        db.compact().unwrap();
        wait_for(|| removed.iter().all(|h| h.exists()), "hints rebuilt");
        assert!(db.verify().unwrap().is_clean());
    }
    let db = opts().open(dir.path()).unwrap();
    check_model(&db, &model, &[]);
}

/// Left-over temporary files of an interrupted hint write are ignored and removed.
#[test]
fn stray_tmp_files_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let model = build(dir.path(), 1500);
    let (seg, _, _) = pick_middle(dir.path());
    let tmp = PathBuf::from(format!("{}.tmp", hint_of(&seg).display()));
    fs::write(&tmp, b"half a hint").unwrap();
    let db = opts().open(dir.path()).unwrap();
    check_model(&db, &model, &[]);
    assert!(!tmp.exists());
    assert!(db.verify().unwrap().is_clean());
}

// ---------------------------------------------------------------------------------------
// (f) missing files
// ---------------------------------------------------------------------------------------

/// A deleted segment file: there is no list of segments to notice it by, so the store
/// opens and the keys of that segment are gone; every other key is intact and nothing
/// panics. Today the loss is silent: the hint left behind is taken for the leftover of a
/// compaction and removed, and `open_damage` is empty.
#[test]
fn deleted_sealed_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = build(dir.path(), 1500);
    let (seg, _, recs) = pick_middle(dir.path());
    fs::remove_file(&seg).unwrap();
    let lost: Vec<Vec<u8>> = recs.iter().map(|r| r.key.clone()).collect();
    for k in &lost {
        model.remove(k);
    }
    let db = opts().open(dir.path()).unwrap();
    for k in &lost {
        assert!(db.get(k).unwrap().is_none());
    }
    check_model(&db, &model, &[]);
    assert!(db.verify().unwrap().is_clean());
    db.put("k", "v").unwrap();
    model.insert(b"k".to_vec(), b"v".to_vec());
    drop(db);
    let db = opts().open(dir.path()).unwrap();
    check_model(&db, &model, &[]);
}

#[test]
fn deleted_active_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = build(dir.path(), 1500);
    let active = segments(&shard_dir(dir.path(), 1)).pop().unwrap();
    for r in records(&active) {
        model.remove(&r.key);
    }
    fs::remove_file(&active).unwrap();
    let db = opts().open(dir.path()).unwrap();
    check_model(&db, &model, &[]);
    for i in 0..100 {
        db.put(format!("n{i}"), "v").unwrap();
        model.insert(format!("n{i}").into_bytes(), b"v".to_vec());
    }
    drop(db);
    let db = opts().open(dir.path()).unwrap();
    check_model(&db, &model, &[]);
    assert!(db.verify().unwrap().is_clean());
}

#[test]
fn deleted_shard_directory_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 1500);
    fs::remove_dir_all(shard_dir(dir.path(), 1)).unwrap();
    match opts().open(dir.path()) {
        Err(Error::Corruption { path, .. }) => assert_eq!(path, shard_dir(dir.path(), 1)),
        other => panic!("open without a shard directory: {other:?}"),
    }
}

#[test]
fn deleted_manifest_with_data_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 1500);
    fs::remove_file(dir.path().join("CAIRN")).unwrap();
    let e = opts().open(dir.path()).unwrap_err();
    assert!(
        matches!(e, Error::Corruption { .. } | Error::Format { .. }),
        "{e:?}"
    );
    // Nothing was created over the data.
    assert!(!dir.path().join("CAIRN").exists());
}

// ---------------------------------------------------------------------------------------
// (g) store files of another format version or damaged
// ---------------------------------------------------------------------------------------

fn rewrite_version(path: &Path, version: u32) {
    let mut b = fs::read(path).unwrap();
    b[8..12].copy_from_slice(&version.to_le_bytes());
    reseal(&mut b);
    fs::write(path, b).unwrap();
}

#[test]
fn a_grouped_store_of_a_future_version_is_refused_with_a_clear_error() {
    // A store with a version-2 manifest (numbered rows routed by group), its version
    // raised to one this build does not know.
    let dir = tempfile::tempdir().unwrap();
    drop(
        Options::new()
            .numbered_rows(3, b'I')
            .open(dir.path())
            .unwrap(),
    );
    rewrite_version(&dir.path().join("CAIRN"), 3);
    match Db::open(dir.path()) {
        Err(Error::Format { detail, .. }) => assert!(
            detail.contains("store format version 3; this build of cairn reads versions 1 to 2"),
            "{detail}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn manifest_of_a_future_version() {
    let dir = tempfile::tempdir().unwrap();
    let model = build(dir.path(), 300);
    let path = dir.path().join("CAIRN");
    let original = fs::read(&path).unwrap();
    assert_eq!(u32_at(&original, 8), cairn::FORMAT_VERSION);
    // Version 2 (a manifest listing numbered rows routed by group) is read too: the
    // first one this build does not know is 3.
    let future = cairn::FORMAT_VERSION + 2;
    rewrite_version(&path, future);
    match opts().open(dir.path()) {
        Err(Error::Format { path: p, detail }) => {
            assert_eq!(p, path);
            assert!(
                detail.contains(&format!("store format version {future};")),
                "{detail}"
            );
        }
        other => panic!("open of a future-version store: {other:?}"),
    }
    // The refusal changed nothing: with the original manifest back, all data is there.
    assert_eq!(fs::read(&path).unwrap().len(), original.len());
    fs::write(&path, original).unwrap();
    let db = opts().open(dir.path()).unwrap();
    check_model(&db, &model, &[]);
}

#[test]
fn seqstate_of_a_future_version() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = opts().open(dir.path()).unwrap();
        db.put("a", "1").unwrap();
        // A compaction persists the batch watermark, creating SEQSTATE.
        let mut b = WriteBatch::new();
        b.put("a", "2").put("b", "2");
        db.write(b).unwrap();
        for i in 0..2000u32 {
            db.put(key(i % 50), value(i, 0)).unwrap();
        }
        db.compact().unwrap();
    }
    let path = dir.path().join("SEQSTATE");
    assert!(path.exists(), "no SEQSTATE after compaction");
    rewrite_version(&path, 7);
    assert!(matches!(opts().open(dir.path()), Err(Error::Format { .. })));
}

#[test]
fn manifest_with_bad_checksum_or_magic() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 300);
    let path = dir.path().join("CAIRN");
    let original = fs::read(&path).unwrap();
    xor_byte(&path, 13, 0x01); // shard count, checksum not fixed
    assert!(matches!(
        opts().open(dir.path()),
        Err(Error::Corruption { .. })
    ));
    fs::write(&path, &original).unwrap();
    xor_byte(&path, 0, 0x01);
    assert!(matches!(opts().open(dir.path()), Err(Error::Format { .. })));
    fs::write(&path, &original).unwrap();
    truncate(&path, 10);
    assert!(opts().open(dir.path()).is_err());
    fs::write(&path, &original).unwrap();
    assert!(opts().open(dir.path()).is_ok());
}

#[test]
fn segment_of_a_future_version() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), 300);
    let seg = segments(&shard_dir(dir.path(), 0)).remove(0);
    let mut b = fs::read(&seg).unwrap();
    b[8..12].copy_from_slice(&9u32.to_le_bytes());
    let crc = mask(crc32c::crc32c(&b[0..32]));
    b[32..36].copy_from_slice(&crc.to_le_bytes());
    fs::write(&seg, b).unwrap();
    match opts().open(dir.path()) {
        Err(Error::Format { path, .. }) => assert_eq!(path, seg),
        other => panic!("{other:?}"),
    }
}

#[test]
fn not_a_store() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("notes.txt"), "hello").unwrap();
    assert!(matches!(Db::open(dir.path()), Err(Error::Format { .. })));
    assert_eq!(fs::read(dir.path().join("notes.txt")).unwrap(), b"hello");
}

// ---------------------------------------------------------------------------------------
// verify while the store is busy
// ---------------------------------------------------------------------------------------

/// `verify` on a healthy store must report nothing, also while background compaction
/// removes segments (and their hint files) under it.
#[test]
fn verify_while_compaction_runs() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let db = Options::new()
        .shards(2)
        .segment_size(8 << 10)
        .compaction_threshold(0.2)
        .compaction_rate(None)
        .open(dir.path())
        .unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                db.put(key(n % 40), value(n, n % 7).repeat(4)).unwrap();
                n += 1;
            }
        });
        let start = std::time::Instant::now();
        let mut result = Ok(());
        while start.elapsed() < std::time::Duration::from_secs(3) {
            let report = db.verify().unwrap();
            if !report.is_clean() {
                result = Err(report.damage);
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        if let Err(damage) = result {
            panic!("verify of a healthy store reports damage: {damage:?}");
        }
    });
    // The writer outpaces compaction of 8 KiB segments; once it stops, background
    // compaction must catch up.
    let start = std::time::Instant::now();
    while db.stats().total.segments >= 40 && start.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(db.stats().total.segments < 40, "compaction did not run");
    assert!(db.verify().unwrap().is_clean());
}
