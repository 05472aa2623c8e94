//! The two small store-wide files: `CAIRN` (what the store is: format version, shard
//! count, the regions of numbered rows routed by group) and `SEQSTATE` (the durable
//! batch watermark, the aborted batches and the sequence ranges cut off after crashes).

use std::path::Path;

use crate::fsutil::{self, Fs};
use crate::numbered::Region;
use crate::record::{mask, u32_at, u64_at};
use crate::route::Grouped;
use crate::{Error, Result, FORMAT_VERSION};

/// Name of the manifest file in the store directory.
pub const MANIFEST: &str = "CAIRN";
/// Name of the sequence-state file in the store directory.
pub const SEQSTATE: &str = "SEQSTATE";
const MANIFEST_MAGIC: &[u8; 8] = b"CAIRNDB\0";
const SEQ_MAGIC: &[u8; 8] = b"CAIRNSEQ";
/// Version of a manifest that lists grouped regions (version 1 lists none: every key is
/// routed by its hash). A store's version is its manifest's; the other files' layouts
/// are the same in both, and carry [`FORMAT_VERSION`].
pub const ROUTED_VERSION: u32 = 2;
/// Most grouped regions a manifest may list.
const MAX_GROUPED: u32 = crate::options::MAX_NUMBERED_REGIONS as u32;

fn seal(mut b: Vec<u8>) -> Vec<u8> {
    let crc = mask(crc32c::crc32c(&b));
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

fn unseal<'a>(
    path: &Path,
    b: &'a [u8],
    magic: &[u8; 8],
    min: usize,
    newest: u32,
) -> Result<&'a [u8]> {
    if b.len() < 8 || &b[..8] != magic {
        return Err(Error::format(path, "not a cairn store file (bad magic)"));
    }
    if b.len() < min + 4 {
        return Err(Error::corruption(path, "file too short"));
    }
    let body = &b[..b.len() - 4];
    if mask(crc32c::crc32c(body)) != u32_at(b, b.len() - 4) {
        return Err(Error::corruption(path, "checksum mismatch"));
    }
    let version = u32_at(b, 8);
    if !(FORMAT_VERSION..=newest).contains(&version) {
        let reads = if newest == FORMAT_VERSION {
            format!("version {FORMAT_VERSION}")
        } else {
            format!("versions {FORMAT_VERSION} to {newest}")
        };
        return Err(Error::format(
            path,
            format!("store format version {version}; this build of cairn reads {reads}"),
        ));
    }
    Ok(body)
}

/// What the manifest says of a store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// Number of shards (1..=`MAX_SHARDS`).
    pub shards: u32,
    /// Regions of numbered rows routed to shards by group ([`crate::route`]).
    pub grouped: Vec<Grouped>,
}

/// Writes the manifest of a new store: version 1 if no region is grouped (so that builds
/// from before grouped regions open it), else [`ROUTED_VERSION`].
pub fn write_manifest(fs: &Fs, dir: &Path, m: &Manifest) -> Result<()> {
    let mut b = Vec::with_capacity(24 + 4 * m.grouped.len());
    b.extend_from_slice(MANIFEST_MAGIC);
    let version = if m.grouped.is_empty() {
        FORMAT_VERSION
    } else {
        ROUTED_VERSION
    };
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&m.shards.to_le_bytes());
    if !m.grouped.is_empty() {
        b.extend_from_slice(&(m.grouped.len() as u32).to_le_bytes());
        for g in &m.grouped {
            b.extend_from_slice(&[g.region.ns, g.region.tag, g.shift, 0]);
        }
    }
    fs.write_atomic(&dir.join(MANIFEST), &seal(b))
}

/// Reads the manifest.
pub fn read_manifest(dir: &Path) -> Result<Manifest> {
    let path = dir.join(MANIFEST);
    let b = fsutil::read_file(&path)?;
    let body = unseal(&path, &b, MANIFEST_MAGIC, 16, ROUTED_VERSION)?;
    let shards = u32_at(body, 12);
    if shards == 0 || shards > crate::options::MAX_SHARDS {
        return Err(Error::corruption(
            &path,
            format!("invalid shard count {shards}"),
        ));
    }
    let mut grouped = Vec::new();
    if u32_at(body, 8) == FORMAT_VERSION {
        if body.len() != 16 {
            return Err(Error::corruption(&path, "manifest has trailing bytes"));
        }
    } else {
        if body.len() < 20 {
            return Err(Error::corruption(&path, "manifest too short"));
        }
        let n = u32_at(body, 16);
        if n == 0 || n > MAX_GROUPED || body.len() != 20 + 4 * n as usize {
            return Err(Error::corruption(
                &path,
                format!(
                    "invalid grouped region count {n} for a manifest of {} bytes",
                    b.len()
                ),
            ));
        }
        for e in body[20..].chunks_exact(4) {
            let g = Grouped {
                region: Region {
                    ns: e[0],
                    tag: e[1],
                },
                shift: e[2],
            };
            if g.shift > 63 || e[3] != 0 || grouped.iter().any(|o: &Grouped| o.region == g.region) {
                return Err(Error::corruption(
                    &path,
                    format!("invalid grouped region {e:02x?}"),
                ));
            }
            grouped.push(g);
        }
    }
    Ok(Manifest { shards, grouped })
}

/// Durable facts about sequence numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeqState {
    /// Every batch with a sequence number at or below this was wholly on stable storage
    /// at some point, so a batch record at or below it is never treated as partial.
    pub watermark: u64,
    /// Batches found incomplete after a crash; their records are ignored forever.
    pub aborted: Vec<u64>,
    /// Inclusive ranges of sequence numbers cut off after a crash (every write after
    /// the first one lost, so the store keeps a prefix of the writes), or found missing
    /// after damage; records in them are ignored forever. Ascending, disjoint.
    pub void: Vec<(u64, u64)>,
    /// Segments being dropped whole, together: `(shard, segment, created_seq)`. Open
    /// deletes any of them still there (its header naming that creation number) before
    /// loading anything: a crash after the watermark covering their records was recorded
    /// but before every unlink reached the disk would otherwise bring back some of them
    /// (a partly written one not sealed, or a sealed one whose dead puts a tombstone in
    /// another of them deleted), whose dead puts could then be found without the records
    /// that superseded them.
    pub dropped: Vec<(u32, u32, u64)>,
}

impl SeqState {
    /// Whether records with sequence number `seq` are to be ignored.
    pub fn ignored(&self, seq: u64) -> bool {
        self.aborted.binary_search(&seq).is_ok() || self.in_void(seq).is_some()
    }

    /// The void range holding `seq`, if any.
    pub fn in_void(&self, seq: u64) -> Option<(u64, u64)> {
        let i = self.void.partition_point(|&(_, hi)| hi < seq);
        self.void.get(i).copied().filter(|&(lo, _)| lo <= seq)
    }

    /// The highest sequence number the state mentions.
    pub fn max_seq(&self) -> u64 {
        let a = self.aborted.last().copied().unwrap_or(0);
        let v = self.void.last().map_or(0, |r| r.1);
        self.watermark.max(a).max(v)
    }

    /// Adds a void range (kept sorted; ranges of a new cut lie above the old ones, but
    /// damage gaps may not).
    pub fn add_void(&mut self, lo: u64, hi: u64) {
        let i = self.void.partition_point(|&(l, _)| l < lo);
        self.void.insert(i, (lo, hi));
    }
}

/// Reads `SEQSTATE`; a missing file is the default state.
pub fn read_seqstate(dir: &Path) -> Result<SeqState> {
    let path = dir.join(SEQSTATE);
    if !path.exists() {
        return Ok(SeqState::default());
    }
    let b = fsutil::read_file(&path)?;
    let body = unseal(&path, &b, SEQ_MAGIC, 24, FORMAT_VERSION)?;
    let watermark = u64_at(body, 12);
    let n = u32_at(body, 20) as usize;
    let ranges_at = 24 + 8 * n;
    if body.len() < ranges_at {
        return Err(Error::corruption(&path, "aborted list length mismatch"));
    }
    // Optional trailing lists: a file written before void ranges (or dropped segments)
    // existed ends before them. Each is a `u32` count and its entries.
    let list = |at: usize, entry: usize, what: &str| -> Result<(usize, usize)> {
        if at == body.len() {
            return Ok((0, at));
        }
        if body.len() - at < 4 {
            return Err(Error::corruption(&path, format!("{what} length mismatch")));
        }
        let count = u32_at(body, at) as usize;
        let end = count
            .checked_mul(entry)
            .and_then(|b| b.checked_add(at + 4))
            .filter(|&end| end <= body.len())
            .ok_or_else(|| Error::corruption(&path, format!("{what} length mismatch")))?;
        Ok((count, end))
    };
    let (m, drops_at) = list(ranges_at, 16, "void range list")?;
    let (k, end) = list(drops_at, 16, "dropped segment list")?;
    if end != body.len() {
        return Err(Error::corruption(&path, "trailing bytes"));
    }
    let aborted = (0..n).map(|i| u64_at(body, 24 + 8 * i)).collect();
    let void: Vec<(u64, u64)> = (0..m)
        .map(|i| {
            let at = ranges_at + 4 + 16 * i;
            (u64_at(body, at), u64_at(body, at + 8))
        })
        .collect();
    if void.iter().any(|&(lo, hi)| lo > hi) || void.windows(2).any(|w| w[0].1 >= w[1].0) {
        return Err(Error::corruption(&path, "void ranges out of order"));
    }
    let dropped = (0..k)
        .map(|i| {
            let at = drops_at + 4 + 16 * i;
            (u32_at(body, at), u32_at(body, at + 4), u64_at(body, at + 8))
        })
        .collect();
    Ok(SeqState {
        watermark,
        aborted,
        void,
        dropped,
    })
}

/// Writes `SEQSTATE` atomically.
pub fn write_seqstate(fs: &Fs, dir: &Path, s: &SeqState) -> Result<()> {
    let mut b = Vec::with_capacity(28 + 8 * s.aborted.len());
    b.extend_from_slice(SEQ_MAGIC);
    b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    b.extend_from_slice(&s.watermark.to_le_bytes());
    b.extend_from_slice(&(s.aborted.len() as u32).to_le_bytes());
    for a in &s.aborted {
        b.extend_from_slice(&a.to_le_bytes());
    }
    b.extend_from_slice(&(s.void.len() as u32).to_le_bytes());
    for (lo, hi) in &s.void {
        b.extend_from_slice(&lo.to_le_bytes());
        b.extend_from_slice(&hi.to_le_bytes());
    }
    // Written only when there are some, so that the file is what earlier builds read.
    if !s.dropped.is_empty() {
        b.extend_from_slice(&(s.dropped.len() as u32).to_le_bytes());
        for (shard, seg, created) in &s.dropped {
            b.extend_from_slice(&shard.to_le_bytes());
            b.extend_from_slice(&seg.to_le_bytes());
            b.extend_from_slice(&created.to_le_bytes());
        }
    }
    fs.write_atomic(&dir.join(SEQSTATE), &seal(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seqstate_round_trips_and_reads_files_without_void_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Fs::default();
        let mut st = SeqState {
            watermark: 7,
            aborted: vec![9, 12],
            void: vec![(20, 25), (30, 30)],
            dropped: Vec::new(),
        };
        write_seqstate(&fs, dir.path(), &st).unwrap();
        assert_eq!(read_seqstate(dir.path()).unwrap(), st);
        st.dropped = vec![(3, 17, 40), (0, 2, 1 << 40)];
        write_seqstate(&fs, dir.path(), &st).unwrap();
        assert_eq!(read_seqstate(dir.path()).unwrap(), st);
        // Dropped segments without void ranges.
        st.void.clear();
        write_seqstate(&fs, dir.path(), &st).unwrap();
        assert_eq!(read_seqstate(dir.path()).unwrap(), st);
        // A list longer than the file, or bytes after the last list, is damage.
        let good = std::fs::read(dir.path().join(SEQSTATE)).unwrap();
        let mut body = good[..good.len() - 4].to_vec();
        body.extend_from_slice(&[0, 0]);
        std::fs::write(dir.path().join(SEQSTATE), seal(body)).unwrap();
        assert!(read_seqstate(dir.path()).is_err());
        let mut body = good[..good.len() - 4].to_vec();
        let at = body.len() - 2 * 16 - 4;
        body[at..at + 4].copy_from_slice(&3u32.to_le_bytes());
        std::fs::write(dir.path().join(SEQSTATE), seal(body)).unwrap();
        assert!(read_seqstate(dir.path()).is_err());
        // A file that ends after the aborted list (no void section).
        let mut b = Vec::new();
        b.extend_from_slice(SEQ_MAGIC);
        b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        b.extend_from_slice(&7u64.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&9u64.to_le_bytes());
        std::fs::write(dir.path().join(SEQSTATE), seal(b)).unwrap();
        let old = read_seqstate(dir.path()).unwrap();
        assert_eq!((old.watermark, old.aborted, old.void), (7, vec![9], vec![]));
    }

    #[test]
    fn manifests_round_trip_with_and_without_grouped_regions() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Fs::default();
        let plain = Manifest {
            shards: 16,
            grouped: Vec::new(),
        };
        write_manifest(&fs, dir.path(), &plain).unwrap();
        let b = std::fs::read(dir.path().join(MANIFEST)).unwrap();
        assert_eq!(
            (b.len(), u32_at(&b, 8)),
            (20, FORMAT_VERSION),
            "version 1 as before"
        );
        assert_eq!(read_manifest(dir.path()).unwrap(), plain);
        let routed = Manifest {
            shards: 4,
            grouped: vec![
                Grouped {
                    region: Region { ns: 2, tag: b'I' },
                    shift: 6,
                },
                Grouped {
                    region: Region { ns: 9, tag: b'n' },
                    shift: 0,
                },
            ],
        };
        write_manifest(&fs, dir.path(), &routed).unwrap();
        let b = std::fs::read(dir.path().join(MANIFEST)).unwrap();
        assert_eq!((b.len(), u32_at(&b, 8)), (32, ROUTED_VERSION));
        assert_eq!(read_manifest(dir.path()).unwrap(), routed);
    }

    #[test]
    fn damaged_or_newer_manifests_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let write = |version: u32, tail: &[u8]| {
            let mut b = Vec::new();
            b.extend_from_slice(MANIFEST_MAGIC);
            b.extend_from_slice(&version.to_le_bytes());
            b.extend_from_slice(&4u32.to_le_bytes());
            b.extend_from_slice(tail);
            std::fs::write(dir.path().join(MANIFEST), seal(b)).unwrap();
            read_manifest(dir.path())
        };
        let entry = |n: u32, e: &[[u8; 4]]| {
            let mut t = n.to_le_bytes().to_vec();
            e.iter().for_each(|e| t.extend_from_slice(e));
            t
        };
        assert!(write(ROUTED_VERSION, &entry(1, &[[2, b'I', 6, 0]])).is_ok());
        assert!(matches!(write(3, &[]), Err(Error::Format { .. })));
        assert!(matches!(write(0, &[]), Err(Error::Format { .. })));
        for tail in [
            vec![0u8],
            entry(0, &[]),
            entry(2, &[[2, b'I', 6, 0]]),
            entry(1, &[[2, b'I', 64, 0]]),
            entry(1, &[[2, b'I', 6, 1]]),
            entry(2, &[[2, b'I', 6, 0], [2, b'I', 0, 0]]),
            entry(1, &[[2, b'I', 6, 0], [3, b'I', 6, 0]]),
        ] {
            let routed = write(ROUTED_VERSION, &tail);
            assert!(
                matches!(routed, Err(Error::Corruption { .. })),
                "{tail:?}: {routed:?}"
            );
        }
        assert!(matches!(
            write(FORMAT_VERSION, &[0]),
            Err(Error::Corruption { .. })
        ));
        assert!(write(FORMAT_VERSION, &[]).is_ok());
    }
}
