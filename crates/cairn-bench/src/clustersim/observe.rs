//! The driver's view of the shared directory: its partitions on every server, polled
//! after every step, and the splits their depths show.

use std::collections::BTreeMap;

use cairn_cluster::giga::{home_of, server_of};
use cairn_cluster::server::Probe;

use super::sim::SplitEvent;

/// Follows the shared directory's partitions on every server.
pub(super) struct Observer {
    n: u32,
    pub(super) dir: u64,
    /// (server, index) → (depth, entries) at the last poll.
    seen: BTreeMap<(u32, u32), (u32, u64)>,
    /// New partitions seen while incoming: index → entries.
    incoming: BTreeMap<u32, u64>,
}

impl Observer {
    pub(super) fn new(n: u32, dir: u64) -> Observer {
        Observer {
            n,
            dir,
            seen: BTreeMap::new(),
            incoming: BTreeMap::new(),
        }
    }

    /// Reads every server that is up; records the splits its depths show.
    pub(super) fn poll(&mut self, step: u64, probes: &[Option<Probe>], out: &mut Vec<SplitEvent>) {
        for (s, p) in probes.iter().enumerate() {
            let Some(parts) = p.as_ref().and_then(|p| p.partitions()) else {
                continue;
            };
            for q in parts.iter().filter(|q| q.dir == self.dir) {
                if q.incoming {
                    self.incoming.entry(q.index).or_insert(q.entries);
                    continue;
                }
                let key = (s as u32, q.index);
                if let Some(&(d0, e0)) = self.seen.get(&key) {
                    for d in d0..q.depth {
                        let child = q.index + (1u32 << d.min(31));
                        let (moved, exact) = match self.incoming.get(&child) {
                            Some(&e) => (e, true),
                            None => (e0.saturating_sub(q.entries), false),
                        };
                        out.push(SplitEvent {
                            step,
                            server: s as u32,
                            index: q.index,
                            depth: d + 1,
                            moved,
                            moved_exact: exact,
                            remote: server_of(home_of(self.dir), child, self.n) != s as u32,
                        });
                    }
                }
                self.seen.insert(key, (q.depth, q.entries));
            }
        }
    }

    /// Partitions of the directory that are active somewhere.
    pub(super) fn partitions(&self) -> u64 {
        self.seen.len() as u64
    }

    /// Servers holding an active partition of the directory.
    pub(super) fn covered(&self) -> u32 {
        let mut s: Vec<u32> = self.seen.keys().map(|k| k.0).collect();
        s.dedup();
        s.len() as u32
    }

    pub(super) fn entries_per_server(&self) -> Vec<u64> {
        let mut v = vec![0u64; self.n as usize];
        for (&(s, _), &(_, e)) in &self.seen {
            v[s as usize] += e;
        }
        v
    }
}
