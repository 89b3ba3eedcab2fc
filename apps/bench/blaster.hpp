// gossip-bench average's reference transfer: the same bytes both ways on one connection of the
// same channel, nothing else (apps/bench/average.cpp measures the exchange against it).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "net/buffer_pool.hpp"
#include "net/transport.hpp"

namespace gossiptrain::apps::bench_average {

using net::Millis;

// The reference: the same message sizes as the exchange's chunks, both ways at once on one
// connection of the same channel, with the same back-pressure retry, and nothing else. Each
// message is its own buffer, as the chunks of a snapshot are: the sender reads 100 MB from memory,
// not one message over and over from cache.
constexpr std::uint8_t kBlastHello = 0x60;
constexpr std::uint8_t kBlastData = 0x61;

class Blaster final : public net::TransportHandler {
 public:
  Blaster(net::Transport& t, std::vector<std::size_t> sizes) : t_(t), sizes_(std::move(sizes)) {
    for (std::size_t s : sizes_) {
      total_ += s;
      msgs_.push_back(std::make_shared<net::Bytes>(s, std::uint8_t(0x5a + msgs_.size())));
    }
  }
  void dial(const std::string& addr) {
    t_.connect(addr, [this](net::ConnectionPtr c, const net::CloseCause& err) {
      if (!c) {
        spdlog::error("bench average: reference dial failed: {}", err);
        return;
      }
      conn_ = c;
      c->send(kBlastHello, std::make_shared<net::Bytes>());
      set_ready();
    });
  }
  // Any thread: resets the counters and starts sending on the protocol thread.
  // Call reset() on both ends before start() on either: data may arrive as soon as one starts.
  void reset() { received_.store(0); }
  void start() {
    t_.scheduler().post([this] {
      sent_msgs_ = 0;
      pump();
    });
  }
  bool done() const { return received_.load() >= total_; }
  bool ready() {
    std::lock_guard<std::mutex> lk(mu_);
    return ready_;
  }

  void on_connection(const net::ConnectionPtr&, bool) override {}
  void on_message(const net::ConnectionPtr& c, std::uint8_t type, net::Bytes&& b) override {
    if (type == kBlastHello) {
      conn_ = c;
      set_ready();
    } else if (type == kBlastData) {
      received_.fetch_add(b.size());
      t_.buffers().recycle(std::move(b));  // as the averager does with the chunks it has used
    } else {
      c->close(net::CloseReason::UnknownType, "bench");
    }
  }
  void on_closed(const net::ConnectionPtr& c, const net::CloseCause& reason) override {
    if (c == conn_) spdlog::warn("bench average: reference connection closed: {}", reason);
  }
  std::string progress() const {
    return std::to_string(sent_msgs_) + "/" + std::to_string(sizes_.size()) + " sent, " +
           std::to_string(received_.load()) + "/" + std::to_string(total_) + " bytes received";
  }

 private:
  void set_ready() {
    std::lock_guard<std::mutex> lk(mu_);
    ready_ = true;
  }
  void pump() {
    while (sent_msgs_ < sizes_.size()) {
      if (!conn_->send(kBlastData, msgs_[sent_msgs_])) {
        if (!conn_->is_open()) return;
        t_.scheduler().schedule(Millis(1), [this] { pump(); });
        return;
      }
      ++sent_msgs_;
    }
  }

  net::Transport& t_;
  std::vector<std::size_t> sizes_;
  std::size_t total_ = 0;
  std::vector<net::SharedBytes> msgs_;
  net::ConnectionPtr conn_;
  std::size_t sent_msgs_ = 0;
  std::atomic<std::size_t> received_{0};
  std::mutex mu_;
  bool ready_ = false;
};

}  // namespace gossiptrain::apps::bench_average
