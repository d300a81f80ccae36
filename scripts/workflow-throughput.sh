#!/bin/bash
# Throughput of a wide task graph on a small cluster: one server and two agents of 4 cores on
# this machine (scripts/small-cluster.sh). SHAPE=wide (default): a workflow of N independent
# `true` instances; SHAPE=data: N/2 producers that each write a file and N/2 consumers that
# each read the matching one (instance by instance, fetched from the producer's agent when it ran
# elsewhere); SHAPE=batch: a batch job of N `true` tasks, for comparison. Times the submission
# with `--wait` and prints one JSON line: wall seconds from submission to the job's end, and the
# CPU seconds (user + system) the server and the agents spent meanwhile.
#   scripts/workflow-throughput.sh target/release/hetsched [N]
set -eu
BIN=$1
N=${2:-10000}
SHAPE=${SHAPE:-wide}
. "$(dirname "$0")/small-cluster.sh"
start_cluster "$BIN"
case "$SHAPE" in
    wide) printf '[[task]]\nname = "w"\ninstances = %d\ncommand = "true"\n' "$N" >"$D/job.toml" ;;
    data)
        H=$((N / 2))
        printf '[[task]]\nname = "gen"\ninstances = "1..=%d"\noutputs = ["n"]\ncommand = "echo {index} > {output:n}"\n' "$H" >"$D/job.toml"
        printf '[[task]]\nname = "use"\ninstances = "1..=%d"\ninputs = ["n"]\ncommand = "cat {input:n} > /dev/null"\n' "$H" >>"$D/job.toml"
        ;;
    batch) printf '[[application]]\nname = "b"\ntasks = %d\n[application.cpu]\ncommand = "true"\n' "$N" >"$D/job.toml" ;;
    *) echo "SHAPE must be wide, data or batch" >&2; exit 2 ;;
esac
cpu() { # summed user + system seconds of the given PIDs
    local t=0 p
    for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
    echo "$t"
}
AGENT_PIDS=$(jobs -p | grep -vx "$SERVER")
s0=$(cpu "$SERVER"); a0=$(cpu $AGENT_PIDS); t0=$(date +%s.%N)
"$BIN" submit "$D/job.toml" --wait >/dev/null
t1=$(date +%s.%N); s1=$(cpu "$SERVER"); a1=$(cpu $AGENT_PIDS)
tick=$(getconf CLK_TCK)
printf '{"shape":"%s","n":%d,"wall_s":%.3f,"server_cpu_s":%.2f,"agents_cpu_s":%.2f}\n' "$SHAPE" "$N" \
    "$(echo "$t1 - $t0" | bc)" "$(echo "($s1 - $s0) / $tick" | bc -l)" "$(echo "($a1 - $a0) / $tick" | bc -l)"
