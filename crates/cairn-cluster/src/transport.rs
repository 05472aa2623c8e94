//! How servers, clients and the admin tools reach a server. By default through
//! [`crate::tls`]: a lazy TCP channel with mutual TLS (plain TCP under `--insecure`). A
//! [`Dialer`] replaces the connection itself: the simulation's in-memory network
//! (`cairn cluster-sim`). Such a network carries plain HTTP/2, so a custom dialer is
//! accepted only with an insecure cluster config
//! ([`ClusterConfig::set_insecure`](crate::ClusterConfig::set_insecure)); real servers and
//! clients never take this path.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tonic::transport::Channel;

use crate::config::{ClusterConfig, ServerInfo};
use crate::tls::TlsError;

/// Largest message a server or client sends or accepts.
pub(crate) const MAX_MESSAGE: usize = 16 << 20;

/// Makes the channel to the server at an address (called once per server, inside a
/// tokio runtime; the channel should connect lazily). Arguments: the server's address
/// in the cluster file and the connect timeout.
pub type Dialer = Arc<dyn Fn(SocketAddr, Duration) -> Channel + Send + Sync>;

/// A client of service `Meta` over `ch`, with the message size limits.
pub(crate) fn meta_client(ch: Channel) -> crate::proto::meta_client::MetaClient<Channel> {
    crate::proto::meta_client::MetaClient::new(ch)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE)
}

/// How one party reaches the servers of a cluster.
#[derive(Clone)]
pub(crate) enum Reach {
    /// TCP, with mutual TLS unless the cluster file is insecure.
    Net(crate::tls::Dialer),
    /// The caller's connections (the simulation).
    Custom(Dialer),
}

impl Reach {
    /// A client's (and the admin tools'): its `[tls]` client certificate, or `custom`.
    pub(crate) fn client(cfg: &ClusterConfig, custom: Option<Dialer>) -> Result<Reach, TlsError> {
        match custom {
            Some(d) => Reach::custom(cfg, d),
            None => Ok(Reach::Net(crate::tls::Dialer::client(cfg)?)),
        }
    }

    /// The replica `me`'s (server id, replica id), for its calls to peers: its own
    /// certificate, or `custom`.
    pub(crate) fn server(
        cfg: &ClusterConfig,
        me: (u32, u64),
        custom: Option<Dialer>,
    ) -> Result<Reach, TlsError> {
        match custom {
            Some(d) => Reach::custom(cfg, d),
            None => Ok(Reach::Net(crate::tls::Dialer::server(cfg, me)?)),
        }
    }

    fn custom(cfg: &ClusterConfig, d: Dialer) -> Result<Reach, TlsError> {
        if !cfg.insecure() {
            return Err(TlsError::Setup(
                "a custom dialer carries no TLS: it needs an insecure cluster config".into(),
            ));
        }
        Ok(Reach::Custom(d))
    }

    /// Lazy channels to every replica of `s`, with their addresses (inside a tokio
    /// runtime).
    pub(crate) fn replica_channels(
        &self,
        s: &ServerInfo,
        connect_timeout: Duration,
    ) -> Result<Vec<(SocketAddr, Channel)>, TlsError> {
        s.replicas
            .iter()
            .map(|r| Ok((r.addr, self.channel_to(s.id, r.addr, connect_timeout)?)))
            .collect()
    }

    /// A lazy channel to the replica of group `group` at `addr` (inside a tokio
    /// runtime).
    pub(crate) fn channel_to(
        &self,
        group: u32,
        addr: SocketAddr,
        connect_timeout: Duration,
    ) -> Result<Channel, TlsError> {
        match self {
            Reach::Custom(d) => Ok(d(addr, connect_timeout)),
            Reach::Net(d) => Ok(d
                .endpoint_at(group, addr)?
                .connect_timeout(connect_timeout)
                .tcp_nodelay(true)
                .connect_lazy()),
        }
    }
}
