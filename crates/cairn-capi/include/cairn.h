/* cairn's C API, generated from crates/cairn-capi by cbindgen (tests/header.rs checks that it is current). */

#ifndef CAIRN_H
#define CAIRN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// The length `cairn_get_many` reports for a key that has no value.
#define CAIRN_ABSENT SIZE_MAX



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
  // A transaction read what another writer changed after its snapshot; its commit
  // wrote nothing.
  CAIRN_CONFLICT = 18,
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

// An open store, or one keyspace of it (opaque). Thread-safe: any number of threads
// may use one at once. Every read and write goes to its keyspace (0 for the handle
// `cairn_open` gives, `id` for one from [`cairn_keyspace`]); flush, compaction, stats
// and the file store are the whole store's.
typedef struct cairn_db cairn_db;

// The files of a store whose key starts with a prefix, in key order or reverse, with
// their metadata (opaque). One thread at a time; it may outlive neither its store nor
// a `cairn_close` of it. Files committed or removed while it runs are seen or not, key
// by key, as with a store's iterator.
typedef struct cairn_file_list cairn_file_list;

// A committed version of a file, readable and seekable (opaque); it keeps reading the
// version it opened even if the file is overwritten or removed meanwhile. One thread at
// a time.
typedef struct cairn_file_reader cairn_file_reader;

// A new version of a file, written in a stream (opaque): nothing of it is visible until
// [`cairn_file_commit`]. One thread at a time.
typedef struct cairn_file_writer cairn_file_writer;

// An iterator over key-value pairs in key order or reverse (opaque). One thread at a
// time; it may outlive neither its store nor a `cairn_close` of it (it may outlive the
// snapshot or transaction it was made from). Writes made while a store's iterator runs
// are seen or not, key by key, as with `cairn::Db::iter`; a snapshot's or a
// transaction's sees exactly its snapshot (and the transaction's writes made before).
typedef struct cairn_iter cairn_iter;

// Options for [`cairn_open`] (opaque): the defaults of `cairn::Options` until set.
typedef struct cairn_options cairn_options;

// The keyspace of a handle as it was when [`cairn_snapshot_new`] took it (opaque):
// every read through it sees exactly that, while writes, compaction and reclamation go
// on. The store keeps what it may still read until the snapshot (and every iterator
// made from it) is freed. Thread-safe, as `cairn_db`; it may not outlive the store's
// handle.
typedef struct cairn_snapshot cairn_snapshot;

// A transaction (opaque) on the keyspace of the handle it began on: reads see the
// snapshot taken when it began, under its own writes; writes are buffered until
// [`cairn_txn_commit`], which applies them atomically only if nothing it read (keys it
// got or asked about, ranges it scanned) was written by anyone since — else
// `CAIRN_CONFLICT`, and nothing is written. One thread at a time; free it with
// [`cairn_txn_free`] (which rolls back one not committed).
typedef struct cairn_txn cairn_txn;

// A file version's metadata, filled in by [`cairn_files_stat`],
// [`cairn_file_reader_stat`] and [`cairn_file_list_next`].
typedef struct {
  // Length in bytes.
  uint64_t size;
  // Number of chunks (0 for an empty file).
  uint64_t chunks;
  // Chunk size the file was written with, in bytes.
  uint64_t chunk_size;
  // BLAKE3 hash of the content (`cairn_files_put_content`'s key is its hex).
  uint8_t hash[32];
  // When this version was committed, in nanoseconds since the Unix epoch (negative
  // before it).
  int64_t created_ns;
  // The version's unique id (a new write of the key gets a new one), big-endian.
  uint8_t version[16];
} cairn_file_stat;

// The function [`cairn_transact`] runs: reads and writes through `txn`, then returns
// `CAIRN_OK` to commit, `CAIRN_CONFLICT` to start over in a new transaction, or any
// other status to roll back and have `cairn_transact` return it.
typedef cairn_status (*cairn_txn_fn)(cairn_txn *txn, void *ctx);

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

// Fraction of a sealed segment's bytes that must be stale before compaction rewrites
// it (in (0, 1], default 0.5); a value outside that range makes `cairn_open` fail with
// `CAIRN_INVALID_ARGUMENT`.
//
// # Safety
// `opts` is null or a live pointer from [`cairn_options_new`].
cairn_status cairn_options_set_compaction_threshold(cairn_options *opts, double fraction);

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

// A handle of keyspace `id` (0 to 255) of the store behind `db`, stored in `*out`: its
// own keys, the same operations (keyspaces 1 to 3 belong to cairn's own layers; 1 is
// the file store). Close it with [`cairn_close`], which frees the handle and leaves the
// store open; it may not outlive the store's own handle.
//
// # Safety
// `db` is live; `out` is writable.
cairn_status cairn_keyspace(const cairn_db *db, uint8_t id, cairn_db **out);

// Frees the handle, whatever the status; for the handle of `cairn_open`, first closes
// the store (flushing it; every keyspace handle of it then fails with `CAIRN_CLOSED`).
// Null is ignored. No other thread may be using the handle.
//
// # Safety
// `db` is null or from [`cairn_open`] / [`cairn_keyspace`], not closed before.
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

// The metadata of the file `key` in `*stat`: `CAIRN_OK`, or `CAIRN_NOT_FOUND` (and
// `*stat` untouched) if there is no such file.
//
// # Safety
// `db` is live; `key` is valid for `key_len` bytes; `stat` is writable.
cairn_status cairn_files_stat(const cairn_db *db,
                              const uint8_t *key,
                              size_t key_len,
                              cairn_file_stat *stat);

// Whether the file `key` exists: `CAIRN_OK` if so, `CAIRN_NOT_FOUND` if not.
//
// # Safety
// `db` is live; `key` is valid for `key_len` bytes.
cairn_status cairn_files_exists(const cairn_db *db, const uint8_t *key, size_t key_len);

// The metadata of the version a reader reads, in `*stat`.
//
// # Safety
// `r` is live; `stat` is writable.
cairn_status cairn_file_reader_stat(cairn_file_reader *r, cairn_file_stat *stat);

// The files whose key starts with `prefix` (all of them for an empty prefix), in key
// order or, if `reverse`, from the last back; stored in `*out`, to be freed with
// [`cairn_file_list_free`].
//
// # Safety
// `db` is live; `prefix` is valid for `prefix_len` bytes (null if 0); `out` is
// writable.
cairn_status cairn_files_list(const cairn_db *db,
                              const uint8_t *prefix,
                              size_t prefix_len,
                              bool reverse,
                              cairn_file_list **out);

// Advances the list: `CAIRN_OK` with the next file's key in `*key`/`*key_len` (a
// pointer into the list, valid until its next call or its free) and its metadata in
// `*stat`, or `CAIRN_END` when there are no more, or an error.
//
// # Safety
// `list` is live; `key`, `key_len` and `stat` are writable.
cairn_status cairn_file_list_next(cairn_file_list *list,
                                  const uint8_t **key,
                                  size_t *key_len,
                                  cairn_file_stat *stat);

// Frees a file list. Null is ignored.
//
// # Safety
// `list` is null or from [`cairn_files_list`], not freed before.
void cairn_file_list_free(cairn_file_list *list);

// The store's size and amplification figures (`cairn::Stats`: totals, shards,
// keyspaces, snapshots) as a NUL-terminated JSON object in a new buffer at `*json`,
// freed with `cairn_free`.
//
// # Safety
// `db` is live; `json` is writable.
cairn_status cairn_stats_json(const cairn_db *db, char **json);

// The file store's totals (`cairn_files::FileStats`) as JSON, as [`cairn_stats_json`].
//
// # Safety
// `db` is live; `json` is writable.
cairn_status cairn_files_stats_json(const cairn_db *db, char **json);

// Stores `data` as the file `key`, replacing any previous version atomically.
//
// # Safety
// `db` is live; `key` and `data` are valid for their lengths.
cairn_status cairn_files_put(const cairn_db *db,
                             const uint8_t *key,
                             size_t key_len,
                             const uint8_t *data,
                             size_t data_len);

// Stores `data` under the hex BLAKE3 hash of its content (stored once however often it
// is put), and hands that key out NUL-terminated in a new buffer at `*key`, freed with
// `cairn_free`.
//
// # Safety
// `db` is live; `data` is valid for `data_len` bytes; `key` is writable.
cairn_status cairn_files_put_content(const cairn_db *db,
                                     const uint8_t *data,
                                     size_t data_len,
                                     char **key);

// The whole content of the file `key` in a new buffer at `*data` (its length in
// `*len`), freed with `cairn_free`; `CAIRN_NOT_FOUND` (and `*data` null) if there is no
// such file.
//
// # Safety
// `db` is live; `key` is valid for `key_len` bytes; `data` and `len` are writable.
cairn_status cairn_files_read(const cairn_db *db,
                              const uint8_t *key,
                              size_t key_len,
                              uint8_t **data,
                              size_t *len);

// Removes the file `key`: `CAIRN_OK` if it existed, `CAIRN_NOT_FOUND` if not.
//
// # Safety
// `db` is live; `key` is valid for `key_len` bytes.
cairn_status cairn_files_remove(const cairn_db *db, const uint8_t *key, size_t key_len);

// Begins a new version of the file `key`, stored in `*out`; end it with
// [`cairn_file_commit`] or [`cairn_file_abort`].
//
// # Safety
// `db` is live; `key` is valid for `key_len` bytes; `out` is writable.
cairn_status cairn_file_create(const cairn_db *db,
                               const uint8_t *key,
                               size_t key_len,
                               cairn_file_writer **out);

// Appends `data` to the new version.
//
// # Safety
// `w` is live; `data` is valid for `len` bytes.
cairn_status cairn_file_write(cairn_file_writer *w, const uint8_t *data, size_t len);

// Commits the new version atomically (replacing any earlier one) and frees the writer,
// whatever the status; on an error nothing of it is visible.
//
// # Safety
// `w` is from [`cairn_file_create`], not ended before.
cairn_status cairn_file_commit(cairn_file_writer *w);

// Drops what was written and frees the writer. Null is ignored.
//
// # Safety
// `w` is null or from [`cairn_file_create`], not ended before.
void cairn_file_abort(cairn_file_writer *w);

// Opens the file `key` for reading, stored in `*out` (free it with
// [`cairn_file_reader_free`]); `CAIRN_NOT_FOUND` if there is no such file.
//
// # Safety
// `db` is live; `key` is valid for `key_len` bytes; `out` is writable.
cairn_status cairn_file_open(const cairn_db *db,
                             const uint8_t *key,
                             size_t key_len,
                             cairn_file_reader **out);

// Reads up to `cap` bytes at the reader's position into `buf`, the count in `*n` (0 at
// the end of the file), and moves the position past them.
//
// # Safety
// `r` is live; `buf` is valid for `cap` writable bytes; `n` is writable.
cairn_status cairn_file_reader_read(cairn_file_reader *r, uint8_t *buf, size_t cap, size_t *n);

// Moves the reader to byte `offset` from the start of the file.
//
// # Safety
// `r` is live.
cairn_status cairn_file_reader_seek(cairn_file_reader *r, uint64_t offset);

// The size of the file version the reader reads, in bytes (0 for null).
//
// # Safety
// `r` is null or live.
uint64_t cairn_file_reader_size(const cairn_file_reader *r);

// Frees a reader. Null is ignored.
//
// # Safety
// `r` is null or from [`cairn_file_open`], not freed before.
void cairn_file_reader_free(cairn_file_reader *r);

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
// `iter` is null or from one of the `cairn_*iter_*` functions, not freed before.
void cairn_iter_free(cairn_iter *iter);

// Reads the values of `n` keys (`keys[i]`, `key_lens[i]` bytes long) in one call, each
// as `cairn_get` reads it (not one point in time across keys: a snapshot is). The
// values are handed out one after another in a single new buffer at `*values` (freed
// with `cairn_free`, even when every key is absent), and `value_lens[i]` is the length
// of key `i`'s value, or `CAIRN_ABSENT` if it has none (it then takes no room in the
// buffer): value `i` starts at the sum of the lengths before it that are not absent.
// On an error nothing is handed out. A key longer than the maximum reads as absent.
//
// # Safety
// `db` is live; `keys` and `key_lens` are valid for `n` elements, each `keys[i]` for
// `key_lens[i]` bytes; `value_lens` is valid for `n` writable elements; `values` is
// writable.
cairn_status cairn_get_many(const cairn_db *db,
                            const uint8_t *const *keys,
                            const size_t *key_lens,
                            size_t n,
                            uint8_t **values,
                            size_t *value_lens);

// A snapshot of the keyspace of `db` as it is now, stored in `*out` (O(1), never
// waiting for a writer); free it with [`cairn_snapshot_free`].
//
// # Safety
// `db` is live; `out` is writable.
cairn_status cairn_snapshot_new(const cairn_db *db, cairn_snapshot **out);

// Frees a snapshot (its iterators go on). Null is ignored.
//
// # Safety
// `snap` is null or from [`cairn_snapshot_new`], not freed before.
void cairn_snapshot_free(cairn_snapshot *snap);

// The number of the last write the snapshot sees (every write takes the next one); 0
// for null.
//
// # Safety
// `snap` is null or live.
uint64_t cairn_snapshot_seq(const cairn_snapshot *snap);

// `cairn_get` at the snapshot.
//
// # Safety
// As `cairn_get`, with `snap` live.
cairn_status cairn_snapshot_get(const cairn_snapshot *snap,
                                const uint8_t *key,
                                size_t key_len,
                                uint8_t *buf,
                                size_t cap,
                                size_t *len);

// `cairn_get_alloc` at the snapshot.
//
// # Safety
// As `cairn_get_alloc`, with `snap` live.
cairn_status cairn_snapshot_get_alloc(const cairn_snapshot *snap,
                                      const uint8_t *key,
                                      size_t key_len,
                                      uint8_t **value,
                                      size_t *len);

// Whether a key had a value at the snapshot: `CAIRN_OK` or `CAIRN_NOT_FOUND`.
//
// # Safety
// `snap` is live; `key` is valid for `key_len` bytes.
cairn_status cairn_snapshot_contains(const cairn_snapshot *snap,
                                     const uint8_t *key,
                                     size_t key_len);

// `cairn_iter_range` at the snapshot.
//
// # Safety
// As `cairn_iter_range`, with `snap` live.
cairn_status cairn_snapshot_iter_range(const cairn_snapshot *snap,
                                       const uint8_t *start,
                                       size_t start_len,
                                       const uint8_t *end,
                                       size_t end_len,
                                       bool reverse,
                                       cairn_iter **out);

// `cairn_iter_prefix` at the snapshot.
//
// # Safety
// As `cairn_iter_prefix`, with `snap` live.
cairn_status cairn_snapshot_iter_prefix(const cairn_snapshot *snap,
                                        const uint8_t *prefix,
                                        size_t prefix_len,
                                        bool reverse,
                                        cairn_iter **out);

// Begins a transaction on the keyspace of `db`, stored in `*out`.
//
// # Safety
// `db` is live; `out` is writable.
cairn_status cairn_txn_begin(const cairn_db *db, cairn_txn **out);

// Frees a transaction, rolling it back if it was not committed. Null is ignored.
//
// # Safety
// `txn` is null or from [`cairn_txn_begin`], not freed before.
void cairn_txn_free(cairn_txn *txn);

// Applies its writes atomically if nothing it read changed since its snapshot: else
// `CAIRN_CONFLICT` (or `CAIRN_KEY_EXISTS` for a `cairn_txn_put_new`) and nothing is
// written. Either way the transaction is over: later calls on it return
// `CAIRN_CLOSED`; free it with [`cairn_txn_free`].
//
// # Safety
// `txn` is live.
cairn_status cairn_txn_commit(cairn_txn *txn);

// Drops its writes; the transaction is over (nothing of it is written). Rolling back
// one that ended does nothing.
//
// # Safety
// `txn` is live.
cairn_status cairn_txn_rollback(cairn_txn *txn);

// Runs `f(txn, ctx)` in a transaction on the keyspace of `db` and commits it, again
// in a new transaction as long as the commit (or `f`) ends in `CAIRN_CONFLICT`,
// backing off a little more each time (up to a millisecond) — as `Db::transact`
// does. Returns `CAIRN_OK` once a commit succeeded; the status `f` returned if it
// was neither `CAIRN_OK` nor `CAIRN_CONFLICT` (nothing written); or the commit's
// error. `f` may run several times: its effects outside the transaction should be
// harmless to repeat. `txn` is valid only during that call of `f`, on its thread:
// `f` must not commit, roll back or free it (commit and rollback return
// `CAIRN_INVALID_ARGUMENT`), nor keep it.
//
// ```c
// static cairn_status bump(cairn_txn *tx, void *ctx) {
//   uint64_t n = 0; size_t len = 0;
//   cairn_status s = cairn_txn_get(tx, (const uint8_t *)"hits", 4, (uint8_t *)&n, 8, &len);
//   if (s != CAIRN_OK && s != CAIRN_NOT_FOUND) return s;
//   n++;
//   *(uint64_t *)ctx = n;
//   return cairn_txn_put(tx, (const uint8_t *)"hits", 4, (const uint8_t *)&n, 8);
// }
// /* ... */ uint64_t seen; cairn_transact(db, bump, &seen);
// ```
//
// # Safety
// `db` is live; `f` is a function that keeps the promises above; `ctx` is what `f`
// expects.
cairn_status cairn_transact(const cairn_db *db, cairn_txn_fn f, void *ctx);

// `cairn_get` in the transaction (its own write of the key, else its snapshot's).
//
// # Safety
// As `cairn_get`, with `txn` live.
cairn_status cairn_txn_get(cairn_txn *txn,
                           const uint8_t *key,
                           size_t key_len,
                           uint8_t *buf,
                           size_t cap,
                           size_t *len);

// `cairn_get_alloc` in the transaction.
//
// # Safety
// As `cairn_get_alloc`, with `txn` live.
cairn_status cairn_txn_get_alloc(cairn_txn *txn,
                                 const uint8_t *key,
                                 size_t key_len,
                                 uint8_t **value,
                                 size_t *len);

// Whether a key has a value in the transaction: `CAIRN_OK` or `CAIRN_NOT_FOUND`.
//
// # Safety
// `txn` is live; `key` is valid for `key_len` bytes.
cairn_status cairn_txn_contains(cairn_txn *txn, const uint8_t *key, size_t key_len);

// Sets a key when the transaction commits.
//
// # Safety
// `txn` is live; `key` and `value` are valid for their lengths.
cairn_status cairn_txn_put(cairn_txn *txn,
                           const uint8_t *key,
                           size_t key_len,
                           const uint8_t *value,
                           size_t value_len);

// Sets a key that must have no value when the transaction commits (else the commit
// returns `CAIRN_KEY_EXISTS` and writes nothing).
//
// # Safety
// `txn` is live; `key` and `value` are valid for their lengths.
cairn_status cairn_txn_put_new(cairn_txn *txn,
                               const uint8_t *key,
                               size_t key_len,
                               const uint8_t *value,
                               size_t value_len);

// Deletes a key when the transaction commits.
//
// # Safety
// `txn` is live; `key` is valid for `key_len` bytes.
cairn_status cairn_txn_delete(cairn_txn *txn, const uint8_t *key, size_t key_len);

// `cairn_iter_range` in the transaction: its writes over its snapshot, as they are
// when the iterator is made. The whole range counts as read (an insert into it by
// another writer before the commit is a conflict).
//
// # Safety
// As `cairn_iter_range`, with `txn` live.
cairn_status cairn_txn_iter_range(cairn_txn *txn,
                                  const uint8_t *start,
                                  size_t start_len,
                                  const uint8_t *end,
                                  size_t end_len,
                                  bool reverse,
                                  cairn_iter **out);

// `cairn_iter_prefix` in the transaction (every key with the prefix counts as read).
//
// # Safety
// As `cairn_iter_prefix`, with `txn` live.
cairn_status cairn_txn_iter_prefix(cairn_txn *txn,
                                   const uint8_t *prefix,
                                   size_t prefix_len,
                                   bool reverse,
                                   cairn_iter **out);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* CAIRN_H */
