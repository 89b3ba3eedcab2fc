// Helpers shared by the core tests: a small separable dataset, and the `step` losses a training
// run writes to its metrics.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "base/rng.hpp"
#include "core/dataset.hpp"
#include "core/metrics.hpp"
#include "core/model.hpp"
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

// n values from seed, uniform in [lo, hi).
inline std::vector<float> random_vec(std::size_t n, std::uint64_t seed, float lo = -1.f,
                                     float hi = 1.f) {
  base::SplitMix64 r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(lo + (hi - lo) * r.uniform());
  return v;
}

// Mean loss of the model on (x, y) with the given host parameters (its gradients left in grads()).
inline float loss_at(kernels::Backend& be, Model& m, const std::vector<float>& p, const float* x,
                     const std::int32_t* y, int batch) {
  be.upload(m.params(), p.data(), p.size() * sizeof(float));
  return m.forward_backward(x, y, batch);
}

// Finite-difference gradient check: initializes m (seed 3), moves its parameters by noise in
// [-0.1, 0.1) so that every bias gradient is exercised away from its initial value, and checks
// the backprop gradient of every parameter of every layer that has parameters against central
// differences (step eps) of the loss on inputs in [0, 1) from seed 11 with labels y, in double
// where it matters. Returns the number of parameters checked.
inline int check_gradients(kernels::Backend& be, Model& m, const std::vector<std::int32_t>& yh,
                           float eps = 1e-3f) {
  const int batch = int(yh.size());
  m.init(3);
  auto xh = random_vec(std::size_t(batch) * m.input_dim(), 11, 0.f, 1.f);
  kernels::DeviceBuffer<float> x(be, xh.size());
  kernels::DeviceBuffer<std::int32_t> y(be, batch);
  be.upload(x.data(), xh.data(), xh.size() * 4);
  be.upload(y.data(), yh.data(), yh.size() * 4);
  std::vector<float> p(m.num_params());
  be.download(p.data(), m.params(), p.size() * 4);
  auto noise = random_vec(p.size(), 5, -0.1f, 0.1f);
  for (std::size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
  loss_at(be, m, p, x.data(), y.data(), batch);
  std::vector<float> g(m.num_params());
  be.download(g.data(), m.grads(), g.size() * 4);

  int checked = 0;
  for (std::size_t li = 0; li < m.layers().size(); ++li) {
    const auto& l = m.layers()[li];
    if (!l.has_params()) continue;
    INFO("layer " << li << " kind " << int(l.kind));
    for (std::size_t i = l.w_offset; i < l.b_offset + l.out; ++i) {  // W then b of this layer
      auto pp = p, pm = p;
      pp[i] += eps;
      pm[i] -= eps;
      const double fd = (double(loss_at(be, m, pp, x.data(), y.data(), batch)) -
                         double(loss_at(be, m, pm, x.data(), y.data(), batch))) /
                        (2.0 * eps);
      INFO("param " << i << (i >= l.b_offset ? " (bias)" : " (weight)") << ": fd " << fd
                    << " backprop " << g[i]);
      const double tol = 2e-3 + 2e-2 * std::max(std::abs(fd), std::abs(double(g[i])));
      CHECK(std::abs(fd - g[i]) <= tol);
      ++checked;
    }
  }
  return checked;
}

}  // namespace gossiptrain::core::test
