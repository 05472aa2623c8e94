//! Shared by the tests of the `cairn` binary: reporting a part of a test that can't run
//! on this machine.

use std::io::Write;

/// Environment variable naming a file that skipped parts are appended to, one line each
/// (scripts/test.sh sets it and lists the file's lines after the tests).
pub const SKIPS_ENV: &str = "CAIRN_TEST_SKIPS";
/// Environment variable that, set to 1, makes every skip a failure (for machines that
/// must run everything, such as CI with FUSE and the tools installed).
pub const NO_SKIP_ENV: &str = "CAIRN_TEST_NO_SKIP";

/// Reports that `what` was skipped, and why: printed, appended to the file named by
/// [`SKIPS_ENV`], and a failure when [`NO_SKIP_ENV`] is 1.
pub fn skip(what: &str) {
    let line = format!("SKIP: {what}");
    println!("{line}");
    if std::env::var(NO_SKIP_ENV).is_ok_and(|v| v == "1") {
        panic!("{line} ({NO_SKIP_ENV}=1 forbids skipping)");
    }
    if let Some(path) = std::env::var_os(SKIPS_ENV) {
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        if let Err(e) = written {
            panic!("recording a skip in {}: {e}", path.to_string_lossy());
        }
    }
}
