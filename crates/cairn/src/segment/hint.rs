//! Hint files: a sealed segment's record list (metadata and keys, no values), written
//! in key order, that open reads instead of the segment (see FORMAT.md).
//!
//! A hint is checked whole before anything in it is used ([`Hint::open`]: checksum,
//! header, every entry's bounds, in one pass over its bytes); its entries are then
//! walked from the checked map ([`Hint::entries`]) as often as the reader needs —
//! open merges a shard's hints straight from their maps.

use std::fs::File;
use std::path::Path;

use super::{key_prefix, Entry, SEG_HEADER_LEN};
use crate::fsutil::Fs;
use crate::record::{self, u32_at, u64_at, Kind};
use crate::{Error, Result, FORMAT_VERSION};

/// Magic bytes at the start of every hint file.
pub const HINT_MAGIC: &[u8; 8] = b"CAIRNHNT";
const HINT_HEADER_LEN: usize = 32;
const HINT_ENTRY_FIXED: usize = 25;
/// The checksum runs this far ahead of the entry walk: the walk then reads bytes the
/// checksum has just brought into the cache, one pass over the file instead of two.
const CRC_STEP: usize = 256 << 10;

/// Writes the hint file of a segment: every record's metadata and key, checksummed, in
/// key order (a key's records newest first), so that open merges each segment's hint as
/// one sorted run instead of sorting every record of a shard. Written to a temporary
/// file, synced and renamed into place.
pub fn write_hint(fs: &Fs, dir: &Path, id: u32, data_len: u64, entries: &[Entry]) -> Result<u64> {
    // Sorted by the keys' first 24 bytes held inline (most comparisons end there without
    // following a key's pointer), then the keys, then newest first.
    let mut order: Vec<([u64; 3], u32)> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (key_prefix(&e.key), i as u32))
        .collect();
    order.sort_unstable_by(|(pa, a), (pb, b)| {
        let (a, b) = (&entries[*a as usize], &entries[*b as usize]);
        pa.cmp(pb)
            .then_with(|| a.key.cmp(&b.key))
            .then(b.seq.cmp(&a.seq))
    });
    let mut b = Vec::with_capacity(
        HINT_HEADER_LEN
            + entries
                .iter()
                .map(|e| HINT_ENTRY_FIXED + e.key.len())
                .sum::<usize>()
            + 4,
    );
    b.extend_from_slice(HINT_MAGIC);
    b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    b.extend_from_slice(&id.to_le_bytes());
    b.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    b.extend_from_slice(&data_len.to_le_bytes());
    for e in order.iter().map(|&(_, i)| &entries[i as usize]) {
        put_entry(&mut b, e);
    }
    let crc = record::mask(crc32c::crc32c(&b));
    b.extend_from_slice(&crc.to_le_bytes());
    fs.write_atomic(&super::hint_path(dir, id), &b)?;
    Ok(b.len() as u64)
}

/// Appends `e` to a hint file's bytes `b`, as FORMAT.md lays an entry out.
pub(super) fn put_entry(b: &mut Vec<u8>, e: &Entry) {
    b.push(e.kind as u8);
    b.extend_from_slice(&e.seq.to_le_bytes());
    b.extend_from_slice(&e.batch_total.to_le_bytes());
    b.extend_from_slice(&e.off.to_le_bytes());
    b.extend_from_slice(&e.len.to_le_bytes());
    b.extend_from_slice(&(e.key.len() as u32).to_le_bytes());
    b.extend_from_slice(&e.key);
}

/// Reads and checks a hint file; returns its entries in file order and the segment data
/// length it covers.
pub fn read_hint_entries(path: &Path, id: u32) -> Result<(Vec<Entry>, u64)> {
    let hint = Hint::open(path, id)?;
    let mut entries: Vec<Entry> = hint
        .entries()
        .map(|e| Entry {
            kind: e.kind,
            seq: e.seq,
            batch_total: e.batch_total,
            off: e.off,
            len: e.len,
            key: e.key.to_vec(),
        })
        .collect();
    // In file order, as a scan lists them (hints are written in key order).
    entries.sort_unstable_by_key(|e| e.off);
    Ok((entries, hint.data_len()))
}

/// Reads and checks a hint file, calling `f` for each entry (kind, sequence number,
/// batch size, offset, length, key borrowed from the file's map) once the whole file
/// is checked. Returns the segment data length the hint covers and the hint file's size.
pub fn read_hint(
    path: &Path,
    id: u32,
    mut f: impl FnMut(Kind, u64, u32, u32, u32, &[u8]),
) -> Result<(u64, u64)> {
    let hint = Hint::open(path, id)?;
    for e in hint.entries() {
        f(e.kind, e.seq, e.batch_total, e.off, e.len, e.key);
    }
    Ok((hint.data_len(), hint.size()))
}

/// A hint file, mapped and checked whole: its entries are walked from the map without
/// further checks.
pub struct Hint {
    map: memmap2::Mmap,
    id: u32,
    data_len: u64,
    count: u64,
    max_seq: u64,
    /// The entry of the highest offset: (offset, number).
    last: Option<(u64, u64)>,
    in_order: bool,
    /// The lowest record offset and the highest record end listed, if any.
    span: Option<(u64, u64)>,
}

/// One entry of a hint: a record's metadata and its key, borrowed from the hint's map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HintEntry<'a> {
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
    pub key: &'a [u8],
}

/// The entries of a checked [`Hint`], in file order (key order for hints written by
/// this version; see [`Hint::in_order`]).
#[derive(Clone)]
pub struct HintEntries<'a> {
    body: &'a [u8],
    pos: usize,
}

impl Hint {
    /// Maps the hint file of segment `id` at `path` and checks it whole, in one pass:
    /// its checksum, header, and every entry's kind and bounds. A damaged file is
    /// [`Error::Corruption`], another format version [`Error::Format`].
    pub fn open(path: &Path, id: u32) -> Result<Hint> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        let bad = |d: &str| Err(Error::corruption(path, d.to_string()));
        if len < (HINT_HEADER_LEN + 4) as u64 {
            return bad("hint file too short");
        }
        // SAFETY: hint files are written once, to a temporary name, and renamed into
        // place; nothing writes to them afterwards. Every access is bounds-checked.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        let _ = map.advise(memmap2::Advice::Sequential);
        let b: &[u8] = &map;
        if b.len() < HINT_HEADER_LEN + 4 {
            return bad("hint file too short");
        }
        if &b[0..8] != HINT_MAGIC {
            return bad("bad hint magic");
        }
        let body = &b[..b.len() - 4];
        let walk = Walk::over(body);
        // A checksum mismatch is the verdict on a damaged file, whatever the walk met.
        if record::mask(walk.crc) != u32_at(b, b.len() - 4) {
            return bad("hint checksum mismatch");
        }
        if u32_at(b, 8) != FORMAT_VERSION {
            return Err(Error::format(
                path,
                format!("hint format version {}", u32_at(b, 8)),
            ));
        }
        if u32_at(b, 12) != id {
            return bad("hint names another segment");
        }
        if let Some(e) = walk.error {
            return bad(e);
        }
        let count = u64_at(b, 16);
        if walk.count != count {
            return bad("hint entry count mismatch");
        }
        Ok(Hint {
            data_len: u64_at(b, 24),
            map,
            id,
            count,
            max_seq: walk.max_seq,
            last: walk.last,
            in_order: walk.in_order,
            span: walk.span,
        })
    }

    /// The segment this hint describes.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The segment data length the hint covers.
    pub fn data_len(&self) -> u64 {
        self.data_len
    }

    /// The hint file's size in bytes.
    pub fn size(&self) -> u64 {
        self.map.len() as u64
    }

    /// How many entries it lists.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The highest sequence number it lists (0 if none).
    pub fn max_seq(&self) -> u64 {
        self.max_seq
    }

    /// The offset and number of the record it lists last in the segment (the highest
    /// offset), if it lists any.
    pub fn last(&self) -> Option<(u64, u64)> {
        self.last
    }

    /// Whether its entries are in key order, a key's newest first, each strictly after
    /// the one before (as this version writes them): the entries are then one sorted run.
    pub fn in_order(&self) -> bool {
        self.in_order
    }

    /// Whether every record it lists lies within a segment of `seg_len` bytes, after
    /// its header.
    pub fn within(&self, seg_len: u64) -> bool {
        self.span
            .is_none_or(|(lo, hi)| lo >= SEG_HEADER_LEN && hi <= seg_len)
    }

    /// Its entries, in file order.
    pub fn entries(&self) -> HintEntries<'_> {
        HintEntries {
            body: &self.map[..self.map.len() - 4],
            pos: HINT_HEADER_LEN,
        }
    }
}

/// What one pass over a hint's body found.
struct Walk {
    crc: u32,
    error: Option<&'static str>,
    count: u64,
    max_seq: u64,
    /// The entry of the highest offset: (offset, number).
    last: Option<(u64, u64)>,
    in_order: bool,
    span: Option<(u64, u64)>,
}

impl Walk {
    /// Walks `body` (the hint file but its checksum) entry by entry, the checksum kept
    /// [`CRC_STEP`] bytes ahead; after a malformed entry, only the checksum goes on.
    fn over(body: &[u8]) -> Walk {
        let mut w = Walk {
            crc: 0,
            error: None,
            count: 0,
            max_seq: 0,
            last: None,
            in_order: true,
            span: None,
        };
        let mut crc_to = 0;
        let mut crc_upto = |w: &mut Walk, to: usize| {
            if to > crc_to {
                let to = to.max(crc_to + CRC_STEP).min(body.len());
                w.crc = crc32c::crc32c_append(w.crc, &body[crc_to..to]);
                crc_to = to;
            }
        };
        let mut prev: Option<HintEntry<'_>> = None;
        let mut pos = HINT_HEADER_LEN;
        while pos < body.len() {
            // The checksum first covers the entry's fixed part (its key length), then
            // its key.
            crc_upto(&mut w, pos + HINT_ENTRY_FIXED);
            let (e, end) = match entry_at(body, pos) {
                Ok(found) => found,
                Err(error) => {
                    w.error = Some(error);
                    break;
                }
            };
            crc_upto(&mut w, end);
            let (off, rec_end) = (u64::from(e.off), u64::from(e.off) + u64::from(e.len));
            w.max_seq = w.max_seq.max(e.seq);
            if w.last.is_none_or(|(o, _)| o < off) {
                w.last = Some((off, e.seq));
            }
            w.span = Some(
                w.span
                    .map_or((off, rec_end), |(lo, hi)| (lo.min(off), hi.max(rec_end))),
            );
            if let Some(p) = prev {
                w.in_order &= p.key < e.key || p.key == e.key && p.seq > e.seq;
            }
            prev = Some(e);
            w.count += 1;
            pos = end;
        }
        crc_upto(&mut w, body.len());
        w
    }
}

/// The entry at `pos` in a hint's `body` and where the next one starts, or what is
/// wrong with it (the one decoding of the layout [`put_entry`] writes).
fn entry_at(body: &[u8], pos: usize) -> std::result::Result<(HintEntry<'_>, usize), &'static str> {
    let fixed = body
        .get(pos..pos + HINT_ENTRY_FIXED)
        .ok_or("hint entry truncated")?;
    let kind = Kind::from_byte(fixed[0]).ok_or("hint entry invalid")?;
    let end = pos + HINT_ENTRY_FIXED + u32_at(fixed, 21) as usize;
    let key = body
        .get(pos + HINT_ENTRY_FIXED..end)
        .ok_or("hint entry invalid")?;
    let e = HintEntry {
        kind,
        seq: u64_at(fixed, 1),
        batch_total: u32_at(fixed, 9),
        off: u32_at(fixed, 13),
        len: u32_at(fixed, 17),
        key,
    };
    Ok((e, end))
}

impl<'a> Iterator for HintEntries<'a> {
    type Item = HintEntry<'a>;

    fn next(&mut self) -> Option<HintEntry<'a>> {
        // The hint was checked whole when opened: every entry decodes.
        let (e, end) = entry_at(self.body, self.pos).ok()?;
        self.pos = end;
        Some(e)
    }
}
