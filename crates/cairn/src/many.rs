//! Point reads of many keys in one call (`Db::get_many`). A get of a key not in the
//! caches waits on two dependent memory accesses: its hash bucket in the index, then its
//! record in the segment's map. One key at a time, nothing overlaps them. Given many
//! keys, the read goes in three passes — ask the CPU for every key's bucket, then find
//! every record and ask for its first bytes, then read them — so that the misses of
//! different keys are in flight together.

use crate::core::Core;
use crate::hash_index::prefetch_line;
use crate::shard::Source;
use crate::value::Value;
use crate::{Result, MAX_KEY_LEN};

impl Core {
    /// The values of the internal keys `ikeys`, in their order: each as [`Core::get`]
    /// reads it (not one point in time across keys).
    pub fn get_many<K: AsRef<[u8]>>(&self, ikeys: &[K]) -> Result<Vec<Option<Value>>> {
        let shards: Vec<usize> = ikeys.iter().map(|k| self.shard_of(k.as_ref())).collect();
        for (k, &s) in ikeys.iter().zip(&shards) {
            self.shards[s].state.read().index.prefetch(k.as_ref());
        }
        let mut found = Vec::with_capacity(ikeys.len());
        for (k, &s) in ikeys.iter().zip(&shards) {
            let hit = self.shards[s].candidate(k.as_ref(), None)?;
            if let Some((loc, Source::File(f))) = &hit {
                if let Some(map) = f.mapped() {
                    // The record's header and key are read first, from its start.
                    prefetch_line(map.as_ptr().wrapping_add(loc.off as usize));
                }
            }
            found.push(hit);
        }
        ikeys
            .iter()
            .zip(&shards)
            .zip(found)
            .map(|((k, &s), hit)| match hit {
                Some((loc, src)) => self.shards[s].read_candidate(k.as_ref(), None, loc, src),
                None => Ok(None),
            })
            .collect()
    }
}

/// [`Core::get_many`] of the keys `keys` of keyspace `ns` (a key longer than
/// [`MAX_KEY_LEN`] has no value, as with `get`).
pub(crate) fn get_many_in<K: AsRef<[u8]>>(
    core: &Core,
    ns: u8,
    keys: &[K],
) -> Result<Vec<Option<Value>>> {
    let fits = |k: &[u8]| k.len() <= MAX_KEY_LEN;
    // The internal keys side by side in one buffer (no allocation per key).
    let mut buf = Vec::with_capacity(keys.iter().map(|k| k.as_ref().len() + 1).sum());
    let mut ends = Vec::with_capacity(keys.len());
    for k in keys.iter().map(AsRef::as_ref).filter(|k| fits(k)) {
        buf.push(ns);
        buf.extend_from_slice(k);
        ends.push(buf.len());
    }
    let starts = std::iter::once(0).chain(ends.iter().copied());
    let ikeys: Vec<&[u8]> = starts.zip(&ends).map(|(a, &b)| &buf[a..b]).collect();
    let mut values = core.get_many(&ikeys)?.into_iter();
    Ok(keys
        .iter()
        .map(|k| match fits(k.as_ref()) {
            true => values.next().flatten(),
            false => None,
        })
        .collect())
}
