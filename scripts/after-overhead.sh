#!/bin/bash
# What jobs waiting `--after` another cost the server while that one runs: a server, W one-task
# jobs each `--after 1`, then job 1 (10,000 `true` tasks) run by two agents of 4 cores; prints the
# time from the agents' start to job 1's end and the server's CPU (user + system) meanwhile.
#   scripts/after-overhead.sh target/release/hetsched [W]
set -eu
BIN=$(realpath "$1")
W=${2:-1000}
D=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$D"' EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$BIN" server --listen "127.0.0.1:$PORT" --data-dir "$D/server" >"$D/server.log" 2>&1 &
SERVER=$!
export HETSCHED_SERVER="http://127.0.0.1:$PORT" HETSCHED_TOKEN_FILE="$D/server/token"
until "$BIN" jobs >/dev/null 2>&1; do sleep 0.05; done
cpu() { awk '{ print $14 + $15 }' "/proc/$SERVER/stat"; } # clock ticks (1/100 s)
"$BIN" submit --tasks 10000 -- true >/dev/null
for _ in $(seq "$W"); do "$BIN" submit --after 1 -- true >/dev/null; done
c0=$(cpu)
t0=$(date +%s%N)
for i in 1 2; do
    "$BIN" agent --server "$HETSCHED_SERVER" --name "n$i" --cores 4 \
        --token-file "$D/server/agent-token" --work-dir "$D/a$i" >"$D/a$i.log" 2>&1 &
done
"$BIN" wait 1 >/dev/null
c1=$(cpu)
t1=$(date +%s%N)
echo "{\"waiting_jobs\":$W,\"job_ms\":$(( (t1 - t0) / 1000000 )),\"server_cpu_ms\":$(( (c1 - c0) * 10 ))}"
