//! The examples of other languages in `examples/` build against this crate's header and
//! library, run, and print what they stored: Go through cgo (`examples/go`), Java
//! through the foreign function and memory API (`examples/java`, Java 22 or later). Each
//! skips, reporting itself, where its toolchain is not on the machine.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{lib_dir, skip};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{stdout}\n{stderr}");
    stdout.into_owned()
}

#[test]
fn go_example() {
    if Command::new("go").arg("version").output().is_err() {
        return skip("Go example: no `go` on this machine");
    }
    let dir = tempfile::tempdir().unwrap();
    let include = root().join("crates/cairn-capi/include");
    let lib = lib_dir().join("libcairn.a");
    let out = run(Command::new("go")
        .args(["run", "."])
        .arg(dir.path().join("store"))
        .current_dir(root().join("examples/go"))
        .env("CGO_ENABLED", "1")
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod")
        .env("CGO_CFLAGS", format!("-I{}", include.display()))
        .env(
            "CGO_LDFLAGS",
            format!("{} -lm -ldl -lpthread", lib.display()),
        ));
    assert_eq!(out, "lang:go=gopher\nlang:java=duke\n");
}

/// A `java` of version 22 or later: `JAVA_HOME`'s, the one on `PATH`, or one under
/// `/usr/lib/jvm`.
fn modern_java() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        candidates.push(Path::new(&home).join("bin/java"));
    }
    candidates.push("java".into());
    if let Ok(dirs) = std::fs::read_dir("/usr/lib/jvm") {
        candidates.extend(dirs.flatten().map(|d| d.path().join("bin/java")));
    }
    candidates.into_iter().find(|java| {
        let Ok(out) = Command::new(java).arg("-version").output() else {
            return false;
        };
        // `openjdk version "25.0.1" ...` on stderr.
        let text = String::from_utf8_lossy(&out.stderr);
        let major = text
            .split('"')
            .nth(1)
            .and_then(|v| v.split('.').next()?.parse::<u32>().ok());
        major.is_some_and(|m| m >= 22)
    })
}

#[test]
fn java_example() {
    let Some(java) = modern_java() else {
        return skip("Java example: no Java 22 or later (the FFM API) on this machine");
    };
    let dir = tempfile::tempdir().unwrap();
    let out = run(Command::new(java)
        .arg("--enable-native-access=ALL-UNNAMED")
        .arg(root().join("examples/java/Example.java"))
        .arg(lib_dir().join("libcairn.so"))
        .arg(dir.path().join("store")));
    assert_eq!(out, "lang:java=duke\n");
}
