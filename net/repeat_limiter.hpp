// Repeats of one warning, per key (an address): the first is a warning, the ones within the next
// `quiet` are held back (logged at debug), and the first after that is a warning again that says
// how many were held back. A peer that crashes is dialled several times a second by every neighbour
// until the failure detector declares it dead; a warning per dial buried the logs (thousands of
// lines in the seconds before the verdict).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace gossiptrain::net {

class RepeatLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RepeatLimiter(Clock::duration quiet = std::chrono::seconds(30),
                         std::size_t max_keys = 1024)
      : quiet_(quiet), max_keys_(max_keys) {}
  Clock::duration quiet() const { return quiet_; }

  // How many repeats of `key` were held back since its last warning when this one is to be a
  // warning; nullopt when it is to be held back. Thread-safe.
  std::optional<std::uint64_t> admit(const std::string& key, Clock::time_point now) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = keys_.find(key);
    if (it != keys_.end() && now - it->second.warned < quiet_) {
      ++it->second.held;
      return std::nullopt;
    }
    // Bounded: when full, keys whose quiet time is over go (they would warn again anyway); if
    // none is, every key does, and the worst case is an extra warning per key.
    if (it == keys_.end() && keys_.size() >= max_keys_) {
      std::erase_if(keys_, [&](const auto& kv) { return now - kv.second.warned >= quiet_; });
      if (keys_.size() >= max_keys_) keys_.clear();
      it = keys_.end();
    }
    Entry& e = it != keys_.end() ? it->second : keys_[key];
    const std::uint64_t held = e.held;
    e = Entry{now, 0};
    return held;
  }

 private:
  struct Entry {
    Clock::time_point warned;
    std::uint64_t held = 0;
  };
  const Clock::duration quiet_;
  const std::size_t max_keys_;
  std::mutex mu_;
  std::unordered_map<std::string, Entry> keys_;
};

}  // namespace gossiptrain::net
