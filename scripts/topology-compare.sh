#!/bin/bash
# Word count on a server and three 2-core agents on loopback (the real binary), submitted twice
# at once: one-phase and even with 3 workers. Prints nodes and workers used, inter-node tuples of
# all tuples passed, and the peak inter-node tuples/s `topology show` measured (2 s windows).
# HETSCHED=path/to/hetsched (default target/debug/hetsched). Figures: docs/streams-runtime.md.
# usage: scripts/topology-compare.sh SPOUTS SPLITS COUNTS CPU RATE REPEAT
B=$(realpath "${HETSCHED:-target/debug/hetsched}")
W=$(mktemp -d)
cd "$W"
$B server --listen 127.0.0.1:0 --dead-timeout 2s --data-dir data 2>server.log & S=$!
while [ ! -s data/address ]; do sleep 0.2; done; A=$(cat data/address)
for n in a1 a2 a3; do $B agent --server http://$A --name $n --cores 2 --token-file data/agent-token --work-dir "$W/$n" 2>$n.log & done
sleep 1.5
for p in one even; do
cat > $p.toml <<T
name = "wc-$p"
[[component]]
name = "sentences"
kind = "spout"
parallelism = $1
cpu = $4
builtin = "corpus-spout"
params = { lines = ["the quick brown fox jumps over the lazy dog", "a stitch in time saves nine", "the early bird catches the worm", "actions speak louder than words"], repeat = $6, reliable = true, rate = $5 }
[[component]]
name = "split"
kind = "bolt"
parallelism = $2
cpu = $4
builtin = "split"
[[component]]
name = "count"
kind = "bolt"
parallelism = $3
cpu = $4
builtin = "count"
params = { output = "$p-{index}.tsv", every = "100ms" }
[[stream]]
from = "sentences"
to = "split"
rate = 300.0
[[stream]]
from = "split"
to = "count"
grouping = "fields"
rate = 2000.0
T
done
C="--server http://$A --token-file data/token"
$B topology submit one.toml --placer one-phase --interval 0s $C
$B topology submit even.toml --placer even --workers 3 --interval 0s $C
peak1=0; peak2=0
for i in $(seq 1 60); do
  sleep 1
  o=$($B topology show wc-one --output json $C); e=$($B topology show wc-even --output json $C)
  r1=$(echo "$o" | python3 -c "import json,sys; print(json.load(sys.stdin)['inter_node_tuples_per_s'])")
  r2=$(echo "$e" | python3 -c "import json,sys; print(json.load(sys.stdin)['inter_node_tuples_per_s'])")
  peak1=$(python3 -c "print(max($peak1,$r1))"); peak2=$(python3 -c "print(max($peak2,$r2))")
  d1=$(echo "$o" | python3 -c "import json,sys; print(json.load(sys.stdin)['spouts_done'])")
  d2=$(echo "$e" | python3 -c "import json,sys; print(json.load(sys.stdin)['spouts_done'])")
  [ "$d1" = True ] && [ "$d2" = True ] && break
done
echo "$o" | python3 -c "import json,sys; s=json.load(sys.stdin); print('one-phase', s['nodes_used'], 'nodes', len(s['workers']), 'workers; inter-node', s['inter_node_tuples_total'], 'of', s['tuples_total'])"
echo "$e" | python3 -c "import json,sys; s=json.load(sys.stdin); print('even     ', s['nodes_used'], 'nodes', len(s['workers']), 'workers; inter-node', s['inter_node_tuples_total'], 'of', s['tuples_total'])"
echo "peak inter-node t/s: one-phase $peak1 even $peak2"
kill $S; for j in $(jobs -p); do kill $j 2>/dev/null; done; wait 2>/dev/null
