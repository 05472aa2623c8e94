/* cairn's C API, generated from crates/cairn-capi by cbindgen (tests/header.rs checks that it is current). */

#ifndef CAIRN_H
#define CAIRN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// What a call did. `CAIRN_OK` is 0; every other value is an error whose message
// [`cairn_last_error`] gives (except `CAIRN_NOT_FOUND` and `CAIRN_END`, which are
// answers, not failures, and leave no message).
typedef enum {
  // Success.
  CAIRN_OK = 0,
  // The key has no value (`cairn_get`, `cairn_get_alloc`).
  CAIRN_NOT_FOUND = 1,
  // An iterator has no more items.
  CAIRN_END = 2,
  // The caller's buffer is too small for the value; its length was stored.
  CAIRN_BUFFER_TOO_SMALL = 3,
  // A null pointer, an invalid option, a path that is not UTF-8, or another invalid
  // argument.
  CAIRN_INVALID_ARGUMENT = 4,
  // The key is longer than the limit (64 KiB); nothing was written.
  CAIRN_KEY_TOO_LARGE = 5,
  // The value is longer than the limit (1 GiB); nothing was written.
  CAIRN_VALUE_TOO_LARGE = 6,
  // The store is at its `max_size`, or the disk is full; nothing was written.
  CAIRN_STORAGE_FULL = 7,
  // Another handle, in this or another process, has the store open.
  CAIRN_LOCKED = 8,
  // Stored data failed its checksum or is damaged.
  CAIRN_CORRUPTION = 9,
  // The directory holds a store of another format version, or no store.
  CAIRN_FORMAT = 10,
  // A `cairn_batch_put_new` key had a value; nothing of the batch was written.
  CAIRN_KEY_EXISTS = 11,
  // The store refuses writes after an earlier failed sync (reopen it), or was opened
  // read-only.
  CAIRN_READ_ONLY = 12,
  // The store was closed.
  CAIRN_CLOSED = 13,
  // An operating-system I/O error.
  CAIRN_IO = 14,
  // A panic inside cairn, caught at the boundary. The handle stays valid, but the
  // operation may not have happened.
  CAIRN_PANIC = 15,
  // `malloc` failed.
  CAIRN_OUT_OF_MEMORY = 16,
  // An error of a kind this version of the API has no code for.
  CAIRN_OTHER = 17,
} cairn_status;

// When writes reach the disk (`cairn_options_set_sync`).
typedef enum {
  // Writes are durable only after `cairn_flush` (or a clean close); the default.
  CAIRN_SYNC_NEVER = 0,
  // A background sync every `interval_ms` milliseconds.
  CAIRN_SYNC_EVERY = 1,
  // Every write is durable when its call returns (group commit).
  CAIRN_SYNC_ALWAYS = 2,
} cairn_sync_policy;

// A batch of puts and deletes applied atomically by [`cairn_write`] (opaque). One
// thread at a time.
typedef struct cairn_batch cairn_batch;

// An open store (opaque). Thread-safe: any number of threads may use one at once.
typedef struct cairn_db cairn_db;

// An iterator over key-value pairs in key order or reverse (opaque). One thread at a
// time; it may outlive neither its store nor a `cairn_close` of it. Writes made while
// it runs are seen or not, key by key, as with `cairn::Db::iter`.
typedef struct cairn_iter cairn_iter;

// Options for [`cairn_open`] (opaque): the defaults of `cairn::Options` until set.
typedef struct cairn_options cairn_options;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// A new empty batch; free it with [`cairn_batch_free`].
cairn_batch *cairn_batch_new(void);

// Frees a batch. Null is ignored.
//
// # Safety
// `batch` is null or from [`cairn_batch_new`], not freed before.
void cairn_batch_free(cairn_batch *batch);

// Adds a put to the batch (a key over the limit fails the batch's write).
//
// # Safety
// `batch` is live; `key` and `value` are valid for their lengths.
cairn_status cairn_batch_put(cairn_batch *batch,
                             const uint8_t *key,
                             size_t key_len,
                             const uint8_t *value,
                             size_t value_len);

// Adds a put that requires the key to have no value when the batch is written (else
// the write fails with `CAIRN_KEY_EXISTS` and writes nothing).
//
// # Safety
// `batch` is live; `key` and `value` are valid for their lengths.
cairn_status cairn_batch_put_new(cairn_batch *batch,
                                 const uint8_t *key,
                                 size_t key_len,
                                 const uint8_t *value,
                                 size_t value_len);

// Adds a delete to the batch.
//
// # Safety
// `batch` is live; `key` is valid for `key_len` bytes.
cairn_status cairn_batch_delete(cairn_batch *batch, const uint8_t *key, size_t key_len);

// Empties the batch.
//
// # Safety
// `batch` is live.
cairn_status cairn_batch_clear(cairn_batch *batch);

// The number of operations in the batch (0 for null).
//
// # Safety
// `batch` is null or live.
size_t cairn_batch_len(const cairn_batch *batch);

// Applies the batch atomically: all of it or, on an error, none of it. The batch is
// empty afterwards either way, ready for reuse.
//
// # Safety
// `db` and `batch` are live.
cairn_status cairn_write(const cairn_db *db, cairn_batch *batch);

// New default options; free them with [`cairn_options_free`] (`cairn_open` does not
// take them).
cairn_options *cairn_options_new(void);

// Frees options. Null is ignored.
//
// # Safety
// `opts` is null or from [`cairn_options_new`], not freed before.
void cairn_options_free(cairn_options *opts);

// Shards of a new store (ignored when the store exists).
//
// # Safety
// `opts` is null or a live pointer from [`cairn_options_new`].
cairn_status cairn_options_set_shards(cairn_options *opts, uint32_t n);

// Largest segment file, in bytes.
//
// # Safety
// `opts` is null or a live pointer from [`cairn_options_new`].
cairn_status cairn_options_set_segment_size(cairn_options *opts, uint64_t bytes);

// Largest size of the store on disk, in bytes (0: no limit); writes past it fail with
// `CAIRN_STORAGE_FULL`.
//
// # Safety
// `opts` is null or a live pointer from [`cairn_options_new`].
cairn_status cairn_options_set_max_size(cairn_options *opts, uint64_t bytes);

// When writes reach the disk; `interval_ms` is used by `CAIRN_SYNC_EVERY` only.
//
// # Safety
// `opts` is null or a live pointer from [`cairn_options_new`].
cairn_status cairn_options_set_sync(cairn_options *opts,
                                    cairn_sync_policy policy,
                                    uint64_t interval_ms);

// Whether background threads compact segments (default on).
//
// # Safety
// `opts` is null or a live pointer from [`cairn_options_new`].
cairn_status cairn_options_set_background_compaction(cairn_options *opts, bool on);

// Opens the store read-only, following its writer (if `on`).
//
// # Safety
// `opts` is null or a live pointer from [`cairn_options_new`].
cairn_status cairn_options_set_read_only(cairn_options *opts, bool on);

// Opens (creating if missing) the store in directory `path` (a NUL-terminated UTF-8
// string) with `opts` (null: defaults; not taken, free them after). On success stores
// the handle in `*out`; close it with [`cairn_close`].
//
// # Safety
// `path` is a NUL-terminated string; `opts` is null or live; `out` is writable.
cairn_status cairn_open(const char *path, const cairn_options *opts, cairn_db **out);

// Closes the store (flushing it) and frees the handle, whatever the status. Null is
// ignored. No other thread may be using the handle.
//
// # Safety
// `db` is null or from [`cairn_open`], not closed before.
cairn_status cairn_close(cairn_db *db);

// Reads the value of a key into the caller's buffer `buf` of `cap` bytes, storing its
// length in `*len`. Returns `CAIRN_NOT_FOUND` if the key has no value, and
// `CAIRN_BUFFER_TOO_SMALL` (with `*len` set, nothing copied) if it does not fit.
//
// # Safety
// `db` is live; `key` is valid for `key_len` bytes; `buf` for `cap` writable bytes (or
// null with `cap` 0); `len` is writable.
cairn_status cairn_get(const cairn_db *db,
                       const uint8_t *key,
                       size_t key_len,
                       uint8_t *buf,
                       size_t cap,
                       size_t *len);

// Reads the value of a key into a new buffer stored in `*value` (its length in
// `*len`), to be freed with `cairn_free`. Returns `CAIRN_NOT_FOUND` if the key has no
// value (then `*value` is null).
//
// # Safety
// `db` is live; `key` is valid for `key_len` bytes; `value` and `len` are writable.
cairn_status cairn_get_alloc(const cairn_db *db,
                             const uint8_t *key,
                             size_t key_len,
                             uint8_t **value,
                             size_t *len);

// Whether a key has a value: `CAIRN_OK` if so, `CAIRN_NOT_FOUND` if not.
//
// # Safety
// `db` is live; `key` is valid for `key_len` bytes.
cairn_status cairn_contains(const cairn_db *db, const uint8_t *key, size_t key_len);

// Sets the value of a key.
//
// # Safety
// `db` is live; `key` and `value` are valid for their lengths.
cairn_status cairn_put(const cairn_db *db,
                       const uint8_t *key,
                       size_t key_len,
                       const uint8_t *value,
                       size_t value_len);

// Removes a key (no error if it had no value).
//
// # Safety
// `db` is live; `key` is valid for `key_len` bytes.
cairn_status cairn_delete(const cairn_db *db, const uint8_t *key, size_t key_len);

// Makes every write so far durable.
//
// # Safety
// `db` is live.
cairn_status cairn_flush(const cairn_db *db);

// Compacts every segment with space to give back, now.
//
// # Safety
// `db` is live.
cairn_status cairn_compact(const cairn_db *db);

// Gives back the space of overwritten and deleted records (whole segments dropped,
// others compacted).
//
// # Safety
// `db` is live.
cairn_status cairn_reclaim(const cairn_db *db);

// The message of the last error on the calling thread, or null if the last call
// succeeded (or returned `CAIRN_NOT_FOUND` / `CAIRN_END`). Valid until the thread's
// next call into cairn; do not free it.
const char *cairn_last_error(void);

// The name of a status code (`"CAIRN_OK"`, …), a static string.
const char *cairn_status_name(cairn_status status);

// The library's version, a static string such as `"0.1.0"`.
const char *cairn_version(void);

// Frees a buffer cairn handed out (`cairn_get_alloc`). Null is ignored.
//
// # Safety
// `ptr` is null or a buffer from cairn not freed before.
void cairn_free(void *ptr);

#if defined(CAIRN_TEST_HOOKS)
// Makes the next call into cairn on this thread panic inside the library (a test hook:
// the call must return `CAIRN_PANIC`). Only in builds with the `test-hooks` feature.
void cairn_test_panic_next(void);
#endif

// An iterator over the keys from `start` (inclusive) to `end` (exclusive), in key
// order or, if `reverse`, from the end down. A null `start` (or `end`) means no bound
// on that side. Stored in `*out`; free it with [`cairn_iter_free`].
//
// # Safety
// `db` is live; `start` and `end` are null or valid for their lengths; `out` is
// writable.
cairn_status cairn_iter_range(const cairn_db *db,
                              const uint8_t *start,
                              size_t start_len,
                              const uint8_t *end,
                              size_t end_len,
                              bool reverse,
                              cairn_iter **out);

// An iterator over the keys that start with `prefix`, in key order or reverse. Stored
// in `*out`; free it with [`cairn_iter_free`].
//
// # Safety
// `db` is live; `prefix` is valid for `prefix_len` bytes; `out` is writable.
cairn_status cairn_iter_prefix(const cairn_db *db,
                               const uint8_t *prefix,
                               size_t prefix_len,
                               bool reverse,
                               cairn_iter **out);

// Advances the iterator: `CAIRN_OK` with the next key and value in `*key`/`*key_len`
// and `*value`/`*value_len` (pointers into the iterator, valid until its next call or
// its free), or `CAIRN_END` when there are no more, or an error.
//
// # Safety
// `iter` is live; the four out pointers are writable.
cairn_status cairn_iter_next(cairn_iter *iter,
                             const uint8_t **key,
                             size_t *key_len,
                             const uint8_t **value,
                             size_t *value_len);

// Frees an iterator. Null is ignored.
//
// # Safety
// `iter` is null or from `cairn_iter_range` / `cairn_iter_prefix`, not freed before.
void cairn_iter_free(cairn_iter *iter);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* CAIRN_H */
