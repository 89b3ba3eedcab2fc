// Metrics as JSON lines (docs/peer.md, "Metric lines"): one object per line, always with t
// (seconds since start), peer and event. Thread-safe: the training loop and the network thread
// both write.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gossiptrain::core {

// Something else that reads the metric lines (the Prometheus registry, the TensorBoard writer), so
// the peer emits each figure once. Called on the emitting thread, outside the file's lock: a sink
// does its own locking and must not block (no network I/O).
class MetricSink {
 public:
  virtual ~MetricSink() = default;
  // t: seconds since the metrics started, as on the line.
  virtual void on_metric(double t, const std::string& event, const nlohmann::json& fields) = 0;
};

class Metrics {
 public:
  // An empty path writes nothing (metrics off). Throws std::runtime_error if the file cannot be
  // opened for appending.
  Metrics(const std::string& path, std::string peer);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Writes {"t":..., "peer":..., "event": event, ...fields} and flushes the line.
  void emit(const std::string& event, nlohmann::json fields = nlohmann::json::object());
  void set_peer(std::string peer);
  // Every later emit() also goes to sink (not owned; it must outlive this or be removed first).
  // Sinks are added before the threads that emit start.
  void add_sink(MetricSink* sink);
  void remove_sink(MetricSink* sink);
  double seconds() const;  // since construction

 private:
  std::mutex mu_;
  std::FILE* f_ = nullptr;
  std::string path_;
  std::string peer_;
  std::vector<MetricSink*> sinks_;
  std::uint64_t lost_ = 0;  // lines not written since the last one that was
  std::chrono::steady_clock::time_point start_;
};

}  // namespace gossiptrain::core
