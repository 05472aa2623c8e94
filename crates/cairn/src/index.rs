//! TEMPORARY BTreeMap index (replaced by the packed index).
use std::collections::BTreeMap;
use std::ops::Bound;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Loc { pub seg: u32, pub off: u32, pub len: u32 }

#[derive(Default)]
pub struct Index { m: BTreeMap<Vec<u8>, Loc> }

impl Index {
    pub fn new() -> Index { Index::default() }
    pub fn len(&self) -> usize { self.m.len() }
    pub fn is_empty(&self) -> bool { self.m.is_empty() }
    pub fn get(&self, key: &[u8]) -> Option<Loc> { self.m.get(key).copied() }
    pub fn insert(&mut self, key: &[u8], loc: Loc) -> Option<Loc> { self.m.insert(key.to_vec(), loc) }
    pub fn remove(&mut self, key: &[u8]) -> Option<Loc> { self.m.remove(key) }
    pub fn replace_if(&mut self, key: &[u8], expected: Loc, new: Loc) -> bool {
        match self.m.get_mut(key) { Some(l) if *l == expected => { *l = new; true } _ => false }
    }
    pub fn scan_forward(&self, lower: Bound<&[u8]>, upper: Bound<&[u8]>, limit: usize, out: &mut Vec<(Vec<u8>, Loc)>) {
        if !valid(lower, upper) { return; }
        for (k, v) in self.m.range::<[u8], _>((lower, upper)).take(limit) { out.push((k.clone(), *v)); }
    }
    pub fn scan_backward(&self, lower: Bound<&[u8]>, upper: Bound<&[u8]>, limit: usize, out: &mut Vec<(Vec<u8>, Loc)>) {
        if !valid(lower, upper) { return; }
        for (k, v) in self.m.range::<[u8], _>((lower, upper)).rev().take(limit) { out.push((k.clone(), *v)); }
    }
    pub fn memory_bytes(&self) -> usize { self.m.keys().map(|k| k.len() + 60).sum() }
    pub fn from_sorted<K: AsRef<[u8]>>(entries: impl IntoIterator<Item = (K, Loc)>) -> Index {
        Index { m: entries.into_iter().map(|(k, l)| (k.as_ref().to_vec(), l)).collect() }
    }
    pub fn for_each(&self, mut f: impl FnMut(&[u8], Loc)) { for (k, v) in &self.m { f(k, *v) } }
}
fn valid(lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
    match (lo, hi) {
        (Bound::Included(a), Bound::Included(b)) => a <= b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b)) | (Bound::Excluded(a), Bound::Included(b)) => a < b,
        _ => true,
    }
}
