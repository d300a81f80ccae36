#!/bin/bash
# What a server crash costs a running job: one server and two agents (workers) of 4 cores on this
# machine, one job of N tasks (default 400), each `sleep S` (default 0.5) between two lines it
# appends to a shared log ("s INDEX" when it starts, "e INDEX" when it ends). KILL s (default 10)
# after the submission the server is SIGKILLed; one second later it is started again from the same
# data directory (HyperQueue: the same `--journal`). Agents (workers) that did not survive are
# started again, as a supervisor would. Prints one JSON line: how many tasks started more than once,
# how many runs were cut off, which agents survived, how long the restarted server took to answer,
# how long the job took in all, and its final state.
#   scripts/restart-compare.sh target/release/hetsched [N] [S] [KILL]
#   HQ=/path/to/hq scripts/restart-compare.sh hq [N] [S] [KILL]
# HyperQueue is not vendored: see the header of scripts/hq-array-bench.sh for its build. Its
# journal is flushed every --journal-flush-period (30 s by default); HQ_FLUSH=1s sets it.
set -eu
BIN=$1
N=${2:-400}
S=${3:-0.5}
KILL=${4:-10}
HQ=${HQ:-hq}
D=$(mktemp -d)
cleanup() {
    kill $(jobs -p) 2>/dev/null || true
    pkill -f "$D" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$D"
}
trap cleanup EXIT
ms() { echo $(( $(date +%s%N) / 1000000 )); }
: >"$D/runs"
. "$(dirname "$0")/restartable-server.sh"
PORT=$(free_port)

start_agent() { # $1: its number
    if [ "$BIN" = hq ]; then
        "$HQ" worker start --cpus 4 --server-dir "$D/hq" >>"$D/worker$1.log" 2>&1 &
    else
        "$BIN" agent --server "http://127.0.0.1:$PORT" --name "node-$1" --cores 4 \
            --token-file "$D/server/agent-token" --work-dir "$D/agent-$1" >>"$D/agent-$1.log" 2>&1 &
    fi
    eval "AGENT$1=$!"
}
alive_agents() {
    if [ "$BIN" = hq ]; then
        "$HQ" worker list --server-dir "$D/hq" --output-mode quiet 2>/dev/null | grep -c RUNNING || true
    else
        "$BIN" nodes --output json 2>/dev/null | grep -o '"alive": *true' | wc -l
    fi
}

start_server
[ "$BIN" = hq ] || export HETSCHED_SERVER="http://127.0.0.1:$PORT" HETSCHED_TOKEN_FILE="$D/server/token"
start_agent 1
start_agent 2
until [ "$(alive_agents)" -ge 2 ]; do sleep 0.05; done

t0=$(ms)
if [ "$BIN" = hq ]; then
    "$HQ" submit --server-dir "$D/hq" --array "1-$N" --cpus 1 --stdout none --stderr none -- \
        sh -c "echo s \$HQ_TASK_ID >>$D/runs; sleep $S; echo e \$HQ_TASK_ID >>$D/runs" >/dev/null
else
    "$BIN" submit --tasks "$N" --cores 1 -- \
        sh -c "echo s \$HETSCHED_TASK_INDEX >>$D/runs; sleep $S; echo e \$HETSCHED_TASK_INDEX >>$D/runs" >/dev/null
fi
sleep "$KILL"
ended_before=$(grep -c '^e' "$D/runs" || true)
# (stderr aside: bash reports the killed job)
exec 3>&2 2>/dev/null
kill -9 "$SERVER"
wait "$SERVER" || true
exec 2>&3 3>&-
sleep 1
t1=$(ms)
start_server
t2=$(ms)
survived=0
for i in 1 2; do
    eval "pid=\$AGENT$i"
    if kill -0 "$pid" 2>/dev/null; then survived=$((survived + 1)); else start_agent "$i"; fi
done
if [ "$BIN" = hq ]; then
    "$HQ" job wait 1 --server-dir "$D/hq" >/dev/null 2>&1 || true
    state=$("$HQ" job info 1 --server-dir "$D/hq" --output-mode json | python3 -c 'import json,sys; j=json.load(sys.stdin); j=j[0] if isinstance(j,list) else j; print(j["info"]["task_stats"])' 2>/dev/null | tr -d ' \n' || echo unknown)
else
    "$BIN" wait 1 >/dev/null 2>&1 || true
    state=$("$BIN" job 1 --output json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null || echo unknown)
fi
t3=$(ms)
python3 - "$D/runs" "$N" <<EOF
import collections, json, sys
starts, ends = collections.Counter(), collections.Counter()
for line in open(sys.argv[1]):
    kind, index = line.split()
    (starts if kind == "s" else ends)[index] += 1
n = int(sys.argv[2])
print(json.dumps({
    "peer": "hyperqueue" if "$BIN" == "hq" else "hetsched",
    "tasks": n, "task_seconds": $S, "killed_after_s": $KILL,
    "ended_before_the_kill": $ended_before,
    "agents_that_survived": $survived,
    "restart_answers_ms": $t2 - $t1,
    "job_seconds": round(($t3 - $t0) / 1000, 2),
    "final_state": "$state",
    "tasks_started": len(starts),
    "tasks_ended": len(ends),
    "runs_started": sum(starts.values()),
    "tasks_started_more_than_once": sum(1 for c in starts.values() if c > 1),
    "tasks_ended_more_than_once": sum(1 for c in ends.values() if c > 1),
    "runs_cut_off": sum(starts.values()) - sum(ends.values()),
}))
EOF
