#!/usr/bin/env python3
"""Reads lines of `KEY... name=value...` (the first N fields are the key, N the argument) and
prints, per key in first-seen order, each name's median with its range over the lines of that
key: `KEY... | name median (min-max) ...`. Used by the fair-share sweeps."""
import statistics
import sys

keys = int(sys.argv[1])
rows = {}
for line in sys.stdin:
    f = line.split()
    key = tuple(f[:keys])
    for kv in f[keys:]:
        k, v = kv.split("=")
        rows.setdefault(key, {}).setdefault(k, []).append(float(v))
for key, m in rows.items():
    cells = " ".join(
        "%s %.1f (%.1f-%.1f)" % (k, statistics.median(v), min(v), max(v)) for k, v in m.items()
    )
    print(" ".join(key), "|", cells)
