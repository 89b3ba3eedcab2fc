#include "apps/peer/tuned_threads.hpp"

#include <cstdlib>

#include <spdlog/spdlog.h>

#include "kernels/cpu/cpu_backend.hpp"

namespace gossiptrain::apps {

namespace {
constexpr double kHoldS = 30.0;  // seconds between trials
double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}
}  // namespace

TunedThreads::TunedThreads(core::StepHook* inner, int many)
    : inner_(inner), tuner_(core::ThreadTunerConfig{.many = many, .hold_s = kHoldS}), many_(many) {}

void TunedThreads::between_steps(core::StepContext& ctx) {
  const auto now = Clock::now();
  if (!ctx.training_done && last_ != Clock::time_point{}) {
    if (const int t = tuner_.on_step(seconds(now - last_), seconds(now - t0_)); t > 0) {
      kernels::set_blas_threads(t);
      spdlog::debug("BLAS threads: {} (last trial: {:.3f} ms a step on {}, {:.3f} ms on 1)", t,
                    tuner_.typical_many_s() * 1e3, many_, tuner_.typical_one_s() * 1e3);
    }
    if (tuner_.take_changed()) {
      const int t = tuner_.threads();
      spdlog::info(
          "BLAS threads: a step took {:.2f} ms on {} threads and {:.2f} ms on 1 (means, without evaluations): "
          "training on {} from now on, measured again every {:.0f} s{}",
          tuner_.typical_many_s() * 1e3, many_, tuner_.typical_one_s() * 1e3,
          t == 1 ? std::string("1 thread") : std::to_string(t) + " threads", kHoldS,
          t == 1 ? " (other work keeps the cores busy; --compute-threads N fixes the count)" : "");
    }
  }
  if (inner_) inner_->between_steps(ctx);
  last_ = Clock::now();
}

std::unique_ptr<TunedThreads> tune_threads(bool cpu_backend, int compute_threads,
                                           core::StepHook* inner) {
  if (!cpu_backend || compute_threads != 0) return nullptr;
  if (std::getenv("OPENBLAS_NUM_THREADS") || std::getenv("OMP_NUM_THREADS")) return nullptr;
  const int many = kernels::blas_threads();
  if (many < 2) return nullptr;
  return std::make_unique<TunedThreads>(inner, many);
}

}  // namespace gossiptrain::apps
