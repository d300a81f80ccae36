#!/usr/bin/env python3
"""Turns a schedule exported by `hetsched sim divisible --export-schedule` into the plain text
divisible_replay.cpp reads: the workers (speed, compute latency, bandwidth, network latency, in
load units per second and seconds), then the sends in order (worker, size).

    schedule_to_simgrid.py SCHEDULE.json SCHEDULE.txt
"""
import json
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        schedule = json.load(f)
    with open(sys.argv[2], "w") as f:
        f.write(f'workers {len(schedule["workers"])}\n')
        for w in schedule["workers"]:
            f.write(
                f'{w["speed"]!r} {w["compute_latency"]!r} {w["bandwidth"]!r} {w["network_latency"]!r}\n'
            )
        f.write(f'sends {len(schedule["sends"])}\n')
        for s in schedule["sends"]:
            f.write(f'{s["worker"]} {s["size"]!r}\n')


if __name__ == "__main__":
    main()
