#!/bin/bash
# How soon a job submitted `--after` another starts once that one ends: one server and two agents
# of 4 cores on this machine (scripts/small-cluster.sh); per round, a job sleeping 0.3 s, then K−1
# one-task jobs each `--after last` (the one before), all submitted before the first ends. From the
# tasks' own start and end times (taken by the agents) it prints one JSON line per round: the
# gap between each job's end and the next one's start, and the chain's time after the first job
# ended.
#   scripts/after-chain.sh target/release/hetsched [K] [ROUNDS]
set -eu
BIN=$1
K=${2:-8}
ROUNDS=${3:-3}
. "$(dirname "$0")/small-cluster.sh"
start_cluster "$BIN"
for _ in $(seq "$ROUNDS"); do
    "$BIN" submit --shell -- 'sleep 0.3' >/dev/null
    for _ in $(seq 2 "$K"); do
        "$BIN" submit --after last -- true >/dev/null
    done
    "$BIN" wait last >/dev/null
    "$BIN" tasks --output json >"$D/tasks.json"
    python3 - "$D/tasks.json" "$K" <<'EOF'
import json, sys
k = int(sys.argv[2])
chain = json.load(open(sys.argv[1]))[-k:]
gaps = [(chain[i]["started_ns"] - chain[i - 1]["finished_ns"]) / 1e6 for i in range(1, k)]
print(json.dumps({
    "jobs": k,
    "gaps_ms": [round(g, 2) for g in gaps],
    "after_the_first_ms": round((chain[-1]["finished_ns"] - chain[0]["finished_ns"]) / 1e6, 1),
}))
EOF
done
