#!/usr/bin/env python3
"""HyperQueue on the same measurement as `hetsched bench-dispatch`: N tasks running `true` through one
server and two workers on this machine, timed from submission to the last task's completion.

Uses HyperQueue's own Python package (PyPI `hyperqueue`, which embeds the server and workers):
    python3 -m venv /tmp/hqvenv && /tmp/hqvenv/bin/pip install hyperqueue==0.27.0
    /tmp/hqvenv/bin/python scripts/bench_hyperqueue.py --tasks 10000 --cores 4
"""
import argparse
import tempfile
import time
from pathlib import Path

from hyperqueue import Job, LocalCluster
from hyperqueue.cluster import WorkerConfig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--cores", type=int, default=4, help="cores (task slots) per worker")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, LocalCluster(server_dir=d) as cluster:
        for _ in range(args.workers):
            cluster.start_worker(WorkerConfig(cores=args.cores))
        client = cluster.client()
        job = Job()
        for _ in range(args.tasks):
            # No stdout/stderr files, as hetsched creates none for a silent task.
            job.program(["true"], stdout=None, stderr=None)
        start = time.perf_counter()
        submitted = client.submit(job)
        client.wait_for_jobs([submitted])
        elapsed = time.perf_counter() - start
    print(f"hyperqueue: {args.tasks} x true, {args.workers} workers x {args.cores} cores: "
          f"{elapsed:.2f} s, {args.tasks / elapsed:.0f} tasks/s")


if __name__ == "__main__":
    main()
