//! Internal keys: a keyspace byte followed by the caller's key, and the bounds of a
//! keyspace's ranges and prefixes. The lowest module: it knows nothing of storage.

use std::ops::Bound;

use crate::{Error, Result, MAX_KEY_LEN, MAX_VALUE_LEN};

/// Keyspace of the keys of `Db`'s own key-value API. Every stored key starts with a
/// keyspace byte, so the layers above (which open keyspaces of their own with
/// [`crate::Db::keyspace`]) never collide with user keys or with each other.
pub(crate) const NS_USER: u8 = 0;

/// `ns` followed by `key`: the key as stored.
pub(crate) fn ikey(ns: u8, key: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(key.len() + 1);
    v.push(ns);
    v.extend_from_slice(key);
    v
}

/// Runs `f` on the internal key of `key` in keyspace `ns`, built on the stack when it
/// is short, so that a point read of a short key allocates nothing.
#[inline]
pub(crate) fn with_ikey<R>(ns: u8, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    const SHORT: usize = 64;
    if key.len() < SHORT {
        let mut buf = [0u8; SHORT];
        buf[0] = ns;
        buf[1..=key.len()].copy_from_slice(key);
        f(&buf[..=key.len()])
    } else {
        f(&ikey(ns, key))
    }
}

/// Internal bounds covering the user bounds `lo..hi` within namespace `ns`.
pub(crate) fn ns_bounds(
    ns: u8,
    lo: Bound<&[u8]>,
    hi: Bound<&[u8]>,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let lo = match lo {
        Bound::Included(k) => Bound::Included(ikey(ns, k)),
        Bound::Excluded(k) => Bound::Excluded(ikey(ns, k)),
        Bound::Unbounded => Bound::Included(vec![ns]),
    };
    let hi = match hi {
        Bound::Included(k) => Bound::Included(ikey(ns, k)),
        Bound::Excluded(k) => Bound::Excluded(ikey(ns, k)),
        Bound::Unbounded if ns == u8::MAX => Bound::Unbounded,
        Bound::Unbounded => Bound::Excluded(vec![ns + 1]),
    };
    (lo, hi)
}

/// Internal bounds of the keys of namespace `ns` starting with `prefix`.
pub(crate) fn ns_prefix_bounds(ns: u8, prefix: &[u8]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let p = ikey(ns, prefix);
    let end = prefix_successor(&p).map_or(Bound::Unbounded, Bound::Excluded);
    (Bound::Included(p), end)
}

/// The smallest key greater than every key starting with `p`, if any.
pub(crate) fn prefix_successor(p: &[u8]) -> Option<Vec<u8>> {
    let mut v = p.to_vec();
    while let Some(last) = v.pop() {
        if last < 0xff {
            v.push(last + 1);
            return Some(v);
        }
    }
    None
}
pub(crate) fn check_key(k: &[u8]) -> Result<()> {
    if k.len() > MAX_KEY_LEN {
        return Err(Error::KeyTooLarge {
            len: k.len(),
            max: MAX_KEY_LEN,
        });
    }
    Ok(())
}

pub(crate) fn check_value(v: &[u8]) -> Result<()> {
    if v.len() > MAX_VALUE_LEN {
        return Err(Error::ValueTooLarge {
            len: v.len(),
            max: MAX_VALUE_LEN,
        });
    }
    Ok(())
}

/// The byte-slice form of a caller's range bound.
pub(crate) fn as_bytes<K: AsRef<[u8]> + ?Sized>(b: Bound<&K>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_ref()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref()),
        Bound::Unbounded => Bound::Unbounded,
    }
}
