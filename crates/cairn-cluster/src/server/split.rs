//! GIGA+ splits. The source holds partition `i` at depth `r`; the upper half of its
//! range moves to the new partition `j = i + 2^r` on the server GIGA+ places it:
//!
//! 1. the source holds `i` (changes of its names wait) and writes a prepared intent;
//! 2. it reads the moving entries and streams them to the target, which writes them
//!    with partition `j` *incoming* (invisible, unavailable) in one batch, durably,
//!    replacing what an earlier attempt left;
//! 3. the source, in one batch, deletes the moved entries, sets `i`'s depth to `r+1`
//!    and commits the intent: from here on the moved names belong to `j`;
//! 4. the target activates `j` (a follow-up of the intent, retried until done).
//!
//! At every instant each entry belongs to exactly one partition: before step 3 the
//! source's `i` owns it (the target's copy is invisible), after it `j` does. A
//! prepared split found after a crash is redone from step 2; a committed one finishes
//! step 4. When `j`'s server is the source itself nothing moves: step 3 alone.

use std::sync::Arc;

use super::intent::Driving;
use super::names::decode_entry;
use super::node::{errno, Batch, Fail, Node, NodeRef, R};
use super::state::{Part, State};
use crate::giga::{self, child, covers, home_of, name_hash, rev_range, server_of, MAX_DEPTH};
use crate::proto;
use crate::proto::follow_up::Call;
use crate::proto::intent_row::Op;
use crate::proto::IntentState;
use crate::rows::{
    entry_key, entry_pos_key, entry_prefix, intent_key, partition_key, prefix_successor,
    PART_ACTIVE, PART_INCOMING,
};

/// Bytes of entries per chunk of a partition transfer (well below the message limit).
const CHUNK_BYTES: usize = 4 << 20;
/// Most entries a partition transfer may carry.
const MAX_TRANSFER_ENTRIES: usize = 64 << 20;

impl Node {
    /// Starts splitting partition `(dir, idx)` in the background if it still needs to.
    pub(crate) fn spawn_split(self: &NodeRef, dir: u64, idx: u32) {
        let node = self.clone();
        // In the term of whoever starts it (`super::term`).
        let Ok(term) = self.task_term() else {
            return;
        };
        tokio::spawn(super::term::in_term(term, async move {
            let id = match node.blocking(move |n| n.split_begin(dir, idx)).await {
                Ok(Some(id)) => id,
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!(
                        server = node.id,
                        "split of {dir:#x}/{idx} not started: {e:?}"
                    );
                    return;
                }
            };
            let _g = Driving::adopt(&node, id);
            if let Err(e) = node.split_run(id).await {
                tracing::info!(
                    server = node.id,
                    "split {id} of {dir:#x}/{idx}: later: {e:?}"
                );
            }
        }));
    }

    /// Writes the prepared intent of a split of `(dir, idx)`, if it still needs one.
    fn split_begin(&self, dir: u64, idx: u32) -> R<Option<u64>> {
        let mut m = self.state();
        if !self.wants_split(&m, dir, idx) {
            return Ok(None);
        }
        if m.intents
            .any(|r| matches!(&r.op, Some(Op::Split(s)) if s.dir == dir && s.index == idx))
        {
            return Ok(None);
        }
        let Some(depth) = m.parts.get(dir, idx).map(|p| p.depth) else {
            return Ok(None);
        };
        if m.names.any_in(dir, idx, depth) {
            return Ok(None);
        }
        let j = child(idx, depth);
        let row = proto::IntentRow::new(
            IntentState::Prepared,
            Op::Split(proto::SplitIntent {
                dir,
                index: idx,
                depth,
                target: server_of(home_of(dir), j, self.n),
            }),
        );
        let id = self.begin_intent_plain(&mut m, row)?;
        drop(m);
        self.durable()?;
        Ok(Some(id))
    }

    /// Records an intent that holds no names.
    fn begin_intent_plain(&self, st: &mut State, row: proto::IntentRow) -> R<u64> {
        let id = self.alloc_intent()?;
        let mut b = Batch::new();
        b.put(&intent_key(id), &row);
        self.apply(b)?;
        st.intents.begin(id, row);
        Ok(id)
    }

    /// Runs prepared split intent `id` (steps 2–4; see the module documentation).
    pub(crate) async fn split_run(self: &NodeRef, id: u64) -> R<()> {
        let Some(Op::Split(row)) = self.intent_row(id)?.op else {
            return errno(libc::EIO);
        };
        let (dir, idx, r, t) = (row.dir, row.index, row.depth, row.target);
        let j = child(idx, r);
        // Step 2: hold the partition and read what moves.
        let got = self
            .blocking(move |n| {
                let mut m = n.state();
                let Some(p) = m.parts.get(dir, idx) else {
                    return Ok(None);
                };
                if p.depth != r {
                    return Ok(None);
                }
                if p.splitting
                    || p.removing.is_some()
                    || p.state != PART_ACTIVE
                    || m.names.any_in(dir, idx, r)
                {
                    return Err(Fail::Busy);
                }
                m.parts.set_splitting(dir, idx, true);
                let read = (|| {
                    let (lo, hi) = rev_range(j, r + 1);
                    let lo_key = entry_pos_key(dir, lo, b"");
                    let mut hp = entry_prefix(dir);
                    hp.extend_from_slice(&hi.to_be_bytes());
                    let rows = if t == n.id {
                        Vec::new()
                    } else {
                        n.scan_range(&lo_key, prefix_successor(&hp).as_deref())?
                    };
                    let perms = n.perms_copy(dir)?;
                    R::Ok((rows, perms))
                })();
                if read.is_err() {
                    m.parts.set_splitting(dir, idx, false);
                }
                read.map(Some)
            })
            .await?;
        let Some((rows, perms)) = got else {
            // The partition is gone or split already: nothing to do.
            self.blocking(move |n| n.finish_intent(id)).await?;
            return Ok(());
        };
        let res = self
            .split_transfer(id, dir, j, r + 1, perms, &rows, t)
            .await;
        if let Err(e) = res {
            let _ = self
                .blocking(move |n| {
                    n.state().parts.set_splitting(dir, idx, false);
                    Ok(())
                })
                .await;
            return Err(e);
        }
        self.point("split:after-accept")?;
        // Step 3: the moved names belong to j from this batch on.
        let keys: Vec<Vec<u8>> = rows.into_iter().map(|(k, _)| k).collect();
        let scope = super::grants::Scope::new(0);
        let moved = super::grants::in_scope(scope.clone(), async {
            let moved = self
                .blocking(move |n| {
                    let mut m = n.state();
                    let res = n.split_commit(&mut m, id, &keys);
                    m.parts.set_splitting(dir, idx, false);
                    drop(m);
                    let moved = res?;
                    n.point("split:commit-unsynced")?;
                    n.durable()?;
                    Ok(moved)
                })
                .await?;
            if t != self.id {
                // Absent names of the moved range were leased here too.
                self.grants.changed_dir(dir);
            }
            R::Ok(moved)
        })
        .await?;
        // Leases on the moved names, granted here, end before their new server
        // serves them (step 4).
        scope.settled(None).await;
        self.counters.split_done(moved);
        tracing::info!(
            server = self.id,
            "split {dir:#x}/{idx} at depth {r}: {moved} entries to partition {j} on server {t}"
        );
        self.point("split:after-commit")?;
        if t != self.id {
            // Step 4.
            self.run_followups(id).await?;
        }
        Ok(())
    }

    /// Step 3 of split `id`: one batch.
    fn split_commit(&self, m: &mut State, id: u64, keys: &[Vec<u8>]) -> R<u64> {
        let mut row = m.intents.row(id)?;
        let Some(Op::Split(split)) = &row.op else {
            return errno(libc::EIO);
        };
        let (dir, idx, r, t) = (split.dir, split.index, split.depth, split.target);
        let j = child(idx, r);
        let mut p = m
            .parts
            .get(dir, idx)
            .cloned()
            .ok_or(Fail::Errno(libc::EIO))?;
        let mut b = Batch::new();
        let moved = if t == self.id {
            // Nothing moves: count what is now j's.
            let (lo, hi) = rev_range(j, r + 1);
            let lo_key = entry_pos_key(dir, lo, b"");
            let mut hp = entry_prefix(dir);
            hp.extend_from_slice(&hi.to_be_bytes());
            self.scan_range(&lo_key, prefix_successor(&hp).as_deref())?
                .len() as u64
        } else {
            for k in keys {
                b.delete(k);
            }
            keys.len() as u64
        };
        p.depth = r + 1;
        p.entries = p.entries.saturating_sub(moved);
        p.splitting = false;
        b.put(&partition_key(dir, idx), &p.row());
        let jp = Part::new(r + 1, PART_ACTIVE, moved);
        if t == self.id {
            b.put(&partition_key(dir, j), &jp.row());
            b.delete(&intent_key(id));
        } else {
            row.set_state(IntentState::Committed);
            row.followups = vec![proto::FollowUp {
                server: t,
                call: Some(Call::Activate(proto::PartitionRef {
                    h: None,
                    dir,
                    index: j,
                })),
            }];
            b.put(&intent_key(id), &row);
        }
        self.apply(b)?;
        m.parts.insert(dir, idx, p);
        if t == self.id {
            m.parts.insert(dir, j, jp);
            m.intents.finish(id);
        } else {
            m.intents.put(id, row);
        }
        Ok(moved)
    }

    /// Step 2's transfer: streams the moving entries to the target in chunks.
    #[allow(clippy::too_many_arguments)]
    async fn split_transfer(
        self: &NodeRef,
        id: u64,
        dir: u64,
        j: u32,
        depth: u32,
        perms: proto::DirPerms,
        rows: &[(Vec<u8>, Vec<u8>)],
        t: u32,
    ) -> R<()> {
        if t == self.id {
            return Ok(());
        }
        self.point("split:before-accept")?;
        let plen = entry_prefix(dir).len() + 8;
        let mut chunks = Vec::new();
        let mut cur = Vec::new();
        let mut bytes = 0;
        for (k, v) in rows {
            let e = decode_entry(v)?;
            bytes += k.len() + 16;
            cur.push(proto::DirEntry {
                name: k[plen..].to_vec(),
                ino: e.ino,
                kind: e.kind,
                token: e.token,
                attr: None,
            });
            if bytes >= CHUNK_BYTES {
                chunks.push(std::mem::take(&mut cur));
                bytes = 0;
            }
        }
        if !cur.is_empty() || chunks.is_empty() {
            chunks.push(cur);
        }
        let n = chunks.len();
        let msgs: Vec<proto::PartitionChunk> = chunks
            .into_iter()
            .enumerate()
            .map(|(i, entries)| proto::PartitionChunk {
                h: self.ph((self.id, id), None),
                dir,
                index: j,
                depth,
                perms: Some(perms),
                entries,
                first: i == 0,
                last: i + 1 == n,
            })
            .collect();
        let conn = self.peers.get(t as usize).ok_or(Fail::Errno(libc::EIO))?;
        let (at, mut c) = conn.peer();
        let mut req = tonic::Request::new(tokio_stream::iter(msgs));
        req.set_timeout(self.peer_timeout * 4);
        match c.accept_partition(req).await {
            Ok(rep) => match Fail::from_status(rep.into_inner().status.as_ref()) {
                Some(f) => Err(f),
                None => Ok(()),
            },
            Err(s) => {
                conn.failed(at, &s);
                Err(Fail::Down(format!("server {t}: {}", s.message())))
            }
        }
    }

    /// The target side of a split: writes partition `j` incoming with the entries
    /// (replacing an earlier attempt's), durably.
    pub(crate) async fn p_accept_partition(
        self: Arc<Self>,
        chunks: Vec<proto::PartitionChunk>,
    ) -> R<proto::PeerReply> {
        let Some(first) = chunks.first() else {
            return errno(libc::EINVAL);
        };
        let (dir, j, depth) = (first.dir, first.index, first.depth);
        let Some(perms) = first.perms else {
            return errno(libc::EINVAL);
        };
        // The transfer must be whole and well-formed.
        if !first.first
            || !chunks.last().is_some_and(|c| c.last)
            || chunks.iter().skip(1).any(|c| c.first)
            || chunks.iter().rev().skip(1).any(|c| c.last)
            || chunks
                .iter()
                .any(|c| c.dir != dir || c.index != j || c.depth != depth)
            || depth == 0
            || depth > MAX_DEPTH
            || giga::created_depth(j) != depth
            || server_of(home_of(dir), j, self.n) != self.id
        {
            return errno(libc::EINVAL);
        }
        let mut entries = Vec::new();
        for c in chunks {
            for e in c.entries {
                if cairn_fs::rules::check_name(&e.name).is_err()
                    || !covers(j, depth, name_hash(&e.name))
                    || e.ino == 0
                {
                    return errno(libc::EINVAL);
                }
                entries.push(e);
                if entries.len() > MAX_TRANSFER_ENTRIES {
                    return errno(libc::E2BIG);
                }
            }
        }
        self.blocking(move |n| {
            let mut m = n.state();
            if let Some(p) = m.parts.get(dir, j) {
                if p.state == PART_ACTIVE {
                    tracing::error!("transfer of active partition {dir:#x}/{j} refused");
                    return errno(libc::EEXIST);
                }
            }
            let mut b = Batch::new();
            let (lo, hi) = rev_range(j, depth);
            let lo_key = entry_pos_key(dir, lo, b"");
            let mut hp = entry_prefix(dir);
            hp.extend_from_slice(&hi.to_be_bytes());
            for (k, _) in n.scan_range(&lo_key, prefix_successor(&hp).as_deref())? {
                b.delete(&k);
            }
            for e in &entries {
                b.put(
                    &entry_key(dir, &e.name),
                    &proto::EntryRow {
                        ino: e.ino,
                        kind: e.kind,
                        token: e.token,
                    },
                );
            }
            let part = Part::new(depth, PART_INCOMING, entries.len() as u64);
            b.put(&partition_key(dir, j), &part.row());
            n.apply(b)?;
            if home_of(dir) != n.id {
                n.store_perms(dir, &perms)?;
            }
            m.parts.insert(dir, j, part);
            drop(m);
            n.durable()?;
            n.point("accept:after-write")?;
            Ok(proto::PeerReply::default())
        })
        .await
    }

    /// Makes incoming partition `(dir, j)` active (its split committed).
    pub(crate) async fn p_activate_partition(
        self: Arc<Self>,
        r: proto::PartitionRef,
    ) -> R<proto::PeerReply> {
        self.blocking(move |n| {
            n.point("activate:before")?;
            let mut m = n.state();
            let Some(p) = m.parts.get_mut(r.dir, r.index) else {
                return errno(libc::ENOENT);
            };
            if p.state == PART_ACTIVE {
                return Ok(proto::PeerReply::default());
            }
            p.state = PART_ACTIVE;
            let row = p.row();
            let mut b = Batch::new();
            b.put(&partition_key(r.dir, r.index), &row);
            if let Err(e) = n.apply(b) {
                if let Some(p) = m.parts.get_mut(r.dir, r.index) {
                    p.state = PART_INCOMING;
                }
                return Err(e);
            }
            drop(m);
            n.durable()?;
            Ok(proto::PeerReply::default())
        })
        .await
    }
}
