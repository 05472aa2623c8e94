//! Creates sent together. While [`MAX_IN_FLIGHT`] of a client's requests to a server
//! are in flight, the creates (and mknods and symlinks; never mkdirs, which take the
//! path across servers) its callers make for that server queue up; when one returns,
//! they go as one `MakeBatch` request. This is opportunistic batching, as group commit does it for
//! syncs: a lone caller's create goes alone and waits for nothing, and under load a
//! request carries what arrived during the previous round trip, so the server pays its
//! per-request cost (a wake-up, HTTP/2 framing, a task, under `--sync always` a sync)
//! once per batch instead of once per create. Each item keeps its own reply (redirect,
//! busy, errno, attributes): the caller handles it exactly as the reply of a `Make` of
//! its own (DESIGN.md, "Batched creates").

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prost::Message;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};

use crate::proto;
use crate::proto::meta_client::MetaClient;

/// Most items of one `MakeBatch` request (the server refuses more).
pub(crate) const MAX_BATCH: usize = 1024;
/// Requests a client keeps in flight to one server before creates queue for a batch.
/// Measured (`cairn cluster-bench --clients 2 --creates batch,single`, DESIGN.md): with 1 or 2,
/// four callers per client under `--sync always` lost 12–31% of their creates/s to
/// batching (the server's group commit already shared their fsyncs); with 4 they lose
/// nothing, and sixteen callers still get 1.7× the creates/s under `--sync never` and
/// half the server CPU per create under both.
const MAX_IN_FLIGHT: u32 = 4;

/// Bytes of items a client puts in one batch (a symlink's target may be 4 KiB).
const MAX_BATCH_BYTES: usize = 1 << 20;

type Outcome = Result<proto::EntryReply, Status>;

/// A create waiting for the request in flight to its server.
struct Waiting {
    req: proto::MakeReq,
    deadline: Instant,
    tx: oneshot::Sender<Outcome>,
}

#[derive(Default)]
struct Queue {
    /// Requests to this server in flight (a sender hands the queue on after its own).
    in_flight: u32,
    /// A task is sending what queued.
    draining: bool,
    waiting: Vec<Waiting>,
}

/// The queues of a client, one per server.
pub(crate) struct Batcher {
    queues: Vec<Mutex<Queue>>,
    handle: tokio::runtime::Handle,
    /// `MakeBatch` requests sent, and the creates they carried.
    batches: AtomicU64,
    batched: AtomicU64,
}

/// The sender of a request in flight; when it is done (or dropped), the creates that
/// queued meanwhile are sent (by one task per server at a time, in its slot).
struct InFlight {
    b: Arc<Batcher>,
    s: usize,
    conn: MetaClient<Channel>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut q = self.b.queues[self.s].lock();
        q.in_flight -= 1;
        if q.waiting.is_empty() || q.draining {
            return;
        }
        // The drain task's request takes this slot until nothing waits.
        q.draining = true;
        q.in_flight += 1;
        drop(q);
        let (b, s, conn) = (self.b.clone(), self.s, self.conn.clone());
        self.b.handle.spawn(async move { b.drain(s, conn).await });
    }
}

impl Batcher {
    /// Queues for `servers` servers; batches are sent from tasks on `handle`.
    pub(crate) fn new(servers: usize, handle: tokio::runtime::Handle) -> Batcher {
        Batcher {
            queues: (0..servers).map(|_| Mutex::new(Queue::default())).collect(),
            handle,
            batches: AtomicU64::new(0),
            batched: AtomicU64::new(0),
        }
    }

    /// `MakeBatch` requests sent so far, and the creates they carried.
    pub(crate) fn stats(&self) -> (u64, u64) {
        (
            self.batches.load(Ordering::Relaxed),
            self.batched.load(Ordering::Relaxed),
        )
    }

    /// Sends `req` (not a mkdir) to server `s` over `conn` within `timeout`: at once if
    /// fewer than [`MAX_IN_FLIGHT`] requests to `s` are in flight and none waits, else
    /// with the next batch.
    pub(crate) async fn make(
        self: &Arc<Self>,
        s: u32,
        mut conn: MetaClient<Channel>,
        req: proto::MakeReq,
        timeout: Duration,
    ) -> Result<Response<proto::EntryReply>, Status> {
        let s = s as usize;
        let Some(queue) = self.queues.get(s) else {
            return Err(Status::invalid_argument("no such server"));
        };
        let deadline = Instant::now() + timeout;
        // Queued behind the request in flight (Ok), or sent now (Err gives it back).
        let queued = {
            let mut q = queue.lock();
            if q.in_flight < MAX_IN_FLIGHT && q.waiting.is_empty() {
                q.in_flight += 1;
                Err(req)
            } else {
                let (tx, rx) = oneshot::channel();
                q.waiting.push(Waiting { req, deadline, tx });
                Ok(rx)
            }
        };
        match queued {
            Ok(rx) => match tokio::time::timeout_at(deadline, rx).await {
                Ok(Ok(out)) => out.map(Response::new),
                Ok(Err(_)) => Err(Status::cancelled("the batch was dropped")),
                Err(_) => Err(Status::deadline_exceeded("no answer within the timeout")),
            },
            Err(req) => {
                let _hand_on = InFlight {
                    b: self.clone(),
                    s,
                    conn: conn.clone(),
                };
                let mut r = Request::new(req);
                r.set_timeout(timeout);
                conn.make(r).await
            }
        }
    }

    /// Sends what queued for server `s`, batch after batch, until nothing waits.
    async fn drain(self: Arc<Self>, s: usize, mut conn: MetaClient<Channel>) {
        loop {
            let batch: Vec<Waiting> = {
                let mut q = self.queues[s].lock();
                // Callers that stopped waiting (timed out) are not sent.
                q.waiting.retain(|w| !w.tx.is_closed());
                if q.waiting.is_empty() {
                    q.draining = false;
                    q.in_flight -= 1;
                    return;
                }
                let (mut n, mut bytes) = (0, 0);
                while n < q.waiting.len() && n < MAX_BATCH {
                    bytes += q.waiting[n].req.encoded_len();
                    if n > 0 && bytes > MAX_BATCH_BYTES {
                        break;
                    }
                    n += 1;
                }
                q.waiting.drain(..n).collect()
            };
            if batch.len() == 1 {
                for w in batch {
                    let mut r = Request::new(w.req);
                    r.set_timeout(w.deadline.saturating_duration_since(Instant::now()));
                    let _ = w.tx.send(conn.make(r).await.map(Response::into_inner));
                }
                continue;
            }
            let Some(deadline) = batch.iter().map(|w| w.deadline).max() else {
                continue;
            };
            let timeout = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            let (reqs, txs): (Vec<_>, Vec<_>) = batch.into_iter().map(|w| (w.req, w.tx)).unzip();
            let mut r = Request::new(proto::MakeBatchReq {
                items: reqs.clone(),
            });
            r.set_timeout(timeout);
            self.batches.fetch_add(1, Ordering::Relaxed);
            self.batched.fetch_add(txs.len() as u64, Ordering::Relaxed);
            match conn.make_batch(r).await {
                Ok(rep) => {
                    let rep = rep.into_inner();
                    if let Some(st) = rep.status {
                        // The whole batch failed (its status is each item's).
                        for tx in txs {
                            let _ = tx.send(Ok(proto::EntryReply {
                                status: Some(st.clone()),
                                ..Default::default()
                            }));
                        }
                    } else if rep.items.len() != txs.len() {
                        tracing::error!(
                            "server {s}: {} replies to a batch of {}",
                            rep.items.len(),
                            txs.len()
                        );
                        for tx in txs {
                            let _ = tx.send(Err(Status::internal("a batch reply of wrong length")));
                        }
                    } else {
                        for (tx, item) in txs.into_iter().zip(rep.items) {
                            let _ = tx.send(Ok(item));
                        }
                    }
                }
                Err(e) if e.code() == Code::Unimplemented => {
                    // A server without batches: one request per item.
                    for (req, tx) in reqs.into_iter().zip(txs) {
                        let mut r = Request::new(req);
                        r.set_timeout(timeout);
                        let _ = tx.send(conn.make(r).await.map(Response::into_inner));
                    }
                }
                Err(e) => {
                    for tx in txs {
                        let _ = tx.send(Err(e.clone()));
                    }
                }
            }
        }
    }
}
