//! The glue between tonic and turmoil's simulated TCP: accepted streams that tonic's
//! server can serve, and a [`Dialer`] whose channels connect through the simulation.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use cairn_cluster::transport::Dialer;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::{Connected, TcpConnectInfo};
use tonic::transport::Endpoint;
use turmoil::net::TcpStream;

/// The connections of one simulated server (accepted and dialed), in the order they
/// were opened. A kill drops the server's runtime, and tokio drops its tasks in an
/// order that depends on task ids, which are numbered across the whole process; each
/// dropped connection sends a FIN or RST whose latency turmoil draws from the seeded
/// random stream, so that order would decide the rest of the run. Armed before a kill,
/// the first connection dropped closes them all, in the order they were opened.
#[derive(Default)]
pub(crate) struct Conns(Mutex<ConnsInner>);

#[derive(Default)]
struct ConnsInner {
    killing: bool,
    open: Vec<Weak<Mutex<Option<TcpStream>>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Conns {
    /// The server is about to be killed: its connections close in order.
    pub(crate) fn arm_kill(&self) {
        lock(&self.0).killing = true;
    }

    /// The kill is over.
    pub(crate) fn disarm(&self) {
        let mut g = lock(&self.0);
        g.killing = false;
        g.open.retain(|w| w.strong_count() > 0);
    }

    /// `s`, opened or accepted by this server.
    pub(crate) fn register(self: &Arc<Self>, s: TcpStream) -> SimStream {
        let s = Arc::new(Mutex::new(Some(s)));
        let mut g = lock(&self.0);
        g.open.retain(|w| w.strong_count() > 0);
        g.open.push(Arc::downgrade(&s));
        SimStream {
            s,
            conns: Some(self.clone()),
        }
    }
}

/// A simulated TCP connection; closed (reads and writes fail) once its server's
/// connections were closed by a kill.
pub(crate) struct SimStream {
    s: Arc<Mutex<Option<TcpStream>>>,
    conns: Option<Arc<Conns>>,
}

impl Drop for SimStream {
    fn drop(&mut self) {
        if let Some(c) = &self.conns {
            let all = {
                let mut g = lock(&c.0);
                if g.killing {
                    g.killing = false;
                    std::mem::take(&mut g.open)
                } else {
                    Vec::new()
                }
            };
            for w in all {
                if let Some(s) = w.upgrade() {
                    let stream = lock(&s).take();
                    drop(stream);
                }
            }
        }
        let own = lock(&self.s).take();
        drop(own);
    }
}

fn closed() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::NotConnected, "closed by a kill")
}

impl AsyncRead for SimStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match lock(&self.s).as_mut() {
            Some(s) => Pin::new(s).poll_read(cx, buf),
            None => Poll::Ready(Err(closed())),
        }
    }
}

impl AsyncWrite for SimStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match lock(&self.s).as_mut() {
            Some(s) => Pin::new(s).poll_write(cx, buf),
            None => Poll::Ready(Err(closed())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match lock(&self.s).as_mut() {
            Some(s) => Pin::new(s).poll_flush(cx),
            None => Poll::Ready(Err(closed())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match lock(&self.s).as_mut() {
            Some(s) => Pin::new(s).poll_shutdown(cx),
            None => Poll::Ready(Ok(())),
        }
    }
}

/// What tonic's server needs of an accepted connection.
impl Connected for SimStream {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        let g = lock(&self.s);
        TcpConnectInfo {
            local_addr: g.as_ref().and_then(|s| s.local_addr().ok()),
            remote_addr: g.as_ref().and_then(|s| s.peer_addr().ok()),
        }
    }
}

type Connecting = Pin<Box<dyn Future<Output = std::io::Result<TokioIo<SimStream>>> + Send>>;

/// Channels that open simulated TCP connections to the address of the cluster file (a
/// client's: a kill never drops them).
pub(crate) fn dialer() -> Dialer {
    dialer_of(None)
}

/// The same, for a server whose connections are `conns`.
pub(crate) fn server_dialer(conns: Arc<Conns>) -> Dialer {
    dialer_of(Some(conns))
}

/// The endpoint `http://ADDR`. A socket address always makes a valid URI; were one ever
/// refused, the channel would connect all the same (the connector above ignores the
/// URI), under a placeholder name.
fn endpoint(addr: SocketAddr) -> Endpoint {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap_or_else(|_| Endpoint::from_static("http://simulated"))
}

fn dialer_of(conns: Option<Arc<Conns>>) -> Dialer {
    Arc::new(move |addr: SocketAddr, connect_timeout: Duration| {
        let conns = conns.clone();
        let connector = tower::service_fn(move |_uri: tonic::codegen::http::Uri| {
            let conns = conns.clone();
            Box::pin(async move {
                let s = TcpStream::connect(addr).await?;
                Ok(TokioIo::new(match &conns {
                    Some(c) => c.register(s),
                    None => SimStream {
                        s: Arc::new(Mutex::new(Some(s))),
                        conns: None,
                    },
                }))
            }) as Connecting
        });
        endpoint(addr)
            .connect_timeout(connect_timeout)
            .connect_with_connector_lazy(connector)
    })
}
