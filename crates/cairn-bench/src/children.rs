//! The child processes of `cairn bench`: the parent starts one per (suite, engine) and
//! follows its progress; the child runs the suite and writes its results.

use std::collections::VecDeque;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::ProgressBar;

use crate::engine::EngineSpec;
use crate::{
    engine_settings, engines, measure, memlimit, suites, synccount, write_json, ChildSpec, Config,
    Ctx, SuiteDef, SuiteRun, CHILD_COMMAND, PROGRESS,
};

/// Runs one suite on one engine in a child process and collects its results; a child
/// that fails or crashes becomes a run with an error.
pub(crate) fn run_child(
    suite: &SuiteDef,
    engine: Option<&EngineSpec>,
    variant: Option<&str>,
    config: &Config,
    (data, scratch): (&Path, &Path),
    cgroup: Option<&memlimit::MemoryCgroup>,
    bar: &ProgressBar,
) -> Result<SuiteRun> {
    let engine_name = variant.unwrap_or(engine.map_or("disk", |e| e.name));
    let name = format!("{}-{}", suite.name, engine_name);
    let dir = data.join(&name);
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    let spec = ChildSpec {
        suite: suite.name.into(),
        engine: engine.map(|e| e.name.into()),
        variant: variant.map(Into::into),
        config: config.clone(),
        dir: dir.clone(),
        result: scratch.join(format!("{name}.result.json")),
    };
    let _ = fs::remove_file(&spec.result);
    let spec_path = scratch.join(format!("{name}.spec.json"));
    write_json(&spec_path, &spec)?;
    let steps = (suite.steps)(config);
    bar.set_message(format!("{} on {engine_name}", suite.title));
    let started = Instant::now();
    let mut cmd = Command::new(self_exe()?);
    cmd.arg(CHILD_COMMAND)
        .arg(&spec_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(cg) = cgroup {
        cg.confine(&mut cmd);
    }
    let spawned = cmd.spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(err) => {
            let error = format!("starting the child process failed: {err}");
            bar.suspend(|| eprintln!("bench: {} on {engine_name}: {error}", suite.name));
            bar.inc(steps);
            return Ok(failed_run(suite, engine_name, 0.0, error));
        }
    };
    let stderr = child.stderr.take().context("the child's standard error")?;
    let label = (suite.name, engine_name, name.as_str());
    let (done, tail) = follow_child(stderr, label, started, bar)?;
    let status = child.wait()?;
    bar.inc(steps.saturating_sub(done));
    let _ = fs::remove_dir_all(&dir);
    let result = fs::read(&spec.result).ok();
    match result {
        Some(bytes) if status.success() => Ok(serde_json::from_slice(&bytes)
            .with_context(|| format!("reading {}", spec.result.display()))?),
        _ => {
            let why = tail.into_iter().collect::<Vec<_>>().join(" | ");
            let error = format!("child process {status}: {why}");
            bar.suspend(|| eprintln!("bench: {} on {engine_name} failed: {error}", suite.name));
            let wall = started.elapsed().as_secs_f64();
            Ok(failed_run(suite, engine_name, wall, error))
        }
    }
}

/// Reads a child's standard error to its end: its progress lines advance `bar`, the
/// others are shown (prefixed with the job's name, the last of `label`) and the last 20
/// kept. Returns the steps done and those last lines.
fn follow_child(
    stderr: std::process::ChildStderr,
    (suite, engine, name): (&str, &str, &str),
    started: Instant,
    bar: &ProgressBar,
) -> Result<(u64, VecDeque<String>)> {
    let mut tail: VecDeque<String> = VecDeque::new();
    let mut done = 0;
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    while reader.read_until(b'\n', &mut line)? > 0 {
        let text = String::from_utf8_lossy(&line).trim_end().to_string();
        line.clear();
        if let Some(step) = text.strip_prefix(PROGRESS) {
            done += 1;
            bar.inc(1);
            bar.set_message(format!("{suite} on {engine}: {step}"));
            if bar.is_hidden() {
                eprintln!(
                    "bench: {suite} on {engine}: {step} ({:.1} s)",
                    started.elapsed().as_secs_f64()
                );
            }
        } else {
            bar.suspend(|| eprintln!("[{name}] {text}"));
            tail.push_back(text);
            if tail.len() > 20 {
                tail.pop_front();
            }
        }
    }
    Ok((done, tail))
}

/// A run of `suite` on `engine` that failed with `error` after `wall_secs`.
fn failed_run(suite: &SuiteDef, engine: &str, wall_secs: f64, error: String) -> SuiteRun {
    SuiteRun {
        suite: suite.name.into(),
        engine: engine.into(),
        phases: Vec::new(),
        wall_secs,
        peak_rss_bytes: None,
        total_write_amp: None,
        error: Some(error),
        samples: Vec::new(),
        cache_bytes: None,
    }
}

/// The running binary, to start children with. `/proc/self/exe` still runs this very
/// build when the file was replaced meanwhile (a rebuild in a shared target directory).
fn self_exe() -> Result<PathBuf> {
    let proc_exe = Path::new("/proc/self/exe");
    if proc_exe.exists() {
        return Ok(proc_exe.to_path_buf());
    }
    std::env::current_exe().context("finding the cairn binary")
}

/// Runs the suite and engine the JSON file `spec_path` names, and writes the results
/// where it says (the body of [`crate::child`]).
pub(crate) fn run_child_process(spec_path: &Path) -> Result<()> {
    // Before any engine starts a thread, so that all of them are counted.
    synccount::start();
    let spec: ChildSpec = serde_json::from_slice(
        &fs::read(spec_path).with_context(|| format!("reading {}", spec_path.display()))?,
    )?;
    let suite = suites()
        .into_iter()
        .find(|s| s.name == spec.suite)
        .with_context(|| format!("unknown suite {}", spec.suite))?;
    let engine = match &spec.engine {
        Some(name) => Some(engines::find(name).with_context(|| format!("unknown engine {name}"))?),
        None => None,
    };
    let ctx = Ctx {
        engine,
        config: &spec.config,
        dir: spec.dir.clone(),
        settings: engine_settings(&spec.config),
        variant: spec.variant.clone(),
        samples: Mutex::new(Vec::new()),
    };
    fs::create_dir_all(&ctx.dir)?;
    let started = Instant::now();
    let io_before = measure::proc_write_bytes();
    let phases = (suite.run)(&ctx)?;
    let written: u64 = phases
        .iter()
        .filter(|p| p.kind == Some(measure::Kind::Write) && p.write_bytes.is_some())
        .map(|p| p.bytes)
        .sum();
    let total_write_amp = match (io_before, measure::proc_write_bytes()) {
        (Some(a), Some(b)) if written > 0 && engine.is_some() => {
            measure::accounted(Some(b.saturating_sub(a)), written)
                .map(|w| w as f64 / written as f64)
        }
        _ => None,
    };
    let peak_rss_bytes = phases.iter().filter_map(|p| p.peak_rss_bytes).max();
    let name = match &spec.variant {
        Some(v) => v.clone(),
        None => engine.map_or("disk", |e| e.name).into(),
    };
    let run = SuiteRun {
        suite: suite.name.into(),
        engine: name,
        phases,
        wall_secs: started.elapsed().as_secs_f64(),
        peak_rss_bytes,
        total_write_amp,
        error: None,
        samples: ctx.samples.into_inner().unwrap_or_else(|e| e.into_inner()),
        cache_bytes: engine
            .filter(|e| e.block_cache)
            .map(|_| ctx.settings.cache_bytes),
    };
    write_json(&spec.result, &run)?;
    Ok(())
}
