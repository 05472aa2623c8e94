//! A small deterministic simulation of the cluster: 16 servers, a few thousand files in
//! one directory, two servers killed during splits and restarted; the namespace must
//! check clean, every acknowledged create must be there, and the same seed must give
//! the same splits.

use cairn_bench::clustersim::{simulate, SimOptions};

fn opts(work: &std::path::Path, crashes: u32, seed: u64) -> SimOptions {
    SimOptions {
        servers: 16,
        files_per_server: 200,
        seed,
        crashes,
        split_threshold: 32,
        window: 8,
        work: work.to_path_buf(),
    }
}

#[test]
fn sixteen_servers_with_crashes_check_clean() {
    let work = tempfile::tempdir().unwrap();
    let r = simulate(&opts(work.path(), 2, 7)).unwrap();
    assert_eq!(r.crash_events.len(), 2, "{:?}", r.crash_events);
    assert!(r.crash_events.iter().all(|e| e.restart_step > e.step));
    assert!(r.creates + r.creates_unknown == 16 * 200, "{r:?}");
    assert!(r.splits > 16, "{} splits", r.splits);
    assert_eq!(
        r.splits_to_cover.map(|_| ()),
        Some(()),
        "never covered 16 servers"
    );
    assert_eq!(r.entries_per_server.iter().sum::<u64>(), r.checked.0 - 1);
}

#[test]
fn same_seed_same_splits() {
    let work = tempfile::tempdir().unwrap();
    let a = simulate(&opts(work.path(), 0, 3)).unwrap();
    let b = simulate(&opts(work.path(), 0, 3)).unwrap();
    assert_eq!(a.creates, 16 * 200);
    let seq = |r: &cairn_bench::clustersim::SimResult| {
        r.split_events
            .iter()
            .map(|e| (e.server, e.index, e.depth))
            .collect::<Vec<_>>()
    };
    assert_eq!(seq(&a), seq(&b));
    assert_eq!(a.entries_per_server, b.entries_per_server);
    assert_eq!(a.steps, b.steps);
    assert_eq!(a.redirects, b.redirects);
}
