#!/usr/bin/env python3
# Two mounts A and B of one cluster: N creates through A, stats in random order through
# A and B (twice each), unlinks through A of half the files (B holds leases on them),
# then 2,000 files stated one at a time 6.5 s after they were made (each stat reaches a
# server once the lease of the default 5 s is out). Used by bench-cluster-leases.sh.
# usage: cluster-leases-work.py MNT_A MNT_B N
import os, sys, time, random
a, b, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
da, db = os.path.join(a, "w"), os.path.join(b, "w")
os.makedirs(da, exist_ok=True)
names = ["f%06d" % i for i in range(n)]
def rate(label, f, xs):
    t = time.perf_counter()
    for x in xs: f(x)
    dt = time.perf_counter() - t
    print("%-28s %9.0f /s" % (label, len(xs) / dt), flush=True)
def create(p):
    fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644); os.close(fd)
rate("create (A)", create, [os.path.join(da, x) for x in names])
r = names[:]; random.shuffle(r)
rate("stat random, after (A)", os.lstat, [os.path.join(da, x) for x in r])
random.shuffle(r)
rate("stat random, again (A)", os.lstat, [os.path.join(da, x) for x in r])
rate("stat random, first (B)", os.lstat, [os.path.join(db, x) for x in r])
random.shuffle(r)
rate("stat random, again (B)", os.lstat, [os.path.join(db, x) for x in r])
half = n // 2
rate("unlink (A), B holds", os.unlink, [os.path.join(da, x) for x in names[:half]])
# stats that must reach a server: names created, then the kernel's time has run out
m = 2000
d2 = os.path.join(a, "lat"); os.makedirs(d2, exist_ok=True)
ps = [os.path.join(d2, "g%05d" % i) for i in range(m)]
for p in ps: create(p)
time.sleep(6.5)
random.shuffle(ps); t = []
for p in ps:
    s = time.perf_counter(); os.lstat(p); t.append(time.perf_counter() - s)
t.sort()
print("stat reaching a server p50 %.0f µs p90 %.0f p99 %.0f" % (t[len(t)//2]*1e6, t[int(len(t)*.9)]*1e6, t[int(len(t)*.99)]*1e6), flush=True)
