//! `cairn cluster replica add|remove`: a replicated server's members changed online.
//! `add` writes the new replica into the cluster file (with a certificate from the CA
//! beside it) if the file does not list it yet, then asks the group's leader to take it
//! in: a learner until it holds the group's log, then a voter. `remove` asks the
//! leader to let a replica go, then drops it from the file.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

use cairn_cluster::admin::{change_replicas, Members, ReplicaChange};
use cairn_cluster::ClusterConfig;

use crate::cluster::TlsArgs;

const ABOUT: &str = "\
Change the replicas of a replicated server (a group) while it serves, by Raft joint
consensus through the group's leader.

`add ADDR` takes a new replica in. If the cluster file does not list ADDR under the
server yet, it is written there first (id: one more than the largest of the group, or
--id), with a certificate issued by the CA whose ca.pem and ca.key are beside the
cluster file (or in --ca). Start the new replica (`cairn serve --cluster FILE --listen
ADDR --dir DIR`, an empty DIR) before or after; the command waits, up to --timeout,
until it has caught up with the group (by snapshot if need be) and then makes it a
voter. Replacing a dead replica is `add` of a new one, then `remove` of the dead one.

`remove ADDR` takes a replica out (the leader too: it steps down once the change is
committed), then drops it from the cluster file; stop its process afterwards.

Give the changed cluster file to every server and client: one that reads the old file
still reaches the group through the replicas it lists, and follows their hints to a
leader it does not list.";

/// Arguments of `cluster replica`.
#[derive(Debug, Args)]
#[command(long_about = ABOUT)]
pub struct ReplicaArgs {
    /// What to do
    #[command(subcommand)]
    pub command: ReplicaCommand,
}

/// The subcommands of `cluster replica`.
#[derive(Debug, Subcommand)]
pub enum ReplicaCommand {
    /// Take a new replica into a server's group (written into the cluster file if it
    /// is not there); waits until it has caught up and votes
    #[command(long_about = ABOUT)]
    Add {
        /// Where the new replica listens
        #[arg(value_name = "IP:PORT")]
        addr: SocketAddr,
        /// Its id in the group (default: one more than the group's largest)
        #[arg(long, value_name = "N")]
        id: Option<u64>,
        /// The directory with the cluster's ca.pem and ca.key (default: the cluster
        /// file's directory)
        #[arg(long, value_name = "DIR")]
        ca: Option<PathBuf>,
        /// Seconds to wait for the new replica to catch up
        #[arg(long, value_name = "SECONDS", default_value_t = 600.0)]
        timeout: f64,
        /// What both subcommands take
        #[command(flatten)]
        common: Common,
    },
    /// Take a replica out of a server's group, then out of the cluster file
    #[command(long_about = ABOUT)]
    Remove {
        /// Where the replica listens
        #[arg(value_name = "IP:PORT")]
        addr: SocketAddr,
        /// What both subcommands take
        #[command(flatten)]
        common: Common,
    },
}

/// What `add` and `remove` both take.
#[derive(Debug, Args)]
pub struct Common {
    /// The cluster file (rewritten with the change)
    #[arg(long, value_name = "FILE")]
    cluster: PathBuf,
    /// The server id whose group changes
    #[arg(long, value_name = "G")]
    group: u32,
    /// Print the group's members as JSON
    #[arg(long)]
    json: bool,
    /// How to connect
    #[command(flatten)]
    tls: TlsArgs,
}

/// `cluster replica add|remove`.
pub fn run(args: &ReplicaArgs, out: &mut impl Write) -> Result<ExitCode> {
    let (members, common) = match &args.command {
        ReplicaCommand::Add {
            addr,
            id,
            ca,
            timeout,
            common,
        } => {
            let wait = Duration::try_from_secs_f64(*timeout)
                .ok()
                .filter(|d| !d.is_zero())
                .with_context(|| format!("--timeout must be a positive number, not {timeout}"))?;
            (add(common, *addr, *id, ca.as_deref(), wait, out)?, common)
        }
        ReplicaCommand::Remove { addr, common } => (remove(common, *addr, out)?, common),
    };
    if common.json {
        serde_json::to_writer_pretty(&mut *out, &members)?;
        writeln!(out)?;
    } else {
        write_members(out, &members)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn add(
    c: &Common,
    addr: SocketAddr,
    id: Option<u64>,
    ca: Option<&Path>,
    wait: Duration,
    out: &mut impl Write,
) -> Result<Members> {
    let cfg = load(c)?;
    let s = group_of(&cfg, c)?;
    let id = match s.replicas.iter().find(|r| r.addr == addr) {
        Some(r) if id.is_some_and(|i| i != r.id) => {
            bail!(
                "{addr} is replica {} of server {} in the cluster file, not {}",
                r.id,
                c.group,
                id.unwrap_or_default()
            )
        }
        Some(r) => r.id,
        None => {
            let largest = s.replicas.iter().map(|r| r.id).max().unwrap_or(0);
            let id = id.unwrap_or(largest + 1);
            if id <= largest {
                bail!("--id {id}: a new replica's id must be larger than every id of the group (largest {largest})");
            }
            let dir = ca.map_or_else(|| file_dir(&c.cluster), Path::to_path_buf);
            let (cert, key) = cairn_cluster::tls::issue_replica_cert(&dir, c.group, id, addr.ip())
                .with_context(|| {
                    format!(
                        "a certificate for the new replica (the CA in {})",
                        dir.display()
                    )
                })?;
            let rel = |name: &str| relative(&dir.join(name), &file_dir(&c.cluster));
            edit_file(&c.cluster, &cfg, |doc| {
                insert_replica(doc, c.group, id, addr, &rel(&cert), &rel(&key))
            })?;
            writeln!(
                out,
                "wrote replica {id} of server {} at {addr} into {} (certificate {})",
                c.group,
                c.cluster.display(),
                dir.join(&cert).display()
            )?;
            id
        }
    };
    writeln!(out, "taking replica {id} in; start it if it is not running: cairn serve --cluster {} --listen {addr} --dir DIR", c.cluster.display())?;
    out.flush()?;
    let cfg = load(c)?;
    Ok(change_replicas(
        &cfg,
        c.group,
        ReplicaChange::Add { id, addr },
        wait,
    )?)
}

fn remove(c: &Common, addr: SocketAddr, out: &mut impl Write) -> Result<Members> {
    let cfg = load(c)?;
    let s = group_of(&cfg, c)?;
    let Some(r) = s.replicas.iter().find(|r| r.addr == addr) else {
        bail!(
            "the cluster file lists no replica of server {} at {addr}",
            c.group
        );
    };
    if s.replicas.len() == 1 {
        bail!(
            "{addr} is the only replica of server {} in the cluster file",
            c.group
        );
    }
    let id = r.id;
    let members = change_replicas(&cfg, c.group, ReplicaChange::Remove { id }, Duration::ZERO)?;
    edit_file(&c.cluster, &cfg, |doc| drop_replica(doc, c.group, id))?;
    writeln!(
        out,
        "replica {id} of server {} at {addr} left the group and the cluster file; stop its process",
        c.group
    )?;
    Ok(members)
}

fn load(c: &Common) -> Result<ClusterConfig> {
    crate::cluster::load_client(&c.cluster, &c.tls)
}

/// The server `c.group` of `cfg`, which must be replicated.
fn group_of<'a>(cfg: &'a ClusterConfig, c: &Common) -> Result<&'a cairn_cluster::ServerInfo> {
    let s = cfg
        .server(c.group)
        .with_context(|| format!("the cluster file has no server {}", c.group))?;
    if s.replicas.len() < 2 {
        bail!("server {} is a server of one replica; its replicas change only by a new cluster (a group of one is not replicated)", c.group);
    }
    Ok(s)
}

fn file_dir(file: &Path) -> PathBuf {
    match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `path` relative to `base` when under it (as init-certs writes names), else as is.
fn relative(path: &Path, base: &Path) -> String {
    path.strip_prefix(base)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// Rewrites the cluster file with `change` made to its TOML (comments and layout
/// kept), after checking that the result parses and keeps the cluster's id; written to
/// a temporary file, synced and renamed over it.
fn edit_file(
    path: &Path,
    before: &ClusterConfig,
    change: impl FnOnce(&mut toml_edit::DocumentMut) -> Result<()>,
) -> Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .with_context(|| format!("cluster file {}", path.display()))?;
    change(&mut doc)?;
    let new = doc.to_string();
    let after = ClusterConfig::parse(&new).context("the changed cluster file")?;
    if after.cluster_id() != before.cluster_id() {
        bail!(
            "the cluster file has no cluster_id line, so its id comes from its addresses and would change: add `cluster_id = \"{:#018x}\"` at its top first",
            before.cluster_id()
        );
    }
    let tmp = path.with_extension("toml.new");
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(new.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(file_dir(path))?.sync_all()
    };
    write().with_context(|| format!("writing {}", path.display()))
}

/// The `[[server]]` table of server `group`.
fn server_table(doc: &mut toml_edit::DocumentMut, group: u32) -> Result<&mut toml_edit::Table> {
    doc.get_mut("server")
        .and_then(toml_edit::Item::as_array_of_tables_mut)
        .and_then(|a| {
            a.iter_mut().find(|t| {
                t.get("id").and_then(toml_edit::Item::as_integer) == Some(i64::from(group))
            })
        })
        .with_context(|| format!("the cluster file has no [[server]] table with id = {group}"))
}

/// The `[[server.replica]]` tables of server `group`.
fn replica_tables(
    doc: &mut toml_edit::DocumentMut,
    group: u32,
) -> Result<&mut toml_edit::ArrayOfTables> {
    server_table(doc, group)?
        .get_mut("replica")
        .and_then(toml_edit::Item::as_array_of_tables_mut)
        .with_context(|| format!("server {group} has no [[server.replica]] tables"))
}

fn insert_replica(
    doc: &mut toml_edit::DocumentMut,
    group: u32,
    id: u64,
    addr: SocketAddr,
    cert: &str,
    key: &str,
) -> Result<()> {
    let list = replica_tables(doc, group)?;
    let mut t = toml_edit::Table::new();
    t.insert(
        "id",
        toml_edit::value(i64::try_from(id).context("replica id")?),
    );
    t.insert("addr", toml_edit::value(addr.to_string()));
    t.insert("cert", toml_edit::value(cert));
    t.insert("key", toml_edit::value(key));
    list.push(t);
    Ok(())
}

fn drop_replica(doc: &mut toml_edit::DocumentMut, group: u32, id: u64) -> Result<()> {
    let list = replica_tables(doc, group)?;
    let before = list.len();
    // A table without an id is the replica at its position (the file format's rule).
    let mut pos = 0u64;
    list.retain(|t| {
        let this = t
            .get("id")
            .and_then(toml_edit::Item::as_integer)
            .and_then(|i| u64::try_from(i).ok())
            .unwrap_or(pos);
        pos += 1;
        this != id
    });
    if list.len() == before {
        bail!("server {group} lists no replica {id}");
    }
    Ok(())
}

/// The group's members, one per line.
fn write_members(out: &mut impl Write, m: &Members) -> std::io::Result<()> {
    writeln!(
        out,
        "server {}: term {}, leader replica {}",
        m.group, m.term, m.leader
    )?;
    for r in &m.members {
        let what = if r.voter { "voter" } else { "learner" };
        writeln!(out, "  replica {:<3} {:<24} {what}", r.id, r.addr)?;
    }
    Ok(())
}
