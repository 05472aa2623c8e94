//! Replication of a server's rows over a Raft group (openraft).
//!
//! A server id of the cluster file is a group of replicas. Every change the group's
//! leader makes (a [`Change`]: the rows of one `Node::apply` batch) is a Raft log entry;
//! it is visible at once on the leader through its [`Overlay`] (so that the next
//! operation's checks see it), reaches the store of every replica — the leader's too —
//! only once a majority holds it, in log order, and the reply to the client waits for
//! that ([`Replica::settle`]). A leader that loses its term drops the overlay: nothing a
//! majority did not take was ever written to any store. DESIGN.md, "Replication".
//!
//! - [`log`]: the Raft log and vote, in keyspace [`LOG_KEYSPACE`] of the server's store;
//! - [`machine`]: the state machine (the rows, in one of two state keyspaces) and its
//!   snapshots (an engine checkpoint's rows, streamed in pieces, installed atomically);
//! - [`net`]: the Raft messages over gRPC (service `Raft`) between replicas of a group.

pub(crate) mod log;
pub(crate) mod machine;
pub(crate) mod members;
pub(crate) mod net;
pub(crate) mod overlay;
pub(crate) mod replica;

use serde::{Deserialize, Serialize};

pub(crate) use replica::{Replica, Role};

openraft::declare_raft_types!(
    /// The Raft types of a group: log entries carry [`Change`]s; snapshots are files.
    pub TypeConfig:
        D = Change,
        R = (),
        SnapshotData = tokio::fs::File,
);

/// A replica's Raft node id (its id in the cluster file's group).
pub(crate) type NodeId = u64;
/// The Raft instance of a replica.
pub(crate) type Raft = openraft::Raft<TypeConfig>;
/// A log id (term, leader, index).
pub(crate) type LogId = openraft::LogId<NodeId>;
/// An error of the storage traits.
pub(crate) type StorageError = openraft::StorageError<NodeId>;

/// The keyspace of a replicated server's store that holds the Raft log, the vote, and
/// which state keyspace is in use.
pub const LOG_KEYSPACE: u8 = 5;
/// The other state keyspace (the first is [`crate::KEYSPACE`]): an installed snapshot
/// is written into the one not in use, then made the one in use in one write.
pub const ALT_KEYSPACE: u8 = 4;

/// One change of a group's rows: the rows of one batch the leader of term `term` made
/// (`None`: delete the row), numbered `seq` among its proposals.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Change {
    /// The term of the leader that proposed it.
    pub term: u64,
    /// Its number among that leader's proposals: increasing, from the clock when the
    /// leader took up the term (a leader restarted into the same term never reuses
    /// a number of its earlier life).
    pub seq: u64,
    /// Keys and new values (`None`: deleted), applied in order.
    pub rows: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "change {}/{} ({} rows)",
            self.term,
            self.seq,
            self.rows.len()
        )
    }
}

/// A storage error of `what`, from any error.
pub(crate) fn io_err(
    subject: openraft::ErrorSubject<NodeId>,
    verb: openraft::ErrorVerb,
    e: impl std::fmt::Display,
) -> StorageError {
    let io = std::io::Error::other(e.to_string());
    openraft::StorageIOError::new(subject, verb, openraft::AnyError::new(&io)).into()
}

/// Encodes a serde value for the log, the rows or the wire.
pub(crate) fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, String> {
    bincode::serialize(v).map_err(|e| e.to_string())
}

/// The length of [`encode`]'s bytes for `v` (`usize::MAX` if it cannot be encoded).
pub(crate) fn encoded_len<T: Serialize>(v: &T) -> usize {
    bincode::serialized_size(v).map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX))
}

/// Decodes a serde value written by [`encode`].
pub(crate) fn decode<T: serde::de::DeserializeOwned>(b: &[u8]) -> Result<T, String> {
    bincode::deserialize(b).map_err(|e| e.to_string())
}
