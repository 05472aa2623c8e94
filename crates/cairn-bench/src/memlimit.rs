//! `cairn bench --memory-max SIZE`: every engine's child process runs in a memory cgroup
//! limited to SIZE, which the kernel charges for the process's memory *and* the page
//! cache it fills. So a store larger than SIZE is a store larger than memory for the
//! engine under test (every lookup that misses the cached part reads the disk), on a
//! machine whose RAM would otherwise hold it. Needs root and the memory controller
//! (cgroup v2, or v1's `memory` hierarchy).

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// A memory cgroup made for this run, removed when dropped (once its processes exited).
#[derive(Debug)]
pub struct MemoryCgroup {
    dir: PathBuf,
    procs: CString,
}

impl MemoryCgroup {
    /// Makes a cgroup named after this process, limited to `limit` bytes of memory
    /// (anonymous and page cache; no swap where the kernel can say so).
    pub fn create(limit: u64) -> Result<MemoryCgroup> {
        let name = format!("cairn-bench-{}", std::process::id());
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers");
        let (dir, limit_file, swap_file) = if v2.exists() {
            let controllers = fs::read_to_string(v2).unwrap_or_default();
            if !controllers.split_whitespace().any(|c| c == "memory") {
                bail!("--memory-max: the cgroup v2 hierarchy has no memory controller");
            }
            // Children of the root get the controller only if the root hands it down.
            let _ = fs::write("/sys/fs/cgroup/cgroup.subtree_control", "+memory");
            (
                Path::new("/sys/fs/cgroup").join(&name),
                "memory.max",
                Some("memory.swap.max"),
            )
        } else if Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists() {
            (
                Path::new("/sys/fs/cgroup/memory").join(&name),
                "memory.limit_in_bytes",
                None,
            )
        } else {
            bail!("--memory-max: no memory cgroup controller is mounted under /sys/fs/cgroup");
        };
        fs::create_dir(&dir).with_context(|| {
            format!(
                "--memory-max: making the cgroup {} (needs root)",
                dir.display()
            )
        })?;
        let cg = MemoryCgroup {
            procs: CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
                .context("cgroup path")?,
            dir,
        };
        fs::write(cg.dir.join(limit_file), limit.to_string())
            .with_context(|| format!("setting {limit_file} of {}", cg.dir.display()))?;
        if let Some(swap) = swap_file {
            // Absent when the kernel has no swap accounting; then there is no swap to use.
            let _ = fs::write(cg.dir.join(swap), "0");
        }
        Ok(cg)
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Makes `cmd`'s process join the cgroup before it runs anything, so that all it
    /// allocates and reads is charged to the cgroup from its first instruction.
    pub fn confine(&self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        let procs = self.procs.clone();
        // SAFETY: the closure runs between fork and exec and calls only the
        // async-signal-safe open, write and close on memory prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // "0" moves the writing process itself.
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                if n != 1 {
                    return Err(err);
                }
                Ok(())
            });
        }
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // Fails while a process is still inside; the kernel then keeps it (harmless).
        let _ = fs::remove_dir(&self.dir);
    }
}

/// Parses a size such as `1073741824`, `512M`, `4G` or `1.5GiB` (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 512M, 4G)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {s:?} (use K, M, G or T)"
            ))
        }
    };
    let bytes = num * mult as f64;
    if !(bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("{s:?} is not a positive size"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert!(parse_size("").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("3 parsecs").is_err());
        assert!(parse_size("-1G").is_err());
    }
}
