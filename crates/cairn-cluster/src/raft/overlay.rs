//! The leader's changes proposed but not yet applied: reads on the leader see them
//! over the store, so an operation's checks see every change before it; they reach
//! the store through the state machine once committed, and are dropped unapplied when
//! the leader loses its term.

use std::collections::BTreeMap;
use std::ops::Bound;

/// Rows changed by proposals not yet applied: key → (the latest proposal's seq, its
/// value; `None`: deleted).
#[derive(Default)]
pub(crate) struct Overlay {
    rows: BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)>,
}

/// What the overlay says of a key.
pub(crate) enum Seen {
    /// Not changed by a pending proposal: the store has it.
    Store,
    /// Its pending value (`None`: deleted).
    Pending(Option<Vec<u8>>),
}

impl Overlay {
    /// Records the rows of proposal `seq`.
    pub(crate) fn insert(&mut self, seq: u64, rows: &[(Vec<u8>, Option<Vec<u8>>)]) {
        for (k, v) in rows {
            self.rows.insert(k.clone(), (seq, v.clone()));
        }
    }

    /// Proposal `seq` is in the store: drops its rows unless a later proposal changed
    /// them again.
    pub(crate) fn retire(&mut self, seq: u64, rows: &[(Vec<u8>, Option<Vec<u8>>)]) {
        for (k, _) in rows {
            if self.rows.get(k).is_some_and(|(s, _)| *s <= seq) {
                self.rows.remove(k);
            }
        }
    }

    /// Forgets everything (the term ended).
    pub(crate) fn clear(&mut self) {
        self.rows.clear();
    }

    /// Whether nothing is pending.
    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// What the overlay says of `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Seen {
        match self.rows.get(key) {
            None => Seen::Store,
            Some((_, v)) => Seen::Pending(v.clone()),
        }
    }

    /// The pending rows in `range`, in order.
    pub(crate) fn range(
        &self,
        range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
    ) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        self.rows
            .range(range)
            .map(|(k, (_, v))| (k.clone(), v.clone()))
            .collect()
    }
}

/// A key and its pending value (`None`: deleted).
type Row = (Vec<u8>, Option<Vec<u8>>);

/// Rows of the store merged with pending rows (which win; pending deletes hide the
/// store's row), in key order.
pub(crate) struct Merged<I: Iterator, E> {
    store: std::iter::Peekable<I>,
    pending: std::iter::Peekable<std::vec::IntoIter<Row>>,
    _e: std::marker::PhantomData<E>,
}

impl<I, E> Merged<I, E>
where
    I: Iterator<Item = Result<(Vec<u8>, Vec<u8>), E>>,
{
    /// `store`'s rows under `pending` (both in key order).
    pub(crate) fn new(store: I, pending: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Self {
        Merged {
            store: store.peekable(),
            pending: pending.into_iter().peekable(),
            _e: std::marker::PhantomData,
        }
    }
}

impl<I, E> Iterator for Merged<I, E>
where
    I: Iterator<Item = Result<(Vec<u8>, Vec<u8>), E>>,
{
    type Item = Result<(Vec<u8>, Vec<u8>), E>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let order = match (self.store.peek(), self.pending.peek()) {
                (None, None) => return None,
                (Some(Err(_)), _) => return self.store.next(),
                (Some(Ok(_)), None) => return self.store.next(),
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some(Ok((sk, _))), Some((pk, _))) => sk.cmp(pk),
            };
            match order {
                std::cmp::Ordering::Less => return self.store.next(),
                std::cmp::Ordering::Equal => {
                    self.store.next();
                }
                std::cmp::Ordering::Greater => {}
            }
            if let Some((k, Some(v))) = self.pending.next() {
                return Some(Ok((k, v)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_rows_win_and_retire_in_order() {
        let mut o = Overlay::default();
        o.insert(
            1,
            &[(b"a".to_vec(), Some(b"1".to_vec())), (b"c".to_vec(), None)],
        );
        o.insert(2, &[(b"a".to_vec(), Some(b"2".to_vec()))]);
        let store: Vec<Result<_, ()>> = vec![
            Ok((b"a".to_vec(), b"0".to_vec())),
            Ok((b"b".to_vec(), b"0".to_vec())),
            Ok((b"c".to_vec(), b"0".to_vec())),
        ];
        let all = o.range((Bound::Unbounded, Bound::Unbounded));
        let got: Vec<_> = Merged::new(store.into_iter(), all)
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            got,
            vec![
                (b"a".to_vec(), b"2".to_vec()),
                (b"b".to_vec(), b"0".to_vec())
            ]
        );
        // Proposal 1 applied: "a" stays (proposal 2 changed it again), "c" goes.
        o.retire(1, &[(b"a".to_vec(), None), (b"c".to_vec(), None)]);
        assert!(matches!(o.get(b"a"), Seen::Pending(Some(v)) if v == b"2"));
        assert!(matches!(o.get(b"c"), Seen::Store));
        o.retire(2, &[(b"a".to_vec(), None)]);
        assert!(o.is_empty());
    }
}
