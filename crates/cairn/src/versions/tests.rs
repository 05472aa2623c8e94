//! The notes against a model: every key's whole history, and the live snapshots.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::{Live, Released, Versions};
use crate::index::Loc;

#[derive(Clone, Debug)]
enum Op {
    /// Put (`true`) or delete key number `.0`.
    Write(u16, bool),
    Take,
    /// Release the live snapshot at this position (modulo their count); sweep (`true`)
    /// whatever the count.
    Release(usize, bool),
}

fn op(keys: u16) -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => (0..keys, prop::bool::weighted(0.8)).prop_map(|(k, p)| Op::Write(k, p)),
        1 => Just(Op::Take),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(i, f)| Op::Release(i, f)),
    ]
}

/// Key number `k`: mostly short, some longer than the arena's chunks, one empty.
fn key(k: u16) -> Vec<u8> {
    let len = match k % 11 {
        _ if k == 2 => 0,
        0 => 5000,
        1 => 1500,
        2 => 3,
        _ => 17,
    };
    let mut v = vec![(k % 251) as u8; len];
    if len >= 2 {
        v[..2].copy_from_slice(&k.to_be_bytes());
    }
    v
}

struct Model {
    /// Each key's values, by the number that wrote them (`None`: deleted).
    history: BTreeMap<u16, Vec<(u64, Option<Loc>)>>,
    live: Vec<u64>,
    seq: u64,
    /// Bytes pinned and not yet given back.
    pinned: u64,
}

impl Model {
    fn value_at(&self, k: u16, seq: u64) -> Option<Loc> {
        let h = self.history.get(&k)?;
        h.iter()
            .rev()
            .find(|(s, _)| *s <= seq)
            .and_then(|(_, v)| *v)
    }

    fn bounds(&self) -> Option<Live> {
        Some(Live {
            oldest: *self.live.iter().min()?,
            newest: *self.live.iter().max()?,
        })
    }

    fn oldest(&self) -> u64 {
        self.live.iter().min().copied().unwrap_or(u64::MAX)
    }
}

fn prune(v: &mut Versions, m: &mut Model, force: bool) {
    let mut out = Released::default();
    let mut unpinned = 0;
    v.prune(
        m.oldest(),
        force,
        |l| unpinned += u64::from(l.len),
        &mut out,
    );
    m.pinned -= unpinned;
}

/// Every live snapshot reads `keys` as the model says.
fn check(
    v: &Versions,
    m: &Model,
    keys: impl Iterator<Item = u16> + Clone,
) -> Result<(), TestCaseError> {
    for &s in &m.live {
        for k in keys.clone() {
            let now = m.value_at(k, u64::MAX);
            let seen = v.at(&key(k), s).unwrap_or(now);
            prop_assert_eq!(seen, m.value_at(k, s), "key {} at {}", k, s);
        }
    }
    prop_assert_eq!(v.figures().pinned_bytes, m.pinned);
    Ok(())
}

fn run(ops: &[Op], keys: u16) -> Result<(), TestCaseError> {
    let mut v = Versions::default();
    let mut m = Model {
        history: BTreeMap::new(),
        live: Vec::new(),
        seq: 0,
        pinned: 0,
    };
    for (n, op) in ops.iter().enumerate() {
        let mut written = None;
        match *op {
            Op::Write(k, put) => {
                let old = m.value_at(k, u64::MAX);
                if !put && old.is_none() {
                    continue;
                }
                m.seq += 1;
                let new = put.then_some(Loc {
                    seg: 1,
                    off: m.seq as u32,
                    len: 10 + (m.seq % 7) as u32,
                });
                if let Some(live) = m.bounds() {
                    if let Some(l) = v.record(&key(k), old, m.seq, live) {
                        m.pinned += u64::from(l.len);
                    }
                }
                m.history.entry(k).or_default().push((m.seq, new));
                written = Some(k);
                prune(&mut v, &mut m, false);
            }
            Op::Take => m.live.push(m.seq),
            Op::Release(i, force) => {
                if !m.live.is_empty() {
                    let i = i % m.live.len();
                    m.live.swap_remove(i);
                    prune(&mut v, &mut m, force);
                }
            }
        }
        // Every key now and then and after each release, else the one written.
        match written {
            Some(k) if n % 64 != 0 => check(&v, &m, k..k + 1)?,
            _ => check(&v, &m, 0..keys)?,
        }
    }
    m.live.clear();
    prune(&mut v, &mut m, true);
    prop_assert!(v.is_empty());
    prop_assert_eq!(m.pinned, 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A few keys written often: long chains, partial sweeps.
    #[test]
    fn notes_read_as_the_model_few_keys(ops in prop::collection::vec(op(12), 1..400)) {
        run(&ops, 12)?;
    }

    /// Many keys: entries, slab and arena over several chunks.
    #[test]
    fn notes_read_as_the_model_many_keys(ops in prop::collection::vec(op(700), 1..1500)) {
        run(&ops, 700)?;
    }
}
