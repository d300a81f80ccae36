#!/bin/sh
# One-phase's utilisation limit against even: throughput, mean and p99 latency, peak node load
# and inter-node traffic, with and without the ×1.6 surge, with the controller as configured
# (traffic reschedules above a 10 % gain) and with traffic reschedules disabled (gain threshold
# 1000, so only overload reschedules remain). Writes docs/results/streams/sweep/*.json and prints
# the table of docs/results/streams.md ("Choosing the utilisation limit").
# Run from the repository root: sh docs/results/streams/sweep.sh [path/to/hetsched]
set -eu
bin=${1:-target/release/hetsched}
out=docs/results/streams/sweep
mkdir -p "$out"
# --out names a directory (the report is its report.json): each run goes to a scratch directory
# and its report is kept under the run's name.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for surge in 1.6 1.0; do
  for u in 0.6 0.7 0.8 0.9; do
    "$bin" sim stream-paper --max-utilisation "$u" --surge "$surge" \
      --out "$tmp" >/dev/null 2>&1
    mv "$tmp/report.json" "$out/util-$u-surge-$surge.json"
    "$bin" sim stream-paper --max-utilisation "$u" --surge "$surge" --gain-threshold 1000 \
      --out "$tmp" >/dev/null 2>&1
    mv "$tmp/report.json" "$out/util-$u-surge-$surge-no-traffic-reschedule.json"
  done
done
python3 - "$out" <<'PY'
import json, sys, os
out = sys.argv[1]
def rng(xs, fmt):
    lo, hi = min(xs), max(xs)
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}–{fmt(hi)}"
ms = lambda x: f"{x:,.1f}" if x < 100 else f"{x:,.0f}"
pct = lambda x: f"{x:.0f} %"
print("| surge | traffic reschedules | placer, limit | inter-node t/s (vs even) | throughput / offered | mean latency ms | p99 latency ms | peak node load | overloaded s |")
print("|---|---|---|---|---|---|---|---|---|")
for surge in ["1.6", "1.0"]:
    for tag, label in [("", "on (> 10 %)"), ("-no-traffic-reschedule", "off")]:
        first = True
        for u in ["0.6", "0.7", "0.8", "0.9"]:
            r = json.load(open(os.path.join(out, f"util-{u}-surge-{surge}{tag}.json")))
            rows = r["rows"]
            even = [x for x in rows if x["placer"] == "even"]
            one = [x for x in rows if x["placer"] == "one-phase"]
            def line(name, xs):
                gain = [1 - o["inter_node_traffic"] / e["inter_node_traffic"] for o, e in zip(xs, even)]
                thr = [x["sim"]["throughput"] / x["sim"]["offered"] * 100 for x in xs]
                return (f"| ×{surge} | {label} | {name} | "
                        f"{rng([x['inter_node_traffic'] for x in xs], lambda v: f'{v:,.0f}')}"
                        + ("" if name == "even" else f" (−{rng([g*100 for g in gain], lambda v: f'{v:.0f}')} %)")
                        + f" | {rng(thr, lambda v: f'{v:.0f} %')} | {rng([x['sim']['mean_latency_ms'] for x in xs], ms)} | "
                        f"{rng([x['sim']['p99_latency_ms'] for x in xs], ms)} | {rng([x['sim']['max_node_load'] for x in xs], pct)} | "
                        f"{rng([x['sim']['overloaded_s'] for x in xs], lambda v: f'{v:.0f}')} |")
            if first:
                print(line("even", even))
                first = False
            print(line(f"one-phase {float(u)*100:.0f} %", one))
PY
