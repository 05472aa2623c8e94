//! Keys of the rows a server keeps in keyspace [`crate::KEYSPACE`] of its store (see
//! FORMAT.md, "Cluster rows"). Every key starts with a tag byte; integers in keys are
//! big-endian so that rows sort by them. Values are prost messages (`proto`), except
//! data chunks (raw bytes) and link, subdirectory and orphan rows (empty).

use crate::giga::{name_hash, rev};

/// The layout of the rows this build writes (FORMAT.md, "Cluster rows"), kept in the
/// server row (`rows_version`; absent in stores of version 1). Version 2: intent rows
/// are [`crate::proto::IntentRow`] with one message per kind (version 1:
/// [`crate::proto::IntentRowV1`]).
pub const ROWS_VERSION: u32 = 2;

/// `C`: the store's owner ([`crate::proto::ServerRow`]).
pub const TAG_SERVER: u8 = b'C';
/// `S`: inode-number lease (`u64` little-endian: every local number below is used).
pub const TAG_INO_LEASE: u8 = b'S';
/// `N`: intent-number lease (`u64` little-endian).
pub const TAG_INTENT_LEASE: u8 = b'N';
/// `P dir idx`: a partition ([`crate::proto::PartitionRow`]).
pub const TAG_PARTITION: u8 = b'P';
/// `A dir`: a directory's permissions copy ([`crate::proto::DirPerms`]).
pub const TAG_PERMS: u8 = b'A';
/// `E dir rev_hash name`: a directory entry ([`crate::proto::EntryRow`]).
pub const TAG_ENTRY: u8 = b'E';
/// `I ino`: an inode ([`crate::proto::InodeRow`]).
pub const TAG_INODE: u8 = b'I';
/// `L ino dir name`: a hard link of an inode (empty value).
pub const TAG_LINK: u8 = b'L';
/// `K dir child`: a subdirectory of a directory (empty value).
pub const TAG_SUBDIR: u8 = b'K';
/// `D ino chunk`: a data chunk.
pub const TAG_CHUNK: u8 = b'D';
/// `X ino name`: an extended attribute.
pub const TAG_XATTR: u8 = b'X';
/// `O ino`: an inode unlinked while open (empty value).
pub const TAG_ORPHAN: u8 = b'O';
/// `T id`: an intent this server coordinates ([`crate::proto::IntentRow`]).
pub const TAG_INTENT: u8 = b'T';
/// `R server id`: a participant's prepared part ([`crate::proto::PreparedRow`]).
pub const TAG_PREPARED: u8 = b'R';
/// `M server id`: a memo of a directory made for an intent ([`crate::proto::MemoRow`]).
pub const TAG_MEMO: u8 = b'M';
/// `Q token`: a client's request (link, unlink, rmdir, rename) this server did, in the
/// ledger of done requests (`i64` little-endian: when, nanoseconds since the epoch), so
/// that the request sent again after its reply was lost is answered as done; dropped
/// after [`crate::server::LEDGER_TTL`].
pub const TAG_DONE: u8 = b'Q';

/// `F group`: the highest Raft term of a leader of `group` that called this server
/// (`u64` little-endian); calls from that group in an earlier term are refused.
pub const TAG_FENCE: u8 = b'F';

/// `Z`: a replica's applied state: the last applied log id and the membership
/// (bincode of openraft's `(Option<LogId>, StoredMembership)`; replicated servers only).
pub const TAG_APPLIED: u8 = b'Z';
/// `H`: the lease horizon (8 bytes LE, ms since the epoch): no lease granted to a
/// client's session lasts beyond it (DESIGN.md, "Leases").
pub const TAG_LEASE_HORIZON: u8 = b'H';

/// Partition state: the owner of its names.
pub const PART_ACTIVE: u32 = 1;
/// Partition state: a split's copy, not yet the owner (invisible, unavailable).
pub const PART_INCOMING: u32 = 2;

fn key(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + parts.iter().map(|p| p.len()).sum::<usize>());
    k.push(tag);
    for p in parts {
        k.extend_from_slice(p);
    }
    k
}

/// The key of the one-row table `tag`.
pub fn single(tag: u8) -> Vec<u8> {
    vec![tag]
}

/// `P dir idx`.
pub fn partition_key(dir: u64, idx: u32) -> Vec<u8> {
    key(TAG_PARTITION, &[&dir.to_be_bytes(), &idx.to_be_bytes()])
}

/// `A dir`.
pub fn perms_key(dir: u64) -> Vec<u8> {
    key(TAG_PERMS, &[&dir.to_be_bytes()])
}

/// `E dir` : the prefix of a directory's entries.
pub fn entry_prefix(dir: u64) -> Vec<u8> {
    key(TAG_ENTRY, &[&dir.to_be_bytes()])
}

/// `E dir rev name`: the entry at key position (`rev`, `name`).
pub fn entry_pos_key(dir: u64, rev_h: u64, name: &[u8]) -> Vec<u8> {
    key(TAG_ENTRY, &[&dir.to_be_bytes(), &rev_h.to_be_bytes(), name])
}

/// The key of entry `name` of `dir`.
pub fn entry_key(dir: u64, name: &[u8]) -> Vec<u8> {
    entry_pos_key(dir, rev(name_hash(name)), name)
}

/// `I ino`.
pub fn inode_key(ino: u64) -> Vec<u8> {
    key(TAG_INODE, &[&ino.to_be_bytes()])
}

/// `tag ino`: the prefix of an inode's rows of one kind (links, chunks, xattrs).
pub fn ino_prefix(tag: u8, ino: u64) -> Vec<u8> {
    key(tag, &[&ino.to_be_bytes()])
}

/// `L ino dir name`.
pub fn link_key(ino: u64, dir: u64, name: &[u8]) -> Vec<u8> {
    key(TAG_LINK, &[&ino.to_be_bytes(), &dir.to_be_bytes(), name])
}

/// `K dir child`.
pub fn subdir_key(dir: u64, child: u64) -> Vec<u8> {
    key(TAG_SUBDIR, &[&dir.to_be_bytes(), &child.to_be_bytes()])
}

/// `D ino chunk`.
pub fn chunk_key(ino: u64, idx: u64) -> Vec<u8> {
    key(TAG_CHUNK, &[&ino.to_be_bytes(), &idx.to_be_bytes()])
}

/// `X ino name`.
pub fn xattr_key(ino: u64, name: &[u8]) -> Vec<u8> {
    key(TAG_XATTR, &[&ino.to_be_bytes(), name])
}

/// `O ino`.
pub fn orphan_key(ino: u64) -> Vec<u8> {
    key(TAG_ORPHAN, &[&ino.to_be_bytes()])
}

/// `T id`.
pub fn intent_key(id: u64) -> Vec<u8> {
    key(TAG_INTENT, &[&id.to_be_bytes()])
}

/// `R server id`.
pub fn prepared_key(server: u32, id: u64) -> Vec<u8> {
    key(TAG_PREPARED, &[&server.to_be_bytes(), &id.to_be_bytes()])
}

/// `M server id`.
pub fn memo_key(server: u32, id: u64) -> Vec<u8> {
    key(TAG_MEMO, &[&server.to_be_bytes(), &id.to_be_bytes()])
}

/// The ledger row of request `token` ([`TAG_DONE`]).
pub fn done_key(token: u64) -> Vec<u8> {
    key(TAG_DONE, &[&token.to_be_bytes()])
}

/// The fence row of calls from group `group` ([`TAG_FENCE`]).
pub fn fence_key(group: u32) -> Vec<u8> {
    key(TAG_FENCE, &[&group.to_be_bytes()])
}

/// The big-endian `u64` at `b[at..]`, if there are 8 bytes.
pub fn be64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The big-endian `u32` at `b[at..]`, if there are 4 bytes.
pub fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The smallest key greater than every key starting with `p`, if any.
pub fn prefix_successor(p: &[u8]) -> Option<Vec<u8>> {
    let mut v = p.to_vec();
    while let Some(last) = v.pop() {
        if last < 0xff {
            v.push(last + 1);
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_position() {
        let a = entry_pos_key(7, 1, b"zz");
        let b = entry_pos_key(7, 2, b"aa");
        let c = entry_pos_key(8, 0, b"");
        assert!(a < b && b < c);
        assert_eq!(be64(&a, 1), Some(7));
        assert_eq!(be64(&a, 9), Some(1));
        assert_eq!(prefix_successor(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_successor(&[0xff]), None);
        assert_eq!(be32(&partition_key(3, 9), 9), Some(9));
    }
}
