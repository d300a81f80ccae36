#!/bin/sh
# What purged jobs cost a server: N one-task jobs (default 10,000) are submitted held, cancelled
# and purged (`hetsched purge all`-style: every finished job), then the server's resident memory
# (VmRSS) is read, and it is SIGKILLed and restarted; the restart is timed until `hetsched jobs`
# answers, with the memory after it. An empty server's figures come first.
#
#   cargo build --release -p hetsched-cli
#   scripts/measure-purged-jobs.sh target/release/hetsched 10000
set -eu
BIN=$(realpath "${1:-target/release/hetsched}")
N=${2:-10000}
D=$(mktemp -d)
SERVER=""
cleanup() {
    [ -n "$SERVER" ] && kill -9 "$SERVER" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$D"
}
trap cleanup EXIT
ms() { echo $(( $(date +%s%N) / 1000000 )); }
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
start() {
    rm -f "$D/data/address"
    RUST_LOG=warn "$BIN" server --data-dir "$D/data" --listen 127.0.0.1:0 >/dev/null 2>>"$D/server.log" &
    SERVER=$!
    while [ ! -s "$D/data/address" ]; do sleep 0.01; done
    export HETSCHED_SERVER="http://$(cat "$D/data/address")" HETSCHED_TOKEN_FILE="$D/data/token"
    until "$BIN" jobs >/dev/null 2>&1; do sleep 0.01; done
}
t0=$(ms); start
echo "empty server up in $(( $(ms) - t0 )) ms; VmRSS $(rss $SERVER) KiB"
seq 1 "$N" | xargs -P 4 -I{} "$BIN" submit --hold --name "job{}" -- true >/dev/null
"$BIN" cancel all >/dev/null
"$BIN" purge --older-than 0s >/dev/null
echo "$N jobs purged: VmRSS $(rss $SERVER) KiB; listed: $("$BIN" jobs --output json | tr -cd '{' | wc -c)"
kill -9 "$SERVER"; wait "$SERVER" 2>/dev/null || true
t0=$(ms); start
echo "restart (until \`jobs\` answers): $(( $(ms) - t0 )) ms; VmRSS after it $(rss $SERVER) KiB"
"$BIN" submit -- true >/dev/null
echo "the next job: $("$BIN" jobs --output json | tr -d ' \n' | grep -o '"id":[0-9]*' | head -1)"
