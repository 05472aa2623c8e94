//! Tests of the ordered index: model-based (proptest) against a `BTreeMap`, its
//! invariants after every operation, bulk loading and memory.

use super::*;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::ops::RangeBounds;
use std::time::Instant;

type Model = BTreeMap<Vec<u8>, Loc>;

fn loc(n: u32) -> Loc {
    Loc {
        seg: n,
        off: n.wrapping_mul(7),
        len: n ^ 3,
    }
}

impl Index {
    /// Checks every structural invariant; panics on a violation.
    fn check_invariants(&self) {
        let mut total = 0;
        let mut prev_last: Option<Vec<u8>> = None;
        for (i, (sep, leaf)) in self.leaves.iter().enumerate() {
            if i == 0 {
                assert!(sep.as_bytes().is_empty(), "first separator must be empty");
            }
            let n = leaf.len();
            assert!(n > 0, "empty leaf");
            assert!(n <= LEAF_CAP, "overfull leaf");
            assert_eq!(leaf.ends.len(), n);
            let skip = leaf.skip as usize;
            match leaf.fixed {
                None => assert_eq!(*leaf.ends.last().unwrap() as usize, leaf.keys.len()),
                Some(klen) => {
                    let klen = klen as usize;
                    assert_eq!(leaf.keys.len(), skip, "a fixed leaf's keys are its prefix");
                    assert!(klen <= leaf::FIXED_KEY_MAX && klen - skip <= leaf::FIXED_REST);
                    for j in 0..n {
                        let key = leaf.key(j);
                        assert_eq!(key.len(), klen, "a fixed leaf's key of another length");
                        assert_eq!(leaf.ends[j], leaf::head(&key, skip + 4), "stale tail");
                    }
                }
            }
            assert!(leaf.locs.capacity() <= LEAF_CAP, "locs over-allocated");
            assert!(leaf.ends.capacity() <= LEAF_CAP, "ends over-allocated");
            for j in 1..n {
                assert!(*leaf.key(j - 1) < *leaf.key(j), "leaf keys not ascending");
            }
            assert_eq!(leaf.heads.len(), n);
            assert!(leaf.heads.capacity() <= LEAF_CAP, "heads over-allocated");
            for j in 0..n {
                let key = leaf.key(j);
                assert!(key.len() >= skip, "key shorter than the shared prefix");
                assert_eq!(&key[..skip], &leaf.keys[..skip], "prefix not shared");
                assert_eq!(leaf.heads[j], leaf::head(&key, skip), "stale head");
            }
            assert!(
                sep.as_bytes() <= &*leaf.first_key(),
                "separator above first key"
            );
            if let Some(prev) = &prev_last {
                assert!(
                    prev.as_slice() < sep.as_bytes(),
                    "separator not above previous leaf"
                );
            }
            prev_last = Some(leaf.last_key().to_vec());
            total += n;
        }
        let mut numbered = 0;
        for n in &self.numbered {
            numbered += n.table.len();
            n.table.for_each(|t, loc| {
                let key = n.region.key_of(t);
                assert_eq!(n.region.tag_of(&key), Some(t), "a numbered row's key");
                assert_eq!(self.get(&key), Some(loc));
                assert!(self.is_at(&key, loc) && self.contains(&key));
                assert!(self.get(&key).is_some() && self.candidate(&key) == Some(loc));
            });
        }
        assert_eq!(total + numbered, self.len, "len mismatch");
        let Some(hashes) = &self.hashes else {
            return;
        };
        assert_eq!(hashes.len(), total, "hash index size");
        self.for_each_ordered(|key, loc| {
            assert!(
                hashes.contains(tag_of(key), loc),
                "hash index lacks an entry"
            );
            assert!(self.is_at(key, loc) && self.contains(key));
            // The candidate is the key's own location unless another key shares its tag.
            let found = self.candidate(key).expect("no candidate for a key");
            if found != loc {
                assert!(hashes.contains(tag_of(key), found), "stray candidate");
            }
        });
    }

    /// Every entry, in key order (numbered rows among the others).
    fn entries(&self) -> Vec<(Vec<u8>, Loc)> {
        let mut v = Vec::new();
        self.for_each(|k, l| v.push((k.to_vec(), l)));
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

fn model_entries(model: &Model) -> Vec<(Vec<u8>, Loc)> {
    model.iter().map(|(k, l)| (k.clone(), *l)).collect()
}

fn as_slice_bound(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    b.as_ref().map(|v| v.as_slice())
}

/// Checks both scans of `index` against `model` for one set of bounds and limit.
fn check_scans(
    index: &Index,
    model: &Model,
    lower: &Bound<Vec<u8>>,
    upper: &Bound<Vec<u8>>,
    limit: usize,
) {
    let (lo, hi) = (as_slice_bound(lower), as_slice_bound(upper));
    let range = (lo, hi);
    // Scans see the ordered keys only, not the numbered rows held in tables.
    let regions: Vec<Region> = index.numbered.iter().map(|n| n.region).collect();
    let matching = || {
        model
            .iter()
            .filter(|(k, _)| range.contains(k.as_slice()) && numbered_in(&regions, k).is_none())
            .map(|(k, l)| (k.clone(), *l))
    };
    let sentinel = (b"sentinel".to_vec(), loc(999));

    let mut out = vec![sentinel.clone()];
    index.scan_forward(lo, hi, limit, &mut out);
    let mut want = vec![sentinel.clone()];
    want.extend(matching().take(limit));
    assert_eq!(out, want, "scan_forward {lower:?} {upper:?} limit {limit}");

    let mut out = vec![sentinel.clone()];
    index.scan_backward(lo, hi, limit, &mut out);
    let mut want = vec![sentinel];
    want.extend(matching().rev().take(limit));
    assert_eq!(out, want, "scan_backward {lower:?} {upper:?} limit {limit}");
}

#[derive(Debug, Clone)]
enum Op {
    Insert(Vec<u8>, Loc),
    Remove(Vec<u8>),
    /// Key, whether to expect the current location, otherwise expected, new.
    ReplaceIf(Vec<u8>, bool, Loc, Loc),
    Get(Vec<u8>),
    Scan(Bound<Vec<u8>>, Bound<Vec<u8>>, usize),
}

const ALPHABET: [u8; 4] = [0, 1, 2, 0xff];

fn key_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => vec(select(&ALPHABET[..]), 0..6),
        2 => vec(select(&ALPHABET[..]), 6..12),
        // Keys of one length (fixed leaves), some sharing a long prefix, some not.
        3 => vec(select(&ALPHABET[..]), 8..=8),
        2 => vec(select(&ALPHABET[..]), 4..=4).prop_map(|t| [&b"prefix:prefix:"[..], &t].concat()),
        // Long keys sharing long prefixes (long separators, big key buffers).
        1 => (select(&ALPHABET[..]), 200usize..1500, vec(select(&ALPHABET[..]), 0..3))
            .prop_map(|(b, n, tail)| {
                let mut k = vec![b; n];
                k.extend(tail);
                k
            }),
    ]
}

fn loc_strategy() -> impl Strategy<Value = Loc> {
    (0u32..3, 0u32..3, 0u32..3).prop_map(|(seg, off, len)| Loc { seg, off, len })
}

fn bound_strategy() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        2 => key_strategy().prop_map(Bound::Included),
        2 => key_strategy().prop_map(Bound::Excluded),
    ]
}

fn limit_strategy() -> impl Strategy<Value = usize> {
    prop_oneof![3 => 0usize..10, 1 => 10usize..200, 1 => Just(usize::MAX)]
}

fn op_strategy(insert_weight: u32, remove_weight: u32) -> impl Strategy<Value = Op> {
    op_strategy_with(key_strategy().boxed(), insert_weight, remove_weight)
}

fn op_strategy_with(
    keys: BoxedStrategy<Vec<u8>>,
    insert_weight: u32,
    remove_weight: u32,
) -> impl Strategy<Value = Op> {
    prop_oneof![
        insert_weight => (keys.clone(), loc_strategy()).prop_map(|(k, l)| Op::Insert(k, l)),
        remove_weight => keys.clone().prop_map(Op::Remove),
        1 => (keys.clone(), any::<bool>(), loc_strategy(), loc_strategy())
            .prop_map(|(k, c, e, n)| Op::ReplaceIf(k, c, e, n)),
        1 => keys.prop_map(Op::Get),
        1 => (bound_strategy(), bound_strategy(), limit_strategy())
            .prop_map(|(lo, hi, lim)| Op::Scan(lo, hi, lim)),
    ]
}

fn apply(index: &mut Index, model: &mut Model, op: &Op) {
    match op {
        Op::Insert(k, l) => assert_eq!(index.insert(k, *l), model.insert(k.clone(), *l)),
        Op::Remove(k) => assert_eq!(index.remove(k), model.remove(k)),
        Op::ReplaceIf(k, use_current, expected, new) => {
            let expected = match (use_current, model.get(k)) {
                (true, Some(cur)) => *cur,
                _ => *expected,
            };
            let want = model.get(k) == Some(&expected);
            if want {
                model.insert(k.clone(), *new);
            }
            assert_eq!(index.replace_if(k, expected, *new), want);
        }
        Op::Get(k) => {
            assert_eq!(index.get(k), model.get(k).copied());
            assert_eq!(index.contains(k), model.contains_key(k));
            if let Some(l) = model.get(k) {
                assert!(index.is_at(k, *l));
                assert!(!index.is_at(
                    k,
                    Loc {
                        len: l.len + 1,
                        ..*l
                    }
                ));
            }
        }
        Op::Scan(lo, hi, limit) => check_scans(index, model, lo, hi, *limit),
    }
    assert_eq!(index.len(), model.len());
    assert_eq!(index.is_empty(), model.is_empty());
}

fn run_ops(index: &mut Index, model: &mut Model, ops: &[Op]) {
    for (n, op) in ops.iter().enumerate() {
        apply(index, model, op);
        if n % 64 == 0 {
            index.check_invariants();
        }
    }
    index.check_invariants();
    assert_eq!(index.entries(), model_entries(model));
}

fn check_from_sorted(model: &Model) {
    let bulk = Index::from_sorted(model.iter().map(|(k, l)| (k.as_slice(), *l)), true);
    let unhashed = Index::from_sorted(model.iter().map(|(k, l)| (k.as_slice(), *l)), false);
    unhashed.check_invariants();
    assert_eq!(unhashed.entries(), model_entries(model));
    for (k, l) in model {
        assert_eq!(unhashed.candidate(k), Some(*l));
    }
    bulk.check_invariants();
    assert_eq!(bulk.len(), model.len());
    assert_eq!(bulk.entries(), model_entries(model));
    for k in model.keys() {
        assert_eq!(bulk.get(k), model.get(k).copied());
    }
    // Buffers kept from one build to the next (as open keeps them from shard to shard),
    // the second build given an iterator that only bounds its length from above.
    let mut bufs = BulkBuffers::default();
    let half = Index::from_sorted_in(
        model.iter().step_by(2).map(|(k, l)| (k, *l)),
        &Shape {
            hashed: true,
            numbered: Vec::new(),
        },
        &mut bufs,
    );
    half.check_invariants();
    assert_eq!(half.len(), model.len().div_ceil(2));
    let again = Index::from_sorted_in(
        model.iter().filter(|_| true).map(|(k, l)| (k, *l)),
        &Shape {
            hashed: true,
            numbered: Vec::new(),
        },
        &mut bufs,
    );
    again.check_invariants();
    assert_eq!(again.entries(), model_entries(model));
    for k in model.keys() {
        assert_eq!(again.get(k), model.get(k).copied());
    }
}

/// The region of numbered rows of the tests below: keyspace 1, tag 2 (bytes of
/// `ALPHABET`, so that `key_strategy`'s 10-byte keys fall in it too).
const REGION: Region = Region { ns: 1, tag: 2 };

fn numbered_key(n: u64) -> Vec<u8> {
    let mut k = vec![REGION.ns, REGION.tag];
    k.extend_from_slice(&n.to_be_bytes());
    k
}

/// Keys of every kind, a third of them in `REGION` (small numbers, numbers around the
/// largest a table holds, any number).
fn mixed_key_strategy() -> BoxedStrategy<Vec<u8>> {
    use crate::numbered::MAX_NUMBER;
    prop_oneof![
        4 => key_strategy(),
        1 => (0u64..40).prop_map(numbered_key),
        1 => (MAX_NUMBER - 2..MAX_NUMBER + 3).prop_map(numbered_key),
        1 => any::<u64>().prop_map(numbered_key),
    ]
    .boxed()
}

fn numbered_shape(hashed: bool) -> Shape {
    Shape {
        hashed,
        numbered: vec![REGION],
    }
}

fn numbered_index(hashed: bool) -> Index {
    Index::from_sorted_in(
        std::iter::empty::<(&[u8], Loc)>(),
        &numbered_shape(hashed),
        &mut BulkBuffers::default(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// With a region of numbered rows: every operation answers as the model does,
    /// scans list the other keys only, and a bulk load (as open makes) of the result,
    /// in order or not, gives the same index.
    #[test]
    fn model_with_numbered_rows(
        ops in vec(op_strategy_with(mixed_key_strategy(), 5, 3), 1..2000),
        hashed: bool,
    ) {
        let (mut index, mut model) = (numbered_index(hashed), Model::new());
        run_ops(&mut index, &mut model, &ops);
        let shape = numbered_shape(hashed);
        let bulk = Index::from_sorted_in(
            model.iter().map(|(k, l)| (k.as_slice(), *l)),
            &shape,
            &mut BulkBuffers::default(),
        );
        bulk.check_invariants();
        prop_assert_eq!(bulk.entries(), model_entries(&model));
        let mut table = Vec::new();
        bulk.numbered_keys(REGION.ns, REGION.tag, &mut table);
        table.sort_unstable();
        let want: Vec<u64> = model
            .keys()
            .filter(|k| numbered_in(&shape.numbered, k).is_some())
            .map(|k| u64::from_be_bytes(k[2..].try_into().unwrap()))
            .collect();
        prop_assert_eq!(table, want);
        // Out of order, keys repeated: the inserts' path of the bulk load.
        let mut shuffled: Vec<(Vec<u8>, Loc)> = model_entries(&model);
        shuffled.reverse();
        shuffled.extend(model_entries(&model));
        let again = Index::from_sorted_in(shuffled, &shape, &mut BulkBuffers::default());
        again.check_invariants();
        prop_assert_eq!(again.entries(), model_entries(&model));
        // Numbered rows first, in order, then repeated (with other locations), then
        // everything: the repeat is out of order, and the later entry of a key wins.
        let rows: Vec<(Vec<u8>, Loc)> = model_entries(&model)
            .into_iter()
            .filter(|(k, _)| numbered_in(&shape.numbered, k).is_some())
            .collect();
        let mut input: Vec<(Vec<u8>, Loc)> = rows.clone();
        input.extend(rows.iter().map(|(k, l)| (k.clone(), loc(l.seg + 100))));
        input.extend(model_entries(&model));
        let repeated = Index::from_sorted_in(input, &shape, &mut BulkBuffers::default());
        repeated.check_invariants();
        prop_assert_eq!(repeated.entries(), model_entries(&model));
        // Removing everything leaves nothing behind.
        for k in model.keys().cloned().collect::<Vec<_>>() {
            apply(&mut index, &mut model, &Op::Remove(k));
        }
        index.check_invariants();
        prop_assert!(index.is_empty());
    }

    #[test]
    fn model_mixed(ops in vec(op_strategy(5, 3), 1..2500)) {
        let (mut index, mut model) = (Index::new(), Model::new());
        run_ops(&mut index, &mut model, &ops);
        check_from_sorted(&model);
    }

    /// Grows the index, then shrinks it (merges, emptied leaves, emptied index).
    #[test]
    fn model_grow_then_shrink(
        grow in vec(op_strategy(8, 1), 1..1500),
        shrink in vec(op_strategy(1, 8), 1..2500),
    ) {
        let (mut index, mut model) = (Index::new(), Model::new());
        run_ops(&mut index, &mut model, &grow);
        run_ops(&mut index, &mut model, &shrink);
        // Remove everything left.
        for k in model.keys().cloned().collect::<Vec<_>>() {
            apply(&mut index, &mut model, &Op::Remove(k));
        }
        index.check_invariants();
        assert!(index.is_empty());
        assert_eq!(index.memory_bytes(), 0);
    }

    /// Bulk load, then mutate and scan the bulk-loaded index.
    #[test]
    fn model_from_sorted(
        initial in vec((key_strategy(), loc_strategy()), 0..800),
        ops in vec(op_strategy(3, 3), 0..800),
    ) {
        let mut model: Model = initial.into_iter().collect();
        let mut index = Index::from_sorted(model.iter().map(|(k, l)| (k.clone(), *l)), true);
        index.check_invariants();
        assert_eq!(index.entries(), model_entries(&model));
        run_ops(&mut index, &mut model, &ops);
    }

    /// Any input, sorted or not, with keys repeated: the index inserting it in turn
    /// would build.
    #[test]
    fn model_from_any_order(
        input in vec((key_strategy(), loc_strategy()), 0..800),
        sorted_prefix in 0usize..800,
    ) {
        // A sorted, duplicate-free head (the bulk path), then the input as it comes.
        let head: Model = input.iter().take(sorted_prefix).cloned().collect();
        let mut all: Vec<(Vec<u8>, Loc)> = head.into_iter().collect();
        all.extend(input.iter().skip(sorted_prefix).cloned());
        let mut model = Model::new();
        for (k, l) in &all {
            model.insert(k.clone(), *l);
        }
        let index = Index::from_sorted(all, true);
        index.check_invariants();
        prop_assert_eq!(index.entries(), model_entries(&model));
    }

    #[test]
    fn scans_on_bulk_index(
        initial in vec((key_strategy(), loc_strategy()), 0..600),
        scans in vec((bound_strategy(), bound_strategy(), limit_strategy()), 1..40),
    ) {
        let model: Model = initial.into_iter().collect();
        let index = Index::from_sorted(model.iter().map(|(k, l)| (k, *l)), true);
        for (lo, hi, limit) in &scans {
            check_scans(&index, &model, lo, hi, *limit);
        }
    }
}

/// Deterministic random stress with many leaves: sequential, random, and removal phases.
#[test]
fn random_stress_against_model() {
    let mut rng = StdRng::seed_from_u64(7);
    let (mut index, mut model) = (Index::new(), Model::new());
    let key = |rng: &mut StdRng| -> Vec<u8> {
        let n = rng.random_range(0..5);
        (0..n).map(|_| rng.random_range(0..24u8)).collect()
    };
    for round in 0..4u32 {
        for _ in 0..30_000 {
            let k = key(&mut rng);
            let l = loc(rng.random_range(0..1000));
            assert_eq!(index.insert(&k, l), model.insert(k, l));
        }
        index.check_invariants();
        for _ in 0..40_000 {
            let k = key(&mut rng);
            assert_eq!(index.remove(&k), model.remove(&k));
        }
        index.check_invariants();
        assert_eq!(index.entries(), model_entries(&model));
        for _ in 0..200 {
            let lo = Bound::Included(key(&mut rng));
            let hi = Bound::Excluded(key(&mut rng));
            check_scans(&index, &model, &lo, &hi, rng.random_range(0..300));
        }
        // Sequential appends at the end, then removal of every other one.
        let base = [0xff, 0xff, 0xff, 0xff, 0xff, round as u8];
        for i in 0..5000u32 {
            let k = [&base[..], &i.to_be_bytes()].concat();
            assert_eq!(index.insert(&k, loc(i)), model.insert(k, loc(i)));
        }
        index.check_invariants();
        for i in (0..5000u32).step_by(2) {
            let k = [&base[..], &i.to_be_bytes()].concat();
            assert_eq!(index.remove(&k), model.remove(&k));
        }
        index.check_invariants();
        assert_eq!(index.entries(), model_entries(&model));
    }
}

#[test]
fn empty_and_huge_keys() {
    let mut index = Index::new();
    let huge = vec![0xabu8; 65536];
    let mut huge2 = huge.clone();
    huge2[65535] = 0xac;
    assert_eq!(index.insert(b"", loc(1)), None);
    assert_eq!(index.insert(&huge, loc(2)), None);
    assert_eq!(index.insert(&huge2, loc(3)), None);
    for i in 0..200u32 {
        index.insert(&i.to_be_bytes(), loc(i + 10));
    }
    index.check_invariants();
    assert_eq!(index.get(b""), Some(loc(1)));
    assert_eq!(index.get(&huge), Some(loc(2)));
    assert_eq!(index.get(&huge2), Some(loc(3)));
    assert_eq!(index.get(&huge[..65535]), None);
    assert_eq!(index.insert(b"", loc(4)), Some(loc(1)));
    assert!(index.replace_if(&huge, loc(2), loc(5)));

    let mut out = Vec::new();
    index.scan_forward(Bound::Unbounded, Bound::Included(b""), 10, &mut out);
    assert_eq!(out, vec![(Vec::new(), loc(4))]);
    out.clear();
    index.scan_backward(Bound::Included(&huge), Bound::Unbounded, 10, &mut out);
    assert_eq!(out, vec![(huge2.clone(), loc(3)), (huge.clone(), loc(5))]);
    out.clear();
    index.scan_backward(Bound::Unbounded, Bound::Excluded(b""), 10, &mut out);
    assert!(out.is_empty());

    assert_eq!(index.remove(b""), Some(loc(4)));
    assert_eq!(index.remove(&huge), Some(loc(5)));
    assert_eq!(index.get(b""), None);
    assert_eq!(index.len(), 201);
    index.check_invariants();

    let bulk = Index::from_sorted([(&b""[..], loc(1)), (&huge[..], loc(2))], true);
    bulk.check_invariants();
    assert_eq!(bulk.get(b""), Some(loc(1)));
    assert_eq!(bulk.get(&huge), Some(loc(2)));
}

/// Drains whole leaves whose neighbours are too full to merge with.
#[test]
fn drain_leaves_next_to_full_ones() {
    let n = BULK_FILL as u32 * 4 + 20;
    let key = |i: u32| i.to_be_bytes();
    let mut model: Model = (0..n).map(|i| (key(i).to_vec(), loc(i))).collect();
    let mut index = Index::from_sorted(model.iter().map(|(k, l)| (k, *l)), true);
    assert_eq!(index.leaves.len(), 5);
    let fill = BULK_FILL as u32;
    // The last leaf, then the first, then a middle one (forwards and backwards).
    let ranges = [
        (4 * fill..n).collect::<Vec<_>>(),
        (0..fill).collect(),
        (fill..2 * fill).rev().collect(),
    ];
    for range in ranges {
        for i in range {
            assert_eq!(index.remove(&key(i)), model.remove(&key(i)[..]));
            index.check_invariants();
        }
        assert_eq!(index.entries(), model_entries(&model));
    }
}

/// Input out of order (or with a key twice) gives what inserting it in turn gives, in
/// every build; the leaves built before the disorder are kept.
#[test]
fn from_sorted_takes_unsorted_input() {
    for hashed in [true, false] {
        let index = Index::from_sorted([(b"b", loc(1)), (b"a", loc(2))], hashed);
        index.check_invariants();
        assert_eq!(
            index.entries(),
            vec![(b"a".to_vec(), loc(2)), (b"b".to_vec(), loc(1))]
        );
        let index = Index::from_sorted([(b"a", loc(1)), (b"a", loc(2))], hashed);
        index.check_invariants();
        assert_eq!(index.entries(), vec![(b"a".to_vec(), loc(2))]);
    }
    // Several full leaves in order, then a key that belongs in the first one.
    let n = BULK_FILL as u32 * 3 + 5;
    let mut input: Vec<(Vec<u8>, Loc)> = (0..n)
        .map(|i| ((2 * i + 1).to_be_bytes().to_vec(), loc(i)))
        .collect();
    input.push((2u32.to_be_bytes().to_vec(), loc(7777)));
    input.push((1u32.to_be_bytes().to_vec(), loc(8888)));
    let mut model = Model::new();
    for (k, l) in &input {
        model.insert(k.clone(), *l);
    }
    let index = Index::from_sorted(input, true);
    index.check_invariants();
    assert_eq!(index.entries(), model_entries(&model));
    assert_eq!(index.get(&1u32.to_be_bytes()), Some(loc(8888)));
    assert_eq!(index.candidate(&2u32.to_be_bytes()), Some(loc(7777)));
}

#[test]
fn separators() {
    assert_eq!(size_of::<Sep>(), 24);
    let long = [7u8; SEP_INLINE + 1];
    let seps = [
        Sep::new(b""),
        Sep::new(&long[..SEP_INLINE]),
        Sep::new(&long),
        Sep::new(&[7, 8]),
    ];
    assert!(matches!(seps[1], Sep::Inline(..)));
    assert!(matches!(seps[2], Sep::Heap(_)));
    for a in &seps {
        for b in &seps {
            assert_eq!(a.cmp(b), a.as_bytes().cmp(b.as_bytes()));
            assert_eq!(a == b, a.as_bytes() == b.as_bytes());
        }
    }
    assert_eq!(separator(b"ab", b"b").as_bytes(), b"b");
    assert_eq!(separator(b"ab", b"abc").as_bytes(), b"abc");
    assert_eq!(separator(b"abc", b"abd00").as_bytes(), b"abd");
    assert_eq!(separator(b"", b"\0").as_bytes(), b"\0");
}

#[test]
fn empty_index() {
    let mut index = Index::new();
    assert!(index.is_empty());
    assert_eq!(index.get(b"a"), None);
    assert_eq!(index.remove(b"a"), None);
    assert!(!index.replace_if(b"a", loc(1), loc(2)));
    let mut out = Vec::new();
    index.scan_forward(Bound::Unbounded, Bound::Unbounded, 10, &mut out);
    index.scan_backward(Bound::Included(b"a"), Bound::Included(b"z"), 10, &mut out);
    assert!(out.is_empty());
    assert_eq!(index.memory_bytes(), 0);
    let bulk = Index::from_sorted(Vec::<(Vec<u8>, Loc)>::new(), true);
    assert!(bulk.is_empty());
    bulk.check_invariants();
}

fn random_keys(n: usize, seed: u64) -> Vec<[u8; 8]> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random::<u64>().to_be_bytes()).collect()
}

fn bytes_per_entry(index: &Index) -> f64 {
    index.memory_bytes() as f64 / index.len() as f64
}

/// Prints and bounds the memory per entry of an index of 8-byte keys: the ordered side
/// at most 26 bytes (fixed leaves: 8 bytes of key and 12 of location an entry, plus leaf
/// slack and the outer map; packed leaves took 30–34), the hash side at most 27, the
/// whole at most the key + 40 bytes (the bound set for HaloDB's 8-byte keys).
fn check_memory(what: &str, index: &Index) {
    let per = bytes_per_entry(index);
    let hashed = index.hashes.as_ref().map_or(0, HashIndex::heap_bytes) as f64 / index.len() as f64;
    println!(
        "{what}: {per:.1} bytes/entry ({:.1} ordered, {hashed:.1} hash)",
        per - hashed
    );
    assert!(
        per - hashed <= 26.0,
        "{} bytes/entry in the ordered side",
        per - hashed
    );
    assert!(hashed <= 27.0, "{hashed} bytes/entry in the hash side");
    assert!(per <= 8.0 + 40.0, "{per} bytes/entry");
}

#[test]
fn memory_random_keys() {
    let mut index = Index::new();
    for (i, k) in random_keys(1_000_000, 1).iter().enumerate() {
        index.insert(k, loc(i as u32));
    }
    check_memory("1M random 8-byte keys", &index);
    index.check_invariants();
}

#[test]
fn memory_sequential_keys() {
    let mut index = Index::new();
    for i in 0..1_000_000u64 {
        index.insert(&i.to_be_bytes(), loc(i as u32));
    }
    check_memory("1M sequential 8-byte keys", &index);
    index.check_invariants();

    let bulk = Index::from_sorted(
        (0..1_000_000u64).map(|i| (i.to_be_bytes(), loc(i as u32))),
        true,
    );
    check_memory("1M 8-byte keys via from_sorted", &bulk);
    bulk.check_invariants();
}

fn ns_per(start: Instant, n: usize) -> f64 {
    start.elapsed().as_nanos() as f64 / n as f64
}

/// Inserts `keys` (location `i` for the `i`th); returns the time per insert in ns.
fn time_inserts<K: AsRef<[u8]>>(index: &mut Index, keys: &[K]) -> f64 {
    let t = Instant::now();
    for (i, k) in keys.iter().enumerate() {
        index.insert(k.as_ref(), loc(i as u32));
    }
    ns_per(t, keys.len())
}

/// Looks every key up with `get`, last first, checking each is found; returns the
/// time per lookup in ns.
fn time_lookups<K: AsRef<[u8]>>(keys: &[K], get: impl Fn(&[u8]) -> Option<Loc>) -> f64 {
    let t = Instant::now();
    let found = keys
        .iter()
        .rev()
        .filter(|k| get(k.as_ref()).is_some())
        .count();
    let per = ns_per(t, keys.len());
    assert_eq!(found, keys.len());
    per
}

/// Times random inserts, gets, scans and removes of `n` 8-byte keys, and the same
/// inserts and gets on a `BTreeMap<Vec<u8>, Loc>` for comparison.
fn time_random(n: usize) {
    let keys = random_keys(n, 2);
    let mut lookup = keys.clone();
    lookup.reverse();
    let mut index = Index::new();
    let insert = time_inserts(&mut index, &keys);
    let get = time_lookups(&keys, |k| index.get(k));
    let t = Instant::now();
    let mut out = Vec::with_capacity(100);
    for k in lookup.iter().take(n / 100) {
        out.clear();
        index.scan_forward(Bound::Included(k), Bound::Unbounded, 100, &mut out);
    }
    let scan = ns_per(t, n / 100);
    let t = Instant::now();
    for k in &keys {
        index.remove(k);
    }
    let remove = ns_per(t, n);
    assert!(index.is_empty());

    let mut map = BTreeMap::new();
    let t = Instant::now();
    for (i, k) in keys.iter().enumerate() {
        map.insert(k.to_vec(), loc(i as u32));
    }
    let map_insert = ns_per(t, n);
    let t = Instant::now();
    let found = lookup.iter().filter(|k| map.contains_key(&k[..])).count();
    let map_get = ns_per(t, n);
    assert_eq!(found, n);
    println!(
        "{n} random 8-byte keys: insert {insert:.0} ns, get {get:.0} ns, remove {remove:.0} ns, \
         scan of 100 {scan:.0} ns (BTreeMap<Vec<u8>, Loc>: insert {map_insert:.0} ns, \
         get {map_get:.0} ns)"
    );
}

/// Timing of lookups and inserts with the mmcmap suite's keys (32 random a-z bytes), at
/// the per-shard sizes of 100k and 4M pairs over 16 shards:
/// `cargo test --release -p cairn --lib timing_pairs -- --ignored --nocapture`.
#[test]
#[ignore]
fn timing_pairs() {
    for n in [6_250, 250_000] {
        let mut rng = StdRng::seed_from_u64(3);
        let keys: Vec<[u8; 32]> = (0..n)
            .map(|_| std::array::from_fn(|_| b'a' + rng.random_range(0..26u8)))
            .collect();
        let mut best = (f64::MAX, f64::MAX, f64::MAX);
        for _ in 0..5 {
            let mut index = Index::new();
            let insert = time_inserts(&mut index, &keys);
            let get = time_lookups(&keys, |k| index.get(k));
            let candidate = time_lookups(&keys, |k| index.candidate(k));
            best = (best.0.min(insert), best.1.min(get), best.2.min(candidate));
        }
        println!(
            "{n} 32-byte a-z keys: insert {:.0} ns, get {:.0} ns, candidate {:.0} ns \
             (best of 5)",
            best.0, best.1, best.2
        );
    }
}

/// Rough timings; run with `cargo test --release -- --ignored --nocapture timing`.
#[test]
#[ignore]
fn timing() {
    time_random(100_000);
    time_random(2_000_000);
    const N: usize = 2_000_000;
    let mut index = Index::new();
    let t = Instant::now();
    for i in 0..N as u64 {
        index.insert(&i.to_be_bytes(), loc(i as u32));
    }
    let seq_insert = ns_per(t, N);
    let t = Instant::now();
    let bulk = Index::from_sorted(
        (0..N as u64).map(|i| (i.to_be_bytes(), loc(i as u32))),
        true,
    );
    let bulk_load = ns_per(t, N);
    assert_eq!(bulk.len(), N);
    println!(
        "{N} sequential 8-byte keys: insert {seq_insert:.0} ns, from_sorted {bulk_load:.0} ns"
    );
}

/// Fixed leaves: keys of one length are laid out fixed; probes shorter or longer than
/// them whose padded rest equals an entry's are told apart; a key of another length
/// turns the leaf packed, and the next lay-out (a split) makes the halves whose keys
/// allow it fixed again.
#[test]
fn fixed_leaves_and_their_edges() {
    let mut index = Index::new();
    let keys: Vec<[u8; 4]> = (0..100u32).map(|i| (i << 8).to_be_bytes()).collect();
    for (i, k) in keys.iter().enumerate() {
        index.insert(k, loc(i as u32));
    }
    index.check_invariants();
    assert!(index.leaves.values().all(|l| l.fixed == Some(4)));
    // [0, 0, 1, 0] is an entry; [0, 0, 1] and [0, 0, 1, 0, 0] pad to the same rest.
    assert_eq!(index.get(&[0, 0, 1, 0]), Some(loc(1)));
    assert_eq!(index.get(&[0, 0, 1]), None);
    assert_eq!(index.get(&[0, 0, 1, 0, 0]), None);
    let mut out = Vec::new();
    index.scan_forward(
        Bound::Included(&[0, 0, 1][..]),
        Bound::Unbounded,
        2,
        &mut out,
    );
    assert_eq!(out[0].0, vec![0, 0, 1, 0]);
    out.clear();
    index.scan_forward(
        Bound::Excluded(&[0, 0, 1, 0, 0][..]),
        Bound::Unbounded,
        1,
        &mut out,
    );
    assert_eq!(out[0].0, vec![0, 0, 2, 0]);
    // Another length: the leaf turns packed and every key is still found.
    index.insert(&[0, 0, 1], loc(1000));
    index.check_invariants();
    assert!(index.leaves.values().any(|l| l.fixed.is_none()));
    assert_eq!(index.get(&[0, 0, 1]), Some(loc(1000)));
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(index.get(k), Some(loc(i as u32)));
    }
    // Fill past a split: the half without the odd key is laid out fixed again.
    for i in 100..200u32 {
        index.insert(&(i << 8).to_be_bytes(), loc(i));
    }
    index.check_invariants();
    assert!(index.leaves.values().any(|l| l.fixed == Some(4)));
    assert!(index.leaves.values().any(|l| l.fixed.is_none()));
}

/// Timing of whole-index scans in chunks of 512 (as a cursor fetches them) over 2M keys
/// of the file system's entry shape (`D`, parent, name of one length) and 8-byte keys:
/// `cargo test --release -p cairn --lib timing_scan -- --ignored --nocapture`.
#[test]
#[ignore]
fn timing_scan() {
    const N: u64 = 2_000_000;
    let fs_key = |i: u64| {
        let mut k = vec![b'D'];
        k.extend_from_slice(&7u64.to_be_bytes());
        k.extend_from_slice(format!("f{i:010}").as_bytes());
        k
    };
    let sets: [(&str, Vec<Vec<u8>>); 2] = [
        ("entry-shaped", (0..N).map(fs_key).collect()),
        ("8-byte", (0..N).map(|i| i.to_be_bytes().to_vec()).collect()),
    ];
    for (what, keys) in &sets {
        let index = Index::from_sorted(
            keys.iter()
                .enumerate()
                .map(|(i, k)| (k.clone(), loc(i as u32))),
            true,
        );
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = Instant::now();
            let mut out = Vec::with_capacity(512);
            let mut last: Option<Vec<u8>> = None;
            let mut seen = 0;
            loop {
                out.clear();
                let lower = match &last {
                    Some(k) => Bound::Excluded(&k[..]),
                    None => Bound::Unbounded,
                };
                index.scan_forward(lower, Bound::Unbounded, 512, &mut out);
                if out.is_empty() {
                    break;
                }
                seen += out.len();
                last = Some(out.last().unwrap().0.clone());
            }
            assert_eq!(seen as u64, N);
            best = best.min(ns_per(t, N as usize));
        }
        let t = Instant::now();
        let bulk = Index::from_sorted(
            keys.iter()
                .enumerate()
                .map(|(i, k)| (k.clone(), loc(i as u32))),
            true,
        );
        let load = ns_per(t, N as usize);
        assert_eq!(bulk.len(), N as usize);
        println!("{what}: scan {best:.1} ns/entry (best of 5), from_sorted {load:.0} ns/entry");
    }
}
