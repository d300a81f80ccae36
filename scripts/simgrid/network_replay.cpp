// Replays the network transfers of an offload run (`hetsched sim accel --export RUN.json`) in
// SimGrid (S4U, C++): each transfer starts when hetsched started it, between the same two nodes,
// with the same bytes, and SimGrid computes when it ends. This checks hetsched's network model
// (crates/sim/src/platform/network.rs) — path latency, then the bytes over the sender's outgoing
// and the receiver's incoming link, shared among the transfers moving on them — against SimGrid's.
// Built and run by scripts/simgrid-accel.sh (needs SimGrid's development files, e.g. Debian's
// libsimgrid-dev; never part of the build).
//
// The platform: a star zone (the rack switch is no bottleneck), every node behind one full-duplex
// link (SimGrid's split-duplex link: each direction has the whole bandwidth), so a transfer's path
// is the sender's link up and the receiver's link down. Two ways to put the latencies:
// - `equal` (the default): each transfer first waits its path latency (the two nodes' latencies),
//   then moves over links without latency. The transfers moving on a link then share it equally,
//   as hetsched's model says.
// - `rtt`: the latencies are the links' own. SimGrid's CM02 model then also weighs each transfer's
//   share by its path latency (a shorter round trip gets more, as TCP does), which hetsched's model
//   does not.
//
// Usage: network_replay RUN.txt [equal|rtt] [SimGrid --cfg options]
// RUN.txt (written by scripts/simgrid/network.py from the export):
//   links N        then N lines: bandwidth (bytes/s) latency (s)
//   transfers M    then M lines: src dst bytes start (s), in start order
// Prints "makespan SECONDS" (the last transfer's end) and, per transfer in order, "transfer END".
#include <simgrid/s4u.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace sg4 = simgrid::s4u;

namespace {
struct Transfer {
  int src = 0;
  int dst = 0;
  double bytes = 0;
  double start = 0;
  double end = -1;
};

std::vector<sg4::Host*> hosts;
std::vector<double> delay;  // per node: its latency, when waited before the transfer (`equal`)
std::vector<Transfer> transfers;

// Starts each transfer at its time; each moves in its own actor (created then, so that only the
// transfers in flight have one).
void launcher() {
  for (size_t k = 0; k < transfers.size(); k++) {
    sg4::this_actor::sleep_until(transfers[k].start);
    Transfer& t = transfers[k];
    sg4::Actor::create("transfer", hosts[t.src], [&t] {
      sg4::this_actor::sleep_for(delay[t.src] + delay[t.dst]);
      sg4::Comm::sendto(hosts[t.src], hosts[t.dst], static_cast<uint64_t>(t.bytes));
      t.end = sg4::Engine::get_clock();
    });
  }
}
}  // namespace

int main(int argc, char** argv) {
  sg4::Engine e(&argc, argv);
  std::string sharing = argc > 2 ? argv[2] : "equal";
  if (argc < 2 || (sharing != "equal" && sharing != "rtt")) {
    std::fprintf(stderr, "usage: %s RUN.txt [equal|rtt] [--cfg=...]\n", argv[0]);
    return 2;
  }
  bool rtt = sharing == "rtt";
  std::ifstream in(argv[1]);
  std::string word;
  size_t n = 0;
  if (!(in >> word >> n) || word != "links") {
    std::fprintf(stderr, "%s: expected `links N` first\n", argv[1]);
    return 2;
  }
  auto* star = sg4::create_star_zone("star");
  for (size_t i = 0; i < n; i++) {
    double bandwidth = 0;
    double latency = 0;
    if (!(in >> bandwidth >> latency) || bandwidth <= 0) {
      std::fprintf(stderr, "%s: link %zu: expected `bandwidth latency`\n", argv[1], i);
      return 2;
    }
    auto name = "n" + std::to_string(i);
    auto* host = star->create_host(name, 1e9);
    auto* link = star->create_split_duplex_link(name + "-link", bandwidth)->set_latency(rtt ? latency : 0)->seal();
    delay.push_back(rtt ? 0 : latency);
    star->add_route(host->get_netpoint(), nullptr, nullptr, nullptr,
                    {sg4::LinkInRoute(link, sg4::LinkInRoute::Direction::UP)}, true);
    hosts.push_back(host);
  }
  star->seal();
  size_t m = 0;
  if (!(in >> word >> m) || word != "transfers") {
    std::fprintf(stderr, "%s: expected `transfers M` after the links\n", argv[1]);
    return 2;
  }
  transfers.resize(m);
  for (auto& t : transfers)
    if (!(in >> t.src >> t.dst >> t.bytes >> t.start) || t.src < 0 || t.dst < 0 ||
        static_cast<size_t>(t.src) >= n || static_cast<size_t>(t.dst) >= n) {
      std::fprintf(stderr, "%s: a transfer names no node or lacks its bytes and start\n", argv[1]);
      return 2;
    }
  for (size_t k = 1; k < m; k++)
    if (transfers[k].start < transfers[k - 1].start) {
      std::fprintf(stderr, "%s: transfers must be in start order\n", argv[1]);
      return 2;
    }
  sg4::Actor::create("launcher", hosts.front(), launcher);
  e.run();
  double makespan = 0;
  for (const auto& t : transfers)
    makespan = std::max(makespan, t.end);
  std::printf("makespan %.9f\n", makespan);
  for (const auto& t : transfers)
    std::printf("transfer %.9f\n", t.end);
  return 0;
}
