//! `fs-bench --procs 1,2,4`: creates, stats and unlinks from several processes at once
//! into one shared directory, as HPC metadata benchmarks (mdtest) run them. Each
//! process is a child `cairn fs-bench-worker` with names of its own; the parent starts
//! each phase in all of them at once (a line on each one's stdin) and times the phase
//! from then until the last one reports it done, so a phase's rate is all the
//! processes' operations over the wall time of the slowest.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;

/// The hidden subcommand of one worker process.
pub const WORKER_COMMAND: &str = "fs-bench-worker";

/// Arguments of one worker (`cairn fs-bench-worker`).
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The shared directory
    dir: PathBuf,
    /// This worker's name prefix
    prefix: String,
    /// Files this worker creates
    files: u64,
}

/// One phase in one worker: reads `create`, `stat`, `unlink` or `quit` lines on stdin,
/// does that phase on its files and answers `done`.
pub fn worker(a: &WorkerArgs) -> Result<()> {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    let name = |i: u64| a.dir.join(format!("{}{i}", a.prefix));
    for line in stdin.lock().lines() {
        let line = line?;
        match line.trim() {
            "create" => {
                for i in 0..a.files {
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(name(i))
                        .with_context(|| format!("creating {}", name(i).display()))?;
                }
            }
            "stat" => {
                // A fixed permutation of the worker's files (as the single-process run).
                for k in 0..a.files {
                    let i = (k * 7919) % a.files;
                    std::fs::metadata(name(i))
                        .with_context(|| format!("stat of {}", name(i).display()))?;
                }
            }
            "unlink" => {
                for i in 0..a.files {
                    std::fs::remove_file(name(i))
                        .with_context(|| format!("removing {}", name(i).display()))?;
                }
            }
            "quit" => return Ok(()),
            other => bail!("unknown phase {other:?}"),
        }
        writeln!(out, "done")?;
        out.flush()?;
    }
    Ok(())
}

/// Rates of one target with `procs` processes.
#[derive(Debug, Serialize)]
pub struct ProcsRun {
    /// fuse, fuse-classic or plain.
    pub target: String,
    /// Processes at once.
    pub procs: u64,
    /// Files in the shared directory (all processes').
    pub files: u64,
    /// Creates per second, all processes together.
    pub create_rate: f64,
    /// Stats per second (each process its files in a fixed shuffled order).
    pub stat_rate: f64,
    /// Unlinks per second.
    pub unlink_rate: f64,
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    fn expect(&mut self, what: &str) -> Result<()> {
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        if line.trim() != what {
            let _ = self.child.kill();
            let out = self.child.wait_with_output_stderr();
            bail!("a worker said {:?} instead of {what:?}: {out}", line.trim());
        }
        Ok(())
    }
}

trait StderrOf {
    fn wait_with_output_stderr(&mut self) -> String;
}

impl StderrOf for Child {
    fn wait_with_output_stderr(&mut self) -> String {
        let mut s = String::new();
        if let Some(mut e) = self.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut s);
        }
        let _ = self.wait();
        s.trim().to_string()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.wait();
    }
}

/// Runs the three phases with `procs` processes, `files` in all, in `dir` (a new,
/// empty directory of the target).
pub fn run(target: &str, dir: &Path, procs: u64, files: u64) -> Result<ProcsRun> {
    let exe = std::env::current_exe()?;
    let per = files / procs;
    let mut workers = Vec::new();
    for p in 0..procs {
        let mut child = Command::new(&exe)
            .arg(WORKER_COMMAND)
            .arg(dir)
            .arg(format!("p{p}-"))
            .arg(per.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting a worker")?;
        let stdin = child.stdin.take().context("worker stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("worker stdout")?);
        let mut w = Worker {
            child,
            stdin,
            stdout,
        };
        w.expect("ready")?;
        workers.push(w);
    }
    let mut rates = Vec::new();
    for phase in ["create", "stat", "unlink"] {
        let start = Instant::now();
        for w in &mut workers {
            writeln!(w.stdin, "{phase}")?;
            w.stdin.flush()?;
        }
        for w in &mut workers {
            w.expect("done")
                .with_context(|| format!("{target}, {procs} processes, {phase}"))?;
        }
        rates.push((per * procs) as f64 / start.elapsed().as_secs_f64());
    }
    Ok(ProcsRun {
        target: target.to_string(),
        procs,
        files: per * procs,
        create_rate: rates[0],
        stat_rate: rates[1],
        unlink_rate: rates[2],
    })
}

/// The rates as bars: a row per phase and process count, a bar per target
/// (`shared-directory.png`).
pub fn plot(path: &Path, runs: &[ProcsRun]) -> Result<()> {
    let targets = crate::chart::distinct(runs.iter().map(|r| r.target.as_str()));
    let procs = crate::chart::distinct(runs.iter().map(|r| r.procs));
    type Rate = fn(&ProcsRun) -> f64;
    let phases: [(&str, Rate); 3] = [
        ("create", |r| r.create_rate),
        ("stat", |r| r.stat_rate),
        ("unlink", |r| r.unlink_rate),
    ];
    let mut rows = Vec::new();
    let mut keys = Vec::new();
    for (name, f) in phases {
        for &p in &procs {
            rows.push(format!("{name}, {p} proc"));
            keys.push((f, p));
        }
    }
    let series: Vec<(&str, Vec<Option<f64>>)> = targets
        .iter()
        .map(|t| {
            let v = keys
                .iter()
                .map(|(f, p)| runs.iter().find(|r| r.target == *t && r.procs == *p).map(f))
                .collect();
            (*t, v)
        })
        .collect();
    crate::fsplot::bars(
        path,
        "one shared directory, several processes (longer is better)",
        "operations/s (log scale)",
        &rows,
        &series,
    )
}

/// The results as a Markdown table.
pub fn markdown(runs: &[ProcsRun]) -> String {
    let mut s = String::from(
        "\nseveral processes into one shared directory (each its own names; a phase's rate \
         is all operations over the wall time of the slowest process)\n\n\
         | target | processes | files | create/s | stat/s | unlink/s |\n|---|---:|---:|---:|---:|---:|\n",
    );
    for r in runs {
        s.push_str(&format!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} |\n",
            r.target, r.procs, r.files, r.create_rate, r.stat_rate, r.unlink_rate
        ));
    }
    s
}
