#!/bin/sh
# hetsched's task graph simulator checked against SimGrid (docs/results/graphs.md, "Checked against
# SimGrid"): each case below runs `hetsched sim graph` under each balancer (static, centralised,
# pcddb), exports every instance, and replays the run in SimGrid's S4U
# (scripts/simgrid/graph_replay.cpp): the launch node's task manager, every node's agent and cores
# as SimGrid actors, messages as SimGrid communications over links carrying the latencies (one byte
# each), instances as SimGrid executions. The replay takes each instance's node from the export
# (static fixes it before the run, centralised when it is ready: both are sent it when ready, as
# in the replay) and, for pcddb, when its node accepted it from a request (the protocol itself is
# not replayed); readiness, the core each node picks, the queues and the results are the
# replay's own, so any difference is in how the two simulators compute the times. Each case runs
# with both ways a node may run what it holds (`--execution queue`, and `time-share`, where
# SimGrid's own CPU model shares a node's cores among its instances); BIG cases with queues only.
# One table row per case, balancer and execution: instances, hetsched's makespan, SimGrid's, their relative difference,
# and the largest difference of any instance's ready, start or end.
#
#   scripts/simgrid-graph.sh            # needs g++ and SimGrid's headers (libsimgrid-dev)
#   BIG=1 scripts/simgrid-graph.sh      # adds 100,000 instances on 100 nodes, 1,000,000 on 1,000
#
# HETSCHED names the binary (default target/release/hetsched); OUT the scratch folder.
set -eu
cd "$(dirname "$0")/.."
. scripts/simgrid/prelude.sh
prelude "${TMPDIR:-/tmp}/hetsched-simgrid-graph" graph_replay
# Generated cases (graph_million's shape, crates/sim/examples/graph_million.rs): N nodes, 60 %
# dual-core (speed 1.0), 30 % quad-core (0.8), 10 % eight-core (0.6), racks of 40, 100 µs per node;
# four tasks chained instance by instance, lognormal costs (mean 1 s, cv 0.5), and a last task of
# 10 instances waiting for all of the fourth.
gen() {
    python3 - "$1" "$2" "$OUT/cluster$1.toml" "$OUT/workflow$2.toml" <<'PY'
import sys
nodes, instances, cluster, workflow = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
with open(cluster, "w") as f:
    for r in range((nodes + 39) // 40):
        f.write(f'[[rack]]\nname = "r{r}"\n')
    for i in range(nodes):
        cores, speed = (8, 0.6) if i % 10 == 0 else (4, 0.8) if i % 10 <= 3 else (2, 1.0)
        f.write(f'[[node]]\nname = "n{i:04}"\nrack = "r{i // 40}"\ncores = {cores}\n'
                f'core_speed = {speed}\nlatency = "100us"\n')
per = instances // 4
with open(workflow, "w") as f:
    prev = None
    for name in ("pre", "inter", "mm5", "post"):
        f.write(f'[[task]]\nname = "{name}"\ninstances = "1..={per}"\n'
                f'cost = {{ mean = "1s", cv = 0.5 }}\noutputs = ["{name}"]\n')
        if prev:
            f.write(f'inputs = ["{prev}"]\n')
        prev = name
    f.write('[[task]]\nname = "plot"\ninstances = 10\ncost = "2s"\ninputs = ["post"]\n')
PY
}
gen 100 20000
if [ -n "${BIG:-}" ]; then gen 100 100000; gen 1000 1000000; fi
echo "| cluster | workflow | balancer | execution | launch | seed | instances | hetsched makespan | SimGrid makespan | relative difference | largest difference of an instance's times |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
while read -r cluster workflow latency launch seed executions; do
    [ -n "$cluster" ] || continue
    for execution in $(echo "$executions" | tr , ' '); do
    for balancer in static centralised pcddb; do
        name=$(basename "$cluster" .toml)-$(basename "$workflow" .toml)-$seed-$balancer-$execution
        lat=""
        [ "$latency" = - ] || lat="--latency $latency"
        # shellcheck disable=SC2086
        "$HETSCHED" sim graph --cluster "$cluster" --workflow "$workflow" $lat --launch "$launch" \
            --balancer "$balancer" --execution "$execution" --seed "$seed" \
            --export "$OUT/$name.json" --output json >/dev/null
        python3 scripts/simgrid/graph.py replay-input "$OUT/$name.json" "$OUT/$name.txt"
        "$OUT/graph_replay" "$OUT/$name.txt" --cfg=network/model:CM02 --cfg=network/TCP-gamma:0 \
            --cfg=network/crosstraffic:0 --cfg=maxmin/precision:1e-9 --cfg=surf/precision:1e-12 \
            --log=root.thres:warning >"$OUT/$name.out"
        echo "| $(basename "$cluster" .toml) | $(basename "$workflow" .toml) | $balancer | $execution | $launch | $seed | $(python3 scripts/simgrid/graph.py compare "$OUT/$name.json" "$OUT/$name.out") |"
    done
    done
done <<CASES
examples/cluster-pcddb-paper.toml examples/workflow-mm5.toml examples/latency-pcddb-paper.toml n33 1 queue,time-share
examples/cluster-pcddb-paper.toml examples/workflow-mm5.toml examples/latency-pcddb-paper.toml n33 2 queue,time-share
examples/cluster-pcddb-paper.toml examples/workflow-mm5.toml examples/latency-pcddb-paper.toml n01 3 queue,time-share
docs/results/graphs/cluster-sc2.toml docs/results/graphs/workflow-mm5-12h.toml - n33 1 queue,time-share
examples/cluster-graph-small.toml examples/workflow-loop.toml - dual-1 1 queue,time-share
$OUT/cluster100.toml $OUT/workflow20000.toml - n0000 1 queue,time-share
$OUT/cluster100.toml $OUT/workflow20000.toml - n0005 2 queue,time-share
${BIG:+$OUT/cluster100.toml $OUT/workflow100000.toml - n0000 1 queue}
${BIG:+$OUT/cluster1000.toml $OUT/workflow1000000.toml - n0000 1 queue}
CASES
