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
. "$(dirname "$0")/small-cluster.sh"
start_cluster "$BIN"
if [ "$BIN" = hq ]; then
    submit() { "$HQ" submit --server-dir "$D" --wait --stdout none --stderr none -- true >/dev/null; }
else
    printf '[[application]]\nname = "one"\ntasks = 1\n[application.cpu]\ncommand = ["true"]\n' >"$D/one.toml"
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
