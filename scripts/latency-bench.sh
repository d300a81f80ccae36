#!/bin/bash
# Latency of one short job on an idle cluster: one server and two agents (workers) of 4 cores on
# this machine; N one-task jobs running `true`, submitted one after another, each timed from
# the submitting command's start to its exit (`submit --wait`: the job has ended). Prints one
# JSON line: every sample in ms, the median and the 90th percentile. Between two jobs the script
# pauses a random 0-0.99 s (a person's pace: each job lands at another point of the agents'
# heartbeat cycle), or not at all with PAUSE=0 (a script waiting on one job after another).
#   scripts/latency-bench.sh target/release/hetsched [N]
#   HQ=/path/to/hq scripts/latency-bench.sh hq [N]    # `hq submit --wait -- true`
# HyperQueue is not vendored: see the header of scripts/hq-array-bench.sh for its build.
set -eu
BIN=$1
N=${2:-20}
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
    until "$HQ" server info --server-dir "$D" >/dev/null 2>&1; do sleep 0.05; done
    for i in 1 2; do "$HQ" worker start --cpus 4 --server-dir "$D" >"$D/worker$i.log" 2>&1 & done
    until [ "$("$HQ" worker list --server-dir "$D" --output-mode quiet 2>/dev/null | wc -l)" -ge 2 ]; do
        sleep 0.05
    done
    submit() { "$HQ" submit --server-dir "$D" --wait --stdout none --stderr none -- true >/dev/null; }
else
    "$BIN" server --listen 127.0.0.1:0 --data-dir "$D/server" >"$D/server.log" 2>&1 &
    until [ -s "$D/server/address" ]; do sleep 0.05; done
    ADDR=$(cat "$D/server/address")
    for i in 0 1; do
        "$BIN" agent --server "http://$ADDR" --name "lat-$i" --cores 4 \
            --token-file "$D/server/agent-token" --work-dir "$D/agent-$i" >"$D/agent-$i.log" 2>&1 &
    done
    printf '[[application]]\nname = "one"\ntasks = 1\n[application.cpu]\ncommand = ["true"]\n' >"$D/one.toml"
    export HETSCHED_SERVER="http://$ADDR" HETSCHED_TOKEN_FILE="$D/server/token"
    until [ "$("$BIN" nodes --output json 2>/dev/null | grep -o '"alive": *true' | wc -l)" -ge 2 ]; do
        sleep 0.05
    done
    submit() { "$BIN" submit "$D/one.toml" --wait >/dev/null; }
fi
sleep 1
samples=()
for _ in $(seq "$N"); do
    t0=$(date +%s%N)
    submit
    t1=$(date +%s%N)
    samples+=($(( (t1 - t0) / 1000000 )))
    if [ "${PAUSE:-random}" != 0 ]; then
        sleep "0.$(( RANDOM % 10 ))$(( RANDOM % 10 ))"
    fi
done
sorted=($(printf '%s\n' "${samples[@]}" | sort -n))
median=${sorted[$(( N / 2 ))]}
p90=${sorted[$(( N * 9 / 10 ))]}
echo "{\"cluster\":\"$BIN\",\"pause\":\"${PAUSE:-random}\",\"jobs\":$N,\"median_ms\":$median,\"p90_ms\":$p90,\"samples_ms\":[$(IFS=,; echo "${samples[*]}")]}"
