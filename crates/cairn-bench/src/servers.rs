//! The `cairn serve` processes of the cluster benchmarks (`cluster-bench`,
//! `replication-bench`): starting one, waiting until they listen, their CPU time from
//! /proc, killing one and starting it again, and stopping all of them on every way out
//! ([`Servers`] is a guard); and a guard for client processes ([`Kids`]).

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

/// A free loopback port for a server to listen on, below the kernel's ephemeral range
/// (which outgoing connections draw from: see `cairn_testkit`).
pub(crate) fn free_port() -> Result<SocketAddr> {
    Ok(cairn_testkit::loopback_addr())
}

/// CPU seconds (user + system) a process has used, from /proc/PID/stat.
pub(crate) fn cpu_secs(pid: u32) -> Result<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    ensure!(f.len() > 13, "short /proc/{pid}/stat");
    let utime: f64 = f[11].parse()?;
    let stime: f64 = f[12].parse()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok((utime + stime) / hz.max(1.0))
}

/// How to start one `cairn serve` process (kept, to start it again the same way).
#[derive(Clone, Debug)]
pub(crate) struct Serve {
    /// The `cairn` binary.
    pub exe: PathBuf,
    /// Its store (`--dir`).
    pub dir: PathBuf,
    /// Where it listens (`--listen`).
    pub listen: SocketAddr,
    /// The cluster file (`--cluster`).
    pub cluster: PathBuf,
    /// `--sync`: never or always.
    pub sync: String,
    /// Its standard error goes here (appended to, so that a restart keeps the earlier
    /// lines).
    pub log: PathBuf,
    /// More arguments (`--split-threshold N`, `--insecure` ...).
    pub extra: Vec<String>,
}

impl Serve {
    /// Starts the process.
    pub(crate) fn spawn(&self) -> Result<Child> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening the server log {}", self.log.display()))?;
        Command::new(&self.exe)
            .arg("serve")
            .arg("--dir")
            .arg(&self.dir)
            .arg("--listen")
            .arg(self.listen.to_string())
            .arg("--cluster")
            .arg(&self.cluster)
            .arg("--sync")
            .arg(&self.sync)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .context("starting `cairn serve`")
    }
}

/// Running servers, each in a slot of its own (a slot is empty while its server is
/// stopped); all still running are stopped (SIGTERM, then SIGKILL after 10 s) when
/// dropped.
#[derive(Default)]
pub(crate) struct Servers {
    children: Vec<Option<Child>>,
}

impl Servers {
    /// Adds a running server; returns its slot.
    pub(crate) fn push(&mut self, c: Child) -> usize {
        self.children.push(Some(c));
        self.children.len() - 1
    }

    /// Puts a new process in slot `i` (whose server must be stopped).
    pub(crate) fn set(&mut self, i: usize, c: Child) -> Result<()> {
        let slot = self.children.get_mut(i).context("no such server slot")?;
        ensure!(slot.is_none(), "server slot {i} still has a process");
        *slot = Some(c);
        Ok(())
    }

    /// CPU seconds the running servers used so far.
    pub(crate) fn cpu_secs(&self) -> Result<f64> {
        self.children
            .iter()
            .flatten()
            .map(|c| cpu_secs(c.id()))
            .sum()
    }

    /// CPU seconds the running servers of `slots` used so far.
    pub(crate) fn cpu_secs_of(&self, slots: &[usize]) -> Result<f64> {
        slots
            .iter()
            .filter_map(|&i| self.children.get(i).and_then(Option::as_ref))
            .map(|c| cpu_secs(c.id()))
            .sum()
    }

    /// Kills the server of slot `i` with SIGKILL and reaps it (nothing if it is
    /// stopped already).
    pub(crate) fn kill(&mut self, i: usize) -> Result<()> {
        if let Some(mut c) = self.children.get_mut(i).and_then(Option::take) {
            // Child::kill is SIGKILL.
            c.kill().context("killing a server")?;
            c.wait().context("reaping a killed server")?;
        }
        Ok(())
    }

    /// A server that exited on its own: its slot and how it ended (it is reaped and its
    /// slot emptied).
    pub(crate) fn exited(&mut self) -> Option<(usize, std::process::ExitStatus)> {
        for (i, slot) in self.children.iter_mut().enumerate() {
            if let Some(c) = slot {
                if let Ok(Some(st)) = c.try_wait() {
                    *slot = None;
                    return Some((i, st));
                }
            }
        }
        None
    }

    /// Waits until every address in `addrs` accepts connections, at most `limit`;
    /// fails at once if a server exits (its log is in `logs`).
    pub(crate) fn wait_listening(
        &mut self,
        addrs: &[SocketAddr],
        limit: Duration,
        logs: &Path,
    ) -> Result<()> {
        let t = Instant::now();
        for a in addrs {
            while TcpStream::connect_timeout(a, Duration::from_millis(200)).is_err() {
                if t.elapsed() > limit {
                    bail!(
                        "server at {a} did not start within {} s (see its log in {})",
                        limit.as_secs(),
                        logs.display()
                    );
                }
                if let Some((i, st)) = self.exited() {
                    bail!(
                        "server {i} exited at start ({st}); see the logs in {}",
                        logs.display()
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }
}

/// Sends SIGTERM to a child that has not been reaped.
fn terminate(c: &Child) {
    // SAFETY: kill with the pid of our own child, not reaped yet (so not reused).
    unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
}

impl Drop for Servers {
    fn drop(&mut self) {
        for c in self.children.iter().flatten() {
            terminate(c);
        }
        let t = Instant::now();
        for c in self.children.iter_mut().flatten() {
            while t.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Client processes, killed (SIGKILL) and reaped if still running when dropped.
#[derive(Default)]
pub(crate) struct Kids(pub Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}
