#!/bin/bash
# Server CPU of an idle cluster: one server and two agents of 4 cores on this machine, no job,
# measured over SECONDS (default 10) after 3 s of settling, from /proc/PID/stat (user + system).
#   scripts/idle-cpu.sh target/release/hetsched [SECONDS]
#   HQ=/path/to/hq scripts/idle-cpu.sh hq [SECONDS]      # HyperQueue: server + 2 workers of 4 cpus
# HyperQueue is not vendored: see the header of scripts/hq-array-bench.sh for its build.
set -eu
BIN=$1
T=${2:-10}
D=$(mktemp -d)
cleanup() {
    kill $(jobs -p) 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$D"
}
trap cleanup EXIT
if [ "$BIN" = hq ]; then
    HQ=${HQ:-hq}
    "$HQ" server start --server-dir "$D" >"$D/server.log" 2>&1 &
    SERVER=$!
    until "$HQ" server info --server-dir "$D" >/dev/null 2>&1; do sleep 0.05; done
    for i in 1 2; do "$HQ" worker start --cpus 4 --server-dir "$D" >"$D/worker$i.log" 2>&1 & done
else
    "$BIN" server --listen 127.0.0.1:0 --data-dir "$D/server" >"$D/server.log" 2>&1 &
    SERVER=$!
    until [ -f "$D/server/address" ]; do sleep 0.05; done
    ADDR=$(cat "$D/server/address")
    for i in 0 1; do
        "$BIN" agent --server "http://$ADDR" --name "idle-$i" --cores 4 \
            --token-file "$D/server/agent-token" --work-dir "$D/agent-$i" >"$D/agent-$i.log" 2>&1 &
    done
fi
sleep 3
cpu() { awk '{ print $14 + $15 }' "/proc/$SERVER/stat"; } # clock ticks (1/100 s)
c0=$(cpu)
sleep "$T"
c1=$(cpu)
echo "{\"server\":\"$BIN\",\"seconds\":$T,\"server_cpu_ms\":$(( (c1 - c0) * 10 ))}"
