#!/usr/bin/env python3
"""hetsched's task graph runs and SimGrid's replay of them (scripts/simgrid-graph.sh).

    graph.py replay-input RUN.json RUN.txt
        The plain text graph_replay.cpp reads, from a run exported by `hetsched sim graph
        --balancer B --export RUN.json`: every node (cores, core speed, one-way latency from
        and to the launch node), every task (instances, processes, the producers it waits for and
        how), every instance (the node its balancer gave it, its drawn cost) and, for a pcddb
        run, every placement in the run's order (when its node took which instance), and how
        nodes run what they hold (`queue` or `time-share`).
    graph.py compare RUN.json REPLAY.out
        One table row: instances, both makespans, their relative difference, and the largest
        absolute difference of any instance's ready, start or end time.
"""
import replay_out

# A dependency's kind as graph_replay.cpp reads it.
KINDS = {"instance-wise": 0, "all": 1, "one-to-one": 2}


def replay_input(run, out):
    node_index = {n["name"]: k for k, n in enumerate(run["nodes"])}
    task_index = {t["name"]: k for k, t in enumerate(run["tasks"])}
    with open(out, "w") as f:
        f.write(f'nodes {len(run["nodes"])}\n')
        for n in run["nodes"]:
            f.write(
                f'{n["cores"]} {n["core_speed"]!r} {n["latency_from_launch"]!r} {n["latency_to_launch"]!r}\n'
            )
        f.write(f'tasks {len(run["tasks"])}\n')
        for t in run["tasks"]:
            deps = " ".join(f'{task_index[d["task"]]} {KINDS[d["kind"]]}' for d in t["depends_on"])
            f.write(f'{t["instances"]} {t["processes"]} {len(t["depends_on"])} {deps}\n')
        f.write(f'instances {len(run["instances"])}\n')
        for i in run["instances"]:
            f.write(f'{node_index[i["node"]]} {i["cost"]!r}\n')
        # static and centralised send each instance to its node when it is ready, as the replay
        # does; pcddb's nodes take instances from travelling requests: the replay places them
        # when and where the run did.
        placed = []
        if run.get("balancer") == "pcddb":
            placed = sorted(range(len(run["instances"])), key=lambda k: run["instances"][k]["placement"])
        f.write(f"placements {len(placed)}\n")
        for k in placed:
            i = run["instances"][k]
            f.write(f'{i["placed"]!r} {k}\n')
        # How nodes run what they hold (exports before it existed: queue).
        f.write(f'execution {run.get("execution", "queue")}\n')


def compare(ours, replay):
    makespan, replayed = replay_out.read(replay, "instance", len(ours["instances"]), 1, 4)
    times = [[i["ready"], i["start"], i["end"]] for i in ours["instances"]]
    print(replay_out.row(times, replayed, ours["makespan"], makespan))


if __name__ == "__main__":
    replay_out.main(__doc__, replay_input, compare)
