// TensorBoard event-file writer (see tensorboard.hpp). Protobuf field numbers from
// tensorflow/core/util/event.proto (Event: wall_time 1, step 2, file_version 3, summary 5) and
// summary.proto (Summary.value 1; Value: tag 1, simple_value 2).
#include "core/observe/tensorboard.hpp"

#include <unistd.h>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <spdlog/spdlog.h>

namespace gossiptrain::core {

namespace {

std::array<std::uint32_t, 256> make_crc32c_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

void put_varint(std::string& s, std::uint64_t v) {
  while (v >= 0x80) {
    s += char(std::uint8_t(v) | 0x80);
    v >>= 7;
  }
  s += char(std::uint8_t(v));
}

void put_fixed(std::string& s, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s += char(std::uint8_t(v >> (8 * i)));
}

void put_bytes(std::string& s, int field, const std::string& b) {
  put_varint(s, (std::uint64_t(field) << 3) | 2);
  put_varint(s, b.size());
  s += b;
}

void put_double(std::string& s, int field, double v) {
  std::uint64_t u;
  std::memcpy(&u, &v, 8);
  put_varint(s, (std::uint64_t(field) << 3) | 1);
  put_fixed(s, u, 8);
}

std::string event_head(double wall_time, std::int64_t step) {
  std::string e;
  put_double(e, 1, wall_time);
  if (step != 0) {
    put_varint(e, (2 << 3) | 0);
    put_varint(e, std::uint64_t(step));
  }
  return e;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t n) {
  static const auto table = make_crc32c_table();
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::uint32_t masked_crc32c(const void* data, std::size_t n) {
  const std::uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string encode_scalar_event(double wall_time, std::int64_t step, const std::string& tag,
                                float value) {
  std::string v;
  put_bytes(v, 1, tag);
  std::uint32_t u;
  std::memcpy(&u, &value, 4);
  put_varint(v, (2 << 3) | 5);
  put_fixed(v, u, 4);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e = event_head(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

TensorboardWriter::TensorboardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("tensorboard: cannot create " + dir + ": " + ec.message());
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  path_ = dir + "/events.out.tfevents." + std::to_string(std::int64_t(unix_now())) + "." + host +
          "." + std::to_string(::getpid());
  f_ = std::fopen(path_.c_str(), "wb");
  if (!f_)
    throw std::runtime_error("tensorboard: cannot create " + path_ + ": " + std::strerror(errno));
  std::string e = event_head(unix_now(), 0);
  put_bytes(e, 3, "brain.Event:2");
  std::lock_guard<std::mutex> lock(mu_);
  write_record(e);
}

TensorboardWriter::~TensorboardWriter() {
  if (f_) std::fclose(f_);
}

void TensorboardWriter::write_record(const std::string& data) {
  std::string rec;
  put_fixed(rec, data.size(), 8);
  put_fixed(rec, masked_crc32c(rec.data(), 8), 4);
  rec += data;
  put_fixed(rec, masked_crc32c(data.data(), data.size()), 4);
  // Flushed per record: TensorBoard reads a file as it grows, and stops at a partial record until
  // the rest is there.
  const bool ok = std::fwrite(rec.data(), 1, rec.size(), f_) == rec.size() && std::fflush(f_) == 0;
  if (!ok && !failed_) {
    failed_ = true;
    spdlog::error("tensorboard: cannot write to {}: {}", path_, std::strerror(errno));
  }
  if (!ok) std::clearerr(f_);
}

void TensorboardWriter::scalar(const std::string& tag, float value, std::int64_t step) {
  const std::string e = encode_scalar_event(unix_now(), step, tag, value);
  std::lock_guard<std::mutex> lock(mu_);
  write_record(e);
}

void TensorboardWriter::on_metric(double, const std::string& event, const nlohmann::json& f) {
  if (event == "data" || !f.is_object()) return;
  std::int64_t step;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = f.find("step"); it != f.end() && it->is_number_integer())
      last_step_ = it->get<std::int64_t>();
    step = last_step_;
  }
  for (auto it = f.begin(); it != f.end(); ++it) {
    if (it.key() == "step" || it.key() == "steps_total" || !it->is_number()) continue;
    scalar(event + "/" + it.key(), it->get<float>(), step);
  }
}

}  // namespace gossiptrain::core
