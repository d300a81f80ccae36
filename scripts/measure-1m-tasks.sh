#!/bin/sh
# Paged reads on a huge job: a server and two agents (4 slots each) on loopback, one job of N `true`
# tasks (default 1,000,000). While two clients page through the whole task listing again and
# again and the agents run the first 3,000 tasks, it measures how long `hetsched tasks --job 1
# --limit 1000` takes as a whole process (connect, first page, print), five times, and samples the
# server's resident memory (VmRSS) every 0.2 s; it reports the largest sample and VmHWM.
#
#   cargo build --release -p hetsched-cli
#   scripts/measure-1m-tasks.sh target/release/hetsched 1000000
set -eu
BIN=$(realpath "${1:-target/release/hetsched}")
N=${2:-1000000}
D=$(mktemp -d)
PIDS=""
cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$D"
}
trap cleanup EXIT
ms() { echo $(( $(date +%s%N) / 1000000 )); }
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

RUST_LOG=warn "$BIN" server --data-dir "$D/data" --listen 127.0.0.1:0 --heartbeat-interval 200ms >/dev/null 2>"$D/server.log" &
SERVER=$!
PIDS="$PIDS $SERVER"
while [ ! -s "$D/data/address" ]; do sleep 0.05; done
export HETSCHED_SERVER="http://$(cat "$D/data/address")" HETSCHED_TOKEN_FILE="$D/data/token"
printf '[[application]]\nname = "t"\ntasks = %s\n[application.cpu]\ncommand = ["true"]\n' "$N" >"$D/job.toml"
t0=$(ms)
"$BIN" submit "$D/job.toml" >/dev/null
echo "submit of $N tasks: $(( $(ms) - t0 )) ms; server VmRSS after it: $(rss $SERVER) KiB"

# Two readers paging through the whole listing, over and over.
for r in 1 2; do
    (while :; do "$BIN" tasks --job 1 --output json >/dev/null 2>&1 || true; done) &
    PIDS="$PIDS $!"
done
# Memory sampler.
(peak=0; while kill -0 "$SERVER" 2>/dev/null; do
    v=$(rss $SERVER || echo 0); [ "${v:-0}" -gt "$peak" ] && peak=$v && echo "$peak" >"$D/peak"
    sleep 0.2; done) &
PIDS="$PIDS $!"
for i in 1 2; do
    RUST_LOG=warn "$BIN" agent --name "a$i" --cores 4 --token-file "$D/data/agent-token" --work-dir "$D/a$i" 2>"$D/agent$i.log" &
    PIDS="$PIDS $!"
done
t0=$(ms)
done_tasks=0
while [ "$done_tasks" -lt 3000 ]; do
    sleep 0.5
    done_tasks=$("$BIN" job 1 --output json | sed -n 's/.*"succeeded": *\([0-9]*\).*/\1/p' | head -1)
    done_tasks=${done_tasks:-0}
done
echo "3000+ tasks dispatched and succeeded ($done_tasks) in $(( $(ms) - t0 )) ms with two readers paging"
for i in 1 2 3 4 5; do
    t0=$(ms)
    "$BIN" tasks --job 1 --limit 1000 >/dev/null
    echo "first page (hetsched tasks --job 1 --limit 1000, whole process): $(( $(ms) - t0 )) ms"
done
echo "server VmRSS: peak sample $(cat "$D/peak") KiB, VmHWM $(awk '/^VmHWM:/ {print $2}' /proc/$SERVER/status) KiB"
