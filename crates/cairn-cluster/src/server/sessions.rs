//! A client's lease session (`Leases`): its renewals and answers come in, renewals'
//! answers and revocations go out (`super::grants` keeps the table), and the durable
//! horizon beyond which no lease lasts is kept ahead of the sessions.

use super::grants::Key;

use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Status, Streaming};

use super::node::{Batch, Node, NodeRef, R};
use crate::proto;
use crate::rows::{single, TAG_LEASE_HORIZON};

/// What a session sends its client.
pub(crate) type Downs =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<proto::LeaseDown, Status>> + Send>>;

/// Starts `client`'s session whose first message is `first` (its header checked) and
/// the rest `inbound`.
pub(crate) fn start(
    node: NodeRef,
    client: u64,
    first: proto::LeaseUp,
    inbound: Streaming<proto::LeaseUp>,
) -> Result<Downs, Status> {
    if client == 0 {
        return Err(Status::invalid_argument(
            "a lease session needs a client id",
        ));
    }
    if node.grants.time().is_zero() {
        return Err(Status::unimplemented(
            "this server grants no leases (--lease-time 0)",
        ));
    }
    Ok(serve(node, client, first, inbound))
}

/// Serves `client`'s session whose first message is `first` and the rest `inbound`.
fn serve(
    node: NodeRef,
    client: u64,
    first: proto::LeaseUp,
    mut inbound: Streaming<proto::LeaseUp>,
) -> Downs {
    let (stream, rx) = node.grants.open(client);
    heard(&node, (client, stream), &first);
    let n = node.clone();
    tokio::spawn(async move {
        let mut stop = n.streams_stop();
        loop {
            tokio::select! {
                m = inbound.message() => match m {
                    Ok(Some(up)) => heard(&n, (client, stream), &up),
                    Ok(None) | Err(_) => break,
                },
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        n.grants.closed(client, stream);
    });
    // Ends when the session's stream is closed in the table (the inbound side ended,
    // the server stopped, or a later stream of the same client replaced it).
    Box::pin(UnboundedReceiverStream::new(rx).map(Ok))
}

/// One message of stream `stream` of `client`'s session.
fn heard(node: &NodeRef, (client, stream): (u64, u64), up: &proto::LeaseUp) {
    if up.revoked != 0 {
        node.grants.answered(client, up.revoked);
    }
    if node.serving().is_err() {
        // A replica that lost the lead renews nothing: the stream ends, and the client
        // opens its session again with the group's leader.
        node.grants.closed(client, stream);
        return;
    }
    if up.renew != 0 {
        node.grants.renew(client, up.renew);
        extend_horizon(node);
    }
}

/// Makes a later horizon durable if one is due, in the background.
fn extend_horizon(node: &NodeRef) {
    let Some(ms) = node.grants.horizon_due() else {
        return;
    };
    let n = node.clone();
    tokio::spawn(async move {
        let written = n
            .blocking(move |n| {
                n.write_horizon(ms)?;
                n.durable()
            })
            .await;
        if let Err(e) = &written {
            tracing::info!(server = n.id, "lease horizon not written: {e:?}");
        }
        n.grants.horizon_written(written.ok().map(|_| ms));
    });
}

impl Node {
    /// Writes the lease horizon row (`ms` since the epoch).
    fn write_horizon(&self, ms: i64) -> R<()> {
        let mut b = Batch::new();
        b.put_raw(&single(TAG_LEASE_HORIZON), &ms.to_le_bytes());
        self.apply(b)
    }

    /// The lease horizon in the rows (0: none), read at recovery.
    pub(crate) fn read_horizon(&self) -> R<i64> {
        Ok(self
            .get_raw(&single(TAG_LEASE_HORIZON))?
            .and_then(|v| v.get(..8).map(|b| b.try_into().map(i64::from_le_bytes)))
            .and_then(Result::ok)
            .unwrap_or(0))
    }
}

/// The lease `client` gets on the entry `dir`/`name` it made, and on the new inode's
/// attributes when they are here (none if anyone else changed anything since `since`).
pub(crate) fn made_lease(
    n: &Node,
    client: u64,
    dir: u64,
    name: Vec<u8>,
    a: &cairn_fs::Attr,
    since: u64,
) -> u32 {
    let mut keys = vec![Key::Name(dir, name.into())];
    if crate::giga::home_of(a.ino) == n.id {
        keys.push(Key::Inode(a.ino));
    }
    n.grants.grant(client, keys, since)
}

/// The lease `client` gets with listing reply `rep` of `dir` (read since `since`):
/// with attributes, on the names listed and the inodes whose attributes it carries,
/// and on the directory's listing here when the reply holds every name of its
/// partition. Without a lease the reply does not claim the listing.
pub(crate) fn listing_lease(
    n: &Node,
    client: u64,
    dir: u64,
    rep: &mut proto::ReadDirReply,
    since: u64,
) {
    if rep.plus && (rep.listing || !rep.entries.is_empty()) {
        let keys: Vec<Key> = rep
            .entries
            .iter()
            .flat_map(|e| {
                let inode = e.attr.is_some().then_some(Key::Inode(e.ino));
                std::iter::once(Key::Name(dir, e.name.as_slice().into())).chain(inode)
            })
            .chain(rep.listing.then_some(Key::Listing(dir)))
            .collect();
        rep.lease_ms = n.grants.grant(client, keys, since);
    }
    rep.listing &= rep.lease_ms > 0;
}
