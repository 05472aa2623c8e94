//! Test hooks (cargo feature `test-hooks`): what tests and the cluster simulation set
//! on a server to stop it at a named point, to make it an older server, or to cut its
//! power. A server built without the feature has none of them.

use std::sync::Arc;

/// The test hooks of a server ([`super::ServerOptions::hooks`]).
#[derive(Clone, Debug, Default)]
pub struct Hooks {
    /// Stop as if killed when reaching this named point (see DESIGN.md, "Cluster",
    /// crash points).
    pub crash_at: Option<String>,
    /// Asked at every named crash point; `true` stops the server there as if killed
    /// (the simulation's kills inside splits, `cairn cluster-sim`).
    pub crash_hook: Option<CrashHook>,
    /// Answer `MakeStream` UNIMPLEMENTED, as a server built before streamed creates
    /// does (its clients then send their creates as batches).
    pub without_streams: bool,
    /// The store's file operations go through this record of what a power cut could
    /// still lose (`cairn::Options::power_loss`; syncs are recorded, not done), so that
    /// a test can cut the power and restart the server with only what it made durable.
    pub power_loss: Option<Arc<cairn::fault::PowerLoss>>,
    /// The store's file operations are checked by this injector first
    /// (`cairn::Options::fault_injector`), so that a test can fill the disk.
    pub fault: Option<Arc<cairn::fault::FaultInjector>>,
}

impl Hooks {
    /// Whether the server stops at crash point `name` (server `id`).
    pub(crate) fn stops_at(&self, id: u32, name: &str) -> bool {
        self.crash_at.as_deref() == Some(name)
            || self.crash_hook.as_ref().is_some_and(|h| (h.0)(id, name))
    }
}

/// The hook of [`Hooks::crash_hook`]: called with the server's id and the point's name
/// (see [`SPLIT_CRASH_POINTS`]) each time a server passes a crash point.
#[derive(Clone)]
pub struct CrashHook(pub Arc<CrashFn>);

/// The function of a [`CrashHook`]: (server id, point) → stop there.
pub type CrashFn = dyn Fn(u32, &str) -> bool + Send + Sync;

impl std::fmt::Debug for CrashHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CrashHook")
    }
}

/// The crash points of a split (split.rs), in the order a split passes them: on the
/// source with its prepared intent durable and nothing sent; on the target with the
/// moved entries durable as an incoming partition, before it answers; on the source
/// with the transfer acknowledged, before the commit; on the source with the commit
/// written but not yet synced; on the source after the commit is durable, before the
/// target activates; on the target before it activates.
pub const SPLIT_CRASH_POINTS: &[&str] = &[
    "split:before-accept",
    "accept:after-write",
    "split:after-accept",
    "split:commit-unsynced",
    "split:after-commit",
    "activate:before",
];
