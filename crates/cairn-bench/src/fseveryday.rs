//! `fs-bench --everyday`: what people do with a file system, timed through the real
//! tools on each target: `tar x` of a tree of small files, `find` and `du` over it,
//! `git add -A` and `git status` in it as a repository, `rm -r` of it, and `dd` of a
//! 1 GiB file in (with its fsync) and out (after dropping the page cache). The tree is
//! generated (deterministic contents, by default [`TREE_DIRS`] directories of 100 files
//! of 64 B to 4 KiB) and packed once with `tar` on the work directory's disk; every target unpacks
//! the same tarball.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::chart::distinct;

/// Directories of the generated tree by default (100 files each).
pub const TREE_DIRS: u64 = 500;

/// One step on one target.
#[derive(Debug, Serialize)]
pub struct Step {
    /// fuse, fuse-classic or plain.
    pub target: String,
    /// What ran (`tar x`, `find`, ...).
    pub step: String,
    /// Wall-clock seconds of the command.
    pub seconds: f64,
}

/// Writes a tree of `dirs` directories of 100 files under `work/tree-src` and packs it
/// into `work/tree.tar`; the tarball's path and the number of files.
pub fn make_tarball(work: &Path, dirs: u64) -> Result<(PathBuf, u64)> {
    // The tools run in `work`: the paths they are given must not be relative to it.
    let work = &std::fs::canonicalize(work)?;
    let src = work.join("tree-src");
    let _ = std::fs::remove_dir_all(&src);
    let mut files = 0u64;
    for d in 0..dirs {
        let dir = src.join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir)?;
        for f in 0..100u64 {
            let k = d * 100 + f;
            let len = 64 + (k * 7919) % 4032;
            let body: Vec<u8> = (0..len).map(|i| b'a' + ((i + k) % 26) as u8).collect();
            std::fs::write(dir.join(format!("f{f:02}.txt")), body)?;
            files += 1;
        }
    }
    let tar = work.join("tree.tar");
    sh(work, &format!("tar cf {} -C {} .", q(&tar), q(&src)))?;
    std::fs::remove_dir_all(&src)?;
    Ok((tar, files))
}

/// A path quoted for `sh`.
fn q(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// Runs `script` with `sh -c` in `dir`; its stdout, or an error with its stderr.
fn sh(dir: &Path, script: &str) -> Result<String> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .with_context(|| format!("running {script}"))?;
    if !out.status.success() {
        bail!(
            "`{script}` in {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs every step on `target`, in a new directory of `root` (the mount point, or the
/// plain file system); `tarball` holds `files` files.
/// `dd_mib`: the size of the dd file (1024 unless a test asks for less).
pub fn run(
    target: &str,
    root: &Path,
    tarball: &Path,
    files: u64,
    dd_mib: u64,
) -> Result<Vec<Step>> {
    let mut steps = Vec::new();
    let mut timed = |step: &str, script: &str| -> Result<String> {
        let t = Instant::now();
        let out = sh(root, script).with_context(|| format!("{target}: {step}"))?;
        steps.push(Step {
            target: target.to_string(),
            step: step.to_string(),
            seconds: t.elapsed().as_secs_f64(),
        });
        Ok(out)
    };
    std::fs::create_dir(root.join("t"))?;
    timed("tar x", &format!("tar xf {} -C t", q(tarball)))?;
    let found = timed("find", "find t -type f | wc -l")?;
    if found.trim().parse::<u64>().ok() != Some(files) {
        bail!("{target}: find saw {} files, not {files}", found.trim());
    }
    timed("du", "du -s t")?;
    // No automatic gc or maintenance: with 50,000 loose objects a commit would start a
    // detached `git gc --auto` that writes into .git while the next steps run (and
    // makes rm -r fail on the directory it fills).
    sh(
        &root.join("t"),
        "git init -q && git config gc.auto 0 && git config maintenance.auto false",
    )?;
    timed("git add -A", "cd t && git add -A")?;
    sh(
        &root.join("t"),
        "git -c user.name=bench -c user.email=bench@localhost commit -q -m tree",
    )?;
    let status = timed("git status", "cd t && git status --porcelain")?;
    if !status.trim().is_empty() {
        bail!("{target}: git status after the commit: {status}");
    }
    timed("rm -r", "rm -rf t")?;
    let size = if dd_mib == 1024 {
        "1 GiB".to_string()
    } else {
        format!("{dd_mib} MiB")
    };
    timed(
        &format!("dd write {size}"),
        &format!("dd if=/dev/zero of=big bs=1M count={dd_mib} conv=fsync status=none"),
    )?;
    crate::measure::drop_page_cache(root)?;
    timed(
        &format!("dd read {size} (cold)"),
        "dd if=big of=/dev/null bs=1M status=none",
    )?;
    std::fs::remove_file(root.join("big"))?;
    Ok(steps)
}

/// The steps as bars: seconds of each step, a bar per target (`everyday.png`).
pub fn plot(path: &Path, steps: &[Step], files: u64) -> Result<()> {
    let targets = distinct(steps.iter().map(|s| s.target.as_str()));
    let rows: Vec<String> = distinct(steps.iter().map(|s| s.step.as_str()))
        .into_iter()
        .map(String::from)
        .collect();
    let series: Vec<(&str, Vec<Option<f64>>)> = targets
        .iter()
        .map(|t| {
            let v = rows
                .iter()
                .map(|r| {
                    steps
                        .iter()
                        .find(|s| s.target == *t && s.step == *r)
                        .map(|s| s.seconds)
                })
                .collect();
            (*t, v)
        })
        .collect();
    crate::fsplot::bars(
        path,
        &format!("everyday tools, {files} files (shorter is better)"),
        "seconds (log scale)",
        &rows,
        &series,
    )
}

/// The steps as a Markdown table: seconds per target, and each target's time over
/// plain's.
pub fn markdown(steps: &[Step], files: u64) -> String {
    let targets = distinct(steps.iter().map(|s| s.target.as_str()));
    let names = distinct(steps.iter().map(|s| s.step.as_str()));
    let secs = |t: &str, n: &str| {
        steps
            .iter()
            .find(|s| s.target == t && s.step == n)
            .map(|s| s.seconds)
    };
    let others: Vec<&str> = targets.iter().copied().filter(|t| *t != "plain").collect();
    let mut s = format!(
        "\neveryday tools, a tree of {files} small files ({} directories), seconds \
         (× plain: the target's time over plain's)\n\n| step |",
        files / 100
    );
    for t in &targets {
        s.push_str(&format!(" {t} s |"));
    }
    for t in &others {
        s.push_str(&format!(" {t} × plain |"));
    }
    s.push_str("\n|---|");
    s.push_str(&"---:|".repeat(targets.len() + others.len()));
    s.push('\n');
    for n in &names {
        s.push_str(&format!("| {n} |"));
        for t in &targets {
            match secs(t, n) {
                Some(v) => s.push_str(&format!(" {v:.2} |")),
                None => s.push_str(" |"),
            }
        }
        for t in &others {
            match (secs(t, n), secs("plain", n)) {
                (Some(a), Some(b)) if b > 0.0 => s.push_str(&format!(" {:.2} |", a / b)),
                _ => s.push_str(" |"),
            }
        }
        s.push('\n');
    }
    s
}
