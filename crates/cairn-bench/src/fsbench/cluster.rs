//! The `cluster` target's servers: three `cairn serve` on loopback with their defaults
//! (TLS, `--sync always`), as a user starts them for `cairn mount --cluster`; stopped
//! when dropped.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use cairn_cluster::tls::{init_certs, ClientCert};
use cairn_cluster::ClusterConfig;

use crate::servers::{free_port, Serve, Servers};

/// Servers of the `cluster` target.
pub(super) const SERVERS: u32 = 3;

/// The running servers and their cluster file (whose client certificate the mount
/// uses).
pub(super) struct Cluster {
    /// Stopped when dropped (after the mount, which is dropped first).
    _servers: Servers,
    pub(super) file: PathBuf,
}

/// Starts [`SERVERS`] servers with stores, certificates and logs in `work`; returns
/// once each listens.
pub(super) fn start(work: &Path) -> Result<Cluster> {
    let mut toml = String::new();
    let mut addrs = Vec::new();
    for id in 0..SERVERS {
        let a = free_port()?;
        toml.push_str(&format!("[[server]]\nid = {id}\naddr = \"{a}\"\n"));
        addrs.push(a);
    }
    let servers = ClusterConfig::parse(&toml)?.servers().to_vec();
    let file = init_certs(
        &work.join("certs"),
        &servers,
        &[ClientCert::admin("fs-bench")],
    )
    .context("cluster: making the certificates")?;
    let exe = std::env::current_exe()?;
    let mut running = Servers::default();
    for (id, a) in addrs.iter().enumerate() {
        let serve = Serve {
            exe: exe.clone(),
            dir: work.join(format!("server-{id}")),
            listen: *a,
            cluster: file.clone(),
            sync: "always".to_string(),
            log: work.join(format!("server-{id}.log")),
            extra: Vec::new(),
        };
        running.push(serve.spawn()?);
    }
    running.wait_listening(&addrs, Duration::from_secs(60), work)?;
    Ok(Cluster {
        _servers: running,
        file,
    })
}
