/* The C API against a model: random puts, deletes, batches and reads on a store and on
 * an array of what each key should hold, reopening now and then, every read and scan
 * compared with the model. Then error codes, the caller-buffer protocol, two threads at
 * once, and (built with -DCAIRN_TEST_HOOKS) a panic inside the library coming back as
 * CAIRN_PANIC. Usage: model DIR SEED STEPS. Prints "N passed, 0 failed" at the end. */
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
    } else if (op < 93) {
      int lo = next() % KEYS, hi = lo + next() % (KEYS - lo + 1);
      check_scan(db, lo, hi, next() % 2);
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
      OK(cairn_close(db));
      db = open_db(dir);
      for (int j = 0; j < KEYS; j++) check_get(db, j);
    }
  }
  check_scan(db, 0, KEYS, 0);
  check_scan(db, 0, KEYS, 1);
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

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s DIR SEED STEPS\n", argv[0]);
    return 2;
  }
  char a[4096], b[4096];
  snprintf(a, sizeof a, "%s/model", argv[1]);
  snprintf(b, sizeof b, "%s/errors", argv[1]);
  rng = strtoull(argv[2], NULL, 10) * 2654435761u + 1;
  printf("cairn %s, seed %s\n", cairn_version(), argv[2]);
  model_test(a, atoi(argv[3]));
  errors_and_threads(b);
  printf("%d passed, 0 failed\n", checks);
  return 0;
}
