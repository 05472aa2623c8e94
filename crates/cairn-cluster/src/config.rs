//! The cluster file: the static list of metadata servers that every server and client
//! reads (TOML, see FORMAT.md "Cluster file and protocol"). A server id names a
//! *group* of 1 to [`MAX_REPLICAS`] replicas, each a `cairn serve` process with its own
//! store and certificate; a group of one is written as today's `[[server]]` table with
//! an `addr`, a larger one with `[[server.replica]]` tables (format version 2).
//!
//! ```
//! let c = cairn_cluster::ClusterConfig::parse(r#"
//! [[server]]
//! id = 0
//! addr = "127.0.0.1:7100"
//! [[server]]
//! id = 1
//! [[server.replica]]
//! addr = "127.0.0.1:7101"
//! [[server.replica]]
//! addr = "127.0.0.1:7102"
//! "#)?;
//! assert_eq!(c.servers().len(), 2);
//! assert_eq!(c.server(1).map(|s| s.replicas.len()), Some(2));
//! assert_eq!(c.locate("127.0.0.1:7102".parse()?), Some((1, 1)));
//! assert!(c.replicated() && c.version() == 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use xxhash_rust::xxh3::xxh3_64;

/// Most servers (groups) a cluster may have (server ids live in 16 bits of an inode
/// number).
pub const MAX_SERVERS: usize = 1 << 16;

/// Most replicas a server group may have.
pub const MAX_REPLICAS: usize = 7;

/// The newest cluster file version this build reads (and the one that has
/// `[[server.replica]]` tables).
pub const MAX_VERSION: u32 = 2;

/// Why a cluster file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML of the expected shape.
    #[error("cluster file is not valid: {0}")]
    Syntax(String),
    /// The server list is inconsistent.
    #[error("cluster file is not valid: {0}")]
    Invalid(String),
    /// The file's `version` is one this build does not read.
    #[error(
        "cluster file version {0}: written by a newer cairn (this build reads versions 1 \
         to {MAX_VERSION})"
    )]
    Version(i64),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    version: Option<i64>,
    cluster_id: Option<String>,
    election_timeout_ms: Option<i64>,
    #[serde(default)]
    server: Vec<RawServer>,
    tls: Option<RawTls>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    id: u32,
    addr: Option<String>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    replica: Option<Vec<RawReplica>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReplica {
    id: Option<u64>,
    addr: String,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    ca: PathBuf,
    client_cert: Option<PathBuf>,
    client_key: Option<PathBuf>,
}

/// A certificate and its key (PEM files).
type Pair = (PathBuf, PathBuf);

/// The TLS files a cluster file names (see FORMAT.md, "Cluster file"): paths relative
/// to the cluster file's directory are resolved by [`ClusterConfig::load`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsPaths {
    /// The cluster's CA certificate (PEM): every party's certificate must be signed by it.
    pub ca: PathBuf,
    /// This party's certificate and key as a client (PEM), if it is one.
    pub client: Option<(PathBuf, PathBuf)>,
    /// Each replica's certificate and key (PEM), where the file names them: by server
    /// (group) id, then in the order of that group's [`ServerInfo::replicas`].
    pub servers: Vec<Vec<Option<(PathBuf, PathBuf)>>>,
}

/// One replica of a server group: a `cairn serve` process with its own store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReplicaInfo {
    /// Its id within the group (its Raft node id): unique in the group; by default its
    /// position in the group's list.
    pub id: u64,
    /// Where it listens.
    pub addr: SocketAddr,
}

/// One metadata server of the cluster: a group of replicas that hold the same
/// partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    /// Its id: 0..N-1, the index of its partitions' placement.
    pub id: u32,
    /// Where it listens: its first replica's address (the only one of a group of one).
    pub addr: SocketAddr,
    /// Its replicas, in the file's order (a group of one: id 0 at `addr`).
    pub replicas: Vec<ReplicaInfo>,
}

impl ServerInfo {
    /// Server `id` as a group of one replica (id 0) at `addr`.
    pub fn single(id: u32, addr: SocketAddr) -> ServerInfo {
        ServerInfo {
            id,
            addr,
            replicas: vec![ReplicaInfo { id: 0, addr }],
        }
    }

    /// Server `id` as the group of `replicas` (1 to [`MAX_REPLICAS`], ids and addresses
    /// each once); its `addr` is the first replica's.
    pub fn group(id: u32, replicas: Vec<ReplicaInfo>) -> Result<ServerInfo, ConfigError> {
        check_group(id, &replicas)?;
        let addr = replicas
            .first()
            .map(|r| r.addr)
            .ok_or_else(|| ConfigError::Invalid(format!("server {id}: no replicas")))?;
        Ok(ServerInfo { id, addr, replicas })
    }
}

/// A group's replica count and ids (each once), and addresses within it.
fn check_group(id: u32, replicas: &[ReplicaInfo]) -> Result<(), ConfigError> {
    if replicas.is_empty() || replicas.len() > MAX_REPLICAS {
        return Err(ConfigError::Invalid(format!(
            "server {id}: {} replicas; a server has 1 to {MAX_REPLICAS}",
            replicas.len()
        )));
    }
    for (i, a) in replicas.iter().enumerate() {
        if replicas[..i].iter().any(|b| b.id == a.id) {
            return Err(ConfigError::Invalid(format!(
                "server {id}: replica id {} appears twice",
                a.id
            )));
        }
        if replicas[..i].iter().any(|b| b.addr == a.addr) {
            return Err(ConfigError::Invalid(format!(
                "server {id}: two replicas share address {}",
                a.addr
            )));
        }
    }
    Ok(())
}

/// The cluster: its servers by id, and an id of the list itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    servers: Vec<ServerInfo>,
    id: u64,
    version: u32,
    election_timeout: Duration,
    tls: Option<TlsPaths>,
    insecure: bool,
}

/// Both paths of a pair, or neither.
fn pair(
    what: &str,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<Option<(PathBuf, PathBuf)>, ConfigError> {
    match (cert, key) {
        (Some(c), Some(k)) => Ok(Some((c, k))),
        (None, None) => Ok(None),
        _ => Err(ConfigError::Invalid(format!(
            "{what}: a certificate needs its key and a key its certificate"
        ))),
    }
}

/// An address of the form `IP:PORT`.
fn address(what: &str, text: &str) -> Result<SocketAddr, ConfigError> {
    text.parse()
        .map_err(|_| ConfigError::Invalid(format!("{what}: address {text:?} is not IP:PORT")))
}

/// The file's `version`, if it gives one (1 or 2).
fn file_version(v: Option<i64>) -> Result<Option<u32>, ConfigError> {
    match v {
        None => Ok(None),
        Some(v @ 1..=2) => Ok(u32::try_from(v).ok()),
        Some(v) if v > 2 => Err(ConfigError::Version(v)),
        Some(v) => Err(ConfigError::Invalid(format!(
            "version {v}: a cluster file's version is 1 or 2"
        ))),
    }
}

/// The election timeout of a file that gives none (milliseconds).
pub const DEFAULT_ELECTION_TIMEOUT_MS: u64 = 1000;

/// Shortest and longest election timeout, in milliseconds (`election_timeout_ms`,
/// `cairn serve --election-timeout`).
pub const ELECTION_TIMEOUT_MS: std::ops::RangeInclusive<u64> = 50..=60_000;

/// The election timeout of a file's `election_timeout_ms`.
fn election_timeout(ms: i64) -> Result<Duration, ConfigError> {
    match u64::try_from(ms) {
        Ok(ms) if ELECTION_TIMEOUT_MS.contains(&ms) => Ok(Duration::from_millis(ms)),
        _ => Err(ConfigError::Invalid(format!(
            "election_timeout_ms = {ms}: it must be {} to {}",
            ELECTION_TIMEOUT_MS.start(),
            ELECTION_TIMEOUT_MS.end()
        ))),
    }
}

/// A `cluster_id`: hexadecimal digits (at most 16), with or without `0x`.
fn parse_cluster_id(text: &str) -> Result<u64, ConfigError> {
    let t = text.trim();
    let digits = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    if digits.is_empty() || digits.len() > 16 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ConfigError::Invalid(format!(
            "cluster_id {text:?} is not a 64-bit number in hexadecimal digits"
        )));
    }
    u64::from_str_radix(digits, 16).map_err(|_| {
        ConfigError::Invalid(format!(
            "cluster_id {text:?} is not a 64-bit number in hexadecimal digits"
        ))
    })
}

/// One `[[server]]` table as a group, its replicas' TLS files, and whether it uses
/// the `[[server.replica]]` form.
fn group_of(s: RawServer) -> Result<(ServerInfo, Vec<Option<Pair>>, bool), ConfigError> {
    let id = s.id;
    match (s.addr, s.replica) {
        (Some(addr), None) => {
            let files = pair(&format!("server {id}"), s.cert, s.key)?;
            let addr = address(&format!("server {id}"), &addr)?;
            Ok((ServerInfo::single(id, addr), vec![files], false))
        }
        (None, Some(raw)) => {
            if s.cert.is_some() || s.key.is_some() {
                return Err(ConfigError::Invalid(format!(
                    "server {id}: with [[server.replica]] tables, cert and key go in each \
                     replica's table"
                )));
            }
            let mut replicas = Vec::with_capacity(raw.len());
            let mut files = Vec::with_capacity(raw.len());
            for (i, r) in raw.into_iter().enumerate() {
                let rid = r.id.unwrap_or(i as u64);
                let what = format!("server {id} replica {rid}");
                files.push(pair(&what, r.cert, r.key)?);
                replicas.push(ReplicaInfo {
                    id: rid,
                    addr: address(&what, &r.addr)?,
                });
            }
            Ok((ServerInfo::group(id, replicas)?, files, true))
        }
        (Some(_), Some(_)) => Err(ConfigError::Invalid(format!(
            "server {id}: give either addr (a server of one replica) or [[server.replica]] \
             tables, not both"
        ))),
        (None, None) => Err(ConfigError::Invalid(format!(
            "server {id}: no addr and no [[server.replica]] table"
        ))),
    }
}

/// Every replica address once in the whole file.
fn check_addresses(servers: &[ServerInfo]) -> Result<(), ConfigError> {
    let name = |s: &ServerInfo, r: &ReplicaInfo| {
        if s.replicas.len() == 1 {
            format!("server {}", s.id)
        } else {
            format!("server {} replica {}", s.id, r.id)
        }
    };
    let mut seen: HashMap<SocketAddr, String> = HashMap::new();
    for s in servers {
        for r in &s.replicas {
            if let Some(other) = seen.insert(r.addr, name(s, r)) {
                return Err(ConfigError::Invalid(format!(
                    "{other} and {} share address {}",
                    name(s, r),
                    r.addr
                )));
            }
        }
    }
    Ok(())
}

/// The id of a file without `cluster_id`: where every server has one replica,
/// `xxh3_64("0=ADDR;1=ADDR;…")` (the id of version 1 files); else
/// `xxh3_64("v2;0=ADDR,ADDR,…;1=…;")` with each group's replicas in the file's order.
fn derived_id(servers: &[ServerInfo]) -> u64 {
    let canonical: String = if servers.iter().all(|s| s.replicas.len() == 1) {
        servers
            .iter()
            .map(|s| format!("{}={};", s.id, s.addr))
            .collect()
    } else {
        let mut t = String::from("v2;");
        for s in servers {
            let addrs: Vec<String> = s.replicas.iter().map(|r| r.addr.to_string()).collect();
            t.push_str(&format!("{}={};", s.id, addrs.join(",")));
        }
        t
    };
    xxh3_64(canonical.as_bytes())
}

impl ClusterConfig {
    /// Reads and checks the cluster file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<ClusterConfig, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut c = ClusterConfig::parse(&text)?;
        if let (Some(t), Some(base)) = (c.tls.as_mut(), path.parent()) {
            let abs = |p: &mut PathBuf| {
                if p.is_relative() {
                    *p = base.join(&*p);
                }
            };
            abs(&mut t.ca);
            let servers = t.servers.iter_mut().flatten().flatten();
            for (c, k) in t.client.iter_mut().chain(servers) {
                abs(c);
                abs(k);
            }
        }
        Ok(c)
    }

    /// Parses and checks a cluster file's text: a known version, server ids 0..N-1 each
    /// once, 1 to [`MAX_REPLICAS`] replicas per server with ids unique in the group,
    /// addresses unique in the file and of the form `IP:PORT`. Relative TLS paths stay
    /// relative (to the working directory).
    pub fn parse(text: &str) -> Result<ClusterConfig, ConfigError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
        let said = file_version(raw.version)?;
        let election_timeout = match raw.election_timeout_ms {
            Some(ms) => election_timeout(ms)?,
            None => Duration::from_millis(DEFAULT_ELECTION_TIMEOUT_MS),
        };
        let explicit_id = raw
            .cluster_id
            .as_deref()
            .map(parse_cluster_id)
            .transpose()?;
        if raw.server.is_empty() {
            return Err(ConfigError::Invalid("no [[server]] entries".into()));
        }
        if raw.server.len() > MAX_SERVERS {
            return Err(ConfigError::Invalid(format!(
                "{} servers; at most {MAX_SERVERS}",
                raw.server.len()
            )));
        }
        let n = raw.server.len();
        let mut servers: Vec<Option<ServerInfo>> = vec![None; n];
        let mut server_tls = vec![Vec::new(); n];
        let mut uses_replicas = false;
        for s in raw.server {
            let (group, files, form) = group_of(s)?;
            if form && said == Some(1) {
                return Err(ConfigError::Invalid(format!(
                    "server {}: [[server.replica]] tables need version = 2 (the file says 1)",
                    group.id
                )));
            }
            uses_replicas |= form;
            let id = group.id;
            let slot = servers.get_mut(id as usize).ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "server id {id} out of range: ids must be 0..{} (one per server)",
                    n - 1
                ))
            })?;
            if slot.is_some() {
                return Err(ConfigError::Invalid(format!(
                    "server id {id} appears twice"
                )));
            }
            *slot = Some(group);
            server_tls[id as usize] = files;
        }
        let named = server_tls.iter().flatten().any(Option::is_some);
        let tls = match raw.tls {
            Some(t) => Some(TlsPaths {
                ca: t.ca,
                client: pair("[tls] client", t.client_cert, t.client_key)?,
                servers: server_tls,
            }),
            None if named => {
                return Err(ConfigError::Invalid(
                    "servers name certificates but there is no [tls] table with the CA".into(),
                ))
            }
            None => None,
        };
        // n servers with distinct ids below n: every id is there.
        let servers: Vec<ServerInfo> = servers
            .into_iter()
            .collect::<Option<_>>()
            .ok_or_else(|| ConfigError::Invalid(format!("server ids must be 0..{}", n - 1)))?;
        check_addresses(&servers)?;
        let id = explicit_id.unwrap_or_else(|| derived_id(&servers));
        let version = if uses_replicas || said == Some(2) {
            2
        } else {
            1
        };
        Ok(ClusterConfig {
            servers,
            id,
            version,
            election_timeout,
            tls,
            insecure: false,
        })
    }

    /// The TLS files the cluster file names (its `[tls]` table), if any.
    pub fn tls(&self) -> Option<&TlsPaths> {
        self.tls.as_ref()
    }

    /// Uses these TLS files instead of the file's (as `cairn ... --cert/--key` do for
    /// the client side).
    pub fn set_tls(&mut self, tls: Option<TlsPaths>) {
        self.tls = tls;
    }

    /// Uses plain TCP, with no authentication, instead of mutual TLS (`--insecure`):
    /// for tests and trusted networks only; every party of a cluster must agree.
    pub fn set_insecure(&mut self, insecure: bool) {
        self.insecure = insecure;
    }

    /// Whether connections are plain TCP (see [`ClusterConfig::set_insecure`]).
    pub fn insecure(&self) -> bool {
        self.insecure
    }

    /// The servers (groups), by id.
    pub fn servers(&self) -> &[ServerInfo] {
        &self.servers
    }

    /// Number of servers (groups).
    pub fn len(&self) -> u32 {
        self.servers.len() as u32
    }

    /// Always false: a cluster has at least one server.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The server with id `id`.
    pub fn server(&self, id: u32) -> Option<&ServerInfo> {
        self.servers.get(id as usize)
    }

    /// The replica that listens on `listen`, as (server id, replica id): the one with
    /// that exact address, or for an unspecified IP (`0.0.0.0`, `::`) the only one with
    /// that port.
    pub fn locate(&self, listen: SocketAddr) -> Option<(u32, u64)> {
        let all = || {
            self.servers
                .iter()
                .flat_map(|s| s.replicas.iter().map(move |r| (s.id, r)))
        };
        if let Some((g, r)) = all().find(|(_, r)| r.addr == listen) {
            return Some((g, r.id));
        }
        if !listen.ip().is_unspecified() {
            return None;
        }
        let mut same = all().filter(|(_, r)| r.addr.port() == listen.port());
        match (same.next(), same.next()) {
            (Some((g, r)), None) => Some((g, r.id)),
            _ => None,
        }
    }

    /// Whether some server has more than one replica.
    pub fn replicated(&self) -> bool {
        self.servers.iter().any(|s| s.replicas.len() > 1)
    }

    /// The replicated groups' election timeout E: the file's `election_timeout_ms`, or
    /// 1 s. Servers take it as `--election-timeout` when that is not given; clients
    /// give a replica that long to answer a first attempt before trying another.
    pub fn election_timeout(&self) -> Duration {
        self.election_timeout
    }

    /// The file's format version: 2 if it says so or has `[[server.replica]]` tables,
    /// else 1.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// An id of the cluster: the file's `cluster_id`, or else a hash of its server ids
    /// and addresses (see [`ClusterConfig::parse`] and FORMAT.md). Requests carry it, and
    /// a server refuses a party that read a different list.
    pub fn cluster_id(&self) -> u64 {
        self.id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `[[server]]` table in the replica form, with these replica addresses.
    fn group(id: u32, addrs: &[&str]) -> String {
        let mut t = format!("[[server]]\nid = {id}\n");
        for a in addrs {
            t.push_str(&format!("[[server.replica]]\naddr = \"{a}\"\n"));
        }
        t
    }

    fn error(text: &str) -> String {
        match ClusterConfig::parse(text) {
            Ok(c) => panic!("{text:?} parsed: {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn election_timeout() {
        let one = "[[server]]\nid = 0\naddr = \"127.0.0.1:1\"\n";
        let c = ClusterConfig::parse(one).unwrap();
        assert_eq!(c.election_timeout(), Duration::from_secs(1));
        let c = ClusterConfig::parse(&format!("election_timeout_ms = 300\n{one}")).unwrap();
        assert_eq!(c.election_timeout(), Duration::from_millis(300));
        for bad in ["49", "60001", "-1", "\"1s\""] {
            let e = error(&format!("election_timeout_ms = {bad}\n{one}"));
            assert!(e.contains("election_timeout_ms"), "{bad}: {e}");
        }
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let two = "[[server]]\nid = 0\naddr = \"127.0.0.1:1\"\n[[server]]\nid = 1\naddr = \"127.0.0.1:2\"\n";
        let c = ClusterConfig::parse(two).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c.server(1).unwrap().addr.port(), 2);
        for (text, want) in [
            ("", "no [[server]]"),
            ("[[server]]\nid = 1\naddr = \"127.0.0.1:1\"\n", "out of range"),
            ("[[server]]\nid = 0\naddr = \"localhost\"\n", "not IP:PORT"),
            ("[[server]]\nid = 0\naddr = \"127.0.0.1:1\"\n[[server]]\nid = 0\naddr = \"127.0.0.1:2\"\n", "twice"),
            ("[[server]]\nid = 0\naddr = \"127.0.0.1:1\"\n[[server]]\nid = 1\naddr = \"127.0.0.1:1\"\n", "share address"),
            ("[[server]]\nid = 0\naddr = \"127.0.0.1:1\"\nport = 3\n", "unknown field"),
            ("[[server]\n", "not valid"),
        ] {
            let e = error(text);
            assert!(e.contains(want), "{text:?}: {e}");
        }
        // Another list has another id.
        let other = two.replace(":2", ":3");
        assert_ne!(
            ClusterConfig::parse(&other).unwrap().cluster_id(),
            c.cluster_id()
        );
    }

    #[test]
    fn replica_groups() {
        let text = format!(
            "{}[[server]]\nid = 1\n[[server.replica]]\nid = 5\naddr = \"10.0.0.4:7100\"\n\
             [[server.replica]]\naddr = \"10.0.0.5:7100\"\n",
            group(0, &["10.0.0.1:7100", "10.0.0.2:7100", "10.0.0.3:7100"])
        );
        let c = ClusterConfig::parse(&text).unwrap();
        assert_eq!((c.len(), c.version(), c.replicated()), (2, 2, true));
        let s0 = c.server(0).unwrap();
        assert_eq!(s0.addr, "10.0.0.1:7100".parse().unwrap());
        let ids: Vec<u64> = s0.replicas.iter().map(|r| r.id).collect();
        assert_eq!(ids, [0, 1, 2]);
        // Explicit ids, and the default (the position) for the others.
        let ids: Vec<u64> = c.server(1).unwrap().replicas.iter().map(|r| r.id).collect();
        assert_eq!(ids, [5, 1]);
        // A file of the old form is version 1, not replicated, one replica per group.
        let old = ClusterConfig::parse("[[server]]\nid = 0\naddr = \"127.0.0.1:1\"\n").unwrap();
        assert_eq!((old.version(), old.replicated()), (1, false));
        assert_eq!(
            old.server(0).unwrap(),
            &ServerInfo::single(0, "127.0.0.1:1".parse().unwrap())
        );
        // The replica form with one replica each is version 2 but not replicated.
        let one = ClusterConfig::parse(&group(0, &["127.0.0.1:1"])).unwrap();
        assert_eq!((one.version(), one.replicated()), (2, false));
        let said =
            ClusterConfig::parse("version = 2\n[[server]]\nid = 0\naddr = \"127.0.0.1:1\"\n")
                .unwrap();
        assert_eq!(said.version(), 2);
    }

    #[test]
    fn bad_groups_are_clear_errors() {
        let eight: Vec<String> = (1..=8).map(|p| format!("127.0.0.1:{p}")).collect();
        let eight: Vec<&str> = eight.iter().map(String::as_str).collect();
        for (text, want) in [
            (
                "[[server]]\nid = 0\naddr = \"127.0.0.1:1\"\n[[server.replica]]\naddr = \"127.0.0.1:2\"\n".to_string(),
                "not both",
            ),
            (
                "[[server]]\nid = 0\ncert = \"a.pem\"\nkey = \"a.key\"\n[[server.replica]]\naddr = \"127.0.0.1:2\"\n".to_string(),
                "each replica's table",
            ),
            ("[[server]]\nid = 0\n".to_string(), "no addr"),
            ("[[server]]\nid = 0\nreplica = []\n".to_string(), "0 replicas"),
            (group(0, &eight), "8 replicas; a server has 1 to 7"),
            (
                "[[server]]\nid = 0\n[[server.replica]]\nid = 3\naddr = \"127.0.0.1:1\"\n[[server.replica]]\nid = 3\naddr = \"127.0.0.1:2\"\n".to_string(),
                "replica id 3 appears twice",
            ),
            (
                // The second replica's default id (1) is the first's explicit one.
                "[[server]]\nid = 0\n[[server.replica]]\nid = 1\naddr = \"127.0.0.1:1\"\n[[server.replica]]\naddr = \"127.0.0.1:2\"\n".to_string(),
                "replica id 1 appears twice",
            ),
            (
                format!("{}{}", group(0, &["127.0.0.1:1", "127.0.0.1:2"]), group(1, &["127.0.0.1:3", "127.0.0.1:2"])),
                "server 0 replica 1 and server 1 replica 1 share address 127.0.0.1:2",
            ),
            (
                format!("{}[[server]]\nid = 1\naddr = \"127.0.0.1:1\"\n", group(0, &["127.0.0.1:1", "127.0.0.1:2"])),
                "server 0 replica 0 and server 1 share address",
            ),
            (group(0, &["127.0.0.1:1", "127.0.0.1:1"]), "share address"),
            (group(0, &["127.0.0.1"]), "server 0 replica 0: address"),
            (
                "[[server]]\nid = 0\n[[server.replica]]\naddr = \"127.0.0.1:1\"\nport = 2\n".to_string(),
                "unknown field",
            ),
            (
                "[[server]]\nid = 0\n[[server.replica]]\naddr = \"127.0.0.1:1\"\ncert = \"a.pem\"\n".to_string(),
                "server 0 replica 0: a certificate needs its key",
            ),
            (
                "[[server]]\nid = 0\n[[server.replica]]\naddr = \"127.0.0.1:1\"\ncert = \"a.pem\"\nkey = \"a.key\"\n".to_string(),
                "no [tls] table",
            ),
            (format!("version = 1\n{}", group(0, &["127.0.0.1:1"])), "need version = 2"),
            ("version = 3\n[[server]]\nid = 0\naddr = \"127.0.0.1:1\"\n".to_string(), "version 3: written by a newer cairn"),
            ("version = 0\n[[server]]\nid = 0\naddr = \"127.0.0.1:1\"\n".to_string(), "version is 1 or 2"),
            ("version = \"2\"\n[[server]]\nid = 0\naddr = \"127.0.0.1:1\"\n".to_string(), "not valid"),
            ("wat = 1\n[[server]]\nid = 0\naddr = \"127.0.0.1:1\"\n".to_string(), "unknown field"),
        ] {
            let e = error(&text);
            assert!(e.contains(want), "{text:?}: {e}");
        }
        for bad in [
            "",
            "0x",
            "xyz",
            "0x12345678901234567",
            "-1",
            "12 34",
            "0x-1",
        ] {
            let text =
                format!("cluster_id = \"{bad}\"\n[[server]]\nid = 0\naddr = \"127.0.0.1:1\"\n");
            let e = error(&text);
            assert!(e.contains("is not a 64-bit number"), "{bad:?}: {e}");
        }
        let e = error("cluster_id = 5\n[[server]]\nid = 0\naddr = \"127.0.0.1:1\"\n");
        assert!(e.contains("not valid"), "{e}");
    }

    #[test]
    fn cluster_ids() {
        // One replica per server: the id of version 1 files, whatever the form.
        let old = "[[server]]\nid = 0\naddr = \"127.0.0.1:1\"\n[[server]]\nid = 1\naddr = \"127.0.0.1:2\"\n";
        let want = xxh3_64(b"0=127.0.0.1:1;1=127.0.0.1:2;");
        let id = |t: &str| ClusterConfig::parse(t).unwrap().cluster_id();
        assert_eq!(id(old), want);
        assert_eq!(id(&format!("version = 2\n{old}")), want);
        let one_each = format!(
            "{}{}",
            group(0, &["127.0.0.1:1"]),
            group(1, &["127.0.0.1:2"])
        );
        assert_eq!(id(&one_each), want);
        // An explicit cluster_id wins, with or without 0x, in either case.
        for given in ["0x00ab12", "ab12", "AB12", "0XAb12"] {
            assert_eq!(id(&format!("cluster_id = \"{given}\"\n{old}")), 0xab12);
        }
        assert_eq!(
            id(&format!("cluster_id = \"0xffffffffffffffff\"\n{one_each}")),
            u64::MAX
        );
        // Replicated: "v2;" and each group's addresses in file order.
        let v2 = format!(
            "{}{}",
            group(0, &["127.0.0.1:1", "127.0.0.1:2"]),
            group(1, &["127.0.0.1:3"])
        );
        assert_eq!(
            id(&v2),
            xxh3_64(b"v2;0=127.0.0.1:1,127.0.0.1:2;1=127.0.0.1:3;")
        );
        assert_ne!(id(&v2), id(&v2.replace(":2\"", ":4\"")));
        assert_ne!(
            id(&v2),
            id(&format!(
                "{}{}",
                group(0, &["127.0.0.1:2", "127.0.0.1:1"]),
                group(1, &["127.0.0.1:3"])
            ))
        );
        assert_eq!(id(&format!("cluster_id = \"7\"\n{v2}")), 7);
    }

    #[test]
    fn locate_replicas() {
        let text = format!(
            "{}{}",
            group(0, &["10.0.0.1:7100", "10.0.0.2:7100"]),
            group(1, &["10.0.0.1:7101", "[::1]:7102"])
        );
        let c = ClusterConfig::parse(&text).unwrap();
        let at = |a: &str| c.locate(a.parse().unwrap());
        assert_eq!(at("10.0.0.2:7100"), Some((0, 1)));
        assert_eq!(at("10.0.0.1:7101"), Some((1, 0)));
        assert_eq!(at("[::1]:7102"), Some((1, 1)));
        assert_eq!(at("10.0.0.3:7100"), None);
        // An unspecified IP: the only replica with that port, else none.
        assert_eq!(at("0.0.0.0:7101"), Some((1, 0)));
        assert_eq!(at("[::]:7102"), Some((1, 1)));
        assert_eq!(at("0.0.0.0:7100"), None);
        assert_eq!(at("0.0.0.0:7103"), None);
    }

    #[test]
    fn tls_paths_per_replica() {
        let text = "[tls]\nca = \"ca.pem\"\n[[server]]\nid = 0\naddr = \"127.0.0.1:1\"\n\
                    cert = \"s0.pem\"\nkey = \"s0.key\"\n[[server]]\nid = 1\n\
                    [[server.replica]]\naddr = \"127.0.0.1:2\"\n\
                    [[server.replica]]\naddr = \"127.0.0.1:3\"\ncert = \"/abs/s1.pem\"\nkey = \"s1.key\"\n";
        let dir = std::env::temp_dir().join(format!("cairn-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("cluster.toml");
        std::fs::write(&file, text).unwrap();
        let c = ClusterConfig::load(&file);
        std::fs::remove_dir_all(&dir).unwrap();
        let t = c.unwrap().tls().cloned().unwrap();
        assert_eq!(t.ca, dir.join("ca.pem"));
        assert_eq!(
            t.servers,
            vec![
                vec![Some((dir.join("s0.pem"), dir.join("s0.key")))],
                vec![None, Some(("/abs/s1.pem".into(), dir.join("s1.key")))],
            ]
        );
    }

    #[test]
    fn groups_built_in_code() {
        let r = |id, port| ReplicaInfo {
            id,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let g = ServerInfo::group(2, vec![r(4, 1), r(0, 2)]).unwrap();
        assert_eq!((g.id, g.addr), (2, r(4, 1).addr));
        assert!(ServerInfo::group(0, Vec::new()).is_err());
        assert!(ServerInfo::group(0, vec![r(1, 1), r(1, 2)]).is_err());
        assert!(ServerInfo::group(0, (0..8).map(|i| r(i, 1 + i as u16)).collect()).is_err());
        assert_eq!(ServerInfo::single(3, r(0, 9).addr).replicas, vec![r(0, 9)]);
    }
}
