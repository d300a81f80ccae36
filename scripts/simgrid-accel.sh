#!/bin/sh
# hetsched's network model checked against SimGrid (docs/results/accelerators.md, "The network
# beside SimGrid"): each case runs `hetsched sim accel` (spec 01's offload model), exports every
# network transfer (an offloaded task's input to its ANode, its result back), and replays the
# transfers in SimGrid's S4U (scripts/simgrid/network_replay.cpp): each starts when hetsched
# started it, between the same nodes, with the same bytes, on a star of full-duplex links with the
# same bandwidths and latencies, and SimGrid says when it ends. One table row per case, the columns
# of docs/results/accelerators.md's table: transfers, the last transfer's end in both, and the
# largest difference of any transfer's end (which bounds the last one's: no relative difference)
# — with the transfers on a link sharing it equally, as hetsched's model says —, how many
# transfers shared a link, and,
# last, the largest difference under SimGrid's own CM02 sharing, which weighs each transfer's share
# by its path latency (network_replay.cpp, `equal` and `rtt`).
#
#   scripts/simgrid-accel.sh            # needs g++ and SimGrid's headers (libsimgrid-dev)
#
# HETSCHED names the binary (default target/release/hetsched); OUT the scratch folder.
set -eu
cd "$(dirname "$0")/.."
. scripts/simgrid/prelude.sh
prelude "${TMPDIR:-/tmp}/hetsched-simgrid-accel" network_replay
# A generated cluster of RACKS racks, seeded: per rack two to four ANodes (1-4 GPUs of speed
# 0.5-2) and three to six NNodes; every node's link 1, 2.5 or 10 Gbit/s with 20-200 us of latency.
# The workload is network-heavy, so transfers overlap on the links: offloads of 200 MB and 50 MB
# inputs (results come back at the same size) and CPU work.
gen() {
    python3 - "$1" "$2" "$OUT/cluster-$1-$2.toml" "$OUT/workload-$1.toml" <<'PY'
import random, sys
racks, seed, cluster, workload = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
rng = random.Random(seed)
with open(cluster, "w") as f:
    for r in range(racks):
        f.write(f'[[rack]]\nname = "r{r}"\n')
    for r in range(racks):
        kinds = ["a"] * rng.randint(2, 4) + ["n"] * rng.randint(3, 6)
        for k, kind in enumerate(kinds):
            bw = rng.choice(["125MB/s", "312.5MB/s", "1.25GB/s"])
            f.write(f'[[node]]\nname = "{kind}{r}-{k}"\nrack = "r{r}"\ncores = 8\nmemory = "32GiB"\n'
                    f'network = "{bw}"\nlatency = "{rng.randint(20, 200)}us"\n')
            if kind == "a":
                f.write(f'accelerator = [{{ kind = "gpu", count = {rng.randint(1, 4)}, '
                        f'memory = "16GiB", speed = {rng.choice([0.5, 1.0, 2.0])} }}]\n')
tasks = 40 * racks
with open(workload, "w") as f:
    f.write(f'[[application]]\nname = "solve"\ntasks = {tasks}\nsplit = "200MB"\naccelerator = "required"\n'
            '[application.gpu]\ncompute = "0.8s"\ncopy = "0.1s"\n')
    f.write(f'[[application]]\nname = "factor"\ntasks = {tasks}\nsplit = "50MB"\naccelerator = "preferred"\n'
            '[application.cpu]\ncompute = "6s"\n[application.gpu]\ncompute = "0.3s"\ncopy = "0.05s"\n')
    f.write(f'[[application]]\nname = "reduce"\ntasks = {racks * 8}\nsplit = "1MB"\naccelerator = "none"\n'
            '[application.cpu]\ncompute = "2s"\n')
PY
}
gen 3 1
gen 6 2
gen 4 3
echo "| cluster | workload | binding | transfers | hetsched: last transfer ends | SimGrid | largest difference of a transfer's end | transfers that shared a link | largest difference, SimGrid's latency-weighted sharing |"
echo "|---|---|---|---|---|---|---|---|---|"
while read -r cluster workload binding; do
    [ -n "$cluster" ] || continue
    name=$(basename "$cluster" .toml)-$(basename "$workload" .toml)-$binding
    "$HETSCHED" sim accel --cluster "$cluster" --workload "$workload" --binding "$binding" \
        --export "$OUT/$name.json" --output json >/dev/null
    python3 scripts/simgrid/network.py replay-input "$OUT/$name.json" "$OUT/$name.txt"
    for sharing in equal rtt; do
        "$OUT/network_replay" "$OUT/$name.txt" "$sharing" --cfg=network/model:CM02 \
            --cfg=network/TCP-gamma:0 --cfg=network/crosstraffic:0 --cfg=maxmin/precision:1e-9 \
            --cfg=surf/precision:1e-12 --log=root.thres:warning >"$OUT/$name-$sharing.out"
    done
    echo "| $(basename "$cluster" .toml) | $(basename "$workload" .toml) | $binding | $(python3 scripts/simgrid/network.py compare "$OUT/$name.json" "$OUT/$name-equal.out" "$OUT/$name-rtt.out") |"
done <<CASES
examples/cluster-offload.toml examples/workload-offload.toml plain
examples/cluster-offload.toml examples/workload-offload.toml container
$OUT/cluster-3-1.toml $OUT/workload-3.toml plain
$OUT/cluster-3-1.toml $OUT/workload-3.toml weighted
$OUT/cluster-3-1.toml $OUT/workload-3.toml container
$OUT/cluster-6-2.toml $OUT/workload-6.toml plain
$OUT/cluster-6-2.toml $OUT/workload-6.toml container
$OUT/cluster-4-3.toml $OUT/workload-4.toml container
$OUT/cluster-4-3.toml $OUT/workload-4.toml weighted
CASES
