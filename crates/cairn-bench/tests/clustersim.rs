//! Small deterministic simulations of the cluster: 16 servers, a few thousand files in
//! one directory. Servers are killed inside splits (at the split crash points, drawn
//! from the seed) and restarted; the namespace must check clean and every
//! acknowledged create must be there (`simulate` fails otherwise), and the same seed
//! must give the same schedule. A negative control shows the check catches lost
//! acknowledged creates.

use cairn_bench::clustersim::{simulate, SimOptions, SimResult};

fn opts(work: &std::path::Path, crashes: u32, seed: u64) -> SimOptions {
    SimOptions {
        servers: 16,
        files_per_server: 200,
        seed,
        crashes,
        split_threshold: 32,
        // Splits without bound: the kills land inside splits all run long.
        partitions_per_server: 0,
        window: 8,
        work: work.to_path_buf(),
        ack_before_durable: false,
    }
}

/// The same run with at most 2 partitions per server (32 partitions of the shared
/// directory) and 400 files per server, so that the bound is reached early in the run.
fn bounded_opts(work: &std::path::Path, crashes: u32, seed: u64) -> SimOptions {
    SimOptions {
        files_per_server: 400,
        partitions_per_server: 2,
        ..opts(work, crashes, seed)
    }
}

fn splits(r: &SimResult) -> Vec<(u32, u32, u32)> {
    r.split_events
        .iter()
        .map(|e| (e.server, e.index, e.depth))
        .collect()
}

#[test]
fn sixteen_servers_killed_inside_splits_check_clean() {
    let work = tempfile::tempdir().unwrap();
    let r = simulate(&opts(work.path(), 6, 7)).unwrap();
    assert_eq!(r.crash_events.len(), 6, "{:?}", r.crash_events);
    for e in &r.crash_events {
        assert!(e.restart_step > e.step, "{e:?}");
        // Every kill landed at a split crash point, i.e. inside a split.
        assert!(e.point.is_some() && e.during_split, "{e:?}");
    }
    let points: std::collections::BTreeSet<_> =
        r.crash_events.iter().map(|e| e.point.clone()).collect();
    assert!(points.len() >= 2, "kills at one point only: {points:?}");
    // At least one kill hit the cross-server part of a split (source before its transfer,
    // target after its accept or before its activation).
    assert!(
        r.crash_events.iter().any(|e| matches!(
            e.point.as_deref(),
            Some("split:before-accept" | "accept:after-write" | "activate:before")
        )),
        "{:?}",
        r.crash_events
    );
    assert_eq!(r.creates + r.creates_unknown, 16 * 200, "{r:?}");
    assert!(r.splits > 16, "{} splits", r.splits);
    // The servers' own count is exact, across kills: each split made one partition.
    assert_eq!(r.splits + 1, r.partitions, "{r:?}");
    assert!(r.splits >= r.splits_observed);
    assert_eq!(
        r.splits_to_cover.map(|_| ()),
        Some(()),
        "never covered 16 servers"
    );
    assert_eq!(r.entries_per_server.iter().sum::<u64>(), r.checked.0 - 1);
}

/// Spawns `k` tokio tasks: tokio numbers tasks across the whole process, and a kill
/// drops a server's tasks in an order that depends on those numbers (modulo 4), so
/// runs after different shifts must still agree.
fn shift_task_ids(k: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        for _ in 0..k {
            tokio::spawn(async {}).await.unwrap();
        }
    });
}

#[test]
fn same_seed_same_schedule_with_kills() {
    let work = tempfile::tempdir().unwrap();
    let a = simulate(&opts(work.path(), 3, 11)).unwrap();
    assert_eq!(a.crash_events.len(), 3);
    // Shifts of 1 and then 2 more: at least one of the two later runs sees task ids
    // shifted by a number that is not a multiple of 4 from the first.
    for shift in [1, 2] {
        shift_task_ids(shift);
        let b = simulate(&opts(work.path(), 3, 11)).unwrap();
        assert_eq!(a.crash_events, b.crash_events, "shift {shift}");
        assert_eq!(splits(&a), splits(&b), "shift {shift}");
        assert_eq!(a.creates, b.creates);
        assert_eq!(a.creates_unknown, b.creates_unknown);
        assert_eq!(a.steps, b.steps);
        assert_eq!(a.redirects, b.redirects);
        assert_eq!(a.entries_per_server, b.entries_per_server);
    }
    // Another seed, another schedule.
    let c = simulate(&opts(work.path(), 3, 12)).unwrap();
    assert_ne!(
        (a.crash_events.clone(), splits(&a)),
        (c.crash_events.clone(), splits(&c))
    );
}

#[test]
fn same_seed_same_splits() {
    let work = tempfile::tempdir().unwrap();
    let a = simulate(&opts(work.path(), 0, 3)).unwrap();
    let b = simulate(&opts(work.path(), 0, 3)).unwrap();
    assert_eq!(a.creates, 16 * 200);
    assert_eq!(splits(&a), splits(&b));
    assert_eq!(a.entries_per_server, b.entries_per_server);
    assert_eq!(a.steps, b.steps);
    assert_eq!(a.redirects, b.redirects);
}

/// The check has teeth: servers that acknowledge creates before they are durable, killed
/// with every unsynced write lost, lose acknowledged creates, and the run fails.
#[test]
fn creates_acknowledged_before_durable_are_caught() {
    let work = tempfile::tempdir().unwrap();
    let mut o = opts(work.path(), 6, 7);
    o.ack_before_durable = true;
    let e = simulate(&o).expect_err("lost acknowledged creates went unnoticed");
    let msg = format!("{e:#}");
    assert!(
        msg.contains("acknowledged") || msg.contains("INCONSISTENT"),
        "{msg}"
    );
}

/// With a bound of partitions per server (the servers' default is 8), the directory
/// splits until every partition is at the bound's depth and then only grows: exactly
/// 16 × 2 partitions, entries per server even, and fewer entries moved than without it.
#[test]
fn a_bounded_directory_spreads_evenly_and_stops_moving() {
    let work = tempfile::tempdir().unwrap();
    let mut o = bounded_opts(work.path(), 0, 5);
    let bounded = simulate(&o).unwrap();
    assert_eq!(bounded.creates, 16 * 400);
    assert_eq!(bounded.partitions, 32, "{bounded:?}");
    assert_eq!(bounded.splits, 31);
    assert!(bounded.balance_max_over_mean <= 1.25, "{bounded:?}");
    o.partitions_per_server = 0;
    let free = simulate(&o).unwrap();
    assert!(free.splits > 100, "{free:?}");
    assert!(
        bounded.entries_moved * 2 < free.entries_moved,
        "bounded {} moved, unbounded {}",
        bounded.entries_moved,
        free.entries_moved
    );
}

/// With the bound, kills are armed by splits seen, so they still land inside splits,
/// though splits end early in the run; the namespace checks clean after them.
#[test]
fn bounded_splits_still_take_kills_inside_them() {
    let work = tempfile::tempdir().unwrap();
    let r = simulate(&bounded_opts(work.path(), 3, 9)).unwrap();
    assert_eq!(r.crash_events.len(), 3, "{:?}", r.crash_events);
    for e in &r.crash_events {
        assert!(e.point.is_some() && e.during_split, "{e:?}");
    }
    assert_eq!(r.creates + r.creates_unknown, 16 * 400, "{r:?}");
    assert_eq!(r.partitions, 32, "{r:?}");
}
