// Checkpoints: parameters + optimizer state + counters, written atomically (temp file, fsync,
// rename, fsync of the folder) with a checksum over the whole content that is verified on load.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace gossiptrain::core {

struct CheckpointError : std::runtime_error {
  using std::runtime_error::runtime_error;
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

}  // namespace gossiptrain::core
