#!/usr/bin/env bash
# Priority preemption in the simulator (docs/results/preemption.md): examples/workload-urgent.toml
# on the HDAS paper's cluster — as it is (the sweep has CPU tasks only) and with a GPU variant for
# the sweep (225 s on a GPU) — under every combination of policy, heartbeat and seed, without
# preemption, with --preemption, and with a 10-minute exempt time. One line per run:
#   workload policy heartbeat seed mode  urgent-mean-turnaround-s  urgent-worst-turnaround-s  sweep-completion-s  preempted
# Usage: bash scripts/sim-preemption.sh [path/to/hetsched]
set -euo pipefail
bin=${1:-target/release/hetsched}
gpu=$(mktemp --suffix=.toml)
trap 'rm -f "$gpu"' EXIT
# The sweep with a GPU variant: the same file, a [application.gpu] table after the sweep's CPU one.
awk '{print} /^read = "0s"$/ && !done {print "\n[application.gpu]\ncompute = \"225s\"\ncopy = \"1s\"\nread = \"0s\""; done=1}' \
  examples/workload-urgent.toml > "$gpu"
for workload in cpu gpu; do
  file=examples/workload-urgent.toml
  [ "$workload" = gpu ] && file=$gpu
  for policy in fifo drf hdas; do
    for hb in 1s 5s; do
      for seed in 1 2 3; do
        for mode in off on exempt; do
          case $mode in
            off) extra=() ;;
            on) extra=(--preemption) ;;
            exempt) extra=(--preemption --preempt-exempt-time 10m) ;;
          esac
          "$bin" sim run --cluster examples/cluster-hdas-paper.toml --workload "$file" \
            --policy "$policy" --heartbeat "$hb" --seed "$seed" --output json "${extra[@]}" |
            python3 -c '
import json, sys
r = json.load(sys.stdin)
urgent = [(a["completion_ns"] - a["submit_ns"]) / 1e9 for a in r["apps"] if a["name"].startswith("urgent")]
sweep = next(a["completion_s"] for a in r["apps"] if a["name"] == "sweep")
print(sys.argv[1], "%.1f %.1f %.1f" % (sum(urgent) / len(urgent), max(urgent), sweep), r["preemptions"])
' "$workload $policy $hb $seed $mode"
        done
      done
    done
  done
done
