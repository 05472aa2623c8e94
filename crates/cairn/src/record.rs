//! One log record: the unit every segment is made of (see FORMAT.md, "Records").
//!
//! ```text
//! 0   u32  data_crc     masked crc32c(key ‖ value)
//! 4   u64  seq          global sequence number (a batch shares one)
//! 12  u32  key_len | kind << 24
//! 16  u32  val_len
//! 20  u32  batch_total  records in the batch this record belongs to (1 = none)
//! 24  u32  header_crc   masked crc32c(bytes 0..24 ‖ key)
//! 28  key, then value
//! ```

use crate::{MAX_KEY_LEN, MAX_VALUE_LEN};

/// Largest key stored in a record: a user key plus room for its namespace prefix.
pub const MAX_RECORD_KEY: usize = MAX_KEY_LEN + 256;

/// Bytes of the fixed record header.
pub const HEADER_LEN: usize = 28;

/// What a record does to its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Sets the key to the value.
    Put = 1,
    /// Deletes the key (a tombstone; the value is empty).
    Delete = 2,
}

impl Kind {
    /// The kind a byte on disk names (`Put` 1, `Delete` 2), if any.
    pub fn from_byte(b: u8) -> Option<Kind> {
        match b {
            1 => Some(Kind::Put),
            2 => Some(Kind::Delete),
            _ => None,
        }
    }
}

const MASK_DELTA: u32 = 0xa282_ead8;

/// Masks a CRC so that a CRC stored inside checksummed data does not checksum itself
/// (the LevelDB convention).
pub fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// The masked CRC of a record's key and value.
pub fn data_crc(key: &[u8], value: &[u8]) -> u32 {
    mask(crc32c::crc32c_append(crc32c::crc32c(key), value))
}

/// The decoded fixed header of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Masked CRC of key and value.
    pub data_crc: u32,
    /// Sequence number.
    pub seq: u64,
    /// Put or delete.
    pub kind: Kind,
    /// Key length.
    pub key_len: u32,
    /// Value length (0 for deletes).
    pub val_len: u32,
    /// Number of records of the batch this record belongs to (1 for a single write).
    pub batch_total: u32,
}

impl Header {
    /// Total bytes of the record, header included.
    pub fn record_len(&self) -> u64 {
        HEADER_LEN as u64 + self.key_len as u64 + self.val_len as u64
    }
}

/// Why a header failed to decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// The header checksum does not match.
    Checksum,
    /// Checksum fine but a field is out of range (an incompatible writer).
    Invalid,
}

/// Appends an encoded record to `buf`; returns its length. `dcrc` must be
/// `data_crc(key, value)` (computed by the caller, possibly outside a lock).
pub fn encode(
    buf: &mut Vec<u8>,
    kind: Kind,
    seq: u64,
    batch_total: u32,
    key: &[u8],
    value: &[u8],
    dcrc: u32,
) -> usize {
    let start = buf.len();
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&dcrc.to_le_bytes());
    h[4..12].copy_from_slice(&seq.to_le_bytes());
    h[12..16].copy_from_slice(&((key.len() as u32) | ((kind as u32) << 24)).to_le_bytes());
    h[16..20].copy_from_slice(&(value.len() as u32).to_le_bytes());
    h[20..24].copy_from_slice(&batch_total.to_le_bytes());
    let hcrc = header_crc(&h[0..24], key);
    h[24..28].copy_from_slice(&hcrc.to_le_bytes());
    buf.extend_from_slice(&h);
    buf.extend_from_slice(key);
    buf.extend_from_slice(value);
    buf.len() - start
}

/// The masked CRC of a header's first 24 bytes and the key: it vouches for the key even
/// when the value is damaged.
fn header_crc(fields: &[u8], key: &[u8]) -> u32 {
    mask(crc32c::crc32c_append(crc32c::crc32c(fields), key))
}

/// The little-endian `u32` at `b[at..at + 4]` (every on-disk integer is little-endian).
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The little-endian `u64` at `b[at..at + 8]`.
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

/// Decodes the fields of a record header from the first [`HEADER_LEN`] bytes of `b` and
/// checks their ranges. The header checksum covers the key too, so it is checked by
/// [`check_header`] once the key bytes are at hand.
pub fn decode_header(b: &[u8]) -> Result<Header, HeaderError> {
    if b.len() < HEADER_LEN {
        return Err(HeaderError::Invalid);
    }
    let kl = u32_at(b, 12);
    let Some(kind) = Kind::from_byte((kl >> 24) as u8) else {
        return Err(HeaderError::Invalid);
    };
    let key_len = kl & 0x00ff_ffff;
    let val_len = u32_at(b, 16);
    let batch_total = u32_at(b, 20);
    if key_len as usize > MAX_RECORD_KEY
        || val_len as usize > MAX_VALUE_LEN
        || batch_total == 0
        || (kind == Kind::Delete && val_len != 0)
    {
        return Err(HeaderError::Invalid);
    }
    Ok(Header {
        data_crc: u32_at(b, 0),
        seq: u64_at(b, 4),
        kind,
        key_len,
        val_len,
        batch_total,
    })
}

/// Checks the header checksum of a record given its header and key bytes (`b` holds at
/// least the header and the key).
pub fn check_header(b: &[u8], h: &Header) -> bool {
    let end = HEADER_LEN + h.key_len as usize;
    b.len() >= end && header_crc(&b[0..24], &b[HEADER_LEN..end]) == u32_at(b, 24)
}

/// A whole record, checked: header, both checksums and lengths.
#[derive(Debug)]
pub struct Record<'a> {
    /// The header.
    pub header: Header,
    /// The key bytes.
    pub key: &'a [u8],
    /// The value bytes.
    pub value: &'a [u8],
}

/// Why a whole record failed to decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// The header is damaged.
    Header(HeaderError),
    /// The buffer is shorter than the header says.
    Truncated,
    /// The header and key are intact but the value's checksum does not match.
    DataChecksum,
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::Header(HeaderError::Checksum) => {
                write!(f, "record header checksum mismatch")
            }
            RecordError::Header(HeaderError::Invalid) => {
                write!(f, "record header has invalid fields")
            }
            RecordError::Truncated => write!(f, "record truncated"),
            RecordError::DataChecksum => write!(f, "record value checksum mismatch"),
        }
    }
}

/// Decodes a complete record from `b` (which must hold exactly the record or more).
pub fn decode(b: &[u8]) -> Result<Record<'_>, RecordError> {
    let header = decode_header(b).map_err(RecordError::Header)?;
    let end = header.record_len() as usize;
    if b.len() < end {
        return Err(RecordError::Truncated);
    }
    if !check_header(b, &header) {
        return Err(RecordError::Header(HeaderError::Checksum));
    }
    let key = &b[HEADER_LEN..HEADER_LEN + header.key_len as usize];
    let value = &b[HEADER_LEN + header.key_len as usize..end];
    if data_crc(key, value) != header.data_crc {
        return Err(RecordError::DataChecksum);
    }
    Ok(Record { header, key, value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let mut buf = Vec::new();
        let n = encode(
            &mut buf,
            Kind::Put,
            7,
            3,
            b"key",
            b"value",
            data_crc(b"key", b"value"),
        );
        assert_eq!(n, HEADER_LEN + 8);
        let r = decode(&buf).unwrap();
        assert_eq!(
            (r.key, r.value, r.header.seq, r.header.batch_total),
            (&b"key"[..], &b"value"[..], 7, 3)
        );
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x10;
            assert!(decode(&bad).is_err(), "flip at {i} undetected");
        }
        assert_eq!(
            decode(&buf[..buf.len() - 1]).unwrap_err(),
            RecordError::Truncated
        );
    }
}
