#!/usr/bin/env python3
"""hetsched's offload runs' network transfers and SimGrid's replay of them (scripts/simgrid-accel.sh).

    network.py replay-input RUN.json RUN.txt
        The plain text network_replay.cpp reads, from a run exported by `hetsched sim accel
        --export RUN.json`: every node's link (bandwidth in bytes per second, latency), then every
        transfer in start order (sender, receiver, bytes, start).
    network.py compare RUN.json REPLAY.out [RTT.out]
        One table row's cells after the case's: transfers, the last transfer's end in both, the
        largest absolute difference of any transfer's end (which bounds the last end's, so no
        relative difference is printed: docs/results/accelerators.md's table has none), and how
        many transfers shared a link direction with another; with RTT.out (the replay under
        SimGrid's latency-weighted sharing), also that replay's largest difference.
"""
import replay_out


def replay_input(run, out):
    index = {link["name"]: k for k, link in enumerate(run["links"])}
    with open(out, "w") as f:
        f.write(f'links {len(run["links"])}\n')
        for link in run["links"]:
            f.write(f'{link["bandwidth"]!r} {link["latency"]!r}\n')
        f.write(f'transfers {len(run["transfers"])}\n')
        for t in run["transfers"]:
            f.write(f'{index[t["src"]]} {index[t["dst"]]} {t["bytes"]} {t["start"]!r}\n')


def shared(run):
    """How many transfers shared a link direction (the sender's outgoing or the receiver's
    incoming) with another one for some time: where sharing is tested at all."""
    links = {link["name"]: link["latency"] for link in run["links"]}
    # The bytes move from the end of the path latency on.
    moving = [
        (t["src"], t["dst"], t["start"] + links[t["src"]] + links[t["dst"]], t["end"])
        for t in run["transfers"]
    ]
    count = 0
    for k, (src, dst, a, b) in enumerate(moving):
        if any(
            j != k and (s == src or d == dst) and c < b and a < e
            for j, (s, d, c, e) in enumerate(moving)
        ):
            count += 1
    return count


def compare(ours, replay, rtt=None):
    makespan, replayed = replay_out.read(replay, "transfer", len(ours["transfers"]), 1, 2)
    ends = [[t["end"]] for t in ours["transfers"]]
    last = max((t["end"] for t in ours["transfers"]), default=0.0)
    row = replay_out.row(ends, replayed, last, makespan, relative=False) + f" | {shared(ours)}"
    if rtt is not None:
        _, weighted = replay_out.read(rtt, "transfer", len(ours["transfers"]), 1, 2)
        worst = max((abs(a[0] - b[0]) for a, b in zip(ends, weighted)), default=0.0)
        row += f" | {worst * 1e3:.3f} ms"
    print(row)


if __name__ == "__main__":
    replay_out.main(__doc__, replay_input, compare, compare_extra=1)
