#!/bin/sh
# How long other calls wait while a large purge runs: JOBS held jobs of TASKS `true` tasks each
# (default 100 x 50,000: 5 million tasks) are submitted and cancelled (finished, never run), and
# 7 s later `hetsched purge 1-JOBS` is timed while `hetsched jobs` is called in a loop beside
# it, each call timed from the shell (process start included). The server runs without
# `[retention]`, so on this idle server the reaper's pass that takes finished jobs' rows out of
# memory is up to a minute away (`state::alarm::CALM_RECHECK`): the purge's first event does it
# (computes their summaries, lets their 5 million rows go), as a purge soon after a cancel does.
# Prints the purge's time, the longest and the median `jobs` call during it, how many `jobs`
# calls it answered meanwhile, and the task rows left in the store after the reply.
#
# With KEEP_STORE=DIR, the store as it stood before the purge is copied to DIR first (for
# scripts/purge-chunk-cost.py). With SETTLE=S, the purge starts S seconds after the cancel, not
# 7: `SETTLE=1` makes the purge, not the reaper's pass, take the finished jobs' rows out of
# memory in almost every run.
#
#   cargo build --release -p hetsched-cli
#   scripts/measure-purge-wait.sh target/release/hetsched 100 50000
set -eu
BIN=$(realpath "${1:-target/release/hetsched}")
JOBS=${2:-100}
TASKS=${3:-50000}
D=$(mktemp -d)
SERVER=""
PROBE=""
cleanup() {
    [ -n "$PROBE" ] && kill "$PROBE" 2>/dev/null || true
    [ -n "$SERVER" ] && kill -9 "$SERVER" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$D"
}
trap cleanup EXIT
ms() { echo $(( $(date +%s%N) / 1000000 )); }
RUST_LOG=warn "$BIN" server --data-dir "$D/data" --listen 127.0.0.1:0 >/dev/null 2>>"$D/server.log" &
SERVER=$!
while [ ! -s "$D/data/address" ]; do sleep 0.01; done
export HETSCHED_SERVER="http://$(cat "$D/data/address")" HETSCHED_TOKEN_FILE="$D/data/token"
until "$BIN" jobs >/dev/null 2>&1; do sleep 0.01; done
i=0
while [ "$i" -lt "$JOBS" ]; do
    "$BIN" submit --hold --tasks "$TASKS" -- true >/dev/null
    i=$((i + 1))
done
"$BIN" cancel all >/dev/null
sleep "${SETTLE:-7}"
if [ -n "${KEEP_STORE:-}" ]; then mkdir -p "$KEEP_STORE"; cp "$D"/data/state.db* "$KEEP_STORE"/; fi
# The probe: `hetsched jobs` again and again, each call's milliseconds on a line.
( while [ ! -e "$D/stop" ]; do
    t0=$(ms); "$BIN" jobs >/dev/null; echo $(( $(ms) - t0 ))
  done >>"$D/probe" ) &
PROBE=$!
sleep 1
: >"$D/probe"
t0=$(ms)
"$BIN" purge "1-$JOBS" | head -c 60; echo
purge=$(( $(ms) - t0 ))
cp "$D/probe" "$D/during"
touch "$D/stop"; wait "$PROBE" 2>/dev/null || true; PROBE=""
n=$(wc -l <"$D/during")
echo "purge of $JOBS x $TASKS tasks: $purge ms"
echo "jobs calls answered during it: $n; longest $(sort -n "$D/during" | tail -1) ms; median $(sort -n "$D/during" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') ms"
python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print('task rows left after the reply:', c.execute('SELECT COUNT(*) FROM tasks').fetchone()[0])" "$D/data/state.db"
