//! The ledger of done requests: which of its clients' creates (of files, nodes,
//! symbolic links and directories), links, unlinks, rmdirs, renames, writes and
//! attribute changes this server did, by the token the client gave the request, so that
//! the request sent again — its reply lost when a replica died or the connection broke —
//! is answered as done instead of being done twice (an unlink answered `ENOENT`, a
//! create or link `EEXIST`, a rename undone by nothing but refused, a write or truncate
//! landing again after another client's later write). A create's and an attribute
//! change's row also keeps the attributes it answered, for a copy that arrives once the
//! inode is gone.
//!
//! A request's row (`Q token`, [`crate::rows::done_key`]) is written in the batch that
//! does it (or, for one done through an intent, in the batch that commits the intent,
//! from the token the intent row holds), so that it is replicated, snapshotted and
//! recovered with the change itself. Rows are dropped after [`LEDGER_TTL`], far past
//! any client's deadline: the order of tokens by time is kept in memory (rebuilt from
//! the rows when the server starts or a replica takes up a term), and each new row
//! drops the expired ones in its own batch.

use std::collections::VecDeque;
use std::time::Duration;

use cairn_fs::Attr;
use prost::Message;

use super::node::{Batch, Node, R};
use super::state::State;
use crate::convert::{attr_msg, msg_attr};
use crate::proto;
use crate::proto::follow_up::Call;
use crate::proto::intent_row::Op;
use crate::rows::{done_key, TAG_DONE};

/// How long a done request's row is kept: far longer than a client retries a request
/// (its timeout, 30 s by default).
pub const LEDGER_TTL: Duration = Duration::from_secs(300);

/// The tokens of the ledger's rows in the order they were written (oldest first).
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    order: VecDeque<(i64, u64)>,
}

/// What the ledger says of a request's token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Not done (or no token): do it.
    New,
    /// Done: answer as done; the attributes it answered, if its row keeps them.
    Done(Option<Attr>),
    /// An intent of this request is under way (its leader died before it finished, and
    /// recovery drives it): answer busy, the client asks again.
    Pending,
}

impl Ledger {
    /// The ledger of `rows` (key, value) of tag [`TAG_DONE`].
    pub(crate) fn load(rows: Vec<(Vec<u8>, Vec<u8>)>) -> Ledger {
        let mut order: Vec<(i64, u64)> = rows
            .into_iter()
            .filter_map(|(k, v)| {
                let token = crate::rows::be64(&k, 1)?;
                let t = i64::from_le_bytes(v.get(..8)?.try_into().ok()?);
                Some((t, token))
            })
            .collect();
        order.sort_unstable();
        Ledger {
            order: order.into(),
        }
    }

    /// Adds request `token`'s row at `now` to `b`, and the deletion of every row
    /// older than [`LEDGER_TTL`].
    pub(crate) fn record(&mut self, b: &mut Batch, token: u64, now: i64) {
        self.record_row(b, token, now, now.to_le_bytes().to_vec());
    }

    /// As [`Ledger::record`], the row also keeping `attr`, what the request answered
    /// (a create's new inode, an attribute change's result).
    pub(crate) fn record_attr(&mut self, b: &mut Batch, token: u64, now: i64, attr: &Attr) {
        let mut v = now.to_le_bytes().to_vec();
        attr_msg(attr).encode(&mut v).unwrap_or_default();
        self.record_row(b, token, now, v);
    }

    fn record_row(&mut self, b: &mut Batch, token: u64, now: i64, row: Vec<u8>) {
        if token == 0 {
            return;
        }
        let ttl = i64::try_from(LEDGER_TTL.as_nanos()).unwrap_or(i64::MAX);
        while let Some(&(t, old)) = self.order.front() {
            if now.saturating_sub(t) < ttl {
                break;
            }
            b.delete(&done_key(old));
            self.order.pop_front();
        }
        b.put_raw(&done_key(token), &row);
        self.order.push_back((now, token));
        metrics::gauge!("cairn_ledger_rows").set(self.order.len() as f64);
    }

    /// How many rows the ledger holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }
}

impl Node {
    /// The ledger rebuilt from this server's rows.
    pub(crate) fn load_ledger(&self) -> R<Ledger> {
        Ok(Ledger::load(self.scan(&[TAG_DONE], None, usize::MAX)?))
    }

    /// What the ledger (and the intents under way) say of request `token`.
    pub(crate) fn seen(&self, m: &State, token: u64) -> R<Seen> {
        if token == 0 {
            return Ok(Seen::New);
        }
        // The intent of this request still under way, if any (a mkdir's token is in
        // its op).
        let under_way = m.intents.find(|r| {
            r.token == token || matches!(&r.op, Some(Op::Mkdir(mk)) if mk.token == token)
        });
        // A rename whose new name is on another server is done for its client only
        // once its intent is finished: until that server commits it, the new name is
        // not there for others to see (answering "done" before would let the client's
        // next operation find it missing).
        if under_way.is_some_and(commits_remotely) {
            return Ok(Seen::Pending);
        }
        if let Some(v) = self.get_raw(&done_key(token))? {
            // After the time: the attributes answered, if kept (a damaged tail is
            // treated as none: the caller answers with the inode as it is now).
            let attr = v
                .get(8..)
                .filter(|t| !t.is_empty())
                .and_then(|t| proto::Attr::decode(t).ok())
                .map(|a| msg_attr(&a));
            return Ok(Seen::Done(attr));
        }
        if under_way.is_some() {
            return Ok(Seen::Pending);
        }
        Ok(Seen::New)
    }

    /// Whether request `token` was done here already (answer it as done); `Busy`
    /// while an intent of it is under way. Called under the state lock `m` before the
    /// request's checks, so that two copies of one request never both do it.
    pub(crate) fn done_before(&self, m: &State, token: u64) -> R<bool> {
        Ok(self.done_with(m, token)?.is_some())
    }

    /// As [`Node::done_before`], with what the done request answered: `Some(attr)`
    /// when it was done, `attr` the attributes its row keeps (creates and attribute
    /// changes).
    pub(crate) fn done_with(&self, m: &State, token: u64) -> R<Option<Option<Attr>>> {
        match self.seen(m, token)? {
            Seen::New => Ok(None),
            Seen::Done(attr) => {
                metrics::counter!("cairn_requests_answered_from_ledger_total").increment(1);
                Ok(Some(attr))
            }
            Seen::Pending => Err(super::node::Fail::Busy),
        }
    }
}

/// Whether intent `r` has a follow-up that commits its change on another server (a
/// rename's destination there).
pub(crate) fn commits_remotely(r: &proto::IntentRow) -> bool {
    r.followups
        .iter()
        .any(|f| matches!(f.call, Some(Call::CommitRename(_))))
}

#[cfg(test)]
mod tests {
    use super::{Ledger, LEDGER_TTL};
    use crate::rows::done_key;
    use crate::server::node::Batch;

    #[test]
    fn rows_expire_in_the_batch_of_a_later_request() {
        let ttl = LEDGER_TTL.as_nanos() as i64;
        let mut l = Ledger::default();
        let mut b = Batch::new();
        l.record(&mut b, 7, 1_000);
        l.record(&mut b, 0, 1_001);
        l.record(&mut b, 8, 2_000);
        assert_eq!(b.0.len(), 2);
        assert_eq!(l.len(), 2);
        // Past the first row's time to live, not the second's.
        let mut b = Batch::new();
        l.record(&mut b, 9, 1_000 + ttl);
        assert_eq!(b.0[0], (done_key(7), None));
        assert_eq!(b.0[1].0, done_key(9));
        assert_eq!(l.len(), 2);
        // Rebuilt from rows, in time order.
        let rows = vec![
            (done_key(9), (1_000 + ttl).to_le_bytes().to_vec()),
            (done_key(8), 2_000i64.to_le_bytes().to_vec()),
            (b"Qbad".to_vec(), vec![1]),
        ];
        let mut l = Ledger::load(rows);
        assert_eq!(l.len(), 2);
        let mut b = Batch::new();
        l.record(&mut b, 10, 2_000 + ttl);
        assert_eq!(b.0[0], (done_key(8), None));
        assert_eq!(l.len(), 2);
    }
}
