//! Helpers shared by the engine's integration tests.

use std::path::Path;

/// Copies the store directory `src` to `dst`: taken while the store is open and idle,
/// exactly what a SIGKILL at that moment leaves behind (the page cache survives, the
/// process's buffers do not).
pub fn snapshot(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        match e.file_type() {
            Ok(t) if t.is_dir() => snapshot(&e.path(), &to),
            // A file the store removes while the copy is taken (a segment compaction
            // retired, a hint's temporary file) is gone at the moment of the "SIGKILL"
            // either way.
            Ok(_) => match std::fs::copy(e.path(), to) {
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                r => {
                    r.unwrap();
                }
            },
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => panic!("{}: {err}", e.path().display()),
        }
    }
}

/// Whether any file under `dir` holds `needle` (a file removed while it is looked at,
/// such as a retired segment, holds nothing).
// Not every test crate that includes this module looks for bytes.
#[allow(dead_code)]
pub fn on_disk(dir: &Path, needle: &[u8]) -> bool {
    std::fs::read_dir(dir).unwrap().any(|e| {
        let e = e.unwrap();
        match e.file_type() {
            Ok(t) if t.is_dir() => on_disk(&e.path(), needle),
            Ok(_) => match std::fs::read(e.path()) {
                Ok(b) => b.windows(needle.len()).any(|w| w == needle),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => false,
                Err(err) => panic!("{}: {err}", e.path().display()),
            },
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => false,
            Err(err) => panic!("{}: {err}", e.path().display()),
        }
    })
}
