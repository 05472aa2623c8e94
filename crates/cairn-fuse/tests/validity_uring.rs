//! How long the kernel keeps a file system's answers, and its invalidator, through
//! FUSE over io_uring (see `validity/mod.rs`); skipped where the kernel does not offer it.

mod validity;

#[test]
fn kept_for_the_validity_until_invalidated() {
    validity::kept_for_the_validity_until_invalidated(cairn_fuse::Transport::Uring);
}
