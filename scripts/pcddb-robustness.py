#!/usr/bin/env python3
"""Does spec 05's run-time ordering (pcddb <= centralised <= static) depend on the seeds, the
self-check period, the deployment or the thresholds? Runs `hetsched sim graph` on the paper's
MM5-like workflow (12 h and 48 h inputs) and prints two Markdown tables for
docs/results/graphs.md, "(ii) … across seeds, self-check periods, deployments and thresholds".

    cargo build --release -p hetsched-cli
    scripts/pcddb-robustness.py [--bin target/release/hetsched] [--seeds 20]

Every method runs on the same nodes in each row (unlike `sim pcddb-paper`, whose baselines run on
a random 14 + 3 subset): Sc2's 17 nodes (docs/results/graphs/cluster-sc2.toml) or all 36 nodes
with the paper layout's latencies. Launch node n33 throughout. Deterministic: the same command
prints the same tables.
"""
import argparse
import itertools
import json
import statistics
import subprocess
import sys

SC2 = ("Sc2 (17 nodes)", "docs/results/graphs/cluster-sc2.toml", [])
ALL36 = (
    "all 36 nodes",
    "examples/cluster-pcddb-paper.toml",
    ["--latency", "examples/latency-pcddb-paper.toml"],
)
INPUTS = [("12 h", "docs/results/graphs/workflow-mm5-12h.toml"), ("48 h", "examples/workflow-mm5.toml")]
BALANCERS = ["static", "centralised", "pcddb"]


def makespan(binary, cluster, workflow, balancer, seed, check, extra):
    cmd = [binary, "sim", "graph", "--cluster", cluster, "--workflow", workflow, "--launch", "n33",
           "--balancer", balancer, "--seed", str(seed), "--check-interval", check,
           "--output", "json"] + extra
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)["makespan_s"]


def cell(xs):
    return f"{statistics.mean(xs):.1f} ({min(xs):.1f}–{max(xs):.1f})"


def count(runs, seeds, pred):
    return sum(1 for i in range(seeds) if pred(*(runs[b][i] for b in BALANCERS)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="target/release/hetsched")
    ap.add_argument("--seeds", type=int, default=20, help="seeds 1..N")
    args = ap.parse_args()
    seeds = range(1, args.seeds + 1)
    n = args.seeds

    print(f"Seeds 1–{n}; LT = 2, MT = 10 per core; run time in s, mean (min–max); the last columns count seeds.\n")
    print("| nodes | input | self-check | static | centralised | pcddb | pcddb ≤ centralised ≤ static | pcddb ≤ centralised | centralised ≤ static |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (name, cluster, extra), (size, workflow), check in itertools.product(
        [SC2, ALL36], INPUTS, ["0.25s", "0.5s", "1s", "2s"]
    ):
        runs = {b: [makespan(args.bin, cluster, workflow, b, s, check, extra) for s in seeds] for b in BALANCERS}
        print(f"| {name} | {size} | {check} | {cell(runs['static'])} | {cell(runs['centralised'])} "
              f"| {cell(runs['pcddb'])} | {count(runs, n, lambda s, c, p: p <= c <= s)} "
              f"| {count(runs, n, lambda s, c, p: p <= c)} | {count(runs, n, lambda s, c, p: c <= s)} |",
              flush=True)

    print(f"\nThe paper's point (Sc2, 48 h, 1 s self-checks), pcddb at the spec's typical LT (2–4) and MT (6–10)"
          f" per core; the baselines as above. Seeds 1–{n}.\n")
    name, cluster, extra = SC2
    workflow = INPUTS[1][1]
    base = {b: [makespan(args.bin, cluster, workflow, b, s, "1s", extra) for s in seeds] for b in BALANCERS[:2]}
    print(f"static {cell(base['static'])}, centralised {cell(base['centralised'])}\n")
    print("| LT | MT | pcddb | pcddb ≤ centralised (seeds) | pcddb ≤ static (seeds) |")
    print("|---|---|---|---|---|")
    for lt, mt in itertools.product([2, 3, 4], [6, 8, 10]):
        p = [makespan(args.bin, cluster, workflow, "pcddb", s, "1s", extra + ["--lt", str(lt), "--mt", str(mt)])
             for s in seeds]
        vs_c = sum(1 for i in range(n) if p[i] <= base["centralised"][i])
        vs_s = sum(1 for i in range(n) if p[i] <= base["static"][i])
        print(f"| {lt} | {mt} | {cell(p)} | {vs_c} | {vs_s} |", flush=True)


if __name__ == "__main__":
    main()
