// Fault injection for experiments (gossip-peer --fault, behind GOSSIPTRAIN_ALLOW_FAULTS=1): a
// faulty peer sends a corrupted vector in its exchanges and applies no mix to itself, so its own
// model keeps training and the corruption stays of the same kind all run long.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "base/rng.hpp"
#include "kernels/backend.hpp"

namespace gossiptrain::gossip {

enum class FaultMode { None, Scale, Random, SignFlip, Stale, NaN };
struct FaultConfig {
  FaultMode mode = FaultMode::None;
  double scale = 1000.0;  // scale:K
};
// "scale:K" (K finite, nonzero), "random", "signflip", "stale", "nan"; std::invalid_argument else.
FaultConfig parse_fault(const std::string& spec);

// The corrupted vector a faulty peer sends (training thread).
class FaultInjector {
 public:
  FaultInjector(FaultConfig cfg, kernels::Backend& be) : cfg_(cfg), be_(be) {}
  bool active() const { return cfg_.mode != FaultMode::None; }
  // Another fault from now on (None: honest again); a stale fault starts from its next snapshot.
  void reset(FaultConfig cfg) {
    cfg_ = cfg;
    stale_.clear();
  }
  // Our parameters corrupted on the host (download, change, upload), so it works with any
  // backend; valid until the next call. Stale: the first snapshot ever taken, again and again.
  const float* source(const float* params, std::size_t n);

 private:
  FaultConfig cfg_;
  kernels::Backend& be_;
  std::vector<float> host_, stale_;
  kernels::DeviceBuffer<float> x_;
  base::SplitMix64 rng_{12345};
};

}  // namespace gossiptrain::gossip
