//! The kills of a simulated run: where each is armed (a split crash point drawn from the
//! seed, at a point of the workload), the server that stops there, the servers down.

use std::sync::{Mutex, MutexGuard, PoisonError};

use cairn_cluster::giga::split_depth_limit;
use cairn_cluster::server::SPLIT_CRASH_POINTS;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::sim::SimOptions;

/// Steps an armed kill waits for a server to reach its drawn split crash point before
/// it takes the next split crash point any server reaches.
const RETARGET_STEPS: u64 = 50;
/// Steps an armed kill waits for any split crash point before it kills any server
/// instead (recorded with no point).
const ARMED_STEPS: u64 = 5_000;
/// The split crash points only a split to another server passes (the source's transfer,
/// the target's accept and activation). In a power-of-two cluster every split after
/// the directory covers all servers stays on its server (GIGA+ places partition
/// i + 2^r on the server of i once 2^r is a multiple of N), so kills at these points
/// are drawn in the first 5% of the creates, when the directory spreads.
const REMOTE_POINTS: &[&str] = &[
    "split:before-accept",
    "accept:after-write",
    "activate:before",
];

/// The kill the driver armed, shared with the servers' crash hooks (`Mutex`: the hook
/// must be `Sync`; one thread uses it).
#[derive(Default)]
pub(super) struct Arming {
    /// The split crash point the next kill waits for; `Some(None)`: any of them.
    pub(super) armed: Option<Option<&'static str>>,
    /// The server that stopped, and the point, until the driver kills it.
    pub(super) fired: Option<(u32, &'static str)>,
}

impl Arming {
    /// Server `id` reached crash point `point`: whether it stops there.
    pub(super) fn reached(&mut self, id: u32, point: &str) -> bool {
        if self.fired.is_some() {
            return false;
        }
        let hit = match self.armed {
            Some(Some(p)) => (p == point).then_some(p),
            Some(None) => SPLIT_CRASH_POINTS.iter().copied().find(|&p| p == point),
            None => None,
        };
        if let Some(p) = hit {
            self.armed = None;
            self.fired = Some((id, p));
        }
        hit.is_some()
    }
}

/// Locks the kill armed now (one thread uses it: a poisoned lock holds a usable value).
pub(super) fn lock(a: &Mutex<Arming>) -> MutexGuard<'_, Arming> {
    a.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The kills of a run: the plan drawn from the seed, the one armed now, the servers
/// down.
pub(super) struct Kills {
    /// Every random choice of the kills (the plan, the victims, the restarts).
    pub(super) rng: StdRng,
    /// With partitions bounded per server, the splits the directory makes in all.
    pub(super) bounded_splits: Option<u64>,
    /// Each kill: the progress at which it is armed, and the split crash point drawn.
    pub(super) plan: Vec<(u64, &'static str)>,
    /// The next kill of the plan.
    pub(super) next: usize,
    /// The step at which the next kill was armed.
    pub(super) armed_since: Option<u64>,
    /// Servers down: (restart step, server, index of its crash event).
    pub(super) down: Vec<(u64, u32, usize)>,
    /// Splits and moved entries each server counted before its kills.
    pub(super) counted: Vec<(u64, u64)>,
    /// The negative control (`SimOptions::ack_before_durable`).
    pub(super) at_once: bool,
    pub(super) servers: u32,
}

impl Kills {
    /// Draws the plan of `o.crashes` kills.
    pub(super) fn draw(o: &SimOptions) -> Kills {
        let n = o.servers;
        let mut rng = StdRng::seed_from_u64(o.seed ^ 0xc1a5_7e55);
        let total = o.files_per_server * n as u64;
        // With partitions bounded per server, the directory's splits end once it is
        // spread (2^D - 1 of them, `split_depth_limit`), early in a long run: each kill
        // is then armed at a count of splits seen rather than of creates, so that it
        // lands inside a split.
        let bounded_splits = (o.partitions_per_server > 0)
            .then(|| (1u64 << split_depth_limit(n, o.partitions_per_server)) - 1);
        // Each kill: a split crash point, and the progress at which it is armed.
        // Unbounded: creates acknowledged, in the first 5% for a point only remote
        // splits pass, else 5-90%. Bounded: splits seen, before the directory covers
        // the servers (about N - 1 splits) for a remote point, else in the first 90% of
        // the splits.
        let mut plan: Vec<(u64, &'static str)> = (0..o.crashes)
            .map(|_| {
                let p = SPLIT_CRASH_POINTS[rng.random_range(0..SPLIT_CRASH_POINTS.len())];
                let remote = REMOTE_POINTS.contains(&p);
                let at = match bounded_splits {
                    Some(e) if remote => rng.random_range(0..=(n as u64).saturating_sub(2).min(e)),
                    Some(e) => rng.random_range(0..=e * 9 / 10),
                    None if remote => rng.random_range(0..=total / 20),
                    None => rng.random_range(total / 20..=(total * 9 / 10).max(total / 20)),
                };
                (at, p)
            })
            .collect();
        plan.sort_unstable();
        Kills {
            rng,
            bounded_splits,
            plan,
            next: 0,
            armed_since: None,
            down: Vec::new(),
            counted: vec![(0, 0); n as usize],
            at_once: o.ack_before_durable,
            servers: n,
        }
    }

    /// The server to kill at the end of step `step`, and the split crash point it
    /// stopped at, if any.
    ///
    /// A kill inside a split: once the kill's point of the workload (`splits` seen with
    /// partitions bounded, else `acked` creates) is reached, a split crash point drawn
    /// from the seed is armed; the first server to reach it stops there (its crash hook)
    /// and is killed at the end of this step. If no server reaches it within
    /// `RETARGET_STEPS`, any split crash point will do; within `ARMED_STEPS`, any server
    /// is killed instead.
    pub(super) fn due(
        &mut self,
        arming: &Mutex<Arming>,
        step: u64,
        (splits, acked): (u64, u64),
        done: bool,
    ) -> Option<(u32, Option<&'static str>)> {
        let fired = lock(arming).fired.take();
        if let Some((s, p)) = fired {
            return Some((s, Some(p)));
        }
        let &(at, point) = self.plan.get(self.next)?;
        if done {
            return None;
        }
        let progress = match self.bounded_splits {
            Some(_) => splits,
            None => acked,
        };
        match self.armed_since {
            None if progress >= at && self.at_once => {
                // The negative control kills between steps at once: right after a
                // split's sync there is little unsynced to lose.
                self.armed_since = Some(step);
                self.any_up()
            }
            None if progress >= at => {
                lock(arming).armed = Some(Some(point));
                self.armed_since = Some(step);
                None
            }
            Some(since) if step - since == RETARGET_STEPS => {
                lock(arming).armed = Some(None);
                None
            }
            Some(since) if step - since >= ARMED_STEPS => {
                lock(arming).armed = None;
                self.any_up()
            }
            _ => None,
        }
    }

    /// A server that is up, drawn from the seed (with no point: between steps).
    fn any_up(&mut self) -> Option<(u32, Option<&'static str>)> {
        let up: Vec<u32> = (0..self.servers)
            .filter(|s| !self.down.iter().any(|d| d.1 == *s))
            .collect();
        if up.is_empty() {
            return None;
        }
        Some((up[self.rng.random_range(0..up.len())], None))
    }
}
