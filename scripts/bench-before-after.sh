#!/bin/sh
# Server CPU per task of two hetsched builds side by side with HyperQueue's native CLI, in the same
# run, alternating: BEFORE normal, AFTER normal, BEFORE scheduler-only, AFTER scheduler-only,
# HyperQueue — ROUNDS times. Each line: a label, then `bench-dispatch --json` /
# `scripts/hq-array-bench.sh` output; the load average after each round.
#   scripts/bench-before-after.sh BEFORE_BIN AFTER_BIN [ROUNDS] [TASKS]
# HQ (default `hq`) names HyperQueue's binary (see scripts/hq-array-bench.sh for its build).
set -eu
BEFORE=$1
AFTER=$2
ROUNDS=${3:-3}
N=${4:-10000}
HQ=${HQ:-hq}
cd "$(dirname "$0")/.."
round=1
while [ "$round" -le "$ROUNDS" ]; do
    for mode in normal sched; do
        flag=""
        [ "$mode" = sched ] && flag=--scheduler-only
        for bin in before after; do
            exe=$BEFORE
            [ "$bin" = after ] && exe=$AFTER
            printf "%s round%s %s " "$bin" "$round" "$mode"
            "$exe" bench-dispatch --tasks "$N" --slots 4 $flag --json 2>/dev/null | tail -1
        done
    done
    printf "hq round%s normal " "$round"
    HQ=$HQ scripts/hq-array-bench.sh "$N" 2>/dev/null | tail -1
    echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
    round=$((round + 1))
done
