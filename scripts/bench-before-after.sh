#!/bin/sh
# Server CPU per task of two hetsched builds side by side with HyperQueue's native CLI, in the same
# run, alternating: BEFORE normal, AFTER normal, BEFORE scheduler-only, AFTER scheduler-only,
# HyperQueue (without, then with its journal; then zero-worker if HQ_ZERO is set) — ROUNDS times. Each line: a label, then `bench-dispatch --json` /
# `scripts/hq-array-bench.sh` output; the load average after each round.
#   scripts/bench-before-after.sh BEFORE_BIN AFTER_BIN [ROUNDS] [TASKS]
# AFTER_FLAGS: extra `bench-dispatch` flags for AFTER only (e.g. `--poll-ms 5`, the period an
# older BEFORE polls at); BEFORE_FLAGS likewise for BEFORE. BEFORE and AFTER may be one binary
# run with different flags (e.g. AFTER_FLAGS="--prefetch 8"). AFTER2_FLAGS, if set, adds one
# more line per mode for each comma-separated entry: AFTER run with those flags
# (e.g. AFTER2_FLAGS="--prefetch 8,--prefetch 32").
# HQ (default `hq`) names HyperQueue's binary (see scripts/hq-array-bench.sh for its build); it
# runs without and with its journal (HQ_JOURNAL=1). HQ_ZERO, if set, names a zero-worker build of
# hq (RUSTFLAGS="--cfg zero_worker": tasks finish without a process), run beside
# `--scheduler-only`.
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
        # BEFORE, AFTER, then AFTER once more per comma-separated entry of AFTER2_FLAGS.
        set -- before after
        if [ -n "${AFTER2_FLAGS:-}" ]; then
            old_ifs=$IFS
            IFS=,
            # shellcheck disable=SC2086
            set -- before after $AFTER2_FLAGS
            IFS=$old_ifs
        fi
        for entry in "$@"; do
            case $entry in
            before) bin=before exe=$BEFORE extra=${BEFORE_FLAGS:-} ;;
            after) bin=after exe=$AFTER extra=${AFTER_FLAGS:-} ;;
            *) bin="after[$entry]" exe=$AFTER extra=$entry ;;
            esac
            printf "%s round%s %s " "$bin" "$round" "$mode"
            # shellcheck disable=SC2086
            "$exe" bench-dispatch --tasks "$N" --slots 4 $flag $extra --json 2>/dev/null | tail -1
        done
    done
    printf "hq round%s normal " "$round"
    HQ=$HQ scripts/hq-array-bench.sh "$N" 2>/dev/null | tail -1
    printf "hq round%s journal " "$round"
    HQ=$HQ HQ_JOURNAL=1 scripts/hq-array-bench.sh "$N" 2>/dev/null | tail -1
    if [ -n "${HQ_ZERO:-}" ]; then
        printf "hq round%s zero-worker " "$round"
        HQ=$HQ_ZERO scripts/hq-array-bench.sh "$N" 2>/dev/null | tail -1
    fi
    echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
    round=$((round + 1))
done
