//! The cluster file: the static list of metadata servers that every server and client
//! reads (TOML, see FORMAT.md "Cluster file").
//!
//! ```
//! let c = cairn_cluster::ClusterConfig::parse(r#"
//! [[server]]
//! id = 0
//! addr = "127.0.0.1:7100"
//! [[server]]
//! id = 1
//! addr = "127.0.0.1:7101"
//! "#)?;
//! assert_eq!(c.servers().len(), 2);
//! # Ok::<(), cairn_cluster::ConfigError>(())
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use xxhash_rust::xxh3::xxh3_64;

/// Most servers a cluster may have (server ids live in 16 bits of an inode number).
pub const MAX_SERVERS: usize = 1 << 16;

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
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    server: Vec<RawServer>,
    tls: Option<RawTls>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    id: u32,
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

/// The TLS files a cluster file names (see FORMAT.md, "Cluster file"): paths relative
/// to the cluster file's directory are resolved by [`ClusterConfig::load`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsPaths {
    /// The cluster's CA certificate (PEM): every party's certificate must be signed by it.
    pub ca: PathBuf,
    /// This party's certificate and key as a client (PEM), if it is one.
    pub client: Option<(PathBuf, PathBuf)>,
    /// Each server's certificate and key (PEM), by id, where the file names them.
    pub servers: Vec<Option<(PathBuf, PathBuf)>>,
}

/// One metadata server of the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    /// Its id: 0..N-1, the index of its partitions' placement.
    pub id: u32,
    /// Where it listens.
    pub addr: SocketAddr,
}

/// The cluster: its servers by id, and an id of the list itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    servers: Vec<ServerInfo>,
    id: u64,
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
            for (c, k) in t.client.iter_mut().chain(t.servers.iter_mut().flatten()) {
                abs(c);
                abs(k);
            }
        }
        Ok(c)
    }

    /// Parses and checks a cluster file's text: ids 0..N-1 each once, addresses
    /// unique and of the form `host:port` with a numeric IP. Relative TLS paths stay
    /// relative (to the working directory).
    pub fn parse(text: &str) -> Result<ClusterConfig, ConfigError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
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
        let mut server_tls = vec![None; n];
        for s in raw.server {
            let files = pair(&format!("server {}", s.id), s.cert, s.key)?;
            let addr: SocketAddr = s.addr.parse().map_err(|_| {
                ConfigError::Invalid(format!(
                    "server {}: address {:?} is not IP:PORT",
                    s.id, s.addr
                ))
            })?;
            let slot = servers.get_mut(s.id as usize).ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "server id {} out of range: ids must be 0..{} (one per server)",
                    s.id,
                    n - 1
                ))
            })?;
            if slot.is_some() {
                return Err(ConfigError::Invalid(format!(
                    "server id {} appears twice",
                    s.id
                )));
            }
            *slot = Some(ServerInfo { id: s.id, addr });
            server_tls[s.id as usize] = files;
        }
        let tls = match raw.tls {
            Some(t) => Some(TlsPaths {
                ca: t.ca,
                client: pair("[tls] client", t.client_cert, t.client_key)?,
                servers: server_tls,
            }),
            None if server_tls.iter().any(Option::is_some) => {
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
        for (i, a) in servers.iter().enumerate() {
            if let Some(b) = servers[i + 1..].iter().find(|b| b.addr == a.addr) {
                return Err(ConfigError::Invalid(format!(
                    "servers {} and {} share address {}",
                    a.id, b.id, a.addr
                )));
            }
        }
        let canonical: String = servers
            .iter()
            .map(|s| format!("{}={};", s.id, s.addr))
            .collect();
        let id = xxh3_64(canonical.as_bytes());
        Ok(ClusterConfig {
            servers,
            id,
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

    /// The servers, by id.
    pub fn servers(&self) -> &[ServerInfo] {
        &self.servers
    }

    /// Number of servers.
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

    /// An id of the server list (a hash of its ids and addresses): requests carry it,
    /// and a server refuses a party that read a different list.
    pub fn cluster_id(&self) -> u64 {
        self.id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let e = ClusterConfig::parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        // Another list has another id.
        let other = two.replace(":2", ":3");
        assert_ne!(
            ClusterConfig::parse(&other).unwrap().cluster_id(),
            c.cluster_id()
        );
    }
}
