//! Who may talk to a server: mutual TLS on every connection (client to server and
//! server to server), the identity a certificate gives its holder, and the test
//! certificates of `cairn cluster init-certs`.
//!
//! Every party presents a certificate signed by the cluster's CA (the cluster file's
//! `[tls] ca`). A server's certificate has the subject `CN=server-<id>`, a DNS name
//! `server-<id>` (what clients and peers verify) and its IP, and both extended key
//! usages (serverAuth, and clientAuth for its calls to peers). Each replica of a server
//! group has a certificate and key of its own with that same identity (the group's
//! id) and its own IP. A client's has `CN=client-<name>` and clientAuth only, so a
//! certificate made for a web server (serverAuth only) is refused as a client. A client
//! certificate may carry `OU=uids:LIST` (`*`, or numbers and ranges such as
//! `0,1000-1999`): the uids its holder may act as; a request for another uid runs as
//! nobody (65534), and without the field every uid but 0 is allowed (root squash, as NFS
//! does by default). Only a certificate that allows uid 0 may skip the server's
//! permission checks (a mount that leaves them to the kernel) or read a server's rows
//! (`cluster check`).
//!
//! The server side of the handshake is done here rather than in tonic, so that a refused
//! connection is counted (`cairn_tls_refused_total{reason}`) and handshakes are bounded
//! in time and number; the streams are then served by tonic as usual.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;
use tokio_rustls::server::TlsStream;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use cairn_fs::Cred;

use crate::config::ClusterConfig;

mod make;

pub use make::{
    init_certs, init_certs_for, issue_replica_cert, test_certs, test_cluster_text,
    test_group_certs, test_groups_text, CertAuthority, CertSpec, ClientCert,
};

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The cluster file has no `[tls]` table and `--insecure` was not given.
    #[error(
        "the cluster file has no [tls] table (create certificates with `cairn cluster \
         init-certs`), and plain TCP needs an explicit --insecure"
    )]
    NoTls,
    /// A certificate or key this party needs is not named.
    #[error("the cluster file names no {0}")]
    Missing(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not a PEM certificate or key.
    #[error("{path}: {msg}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// The TLS configuration was refused.
    #[error("TLS setup: {0}")]
    Setup(String),
    /// Certificates could not be generated.
    #[error("generating certificates: {0}")]
    Generate(String),
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn certs_of(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            msg: format!("not a PEM certificate: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_path_buf(),
            msg: "no certificate in it".into(),
        });
    }
    Ok(certs)
}

fn key_of(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Pem {
        path: path.to_path_buf(),
        msg: format!("not a PEM private key: {e}"),
    })
}

/// The CA file, this party's certificate and its key, read and checked.
struct Material {
    ca: (PathBuf, Vec<u8>),
    cert: (PathBuf, Vec<u8>),
    key: (PathBuf, Vec<u8>),
}

impl Material {
    fn load(ca: &Path, cert: &Path, key: &Path) -> Result<Material, TlsError> {
        certs_of(ca)?;
        certs_of(cert)?;
        key_of(key)?;
        Ok(Material {
            ca: (ca.to_path_buf(), read(ca)?),
            cert: (cert.to_path_buf(), read(cert)?),
            key: (key.to_path_buf(), read(key)?),
        })
    }
}

/// How a party opens connections to servers: TLS with its own certificate, or plain
/// TCP under `--insecure`.
#[derive(Clone)]
pub(crate) struct Dialer {
    tls: Option<(Certificate, Identity)>,
}

impl Dialer {
    fn new(
        cfg: &ClusterConfig,
        own: Option<&(PathBuf, PathBuf)>,
        what: &str,
    ) -> Result<Dialer, TlsError> {
        if cfg.insecure() {
            return Ok(Dialer { tls: None });
        }
        let t = cfg.tls().ok_or(TlsError::NoTls)?;
        let (cert, key) = own.ok_or_else(|| TlsError::Missing(what.to_string()))?;
        let m = Material::load(&t.ca, cert, key)?;
        Ok(Dialer {
            tls: Some((
                Certificate::from_pem(m.ca.1),
                Identity::from_pem(m.cert.1, m.key.1),
            )),
        })
    }

    /// A client's (its `[tls] client_cert` and `client_key`).
    pub(crate) fn client(cfg: &ClusterConfig) -> Result<Dialer, TlsError> {
        let own = cfg.tls().and_then(|t| t.client.as_ref());
        Dialer::new(
            cfg,
            own,
            "client certificate ([tls] client_cert and client_key)",
        )
    }

    /// The replica `me` (server id, replica id)'s, for its calls to peers (its own
    /// certificate).
    pub(crate) fn server(cfg: &ClusterConfig, me: (u32, u64)) -> Result<Dialer, TlsError> {
        Dialer::new(cfg, own_files(cfg, me), &own_name(cfg, me))
    }

    /// An endpoint for the replica of server `group` at `addr` (not connected): TLS
    /// verifies that its certificate is the CA's and names `server-<group>`.
    pub(crate) fn endpoint_at(&self, group: u32, addr: SocketAddr) -> Result<Endpoint, TlsError> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let ep = Endpoint::from_shared(format!("{scheme}://{addr}"))
            .map_err(|e| TlsError::Setup(e.to_string()))?;
        match &self.tls {
            None => Ok(ep),
            Some((ca, id)) => ep
                .tls_config(
                    ClientTlsConfig::new()
                        .ca_certificate(ca.clone())
                        .identity(id.clone())
                        .domain_name(format!("server-{group}")),
                )
                .map_err(|e| TlsError::Setup(format!("{e}: {:?}", std::error::Error::source(&e)))),
        }
    }
}

/// The certificate and key the cluster file names for replica `replica` of server
/// `group`.
fn own_files(cfg: &ClusterConfig, (group, replica): (u32, u64)) -> Option<&(PathBuf, PathBuf)> {
    let at = cfg
        .server(group)?
        .replicas
        .iter()
        .position(|r| r.id == replica)?;
    cfg.tls()?.servers.get(group as usize)?.get(at)?.as_ref()
}

/// What [`own_files`] looks for, for an error.
fn own_name(cfg: &ClusterConfig, (group, replica): (u32, u64)) -> String {
    if cfg.server(group).is_some_and(|s| s.replicas.len() > 1) {
        format!("certificate for server {group} replica {replica} (cert and key)")
    } else {
        format!("certificate for server {group} (cert and key)")
    }
}

/// Most handshakes a server runs at once; connections beyond are closed at once (and
/// counted as refused, reason `busy`).
pub(crate) const MAX_HANDSHAKES: usize = 1024;

/// The server side of mutual TLS.
pub(crate) struct Acceptor {
    tls: tokio_rustls::TlsAcceptor,
    timeout: Duration,
    refused: Arc<AtomicU64>,
}

impl Acceptor {
    /// The replica `me` (server id, replica id)'s: its certificate, and clients'
    /// verified against the CA.
    pub(crate) fn new(
        cfg: &ClusterConfig,
        me: (u32, u64),
        timeout: Duration,
        refused: Arc<AtomicU64>,
    ) -> Result<Acceptor, TlsError> {
        let t = cfg.tls().ok_or(TlsError::NoTls)?;
        let (cert, key) = own_files(cfg, me).ok_or_else(|| TlsError::Missing(own_name(cfg, me)))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for c in certs_of(&t.ca)? {
            roots.add(c).map_err(|e| TlsError::Pem {
                path: t.ca.clone(),
                msg: format!("not a usable CA certificate: {e}"),
            })?;
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .map_err(|e| TlsError::Setup(e.to_string()))?;
        let mut sc = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Setup(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs_of(cert)?, key_of(key)?)
            .map_err(|e| TlsError::Setup(format!("{}: {e}", cert.display())))?;
        sc.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Acceptor {
            tls: tokio_rustls::TlsAcceptor::from(Arc::new(sc)),
            timeout,
            refused,
        })
    }

    /// The connections of `listener` that complete a handshake within the timeout, as
    /// a stream for tonic; the others are closed and counted.
    pub(crate) fn incoming(
        self,
        listener: TcpListener,
    ) -> tokio_stream::wrappers::ReceiverStream<Result<TlsStream<TcpStream>, std::io::Error>> {
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
        let me = Arc::new(self);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    _ = tx.closed() => break,
                };
                let tcp = match accepted {
                    Ok((tcp, _)) => tcp,
                    Err(e) => {
                        // Out of descriptors and the like: pause rather than spin.
                        tracing::warn!("accept: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = tcp.set_nodelay(true);
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    me.refuse("busy");
                    continue;
                };
                let (me, tx) = (me.clone(), tx.clone());
                tokio::spawn(async move {
                    let _slot = slot;
                    let peer = tcp.peer_addr().ok();
                    match tokio::time::timeout(me.timeout, me.tls.accept(tcp)).await {
                        Ok(Ok(s)) => {
                            let _ = tx.send(Ok(s)).await;
                        }
                        Ok(Err(e)) => {
                            let why = reason(&e);
                            tracing::info!("refused a connection from {peer:?}: {why}: {e}");
                            me.refuse(why);
                        }
                        Err(_) => {
                            tracing::info!(
                                "refused a connection from {peer:?}: no handshake within {:?}",
                                me.timeout
                            );
                            me.refuse("timeout");
                        }
                    }
                });
            }
        });
        tokio_stream::wrappers::ReceiverStream::new(rx)
    }

    fn refuse(&self, why: &'static str) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("cairn_tls_refused_total", "reason" => why).increment(1);
    }
}

/// A short name for why a handshake failed.
fn reason(e: &std::io::Error) -> &'static str {
    use rustls::{CertificateError as C, Error as E};
    let Some(err) = e.get_ref().and_then(|x| x.downcast_ref::<E>()) else {
        return "handshake";
    };
    match err {
        E::NoCertificatesPresented => "no-certificate",
        E::InvalidCertificate(
            C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. },
        ) => "expired",
        E::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => "unknown-ca",
        E::InvalidCertificate(C::InvalidPurpose | C::InvalidPurposeContext { .. }) => {
            "wrong-purpose"
        }
        E::InvalidCertificate(_) => "bad-certificate",
        _ => "handshake",
    }
}

/// The uids (`OU=uids:LIST`) or gids (`OU=gids:LIST`) a client certificate allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ids {
    /// Every id.
    All,
    /// Every id but 0 (root squash: the default without the field).
    AllButRoot,
    /// These inclusive ranges.
    Ranges(Vec<(u32, u32)>),
}

impl Ids {
    /// Parses `*` or a comma-separated list of ids and ranges `a-b`.
    pub fn parse(s: &str) -> Option<Ids> {
        if s.trim() == "*" {
            return Some(Ids::All);
        }
        let mut v = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
                None => {
                    let a = part.parse().ok()?;
                    (a, a)
                }
            };
            if a > b {
                return None;
            }
            v.push((a, b));
        }
        Some(Ids::Ranges(v))
    }

    /// Whether `id` is allowed.
    pub fn allows(&self, id: u32) -> bool {
        match self {
            Ids::All => true,
            Ids::AllButRoot => id != 0,
            Ids::Ranges(v) => v.iter().any(|&(a, b)| a <= id && id <= b),
        }
    }
}

/// What a client certificate lets its holder act as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// The uids a request may name (`OU=uids:`; default: all but 0).
    pub uids: Ids,
    /// The gids a request may name as its group or supplementary groups (`OU=gids:`;
    /// default: every gid where the uids include 0, else all but 0).
    pub gids: Ids,
}

impl Limits {
    /// A certificate that allows nothing: every request runs as nobody.
    pub(crate) fn nothing() -> Limits {
        Limits {
            uids: Ids::Ranges(Vec::new()),
            gids: Ids::Ranges(Vec::new()),
        }
    }
}

/// Who sent a request, as its certificate says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Caller {
    /// No TLS (`--insecure`): trusted as before.
    Trusted,
    /// A server of the cluster.
    Server(u32),
    /// A client, limited to these ids.
    Client(Limits),
}

/// The identities of the certificates a server has seen, so that a request does not
/// parse its connection's certificate again (a parse costs microseconds; requests come
/// tens of thousands a second). Keyed by the leaf's xxh3, checked against its bytes.
#[derive(Default)]
pub(crate) struct Callers(parking_lot::Mutex<std::collections::HashMap<u64, (Vec<u8>, Caller)>>);

/// Certificates [`Callers`] remembers before it starts again.
const CALLERS_MAX: usize = 4096;

impl Callers {
    /// [`Caller::of`], remembered.
    pub(crate) fn of(&self, certs: Option<&[CertificateDer<'static>]>) -> Result<Caller, String> {
        let Some(leaf) = certs.and_then(|c| c.first()) else {
            return Caller::of(certs);
        };
        let key = xxhash_rust::xxh3::xxh3_64(leaf);
        if let Some((der, who)) = self.0.lock().get(&key) {
            if der.as_slice() == leaf.as_ref() {
                return Ok(who.clone());
            }
        }
        let who = Caller::of(certs)?;
        let mut m = self.0.lock();
        if m.len() >= CALLERS_MAX {
            m.clear();
        }
        m.insert(key, (leaf.to_vec(), who.clone()));
        Ok(who)
    }
}

/// nobody/nogroup: what a squashed request runs as.
pub(crate) const NOBODY: u32 = 65534;

impl Caller {
    /// The identity of the certificates a connection presented, or why it has none
    /// usable (a certificate of the CA whose subject is neither `server-N` nor
    /// `client-NAME`).
    pub(crate) fn of(certs: Option<&[CertificateDer<'static>]>) -> Result<Caller, String> {
        let leaf = certs
            .and_then(|c| c.first())
            .ok_or("no client certificate")?;
        let (_, x) = x509_parser::parse_x509_certificate(leaf)
            .map_err(|e| format!("certificate does not parse: {e}"))?;
        let subject = x.subject();
        let cn = subject
            .iter_common_name()
            .next()
            .and_then(|a| a.as_str().ok())
            .ok_or("certificate has no common name")?;
        if let Some(id) = cn.strip_prefix("server-") {
            return id
                .parse()
                .map(Caller::Server)
                .map_err(|_| format!("certificate {cn:?}: not server-<id>"));
        }
        if cn.strip_prefix("client-").is_some_and(|n| !n.is_empty()) {
            let (mut uids, mut gids) = (None, None);
            // `OU=uids:LIST`, `OU=gids:LIST`, or both in one OU as `uids:A;gids:B`.
            let ous = subject.iter_organizational_unit();
            for part in ous
                .filter_map(|ou| ou.as_str().ok())
                .flat_map(|s| s.split(';'))
            {
                for (prefix, slot) in [("uids:", &mut uids), ("gids:", &mut gids)] {
                    if let Some(list) = part.strip_prefix(prefix) {
                        let ids = Ids::parse(list).ok_or_else(|| {
                            format!("certificate {cn:?}: bad {prefix} list {list:?}")
                        })?;
                        *slot = Some(ids);
                    }
                }
            }
            let uids = uids.unwrap_or(Ids::AllButRoot);
            let gids = gids.unwrap_or(if uids.allows(0) {
                Ids::All
            } else {
                Ids::AllButRoot
            });
            return Ok(Caller::Client(Limits { uids, gids }));
        }
        Err(format!(
            "certificate {cn:?} is neither server-<id> nor client-<name>"
        ))
    }

    /// The credential and checks flag a request runs with, the same for every
    /// request: a client's uid outside its certificate's list runs as nobody (uid and
    /// gid [`NOBODY`], no groups); a gid outside the gid list runs as group nobody; a
    /// supplementary group outside it is dropped; only a certificate that allows uid 0
    /// may ask to skip permission checks.
    pub(crate) fn apply(&self, checks: bool, cred: Cred) -> (bool, Cred) {
        let l = match self {
            Caller::Trusted | Caller::Server(_) => return (checks, cred),
            Caller::Client(l) => l,
        };
        if !l.uids.allows(cred.uid) {
            return (true, Cred::new(NOBODY, NOBODY));
        }
        let gid = if l.gids.allows(cred.gid) {
            cred.gid
        } else {
            NOBODY
        };
        let mut groups = [0u32; cairn_fs::Groups::MAX];
        let mut n = 0;
        for &g in cred.groups.as_slice() {
            if l.gids.allows(g) {
                groups[n] = g;
                n += 1;
            }
        }
        let limited = Cred::new(cred.uid, gid).with_groups(&groups[..n]);
        (checks || !l.uids.allows(0), limited)
    }

    /// Whether it may read a server's rows or its whole status (`cluster status`,
    /// `check`).
    pub(crate) fn is_admin(&self) -> bool {
        match self {
            Caller::Trusted | Caller::Server(_) => true,
            Caller::Client(l) => l.uids.allows(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ReplicaInfo, ServerInfo};

    #[test]
    fn id_lists() {
        assert_eq!(Ids::parse("*"), Some(Ids::All));
        let u = Ids::parse("0, 1000-1999").unwrap();
        assert!(u.allows(0) && u.allows(1500) && !u.allows(2000) && !u.allows(1));
        assert_eq!(Ids::parse("5-3"), None);
        assert_eq!(Ids::parse("x"), None);
        assert!(!Ids::AllButRoot.allows(0) && Ids::AllButRoot.allows(1));
    }

    #[test]
    fn identities_from_certificates() {
        let ca = CertAuthority::new("t").unwrap();
        let der = |pem: &str| -> Vec<CertificateDer<'static>> {
            vec![CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()]
        };
        let (s, _) = ca
            .issue(&CertSpec::server(3, "127.0.0.1".parse().unwrap()))
            .unwrap();
        assert_eq!(Caller::of(Some(der(&s).as_slice())), Ok(Caller::Server(3)));
        let (c, _) = ca.issue(&CertSpec::client("a", None)).unwrap();
        let who = Caller::of(Some(der(&c).as_slice())).unwrap();
        assert_eq!(
            who,
            Caller::Client(Limits {
                uids: Ids::AllButRoot,
                gids: Ids::AllButRoot
            })
        );
        // Root squash; a permitted uid keeps its credential but not "no checks".
        assert_eq!(
            who.apply(false, Cred::ROOT),
            (true, Cred::new(NOBODY, NOBODY))
        );
        assert_eq!(who.apply(false, Cred::new(7, 7)), (true, Cred::new(7, 7)));
        // Group 0 squashed to nobody, as the primary group and among the others.
        assert_eq!(
            who.apply(true, Cred::new(7, 0).with_groups(&[0, 6, 0, 8])),
            (true, Cred::new(7, NOBODY).with_groups(&[6, 8]))
        );
        assert!(!who.is_admin());
        // Both lists: outside them, uid nobody (and nothing else), or group nobody.
        let spec = CertSpec::client("c", Some("1000-1999")).with_gids(Some("100,1000-1999"));
        let (c, _) = ca.issue(&spec).unwrap();
        let who = Caller::of(Some(der(&c).as_slice())).unwrap();
        let staff = Cred::new(1000, 100).with_groups(&[100, 27, 1001]);
        assert_eq!(
            who.apply(true, staff),
            (true, Cred::new(1000, 100).with_groups(&[100, 1001]))
        );
        assert_eq!(
            who.apply(true, Cred::new(1000, 27)),
            (true, Cred::new(1000, NOBODY))
        );
        assert_eq!(
            who.apply(true, Cred::new(999, 100)),
            (true, Cred::new(NOBODY, NOBODY))
        );
        let (c, _) = ca.issue(&CertSpec::client("b", Some("*"))).unwrap();
        let who = Caller::of(Some(der(&c).as_slice())).unwrap();
        assert_eq!(who.apply(false, Cred::ROOT), (false, Cred::ROOT));
        let wheel = Cred::ROOT.with_groups(&[0, 10]);
        assert_eq!(who.apply(true, wheel), (true, wheel));
        assert!(who.is_admin());
        let mut odd = CertSpec::client("x", None);
        odd.common_name = "someone".into();
        let (c, _) = ca.issue(&odd).unwrap();
        assert!(Caller::of(Some(der(&c).as_slice())).is_err());
        assert!(Caller::of(None).is_err());
    }

    /// A leaf certificate file's identity.
    fn caller_of(file: &Path) -> Caller {
        let certs = certs_of(file).unwrap();
        Caller::of(Some(certs.as_slice())).unwrap()
    }

    #[test]
    fn replica_certificates() {
        let tmp = std::env::temp_dir().join(format!("cairn-tls-{}", std::process::id()));
        let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        let group = |g: u32, ports: [u16; 3]| {
            let replicas = (0u64..)
                .zip(ports)
                .map(|(id, p)| ReplicaInfo { id, addr: at(p) });
            ServerInfo::group(g, replicas.collect()).unwrap()
        };
        let servers = [group(0, [1, 2, 3]), group(1, [4, 5, 6])];
        let file = init_certs(&tmp.join("a"), &servers, &[ClientCert::admin("x")]).unwrap();
        let cfg = ClusterConfig::load(&file).unwrap();
        assert_eq!(cfg.servers(), &servers);
        assert_eq!(cfg.version(), 2);
        let t = cfg.tls().unwrap();
        let mut seen = std::collections::HashSet::new();
        for (g, files) in (0u32..).zip(&t.servers) {
            assert_eq!(files.len(), 3);
            for (r, f) in files.iter().enumerate() {
                let (cert, key) = f.as_ref().unwrap();
                assert!(cert.ends_with(format!("server-{g}-{r}.pem")), "{cert:?}");
                key_of(key).unwrap();
                assert_eq!(caller_of(cert), Caller::Server(g));
                assert!(seen.insert(read(cert).unwrap()), "{cert:?} twice");
                assert!(own_files(&cfg, (g, r as u64)).is_some());
            }
        }
        assert!(own_files(&cfg, (0, 3)).is_none() && own_files(&cfg, (2, 0)).is_none());
        // A new random id each time; certificates for a file's servers keep its id.
        let again = init_certs(&tmp.join("b"), &servers, &[]).unwrap();
        let again = ClusterConfig::load(&again).unwrap();
        assert_ne!(again.cluster_id(), cfg.cluster_id());
        let kept = init_certs_for(&tmp.join("c"), &cfg, &[]).unwrap();
        assert_eq!(
            ClusterConfig::load(&kept).unwrap().cluster_id(),
            cfg.cluster_id()
        );
        // One replica each: today's file, names and id.
        let single: Vec<ServerInfo> = (0..2)
            .map(|i| ServerInfo::single(i, at(7 + i as u16)))
            .collect();
        let file = init_certs(&tmp.join("d"), &single, &[]).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.starts_with("[tls]\n") && !text.contains("replica"),
            "{text}"
        );
        let one = ClusterConfig::load(&file).unwrap();
        assert_eq!(one.version(), 1);
        assert_eq!(
            one.cluster_id(),
            xxhash_rust::xxh3::xxh3_64(b"0=127.0.0.1:7;1=127.0.0.1:8;")
        );
        assert_eq!(caller_of(&tmp.join("d/server-1.pem")), Caller::Server(1));
        // A list that is not valid: nothing written.
        let bad = [group(0, [1, 2, 3]), group(1, [3, 4, 5])];
        let e = init_certs(&tmp.join("e"), &bad, &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("share address"), "{e}");
        assert!(!tmp.join("e").exists());
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn test_group_files() {
        let tmp = std::env::temp_dir().join(format!("cairn-tls-groups-{}", std::process::id()));
        test_group_certs(&tmp, &[2, 1]).unwrap();
        let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        let text = test_groups_text(&tmp, &[vec![at(1), at(2)], vec![at(3)]], "admin");
        let cfg = ClusterConfig::parse(&text).unwrap();
        assert_eq!(cfg.locate(at(2)), Some((0, 1)));
        for (g, r) in [(0, 0), (0, 1), (1, 0)] {
            let (cert, _) = own_files(&cfg, (g, r)).unwrap();
            assert_eq!(caller_of(cert), Caller::Server(g));
        }
        Dialer::server(&cfg, (0, 1)).unwrap();
        Dialer::client(&cfg).unwrap();
        assert!(matches!(
            Dialer::server(&cfg, (1, 1)),
            Err(TlsError::Missing(_))
        ));
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
