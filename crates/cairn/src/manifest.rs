//! The two small store-wide files: `CAIRN` (what the store is: format version, shard
//! count) and `SEQSTATE` (the durable batch watermark and the aborted batches).

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
    if body.len() != 24 + 8 * n {
        return Err(Error::corruption(&path, "aborted list length mismatch"));
    }
    let aborted = (0..n).map(|i| u64_at(body, 24 + 8 * i)).collect();
    Ok(SeqState { watermark, aborted })
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
    fs.write_atomic(&dir.join(SEQSTATE), &seal(b))
}
