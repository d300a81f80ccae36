#!/usr/bin/env bash
# The "Shares and caps" figures of docs/results/fair-share.md: `hetsched sim compare --policies
# fifo,drf,hdas` on examples/cluster-mixed-generations.toml (1 s heartbeats), with and without
# `--fair-share 1h`, seeds 1-5, on variants of two workloads' [[user]] tables:
#   equal                    examples/workload-two-users-shares.toml without its [[user]] tables
#   bob-3-shares             ... with Bob's `shares = 3` alone
#   alice-144-cores          ... with Alice's `max_cores = 144` alone
#   both                     ... as written
#   backlog                  examples/workload-two-users.toml as written (no [[user]])
#   backlog-alice-256-cores  ... with `[[user]] name = "alice" max_cores = 256` added
# Prints one line per (variant, fair share, policy): each user's mean turnaround and the
# makespan, median (min-max) over the seeds.
# Usage: scripts/fair-share-limits.sh [path/to/hetsched]   (default: target/release/hetsched)
set -euo pipefail
bin=${1:-target/release/hetsched}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
shares=examples/workload-two-users-shares.toml
sed '/^\[\[user\]\]/,/^$/d' "$shares" >"$tmp/equal.toml"
sed '/^max_cores/d' "$shares" >"$tmp/bob-3-shares.toml"
sed '/^shares/d' "$shares" >"$tmp/alice-144-cores.toml"
cp "$shares" "$tmp/both.toml"
cp examples/workload-two-users.toml "$tmp/backlog.toml"
{
  printf '[[user]]\nname = "alice"\nmax_cores = 256\n\n'
  cat examples/workload-two-users.toml
} >"$tmp/backlog-alice-256-cores.toml"
for variant in equal bob-3-shares alice-144-cores both backlog backlog-alice-256-cores; do
  for fair in off 1h; do
    for seed in 1 2 3 4 5; do
      flags=()
      [ "$fair" = off ] || flags=(--fair-share "$fair")
      "$bin" sim compare --cluster examples/cluster-mixed-generations.toml \
        --workload "$tmp/$variant.toml" --policies fifo,drf,hdas --seed "$seed" \
        --output json "${flags[@]}" |
        python3 -c '
import json, sys
for r in json.load(sys.stdin):
    users = " ".join("%s=%.1f" % (u["user"], u["mean_turnaround_s"]) for u in r["users"])
    print(sys.argv[1], sys.argv[2], r["policy"], "makespan=%.1f" % r["makespan_s"], users)
' "$variant" "$fair"
    done
  done
done | python3 "$(dirname "$0")/medians-by-key.py" 3
