/* The C API against a model: random puts, deletes, batches and reads on a store and on
 * an array of what each key should hold, reopening now and then, every read and scan
 * compared with the model. Then error codes, the caller-buffer protocol, two threads at
 * once, and (built with -DCAIRN_TEST_HOOKS) a panic inside the library coming back as
 * CAIRN_PANIC. The model test holds a snapshot and checks it against the model as it was,
 * and runs transactions, half of them made to conflict. Then keyspaces, write skew,
 * the stats and the file store (contents, metadata, listing). Batched reads
 * (cairn_get_many) are checked against the model too. Usage: model DIR SEED STEPS. Prints "N passed, 0 failed" at the end. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"

#define KEYS 200
#define MAXV 300

static int checks;
#define CHECK(cond, ...)                                                         \
  do {                                                                           \
    checks++;                                                                    \
    if (!(cond)) {                                                               \
      fprintf(stderr, "FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond);          \
      fprintf(stderr, __VA_ARGS__);                                              \
      const char *e = cairn_last_error();                                        \
      fprintf(stderr, " (last error: %s)\n", e ? e : "none");                    \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)
#define OK(call) CHECK((call) == CAIRN_OK, "%s", #call)

static unsigned long long rng;
static unsigned next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (unsigned)(rng >> 16);
}

struct slot {
  int present;
  size_t len;
  unsigned char val[MAXV];
};
static struct slot model[KEYS];

static size_t key_of(int i, char *buf) { return (size_t)sprintf(buf, "k%03d", i); }

static size_t random_value(unsigned char *v) {
  size_t len = next() % MAXV;
  for (size_t j = 0; j < len; j++) v[j] = (unsigned char)next();
  return len;
}

static cairn_db *open_db(const char *dir) {
  cairn_options *o = cairn_options_new();
  OK(cairn_options_set_shards(o, 4));
  OK(cairn_options_set_segment_size(o, 64 << 10));
  OK(cairn_options_set_compaction_threshold(o, 0.4));
  cairn_db *db = NULL;
  OK(cairn_open(dir, o, &db));
  cairn_options_free(o);
  return db;
}

static void check_get(cairn_db *db, int i) {
  char k[16];
  size_t kl = key_of(i, k), len = 0;
  unsigned char *v = NULL;
  cairn_status s = cairn_get_alloc(db, (const uint8_t *)k, kl, &v, &len);
  if (model[i].present) {
    CHECK(s == CAIRN_OK, "get %s: %s", k, cairn_status_name(s));
    CHECK(len == model[i].len && memcmp(v, model[i].val, len) == 0, "value of %s", k);
  } else {
    CHECK(s == CAIRN_NOT_FOUND && v == NULL, "get of absent %s: %s", k, cairn_status_name(s));
  }
  cairn_free(v);
}

/* Reads up to 16 random keys (repeats allowed) in one cairn_get_many and compares each
 * with the model; a key longer than the maximum reads as absent. */
static void check_many(cairn_db *db) {
  static uint8_t huge[(64 << 10) + 1];
  char ks[17][16];
  const uint8_t *keys[17];
  size_t lens[17], vlens[17];
  int idx[17], n = (int)(next() % 17);
  for (int j = 0; j < n; j++) {
    idx[j] = (int)(next() % KEYS);
    lens[j] = key_of(idx[j], ks[j]);
    keys[j] = (const uint8_t *)ks[j];
  }
  keys[n] = huge, lens[n] = sizeof huge, idx[n] = -1; /* one key past the limit */
  uint8_t *vals = NULL;
  OK(cairn_get_many(db, keys, lens, (size_t)n + 1, &vals, vlens));
  size_t off = 0;
  for (int j = 0; j < n; j++) {
    struct slot *m = &model[idx[j]];
    if (!m->present) {
      CHECK(vlens[j] == CAIRN_ABSENT, "get_many: %s absent", ks[j]);
      continue;
    }
    CHECK(vlens[j] == m->len && !memcmp(vals + off, m->val, m->len), "get_many: %s", ks[j]);
    off += vlens[j];
  }
  CHECK(vlens[n] == CAIRN_ABSENT, "get_many: a key past the limit reads as absent");
  cairn_free(vals);
}

/* Scans [lo, hi) forward or backward and compares with the model. */
static void check_scan(cairn_db *db, int lo, int hi, int reverse) {
  char a[16], b[16];
  size_t al = key_of(lo, a), bl = key_of(hi, b);
  cairn_iter *it = NULL;
  OK(cairn_iter_range(db, (const uint8_t *)a, al, hi < KEYS ? (const uint8_t *)b : NULL, bl,
                      reverse, &it));
  int i = reverse ? hi - 1 : lo;
  const uint8_t *k, *v;
  size_t kl, vl;
  cairn_status s;
  while ((s = cairn_iter_next(it, &k, &kl, &v, &vl)) == CAIRN_OK) {
    while (i >= lo && i < hi && !model[i].present) i += reverse ? -1 : 1;
    char want[16];
    size_t wl = key_of(i, want);
    CHECK(i >= lo && i < hi && kl == wl && memcmp(k, want, kl) == 0, "scan key %.*s", (int)kl, k);
    CHECK(vl == model[i].len && memcmp(v, model[i].val, vl) == 0, "scan value of %s", want);
    i += reverse ? -1 : 1;
  }
  CHECK(s == CAIRN_END, "scan ended with %s", cairn_status_name(s));
  while (i >= lo && i < hi && !model[i].present) i += reverse ? -1 : 1;
  CHECK(!(i >= lo && i < hi), "scan missed key %d", i);
  cairn_iter_free(it);
}

/* The snapshot the model test holds, and what the model was when it was taken. */
static cairn_snapshot *snap;
static struct slot snap_model[KEYS];

/* Takes a new snapshot, or checks the one held (a get, a contains, a scan) against
 * the model as it was when taken. */
static void snapshot_step(cairn_db *db) {
  if (snap == NULL || next() % 4 == 0) {
    cairn_snapshot_free(snap);
    OK(cairn_snapshot_new(db, &snap));
    memcpy(snap_model, model, sizeof model);
    return;
  }
  int i = next() % KEYS;
  char k[16];
  size_t kl = key_of(i, k), len = 0;
  unsigned char *v = NULL;
  cairn_status s = cairn_snapshot_get_alloc(snap, (const uint8_t *)k, kl, &v, &len);
  CHECK(s == (snap_model[i].present ? CAIRN_OK : CAIRN_NOT_FOUND), "snapshot get %s", k);
  if (s == CAIRN_OK)
    CHECK(len == snap_model[i].len && !memcmp(v, snap_model[i].val, len), "snapshot value");
  cairn_free(v);
  CHECK(cairn_snapshot_contains(snap, (const uint8_t *)k, kl) ==
            (snap_model[i].present ? CAIRN_OK : CAIRN_NOT_FOUND), "snapshot contains %s", k);
  cairn_iter *it = NULL;
  int reverse = next() % 2;
  OK(cairn_snapshot_iter_prefix(snap, (const uint8_t *)"k", 1, reverse, &it));
  const uint8_t *ik, *iv;
  size_t ikl, ivl;
  int j = reverse ? KEYS - 1 : 0;
  while ((s = cairn_iter_next(it, &ik, &ikl, &iv, &ivl)) == CAIRN_OK) {
    while (j >= 0 && j < KEYS && !snap_model[j].present) j += reverse ? -1 : 1;
    char want[16];
    size_t wl = key_of(j, want);
    CHECK(j >= 0 && j < KEYS && ikl == wl && !memcmp(ik, want, wl), "snapshot scan key");
    CHECK(ivl == snap_model[j].len && !memcmp(iv, snap_model[j].val, ivl), "snapshot scan value");
    j += reverse ? -1 : 1;
  }
  CHECK(s == CAIRN_END, "snapshot scan: %s", cairn_status_name(s));
  while (j >= 0 && j < KEYS && !snap_model[j].present) j += reverse ? -1 : 1;
  CHECK(!(j >= 0 && j < KEYS), "snapshot scan missed key %d", j);
  cairn_iter_free(it);
}

/* A transaction: reads two keys, writes up to four; half the time another writer puts
 * one of the keys it read before it commits, which must then fail with
 * CAIRN_CONFLICT and write nothing. */
static void txn_step(cairn_db *db) {
  cairn_txn *tx = NULL;
  OK(cairn_txn_begin(db, &tx));
  struct slot after[KEYS];
  memcpy(after, model, sizeof model);
  int read[2];
  for (int r = 0; r < 2; r++) {
    int i = read[r] = next() % KEYS;
    char k[16];
    size_t kl = key_of(i, k);
    unsigned char buf[MAXV];
    size_t len = 0;
    cairn_status s = cairn_txn_get(tx, (const uint8_t *)k, kl, buf, sizeof buf, &len);
    CHECK(s == (after[i].present ? CAIRN_OK : CAIRN_NOT_FOUND), "txn get %s", k);
    if (s == CAIRN_OK) CHECK(len == after[i].len && !memcmp(buf, after[i].val, len), "txn value");
  }
  int n = 1 + next() % 4;
  for (int w = 0; w < n; w++) {
    int x = next() % KEYS;
    char k[16];
    size_t kl = key_of(x, k);
    if (next() % 3 == 0) {
      OK(cairn_txn_delete(tx, (const uint8_t *)k, kl));
      after[x].present = 0;
    } else {
      unsigned char v[MAXV];
      size_t len = random_value(v);
      OK(cairn_txn_put(tx, (const uint8_t *)k, kl, v, len));
      after[x].present = 1, after[x].len = len, memcpy(after[x].val, v, len);
    }
    CHECK(cairn_txn_contains(tx, (const uint8_t *)k, kl) ==
              (after[x].present ? CAIRN_OK : CAIRN_NOT_FOUND), "txn sees its write");
  }
  int clash = next() % 2;
  if (clash) {
    int i = read[next() % 2];
    char k[16];
    size_t kl = key_of(i, k);
    unsigned char v[MAXV];
    size_t len = random_value(v);
    OK(cairn_put(db, (const uint8_t *)k, kl, v, len));
    model[i].present = 1, model[i].len = len, memcpy(model[i].val, v, len);
  }
  cairn_status s = cairn_txn_commit(tx);
  CHECK(s == (clash ? CAIRN_CONFLICT : CAIRN_OK), "commit: %s", cairn_status_name(s));
  if (!clash) memcpy(model, after, sizeof model);
  CHECK(cairn_txn_put(tx, (const uint8_t *)"x", 1, NULL, 0) == CAIRN_CLOSED, "txn over");
  cairn_txn_free(tx);
}

static void model_test(const char *dir, int steps) {
  cairn_db *db = open_db(dir);
  cairn_batch *batch = cairn_batch_new();
  for (int step = 0; step < steps; step++) {
    int op = next() % 100, i = next() % KEYS;
    char k[16];
    size_t kl = key_of(i, k);
    unsigned char v[MAXV];
    if (op < 40) {
      size_t len = random_value(v);
      OK(cairn_put(db, (const uint8_t *)k, kl, v, len));
      model[i].present = 1, model[i].len = len, memcpy(model[i].val, v, len);
    } else if (op < 55) {
      OK(cairn_delete(db, (const uint8_t *)k, kl));
      model[i].present = 0;
    } else if (op < 71) {
      check_many(db);
    } else if (op < 75) {
      check_get(db, i);
      CHECK(cairn_contains(db, (const uint8_t *)k, kl) ==
                (model[i].present ? CAIRN_OK : CAIRN_NOT_FOUND), "contains %s", k);
    } else if (op < 85) {
      /* A batch of up to 6 writes, applied in order; a put_new of a present key makes
       * the whole batch fail and change nothing. */
      struct slot after[KEYS];
      memcpy(after, model, sizeof model);
      int n = 1 + next() % 6, fails = 0;
      for (int j = 0; j < n; j++) {
        int kind = next() % 3, x = next() % KEYS;
        char bk[16];
        size_t bkl = key_of(x, bk);
        if (kind == 2) {
          OK(cairn_batch_delete(batch, (const uint8_t *)bk, bkl));
          after[x].present = 0;
          continue;
        }
        size_t len = random_value(v);
        if (kind == 1) {
          OK(cairn_batch_put_new(batch, (const uint8_t *)bk, bkl, v, len));
          if (model[x].present) fails = 1;
        } else {
          OK(cairn_batch_put(batch, (const uint8_t *)bk, bkl, v, len));
        }
        after[x].present = 1, after[x].len = len, memcpy(after[x].val, v, len);
      }
      CHECK(cairn_batch_len(batch) == (size_t)n, "batch length");
      cairn_status s = cairn_write(db, batch);
      CHECK(s == (fails ? CAIRN_KEY_EXISTS : CAIRN_OK), "batch: %s", cairn_status_name(s));
      CHECK(cairn_batch_len(batch) == 0, "batch emptied by write");
      if (!fails) memcpy(model, after, sizeof model);
    } else if (op < 90) {
      int lo = next() % KEYS, hi = lo + next() % (KEYS - lo + 1);
      check_scan(db, lo, hi, next() % 2);
    } else if (op < 93) {
      snapshot_step(db);
    } else if (op < 96) {
      txn_step(db);
    } else if (op < 99) {
      /* The caller-buffer protocol. */
      unsigned char small[8];
      size_t len = 0;
      cairn_status s = cairn_get(db, (const uint8_t *)k, kl, small, sizeof small, &len);
      if (!model[i].present) CHECK(s == CAIRN_NOT_FOUND, "get absent");
      else if (model[i].len > sizeof small)
        CHECK(s == CAIRN_BUFFER_TOO_SMALL && len == model[i].len, "too small");
      else CHECK(s == CAIRN_OK && len == model[i].len && !memcmp(small, model[i].val, len), "fit");
    } else {
      cairn_snapshot_free(snap);
      snap = NULL;
      OK(cairn_close(db));
      db = open_db(dir);
      for (int j = 0; j < KEYS; j++) check_get(db, j);
    }
  }
  check_scan(db, 0, KEYS, 0);
  check_scan(db, 0, KEYS, 1);
  cairn_snapshot_free(snap);
  snap = NULL;
  cairn_batch_free(batch);
  OK(cairn_close(db));
}

static void *writer(void *arg) {
  cairn_db *db = arg;
  unsigned long self = (unsigned long)pthread_self();
  for (int i = 0; i < 2000; i++) {
    char k[64];
    size_t kl = (size_t)sprintf(k, "t%lx-%d", self, i);
    if (cairn_put(db, (const uint8_t *)k, kl, (const uint8_t *)k, kl) != CAIRN_OK) return "put";
  }
  return NULL;
}

static void errors_and_threads(const char *dir) {
  cairn_db *db = open_db(dir), *again = NULL;
  cairn_status s = cairn_open(dir, NULL, &again);
  CHECK(s == CAIRN_LOCKED && cairn_last_error() != NULL, "second open: %s", cairn_status_name(s));
  cairn_options *bad = cairn_options_new();
  OK(cairn_options_set_compaction_threshold(bad, 1.5));
  s = cairn_open(dir, bad, &again);
  CHECK(s == CAIRN_INVALID_ARGUMENT && again == NULL, "threshold 1.5: %s", cairn_status_name(s));
  cairn_options_free(bad);
  uint8_t *none = NULL;
  OK(cairn_get_many(db, NULL, NULL, 0, &none, NULL)); /* no keys: an empty buffer */
  CHECK(none != NULL, "get_many of no keys hands out a buffer");
  cairn_free(none);
  CHECK(cairn_get_many(db, NULL, NULL, 1, &none, NULL) == CAIRN_INVALID_ARGUMENT,
        "get_many with null arrays");
  static uint8_t big[(64 << 10) + 1];
  CHECK(cairn_put(db, big, sizeof big, big, 1) == CAIRN_KEY_TOO_LARGE, "key too large");
  CHECK(strstr(cairn_last_error(), "exceeds the limit") != NULL, "message");
  CHECK(cairn_put(db, NULL, 3, big, 1) == CAIRN_INVALID_ARGUMENT, "null key");
  CHECK(cairn_put(NULL, big, 1, big, 1) == CAIRN_INVALID_ARGUMENT, "null db");
  OK(cairn_put(db, (const uint8_t *)"", 0, NULL, 0)); /* empty key and value */
  size_t len = 7;
  OK(cairn_get(db, (const uint8_t *)"", 0, NULL, 0, &len));
  CHECK(len == 0 && cairn_last_error() == NULL, "empty value");
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, writer, db);
  for (int i = 0; i < 2; i++) {
    void *r;
    pthread_join(t[i], &r);
    CHECK(r == NULL, "thread %d", i);
  }
  cairn_iter *it = NULL;
  OK(cairn_iter_prefix(db, (const uint8_t *)"t", 1, 0, &it));
  int n = 0;
  const uint8_t *k, *v;
  size_t kl, vl;
  while (cairn_iter_next(it, &k, &kl, &v, &vl) == CAIRN_OK) n++;
  CHECK(n == 4000, "threads wrote %d keys", n);
  cairn_iter_free(it);
#ifdef CAIRN_TEST_HOOKS
  cairn_test_panic_next();
  s = cairn_put(db, (const uint8_t *)"p", 1, (const uint8_t *)"v", 1);
  CHECK(s == CAIRN_PANIC && strstr(cairn_last_error(), "panic") != NULL, "panic: %s",
        cairn_status_name(s));
  OK(cairn_put(db, (const uint8_t *)"p", 1, (const uint8_t *)"v", 1)); /* still usable */
#endif
  OK(cairn_close(db));
  cairn_options *o = cairn_options_new();
  OK(cairn_options_set_shards(o, 0));
  CHECK(cairn_open("/proc/no-such-dir/x", o, &again) != CAIRN_OK, "open in /proc");
  cairn_options_free(o);
}

/* Keyspace handles, write skew between two transactions, a transaction's scan and
 * rollback, the stats, and the file store (whole files, streams, content keys). */
static void keyspaces_txns_files(const char *dir) {
  cairn_db *db = open_db(dir), *ks = NULL;
  OK(cairn_keyspace(db, 7, &ks));
  OK(cairn_put(ks, (const uint8_t *)"a", 1, (const uint8_t *)"7", 1));
  OK(cairn_put(db, (const uint8_t *)"a", 1, (const uint8_t *)"0", 1));
  unsigned char buf[64];
  size_t len = 0;
  OK(cairn_get(ks, (const uint8_t *)"a", 1, buf, sizeof buf, &len));
  CHECK(len == 1 && buf[0] == '7', "keyspace 7 holds its own a");
  CHECK(cairn_contains(ks, (const uint8_t *)"b", 1) == CAIRN_NOT_FOUND, "keyspace contains");

  /* Write skew: each reads x and y and zeroes one; exactly one commits. */
  OK(cairn_put(db, (const uint8_t *)"x", 1, (const uint8_t *)"1", 1));
  OK(cairn_put(db, (const uint8_t *)"y", 1, (const uint8_t *)"1", 1));
  cairn_txn *t[2];
  for (int i = 0; i < 2; i++) {
    OK(cairn_txn_begin(db, &t[i]));
    OK(cairn_txn_contains(t[i], (const uint8_t *)"x", 1));
    OK(cairn_txn_contains(t[i], (const uint8_t *)"y", 1));
    OK(cairn_txn_put(t[i], (const uint8_t *)(i ? "y" : "x"), 1, (const uint8_t *)"0", 1));
  }
  cairn_status s0 = cairn_txn_commit(t[0]), s1 = cairn_txn_commit(t[1]);
  CHECK(s0 == CAIRN_OK && s1 == CAIRN_CONFLICT, "write skew: %s %s", cairn_status_name(s0),
        cairn_status_name(s1));
  CHECK(strstr(cairn_last_error(), "onflict") != NULL, "conflict message");
  CHECK(cairn_txn_commit(t[0]) == CAIRN_CLOSED, "commit twice");
  for (int i = 0; i < 2; i++) cairn_txn_free(t[i]);

  /* A transaction in keyspace 7: its scan shows its writes over its snapshot; a rollback
   * writes nothing; put_new of a present key fails the commit. */
  cairn_txn *tx = NULL;
  OK(cairn_txn_begin(ks, &tx));
  OK(cairn_txn_put(tx, (const uint8_t *)"b", 1, (const uint8_t *)"8", 1));
  OK(cairn_txn_delete(tx, (const uint8_t *)"a", 1));
  cairn_iter *it = NULL;
  OK(cairn_txn_iter_range(tx, NULL, 0, NULL, 0, 1, &it));
  const uint8_t *k, *v;
  size_t kl, vl;
  OK(cairn_iter_next(it, &k, &kl, &v, &vl));
  CHECK(kl == 1 && k[0] == 'b' && vl == 1 && v[0] == '8', "txn scan");
  CHECK(cairn_iter_next(it, &k, &kl, &v, &vl) == CAIRN_END, "txn scan end");
  cairn_iter_free(it);
  OK(cairn_txn_rollback(tx));
  CHECK(cairn_txn_get(tx, (const uint8_t *)"a", 1, buf, sizeof buf, &len) == CAIRN_CLOSED,
        "rolled back");
  cairn_txn_free(tx);
  OK(cairn_contains(ks, (const uint8_t *)"a", 1));
  OK(cairn_txn_begin(ks, &tx));
  OK(cairn_txn_put_new(tx, (const uint8_t *)"a", 1, (const uint8_t *)"9", 1));
  CHECK(cairn_txn_commit(tx) == CAIRN_KEY_EXISTS, "put_new in a transaction");
  cairn_txn_free(tx);
  cairn_txn_free(NULL);

  /* A snapshot of keyspace 7 keeps seeing "a" after it is deleted. */
  cairn_snapshot *sn = NULL;
  OK(cairn_snapshot_new(ks, &sn));
  CHECK(cairn_snapshot_seq(sn) > 0, "snapshot seq");
  OK(cairn_delete(ks, (const uint8_t *)"a", 1));
  OK(cairn_snapshot_get(sn, (const uint8_t *)"a", 1, buf, sizeof buf, &len));
  CHECK(cairn_get(ks, (const uint8_t *)"a", 1, buf, sizeof buf, &len) == CAIRN_NOT_FOUND, "gone");
  OK(cairn_snapshot_iter_range(sn, (const uint8_t *)"a", 1, (const uint8_t *)"b", 1, 0, &it));
  cairn_snapshot_free(sn); /* the iterator keeps it */
  OK(cairn_iter_next(it, &k, &kl, &v, &vl));
  CHECK(kl == 1 && k[0] == 'a' && v[0] == '7', "iterator outlives its snapshot");
  cairn_iter_free(it);

  /* Stats as JSON. */
  char *json = NULL;
  OK(cairn_stats_json(ks, &json));
  CHECK(json[0] == '{' && strstr(json, "\"keyspaces\"") != NULL, "stats: %.80s", json);
  cairn_free(json);

  /* The file store: a whole file, a streamed one read back with seeks, content keys. */
  static unsigned char big[300000], back[300000];
  for (size_t i = 0; i < sizeof big; i++) big[i] = (unsigned char)(i * 7 + i / 1000);
  OK(cairn_files_put(db, (const uint8_t *)"f/small", 7, (const uint8_t *)"hello", 5));
  unsigned char *data = NULL;
  OK(cairn_files_read(db, (const uint8_t *)"f/small", 7, &data, &len));
  CHECK(len == 5 && !memcmp(data, "hello", 5), "file read");
  cairn_free(data);
  cairn_file_stat st, st2;
  memset(&st, 0, sizeof st);
  OK(cairn_files_stat(db, (const uint8_t *)"f/small", 7, &st));
  CHECK(st.size == 5 && st.chunks == 1 && st.chunk_size > 0 && st.created_ns > 0, "stat");
  OK(cairn_files_exists(db, (const uint8_t *)"f/small", 7));
  CHECK(cairn_files_exists(db, (const uint8_t *)"f/none", 6) == CAIRN_NOT_FOUND, "exists");
  CHECK(cairn_files_stat(db, (const uint8_t *)"f/none", 6, &st2) == CAIRN_NOT_FOUND, "stat none");
  CHECK(cairn_files_stat(db, (const uint8_t *)"f/small", 7, NULL) == CAIRN_INVALID_ARGUMENT,
        "stat into null");
  OK(cairn_files_put(db, (const uint8_t *)"f/small", 7, (const uint8_t *)"hello", 5));
  OK(cairn_files_stat(db, (const uint8_t *)"f/small", 7, &st2));
  CHECK(!memcmp(st.hash, st2.hash, 32) && memcmp(st.version, st2.version, 16) != 0,
        "a rewrite: same content hash, a new version");
  cairn_file_writer *w = NULL;
  OK(cairn_file_create(db, (const uint8_t *)"f/big", 5, &w));
  for (size_t off = 0; off < sizeof big; off += 70000) {
    size_t n = sizeof big - off < 70000 ? sizeof big - off : 70000;
    OK(cairn_file_write(w, big + off, n));
  }
  CHECK(cairn_files_read(db, (const uint8_t *)"f/big", 5, &data, &len) == CAIRN_NOT_FOUND,
        "not visible before commit");
  OK(cairn_file_commit(w));
  OK(cairn_file_create(db, (const uint8_t *)"f/big", 5, &w));
  OK(cairn_file_write(w, (const uint8_t *)"junk", 4));
  cairn_file_abort(w); /* the committed version stays */
  cairn_file_reader *r = NULL;
  OK(cairn_file_open(db, (const uint8_t *)"f/big", 5, &r));
  CHECK(cairn_file_reader_size(r) == sizeof big, "file size");
  OK(cairn_file_reader_stat(r, &st));
  CHECK(st.size == sizeof big && st.chunks >= 1, "reader stat");
  /* Listing: the files under "f/" in key order and reverse, with their stats. */
  OK(cairn_files_put(db, (const uint8_t *)"g/other", 7, (const uint8_t *)"x", 1));
  for (int rev = 0; rev < 2; rev++) {
    cairn_file_list *fl = NULL;
    OK(cairn_files_list(db, (const uint8_t *)"f/", 2, rev, &fl));
    const char *want[2] = {"f/big", "f/small"};
    const uint64_t sizes[2] = {sizeof big, 5};
    for (int i = 0; i < 2; i++) {
      int j = rev ? 1 - i : i;
      OK(cairn_file_list_next(fl, &k, &kl, &st));
      CHECK(kl == strlen(want[j]) && !memcmp(k, want[j], kl) && st.size == sizes[j],
            "list %d item %d", rev, i);
    }
    CHECK(cairn_file_list_next(fl, &k, &kl, &st) == CAIRN_END, "list end");
    cairn_file_list_free(fl);
  }
  cairn_file_list *all = NULL;
  OK(cairn_files_list(db, NULL, 0, 0, &all));
  int listed = 0;
  while (cairn_file_list_next(all, &k, &kl, &st) == CAIRN_OK) listed++;
  CHECK(listed == 3, "all files listed: %d", listed);
  cairn_file_list_free(all);
  OK(cairn_files_remove(db, (const uint8_t *)"g/other", 7));
  size_t got = 0, n = 0;
  do {
    OK(cairn_file_reader_read(r, back + got, 50001, &n));
    got += n;
  } while (n > 0 && got < sizeof big);
  CHECK(got == sizeof big && !memcmp(back, big, got), "streamed file read back");
  OK(cairn_file_reader_seek(r, 123456));
  OK(cairn_file_reader_read(r, back, 10, &n));
  CHECK(n == 10 && !memcmp(back, big + 123456, 10), "read after seek");
  OK(cairn_file_reader_seek(r, sizeof big));
  OK(cairn_file_reader_read(r, back, 10, &n));
  CHECK(n == 0, "read at the end");
  OK(cairn_files_remove(db, (const uint8_t *)"f/big", 5));
  OK(cairn_file_reader_read(r, back, 0, &n)); /* the open version is still readable */
  OK(cairn_file_reader_seek(r, 0));
  OK(cairn_file_reader_read(r, back, 10, &n));
  CHECK(n == 10 && !memcmp(back, big, 10), "reader keeps its version");
  cairn_file_reader_free(r);
  CHECK(cairn_files_remove(db, (const uint8_t *)"f/big", 5) == CAIRN_NOT_FOUND, "removed");
  CHECK(cairn_file_open(db, (const uint8_t *)"f/big", 5, &r) == CAIRN_NOT_FOUND, "open gone");
  char *key1 = NULL, *key2 = NULL;
  OK(cairn_files_put_content(db, big, 1000, &key1));
  OK(cairn_files_put_content(db, big, 1000, &key2));
  CHECK(strlen(key1) == 64 && !strcmp(key1, key2), "content key %s", key1);
  OK(cairn_files_read(db, (const uint8_t *)key1, strlen(key1), &data, &len));
  CHECK(len == 1000 && !memcmp(data, big, 1000), "content read");
  cairn_free(data);
  cairn_free(key1);
  cairn_free(key2);
  OK(cairn_files_stats_json(db, &json));
  CHECK(strstr(json, "\"files\":2") != NULL, "file stats: %s", json);
  cairn_free(json);

  OK(cairn_close(ks)); /* a keyspace handle: the store stays open */
  OK(cairn_get(db, (const uint8_t *)"a", 1, buf, sizeof buf, &len));
  OK(cairn_close(db));
}

/* cairn_transact: a counter bumped by two threads, each bump read-modify-write in a
 * transaction that conflicts with the other thread's and is run again; then a function
 * that refuses (rolled back, its status returned) and one that tries to commit itself. */
struct bumps {
  cairn_db *db;
  int runs; /* calls of the function, retries included */
};

static cairn_status bump(cairn_txn *tx, void *ctx) {
  struct bumps *b = ctx;
  b->runs++;
  uint64_t n = 0;
  size_t len = 0;
  cairn_status s = cairn_txn_get(tx, (const uint8_t *)"hits", 4, (uint8_t *)&n, sizeof n, &len);
  if (s != CAIRN_OK && s != CAIRN_NOT_FOUND) return s;
  n++;
  return cairn_txn_put(tx, (const uint8_t *)"hits", 4, (const uint8_t *)&n, sizeof n);
}

static void *bumper(void *arg) {
  for (int i = 0; i < 500; i++)
    if (cairn_transact(((struct bumps *)arg)->db, bump, arg) != CAIRN_OK) return "transact";
  return NULL;
}

static cairn_status refuse(cairn_txn *tx, void *ctx) {
  (void)ctx;
  cairn_status s = cairn_txn_put(tx, (const uint8_t *)"hits", 4, (const uint8_t *)"x", 1);
  return s != CAIRN_OK ? s : CAIRN_NOT_FOUND;
}

static cairn_status commit_itself(cairn_txn *tx, void *ctx) {
  *(cairn_status *)ctx = cairn_txn_commit(tx);
  return cairn_txn_rollback(tx);
}

static void transact(const char *dir) {
  cairn_db *db = open_db(dir);
  struct bumps b[2] = {{db, 0}, {db, 0}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, bumper, &b[i]);
  for (int i = 0; i < 2; i++) {
    void *r;
    pthread_join(t[i], &r);
    CHECK(r == NULL, "bumper %d", i);
  }
  uint64_t n = 0;
  size_t len = 0;
  OK(cairn_get(db, (const uint8_t *)"hits", 4, (uint8_t *)&n, sizeof n, &len));
  CHECK(len == 8 && n == 1000, "two threads bumped to %llu (1000 bumps)", (unsigned long long)n);
  printf("cairn_transact: 1000 bumps took %d runs of the function\n", b[0].runs + b[1].runs);
  cairn_status s = cairn_transact(db, refuse, NULL);
  CHECK(s == CAIRN_NOT_FOUND && strstr(cairn_last_error(), "rolled back") != NULL,
        "a refusing function: %s", cairn_status_name(s));
  OK(cairn_get(db, (const uint8_t *)"hits", 4, (uint8_t *)&n, sizeof n, &len));
  CHECK(len == 8 && n == 1000, "nothing written by a refused transaction");
  cairn_status inner = CAIRN_OK;
  s = cairn_transact(db, commit_itself, &inner);
  CHECK(inner == CAIRN_INVALID_ARGUMENT && s == CAIRN_INVALID_ARGUMENT,
        "a function that commits: %s, then %s", cairn_status_name(inner), cairn_status_name(s));
  CHECK(cairn_transact(db, NULL, NULL) == CAIRN_INVALID_ARGUMENT, "null function");
  OK(cairn_close(db));
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s DIR SEED STEPS\n", argv[0]);
    return 2;
  }
  char a[4096], b[4096], c[4096], d[4096];
  snprintf(a, sizeof a, "%s/model", argv[1]);
  snprintf(b, sizeof b, "%s/errors", argv[1]);
  snprintf(c, sizeof c, "%s/more", argv[1]);
  snprintf(d, sizeof d, "%s/transact", argv[1]);
  rng = strtoull(argv[2], NULL, 10) * 2654435761u + 1;
  printf("cairn %s, seed %s\n", cairn_version(), argv[2]);
  model_test(a, atoi(argv[3]));
  errors_and_threads(b);
  keyspaces_txns_files(c);
  transact(d);
  printf("%d passed, 0 failed\n", checks);
  return 0;
}
