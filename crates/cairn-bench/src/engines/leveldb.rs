//! LevelDB, Debian's libleveldb (1.23), through its C API (`leveldb/c.h`), bound here.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::{anyhow, Result};

use crate::engine::{pairs, BatchOp, Engine, EngineSpec, Settings};

pub static SPEC: EngineSpec = EngineSpec {
    name: "leveldb",
    library: "LevelDB 1.23 (Debian libleveldb-dev) via its C API",
    open,
    non_default_settings,
    block_cache: true,
    durable: true,
};

/// Bloom filter bits per key (LevelDB's documentation suggests 10).
const BLOOM_BITS: c_int = 10;

fn non_default_settings(settings: &Settings) -> Vec<(String, String)> {
    pairs(&[
        ("compression", "none (kNoCompression)".into()),
        ("filter_policy", format!("bloom, {BLOOM_BITS} bits per key")),
        (
            "block cache",
            format!(
                "LRU, {} MiB (cairn's peak heap in the same suite; the run table gives each run's)",
                settings.cache_bytes >> 20
            ),
        ),
        ("WriteOptions::sync", settings.sync.to_string()),
    ])
}

#[allow(non_camel_case_types)]
mod ffi {
    use std::ffi::{c_char, c_int, c_uchar, c_void};

    pub enum leveldb_t {}
    pub enum leveldb_options_t {}
    pub enum leveldb_cache_t {}
    pub enum leveldb_readoptions_t {}
    pub enum leveldb_writeoptions_t {}
    pub enum leveldb_writebatch_t {}
    pub enum leveldb_filterpolicy_t {}

    #[link(name = "leveldb")]
    extern "C" {
        pub fn leveldb_open(
            options: *const leveldb_options_t,
            name: *const c_char,
            errptr: *mut *mut c_char,
        ) -> *mut leveldb_t;
        pub fn leveldb_close(db: *mut leveldb_t);
        pub fn leveldb_put(
            db: *mut leveldb_t,
            options: *const leveldb_writeoptions_t,
            key: *const c_char,
            keylen: usize,
            val: *const c_char,
            vallen: usize,
            errptr: *mut *mut c_char,
        );
        pub fn leveldb_delete(
            db: *mut leveldb_t,
            options: *const leveldb_writeoptions_t,
            key: *const c_char,
            keylen: usize,
            errptr: *mut *mut c_char,
        );
        pub fn leveldb_write(
            db: *mut leveldb_t,
            options: *const leveldb_writeoptions_t,
            batch: *mut leveldb_writebatch_t,
            errptr: *mut *mut c_char,
        );
        pub fn leveldb_get(
            db: *mut leveldb_t,
            options: *const leveldb_readoptions_t,
            key: *const c_char,
            keylen: usize,
            vallen: *mut usize,
            errptr: *mut *mut c_char,
        ) -> *mut c_char;
        pub fn leveldb_free(ptr: *mut c_void);

        pub fn leveldb_options_create() -> *mut leveldb_options_t;
        pub fn leveldb_options_destroy(o: *mut leveldb_options_t);
        pub fn leveldb_options_set_create_if_missing(o: *mut leveldb_options_t, v: c_uchar);
        pub fn leveldb_options_set_compression(o: *mut leveldb_options_t, v: c_int);
        pub fn leveldb_options_set_filter_policy(
            o: *mut leveldb_options_t,
            p: *mut leveldb_filterpolicy_t,
        );
        pub fn leveldb_filterpolicy_create_bloom(
            bits_per_key: c_int,
        ) -> *mut leveldb_filterpolicy_t;
        pub fn leveldb_filterpolicy_destroy(p: *mut leveldb_filterpolicy_t);
        pub fn leveldb_cache_create_lru(capacity: usize) -> *mut leveldb_cache_t;
        pub fn leveldb_cache_destroy(c: *mut leveldb_cache_t);
        pub fn leveldb_options_set_cache(o: *mut leveldb_options_t, c: *mut leveldb_cache_t);

        pub fn leveldb_readoptions_create() -> *mut leveldb_readoptions_t;
        pub fn leveldb_readoptions_destroy(o: *mut leveldb_readoptions_t);
        pub fn leveldb_writeoptions_create() -> *mut leveldb_writeoptions_t;
        pub fn leveldb_writeoptions_destroy(o: *mut leveldb_writeoptions_t);
        pub fn leveldb_writeoptions_set_sync(o: *mut leveldb_writeoptions_t, v: c_uchar);

        pub fn leveldb_writebatch_create() -> *mut leveldb_writebatch_t;
        pub fn leveldb_writebatch_destroy(b: *mut leveldb_writebatch_t);
        pub fn leveldb_writebatch_put(
            b: *mut leveldb_writebatch_t,
            key: *const c_char,
            klen: usize,
            val: *const c_char,
            vlen: usize,
        );
        pub fn leveldb_writebatch_delete(
            b: *mut leveldb_writebatch_t,
            key: *const c_char,
            klen: usize,
        );
    }
}

/// Turns an error string set by LevelDB into an error, freeing it.
fn check(err: *mut c_char) -> Result<()> {
    if err.is_null() {
        return Ok(());
    }
    // SAFETY: LevelDB sets `err` to a NUL-terminated string allocated with malloc.
    let msg = unsafe { CStr::from_ptr(err) }
        .to_string_lossy()
        .into_owned();
    unsafe { ffi::leveldb_free(err.cast::<c_void>()) };
    Err(anyhow!("leveldb: {msg}"))
}

fn open(dir: &Path, settings: &Settings) -> Result<Box<dyn Engine>> {
    let name = CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: plain calls of LevelDB's C API; every object made here is owned by the
    // returned `Level` and destroyed in its Drop, after the database is closed.
    unsafe {
        let options = ffi::leveldb_options_create();
        ffi::leveldb_options_set_create_if_missing(options, 1);
        ffi::leveldb_options_set_compression(options, 0);
        let filter = ffi::leveldb_filterpolicy_create_bloom(BLOOM_BITS);
        ffi::leveldb_options_set_filter_policy(options, filter);
        let cache = ffi::leveldb_cache_create_lru(settings.cache_bytes as usize);
        ffi::leveldb_options_set_cache(options, cache);
        let write = ffi::leveldb_writeoptions_create();
        ffi::leveldb_writeoptions_set_sync(write, u8::from(settings.sync));
        let read = ffi::leveldb_readoptions_create();
        let mut level = Level {
            db: std::ptr::null_mut(),
            options,
            filter,
            cache,
            read,
            write,
        };
        let mut err = std::ptr::null_mut();
        level.db = ffi::leveldb_open(options, name.as_ptr(), &mut err);
        check(err)?;
        Ok(Box::new(level))
    }
}

struct Level {
    db: *mut ffi::leveldb_t,
    options: *mut ffi::leveldb_options_t,
    filter: *mut ffi::leveldb_filterpolicy_t,
    cache: *mut ffi::leveldb_cache_t,
    read: *mut ffi::leveldb_readoptions_t,
    write: *mut ffi::leveldb_writeoptions_t,
}

// SAFETY: a leveldb_t may be used from many threads at once (LevelDB's documentation:
// "a database may be safely accessed by multiple threads"); the option objects are only
// read after they are set up.
unsafe impl Send for Level {}
unsafe impl Sync for Level {}

impl Drop for Level {
    fn drop(&mut self) {
        // SAFETY: each pointer was made by the matching create call and is freed once.
        unsafe {
            if !self.db.is_null() {
                ffi::leveldb_close(self.db);
            }
            ffi::leveldb_options_destroy(self.options);
            ffi::leveldb_filterpolicy_destroy(self.filter);
            ffi::leveldb_cache_destroy(self.cache);
            ffi::leveldb_readoptions_destroy(self.read);
            ffi::leveldb_writeoptions_destroy(self.write);
        }
    }
}

impl Engine for Level {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut err = std::ptr::null_mut();
        // SAFETY: the slices outlive the call, which copies them.
        unsafe {
            ffi::leveldb_put(
                self.db,
                self.write,
                key.as_ptr().cast(),
                key.len(),
                value.as_ptr().cast(),
                value.len(),
                &mut err,
            );
        }
        check(err)
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let mut err = std::ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: LevelDB returns a malloc'd copy of the value (or null), freed below.
        unsafe {
            let ptr = ffi::leveldb_get(
                self.db,
                self.read,
                key.as_ptr().cast(),
                key.len(),
                &mut len,
                &mut err,
            );
            check(err)?;
            if ptr.is_null() {
                return Ok(false);
            }
            out.clear();
            out.extend_from_slice(std::slice::from_raw_parts(ptr.cast::<u8>(), len));
            ffi::leveldb_free(ptr.cast());
        }
        Ok(true)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        let mut err = std::ptr::null_mut();
        // SAFETY: as in put.
        unsafe {
            ffi::leveldb_delete(
                self.db,
                self.write,
                key.as_ptr().cast(),
                key.len(),
                &mut err,
            );
        }
        check(err)
    }

    fn write_batch(&self, ops: &[BatchOp<'_>]) -> Result<()> {
        let mut err = std::ptr::null_mut();
        // SAFETY: the batch copies keys and values and is destroyed after the write.
        unsafe {
            let batch = ffi::leveldb_writebatch_create();
            for op in ops {
                match op {
                    BatchOp::Put(k, v) => ffi::leveldb_writebatch_put(
                        batch,
                        k.as_ptr().cast(),
                        k.len(),
                        v.as_ptr().cast(),
                        v.len(),
                    ),
                    BatchOp::Delete(k) => {
                        ffi::leveldb_writebatch_delete(batch, k.as_ptr().cast(), k.len())
                    }
                }
            }
            ffi::leveldb_write(self.db, self.write, batch, &mut err);
            ffi::leveldb_writebatch_destroy(batch);
        }
        check(err)
    }

    fn flush(&self) -> Result<()> {
        // LevelDB has no flush call: an empty synced batch syncs its log, which holds
        // every write not yet in a table file.
        let mut err = std::ptr::null_mut();
        // SAFETY: as in write_batch.
        unsafe {
            let sync = ffi::leveldb_writeoptions_create();
            ffi::leveldb_writeoptions_set_sync(sync, 1);
            let batch = ffi::leveldb_writebatch_create();
            ffi::leveldb_write(self.db, sync, batch, &mut err);
            ffi::leveldb_writebatch_destroy(batch);
            ffi::leveldb_writeoptions_destroy(sync);
        }
        check(err)
    }
}
