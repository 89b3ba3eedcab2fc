// The crypto worker pool (see crypto_pool.hpp).
#include "net/secure/crypto_pool.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <spdlog/spdlog.h>

#include "base/thread.hpp"

namespace gossiptrain::net {

unsigned default_crypto_threads() {
  unsigned cores = std::thread::hardware_concurrency();
  if (cores <= 2) return 1;
  return std::min(cores - 1, kMaxDefaultCryptoThreads);
}

CryptoPool::CryptoPool(unsigned threads, int nice, std::vector<int> cpus) {
  if (threads < 1 || threads > kMaxCryptoThreads)
    throw std::logic_error("CryptoPool: thread count out of range");
  workers_.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) {
    workers_.emplace_back([this, nice, cpus] {
      std::string err;
      if (!base::lower_this_thread_priority(nice, &err))
        spdlog::warn("net: could not lower a crypto thread's priority: {}", err);
      if (!base::pin_this_thread(cpus, &err))
        spdlog::warn("net: could not pin a crypto thread to the network's cores: {}", err);
      work();
    });
  }
}

CryptoPool::~CryptoPool() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void CryptoPool::submit(Task* t) {
  {
    std::lock_guard lk(mu_);
    if (stop_) throw std::logic_error("CryptoPool: submit after stop");
    queue_.push_back(t);
  }
  work_cv_.notify_one();
}

void CryptoPool::wait(Task* t) {
  std::unique_lock lk(mu_);
  done_cv_.wait(lk, [t] { return t->done; });
}

void CryptoPool::work() {
  std::unique_lock lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    Task* t = queue_.front();
    queue_.pop_front();
    lk.unlock();
    bool ok = false;
    try {
      ok = t->fn();
    } catch (const std::exception& e) {
      // Only a broken invariant throws here (the AEAD calls fail on bad input by returning false);
      // the owner sees a failed task and decides.
      spdlog::critical("net: crypto task threw (a bug): {}", e.what());
      ok = false;
    }
    lk.lock();
    t->ok = ok;
    t->done = true;
    ++tasks_run_;
    // Under the lock: the owner may free `t` as soon as it sees done, which needs this lock.
    done_cv_.notify_all();
  }
}

std::size_t CryptoBatch::add(std::function<bool()> fn) {
  tasks_.emplace_back();
  tasks_.back().fn = std::move(fn);
  pool_->submit(&tasks_.back());
  return tasks_.size() - 1;
}

bool CryptoBatch::wait(std::size_t index) {
  CryptoPool::Task& t = tasks_.at(index);
  pool_->wait(&t);
  return t.ok;
}

bool CryptoBatch::wait_all(std::size_t* first_failed) {
  bool ok = true;
  for (std::size_t i = 0; i < tasks_.size(); ++i) {
    pool_->wait(&tasks_[i]);
    if (!tasks_[i].ok && ok && first_failed) *first_failed = i;
    ok = ok && tasks_[i].ok;
  }
  tasks_.clear();
  return ok;
}

}  // namespace gossiptrain::net
