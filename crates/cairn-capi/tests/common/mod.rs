//! What the C API's tests share: where the library built for the run is, and reporting
//! a part skipped for a missing tool (scripts/test.sh lists those at its end;
//! `CAIRN_TEST_NO_SKIP=1` makes them fail).

use std::path::PathBuf;

/// The directory with `libcairn.a` and `libcairn.so` built for this test run
/// (`target/<profile>/deps`, beside the test's own executable).
pub fn lib_dir() -> PathBuf {
    std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Reports a part that cannot run on this machine.
pub fn skip(why: &str) {
    eprintln!("skipped: {why}");
    assert!(std::env::var_os("CAIRN_TEST_NO_SKIP").is_none(), "{why}");
    if let Some(list) = std::env::var_os("CAIRN_TEST_SKIPS") {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(list)
            .unwrap();
        writeln!(f, "cairn-capi: {why}").unwrap();
    }
}
