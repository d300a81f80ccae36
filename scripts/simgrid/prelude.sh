# Sourced by the scripts/simgrid-*.sh checks, from the repository root: `prelude OUT_DEFAULT REPLAY`
# sets HETSCHED (default target/release/hetsched) and OUT (default OUT_DEFAULT), creates OUT, checks
# the binary, and builds scripts/simgrid/REPLAY.cpp into $OUT/REPLAY against SimGrid.
prelude() {
    HETSCHED=${HETSCHED:-target/release/hetsched}
    OUT=${OUT:-$1}
    mkdir -p "$OUT"
    [ -x "$HETSCHED" ] || { echo "no $HETSCHED: cargo build --release -p hetsched-cli" >&2; exit 2; }
    g++ -O2 -std=c++17 -o "$OUT/$2" "scripts/simgrid/$2.cpp" -lsimgrid ||
        { echo "building the replay needs g++ and SimGrid (apt-get install libsimgrid-dev)" >&2; exit 2; }
}
