#!/usr/bin/env python3
"""hetsched's divisible schedules and SimGrid's replay of them (scripts/simgrid-divisible.sh).

    schedule.py replay-input SCHEDULE.json SCHEDULE.txt
        The plain text divisible_replay.cpp reads: the workers (speed, compute latency, bandwidth,
        network latency, in load units per second and seconds), then the sends in order (worker, size),
        from a schedule exported by `hetsched sim divisible --export-schedule`.
    schedule.py compare SCHEDULE.json REPLAY.out
        One table row: sends, both makespans, their relative difference, and the largest absolute
        difference of any send's start, arrival or compute end.
"""
import json
import sys


def replay_input(schedule, out):
    with open(out, "w") as f:
        f.write(f'workers {len(schedule["workers"])}\n')
        for w in schedule["workers"]:
            f.write(
                f'{w["speed"]!r} {w["compute_latency"]!r} {w["bandwidth"]!r} {w["network_latency"]!r}\n'
            )
        f.write(f'sends {len(schedule["sends"])}\n')
        for s in schedule["sends"]:
            f.write(f'{s["worker"]} {s["size"]!r}\n')


def compare(ours, replay):
    makespan, replayed = None, []
    with open(replay) as f:
        for line in f:
            word = line.split()
            if word[:1] == ["makespan"]:
                makespan = float(word[1])
            elif word[:1] == ["send"]:
                replayed.append([float(x) for x in word[2:5]])
    if makespan is None or len(replayed) != len(ours["sends"]):
        sys.exit(f"{replay}: no makespan, or not one line per send of the schedule")
    worst = 0.0
    for s, r in zip(ours["sends"], replayed):
        for a, b in zip((s["send_start"], s["send_end"], s["compute_end"]), r):
            worst = max(worst, abs(a - b))
    rel = abs(makespan - ours["makespan"]) / ours["makespan"]
    print(
        f'{len(replayed)} | {ours["makespan"]:.9f} s | {makespan:.9f} s | {rel:.1e} | {worst * 1e9:.0f} ns'
    )


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("replay-input", "compare"):
        sys.exit(__doc__)
    with open(sys.argv[2]) as f:
        schedule = json.load(f)
    if sys.argv[1] == "replay-input":
        replay_input(schedule, sys.argv[3])
    else:
        compare(schedule, sys.argv[3])


if __name__ == "__main__":
    main()
