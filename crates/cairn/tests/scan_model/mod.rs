//! The scans the engine's model tests make and check: a target (everything, a range, a
//! prefix), steps from either end, then a drain in one direction, against a `BTreeMap`
//! model. Shared by the model tests of the store (model.rs) and of its snapshots
//! (snapshot.rs).

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;

use cairn::{Db, Iter, Snapshot};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

pub type Key = Vec<u8>;
pub type Model = BTreeMap<Key, Vec<u8>>;

#[derive(Clone, Debug)]
pub enum Target {
    All,
    Range(Bound<Key>, Bound<Key>),
    Prefix(Key),
}

#[derive(Clone, Debug)]
pub struct Scan {
    pub target: Target,
    /// Steps taken first, one at a time: `true` = `next()`, `false` = `next_back()`.
    pub steps: Vec<bool>,
    /// Then the rest is drained in this direction ...
    pub drain_forward: bool,
    /// ... up to this many items (`None`: all, then the iterator must stay exhausted).
    pub limit: Option<usize>,
}

/// A bound on keys drawn from `key()`.
pub fn bound<S>(key: impl Fn() -> S) -> impl Strategy<Value = Bound<Key>>
where
    S: Strategy<Value = Key>,
{
    prop_oneof![
        2 => key().prop_map(Bound::Included),
        2 => key().prop_map(Bound::Excluded),
        1 => Just(Bound::Unbounded),
    ]
}

/// Scans of `target`, with up to `steps` single steps and a drain of up to `limit`
/// items (or all of them, two times in three).
pub fn scan<T>(target: T, steps: usize, limit: usize) -> impl Strategy<Value = Scan>
where
    T: Strategy<Value = Target>,
{
    let limit = prop_oneof![
        2 => Just(None),
        1 => (0..limit).prop_map(Some),
    ];
    (
        target,
        prop::collection::vec(any::<bool>(), 0..steps),
        any::<bool>(),
        limit,
    )
        .prop_map(|(target, steps, drain_forward, limit)| Scan {
            target,
            steps,
            drain_forward,
            limit,
        })
}

pub fn ok<T>(r: cairn::Result<T>, what: &str) -> Result<T, TestCaseError> {
    r.map_err(|e| TestCaseError::fail(format!("{what}: unexpected error: {e}")))
}

pub fn in_range(k: &[u8], lo: &Bound<Key>, hi: &Bound<Key>) -> bool {
    let above = match lo {
        Bound::Included(b) => k >= b.as_slice(),
        Bound::Excluded(b) => k > b.as_slice(),
        Bound::Unbounded => true,
    };
    let below = match hi {
        Bound::Included(b) => k <= b.as_slice(),
        Bound::Excluded(b) => k < b.as_slice(),
        Bound::Unbounded => true,
    };
    above && below
}

fn expected(model: &Model, target: &Target) -> VecDeque<(Key, Vec<u8>)> {
    model
        .iter()
        .filter(|(k, _)| match target {
            Target::All => true,
            Target::Range(lo, hi) => in_range(k, lo, hi),
            Target::Prefix(p) => k.starts_with(p),
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

type Item = Option<cairn::Result<(Key, cairn::Value)>>;

pub fn owned(item: Item, what: &str) -> Result<Option<(Key, Vec<u8>)>, TestCaseError> {
    match item {
        None => Ok(None),
        Some(r) => ok(r, what).map(|(k, v)| Some((k, v.into_vec()))),
    }
}

/// What scans run on: the store, or a snapshot of it.
pub trait Source {
    fn scan(&self, target: &Target) -> Iter;
}

impl Source for Db {
    fn scan(&self, target: &Target) -> Iter {
        match target {
            Target::All => self.iter(),
            Target::Range(lo, hi) => self.range((lo.clone(), hi.clone())),
            Target::Prefix(p) => self.prefix(p),
        }
    }
}

impl Source for Snapshot {
    fn scan(&self, target: &Target) -> Iter {
        match target {
            Target::All => self.iter(),
            Target::Range(lo, hi) => self.range((lo.clone(), hi.clone())),
            Target::Prefix(p) => self.prefix(p),
        }
    }
}

/// Runs `s` on `src` and checks every item against `model`.
pub fn run_scan(src: &impl Source, model: &Model, s: &Scan) -> Result<(), TestCaseError> {
    let mut want = expected(model, &s.target);
    let mut it = src.scan(&s.target);
    for (i, &fwd) in s.steps.iter().enumerate() {
        let (got, exp) = if fwd {
            (it.next(), want.pop_front())
        } else {
            (it.next_back(), want.pop_back())
        };
        let got = owned(got, "scan step")?;
        prop_assert_eq!(
            got,
            exp,
            "scan {:?}: step {} ({})",
            s.target,
            i,
            if fwd { "next" } else { "next_back" }
        );
    }
    let limit = s.limit.unwrap_or(usize::MAX);
    let mut got = Vec::new();
    let drained: Box<dyn Iterator<Item = _>> = if s.drain_forward {
        Box::new(it.by_ref().take(limit))
    } else {
        Box::new(it.by_ref().rev().take(limit))
    };
    for item in drained {
        got.extend(owned(Some(item), "scan drain")?);
    }
    let exp: Vec<(Key, Vec<u8>)> = if s.drain_forward {
        want.iter().take(limit).cloned().collect()
    } else {
        want.iter().rev().take(limit).cloned().collect()
    };
    prop_assert_eq!(
        got,
        exp,
        "scan {:?}: drain (forward {}) after {} steps",
        s.target,
        s.drain_forward,
        s.steps.len()
    );
    if s.limit.is_none() {
        // Exhausted from one end means exhausted from both; and it stays so.
        prop_assert!(owned(it.next(), "after end")?.is_none(), "next() after end");
        prop_assert!(
            owned(it.next_back(), "after end")?.is_none(),
            "next_back() after end"
        );
    }
    Ok(())
}

/// Every key and value of `src`, forwards and backwards, equals the model.
pub fn check_both_ways(src: &impl Source, model: &Model, when: &str) -> Result<(), TestCaseError> {
    let want: Vec<(Key, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let mut fwd = Vec::new();
    for item in src.scan(&Target::All) {
        fwd.extend(owned(Some(item), when)?);
    }
    prop_assert_eq!(&fwd, &want, "forward scan {}", when);
    let mut rev = Vec::new();
    for item in src.scan(&Target::All).rev() {
        rev.extend(owned(Some(item), when)?);
    }
    rev.reverse();
    prop_assert_eq!(&rev, &want, "reverse scan {}", when);
    Ok(())
}
