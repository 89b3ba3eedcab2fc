// TensorBoard event files from the metric lines (a MetricSink): TFRecord framing with masked
// CRC32C and hand-encoded Event/Summary protobufs, one flushed record per scalar line, so that
// TensorBoard reads the curves while the run goes on.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

#include "core/metrics.hpp"

namespace gossiptrain::core {

class TensorboardWriter final : public MetricSink {
 public:
  // Creates dir (and parents) and dir/events.out.tfevents.<unix time>.<host>.<pid>, whose first
  // record is the file_version "brain.Event:2" event. Throws std::runtime_error when it cannot.
  explicit TensorboardWriter(const std::string& dir);
  ~TensorboardWriter() override;
  TensorboardWriter(const TensorboardWriter&) = delete;
  TensorboardWriter& operator=(const TensorboardWriter&) = delete;

  // Every numeric field of a line becomes a scalar tagged "<event>/<field>" at the line's step
  // (the last step seen for lines without one); booleans, strings, `step` itself and the
  // one-off `data` line are left out.
  void on_metric(double t, const std::string& event, const nlohmann::json& fields) override;
  // One scalar (wall time is the Unix time now).
  void scalar(const std::string& tag, float value, std::int64_t step);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);  // under mu_
  std::mutex mu_;
  std::FILE* f_ = nullptr;
  std::string path_;
  std::int64_t last_step_ = 0;
  bool failed_ = false;
};

// CRC-32C (Castagnoli) of data, and TFRecord's mask of it; exposed for the tests.
std::uint32_t crc32c(const void* data, std::size_t n);
std::uint32_t masked_crc32c(const void* data, std::size_t n);
// An Event protobuf with wall_time, step and one summary value {tag, simple_value}.
std::string encode_scalar_event(double wall_time, std::int64_t step, const std::string& tag,
                                float value);

}  // namespace gossiptrain::core
