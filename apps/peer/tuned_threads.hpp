// --compute-threads auto on the cpu backend: the trainer's outermost step hook times each step and
// moves the BLAS pool between its size and one thread as core::ThreadTuner measures faster
// (docs/tuning.md, "Busy cores").
#pragma once

#include <chrono>
#include <memory>

#include "core/step_hook.hpp"
#include "core/thread_tuner.hpp"

namespace gossiptrain::apps {

class TunedThreads final : public core::StepHook {
 public:
  // inner: the hook it wraps (may be null); many: the pool's size now (> 1).
  TunedThreads(core::StepHook* inner, int many);
  void between_steps(core::StepContext& ctx) override;

 private:
  using Clock = std::chrono::steady_clock;
  core::StepHook* inner_;
  core::ThreadTuner tuner_;
  int many_;
  Clock::time_point t0_ = Clock::now();
  Clock::time_point last_{};  // when the last hook call returned (a step starts there)
};

// The tuned hook around the trainer's hook when the pool may be tuned: the cpu backend, the
// thread count left to auto (--compute-threads, OPENBLAS_NUM_THREADS and OMP_NUM_THREADS unset)
// and a pool of 2 threads or more; null otherwise.
std::unique_ptr<TunedThreads> tune_threads(bool cpu_backend, int compute_threads,
                                           core::StepHook* inner);

}  // namespace gossiptrain::apps
