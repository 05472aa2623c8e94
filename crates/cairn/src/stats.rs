//! Size and amplification figures.

use serde::Serialize;

use crate::core::Core;

/// Figures for one shard, or for the whole store.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ShardStats {
    /// The shard number; `None` for the store total.
    pub shard: Option<u32>,
    /// Live keys.
    pub keys: u64,
    /// Bytes of the live records (headers, keys and values).
    pub live_bytes: u64,
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
    for sh in &core.shards {
        let st = sh.state.read();
        let blooms: usize = st
            .segs
            .values()
            .filter_map(|m| m.bloom.get().map(|b| b.memory_bytes()))
            .sum();
        let s = ShardStats {
            shard: Some(sh.id),
            keys: st.index.len() as u64,
            live_bytes: st.live_bytes,
            disk_bytes: st.disk_bytes(),
            segments: st.segs.len() as u64,
            index_bytes: (st.index.memory_bytes() + blooms) as u64,
            user_bytes_written: sh.user_bytes(),
            disk_bytes_written: sh.written_bytes(),
            ..Default::default()
        };
        drop(st);
        total.keys += s.keys;
        total.live_bytes += s.live_bytes;
        total.disk_bytes += s.disk_bytes;
        total.segments += s.segments;
        total.index_bytes += s.index_bytes;
        total.user_bytes_written += s.user_bytes_written;
        total.disk_bytes_written += s.disk_bytes_written;
        shards.push(s.finish());
    }
    Stats {
        total: total.finish(),
        shards,
    }
}
