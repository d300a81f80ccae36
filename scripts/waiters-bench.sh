#!/bin/bash
# What clients waiting on their jobs cost the server: W clients each run
# `hetsched submit --wait --tasks T -- true` at once (W scripts each submitting a job and waiting
# for it, as a pipeline of users' scripts does) on one server and two agents of 4 cores on this
# machine. Every commit wakes every held `GetJob`; the later jobs wait behind the first ones, so
# most of the waiters wait on pending jobs. Prints one JSON line: the time from the first
# submission to the last job's end, and the server's CPU (user + system, /proc/PID/stat) over the
# same span. BIN `hq` runs HyperQueue's `hq submit --wait --array 1-T --stdout none --stderr none
# -- true` the same way ($HQ, else on PATH; not vendored, see scripts/hq-array-bench.sh).
#
#   scripts/waiters-bench.sh target/release/hetsched 40 250
#   HQ=/work/peers/hq/target/release/hq scripts/waiters-bench.sh hq 40 250
set -eu
BIN=${1:?usage: $0 BIN [WAITERS] [TASKS_PER_JOB]}
W=${2:-20}
T=${3:-500}
. "$(dirname "$0")/small-cluster.sh"
start_cluster "$BIN"
ms() { echo $(( $(date +%s%N) / 1000000 )); }
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; } # clock ticks (1/100 s)
c0=$(cpu "$SERVER")
t0=$(ms)
PIDS=""
for i in $(seq "$W"); do
    if [ "$BIN" = hq ]; then
        "$HQ" submit --server-dir "$D" --wait --array "1-$T" --stdout none --stderr none \
            --name "w$i" -- true >/dev/null &
    else
        "$BIN" submit --wait --tasks "$T" --name "w$i" -- true >/dev/null &
    fi
    PIDS="$PIDS $!"
done
failed=0
for p in $PIDS; do wait "$p" || failed=$((failed + 1)); done
t1=$(ms)
c1=$(cpu "$SERVER")
awk -v p="$([ "$BIN" = hq ] && echo hyperqueue || echo hetsched)" -v w="$W" -v t="$T" -v f="$failed" -v s="$((t1 - t0))" -v c="$((c1 - c0))" 'BEGIN {
    printf "{\"peer\":\"%s\",\"waiters\":%d,\"tasks_per_job\":%d,\"failed_waits\":%d,\"seconds\":%.3f,\"server_cpu_seconds\":%.2f}\n",
        p, w, t, f, s / 1000, c / 100 }'
