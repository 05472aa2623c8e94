//! Making certificates: a CA for a cluster, server and client certificates
//! ([`CertSpec`]), `cairn cluster init-certs` ([`init_certs`]) and the tests'
//! certificates and cluster files.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use tokio_rustls::rustls;

use super::TlsError;
use crate::config::{ClusterConfig, ReplicaInfo, ServerInfo};

/// What one certificate of [`CertAuthority::issue`] is.
#[derive(Clone, Debug)]
pub struct CertSpec {
    /// The subject's common name (`server-<id>` or `client-<name>`).
    pub common_name: String,
    /// DNS names (subject alternative names).
    pub dns: Vec<String>,
    /// IP addresses (subject alternative names).
    pub ips: Vec<IpAddr>,
    /// Extended key usage serverAuth.
    pub server_auth: bool,
    /// Extended key usage clientAuth.
    pub client_auth: bool,
    /// `OU=uids:LIST`, the uids a client may act as.
    pub uids: Option<String>,
    /// `OU=gids:LIST`, the gids a client may act as (group and supplementary groups).
    pub gids: Option<String>,
    /// Valid only in 2001 (a certificate that has expired, for tests).
    pub expired: bool,
}

impl CertSpec {
    /// Server `id`'s certificate for `ip`.
    pub fn server(id: u32, ip: IpAddr) -> CertSpec {
        CertSpec {
            common_name: format!("server-{id}"),
            dns: vec![format!("server-{id}")],
            ips: vec![ip],
            server_auth: true,
            client_auth: true,
            uids: None,
            gids: None,
            expired: false,
        }
    }

    /// Client `name`'s certificate; `uids` as in `OU=uids:` (None: all but root).
    pub fn client(name: &str, uids: Option<&str>) -> CertSpec {
        CertSpec {
            common_name: format!("client-{name}"),
            dns: Vec::new(),
            ips: Vec::new(),
            server_auth: false,
            client_auth: true,
            uids: uids.map(str::to_owned),
            gids: None,
            expired: false,
        }
    }

    /// The same certificate limited to these gids (`OU=gids:`; None: every gid if its
    /// uids include 0, else every gid but 0).
    pub fn with_gids(mut self, gids: Option<&str>) -> CertSpec {
        self.gids = gids.map(str::to_owned);
        self
    }
}

/// A client certificate [`init_certs`] makes: `client-NAME`, limited to the uids and
/// gids of its lists (`*`, or ids and ranges `a-b` separated by commas; `None`: the
/// defaults of [`CertSpec::client`] and [`CertSpec::with_gids`]).
#[derive(Clone, Debug)]
pub struct ClientCert {
    /// The NAME of `client-NAME`.
    pub name: String,
    /// `OU=uids:` list.
    pub uids: Option<String>,
    /// `OU=gids:` list.
    pub gids: Option<String>,
}

impl ClientCert {
    /// `client-NAME`, allowed every uid and gid (an administrator's certificate).
    pub fn admin(name: &str) -> ClientCert {
        ClientCert {
            name: name.to_string(),
            uids: Some("*".to_string()),
            gids: None,
        }
    }
}

/// A certificate authority for a test cluster (ECDSA P-256 keys).
pub struct CertAuthority {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    cert_pem: String,
    key_pem: String,
}

impl std::fmt::Debug for CertAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertAuthority").finish_non_exhaustive()
    }
}

fn gen_err(e: rcgen::Error) -> TlsError {
    TlsError::Generate(e.to_string())
}

impl CertAuthority {
    /// A new CA named `name`.
    pub fn new(name: &str) -> Result<CertAuthority, TlsError> {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(gen_err)?;
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(rcgen::DnType::CommonName, name.to_string());
        p.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let key = rcgen::KeyPair::generate().map_err(gen_err)?;
        let cert = p.self_signed(&key).map_err(gen_err)?;
        let key_pem = key.serialize_pem();
        Ok(CertAuthority {
            issuer: rcgen::Issuer::new(p, key),
            cert_pem: cert.pem(),
            key_pem,
        })
    }

    /// The CA `init_certs` wrote in `dir` (`ca.pem`, `ca.key`), to issue more
    /// certificates with (a replica added to a group, say).
    pub fn load(dir: &Path) -> Result<CertAuthority, TlsError> {
        let text = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|source| TlsError::Io { path, source })
        };
        let (cert_pem, key_pem) = (text("ca.pem")?, text("ca.key")?);
        let pem = |msg: String| TlsError::Pem {
            path: dir.join("ca.pem"),
            msg,
        };
        let key = rcgen::KeyPair::from_pem(&key_pem).map_err(|e| pem(format!("ca.key: {e}")))?;
        let issuer =
            rcgen::Issuer::from_ca_cert_pem(&cert_pem, key).map_err(|e| pem(e.to_string()))?;
        Ok(CertAuthority {
            issuer,
            cert_pem,
            key_pem,
        })
    }

    /// The CA's certificate (PEM).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A certificate signed by this CA: `(certificate PEM, key PEM)`.
    pub fn issue(&self, spec: &CertSpec) -> Result<(String, String), TlsError> {
        let mut p = rcgen::CertificateParams::new(spec.dns.clone()).map_err(gen_err)?;
        for ip in &spec.ips {
            p.subject_alt_names.push(rcgen::SanType::IpAddress(*ip));
        }
        p.distinguished_name
            .push(rcgen::DnType::CommonName, spec.common_name.clone());
        // One OU per list: a second OU attribute of the same type would be dropped by
        // rcgen's name (a map by type), so both lists share one OU when both are given.
        let lists: Vec<String> = [("uids", &spec.uids), ("gids", &spec.gids)]
            .into_iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}:{v}")))
            .collect();
        if !lists.is_empty() {
            p.distinguished_name
                .push(rcgen::DnType::OrganizationalUnitName, lists.join(";"));
        }
        p.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        if spec.server_auth {
            p.extended_key_usages
                .push(rcgen::ExtendedKeyUsagePurpose::ServerAuth);
        }
        if spec.client_auth {
            p.extended_key_usages
                .push(rcgen::ExtendedKeyUsagePurpose::ClientAuth);
        }
        p.use_authority_key_identifier_extension = true;
        if spec.expired {
            p.not_before = rcgen::date_time_ymd(2001, 1, 1);
            p.not_after = rcgen::date_time_ymd(2001, 12, 31);
        }
        let key = rcgen::KeyPair::generate().map_err(gen_err)?;
        let cert = p.signed_by(&key, &self.issuer).map_err(gen_err)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

fn write(path: &Path, text: &str, secret: bool) -> Result<(), TlsError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| TlsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    if secret {
        o.mode(0o600);
    }
    let mut f = o.open(path).map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)
}

/// Creates, in `dir` (created if needed), a CA (`ca.pem`, `ca.key`), a certificate and
/// key for each replica of each server and for each client (`client-<name>.pem`,
/// `.key`; each [`CertSpec::client`]'s uids and gids lists), and `cluster.toml`: the
/// servers with the TLS keys filled in, the first client as the file's client. Returns
/// the path of `cluster.toml`.
///
/// A server of one replica (id 0) is written as a `[[server]]` table with an `addr` and
/// certificate files `server-<id>.pem`, `.key`, as cluster files of version 1 are; a
/// server of several as `[[server.replica]]` tables with files
/// `server-<id>-<replica>.pem`, `.key`, in a file of `version = 2` with a new random
/// `cluster_id`. Every replica's certificate has its server's identity
/// ([`CertSpec::server`]) and its own IP.
pub fn init_certs(
    dir: &Path,
    servers: &[ServerInfo],
    clients: &[ClientCert],
) -> Result<PathBuf, TlsError> {
    write_cluster(dir, servers, clients, None)
}

/// [`init_certs`] for the servers of `cfg` (`cairn cluster init-certs --cluster FILE`),
/// keeping its cluster id: the written file gives a `cluster_id` where its servers
/// alone would give another.
pub fn init_certs_for(
    dir: &Path,
    cfg: &ClusterConfig,
    clients: &[ClientCert],
) -> Result<PathBuf, TlsError> {
    write_cluster(dir, cfg.servers(), clients, Some(cfg.cluster_id()))
}

/// Issues, with the CA `init_certs` wrote in `dir`, the certificate and key of replica
/// `replica` of server `group` listening on `ip`, written there as
/// `server-<group>-<replica>.pem` and `.key` (as `init_certs` names them). Returns the
/// two file names.
pub fn issue_replica_cert(
    dir: &Path,
    group: u32,
    replica: u64,
    ip: IpAddr,
) -> Result<(String, String), TlsError> {
    let ca = CertAuthority::load(dir)?;
    let name = format!("server-{group}-{replica}");
    let (c, k) = ca.issue(&CertSpec::server(group, ip))?;
    let (cert, key) = (format!("{name}.pem"), format!("{name}.key"));
    write(&dir.join(&cert), &c, false)?;
    write(&dir.join(&key), &k, true)?;
    Ok((cert, key))
}

/// A server's replicas as [`init_certs`] writes them (a list without any: one at its
/// `addr`).
fn replicas_of(s: &ServerInfo) -> Vec<ReplicaInfo> {
    if s.replicas.is_empty() {
        vec![ReplicaInfo {
            id: 0,
            addr: s.addr,
        }]
    } else {
        s.replicas.clone()
    }
}

/// The `[[server]]` tables of `servers` naming their certificate files, the files to
/// make (name without extension, and certificate), and whether some table has the
/// `[[server.replica]]` form.
fn server_tables(servers: &[ServerInfo]) -> (String, Vec<(String, CertSpec)>, bool) {
    let (mut toml, mut files, mut v2) = (String::new(), Vec::new(), false);
    for s in servers {
        let replicas = replicas_of(s);
        if let [ReplicaInfo { id: 0, addr }] = replicas.as_slice() {
            toml.push_str(&format!(
                "\n[[server]]\nid = {0}\naddr = \"{1}\"\ncert = \"server-{0}.pem\"\nkey = \"server-{0}.key\"\n",
                s.id, addr
            ));
            files.push((
                format!("server-{}", s.id),
                CertSpec::server(s.id, addr.ip()),
            ));
            continue;
        }
        v2 = true;
        toml.push_str(&format!("\n[[server]]\nid = {}\n", s.id));
        for r in replicas {
            let name = format!("server-{}-{}", s.id, r.id);
            toml.push_str(&format!(
                "[[server.replica]]\nid = {}\naddr = \"{}\"\ncert = \"{name}.pem\"\nkey = \"{name}.key\"\n",
                r.id, r.addr
            ));
            files.push((name, CertSpec::server(s.id, r.addr.ip())));
        }
    }
    (toml, files, v2)
}

/// A new random cluster id (from the system's random source, through rustls).
fn random_cluster_id() -> Result<u64, TlsError> {
    let mut b = [0u8; 8];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut b)
        .map_err(|e| TlsError::Generate(format!("a random cluster id: {e:?}")))?;
    Ok(u64::from_le_bytes(b))
}

/// [`init_certs`], with this cluster id (None: the one the servers give, or a random
/// one where some server has several replicas).
fn write_cluster(
    dir: &Path,
    servers: &[ServerInfo],
    clients: &[ClientCert],
    id: Option<u64>,
) -> Result<PathBuf, TlsError> {
    for ClientCert { name, .. } in clients {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(TlsError::Generate(format!(
                "client name {name:?}: use letters, digits, - and _"
            )));
        }
    }
    let mut body = String::from("[tls]\nca = \"ca.pem\"\n");
    if let Some(ClientCert { name, .. }) = clients.first() {
        body.push_str(&format!(
            "client_cert = \"client-{name}.pem\"\nclient_key = \"client-{name}.key\"\n"
        ));
    }
    let (tables, files, v2) = server_tables(servers);
    body.push_str(&tables);
    // The list is checked (ids, replicas, addresses) before anything is written.
    let invalid = |e: crate::ConfigError| TlsError::Generate(format!("the server list: {e}"));
    let derived = ClusterConfig::parse(&body).map_err(invalid)?.cluster_id();
    let id = match id {
        Some(id) => (id != derived).then_some(id),
        None if servers.iter().any(|s| s.replicas.len() > 1) => Some(random_cluster_id()?),
        None => None,
    };
    let mut toml = String::new();
    if v2 {
        toml.push_str("version = 2\n");
    }
    if let Some(id) = id {
        toml.push_str(&format!("cluster_id = \"{id:#018x}\"\n"));
    }
    if !toml.is_empty() {
        toml.push('\n');
    }
    toml.push_str(&body);
    ClusterConfig::parse(&toml).map_err(invalid)?;
    std::fs::create_dir_all(dir).map_err(|source| TlsError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let ca = CertAuthority::new("cairn cluster CA")?;
    write(&dir.join("ca.pem"), ca.cert_pem(), false)?;
    write(&dir.join("ca.key"), &ca.key_pem, true)?;
    for ClientCert { name, uids, gids } in clients {
        let spec = CertSpec::client(name, uids.as_deref()).with_gids(gids.as_deref());
        let (c, k) = ca.issue(&spec)?;
        write(&dir.join(format!("client-{name}.pem")), &c, false)?;
        write(&dir.join(format!("client-{name}.key")), &k, true)?;
    }
    for (name, spec) in files {
        let (c, k) = ca.issue(&spec)?;
        write(&dir.join(format!("{name}.pem")), &c, false)?;
        write(&dir.join(format!("{name}.key")), &k, true)?;
    }
    let file = dir.join("cluster.toml");
    write(&file, &toml, false)?;
    Ok(file)
}

/// The client certificates of [`test_certs`] and [`test_group_certs`].
const TEST_CLIENTS: [(&str, Option<&str>); 3] = [
    ("admin", Some("*")),
    ("user", None),
    ("u1000", Some("1000-1999")),
];

/// Test support: a new CA in `dir` (created if needed; `ca.pem`), and the certificates
/// `specs` signed by it (`NAME.pem`, `NAME.key`) with the clients of [`TEST_CLIENTS`].
fn test_files(dir: &Path, mut specs: Vec<(String, CertSpec)>) -> Result<CertAuthority, TlsError> {
    std::fs::create_dir_all(dir).map_err(|source| TlsError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let ca = CertAuthority::new("cairn test CA")?;
    write(&dir.join("ca.pem"), ca.cert_pem(), false)?;
    for (name, uids) in TEST_CLIENTS {
        specs.push((format!("client-{name}"), CertSpec::client(name, uids)));
    }
    for (file, spec) in specs {
        let (c, k) = ca.issue(&spec)?;
        write(&dir.join(format!("{file}.pem")), &c, false)?;
        write(&dir.join(format!("{file}.key")), &k, true)?;
    }
    Ok(ca)
}

/// Test support: in `dir`, a CA (`ca.pem`) and certificates for servers `0..servers`
/// (on 127.0.0.1) and for the clients `admin` (every uid), `user` (every uid but 0)
/// and `u1000` (uids 1000-1999). Returns the CA, to sign more.
#[doc(hidden)]
pub fn test_certs(dir: &Path, servers: u32) -> Result<CertAuthority, TlsError> {
    let ip = IpAddr::from([127, 0, 0, 1]);
    let specs = (0..servers)
        .map(|i| (format!("server-{i}"), CertSpec::server(i, ip)))
        .collect();
    test_files(dir, specs)
}

/// Test support: in `dir`, a CA (`ca.pem`), certificates `server-<g>-<r>` (on
/// 127.0.0.1) for replicas `0..groups[g]` of each server `g`, and the clients of
/// [`test_certs`]. Returns the CA, to sign more.
#[doc(hidden)]
pub fn test_group_certs(dir: &Path, groups: &[u32]) -> Result<CertAuthority, TlsError> {
    let ip = IpAddr::from([127, 0, 0, 1]);
    let mut specs = Vec::new();
    for (g, &n) in (0u32..).zip(groups) {
        for r in 0..n {
            specs.push((format!("server-{g}-{r}"), CertSpec::server(g, ip)));
        }
    }
    test_files(dir, specs)
}

/// The `[tls]` table of the test cluster files, as client `client`.
fn test_tls_text(dir: &Path, client: &str) -> String {
    let d = dir.display();
    format!(
        "[tls]\nca = \"{d}/ca.pem\"\nclient_cert = \"{d}/client-{client}.pem\"\nclient_key = \"{d}/client-{client}.key\"\n"
    )
}

/// Test support: a cluster file's text for servers at `addrs` with the certificates
/// [`test_certs`] made in `dir` (absolute), as client `client`.
#[doc(hidden)]
pub fn test_cluster_text(dir: &Path, addrs: &[SocketAddr], client: &str) -> String {
    let d = dir.display();
    let mut t = test_tls_text(dir, client);
    for (i, a) in addrs.iter().enumerate() {
        t.push_str(&format!(
            "\n[[server]]\nid = {i}\naddr = \"{a}\"\ncert = \"{d}/server-{i}.pem\"\nkey = \"{d}/server-{i}.key\"\n"
        ));
    }
    t
}

/// Test support: a cluster file's text (version 2) for server groups whose replicas
/// (ids 0, 1, …) are at `groups[g]`, with the certificates [`test_group_certs`] made in
/// `dir` (absolute), as client `client`.
#[doc(hidden)]
pub fn test_groups_text(dir: &Path, groups: &[Vec<SocketAddr>], client: &str) -> String {
    let d = dir.display();
    let mut t = format!("version = 2\n\n{}", test_tls_text(dir, client));
    for (g, addrs) in groups.iter().enumerate() {
        t.push_str(&format!("\n[[server]]\nid = {g}\n"));
        for (r, a) in addrs.iter().enumerate() {
            t.push_str(&format!(
                "[[server.replica]]\nid = {r}\naddr = \"{a}\"\ncert = \"{d}/server-{g}-{r}.pem\"\nkey = \"{d}/server-{g}-{r}.key\"\n"
            ));
        }
    }
    t
}
