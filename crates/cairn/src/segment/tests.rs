//! Tests of segment files: the mapped and the full scan, hint files, reads ahead of a
//! cold walk and unmapping what a walk read.

use super::*;
use crate::fsutil::Fs;

/// A segment holding records of small and large values.
fn segment(dir: &Path) -> (SegmentFile, u64) {
    let fs = Fs::default();
    let seg = SegmentFile::create(&fs, dir, 0, 7, SegKind::Data, 1).unwrap();
    let mut buf = Vec::new();
    for i in 0..50u32 {
        let key = format!("key-{i}");
        let value = vec![i as u8; if i % 7 == 0 { 200_000 } else { i as usize * 3 }];
        let kind = if i % 11 == 5 { Kind::Delete } else { Kind::Put };
        let value = if kind == Kind::Delete {
            Vec::new()
        } else {
            value
        };
        let dcrc = record::data_crc(key.as_bytes(), &value);
        record::encode(
            &mut buf,
            kind,
            100 + u64::from(i),
            1,
            key.as_bytes(),
            &value,
            dcrc,
        );
    }
    fs.write_at(&seg.file, &seg.path, &buf, SEG_HEADER_LEN)
        .unwrap();
    let len = SEG_HEADER_LEN + buf.len() as u64;
    seg.map_for_append(len + 4096);
    (seg, len)
}

/// A segment of `n` puts of 1,000-byte values under 8-byte keys 0, 1, … (sequence
/// numbers 1, 2, …), mapped for reads; and its length.
fn puts(dir: &Path, n: u64) -> (SegmentFile, u64) {
    let fs = Fs::default();
    let seg = SegmentFile::create(&fs, dir, 0, 3, SegKind::Data, 1).unwrap();
    let mut buf = Vec::new();
    let value = vec![7u8; 1000];
    for i in 0..n {
        let key = i.to_be_bytes();
        let dcrc = record::data_crc(&key, &value);
        record::encode(&mut buf, Kind::Put, 1 + i, 1, &key, &value, dcrc);
    }
    fs.write_at(&seg.file, &seg.path, &buf, SEG_HEADER_LEN)
        .unwrap();
    let len = SEG_HEADER_LEN + buf.len() as u64;
    seg.map_for_append(len);
    (seg, len)
}

/// A hint lists its entries in key order, a key's records newest first (open merges
/// hints as sorted runs), and `read_hint_entries` gives them back in file order.
#[test]
fn hints_are_in_key_order_and_read_back_in_file_order() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::default();
    // File order: keys out of order, and "b" written three times.
    let keys = ["m", "b", "z", "b", "a", "b", "c"];
    let entries: Vec<Entry> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| Entry {
            kind: Kind::Put,
            seq: 10 + i as u64,
            batch_total: 1,
            off: 40 + 100 * i as u32,
            len: 100,
            key: k.as_bytes().to_vec(),
        })
        .collect();
    write_hint(&fs, dir.path(), 9, 740, &entries).unwrap();
    let mut listed = Vec::new();
    let (data_len, _) = read_hint(&hint_path(dir.path(), 9), 9, |_, seq, _, off, _, key| {
        listed.push((String::from_utf8(key.to_vec()).unwrap(), seq, off))
    })
    .unwrap();
    assert_eq!(data_len, 740);
    let want = [
        ("a", 14, 440),
        ("b", 15, 540),
        ("b", 13, 340),
        ("b", 11, 140),
        ("c", 16, 640),
        ("m", 10, 40),
        ("z", 12, 240),
    ];
    let want: Vec<(String, u64, u32)> = want
        .iter()
        .map(|&(k, s, o)| (k.to_string(), s, o))
        .collect();
    assert_eq!(listed, want);
    let (back, _) = read_hint_entries(&hint_path(dir.path(), 9), 9).unwrap();
    assert_eq!(back, entries);
}

/// A hint is checked whole when opened: every byte's damage is found (the checksum, or
/// the walk of the entries), an older version's hint out of key order is read but said
/// to be out of order, and the records' span is checked against the segment's length.
#[test]
fn hints_are_checked_whole_and_their_order_found() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::default();
    let entry = |key: &str, seq: u64, off: u32| Entry {
        kind: Kind::Put,
        seq,
        batch_total: 1,
        off,
        len: 100,
        key: key.as_bytes().to_vec(),
    };
    let entries = vec![entry("kb", 5, 140), entry("ka", 6, 40), entry("ka", 4, 240)];
    write_hint(&fs, dir.path(), 3, 340, &entries).unwrap();
    let path = hint_path(dir.path(), 3);
    let hint = Hint::open(&path, 3).unwrap();
    assert!(hint.in_order());
    assert_eq!((hint.count(), hint.max_seq(), hint.data_len()), (3, 6, 340));
    assert!(hint.within(340) && !hint.within(339));
    let keys: Vec<(&[u8], u64)> = hint.entries().map(|e| (e.key, e.seq)).collect();
    assert_eq!(keys, [(&b"ka"[..], 6), (&b"ka"[..], 4), (&b"kb"[..], 5)]);
    assert!(matches!(
        Hint::open(&path, 4),
        Err(Error::Corruption { .. })
    ));

    // Every single byte flipped: refused, never read as another list.
    let good = std::fs::read(&path).unwrap();
    for i in 0..good.len() {
        let mut bad = good.clone();
        bad[i] ^= 0x20;
        std::fs::write(&path, &bad).unwrap();
        assert!(
            Hint::open(&path, 3).is_err(),
            "byte {i} flipped was accepted"
        );
    }
    // Cut short anywhere: refused.
    for n in 0..good.len() {
        std::fs::write(&path, &good[..n]).unwrap();
        assert!(Hint::open(&path, 3).is_err(), "cut at {n} was accepted");
    }

    // The same entries in file order with a valid checksum, as an older version wrote
    // them: read back, not in order.
    let body_start = 32;
    let mut b = good[..body_start].to_vec();
    for e in &entries {
        hint::put_entry(&mut b, e);
    }
    let crc = record::mask(crc32c::crc32c(&b));
    b.extend_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, &b).unwrap();
    let old = Hint::open(&path, 3).unwrap();
    assert!(!old.in_order());
    let seqs: Vec<u64> = old.entries().map(|e| e.seq).collect();
    assert_eq!(seqs, [5, 6, 4]);
}

/// Sealing's quick scan lists the same entries as the full scan, and gives up (for the
/// full scan to report) on a damaged header or key.
#[test]
fn mapped_scan_matches_the_full_scan_and_refuses_damage() {
    let dir = tempfile::tempdir().unwrap();
    let (seg, len) = segment(dir.path());
    let (full, outcome) = scan_entries(&seg, len).unwrap();
    assert_eq!(outcome.valid_end, len);
    assert_eq!(full.len(), 50);
    assert_eq!(scan_entries_mapped(&seg, len), Some(full.clone()));
    // Beyond the map: refused.
    assert_eq!(scan_entries_mapped(&seg, len + 8192), None);
    // A damaged key byte of the tenth record: refused; the full scan reports it.
    let off = u64::from(full[10].off) + HEADER_LEN as u64 + 1;
    seg.file.write_all_at(b"#", off).unwrap();
    assert_eq!(scan_entries_mapped(&seg, len), None);
    let (_, outcome) = scan_entries(&seg, len).unwrap();
    assert!(!outcome.damage.is_empty());
}

/// Major page faults of the calling thread so far.
fn major_faults() -> i64 {
    // SAFETY: `rusage` is a struct of integers, for which all-zero bytes are valid.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given, which outlives the call.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    u.ru_majflt
}

/// A walk through the map of a segment that left the page cache reads ahead of
/// itself: not one 4 KiB disk read per page (the map is advised random for point
/// reads). Sealing and the hint written at close walk segments this way; in a store
/// larger than memory, a cold walk cost a close minutes.
#[test]
fn a_cold_mapped_scan_reads_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let (seg, len) = puts(dir.path(), 16_000);
    seg.file.sync_all().unwrap();
    let pages = len / page_size();
    // Out of the page cache (the file is synced, so its pages are clean).
    // SAFETY: an advisory call on an open descriptor.
    unsafe {
        use std::os::unix::io::AsRawFd;
        libc::posix_fadvise(seg.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
    }
    let before = major_faults();
    let entries = scan_entries_mapped(&seg, len).unwrap();
    let faults = major_faults() - before;
    assert_eq!(entries.len(), 16_000);
    assert!(
        faults < pages as i64 / 16,
        "{faults} major faults walking {pages} cold pages"
    );
}

/// Resident bytes of this process's mapping that starts at `addr` (`/proc/self/smaps`),
/// or `None` where that can't be read.
fn mapped_rss(addr: usize) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut lines = smaps.lines();
    while let Some(l) = lines.next() {
        let start = l.split('-').next()?;
        if usize::from_str_radix(start, 16).ok() != Some(addr) {
            continue;
        }
        for l in lines.by_ref() {
            if let Some(kb) = l.strip_prefix("Rss:") {
                return kb
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
                    .map(|k| k * 1024);
            }
        }
    }
    None
}

/// Sealing's walk leaves none of the segment's pages mapped into the process (they
/// stay in the page cache), and a read through the map after it sees the same bytes.
#[test]
fn the_mapped_scan_unmaps_the_pages_it_walked() {
    let dir = tempfile::tempdir().unwrap();
    let (seg, len) = puts(dir.path(), 4_000);
    let addr = seg.mapped().unwrap().as_ptr() as usize;
    // Touch every page through the map, as a walk without the release would leave them.
    let touched: u64 = seg.mapped().unwrap()[..len as usize]
        .iter()
        .step_by(page_size() as usize)
        .map(|&b| u64::from(b))
        .sum();
    let Some(before) = mapped_rss(addr) else {
        return; // no /proc/self/smaps here
    };
    assert!(
        before >= len / 2,
        "{before} bytes resident after touching {len}"
    );
    let entries = scan_entries_mapped(&seg, len).unwrap();
    assert_eq!(entries.len(), 4_000);
    let after = mapped_rss(addr).unwrap();
    assert!(
        after <= 2 * page_size(),
        "{after} bytes still mapped after the scan"
    );
    // The bytes read through the map again are the file's.
    let again: u64 = seg.mapped().unwrap()[..len as usize]
        .iter()
        .step_by(page_size() as usize)
        .map(|&b| u64::from(b))
        .sum();
    assert_eq!(again, touched);
    let mut head = vec![0u8; 64];
    seg.file.read_exact_at(&mut head, SEG_HEADER_LEN).unwrap();
    assert_eq!(
        &seg.mapped().unwrap()[SEG_HEADER_LEN as usize..][..64],
        &head[..]
    );
}
