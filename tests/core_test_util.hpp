// Helpers shared by the core tests: a small separable dataset, and the `step` losses a training
// run writes to its metrics.
#pragma once

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/dataset.hpp"
#include "core/metrics.hpp"
#include "core/base/rng.hpp"
#include "core/trainer.hpp"

namespace gossiptrain::core::test {

// 200 samples of 12 features in 4 classes; the class raises every fourth feature.
inline Dataset tiny_dataset() {
  Dataset d;
  d.features = 12;
  d.classes = 4;
  base::SplitMix64 r(9);
  for (int i = 0; i < 200; ++i) {
    const int c = i % 4;
    d.y.push_back(c);
    for (int f = 0; f < d.features; ++f)
      d.x.push_back(float(r.uniform() * 0.6 + (f % 4 == c ? 0.4 : 0.0)));
  }
  return d;
}

// Trains cfg on d (as training and test set) and returns the loss of every `step` metric line,
// written through the metrics file at path (removed afterwards).
inline std::vector<double> step_losses(kernels::Backend& be, const TrainConfig& cfg,
                                       const Dataset& d, const std::string& path) {
  std::remove(path.c_str());
  {
    Metrics metrics(path, "test");
    Trainer t(be, cfg, d, d, metrics, nullptr);
    std::atomic<bool> stop{false};
    t.run(stop);
  }
  std::vector<double> got;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["event"] == "step") got.push_back(j["loss"].get<double>());
  }
  std::remove(path.c_str());
  return got;
}

// The setup of the golden-loss tests: n samples of `features` values in [0, 0.5) from seed,
// plus 0.5 where lit(feature, class) holds, classes taking turns.
template <class Lit>
Dataset lit_dataset(int n, int features, int classes, std::uint64_t seed, Lit lit) {
  Dataset d;
  d.features = features;
  d.classes = classes;
  base::SplitMix64 r(seed);
  for (int i = 0; i < n; ++i) {
    const int c = i % classes;
    d.y.push_back(c);
    for (int f = 0; f < d.features; ++f)
      d.x.push_back(float(r.uniform() * 0.5 + (lit(f, c) ? 0.5 : 0.0)));
  }
  return d;
}

// One epoch of batch 16 at lr 0.1 from seed 42, logging the loss of every step.
inline TrainConfig golden_config(const std::string& model) {
  TrainConfig cfg;
  cfg.model = model;
  cfg.batch = 16;
  cfg.epochs = 1;
  cfg.lr = 0.1f;
  cfg.seed = 42;
  cfg.log_every_steps = 1;
  return cfg;
}

// Every step's loss matches its recorded golden value (relative 1e-4).
inline void check_golden_losses(const std::vector<double>& got, const std::vector<double>& golden) {
  REQUIRE(got.size() == golden.size());
  for (std::size_t i = 0; i < golden.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(got[i] == Approx(golden[i]).epsilon(1e-4));
  }
}

}  // namespace gossiptrain::core::test
