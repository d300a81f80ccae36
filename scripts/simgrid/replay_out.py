"""What the SimGrid replays print, read back and set beside hetsched's run (schedule.py, graph.py).

A replay prints `makespan SECONDS`, then one line per item (`send …`, `instance …`) of numbers.
"""
import json
import sys


def read(replay, tag, count, first, last):
    """The makespan and, per `tag` line, its numbers `first`..`last` (word positions); exits when
    the file does not hold a makespan and `count` such lines."""
    makespan, items = None, []
    with open(replay) as f:
        for line in f:
            word = line.split()
            if word[:1] == ["makespan"]:
                makespan = float(word[1])
            elif word[:1] == [tag]:
                items.append([float(x) for x in word[first:last]])
    if makespan is None or len(items) != count:
        sys.exit(f"{replay}: no makespan, or not one `{tag}` line per {tag} of the run")
    return makespan, items


def row(ours, theirs, ours_makespan, makespan, relative=True):
    """One table row's cells: items, both makespans, their relative difference (unless
    `relative` is false: a table that leaves it out, as the network's), and the largest absolute
    difference between matching times of `ours` and `theirs` (lists of time lists)."""
    worst = max(
        (abs(a - b) for o, t in zip(ours, theirs) for a, b in zip(o, t)), default=0.0
    )
    cells = [f"{len(theirs)}", f"{ours_makespan:.9f} s", f"{makespan:.9f} s"]
    if relative:
        cells.append(f"{abs(makespan - ours_makespan) / ours_makespan:.1e}")
    cells.append(f"{worst * 1e9:.0f} ns")
    return " | ".join(cells)


def main(doc, replay_input, compare, compare_extra=0):
    """The command line of a replay's glue: `replay-input RUN.json RUN.txt` calls
    `replay_input(run, path)`, `compare RUN.json REPLAY.out [up to compare_extra more]` calls
    `compare(run, path, ...)`; anything else prints `doc` and exits."""
    args = sys.argv[1:]
    ok = (args[:1] == ["replay-input"] and len(args) == 3) or (
        args[:1] == ["compare"] and 3 <= len(args) <= 3 + compare_extra
    )
    if not ok:
        sys.exit(doc)
    with open(args[1]) as f:
        run = json.load(f)
    if args[0] == "replay-input":
        replay_input(run, args[2])
    else:
        compare(run, *args[2:])
