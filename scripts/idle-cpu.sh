#!/bin/bash
# Server CPU of an idle cluster: one server and two agents of 4 cores on this machine, no job,
# measured over SECONDS (default 10) after 3 s of settling, from /proc/PID/stat (user + system).
#   scripts/idle-cpu.sh target/release/hetsched [SECONDS]
#   HQ=/path/to/hq scripts/idle-cpu.sh hq [SECONDS]      # HyperQueue: server + 2 workers of 4 cpus
# HyperQueue is not vendored: see the header of scripts/hq-array-bench.sh for its build.
set -eu
BIN=$1
T=${2:-10}
. "$(dirname "$0")/small-cluster.sh"
start_cluster "$BIN"
sleep 3
cpu() { awk '{ print $14 + $15 }' "/proc/$SERVER/stat"; } # clock ticks (1/100 s)
c0=$(cpu)
sleep "$T"
c1=$(cpu)
echo "{\"server\":\"$BIN\",\"seconds\":$T,\"server_cpu_ms\":$(( (c1 - c0) * 10 ))}"
