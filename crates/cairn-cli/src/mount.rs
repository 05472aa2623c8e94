//! `cairn mount` as FUSE file systems are mounted: its options (each as `-o NAME[=VALUE]`
//! and as a long flag), the `mount.cairn` helper that `mount -t cairn` and fstab lines
//! run (the binary answers to that name: [`helper_argv`] turns mount(8)'s calling
//! convention into `cairn mount`'s), `cairn install-mount-helper`, and the background
//! mode: the command starts itself again in the foreground as a daemon (its own session,
//! its output in a log file or the journal) and returns once that mount serves, or with
//! its error.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::cluster;

/// The name under which the binary is mount(8)'s helper for file-system type `cairn`.
pub const HELPER_NAME: &str = "mount.cairn";

/// Set (to `1`) in the environment of the foreground mount that a background
/// `cairn mount` starts: it then writes [`READY`] or its error as one line to its
/// standard output, which the starting process reads.
pub const NOTIFY_ENV: &str = "CAIRN_MOUNT_NOTIFY";

/// The line a mount started in the background writes once it serves.
const READY: &str = "ready";

/// How a `mount.cairn` source names a cluster instead of a store directory.
const CLUSTER_PREFIX: &str = "cluster:";

/// Long description of `mount`.
pub const ABOUT: &str = "\
Mount the file system of store DIR (created if needed), or of a cluster, on MOUNTPOINT
through FUSE.

The mount runs in the background: the command returns once the mount serves requests,
or fails with the mount's error. Its messages go to the journal when started by systemd,
else to --log FILE (default /var/log/cairn/<MOUNTPOINT>.log as root,
~/.local/state/cairn/<MOUNTPOINT>.log otherwise). `umount MOUNTPOINT`, `cairn umount
MOUNTPOINT` and SIGTERM unmount it cleanly. -f keeps it in the foreground.

Every option has a -o form, comma-separated as mount(8) and fstab take them:
  ro, rw, allow_other, default_permissions, entry_timeout=S, attr_timeout=S,
  negative_timeout=S, writeback_cache, flush_interval=S, transport=auto|uring|classic,
  suid, nosuid, dev, nodev, cluster=FILE, timeout=S, cert=FILE, key=FILE, insecure,
  log=FILE, foreground.
Options of mount(8) and systemd that concern them, not the mount (defaults, auto,
noauto, nofail, _netdev, user, nouser, users, exec, async, x-*, comment=*), are
accepted and ignored; any other is an error.

As mount(8)'s helper (`cairn install-mount-helper` links /sbin/mount.cairn to this
binary): `mount -t cairn DIR MOUNTPOINT`, `mount -t cairn cluster:FILE MOUNTPOINT`, or
an fstab line such as
  /var/lib/cairn/store  /mnt/c  cairn  defaults,_netdev,nofail  0  0";

/// Arguments of `mount`.
#[derive(Debug, Args)]
#[command(override_usage = "cairn mount [OPTIONS] DIR MOUNTPOINT\n       \
                            cairn mount [OPTIONS] --cluster FILE MOUNTPOINT\n       \
                            mount.cairn DIR|cluster:FILE MOUNTPOINT [-o OPTIONS]")]
pub struct MountArgs {
    /// Directory of the store (created if needed); with --cluster, the mount point
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// Where to mount it (an existing directory)
    #[arg(value_name = "MOUNTPOINT")]
    mountpoint: Option<PathBuf>,
    /// Options as mount(8) takes them: NAME or NAME=VALUE, comma-separated (see above)
    #[arg(short = 'o', value_name = "OPTIONS")]
    options: Vec<String>,
    /// Serve in the foreground until unmounted (Ctrl-C or SIGTERM unmounts); messages
    /// on standard error
    #[arg(short = 'f', long)]
    foreground: bool,
    /// In the background: where the mount's messages go (appended)
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Mount the namespace of the cluster that FILE describes (its cluster file) instead
    /// of a local store; several mounts of one cluster, on any machines that reach its
    /// servers, see one namespace
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    /// With --cluster: seconds an operation may take (retries included) before it fails
    /// with EIO, such as one on a server that is down (default 10)
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// With --cluster: how to connect (TLS with the cluster file's client certificate,
    /// or --cert/--key; plain TCP only with --insecure)
    #[command(flatten)]
    tls: cluster::TlsArgs,
    /// Mount read-only: every change fails with EROFS
    #[arg(long = "ro", visible_alias = "read-only", overrides_with = "rw")]
    ro: bool,
    /// Mount read-write (the default)
    #[arg(long, overrides_with = "ro")]
    rw: bool,
    /// Let other users than the one mounting use the mount (needs root, or
    /// user_allow_other in /etc/fuse.conf)
    #[arg(long)]
    allow_other: bool,
    /// Let the kernel check permissions even on a mount only root uses (by default
    /// cairn checks them there, which saves a request per create and unlink)
    #[arg(long, visible_alias = "kernel-permissions")]
    default_permissions: bool,
    /// Seconds the kernel may keep a name it looked up (default a day for a store, 1
    /// for a cluster)
    #[arg(long, value_name = "SECONDS")]
    entry_timeout: Option<f64>,
    /// Seconds the kernel may keep a file's attributes (defaults as --entry-timeout)
    #[arg(long, value_name = "SECONDS")]
    attr_timeout: Option<f64>,
    /// Seconds the kernel may remember that a name does not exist (default a day for
    /// a store, 0 for a cluster)
    #[arg(long, value_name = "SECONDS")]
    negative_timeout: Option<f64>,
    /// Let the kernel cache writes and send them in pages, later (at the latest at
    /// close, fsync or unmount)
    #[arg(long)]
    writeback_cache: bool,
    /// Seconds between write-outs of what the mount holds (written to the store's files
    /// and synced), which bound what a killed mount or a power loss loses (default 5
    /// for a store; 0: only at fsync and unmount; a cluster's mount holds no writes)
    #[arg(long, value_name = "SECONDS")]
    flush_interval: Option<f64>,
    /// How requests travel between the kernel and the mount: `uring` (FUSE over
    /// io_uring, one queue per CPU; Linux 6.14+ with
    /// /sys/module/fuse/parameters/enable_uring on), `classic` (/dev/fuse reads) or
    /// `auto` (uring where the kernel offers it)
    #[arg(long, value_name = "TRANSPORT", default_value = "auto")]
    transport: cairn_fuse::Transport,
    /// Honour setuid and setgid bits of programs run from the mount (the default for a
    /// local store; a --cluster mount is `nosuid` unless this is given, since a setuid
    /// file made by one client would run as its owner on every host that mounts it)
    #[arg(long, overrides_with = "nosuid")]
    suid: bool,
    /// Ignore setuid and setgid bits (the default for a --cluster mount)
    #[arg(long, overrides_with = "suid")]
    nosuid: bool,
    /// Let device nodes on the mount be opened as devices (the default for a local
    /// store; a --cluster mount is `nodev` unless this is given)
    #[arg(long, overrides_with = "nodev")]
    dev: bool,
    /// Refuse to open device nodes as devices (the default for a --cluster mount)
    #[arg(long, overrides_with = "dev")]
    nodev: bool,
    /// Ignore unknown -o options instead of failing (mount(8)'s -s)
    #[arg(long, hide = true)]
    sloppy: bool,
}

/// Arguments of `install-mount-helper`.
#[derive(Debug, Args)]
pub struct InstallHelperArgs {
    /// Directory mount(8) looks for helpers in
    #[arg(long, value_name = "DIR", default_value = "/sbin")]
    dir: PathBuf,
}

/// `Some(true)` for `--X`, `Some(false)` for `--noX`, `None` (the mount's default) for
/// neither; the last one given wins.
fn flag(on: bool, off: bool) -> Option<bool> {
    match (on, off) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    }
}

/// Options of mount(8), fstab and systemd that are not the mount's own; accepted and
/// ignored.
fn ignored(name: &str) -> bool {
    matches!(
        name,
        "defaults"
            | "auto"
            | "noauto"
            | "nofail"
            | "_netdev"
            | "user"
            | "nouser"
            | "users"
            | "owner"
            | "group"
            | "exec"
            | "async"
            | "loop"
    ) || name.starts_with("x-")
        || name.starts_with("comment=")
}

impl MountArgs {
    /// Applies the `-o` options, in order, over the flags; an unknown option is an
    /// error (ignored with `--sloppy`), as is a value that does not parse.
    pub fn apply_options(&mut self) -> Result<(), String> {
        let list = std::mem::take(&mut self.options);
        for opt in list.iter().flat_map(|l| l.split(',')) {
            if opt.is_empty() || ignored(opt) {
                continue;
            }
            let (name, value) = match opt.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (opt, None),
            };
            self.apply(name, value).or_else(|e| match e {
                OptError::Unknown if self.sloppy => Ok(()),
                OptError::Unknown => Err(format!(
                    "unknown mount option {opt:?} (see `cairn mount --help` for the options)"
                )),
                OptError::Value(why) => Err(format!("mount option {opt:?}: {why}")),
            })?;
        }
        Ok(())
    }

    /// Applies one `-o` option.
    fn apply(&mut self, name: &str, value: Option<&str>) -> Result<(), OptError> {
        let text = || {
            value
                .map(str::to_owned)
                .ok_or(OptError::value("needs =VALUE"))
        };
        let secs = || -> Result<f64, OptError> {
            let v = text()?;
            v.parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .ok_or(OptError::value("not a number of seconds"))
        };
        let bare = |set: &mut bool| match value {
            None => {
                *set = true;
                Ok(())
            }
            Some(_) => Err(OptError::value("takes no value")),
        };
        match name {
            "ro" => {
                bare(&mut self.ro)?;
                self.rw = false;
            }
            "rw" => {
                bare(&mut self.rw)?;
                self.ro = false;
            }
            "allow_other" => bare(&mut self.allow_other)?,
            "default_permissions" => bare(&mut self.default_permissions)?,
            "writeback_cache" => bare(&mut self.writeback_cache)?,
            "foreground" => bare(&mut self.foreground)?,
            "insecure" => bare(&mut self.tls.insecure)?,
            "suid" | "nosuid" => {
                bare(&mut self.suid)?;
                self.nosuid = name == "nosuid";
                self.suid = !self.nosuid;
            }
            "dev" | "nodev" => {
                bare(&mut self.dev)?;
                self.nodev = name == "nodev";
                self.dev = !self.nodev;
            }
            "entry_timeout" => self.entry_timeout = Some(secs()?),
            "attr_timeout" => self.attr_timeout = Some(secs()?),
            "negative_timeout" => self.negative_timeout = Some(secs()?),
            "flush_interval" => self.flush_interval = Some(secs()?),
            "timeout" => self.timeout = Some(secs()?),
            "transport" => self.transport = text()?.parse().map_err(OptError::Value)?,
            "cluster" => self.cluster = Some(text()?.into()),
            "cert" => self.tls.cert = Some(text()?.into()),
            "key" => self.tls.key = Some(text()?.into()),
            "log" => self.log = Some(text()?.into()),
            _ => return Err(OptError::Unknown),
        }
        Ok(())
    }

    /// Usage errors once the options are applied: what is missing or given in vain.
    pub fn check(&self) -> Result<(), String> {
        match (&self.cluster, &self.mountpoint) {
            (None, None) => return Err("MOUNTPOINT is missing: give DIR MOUNTPOINT".into()),
            (Some(_), Some(_)) => {
                return Err(
                    "with --cluster give only MOUNTPOINT (the cluster's namespace \
                            is mounted, no DIR)"
                        .into(),
                )
            }
            _ => {}
        }
        if self.cluster.is_none() {
            if self.tls.insecure || self.tls.cert.is_some() || self.tls.key.is_some() {
                return Err("--insecure, --cert and --key are for --cluster mounts".into());
            }
            if self.timeout.is_some() {
                return Err("--timeout is for --cluster mounts".into());
            }
        }
        if self.tls.cert.is_some() != self.tls.key.is_some() {
            return Err("--cert and --key go together".into());
        }
        if self.tls.insecure && self.tls.cert.is_some() {
            return Err("--insecure and --cert exclude each other".into());
        }
        Ok(())
    }

    /// The mount point.
    fn mountpoint(&self) -> &Path {
        // With --cluster the only path given is the mount point (see `check`).
        self.mountpoint.as_deref().unwrap_or(&self.dir)
    }

    /// The FUSE options these arguments ask for.
    fn fuse_options(&self) -> Result<cairn_fuse::MountOptions> {
        let t = |s: Option<f64>, what: &str| -> Result<Option<Duration>> {
            s.map(|s| {
                Duration::try_from_secs_f64(s).with_context(|| format!("{what}: {s} seconds"))
            })
            .transpose()
        };
        Ok(cairn_fuse::MountOptions {
            allow_other: self.allow_other,
            kernel_permissions: self.default_permissions,
            entry_timeout: t(self.entry_timeout, "entry_timeout")?,
            attr_timeout: t(self.attr_timeout, "attr_timeout")?,
            negative_timeout: t(self.negative_timeout, "negative_timeout")?,
            writeback_cache: self.writeback_cache,
            flush_interval: t(self.flush_interval, "flush_interval")?,
            read_only: self.ro,
            transport: self.transport,
            suid: flag(self.suid, self.nosuid),
            dev: flag(self.dev, self.nodev),
        })
    }
}

/// Why an option was refused.
enum OptError {
    Unknown,
    Value(String),
}

impl OptError {
    fn value(why: &str) -> OptError {
        OptError::Value(why.into())
    }
}

/// `mount`: in the background (the default; see [`ABOUT`]) or in the foreground.
/// `argv`: the command line as `cairn mount` takes it, for the background mount to
/// start itself with.
pub fn run(args: &MountArgs, argv: &[OsString]) -> Result<ExitCode> {
    if args.foreground {
        foreground(args)?;
        return Ok(ExitCode::SUCCESS);
    }
    background(args, argv)
}

/// Whether this process is a mount that a background `cairn mount` started and waits
/// for ([`NOTIFY_ENV`]).
pub fn notifying() -> bool {
    std::env::var_os(NOTIFY_ENV).is_some_and(|v| v == "1")
}

/// Tells the waiting starter (with [`NOTIFY_ENV`]) that the mount failed: `line`.
pub fn notify_failure(line: &str) {
    if notifying() {
        let _ = writeln!(std::io::stdout().lock(), "{line}");
    }
}

/// Tells the waiting starter that the mount serves, then lets go of standard output
/// (the pipe it reads) so that it sees the end of it.
fn notify_ready() {
    if !notifying() {
        return;
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{READY}");
    let _ = out.flush();
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        use std::os::fd::AsRawFd;
        // SAFETY: dup2 of an open descriptor onto standard output, which stays valid
        // (now /dev/null); no Rust object owns descriptor 1.
        unsafe { libc::dup2(null.as_raw_fd(), 1) };
    }
}

/// `mount -f`: serves the mount in this process until it is unmounted or the process
/// gets SIGINT or SIGTERM.
fn foreground(args: &MountArgs) -> Result<()> {
    let opts = args.fuse_options()?;
    let mountpoint = args.mountpoint();
    if let Some(file) = &args.cluster {
        return cluster::mount(
            file,
            &args.tls,
            mountpoint,
            args.timeout,
            &opts,
            notify_ready,
        );
    }
    // Huge pages while the store opens (and the mount is set up), off while it serves.
    let mount = crate::allocator::huge_pages_while(|| open_mount(&args.dir, mountpoint, &opts))?;
    eprintln!(
        "cairn: {} mounted on {} (`umount {}` or SIGTERM unmounts)",
        args.dir.display(),
        mountpoint.display(),
        mountpoint.display()
    );
    mount.run_with(notify_ready)
}

/// How long a mount waits for a store that another process holds: `umount` returns
/// once the kernel lets go of the mount, a moment before the mount process has closed
/// the store, so `umount DIR && mount DIR` would otherwise find it locked.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// [`cairn_fuse::mount`], waiting up to [`LOCK_WAIT`] while the store is locked (the
/// store is opened before anything is mounted, so a refused try leaves nothing).
fn open_mount(
    store: &Path,
    mountpoint: &Path,
    opts: &cairn_fuse::MountOptions,
) -> Result<cairn_fuse::Mount> {
    let start = std::time::Instant::now();
    loop {
        match cairn_fuse::mount(store, mountpoint, opts) {
            Err(e) if is_locked(&e) && start.elapsed() < LOCK_WAIT => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) if is_locked(&e) => {
                return Err(e.context(format!("waited {} s", LOCK_WAIT.as_secs())))
            }
            other => return other,
        }
    }
}

/// Whether `e` is the engine's refusal of a store another process holds.
fn is_locked(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<cairn::Error>(),
            Some(cairn::Error::Locked(_))
        )
    })
}

/// Where a background mount's messages go: a file, or the journal (standard error of
/// a process systemd started, which `JOURNAL_STREAM` names).
enum LogTo {
    File(PathBuf),
    Journal,
}

/// Where the background mount of `args` logs: --log, else the journal when standard
/// error is it, else a file named after the mount point.
fn log_to(args: &MountArgs) -> Result<LogTo> {
    if let Some(f) = &args.log {
        return Ok(LogTo::File(f.clone()));
    }
    if stderr_is_journal() {
        return Ok(LogTo::Journal);
    }
    let dir = if crate::is_root() {
        PathBuf::from("/var/log/cairn")
    } else {
        let state = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/state")))
            .context("neither XDG_STATE_HOME nor HOME is set: give --log FILE")?;
        state.join("cairn")
    };
    let mp = std::path::absolute(args.mountpoint()).unwrap_or_else(|_| args.mountpoint().into());
    let name = mp.to_string_lossy().trim_matches('/').replace('/', "-");
    let name = if name.is_empty() { "-".into() } else { name };
    Ok(LogTo::File(dir.join(format!("{name}.log"))))
}

/// Whether standard error is the journal: `JOURNAL_STREAM` (`DEVICE:INODE`, set by
/// systemd) names the file it is.
fn stderr_is_journal() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Ok(meta) = std::fs::metadata("/proc/self/fd/2") else {
        return false;
    };
    stream.to_string_lossy() == format!("{}:{}", meta.dev(), meta.ino())
}

/// Starts the mount of `argv` again, in the foreground, as a daemon (a session of its
/// own, standard input from /dev/null, messages to its log), and waits until it serves
/// (success) or fails (its error, exit status 1).
fn background(args: &MountArgs, argv: &[OsString]) -> Result<ExitCode> {
    let log = log_to(args)?;
    let stderr = match &log {
        LogTo::Journal => Stdio::inherit(),
        LogTo::File(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("opening the log {}", path.display()))?;
            Stdio::from(f)
        }
    };
    let exe = std::env::current_exe().context("finding this program")?;
    let mut cmd = Command::new(exe);
    cmd.arg0("cairn")
        .args(argv)
        .arg("--foreground")
        .env(NOTIFY_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr);
    // SAFETY: setsid is async-signal-safe and touches no memory of this process; the
    // child only calls it before exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("starting the mount process")?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        BufReader::new(out)
            .read_line(&mut line)
            .context("waiting for the mount process")?;
    }
    let where_ = match &log {
        LogTo::File(p) => format!("its log: {}", p.display()),
        LogTo::Journal => "the journal".into(),
    };
    match line.trim_end() {
        READY => Ok(ExitCode::SUCCESS),
        "" => {
            let st = child.wait().context("waiting for the mount process")?;
            bail!("the mount process ended ({st}) before the mount was ready (see {where_})")
        }
        why => {
            // It ends on its own once it has closed the store.
            let _ = child.wait();
            bail!("{why}")
        }
    }
}

/// `cairn install-mount-helper`: links `DIR/mount.cairn` to this program, so that
/// mount(8) finds it for type `cairn`. An existing link is replaced; any other file of
/// that name is left alone (an error).
pub fn install_helper(args: &InstallHelperArgs) -> Result<()> {
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .context("finding this program")?;
    let link = args.dir.join(HELPER_NAME);
    match std::fs::symlink_metadata(&link) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::remove_file(&link).with_context(|| format!("replacing {}", link.display()))?
        }
        Ok(_) => bail!(
            "{} exists and is not a symbolic link: not replacing it",
            link.display()
        ),
        Err(_) => {}
    }
    std::os::unix::fs::symlink(&exe, &link)
        .with_context(|| format!("linking {} to {}", link.display(), exe.display()))?;
    println!("{} -> {}", link.display(), exe.display());
    Ok(())
}

/// The command line of `cairn mount` for a `mount.cairn` command line (mount(8)'s
/// convention: `SOURCE DIR [-sfnvh] [-N NS] [-o OPTIONS] [-t TYPE]`), or `Err` with a
/// usage message. `Ok(None)`: nothing to do (`-f`, a fake mount).
pub fn helper_argv(args: &[OsString]) -> Result<Option<Vec<OsString>>, String> {
    let mut positional = Vec::new();
    let mut options = Vec::new();
    let mut sloppy = false;
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        match s.as_ref() {
            "-o" => options.push(it.next().ok_or("-o needs OPTIONS")?.clone()),
            "-t" => {
                it.next().ok_or("-t needs TYPE")?;
            }
            "-N" => return Err("mount namespaces (-N) are not supported".into()),
            "-h" | "--help" => return Err(helper_usage()),
            f if f.starts_with('-') && f.len() > 1 => {
                for c in f[1..].chars() {
                    match c {
                        's' => sloppy = true,
                        'f' => return Ok(None),
                        'n' | 'v' => {}
                        _ => return Err(format!("unknown flag -{c}\n{}", helper_usage())),
                    }
                }
            }
            _ => positional.push(a.clone()),
        }
    }
    let [source, dir] = positional.as_slice() else {
        return Err(helper_usage());
    };
    let mut out: Vec<OsString> = vec!["cairn".into(), "mount".into()];
    let cluster = source.to_str().and_then(|s| s.strip_prefix(CLUSTER_PREFIX));
    match cluster {
        Some(file) => out.extend(["--cluster".into(), file.into()]),
        None if options_name_cluster(&options) => {}
        None => out.push(source.clone()),
    }
    out.push(dir.clone());
    for o in options {
        out.extend(["-o".into(), o]);
    }
    if sloppy {
        out.push("--sloppy".into());
    }
    Ok(Some(out))
}

/// Whether `-o` options name the cluster (`cluster=FILE`): the source is then only a
/// label.
fn options_name_cluster(options: &[OsString]) -> bool {
    options
        .iter()
        .flat_map(|o| {
            o.to_string_lossy()
                .split(',')
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .any(|o| o.starts_with("cluster="))
}

/// The usage of `mount.cairn`.
fn helper_usage() -> String {
    "usage: mount.cairn DIR|cluster:FILE MOUNTPOINT [-sfnv] [-o OPTIONS] \
     (see `cairn mount --help` for the options)"
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn helper_command_lines() {
        let h = |v: &[&str]| helper_argv(&os(v));
        assert_eq!(
            h(&["mount.cairn", "/s", "/m", "-o", "rw,nosuid"]),
            Ok(Some(os(&["cairn", "mount", "/s", "/m", "-o", "rw,nosuid"])))
        );
        assert_eq!(
            h(&["mount.cairn", "cluster:/etc/c.toml", "/m", "-n"]),
            Ok(Some(os(&[
                "cairn",
                "mount",
                "--cluster",
                "/etc/c.toml",
                "/m"
            ])))
        );
        assert_eq!(
            h(&["mount.cairn", "c", "/m", "-s", "-o", "cluster=/c.toml"]),
            Ok(Some(os(&[
                "cairn",
                "mount",
                "/m",
                "-o",
                "cluster=/c.toml",
                "--sloppy"
            ])))
        );
        assert_eq!(h(&["mount.cairn", "/s", "/m", "-f"]), Ok(None));
        assert!(h(&["mount.cairn", "/s"]).is_err());
        assert!(h(&["mount.cairn", "/s", "/m", "-x"]).is_err());
        assert!(h(&["mount.cairn", "/s", "/m", "-N", "1"]).is_err());
    }
}
