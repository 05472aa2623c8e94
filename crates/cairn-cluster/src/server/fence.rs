//! Fencing of replaced leaders' calls between servers.
//!
//! A leader that was paused (SIGSTOP, a long stall) or cut off goes on for a moment
//! after its group elected another: its background runner may drive an intent again,
//! or a call it retries may arrive late. Every step of an intent is idempotent only
//! while the intent lives; once the new leader has finished it (a mkdir's memo
//! forgotten, a rename's destination released), the same call from the old leader
//! would act anew — a second directory with no entry, a name held for ever.
//!
//! So every call between servers carries the term in which its sender leads its group
//! (`PeerHeader.term`). The receiver keeps, per sending group, the highest term it has
//! seen (a row, `F group`, written and committed before the first call of a new term
//! is served, so that a later leader of the receiver's own group knows it too) and
//! refuses calls of an earlier term. A call holds its group's fence shared while it
//! runs; raising the fence takes it exclusively, so a call of the old term either ended
//! before the first call of the new one began, or is refused.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{OwnedRwLockReadGuard, RwLock};

use super::node::{Batch, Fail, Node, NodeRef, R};
use crate::rows::{be32, fence_key, TAG_FENCE};

/// Held while a call from another server runs: its group's fence, shared.
pub(crate) type FenceGuard = OwnedRwLockReadGuard<u64>;

/// The highest term seen from each group that called this server.
#[derive(Default)]
pub(crate) struct Fences(Mutex<HashMap<u32, Arc<RwLock<u64>>>>);

impl Fences {
    /// The fence of calls from `group` (0 until a replicated group's leader calls).
    fn of(&self, group: u32) -> Arc<RwLock<u64>> {
        self.0.lock().entry(group).or_default().clone()
    }

    /// Replaces what is kept in memory by the fence rows `rows` (a replica that takes
    /// up a term, or a server that starts).
    fn load(&self, rows: Vec<(Vec<u8>, Vec<u8>)>) -> R<()> {
        let mut map = HashMap::new();
        for (k, v) in rows {
            let group = be32(&k, 1).ok_or(Fail::Errno(libc::EIO))?;
            let term = v
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
                .ok_or(Fail::Errno(libc::EIO))?;
            map.insert(group, Arc::new(RwLock::new(term)));
        }
        *self.0.lock() = map;
        Ok(())
    }
}

/// How many times a call may find its group's fence raised by another call of a newer
/// term meanwhile before it is asked to come again.
const ENTER_TRIES: usize = 4;

impl Node {
    /// Loads the fences from this server's rows (at recovery).
    pub(crate) fn load_fences(&self) -> R<()> {
        let rows = self.scan(&[TAG_FENCE], None, usize::MAX)?;
        self.fences.load(rows)
    }

    /// The term this server leads its group in, for the calls it makes (0 for a group
    /// of one, or a replica that does not lead).
    pub(crate) fn leading_term(&self) -> u64 {
        self.replica()
            .and_then(|r| r.core.proposed())
            .map_or(0, |(term, _)| term)
    }

    /// Admits a call from group `from`'s leader of `term`: the guard to hold while it
    /// runs; `Fail::Superseded` if a later leader of that group has called already.
    /// The first call of a newer term records it durably first.
    pub(crate) async fn fence_enter(self: &NodeRef, from: u32, term: u64) -> R<FenceGuard> {
        for _ in 0..ENTER_TRIES {
            let fence = self.fences.of(from);
            let seen = fence.clone().read_owned().await;
            match term.cmp(&*seen) {
                std::cmp::Ordering::Equal => return Ok(seen),
                std::cmp::Ordering::Less => {
                    metrics::counter!("cairn_peer_calls_fenced_total").increment(1);
                    tracing::info!(
                        server = self.id,
                        "a call from group {from}'s leader of term {term} refused: term {} \
                         called already",
                        *seen
                    );
                    return Err(Fail::Superseded);
                }
                std::cmp::Ordering::Greater => {}
            }
            drop(seen);
            let mut raise = fence.write_owned().await;
            if term > *raise {
                self.blocking(move |n| n.write_fence(from, term)).await?;
                *raise = term;
            }
        }
        Err(Fail::Busy)
    }

    fn write_fence(&self, from: u32, term: u64) -> R<()> {
        let mut b = Batch::new();
        b.put_raw(&fence_key(from), &term.to_le_bytes());
        self.apply(b)?;
        self.durable()
    }
}
