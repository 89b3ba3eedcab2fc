// Checkpoints: parameters + optimizer state + counters, written atomically (temp file, fsync,
// rename, fsync of the folder) with a checksum over the whole content that is verified on load.
// The same bytes travel over the network when a joining peer catches up (gossip/catch_up).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gossiptrain::core {

struct CheckpointError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A sound checkpoint of this model that belongs to another run (its run id or --epochs): the
// message is one line that names both and the ways out.
struct CheckpointRunError : CheckpointError {
  using CheckpointError::CheckpointError;
};

struct Checkpoint {
  std::uint64_t fingerprint = 0;  // model fingerprint; load refuses a mismatch when caller checks
  std::int64_t step = 0;
  std::int64_t epoch = 0;         // completed epochs
  std::int64_t samples = 0;       // samples trained on so far
  std::vector<float> params;
  std::vector<std::vector<float>> opt_state;  // e.g. {velocity} for sgd, {m, v} for adam
  std::string meta;               // free-form JSON text (config), stored verbatim
};

// Writes dir/checkpoint.bin atomically (creating dir if needed). Throws CheckpointError.
void save_checkpoint(const std::string& dir, const Checkpoint& c);
// Reads dir/checkpoint.bin; throws CheckpointError naming the file and the problem (missing,
// truncated, bad magic/version, checksum mismatch, sizes out of bounds).
Checkpoint load_checkpoint(const std::string& dir);
bool checkpoint_exists(const std::string& dir);

// The run id a checkpoint's metadata (parsed) names; "" for none.
std::string checkpoint_run_id(const nlohmann::json& meta);
// The run a checkpoint being resumed belongs to, judged alike by gossip-peer's trainer, the FedAvg
// server and the Python peer: both ids given and different is another run's checkpoint
// (CheckpointRunError naming both and the ways out, the options spelled as the caller takes them:
// `id_option` "--run-id " or "run_id=", `dir_option`). Returns the id that carries on: ours, or
// theirs when we have none.
std::string resumed_run_id(const std::string& where, const std::string& theirs,
                           const std::string& ours, const std::string& id_option = "--run-id ",
                           const std::string& dir_option = "--checkpoint-dir");

// The file's bytes in memory, for sending a peer's state over the network; the same encoder and
// decoder as the file, so the checksum and every bounds check are the same.
std::vector<std::uint8_t> encode_checkpoint(const Checkpoint& c);
// Throws CheckpointError naming `what` and the problem, as load_checkpoint. Allocates nothing
// larger than size.
Checkpoint decode_checkpoint(const std::uint8_t* data, std::size_t size,
                             const std::string& what = "bytes");
// zlib's CRC-32 of data[0, n), continuing from crc (0 to start): the checkpoint's checksum, and
// the one catch-up puts on the whole encoded state.
std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t n);
// Size of the encoding of a checkpoint with these sizes (opt_values: all optimizer state values).
std::uint64_t encoded_checkpoint_bytes(std::uint64_t n_params, std::uint64_t n_opt,
                                       std::uint64_t opt_values, std::uint64_t meta_bytes);

}  // namespace gossiptrain::core
