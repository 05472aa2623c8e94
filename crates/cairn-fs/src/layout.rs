//! Row keys and encodings of the file system (namespace `NS_FS`; see FORMAT.md).

/// Key tag of the inode-number lease row.
pub(crate) const TAG_LEASE: u8 = b'N';
/// Key tag of a directory entry: `D parent:u64 partition:u32 name`.
pub(crate) const TAG_DENTRY: u8 = b'D';
/// Key tag of an inode row: `I ino:u64`.
pub(crate) const TAG_INODE: u8 = b'I';
/// Key tag of a data chunk: `C ino:u64 index:u64`.
pub(crate) const TAG_CHUNK: u8 = b'C';
/// Key tag of an extended attribute: `X ino:u64 name`.
pub(crate) const TAG_XATTR: u8 = b'X';
/// Key tag of an orphan (unlinked while open): `O ino:u64`.
pub(crate) const TAG_ORPHAN: u8 = b'O';

/// Inode flag: the file's data is in chunk rows, not inline.
pub(crate) const FLAG_CHUNKED: u8 = 1;
/// Inode flag: the inode has (or had) extended attribute rows.
pub(crate) const FLAG_XATTRS: u8 = 2;

/// Bytes of an encoded inode before its inline data.
pub(crate) const INODE_HEADER: usize = 1 + 4 * 5 + 8 * 5;

pub(crate) fn lease_key() -> Vec<u8> {
    vec![TAG_LEASE]
}

/// Prefix of the entries of directory `parent` in partition `part`.
pub(crate) fn dentry_prefix(parent: u64, part: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(13 + 32);
    k.push(TAG_DENTRY);
    k.extend_from_slice(&parent.to_be_bytes());
    k.extend_from_slice(&part.to_be_bytes());
    k
}

pub(crate) fn dentry_key(parent: u64, part: u32, name: &[u8]) -> Vec<u8> {
    let mut k = dentry_prefix(parent, part);
    k.extend_from_slice(name);
    k
}

pub(crate) fn inode_key(ino: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(TAG_INODE);
    k.extend_from_slice(&ino.to_be_bytes());
    k
}

pub(crate) fn ino_prefix(tag: u8, ino: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(17);
    k.push(tag);
    k.extend_from_slice(&ino.to_be_bytes());
    k
}

pub(crate) fn chunk_key(ino: u64, idx: u64) -> Vec<u8> {
    let mut k = ino_prefix(TAG_CHUNK, ino);
    k.extend_from_slice(&idx.to_be_bytes());
    k
}

pub(crate) fn xattr_key(ino: u64, name: &[u8]) -> Vec<u8> {
    let mut k = ino_prefix(TAG_XATTR, ino);
    k.extend_from_slice(name);
    k
}

pub(crate) fn orphan_key(ino: u64) -> Vec<u8> {
    ino_prefix(TAG_ORPHAN, ino)
}

/// Value of a directory entry: the child's inode number and its file type bits.
pub(crate) fn encode_dentry(ino: u64, mode: u32) -> [u8; 12] {
    let mut v = [0u8; 12];
    v[..8].copy_from_slice(&ino.to_le_bytes());
    v[8..].copy_from_slice(&(mode & libc::S_IFMT).to_le_bytes());
    v
}

pub(crate) fn decode_dentry(v: &[u8]) -> Option<(u64, u32)> {
    if v.len() < 12 {
        return None;
    }
    Some((
        u64::from_le_bytes(v[..8].try_into().ok()?),
        u32::from_le_bytes(v[8..12].try_into().ok()?),
    ))
}

/// The inode-number lease of a lease row's value (a little-endian `u64`); `None` for a
/// value of any other length (a damaged row).
pub(crate) fn decode_lease(v: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(v.try_into().ok()?))
}

/// The big-endian `u64` that a key suffix is made of (the inode of an orphan row's key
/// without its tag, the index of a chunk row's key without its inode prefix); `None`
/// for a suffix of any other length (a damaged row).
pub(crate) fn decode_be_u64(k: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(k.try_into().ok()?))
}

/// The big-endian `u64` at the start of a key suffix and the rest of it (the inode of
/// a chunk or attribute row's key without its tag, then the index or name); `None` for
/// a suffix shorter than 8 bytes (a damaged row).
pub(crate) fn split_be_u64(k: &[u8]) -> Option<(u64, &[u8])> {
    let (n, rest) = k.split_first_chunk::<8>()?;
    Some((u64::from_be_bytes(*n), rest))
}

/// The parent, partition and name of a directory entry's key without its tag; `None`
/// for one shorter than its parent and partition (a damaged row).
pub(crate) fn split_dentry_suffix(k: &[u8]) -> Option<(u64, u32, &[u8])> {
    let (parent, rest) = split_be_u64(k)?;
    let (part, name) = rest.split_first_chunk::<4>()?;
    Some((parent, u32::from_be_bytes(*part), name))
}

/// The little-endian `u32` at `b[at..at + 4]` (every integer of a row value is
/// little-endian). Panics if `b` is shorter: callers check the length of what they read
/// from the store first.
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The little-endian `u64` at `b[at..at + 8]` (`b` long enough, as for [`u32_at`]).
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}
