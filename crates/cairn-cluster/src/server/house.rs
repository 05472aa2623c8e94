//! Background upkeep and operator views: writing directory times (and sending those of
//! other servers' directories home), metrics gauges, resolving prepared parts whose
//! coordinator has forgotten them, and the status, dump and statfs answers.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use prost::Message;

use super::intent_rows::kind_name;
use super::node::{now_ms, Batch, Fail, IntentKey, Node, NodeRef, R};
use super::peer::peer_call;
use crate::convert::{attr_msg, row_attr};
use crate::giga::home_of;
use crate::proto;
use crate::proto::intent_row::Op;
use crate::rows::{
    be32, be64, inode_key, orphan_key, partition_key, prepared_key, TAG_CHUNK, TAG_ENTRY,
    TAG_INODE, TAG_INTENT, TAG_LINK, TAG_PARTITION, TAG_PREPARED, TAG_SUBDIR, TAG_XATTR,
};

/// Prepared parts older than this are checked with their coordinator.
const STALE_PREPARED_MS: i64 = 30_000;

impl Node {
    /// Writes the pending times of directories whose home is here into their rows.
    pub(crate) fn write_dir_times(&self) -> R<()> {
        let mut st = self.state();
        let pending = st.times.take_local();
        if pending.is_empty() {
            return Ok(());
        }
        let mut b = Batch::new();
        for (dir, (mt, ct)) in &pending {
            if let Some(mut i) = self.inode(*dir)? {
                i.mtime = i.mtime.max(*mt);
                i.ctime = i.ctime.max(*ct);
                b.put(&inode_key(*dir), &i);
            }
        }
        if let Err(e) = self.apply(b) {
            for (dir, (mt, ct)) in pending {
                st.times.merge(true, dir, mt, ct);
            }
            return Err(e);
        }
        Ok(())
    }

    /// Sends the times of directories whose home is elsewhere to their homes.
    async fn push_remote_times(self: &NodeRef) {
        let pending = self.state().times.take_remote();
        if pending.is_empty() {
            return;
        }
        let mut by_home: BTreeMap<u32, Vec<proto::DirTimes>> = BTreeMap::new();
        for (dir, (mtime, ctime)) in pending {
            by_home
                .entry(home_of(dir))
                .or_default()
                .push(proto::DirTimes { dir, mtime, ctime });
        }
        for (home, times) in by_home {
            let req = proto::TouchReq {
                h: self.ph((self.id, 0), None),
                times: times.clone(),
            };
            if peer_call!(self, home, touch_dirs, p_touch_dirs, req).is_err() {
                let mut st = self.state();
                for t in times {
                    st.times.merge(false, t.dir, t.mtime, t.ctime);
                }
            }
        }
    }

    fn gauges(&self) {
        let st = self.state();
        metrics::gauge!("cairn_partitions").set(st.parts.len() as f64);
        metrics::gauge!("cairn_entries").set(st.parts.entries() as f64);
        metrics::gauge!("cairn_splits_in_flight")
            .set(st.intents.count(|i| matches!(i.op, Some(Op::Split(_)))) as f64);
        metrics::gauge!("cairn_intents_pending").set(st.intents.len() as f64);
        drop(st);
        self.grants.sweep();
        let (sessions, held) = self.grants.counts();
        metrics::gauge!("cairn_lease_sessions").set(sessions as f64);
        metrics::gauge!("cairn_leases_held").set(held as f64);
    }

    /// Prepared parts held here (rename destinations, partitions marked removing)
    /// whose coordinator no longer has the intent are released.
    async fn resolve_stale(self: &NodeRef) {
        let now = now_ms();
        let mut asks: Vec<(IntentKey, bool)> = Vec::new();
        {
            let rows = self
                .blocking(|n| n.scan(&[TAG_PREPARED], None, usize::MAX))
                .await;
            if let Ok(rows) = rows {
                for (k, v) in rows {
                    let (Some(s), Some(id)) = (be32(&k, 1), be64(&k, 5)) else {
                        continue;
                    };
                    match proto::PreparedRow::decode(&v[..]) {
                        Ok(p) if now - p.created_ms > STALE_PREPARED_MS => {
                            asks.push(((s, id), true))
                        }
                        _ => {}
                    }
                }
            }
        }
        asks.extend(
            self.state()
                .parts
                .removing()
                .into_iter()
                .map(|k| (k, false)),
        );
        asks.sort();
        asks.dedup();
        for (k, prepared) in asks {
            if k.0 >= self.n {
                continue;
            }
            let req = proto::IntentRef {
                h: self.ph(k, None),
            };
            let Ok(rep) = peer_call!(self, k.0, outcome, p_outcome, req) else {
                continue;
            };
            if rep.exists {
                continue;
            }
            tracing::warn!(
                server = self.id,
                "intent {k:?} is gone at its coordinator: releasing what it held here"
            );
            let _ = self
                .blocking(move |n| {
                    let mut st = n.state();
                    let mut b = Batch::new();
                    if prepared {
                        b.delete(&prepared_key(k.0, k.1));
                    }
                    for ((d, i), row) in st.parts.release_removing(k) {
                        b.put(&partition_key(d, i), &row);
                    }
                    n.apply(b)?;
                    st.names.release(k);
                    drop(st);
                    n.durable()
                })
                .await;
        }
    }

    /// The upkeep loop: directory times every half second, gauges, and every ten
    /// seconds a look at stale prepared parts.
    pub(crate) async fn housekeeping(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let mut n = 0u64;
        loop {
            tick.tick().await;
            if self.is_crashed() {
                return;
            }
            // Each round in the term served when it starts (`super::term`).
            let Ok(term) = self.serving_term() else {
                continue;
            };
            n += 1;
            super::term::in_term(term, self.upkeep(n)).await;
        }
    }

    /// Round `n` of the upkeep loop.
    async fn upkeep(self: &NodeRef, n: u64) {
        if let Err(e) = self.blocking(|n| n.write_dir_times()).await {
            tracing::debug!(server = self.id, "directory times: {e:?}");
        }
        self.push_remote_times().await;
        self.gauges();
        if n % 4 == 0 {
            self.start_due_splits();
        }
        if n % 20 == 0 {
            self.resolve_stale().await;
        }
    }

    /// Starts the splits of partitions past the threshold whose split did not start
    /// (skipped while a name of theirs was held, or found so after a restart).
    fn start_due_splits(self: &NodeRef) {
        let due: Vec<(u64, u32)> = {
            let st = self.state();
            st.parts
                .iter()
                .map(|(k, _)| k)
                .filter(|&(d, i)| {
                    self.wants_split(&st, d, i)
                        && !st.intents.any(
                            |r| matches!(&r.op, Some(Op::Split(s)) if s.dir == d && s.index == i),
                        )
                })
                .collect()
        };
        for (d, i) in due {
            self.spawn_split(d, i);
        }
    }

    /// Space and inode figures of this server's disk.
    pub(crate) fn statfs(&self) -> R<proto::StatFsReply> {
        let st = rustix::fs::statvfs(self.db().path()).map_err(|e| {
            tracing::error!("statvfs of {}: {e}", self.db().path().display());
            Fail::Errno(libc::EIO)
        })?;
        let f = st.f_frsize.max(1);
        let used = self.inos_used();
        Ok(proto::StatFsReply {
            status: None,
            bsize: 4096,
            blocks: st.f_blocks * f / 4096,
            bfree: st.f_bfree * f / 4096,
            bavail: st.f_bavail * f / 4096,
            files: used + (1 << 40),
            ffree: 1 << 40,
            namelen: cairn_fs::NAME_MAX as u32,
        })
    }

    /// What this server holds (for `cairn cluster status`). `whole`: with what only an
    /// admin certificate may learn (the inode count, the prepared operations, the
    /// largest directories; rows counted one at a time, in bounded memory), else only
    /// what the server keeps in memory, marked `partial`.
    pub(crate) fn status(
        &self,
        top: u32,
        whole: bool,
        digest: bool,
    ) -> R<proto::ServerStatusReply> {
        let count = |tag: u8| self.fold_keys(&[tag], None, 0u64, |n, _| n + 1);
        let (inodes, prepared) = if whole {
            (count(TAG_INODE)?, count(TAG_PREPARED)? as u32)
        } else {
            (0, 0)
        };
        let st = self.state();
        let incoming = st.parts.incoming() as u32;
        let mut largest = Vec::new();
        if whole {
            let mut dirs: HashMap<u64, (u32, u64)> = HashMap::new();
            for ((d, _), p) in st.parts.iter() {
                let e = dirs.entry(d).or_default();
                e.0 += 1;
                e.1 += p.entries;
            }
            largest = dirs
                .into_iter()
                .map(|(dir, (partitions, entries))| proto::DirPartitions {
                    dir,
                    partitions,
                    entries,
                })
                .collect();
            largest.sort_by(|a, b| b.entries.cmp(&a.entries).then(a.dir.cmp(&b.dir)));
            largest.truncate(top.clamp(1, 1000) as usize);
        }
        Ok(proto::ServerStatusReply {
            server_id: self.id,
            partitions: st.parts.len() as u64,
            entries: st.parts.entries(),
            inodes,
            splits_done: self.counters.splits_done(),
            splits_in_flight: st.intents.count(|i| matches!(i.op, Some(Op::Split(_)))) as u32,
            redirects: self.counters.redirects(),
            intents_pending: st.intents.len() as u32,
            largest,
            prepared_pending: prepared,
            incoming_partitions: incoming,
            partial: !whole,
            replica: self.replica().map(|r| r.status(digest && whole)),
        })
    }

    /// A page of this server's rows, decoded (for `cairn cluster check`).
    pub(crate) fn dump(&self, after: &[u8], limit: usize) -> R<proto::DumpReply> {
        use std::ops::Bound;
        let limit = limit.clamp(1, 100_000);
        let lo = if after.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Excluded(after.to_vec())
        };
        let mut rep = proto::DumpReply {
            server_id: self.id,
            ..Default::default()
        };
        let now = now_ms();
        let mut n = 0;
        let bad = |what: &str, k: &[u8]| {
            Fail::Errno({
                tracing::error!("dump: damaged {what} row {k:?}");
                libc::EIO
            })
        };
        for r in self.rows((lo, Bound::Unbounded)) {
            let (k, v) = r?;
            n += 1;
            match k.first().copied() {
                Some(TAG_PARTITION) => {
                    let p =
                        proto::PartitionRow::decode(&v[..]).map_err(|_| bad("partition", &k))?;
                    rep.partitions.push(proto::DumpPartition {
                        dir: be64(&k, 1).unwrap_or(0),
                        index: be32(&k, 9).unwrap_or(0),
                        depth: p.depth,
                        state: p.state,
                        entries: p.entries,
                        removing: p.removing.is_some(),
                    });
                }
                Some(TAG_ENTRY) => {
                    let e = proto::EntryRow::decode(&v[..]).map_err(|_| bad("entry", &k))?;
                    rep.entries.push(proto::DumpEntry {
                        dir: be64(&k, 1).unwrap_or(0),
                        name: k.get(17..).unwrap_or_default().to_vec(),
                        ino: e.ino,
                        kind: e.kind,
                    });
                }
                Some(TAG_INODE) => {
                    let i = proto::InodeRow::decode(&v[..]).map_err(|_| bad("inode", &k))?;
                    let ino = be64(&k, 1).unwrap_or(0);
                    rep.inodes.push(proto::DumpInode {
                        attr: Some(attr_msg(&row_attr(ino, &i))),
                        parent: i.parent,
                        orphan: self.contains(&orphan_key(ino)),
                        subdirs: 0,
                    });
                }
                Some(TAG_LINK) => rep.links.push(proto::DumpLink {
                    ino: be64(&k, 1).unwrap_or(0),
                    dir: be64(&k, 9).unwrap_or(0),
                    name: k.get(17..).unwrap_or_default().to_vec(),
                }),
                Some(TAG_SUBDIR) => rep.subdirs.push(proto::DumpSubdir {
                    dir: be64(&k, 1).unwrap_or(0),
                    child: be64(&k, 9).unwrap_or(0),
                }),
                Some(TAG_INTENT) => {
                    let i = proto::IntentRow::decode(&v[..]).map_err(|_| bad("intent", &k))?;
                    let (dir, name) = i.subject();
                    rep.intents.push(proto::DumpIntent {
                        id: be64(&k, 1).unwrap_or(0),
                        kind: i.kind() as i32,
                        state: i.state,
                        age_ms: (now - i.created_ms).max(0) as u64,
                        what: format!(
                            "{} of {dir:#x}/{:?} ({})",
                            kind_name(i.kind()),
                            String::from_utf8_lossy(name),
                            if i.committed() {
                                "committed"
                            } else {
                                "prepared"
                            }
                        ),
                    });
                }
                Some(TAG_PREPARED) => {
                    let p = proto::PreparedRow::decode(&v[..]).map_err(|_| bad("prepared", &k))?;
                    rep.prepared.push(proto::DumpPrepared {
                        owner: Some(proto::IntentId {
                            server: be32(&k, 1).unwrap_or(0),
                            id: be64(&k, 5).unwrap_or(0),
                        }),
                        age_ms: (now - p.created_ms).max(0) as u64,
                        what: format!(
                            "rename destination {:#x}/{:?}",
                            p.new_dir,
                            String::from_utf8_lossy(&p.new_name)
                        ),
                    });
                }
                Some(t @ (TAG_CHUNK | TAG_XATTR)) => {
                    let ino = be64(&k, 1).unwrap_or(0);
                    if !self.contains(&inode_key(ino)) {
                        rep.strays.push(format!(
                            "{} row of inode {ino:#x}, which does not exist",
                            if t == TAG_CHUNK { "data" } else { "xattr" }
                        ));
                    }
                }
                _ => {}
            }
            if n >= limit {
                rep.next = k.clone();
                break;
            }
        }
        Ok(rep)
    }
}
