// Replays a task graph run under static placement (`hetsched sim graph --balancer static
// --export FILE.json`) in SimGrid (S4U, C++), so that hetsched's graph simulator can be checked
// against an independent simulator, and timed against it. Built and run by
// scripts/simgrid-graph.sh (needs SimGrid's development files, e.g. Debian's libsimgrid-dev;
// never part of the build).
//
// The model is spec 05's, as docs/results/graphs.md states it:
// - the launch node's task manager marks an instance ready when every producer it waits for has
//   finished (a one-to-one dependency: the producer's instance of the same number; an
//   instance-wise one: the producer's instances of the same argument value, all their processes;
//   an all-to-all one: the whole producer task) and sends its pre-assigned
//   node a `dispatch` message; results travel back as `result` messages; a message takes the
//   one-way latency between the two nodes (SimGrid's network: one-byte messages over a star zone
//   whose links carry the latencies to and from the launch node);
// - a node handles a message when it arrives, in no time;
// - a node places each instance it is sent on the core holding fewest (lowest index on ties);
//   each core runs one instance at a time for cost / core speed (a SimGrid execution), its own
//   queue first, and an idle core takes the front of its busiest sibling's queue (ties: lowest
//   index), so no core of a node idles while the node holds a waiting instance.
// Nothing here is hetsched's code: the readiness rule, the core placement and the queues are
// written again from that description.
//
// A pcddb run's placements come from its nodes' acceptances of allocation requests, which this
// replay does not model (a second copy of the protocol would check nothing). For such a run the
// input lists every placement — when the node took the instance — and the replay has the node
// place each instance at that time (on the core holding fewest, as above) instead of dispatching
// it when it is ready; readiness, the core choice, the queues and the results are the replay's own,
// so any difference in ready, start or end times is a difference of the two simulators.
//
// Under `time-share` (hetsched's `--execution time-share`) a node runs every instance it is given
// at once, as a process of its own: each is a SimGrid execution on the node's multi-core host,
// which SimGrid's CPU model shares among them (each at most one core, all of them at most the
// host's cores) — no queues and no core actors' work.
//
// Usage: graph_replay RUN.txt [SimGrid --cfg options]
// RUN.txt (written by scripts/simgrid/graph.py from the export):
//   nodes N            then N lines: cores core_speed latency_from_launch latency_to_launch
//   tasks T            then T lines: instances processes D, then D pairs `producer kind`
//                      (kind 0: instance-wise, 1: all-to-all, 2: one-to-one)
//   instances M        then M lines: node cost (seconds on a 1.0-speed core), in instance order
//   placements P       (optional; P > 0 for a pcddb run) then P lines: time instance, in the
//                      order the run placed them
//   execution E        (optional, after the placements) queue (the default) or time-share
// Prints "makespan SECONDS" (when the last result reached the launch node) and, per instance in
// order, "instance READY START END".
#include <simgrid/s4u.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace sg4 = simgrid::s4u;

namespace {
// Flops per second of work: SimGrid executes whole flops, so a unit is made big enough that
// rounding changes no time (speeds are scaled by the same factor).
constexpr double kScale = 1e9;
constexpr int kIdle = -1;
// A message is one byte on links of 10^15 bytes/s: it takes its latency (+ 1 fs). (SimGrid 3.32
// delivers some zero-byte messages before their latency has passed.)
constexpr uint64_t kMessageBytes = 1;

struct Node {
  double speed = 1;
  std::vector<std::deque<int>> queue;
  std::vector<int> running;  // instance per core, or kIdle
  std::vector<int> held;     // instances placed on each core and not finished
  std::vector<sg4::SemaphorePtr> go;
  // Results the handler sent from this node, put on the network by its `outbox` actor: a
  // transfer starts at its sender's host.
  std::deque<std::pair<sg4::Mailbox*, struct Arrival*>> out;
  sg4::SemaphorePtr outgoing;
};

struct Instance {
  int task = 0;
  int node = 0;
  int core = 0;  // the core it was placed on (it may run on another)
  int ran_on = 0;  // the core that runs it
  uint64_t end_seq = 0;  // its end's place in the event order, taken when it starts
  double cost = 0;
  double ready = -1;
  double start = -1;
  double end = -1;
};

struct Task {
  long first = 0;  // first instance id
  long count = 0;
  long processes = 1;
  long left = 0;
  std::vector<std::pair<int, int>> consumers;  // (task, kind), in task order
};

std::vector<Node> nodes;
std::vector<Task> tasks;
std::vector<Instance> instances;
std::vector<long> waiting;
double makespan = 0;

// A pcddb run's placements, in the order the run made them (empty: instances are dispatched to
// their node when they are ready).
struct Placement {
  double time;
  int instance;
};
std::vector<Placement> placements;
bool time_share = false;

sg4::Host* manager_host = nullptr;
std::vector<sg4::Host*> hosts;
size_t finished = 0;

// Events that happened and wait to be handled — messages that arrived, instances whose run
// ended — with their place in hetsched's event order: its event queue numbers an event when it
// is scheduled (a message when it is sent, an instance's end when the instance starts) and handles
// those of one instant in that order, so `seq` is taken at the same points here.
struct Arrival {
  uint64_t seq;
  void (*handle)(int);
  std::vector<int> instances;  // one message each, sent at once on one pair of hosts
};
std::vector<Arrival> arrived;
sg4::SemaphorePtr arrivals;
uint64_t sent = 0;  // the next event's number
bool done = false;

// Every directed pair of hosts (launch node to node k, node k to launch node) is a mailbox with a
// permanent receiver, so that each message starts its transfer when it is sent. One pair's
// messages all take the same latency and so arrive in the order they were sent; the handler actor
// handles those that arrived at the same instant, from any pair, in the order they were sent, as
// hetsched's event queue does (and, among them, the runs that ended then, in the order they
// started: SimGrid ends simultaneous executions in an order of its own). (One mailbox for all senders would hand messages over in the order
// they were sent, whatever their latencies.)
sg4::Mailbox* dispatch_box(int k) { return sg4::Mailbox::by_name("d" + std::to_string(k)); }
sg4::Mailbox* result_box(int k) { return sg4::Mailbox::by_name("r" + std::to_string(k)); }

// Sends one message per instance of `batch` at once on `box`'s pair of hosts, as one SimGrid
// transfer: messages sent together on one pair arrive together, in order, so this changes no
// time, and it keeps the start's burst (every instance without producers at once) to one transfer
// per node.
void send(sg4::Mailbox* box, void (*handle)(int), std::vector<int> batch) {
  box->put_init(new Arrival{sent++, handle, std::move(batch)}, kMessageBytes)->detach();
}

// As `send`, for a message node `n` sends while the handler handles one of its events: numbered
// now, put on the network by the node's own actor (at the same instant).
void send_from(int n, sg4::Mailbox* box, void (*handle)(int), std::vector<int> batch) {
  nodes[n].out.emplace_back(box, new Arrival{sent++, handle, std::move(batch)});
  nodes[n].outgoing->release();
}

void outbox(int n) {
  Node& node = nodes[n];
  while (true) {
    node.outgoing->acquire();
    auto [box, a] = node.out.front();
    node.out.pop_front();
    box->put_init(a, kMessageBytes)->detach();
  }
}

void receiver(sg4::Mailbox* box) {
  box->set_receiver(sg4::Actor::self());
  while (true) {
    auto* a = box->get<Arrival>();
    arrived.push_back(std::move(*a));
    delete a;
    arrivals->release();
  }
}

void handler() {
  while (!done) {
    arrivals->acquire();
    std::vector<Arrival> now;
    now.swap(arrived);
    std::sort(now.begin(), now.end(), [](const Arrival& a, const Arrival& b) { return a.seq < b.seq; });
    for (const auto& a : now)
      for (int i : a.instances)
        a.handle(i);
  }
}

// Starts the next instance on idle `core` of `n`: its own queue's front, else the front of its
// busiest sibling's queue.
void start_next(int n, int core) {
  Node& node = nodes[n];
  int from = -1;
  if (!node.queue[core].empty()) {
    from = core;
  } else {
    size_t longest = 0;
    for (size_t k = 0; k < node.queue.size(); k++)
      if (node.queue[k].size() > longest) {
        longest = node.queue[k].size();
        from = static_cast<int>(k);
      }
  }
  if (from < 0)
    return;
  int i = node.queue[from].front();
  node.queue[from].pop_front();
  node.running[core] = i;
  instances[i].start = sg4::Engine::get_clock();
  instances[i].ran_on = core;
  instances[i].end_seq = sent++;
  node.go[core]->release();
}

void result(int i);

// Instance `i`'s run ended (handled in the event order): its core takes the next one and the
// result goes back to the launch node.
void ended(int i) {
  Node& node = nodes[instances[i].node];
  int core = instances[i].ran_on;
  node.running[core] = kIdle;
  node.held[instances[i].core]--;
  send_from(instances[i].node, result_box(instances[i].node), result, {i});
  start_next(instances[i].node, core);
}

void core_actor(int n, int core) {
  Node& node = nodes[n];
  while (true) {
    node.go[core]->acquire();
    if (done)
      return;
    int i = node.running[core];
    // hetsched keeps time in whole nanoseconds: a run takes cost / speed rounded up to the next
    // one. Executing exactly that long keeps the two clocks together over a long chain, so two
    // instances that reach one node a few nanoseconds apart are queued in the same order.
    double cost_ns = std::round(instances[i].cost * 1e9);
    double run_s = std::ceil(cost_ns / node.speed) / 1e9;
    sg4::this_actor::execute(run_s * node.speed * kScale);
    instances[i].end = sg4::Engine::get_clock();
    arrived.push_back(Arrival{instances[i].end_seq, ended, {i}});
    arrivals->release();
  }
}

// Under time-sharing: instance `i` runs on its node's host beside whatever else runs there.
void shared_run(int i) {
  const Node& node = nodes[instances[i].node];
  double cost_ns = std::round(instances[i].cost * 1e9);
  double run_s = std::ceil(cost_ns / node.speed) / 1e9;
  sg4::this_actor::execute(run_s * node.speed * kScale);
  instances[i].end = sg4::Engine::get_clock();
  send(result_box(instances[i].node), result, {i});
}

// A node's agent receives an instance: it places it on the core holding fewest and starts it
// there or on an idle sibling (under time-sharing: starts it at once).
void dispatched(int i) {
  int n = instances[i].node;
  Node& node = nodes[n];
  if (time_share) {
    instances[i].start = sg4::Engine::get_clock();
    sg4::Actor::create("run", hosts[n], shared_run, i);
    return;
  }
  int core = static_cast<int>(std::min_element(node.held.begin(), node.held.end()) - node.held.begin());
  node.held[core]++;
  instances[i].core = core;
  node.queue[core].push_back(i);
  if (node.running[core] == kIdle) {
    start_next(n, core);
  } else {
    auto idle = std::find(node.running.begin(), node.running.end(), kIdle);
    if (idle != node.running.end())
      start_next(n, static_cast<int>(idle - node.running.begin()));
  }
}

// A pcddb run: every instance reaches its node when the run placed it there; the node picks the core.
void placer() {
  for (const auto& p : placements) {
    sg4::this_actor::sleep_until(p.time);
    dispatched(p.instance);
  }
}

void dispatch(const std::vector<int>& ready) {
  double now = sg4::Engine::get_clock();
  std::unordered_map<int, std::vector<int>> by_node;
  std::vector<int> order;  // nodes in the order of their first instance
  for (int i : ready)
    instances[i].ready = now;
  if (!placements.empty())
    return;
  for (int i : ready) {
    auto& b = by_node[instances[i].node];
    if (b.empty())
      order.push_back(instances[i].node);
    b.push_back(i);
  }
  for (int n : order)
    send(dispatch_box(n), dispatched, std::move(by_node[n]));
}

// The launch node's task manager receives a result: it readies the instances waiting only for it.
void result(int i) {
  finished++;
  if (finished == instances.size()) {
    makespan = sg4::Engine::get_clock();
    done = true;
    for (auto& node : nodes)
      for (auto& go : node.go)
        go->release();
  }
  Task& t = tasks[instances[i].task];
  t.left--;
  long value = (i - t.first) / t.processes;
  std::vector<int> ready;
  for (auto [c, kind] : t.consumers) {
    const Task& ct = tasks[c];
    long lo = ct.first;
    long hi = ct.first + ct.count;
    if (kind == 0) {
      lo = ct.first + value * ct.processes;
      hi = lo + ct.processes;
    } else if (kind == 2) {
      lo = ct.first + (i - t.first);
      hi = lo + 1;
    } else if (t.left > 0) {
      continue;
    }
    for (long j = lo; j < hi; j++)
      if (--waiting[j] == 0)
        ready.push_back(static_cast<int>(j));
  }
  dispatch(ready);
}

// The program's start: every instance without producers is ready.
void launch() {
  std::vector<int> ready;
  for (size_t i = 0; i < instances.size(); i++)
    if (waiting[i] == 0)
      ready.push_back(static_cast<int>(i));
  dispatch(ready);
}

bool expect(std::ifstream& in, const char* word, long& n) {
  std::string w;
  return static_cast<bool>(in >> w >> n) && w == word;
}
}  // namespace

int main(int argc, char** argv) {
  sg4::Engine e(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s RUN.txt [--cfg=...]\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1]);
  long n = 0;
  if (!expect(in, "nodes", n)) {
    std::fprintf(stderr, "%s: expected `nodes N` first\n", argv[1]);
    return 2;
  }
  auto* star = sg4::create_star_zone("star");
  manager_host = star->create_host("manager", 1e9);
  auto* hub = star->create_link("manager-link", 1e15)->set_latency(0)->seal();
  star->add_route(manager_host->get_netpoint(), nullptr, nullptr, nullptr, {sg4::LinkInRoute(hub)}, true);
  nodes.resize(n);
  for (long k = 0; k < n; k++) {
    long cores = 0;
    double from = 0;
    double to = 0;
    if (!(in >> cores >> nodes[k].speed >> from >> to) || cores < 1) {
      std::fprintf(stderr, "%s: node %ld: expected `cores speed latency_from latency_to`\n", argv[1], k);
      return 2;
    }
    Node& node = nodes[k];
    node.queue.resize(cores);
    node.running.assign(cores, kIdle);
    node.held.assign(cores, 0);
    for (long c = 0; c < cores; c++)
      node.go.push_back(sg4::Semaphore::create(0));
    node.outgoing = sg4::Semaphore::create(0);
    auto name = "n" + std::to_string(k);
    auto* host = star->create_host(name, std::vector<double>{node.speed * kScale});
    host->set_core_count(static_cast<int>(cores));
    auto* up = star->create_link(name + "-up", 1e15)->set_latency(to)->seal();
    auto* down = star->create_link(name + "-down", 1e15)->set_latency(from)->seal();
    star->add_route(host->get_netpoint(), nullptr, nullptr, nullptr, {sg4::LinkInRoute(up)}, false);
    star->add_route(nullptr, host->get_netpoint(), nullptr, nullptr, {sg4::LinkInRoute(down)}, false);
    hosts.push_back(host);
  }
  star->seal();
  long t_count = 0;
  if (!expect(in, "tasks", t_count)) {
    std::fprintf(stderr, "%s: expected `tasks T` after the nodes\n", argv[1]);
    return 2;
  }
  tasks.resize(t_count);
  std::vector<long> per_instance(t_count, 0);
  long total = 0;
  for (long t = 0; t < t_count; t++) {
    long deps = 0;
    if (!(in >> tasks[t].count >> tasks[t].processes >> deps) || tasks[t].processes < 1) {
      std::fprintf(stderr, "%s: task %ld: expected `instances processes D`\n", argv[1], t);
      return 2;
    }
    tasks[t].first = total;
    tasks[t].left = tasks[t].count;
    total += tasks[t].count;
    for (long d = 0; d < deps; d++) {
      int producer = 0;
      int kind = 0;
      if (!(in >> producer >> kind) || producer < 0 || producer >= t_count) {
        std::fprintf(stderr, "%s: task %ld: a dependency names no task\n", argv[1], t);
        return 2;
      }
      if (kind < 0 || kind > 2) {
        std::fprintf(stderr, "%s: task %ld: unknown dependency kind %d\n", argv[1], t, kind);
        return 2;
      }
      per_instance[t] += kind == 0 ? tasks[producer].processes : 1;
      tasks[producer].consumers.emplace_back(static_cast<int>(t), kind);
    }
  }
  long m = 0;
  if (!expect(in, "instances", m) || m != total) {
    std::fprintf(stderr, "%s: expected `instances %ld`\n", argv[1], total);
    return 2;
  }
  instances.resize(m);
  waiting.resize(m);
  for (long t = 0, i = 0; t < t_count; t++)
    for (long k = 0; k < tasks[t].count; k++, i++) {
      instances[i].task = static_cast<int>(t);
      waiting[i] = per_instance[t];
      if (!(in >> instances[i].node >> instances[i].cost) || instances[i].node < 0 || instances[i].node >= n) {
        std::fprintf(stderr, "%s: instance %ld: expected `node cost`\n", argv[1], i);
        return 2;
      }
    }
  long p = 0;
  if (std::string w; in >> w) {
    if (w != "placements" || !(in >> p) || (p != 0 && p != m)) {
      std::fprintf(stderr, "%s: expected `placements 0` or `placements %ld` after the instances\n", argv[1], m);
      return 2;
    }
  }
  for (long k = 0; k < p; k++) {
    Placement pl{};
    if (!(in >> pl.time >> pl.instance) || pl.instance < 0 || pl.instance >= m) {
      std::fprintf(stderr, "%s: placement %ld: expected `time instance`\n", argv[1], k);
      return 2;
    }
    placements.push_back(pl);
  }
  if (std::string w; in >> w) {
    std::string how;
    if (w != "execution" || !(in >> how) || (how != "queue" && how != "time-share")) {
      std::fprintf(stderr, "%s: expected `execution queue` or `execution time-share` last\n", argv[1]);
      return 2;
    }
    time_share = how == "time-share";
  }
  arrivals = sg4::Semaphore::create(0);
  sg4::Actor::create("launch", manager_host, launch);
  if (!placements.empty())
    sg4::Actor::create("placer", manager_host, placer);
  sg4::Actor::create("handler", manager_host, handler);
  for (long k = 0; k < n; k++) {
    for (size_t c = 0; c < nodes[k].go.size(); c++)
      sg4::Actor::create("core", hosts[k], core_actor, static_cast<int>(k), static_cast<int>(c));
    sg4::Actor::create("agent", hosts[k], receiver, dispatch_box(static_cast<int>(k)))->daemonize();
    sg4::Actor::create("outbox", hosts[k], outbox, static_cast<int>(k))->daemonize();
    sg4::Actor::create("results", manager_host, receiver, result_box(static_cast<int>(k)))->daemonize();
  }
  e.run();
  std::printf("makespan %.9f\n", makespan);
  for (const auto& i : instances)
    std::printf("instance %.9f %.9f %.9f\n", i.ready, i.start, i.end);
  return 0;
}
