//! One adapter per engine, each behind [`Engine`](super::engine::Engine).

use super::engine::EngineSpec;

mod cairn;
#[cfg(feature = "peers")]
mod fjall;
#[cfg(feature = "peers")]
mod leveldb;
#[cfg(feature = "peers")]
mod lmdb;
#[cfg(feature = "peers")]
mod redb;
#[cfg(feature = "peers")]
pub(crate) mod rocksdb;
#[cfg(feature = "peers")]
mod sled;

/// Every engine this build can run; cairn first, as the one the others are compared to.
pub fn all() -> Vec<&'static EngineSpec> {
    vec![
        &cairn::SPEC,
        #[cfg(feature = "peers")]
        &rocksdb::SPEC,
        #[cfg(feature = "peers")]
        &rocksdb::SPEC_TUNED,
        #[cfg(feature = "peers")]
        &rocksdb::SPEC_NOWAL,
        #[cfg(feature = "peers")]
        &leveldb::SPEC,
        #[cfg(feature = "peers")]
        &lmdb::SPEC,
        #[cfg(feature = "peers")]
        &sled::SPEC,
        #[cfg(feature = "peers")]
        &fjall::SPEC,
        #[cfg(feature = "peers")]
        &redb::SPEC,
    ]
}

/// Names of the peers that exist only in a build with `--features peers`.
pub const PEER_NAMES: &[&str] = &[
    "rocksdb",
    "rocksdb-tuned",
    "rocksdb-nowal",
    "leveldb",
    "lmdb",
    "sled",
    "fjall",
    "redb",
];

/// The engine called `name`.
pub fn find(name: &str) -> Option<&'static EngineSpec> {
    all().into_iter().find(|spec| spec.name == name)
}
