//! The two small store-wide files: `CAIRN` (what the store is: format version, shard
//! count) and `SEQSTATE` (the durable batch watermark, the aborted batches and the
//! sequence ranges cut off after crashes).

use std::path::Path;

use crate::fsutil::{self, Fs};
use crate::record::{mask, u32_at, u64_at};
use crate::{Error, Result, FORMAT_VERSION};

/// Name of the manifest file in the store directory.
pub const MANIFEST: &str = "CAIRN";
/// Name of the sequence-state file in the store directory.
pub const SEQSTATE: &str = "SEQSTATE";
const MANIFEST_MAGIC: &[u8; 8] = b"CAIRNDB\0";
const SEQ_MAGIC: &[u8; 8] = b"CAIRNSEQ";

fn seal(mut b: Vec<u8>) -> Vec<u8> {
    let crc = mask(crc32c::crc32c(&b));
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

fn unseal<'a>(path: &Path, b: &'a [u8], magic: &[u8; 8], min: usize) -> Result<&'a [u8]> {
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
    if version != FORMAT_VERSION {
        return Err(Error::format(
            path,
            format!("store format version {version}; this build of cairn reads version {FORMAT_VERSION}"),
        ));
    }
    Ok(body)
}

/// Writes the manifest of a new store.
pub fn write_manifest(fs: &Fs, dir: &Path, shards: u32) -> Result<()> {
    let mut b = Vec::with_capacity(24);
    b.extend_from_slice(MANIFEST_MAGIC);
    b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    b.extend_from_slice(&shards.to_le_bytes());
    fs.write_atomic(&dir.join(MANIFEST), &seal(b))
}

/// Reads the manifest; returns the shard count.
pub fn read_manifest(dir: &Path) -> Result<u32> {
    let path = dir.join(MANIFEST);
    let b = fsutil::read_file(&path)?;
    let body = unseal(&path, &b, MANIFEST_MAGIC, 16)?;
    let shards = u32_at(body, 12);
    if shards == 0 || shards > crate::options::MAX_SHARDS {
        return Err(Error::corruption(
            &path,
            format!("invalid shard count {shards}"),
        ));
    }
    Ok(shards)
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
    let body = unseal(&path, &b, SEQ_MAGIC, 24)?;
    let watermark = u64_at(body, 12);
    let n = u32_at(body, 20) as usize;
    let ranges_at = 24 + 8 * n;
    // A file written before void ranges existed ends after the aborted list.
    let m = match body.len().checked_sub(ranges_at) {
        Some(0) => 0,
        Some(rest) if rest >= 4 => u32_at(body, ranges_at) as usize,
        _ => return Err(Error::corruption(&path, "aborted list length mismatch")),
    };
    if m > 0 && body.len() != ranges_at + 4 + 16 * m {
        return Err(Error::corruption(&path, "void range list length mismatch"));
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
    Ok(SeqState {
        watermark,
        aborted,
        void,
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
    fs.write_atomic(&dir.join(SEQSTATE), &seal(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seqstate_round_trips_and_reads_files_without_void_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Fs::default();
        let st = SeqState {
            watermark: 7,
            aborted: vec![9, 12],
            void: vec![(20, 25), (30, 30)],
        };
        write_seqstate(&fs, dir.path(), &st).unwrap();
        assert_eq!(read_seqstate(dir.path()).unwrap(), st);
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
}
