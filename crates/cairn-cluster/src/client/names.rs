//! The names a client keeps under leases, by directory: each name's answer (its inode,
//! or absent) and the server that leased it, and the names found in a directory in
//! the order its servers list them — by the reversed bits of the name's hash, then the
//! name (GIGA+'s key order) — so that a listing the client knows all of can be
//! answered from here (DESIGN.md, "Leases": *Listings kept*).

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;

use crate::giga::{name_hash, rev};

/// A kept name's answer: the server that leased it, and its inode (`None`: absent).
pub(super) type Answer = (usize, Option<u64>);

/// The names kept of one directory.
#[derive(Default)]
struct Dir {
    answers: HashMap<Vec<u8>, Answer>,
    /// The names found (not those kept absent), in listing order.
    found: BTreeSet<(u64, Vec<u8>)>,
}

/// Every kept name, by directory.
#[derive(Default)]
pub(super) struct KeptNames {
    dirs: HashMap<u64, Dir>,
    len: usize,
}

/// A name found in a directory, as listed from what is kept.
pub(super) struct Found<'a> {
    pub(super) name: &'a [u8],
    /// The server that leased it, and the inode it leads to.
    pub(super) server: usize,
    pub(super) ino: u64,
}

impl KeptNames {
    /// What is kept of `dir`/`name`.
    pub(super) fn get(&self, dir: u64, name: &[u8]) -> Option<Answer> {
        self.dirs.get(&dir)?.answers.get(name).copied()
    }

    /// Names kept, found or absent.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Keeps `answer` for `dir`/`name` (replacing what was kept).
    pub(super) fn insert(&mut self, dir: u64, name: &[u8], answer: Answer) {
        let d = self.dirs.entry(dir).or_default();
        let before = d.answers.insert(name.to_vec(), answer);
        if before.is_none() {
            self.len += 1;
        }
        let was_found = matches!(before, Some((_, Some(_))));
        match (was_found, answer.1.is_some()) {
            (false, true) => {
                d.found.insert((rev(name_hash(name)), name.to_vec()));
            }
            (true, false) => {
                d.found.remove(&(rev(name_hash(name)), name.to_vec()));
            }
            _ => {}
        }
    }

    /// Forgets `dir`/`name`.
    pub(super) fn remove(&mut self, dir: u64, name: &[u8]) {
        let Some(d) = self.dirs.get_mut(&dir) else {
            return;
        };
        let Some(before) = d.answers.remove(name) else {
            return;
        };
        self.len -= 1;
        if before.1.is_some() {
            d.found.remove(&(rev(name_hash(name)), name.to_vec()));
        }
        if d.answers.is_empty() {
            self.dirs.remove(&dir);
        }
    }

    /// Forgets every name.
    pub(super) fn clear(&mut self) {
        self.dirs.clear();
        self.len = 0;
    }

    /// The names found in `dir` after position `after` (exclusive: a position and a
    /// name) up to position `hi` (inclusive), in listing order.
    pub(super) fn found_after<'a>(
        &'a self,
        dir: u64,
        after: (u64, &[u8]),
        hi: u64,
    ) -> impl Iterator<Item = Found<'a>> + 'a {
        let d = self.dirs.get(&dir);
        let from = Bound::Excluded((after.0, after.1.to_vec()));
        let to = match hi.checked_add(1) {
            Some(next) => Bound::Excluded((next, Vec::new())),
            None => Bound::Unbounded,
        };
        d.into_iter().flat_map(move |d| {
            d.found
                .range((from.clone(), to.clone()))
                .filter_map(move |(_, name)| match d.answers.get(name.as_slice()) {
                    Some(&(server, Some(ino))) => Some(Found { name, server, ino }),
                    _ => None,
                })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(k: &KeptNames, dir: u64) -> Vec<Vec<u8>> {
        k.found_after(dir, (0, b""), u64::MAX)
            .map(|f| f.name.to_vec())
            .collect()
    }

    #[test]
    fn found_names_are_listed_in_key_order_and_follow_every_change() {
        let mut k = KeptNames::default();
        let names: Vec<Vec<u8>> = (0..200).map(|i| format!("n{i}").into_bytes()).collect();
        for (i, n) in names.iter().enumerate() {
            k.insert(7, n, (i % 3, Some(100 + i as u64)));
        }
        k.insert(7, b"absent", (0, None));
        k.insert(8, b"other", (1, Some(5)));
        let mut want: Vec<(u64, Vec<u8>)> = names
            .iter()
            .map(|n| (rev(name_hash(n)), n.clone()))
            .collect();
        want.sort();
        let want_names: Vec<Vec<u8>> = want.iter().map(|(_, n)| n.clone()).collect();
        assert_eq!(listed(&k, 7), want_names);
        assert_eq!(k.len(), 202);

        // Resuming after any listed name gives exactly the rest.
        let (pos, name) = &want[57];
        let rest: Vec<Vec<u8>> = k
            .found_after(7, (*pos, name), u64::MAX)
            .map(|f| f.name.to_vec())
            .collect();
        assert_eq!(rest, want_names[58..].to_vec());

        // Up to a position: only names at or below it.
        let hi = want[99].0;
        let upto: Vec<Vec<u8>> = k
            .found_after(7, (0, b""), hi)
            .map(|f| f.name.to_vec())
            .collect();
        assert!(upto.len() >= 100 && upto.iter().all(|n| rev(name_hash(n)) <= hi));

        // A name found, then absent, then removed.
        k.insert(7, &names[0], (0, None));
        assert!(!listed(&k, 7).contains(&names[0]));
        assert_eq!(k.get(7, &names[0]), Some((0, None)));
        k.remove(7, &names[0]);
        assert_eq!(k.get(7, &names[0]), None);
        assert_eq!(k.len(), 201);
        k.remove(7, &names[1]);
        assert!(!listed(&k, 7).contains(&names[1]));
        k.clear();
        assert_eq!((k.len(), listed(&k, 7).len()), (0, 0));
    }
}
