//! Operator views of a cluster: [`status`] (what each server holds) and [`check`]
//! (whether the namespace is consistent across the servers).

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;

use crate::config::ClusterConfig;
use crate::error::ClientError;
use crate::proto;
use crate::proto::meta_client::MetaClient;
use crate::transport::Reach;

mod check;

pub use check::{check, check_with, ClusterCheck, GRACE};

/// One server as seen by [`status`].
#[derive(Clone, Debug, Default, Serialize)]
pub struct ServerState {
    /// Its id.
    pub id: u32,
    /// Its address.
    pub addr: String,
    /// Whether it answered.
    pub up: bool,
    /// Why not, if it did not.
    pub error: Option<String>,
    /// Directory partitions it holds.
    pub partitions: u64,
    /// Directory entries in them.
    pub entries: u64,
    /// Inodes whose home it is.
    pub inodes: u64,
    /// Splits it finished since it started.
    pub splits_done: u64,
    /// Splits it is doing now (or that wait for a peer).
    pub splits_in_flight: u32,
    /// Redirects it sent since it started.
    pub redirects: u64,
    /// Operations across servers it coordinates that are not finished (splits
    /// included).
    pub intents_pending: u32,
    /// Names it holds for other servers' unfinished renames.
    pub prepared_pending: u32,
    /// Partitions it received from a split that are not active yet.
    pub incoming_partitions: u32,
    /// It answered with only what it keeps in memory, the certificate not allowing uid
    /// 0: `inodes` and `prepared_pending` are unknown (0 here) and its largest
    /// directories are left out of [`ClusterStatus::largest`].
    pub partial: bool,
}

/// A directory with many partitions.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LargeDir {
    /// Its inode number.
    pub dir: u64,
    /// Its partitions (over all servers that answered).
    pub partitions: u32,
    /// Its entries (over all servers that answered).
    pub entries: u64,
}

/// What [`status`] returns.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ClusterStatus {
    /// Every server of the cluster file, by id.
    pub servers: Vec<ServerState>,
    /// The largest directories by entries, with their partition counts (from the
    /// servers that answered in full).
    pub largest: Vec<LargeDir>,
}

/// How many directories [`status`] lists.
const LARGEST: usize = 10;

fn runtime() -> Result<tokio::runtime::Runtime, ClientError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ClientError::Runtime)
}

fn conn(
    reach: &Reach,
    s: &crate::config::ServerInfo,
    timeout: Duration,
) -> Result<MetaClient<tonic::transport::Channel>, crate::tls::TlsError> {
    let ch = reach.channel(s, timeout, Some(timeout))?;
    Ok(MetaClient::new(ch).max_decoding_message_size(crate::transport::MAX_MESSAGE))
}

fn header(cfg: &ClusterConfig) -> Option<proto::Header> {
    Some(proto::Header {
        cluster_id: cfg.cluster_id(),
        cred: None,
        no_checks: false,
    })
}

fn why(s: &tonic::Status) -> String {
    if s.code() == tonic::Code::FailedPrecondition {
        return "reads a different cluster file".into();
    }
    // Transport errors (a refused handshake, say) say why in their sources.
    let mut m = s.message().to_string();
    let mut e = std::error::Error::source(s);
    while let Some(x) = e {
        let t = x.to_string();
        if !m.contains(&t) {
            m = format!("{m}: {t}");
        }
        e = x.source();
    }
    m
}

/// Asks every server what it holds; a server that does not answer within `timeout` is
/// reported down. A server answers in full only to a client certificate that allows uid
/// 0; to another it answers what it keeps in memory, marked
/// [`ServerState::partial`].
pub fn status(cfg: &ClusterConfig, timeout: Duration) -> ClusterStatus {
    let mut out = ClusterStatus::default();
    let rt = match runtime().and_then(|rt| Ok((rt, Reach::client(cfg, None)?))) {
        Ok(rt) => rt,
        Err(e) => {
            for s in cfg.servers() {
                out.servers.push(ServerState {
                    id: s.id,
                    addr: s.addr.to_string(),
                    error: Some(e.to_string()),
                    ..Default::default()
                });
            }
            return out;
        }
    };
    let (rt, reach) = rt;
    let replies: Vec<Result<proto::ServerStatusReply, String>> = rt.block_on(async {
        let mut tasks = Vec::new();
        for s in cfg.servers() {
            let mut c = match conn(&reach, s, timeout) {
                Ok(c) => c,
                Err(e) => {
                    tasks.push(tokio::spawn(async move { Err(e.to_string()) }));
                    continue;
                }
            };
            let h = header(cfg);
            tasks.push(tokio::spawn(async move {
                let mut r = tonic::Request::new(proto::ServerStatusReq {
                    h,
                    top: LARGEST as u32 * 4,
                    digest: false,
                });
                r.set_timeout(timeout);
                c.server_status(r)
                    .await
                    .map(|r| r.into_inner())
                    .map_err(|s| why(&s))
            }));
        }
        let mut v = Vec::new();
        for t in tasks {
            v.push(t.await.unwrap_or_else(|e| Err(e.to_string())));
        }
        v
    });
    let mut dirs: HashMap<u64, (u32, u64)> = HashMap::new();
    for (s, r) in cfg.servers().iter().zip(replies) {
        let mut st = ServerState {
            id: s.id,
            addr: s.addr.to_string(),
            ..Default::default()
        };
        match r {
            Ok(r) => {
                st.up = true;
                st.partitions = r.partitions;
                st.entries = r.entries;
                st.inodes = r.inodes;
                st.splits_done = r.splits_done;
                st.splits_in_flight = r.splits_in_flight;
                st.redirects = r.redirects;
                st.intents_pending = r.intents_pending;
                st.prepared_pending = r.prepared_pending;
                st.incoming_partitions = r.incoming_partitions;
                st.partial = r.partial;
                for d in r.largest {
                    let e = dirs.entry(d.dir).or_default();
                    e.0 += d.partitions;
                    e.1 += d.entries;
                }
            }
            Err(e) => st.error = Some(e),
        }
        out.servers.push(st);
    }
    let mut largest: Vec<LargeDir> = dirs
        .into_iter()
        .map(|(dir, (partitions, entries))| LargeDir {
            dir,
            partitions,
            entries,
        })
        .collect();
    largest.sort_by(|a, b| b.entries.cmp(&a.entries).then(a.dir.cmp(&b.dir)));
    largest.truncate(LARGEST);
    out.largest = largest;
    out
}
