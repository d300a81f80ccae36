# Sourced by restart-compare.sh and big-job-restart.sh: `start_server` starts (or starts again,
# after a SIGKILL) a server that keeps its state in $D — hetsched on the fixed loopback port $PORT
# with data directory $D/server, or, with BIN=hq, HyperQueue ($HQ) with its journal $D/journal
# (HQ_FLUSH sets --journal-flush-period) — and returns once it answers a job listing. Sets SERVER
# to its PID. `free_port` prints a free loopback port.

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_server() {
    if [ "$BIN" = hq ]; then
        "$HQ" server start --server-dir "$D/hq" --journal "$D/journal" \
            ${HQ_FLUSH:+--journal-flush-period "$HQ_FLUSH"} >>"$D/server.log" 2>&1 &
        SERVER=$!
        until "$HQ" job list --all --server-dir "$D/hq" >/dev/null 2>&1; do sleep 0.01; done
    else
        "$BIN" server --listen "127.0.0.1:$PORT" --data-dir "$D/server" >>"$D/server.log" 2>&1 &
        SERVER=$!
        until "$BIN" jobs --server "http://127.0.0.1:$PORT" --token-file "$D/server/token" >/dev/null 2>&1; do
            sleep 0.01
        done
    fi
}
