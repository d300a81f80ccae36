#!/bin/sh
# Memory and restart time of a server holding N finished tasks (default 1,000,000): one job of N
# `true` tasks is submitted and cancelled (every task terminal: the job is finished), the server
# is given 7 s (retention passes run every 5 s), then its resident memory (VmRSS) is read; the
# server is SIGKILLed and restarted, and the restart is timed until `hetsched jobs` answers, with
# the memory after it. With a binary that has `hetsched purge`, the job is then purged and the
# store's size and another restart are measured.
#
#   cargo build --release -p hetsched-cli
#   scripts/measure-retention.sh target/release/hetsched 1000000
set -eu
BIN=$(realpath "${1:-target/release/hetsched}")
N=${2:-1000000}
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
store() { du -k -c "$D"/data/state.db* | tail -1 | cut -f1; }
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
printf '[[application]]\nname = "t"\ntasks = %s\n[application.cpu]\ncommand = ["true"]\n' "$N" >"$D/job.toml"
"$BIN" submit "$D/job.toml" >/dev/null
"$BIN" cancel 1 >/dev/null
sleep 7
echo "$N finished tasks held: VmRSS $(rss $SERVER) KiB; store $(store) KiB"
kill -9 "$SERVER"; wait "$SERVER" 2>/dev/null || true
t0=$(ms); start
echo "restart (until \`jobs\` answers): $(( $(ms) - t0 )) ms; VmRSS after it $(rss $SERVER) KiB"
"$BIN" jobs | tail -3
if "$BIN" purge --help >/dev/null 2>&1; then
    "$BIN" purge 1
    echo "after the purge: VmRSS $(rss $SERVER) KiB; store $(store) KiB"
    kill -9 "$SERVER"; wait "$SERVER" 2>/dev/null || true
    t0=$(ms); start
    echo "restart after the purge: $(( $(ms) - t0 )) ms; VmRSS after it $(rss $SERVER) KiB"
fi
