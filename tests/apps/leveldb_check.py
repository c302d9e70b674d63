"""LevelDB (through plyvel) workload of tests/apps/leveldb.sh.

usage: /usr/bin/python3 leveldb_check.py DB_DIR N

Runs a deterministic workload (batched puts, overwrites, deletes, single
puts, with small memtables so that it makes many table files and
compactions) with paranoid_checks=True, checking every read against an
in-memory model; closes, reopens, checks again, compacts the whole range,
reopens once more; every iteration uses verify_checksums=True. Prints the
number of pairs and a digest of all of them (key order), which the shell
script compares with the plain run. Exits non-zero on any mismatch.
"""
import hashlib
import random
import sys

import plyvel

path, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(20240607)
opts = dict(paranoid_checks=True, write_buffer_size=256 * 1024, max_file_size=512 * 1024,
            block_size=4096, compression=None)
model = {}
errors = 0


def err(msg):
    global errors
    errors += 1
    if errors <= 20:
        print("MISMATCH:", msg)


def key(i):
    return b"key%08d" % i


def value(i, gen):
    r = random.Random(i * 1000003 + gen)
    return (b"%d:%d:" % (i, gen)) + r.randbytes(r.randrange(0, 900))


def check_all(db, label):
    seen = 0
    h = hashlib.sha256()
    it = db.iterator(verify_checksums=True, fill_cache=False)
    prev = None
    for k, v in it:
        if prev is not None and k <= prev:
            err("%s: iteration out of order at %r" % (label, k))
        prev = k
        if model.get(k) != v:
            err("%s: %r has %d bytes, model %s" % (label, k, len(v),
                                                  None if k not in model else len(model[k])))
        h.update(b"%d:" % len(k) + k + b"%d:" % len(v) + v)
        seen += 1
    if seen != len(model):
        err("%s: %d pairs iterated, model has %d" % (label, seen, len(model)))
    # Point reads, also of deleted keys.
    for i in rng.sample(range(n), min(n, 2000)):
        k = key(i)
        got = db.get(k, verify_checksums=True)
        if got != model.get(k):
            err("%s: get(%r)" % (label, k))
    # Reverse iteration over a range.
    lo, hi = key(n // 4), key(n // 2)
    rev = [k for k, _ in db.iterator(start=lo, stop=hi, reverse=True, verify_checksums=True)]
    want = sorted((k for k in model if lo <= k < hi), reverse=True)
    if rev != want:
        err("%s: reverse range iteration differs (%d vs %d keys)" % (label, len(rev), len(want)))
    return seen, h.hexdigest()


def mutate(put, delete, delete_share, gen):
    """One put or delete of a random key through put/delete, kept in the model."""
    i = rng.randrange(n)
    if rng.random() < delete_share:
        delete(key(i))
        model.pop(key(i), None)
    else:
        v = value(i, gen)
        put(key(i), v)
        model[key(i)] = v


db = plyvel.DB(path, create_if_missing=True, error_if_exists=True, **opts)
gen = 0
# Phase 1: batched puts of random keys (with overwrites), some deletes in
# the same batches.
for b in range(n // 500):
    gen += 1
    with db.write_batch(sync=(b % 16 == 0)) as wb:
        for _ in range(500):
            mutate(wb.put, wb.delete, 0.1, gen)
# Phase 2: a snapshot, then single overwrites and deletes; the snapshot
# must still see the old state.
snap_model = dict(model)
snap = db.snapshot()
for _ in range(n // 4):
    gen += 1
    mutate(lambda k, v: db.put(k, v, sync=(gen % 1000 == 0)), db.delete, 0.3, gen)
snap_seen = dict(snap.iterator(verify_checksums=True))
if snap_seen != snap_model:
    err("snapshot view differs from the model at snapshot time")
snap.close()
# Phase 3: delete a whole range.
with db.write_batch() as wb:
    for k in [k for k in model if key(n // 10) <= k < key(n // 5)]:
        wb.delete(k)
        del model[k]
r1 = check_all(db, "before close")
db.close()

db = plyvel.DB(path, **opts)
r2 = check_all(db, "reopened")
db.compact_range()
prop = db.get_property(b"leveldb.num-files-at-level0")
db.close()
db = plyvel.DB(path, **opts)
r3 = check_all(db, "compacted, reopened")
db.close()
if not (r1 == r2 == r3):
    err("digests differ between phases: %s %s %s" % (r1, r2, r3))
print("pairs", r3[0], "digest", r3[1], "level0 files after compact_range", prop.decode())
if errors:
    print("%d mismatches" % errors)
    sys.exit(1)
