//! The rows of the file store in its keyspace ([`crate::KEYSPACE`]): their keys and the
//! encoding of their values (see FORMAT.md, "File store").

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cairn::{Error, Result};

use crate::FileStat;

/// The little-endian `u32` at `b[at..at + 4]` (callers check the length first).
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The little-endian `u64` at `b[at..at + 8]` (callers check the length first).
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

/// Settings row (`'s'`): the store's chunk size.
pub(crate) const TAG_SETTINGS: u8 = b's';
/// Meta row of a file (`'m' ‖ key`).
pub(crate) const TAG_META: u8 = b'm';
/// Chunk row (`'c' ‖ version ‖ index`).
pub(crate) const TAG_CHUNK: u8 = b'c';
/// Intent row of a version being written (`'w' ‖ version`).
pub(crate) const TAG_INTENT: u8 = b'w';
/// Garbage row of a version whose chunks are to be reclaimed (`'g' ‖ version`).
pub(crate) const TAG_GC: u8 = b'g';

/// Version of the encoding of the settings and meta rows.
const ROW_VERSION: u8 = 1;
/// Length of an encoded meta row.
pub(crate) const META_LEN: usize = 69;
/// Length of an encoded settings row.
const SETTINGS_LEN: usize = 5;

fn corrupt(what: &str, detail: impl std::fmt::Display) -> Error {
    Error::corruption(format!("<file store {what}>"), detail.to_string())
}

/// `tag ‖ rest`: a key within the file namespace.
fn tagged(tag: u8, rest: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(rest.len() + 1);
    k.push(tag);
    k.extend_from_slice(rest);
    k
}

/// Key of the settings row.
pub(crate) fn settings_key() -> Vec<u8> {
    vec![TAG_SETTINGS]
}

/// Key of the meta row of file `key`.
pub(crate) fn meta_key(key: &[u8]) -> Vec<u8> {
    tagged(TAG_META, key)
}

/// Key of chunk `idx` of version `vid`.
pub(crate) fn chunk_key(vid: u128, idx: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(21);
    k.push(TAG_CHUNK);
    k.extend_from_slice(&vid.to_be_bytes());
    k.extend_from_slice(&idx.to_be_bytes());
    k
}

/// Bytes a chunk record takes on disk beside the chunk's bytes: the record header, the
/// keyspace byte and the 21-byte chunk key.
pub(crate) const CHUNK_RECORD_OVERHEAD: u64 = cairn::RECORD_HEADER_LEN as u64 + 1 + 21;

/// Key of the intent row of version `vid`.
pub(crate) fn intent_key(vid: u128) -> Vec<u8> {
    tagged(TAG_INTENT, &vid.to_be_bytes())
}

/// Key of the garbage row of version `vid`.
pub(crate) fn gc_key(vid: u128) -> Vec<u8> {
    tagged(TAG_GC, &vid.to_be_bytes())
}

/// The version named by an intent or garbage row key (tag byte included).
pub(crate) fn vid_of_row(key: &[u8]) -> Result<u128> {
    let b: [u8; 16] = key
        .get(1..)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| {
            corrupt(
                "row",
                format!("bad garbage row key {:?}", key.escape_ascii().to_string()),
            )
        })?;
    Ok(u128::from_be_bytes(b))
}

/// Settings row value: version, chunk size.
pub(crate) fn encode_settings(chunk_size: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(SETTINGS_LEN);
    v.push(ROW_VERSION);
    v.extend_from_slice(&chunk_size.to_le_bytes());
    v
}

/// The chunk size recorded in a settings row.
pub(crate) fn decode_settings(v: &[u8]) -> Result<u32> {
    if v.len() != SETTINGS_LEN || v[0] != ROW_VERSION {
        return Err(corrupt(
            "settings",
            format!("settings row of {} bytes, version {:?}", v.len(), v.first()),
        ));
    }
    Ok(u32_at(v, 1))
}

/// Meta row value: version, vid, size, chunk size, BLAKE3 hash, creation time.
pub(crate) fn encode_meta(s: &FileStat) -> Vec<u8> {
    let mut v = Vec::with_capacity(META_LEN);
    v.push(ROW_VERSION);
    v.extend_from_slice(&s.version.to_le_bytes());
    v.extend_from_slice(&s.size.to_le_bytes());
    v.extend_from_slice(&(s.chunk_size as u32).to_le_bytes());
    v.extend_from_slice(&s.hash);
    v.extend_from_slice(&nanos_since_epoch(s.created).to_le_bytes());
    debug_assert_eq!(v.len(), META_LEN);
    v
}

/// Decodes a meta row value.
pub(crate) fn decode_meta(v: &[u8]) -> Result<FileStat> {
    if v.len() != META_LEN || v[0] != ROW_VERSION {
        return Err(corrupt(
            "meta",
            format!("meta row of {} bytes, version {:?}", v.len(), v.first()),
        ));
    }
    let mut version = [0u8; 16];
    version.copy_from_slice(&v[1..17]);
    let version = u128::from_le_bytes(version);
    let size = u64_at(v, 17);
    let chunk_size = u32_at(v, 25) as u64;
    if chunk_size == 0 {
        return Err(corrupt("meta", "meta row with chunk size 0"));
    }
    let mut hash = [0u8; 32];
    hash.copy_from_slice(&v[29..61]);
    let created = UNIX_EPOCH + Duration::from_nanos(u64_at(v, 61));
    Ok(FileStat {
        size,
        chunks: size.div_ceil(chunk_size),
        chunk_size,
        hash,
        created,
        version,
    })
}

/// Intent row value: the bound on the chunk indexes the version may have written, the
/// time the write started, and the file's key (empty for `put_content`).
pub(crate) fn encode_intent(bound: u64, started: SystemTime, key: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + key.len());
    v.extend_from_slice(&bound.to_le_bytes());
    v.extend_from_slice(&nanos_since_epoch(started).to_le_bytes());
    v.extend_from_slice(key);
    v
}

/// Garbage row value: the number of chunks of the version.
pub(crate) fn encode_gc(chunks: u64) -> Vec<u8> {
    chunks.to_le_bytes().to_vec()
}

/// Chunk-index bound of an intent or garbage row value (its first 8 bytes).
pub(crate) fn decode_bound(v: &[u8]) -> Result<u64> {
    if v.len() < 8 {
        return Err(corrupt(
            "row",
            format!("garbage row value of {} bytes", v.len()),
        ));
    }
    Ok(u64_at(v, 0))
}

/// Nanoseconds since the Unix epoch (0 before it, saturating far after it).
pub(crate) fn nanos_since_epoch(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos().min(u64::MAX as u128) as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trip() {
        let s = FileStat {
            size: 300_000,
            chunks: 3,
            chunk_size: 128 << 10,
            hash: [7; 32],
            created: UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789),
            version: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
        };
        let v = encode_meta(&s);
        assert_eq!(v.len(), META_LEN);
        assert_eq!(decode_meta(&v).unwrap(), s);
        assert!(decode_meta(&v[1..]).is_err());
    }

    #[test]
    fn keys_sort_by_version_then_index() {
        assert!(chunk_key(1, 2) < chunk_key(1, 3));
        assert!(chunk_key(1, u32::MAX) < chunk_key(2, 0));
        assert_eq!(vid_of_row(&gc_key(99)).unwrap(), 99);
        assert_eq!(vid_of_row(&intent_key(5)).unwrap(), 5);
        assert_eq!(decode_settings(&encode_settings(4096)).unwrap(), 4096);
        assert_eq!(
            decode_bound(&encode_intent(64, UNIX_EPOCH, b"k")).unwrap(),
            64
        );
        assert_eq!(decode_bound(&encode_gc(3)).unwrap(), 3);
    }
}
