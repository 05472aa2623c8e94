//! The glue between tonic and turmoil's simulated TCP: accepted streams that tonic's
//! server can serve, and a [`Dialer`] whose channels connect through the simulation.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use cairn_cluster::transport::Dialer;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::{Connected, TcpConnectInfo};
use tonic::transport::Endpoint;
use turmoil::net::TcpStream;

/// A connection a simulated server accepted.
pub(crate) struct Accepted(pub TcpStream);

impl Connected for Accepted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        TcpConnectInfo {
            local_addr: self.0.local_addr().ok(),
            remote_addr: self.0.peer_addr().ok(),
        }
    }
}

impl AsyncRead for Accepted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Accepted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

type Connecting = Pin<Box<dyn Future<Output = std::io::Result<TokioIo<TcpStream>>> + Send>>;

/// Channels that open simulated TCP connections to the address of the cluster file.
pub(crate) fn dialer() -> Dialer {
    Arc::new(|addr: SocketAddr, connect_timeout: Duration| {
        let connector = tower::service_fn(move |_uri: tonic::codegen::http::Uri| {
            Box::pin(async move { TcpStream::connect(addr).await.map(TokioIo::new) }) as Connecting
        });
        Endpoint::from_shared(format!("http://{addr}"))
            .expect("a socket address is a valid URI")
            .connect_timeout(connect_timeout)
            .connect_with_connector_lazy(connector)
    })
}
