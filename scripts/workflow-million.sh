#!/bin/bash
# A million-instance workflow on a small cluster (one server, two agents, on this machine): the
# submission's time, how many instances succeeded 3 s later, the time of `hetsched cancel`, and
# after the server is SIGKILLed, how long a restarted one takes until a job listing answers (and
# the job's state it then reports).
#   scripts/workflow-million.sh target/release/hetsched
set -u
H=$1
D=$(mktemp -d)
export HETSCHED_SERVER=http://127.0.0.1:7492 HETSCHED_TOKEN_FILE=$D/d/token
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$D"' EXIT
"$H" server --data-dir "$D/d" --listen 127.0.0.1:7492 >"$D/s.log" 2>&1 &
S=$!
until [ -s "$D/d/address" ]; do sleep 0.05; done
"$H" agent --token-file "$D/d/agent-token" --name m1 --work-dir "$D/w1" >/dev/null 2>&1 &
"$H" agent --token-file "$D/d/agent-token" --name m2 --work-dir "$D/w2" >/dev/null 2>&1 &
until [ "$("$H" nodes --output json 2>/dev/null | grep -o '"alive": *true' | wc -l)" -ge 2 ]; do sleep 0.05; done
printf '[[task]]\nname = "t"\ninstances = 1000000\ncommand = "true"\n' >"$D/m.toml"
t0=$(date +%s.%N); "$H" submit "$D/m.toml" >/dev/null; t1=$(date +%s.%N)
sleep 3
ok=$("$H" jobs --output json | grep -o '"succeeded": *[0-9]*' | head -1 | grep -o '[0-9]*$')
t2=$(date +%s.%N); "$H" cancel 1 >/dev/null; t3=$(date +%s.%N)
kill -9 $S; wait $S 2>/dev/null
t4=$(date +%s.%N)
"$H" server --data-dir "$D/d" --listen 127.0.0.1:7492 >"$D/s2.log" 2>&1 &
until "$H" jobs >/dev/null 2>&1; do sleep 0.01; done
t5=$(date +%s.%N)
state=$("$H" jobs --output json | grep -o '"state": *"[a-z]*"' | head -1 | grep -o '[a-z]*"$' | tr -d '"')
printf '{"submit_s":%.3f,"succeeded_after_3s":%d,"cancel_s":%.3f,"restart_s":%.3f,"state":"%s"}\n' \
    "$(echo "$t1 - $t0" | bc)" "$ok" "$(echo "$t3 - $t2" | bc)" "$(echo "$t5 - $t4" | bc)" "$state"
