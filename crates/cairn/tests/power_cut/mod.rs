//! The harness of the engine's tests that cut the power under concurrent writers: a
//! store on the simulated disk of `cairn::fault::PowerLoss`, with small buffers and
//! segments, opened, written by threads until the power goes off after a random delay,
//! then brought back with a random kind of loss. Shared by the tests of concurrent
//! writes (power_loss.rs) and of transactions (transaction.rs).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn::fault::{seeds, Loss, PowerLoss, Restart};
use cairn::{Db, Options, SyncPolicy};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Runs `f(seed)` for each seed (`CAIRN_POWER_SEED`, `CAIRN_POWER_CUTS`: see
/// `cairn::fault::seeds`), naming the seed of a failure.
pub fn each_seed(base: u64, default: u64, f: impl Fn(u64)) {
    for seed in seeds(base, default) {
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(seed)));
        if let Err(e) = res {
            eprintln!("power-loss run failed: replay with CAIRN_POWER_SEED={seed}");
            std::panic::resume_unwind(e);
        }
    }
}

/// One seed's power cuts: the store's options and disk, and the random choices.
pub struct PowerCuts {
    pub seed: u64,
    pub rng: StdRng,
    /// `SyncPolicy::Always` (else `Never`).
    pub always: bool,
    pub loss: Loss,
    /// The commit log's size (0: none).
    pub log: u64,
    power: Arc<PowerLoss>,
    pub dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl PowerCuts {
    /// Draws the sync policy, the kind of loss and the commit log's size among `logs`.
    pub fn new(seed: u64, logs: &[u64]) -> PowerCuts {
        let mut rng = StdRng::seed_from_u64(seed);
        let always = rng.random_bool(0.5);
        let loss = [Loss::Unsynced, Loss::Prefix, Loss::Torn][rng.random_range(0..3)];
        let log = logs[rng.random_range(0..logs.len())];
        let tmp = tempfile::tempdir().unwrap();
        let power = Arc::new(PowerLoss::new(tmp.path().join("stash")).unwrap());
        PowerCuts {
            seed,
            rng,
            always,
            loss,
            log,
            power,
            dir: tmp.path().join("db"),
            _tmp: tmp,
        }
    }

    /// The options of every open: 8 shards, a 1 KiB write buffer, 16 KiB segments.
    pub fn options(&self) -> Options {
        Options::new()
            .shards(8)
            .write_buffer(1 << 10)
            .segment_size(16 << 10)
            .compaction_threshold(0.3)
            .compaction_rate(None)
            .sync(if self.always {
                SyncPolicy::Always
            } else {
                SyncPolicy::Never
            })
            .commit_log_size(self.log)
            .power_loss(self.power.clone())
    }

    pub fn open(&self) -> Db {
        self.options().open(&self.dir).unwrap()
    }

    /// What names a cycle in a failure's message.
    pub fn context(&self, cycle: u64) -> String {
        format!(
            "seed {} cycle {cycle} always={} log={} {:?}",
            self.seed, self.always, self.log, self.loss
        )
    }

    /// Waits 2 to 40 ms, cuts the power, and, 5 ms later, tells the writers to stop.
    /// Called inside the scope of the writers' threads.
    pub fn cut_soon(&mut self, stop: &AtomicBool) {
        std::thread::sleep(Duration::from_millis(self.rng.random_range(2..40)));
        self.power.cut();
        std::thread::sleep(Duration::from_millis(5));
        stop.store(true, Ordering::SeqCst);
    }

    /// Brings the disk back after the cut (the store dropped), losing what the loss
    /// says of the unsynced changes.
    pub fn restart(&mut self) -> Restart {
        self.power.restart(self.loss, self.rng.random()).unwrap()
    }
}
