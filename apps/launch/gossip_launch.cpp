// gossip-launch: starts N gossip-peer processes on this machine, shows them live on stderr, stops
// them cleanly on Ctrl-C, and leaves a run folder (config, metrics, logs, summary.json, plots).
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/common/blas.hpp"
#include "apps/launch/launch.hpp"
#include "apps/common/plots.hpp"
#include "apps/launch/churn.hpp"
#include "apps/launch/consensus.hpp"
#include "apps/launch/fedavg_report.hpp"
#include "apps/launch/metrics.hpp"
#include "apps/launch/netns.hpp"
#include "apps/launch/options.hpp"
#include "apps/launch/ports.hpp"
#include "apps/launch/resources.hpp"
#include "apps/launch/observe.hpp"
#include "apps/launch/report.hpp"
#include "apps/launch/summary.hpp"
#include "apps/launch/view.hpp"

using namespace gossiptrain;
using namespace gossiptrain::apps;
using namespace gossiptrain::apps::launcher;

int main(int argc, char** argv) {
  if (const auto rc = answer_blas_probe()) return *rc;  // a probe child of ours
  LaunchOptions o;
  try {
    o = parse_launch_args(std::vector<std::string>(argv + 1, argv + argc));
    if (o.help) {
      std::fputs(launch_usage().c_str(), stdout);
      return 0;
    }
    if (!o.compare.empty()) {
      std::fputs(compare_runs(o.compare, o.markdown).c_str(), stdout);
      return 0;
    }
    if (!o.report.empty()) return run_report(o);
  } catch (const UsageError& e) {
    return usage_error(e.what());
  }
  if (o.cleanup) {
    const int n = NetnsSwarm::cleanup_stale();
    std::fprintf(stderr, "gossip-launch: removed %d network namespace%s left by earlier runs\n", n,
                 n == 1 ? "" : "s");
    return 0;
  }
  std::string why;
  if (o.netns && !NetnsSwarm::check_available(&why))
    return usage_error("--netns: " + why);
  std::string bin = o.peer_bin.empty() ? (self_dir() / "gossip-peer").string() : o.peer_bin;
  if (::access(bin.c_str(), X_OK) != 0)
    return usage_error("gossip-peer not found or not executable at " + bin +
                       " (build it: ninja -C BUILD gossip-peer, or pass --peer-bin)");
  // Threads, memory and file descriptors, before anything starts: a run that cannot fit is
  // refused here (exit code 2), not by the kernel's OOM killer halfway through. The plan reads
  // the data set's labels with the peers' own loader, so --data is checked here too, in every
  // form the peers take (IDX folder, npy:DIR, four .npy files, synthetic).
  try {
    std::fprintf(stderr, "%s\n", describe(plan_resources(o)).c_str());
  } catch (const UsageError& e) {
    return usage_error(e.what());
  }
  // The OpenBLAS core, chosen (and probed, if it must be) once for every peer: they inherit
  // OPENBLAS_CORETYPE with the mark that it is ours, and neither probe nor run again.
  const kernels::BlasCoreChoice blas = choose_blas_core_for_children(o.blas_core);
  std::fprintf(stderr, "gossip-launch: peers' OpenBLAS core %s\n", describe(blas).c_str());
  try {
    Launch launch(std::move(o), bin);
    return launch.run(argc, argv);
  } catch (const UsageError& e) {
    return usage_error(e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gossip-launch: %s\n", e.what());
    return 1;
  }
}
