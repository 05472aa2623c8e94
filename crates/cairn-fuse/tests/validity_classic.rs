//! How long the kernel keeps a file system's answers, and its invalidator, through
//! `/dev/fuse` reads and writes (see `validity/mod.rs`).

mod validity;

#[test]
fn kept_for_the_validity_until_invalidated() {
    validity::kept_for_the_validity_until_invalidated(cairn_fuse::Transport::Classic);
}
