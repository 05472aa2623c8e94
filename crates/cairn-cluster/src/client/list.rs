//! Listings: a directory read partition by partition, in hash order (GIGA+), and with
//! `plus` the entries' attributes their servers have at hand, under a lease on the
//! names and inodes (DESIGN.md, "Leases": *Listings with attributes*). What is leased is
//! kept like a lookup's answer, so that a listing followed by a stat of each entry
//! (`ls -l`, `du`, `find -size`) costs one request per partition, not one per entry.

use std::time::Duration;

// tokio's clock: real time, or virtual time in the simulation (turmoil pauses it).
use tokio::time::Instant;

use cairn_fs::{Cred, DirEntry, DirEntryPlus, Errno, FsResult, Validity};

use super::count::Rpc;
use super::leases::Key;
use super::{Client, READDIR_PAGE};
use crate::convert::msg_attr;
use crate::giga::{home_of, name_hash, rev, rev_range, MAX_DEPTH};
use crate::proto;

/// Rounds a listing may take at most (one partition, or the rest of one, each): more
/// than a directory's partitions.
const MAX_ROUNDS: u64 = 1 << 25;

impl Client {
    /// Up to `limit` entries of directory `ino` after `after`; with `plus`, with their
    /// attributes where their servers have them (and leased, kept).
    pub(super) fn list(
        &self,
        cred: &Cred,
        ino: u64,
        after: Option<&[u8]>,
        limit: usize,
        plus: bool,
    ) -> FsResult<Vec<DirEntryPlus>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let d = self.deadline();
        let h = self.header(cred);
        let mut pos: (u64, Vec<u8>) = match after {
            Some(n) => (rev(name_hash(n)), n.to_vec()),
            None => (0, Vec::new()),
        };
        let mut first = after.is_none();
        self.block_raw(async {
            let mut out: Vec<DirEntryPlus> = Vec::new();
            for _ in 0..MAX_ROUNDS {
                let want = (limit - out.len()).min(READDIR_PAGE) as u32;
                let (prev, name) = (pos.0, pos.1.clone());
                let since = self.inner.leases.epoch();
                let (rep, s) = self
                    .named(
                        Rpc::ReadDir,
                        ino,
                        pos.0.reverse_bits(),
                        true,
                        d,
                        |mut c, t, i| {
                            let mut r = tonic::Request::new(proto::ReadDirReq {
                                h: h.clone(),
                                dir: ino,
                                partition: i,
                                after_rev: prev,
                                after_name: name.clone(),
                                limit: want,
                                from_start: first,
                                plus,
                            });
                            r.set_timeout(t);
                            async move { c.read_dir(r).await }
                        },
                    )
                    .await?;
                first = false;
                let last = rep.entries.last().map(|e| e.name.clone());
                let (done, depth, partition) = (rep.done, rep.depth, rep.partition);
                out.extend(self.listed(ino, rep, (s, since)));
                if out.len() >= limit {
                    return Ok(out);
                }
                if !done {
                    let Some(l) = last else {
                        return Err(Errno(libc::EIO));
                    };
                    pos = (rev(name_hash(&l)), l);
                    continue;
                }
                let (lo, hi) = rev_range(partition, depth);
                if depth > MAX_DEPTH || lo > prev || hi < prev {
                    // The partition served must own the position asked for.
                    tracing::error!("{ino:#x}: a listing reply for a partition off the position");
                    return Err(Errno(libc::EIO));
                }
                if hi == u64::MAX {
                    return Ok(out);
                }
                pos = (hi + 1, Vec::new());
                if Instant::now() >= d {
                    return Err(Errno(libc::EIO));
                }
            }
            Err(Errno(libc::EIO))
        })
    }

    /// The entries of listing reply `rep` of `dir`, which server `s` answered to a
    /// request sent at epoch `since`: those with attributes come with how long the
    /// kernel may keep them, and what is leased of them is kept.
    fn listed(
        &self,
        dir: u64,
        rep: proto::ReadDirReply,
        (s, since): (u32, u64),
    ) -> Vec<DirEntryPlus> {
        let l = &self.inner.leases;
        let lease_ms = rep.lease_ms;
        let none = Validity::For(Duration::ZERO);
        rep.entries
            .into_iter()
            .map(|e| {
                let entry = DirEntry {
                    name: e.name,
                    ino: e.ino,
                    kind: e.kind,
                };
                // Attributes count only from the inode's home (which is what leases them).
                let Some(a) = e.attr.filter(|_| home_of(e.ino) == s) else {
                    return DirEntryPlus::bare(entry);
                };
                let attr = msg_attr(&a);
                let name_key = Key::Name(dir, entry.name.clone());
                let entry_valid = l.validity(s as usize, lease_ms, &name_key, since);
                let attr_valid = l.validity(s as usize, lease_ms, &Key::Inode(e.ino), since);
                if entry_valid == none && attr_valid == none {
                    // Nothing the kernel could keep: listed only.
                    return DirEntryPlus::bare(entry);
                }
                l.keep_attr(s as usize, &attr, (attr_valid, since));
                l.keep_name(
                    s as usize,
                    (dir, &entry.name),
                    Some(e.ino),
                    (entry_valid, since),
                );
                DirEntryPlus {
                    entry,
                    attr: Some(attr),
                    entry_valid,
                    attr_valid,
                }
            })
            .collect()
    }
}
