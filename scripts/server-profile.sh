#!/bin/sh
# Where the server's CPU goes while it dispatches: one `hetsched bench-dispatch` run (2 agents ×
# 4 slots, TASKS `true` tasks) with `perf record --call-graph dwarf` attached to the server, and
# the samples sorted into what they were doing (outermost match wins, in this order):
#   fdatasync           the group commit's WAL sync (crate::durable)
#   store               SQLite: the transaction each event commits (task rows, job rows)
#   state               the state's event handling (heartbeat, placement, held calls' looks)
#   protobuf            encoding and decoding messages
#   grpc/http2/socket   tonic, hyper, h2 and the socket calls under them
#   tokio/threads       the runtime's scheduling, parking and wake-ups
#   other
# Prints the bench's JSON line, then one line per category with its share of the samples.
#
#   scripts/server-profile.sh target/release/hetsched 20000
#
# Needs `perf` (linux-perf) and permission to attach (perf_event_paranoid ≤ 1, or root).
set -eu
BIN=${1:?usage: $0 BIN [TASKS]}
N=${2:-20000}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
"$BIN" bench-dispatch --tasks "$N" --slots 4 --json >"$D/bench.json" 2>"$D/bench.err" &
B=$!
# The bench starts its own server: wait for it, then attach.
P=""
while [ -z "$P" ]; do
    kill -0 "$B" 2>/dev/null || { cat "$D/bench.err" >&2; exit 1; }
    P=$(pgrep -n -f " server --config [^ ]*hetsched-bench" || true)
    [ -n "$P" ] || sleep 0.02
done
perf record -F 1999 --call-graph dwarf,16384 -p "$P" -o "$D/perf.data" >"$D/perf.log" 2>&1 &
R=$!
wait "$B"
kill -INT "$R" 2>/dev/null || true
wait "$R" || true
cat "$D/bench.json"
perf script -i "$D/perf.data" 2>/dev/null | python3 -c '
import collections, sys
text = sys.stdin.read().split("\n\n")
rules = [
    ("fdatasync", ("fdatasync", "sync_through")),
    ("store", ("State::commit", "sqlite3")),
    ("state", ("on_heartbeat", "State::heartbeat", "Wire>::heartbeat", "State::job", "job_ended")),
    ("protobuf", ("prost", "encode", "decode")),
    ("grpc/http2/socket", ("h2::", "hyper", "tonic", "writev", "recv", "sendmsg")),
    ("tokio/threads", ("tokio", "futex", "schedule", "epoll")),
]
counts = collections.Counter()
total = 0
for sample in text:
    lines = [l.strip() for l in sample.strip().split("\n") if l.strip()]
    if len(lines) < 2:
        continue
    stack = " | ".join(lines[1:])
    total += 1
    counts[next((name for name, keys in rules if any(k in stack for k in keys)), "other")] += 1
print(f"{total} samples")
for name, _ in rules + [("other", ())]:
    print(f"{100 * counts[name] / max(total, 1):5.1f} %  {name}")
'
