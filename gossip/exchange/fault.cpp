// Fault injection for experiments (see fault.hpp).
#include "gossip/exchange/fault.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace gossiptrain::gossip {

FaultConfig parse_fault(const std::string& spec) {
  FaultConfig f;
  if (spec == "random") f.mode = FaultMode::Random;
  else if (spec == "signflip") f.mode = FaultMode::SignFlip;
  else if (spec == "stale") f.mode = FaultMode::Stale;
  else if (spec == "nan") f.mode = FaultMode::NaN;
  else if (spec.rfind("scale:", 0) == 0) {
    f.mode = FaultMode::Scale;
    std::size_t used = 0;
    try {
      f.scale = std::stod(spec.substr(6), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != spec.size() - 6 || !std::isfinite(f.scale) || f.scale == 0)
      throw std::invalid_argument("fault: scale:K needs a finite nonzero K, got '" + spec + "'");
  } else {
    throw std::invalid_argument("fault: '" + spec + "' is not scale:K|random|signflip|stale|nan");
  }
  return f;
}

const float* FaultInjector::source(const float* params, std::size_t n) {
  host_.resize(n);
  be_.download(host_.data(), params, n * sizeof(float));
  switch (cfg_.mode) {
    case FaultMode::Scale:
      for (float& v : host_) v = static_cast<float>(v * cfg_.scale);
      break;
    case FaultMode::SignFlip:
      for (float& v : host_) v = -v;
      break;
    case FaultMode::Random:
      for (float& v : host_) v = static_cast<float>(rng_.normal());
      break;
    case FaultMode::Stale:
      if (stale_.empty()) stale_ = host_;
      host_ = stale_;
      break;
    case FaultMode::NaN: host_[n / 2] = std::numeric_limits<float>::quiet_NaN(); break;
    case FaultMode::None: break;
  }
  if (x_.size() != n) x_ = kernels::DeviceBuffer<float>(be_, n);
  be_.upload(x_.data(), host_.data(), n * sizeof(float));
  return x_.data();
}

}  // namespace gossiptrain::gossip
