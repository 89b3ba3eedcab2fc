#include "kernels/cpu/loop_pool.hpp"

#include <algorithm>

#include "kernels/cpu/denormals.hpp"

namespace gossiptrain::kernels {

LoopPool::~LoopPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

unsigned LoopPool::parts(std::size_t n, unsigned workers) {
  if (n < kMinParallel || workers == 0) return 1;
  const std::size_t by_size = n / (kMinParallel / 2);  // at least 64k elements a range
  return unsigned(std::max<std::size_t>(1, std::min<std::size_t>(workers + 1, by_size)));
}

void LoopPool::grow(unsigned workers) {
  while (threads_.size() < workers) threads_.emplace_back([this] { work(); });
}

void LoopPool::run(std::size_t n, std::size_t align, unsigned workers,
                   const std::function<void(std::size_t, std::size_t, std::size_t)>& fn) {
  const FlushDenormals ftz;
  const unsigned p = parts(n, workers);
  if (p <= 1) {
    fn(0, 0, n);
    return;
  }
  std::vector<std::size_t> bounds(p + 1, n);
  bounds[0] = 0;
  for (unsigned i = 1; i < p; ++i) bounds[i] = std::min(n, n * i / p / align * align);
  std::unique_lock<std::mutex> lk(mu_);
  if (busy_) {
    // Another thread's job holds the pool: the same ranges, in order, here.
    lk.unlock();
    for (unsigned i = 0; i < p; ++i) fn(i, bounds[i], bounds[i + 1]);
    return;
  }
  busy_ = true;
  grow(p - 1);
  bounds_ = std::move(bounds);
  fn_ = &fn;
  next_ = 0;
  pending_ = p;
  ++generation_;
  const std::uint64_t gen = generation_;
  lk.unlock();
  start_cv_.notify_all();
  run_parts(gen);  // the caller takes parts too
  lk.lock();
  done_cv_.wait(lk, [this] { return pending_ == 0; });
  fn_ = nullptr;
  busy_ = false;
}

// Takes parts of job `gen` until none is left. Parts are claimed under the lock, so a worker that
// wakes late never runs a part of a newer job with an older job's function.
void LoopPool::run_parts(std::uint64_t gen) {
  for (;;) {
    std::size_t lo, hi;
    unsigned i;
    const std::function<void(std::size_t, std::size_t, std::size_t)>* fn;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (generation_ != gen || fn_ == nullptr || next_ + 1 >= bounds_.size()) return;
      i = next_++;
      lo = bounds_[i];
      hi = bounds_[i + 1];
      fn = fn_;
    }
    (*fn)(i, lo, hi);
    bool last;
    {
      std::lock_guard<std::mutex> g(mu_);
      last = --pending_ == 0;
    }
    if (last) done_cv_.notify_all();
  }
}

void LoopPool::work() {
  const FlushDenormals ftz;  // this thread runs nothing but the loops
  std::uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      start_cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_parts(seen);
  }
}

}  // namespace gossiptrain::kernels
