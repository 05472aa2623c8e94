"""The instructions of a one-key get, cairn against lmdb, where the VM has no hardware
counters: fills a store of N records (8-byte keys in random order, 100-byte values),
then makes G gets at random keys through the engine's bound `get`. Run it under
callgrind with G = 0 and G > 0; the difference of the totals over G, or the inclusive
count of the get's entry point (cairn `__pymethod_get__`, lmdb `trans_get`), is the
cost of a get (docs/benchmarks/python.md):

  valgrind --tool=callgrind --callgrind-out-file=cg-cairn-G.out \\
      python get_cost.py cairn N G DIR
  callgrind_annotate --inclusive=yes cg-cairn-G.out

usage: get_cost.py cairn|lmdb N G DIR
"""

import os
import random
import shutil
import sys


def main():
    engine, n, g, base = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    path = os.path.join(base, f"get-cost-{engine}-{g}")
    value = bytes(random.Random(7).randrange(256) for _ in range(100))
    rng = random.Random(1)
    keys = [k.to_bytes(8, "big") for k in range(n)]
    rng.shuffle(keys)
    reads = [keys[rng.randrange(n)] for _ in range(g)]
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    if engine == "cairn":
        import cairn

        db = cairn.Db(path)
        for k in keys:
            db.put(k, value)
        db.flush()
        get = db.get
    else:
        import lmdb

        env = lmdb.open(path, map_size=1 << 30, sync=False, metasync=False, writemap=True)
        for k in keys:
            with env.begin(write=True) as t:
                t.put(k, value)
        get = env.begin().get
    for k in reads:
        if get(k) is None:
            raise AssertionError("missing key")
    shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
