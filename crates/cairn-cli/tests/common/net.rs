//! The network of the multi-process cluster tests. Where network namespaces can be made
//! (root, `ip netns`), each server runs in a namespace of its own with an address the
//! test assigns (10.77.X.10+i), joined to the test's namespace by veth pairs on a bridge
//! that lives in a namespace of its own, so clients reach servers through real
//! interfaces; elsewhere the servers listen on 127.0.0.1, and the test says so.
//!
//! Partitions ([`Net::cut`]): a blackhole route to a server's address, in a server's
//! namespace or in the test's (where the clients are), undone by [`Net::heal`] and on
//! drop.

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use super::cairn;

/// Namespaces and interfaces made by this process get unique names from this.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// Runs `ip ARGS`; its stderr as the error.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Output of `ip ARGS` (empty on failure).
pub fn ip_out(args: &[&str]) -> String {
    Command::new("ip")
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Servers in network namespaces of their own, joined by a bridge (in a namespace of
/// its own too) to a veth in the test's namespace.
pub struct Netns {
    /// Every namespace made (deleted on drop).
    pub namespaces: Vec<String>,
    /// The namespace of each server.
    pub server_ns: Vec<String>,
    /// The test namespace's end of its veth pair.
    pub host_if: Option<String>,
    /// `10.77.X`.
    pub prefix: String,
    /// The blackhole routes in place ([`Net::cut`]).
    cuts: Mutex<Vec<Cut>>,
}

/// A blackhole route: in the namespace of server `from` to the address of server `to`
/// (`None` for either: the test's namespace, where the clients are, and its address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    pub from: Option<usize>,
    pub to: Option<usize>,
}

impl Netns {
    /// Makes the namespaces of `n` servers, or says why not.
    pub fn new(n: usize) -> Result<Netns, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        // One setup at a time in this process, so that two tests don't pick the same
        // free /24.
        static SETUP: Mutex<()> = Mutex::new(());
        let _one = SETUP.lock().unwrap_or_else(|p| p.into_inner());
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}{k}", std::process::id() % 100_000);
        // A /24 that no interface or route of this machine uses yet.
        let used = ip_out(&["-4", "-o", "addr"]) + &ip_out(&["-4", "route"]);
        let start = (std::process::id() as usize * 7 + k as usize * 13) % 250;
        let x = (0..250)
            .map(|i| (start + i) % 250 + 2)
            .find(|x| !used.contains(&format!("10.77.{x}.")))
            .ok_or("no free 10.77.X.0/24")?;
        let mut net = Netns {
            namespaces: Vec::new(),
            server_ns: Vec::new(),
            host_if: None,
            prefix: format!("10.77.{x}"),
            cuts: Mutex::new(Vec::new()),
        };
        net.build(n, &tag)?;
        Ok(net)
    }

    fn build(&mut self, n: usize, tag: &str) -> Result<(), String> {
        let br = format!("cairn-test-{tag}-bridge");
        ip(&["netns", "add", &br])?;
        self.namespaces.push(br.clone());
        ip(&["-n", &br, "link", "set", "lo", "up"])?;
        ip(&["-n", &br, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &br, "link", "set", "br0", "up"])?;
        // The test's own end.
        let (h, hb) = (format!("cz{tag}h"), format!("cz{tag}hb"));
        ip(&["link", "add", &h, "type", "veth", "peer", "name", &hb])?;
        self.host_if = Some(h.clone());
        ip(&["link", "set", &hb, "netns", &br])?;
        ip(&["-n", &br, "link", "set", &hb, "master", "br0", "up"])?;
        ip(&["addr", "add", &format!("{}.1/24", self.prefix), "dev", &h])?;
        ip(&["link", "set", &h, "up"])?;
        for i in 0..n {
            let s = format!("cairn-test-{tag}-server{i}");
            ip(&["netns", "add", &s])?;
            self.namespaces.push(s.clone());
            self.server_ns.push(s.clone());
            ip(&["-n", &s, "link", "set", "lo", "up"])?;
            let (a, b) = (format!("cz{tag}s{i}"), format!("cz{tag}b{i}"));
            ip(&["link", "add", &a, "type", "veth", "peer", "name", &b])?;
            ip(&["link", "set", &a, "netns", &s])?;
            ip(&["link", "set", &b, "netns", &br])?;
            ip(&["-n", &br, "link", "set", &b, "master", "br0", "up"])?;
            let addr = format!("{}.{}/24", self.prefix, 10 + i);
            ip(&["-n", &s, "addr", "add", &addr, "dev", &a])?;
            ip(&["-n", &s, "link", "set", &a, "up"])?;
        }
        Ok(())
    }
}

impl Netns {
    /// `ip` arguments that add (`add`) or delete (`del`) the route of `cut`.
    fn route(&self, verb: &str, cut: Cut) -> Vec<String> {
        let mut args: Vec<String> = Vec::new();
        if let Some(i) = cut.from {
            args.extend(["-n".to_string(), self.server_ns[i].clone()]);
        }
        let host = cut.to.map_or(1, |i| 10 + i);
        let to = format!("{}.{host}/32", self.prefix);
        args.extend(["route", verb, "blackhole", &to].map(String::from));
        args
    }

    fn run(args: &[String]) -> Result<(), String> {
        ip(&args.iter().map(String::as_str).collect::<Vec<_>>())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // The test namespace's routes outlive the interfaces: deleted first.
        let cuts = std::mem::take(&mut *self.cuts.lock().unwrap_or_else(|p| p.into_inner()));
        for cut in cuts.into_iter().filter(|c| c.from.is_none()) {
            let _ = Netns::run(&self.route("del", cut));
        }
        // Deleting a namespace deletes the interfaces in it, and a veth with its peer.
        for ns in self.namespaces.iter().rev() {
            let _ = ip(&["netns", "del", ns]);
        }
        if let Some(h) = &self.host_if {
            let _ = ip(&["link", "del", h]);
        }
    }
}

/// Where the servers run.
pub enum Net {
    Loopback(Vec<u16>),
    Namespaces(Netns),
}

impl Net {
    pub fn new(n: usize) -> Net {
        match Netns::new(n) {
            Ok(ns) => {
                println!(
                    "servers in network namespaces, addresses {}.10..{}",
                    ns.prefix,
                    9 + n
                );
                Net::Namespaces(ns)
            }
            Err(why) => {
                println!("servers on loopback (network namespaces can't be made here: {why})");
                Net::Loopback(free_ports(2 * n))
            }
        }
    }

    /// The address server `i` serves on.
    pub fn addr(&self, i: usize) -> SocketAddr {
        match self {
            Net::Loopback(ports) => format!("127.0.0.1:{}", ports[i]).parse().unwrap(),
            Net::Namespaces(ns) => format!("{}.{}:7100", ns.prefix, 10 + i).parse().unwrap(),
        }
    }

    /// The address of server `i`'s metrics.
    pub fn metrics_addr(&self, i: usize) -> SocketAddr {
        match self {
            Net::Loopback(ports) => {
                let n = ports.len() / 2;
                format!("127.0.0.1:{}", ports[n + i]).parse().unwrap()
            }
            Net::Namespaces(ns) => format!("{}.{}:9100", ns.prefix, 10 + i).parse().unwrap(),
        }
    }

    /// A command that runs `cairn` where server `i` lives.
    pub fn command(&self, i: usize) -> Command {
        match self {
            Net::Loopback(_) => cairn(),
            Net::Namespaces(ns) => {
                // `ip netns exec` execs the command: the child's pid is cairn's.
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &ns.server_ns[i]])
                    .arg(env!("CARGO_BIN_EXE_cairn"));
                c
            }
        }
    }
}

impl Net {
    /// Whether partitions can be made ([`Net::cut`]): only between namespaces.
    pub fn can_cut(&self) -> bool {
        matches!(self, Net::Namespaces(_))
    }

    /// Drops every packet that the namespace of server `from` sends to server `to`
    /// (`None` for either: the test's namespace, where the clients are), by a blackhole
    /// route, until [`Net::heal`]. A TCP connection needs both directions, so cutting
    /// one parts the two: the sender's sends fail at once, the other side hears nothing
    /// (its requests arrive, the answers don't). An error where namespaces can't be
    /// made.
    pub fn cut(&self, from: Option<usize>, to: Option<usize>) -> Result<(), String> {
        let Net::Namespaces(ns) = self else {
            return Err("servers on loopback: no partitions".into());
        };
        let cut = Cut { from, to };
        let mut cuts = ns.cuts.lock().unwrap_or_else(|p| p.into_inner());
        if !cuts.contains(&cut) {
            Netns::run(&ns.route("add", cut))?;
            cuts.push(cut);
        }
        Ok(())
    }

    /// Undoes every [`Net::cut`].
    pub fn heal(&self) -> Result<(), String> {
        let Net::Namespaces(ns) = self else {
            return Ok(());
        };
        let mut cuts = ns.cuts.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(cut) = cuts.pop() {
            Netns::run(&ns.route("del", cut))?;
        }
        Ok(())
    }
}

/// Free TCP ports on 127.0.0.1, below the ephemeral range (see `cairn_testkit`).
pub fn free_ports(n: usize) -> Vec<u16> {
    cairn_testkit::loopback_addrs(n)
        .iter()
        .map(|a| a.port())
        .collect()
}
