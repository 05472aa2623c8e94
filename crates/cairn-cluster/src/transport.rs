//! How servers, clients and the admin tools reach a server: by default a lazy TCP
//! channel to its address; a [`Dialer`] replaces that (the simulation's in-memory
//! network, `cairn cluster-sim`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

/// Makes the channel to the server at an address (called once per server, inside a
/// tokio runtime; the channel should connect lazily). Arguments: the server's address
/// in the cluster file and the connect timeout.
pub type Dialer = Arc<dyn Fn(SocketAddr, Duration) -> Channel + Send + Sync>;

/// A channel to `addr`: through `dialer` if one is given, else a lazy TCP connection
/// (must be called inside a tokio runtime).
pub(crate) fn channel(
    dialer: Option<&Dialer>,
    addr: SocketAddr,
    connect_timeout: Duration,
) -> Channel {
    match dialer {
        Some(d) => d(addr, connect_timeout),
        None => Endpoint::from_shared(format!("http://{addr}"))
            .expect("a socket address is a valid URI")
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            .connect_lazy(),
    }
}
