//! The store's own background threads: the maintenance thread (seals rotated
//! segments, makes spare segments, frees full commit log files, runs the periodic sync of `SyncPolicy::Every`) and the
//! compaction threads. They sit above the store and compaction; `Db::open` starts them
//! and the last handle's drop (or `Db::close`) stops and joins them.

use std::time::{Duration, Instant};

use crate::compaction::{self, Outcome, RotateMin};
use crate::core::Core;
use crate::SyncPolicy;

/// How long the maintenance thread waits before it tries a failed seal again.
const SEAL_RETRY: Duration = Duration::from_millis(500);

/// Background loop: seals rotated segments and runs the periodic sync.
pub(crate) fn maintenance_loop(core: &Core) {
    let interval = match core.opts.sync {
        SyncPolicy::Every(d) => Some(d),
        _ => None,
    };
    let mut last_sync = Instant::now();
    while !core.is_shutdown() {
        // Spares first: a writer is about to need one, while a seal only frees
        // memory maps and makes a segment compactable.
        // A full commit log file next (writers append past its size until it is
        // free), and between seals too.
        let log_work = || {
            if let Err(e) = core.checkpoint_log() {
                log::error!("checkpointing the commit log failed: {e}");
            }
        };
        log_work();
        if let Err(e) = core.seal_queued_with(|| {
            core.make_spares();
            log_work();
        }) {
            log::error!("sealing a segment failed: {e}");
            core.pause(SEAL_RETRY);
        }
        if let Some(d) = interval {
            if last_sync.elapsed() >= d {
                if let Err(e) = core.flush() {
                    log::error!("periodic sync failed: {e}");
                }
                last_sync = Instant::now();
            }
            core.wait_for_work(
                d.saturating_sub(last_sync.elapsed())
                    .max(Duration::from_millis(1)),
            );
        } else {
            core.wait_for_work(Duration::from_millis(500));
        }
    }
}

/// How long the compaction thread waits when it has nothing to do; a shard that took
/// no write over one such wait is idle.
const IDLE_WAIT: Duration = Duration::from_millis(200);

/// Background loop: compacts the segments whose stale fraction passed the threshold.
/// When there are none, the active segments of idle shards that are mostly stale are
/// rotated out and what holds nothing live is dropped (`compaction::reclaim`), so that
/// a store left alone after a large delete (a file removed on the mount, say) gives the
/// space back within a second or so, not once new writes fill the segment.
pub(crate) fn compaction_loop(core: &Core) {
    // Each shard's last appended sequence number at the previous look.
    let mut seen: Vec<Option<u64>> = vec![None; core.shards.len()];
    while !core.is_shutdown() {
        match compaction::compact_one(core, false) {
            Ok(Outcome::Compacted) => {}
            Ok(_) => {
                // Old versions no snapshot needs any more, in shards no write pruned.
                core.prune_versions();
                let mut idle = Vec::new();
                for (i, sh) in core.shards.iter().enumerate() {
                    let now = sh.state.read().seqs.last_appended();
                    if seen[i] == Some(now) {
                        idle.push(i);
                    }
                    seen[i] = Some(now);
                }
                let did = match idle.is_empty() {
                    true => false,
                    false => match compaction::reclaim(core, Some(&idle), RotateMin::Idle) {
                        Ok(r) => r.rotated > 0 || r.segments > 0,
                        Err(e) => {
                            log::error!("background reclamation failed: {e}");
                            false
                        }
                    },
                };
                if !did {
                    core.pause(IDLE_WAIT);
                }
            }
            Err(e) => {
                log::error!("background compaction failed: {e}");
                core.pause(Duration::from_secs(1));
            }
        }
    }
}
