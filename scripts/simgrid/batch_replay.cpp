// Replays the tasks of a `hetsched sim run` in SimGrid (S4U, C++), each on the node and at the
// instant hetsched started it, so that the batch simulator's resource model — a disk whose read
// bandwidth its concurrent readers share equally, CPU tasks that interleave K reads with K
// computes, GPU tasks that read, copy and compute — can be checked against an independent
// simulator. Built and run by scripts/simgrid-batch.sh (needs SimGrid's development files, e.g.
// Debian's libsimgrid-dev; never part of the build).
//
// Usage: batch_replay TASKS.txt [SimGrid --cfg options]
// TASKS.txt: "nodes N", then N lines "disk_read_bytes_per_second", then "tasks T", then T lines
// "node start_seconds reads read_bytes compute_seconds copy_seconds": the task reads `read_bytes`
// and then computes `compute_seconds`, `reads` times over (a CPU task: K chunks; a GPU task: one
// read, then `copy_seconds` of copy before its compute). Compute and copy hold a core or a device
// of their own, so they are plain delays. Prints "task INDEX END_SECONDS" per task.
#include <simgrid/s4u.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace sg4 = simgrid::s4u;

namespace {
struct Task {
  int node;
  double start;
  int reads;
  double read_bytes;
  double compute;
  double copy;
  double end = 0;
};

std::vector<Task> tasks;
std::vector<sg4::Disk*> disks;

void run(size_t index) {
  Task& t = tasks[index];
  for (int k = 0; k < t.reads; k++) {
    disks[t.node]->read(static_cast<sg_size_t>(t.read_bytes));
    if (k == 0 && t.copy > 0)
      sg4::this_actor::sleep_for(t.copy);
    sg4::this_actor::sleep_for(t.compute);
  }
  t.end = sg4::Engine::get_clock();
}
// Starts each of a node's tasks at its instant (in start order), so that only running tasks
// hold an actor: one actor per task for a whole run would exhaust the process's memory mappings.
void launcher(std::vector<size_t> mine) {
  for (size_t index : mine) {
    sg4::this_actor::sleep_until(tasks[index].start);
    sg4::Actor::create("t" + std::to_string(index), sg4::this_actor::get_host(), run, index);
  }
}
}  // namespace

int main(int argc, char** argv) {
  sg4::Engine e(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TASKS.txt [--cfg=...]\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1]);
  std::string word;
  size_t n = 0;
  size_t m = 0;
  if (!(in >> word >> n) || word != "nodes") {
    std::fprintf(stderr, "%s: expected `nodes N` first\n", argv[1]);
    return 2;
  }
  auto* zone = sg4::create_full_zone("cluster");
  std::vector<sg4::Host*> hosts;
  for (size_t i = 0; i < n; i++) {
    double bandwidth = 0;
    if (!(in >> bandwidth)) {
      std::fprintf(stderr, "%s: node %zu: expected its disk's read bandwidth\n", argv[1], i);
      return 2;
    }
    auto* host = zone->create_host("n" + std::to_string(i), 1e9);
    disks.push_back(host->create_disk("d" + std::to_string(i), bandwidth, bandwidth)->seal());
    hosts.push_back(host);
  }
  zone->seal();
  if (!(in >> word >> m) || word != "tasks") {
    std::fprintf(stderr, "%s: expected `tasks T` after the nodes\n", argv[1]);
    return 2;
  }
  tasks.resize(m);
  for (auto& t : tasks)
    if (!(in >> t.node >> t.start >> t.reads >> t.read_bytes >> t.compute >> t.copy) || t.node < 0 ||
        static_cast<size_t>(t.node) >= n) {
      std::fprintf(stderr, "%s: a task names no node or lacks a field\n", argv[1]);
      return 2;
    }
  std::vector<std::vector<size_t>> by_node(n);
  for (size_t i = 0; i < m; i++)
    by_node[tasks[i].node].push_back(i);
  for (size_t node = 0; node < n; node++) {
    std::stable_sort(by_node[node].begin(), by_node[node].end(),
                     [](size_t a, size_t b) { return tasks[a].start < tasks[b].start; });
    sg4::Actor::create("launch" + std::to_string(node), hosts[node], launcher, by_node[node]);
  }
  e.run();
  for (size_t i = 0; i < m; i++)
    std::printf("task %zu %.9f\n", i, tasks[i].end);
  return 0;
}
