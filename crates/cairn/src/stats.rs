//! Size and amplification figures.

use serde::Serialize;

use crate::core::Core;
use crate::tally::{KeyspaceStats, Tally};

/// Figures for one shard, or for the whole store.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ShardStats {
    /// The shard number; `None` for the store total.
    pub shard: Option<u32>,
    /// Live keys.
    pub keys: u64,
    /// Bytes of the live records (headers, keys and values).
    pub live_bytes: u64,
    /// Bytes of records still in segment files (or buffered) that hold nothing live:
    /// values overwritten or deleted, and tombstones. Compaction, or dropping a segment
    /// whole, gives them back ([`crate::Db::reclaim`]).
    pub reclaimable_bytes: u64,
    /// Bytes of segment and hint files, including buffered records.
    pub disk_bytes: u64,
    /// Segment files.
    pub segments: u64,
    /// Bytes written to files since open over key and value bytes written by callers
    /// since open (0 before any write).
    pub write_amplification: f64,
    /// `disk_bytes / live_bytes` (0 when empty).
    pub space_amplification: f64,
    /// Memory of the in-memory index, including Bloom filters.
    pub index_bytes: u64,
    /// `index_bytes / keys`.
    pub index_bytes_per_key: f64,
    /// Key and value bytes written by callers since open.
    pub user_bytes_written: u64,
    /// Bytes cairn wrote to files since open.
    pub disk_bytes_written: u64,
}

/// Figures per shard and in total, from [`crate::Db::stats`].
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Stats {
    /// The whole store.
    pub total: ShardStats,
    /// Each shard.
    pub shards: Vec<ShardStats>,
    /// Each keyspace that holds records, in keyspace order (0: `Db`'s own keys).
    pub keyspaces: Vec<KeyspaceStats>,
    /// `fdatasync` calls on the commit log since open (see
    /// [`crate::Options::commit_log_size`]); durable writes made through it over this
    /// is the writes each sync served.
    pub commit_log_syncs: u64,
    /// Bytes written to the commit log since open (counted in the total's
    /// `disk_bytes_written` too).
    pub commit_log_bytes: u64,
    /// The store's format version, as its manifest says: 1, or 2 for a store that
    /// routes numbered rows to shards by group (see FORMAT.md).
    pub format_version: u32,
    /// The regions of numbered rows, (keyspace, tag), routed to shards by group
    /// ([`crate::Db::grouped_rows`]).
    pub grouped_rows: Vec<(u8, u8)>,
    /// What the live snapshots and transactions keep.
    pub snapshots: SnapshotStats,
}

/// What live snapshots (and transactions, each of which holds one) keep alive
/// ([`crate::Snapshot`]): the versions overwritten or deleted after the oldest was
/// taken, and the segments holding them. All zero again once they are dropped (a shard
/// lets go of what it kept at its next write, or within a second).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct SnapshotStats {
    /// Live snapshots (each transaction holds one).
    pub live: u64,
    /// Age of the oldest, in seconds (0 when none is live).
    pub oldest_age_secs: f64,
    /// Old versions kept (including "had no value" for keys created since).
    pub versions: u64,
    /// Keys with old versions kept.
    pub keys: u64,
    /// Bytes of the records of those versions, on disk (counted in
    /// `reclaimable_bytes` too, which compaction will not reclaim while they are kept).
    pub pinned_bytes: u64,
    /// Memory of the old versions' index.
    pub memory_bytes: u64,
    /// Segment files compaction removed whose records are still read by a snapshot:
    /// unlinked, kept open (and counted in `disk_bytes`) until it goes.
    pub retained_segments: u64,
    /// Bytes of those files.
    pub retained_bytes: u64,
}

impl Stats {
    /// The figures of keyspace `id` (all zero when it holds no records).
    pub fn keyspace(&self, id: u8) -> KeyspaceStats {
        self.keyspaces
            .iter()
            .find(|k| k.keyspace == id)
            .cloned()
            .unwrap_or(KeyspaceStats {
                keyspace: id,
                ..Default::default()
            })
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

impl ShardStats {
    fn finish(mut self) -> ShardStats {
        self.write_amplification = ratio(self.disk_bytes_written, self.user_bytes_written);
        self.space_amplification = ratio(self.disk_bytes, self.live_bytes);
        self.index_bytes_per_key = ratio(self.index_bytes, self.keys);
        self
    }
}

pub(crate) fn collect(core: &Core) -> Stats {
    let mut total = ShardStats::default();
    let mut shards = Vec::with_capacity(core.shards.len());
    let mut snapshots = SnapshotStats::default();
    let (live, age) = core.snaps.count_and_age();
    snapshots.live = live;
    snapshots.oldest_age_secs = age.map_or(0.0, |a| a.as_secs_f64());
    let (mut live, mut keys, mut on_disk) = (Tally::default(), Tally::default(), Tally::default());
    for sh in &core.shards {
        let st = sh.state.read();
        let blooms: usize = st
            .segs
            .values()
            .filter_map(|m| m.bloom.get().map(|b| b.memory_bytes()))
            .sum();
        let fig = st.versions.figures();
        snapshots.versions += fig.versions;
        snapshots.keys += fig.keys;
        snapshots.pinned_bytes += fig.pinned_bytes;
        snapshots.memory_bytes += fig.memory_bytes;
        snapshots.retained_segments += fig.retired_segments;
        snapshots.retained_bytes += fig.retired_bytes;
        let mut records = Tally::default();
        for m in st.segs.values() {
            records.add_all(&m.bytes);
        }
        let record_bytes: u64 = records.iter().map(|(_, n)| n).sum();
        live.add_all(&st.live_by_ns);
        keys.add_all(&st.keys_by_ns);
        on_disk.add_all(&records);
        let s = ShardStats {
            shard: Some(sh.id),
            keys: st.index.len() as u64,
            live_bytes: st.live_bytes,
            reclaimable_bytes: record_bytes.saturating_sub(st.live_bytes),
            disk_bytes: st.disk_bytes() + fig.retired_bytes,
            segments: st.segs.len() as u64,
            index_bytes: (st.index.memory_bytes() + blooms) as u64,
            user_bytes_written: sh.user_bytes(),
            disk_bytes_written: sh.written_bytes(),
            ..Default::default()
        };
        drop(st);
        total.keys += s.keys;
        total.live_bytes += s.live_bytes;
        total.reclaimable_bytes += s.reclaimable_bytes;
        total.disk_bytes += s.disk_bytes;
        total.segments += s.segments;
        total.index_bytes += s.index_bytes;
        total.user_bytes_written += s.user_bytes_written;
        total.disk_bytes_written += s.disk_bytes_written;
        shards.push(s.finish());
    }
    let mut ids: Vec<u8> = on_disk.iter().map(|(ns, _)| ns).collect();
    ids.extend(live.iter().map(|(ns, _)| ns));
    ids.sort_unstable();
    ids.dedup();
    let keyspaces = ids
        .into_iter()
        .map(|ns| {
            let (l, d) = (live.get(ns), on_disk.get(ns));
            KeyspaceStats {
                keyspace: ns,
                keys: keys.get(ns),
                live_bytes: l,
                reclaimable_bytes: d.saturating_sub(l),
                disk_bytes: d.max(l),
            }
        })
        .filter(|k| k.disk_bytes > 0 || k.keys > 0)
        .collect();
    let (commit_log_syncs, commit_log_bytes) = core
        .log
        .as_ref()
        .map_or((0, 0), |l| (l.syncs(), l.bytes_written()));
    total.disk_bytes_written += commit_log_bytes;
    Stats {
        total: total.finish(),
        shards,
        keyspaces,
        commit_log_syncs,
        commit_log_bytes,
        format_version: core.router.format_version(),
        grouped_rows: core.router.grouped_rows(),
        snapshots,
    }
}
