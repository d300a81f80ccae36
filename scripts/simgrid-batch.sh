#!/bin/sh
# hetsched's batch simulator checked against SimGrid (docs/performance.md, "Batch simulator beside
# SimGrid"): each case runs `hetsched sim run` (its policy deciding on heartbeats), then SimGrid's S4U
# (scripts/simgrid/batch_replay.cpp) replays every task on its node from the instant hetsched started
# it: a disk whose read bandwidth concurrent readers share, CPU tasks reading in K = 8 chunks between
# computes, GPU tasks reading, copying and computing. One table row per case: tasks, both
# makespans, their relative difference, the largest difference of any task's end, and each
# simulator's largest distance from the exact ends (the same replay in rational arithmetic).
#
#   scripts/simgrid-batch.sh            # needs g++ and SimGrid's headers (libsimgrid-dev)
#   BIG=1 scripts/simgrid-batch.sh      # also 75,000 tasks on 200 nodes (about a minute)
#
# SimGrid runs with tighter numerical precision than its defaults (SG_CFG, below; `SG_CFG=` for its
# defaults: maxmin/precision 1e-5, surf/precision 1e-9). HETSCHED names the binary (default
# target/release/hetsched); OUT the scratch folder.
set -eu
cd "$(dirname "$0")/.."
SG_CFG=${SG_CFG---cfg=maxmin/precision:1e-9 --cfg=surf/precision:1e-12}
. scripts/simgrid/prelude.sh
prelude "${TMPDIR:-/tmp}/hetsched-simgrid-batch" batch_replay
# BIG: the mixed-generations cluster with 25 times the nodes (200) and the mixed workload with 50
# times the tasks (75,000).
if [ -n "${BIG:-}" ]; then
    python3 - "$OUT" <<'PY'
import re, sys
out = sys.argv[1]
def scale(src, dst, key, k):
    text = open(src).read()
    text = re.sub(rf"(?m)^{key} = (\d+)", lambda m: f"{key} = {int(m.group(1)) * k}", text)
    open(dst, "w").write(text)
scale("examples/cluster-mixed-generations.toml", f"{out}/big-cluster.toml", "count", 25)
scale("examples/workload-mixed.toml", f"{out}/big-workload.toml", "tasks", 50)
PY
fi
echo "| cluster | workload | policy | heartbeat | tasks | hetsched makespan | SimGrid makespan | relative difference | largest difference of a task's end | hetsched from exact | SimGrid from exact |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
while read -r cluster workload policy heartbeat; do
    [ -n "$cluster" ] || continue  # the BIG line, when BIG is unset
    name=$(basename "$cluster" .toml)-$(basename "$workload" .toml)-$policy-$heartbeat
    rm -rf "$OUT/$name"
    "$HETSCHED" sim run --cluster "$cluster" --workload "$workload" --policy "$policy" \
        --heartbeat "$heartbeat" --out "$OUT/$name" >/dev/null 2>&1
    python3 scripts/simgrid/batch.py replay-input "$cluster" "$workload" "$OUT/$name/result.json" \
        "$OUT/$name.txt"
    # shellcheck disable=SC2086
    "$OUT/batch_replay" "$OUT/$name.txt" --log=root.thres:warning $SG_CFG >"$OUT/$name.out"
    echo "| $(basename "$cluster" .toml) | $(basename "$workload" .toml) | $policy | $heartbeat | $(python3 scripts/simgrid/batch.py compare "$OUT/$name/result.json" "$OUT/$name.out" "$OUT/$name.txt") |"
done <<CASES
examples/cluster-hdas-paper.toml examples/workload-knn-nb-bp.toml fifo 1s
examples/cluster-hdas-paper.toml examples/workload-knn-nb-bp.toml hdas 1s
examples/cluster-hdas-paper.toml examples/workload-knn-nb-bp.toml hdas-hetero 1s
examples/cluster-hdas-paper.toml examples/workload-knn-nb-bp.toml hadoop-model 3s
examples/cluster-hdas-paper.toml examples/workload-mixed.toml drf 1s
examples/cluster-mixed-generations.toml examples/workload-mixed.toml hdas-hetero 1s
examples/cluster-mixed-generations.toml examples/workload-mixed.toml fifo 500ms
${BIG:+$OUT/big-cluster.toml $OUT/big-workload.toml hdas-hetero 1s}
CASES
