"""Snapshots and transactions: a snapshot sees the past while writes go on; write skew
lets exactly one of two transactions commit; a conflict writes nothing; the context
managers commit, roll back and release."""

import threading

import pytest

import cairn


def test_snapshot_sees_the_past_while_writes_go_on(db):
    for i in range(200):
        db.put(b"k%03d" % i, b"old")
    with db.snapshot() as snap:
        seq = snap.seq
        stop = threading.Event()

        def writer():
            n = 0
            while not stop.is_set():
                db.put(b"k%03d" % (n % 300), b"new%d" % n)
                db.delete(b"k%03d" % ((n * 7) % 200))
                n += 1

        t = threading.Thread(target=writer)
        t.start()
        try:
            for _ in range(5):
                items = list(snap)
                assert items == [(b"k%03d" % i, b"old") for i in range(200)]
                assert [k for k, _ in snap.range(b"k010", b"k020", reverse=True)] == [
                    b"k%03d" % i for i in range(19, 9, -1)
                ]
                assert len(list(snap.prefix(b"k1"))) == 100
                assert snap.get(b"k005") == b"old" and snap[b"k199"] == b"old"
                assert b"k250" not in snap and snap.get(b"k250", 1) == 1
                with pytest.raises(KeyError):
                    snap[b"k250"]
        finally:
            stop.set()
            t.join()
        assert snap.seq == seq
        assert db.get(b"k250") is not None or db.get(b"k000") != b"old"
    with pytest.raises(cairn.Closed):
        snap.get(b"k000")
    snap.release()  # twice is allowed


def test_snapshot_of_a_keyspace_and_iterators_outlive_it(db):
    ks = db.keyspace(9)
    ks.put(b"a", b"1")
    db.put(b"a", b"0")
    snap = ks.snapshot()
    assert snap.id == 9 and snap.keyspace(0).get(b"a") == b"0"
    it = iter(snap)
    ks.put(b"b", b"2")
    snap.release()
    assert list(it) == [(b"a", b"1")]


def test_write_skew_lets_exactly_one_commit(db):
    db.put(b"x", b"1")
    db.put(b"y", b"1")
    t1, t2 = db.transaction(), db.transaction()
    # Each checks that the two sum to at least 1, then zeroes its own.
    for tx, mine in ((t1, b"x"), (t2, b"y")):
        assert int(tx[b"x"]) + int(tx[b"y"]) >= 1
        tx[mine] = b"0"
    outcomes = []
    for tx in (t1, t2):
        try:
            tx.commit()
            outcomes.append("ok")
        except cairn.Conflict:
            outcomes.append("conflict")
    assert sorted(outcomes) == ["conflict", "ok"]
    assert int(db[b"x"]) + int(db[b"y"]) == 1
    assert not t1.active and not t2.active


def test_conflict_writes_nothing(db):
    db.put(b"a", b"1")
    tx = db.transaction()
    assert tx.get(b"a") == b"1"
    tx.put(b"a", b"2")
    tx.put(b"b", b"2")
    tx.put_new(b"c", b"2")
    tx.delete(b"zz")
    assert [k for k, _ in tx] == [b"a", b"b", b"c"]
    db.put(b"a", b"other")
    with pytest.raises(cairn.Conflict):
        tx.commit()
    assert db.get(b"a") == b"other" and b"b" not in db and b"c" not in db
    with pytest.raises(cairn.Closed):
        tx.put(b"d", b"1")
    with pytest.raises(cairn.Closed):
        tx.commit()


def test_a_range_read_conflicts_with_an_insert_into_it(db):
    tx = db.transaction()
    assert list(tx.prefix(b"p/")) == []
    tx.put(b"count", b"0")
    db.put(b"p/1", b"x")
    with pytest.raises(cairn.Conflict):
        tx.commit()


def test_context_manager_commits_or_rolls_back(db):
    with db.transaction() as tx:
        tx[b"a"] = b"1"
        assert tx[b"a"] == b"1" and b"a" in tx and b"a" not in db
    assert db[b"a"] == b"1"
    with pytest.raises(RuntimeError):
        with db.transaction() as tx:
            tx[b"b"] = b"1"
            del tx[b"a"]
            raise RuntimeError("stop")
    assert b"b" not in db and db[b"a"] == b"1"
    assert not tx.active
    with db.transaction() as tx:  # committed inside: the end of the block leaves it
        tx.put(b"c", b"1")
        tx.commit()
    assert db[b"c"] == b"1"
    with pytest.raises(cairn.KeyExists):
        with db.transaction() as tx:
            tx.put_new(b"c", b"2")
    assert db[b"c"] == b"1"


def test_transact_retries_on_conflict_until_it_commits(db):
    db.put(b"n", b"0")
    threads, per = 4, 50

    def bump(tx):
        tx[b"n"] = b"%d" % (int(tx[b"n"]) + 1)

    def work():
        for _ in range(per):
            db.transact(bump)

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert int(db[b"n"]) == threads * per
    assert db.keyspace(5).transact(lambda tx: tx.put(b"k", b"v") or 7) == 7
    assert db.keyspace(5)[b"k"] == b"v"


def test_transact_lets_other_errors_through_and_writes_nothing(db):
    def fail(tx):
        tx.put(b"a", b"1")
        raise ValueError("no")

    with pytest.raises(ValueError):
        db.transact(fail)
    assert b"a" not in db
