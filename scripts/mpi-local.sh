#!/usr/bin/env bash
# Multi-node tasks against a real MPI launcher: a server and three agents on this machine, and
# `hetsched submit --nodes 3` running Open MPI's `mpirun --hostfile "$HETSCHED_NODE_FILE"` (the
# node file lists this host three times: one slot per node). Checks docs/runtime.md
# "Multi-node tasks":
#   1. the task runs once, on the first of its three nodes, and mpirun starts 3 ranks from its
#      node file;
#   2. while it runs, a one-core task waits (its nodes are held whole) and says why it waits;
#   3. afterwards the one-core task runs.
# Needs Open MPI (`apt-get install openmpi-bin`, installed if missing and run as root). Not run
# by CI.
#
#   scripts/mpi-local.sh [HETSCHED_BINARY]      (default target/release/hetsched)
set -euo pipefail

BIN=$(realpath "${1:-target/release/hetsched}")
[ -x "$BIN" ] || { echo "no hetsched binary at $BIN (cargo build --release -p hetsched-cli)" >&2; exit 2; }
if ! command -v mpirun >/dev/null; then
  [ "$(id -u)" = 0 ] || { echo "needs Open MPI's mpirun (apt-get install openmpi-bin)" >&2; exit 2; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y openmpi-bin >/dev/null
fi
ROOT_FLAG=
[ "$(id -u)" = 0 ] && ROOT_FLAG=--allow-run-as-root

W=$(mktemp -d /tmp/hetsched-mpi.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  echo "(work directory: $W)"
}
trap cleanup EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }

"$BIN" server --listen 127.0.0.1:7630 --data-dir "$W/hs" >"$W/server.log" 2>&1 &
PIDS+=($!)
export HETSCHED_SERVER=http://127.0.0.1:7630 HETSCHED_TOKEN_FILE=$W/hs/token
for _ in $(seq 50); do [ -f "$W/hs/agent-token" ] && break; sleep 0.1; done
for n in a b c; do
  "$BIN" agent --server "$HETSCHED_SERVER" --token-file "$W/hs/agent-token" --name "$n" \
    --cores 1 --work-dir "$W/agent-$n" --log-listen 127.0.0.1:0 >"$W/agent-$n.log" 2>&1 &
  PIDS+=($!)
done
for _ in $(seq 100); do
  [ "$("$BIN" nodes --output json | grep -c '"alive": *true')" = 3 ] && break
  sleep 0.1
done
echo "$(mpirun --version | head -1); three agents of one core on $(hostname)"

echo "1. hetsched submit --nodes 3 --shell -- 'mpirun --hostfile \"\$HETSCHED_NODE_FILE\" -np \$HETSCHED_TOTAL_CORES …'"
"$BIN" submit --nodes 3 --name mpi --app mpi --shell -- \
  "mpirun $ROOT_FLAG --oversubscribe --hostfile \"\$HETSCHED_NODE_FILE\" -np \$HETSCHED_TOTAL_CORES \
   sh -c 'echo rank \$OMPI_COMM_WORLD_RANK of \$OMPI_COMM_WORLD_SIZE on \$(hostname); sleep 3'; \
   echo nodes \$HETSCHED_NODES on \$HETSCHED_NODE" >/dev/null
for _ in $(seq 100); do
  "$BIN" tasks --job 1 --output json | grep -q '"state": *"running"' && break
  sleep 0.1
done

echo "2. a one-core task waits while the three nodes are held"
"$BIN" submit --name small -- true >/dev/null
sleep 1
reason=$("$BIN" job 2 --output json | grep -o '"pending_reason": *"[^"]*"' | sed 's/.*: *"//; s/"$//')
echo "   job 2 pending because: $reason"
[ -n "$reason" ] || fail "the one-core task did not wait"

"$BIN" wait 1 --timeout 60s | sed 's/^/   /'
out=$("$BIN" log 1 mpi:0)
echo "$out" | sed 's/^/   /'
[ "$(echo "$out" | grep -c '^rank [0-2] of 3 on ')" = 3 ] || fail "mpirun did not start 3 ranks"
first=$(echo "$out" | sed -n 's/^nodes \([^,]*\),.* on \(.*\)$/\1 \2/p')
set -- $first
[ "${1:-x}" = "${2:-y}" ] || fail "the task did not run on the first of its nodes ($first)"

echo "3. then the one-core task runs"
"$BIN" wait 2 --timeout 30s | sed 's/^/   /'
echo "every check passed"
