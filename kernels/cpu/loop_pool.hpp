// Helper threads for the CPU backend's large memory-bound loops (optimizer steps, the mix, copies,
// norms). While a peer runs them its BLAS threads sit idle, so the same cores share the loop:
// with 14 BLAS threads, one thread streaming 25M floats three ways took most of a 70 ms step.
// The workers start on first use, from the calling thread, whose core affinity they inherit (the
// training cores of core::CpuPlan). A loop is split into fixed, kLanes-aligned ranges; element-wise
// loops give the same bits as one thread, and sums add their ranges' partial sums in order.
// Denormals read and written as zero throughout (kernels/cpu/denormals.hpp).
// Any number of threads may call run() at once: the pool runs one job at a time, and a caller that
// finds it busy runs its own job's ranges on its own thread, in order (the same bits, and no wait
// on another thread's loop). The training thread (optimizer) and the network thread (checks of a
// received vector) are the two callers in a peer; they once shared one job's fields and hung.
#pragma once

#include <cstdint>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gossiptrain::kernels {

class LoopPool {
 public:
  // Loops shorter than this run on the calling thread alone (a dispatch costs ~10-50 us).
  static constexpr std::size_t kMinParallel = std::size_t(1) << 17;

  LoopPool() = default;
  ~LoopPool();
  LoopPool(const LoopPool&) = delete;
  LoopPool& operator=(const LoopPool&) = delete;

  // Calls fn(lo, hi) over [0, n) in parts() ranges, on the workers and the calling thread, and
  // returns when all are done. align: range boundaries are multiples of it. workers: how many
  // helpers to use at most (the pool grows to it on first need; 0: the caller alone). Safe from
  // any number of threads, and from inside fn (a nested call runs on the calling thread).
  void run(std::size_t n, std::size_t align, unsigned workers,
           const std::function<void(std::size_t part, std::size_t lo, std::size_t hi)>& fn);
  // The number of ranges run() splits n into with this many workers.
  static unsigned parts(std::size_t n, unsigned workers);

 private:
  void grow(unsigned workers);
  void work();
  void run_parts(std::uint64_t gen);

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  std::uint64_t generation_ = 0;  // a new job each increment
  bool stop_ = false;
  bool busy_ = false;  // a job is in flight: another caller runs its own loop alone
  // The job in flight (guarded by mu_ for publication; parts taken through next_).
  const std::function<void(std::size_t, std::size_t, std::size_t)>* fn_ = nullptr;
  std::vector<std::size_t> bounds_;
  unsigned next_ = 0;     // the next part to claim
  unsigned pending_ = 0;  // parts not finished yet
};

}  // namespace gossiptrain::kernels
