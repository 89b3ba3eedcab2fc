// Tests for checkpoints: exact round trip, and refusal of every truncation, bit flip, trailing
// byte and absurd size, plus the atomic-write guarantees (no stray .tmp, a stale .tmp ignored).
#include <catch2/catch.hpp>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/checkpoint.hpp"
#include "tests/test_util.hpp"

using namespace gossiptrain::core;
using gt_test::WhatContains;
namespace fs = std::filesystem;

namespace {

struct TempDir : gt_test::TempDir {
  TempDir() : gt_test::TempDir("gt-core-ckpt", false) {}
};

std::vector<char> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

void write_all(const std::string& path, const char* data, std::size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data, static_cast<std::streamsize>(n));
  REQUIRE(f.good());
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

Checkpoint small_checkpoint() {
  Checkpoint c;
  c.fingerprint = 0x0123456789abcdefULL;
  c.step = 1234;
  c.epoch = 3;
  c.samples = 78976;
  c.params = {0.5f, -1.25f, 3.0e-8f};
  c.opt_state = {{0.1f, 0.2f, 0.3f}, {}};
  c.meta = R"({"lr":0.02})";
  return c;
}

void check_equal(const Checkpoint& a, const Checkpoint& b) {
  CHECK(a.fingerprint == b.fingerprint);
  CHECK(a.step == b.step);
  CHECK(a.epoch == b.epoch);
  CHECK(a.samples == b.samples);
  CHECK(same_bits(a.params, b.params));
  REQUIRE(a.opt_state.size() == b.opt_state.size());
  for (std::size_t i = 0; i < a.opt_state.size(); ++i) CHECK(same_bits(a.opt_state[i], b.opt_state[i]));
  CHECK(a.meta == b.meta);
}

// small_checkpoint() saved in a scratch folder, with its file's path and bytes to damage.
struct SavedCheckpoint {
  std::vector<char> save_and_read() {
    save_checkpoint(dir.str(), small_checkpoint());
    return read_all(path);
  }
  TempDir dir;
  const std::string path = dir.file("checkpoint.bin");
  const std::vector<char> bytes = save_and_read();
};

}  // namespace

TEST_CASE("checkpoint round trip keeps every field bit for bit", "[core]") {
  TempDir dir;
  Checkpoint c;
  c.fingerprint = std::numeric_limits<std::uint64_t>::max() - 5;
  c.step = std::numeric_limits<std::int64_t>::max();
  c.epoch = -1;
  c.samples = 1LL << 40;
  c.params.resize(100000);
  for (std::size_t i = 0; i < c.params.size(); ++i) c.params[i] = std::sin(static_cast<float>(i)) * 1e3f;
  c.params[7] = std::numeric_limits<float>::quiet_NaN();
  c.params[8] = -std::numeric_limits<float>::infinity();
  c.params[9] = -0.0f;
  c.opt_state = {std::vector<float>(100000, 0.25f), {}, {1.0f, 2.0f}};
  c.meta = std::string("{\"model\":\"mlp:784-256-256-10\",\"note\":\"caf\xc3\xa9\"}") +
           std::string(1, '\0') + "after nul";
  save_checkpoint(dir.file("nested/deeper"), c);
  CHECK(checkpoint_exists(dir.file("nested/deeper")));
  check_equal(load_checkpoint(dir.file("nested/deeper")), c);
  CHECK_FALSE(fs::exists(dir.file("nested/deeper/checkpoint.bin.tmp")));

  Checkpoint empty;
  save_checkpoint(dir.str(), empty);
  check_equal(load_checkpoint(dir.str()), empty);
}

TEST_CASE("a later checkpoint replaces the earlier one", "[core]") {
  TempDir dir;
  Checkpoint a = small_checkpoint();
  save_checkpoint(dir.str(), a);
  Checkpoint b = a;
  b.step = a.step + 100;
  b.params.push_back(9.0f);
  save_checkpoint(dir.str(), b);
  check_equal(load_checkpoint(dir.str()), b);
}

TEST_CASE("a missing checkpoint is a clear error", "[core]") {
  TempDir dir;
  CHECK_FALSE(checkpoint_exists(dir.str()));
  CHECK_THROWS_MATCHES(load_checkpoint(dir.str()), CheckpointError,
                       WhatContains("no checkpoint at " + dir.file("checkpoint.bin")) &&
                           WhatContains("No such file"));
}

TEST_CASE_METHOD(SavedCheckpoint, "every truncation of a checkpoint is refused", "[core]") {
  REQUIRE(bytes.size() > 64);
  for (std::size_t keep = 0; keep < bytes.size(); ++keep) {
    INFO("kept " << keep << " of " << bytes.size() << " bytes");
    write_all(path, bytes.data(), keep);
    CHECK_THROWS_MATCHES(load_checkpoint(dir.str()), CheckpointError,
                         WhatContains("bad checkpoint " + path) && WhatContains("truncated"));
  }
}

TEST_CASE_METHOD(SavedCheckpoint, "a flipped bit anywhere in a checkpoint is refused", "[core]") {
  for (std::size_t pos = 0; pos < bytes.size(); ++pos) {
    for (int bit = 0; bit < 8; ++bit) {
      INFO("byte " << pos << " bit " << bit);
      auto bad = bytes;
      bad[pos] = static_cast<char>(bad[pos] ^ (1 << bit));
      write_all(path, bad.data(), bad.size());
      // The message names the problem found: header damage, sizes not matching the file, or
      // the checksum over the content.
      CHECK_THROWS_MATCHES(load_checkpoint(dir.str()), CheckpointError,
                           WhatContains("bad checkpoint " + path) &&
                               (WhatContains("magic") || WhatContains("version") ||
                                WhatContains("flags") || WhatContains("truncated") ||
                                WhatContains("trailing") || WhatContains("checksum mismatch")));
    }
  }
  // Flips in the payload itself are caught by the checksum specifically.
  auto bad = bytes;
  bad[bytes.size() - 8] ^= 1;  // inside meta
  write_all(path, bad.data(), bad.size());
  CHECK_THROWS_MATCHES(load_checkpoint(dir.str()), CheckpointError,
                       WhatContains("checksum mismatch"));
}

TEST_CASE_METHOD(SavedCheckpoint, "trailing bytes and absurd sizes are refused", "[core]") {
  auto longer = bytes;
  longer.push_back('\0');
  write_all(path, longer.data(), longer.size());
  CHECK_THROWS_MATCHES(load_checkpoint(dir.str()), CheckpointError, WhatContains("trailing bytes"));

  // The parameter count sits after magic, version, flags and four 8-byte header fields.
  constexpr std::size_t kParamCountAt = 8 + 4 + 4 + 4 * 8;
  for (std::uint64_t absurd : {std::uint64_t{1} << 62, std::numeric_limits<std::uint64_t>::max()}) {
    auto huge = bytes;
    std::memcpy(&huge[kParamCountAt], &absurd, sizeof absurd);
    write_all(path, huge.data(), huge.size());
    CHECK_THROWS_MATCHES(load_checkpoint(dir.str()), CheckpointError,
                         WhatContains("parameter count"));
  }
}

TEST_CASE("a leftover .tmp does not hide the last good checkpoint", "[core]") {
  TempDir dir;
  Checkpoint good = small_checkpoint();
  save_checkpoint(dir.str(), good);
  // As if a later save died half way through writing its temporary file.
  std::string junk = "GTCKPT01 half written";
  write_all(dir.file("checkpoint.bin.tmp"), junk.data(), junk.size());
  check_equal(load_checkpoint(dir.str()), good);
  // And the next save simply replaces it.
  Checkpoint next = good;
  next.step += 1;
  save_checkpoint(dir.str(), next);
  check_equal(load_checkpoint(dir.str()), next);
  CHECK_FALSE(fs::exists(dir.file("checkpoint.bin.tmp")));
}

TEST_CASE("saving where a folder cannot be made is a CheckpointError", "[core]") {
  TempDir dir;
  fs::create_directories(dir.path);
  write_all(dir.file("a-file"), "x", 1);
  CHECK_THROWS_AS(save_checkpoint(dir.file("a-file"), small_checkpoint()), CheckpointError);
  CHECK_THROWS_WITH(save_checkpoint(dir.file("a-file/sub"), small_checkpoint()),
                    Catch::Contains("a-file"));
}

TEST_CASE("encode/decode_checkpoint round trip: the file's bytes, every field bit for bit",
          "[core][catchup]") {
  Checkpoint c = small_checkpoint();
  c.params.resize(5000);
  for (std::size_t i = 0; i < c.params.size(); ++i) c.params[i] = std::cos(float(i)) * 7.0f;
  c.opt_state = {std::vector<float>(5000, -0.5f), std::vector<float>(5000, 1e-9f)};
  const std::vector<std::uint8_t> bytes = encode_checkpoint(c);
  CHECK(bytes.size() == encoded_checkpoint_bytes(5000, 2, 10000, c.meta.size()));
  check_equal(decode_checkpoint(bytes.data(), bytes.size()), c);

  // The same bytes as the file: one format, one set of checks.
  TempDir dir;
  save_checkpoint(dir.str(), c);
  const auto file = read_all(dir.file("checkpoint.bin"));
  REQUIRE(file.size() == bytes.size());
  CHECK(std::memcmp(file.data(), bytes.data(), bytes.size()) == 0);

  const Checkpoint empty;
  const auto e = encode_checkpoint(empty);
  check_equal(decode_checkpoint(e.data(), e.size()), empty);
}

TEST_CASE("decode_checkpoint refuses truncation, bit flips, trailing bytes and absurd sizes",
          "[core][catchup]") {
  const std::vector<std::uint8_t> good = encode_checkpoint(small_checkpoint());
  auto decode = [](const std::vector<std::uint8_t>& b) {
    return decode_checkpoint(b.data(), b.size(), "state from x");
  };
  for (std::size_t n = 0; n < good.size(); ++n) {
    INFO("truncated to " << n);
    const std::vector<std::uint8_t> cut(good.begin(), good.begin() + long(n));
    CHECK_THROWS_MATCHES(decode(cut), CheckpointError, WhatContains("bad checkpoint state from x"));
  }
  for (std::size_t i = 0; i < good.size(); ++i) {
    INFO("bit flip at byte " << i);
    auto b = good;
    b[i] ^= 0x10;
    CHECK_THROWS_MATCHES(decode(b), CheckpointError, WhatContains(""));
  }
  auto longer = good;
  longer.push_back(0);
  CHECK_THROWS_MATCHES(decode(longer), CheckpointError, WhatContains("trailing bytes"));
  // A parameter count of 2^61 is refused from the sizes alone, before any allocation.
  auto huge = good;
  const std::uint64_t n = 1ull << 61;
  std::memcpy(huge.data() + 8 + 4 + 4 + 8 * 4, &n, 8);
  CHECK_THROWS_MATCHES(decode(huge), CheckpointError, WhatContains("parameter count"));
}
