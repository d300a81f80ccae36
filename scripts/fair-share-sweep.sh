#!/usr/bin/env bash
# The fair-share figures of docs/results/fair-share.md: `hetsched sim compare` on the two
# two-user workloads, with and without `--fair-share 1h`, over clusters, heartbeats and seeds.
# Prints one line per (workload, cluster, heartbeat, policy, fair share) with each user's mean
# turnaround and the makespan over seeds 1-5 (median, min-max).
# Usage: scripts/fair-share-sweep.sh [path/to/hetsched]   (default: target/release/hetsched)
set -euo pipefail
bin=${1:-target/release/hetsched}
for workload in examples/workload-two-users.toml examples/workload-two-users-history.toml; do
  for cluster in examples/cluster-mixed-generations.toml examples/cluster-hdas-paper.toml; do
    for hb in 1s 250ms; do
      for fair in off 1h; do
        for seed in 1 2 3 4 5; do
          flags=()
          [ "$fair" = off ] || flags=(--fair-share "$fair")
          "$bin" sim compare --cluster "$cluster" --workload "$workload" --policies fifo,drf,hdas \
            --heartbeat "$hb" --seed "$seed" --output json "${flags[@]}" |
            python3 -c '
import json, sys
for r in json.load(sys.stdin):
    users = " ".join("%s=%.1f" % (u["user"], u["mean_turnaround_s"]) for u in r["users"])
    print(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], r["policy"], "makespan=%.1f" % r["makespan_s"], users)
' "$(basename "$workload" .toml)" "$(basename "$cluster" .toml)" "$hb" "$fair"
        done
      done
    done
  done
done | python3 "$(dirname "$0")/medians-by-key.py" 5
