// Tests for --data npy:...: .npy sets written here (float32 and uint8 inputs, integer labels of
// any width), every malformed file refused with a DataError naming it, the model's input size
// checked against the data, and gossip-peer's exit code 2 on a truncated file.
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/metrics.hpp"
#include "core/trainer.hpp"
#include "kernels/backend.hpp"
#include "tests/system_process.hpp"
#include "tests/test_util.hpp"

using namespace gossiptrain::core;
namespace fs = std::filesystem;
using gt_test::WhatContains;

namespace {

// A .npy file as numpy writes it: magic, version, header length, the dict padded with spaces to
// a multiple of 64 bytes and ended by a newline, then the raw little-endian elements.
std::string npy_header(const std::string& descr, const std::vector<std::uint64_t>& shape,
                       bool fortran = false, int major = 1) {
  std::string dims;
  for (auto d : shape) dims += std::to_string(d) + (shape.size() == 1 ? "," : ", ");
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                     ", 'shape': (" + dims + "), }";
  const std::size_t pre = major == 1 ? 10 : 12;
  dict += std::string((64 - (pre + dict.size() + 1) % 64) % 64, ' ') + "\n";
  std::string out = "\x93NUMPY";
  out += char(major);
  out += char(0);
  for (std::size_t b = 0; b < pre - 8; ++b) out += char((dict.size() >> (8 * b)) & 0xff);
  return out + dict;
}

template <class T>
std::string npy(const std::string& descr, const std::vector<std::uint64_t>& shape,
                const std::vector<T>& data, int major = 1) {
  std::string out = npy_header(descr, shape, false, major);
  out.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(T));
  return out;
}

void put(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
  REQUIRE(f.good());
}

std::vector<std::uint8_t> bytes_pattern(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>((i * 53 + 7) & 0xff);
  return v;
}

std::vector<float> float_pattern(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = float(i) * 0.25f - 3.0f;
  return v;
}

// A good set in dir: 12 training rows of 4x4x1 uint8 (int64 labels 0..2, shape N), 5 test rows
// of 16 float32 (int32 labels, shape N x 1).
struct NpySet {
  gt_test::TempDir dir{"gt-core-data-npy"};
  std::string spec() const { return "npy:" + dir.str(); }
  NpySet() {
    std::vector<std::int64_t> ytr(12);
    for (std::size_t i = 0; i < ytr.size(); ++i) ytr[i] = std::int64_t(i % 3);
    put(dir / "x_train.npy", npy("|u1", {12, 4, 4, 1}, bytes_pattern(12 * 16)));
    put(dir / "y_train.npy", npy("<i8", {12}, ytr));
    put(dir / "x_test.npy", npy("<f4", {5, 16}, float_pattern(5 * 16), 2));
    put(dir / "y_test.npy", npy("<i4", {5, 1}, std::vector<std::int32_t>{2, 1, 0, 2, 1}));
  }
};

}  // namespace

TEST_CASE("npy sets load uint8 and float32 inputs with integer labels", "[core][data]") {
  NpySet set;
  const std::string four = "npy:" + set.dir / "x_train.npy" + "," + set.dir / "y_train.npy" + "," +
                           set.dir / "x_test.npy" + "," + set.dir / "y_test.npy";
  for (const std::string& spec : {set.spec(), four}) {
    INFO(spec);
    const TrainTest tt = load_dataset(spec);
    REQUIRE(tt.train.size() == 12);
    REQUIRE(tt.test.size() == 5);
    CHECK(tt.train.features == 16);
    CHECK(tt.test.features == 16);
    CHECK(tt.train.classes == 3);
    CHECK(tt.test.classes == 3);
    const auto px = bytes_pattern(12 * 16);
    for (std::size_t i = 0; i < px.size(); ++i) REQUIRE(tt.train.x[i] == float(px[i]) / 255.0f);
    CHECK(tt.test.x == float_pattern(5 * 16));
    for (std::size_t i = 0; i < 12; ++i) CHECK(tt.train.y[i] == int(i % 3));
    CHECK(tt.test.y == std::vector<std::int32_t>{2, 1, 0, 2, 1});
  }
  const DatasetLabels l = load_labels(set.spec());
  CHECK(l.train.size() == 12);
  CHECK(l.test_rows == 5);
  CHECK(l.features == 16);
  CHECK(l.classes == 3);
}

TEST_CASE("load_shard of an npy set keeps exactly the chosen rows", "[core][data]") {
  NpySet set;
  const TrainTest all = load_dataset(set.spec());
  const std::vector<std::size_t> idx{11, 0, 5, 5};
  const ShardData d = load_shard(set.spec(), [&](const std::vector<std::int32_t>& y, int c) {
    CHECK(y == all.train.y);
    CHECK(c == 3);
    return idx;
  });
  const Dataset expect = subset(all.train, idx);
  CHECK(d.train_size == 12);
  CHECK(d.shard.y == expect.y);
  CHECK(d.shard.x == expect.x);
  CHECK(d.shard.x.capacity() == idx.size() * 16);
  CHECK(d.test.x == all.test.x);
}

TEST_CASE("npy files that are bad, truncated or inconsistent are refused", "[core][data]") {
  struct Case {
    std::string file, name, bytes, expect;
  };
  const std::string good_x = npy("|u1", {12, 4, 4, 1}, bytes_pattern(12 * 16));
  std::string bad_magic = good_x;
  bad_magic[1] = 'X';
  std::string v4 = good_x;
  v4[6] = 4;
  std::string bad_dict = good_x;
  bad_dict.replace(bad_dict.find("'shape'"), 7, "'shope'");
  std::vector<float> inf = float_pattern(12 * 16);
  inf[37] = std::numeric_limits<float>::infinity();
  const std::vector<Case> cases = {
      {"x_train", "truncated", good_x.substr(0, good_x.size() - 1), "truncated"},
      {"x_train", "trailing", good_x + "!", "trailing bytes"},
      {"x_train", "cut in the header", good_x.substr(0, 40), "truncated"},
      {"x_train", "empty", "", "truncated"},
      {"x_train", "bad magic", bad_magic, "not a .npy file"},
      {"x_train", "version 4.0", v4, "unsupported .npy version 4.0"},
      {"x_train", "unknown key", bad_dict, "malformed .npy header"},
      {"x_train", "float64", npy("<f8", {12, 16}, std::vector<double>(12 * 16)), "'<f8'"},
      {"x_train", "int32 inputs", npy("<i4", {12, 16}, std::vector<int>(12 * 16)), "'<i4'"},
      {"x_train", "big-endian", npy(">f4", {12, 16}, float_pattern(12 * 16)), "big-endian"},
      {"x_train", "fortran order", npy_header("|u1", {12, 16}, true) + std::string(12 * 16, '\0'),
       "fortran_order"},
      {"x_train", "one dimension", npy("|u1", {12}, bytes_pattern(12)), "at least 2 dimensions"},
      {"x_train", "huge", npy_header("<f4", {1u << 30, 1u << 30}), "refusing to read"},
      {"x_train", "infinite value", npy("<f4", {12, 16}, inf), "non-finite value at row 2"},
      {"x_train", "x/y length mismatch", npy("|u1", {11, 16}, bytes_pattern(11 * 16)),
       "12 labels but"},
      {"y_train", "float labels", npy("<f4", {12}, std::vector<float>(12)),
       "labels must be integers"},
      {"y_train", "negative label",
       npy("<i2", {12}, std::vector<std::int16_t>{0, 1, 2, 0, 1, -1, 0, 1, 2, 0, 1, 2}),
       "label -1 at index 5"},
      {"y_train", "2-d labels", npy("|u1", {6, 2}, bytes_pattern(12)), "shape (N,) or (N, 1)"},
      {"x_test", "other row size", npy("<f4", {5, 15}, float_pattern(5 * 15)),
       "15 features per row, but the training set"},
      {"y_test", "unseen class", npy("|u1", {5}, std::vector<std::uint8_t>{0, 1, 3, 0, 1}),
       "label 3 at index 2 is not among the training set's classes 0..2"},
  };
  for (const auto& c : cases) {
    INFO(c.file << ": " << c.name);
    NpySet set;
    const std::string path = set.dir / (c.file + ".npy");
    put(path, c.bytes);
    const std::string named = c.name == "x/y length mismatch" ? set.dir / "y_train.npy" : path;
    CHECK_THROWS_MATCHES(load_dataset(set.spec()), DataError,
                         WhatContains(named) && WhatContains(c.expect));
    CHECK_THROWS_MATCHES(load_shard(set.spec(), [](const std::vector<std::int32_t>&,
                                                   int) { return std::vector<std::size_t>{0}; }),
                         DataError, WhatContains(c.expect));
    if (c.name == "infinite value") continue;  // planning reads the headers, not the rows
    CHECK_THROWS_MATCHES(load_labels(set.spec()), DataError,
                         WhatContains(named) && WhatContains(c.expect));
  }
}

TEST_CASE("npy specs that name no set are refused", "[core][data]") {
  NpySet set;
  CHECK_THROWS_MATCHES(load_dataset("npy:a.npy,b.npy"), DataError,
                       WhatContains("npy:X_TRAIN,Y_TRAIN,X_TEST,Y_TEST"));
  CHECK_THROWS_MATCHES(load_dataset("npy:" + set.dir / "nowhere"), DataError,
                       WhatContains("not a folder"));
  fs::remove(set.dir / "y_test.npy");
  CHECK_THROWS_MATCHES(load_dataset(set.spec()), DataError,
                       WhatContains(set.dir / "y_test.npy") && WhatContains("cannot open"));
}

// Issue 26, item 5: --model mlp:784-256 (the class count forgotten) trained 256 outputs silently.
TEST_CASE("a model with more outputs than the data has classes is warned of", "[core][data]") {
  NpySet set;  // 16 features, 3 classes
  const TrainTest tt = load_dataset(set.spec());
  auto be = gossiptrain::kernels::make_backend("cpu");
  Metrics metrics("", "test");
  auto warned = [&](const std::string& model) {
    std::ostringstream log;
    auto previous = spdlog::default_logger();
    spdlog::set_default_logger(std::make_shared<spdlog::logger>(
        "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
    TrainConfig cfg;
    cfg.model = model;
    Trainer t(*be, cfg, tt.train, tt.test, metrics, nullptr);
    spdlog::set_default_logger(previous);
    return log.str();
  };
  const std::string forgot = warned("mlp:16-8");
  INFO(forgot);
  CHECK_THAT(forgot, Catch::Contains("has 8 outputs but the data has only 3 classes"));
  CHECK_THAT(forgot, Catch::Contains("use mlp:16-8-3"));
  CHECK(warned("mlp:16-8-3").find("outputs") == std::string::npos);
}

TEST_CASE("the model's input size is checked against the data's features", "[core][data]") {
  NpySet set;  // 4x4x1 inputs (16 features), 3 classes
  const TrainTest tt = load_dataset(set.spec());
  auto be = gossiptrain::kernels::make_backend("cpu");
  Metrics metrics("", "test");
  TrainConfig cfg;
  auto refused = [&](const std::string& model, const std::string& what) {
    cfg.model = model;
    INFO(model);
    CHECK_THROWS_MATCHES(Trainer(*be, cfg, tt.train, tt.test, metrics, nullptr),
                         std::invalid_argument, WhatContains(model) && WhatContains(what));
  };
  refused("mlp:784-32-10", "takes 784 inputs but the data has 16 features");
  refused("cnn:4x4x3-c4k3-p2-3", "takes 48 inputs but the data has 16 features");
  refused("mlp:16-8-2", "has 2 outputs but the data has 3 classes");
  // The same 16 features as other images: the stored 4x4 shape refuses them.
  refused("cnn:2x8x1-c4k3-p2-3", "takes 2x8x1 images but the data's images are 4x4x1");
  refused("cnn:8x2x1-c4k1-3", "takes 8x2x1 images but the data's images are 4x4x1");
  for (const char* ok : {"mlp:16-8-3", "cnn:4x4x1-c4k3-p2-3"}) {
    cfg.model = ok;
    CHECK_NOTHROW(Trainer(*be, cfg, tt.train, tt.test, metrics, nullptr));
  }
  // A subset (a peer's shard) keeps the shape; flat rows (N x D) are checked by features only.
  CHECK(subset(tt.train, {0, 1}).row_shape == tt.train.row_shape);
  Dataset flat = tt.train;
  flat.row_shape = {16};
  cfg.model = "cnn:2x8x1-c4k3-p2-3";
  CHECK_NOTHROW(Trainer(*be, cfg, flat, tt.test, metrics, nullptr));
}

TEST_CASE("gossip-peer exits with code 2 on a truncated npy file", "[core][data]") {
  if (!fs::exists(gt_test::peer_bin())) {
    WARN(gt_test::peer_bin() << " is not built; skipping");
    return;
  }
  NpySet set;
  const std::string x = set.dir / "x_train.npy";
  fs::resize_file(x, fs::file_size(x) - 7);
  std::string out;
  const int rc = gt_test::run_app(
      "gossip-peer", {"--data", set.spec(), "--epochs", "1", "--identity", set.dir / "id.key"},
      set.dir / "peer.log", &out, std::chrono::seconds(60));
  INFO(out);
  CHECK(rc == 2);
  CHECK(out.find(x) != std::string::npos);
  CHECK(out.find("truncated") != std::string::npos);
}
