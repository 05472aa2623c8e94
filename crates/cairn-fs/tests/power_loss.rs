//! Power-loss tests of the file system: creates, mkdirs, writes of distinct bytes,
//! truncates, renames, links, unlinks and fsyncs (tests/fsmodel) on a store on a
//! simulated disk (`cairn::fault::PowerLoss`); at a random moment the power goes off,
//! the files are rewritten to what a disk could keep (only the synced data, or also a
//! prefix of each file's unsynced writes, or a write torn at a 4 KiB boundary), and the
//! file system is reopened and compared with the model: it must be the state after some
//! prefix of the operations, no shorter than every operation acknowledged under
//! `SyncPolicy::Always` (or before the last `fsync` under `Never`), with every file's
//! content exactly the model's, and `Fs::check` must find nothing.
//!
//! A second cut sometimes hits the open that follows. `CAIRN_POWER_CUTS=N` sets the
//! number of runs (CI: 60; by hand, e.g. 10000); `CAIRN_POWER_SEED=S` replays one.

mod fsmodel;

use std::sync::Arc;

use cairn::fault::{seeds, Loss, PowerLoss};
use cairn::{Options, SyncPolicy};
use cairn_fs::Fs;
use fsmodel::{check_prefix, snapshot_fs, Canon, Gen, Model, Op};

fn open(always: bool, power: &Arc<PowerLoss>, dir: &std::path::Path) -> Result<Fs, String> {
    let db = Options::new()
        .shards(4)
        .segment_size(64 << 10)
        .compaction_threshold(0.3)
        .compaction_rate(None)
        .sync(if always {
            SyncPolicy::Always
        } else {
            SyncPolicy::Never
        })
        .power_loss(power.clone())
        .open(dir)
        .map_err(|e| e.to_string())?;
    Fs::new(db).map_err(|e| format!("Fs::new: {e}"))
}

fn run(seed: u64) {
    let mut g = Gen(seed);
    let always = g.below(2) == 0;
    let loss = [Loss::Unsynced, Loss::Prefix, Loss::Torn][g.below(3) as usize];
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let power = Arc::new(PowerLoss::new(tmp.path().join("stash")).unwrap());
    let mut known = Canon::new();
    let mut next_id = seed << 20;
    for cycle in 0..3 {
        let ctx = format!("seed {seed} cycle {cycle} always={always} {loss:?}");
        let start = Model::from_canon(&known);
        let mut model = start.clone();
        let mut done: Vec<Op> = Vec::new();
        let mut floor = 0;
        let n = 10 + g.below(60) as usize;
        let cut_at = g.below(n as u64) as usize;
        let fs = open(always, &power, &dir).unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
        for i in 0..n {
            if i == cut_at {
                power.cut_after(g.below(25));
            }
            let op = model.next_op(&mut g, next_id);
            next_id += 1;
            model.apply(&op);
            done.push(op.clone());
            match fsmodel::apply_fs(&fs, &op) {
                Ok(()) if always || matches!(op, Op::Fsync) => floor = done.len(),
                Ok(()) => {}
                Err(e) => {
                    assert!(
                        power.is_cut(),
                        "{ctx}: {op:?} failed with the power on: {e}"
                    );
                    break;
                }
            }
        }
        power.cut();
        drop(fs);
        let restart = power.restart(loss, g.next()).unwrap();
        if g.below(4) == 0 {
            // The power fails again while the store recovers.
            power.cut_after(g.below(20));
            drop(open(always, &power, &dir));
            power.cut();
            power.restart(loss, g.next()).unwrap();
        }
        let ctx = format!("{ctx}: {restart} {:#?}", restart.detail);
        let fs = open(always, &power, &dir).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
        let report = fs.check().unwrap();
        assert!(report.is_empty(), "{ctx}: {report:#?}");
        let got = snapshot_fs(&fs).unwrap();
        check_prefix(&start, &done, &got, floor, false, &ctx);
        known = got;
        fs.close().unwrap();
    }
}

#[test]
fn file_system_survives_power_cuts() {
    for seed in seeds(4_000, 60) {
        let res = std::panic::catch_unwind(|| run(seed));
        if let Err(e) = res {
            eprintln!("power-loss run failed: replay with CAIRN_POWER_SEED={seed}");
            std::panic::resume_unwind(e);
        }
    }
}
