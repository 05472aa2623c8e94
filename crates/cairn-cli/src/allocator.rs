//! The binary's global allocator: mimalloc (see `Cargo.toml` for why). The library
//! leaves the choice to the program that embeds it.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
