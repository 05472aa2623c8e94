//! The client's side of streamed creates (DESIGN.md, "Streamed creates"). A client keeps
//! one `MakeStream` call open to each server it creates on, opened at its first create
//! there and opened again after it ends; its callers' creates (and mknods and symlinks;
//! never mkdirs) go on it as numbered messages, and a task reads the replies and hands
//! each to the caller waiting for that number. Nothing waits to be grouped: a create is
//! sent the moment it is made, and creates made while others are on the wire leave in
//! the same write (and are made by the server in one group).
//!
//! A server that does not know `MakeStream` (an older one) is asked by `MakeBatch` from
//! then on: its creates on the stream are answered "busy" (none was made) and sent
//! again that way. A create whose stream ends before its reply: if the server ended it
//! without an error, it had answered every message it read, so the create was not read
//! and is sent again (as after a "busy" answer); otherwise it gets the stream's error, as a
//! unary request gets its connection's: if the stream never opened because the server
//! could not be reached, the create was not sent and may be sent again (see
//! `route::not_sent`); else whether it was made is unknown, and the caller gets `EIO`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};

use crate::convert::busy_status;
use crate::proto;
use crate::proto::meta_client::MetaClient;

type Outcome = Result<proto::EntryReply, Status>;

/// One open `MakeStream` call.
struct Link {
    /// Messages to send (the call's request stream).
    tx: mpsc::UnboundedSender<proto::StreamedMake>,
    state: Mutex<LinkState>,
    /// Set by the reader once it has recorded why the call ended (the server marked
    /// unsupported if it was, `ended` set): a create that found the request stream
    /// closed before that waits for it rather than guess.
    told: watch::Sender<bool>,
}

#[derive(Default)]
struct LinkState {
    /// The number of the next create.
    next: u64,
    /// Creates sent and not answered, by number (ordered: when the stream ends, its
    /// callers hear in the order they sent, so that a simulation replays the same).
    waiting: BTreeMap<u64, oneshot::Sender<Outcome>>,
    /// Why the stream ended (set once; nothing is added after).
    ended: Option<Status>,
}

/// The streams of a client, one per server.
pub(crate) struct Streams {
    /// Each server's stream, if one was opened.
    slots: Vec<Mutex<Option<Arc<Link>>>>,
    /// Servers that answered `MakeStream` with UNIMPLEMENTED.
    unsupported: Vec<AtomicBool>,
    handle: tokio::runtime::Handle,
    /// Streams opened, creates sent on them.
    opened: AtomicU64,
    sent: AtomicU64,
    /// Test hook: how long a reader waits, after its call ends, before it records why
    /// (holds open the window in which creates find the request stream closed).
    #[cfg(test)]
    hold_reader: Duration,
}

/// The answer to a create its server never read (or never could: a server without
/// streams): busy, try again.
fn not_read() -> proto::EntryReply {
    proto::EntryReply {
        status: Some(busy_status()),
        ..Default::default()
    }
}

impl Streams {
    /// Streams to `servers` servers; their reading tasks run on `handle`.
    pub(crate) fn new(servers: usize, handle: tokio::runtime::Handle) -> Streams {
        Streams {
            slots: (0..servers).map(|_| Mutex::new(None)).collect(),
            unsupported: (0..servers).map(|_| AtomicBool::new(false)).collect(),
            handle,
            opened: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            #[cfg(test)]
            hold_reader: Duration::ZERO,
        }
    }

    /// Streams opened so far, and the creates sent on them.
    pub(crate) fn stats(&self) -> (u64, u64) {
        (
            self.opened.load(Ordering::Relaxed),
            self.sent.load(Ordering::Relaxed),
        )
    }

    /// Whether server `s` takes streamed creates (as far as this client knows).
    pub(crate) fn supported(&self, s: u32) -> bool {
        self.unsupported
            .get(s as usize)
            .is_some_and(|u| !u.load(Ordering::Relaxed))
    }

    /// The open stream to server `s`, opened over `conn` if there is none; `None` once
    /// the server is known not to take streams.
    fn link(self: &Arc<Self>, s: usize, conn: &MetaClient<Channel>) -> Option<Arc<Link>> {
        let mut slot = self.slots[s].lock();
        if let Some(l) = &*slot {
            if l.state.lock().ended.is_none() {
                return Some(l.clone());
            }
        }
        // Asked again under the slot's lock: a caller that found the server supported
        // may get here after the stream it would have used ended UNIMPLEMENTED (its
        // reader marks the server before it ends the stream, and the stream's lock
        // orders the two), and must not open another.
        if !self.supported(s as u32) {
            return None;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let link = Arc::new(Link {
            tx,
            state: Mutex::new(LinkState::default()),
            told: watch::Sender::new(false),
        });
        *slot = Some(link.clone());
        self.opened.fetch_add(1, Ordering::Relaxed);
        let (this, l, conn) = (self.clone(), link.clone(), conn.clone());
        self.handle.spawn(async move {
            this.read(s, conn, UnboundedReceiverStream::new(rx), l)
                .await
        });
        Some(link)
    }

    /// Opens the call and hands each reply to its caller until the stream ends; then
    /// every create still waiting is told the outcome.
    async fn read(
        self: Arc<Self>,
        s: usize,
        mut conn: MetaClient<Channel>,
        out: UnboundedReceiverStream<proto::StreamedMake>,
        link: Arc<Link>,
    ) {
        // What the creates still waiting when the stream ends are told.
        let called = conn.make_stream(Request::new(out)).await;
        #[cfg(test)]
        tokio::time::sleep(self.hold_reader).await;
        let left: Outcome = match called {
            Ok(rep) => {
                let mut inbound = rep.into_inner();
                loop {
                    match inbound.message().await {
                        Ok(Some(m)) => {
                            let tx = link.state.lock().waiting.remove(&m.id);
                            if let Some(tx) = tx {
                                let _ = tx.send(m.rep.ok_or_else(|| {
                                    Status::internal("a streamed reply without its entry")
                                }));
                            }
                        }
                        // A stream the server ends without an error has answered every
                        // message it read (a stopping server answers what it read and did
                        // not make "busy"): what still waits was not read, so not made,
                        // and its callers try again.
                        Ok(None) => break Ok(not_read()),
                        Err(st) => break Err(st),
                    }
                }
            }
            // None was made: they go again, as batches.
            Err(st) if st.code() == Code::Unimplemented => {
                tracing::info!("server {s}: no streamed creates; sending batches");
                self.unsupported[s].store(true, Ordering::Relaxed);
                Ok(not_read())
            }
            // Refused by the server before its handler read any message (a status it
            // sent, as a stopping server does, not a broken connection, which carries
            // its cause): none was made, and they go again.
            // A replica that does not lead its group refused the stream: the creates
            // were not made, and their callers hear it, with the leader it named.
            Err(st) if st.metadata().get(crate::NOT_LEADER).is_some() => Err(st),
            Err(st)
                if st.code() == Code::Unavailable && std::error::Error::source(&st).is_none() =>
            {
                Ok(not_read())
            }
            Err(st) => Err(st),
        };
        let waiting = {
            let mut st = link.state.lock();
            st.ended = Some(match &left {
                Ok(_) => Status::unavailable("the stream ended"),
                Err(why) => why.clone(),
            });
            std::mem::take(&mut st.waiting)
        };
        link.told.send_replace(true);
        for (_, tx) in waiting {
            let _ = tx.send(left.clone());
        }
    }

    /// Sends `req` (not a mkdir) to server `s` on its stream (opened over `conn` if
    /// needed) and waits for its reply at most `timeout`. A server without streams
    /// answers "busy" (the create was not made; the caller sends it again, as a batch
    /// once [`Streams::supported`] says no).
    pub(crate) async fn make(
        self: &Arc<Self>,
        s: u32,
        conn: &MetaClient<Channel>,
        req: proto::MakeReq,
        timeout: Duration,
    ) -> Result<Response<proto::EntryReply>, Status> {
        let s = s as usize;
        if s >= self.slots.len() {
            return Err(Status::invalid_argument("no such server"));
        }
        let deadline = Instant::now() + timeout;
        let (tx, rx) = oneshot::channel();
        let (mut tx, mut req) = (Some(tx), Some(req));
        // A stream found ended before the create went on it: the create was not sent,
        // so it goes on a new one (up to three streams; then the last one's reason).
        let mut tries = 0;
        let (link, id) = loop {
            if !self.supported(s as u32) {
                return Ok(Response::new(not_read()));
            }
            tries += 1;
            let Some(link) = self.link(s, conn) else {
                return Ok(Response::new(not_read()));
            };
            // Whether the request stream was found closed before the reader told why.
            let closed = {
                let mut st = link.state.lock();
                match st.ended {
                    Some(_) => false,
                    None => {
                        let id = st.next;
                        st.next += 1;
                        let m = proto::StreamedMake {
                            id,
                            req: req.take(),
                        };
                        // Sent under the state's lock: the reader cannot end the stream
                        // between the number and the message (it takes this lock to end
                        // it).
                        match link.tx.send(m) {
                            Ok(()) => {
                                // The sender is taken once: here, before the break.
                                if let Some(tx) = tx.take() {
                                    st.waiting.insert(id, tx);
                                }
                                drop(st);
                                break (link, id);
                            }
                            Err(back) => {
                                req = back.0.req;
                                true
                            }
                        }
                    }
                }
            };
            if closed {
                // The call is over (its request stream dropped) and its reader about to
                // say why: this create was not sent. Wait for the reader to record it —
                // the server may have said it takes no streams, and then no other
                // stream may be opened to it — before trying again.
                let mut told = link.told.subscribe();
                if tokio::time::timeout_at(deadline, told.wait_for(|t| *t))
                    .await
                    .is_err()
                {
                    return Err(Status::deadline_exceeded(
                        "the stream of creates closed and its end was not told in time",
                    ));
                }
            }
            if tries >= 3 {
                let why = link.state.lock().ended.clone();
                return Err(why.unwrap_or_else(|| Status::unavailable("no stream of creates")));
            }
        };
        self.sent.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(out)) => out.map(Response::new),
            Ok(Err(_)) => Err(Status::cancelled("the stream of creates was dropped")),
            Err(_) => {
                // A stream that does not answer in time (its server paused, or a
                // replica cut off) is not used again: the next create opens another,
                // over the connection its caller then picks.
                let mut st = link.state.lock();
                st.waiting.remove(&id);
                if st.ended.is_none() {
                    st.ended = Some(Status::deadline_exceeded("a create got no answer in time"));
                }
                Err(Status::deadline_exceeded("no answer within the timeout"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that knows no method (tonic's empty router answers every call
    /// UNIMPLEMENTED, as a server built before streamed creates answers `MakeStream`),
    /// and a client whose stream reader is held back after its call ends: creates made
    /// in that window find the request stream closed before the server is marked, and
    /// must wait to be told rather than open more streams to it. Each is answered "not
    /// read" (busy), and one stream is opened in all.
    #[test]
    fn a_closed_stream_waits_for_its_reader_before_another_is_opened() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(
                tonic::transport::Server::builder()
                    .add_routes(tonic::service::Routes::default())
                    .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
            );
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                .unwrap()
                .connect()
                .await
                .unwrap();
            let conn = MetaClient::new(channel);
            let mut streams = Streams::new(1, tokio::runtime::Handle::current());
            streams.hold_reader = Duration::from_millis(400);
            let streams = Arc::new(streams);
            let started = Instant::now();
            let mut tasks = Vec::new();
            // Creates every 5 ms over 600 ms (bounded: 120 in all), across the window.
            for k in 0..120u64 {
                let (streams, conn) = (streams.clone(), conn.clone());
                tasks.push(tokio::spawn(async move {
                    tokio::time::sleep_until(started + Duration::from_millis(5 * k)).await;
                    let req = proto::MakeReq::default();
                    streams.make(0, &conn, req, Duration::from_secs(5)).await
                }));
            }
            for t in tasks {
                let rep = t.await.unwrap().expect("answered, not failed");
                let st = rep.into_inner().status.expect("a status");
                assert_eq!(st, busy_status(), "not read: busy");
            }
            assert!(!streams.supported(0), "the server was marked");
            assert_eq!(streams.stats().0, 1, "one stream opened in all");
        });
    }
}
