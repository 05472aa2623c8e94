"""The model test of the Rust API, in spirit: random operations on a store and on a
dict, reopening now and then, every read and scan compared with the dict."""

import random

import pytest

import cairn

KEYS = [b"k%03d" % i for i in range(150)] + [b"", b"\x00", b"\xff\xff", b"k"]


def check(db, model):
    assert len(db) == len(model)
    assert list(db) == sorted(model.items())
    for k in KEYS:
        assert db.get(k) == model.get(k)
        assert (k in db) == (k in model)


def scan_model(model, lo, hi, reverse):
    items = sorted((k, v) for k, v in model.items() if (lo is None or k >= lo) and (hi is None or k < hi))
    return items[::-1] if reverse else items


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_operations_match_a_dict(path, seed):
    rng = random.Random(seed)
    model = {}
    db = cairn.Db(path, shards=4, segment_size=32 << 10)
    try:
        for _ in range(2000):
            op = rng.random()
            k = rng.choice(KEYS)
            if op < 0.35:
                v = rng.randbytes(rng.randrange(0, 200))
                if rng.random() < 0.5:
                    db.put(k, v)
                else:
                    db[k] = memoryview(v)
                model[k] = v
            elif op < 0.45:
                if rng.random() < 0.5:
                    db.delete(k)
                    model.pop(k, None)
                elif k in model:
                    del db[k]
                    del model[k]
                else:
                    with pytest.raises(KeyError):
                        del db[k]
            elif op < 0.55:
                v = rng.randbytes(8)
                if k in model:
                    with pytest.raises(cairn.KeyExists):
                        db.put_new(k, v)
                else:
                    db.put_new(k, v)
                    model[k] = v
            elif op < 0.65:
                batch = cairn.WriteBatch()
                after = dict(model)
                for _ in range(rng.randrange(1, 8)):
                    bk = rng.choice(KEYS)
                    if rng.random() < 0.3:
                        batch.delete(bk)
                        after.pop(bk, None)
                    else:
                        bv = rng.randbytes(rng.randrange(0, 50))
                        batch.put(bk, bv)
                        after[bk] = bv
                assert len(batch) > 0
                db.write(batch)
                assert len(batch) == 0
                model = after
            elif op < 0.8:
                if k in model:
                    assert db[k] == model[k]
                else:
                    with pytest.raises(KeyError):
                        db[k]
                    assert db.get(k, b"default") == b"default"
                if rng.random() < 0.3:
                    ks = [rng.choice(KEYS) for _ in range(rng.randrange(0, 6))]
                    assert db.get_many(ks) == [model.get(x) for x in ks]
            elif op < 0.9:
                lo, hi = sorted([rng.choice(KEYS), rng.choice(KEYS)])
                lo = None if rng.random() < 0.2 else lo
                hi = None if rng.random() < 0.2 else hi
                reverse = rng.random() < 0.5
                assert list(db.range(lo, hi, reverse=reverse)) == scan_model(model, lo, hi, reverse)
            elif op < 0.95:
                p = k[:2]
                reverse = rng.random() < 0.5
                want = sorted((a, b) for a, b in model.items() if a.startswith(p))
                assert list(db.prefix(p, reverse=reverse)) == (want[::-1] if reverse else want)
            elif op < 0.96:
                db.close()
                db = cairn.Db(path)
                check(db, model)
            elif op < 0.993:
                assert (k in db) == (k in model)
            else:
                db.flush()
                db.compact()
        check(db, model)
    finally:
        db.close()


def test_get_many(db):
    db.put(b"a", b"1")
    db.keyspace(3).put(b"b", b"3")
    long_key = b"x" * (cairn.MAX_KEY_LEN + 1)
    got = db.get_many(iter([b"a", memoryview(b"b"), bytearray(b"a"), long_key, b""]))
    assert got == [b"1", None, b"1", None, None]
    assert db.keyspace(3).get_many((b"a", b"b")) == [None, b"3"]
    assert db.get_many([]) == []
    with pytest.raises(TypeError):
        db.get_many([b"a", "a"])


def test_keyspaces_are_separate(db):
    a, b = db.keyspace(7), db.keyspace(8)
    a[b"k"] = b"in 7"
    b.put(b"k", b"in 8")
    db[b"k"] = b"in 0"
    assert (a[b"k"], b[b"k"], db[b"k"]) == (b"in 7", b"in 8", b"in 0")
    assert (a.id, b.id, db.id) == (7, 8, 0)
    assert len(a) == 1 and list(a) == [(b"k", b"in 7")]
    batch = cairn.WriteBatch().put(b"x", b"1").delete(b"k")
    a.write(batch)
    assert list(a) == [(b"x", b"1")] and db[b"k"] == b"in 0"
    stats = db.stats()
    assert {k["keyspace"] for k in stats["keyspaces"]} >= {0, 7, 8}


def test_iteration_is_lazy(db):
    for i in range(1000):
        db.put(b"%04d" % i, b"v")
    it = iter(db)
    assert next(it) == (b"0000", b"v")
    db.put(b"9999", b"late")  # written after the scan began, ahead of it: seen
    assert list(it)[-1] == (b"9999", b"late")


def test_values_are_bytes_and_buffers_are_accepted(db):
    db.put(bytearray(b"a"), memoryview(b"xyz")[1:])
    assert db.get(b"a") == b"yz" and type(db.get(b"a")) is bytes
    with pytest.raises(TypeError):
        db.put("str key", b"v")
    with pytest.raises(TypeError):
        db.put(b"k", 3)


def test_stats_flush_compact_reclaim(db):
    for i in range(500):
        db.put(b"%d" % i, b"x" * 100)
    for i in range(400):
        db.delete(b"%d" % i)
    db.flush()
    stats = db.stats()
    assert stats["total"]["keys"] == 100
    assert stats["keyspaces"][0]["keys"] == 100
    r = db.reclaim()
    assert set(r) == {"rotated", "segments", "bytes"}
    db.compact()
    assert len(db) == 100
