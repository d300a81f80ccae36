#!/usr/bin/env bash
# Priority preemption through the real binaries (docs/results/preemption.md, "Runtime"): two
# agents of 4 cores are filled by a low-priority job of 8 tasks that sleep 60 s (each logs
# SIGTERM and exits on it); then an urgent job of 8 one-second tasks at priority 10 arrives.
# Prints, for `preemption = "off"` and `"requeue"` in turn, ROUNDS times each: the seconds from
# the urgent job's submission to its end, and how many low tasks were preempted.
# With PREFETCH=N the server lends each node N cores (`prefetch = N`) and the low job has 2N
# more tasks, which the agents hold queued behind the running ones.
# MODES="requeue" runs only that mode.
# Usage: [PREFETCH=N] [MODES=…] bash scripts/preemption-runtime.sh [BIN] [ROUNDS]   (BIN: target/release/hetsched)
set -euo pipefail
BIN=${1:-target/release/hetsched}
ROUNDS=${2:-3}
PREFETCH=${PREFETCH:-}
MODES=${MODES:-off requeue}
LOW_TASKS=$((8 + 2 * ${PREFETCH:-0}))
here=$(cd "$(dirname "$0")" && pwd)
. "$here/small-cluster.sh"
for round in $(seq "$ROUNDS"); do
  for mode in $MODES; do
    conf=$(mktemp --suffix=.toml)
    printf 'preemption = "%s"\n' "$mode" > "$conf"
    if [ -n "$PREFETCH" ]; then printf 'prefetch = %s\n' "$PREFETCH" >> "$conf"; fi
    (
      SERVER_CONFIG=$conf start_cluster "$BIN"
      cat > "$D/low.toml" <<TOML
[[application]]
name = "low"
tasks = $LOW_TASKS
[application.cpu]
command = "trap 'exit 143' TERM; sleep 60 & wait"
TOML
      cat > "$D/urgent.toml" <<TOML
[[application]]
name = "urgent"
tasks = 8
priority = 10
[application.cpu]
command = "sleep 1"
TOML
      "$BIN" submit "$D/low.toml" >/dev/null
      until [ "$("$BIN" tasks --job 1 --output json | grep -c '"state": *"running"')" -ge "$LOW_TASKS" ]; do sleep 0.1; done
      start=$(date +%s.%N)
      "$BIN" submit "$D/urgent.toml" >/dev/null
      "$BIN" wait 2 --timeout 300s >/dev/null
      end=$(date +%s.%N)
      preempted=$("$BIN" tasks --job 1 --output json | python3 -c 'import json,sys; print(sum(t.get("preemptions", 0) for t in json.load(sys.stdin)))')
      printf '%s round %s: urgent job done %.2f s after submission, %s low task(s) preempted\n' \
        "$mode" "$round" "$(echo "$end - $start" | bc)" "$preempted"
    )
    rm -f "$conf"
  done
done
