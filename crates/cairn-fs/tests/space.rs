//! `Fs::fallocate` and `Fs::copy_range` against a byte-vector model of each file.

use cairn_fs::{Cred, Fs, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, ROOT};

const PUNCH: i32 = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;

fn body(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed) as u8 | 1)
        .collect()
}

#[test]
fn fallocate_extends_keeps_size_and_punches_holes() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::open(dir.path()).unwrap();
    let me = Cred::ROOT;
    let f = fs.create(&me, ROOT, b"f", 0o644).unwrap();

    // Mode 0: the size grows, the new bytes are zeros; never shrinks.
    fs.fallocate(&me, f.ino, 10, 90, 0).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().size, 100);
    fs.fallocate(&me, f.ino, 0, 50, 0).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().size, 100);
    assert_eq!(fs.read(f.ino, 0, 200).unwrap(), vec![0u8; 100]);
    fs.fallocate(&me, f.ino, 0, 1, FALLOC_FL_KEEP_SIZE).unwrap();
    fs.fallocate(&me, f.ino, 1 << 30, 1, FALLOC_FL_KEEP_SIZE)
        .unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().size, 100);

    // Punches over inline data, and over chunked data: within one chunk, across chunk
    // boundaries, covering whole chunks, past the end of the file.
    let mut model = body(100, 3);
    fs.write(f.ino, 0, &model).unwrap();
    fs.fallocate(&me, f.ino, 20, 30, PUNCH).unwrap();
    model[20..50].fill(0);
    assert_eq!(fs.read(f.ino, 0, 1000).unwrap(), model);

    let g = fs.create(&me, ROOT, b"g", 0o644).unwrap();
    let chunk = cairn_fs::CHUNK_SIZE as usize;
    let mut model = body(5 * chunk + 777, 9);
    fs.write(g.ino, 0, &model).unwrap();
    for (off, len) in [
        (100, 50),                     // inside chunk 0
        (chunk - 10, 20),              // across 0|1
        (2 * chunk, chunk),            // chunk 2, whole
        (3 * chunk + 5, 2 * chunk),    // the rest of 3, the whole of 4, into 5
        (5 * chunk + 700, 10 * chunk), // past the end: clipped, the size stays
    ] {
        fs.fallocate(&me, g.ino, off as i64, len as i64, PUNCH)
            .unwrap();
        let end = (off + len).min(model.len());
        model[off..end].fill(0);
        assert_eq!(fs.getattr(g.ino).unwrap().size, model.len() as u64);
        assert!(
            fs.read(g.ino, 0, model.len() + 10).unwrap() == model,
            "after punching {off}+{len}"
        );
    }
    // Writes into a hole fill it again.
    fs.write(g.ino, 2 * chunk as u64 + 10, b"back").unwrap();
    model[2 * chunk + 10..2 * chunk + 14].copy_from_slice(b"back");
    assert!(fs.read(g.ino, 0, model.len()).unwrap() == model);
    fs.close().unwrap();

    // The holes survive a reopen, and the check finds the file system whole.
    let fs = Fs::open(dir.path()).unwrap();
    assert!(fs.read(g.ino, 0, model.len()).unwrap() == model);
    assert_eq!(fs.check().unwrap(), Vec::<String>::new());
    fs.close().unwrap();
}

#[test]
fn fallocate_refuses_what_linux_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::open(dir.path()).unwrap();
    let me = Cred::ROOT;
    let f = fs.create(&me, ROOT, b"f", 0o644).unwrap();
    let d = fs.mkdir(&me, ROOT, b"d", 0o755).unwrap();
    let errno = |r: cairn_fs::FsResult<()>| r.unwrap_err().0;
    assert_eq!(errno(fs.fallocate(&me, f.ino, 0, 0, 0)), libc::EINVAL);
    assert_eq!(errno(fs.fallocate(&me, f.ino, -1, 10, 0)), libc::EINVAL);
    assert_eq!(
        errno(fs.fallocate(&me, f.ino, i64::MAX, 10, 0)),
        libc::EFBIG
    );
    assert_eq!(
        errno(fs.fallocate(&me, f.ino, 0, 10, FALLOC_FL_PUNCH_HOLE)),
        libc::EOPNOTSUPP
    );
    assert_eq!(
        errno(fs.fallocate(&me, f.ino, 0, 10, libc::FALLOC_FL_ZERO_RANGE)),
        libc::EOPNOTSUPP
    );
    assert_eq!(errno(fs.fallocate(&me, d.ino, 0, 10, 0)), libc::EISDIR);
    // More than the disk has.
    assert_eq!(
        errno(fs.fallocate(&me, f.ino, 0, i64::MAX / 2, 0)),
        libc::ENOSPC
    );
    assert_eq!(fs.getattr(f.ino).unwrap().size, 0);
    fs.close().unwrap();
}

#[test]
fn copy_range_copies_within_and_between_files() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::open(dir.path()).unwrap();
    let me = Cred::ROOT;
    let chunk = cairn_fs::CHUNK_SIZE as usize;
    let a = fs.create(&me, ROOT, b"a", 0o644).unwrap();
    let b = fs.create(&me, ROOT, b"b", 0o644).unwrap();
    let src = body(3 * chunk + 123, 5);
    fs.write(a.ino, 0, &src).unwrap();

    // Across chunks, to an offset past the end of the target (a gap of zeros).
    let n = fs
        .copy_range(a.ino, 1_000, b.ino, 50, 2 * chunk as u64)
        .unwrap();
    assert_eq!(n, 2 * chunk as u64);
    let mut want = vec![0u8; 50];
    want.extend_from_slice(&src[1_000..1_000 + 2 * chunk]);
    assert!(fs.read(b.ino, 0, want.len() + 10).unwrap() == want);

    // Asking past the end of the source copies what there is; past it, nothing.
    let n = fs
        .copy_range(a.ino, src.len() as u64 - 10, b.ino, 0, 100)
        .unwrap();
    assert_eq!(n, 10);
    assert_eq!(
        fs.copy_range(a.ino, src.len() as u64 + 5, b.ino, 0, 100)
            .unwrap(),
        0
    );

    // Within one file: apart is fine, overlapping is EINVAL.
    let n = fs
        .copy_range(a.ino, 0, a.ino, src.len() as u64, 4096)
        .unwrap();
    assert_eq!(n, 4096);
    assert_eq!(
        fs.read(a.ino, src.len() as u64, 4096).unwrap(),
        &src[..4096]
    );
    assert_eq!(
        fs.copy_range(a.ino, 0, a.ino, 100, 4096).unwrap_err().0,
        libc::EINVAL
    );
    let d = fs.mkdir(&me, ROOT, b"d", 0o755).unwrap();
    assert_eq!(
        fs.copy_range(d.ino, 0, b.ino, 0, 1).unwrap_err().0,
        libc::EISDIR
    );
    fs.close().unwrap();
}
