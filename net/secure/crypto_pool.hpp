// A small persistent pool of worker threads that seal and open the frames of large messages in
// parallel (docs/channel.md, "The channel", "Crypto threads"). One pool per TcpTransport,
// shared by its channels; nothing process-wide.
//
// The pool only runs work: which frame gets which nonce is decided by the caller, in order, before
// a task is queued (FrameSealer::seal_data_batch, FrameReceiver). A task never outlives the
// CryptoBatch that queued it: a batch waits for all its tasks in wait_all() and in its
// destructor, so the buffers a task writes stay alive until it has finished.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace gossiptrain::net {

// Worker threads by default: one core is left to the io thread, at most kMaxDefaultCryptoThreads,
// and 1 (no pool: the io thread seals and opens every frame itself) on machines of 2 cores or
// fewer, where the sender's and the receiver's io threads already take both cores.
inline constexpr unsigned kMaxDefaultCryptoThreads = 4;
unsigned default_crypto_threads();
// The most a user may ask for.
inline constexpr unsigned kMaxCryptoThreads = 64;

class CryptoPool {
 public:
  struct Task {
    std::function<bool()> fn;  // false: the task failed (a bad tag)
    bool done = false;         // guarded by the pool's mutex
    bool ok = false;
  };

  // Starts `threads` workers (1..kMaxCryptoThreads), each `nice` levels (0..19) below the caller.
  // cpus: the cores the workers run on (the network's, core::CpuPlan::net); empty: unpinned.
  explicit CryptoPool(unsigned threads, int nice = 0, std::vector<int> cpus = {});
  ~CryptoPool();  // joins the workers; every batch must be finished by then
  CryptoPool(const CryptoPool&) = delete;
  CryptoPool& operator=(const CryptoPool&) = delete;

  unsigned threads() const { return static_cast<unsigned>(workers_.size()); }
  // Tasks finished so far (tests and benchmarks check that the workers did the work).
  std::uint64_t tasks_run() const {
    std::lock_guard lk(mu_);
    return tasks_run_;
  }
  void submit(Task* t);
  void wait(Task* t);  // blocks until t->done

 private:
  void work();

  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<Task*> queue_;
  bool stop_ = false;
  std::uint64_t tasks_run_ = 0;
  std::vector<std::thread> workers_;
};

// The tasks one owner (a sealer batch, a receiver's message) queued, in submission order.
class CryptoBatch {
 public:
  explicit CryptoBatch(std::shared_ptr<CryptoPool> pool) : pool_(std::move(pool)) {}
  ~CryptoBatch() { wait_all(); }
  CryptoBatch(const CryptoBatch&) = delete;
  CryptoBatch& operator=(const CryptoBatch&) = delete;

  CryptoPool& pool() const { return *pool_; }
  // Queues fn and returns its index (0, 1, ... since the last wait_all).
  std::size_t add(std::function<bool()> fn);
  // Blocks until task `index` has finished; its result.
  bool wait(std::size_t index);
  // Blocks until every queued task has finished; true when all succeeded, else the index of the
  // first that failed goes to *first_failed. Starts a new batch.
  bool wait_all(std::size_t* first_failed = nullptr);
  std::size_t size() const { return tasks_.size(); }

 private:
  std::shared_ptr<CryptoPool> pool_;
  std::deque<CryptoPool::Task> tasks_;  // deque: a task's address is stable while others are added
};

}  // namespace gossiptrain::net
