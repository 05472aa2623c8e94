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
