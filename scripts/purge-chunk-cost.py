#!/usr/bin/env python3
"""What one purge step costs by its size: on copies of a store holding many purged-to-be task
rows (KEEP_STORE of scripts/measure-purge-wait.sh), deletes task rows by id range in steps of
each size, as the server's purger does (one transaction per step, then the freed pages given
back and the WAL checkpointed), and prints the median and longest step and the rate.

    KEEP_STORE=/tmp/store scripts/measure-purge-wait.sh target/release/hetsched 100 50000
    scripts/purge-chunk-cost.py [--checkpoint-at-end] /tmp/store 10000 50000 200000 1000000
"""
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time

args = sys.argv[1:]
# --checkpoint-at-end: the WAL is truncated after the last step only (SQLite's automatic
# checkpoints still run), not after each.
at_end = "--checkpoint-at-end" in args
args = [a for a in args if a != "--checkpoint-at-end"]
src = args[0]
sizes = [int(a) for a in args[1:]] or [10_000, 50_000, 200_000, 1_000_000]
for size in sizes:
    with tempfile.TemporaryDirectory() as d:
        for name in os.listdir(src):
            shutil.copy(os.path.join(src, name), d)
        c = sqlite3.connect(os.path.join(d, "state.db"), isolation_level=None)
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA synchronous=NORMAL")
        lo, hi = c.execute("SELECT MIN(id), MAX(id) + 1 FROM tasks").fetchone()
        steps = []
        rows = 0
        nxt = lo
        # At most 2 million rows a size: enough steps for a median.
        while nxt < hi and rows < 2_000_000:
            upto = min(nxt + size, hi)
            t0 = time.perf_counter()
            c.execute("BEGIN")
            c.execute("DELETE FROM tasks WHERE id >= ? AND id < ?", (nxt, upto))
            c.execute("COMMIT")
            c.execute("PRAGMA incremental_vacuum").fetchall()
            if not at_end:
                c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            steps.append(time.perf_counter() - t0)
            rows += upto - nxt
            nxt = upto
        t0 = time.perf_counter()
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        last = time.perf_counter() - t0
        c.close()
        print(
            f"{'checkpoint at the end' if at_end else 'checkpoint each step'}: "
            f"final checkpoint {last * 1000:.0f} ms; "
            f"steps of {size}: {len(steps)} steps, median {statistics.median(steps) * 1000:.0f} ms, "
            f"longest {max(steps) * 1000:.0f} ms, {rows / sum(steps) / 1e6:.2f} M rows/s"
        )
