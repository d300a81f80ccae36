# Sourced by the scripts that measure a small cluster on this machine (idle-cpu.sh,
# latency-bench.sh): `start_cluster BIN` starts one server and two agents of 4 cores in a fresh
# directory, waits until both agents are up, and stops everything (and removes the directory)
# when the calling script exits. BIN is a hetsched binary, or `hq` for HyperQueue ($HQ, else on
# PATH: a server and two workers of 4 cpus; not vendored, see scripts/hq-array-bench.sh).
# SERVER_CONFIG, if set, is passed to a hetsched server as --config; AGENTS=N starts N agents
# (workers) instead of two; HQ_JOURNAL=1 starts HyperQueue's server with its journal.
# Sets D (the directory) and SERVER (the server's PID); for hetsched it also exports
# HETSCHED_SERVER and HETSCHED_TOKEN_FILE, so `"$BIN" submit …` reaches this server.

cleanup_cluster() {
    kill $(jobs -p) 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$D"
}

start_cluster() {
    local bin=$1 i
    AGENTS=${AGENTS:-2}
    D=$(mktemp -d)
    trap cleanup_cluster EXIT
    if [ "$bin" = hq ]; then
        HQ=${HQ:-hq}
        # HQ_JOURNAL=1: with its event journal (see scripts/hq-array-bench.sh).
        # shellcheck disable=SC2046
        "$HQ" server start --server-dir "$D" $([ "${HQ_JOURNAL:-0}" = 1 ] && echo --journal "$D/journal") \
            >"$D/server.log" 2>&1 &
        SERVER=$!
        until "$HQ" server info --server-dir "$D" >/dev/null 2>&1; do sleep 0.05; done
        for i in $(seq "$AGENTS"); do
            "$HQ" worker start --cpus 4 --server-dir "$D" >"$D/worker$i.log" 2>&1 &
        done
        until [ "$("$HQ" worker list --server-dir "$D" --output-mode quiet 2>/dev/null | wc -l)" -ge "$AGENTS" ]; do
            sleep 0.05
        done
    else
        # SERVER_CONFIG: a server configuration file (e.g. `[workflow] check_interval`).
        "$bin" server --listen 127.0.0.1:0 --data-dir "$D/server" \
            ${SERVER_CONFIG:+--config "$SERVER_CONFIG"} >"$D/server.log" 2>&1 &
        SERVER=$!
        until [ -s "$D/server/address" ]; do sleep 0.05; done
        export HETSCHED_SERVER="http://$(cat "$D/server/address")" HETSCHED_TOKEN_FILE="$D/server/token"
        for i in $(seq 0 $((AGENTS - 1))); do
            "$bin" agent --server "$HETSCHED_SERVER" --name "node-$i" --cores 4 \
                --token-file "$D/server/agent-token" --work-dir "$D/agent-$i" >"$D/agent-$i.log" 2>&1 &
        done
        until [ "$("$bin" nodes --output json 2>/dev/null | grep -o '"alive": *true' | wc -l)" -ge "$AGENTS" ]; do
            sleep 0.05
        done
    fi
}
