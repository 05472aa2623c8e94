//! `include/cairn.h` is what cbindgen makes of the crate now. `CAIRN_UPDATE_HEADER=1`
//! rewrites it instead of failing.

use std::path::Path;

#[test]
fn header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).unwrap();
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .unwrap()
        .write(&mut out);
    let path = dir.join("include/cairn.h");
    if std::env::var_os("CAIRN_UPDATE_HEADER").is_some() {
        std::fs::write(&path, &out).unwrap();
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == out,
        "include/cairn.h is out of date: run CAIRN_UPDATE_HEADER=1 cargo test -p cairn-capi --test header"
    );
}
