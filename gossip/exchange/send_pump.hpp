// What one exchange sends on its connection, in order: control messages (request, accept, commit
// vote) first, then our snapshot's chunks as far as the training thread has cut them, no faster
// than the rate cap. The bounded send queue may refuse (back-pressure): pump() then says when to
// come back, and the next call resumes in the same order. No timers of its own.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <utility>

#include "gossip/exchange/chunk_set.hpp"
#include "net/transport.hpp"

namespace gossiptrain::gossip {

class SendPump {
 public:
  void control(std::uint8_t type, net::SharedBytes msg) {
    control_.emplace_back(type, std::move(msg));
  }
  void clear_control() { control_.clear(); }
  bool control_empty() const { return control_.empty(); }

  void set_own(ChunkSetPtr own) { own_ = std::move(own); }
  const ChunkSetPtr& own() const { return own_; }
  // Lets go of our chunks (the partner has them all), so the next snapshot can reuse them.
  void release_own() { own_.reset(); }
  bool all_sent() const { return own_ && sent_ == own_->chunks.size(); }
  std::uint64_t bytes_sent() const { return bytes_sent_; }
  // The transfer began (ACCEPT sent or received): the rate cap counts from here.
  void start_transfer(net::Millis now) { transfer_started_ = now; }

  struct Options {
    std::uint64_t exchange_id = 0;  // written into each chunk's header
    bool chunks = false;            // the transfer phase: chunks may go
    double rate = 0;                // bytes per second; 0: no cap
    std::size_t chunk_bytes = 0;
    net::Millis send_retry{1};
  };
  // Hands c what is due; nullopt once everything due went, else the wait before trying again.
  std::optional<net::Millis> pump(net::Connection& c, const Options& o, net::Millis now);

 private:
  std::deque<std::pair<std::uint8_t, net::SharedBytes>> control_;
  ChunkSetPtr own_;               // our encoded snapshot (null until the training thread made it)
  std::size_t sent_ = 0;          // chunks of own_ already queued
  std::uint64_t bytes_sent_ = 0;  // payload chunk bytes (headers included) queued
  net::Millis transfer_started_{0};
};

}  // namespace gossiptrain::gossip
