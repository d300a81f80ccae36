#!/bin/bash
# A server holding one huge job: a server alone (no agents) on this machine, one job of N `true`
# tasks (default 1,000,000) submitted from the command line. Reports how long the submission took,
# the server's resident memory after it (VmRSS) and at its peak (VmHWM), then SIGKILLs the server,
# starts it again from the same data directory (HyperQueue: the same `--journal`, flushed with `hq
# journal flush` before the kill) and reports how long the restarted server took to answer a job
# listing and its memory then. One JSON line.
#   scripts/big-job-restart.sh target/release/hetsched [N]
#   HQ=/path/to/hq scripts/big-job-restart.sh hq [N]
# HyperQueue is not vendored: see the header of scripts/hq-array-bench.sh for its build.
set -eu
BIN=$1
N=${2:-1000000}
HQ=${HQ:-hq}
D=$(mktemp -d)
cleanup() {
    kill $(jobs -p) 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$D"
}
trap cleanup EXIT
ms() { echo $(( $(date +%s%N) / 1000000 )); }
kib() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; }
. "$(dirname "$0")/restartable-server.sh"
PORT=$(free_port)


start_server
rss0=$(kib "$SERVER" VmRSS)
t0=$(ms)
if [ "$BIN" = hq ]; then
    "$HQ" submit --server-dir "$D/hq" --array "1-$N" --stdout none --stderr none -- true >/dev/null
else
    export HETSCHED_SERVER="http://127.0.0.1:$PORT" HETSCHED_TOKEN_FILE="$D/server/token"
    "$BIN" submit --tasks "$N" -- true >/dev/null
fi
t1=$(ms)
sleep 1
rss1=$(kib "$SERVER" VmRSS)
hwm1=$(kib "$SERVER" VmHWM)
[ "$BIN" = hq ] && "$HQ" journal flush --server-dir "$D/hq" >/dev/null
# (stderr aside: bash reports the killed job)
exec 3>&2 2>/dev/null
kill -9 "$SERVER"
wait "$SERVER" || true
exec 2>&3 3>&-
t2=$(ms)
start_server
t3=$(ms)
sleep 1
rss2=$(kib "$SERVER" VmRSS)
hwm2=$(kib "$SERVER" VmHWM)
if [ "$BIN" = hq ]; then
    tasks=$("$HQ" job info 1 --server-dir "$D/hq" --output-mode json | python3 -c 'import json,sys; j=json.load(sys.stdin); j=j[0] if isinstance(j,list) else j; print(sum(j["info"]["task_stats"].values()))')
else
    tasks=$("$BIN" job 1 --output json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["tasks"])')
fi
printf '{"peer":"%s","tasks":%d,"submit_ms":%d,"server_rss_mib":%.1f,"server_peak_mib":%.1f,"restart_answers_ms":%d,"rss_after_restart_mib":%.1f,"peak_after_restart_mib":%.1f,"tasks_after_restart":%s,"idle_server_rss_mib":%.1f}\n' \
    "$([ "$BIN" = hq ] && echo hyperqueue || echo hetsched)" "$N" $((t1 - t0)) \
    "$(echo "$rss1 / 1024" | bc -l)" "$(echo "$hwm1 / 1024" | bc -l)" $((t3 - t2)) \
    "$(echo "$rss2 / 1024" | bc -l)" "$(echo "$hwm2 / 1024" | bc -l)" "$tasks" "$(echo "$rss0 / 1024" | bc -l)"
