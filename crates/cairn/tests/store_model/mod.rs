//! The model the damage and I/O-fault tests check a store against: keys and values
//! they write, and the checks that a store holds exactly what was acknowledged.

use std::collections::BTreeMap;

use cairn::{Db, Error};

/// Key → value the store must hold.
pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// The key of record `i`.
pub fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// The value of record `i` written in round `round` (60–149 bytes).
pub fn value(i: u32, round: u32) -> Vec<u8> {
    let unit = format!("v{round}-{i}-");
    let n = 60 + (i as usize * 7) % 90;
    unit.repeat(n / unit.len() + 1).into_bytes()[..n].to_vec()
}

/// Asserts the store holds exactly `model` apart from `except` (keys whose get may fail
/// or miss), with correct values, by point reads and by a full scan.
pub fn check_model(db: &Db, model: &Model, except: &[&[u8]]) {
    for (k, v) in model {
        if except.contains(&k.as_slice()) {
            continue;
        }
        match db.get(k) {
            Ok(Some(got)) => assert!(
                got.as_ref() == v.as_slice(),
                "wrong value for {}",
                String::from_utf8_lossy(k)
            ),
            other => panic!("get {}: {other:?}", String::from_utf8_lossy(k)),
        }
    }
    let mut seen = 0;
    for item in db.iter() {
        match item {
            Ok((k, v)) => {
                let want = model.get(&k);
                assert!(
                    want.is_some_and(|w| w.as_slice() == &*v),
                    "scan yields unexpected {} = {:?}",
                    String::from_utf8_lossy(&k),
                    v
                );
                seen += 1;
            }
            Err(Error::Corruption { .. }) if !except.is_empty() => {}
            Err(e) => panic!("scan failed: {e}"),
        }
    }
    assert!(
        seen >= model.len() - except.len(),
        "scan yields {seen} pairs"
    );
    assert!(seen <= model.len());
}

/// A get of a damaged record: an error or nothing, never a value that was not written.
pub fn assert_no_wrong_data(db: &Db, k: &[u8], allowed: &[&[u8]]) {
    match db.get(k) {
        Err(Error::Corruption { .. }) | Ok(None) => {}
        Ok(Some(v)) => assert!(
            allowed.contains(&&*v),
            "damaged key {} returned a value never written last: {:?}",
            String::from_utf8_lossy(k),
            v
        ),
        Err(e) => panic!("unexpected error {e}"),
    }
}
