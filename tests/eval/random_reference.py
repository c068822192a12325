"""CPython's random.Random draws, for test_py_random.cpp.

Usage: random_reference.py SPEC.json OUT.json. SPEC: {"seeds": [...], "samples": [[n, k], ...]}.
For each seed, on one Random(seed) in this order: random() x3, getrandbits(k) for k in
1, 17, 32, 33, 64, _randbelow(1000) and _randbelow(2**40 + 3), shuffle(list(range(10))), then
sample(range(n), k) for each [n, k].
"""
import json
import random
import sys

spec = json.load(open(sys.argv[1]))
out = []
for seed in spec["seeds"]:
    r = random.Random(seed)
    d = {"random": [r.random() for _ in range(3)],
         "bits": [r.getrandbits(k) for k in (1, 17, 32, 33, 64)],
         "below": [r._randbelow(1000), r._randbelow(2**40 + 3)]}
    x = list(range(10))
    r.shuffle(x)
    d["shuffle"] = x
    d["samples"] = [r.sample(range(n), k) for n, k in spec["samples"]]
    out.append(d)
json.dump(out, open(sys.argv[2], "w"))
