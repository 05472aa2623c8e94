//! How a client's request reaches its server: the route by the directory's cached
//! GIGA+ bitmap, redirects that correct it, and retries while a server is busy or (for
//! requests safe to repeat, or never sent) unreachable, within the call's deadline.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use tonic::transport::Channel;

use cairn_fs::{Errno, FsResult};

use super::count::Rpc;
use super::{Client, BITMAP_CACHE, MAX_REDIRECTS};
use crate::giga::{home_of, server_of};
use crate::proto;
use crate::proto::meta_client::MetaClient;

/// Why one call did not give a result.
pub(super) enum CallErr {
    Errno(i32),
    Redirect(u64, Vec<u32>),
}

impl From<CallErr> for Errno {
    fn from(e: CallErr) -> Errno {
        match e {
            CallErr::Errno(e) => Errno(e),
            CallErr::Redirect(..) => Errno(libc::EIO),
        }
    }
}

/// Replies with a status.
pub(super) trait Rep {
    fn st(&self) -> Option<&proto::Status>;
}
macro_rules! reps {
    ($($t:ty),*) => {$( impl Rep for $t { fn st(&self) -> Option<&proto::Status> { self.status.as_ref() } } )*};
}
reps!(
    proto::EntryReply,
    proto::AttrReply,
    proto::InoReply,
    proto::Empty,
    proto::ReadDirReply,
    proto::DataReply,
    proto::WriteReply,
    proto::XattrListReply,
    proto::StatFsReply
);

/// Whether a transport error says the request never reached the server: the
/// connection could not be opened (`tonic::ConnectError`, a refused or reset connect or
/// TLS handshake), the request was dropped before it was handed to a connection (hyper's
/// "canceled", as happens to one made while its connection closes), or the server
/// refused its stream unprocessed (RFC 9113 §8.7: above the last stream id of a GOAWAY
/// it sent, or REFUSED_STREAM). Then any request may be repeated.
fn not_sent(s: &tonic::Status) -> bool {
    let mut e: Option<&dyn std::error::Error> = std::error::Error::source(s);
    while let Some(x) = e {
        if x.is::<tonic::ConnectError>()
            || x.downcast_ref::<hyper::Error>()
                .is_some_and(hyper::Error::is_canceled)
        {
            return true;
        }
        if let Some(h) = x.downcast_ref::<h2::Error>() {
            let refused = h.reason() == Some(h2::Reason::REFUSED_STREAM);
            let above_goaway =
                h.is_go_away() && h.is_remote() && h.reason() == Some(h2::Reason::NO_ERROR);
            if refused || above_goaway {
                return true;
            }
        }
        if let Some(io) = x.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::NotFound
                    | std::io::ErrorKind::AddrNotAvailable
            ) {
                return true;
            }
        }
        let m = x.to_string();
        if m.contains("tcp connect error") || m.contains("Connection refused") {
            return true;
        }
        e = x.source();
    }
    s.message().contains("tcp connect error")
}

impl Client {
    /// One request (of kind `kind`, counted per attempt) to server `s`, retried while the server is busy or (for requests
    /// safe to repeat, or never sent) unreachable, until `deadline`.
    pub(super) async fn call<R, F, Fut>(
        &self,
        kind: Rpc,
        s: u32,
        idem: bool,
        deadline: Instant,
        mut f: F,
    ) -> Result<R, CallErr>
    where
        R: Rep,
        F: FnMut(MetaClient<Channel>, Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        let Some(group) = self.inner.conns.get(s as usize) else {
            return Err(CallErr::Errno(libc::ENOENT));
        };
        let mut pause = Duration::from_millis(1);
        // Attempts of this request that a replica left unanswered.
        let mut silent = 0;
        // Why the last attempt failed (for the warning at the deadline).
        let mut last: Option<String> = None;
        loop {
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(
                    "server {s}: no answer within the timeout ({} s); last attempt: {}",
                    self.inner.opts.timeout.as_secs_f64(),
                    last.as_deref().unwrap_or("none")
                );
                return Err(CallErr::Errno(libc::EIO));
            }
            let left = deadline - now;
            let (at, conn) = group.current();
            // A replica that does not answer in time is passed over (for a request
            // safe to repeat) well before the operation's deadline: first after an
            // election timeout, then after twice as long each time.
            let attempt = if group.replicated() && idem {
                left.min(group.attempt(silent))
            } else {
                left
            };
            self.inner.sent.add(kind);
            let res = f(conn, attempt).await;
            if let Err(e) = &res {
                last = Some(format!("{}: {}", group.addr(at), e.message()));
            }
            match res {
                Ok(rep) => {
                    let rep = rep.into_inner();
                    let Some(st) = rep.st() else { return Ok(rep) };
                    if let Some(b) = &st.redirect {
                        return Err(CallErr::Redirect(b.dir, b.partitions.clone()));
                    }
                    if st.retry {
                        // Busy for a moment (a split, an operation across servers).
                        last = Some("busy (a split or an operation across servers)".into());
                    } else if st.errno != 0 {
                        return Err(CallErr::Errno(st.errno as i32));
                    } else {
                        return Ok(rep);
                    }
                }
                Err(e) if e.metadata().get(crate::NOT_LEADER).is_some() => {
                    // Refused untouched by a replica that does not lead: sent on to
                    // the leader it names at once, else after a pause (an election).
                    let hint = e
                        .metadata()
                        .get(crate::NOT_LEADER)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("");
                    tracing::debug!("server {s}: replica {at} does not lead (leader: {hint:?})");
                    last = Some(format!(
                        "{} does not lead and knows no leader",
                        group.addr(at)
                    ));
                    if group.follow(at, hint) {
                        continue;
                    }
                }
                Err(e) => match e.code() {
                    _ if group.replicated() && {
                        tracing::debug!("server {s}: replica {at}: {:?} {}", e.code(), e.message());
                        false
                    } => {}
                    tonic::Code::FailedPrecondition => {
                        tracing::error!("server {s}: {}", e.message());
                        return Err(CallErr::Errno(libc::EIO));
                    }
                    // Never reached the server (whatever code the transport gave it).
                    _ if not_sent(&e) => group.pass_over(at),
                    tonic::Code::Unavailable | tonic::Code::Unknown if idem => group.pass_over(at),
                    tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
                        if idem && group.replicated() =>
                    {
                        silent += 1;
                        group.silenced(at);
                    }
                    tonic::Code::Cancelled if idem => {}
                    _ => {
                        tracing::warn!("server {s}: {}", e.message());
                        return Err(CallErr::Errno(libc::EIO));
                    }
                },
            }
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// The partition this client's bitmap routes hash `h` of `dir` to.
    fn route(&self, dir: u64, h: u64) -> u32 {
        self.inner
            .bitmaps
            .lock()
            .get(&dir)
            .map_or(0, |b| b.route(h))
    }

    /// Merges a redirect's bitmap; whether it taught anything.
    fn learn(&self, dir: u64, parts: Vec<u32>) -> bool {
        self.inner.redirects.fetch_add(1, Ordering::Relaxed);
        let mut m = self.inner.bitmaps.lock();
        if m.len() >= BITMAP_CACHE && !m.contains_key(&dir) {
            m.clear();
        }
        m.entry(dir).or_default().merge(parts)
    }

    /// A request about the name of hash `h` in `dir`, sent to its partition's server
    /// (following redirects). `f` gets the partition the client routes to.
    /// Returns the reply and the server that answered.
    pub(super) async fn named<R, F, Fut>(
        &self,
        kind: Rpc,
        dir: u64,
        h: u64,
        idem: bool,
        deadline: Instant,
        mut f: F,
    ) -> FsResult<(R, u32)>
    where
        R: Rep,
        F: FnMut(MetaClient<Channel>, Duration, u32) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        let n = self.inner.cfg.len();
        if dir == 0 || home_of(dir) >= n {
            return Err(Errno(libc::ENOENT));
        }
        for _ in 0..=MAX_REDIRECTS {
            let i = self.route(dir, h);
            let s = server_of(home_of(dir), i, n);
            match self.call(kind, s, idem, deadline, |c, t| f(c, t, i)).await {
                Ok(r) => return Ok((r, s)),
                Err(CallErr::Redirect(d, parts)) => {
                    // Another request of this client may have learnt the same split
                    // meanwhile: the redirect then teaches nothing new, but the route
                    // has moved on, and the next round uses it.
                    let learnt = d == dir && self.learn(dir, parts);
                    if !learnt && (d != dir || self.route(dir, h) == i) {
                        tracing::error!("server {s}: a redirect for {dir:#x} that teaches nothing");
                        return Err(Errno(libc::EIO));
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        tracing::error!("{dir:#x}: more than {MAX_REDIRECTS} redirects");
        Err(Errno(libc::EIO))
    }

    /// A request about inode `ino`, sent to its home.
    pub(super) async fn at_home<R, F, Fut>(
        &self,
        kind: Rpc,
        ino: u64,
        idem: bool,
        deadline: Instant,
        f: F,
    ) -> FsResult<R>
    where
        R: Rep,
        F: FnMut(MetaClient<Channel>, Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        if ino == 0 || home_of(ino) >= self.inner.cfg.len() {
            return Err(Errno(libc::ENOENT));
        }
        self.call(kind, home_of(ino), idem, deadline, f)
            .await
            .map_err(Errno::from)
    }
}
