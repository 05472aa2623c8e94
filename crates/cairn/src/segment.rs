//! Segment files (append-only logs of records) and their hint files (see FORMAT.md).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use crate::fsutil::{self, Fs};
use crate::record::{self, u32_at, u64_at, Header, Kind, HEADER_LEN};
use crate::{Error, Result, FORMAT_VERSION};

/// Magic bytes at the start of every segment file.
pub const SEG_MAGIC: &[u8; 8] = b"CAIRNSEG";
/// Bytes of the segment header; the first record starts here.
pub const SEG_HEADER_LEN: u64 = 40;

/// Whether a segment was written by the write path or by compaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegKind {
    /// Written by puts and deletes, in sequence order.
    Data = 0,
    /// Written by compaction: copies of live records.
    Compacted = 1,
}

/// An open segment file. Shared by `Arc` between the shard, readers and compaction, so a
/// file removed by compaction stays readable until its last reader is done.
#[derive(Debug)]
pub struct SegmentFile {
    /// Segment id, unique within the shard.
    pub id: u32,
    /// Path of the `.seg` file.
    pub path: PathBuf,
    /// The open file.
    pub file: File,
    /// Data or compaction output.
    pub kind: SegKind,
    /// The global sequence number current when the segment was created.
    pub created_seq: u64,
    /// A read-only map of the file once it is sealed (immutable).
    map: OnceLock<memmap2::Mmap>,
    /// Moving share of recent reads that went to the disk, in 1/65536ths.
    cold_reads: AtomicU32,
}

/// Records spanning more pages than this are always read with `pread`.
pub const MAP_MAX_PAGES: u64 = 4;

/// One read of a record in this many is timed ([`SegmentFile::read_timer`]).
pub const READ_SAMPLE: u64 = 8;

/// A read slower than this went to the disk (a warm one takes a few microseconds, a
/// disk read 20 or more even when the device has it cached).
pub const COLD_READ: std::time::Duration = std::time::Duration::from_micros(20);

/// Above this share of cold reads (1/64, in 1/65536ths) a segment's records within
/// [`MAP_MAX_PAGES`] pages are read with `pread`: a cold page costs ~100 µs through the
/// map per page the record spans, the copy and system call of a warm `pread` ~1.5 µs
/// more than the map, so `pread` wins once more than about one read in 70 is cold. A
/// record within one page too: a store far larger than memory keeps the page cache full,
/// and every page faulted into the map must later be unmapped to be reclaimed (a walk of
/// the page's mappings and a TLB flush on every CPU), which `pread`'s pages, never
/// mapped, do not need — at 40M records of 1 KiB (41 GB in 24 GiB) random reads ran
/// 1.3–2× faster by `pread` from 4 and 32 threads (DESIGN.md, "Reads that reach the
/// disk").
const COLD_SHARE_PREAD: u32 = 1 << 10;

/// Path of segment `id` in `dir`.
pub fn seg_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("{id:010}.seg"))
}

/// Path of the hint file of segment `id` in `dir`.
pub fn hint_path(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("{id:010}.hint"))
}

impl SegmentFile {
    /// Creates a new segment file with its header, durable (file and directory synced).
    pub fn create(
        fs: &Fs,
        dir: &Path,
        shard: u32,
        id: u32,
        kind: SegKind,
        created_seq: u64,
    ) -> Result<SegmentFile> {
        let path = seg_path(dir, id);
        let file = fs.create_new(&path)?;
        let mut h = [0u8; SEG_HEADER_LEN as usize];
        h[0..8].copy_from_slice(SEG_MAGIC);
        h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&shard.to_le_bytes());
        h[16..20].copy_from_slice(&id.to_le_bytes());
        h[20..24].copy_from_slice(&(kind as u32).to_le_bytes());
        h[24..32].copy_from_slice(&created_seq.to_le_bytes());
        let crc = record::mask(crc32c::crc32c(&h[0..32]));
        h[32..36].copy_from_slice(&crc.to_le_bytes());
        let res = fs
            .write_at(&file, &path, &h, 0)
            .and_then(|_| fs.sync_data(&file, &path))
            .and_then(|_| fs.sync_dir(dir));
        if let Err(e) = res {
            let _ = fs.remove(&path);
            return Err(e);
        }
        Ok(SegmentFile {
            id,
            path,
            file,
            kind,
            created_seq,
            map: OnceLock::new(),
            cold_reads: AtomicU32::new(0),
        })
    }

    /// Opens an existing segment and checks its header. Returns the file, its length,
    /// and what is wrong with the header if it is damaged: a segment with a damaged header
    /// is still read (its records carry their own checksums), treated conservatively as a
    /// compaction output created at sequence 0, so it never takes appends again.
    /// `Ok(None)` means the file is shorter than a header (a crash during creation).
    /// A header that is intact but of another format version is `Error::Format`.
    pub fn open(
        path: &Path,
        shard: u32,
        id: u32,
    ) -> Result<Option<(SegmentFile, u64, Option<String>)>> {
        Self::open_as(path, shard, id, true)
    }

    /// [`SegmentFile::open`] for reading only (a read-only open of the store: the
    /// descriptor cannot write).
    pub fn open_read_only(
        path: &Path,
        shard: u32,
        id: u32,
    ) -> Result<Option<(SegmentFile, u64, Option<String>)>> {
        Self::open_as(path, shard, id, false)
    }

    /// A stand-in for the active segment of a store opened read-only, which appends
    /// nothing: the shard's directory, opened for reading, under an id no segment has.
    /// Nothing is ever read from it (no index entry names its id).
    pub(crate) fn read_only_stand_in(dir: &Path) -> Result<SegmentFile> {
        let file = File::open(dir).map_err(|e| Error::io(dir, e))?;
        Ok(SegmentFile {
            id: u32::MAX,
            path: dir.to_owned(),
            file,
            kind: SegKind::Data,
            created_seq: 0,
            map: OnceLock::new(),
            cold_reads: AtomicU32::new(0),
        })
    }

    fn open_as(
        path: &Path,
        shard: u32,
        id: u32,
        write: bool,
    ) -> Result<Option<(SegmentFile, u64, Option<String>)>> {
        let file = OpenOptions::new()
            .read(true)
            .write(write)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        SegmentFile::from_file(file, path, shard, id)
    }

    /// The segment in the open `file` at `path`, its header checked (see
    /// [`SegmentFile::open`]).
    fn from_file(
        file: File,
        path: &Path,
        shard: u32,
        id: u32,
    ) -> Result<Option<(SegmentFile, u64, Option<String>)>> {
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        if len < SEG_HEADER_LEN {
            return Ok(None);
        }
        let h = fsutil::read_exact_at(&file, path, 0, SEG_HEADER_LEN as usize)?;
        let damage = if &h[0..8] != SEG_MAGIC {
            Some("segment header has a bad magic number".to_string())
        } else if record::mask(crc32c::crc32c(&h[0..32])) != u32_at(&h, 32) {
            Some("segment header checksum mismatch".to_string())
        } else if u32_at(&h, 8) != FORMAT_VERSION {
            return Err(Error::format(
                path,
                format!(
                    "segment format version {}, this build reads {FORMAT_VERSION}",
                    u32_at(&h, 8)
                ),
            ));
        } else if u32_at(&h, 12) != shard || u32_at(&h, 16) != id || u32_at(&h, 20) > 1 {
            Some(format!(
                "segment header names shard {} segment {} kind {}, expected shard {shard} segment {id}",
                u32_at(&h, 12),
                u32_at(&h, 16),
                u32_at(&h, 20)
            ))
        } else {
            None
        };
        let (kind, created_seq) = match (&damage, u32_at(&h, 20)) {
            (None, 0) => (SegKind::Data, u64_at(&h, 24)),
            (None, _) => (SegKind::Compacted, u64_at(&h, 24)),
            (Some(_), _) => (SegKind::Compacted, 0),
        };
        Ok(Some((
            SegmentFile {
                id,
                path: path.to_owned(),
                file,
                kind,
                created_seq,
                map: OnceLock::new(),
                cold_reads: AtomicU32::new(0),
            },
            len,
            damage,
        )))
    }

    /// Reads `len` bytes at `off`: a copy from the map of a sealed segment when it covers
    /// them, else `pread`.
    pub fn read_at(&self, off: u64, len: usize) -> Result<Vec<u8>> {
        if let Some(b) = self
            .map
            .get()
            .and_then(|m| m.get(off as usize..off as usize + len))
        {
            return Ok(b.to_vec());
        }
        fsutil::read_exact_at(&self.file, &self.path, off, len)
    }

    /// Reads `len` bytes at `off` with `pread`, even where the map covers them (one
    /// request to the disk for the whole range when it is not cached).
    pub fn pread_at(&self, off: u64, len: usize) -> Result<Vec<u8>> {
        fsutil::read_exact_at(&self.file, &self.path, off, len)
    }

    /// Whether the record of `len` bytes at `off` of this sealed segment is better read
    /// with one `pread` than through the map.
    ///
    /// The map is advised `MADV_RANDOM` (a point lookup faults in only the page it
    /// needs), so a record spanning P pages costs P disk round trips through it when it
    /// is cold, and one through `pread`; when it is warm the map serves it without a copy
    /// or a system call. So: a record spanning more than [`MAP_MAX_PAGES`] pages always
    /// uses `pread` (warm, the copy costs about what the map's checksum pass does); a
    /// smaller one the map unless recent reads of this segment were cold (see
    /// [`SegmentFile::note_read`]: more than 1/64 of them). Measured in DESIGN.md,
    /// "Reads that reach the disk".
    pub fn prefer_pread(&self, off: u64, len: u64) -> bool {
        let page = page_size();
        let pages = (off + len.max(1) - 1) / page - off / page + 1;
        match pages {
            p if p > MAP_MAX_PAGES => true,
            _ => self.cold_reads.load(Ordering::Relaxed) > COLD_SHARE_PREAD,
        }
    }

    /// Starts timing the read of the record at `off` if it is one of the reads
    /// [`SegmentFile::note_read`] samples: about one in [`READ_SAMPLE`], chosen by a hash
    /// of the offset (reads at random places sample at random), so that most reads pay
    /// no clock reads at all.
    #[inline]
    pub fn read_timer(off: u64) -> Option<std::time::Instant> {
        let h = off.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        h.is_multiple_of(READ_SAMPLE).then(std::time::Instant::now)
    }

    /// Records how long a sampled read of a record took (`timer` from
    /// [`SegmentFile::read_timer`]; `None`: not sampled): longer than [`COLD_READ`] means
    /// it went to the disk. Keeps a moving share of cold reads (about the last 32
    /// sampled, some 256 reads) that [`SegmentFile::prefer_pread`] consults.
    pub fn note_read(&self, timer: Option<std::time::Instant>) {
        let Some(t) = timer else { return };
        let sample = if t.elapsed() > COLD_READ {
            1u32 << 16
        } else {
            0
        };
        let old = self.cold_reads.load(Ordering::Relaxed);
        // Lossy under races, which only blurs the average.
        let new = old - old / 32 + sample / 32;
        if new != old {
            // (A warm store's share stays 0 and its readers never write the line.)
            self.cold_reads.store(new, Ordering::Relaxed);
        }
    }

    /// The read-only map of the segment, once it is sealed.
    pub fn mapped(&self) -> Option<&memmap2::Mmap> {
        self.map.get()
    }

    /// Maps the first `cap` bytes of the segment taking appends, so that reads of records
    /// already written to it need no system call and no copy. The map may reach past the
    /// end of the file: only bytes already written are ever read through it (records
    /// still buffered or being written are served from memory), and a record beyond `cap`
    /// is read with `pread`.
    pub fn map_for_append(&self, cap: u64) {
        self.map_sealed(cap);
    }

    /// Maps the first `len` bytes of a sealed segment for reads, saving a system call per
    /// read. Failure to map is not an error: reads then use `pread`.
    pub fn map_sealed(&self, len: u64) {
        if self.map.get().is_some() || len == 0 {
            return;
        }
        // SAFETY: cairn never truncates or rewrites bytes of a segment that were written
        // while the store is open (torn tails are cut at open, before any map exists),
        // with one exception: a clean close may cut an active segment whose records are
        // all dead back to its header, and only when nothing but the shard holds the
        // file (`Shard::empty_active`), so no reader or value can read through the map
        // any more. Sealed segments are immutable and active ones only grow. Only bytes
        // already written are read through a map (see `map_for_append`), so no access
        // touches a page past the end of the file. The store's LOCK keeps other cairn
        // handles out, and compaction only unlinks files, which keeps mapped pages valid.
        let map = unsafe {
            memmap2::MmapOptions::new()
                .len(len as usize)
                .map(&self.file)
        };
        if let Ok(m) = map {
            let _ = m.advise(memmap2::Advice::Random);
            let _ = self.map.set(m);
        }
        // Reads of a sealed segment are point reads (`pread` of whole records included):
        // the kernel's readahead of the descriptor would guess a stream from two reads
        // that happen to be adjacent and read up to `read_ahead_kb` (8 MiB on some
        // disks) for one record. Streaming readers ask for what they want next
        // themselves (`Db::prefetch`); scans set the advice back (`scan`, `scan_listed`).
        self.advise(libc::POSIX_FADV_RANDOM);
    }

    /// Unmaps the pages of the segment's map from this process (`MADV_DONTNEED`): they
    /// stay in the page cache, and a later read through the map faults them back in
    /// from there. Advisory: failure is ignored.
    pub fn unmap_pages(&self) {
        if let Some(m) = self.map.get() {
            // SAFETY: the map is a shared, read-only map of the file: after
            // MADV_DONTNEED a read through it sees the file's bytes again (from the page
            // cache, or the disk), the same bytes, since no byte read through a map is
            // ever rewritten (see `map_sealed`). No private copy is discarded.
            let _ = unsafe { m.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
        }
    }

    /// Asks the kernel to start reading `len` bytes at `off` into the page cache without
    /// waiting (`POSIX_FADV_WILLNEED`); cheap when they are there already. Advisory.
    pub fn will_need(&self, off: u64, len: u64) {
        use std::os::unix::io::AsRawFd;
        // SAFETY: an advisory system call on a descriptor `self` keeps open.
        unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                off as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            );
        }
    }

    /// Sets the descriptor's access pattern (`posix_fadvise` of the whole file), which
    /// governs the kernel's readahead of `pread`s. Advisory: failure is ignored.
    fn advise(&self, advice: libc::c_int) {
        use std::os::unix::io::AsRawFd;
        // SAFETY: an advisory system call on a descriptor `self` keeps open.
        unsafe {
            libc::posix_fadvise(self.file.as_raw_fd(), 0, 0, advice);
        }
    }
}

/// The size of a memory page (4 KiB where `sysconf` can't say).
fn page_size() -> u64 {
    static PAGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if p > 0 {
            p as u64
        } else {
            4096
        }
    })
}

/// A record found by a scan or listed in a hint file: everything but the value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Put or delete.
    pub kind: Kind,
    /// Sequence number.
    pub seq: u64,
    /// Records in its batch.
    pub batch_total: u32,
    /// Offset of the record in the segment.
    pub off: u32,
    /// Length of the record.
    pub len: u32,
    /// The key.
    pub key: Vec<u8>,
}

/// A damaged stretch of a file found by a scan.
#[derive(Clone, Debug)]
pub struct BadSpot {
    /// Offset where the damage starts.
    pub offset: u64,
    /// What was wrong.
    pub detail: String,
}

/// What a scan of a segment found.
#[derive(Debug, Default)]
pub struct ScanOutcome {
    /// End of the last intact record (or of the header).
    pub valid_end: u64,
    /// Damaged stretches followed by intact records.
    pub damage: Vec<BadSpot>,
    /// Bytes after `valid_end` that hold no intact record (a torn tail), with what was wrong.
    pub tail: Option<BadSpot>,
    /// Intact records.
    pub records: u64,
    /// Zero bytes from `valid_end` to the end of the file: laid out ahead of durable
    /// appends (see `shard::layout`), not damage. The segment's data ends at `valid_end`.
    pub zero_tail: u64,
}

/// Buffered positional reader over a file, handing out contiguous slices.
pub struct WindowReader<'f> {
    file: &'f File,
    len: u64,
    buf: Vec<u8>,
    start: u64,
}

const WINDOW: usize = 1 << 20;

impl<'f> WindowReader<'f> {
    /// A reader over the first `len` bytes of `file`.
    pub fn new(file: &'f File, len: u64) -> WindowReader<'f> {
        WindowReader {
            file,
            len,
            buf: Vec::new(),
            start: 0,
        }
    }

    /// The bytes `[pos, pos+n)`, which must lie within the file length.
    pub fn slice(&mut self, pos: u64, n: usize) -> std::io::Result<&[u8]> {
        let end = pos + n as u64;
        debug_assert!(end <= self.len);
        if pos < self.start || end > self.start + self.buf.len() as u64 {
            let want = (n.max(WINDOW) as u64).min(self.len - pos) as usize;
            self.buf.resize(want, 0);
            self.file.read_exact_at(&mut self.buf, pos)?;
            self.start = pos;
        }
        let s = (pos - self.start) as usize;
        Ok(&self.buf[s..s + n])
    }
}

/// Whether every byte from `pos` to `file_len` is zero.
fn zeros_to_end(r: &mut WindowReader<'_>, mut pos: u64, file_len: u64) -> std::io::Result<bool> {
    while pos < file_len {
        let n = (file_len - pos).min(64 << 10) as usize;
        if r.slice(pos, n)?.iter().any(|&b| b != 0) {
            return Ok(false);
        }
        pos += n as u64;
    }
    Ok(true)
}

/// Checks that a full, intact record starts at `pos`.
fn record_at(r: &mut WindowReader<'_>, pos: u64, file_len: u64) -> std::io::Result<Option<Header>> {
    if file_len - pos < HEADER_LEN as u64 {
        return Ok(None);
    }
    let Ok(h) = record::decode_header(r.slice(pos, HEADER_LEN)?) else {
        return Ok(None);
    };
    if pos + h.record_len() > file_len {
        return Ok(None);
    }
    let b = r.slice(pos, h.record_len() as usize)?;
    Ok(record::decode(b).ok().map(|rec| rec.header))
}

/// Reads every record of a segment from the header to `file_len`, calling
/// `f(offset, record, intact)` for each record whose header and key check out.
///
/// - An intact record comes with `intact` true.
/// - A record whose header and key check out but whose value does not comes with
///   `intact` false and an empty value, and is reported as damage: its key is known, so
///   the caller can make reads of that key fail instead of returning an older value.
/// - Bytes that hold no checkable header are skipped by searching byte by byte for the
///   next offset where a whole intact record starts, and reported as damage.
///
/// Damage with no intact record after it is not passed to `f`; it is reported as the
/// tail (a write torn by a crash).
pub fn scan(
    seg: &SegmentFile,
    file_len: u64,
    mut f: impl FnMut(u64, &record::Record<'_>, bool) -> Result<()>,
) -> Result<ScanOutcome> {
    let io = |e| Error::io(&seg.path, e);
    // A scan reads the file front to back: let the kernel read ahead of it.
    seg.advise(libc::POSIX_FADV_SEQUENTIAL);
    let mut r = WindowReader::new(&seg.file, file_len);
    let mut out = ScanOutcome {
        valid_end: SEG_HEADER_LEN,
        ..Default::default()
    };
    let mut pos = SEG_HEADER_LEN;
    // Damage seen since the last intact record: unreadable stretches, and records with a
    // damaged value (offset, header, key).
    let mut gaps: Vec<BadSpot> = Vec::new();
    let mut held: Vec<(u64, Header, Vec<u8>)> = Vec::new();
    while pos < file_len {
        if file_len - pos < HEADER_LEN as u64 {
            gaps.push(BadSpot {
                offset: pos,
                detail: format!("{} trailing bytes, too short for a record", file_len - pos),
            });
            break;
        }
        let zero_head = r
            .slice(pos, HEADER_LEN)
            .map_err(io)?
            .iter()
            .all(|&b| b == 0);
        if zero_head && zeros_to_end(&mut r, pos, file_len).map_err(io)? {
            // Zeros laid out ahead of the appends: the data ends here (any damage
            // seen since the last intact record is still reported as the tail).
            out.zero_tail = file_len - pos;
            break;
        }
        let hb = r.slice(pos, HEADER_LEN).map_err(io)?;
        let mut why = "unreadable record header".to_string();
        if let Ok(h) = record::decode_header(hb) {
            if pos + h.record_len() <= file_len {
                let b = r.slice(pos, h.record_len() as usize).map_err(io)?;
                match record::decode(b) {
                    Ok(rec) => {
                        // What came before an intact record is damage, not a torn tail.
                        for (off, hh, key) in held.drain(..) {
                            let rec = record::Record {
                                header: hh,
                                key: &key,
                                value: &[],
                            };
                            f(off, &rec, false)?;
                            out.damage.push(BadSpot {
                                offset: off,
                                detail: "record value checksum mismatch".into(),
                            });
                        }
                        out.damage.append(&mut gaps);
                        out.damage.sort_by_key(|d| d.offset);
                        f(pos, &rec, true)?;
                        out.records += 1;
                        pos += h.record_len();
                        out.valid_end = pos;
                        continue;
                    }
                    Err(record::RecordError::DataChecksum) => {
                        let key = b[HEADER_LEN..HEADER_LEN + h.key_len as usize].to_vec();
                        held.push((pos, h, key));
                        pos += h.record_len();
                        continue;
                    }
                    Err(e) => why = e.to_string(),
                }
            } else {
                why = format!(
                    "record of {} bytes runs past the end of the file",
                    h.record_len()
                );
            }
        }
        gaps.push(BadSpot {
            offset: pos,
            detail: why,
        });
        // Resynchronise: the next offset where an intact record starts.
        let mut p = pos + 1;
        loop {
            if p >= file_len {
                pos = file_len;
                break;
            }
            if record_at(&mut r, p, file_len).map_err(io)?.is_some() {
                pos = p;
                break;
            }
            p += 1;
        }
    }
    let first_held = held.first().map(|(off, _, _)| BadSpot {
        offset: *off,
        detail: "record value checksum mismatch".into(),
    });
    out.tail = gaps.into_iter().chain(first_held).min_by_key(|d| d.offset);
    Ok(out)
}

/// Reads the records of `entries` (a listing of the segment: its hint file, or
/// [`scan_entries_mapped`]) that `wanted` asks for, each checked in full, and calls
/// `f(offset, record, true)` for each intact one; one that does not check out (or is not
/// the record listed) is reported as damage. Records not asked for are not read at all,
/// so that compacting a segment with few live records costs the listing and those
/// records, not a read of the whole file.
pub fn scan_listed(
    seg: &SegmentFile,
    file_len: u64,
    entries: &[Entry],
    mut wanted: impl FnMut(&Entry) -> bool,
    mut f: impl FnMut(u64, &record::Record<'_>, bool) -> Result<()>,
) -> Result<ScanOutcome> {
    // Reads in file order with gaps: the kernel's usual readahead (the segment is
    // compaction's victim, so its point readers are about to move on).
    seg.advise(libc::POSIX_FADV_NORMAL);
    let mut out = ScanOutcome {
        valid_end: file_len,
        ..Default::default()
    };
    for e in entries {
        if !wanted(e) {
            continue;
        }
        let (off, len) = (e.off as u64, e.len as u64);
        if off < SEG_HEADER_LEN || off + len > file_len {
            out.damage.push(BadSpot {
                offset: off,
                detail: "listed record lies outside the segment".into(),
            });
            continue;
        }
        let b = seg.read_at(off, e.len as usize)?;
        let detail = match record::decode(&b) {
            Ok(rec)
                if rec.key == e.key.as_slice()
                    && rec.header.kind == e.kind
                    && rec.header.seq == e.seq
                    && rec.header.record_len() == len =>
            {
                f(off, &rec, true)?;
                out.records += 1;
                continue;
            }
            Ok(_) => "record is not the one its listing names".to_string(),
            Err(err) => err.to_string(),
        };
        out.damage.push(BadSpot {
            offset: off,
            detail,
        });
    }
    Ok(out)
}

/// Scans a segment (see [`scan`]) and lists every record whose key is known, in file
/// order: the entries of its hint file.
pub fn scan_entries(seg: &SegmentFile, file_len: u64) -> Result<(Vec<Entry>, ScanOutcome)> {
    let mut entries = Vec::new();
    let outcome = scan(seg, file_len, |off, rec, _intact| {
        entries.push(Entry {
            kind: rec.header.kind,
            seq: rec.header.seq,
            batch_total: rec.header.batch_total,
            off: off as u32,
            len: rec.header.record_len() as u32,
            key: rec.key.to_vec(),
        });
        Ok(())
    })?;
    Ok((entries, outcome))
}

/// Sealing's quick scan: every record's header and key read through the segment's map,
/// its header checksum (which covers the key) checked, its value skipped, so that a
/// segment of large values costs a page or two per record rather than a read of every
/// byte. Values are checked by every read, by `verify`, and by the full scan of a segment
/// that has no hint at open. `None` when the map does not cover the file or a record does
/// not check out: the caller then runs [`scan_entries`], which finds and reports damage.
///
/// The pages the walk touched are unmapped from the process afterwards (they stay in the
/// page cache): sealing walks every segment the store writes, and without this each
/// one's pages stayed in the process's resident set until the kernel reclaimed them —
/// 7.9 GB of a 100-million-file store's 16.5 GB at the time, which a user reading
/// `ps` or a cgroup counting mapped pages takes for the store's memory.
pub fn scan_entries_mapped(seg: &SegmentFile, file_len: u64) -> Option<Vec<Entry>> {
    let entries = walk_mapped(seg, file_len);
    seg.unmap_pages();
    entries
}

fn walk_mapped(seg: &SegmentFile, file_len: u64) -> Option<Vec<Entry>> {
    let b = seg.mapped()?.get(..usize::try_from(file_len).ok()?)?;
    let mut pos = usize::try_from(SEG_HEADER_LEN).ok()?;
    let mut entries = Vec::new();
    // The map is advised random (a point read faults in one page), so a walk over pages
    // that left the page cache would read them one 4 KiB fault at a time: the kernel is
    // asked to read ahead of the walk, a window at a time.
    let mut ahead = 0;
    while pos < b.len() {
        if pos + SCAN_AHEAD / 2 >= ahead {
            seg.will_need(ahead as u64, SCAN_AHEAD as u64);
            ahead += SCAN_AHEAD;
        }
        let rest = &b[pos..];
        let h = record::decode_header(rest).ok()?;
        let len = usize::try_from(h.record_len()).ok()?;
        if rest.len() < len || !record::check_header(rest, &h) {
            return None;
        }
        entries.push(Entry {
            kind: h.kind,
            seq: h.seq,
            batch_total: h.batch_total,
            off: u32::try_from(pos).ok()?,
            len: u32::try_from(len).ok()?,
            key: rest[HEADER_LEN..HEADER_LEN + h.key_len as usize].to_vec(),
        });
        pos += len;
    }
    Some(entries)
}

/// Bytes a walk through a segment's map asks the kernel to read ahead of it
/// ([`scan_entries_mapped`]).
const SCAN_AHEAD: usize = 4 << 20;

/// The first 24 bytes of `key` as three big-endian words, zero-padded: they order keys
/// as their bytes do, up to ties that the whole keys settle.
pub(crate) fn key_prefix(key: &[u8]) -> [u64; 3] {
    let mut p = [0u8; 24];
    let n = key.len().min(24);
    p[..n].copy_from_slice(&key[..n]);
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&p[i * 8..i * 8 + 8]);
        u64::from_be_bytes(w)
    };
    [word(0), word(1), word(2)]
}

mod hint;
pub use hint::{read_hint, read_hint_entries, write_hint, Hint, HintEntries};

#[cfg(test)]
mod tests;
