//! The C API from C: `tests/c/model.c` compiled with gcc against `libcairn.a` (built
//! with the `test-hooks` feature for `cargo test`) under AddressSanitizer, then run: a
//! model test with reopens, a held snapshot and conflicting transactions, error codes,
//! two threads, an injected panic, keyspaces, write skew, the file store and the stats;
//! any memory error or leak fails it. Skips
//! (reporting itself) where gcc is missing. `CAIRN_CAPI_STEPS` sets the model's steps
//! (default 1500).

use std::path::Path;
use std::process::Command;

mod common;
use common::{lib_dir, skip};

/// Compiles `src` with the header and the static library into `out`, with `extra` flags.
fn compile(src: &Path, out: &Path, extra: &[&str]) -> bool {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let status = Command::new("gcc")
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-g",
            "-DCAIRN_TEST_HOOKS",
        ])
        .args(extra)
        .arg("-I")
        .arg(&include)
        .arg(src)
        .arg(lib_dir().join("libcairn.a"))
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(out)
        .status();
    match status {
        Ok(s) => {
            assert!(s.success(), "gcc failed on {}", src.display());
            true
        }
        Err(e) => {
            skip(&format!("C API test: gcc not runnable ({e})"));
            false
        }
    }
}

#[test]
fn c_model_test_under_asan() {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/model.c");
    let exe = dir.path().join("model");
    if !compile(
        &src,
        &exe,
        &["-fsanitize=address,undefined", "-fno-omit-frame-pointer"],
    ) {
        return;
    }
    let steps = std::env::var("CAIRN_CAPI_STEPS").unwrap_or_else(|_| "1500".into());
    for seed in ["1", "2"] {
        let data = dir.path().join(format!("data{seed}"));
        std::fs::create_dir(&data).unwrap();
        let out = Command::new(&exe)
            .args([data.as_os_str(), seed.as_ref(), steps.as_ref()])
            .env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
            .env("UBSAN_OPTIONS", "halt_on_error=1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "model seed {seed}: {stdout}\n{stderr}"
        );
        assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
        println!("{stdout}");
    }
}
