//! The requests a client sends, counted by kind ([`Rpc`]): one per attempt that reaches
//! the wire (a retry or a redirect counts again), whatever carries it (a create sent on
//! a stream or in a batch counts as one `MAKE`). `cairn fs-bench` reports them per
//! operation through the mount ([`cairn_fs::FileSystem::requests_sent`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// Kinds of client requests, by the RPC that serves them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rpc {
    Lookup,
    GetAttr,
    SetAttr,
    Make,
    Link,
    Remove,
    Rename,
    OpenDir,
    ReadDir,
    ParentOf,
    Readlink,
    Open,
    Release,
    Read,
    Write,
    Fsync,
    GetXattr,
    SetXattr,
    ListXattr,
    RemoveXattr,
    StatFs,
}

/// Names of the [`Rpc`]s, in order.
const NAMES: [&str; 21] = [
    "LOOKUP",
    "GETATTR",
    "SETATTR",
    "MAKE",
    "LINK",
    "REMOVE",
    "RENAME",
    "OPENDIR",
    "READDIR",
    "PARENTOF",
    "READLINK",
    "OPEN",
    "RELEASE",
    "READ",
    "WRITE",
    "FSYNC",
    "GETXATTR",
    "SETXATTR",
    "LISTXATTR",
    "REMOVEXATTR",
    "STATFS",
];

/// Requests sent, by [`Rpc`].
#[derive(Default)]
pub(crate) struct Counts([AtomicU64; NAMES.len()]);

impl Counts {
    /// One more request of kind `rpc`.
    pub(crate) fn add(&self, rpc: Rpc) {
        self.0[rpc as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far, by kind name (every kind, zeros included).
    pub(crate) fn get(&self) -> Vec<(&'static str, u64)> {
        NAMES
            .iter()
            .zip(&self.0)
            .map(|(n, c)| (*n, c.load(Ordering::Relaxed)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_counts_under_its_own_name() {
        let c = Counts::default();
        c.add(Rpc::Lookup);
        c.add(Rpc::StatFs);
        c.add(Rpc::StatFs);
        let got = c.get();
        assert_eq!(got.len(), NAMES.len());
        for (name, n) in got {
            let want = match name {
                "LOOKUP" => 1,
                "STATFS" => 2,
                _ => 0,
            };
            assert_eq!(n, want, "{name}");
        }
    }
}
