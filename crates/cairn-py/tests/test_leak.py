"""No leak over a million calls: the process's anonymous resident memory (RssAnon; the
store's mapped segment files are not counted) stays flat.
CAIRN_PY_LEAK_CALLS sets the number of calls (default 1,000,000)."""

import os

import cairn


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise RuntimeError("no RssAnon")


def test_rss_flat_over_a_million_calls(db):
    calls = int(os.environ.get("CAIRN_PY_LEAK_CALLS", "1000000"))
    keys = [b"%04d" % i for i in range(1000)]
    for k in keys:
        db.put(k, b"v" * 100)

    def run(n):
        get, put = db.get, db.put
        for i in range(n // 4):
            k = keys[i % 1000]
            get(k)
            get(b"missing")
            put(k, b"w" * 100)
            k in db

    run(min(calls, 200_000))  # warm up: allocator pools, index growth
    before = rss_kib()
    run(calls)
    after = rss_kib()
    for _ in range(1000):
        list(db.prefix(b"0"))
        cairn.WriteBatch().put(b"a", b"b")
    print(f"RSS {before} KiB before {calls} calls, {after} KiB after")
    assert after - before < 8 * 1024, (before, after)
