// gossip-launch's results: consensus distance from the peers' checkpoints (and when to sample it),
// and the side-by-side table of several runs (--compare).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/launch/metrics.hpp"
#include "apps/launch/options.hpp"

namespace gossiptrain::apps {

struct Consensus {
  double mean = 0.0;              // mean over peers of ||x_i - avg||
  std::vector<double> per_peer;   // ||x_i - avg||
};
// The peers' parameter vectors must have the same length; throws std::invalid_argument otherwise.
Consensus consensus_distance(const std::vector<std::vector<float>>& params);

// What gossip-launch saw of the peers' checkpoint files since its last consensus sample.
struct CheckpointScan {
  std::size_t peers = 0;
  bool all_exist = false;  // every peer has written a checkpoint
  bool any_newer = false;  // at least one is newer than at the last sample
  bool all_newer = false;  // every one is (e.g. every peer finished another epoch)
};
// Whether to take a consensus sample during the run (the final one is always taken): when two or
// more peers all have checkpoints and one is new, at once if every one is new, else only once
// every_s (--consensus-every) seconds have passed since the last sample.
inline bool consensus_sample_due(const CheckpointScan& scan, double since_last_s, double every_s) {
  if (scan.peers < 2 || !scan.all_exist || !scan.any_newer) return false;
  return scan.all_newer || since_last_s >= every_s;
}

// When gossip-launch samples the consensus distance during the run: consensus_sample_due with
// the run's --consensus-every, counted from the last sample.
class ConsensusSchedule {
 public:
  explicit ConsensusSchedule(const LaunchOptions& o) : every_s_(o.consensus_every_s) {}
  bool due(const CheckpointScan& scan, double now_s) const {
    return consensus_sample_due(scan, now_s - last_s_, every_s_);
  }
  void sampled(double now_s) { last_s_ = now_s; }

 private:
  double every_s_;
  double last_s_ = -1e9;
};

// How one peer process ended, as the launcher saw it.
struct PeerOutcome {
  std::string state;        // done | stopped | exited with code X | killed by SIGNAME | running
  int exit_code = -1;       // -1: did not exit normally
  int signal = 0;
  bool failed = false;
  bool started = true;          // false: a slot for a peer the churn scenario never joined
  bool alive_at_end = true;     // false: taken down for good by the churn scenario
  double start_offset_s = 0.0;  // spawn time, on the run's clock (run_clock.hpp)
  // Run time of each process's t = 0 (PeerStats::life indexes it): a restarted peer's clock
  // starts again, so each process's lines go on the run's one axis by their own offset.
  std::vector<double> life_offsets_s;
  std::optional<std::int64_t> ckpt_samples;  // from the final checkpoint
  std::optional<double> consensus;  // this peer's distance to the final average
};

struct RunFacts {
  const LaunchOptions* options = nullptr;
  std::string run_dir;
  std::string started_at;   // UTC ISO 8601
  double seconds = 0.0;     // run time at the end: every launch of the run (--resume) added up
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
