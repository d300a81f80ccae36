#!/bin/bash
# CPU of an idle cluster: one server and two agents of 4 cores (AGENTS=N: N) on this machine, no job, measured
# over SECONDS (default 30) after 3 s of settling: the server's and the agents' (or
# HyperQueue workers') user + system time, from /proc/PID/stat (10 ms clock ticks: measure long
# enough; `perf stat -e task-clock -p PID` gives finer figures).
#   scripts/idle-cpu.sh target/release/hetsched [SECONDS]
#   HQ=/path/to/hq scripts/idle-cpu.sh hq [SECONDS]      # HyperQueue: server + 2 workers of 4 cpus
# HyperQueue is not vendored: see the header of scripts/hq-array-bench.sh for its build.
set -eu
BIN=$1
T=${2:-30}
. "$(dirname "$0")/small-cluster.sh"
start_cluster "$BIN"
sleep 3
# The agents (workers) are the cluster's other processes: children of this shell.
AGENT_PIDS=$(jobs -p | grep -vx "$SERVER" || true)
cpu() { # clock ticks (1/100 s) of the given PIDs, summed
    local t=0 p
    for p in "$@"; do t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat"))); done
    echo "$t"
}
s0=$(cpu "$SERVER")
a0=$(cpu $AGENT_PIDS)
sleep "$T"
s1=$(cpu "$SERVER")
a1=$(cpu $AGENT_PIDS)
echo "{\"server\":\"$BIN\",\"agents\":$AGENTS,\"seconds\":$T,\"server_cpu_ms\":$(( (s1 - s0) * 10 )),\"agents_cpu_ms\":$(( (a1 - a0) * 10 ))}"
