// FedAvg's aggregation (math.hpp).
#include "apps/fedavg/math.hpp"

#include <stdexcept>

namespace gossiptrain::apps::fedavg {

void apply_round(std::vector<float>& global, std::vector<float>& velocity,
                 const std::vector<WeightedModel>& updates, double beta) {
  if (updates.empty()) return;
  const std::size_t n = global.size();
  if (velocity.size() != n) throw std::logic_error("fedavg: velocity size differs from the model");
  std::vector<double> acc(n, 0.0);
  double total = 0.0;
  for (const auto& u : updates) {
    if (!u.params || u.params->size() != n)
      throw std::logic_error("fedavg: an update's size differs from the model");
    const double w = double(u.samples);
    total += w;
    for (std::size_t i = 0; i < n; ++i) acc[i] += w * double((*u.params)[i]);
  }
  for (std::size_t i = 0; i < n; ++i) {
    const float avg = float(acc[i] / total);
    if (beta > 0.0) {  // the averaged change is a pseudo-gradient with momentum
      velocity[i] = float(beta) * velocity[i] + (global[i] - avg);
      global[i] -= velocity[i];
    } else {
      global[i] = avg;
    }
  }
}

}  // namespace gossiptrain::apps::fedavg
