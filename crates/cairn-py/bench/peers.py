"""cairn from Python against plyvel (LevelDB), lmdb and rocksdict (RocksDB), and against
cairn's own Rust API: HaloDB's workload (N records, 8-byte keys, 100-byte values): a fill
in random key order, then N point reads at random keys, one thread, one call per
operation, nothing synced until the fill's end; then the same reads in calls of 64
keys through each engine's batched read where it has one (cairn `get_many`, lmdb
`Cursor.getmulti`, rocksdict's `get` of a list: RocksDB's `MultiGet`). The timed loops
call each engine's own bound method (lmdb's: the `get` of a read transaction begun after
the fill), no Python function in between. Engines run
interleaved, each repetition in a fresh directory. `scripts/bench-python.sh` installs the peers and runs this.

usage: peers.py [--records N] [--reps R] [--dir D] [--rust-bin keylist] [--engines ...]
"""

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

VALUE = bytes(random.Random(7).randrange(256) for _ in range(100))


BATCH = 64  # keys per call of the batched reads


def cairn_engine(path):
    import cairn

    db = cairn.Db(path)
    return db.put, (lambda: db.get), db.get_many, db.flush, db.close


def plyvel_engine(path):
    import plyvel

    db = plyvel.DB(path, create_if_missing=True)
    return db.put, (lambda: db.get), None, (lambda: None), db.close


def lmdb_engine(path):
    import lmdb

    env = lmdb.open(path, map_size=8 << 30, sync=False, metasync=False, writemap=True)

    def put(k, v):
        with env.begin(write=True) as txn:
            txn.put(k, v)

    readers = []

    def getter():
        # One read transaction for the whole read phase, begun after the fill, as lmdb
        # users read: its bound `get` is called directly, as every other engine's is.
        readers.append(env.begin())
        return readers[-1].get

    def get_many(keys):
        # lmdb's own batched read: `Cursor.getmulti`, (key, value) pairs of those found.
        if len(readers) < 2:
            readers.append(env.begin())
            readers.append(readers[-1].cursor())
        return [v for _, v in readers[-1].getmulti(keys)]

    def close():
        for r in readers:
            if hasattr(r, "abort"):
                r.abort()
        env.close()

    return put, getter, get_many, env.sync, close


def rocksdict_engine(path):
    import rocksdict

    db = rocksdict.Rdict(path)
    # `get` of a list is RocksDB's `MultiGet`.
    return db.put, (lambda: db.get), db.get, db.flush, db.close


ENGINES = {"cairn": cairn_engine, "plyvel": plyvel_engine, "lmdb": lmdb_engine,
           "rocksdict": rocksdict_engine}


def run(name, path, keys, reads):
    put, getter, get_many, flush, close = ENGINES[name](path)
    t = time.perf_counter()
    for k in keys:
        put(k, VALUE)
    flush()
    fill = len(keys) / (time.perf_counter() - t)
    get = getter()
    t = time.perf_counter()
    for k in reads:
        if get(k) is None:
            raise AssertionError(f"{name}: missing key")
    read = len(reads) / (time.perf_counter() - t)
    many = None
    if get_many is not None:
        t = time.perf_counter()
        for i in range(0, len(reads), BATCH):
            values = get_many(reads[i:i + BATCH])
            if len(values) != len(reads[i:i + BATCH]) or None in values:
                raise AssertionError(f"{name}: missing key in a batch")
        many = len(reads) / (time.perf_counter() - t)
    close()
    return fill, read, many


def rust(binary, records, cwd):
    """The keylist example (crates/cairn/examples): the same fill, then gets and batched
    gets walking a list of key objects, as this loop does: its three rates."""
    out = subprocess.run([binary, str(records), str(BATCH), "1"], cwd=cwd,
                         capture_output=True, text=True, check=True).stdout
    rates = {}
    for line in out.splitlines():
        for label, name in [("fill random", "fill"), ("get list", "read"),
                            ("get_many list", "many")]:
            if line.startswith(label + " "):
                rates[name] = float(line.split("ops/s")[0].split()[-1])
    return rates["fill"], rates["read"], rates["many"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default=".")
    ap.add_argument("--rust-bin")
    ap.add_argument("--engines", default="cairn,plyvel,lmdb,rocksdict")
    a = ap.parse_args()
    rng = random.Random(1)
    keys = [k.to_bytes(8, "big") for k in range(a.records)]
    rng.shuffle(keys)
    reads = [keys[rng.randrange(a.records)] for _ in range(a.records)]
    names = a.engines.split(",") + (["cairn (Rust API)"] if a.rust_bin else [])
    results = {n: [] for n in names}
    for rep in range(a.reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            path = os.path.join(a.dir, f"peers-{name.split()[0]}-{os.getpid()}")
            shutil.rmtree(path, ignore_errors=True)
            os.makedirs(path)
            if name == "cairn (Rust API)":
                r = rust(a.rust_bin, a.records, path)
            else:
                r = run(name, path, keys, reads)
            shutil.rmtree(path, ignore_errors=True)
            results[name].append(r)
            many = f"{r[2]:>10,.0f}" if r[2] else f"{'-':>10}"
            print(f"rep {rep + 1} {name:<17} puts/s {r[0]:>10,.0f}  gets/s {r[1]:>10,.0f}  "
                  f"batched gets/s {many}", flush=True)
    print(f"\nmedian of {a.reps}, {a.records:,} records, 8-byte keys, 100-byte values, "
          f"Python {sys.version.split()[0]}")
    print(f"{'engine':<17} {'puts/s':>10} {'gets/s':>10} {'batched':>10}")
    for name, rs in results.items():
        fill = statistics.median(r[0] for r in rs)
        read = statistics.median(r[1] for r in rs)
        many = [r[2] for r in rs if r[2]]
        many = f"{statistics.median(many):>10,.0f}" if many else f"{'-':>10}"
        print(f"{name:<17} {fill:>10,.0f} {read:>10,.0f} {many}")


if __name__ == "__main__":
    main()
