//! Ordered iteration over all shards.
//!
//! Each shard's index is read in small chunks under its read lock (never across I/O);
//! the chunks are merged by key. Each side remembers the last key it yielded and fetches
//! only keys beyond it, so a scan yields each key at most once and never skips a key that
//! exists for the whole scan, however writes and compaction move records meanwhile. A
//! value is read from the record the index pointed at when its chunk was fetched (the
//! segment file stays readable even if compaction removes it), so every value returned
//! is one the key held during the scan.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use crate::core::Core;
use crate::index::Loc;
use crate::shard::{read_value, ShardState, Source};
use crate::value::Value;
use crate::Result;

/// A registered snapshot: the number of the last write it sees, let go of when the last
/// holder (a [`crate::Snapshot`], a transaction, an iterator of either) drops it.
pub(crate) struct SnapPin {
    pub core: Arc<Core>,
    pub seq: u64,
}

impl SnapPin {
    /// A snapshot of `core` as it is now.
    pub fn take(core: &Arc<Core>) -> SnapPin {
        SnapPin {
            seq: core.take_snapshot(),
            core: core.clone(),
        }
    }
}

impl Drop for SnapPin {
    fn drop(&mut self) {
        self.core.release_snapshot(self.seq);
    }
}

const FIRST_CHUNK: usize = 32;
const MAX_CHUNK: usize = 512;

struct Item {
    key: Vec<u8>,
    loc: Loc,
    src: Source,
}

#[derive(Default)]
struct Cursor {
    buf: VecDeque<Item>,
    /// The last key fetched in this direction.
    last: Option<Vec<u8>>,
    exhausted: bool,
    chunk: usize,
}

/// An iterator over key-value pairs in key order (or reverse order with `.rev()`),
/// returned by [`crate::Db::iter`], [`crate::Db::range`] and [`crate::Db::prefix`].
pub struct Iter {
    core: Arc<Core>,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    front: Vec<Cursor>,
    back: Vec<Cursor>,
    done: bool,
    /// Bytes of namespace prefix removed from the keys handed out.
    strip: usize,
    /// The range may hold numbered rows, which no ordered scan sees
    /// (`Options::numbered_rows`): the first item is an error, and the last.
    refused: Option<(u8, u8)>,
    /// The snapshot read, if not the present.
    at: Option<Arc<SnapPin>>,
}

fn above(k: &[u8], lo: &Bound<Vec<u8>>) -> bool {
    match lo {
        Bound::Included(b) => k >= b.as_slice(),
        Bound::Excluded(b) => k > b.as_slice(),
        Bound::Unbounded => true,
    }
}

fn below(k: &[u8], hi: &Bound<Vec<u8>>) -> bool {
    match hi {
        Bound::Included(b) => k <= b.as_slice(),
        Bound::Excluded(b) => k < b.as_slice(),
        Bound::Unbounded => true,
    }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl Iter {
    /// An iterator over the internal keys within `lo..hi`, handing out keys without
    /// their first `strip` bytes.
    pub(crate) fn new(
        core: Arc<Core>,
        lo: Bound<Vec<u8>>,
        hi: Bound<Vec<u8>>,
        strip: usize,
    ) -> Iter {
        let n = core.shards.len();
        let refused = core
            .opts
            .numbered
            .iter()
            .find(|r| r.overlaps(&lo, &hi))
            .map(|r| (r.ns, r.tag));
        let cursors = || {
            (0..n)
                .map(|_| Cursor {
                    chunk: FIRST_CHUNK,
                    ..Default::default()
                })
                .collect()
        };
        Iter {
            front: cursors(),
            back: cursors(),
            core,
            lo,
            hi,
            done: false,
            strip,
            refused,
            at: None,
        }
    }

    /// The same scan of the store as snapshot `at` sees it.
    pub(crate) fn at(mut self, at: Arc<SnapPin>) -> Iter {
        self.at = Some(at);
        self
    }

    fn refill(&mut self, shard: usize, forward: bool) -> Result<()> {
        let cur = if forward {
            &mut self.front[shard]
        } else {
            &mut self.back[shard]
        };
        let (lo, hi) = if forward {
            (
                cur.last
                    .as_deref()
                    .map_or(as_ref(&self.lo), Bound::Excluded),
                as_ref(&self.hi),
            )
        } else {
            (
                as_ref(&self.lo),
                cur.last
                    .as_deref()
                    .map_or(as_ref(&self.hi), Bound::Excluded),
            )
        };
        // An empty or inverted range fetches nothing.
        let mut entries = Vec::with_capacity(cur.chunk);
        let st = self.core.shards[shard].state.read();
        let (exhausted, seen) = match &self.at {
            None => {
                if forward {
                    st.index.scan_forward(lo, hi, cur.chunk, &mut entries);
                } else {
                    st.index.scan_backward(lo, hi, cur.chunk, &mut entries);
                }
                (entries.len() < cur.chunk, None)
            }
            Some(at) => scan_at(&st, at.seq, (lo, hi), cur.chunk, forward, &mut entries),
        };
        let mut items = Vec::with_capacity(entries.len());
        for (key, loc) in entries {
            let src = st.source(loc)?;
            items.push(Item { key, loc, src });
        }
        drop(st);
        cur.exhausted = exhausted;
        cur.chunk = (cur.chunk * 2).min(MAX_CHUNK);
        if let Some(last) = seen.or_else(|| items.last().map(|i| i.key.clone())) {
            cur.last = Some(last);
        }
        cur.buf.extend(items);
        Ok(())
    }

    fn step(&mut self, forward: bool) -> Option<Result<(Vec<u8>, Value)>> {
        if self.done {
            return None;
        }
        if let Some((ns, tag)) = self.refused {
            self.done = true;
            return Some(Err(crate::Error::InvalidArgument(format!(
                "an ordered scan of this range would miss the numbered rows of keyspace \
                 {ns}, tag {tag:#04x} (Options::numbered_rows), which are kept by number \
                 only: visit them with Keyspace::for_each_numbered"
            ))));
        }
        let n = self.core.shards.len();
        let mut best: Option<usize> = None;
        for s in 0..n {
            let cur = if forward {
                &self.front[s]
            } else {
                &self.back[s]
            };
            if cur.buf.is_empty() && !cur.exhausted {
                if let Err(e) = self.refill(s, forward) {
                    return Some(Err(e));
                }
            }
            let cur = if forward {
                &self.front[s]
            } else {
                &self.back[s]
            };
            if let Some(head) = cur.buf.front() {
                let better = match best {
                    None => true,
                    Some(b) => {
                        let bk = if forward {
                            &self.front[b].buf[0].key
                        } else {
                            &self.back[b].buf[0].key
                        };
                        if forward {
                            head.key < *bk
                        } else {
                            head.key > *bk
                        }
                    }
                };
                if better {
                    best = Some(s);
                }
            }
        }
        let Some(s) = best else {
            self.done = true;
            return None;
        };
        // The chosen cursor has a head.
        let item = if forward {
            self.front[s].buf.pop_front()
        } else {
            self.back[s].buf.pop_front()
        };
        let Some(item) = item else {
            self.done = true;
            return None;
        };
        // Stop where the other end has already been.
        let inside = if forward {
            below(&item.key, &self.hi)
        } else {
            above(&item.key, &self.lo)
        };
        if !inside {
            self.done = true;
            return None;
        }
        if forward {
            self.lo = Bound::Excluded(item.key.clone());
        } else {
            self.hi = Bound::Excluded(item.key.clone());
        }
        let strip = self.strip;
        Some(read_value(item.src, item.loc, &item.key).map(|v| {
            let mut key = item.key;
            key.drain(..strip.min(key.len()));
            (key, v)
        }))
    }
}

/// Up to about `limit` entries of `range` in a shard as a snapshot taken at `seq` sees
/// them, in the scan's direction, into `out`: the index's entries merged with the keys
/// the old versions know ([`crate::versions::Versions`]), each resolved. At least one
/// unless the range is exhausted (returned `true`); else the last key considered, from
/// which the next fetch resumes (keys past it were not looked at in both sources).
fn scan_at(
    st: &ShardState,
    seq: u64,
    range: (Bound<&[u8]>, Bound<&[u8]>),
    limit: usize,
    forward: bool,
    out: &mut Vec<(Vec<u8>, Loc)>,
) -> (bool, Option<Vec<u8>>) {
    let (mut lo, mut hi) = (range.0.map(<[u8]>::to_vec), range.1.map(<[u8]>::to_vec));
    let mut cur = Vec::with_capacity(limit);
    let mut notes = Vec::new();
    loop {
        cur.clear();
        notes.clear();
        let (l, h) = (as_ref(&lo), as_ref(&hi));
        if forward {
            st.index.scan_forward(l, h, limit, &mut cur);
        } else {
            st.index.scan_backward(l, h, limit, &mut cur);
        }
        st.versions.scan(l, h, limit, forward, &mut notes);
        // Past the last key of a full fetch, the other source was not read.
        let ends = [&cur, &notes].map(|v| (v.len() == limit).then(|| v[limit - 1].0.clone()));
        let first = |a: Vec<u8>, b: Vec<u8>| match forward {
            true => a.min(b),
            false => a.max(b),
        };
        let end = match ends {
            [Some(a), Some(b)] => Some(first(a, b)),
            [a, b] => a.or(b),
        };
        let within = |k: &[u8]| {
            end.as_deref()
                .is_none_or(|e| if forward { k <= e } else { k >= e })
        };
        let before = |a: &[u8], b: &[u8]| if forward { a < b } else { a > b };
        let (mut i, mut j) = (0, 0);
        loop {
            let (c, n) = (cur.get(i), notes.get(j));
            let key = match (c, n) {
                (None, None) => break,
                (Some(c), Some(n)) if before(&n.0, &c.0) => &n.0,
                (Some(c), _) => &c.0,
                (None, Some(n)) => &n.0,
            };
            if !within(key) {
                break;
            }
            let now = c.filter(|c| &c.0 == key).map(|c| c.1);
            let noted = n.filter(|n| &n.0 == key).map(|n| n.1);
            let seen = match noted.and_then(|h| st.versions.resolve(h, seq)) {
                Some(v) => v,
                None => now,
            };
            if let Some(loc) = seen {
                out.push((key.clone(), loc));
            }
            i += usize::from(now.is_some());
            j += usize::from(noted.is_some());
        }
        match end {
            None => return (true, None),
            Some(e) if !out.is_empty() => return (false, Some(e)),
            Some(e) => match forward {
                true => lo = Bound::Excluded(e),
                false => hi = Bound::Excluded(e),
            },
        }
    }
}

impl Iterator for Iter {
    type Item = Result<(Vec<u8>, Value)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.step(true)
    }
}

impl DoubleEndedIterator for Iter {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.step(false)
    }
}

impl std::iter::FusedIterator for Iter {}
