#!/usr/bin/env python3
"""hetsched's divisible schedules and SimGrid's replay of them (scripts/simgrid-divisible.sh).

    schedule.py replay-input SCHEDULE.json SCHEDULE.txt [--drawn]
        The plain text divisible_replay.cpp reads: the workers (speed, compute latency, bandwidth,
        network latency, in load units per second and seconds), then the sends in order (worker, units
        to transfer, units to compute), from a schedule exported by `hetsched sim divisible
        --export-schedule`. Both are the chunk's size; with --drawn (a run with `--error E`), they are
        what the run's drawn factors made of it: the exported transfer and compute times, less the
        latencies, times the nominal bandwidth and speed — so SimGrid replays the same perturbed
        durations, and the check is of the protocol's timing (one port, the one-buffer wait, RUMR's
        tail order), not of the draws.
    schedule.py compare SCHEDULE.json REPLAY.out
        One table row: sends, both makespans, their relative difference, and the largest absolute
        difference of any send's start, arrival or compute end.
"""
import json
import sys

import replay_out


def replay_input(schedule, out, drawn):
    workers = schedule["workers"]
    with open(out, "w") as f:
        f.write(f"workers {len(workers)}\n")
        for w in workers:
            f.write(
                f'{w["speed"]!r} {w["compute_latency"]!r} {w["bandwidth"]!r} {w["network_latency"]!r}\n'
            )
        f.write(f'sends {len(schedule["sends"])}\n')
        for s in schedule["sends"]:
            transfer = compute = s["size"]
            if drawn:
                w = workers[s["worker"]]
                transfer = (s["send_end"] - s["send_start"] - w["network_latency"]) * w["bandwidth"]
                compute = (s["compute_end"] - s["compute_start"] - w["compute_latency"]) * w["speed"]
            f.write(f'{s["worker"]} {transfer!r} {compute!r}\n')


def compare(ours, replay):
    makespan, replayed = replay_out.read(replay, "send", len(ours["sends"]), 2, 5)
    times = [[s["send_start"], s["send_end"], s["compute_end"]] for s in ours["sends"]]
    print(replay_out.row(times, replayed, ours["makespan"], makespan))


def main():
    args = sys.argv[1:]
    drawn = args[-1:] == ["--drawn"] and args[0] == "replay-input"
    if drawn:
        args = args[:-1]
    if len(args) != 3 or args[0] not in ("replay-input", "compare"):
        sys.exit(__doc__)
    with open(args[1]) as f:
        schedule = json.load(f)
    if args[0] == "replay-input":
        replay_input(schedule, args[2], drawn)
    else:
        compare(schedule, args[2])


if __name__ == "__main__":
    main()
