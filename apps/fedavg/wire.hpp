// FedAvg's messages on the encrypted channel (types 0x80..0x83): encoders and validating decoders,
// pure functions that the server, the client and the tests share. Nothing here touches a socket.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gossiptrain::apps::fedavg {

enum class MsgType : std::uint8_t {
  Hello = 0x80,   // client -> server: shard, samples in its shard
  Task = 0x81,    // server -> client: round, local work, fedprox mu, the global model
  Update = 0x82,  // client -> server: round, samples, its trained model
  Done = 0x83,    // server -> client: the run is over, exit
};

struct Hello {
  std::uint32_t shard = 0;
  std::uint64_t samples = 0;
};
struct Task {
  std::uint64_t round = 0;
  std::uint32_t local_epochs = 1;
  std::uint64_t local_steps = 0;  // > 0: this many steps instead of local_epochs passes
  float fedprox_mu = 0.0f;
  std::vector<float> params;
};
struct Update {
  std::uint64_t round = 0;
  std::uint64_t samples = 0;
  std::vector<float> params;
};

// Bounds a peer's claims are checked against (hostile until validated).
inline constexpr std::uint64_t kMaxSamples = 1ull << 32;
inline constexpr std::uint32_t kMaxLocalEpochs = 100000;
inline constexpr std::uint64_t kMaxLocalSteps = 1ull << 32;

// The largest FedAvg message for a model of n_params values: the channel's message limit for a
// FedAvg transport, so that no peer can make it buffer more than one model.
std::uint64_t max_message_bytes(std::size_t n_params);

std::vector<std::uint8_t> encode(const Hello& m);
std::vector<std::uint8_t> encode(const Task& m);
std::vector<std::uint8_t> encode(const Update& m);

// Each decoder checks the exact size (n_params values where a model travels), ranges and that
// every value is finite; on failure it returns nothing and says why in *why.
std::optional<Hello> decode_hello(const std::vector<std::uint8_t>& b, std::string* why);
std::optional<Task> decode_task(const std::vector<std::uint8_t>& b, std::size_t n_params,
                                std::string* why);
std::optional<Update> decode_update(const std::vector<std::uint8_t>& b, std::size_t n_params,
                                    std::string* why);

// FNV-1a 64 of the values' bytes: what the `round` and `update` lines print, so that a test can
// tell which models the server applied.
std::uint64_t params_fnv(const std::vector<float>& p);

}  // namespace gossiptrain::apps::fedavg
