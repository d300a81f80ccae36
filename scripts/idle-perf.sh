#!/bin/bash
# CPU of an idle cluster by `perf stat -e task-clock` (finer than scripts/idle-cpu.sh's 10 ms ticks):
# one server and AGENTS (default 8) agents of 4 cores (or HyperQueue's server and workers), no
# job, measured over SECONDS (default 120) after 3 s of settling.
#   scripts/idle-perf.sh target/release/hetsched [SECONDS]
#   HQ=/path/to/hq scripts/idle-perf.sh hq [SECONDS]   # HyperQueue is not vendored: see scripts/hq-array-bench.sh
set -eu
BIN=$1
T=${2:-120}
AGENTS=${AGENTS:-8}
. "$(dirname "$0")/small-cluster.sh"
start_cluster "$BIN"
sleep 3
AGENT_PIDS=$(jobs -p | grep -vx "$SERVER" | paste -sd, || true)
perf stat -e task-clock -p "$SERVER" -o "$D/server.perf" -- sleep "$T" &
P=$!
perf stat -e task-clock -p "$AGENT_PIDS" -o "$D/agents.perf" -- sleep "$T"
wait "$P"
ms() { awk '/task-clock/ { gsub(",", "", $1); v = ($1 ~ /^[0-9.]+$/) ? $1 : 0 } END { print v + 0 }' "$1"; }  # "<not counted>": never ran
echo "{\"server\":\"$BIN\",\"agents\":$AGENTS,\"seconds\":$T,\"server_cpu_ms\":$(ms "$D/server.perf"),\"agents_cpu_ms\":$(ms "$D/agents.perf")}"
