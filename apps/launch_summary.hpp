// gossip-launch's results: consensus distance from the peers' checkpoints, summary.json of a run,
// and the side-by-side table of several runs (--compare).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/launch_metrics.hpp"
#include "apps/launch_options.hpp"

namespace gossiptrain::apps {

struct Consensus {
  double mean = 0.0;              // mean over peers of ||x_i - avg||
  std::vector<double> per_peer;   // ||x_i - avg||
};
// The peers' parameter vectors must have the same length; throws std::invalid_argument otherwise.
Consensus consensus_distance(const std::vector<std::vector<float>>& params);

// How one peer process ended, as the launcher saw it.
struct PeerOutcome {
  std::string state;        // done | stopped | exited with code X | killed by SIGNAME | running
  int exit_code = -1;       // -1: did not exit normally
  int signal = 0;
  bool failed = false;
  double start_offset_s = 0.0;  // spawn time after the launch started
  // Launch time of the peer's metrics t = 0 (its clock starts after it loaded its data), estimated
  // from when the launcher first saw the file and each line: an upper bound, off by a poll tick.
  std::optional<double> clock_offset_s;
  std::optional<std::int64_t> ckpt_samples;  // from the final checkpoint
  std::optional<double> consensus;  // this peer's distance to the final average
};

struct RunFacts {
  const LaunchOptions* options = nullptr;
  std::string run_dir;
  std::string started_at;   // UTC ISO 8601
  double seconds = 0.0;     // wall time of the launch
  bool interrupted = false;
  std::optional<double> consensus_distance;  // final, from the final checkpoints
  std::string consensus_note;                // why it is missing, if it is
  int consensus_points = 0;
  int epochs = 0;
  int batch = 0;
  std::string model;
};

// Figures nobody measured are null, never 0: a peer's that it did not report, and a total that no
// peer reported (a total adds up the peers that did).
nlohmann::json make_summary(const RunFacts& run, const std::vector<PeerStats>& stats,
                            const std::vector<PeerOutcome>& outcomes);

// "12.34%", or "-" for a figure not measured.
std::string pct(const std::optional<double>& v);
// gossip-launch's live table: its column heads, and peer i's row (`-` where nothing was reported).
std::string peer_table_header();
std::string peer_table_row(std::size_t i, const PeerStats& s, int epochs, const std::string& state);

// Reads DIR/summary.json of each run; throws UsageError naming an unreadable one.
std::string compare_runs(const std::vector<std::string>& dirs, bool markdown);

}  // namespace gossiptrain::apps
