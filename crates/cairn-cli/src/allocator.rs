//! The binary's global allocator: mimalloc (see `Cargo.toml` for why). The library
//! leaves the choice to the program that embeds it.
//!
//! With the `peers` feature the binary also replaces `malloc` and `free` in the whole
//! process with mimalloc's (mimalloc's `override`), so that the C and C++ engines
//! `cairn bench` compares with (RocksDB, LevelDB, LMDB) allocate with the same allocator
//! as cairn and the Rust peers. [`describe`] says which allocator each kind of code
//! uses, as checked at run time, for the benchmark reports.

use std::ffi::{c_void, CStr};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns transparent huge pages off for this process except in memory advised for them
/// (`prctl(PR_SET_THP_DISABLE)` with `PR_THP_DISABLE_EXCEPT_ADVISED`, Linux 6.18; on older
/// kernels off everywhere), unless `MIMALLOC_ALLOW_THP` is set in the environment (then
/// the kernel's mode decides). The reports read the flag back ([`describe`]).
///
/// The only memory advised is the engine's large index tables (`MADV_HUGEPAGE` on their
/// own mappings): random lookups in gigabytes of them miss the TLB far less in 2 MiB
/// pages. mimalloc is built with `no_thp`, so its arenas are not advised: with them in
/// huge pages every first touch of a fresh 2 MiB region of the heap zeroed 2 MiB, and
/// short-lived threads that each grow buffers (32 durable writers) paid ~160 such faults
/// per 20,000-record fill, half the fill's CPU, for 2.1× fewer durable writes per second
/// (DESIGN.md, "Transparent huge pages are off in the binary"). The flag also keeps the
/// heap in small pages under the kernel's `always` mode.
/// Called first thing in `main`, before any store opens.
pub fn no_transparent_huge_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return;
    }
    // A failure leaves huge pages as they were, which `describe` then reports.
    set_thp_disabled(true);
}

/// Runs `open` — the opening of a store — with transparent huge pages allowed, and
/// turns them off again after it (also if it panics), when [`no_transparent_huge_pages`]
/// turned them off; otherwise it only runs `open`.
///
/// An open builds every shard's index from scratch into memory it keeps, through
/// buffers it reuses from shard to shard: at 100 million files ~13 GB, which with
/// 4 KiB pages is 4 million page faults, each zeroing its page; with mimalloc's arenas
/// in huge pages 0.15 million. Memory faulted in during the open stays in huge pages
/// after it; later first touches (the writers' fresh per-thread pages, for which huge
/// pages were turned off) are 4 KiB faults again. The flag is the process's: the
/// binary calls this where nothing else runs yet (a command's open, `mount`'s,
/// `serve`'s, the benchmark's timed reopen).
///
/// ```ignore
/// let db = allocator::huge_pages_while(|| cairn::Db::open(dir))?;
/// ```
pub fn huge_pages_while<T>(open: impl FnOnce() -> T) -> T {
    /// Turns huge pages off again when dropped.
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            set_thp_disabled(true);
        }
    }
    if !thp_disabled() {
        return open();
    }
    set_thp_disabled(false);
    let _restore = Restore;
    open()
}

/// [`huge_pages_while`] for a caller that takes a plain function (`cairn fs-bench`'s
/// reopen, in the bench crate).
pub fn huge_pages_while_dyn(open: &mut dyn FnMut()) {
    huge_pages_while(open)
}

/// `prctl(PR_SET_THP_DISABLE, 1, PR_THP_DISABLE_EXCEPT_ADVISED)`: huge pages stay allowed
/// in memory advised `MADV_HUGEPAGE` (Linux 6.18, `include/uapi/linux/prctl.h`).
#[cfg(target_os = "linux")]
const PR_THP_DISABLE_EXCEPT_ADVISED: libc::c_ulong = 1 << 1;

/// Sets this process's `PR_SET_THP_DISABLE` flag (except advised memory where the kernel
/// knows that), or clears it.
fn set_thp_disabled(off: bool) {
    // SAFETY: prctl with integer arguments changes only this process's flag; a failure
    // leaves huge pages as they were (an open is then only slower).
    #[cfg(target_os = "linux")]
    unsafe {
        // Off except where advised; a kernel before 6.18 refuses the second argument
        // (EINVAL), and then huge pages go off everywhere.
        let except_advised = || {
            libc::prctl(
                libc::PR_SET_THP_DISABLE,
                1 as libc::c_ulong,
                PR_THP_DISABLE_EXCEPT_ADVISED,
                0,
                0,
            ) == 0
        };
        if off && except_advised() {
            return;
        }
        libc::prctl(libc::PR_SET_THP_DISABLE, libc::c_ulong::from(off), 0, 0, 0);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = off;
}

/// One sentence for the benchmark reports: the allocator of Rust code (cairn, sled,
/// fjall, redb) and the one C and C++ libraries (RocksDB, LevelDB, LMDB) get, found by
/// allocating through the `malloc` that shared libraries bind to (and through a libc
/// function that allocates) and asking mimalloc whether the memory is its own.
pub fn describe() -> String {
    // SAFETY: mi_version has no preconditions.
    let v = unsafe { libmimalloc_sys::mi_version() };
    // major ‖ two digits of minor ‖ two digits of patch
    let rust = format!(
        "Rust code (cairn, sled, fjall, redb): mimalloc {}.{}.{} (the global allocator)",
        v / 10_000,
        (v / 100) % 100,
        v % 100
    );
    let c = match c_malloc() {
        CMalloc::Mimalloc => "C and C++ code (RocksDB, LevelDB, LMDB): mimalloc too \
                              (malloc is replaced in the whole process)"
            .to_string(),
        CMalloc::Other(from) => format!(
            "C and C++ code (RocksDB, LevelDB, LMDB): the malloc of {from}, not mimalloc \
             (a build without the `peers` feature does not replace malloc)"
        ),
        CMalloc::Unknown(why) => format!("C and C++ code: unknown malloc ({why})"),
    };
    let thp = match thp_flag() {
        3 => {
            "transparent huge pages only in the index's tables (PR_SET_THP_DISABLE except \
             advised; as the kernel's mode decides while a store opens)"
        }
        1 => "transparent huge pages off (PR_SET_THP_DISABLE), on while a store opens",
        _ => "transparent huge pages as the kernel decides (mimalloc's arenas not advised)",
    };
    format!("{rust}; {c}; {thp}")
}

/// Whether this process has transparent huge pages turned off (everywhere, or but where
/// advised).
fn thp_disabled() -> bool {
    thp_flag() & 1 == 1
}

/// This process's `PR_GET_THP_DISABLE`: 0 (allowed), 1 (off), 3 (off except where
/// advised), or -1 where it cannot be read.
fn thp_flag() -> i32 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with integer arguments only reads this process's flag.
        unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) }
    }
    #[cfg(not(target_os = "linux"))]
    -1
}

/// Which `malloc` C code gets.
#[derive(Debug, PartialEq)]
enum CMalloc {
    /// mimalloc's (the override is in effect).
    Mimalloc,
    /// Another one, from the named object (glibc's `libc.so.6`, an `LD_PRELOAD`ed one).
    Other(String),
    /// It could not be told.
    Unknown(String),
}

fn c_malloc() -> CMalloc {
    type Malloc = unsafe extern "C" fn(usize) -> *mut c_void;
    type Free = unsafe extern "C" fn(*mut c_void);
    // SAFETY: dlsym with RTLD_DEFAULT and NUL-terminated names looks symbols up in the
    // global scope, as a shared library's calls to them are bound.
    let (malloc, free) = unsafe {
        (
            libc::dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr()),
            libc::dlsym(libc::RTLD_DEFAULT, c"free".as_ptr()),
        )
    };
    if malloc.is_null() || free.is_null() {
        return CMalloc::Unknown("malloc or free not found by dlsym".into());
    }
    // SAFETY: the symbols are the process's malloc and free, with these C signatures.
    let (malloc, free) = unsafe {
        (
            std::mem::transmute::<*mut c_void, Malloc>(malloc),
            std::mem::transmute::<*mut c_void, Free>(free),
        )
    };
    // SAFETY: a block from this malloc is only inspected and handed back to this free;
    // strdup's copy of a NUL-terminated string is freed with the same free.
    let (direct, from_libc) = unsafe {
        let p = malloc(64);
        let q = libc::strdup(c"cairn".as_ptr());
        let r = (
            !p.is_null() && libmimalloc_sys::mi_is_in_heap_region(p),
            !q.is_null() && libmimalloc_sys::mi_is_in_heap_region(q as *const c_void),
        );
        free(p);
        free(q.cast());
        r
    };
    if direct && from_libc {
        return CMalloc::Mimalloc;
    }
    // SAFETY: dladdr fills `info` for an address in a loaded object; the name it points
    // to belongs to the loader and lives as long as the object.
    let from = unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(malloc as *const c_void, &mut info) != 0 && !info.dli_fname.is_null() {
            CStr::from_ptr(info.dli_fname)
                .to_string_lossy()
                .into_owned()
        } else {
            "an unknown object".into()
        }
    };
    CMalloc::Other(from)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The verdict matches the build: with `peers` malloc is replaced, without it glibc's
    /// is left alone.
    #[test]
    fn c_malloc_follows_the_override() {
        let got = c_malloc();
        if cfg!(feature = "peers") {
            assert_eq!(got, CMalloc::Mimalloc);
        } else {
            assert!(
                matches!(&got, CMalloc::Other(from) if from.contains("libc")),
                "{got:?}"
            );
        }
        let text = describe();
        assert!(text.starts_with("Rust code (cairn, sled, fjall, redb): mimalloc "));
        assert_eq!(
            text.contains("mimalloc too"),
            cfg!(feature = "peers"),
            "{text}"
        );
    }

    /// Huge pages are allowed inside the closure and off again after it, also when the
    /// closure panics; a process that has them on is left alone.
    #[test]
    fn huge_pages_are_on_only_while_a_store_opens() {
        if !cfg!(target_os = "linux") {
            return;
        }
        set_thp_disabled(true);
        assert!(thp_disabled());
        let inside = huge_pages_while(thp_disabled);
        assert!(!inside, "huge pages stayed off inside the open");
        assert!(thp_disabled(), "huge pages stayed on after the open");
        let mut seen = None;
        huge_pages_while_dyn(&mut || seen = Some(thp_disabled()));
        assert_eq!(seen, Some(false));
        assert!(thp_disabled());
        let panicked = std::panic::catch_unwind(|| huge_pages_while(|| panic!("open failed")));
        assert!(panicked.is_err());
        assert!(thp_disabled(), "a panicking open left huge pages on");
        set_thp_disabled(false);
        assert!(huge_pages_while(|| !thp_disabled()));
        assert!(
            !thp_disabled(),
            "huge pages were turned off in a process that had them on"
        );
    }
}
