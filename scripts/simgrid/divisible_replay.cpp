// Replays a divisible-load schedule exported by `hetsched sim divisible --export-schedule` in
// SimGrid (S4U, C++), so that hetsched's star simulator can be checked against an independent
// simulator, and timed against it. Built and run by scripts/simgrid-divisible.sh (needs
// SimGrid's development files, e.g. Debian's libsimgrid-dev; never part of the build).
//
// The model is spec 03's: a master sends chunks one at a time (one-port: each send occupies it
// for nLat_i + c/B_i on worker i's own link); a worker receives while it computes (its mailbox
// receives eagerly) and computes a chunk in cLat_i + c/S_i once it has arrived and the previous
// one is done. The master's protocol is hetsched's StarMaster rule: a worker holds at most the
// chunk it computes and one more, so a send to worker i waits until i has finished all but its
// last chunk.
//
// The platform is built in a SimGrid star zone (each worker behind its own link; the fastest
// routing for a star: a full routing table would hold N² routes).
//
// Usage: divisible_replay SCHEDULE.txt [SimGrid --cfg options]
// SCHEDULE.txt: "workers N", then N lines "speed compute_latency bandwidth network_latency"
// (load units per second and seconds), then "sends M", then M lines "worker transfer compute" (load
// units moved over the link and computed: the chunk's size, or what a run's drawn errors made of
// it). Prints
// "makespan SECONDS" and, per send, "send W START END COMPUTE_END".
#include <simgrid/s4u.hpp>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace sg4 = simgrid::s4u;

namespace {
// Bytes (on a link) and flops (on a host) per load unit: SimGrid counts whole bytes, so a unit is
// made big enough that rounding a chunk to whole bytes changes no time (bandwidths and speeds are
// scaled by the same factor).
constexpr double kScale = 1e6;

struct Send {
  int worker;
  double transfer;  // load units over the link
  double compute;   // load units computed
  double start = 0;
  double end = 0;
  double compute_end = 0;
};

std::vector<double> compute_latency;
std::vector<Send> sends;
std::vector<int> sent;  // chunks sent to each worker
std::vector<int> done;  // chunks each worker finished
sg4::MutexPtr lock;
sg4::ConditionVariablePtr finished;
double makespan = 0;

void worker(int i) {
  auto* mbox = sg4::Mailbox::by_name("w" + std::to_string(i));
  mbox->set_receiver(sg4::Actor::self());  // receive while computing
  while (true) {
    auto* k = mbox->get<size_t>();
    size_t index = *k;
    delete k;
    if (index == sends.size())
      return;  // the master's end marker
    sg4::this_actor::sleep_for(compute_latency[i]);
    sg4::this_actor::execute(sends[index].compute * kScale);
    double now = sg4::Engine::get_clock();
    sends[index].compute_end = now;
    makespan = std::max(makespan, now);
    std::unique_lock<sg4::Mutex> l(*lock);
    done[i]++;
    finished->notify_all();
  }
}

void master() {
  for (size_t index = 0; index < sends.size(); index++) {
    int i = sends[index].worker;
    {
      std::unique_lock<sg4::Mutex> l(*lock);
      while (sent[i] - done[i] > 1)
        finished->wait(l);
    }
    sends[index].start = sg4::Engine::get_clock();
    sent[i]++;
    sg4::Mailbox::by_name("w" + std::to_string(i))
        ->put(new size_t(index), static_cast<uint64_t>(sends[index].transfer * kScale));
    sends[index].end = sg4::Engine::get_clock();
  }
  // End markers (they arrive after every chunk; the makespan counts compute ends only).
  for (size_t i = 0; i < compute_latency.size(); i++)
    sg4::Mailbox::by_name("w" + std::to_string(i))->put(new size_t(sends.size()), 0);
}
}  // namespace

int main(int argc, char** argv) {
  sg4::Engine e(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s SCHEDULE.txt [--cfg=...]\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1]);
  std::string word;
  size_t n = 0;
  size_t m = 0;
  if (!(in >> word >> n) || word != "workers") {
    std::fprintf(stderr, "%s: expected `workers N` first\n", argv[1]);
    return 2;
  }
  auto* star = sg4::create_star_zone("star");
  auto* master_host = star->create_host("master", 1e9);
  std::vector<sg4::Host*> hosts;
  compute_latency.resize(n);
  for (size_t i = 0; i < n; i++) {
    double speed = 0;
    double bandwidth = 0;
    double latency = 0;
    if (!(in >> speed >> compute_latency[i] >> bandwidth >> latency)) {
      std::fprintf(stderr, "%s: worker %zu: expected `speed compute_latency bandwidth network_latency`\n",
                   argv[1], i);
      return 2;
    }
    auto name = "w" + std::to_string(i);
    auto* host = star->create_host(name, speed * kScale);
    auto* link = star->create_link("l" + std::to_string(i), bandwidth * kScale)->set_latency(latency)->seal();
    star->add_route(host->get_netpoint(), nullptr, nullptr, nullptr, {sg4::LinkInRoute(link)}, true);
    hosts.push_back(host);
  }
  star->seal();
  if (!(in >> word >> m) || word != "sends") {
    std::fprintf(stderr, "%s: expected `sends M` after the workers\n", argv[1]);
    return 2;
  }
  sends.resize(m);
  for (auto& s : sends)
    if (!(in >> s.worker >> s.transfer >> s.compute) || s.worker < 0 ||
        static_cast<size_t>(s.worker) >= n) {
      std::fprintf(stderr, "%s: a send names no worker or lacks its sizes\n", argv[1]);
      return 2;
    }
  sent.assign(n, 0);
  done.assign(n, 0);
  lock = sg4::Mutex::create();
  finished = sg4::ConditionVariable::create();
  sg4::Actor::create("master", master_host, master);
  for (size_t i = 0; i < n; i++)
    sg4::Actor::create("w" + std::to_string(i), hosts[i], worker, static_cast<int>(i));
  e.run();
  std::printf("makespan %.9f\n", makespan);
  for (const auto& s : sends)
    std::printf("send %d %.9f %.9f %.9f\n", s.worker, s.start, s.end, s.compute_end);
  return 0;
}
