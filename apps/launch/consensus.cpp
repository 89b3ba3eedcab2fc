#include "apps/launch/consensus.hpp"

#include <fstream>
#include <stdexcept>
#include <utility>

#include "core/checkpoint.hpp"

namespace fs = std::filesystem;

namespace gossiptrain::apps {

ConsensusSampler::ConsensusSampler(const LaunchOptions& o, std::vector<std::string> dirs,
                                   fs::path run_dir, EventLog& events)
    : dirs_(std::move(dirs)),
      run_dir_(std::move(run_dir)),
      events_(events),
      schedule_(o),
      sampled_mtime_(dirs_.size()),
      final_per_peer_(dirs_.size()),
      final_samples_(dirs_.size()) {}

CheckpointScan ConsensusSampler::scan_checkpoints(const std::vector<bool>& started,
                                                  std::vector<fs::file_time_type>& mt) const {
  CheckpointScan scan{0, true, false, true};
  std::error_code ec;
  for (std::size_t i = 0; i < dirs_.size(); ++i) {
    if (!started[i]) continue;  // a slot for a join that has not come (--churn)
    ++scan.peers;
    mt[i] = fs::last_write_time(fs::path(dirs_[i]) / "ckpt" / "checkpoint.bin", ec);
    if (ec) {
      scan.all_exist = false;
      continue;
    }
    const bool newer = mt[i] != sampled_mtime_[i];
    scan.any_newer |= newer;
    scan.all_newer &= newer;
  }
  return scan;
}

// The last sample already holds the final checkpoints: keep its figures, add no duplicate.
void ConsensusSampler::keep_last_sample_as_final() {
  for (std::size_t i = 0; i < dirs_.size(); ++i) {
    try {
      final_samples_[i] = core::load_checkpoint(dirs_[i] + "/ckpt").samples;
    } catch (const core::CheckpointError&) {
    }
  }
  final_consensus_ = last_.mean;
  for (std::size_t k = 0; k < last_who_.size(); ++k)
    final_per_peer_[last_who_[k]] = last_.per_peer[k];
}

bool ConsensusSampler::load_checkpoints(bool final, const std::vector<bool>& started,
                                        CheckpointSet& set) {
  for (std::size_t i = 0; i < dirs_.size(); ++i) {
    if (!started[i]) continue;
    try {
      core::Checkpoint c = core::load_checkpoint(fs::path(dirs_[i] + "/ckpt").string());
      if (final) final_samples_[i] = c.samples;
      set.steps.push_back(c.step);
      set.epochs.push_back(c.epoch);
      set.params.push_back(std::move(c.params));
      set.who.push_back(i);
    } catch (const core::CheckpointError& e) {
      // A missing checkpoint (peer died early) leaves that peer out of the final figure.
      if (!final) return false;
      note_ += "peer " + std::to_string(i) + ": " + e.what() + "; ";
    }
  }
  return true;
}

void ConsensusSampler::record(const Consensus& c, const CheckpointSet& set, bool final,
                              double now) {
  last_ = c;
  last_who_ = set.who;
  if (final) {
    final_consensus_ = c.mean;
    for (std::size_t k = 0; k < set.who.size(); ++k) final_per_peer_[set.who[k]] = c.per_peer[k];
  }
  nlohmann::json point = {{"t", now},         {"distance", c.mean}, {"per_peer", c.per_peer},
                          {"peers", set.who}, {"steps", set.steps}, {"epochs", set.epochs},
                          {"final", final}};
  events_.write(now, "consensus", {{"distance", c.mean}, {"peers", set.who}});
  std::ofstream out(run_dir_ / "consensus.jsonl", std::ios::app);
  out << point.dump() << "\n";
  ++points_;
}

void ConsensusSampler::sample(bool final, const std::vector<bool>& started, double now) {
  std::vector<fs::file_time_type> mt(dirs_.size());
  const CheckpointScan scan = scan_checkpoints(started, mt);
  if (!final) {
    if (!schedule_.due(scan, now)) return;
  } else if (!scan.any_newer && points_ > 0) {
    keep_last_sample_as_final();
    return;
  }
  CheckpointSet set;
  if (!load_checkpoints(final, started, set)) return;
  sampled_mtime_ = mt;
  schedule_.sampled(now);
  if (set.params.size() < 2) {
    if (final)
      note_ += dirs_.size() < 2 ? "one peer: no consensus to measure"
                                : "fewer than two final checkpoints";
    return;
  }
  Consensus c;
  try {
    c = consensus_distance(set.params);
  } catch (const std::invalid_argument& e) {
    note_ = e.what();
    return;
  }
  record(c, set, final, now);
}

}  // namespace gossiptrain::apps
