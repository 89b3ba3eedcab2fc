// FedAvg's message encoding: little-endian fixed fields, then the model as raw float32 values.
#include "apps/fedavg/wire.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace gossiptrain::apps::fedavg {
namespace {

template <class T>
void put(std::vector<std::uint8_t>& out, T v) {
  std::uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // the hosts we build for are little-endian
  out.insert(out.end(), b, b + sizeof(T));
}

void put_params(std::vector<std::uint8_t>& out, const std::vector<float>& p) {
  const auto* b = reinterpret_cast<const std::uint8_t*>(p.data());
  out.insert(out.end(), b, b + p.size() * sizeof(float));
}

struct Reader {
  const std::vector<std::uint8_t>& b;
  std::size_t at = 0;
  template <class T>
  T get() {
    T v;
    std::memcpy(&v, b.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  bool read_params(std::size_t n, std::vector<float>& out) {
    out.resize(n);
    std::memcpy(out.data(), b.data() + at, n * sizeof(float));
    at += n * sizeof(float);
    for (float v : out)
      if (!std::isfinite(v)) return false;
    return true;
  }
};

bool fail(std::string* why, std::string text) {
  if (why) *why = std::move(text);
  return false;
}

bool size_is(const std::vector<std::uint8_t>& b, std::size_t want, const char* what,
             std::string* why) {
  if (b.size() == want) return true;
  return fail(why, std::string(what) + " of " + std::to_string(b.size()) + " bytes, expected " +
                       std::to_string(want));
}

constexpr std::size_t kHelloBytes = 4 + 8;
constexpr std::size_t kTaskHead = 8 + 4 + 8 + 4;
constexpr std::size_t kUpdateHead = 8 + 8;

}  // namespace

std::uint64_t max_message_bytes(std::size_t n_params) {
  // The channel's floor is 64 KiB (net::Limits::validate).
  return std::max<std::uint64_t>(64u << 10, kTaskHead + std::uint64_t(n_params) * sizeof(float));
}

std::vector<std::uint8_t> encode(const Hello& m) {
  std::vector<std::uint8_t> out;
  put(out, m.shard);
  put(out, m.samples);
  return out;
}

std::vector<std::uint8_t> encode(const Task& m) {
  std::vector<std::uint8_t> out;
  out.reserve(kTaskHead + m.params.size() * sizeof(float));
  put(out, m.round);
  put(out, m.local_epochs);
  put(out, m.local_steps);
  put(out, m.fedprox_mu);
  put_params(out, m.params);
  return out;
}

std::vector<std::uint8_t> encode(const Update& m) {
  std::vector<std::uint8_t> out;
  out.reserve(kUpdateHead + m.params.size() * sizeof(float));
  put(out, m.round);
  put(out, m.samples);
  put_params(out, m.params);
  return out;
}

std::optional<Hello> decode_hello(const std::vector<std::uint8_t>& b, std::string* why) {
  if (!size_is(b, kHelloBytes, "hello", why)) return std::nullopt;
  Reader r{b};
  Hello m;
  m.shard = r.get<std::uint32_t>();
  m.samples = r.get<std::uint64_t>();
  if (m.samples == 0 || m.samples > kMaxSamples) {
    fail(why, "hello claims " + std::to_string(m.samples) + " samples");
    return std::nullopt;
  }
  return m;
}

std::optional<Task> decode_task(const std::vector<std::uint8_t>& b, std::size_t n_params,
                                std::string* why) {
  if (!size_is(b, kTaskHead + n_params * sizeof(float), "task", why)) return std::nullopt;
  Reader r{b};
  Task m;
  m.round = r.get<std::uint64_t>();
  m.local_epochs = r.get<std::uint32_t>();
  m.local_steps = r.get<std::uint64_t>();
  m.fedprox_mu = r.get<float>();
  if (m.local_epochs < 1 || m.local_epochs > kMaxLocalEpochs || m.local_steps > kMaxLocalSteps) {
    fail(why, "task asks for " + std::to_string(m.local_epochs) + " epochs / " +
                  std::to_string(m.local_steps) + " steps");
    return std::nullopt;
  }
  if (!std::isfinite(m.fedprox_mu) || m.fedprox_mu < 0.0f) {
    fail(why, "task has a bad fedprox mu");
    return std::nullopt;
  }
  if (!r.read_params(n_params, m.params)) {
    fail(why, "task's model has a value that is not finite");
    return std::nullopt;
  }
  return m;
}

std::optional<Update> decode_update(const std::vector<std::uint8_t>& b, std::size_t n_params,
                                    std::string* why) {
  if (!size_is(b, kUpdateHead + n_params * sizeof(float), "update", why)) return std::nullopt;
  Reader r{b};
  Update m;
  m.round = r.get<std::uint64_t>();
  m.samples = r.get<std::uint64_t>();
  if (m.samples == 0 || m.samples > kMaxSamples) {
    fail(why, "update claims " + std::to_string(m.samples) + " samples");
    return std::nullopt;
  }
  if (!r.read_params(n_params, m.params)) {
    fail(why, "update's model has a value that is not finite");
    return std::nullopt;
  }
  return m;
}

std::uint64_t params_fnv(const std::vector<float>& p) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* b = reinterpret_cast<const std::uint8_t*>(p.data());
  for (std::size_t i = 0; i < p.size() * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

}  // namespace gossiptrain::apps::fedavg
