// The FedAvg server's arithmetic, apart from sockets so that tests can check it: the
// sample-weighted mean of the updates and the server momentum step (FedAvgM).
#pragma once

#include <cstdint>
#include <vector>

namespace gossiptrain::apps::fedavg {

struct WeightedModel {
  std::uint64_t samples = 0;
  const std::vector<float>* params = nullptr;
};

// global <- the samples-weighted mean of updates (accumulated in double: one update gives back its
// exact values); with beta > 0, FedAvgM instead: velocity <- beta velocity + (global - mean),
// global <- global - velocity. Nothing changes when updates is empty. Every update and velocity
// must have global.size() values (checked by the decoder and the checkpoint loader before).
void apply_round(std::vector<float>& global, std::vector<float>& velocity,
                 const std::vector<WeightedModel>& updates, double beta);

}  // namespace gossiptrain::apps::fedavg
