// gossip-launch's consensus sampling: the peers' checkpoints are read when every one has a new
// checkpoint, else at most every --consensus-every seconds (ConsensusSchedule), and once at the
// end; each sample is a line of consensus.jsonl and a `consensus` event, and the final one gives
// the figures of summary.json.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/launch/churn.hpp"
#include "apps/launch/options.hpp"
#include "apps/launch/summary.hpp"

namespace gossiptrain::apps {

class ConsensusSampler {
 public:
  // dirs: each peer slot's folder (its checkpoint in ckpt/); consensus.jsonl goes to run_dir.
  ConsensusSampler(const LaunchOptions& o, std::vector<std::string> dirs,
                   std::filesystem::path run_dir, EventLog& events);

  // A sample during the run (final false: only when due) or the final one. started[i]: whether
  // slot i ever ran (a join that has not come has no checkpoint to wait for). now: launch time.
  void sample(bool final, const std::vector<bool>& started, double now);

  // The final figures: the mean distance and why it is missing, if it is.
  const std::optional<double>& final_distance() const { return final_consensus_; }
  const std::string& note() const { return note_; }
  int points() const { return points_; }
  // Peer i's distance to the final average, and the samples its final checkpoint counted.
  const std::optional<double>& peer_distance(std::size_t i) const { return final_per_peer_[i]; }
  const std::optional<std::int64_t>& final_samples(std::size_t i) const {
    return final_samples_[i];
  }

 private:
  struct CheckpointSet {
    std::vector<std::vector<float>> params;
    std::vector<std::size_t> who;
    nlohmann::json steps = nlohmann::json::array(), epochs = nlohmann::json::array();
  };
  // The peers' checkpoint times into mt, and what changed since the last sample.
  CheckpointScan scan_checkpoints(const std::vector<bool>& started,
                                  std::vector<std::filesystem::file_time_type>& mt) const;
  void keep_last_sample_as_final();
  // The started peers' checkpoints; false during the run when one cannot be read (no sample).
  bool load_checkpoints(bool final, const std::vector<bool>& started, CheckpointSet& set);
  void record(const Consensus& c, const CheckpointSet& set, bool final, double now);

  std::vector<std::string> dirs_;
  std::filesystem::path run_dir_;
  EventLog& events_;
  ConsensusSchedule schedule_;
  // The checkpoint times of the last sample.
  std::vector<std::filesystem::file_time_type> sampled_mtime_;
  int points_ = 0;
  std::optional<double> final_consensus_;
  std::string note_;
  std::vector<std::optional<double>> final_per_peer_;
  std::vector<std::optional<std::int64_t>> final_samples_;
  Consensus last_;
  std::vector<std::size_t> last_who_;
};

}  // namespace gossiptrain::apps
