#!/bin/bash
# Latency of one short job on an idle cluster: one server and two agents (workers; AGENTS=N: N) of 4 cores on
# this machine; N one-task jobs running `true`, submitted one after another, each timed from
# the submitting command's start to its exit (`submit --wait`: the job has ended). Prints one
# JSON line: every sample in ms, the median and the 90th percentile, and the server's CPU time
# (user + system) over all N. Between two jobs the script
# pauses a random 0-0.99 s (a person's pace: each job lands at another point of the agents'
# heartbeat cycle), or not at all with PAUSE=0 (a script waiting on one job after another).
#   scripts/latency-bench.sh target/release/hetsched [N]
#   HQ=/path/to/hq scripts/latency-bench.sh hq [N]    # `hq submit --wait -- true`
# CHAIN=K times a task graph instead: K tasks of one instance each, each waiting for the one
# before — a workflow (`[[task]]`, balancer $BALANCER: pcddb, else centralised) whose tasks pass a
# file down the chain; for HyperQueue a job file of K `true` tasks with `deps` on the one before
# (`hq job submit-file`, its native task-graph path; it passes no data).
# SERVER_CONFIG=FILE starts the hetsched server with that configuration (e.g. a
# `[workflow] check_interval` for pcddb).
# HyperQueue is not vendored: see the header of scripts/hq-array-bench.sh for its build.
set -eu
BIN=$1
N=${2:-20}
. "$(dirname "$0")/small-cluster.sh"
start_cluster "$BIN"
CHAIN=${CHAIN:-0}
if [ "$BIN" = hq ] && [ "$CHAIN" -gt 0 ]; then
    for k in $(seq 0 $((CHAIN - 1))); do
        printf '[[task]]\nid = %d\ncommand = ["true"]\n' "$k"
        printf 'stdout = { path = "%s/o", on_close = "rm-if-finished" }\n' "$D"
        printf 'stderr = { path = "%s/e", on_close = "rm-if-finished" }\n' "$D"
        if [ "$k" -gt 0 ]; then printf 'deps = [%d]\n' $((k - 1)); fi
    done >"$D/chain.toml"
    # `submit-file` has no `--wait`: the job is waited for by a second command.
    submit() {
        "$HQ" job submit-file --server-dir "$D" "$D/chain.toml" >/dev/null
        "$HQ" job wait last --server-dir "$D" >/dev/null
    }
elif [ "$BIN" = hq ]; then
    submit() { "$HQ" submit --server-dir "$D" --wait --stdout none --stderr none -- true >/dev/null; }
elif [ "$CHAIN" -gt 0 ]; then
    {
        printf 'balancer = "%s"\n' "${BALANCER:-centralised}"
        printf '[[task]]\nname = "s1"\ninstances = 1\ncost = "1s"\noutputs = ["o1"]\n'
        printf 'command = "echo 1 > {output:o1}"\n'
        for k in $(seq 2 "$CHAIN"); do
            printf '[[task]]\nname = "s%d"\ninstances = 1\ncost = "1s"\n' "$k"
            printf 'inputs = ["o%d"]\noutputs = ["o%d"]\n' $((k - 1)) "$k"
            printf 'command = "cat {input:o%d} > {output:o%d}"\n' $((k - 1)) "$k"
        done
    } >"$D/chain.toml"
    submit() { "$BIN" submit "$D/chain.toml" --wait >/dev/null; }
else
    # The command line's job (`submit -- true`), as HyperQueue's `hq submit -- true`; JOB_FILE=1
    # submits the same job as a file (the only way before session 27).
    if [ -n "${JOB_FILE:-}" ]; then
        printf '[[application]]\nname = "one"\ntasks = 1\n[application.cpu]\ncommand = ["true"]\n' >"$D/one.toml"
        submit() { "$BIN" submit "$D/one.toml" --wait >/dev/null; }
    else
        submit() { "$BIN" submit --wait -- true >/dev/null; }
    fi
fi
sleep 1
cpu() { awk '{ print $14 + $15 }' "/proc/$SERVER/stat"; } # clock ticks (1/100 s)
c0=$(cpu)
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
c1=$(cpu)
balancer=${BALANCER:-centralised}
[ "$BIN" = hq ] && balancer=hq # HyperQueue's own scheduler
sorted=($(printf '%s\n' "${samples[@]}" | sort -n))
median=${sorted[$(( N / 2 ))]}
p90=${sorted[$(( N * 9 / 10 ))]}
echo "{\"cluster\":\"$BIN\",\"agents\":$AGENTS,\"chain\":$CHAIN,\"balancer\":\"$balancer\",\"pause\":\"${PAUSE:-random}\",\"jobs\":$N,\"median_ms\":$median,\"p90_ms\":$p90,\"server_cpu_ms\":$(( (c1 - c0) * 10 )),\"samples_ms\":[$(IFS=,; echo "${samples[*]}")]}"
