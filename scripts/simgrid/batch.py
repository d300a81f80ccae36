#!/usr/bin/env python3
"""hetsched's batch runs and SimGrid's replay of them (scripts/simgrid-batch.sh).

    batch.py replay-input CLUSTER.toml WORKLOAD.toml RESULT.json TASKS.txt [--chunks K]
        The plain text batch_replay.cpp reads: every node's disk read bandwidth, then every task of
        `hetsched sim run --out DIR` (DIR/result.json) on its node at its start, with what it reads
        and computes by the model of crates/sim/src/batch.rs: a CPU task reads its split in K chunks
        (default 8, `--cpu-read-chunks`), each followed by compute/(K·core_speed); a GPU task reads its
        split, copies, and computes compute/speed.
    batch.py compare RESULT.json REPLAY.out TASKS.txt
        One table row: tasks, both makespans, their relative difference, the largest absolute
        difference of a task's end, and how far each simulator's ends are from the exact ones: the
        same replay in rational arithmetic (`fractions`), every node's disk shared exactly.
    batch.py sensitivity TASKS.txt NODE
        How ill-conditioned the exact replay is on NODE: the largest change of any exact end on that
        node when its first task starts 1 ns later.
"""
import heapq
import json
import re
import sys
import tomllib
from fractions import Fraction

UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "min": 60, "h": 3600}


def size(value):
    if isinstance(value, (int, float)):
        return float(value)
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([A-Za-z]*)(/s)?\s*", value)
    if not m or m.group(2).lower() not in UNITS:
        sys.exit(f"cannot read the size `{value}`")
    return float(m.group(1)) * UNITS[m.group(2).lower()]


def seconds(value):
    if isinstance(value, (int, float)):
        return float(value)
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([a-z]+)\s*", value)
    if not m or m.group(2) not in SECONDS:
        sys.exit(f"cannot read the duration `{value}`")
    return float(m.group(1)) * SECONDS[m.group(2)]


def nodes_of(cluster):
    nodes = []
    for n in cluster["node"]:
        speeds = {a.get("speed", 1.0) for a in n.get("accelerator", [])}
        if len(speeds) > 1:
            sys.exit(f'node {n["name"]}: devices of different speeds (the replay needs one speed per node)')
        for _ in range(n.get("count", 1)):
            nodes.append({
                "disk": size(n["disk_read"]),
                "core_speed": float(n.get("core_speed", 1.0)),
                "gpu_speed": speeds.pop() if speeds else 1.0,
            })
            speeds = {a.get("speed", 1.0) for a in n.get("accelerator", [])}
    return nodes


def replay_input(cluster_path, workload_path, result_path, out, chunks):
    with open(cluster_path, "rb") as f:
        nodes = nodes_of(tomllib.load(f))
    with open(workload_path, "rb") as f:
        apps = tomllib.load(f)["application"]
    with open(result_path) as f:
        result = json.load(f)
    with open(out, "w") as f:
        f.write(f"nodes {len(nodes)}\n")
        for n in nodes:
            f.write(f'{n["disk"]!r}\n')
        f.write(f'tasks {len(result["tasks"])}\n')
        for t in result["tasks"]:
            app, node = apps[t["app"]], nodes[t["node"]]
            split = size(app["split"])
            start = t["start_ns"] / 1e9
            if t["variant"] == "cpu":
                compute = seconds(app["cpu"]["compute"]) / (chunks * node["core_speed"])
                f.write(f'{t["node"]} {start!r} {chunks} {split / chunks!r} {compute!r} 0\n')
            else:
                gpu = app["gpu"]
                compute = seconds(gpu["compute"]) / node["gpu_speed"]
                f.write(f'{t["node"]} {start!r} 1 {split!r} {compute!r} {seconds(gpu.get("copy", 0))!r}\n')


def exact_ends(tasks_path):
    """Every task's end, in exact rational arithmetic, from the replay's own input."""
    with open(tasks_path) as f:
        lines = f.read().split("\n")
    n = int(lines[0].split()[1])
    bandwidth = [Fraction(lines[1 + i]) for i in range(n)]
    count = int(lines[1 + n].split()[1])
    tasks = []
    for i in range(count):
        node, start, reads, read, compute, copy = lines[2 + n + i].split()
        tasks.append((int(node), Fraction(start), int(reads), Fraction(read), Fraction(compute),
                      Fraction(copy)))
    ends = {}
    for node in range(n):
        mine = [i for i, t in enumerate(tasks) if t[0] == node]
        wanting = [(tasks[i][1], i) for i in mine]  # (when a read starts, task)
        heapq.heapify(wanting)
        reading, done_reads, now = {}, {i: 0 for i in mine}, Fraction(0)
        while wanting or reading:
            finish = None
            if reading:
                finish = now + min(reading.values()) * len(reading) / bandwidth[node]
            if wanting and (finish is None or wanting[0][0] < finish):
                at, i = heapq.heappop(wanting)
                served = (at - now) * bandwidth[node] / len(reading) if reading else 0
                reading = {k: left - served for k, left in reading.items()}
                now, reading[i] = at, tasks[i][3]
                continue
            served = (finish - now) * bandwidth[node] / len(reading)
            reading = {k: left - served for k, left in reading.items()}
            now = finish
            for k in [k for k, left in reading.items() if left <= 0]:
                del reading[k]
                _, _, reads, _, compute, copy = tasks[k]
                after = now + compute + (copy if done_reads[k] == 0 else 0)
                done_reads[k] += 1
                if done_reads[k] < reads:
                    heapq.heappush(wanting, (after, k))
                else:
                    ends[k] = after
    return [float(ends[i]) for i in range(count)]


def compare(result_path, replay, tasks_path):
    with open(result_path) as f:
        tasks = json.load(f)["tasks"]
    ends = {}
    with open(replay) as f:
        for line in f:
            word = line.split()
            if word[:1] == ["task"]:
                ends[int(word[1])] = float(word[2])
    if len(ends) != len(tasks):
        sys.exit(f"{replay}: not one line per task of {result_path}")
    ours = max(t["end_ns"] for t in tasks) / 1e9
    theirs = max(ends.values())
    worst = max(abs(t["end_ns"] / 1e9 - ends[i]) for i, t in enumerate(tasks))
    exact = exact_ends(tasks_path)
    ours_off = max(abs(t["end_ns"] / 1e9 - exact[i]) for i, t in enumerate(tasks))
    theirs_off = max(abs(ends[i] - exact[i]) for i in range(len(tasks)))
    print(f"{len(tasks)} | {ours:.9f} s | {theirs:.9f} s | {abs(ours - theirs) / ours:.1e} | "
          f"{worst * 1e9:.0f} ns | {ours_off * 1e9:.0f} ns | {theirs_off * 1e9:.0f} ns")


def sensitivity(tasks_path, node):
    with open(tasks_path) as f:
        lines = f.read().split("\n")
    n = int(lines[0].split()[1])
    shifted = list(lines)
    mine = []
    for k in range(2 + n, len(lines)):
        word = lines[k].split()
        if len(word) == 6 and int(word[0]) == node:
            mine.append(k - 2 - n)
            if len(mine) == 1:
                word[1] = repr(float(word[1]) + 1e-9)
                shifted[k] = " ".join(word)
    if not mine:
        sys.exit(f"{tasks_path}: no task on node {node}")
    other = tasks_path + ".shifted"
    with open(other, "w") as f:
        f.write("\n".join(shifted))
    a, b = exact_ends(tasks_path), exact_ends(other)
    worst = max(abs(a[i] - b[i]) for i in mine)
    print(f"node {node}: {len(mine)} tasks; a 1 ns later start of the first moves an exact end by up to "
          f"{worst * 1e3:.3f} ms")


def main():
    args = sys.argv[1:]
    if args[:1] == ["replay-input"] and len(args) in (5, 7):
        chunks = int(args[6]) if len(args) == 7 and args[5] == "--chunks" else 8
        replay_input(args[1], args[2], args[3], args[4], chunks)
    elif args[:1] == ["compare"] and len(args) == 4:
        compare(args[1], args[2], args[3])
    elif args[:1] == ["sensitivity"] and len(args) == 3:
        sensitivity(args[1], int(args[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
