//! A linearizability checker for histories of operations on independent keys, after
//! Wing & Gong's search with Lowe's cache of visited configurations, as Porcupine and
//! Knossos do it, one key at a time (P-compositionality: a history is linearizable iff
//! its projection on every key is).
//!
//! An operation has a call time, and either a return time and an output, or an unknown
//! outcome (Jepsen's `:info`: the client gave up, the operation may have taken effect
//! at any time after its call, or never). A [`Model`]'s step may have several next
//! states (an unknown outcome, or an output that does not pin the state down); the
//! search tries each.
//!
//! [`NameModel`] and [`DataModel`] are a file system's: a name of a directory, a
//! file's first bytes.
//!
//! (No crate fits: stateright's tester allows one operation in flight per thread and
//! none with an unknown outcome past the thread's next call, and the other ports are
//! small and unmaintained.)

use std::collections::{BTreeMap, HashSet};
use std::hash::Hash;

/// A sequential specification of one key.
pub trait Model {
    /// The key's state.
    type State: Clone + Eq + Hash + std::fmt::Debug;
    /// What an operation asks.
    type Input: std::fmt::Debug + PartialEq;
    /// What it answered.
    type Output: std::fmt::Debug;
    /// The state before any operation.
    fn init(&self) -> Self::State;
    /// The states the operation can leave from `state` answering `output` (`None`:
    /// unknown); empty when it can't answer so from there.
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: Option<&Self::Output>,
    ) -> Vec<Self::State>;
}

/// One operation of a history.
#[derive(Clone, Debug)]
pub struct Op<I, O> {
    /// Who ran it (for the report).
    pub client: usize,
    /// When it was called (any monotonic unit).
    pub call: u64,
    /// When it returned and what it answered; `None`: unknown outcome.
    pub ret: Option<(u64, O)>,
    /// What it asked.
    pub input: I,
}

/// A history: each key's operations.
pub type Keyed<I, O> = BTreeMap<String, Vec<Op<I, O>>>;

/// Why a history is not linearizable, or could not be decided.
#[derive(Debug)]
pub enum Verdict {
    /// Every key's history is linearizable.
    Linearizable,
    /// The history of `key` is not; `ops` is its history in call order.
    Violation { key: String, ops: Vec<String> },
    /// The search of `key` went over its budget; `ops` as for a violation.
    TooBig { key: String, ops: Vec<String> },
}

/// An event of the search's list: the call or the return of operation `op`.
#[derive(Clone, Copy)]
struct Event {
    op: usize,
    ret: bool,
    prev: usize,
    next: usize,
}

/// Steps of the search for one key past which it gives up.
pub const BUDGET: u64 = 50_000_000;

/// The events of `ops` as a doubly linked list (head sentinel at 0), and where each
/// operation's call and return are in it (`usize::MAX`: no return).
fn events<I, O>(ops: &[Op<I, O>]) -> (Vec<Event>, Vec<usize>, Vec<usize>) {
    // Events in time order, a call before a return at the same time (the permissive
    // choice); an unknown outcome has no return: it may be linearized anywhere after
    // its call, or not at all.
    let mut order: Vec<(u64, bool, usize)> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        order.push((op.call, false, i));
        if let Some((t, _)) = &op.ret {
            order.push((*t, true, i));
        }
    }
    order.sort_by_key(|&(t, ret, i)| (t, ret, i));
    // A doubly linked list with a head sentinel at 0.
    let n = order.len();
    let mut ev: Vec<Event> = Vec::with_capacity(n + 1);
    ev.push(Event {
        op: usize::MAX,
        ret: false,
        prev: 0,
        next: if n > 0 { 1 } else { usize::MAX },
    });
    let mut call_at = vec![0usize; ops.len()];
    let mut ret_at = vec![usize::MAX; ops.len()];
    for (k, &(_, ret, i)) in order.iter().enumerate() {
        let at = k + 1;
        ev.push(Event {
            op: i,
            ret,
            prev: k,
            next: if at < n { at + 1 } else { usize::MAX },
        });
        if ret {
            ret_at[i] = at;
        } else {
            call_at[i] = at;
        }
    }
    (ev, call_at, ret_at)
}

/// For each operation of unknown outcome, the one called last before it that asks the
/// same (`usize::MAX`: none, or a known outcome).
fn alike_before<I: PartialEq, O>(ops: &[Op<I, O>]) -> Vec<usize> {
    let mut unknown: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].ret.is_none()).collect();
    unknown.sort_by_key(|&i| (ops[i].call, i));
    let mut before_me = vec![usize::MAX; ops.len()];
    for (k, &i) in unknown.iter().enumerate() {
        if let Some(&j) = unknown[..k]
            .iter()
            .rev()
            .find(|&&j| ops[j].input == ops[i].input)
        {
            before_me[i] = j;
        }
    }
    before_me
}

/// Whether the history of one key is linearizable: `Some(true)`, `Some(false)`, or
/// `None` past `budget` steps.
pub fn check_key<M: Model>(
    model: &M,
    ops: &[Op<M::Input, M::Output>],
    budget: u64,
) -> Option<bool> {
    let (mut ev, call_at, ret_at) = events(ops);
    let unlink = |ev: &mut Vec<Event>, at: usize| {
        let (p, nx) = (ev[at].prev, ev[at].next);
        ev[p].next = nx;
        if nx != usize::MAX {
            ev[nx].prev = p;
        }
    };
    let relink = |ev: &mut Vec<Event>, at: usize| {
        let (p, nx) = (ev[at].prev, ev[at].next);
        ev[p].next = at;
        if nx != usize::MAX {
            ev[nx].prev = at;
        }
    };
    let mut returns_left = ops.iter().filter(|o| o.ret.is_some()).count();
    // The set of operations linearized, as the xor of a random 128-bit tag of each
    // (Zobrist hashing: a set and an operation added or taken in O(1); two sets share
    // a tag with odds of 2^-128 per pair), with the state: the configurations visited.
    let tags: Vec<u128> = (0..ops.len() as u64).map(tag).collect();
    let mut done: u128 = 0;
    let mut seen: HashSet<(u128, M::State)> = HashSet::new();
    // (operation linearized, the state before it)
    let mut stack: Vec<(usize, M::State)> = Vec::new();
    // Operations of unknown outcome that ask the same are interchangeable, the one
    // called first the more so (it may go anywhere the other may): one is linearized
    // only after every such one called before it (else the search would try each
    // subset of them, 2^k orders where k + 1 do).
    let before_me = alike_before(ops);
    let mut linearized = vec![false; ops.len()];
    let mut state = model.init();
    let mut at = ev[0].next;
    let mut steps = 0u64;
    loop {
        if returns_left == 0 {
            return Some(true);
        }
        steps += 1;
        if steps > budget {
            return None;
        }
        if at == usize::MAX {
            // (Not reached: a return is met before the end while one is left.)
            let Some((op, before)) = stack.pop() else {
                return Some(false);
            };
            linearized[op] = false;
            at = undo(
                &mut ev,
                &mut done,
                &mut returns_left,
                &call_at,
                &ret_at,
                op,
                &relink,
            );
            state = before;
            continue;
        }
        let e = ev[at];
        if !e.ret {
            let op = &ops[e.op];
            let first = before_me[e.op];
            if first != usize::MAX && !linearized[first] {
                at = e.next;
                continue;
            }
            let with = done ^ tags[e.op];
            let next = model
                .step(&state, &op.input, op.ret.as_ref().map(|(_, o)| o))
                .into_iter()
                .find(|s| !seen.contains(&(with, s.clone())));
            match next {
                Some(s) => {
                    seen.insert((with, s.clone()));
                    stack.push((e.op, std::mem::replace(&mut state, s)));
                    linearized[e.op] = true;
                    done = with;
                    unlink(&mut ev, call_at[e.op]);
                    if ret_at[e.op] != usize::MAX {
                        unlink(&mut ev, ret_at[e.op]);
                        returns_left -= 1;
                    }
                    at = ev[0].next;
                }
                None => at = e.next,
            }
        } else {
            // An operation returned before any order of the others let it take effect.
            let Some((op, before)) = stack.pop() else {
                return Some(false);
            };
            linearized[op] = false;
            at = undo(
                &mut ev,
                &mut done,
                &mut returns_left,
                &call_at,
                &ret_at,
                op,
                &relink,
            );
            state = before;
        }
    }
}

/// Takes operation `op` off the linearization: its events back in the list; where to
/// go on (its call again, so that its other next states are tried).
fn undo(
    ev: &mut Vec<Event>,
    done: &mut u128,
    returns_left: &mut usize,
    call_at: &[usize],
    ret_at: &[usize],
    op: usize,
    relink: &impl Fn(&mut Vec<Event>, usize),
) -> usize {
    *done ^= tag(op as u64);
    if ret_at[op] != usize::MAX {
        relink(ev, ret_at[op]);
        *returns_left += 1;
    }
    relink(ev, call_at[op]);
    call_at[op]
}

/// A random-looking 128-bit tag of operation `i` (SplitMix64, twice).
fn tag(i: u64) -> u128 {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let a = mix(i
        .wrapping_mul(2)
        .wrapping_add(1)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let b = mix(i
        .wrapping_mul(2)
        .wrapping_add(2)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15));
    (u128::from(a) << 64) | u128::from(b)
}

/// Checks every key of `history` (key → its operations) with `model`.
pub fn check<M: Model>(model: &M, history: &Keyed<M::Input, M::Output>) -> Verdict {
    for (key, ops) in history {
        match check_key(model, ops, BUDGET) {
            Some(true) => {}
            verdict => {
                let mut sorted: Vec<&Op<M::Input, M::Output>> = ops.iter().collect();
                sorted.sort_by_key(|o| o.call);
                let ops = sorted
                    .iter()
                    .map(|o| match &o.ret {
                        Some((t, out)) => format!(
                            "client {} [{} .. {}] {:?} -> {:?}",
                            o.client, o.call, t, o.input, out
                        ),
                        None => format!(
                            "client {} [{} .. ?] {:?} -> unknown",
                            o.client, o.call, o.input
                        ),
                    })
                    .collect();
                let key = key.clone();
                return match verdict {
                    Some(_) => Verdict::Violation { key, ops },
                    None => Verdict::TooBig { key, ops },
                };
            }
        }
    }
    Verdict::Linearizable
}

// ---- models of a file system ----------------------------------------------------

/// A name of a directory: absent, or present with an inode (`None`: not known yet, as
/// after a rename into it; the first lookup pins it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Entry {
    Absent,
    Present(Option<u64>),
}

/// What an operation does to one name. A rename is two: `MoveOut` at its source,
/// `MoveIn` at its destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameIn {
    /// create or mkdir
    Make,
    /// unlink or rmdir
    Remove,
    Lookup,
    MoveOut,
    MoveIn,
}

/// What a name's operation answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameOut {
    Made(u64),
    Exists,
    Removed,
    Found(u64),
    Moved,
    NoEnt,
}

/// A name of a directory as a register: [`Entry`].
pub struct NameModel;

impl Model for NameModel {
    type State = Entry;
    type Input = NameIn;
    type Output = NameOut;

    fn init(&self) -> Entry {
        Entry::Absent
    }

    fn step(&self, s: &Entry, input: &NameIn, out: Option<&NameOut>) -> Vec<Entry> {
        use Entry::{Absent, Present};
        use NameIn::{Lookup, Make, MoveIn, MoveOut, Remove};
        use NameOut::{Exists, Found, Made, Moved, NoEnt, Removed};
        let present = matches!(s, Present(_));
        match (input, out) {
            (Make, Some(Made(i))) if !present => vec![Present(Some(*i))],
            (Make, Some(Exists)) if present => vec![s.clone()],
            (Make, None) if !present => vec![Present(None)],
            (Make, None) => vec![s.clone()],
            (Remove, Some(Removed)) | (MoveOut, Some(Moved)) if present => vec![Absent],
            (Remove | MoveOut | Lookup, Some(NoEnt)) if !present => vec![Absent],
            (Remove | MoveOut, None) => vec![Absent],
            (Lookup, Some(Found(i))) => match s {
                Present(None) => vec![Present(Some(*i))],
                Present(Some(x)) if x == i => vec![s.clone()],
                _ => Vec::new(),
            },
            (MoveIn, Some(Moved)) => vec![Present(None)],
            (MoveIn, None) if *s == Present(None) => vec![Present(None)],
            (MoveIn, None) => vec![Present(None), s.clone()],
            _ => Vec::new(),
        }
    }
}

/// What an operation does to a file's first [`VALUE_LEN`] bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataIn {
    /// write of these bytes at offset 0 (always `VALUE_LEN` of them)
    Write(Vec<u8>),
    /// read of `VALUE_LEN` bytes at 0
    Read,
}

/// What a file's operation answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataOut {
    Written,
    Read(Vec<u8>),
}

/// The bytes of a [`DataIn::Write`].
pub const VALUE_LEN: usize = 16;

/// A file's first bytes as a register.
pub struct DataModel;

impl Model for DataModel {
    type State = Vec<u8>;
    type Input = DataIn;
    type Output = DataOut;

    fn init(&self) -> Vec<u8> {
        Vec::new()
    }

    fn step(&self, s: &Vec<u8>, input: &DataIn, out: Option<&DataOut>) -> Vec<Vec<u8>> {
        match (input, out) {
            (DataIn::Write(v), None | Some(DataOut::Written)) => vec![v.clone()],
            (DataIn::Read, Some(DataOut::Read(b))) if b == s => vec![s.clone()],
            _ => Vec::new(),
        }
    }
}
