#!/bin/sh
# HyperQueue's native CLI on the same measurement as `hetsched bench-dispatch`: one server and two
# workers of 4 cpus on this machine, one array job of N tasks running `true` without stdout/stderr
# files (as hetsched creates none for a silent task), timed from submission to the end of the job
# (`hq submit --wait`). Prints the time, tasks/s and the server's CPU time (user + system, from
# /proc/PID/stat) over the same span, as one JSON line like `bench-dispatch --json`.
#
# HyperQueue is not vendored here: build it from its source outside this repository, e.g.
#   git clone https://github.com/It4innovations/hyperqueue /work/peers/hq && cd /work/peers/hq
#   cargo build --release -p hyperqueue --no-default-features --features jemalloc,microlp
#   HQ=/work/peers/hq/target/release/hq scripts/hq-array-bench.sh 10000
set -eu
HQ=${HQ:-hq}
N=${1:-10000}
D=$(mktemp -d)
PIDS=""
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$D"
}
trap cleanup EXIT
ms() { echo $(( $(date +%s%N) / 1000000 )); }
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; } # clock ticks (1/100 s)

# HQ_JOURNAL=1: the server keeps its event journal (HyperQueue's durable mode: events are
# buffered and written + fdatasync'd every --journal-flush-period, 30 s by default, not before a
# reply). A zero-worker build of hq (built with RUSTFLAGS="--cfg zero_worker": workers finish each
# task at once without starting it) measures its scheduler's own ceiling.
JOURNAL=""
[ "${HQ_JOURNAL:-0}" = 1 ] && JOURNAL="--journal $D/journal"
# shellcheck disable=SC2086
"$HQ" server start --server-dir "$D" $JOURNAL >"$D/server.log" 2>&1 &
SERVER=$!
PIDS="$PIDS $SERVER"
until "$HQ" server info --server-dir "$D" >/dev/null 2>&1; do sleep 0.05; done
for i in 1 2; do
    "$HQ" worker start --cpus 4 --server-dir "$D" >"$D/worker$i.log" 2>&1 &
    PIDS="$PIDS $!"
done
until [ "$("$HQ" worker list --server-dir "$D" --output-mode quiet 2>/dev/null | grep -c RUNNING)" -ge 2 ]; do
    sleep 0.05
done
c0=$(cpu $SERVER)
t0=$(ms)
"$HQ" submit --server-dir "$D" --array "1-$N" --stdout none --stderr none --wait -- true >/dev/null
t1=$(ms)
c1=$(cpu $SERVER)
awk -v j="$([ -n "$JOURNAL" ] && echo true || echo false)" -v n="$N" -v t="$((t1 - t0))" -v c="$((c1 - c0))" 'BEGIN {
    printf "{\"peer\":\"hyperqueue\",\"journal\":%s,\"tasks\":%d,\"seconds\":%.3f,\"tasks_per_sec\":%.0f,\"server_cpu_seconds\":%.2f}\n",
        j, n, t / 1000, n / (t / 1000), c / 100 }'
