#!/usr/bin/env python3
"""Compares hetsched's exported schedule with SimGrid's replay of it (divisible_replay's output):
prints `sends`, both makespans, their relative difference and the largest absolute difference of any
send's start, arrival or compute end.

    compare.py SCHEDULE.json REPLAY.out
"""
import json
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        ours = json.load(f)
    makespan, replayed = None, []
    with open(sys.argv[2]) as f:
        for line in f:
            word = line.split()
            if word[:1] == ["makespan"]:
                makespan = float(word[1])
            elif word[:1] == ["send"]:
                replayed.append([float(x) for x in word[2:5]])
    if makespan is None or len(replayed) != len(ours["sends"]):
        sys.exit(f"{sys.argv[2]}: no makespan, or not one line per send of {sys.argv[1]}")
    worst = 0.0
    for s, r in zip(ours["sends"], replayed):
        for a, b in zip((s["send_start"], s["send_end"], s["compute_end"]), r):
            worst = max(worst, abs(a - b))
    rel = abs(makespan - ours["makespan"]) / ours["makespan"]
    print(
        f'{len(replayed)} | {ours["makespan"]:.9f} s | {makespan:.9f} s | {rel:.1e} | {worst * 1e9:.0f} ns'
    )


if __name__ == "__main__":
    main()
