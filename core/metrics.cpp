// JSON-lines metrics writer: t, peer and event first on every line, one flushed write per line
// under a mutex so lines from the training and network threads never interleave.
#include "core/metrics.hpp"

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <stdexcept>

#include <spdlog/spdlog.h>

namespace gossiptrain::core {

Metrics::Metrics(const std::string& path, std::string peer)
    : path_(path), peer_(std::move(peer)), start_(std::chrono::steady_clock::now()) {
  if (path.empty()) return;
  f_ = std::fopen(path.c_str(), "a");
  if (!f_) {
    throw std::runtime_error("cannot open metrics file " + path + " for appending: " +
                             std::strerror(errno));
  }
}

Metrics::~Metrics() {
  if (f_) std::fclose(f_);
}

void Metrics::set_peer(std::string peer) {
  std::lock_guard<std::mutex> lock(mu_);
  peer_ = std::move(peer);
}

double Metrics::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Metrics::add_sink(MetricSink* sink) {
  std::lock_guard<std::mutex> lock(mu_);
  sinks_.push_back(sink);
}

void Metrics::remove_sink(MetricSink* sink) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase(sinks_, sink);
}

void Metrics::emit(const std::string& event, nlohmann::json fields) {
  if (!sinks_.empty()) {
    std::vector<MetricSink*> sinks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      sinks = sinks_;
    }
    const double t = seconds();
    for (MetricSink* s : sinks) s->on_metric(t, event, fields);
  }
  if (!f_) return;
  // Invalid UTF-8 in a field (a peer id read off the wire, say) must not throw from here.
  auto dump = [](const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  // The body is built outside the lock; t is taken under it so t never decreases down the file.
  std::string body = ",\"event\":" + dump(event);
  if (fields.is_object()) {
    for (auto it = fields.begin(); it != fields.end(); ++it) {
      // A field may not shadow the header (e.g. a `member` event's own `peer`): a duplicate key
      // would be dropped or misread by JSON readers, so it is written as EVENT_KEY instead.
      std::string key = it.key();
      if (key == "t" || key == "peer" || key == "event") key = event + "_" + key;
      body += "," + dump(key) + ":" + dump(it.value());
    }
  } else if (!fields.is_null()) {
    body += ",\"value\":" + dump(fields);
  }
  body += "}\n";
  std::lock_guard<std::mutex> lock(mu_);
  char tbuf[48];
  std::snprintf(tbuf, sizeof tbuf, "{\"t\":%.6f,\"peer\":", seconds());
  std::string line = tbuf + dump(peer_) + body;
  const bool ok =
      std::fwrite(line.data(), 1, line.size(), f_) == line.size() && std::fflush(f_) == 0;
  if (!ok) {
    // A full disk, say: said once, not per line, and the lines lost counted; the stream is reset
    // so that the next line is tried again.
    if (lost_++ == 0)
      spdlog::error("metrics: cannot write to {}: {}; metric lines are lost until it can", path_,
                    std::strerror(errno));
    std::clearerr(f_);
  } else if (lost_ > 0) {
    spdlog::warn("metrics: writing to {} again; {} line(s) were lost", path_, lost_);
    lost_ = 0;
  }
}

}  // namespace gossiptrain::core
