//! Each replica's place in its group, asked of that replica itself: the `ServerStatus`
//! call's `replica` field (role, term, applied index, snapshots installed), over a
//! connection of its own to every replica, with the status client's certificate (one
//! without uid 0, which a server answers from memory).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cairn_cluster::proto::meta_client::MetaClient;
use cairn_cluster::proto::{self, ReplicaStatus};
use cairn_cluster::ClusterConfig;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// Roles of a replica elected by its group (`recovering`: elected, rebuilding its
/// state before it serves).
const ELECTED: [&str; 2] = ["leader", "recovering"];

/// Connections to every replica (see the module's documentation).
pub(crate) struct Prober {
    rt: tokio::runtime::Runtime,
    cluster_id: u64,
    /// By group, by replica.
    conns: Vec<Vec<MetaClient<Channel>>>,
    timeout: Duration,
}

impl Prober {
    /// Lazy connections to every replica of `cfg`, with the CA and client certificate
    /// and key of `tls`; each status call takes at most `timeout`.
    pub(crate) fn new(
        cfg: &ClusterConfig,
        (ca, cert, key): (&Path, &Path, &Path),
        timeout: Duration,
    ) -> Result<Prober> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting a runtime for status calls")?;
        let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
        let (ca, id) = (
            Certificate::from_pem(read(ca)?),
            Identity::from_pem(read(cert)?, read(key)?),
        );
        let mut conns = Vec::new();
        {
            let _g = rt.enter();
            for s in cfg.servers() {
                let mut row = Vec::new();
                for r in &s.replicas {
                    let tls = ClientTlsConfig::new()
                        .ca_certificate(ca.clone())
                        .identity(id.clone())
                        .domain_name(format!("server-{}", s.id));
                    let ch = Endpoint::from_shared(format!("https://{}", r.addr))
                        .context("a replica's address")?
                        .tls_config(tls)
                        .context("TLS settings")?
                        .connect_timeout(timeout)
                        .timeout(timeout)
                        .tcp_nodelay(true)
                        .connect_lazy();
                    row.push(MetaClient::new(ch));
                }
                conns.push(row);
            }
        }
        Ok(Prober {
            rt,
            cluster_id: cfg.cluster_id(),
            conns,
            timeout,
        })
    }

    /// Replicas of group `g`.
    pub(crate) fn replicas(&self, g: usize) -> usize {
        self.conns.get(g).map_or(0, Vec::len)
    }

    /// Replica `r` of group `g`'s status.
    pub(crate) fn replica(&self, g: usize, r: usize) -> Result<ReplicaStatus> {
        let c = self.conns[g][r].clone();
        self.rt.block_on(ask(c, self.cluster_id, self.timeout))
    }

    /// Every replica of group `g`'s status, asked at once (an error for one that does
    /// not answer).
    pub(crate) fn group(&self, g: usize) -> Vec<Result<ReplicaStatus>> {
        let (id, t) = (self.cluster_id, self.timeout);
        let conns = self.conns[g].clone();
        self.rt.block_on(async move {
            let tasks: Vec<_> = conns
                .into_iter()
                .map(|c| tokio::spawn(ask(c, id, t)))
                .collect();
            let mut out = Vec::new();
            for task in tasks {
                out.push(
                    task.await
                        .unwrap_or_else(|e| bail!("a status call failed: {e}")),
                );
            }
            out
        })
    }

    /// The replica of group `g` that its group elected (the highest term's if several
    /// say so), and its status.
    pub(crate) fn leader(&self, g: usize) -> Option<(usize, ReplicaStatus)> {
        self.group(g)
            .into_iter()
            .enumerate()
            .filter_map(|(r, s)| s.ok().map(|s| (r, s)))
            .filter(|(_, s)| ELECTED.contains(&s.role.as_str()))
            .max_by_key(|(_, s)| s.term)
    }

    /// Waits (at most `limit`) until group `g` has a replica that leads and serves
    /// (role `leader`); returns it and its status.
    pub(crate) fn wait_leader(&self, g: usize, limit: Duration) -> Result<(usize, ReplicaStatus)> {
        let t = Instant::now();
        loop {
            if let Some((r, s)) = self.leader(g) {
                if s.role == "leader" {
                    return Ok((r, s));
                }
            }
            if t.elapsed() > limit {
                bail!(
                    "group {g} has no serving leader after {} s",
                    limit.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (at most `limit`) until every replica of group `g` answers, one leads, and
    /// all have applied the same index twice in a row (a group at rest); returns that
    /// index.
    pub(crate) fn wait_settled(&self, g: usize, limit: Duration) -> Result<u64> {
        let t = Instant::now();
        let mut last = None;
        loop {
            let st: Vec<Result<ReplicaStatus>> = self.group(g);
            let all: Option<Vec<&ReplicaStatus>> = st.iter().map(|s| s.as_ref().ok()).collect();
            let now = all.and_then(|all| {
                let leads = all.iter().any(|s| s.role == "leader");
                let first = all.first()?.applied;
                (leads && all.iter().all(|s| s.applied == first)).then_some(first)
            });
            match (now, last) {
                (Some(a), Some(b)) if a == b => return Ok(a),
                _ => last = now,
            }
            if t.elapsed() > limit {
                let seen: Vec<String> = st
                    .iter()
                    .map(|s| match s {
                        Ok(s) => format!("{} term {} applied {}", s.role, s.term, s.applied),
                        Err(e) => format!("no answer ({e:#})"),
                    })
                    .collect();
                bail!(
                    "group {g} did not settle within {} s: {}",
                    limit.as_secs(),
                    seen.join("; ")
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// One status call.
async fn ask(
    mut c: MetaClient<Channel>,
    cluster_id: u64,
    timeout: Duration,
) -> Result<ReplicaStatus> {
    let mut r = tonic::Request::new(proto::ServerStatusReq {
        h: Some(proto::Header {
            cluster_id,
            cred: None,
            no_checks: false,
            client: 0,
        }),
        top: 1,
        digest: false,
    });
    r.set_timeout(timeout);
    let rep = c
        .server_status(r)
        .await
        .map_err(|s| anyhow::anyhow!("{}: {}", s.code(), s.message()))?;
    rep.into_inner()
        .replica
        .context("the server is not a replica of a replicated group")
}
