#!/bin/bash
# How long a job submitted behind a long backlog of very short tasks waits: one job of SHORT
# `true` tasks, then, a second later, a job of LATE `sleep SECONDS` tasks (its run time not
# measured yet, so no node may queue it), both with the default policy and prefetch, on one
# server and two agents of 4 cores on this machine. Prints one JSON line: the seconds from the
# second job's submission to its end (`submit --wait`; its tasks alone would take SECONDS), and
# from the first submission to the first job's end.
#
#   scripts/late-job-bench.sh target/release/hetsched 20000 4 0.3
set -eu
BIN=${1:?usage: $0 BIN [SHORT] [LATE] [SECONDS]}
SHORT=${2:-20000}
LATE=${3:-4}
SECONDS_EACH=${4:-0.3}
. "$(dirname "$0")/small-cluster.sh"
start_cluster "$BIN"
ms() { echo $(( $(date +%s%N) / 1000000 )); }
t0=$(ms)
"$BIN" submit --tasks "$SHORT" --name backlog -- true >/dev/null
sleep 1
t1=$(ms)
"$BIN" submit --wait --tasks "$LATE" --name late -- sleep "$SECONDS_EACH" >/dev/null
t2=$(ms)
"$BIN" wait name:backlog >/dev/null
t3=$(ms)
awk -v late="$((t2 - t1))" -v all="$((t3 - t0))" -v s="$SECONDS_EACH" 'BEGIN {
    printf "{\"late_job_seconds\":%.3f,\"late_task_seconds\":%s,\"backlog_seconds\":%.3f}\n",
        late / 1000, s, all / 1000 }'
