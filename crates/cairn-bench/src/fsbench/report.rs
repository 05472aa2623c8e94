//! The report of `cairn fs-bench`: the Markdown table, what its figures measure (said
//! beside them), the FUSE requests per operation and the create rate over time.

use super::memory::human;
use super::{is_kernel, TargetRun};

/// The results as a Markdown table, what the figures measure, the FUSE requests per
/// operation and the series. `plain_fs`: the file system of the plain target.
pub(super) fn markdown(n: u64, runs: &[TargetRun], plain_fs: &str, allocator: &str) -> String {
    let mut s = format!("files in one directory: {n}\n\n");
    s.push_str(
        "| target | files | create/s | first 10% /s | last 10% /s | last/first | stat/s (random) | list entries/s | unlink/s |\n",
    );
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in runs {
        s.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.2} | {:.0} | {:.0} | {:.0} |\n",
            r.target,
            r.files,
            r.create_rate,
            r.first_10pct_rate,
            r.last_10pct_rate,
            r.last_10pct_rate / r.first_10pct_rate,
            r.stat_rate,
            r.list_rate,
            r.unlink_rate
        ));
    }
    s.push('\n');
    for note in notes(runs, plain_fs)
        .into_iter()
        .chain(stops_and_ratios(runs))
        .chain(memory(runs))
    {
        s.push_str(&format!("- {note}\n"));
    }
    for r in runs {
        if let Some(t) = &r.transport {
            s.push_str(&format!("- {}: requests served through {t}\n", r.target));
        }
    }
    s.push_str(&format!("- allocator: {allocator}\n"));
    for r in runs {
        let sets = [("FUSE", &r.fuse_requests), ("server", &r.sent_requests)];
        for (what, req) in sets {
            let Some(req) = req else { continue };
            s.push('\n');
            for (phase, kinds) in req {
                s.push_str(&format!(
                    "{}: {what} requests per file, {phase}: {}\n",
                    r.target,
                    per_kind(kinds)
                ));
            }
        }
    }
    s.push('\n');
    for r in runs {
        let v: Vec<String> = r
            .create_series
            .iter()
            .map(|p| format!("{:.1}s:{:.0}", p.seconds, p.rate))
            .collect();
        s.push_str(&format!(
            "create rate over time, {}: {}\n",
            r.target,
            v.join(" ")
        ));
    }
    s
}

/// Requests per file of one phase: the total, then by kind (kinds below 0.005 per
/// file, such as the first FLUSH, left out).
fn per_kind(kinds: &std::collections::BTreeMap<String, f64>) -> String {
    let k: Vec<String> = kinds
        .iter()
        .filter(|(_, v)| **v >= 0.005)
        .map(|(k, v)| format!("{k} {v:.2}"))
        .collect();
    let total: f64 = kinds.values().fold(0.0, |a, b| a + b);
    if k.is_empty() {
        format!("{total:.2}")
    } else {
        format!("{total:.2} ({})", k.join(", "))
    }
}

/// The report's lines for targets asked for and not run (`(target, why)`): a row that
/// is missing from the table is said to be missing, and why, beside it.
pub(super) fn skipped(skipped: &[(String, String)]) -> String {
    skipped
        .iter()
        .map(|(t, why)| format!("- {t}: asked for and not run: skipped, {why}\n"))
        .collect()
}

/// What the figures of `runs` measure, beside them in the report: the lib target makes
/// no system call, and FUSE phases that sent (almost) no requests were answered by the
/// kernel's caches.
fn notes(runs: &[TargetRun], plain_fs: &str) -> Vec<String> {
    let mut out = Vec::new();
    let has = |t: &str| runs.iter().any(|r| r.target == t);
    if has("lib") {
        out.push(format!(
            "lib calls cairn::fs in this process: no system call and no kernel path per \
             operation, where plain (and fuse) make a system call per operation{}; lib \
             against plain compares an in-process call with a kernel file system behind \
             system calls, not two file systems on equal terms",
            if has("plain") {
                format!(" (plain: {plain_fs})")
            } else {
                String::new()
            }
        ));
    }
    for r in runs {
        let Some(req) = &r.fuse_requests else {
            continue;
        };
        for (phase, kinds) in req {
            let total = kinds.values().fold(0.0, |a, b| a + b);
            if phase == "stat" && total == 0.0 {
                out.push(format!(
                    "{} stat: no FUSE request at all: every stat was answered from the \
                     kernel's attribute and entry caches without reaching cairn, so the \
                     stat rate measures the kernel",
                    r.target
                ));
            } else if phase == "stat" && total < 0.995 {
                out.push(format!(
                    "{} stat: {total:.2} FUSE requests per stat, so at least {:.0}% of the \
                     stats were answered from the kernel's attribute and entry caches \
                     without reaching cairn",
                    r.target,
                    100.0 * (1.0 - total)
                ));
            } else if total == 0.0 {
                out.push(format!(
                    "{} {phase}: no FUSE request at all; answered from the kernel's caches",
                    r.target
                ));
            }
        }
    }
    out
}

/// The targets stopped by --time-limit, and each cairn target's create rate against
/// each kernel target's.
fn stops_and_ratios(runs: &[TargetRun]) -> Vec<String> {
    let mut out = Vec::new();
    for r in runs {
        if r.stats_done < r.files || r.unlinks_done < r.files {
            out.push(format!(
                "{}: --phase-limit stopped the stats after {} files (random order) and the \
                 unlinks after {} (in creation order); their rates are over those",
                r.target, r.stats_done, r.unlinks_done
            ));
        }
        if let Some(secs) = r.stopped_after {
            out.push(format!(
                "{}: creates stopped after {secs:.0} s (--time-limit) at {} files; its \
                 rates are over those files",
                r.target, r.files
            ));
        }
    }
    for c in runs.iter().filter(|r| !is_kernel(&r.target)) {
        for k in runs.iter().filter(|r| is_kernel(&r.target)) {
            out.push(format!(
                "{} creates/s ÷ {}'s: {:.1}× ({} files in {:.0} s against {} in {:.0} s)",
                c.target,
                k.target,
                c.create_rate / k.create_rate.max(1e-9),
                c.files,
                c.create_secs,
                k.files,
                k.create_secs
            ));
        }
    }
    out
}

/// The memory of the processes serving cairn, and the library's reopen.
fn memory(runs: &[TargetRun]) -> Vec<String> {
    let mut out = Vec::new();
    for r in runs {
        if let Some(m) = r.memory_after_create {
            let index = r
                .index_bytes_per_file
                .map(|b| format!("; index {b:.1} B per file"))
                .unwrap_or_default();
            let anon = r
                .peak_anon_bytes
                .map(|b| {
                    let and = if r.reopen_secs.is_some() {
                        " and reopen"
                    } else {
                        ""
                    };
                    format!(", peak anonymous {} (creates{and})", human(b))
                })
                .unwrap_or_default();
            out.push(format!(
                "{} after {} creates: resident {} (anonymous {}, file-backed {}), peak {}{anon}{index}",
                r.target,
                r.files,
                human(m.rss_bytes),
                human(m.anon_bytes),
                human(m.file_bytes),
                human(m.peak_rss_bytes)
            ));
        }
        if let (Some(c), Some(o)) = (r.close_secs, r.reopen_secs) {
            let after = r
                .memory_after_reopen
                .map(|m| {
                    format!(
                        "; then resident {}, peak {}",
                        human(m.rss_bytes),
                        human(m.peak_rss_bytes)
                    )
                })
                .unwrap_or_default();
            out.push(format!(
                "{}: store closed in {c:.2} s and reopened in {o:.2} s after the creates{after}",
                r.target
            ));
        }
    }
    out
}
