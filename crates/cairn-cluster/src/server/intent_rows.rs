//! Intent rows (`T id`, [`proto::IntentRow`]): what every kind shares, the typed access
//! to one kind's fields, and the upgrade of a store whose intent rows are in the layout
//! of rows version 1 ([`proto::IntentRowV1`], one flat message for every kind; see
//! FORMAT.md, "Cluster rows").
//!
//! The upgrade rewrites every intent row of the old layout in the current one once, in
//! one atomic batch with the server row's new `rows_version`, and makes it durable
//! before the server loads its intents (DESIGN.md, "Intents"): the running code knows
//! only the current layout.

use std::path::Path;

use prost::Message;

use super::node::{Fail, R};
use crate::error::ServerError;
use crate::proto;
use crate::proto::intent_row::Op;
use crate::proto::{IntentKind, IntentState};
use crate::rows::{be64, single, ROWS_VERSION, TAG_INTENT, TAG_SERVER};

/// The name of an intent kind (logs, status).
pub(crate) fn kind_name(k: IntentKind) -> &'static str {
    match k {
        IntentKind::Mkdir => "mkdir",
        IntentKind::Link => "link",
        IntentKind::Unlink => "unlink",
        IntentKind::Rmdir => "rmdir",
        IntentKind::Rename => "rename",
        IntentKind::Split => "split",
        IntentKind::DirPerms => "dir-perms",
        IntentKind::Unspecified => "unknown",
    }
}

impl proto::IntentRow {
    /// A new intent of `op` in `state`, created now, with no follow-ups yet.
    pub(crate) fn new(state: IntentState, op: Op) -> proto::IntentRow {
        let mut row = proto::IntentRow {
            created_ms: super::node::now_ms(),
            op: Some(op),
            ..Default::default()
        };
        row.set_state(state);
        row
    }

    /// Its kind.
    pub(crate) fn kind(&self) -> IntentKind {
        match &self.op {
            Some(Op::Mkdir(_)) => IntentKind::Mkdir,
            Some(Op::Link(_)) => IntentKind::Link,
            Some(Op::Unlink(_)) => IntentKind::Unlink,
            Some(Op::Rmdir(_)) => IntentKind::Rmdir,
            Some(Op::Rename(_)) => IntentKind::Rename,
            Some(Op::Split(_)) => IntentKind::Split,
            Some(Op::DirPerms(_)) => IntentKind::DirPerms,
            None => IntentKind::Unspecified,
        }
    }

    /// Whether it is committed (only rolls forward).
    pub(crate) fn committed(&self) -> bool {
        self.state() == IntentState::Committed
    }

    /// The directory it is about, and the name there if its kind has one (logs,
    /// `cairn cluster check`).
    pub(crate) fn subject(&self) -> (u64, &[u8]) {
        match &self.op {
            Some(Op::Mkdir(i)) => (i.dir, &i.name),
            Some(Op::Link(i)) => (i.dir, &i.name),
            Some(Op::Unlink(i)) => (i.dir, &i.name),
            Some(Op::Rmdir(i)) => (i.dir, &i.name),
            Some(Op::Rename(i)) => (i.dir, &i.name),
            Some(Op::Split(i)) => (i.dir, b""),
            Some(Op::DirPerms(i)) => (i.dir, b""),
            None => (0, b""),
        }
    }

    /// The servers that prepared the removal of a directory (an rmdir's, or a
    /// rename's replaced one); `EIO` for kinds that remove none.
    pub(crate) fn prepared_on_mut(&mut self) -> R<&mut Vec<u32>> {
        match &mut self.op {
            Some(Op::Rmdir(i)) => Ok(&mut i.prepared_on),
            Some(Op::Rename(i)) => Ok(&mut i.prepared_on),
            _ => Err(Fail::Errno(libc::EIO)),
        }
    }

    /// A rename's fields; `EIO` for another kind.
    pub(crate) fn rename_mut(&mut self) -> R<&mut proto::RenameIntent> {
        match &mut self.op {
            Some(Op::Rename(i)) => Ok(i),
            _ => Err(Fail::Errno(libc::EIO)),
        }
    }
}

/// The intent row of rows version 1 `old` in the current layout: its kind's fields
/// (the others were never written for it). `None` for a kind version 1 did not have.
pub(crate) fn from_v1(old: proto::IntentRowV1) -> Option<proto::IntentRow> {
    let op = match old.kind {
        1 => Op::Mkdir(proto::MkdirIntent {
            dir: old.dir,
            name: old.name,
            mode: old.mode,
            uid: old.uid,
            gid: old.gid,
            time: old.time,
            target: old.target,
            ino: old.ino,
            token: 0,
        }),
        2 => Op::Link(proto::LinkIntent {
            dir: old.dir,
            name: old.name,
            ino: old.ino,
            time: old.time,
        }),
        3 => Op::Unlink(proto::UnlinkIntent {
            dir: old.dir,
            name: old.name,
            ino: old.ino,
        }),
        4 => Op::Rmdir(proto::RmdirIntent {
            dir: old.dir,
            name: old.name,
            ino: old.ino,
            prepared_on: old.prepared_on,
        }),
        5 => Op::Rename(proto::RenameIntent {
            dir: old.dir,
            name: old.name,
            ino: old.ino,
            kind_bits: old.kind_bits,
            time: old.time,
            target: old.target,
            new_dir: old.new_dir,
            new_name: old.new_name,
            flags: old.flags,
            target_ino: old.target_ino,
            target_kind: old.target_kind,
            prepared_on: old.prepared_on,
        }),
        6 => Op::Split(proto::SplitIntent {
            dir: old.dir,
            index: old.index,
            depth: old.depth,
            target: old.target,
        }),
        7 => Op::DirPerms(proto::DirPermsIntent { dir: old.dir }),
        _ => return None,
    };
    Some(proto::IntentRow {
        // Version 1's states are the enum's numbers.
        state: old.state as i32,
        created_ms: old.created_ms,
        followups: old.followups,
        followups_done: old.followups_done,
        // Version 1 had no request tokens.
        token: 0,
        op: Some(op),
    })
}

/// Brings the rows of the store `ks` (at `dir`; its server row `server` read and
/// checked) to [`ROWS_VERSION`]: every intent row still in the layout of version 1 is
/// rewritten in the current one, in one batch with the server row's version, made
/// durable. Such rows are those of a version-1 store, or rows that a build from before
/// version 2 (which does not read `rows_version`) wrote into a version-2 store; the two
/// layouts never decode as each other. Refuses a store of a later version than this
/// build knows.
pub(crate) fn upgrade_rows(
    ks: &cairn::Keyspace,
    dir: &Path,
    mut server: proto::ServerRow,
) -> Result<(), ServerError> {
    let version = server.rows_version.max(1);
    if version > ROWS_VERSION {
        return Err(ServerError::RowsVersion {
            dir: dir.to_path_buf(),
            version,
        });
    }
    let store = |source| ServerError::Store {
        dir: dir.to_path_buf(),
        source,
    };
    let damaged = |what: String| ServerError::Damaged {
        dir: dir.to_path_buf(),
        what,
    };
    let mut b = cairn::WriteBatch::new();
    let mut n = 0usize;
    for kv in ks.prefix([TAG_INTENT]) {
        let (k, v) = kv.map_err(store)?;
        if proto::IntentRow::decode(&v[..]).is_ok() {
            continue;
        }
        let id = be64(&k, 1).ok_or_else(|| damaged(format!("intent key {k:02x?}")))?;
        let old = proto::IntentRowV1::decode(&v[..])
            .map_err(|e| damaged(format!("intent {id} (in neither layout): {e}")))?;
        let kind = old.kind;
        let row = from_v1(old)
            .ok_or_else(|| damaged(format!("intent {id} (rows version 1): kind {kind}")))?;
        b.put(&k, row.encode_to_vec());
        n += 1;
    }
    if version == ROWS_VERSION && n == 0 {
        return Ok(());
    }
    server.rows_version = ROWS_VERSION;
    b.put(single(TAG_SERVER), server.encode_to_vec());
    ks.write(b).map_err(store)?;
    ks.db().flush().map_err(store)?;
    tracing::info!(
        server = server.server_id,
        "store {}: rows version {version} brought to {ROWS_VERSION} ({n} intent rows rewritten)",
        dir.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v1(kind: u32, state: u32) -> proto::IntentRowV1 {
        proto::IntentRowV1 {
            kind,
            state,
            created_ms: 77,
            dir: 5,
            name: b"n".to_vec(),
            ino: 9,
            kind_bits: libc::S_IFDIR,
            mode: 0o40755,
            uid: 3,
            gid: 4,
            time: 11,
            target: 2,
            new_dir: 6,
            new_name: b"m".to_vec(),
            flags: 1,
            target_ino: 12,
            target_kind: libc::S_IFREG,
            prepared_on: vec![1, 2],
            index: 3,
            depth: 1,
            followups: vec![proto::FollowUp {
                server: 1,
                call: Some(proto::follow_up::Call::ForgetMemo(proto::IntentRef {
                    h: None,
                })),
            }],
            followups_done: 1,
        }
    }

    #[test]
    fn every_kind_of_version_1_converts() {
        for (k, kind) in [
            (1, IntentKind::Mkdir),
            (2, IntentKind::Link),
            (3, IntentKind::Unlink),
            (4, IntentKind::Rmdir),
            (5, IntentKind::Rename),
            (6, IntentKind::Split),
            (7, IntentKind::DirPerms),
        ] {
            for (s, state) in [(1, IntentState::Prepared), (2, IntentState::Committed)] {
                let row = from_v1(v1(k, s)).unwrap();
                assert_eq!(row.kind(), kind);
                assert_eq!(row.state(), state);
                assert_eq!((row.created_ms, row.followups_done), (77, 1));
                assert_eq!(row.followups.len(), 1);
                assert_eq!(row.subject().0, 5);
                // Neither layout decodes as the other.
                let bytes = row.encode_to_vec();
                assert!(proto::IntentRowV1::decode(&bytes[..]).is_err(), "{kind:?}");
                let old = v1(k, s).encode_to_vec();
                assert!(proto::IntentRow::decode(&old[..]).is_err(), "{kind:?}");
            }
        }
        assert!(from_v1(v1(8, 1)).is_none());
        match from_v1(v1(5, 1)).unwrap().op {
            Some(Op::Rename(r)) => {
                assert_eq!((r.new_dir, &r.new_name[..], r.flags), (6, &b"m"[..], 1));
                assert_eq!(
                    (r.target, r.target_ino, r.target_kind),
                    (2, 12, libc::S_IFREG)
                );
                assert_eq!(
                    (r.kind_bits, r.time, &r.prepared_on[..]),
                    (libc::S_IFDIR, 11, &[1, 2][..])
                );
            }
            op => panic!("{op:?}"),
        }
        match from_v1(v1(1, 2)).unwrap().op {
            Some(Op::Mkdir(m)) => {
                assert_eq!(
                    (m.mode, m.uid, m.gid, m.time, m.target, m.ino),
                    (0o40755, 3, 4, 11, 2, 9)
                );
            }
            op => panic!("{op:?}"),
        }
        match from_v1(v1(6, 1)).unwrap().op {
            Some(Op::Split(s)) => assert_eq!((s.dir, s.index, s.depth, s.target), (5, 3, 1, 2)),
            op => panic!("{op:?}"),
        }
    }
}
