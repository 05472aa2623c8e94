//! Listings: a directory read partition by partition, in hash order (GIGA+), and with
//! `plus` the entries' attributes their servers have at hand, under a lease on the
//! names and inodes (DESIGN.md, "Leases": *Listings with attributes*). What is leased is
//! kept like a lookup's answer, so that a listing followed by a stat of each entry
//! (`ls -l`, `du`, `find -size`) costs one request per partition, not one per entry.
//! A partition listed whole under a lease on its listing is kept too, and listed again
//! from what is kept, with no request (*Listings kept*).

use std::time::Duration;

// tokio's clock: real time, or virtual time in the simulation (turmoil pauses it).
use tokio::time::Instant;

use cairn_fs::{rules, Cred, DirEntry, DirEntryPlus, Errno, FsResult, Validity};

use super::count::Rpc;
use super::leases::{KeptListing, Key};
use super::{Client, READDIR_PAGE};
use crate::convert::msg_attr;
use crate::giga::{home_of, name_hash, rev, rev_range, MAX_DEPTH};
use crate::proto;

/// Rounds a listing may take at most (one partition, or the rest of one, each): more
/// than a directory's partitions.
const MAX_ROUNDS: u64 = 1 << 25;
/// Attribute requests a listing sends to inodes' homes at once.
const HOME_ASKS: usize = 32;

/// Where a listing goes on after a round whose entries ended with name `last` and,
/// when they reached the end of their partition, `end` (its last position): `None`
/// once the directory is done.
fn next_pos(end: Option<u64>, last: Option<Vec<u8>>) -> FsResult<Option<(u64, Vec<u8>)>> {
    match (end, last) {
        (Some(u64::MAX), _) => Ok(None),
        (Some(hi), _) => Ok(Some((hi + 1, Vec::new()))),
        (None, Some(l)) => Ok(Some((rev(name_hash(&l)), l))),
        // A round short of its partition's end returned nothing to go on from.
        (None, None) => Err(Errno(libc::EIO)),
    }
}

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
                if let Some(kept) = self.kept_round(cred, ino, (pos.0, &pos.1), want, plus) {
                    let last = kept.entries.last().map(|e| e.entry.name.clone());
                    out.extend(kept.entries);
                    if out.len() >= limit {
                        return Ok(out);
                    }
                    match next_pos(kept.end, last)? {
                        Some(next) => pos = next,
                        None => return Ok(out),
                    }
                    continue;
                }
                // From a partition's start, a client keeping leases asks for all of
                // it (a page): what the caller does not take now is kept, and its next
                // calls are answered from there.
                let ask = match plus && pos.1.is_empty() && self.inner.leases.id() != 0 {
                    true => READDIR_PAGE as u32,
                    false => want,
                };
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
                                limit: ask,
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
                let whole = rep.listing.then_some(rep.lease_ms);
                let mut listed = self.listed(ino, rep, (s, since));
                if plus {
                    self.attrs_from_homes(&mut listed, d).await;
                }
                if let Some(lease_ms) = whole {
                    // Every name of the partition was listed under the lease: later
                    // listings of it are answered from what is kept.
                    let l = &self.inner.leases;
                    let v = l.validity(s as usize, lease_ms, &Key::Listing(ino), since);
                    l.keep_listing(s as usize, ino, (partition, depth), (v, since));
                }
                out.extend(listed);
                if out.len() >= limit {
                    out.truncate(limit);
                    return Ok(out);
                }
                let end = match done {
                    false => None,
                    true => {
                        let (lo, hi) = rev_range(partition, depth);
                        if depth > MAX_DEPTH || lo > prev || hi < prev {
                            // The partition served must own the position asked for.
                            tracing::error!(
                                "{ino:#x}: a listing reply for a partition off the position"
                            );
                            return Err(Errno(libc::EIO));
                        }
                        Some(hi)
                    }
                };
                match next_pos(end, last)? {
                    Some(next) => pos = next,
                    None => return Ok(out),
                }
                if done && Instant::now() >= d {
                    return Err(Errno(libc::EIO));
                }
            }
            Err(Errno(libc::EIO))
        })
    }

    /// A round of a listing of `dir` answered from what is kept, for a caller the
    /// directory's kept attributes let read and search it (any other is answered by
    /// the servers, which check it).
    fn kept_round(
        &self,
        cred: &Cred,
        dir: u64,
        after: (u64, &[u8]),
        want: u32,
        plus: bool,
    ) -> Option<KeptListing> {
        let l = &self.inner.leases;
        let (a, _) = l.kept_attr(dir)?;
        let may = rules::check_access(true, cred, &a, rules::MAY_READ | rules::MAY_EXEC);
        if !a.is_dir() || may.is_err() {
            return None;
        }
        l.kept_listing(dir, after, want as usize, plus)
    }

    /// The entries of listing reply `rep` of `dir`, which server `s` answered to a
    /// request sent at epoch `since`. Where the reply has attributes (`plus`) and the
    /// names are leased (or leases are not kept: a program's client), each comes with
    /// how long the kernel may keep it and is kept; so are the attributes the server
    /// had (those of the inodes it is the home of).
    fn listed(
        &self,
        dir: u64,
        rep: proto::ReadDirReply,
        (s, since): (u32, u64),
    ) -> Vec<DirEntryPlus> {
        let l = &self.inner.leases;
        let (lease_ms, plus) = (rep.lease_ms, rep.plus);
        let none = Validity::For(Duration::ZERO);
        let su = s as usize;
        rep.entries
            .into_iter()
            .map(|e| {
                let entry = DirEntry {
                    name: e.name,
                    ino: e.ino,
                    kind: e.kind,
                };
                if !plus {
                    return DirEntryPlus::bare(entry);
                }
                let name_key = Key::Name(dir, entry.name.clone());
                let entry_valid = l.validity(su, lease_ms, &name_key, since);
                if entry_valid == none {
                    // Nothing the kernel could keep: listed only.
                    return DirEntryPlus::bare(entry);
                }
                l.keep_name(su, (dir, &entry.name), Some(e.ino), (entry_valid, since));
                if entry.kind == libc::S_IFDIR {
                    l.keep_parent(e.ino, (dir, &entry.name));
                }
                // Attributes count only from the inode's home, which leases them; the
                // others are asked of their homes (`attrs_from_homes`).
                let (attr, attr_valid) = match e.attr.filter(|_| home_of(e.ino) == s) {
                    Some(a) => {
                        let attr = msg_attr(&a);
                        let v = l.validity(su, lease_ms, &Key::Inode(e.ino), since);
                        l.keep_attr(su, &attr, (v, since));
                        (Some(attr), v)
                    }
                    None => (None, none),
                };
                DirEntryPlus {
                    entry,
                    attr,
                    entry_valid,
                    attr_valid,
                }
            })
            .collect()
    }

    /// Asks the inodes' homes for the attributes of the listed entries whose names are
    /// leased but whose inodes live elsewhere (directories, mostly), a few at a time in
    /// parallel: the kernel then needs no LOOKUP of them either. An entry whose
    /// attributes cannot be had stays listed only.
    async fn attrs_from_homes(&self, entries: &mut [DirEntryPlus], deadline: Instant) {
        let none = Validity::For(Duration::ZERO);
        let wanted: Vec<usize> = (0..entries.len())
            .filter(|&i| entries[i].attr.is_none() && entries[i].entry_valid != none)
            .collect();
        for chunk in wanted.chunks(HOME_ASKS) {
            let mut asks = tokio::task::JoinSet::new();
            for &i in chunk {
                let ino = entries[i].entry.ino;
                if let Some((attr, v)) = self.inner.leases.kept_attr(ino) {
                    // Kept under a lease already: no request.
                    entries[i].attr = Some(attr);
                    entries[i].attr_valid = v;
                    continue;
                }
                let c = self.clone();
                asks.spawn(async move { (i, c.getattr_leased(ino, deadline).await) });
            }
            while let Some(done) = asks.join_next().await {
                let Ok((i, Ok((attr, v)))) = done else {
                    continue;
                };
                if attr.ino == entries[i].entry.ino {
                    entries[i].attr = Some(attr);
                    entries[i].attr_valid = v;
                }
            }
        }
    }
}
