#!/bin/sh
# hetsched's divisible-load simulator checked against SimGrid (docs/divisible.md, "Checked against
# SimGrid"): every schedule below is planned and simulated by `hetsched sim divisible`, exported,
# and replayed in SimGrid's S4U (scripts/simgrid/divisible_replay.cpp) on the same star platform
# with SimGrid's plain network model (CM02: a transfer takes latency + size / bandwidth; no TCP
# window, no cross-traffic). One table row per case: sends, hetsched's makespan, SimGrid's, their
# relative difference, and the largest difference of any send's start, arrival or compute end.
# Cases with a prediction error replay the durations the run drew (schedule.py --drawn).
#
#   scripts/simgrid-divisible.sh            # needs g++ and SimGrid's headers (libsimgrid-dev)
#
# HETSCHED names the binary (default target/release/hetsched); OUT the scratch folder.
set -eu
cd "$(dirname "$0")/.."
. scripts/simgrid/prelude.sh
prelude "${TMPDIR:-/tmp}/hetsched-simgrid" divisible_replay
# Synthetic stars of N heterogeneous workers, seeded: speed 50-100 units/s, compute latency
# 1-10 ms, network latency 0.1-1 ms, no memory limit; bandwidth 200,000-400,000 units/s (100 and
# 1,000 workers) or ten times that (10,000 workers, so that UMR can use them all).
for spec in "100 2e5" "1000 2e5" "10000 2e6"; do
    set -- $spec
    python3 - "$1" "$2" "$OUT/star$1.toml" <<'PY'
import random, sys
n, bw, path = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
rng = random.Random(7)
with open(path, "w") as f:
    for i in range(n):
        f.write(f'[[worker]]\nname = "w{i}"\nspeed = {rng.uniform(50, 100):.3f}\n'
                f'compute_latency = {rng.uniform(0.001, 0.01):.4f}\n'
                f'bandwidth = {rng.uniform(bw, 2 * bw):.1f}\n'
                f'network_latency = {rng.uniform(1e-4, 1e-3):.5f}\n\n')
PY
done
echo "| platform | algorithm | load | error | sends | hetsched makespan | SimGrid makespan | relative difference | largest difference of a send's times |"
echo "|---|---|---|---|---|---|---|---|---|"
while read -r platform algo load error; do
    name=$(basename "$platform" .toml)-$algo-$load-$error
    "$HETSCHED" sim divisible --platform "$platform" --load "$load" --algo "$algo" --error "$error" \
        --export-schedule "$OUT/$name.json" --output json >/dev/null
    drawn=""
    [ "$error" = 0 ] || drawn=--drawn
    python3 scripts/simgrid/schedule.py replay-input "$OUT/$name.json" "$OUT/$name.txt" $drawn
    "$OUT/divisible_replay" "$OUT/$name.txt" --cfg=network/model:CM02 \
        --cfg=network/TCP-gamma:0 --cfg=network/crosstraffic:0 --log=root.thres:warning \
        >"$OUT/$name.out"
    echo "| $(basename "$platform" .toml) | $algo | $load | $error | $(python3 scripts/simgrid/schedule.py compare "$OUT/$name.json" "$OUT/$name.out") |"
done <<CASES
examples/platform-divisible-paper.toml umr 5000 0
examples/platform-divisible-paper.toml umrlm 5000 0
examples/platform-divisible-paper.toml umrlm 10000 0
examples/platform-divisible-paper.toml rumr 10000 0
examples/platform-divisible-paper.toml static 10000 0
$OUT/star100.toml umr 1000000 0
$OUT/star1000.toml umr 1000000 0
$OUT/star1000.toml umr 100000000 0
$OUT/star10000.toml umr 10000000 0
$OUT/star10000.toml umr 100000000 0
examples/platform-divisible-paper.toml rumr 10000 0.2
examples/platform-divisible-paper.toml umrlm 10000 0.2
$OUT/star1000.toml rumr 1000000 0.3
CASES
