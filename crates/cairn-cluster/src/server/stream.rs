//! The server's side of streamed creates (DESIGN.md, "Streamed creates"): a client
//! keeps one `MakeStream` call open to each server and sends its creates on it as
//! messages, each numbered; the server answers each with a message carrying that
//! number. A unary request costs the server a new HTTP/2 stream each way (headers to
//! decode and encode, trailers, a task, the service stack); a message on an open stream
//! costs a frame. What has arrived together is made together, with one sync for the
//! group under `--sync always` ([`super::svc::make_items`]), and its replies go out
//! together.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::node::{Fail, NodeRef};
use super::svc::{header, make_items};
use crate::batch::MAX_BATCH;
use crate::proto;
use crate::tls::Caller;

/// The replies of one stream of creates.
pub(crate) type Replies = ReceiverStream<Result<proto::StreamedEntry, Status>>;

/// `f`'s output if it is ready at its first poll (what has already arrived), else none.
/// Dropping a pending `Streaming::message` loses nothing: its state is the stream's.
fn now_or_never<F: Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    match Pin::as_mut(&mut f).poll(&mut Context::from_waker(std::task::Waker::noop())) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

/// An item's reply that is a status only.
fn status_only(id: u64, st: proto::Status) -> proto::StreamedEntry {
    proto::StreamedEntry {
        id,
        rep: Some(proto::EntryReply {
            status: Some(st),
            ..Default::default()
        }),
    }
}

/// Armed while a group is being made: dropped before it is disarmed (a panic, or the
/// task dropped with the runtime), it ends the stream with an error rather than
/// silently.
struct Unanswered<'a>(&'a mpsc::Sender<Result<proto::StreamedEntry, Status>>);

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        let _ = self.0.try_send(Err(Status::internal(
            "the server failed while making creates",
        )));
    }
}

/// Counts an open stream of creates (`cairn_create_streams`) for as long as it lives.
struct Open;

impl Open {
    fn new() -> Open {
        metrics::gauge!("cairn_create_streams").increment(1.0);
        Open
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        metrics::gauge!("cairn_create_streams").decrement(1.0);
    }
}

/// Serves one stream of creates from `who` in a task of its own (a client going away
/// cannot cut a group in the middle: the task finishes the group and ends when it finds
/// the stream closed). Ends the stream when the server stops; the creates that had
/// arrived but were not made are then answered "busy, retry" (they were not made, so a
/// client may send them again, to this server once it is back or wherever it routes
/// them). The stream ends without an error only when every message read was answered.
pub(crate) fn serve(
    n: NodeRef,
    who: Caller,
    mut inbound: Streaming<proto::StreamedMake>,
) -> Replies {
    let (tx, rx) = mpsc::channel(MAX_BATCH);
    let mut stop = n.streams_stop();
    let open = Open::new();
    tokio::spawn(async move {
        let _open = open;
        loop {
            let first = tokio::select! {
                biased;
                _ = async { stop.wait_for(|s| *s).await.is_ok() } => {
                    // Stopping: whatever arrived is refused as not made.
                    while let Some(Ok(Some(m))) = now_or_never(inbound.message()) {
                        let _ = tx.send(Ok(status_only(m.id, Fail::Busy.to_status()))).await;
                    }
                    return;
                }
                m = inbound.message() => match m {
                    Ok(Some(m)) => m,
                    // The client closed its side.
                    Ok(None) => return,
                    // A message that does not decode, or the stream broke: the client
                    // (if still there) hears why.
                    Err(st) => {
                        let _ = tx.send(Err(st)).await;
                        return;
                    }
                },
            };
            let mut group = vec![first];
            let (mut ended, mut bad) = (false, None);
            while group.len() < MAX_BATCH {
                match now_or_never(inbound.message()) {
                    Some(Ok(Some(m))) => group.push(m),
                    // The end, or a bad message after good ones: the good ones are
                    // made and answered first.
                    Some(Ok(None)) => {
                        ended = true;
                        break;
                    }
                    Some(Err(st)) => {
                        bad = Some(st);
                        break;
                    }
                    None => break,
                }
            }
            if n.is_crashed() {
                let _ = tx.send(Err(Status::unavailable("server stopping"))).await;
                return;
            }
            let mut replies = Vec::with_capacity(group.len());
            let (mut ids, mut items) = (Vec::new(), Vec::new());
            for m in group {
                let Some(req) = m.req else {
                    let st = Fail::Errno(libc::EINVAL).to_status();
                    replies.push(status_only(m.id, st));
                    continue;
                };
                match header(&n, &who, req.h.as_ref()) {
                    Ok((checks, cred)) => {
                        ids.push(m.id);
                        items.push((checks, cred, req));
                    }
                    // Another cluster file: the stream ends with the status a unary
                    // request would get.
                    Err(st) => {
                        let _ = tx.send(Err(st)).await;
                        return;
                    }
                }
            }
            let count = items.len() as u64;
            let start = Instant::now();
            // Ending the stream without an error promises the client that every
            // message read was answered (it sends the others again): if making the
            // group panics, the stream ends with an error instead.
            let guard = Unanswered(&tx);
            let made = make_items(n.clone(), items).await;
            std::mem::forget(guard);
            match made {
                Ok(reps) => {
                    for (id, rep) in ids.into_iter().zip(reps) {
                        replies.push(proto::StreamedEntry { id, rep: Some(rep) });
                    }
                }
                Err(Fail::Crashed) => {
                    let _ = tx.send(Err(Status::unavailable("server stopping"))).await;
                    return;
                }
                // The group's creates may or may not have been done: the stream ends
                // as a unary request's reply would (the client sends them again, each
                // answered by its token), not with an `EIO` for each.
                Err(Fail::NotLeader) => {
                    let _ = tx.send(Err(super::svc::lost_lead())).await;
                    return;
                }
                Err(f) => {
                    if let Fail::Down(why) = &f {
                        tracing::info!(server = n.id, "streamed creates: {why}");
                    }
                    let st = f.to_status();
                    replies.extend(ids.into_iter().map(|id| status_only(id, st.clone())));
                }
            }
            metrics::counter!("cairn_ops_total", "op" => "create").increment(count);
            metrics::histogram!("cairn_op_seconds", "op" => "make_stream")
                .record(start.elapsed().as_secs_f64());
            for r in replies {
                if tx.send(Ok(r)).await.is_err() {
                    return;
                }
            }
            if let Some(st) = bad {
                let _ = tx.send(Err(st)).await;
                return;
            }
            if ended {
                return;
            }
        }
    });
    ReceiverStream::new(rx)
}
