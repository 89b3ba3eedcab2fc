// Tests for the IDX reader (plain, gzip, every malformed case), Fashion-MNIST loading, the
// generated set and subset().
#include <catch2/catch.hpp>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "core/metrics.hpp"
#include "core/trainer.hpp"
#include "kernels/backend.hpp"
#include "tests/test_util.hpp"

using namespace gossiptrain::core;
namespace fs = std::filesystem;
using gt_test::WhatContains;

namespace {

struct TempDir : gt_test::TempDir {
  TempDir() : gt_test::TempDir("gt-core-dataset") {}
};

std::vector<std::uint8_t> idx_bytes(const std::vector<std::uint32_t>& dims,
                                    const std::vector<std::uint8_t>& data,
                                    std::uint8_t type = 0x08) {
  std::vector<std::uint8_t> out = {0, 0, type, static_cast<std::uint8_t>(dims.size())};
  for (auto d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(d >> shift));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_plain(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

void write_gzip(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  gzFile gz = gzopen(path.c_str(), "wb");
  REQUIRE(gz != nullptr);
  if (!bytes.empty()) {
    REQUIRE(gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())) ==
            static_cast<int>(bytes.size()));
  }
  REQUIRE(gzclose(gz) == Z_OK);
}

std::vector<std::uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::vector<std::uint8_t> pattern(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>((i * 37 + 11) & 0xff);
  return v;
}

// Writes a Fashion-MNIST-shaped folder with n_train/n_test images whose pixels and labels follow
// pattern() so the test can check scaling and order.
void write_fake_fashion(const TempDir& dir, std::uint32_t n_train, std::uint32_t n_test) {
  auto emit = [&](const std::string& prefix, std::uint32_t n) {
    write_gzip(dir.file(prefix + "-images-idx3-ubyte.gz"), idx_bytes({n, 28, 28}, pattern(n * 784)));
    std::vector<std::uint8_t> labels(n);
    for (std::uint32_t i = 0; i < n; ++i) labels[i] = static_cast<std::uint8_t>(i % 10);
    write_gzip(dir.file(prefix + "-labels-idx1-ubyte.gz"), idx_bytes({n}, labels));
  };
  emit("train", n_train);
  emit("t10k", n_test);
}

// Fashion-MNIST's shape: 28x28 pixels in 10 classes, one row of pixels per sample.
void check_fashion_shape(const Dataset& d) {
  CHECK(d.features == 784);
  CHECK(d.classes == 10);
  REQUIRE(d.x.size() == d.size() * 784);
}

// Softmax regression with plain SGD: a stand-in for the MLP that tells whether a set is learnable.
double softmax_accuracy_after(const Dataset& train, const Dataset& test, int epochs) {
  const int f = train.features, c = train.classes;
  std::vector<float> w(static_cast<std::size_t>(f) * c, 0.0f), b(c, 0.0f);
  std::vector<float> logits(c);
  auto forward = [&](const float* x) {
    for (int k = 0; k < c; ++k) {
      float s = b[k];
      for (int j = 0; j < f; ++j) s += w[static_cast<std::size_t>(k) * f + j] * x[j];
      logits[k] = s;
    }
  };
  const float lr = 0.01f;
  for (int e = 0; e < epochs; ++e) {
    for (std::size_t i = 0; i < train.size(); ++i) {
      const float* x = &train.x[i * f];
      forward(x);
      float top = *std::max_element(logits.begin(), logits.end()), sum = 0;
      for (float& l : logits) sum += (l = std::exp(l - top));
      for (int k = 0; k < c; ++k) {
        float g = logits[k] / sum - (k == train.y[i] ? 1.0f : 0.0f);
        b[k] -= lr * g;
        for (int j = 0; j < f; ++j) w[static_cast<std::size_t>(k) * f + j] -= lr * g * x[j];
      }
    }
  }
  std::size_t right = 0;
  for (std::size_t i = 0; i < test.size(); ++i) {
    forward(&test.x[i * f]);
    auto pred = std::max_element(logits.begin(), logits.end()) - logits.begin();
    right += pred == test.y[i];
  }
  return static_cast<double>(right) / static_cast<double>(test.size());
}

}  // namespace

TEST_CASE("read_idx reads plain and gzip files, detecting gzip by content", "[core]") {
  TempDir dir;
  auto data = pattern(3 * 4 * 5);
  auto bytes = idx_bytes({3, 4, 5}, data);
  // Names that lie about the compression: detection must look at the magic bytes.
  write_plain(dir.file("plain.gz"), bytes);
  write_gzip(dir.file("packed.idx"), bytes);
  for (const auto& name : {"plain.gz", "packed.idx"}) {
    std::vector<std::uint32_t> dims;
    auto got = read_idx(dir.file(name), &dims);
    CHECK(dims == std::vector<std::uint32_t>{3, 4, 5});
    CHECK(got == data);
  }
  CHECK(read_idx(dir.file("packed.idx"), nullptr) == data);
}

TEST_CASE("read_idx refuses malformed files with a message naming the file", "[core]") {
  TempDir dir;
  auto data = pattern(24);
  struct Case {
    std::string name;
    std::vector<std::uint8_t> bytes;
    std::string expect;
  };
  auto good = idx_bytes({2, 3, 4}, data);
  auto truncated = good;
  truncated.pop_back();
  auto trailing = good;
  trailing.push_back(0);
  auto bad_magic = good;
  bad_magic[0] = 0x12;
  std::vector<Case> cases = {
      {"empty", {}, "truncated"},
      {"short_header", {0, 0, 8}, "truncated"},
      {"short_dims", {0, 0, 8, 2, 0, 0, 0, 5}, "truncated"},
      {"bad_magic", bad_magic, "not an IDX file"},
      {"float_type", idx_bytes({2, 3, 4}, data, 0x0D), "unsupported IDX element type 0x0d"},
      {"zero_dims", {0, 0, 8, 0}, "dimension count 0"},
      {"missing_byte", truncated, "truncated"},
      {"trailing_byte", trailing, "trailing bytes"},
      // 2^16 * 2^16 * 2^16 bytes: must be refused before anything is allocated.
      {"huge", idx_bytes({65536, 65536, 65536}, {}), "refusing to allocate"},
  };
  for (const auto& c : cases) {
    for (bool gz : {false, true}) {
      INFO(c.name << (gz ? " (gzip)" : " (plain)"));
      std::string path = dir.file(c.name + (gz ? ".gz" : ""));
      gz ? write_gzip(path, c.bytes) : write_plain(path, c.bytes);
      CHECK_THROWS_MATCHES(read_idx(path, nullptr), DataError,
                           WhatContains(path) && WhatContains(c.expect));
    }
  }
}

TEST_CASE("read_idx refuses damaged gzip streams and missing files", "[core]") {
  TempDir dir;
  auto bytes = idx_bytes({100, 28, 28}, pattern(100 * 784));
  write_gzip(dir.file("good.gz"), bytes);
  auto packed = read_all(dir.file("good.gz"));
  REQUIRE(packed.size() > 40);

  SECTION("cut off") {
    for (std::size_t keep : {packed.size() - 1, packed.size() - 8, packed.size() / 2, std::size_t{12}}) {
      INFO("keeping " << keep << " of " << packed.size() << " bytes");
      write_plain(dir.file("cut.gz"), {packed.begin(), packed.begin() + static_cast<long>(keep)});
      CHECK_THROWS_MATCHES(read_idx(dir.file("cut.gz"), nullptr), DataError,
                           WhatContains(dir.file("cut.gz")));
    }
  }
  SECTION("checksum trailer damaged") {
    packed[packed.size() - 6] ^= 0x40;  // inside the CRC-32 of the gzip trailer
    write_plain(dir.file("crc.gz"), packed);
    CHECK_THROWS_MATCHES(read_idx(dir.file("crc.gz"), nullptr), DataError, WhatContains("gzip"));
  }
  SECTION("missing") {
    CHECK_THROWS_MATCHES(read_idx(dir.file("nope.gz"), nullptr), DataError,
                         WhatContains(dir.file("nope.gz")) && WhatContains("cannot open"));
  }
}

TEST_CASE("load_fashion_mnist explains how to install a missing data set", "[core]") {
  TempDir dir;
  for (const std::string& where : {dir.file("does-not-exist"), dir.path.string()}) {
    CHECK_THROWS_MATCHES(load_fashion_mnist(where), DataError,
                         WhatContains("Fashion-MNIST not found at " + where) &&
                             WhatContains("sudo apt-get install dataset-fashion-mnist") &&
                             WhatContains("scripts/setup.sh") && WhatContains("--data DIR"));
  }
}

TEST_CASE("load_fashion_mnist scales pixels and keeps labels in order", "[core]") {
  TempDir dir;
  write_fake_fashion(dir, 30, 12);
  TrainTest tt = load_fashion_mnist(dir.path.string());
  REQUIRE(tt.train.size() == 30);
  REQUIRE(tt.test.size() == 12);
  for (const Dataset* d : {&tt.train, &tt.test}) {
    check_fashion_shape(*d);
    auto px = pattern(d->size() * 784);
    for (std::size_t i = 0; i < px.size(); ++i) REQUIRE(d->x[i] == static_cast<float>(px[i]) / 255.0f);
    for (std::size_t i = 0; i < d->size(); ++i) REQUIRE(d->y[i] == static_cast<int>(i % 10));
  }
}

TEST_CASE("load_fashion_mnist refuses inconsistent files", "[core]") {
  TempDir dir;
  write_fake_fashion(dir, 20, 10);
  auto train_labels = dir.file("train-labels-idx1-ubyte.gz");
  auto train_images = dir.file("train-images-idx3-ubyte.gz");
  SECTION("count mismatch") {
    write_gzip(train_labels, idx_bytes({19}, std::vector<std::uint8_t>(19, 1)));
    CHECK_THROWS_MATCHES(load_fashion_mnist(dir.path.string()), DataError,
                         WhatContains("19 labels") && WhatContains("20 images"));
  }
  SECTION("label out of range") {
    std::vector<std::uint8_t> labels(20, 3);
    labels[7] = 10;
    write_gzip(train_labels, idx_bytes({20}, labels));
    CHECK_THROWS_MATCHES(load_fashion_mnist(dir.path.string()), DataError,
                         WhatContains(train_labels) && WhatContains("label 10 at index 7"));
  }
  SECTION("wrong image shape") {
    write_gzip(train_images, idx_bytes({20, 27, 28}, pattern(20 * 27 * 28)));
    CHECK_THROWS_MATCHES(load_fashion_mnist(dir.path.string()), DataError,
                         WhatContains(train_images) && WhatContains("20x27x28"));
  }
  SECTION("one file missing") {
    fs::remove(dir.file("t10k-labels-idx1-ubyte.gz"));
    CHECK_THROWS_MATCHES(load_fashion_mnist(dir.path.string()), DataError,
                         WhatContains("t10k-labels-idx1-ubyte") && WhatContains("apt-get install"));
  }
}

TEST_CASE("the installed Fashion-MNIST loads completely", "[core]") {
  if (!fs::exists(fs::path(kDefaultFashionMnistDir) / "train-images-idx3-ubyte.gz")) {
    WARN("Fashion-MNIST is not installed at " << kDefaultFashionMnistDir << "; skipping");
    return;
  }
  TrainTest tt = load_dataset(kDefaultFashionMnistDir);
  CHECK(tt.train.size() == 60000);
  CHECK(tt.test.size() == 10000);
  for (const Dataset* d : {&tt.train, &tt.test}) {
    check_fashion_shape(*d);
    auto [lo, hi] = std::minmax_element(d->x.begin(), d->x.end());
    CHECK(*lo == 0.0f);
    CHECK(*hi == 1.0f);
    // The set is balanced: every class has exactly a tenth of the samples.
    std::vector<std::size_t> count(10, 0);
    for (auto y : d->y) ++count.at(static_cast<std::size_t>(y));
    for (auto n : count) CHECK(n == d->size() / 10);
  }
}

// Issue 26, item 9: `--data synthetic` with the default flags stayed at 10-12% accuracy.
TEST_CASE("the synthetic set is learnt by the default model and flags in two epochs", "[core]") {
  const TrainTest tt = load_dataset("synthetic");
  auto be = gossiptrain::kernels::make_backend("cpu");
  Metrics metrics("", "test");
  TrainConfig cfg;  // gossip-peer's defaults: model, lr, momentum, batch, schedule
  cfg.epochs = 2;
  Trainer t(*be, cfg, tt.train, tt.test, metrics, nullptr);
  std::atomic<bool> stop{false};
  const TrainResult r = t.run(stop);
  REQUIRE(r.final_test_acc);
  INFO("test accuracy after 2 epochs: " << *r.final_test_acc);
  CHECK(*r.final_test_acc > 0.8);
}

TEST_CASE("make_synthetic is deterministic, balanced and learnable", "[core]") {
  TrainTest a = make_synthetic(3000, 1000, 784, 10, 7);
  TrainTest b = make_synthetic(3000, 1000, 784, 10, 7);
  TrainTest other = make_synthetic(3000, 1000, 784, 10, 8);
  CHECK(a.train.x == b.train.x);
  CHECK(a.train.y == b.train.y);
  CHECK(a.test.x == b.test.x);
  CHECK(a.train.x != other.train.x);
  REQUIRE(a.train.size() == 3000);
  REQUIRE(a.test.size() == 1000);
  REQUIRE(a.train.x.size() == 3000u * 784u);
  CHECK(a.train.features == 784);
  CHECK(a.train.classes == 10);
  std::vector<std::size_t> count(10, 0);
  for (auto y : a.train.y) ++count.at(static_cast<std::size_t>(y));
  for (auto n : count) CHECK(n == 300);
  for (float v : a.train.x) REQUIRE(std::isfinite(v));

  // An untrained model is at chance; two epochs of softmax regression are far above it.
  double before = softmax_accuracy_after(a.train, a.test, 0);
  double after = softmax_accuracy_after(a.train, a.test, 2);
  CHECK(before < 0.2);
  CHECK(after > 0.9);
}

TEST_CASE("load_dataset understands synthetic", "[core]") {
  TrainTest tt = load_dataset("synthetic");
  TrainTest ref = make_synthetic(6000, 1000, 784, 10, 1);
  CHECK(tt.train.size() == ref.train.size());
  CHECK(tt.test.size() == ref.test.size());
  CHECK(tt.train.x == ref.train.x);
  CHECK(tt.test.y == ref.test.y);
}

TEST_CASE("subset copies the chosen rows", "[core]") {
  TrainTest tt = make_synthetic(50, 10, 6, 3, 3);
  std::vector<std::size_t> idx = {4, 0, 49, 4};
  Dataset s = subset(tt.train, idx);
  REQUIRE(s.size() == idx.size());
  CHECK(s.features == 6);
  CHECK(s.classes == 3);
  for (std::size_t r = 0; r < idx.size(); ++r) {
    CHECK(s.y[r] == tt.train.y[idx[r]]);
    for (int j = 0; j < 6; ++j) CHECK(s.x[r * 6 + j] == tt.train.x[idx[r] * 6 + j]);
  }
  CHECK_THROWS_AS(subset(tt.train, {50}), std::out_of_range);
}

TEST_CASE("load_shard keeps exactly the chosen rows, in their order, and nothing more", "[core]") {
  TempDir dir;
  write_fake_fashion(dir, 40, 12);
  const TrainTest all = load_fashion_mnist(dir.path.string());
  // Out of order, with a repeat: the rows come back as subset() would give them.
  const std::vector<std::size_t> idx{17, 3, 39, 3, 0, 25};
  std::vector<std::int32_t> seen_labels;
  const ShardData d = load_shard(dir.path.string(), [&](const std::vector<std::int32_t>& y, int c) {
    seen_labels = y;
    CHECK(c == 10);
    return idx;
  });
  CHECK(seen_labels == all.train.y);
  const Dataset expect = subset(all.train, idx);
  CHECK(d.train_size == 40);
  CHECK(d.shard.features == 784);
  CHECK(d.shard.classes == 10);
  CHECK(d.shard.y == expect.y);
  CHECK(d.shard.x == expect.x);
  // Nothing more than the shard: no capacity held beyond its rows.
  CHECK(d.shard.x.capacity() == idx.size() * 784);
  CHECK(d.shard.y.capacity() == idx.size());
  CHECK(d.test.x == all.test.x);
  CHECK(d.test.y == all.test.y);
  // An index past the end is refused, not read out of bounds.
  CHECK_THROWS_AS(load_shard(dir.path.string(), [](const std::vector<std::int32_t>&,
                                                   int) { return std::vector<std::size_t>{40}; }),
                  std::out_of_range);
  // The labels alone, for planning.
  const DatasetLabels l = load_labels(dir.path.string());
  CHECK(l.train == all.train.y);
  CHECK(l.test_rows == 12);
  CHECK(l.features == 784);
}

TEST_CASE("load_shard refuses a truncated image file like load_fashion_mnist", "[core]") {
  TempDir dir;
  write_fake_fashion(dir, 20, 10);
  auto bytes = idx_bytes({20, 28, 28}, pattern(20 * 28 * 28));
  bytes.resize(bytes.size() - 100);
  write_gzip(dir.file("train-images-idx3-ubyte.gz"), bytes);
  auto pick = [](const std::vector<std::int32_t>&, int) { return std::vector<std::size_t>{1, 2}; };
  CHECK_THROWS_MATCHES(load_shard(dir.path.string(), pick), DataError,
                       WhatContains("train-images-idx3-ubyte.gz") && WhatContains("truncated"));
  CHECK_THROWS_MATCHES(load_fashion_mnist(dir.path.string()), DataError, WhatContains("truncated"));
}

TEST_CASE("load_shard of the installed Fashion-MNIST equals subset of the whole set", "[core]") {
  if (!fs::exists(fs::path(kDefaultFashionMnistDir) / "train-images-idx3-ubyte.gz")) {
    WARN("Fashion-MNIST is not installed at " << kDefaultFashionMnistDir << "; skipping");
    return;
  }
  const TrainTest all = load_dataset(kDefaultFashionMnistDir);
  std::vector<std::size_t> idx;
  for (std::size_t i = 59999; i < 60000; i -= 997) idx.push_back(i);  // descending, spread out
  const ShardData d = load_shard(kDefaultFashionMnistDir,
                                 [&](const std::vector<std::int32_t>&, int) { return idx; });
  const Dataset expect = subset(all.train, idx);
  CHECK(d.train_size == 60000);
  CHECK(d.shard.y == expect.y);
  CHECK(d.shard.x == expect.x);
  CHECK(d.test.size() == 10000);
}

namespace {

// An IDX folder under the given names: 15 training and 6 test images of side x side pixels, as
// pattern(), labels first_label + i % classes.
void write_idx_set(const TempDir& dir, const std::string& train, const std::string& test,
                   std::uint32_t side, std::uint8_t classes, std::uint8_t first_label = 0) {
  auto emit = [&](const std::string& prefix, std::uint32_t n) {
    write_plain(dir.file(prefix + "images-idx3-ubyte"),
                idx_bytes({n, side, side}, pattern(n * side * side)));
    std::vector<std::uint8_t> labels(n);
    for (std::uint32_t i = 0; i < n; ++i) labels[i] = std::uint8_t(first_label + i % classes);
    write_gzip(dir.file(prefix + "labels-idx1-ubyte.gz"), idx_bytes({n}, labels));
  };
  emit(train, 15);
  emit(test, 6);
}

}  // namespace

TEST_CASE("an IDX folder of any image shape loads, classes from its labels", "[core][data]") {
  SECTION("MNIST-like, 28x28 in 10 classes") {
    TempDir dir;
    write_fake_fashion(dir, 30, 12);
    TrainTest tt = load_dataset(dir.str());
    check_fashion_shape(tt.train);
    check_fashion_shape(tt.test);
  }
  SECTION("8x8 in 3 classes, plain images and gzip labels") {
    TempDir dir;
    write_idx_set(dir, "train-", "t10k-", 8, 3);
    TrainTest tt = load_dataset(dir.str());
    REQUIRE(tt.train.size() == 15);
    REQUIRE(tt.test.size() == 6);
    for (const Dataset* d : {&tt.train, &tt.test}) {
      CHECK(d->features == 64);
      CHECK(d->row_shape == std::vector<std::uint64_t>{8, 8});  // what a CNN is checked against
      CHECK(d->classes == 3);
      auto px = pattern(d->size() * 64);
      for (std::size_t i = 0; i < px.size(); ++i) REQUIRE(d->x[i] == float(px[i]) / 255.0f);
      for (std::size_t i = 0; i < d->size(); ++i) REQUIRE(d->y[i] == int(i % 3));
    }
    const std::vector<std::size_t> idx{14, 2, 2};
    const ShardData s = load_shard(dir.str(), [&](const std::vector<std::int32_t>&, int c) {
      CHECK(c == 3);
      return idx;
    });
    CHECK(s.shard.x == subset(tt.train, idx).x);
    CHECK(s.shard.x.capacity() == idx.size() * 64);
    const DatasetLabels l = load_labels(dir.str());
    CHECK(l.features == 64);
    CHECK(l.classes == 3);
    CHECK(l.test_rows == 6);
  }
  SECTION("EMNIST names, letters labelled from 1 (class 0 unused)") {
    TempDir dir;
    write_idx_set(dir, "emnist-letters-train-", "emnist-letters-test-", 28, 26, 1);
    TrainTest tt = load_dataset(dir.str());
    CHECK(tt.train.features == 784);
    CHECK(tt.train.classes == 16);  // 15 training images labelled 1..15
    CHECK(tt.train.y[0] == 1);
    write_idx_set(dir, "emnist-digits-train-", "emnist-digits-test-", 28, 10);
    CHECK_THROWS_MATCHES(load_dataset(dir.str()), DataError,
                         WhatContains("several EMNIST sets (digits, letters)"));
  }
}

TEST_CASE("an IDX folder with inconsistent files is refused", "[core][data]") {
  TempDir dir;
  write_idx_set(dir, "train-", "t10k-", 8, 3);
  SECTION("a test label beyond the training classes") {
    write_gzip(dir.file("t10k-labels-idx1-ubyte.gz"), idx_bytes({6}, {0, 1, 2, 0, 7, 1}));
    CHECK_THROWS_MATCHES(load_dataset(dir.str()), DataError,
                         WhatContains("t10k-labels-idx1-ubyte.gz") &&
                             WhatContains("label 7 at index 4 is not among") &&
                             WhatContains("classes 0..2"));
  }
  SECTION("one class only") {
    write_gzip(dir.file("train-labels-idx1-ubyte.gz"),
               idx_bytes({15}, std::vector<std::uint8_t>(15, 0)));
    CHECK_THROWS_MATCHES(load_labels(dir.str()), DataError, WhatContains("at least 2"));
  }
  SECTION("test images of another size") {
    write_plain(dir.file("t10k-images-idx3-ubyte"), idx_bytes({6, 7, 7}, pattern(6 * 49)));
    for (auto load : {+[](const std::string& s) { (void)load_dataset(s); },
                      +[](const std::string& s) { (void)load_labels(s); }}) {
      CHECK_THROWS_MATCHES(load(dir.str()), DataError,
                           WhatContains("t10k-images-idx3-ubyte") &&
                               WhatContains("49 features per row, but the training set"));
    }
  }
  SECTION("images without pixels dimensions") {
    write_plain(dir.file("train-images-idx3-ubyte"), idx_bytes({15}, pattern(15)));
    CHECK_THROWS_MATCHES(load_dataset(dir.str()), DataError, WhatContains("found 1 dimension"));
  }
  SECTION("fewer images than labels, seen when planning too") {
    write_plain(dir.file("train-images-idx3-ubyte"), idx_bytes({14, 8, 8}, pattern(14 * 64)));
    CHECK_THROWS_MATCHES(load_labels(dir.str()), DataError,
                         WhatContains("15 labels") && WhatContains("14 images"));
  }
  SECTION("a missing file or folder") {
    fs::remove(dir.file("t10k-images-idx3-ubyte"));
    CHECK_THROWS_MATCHES(load_dataset(dir.str()), DataError,
                         WhatContains("no data set found at " + dir.str()) &&
                             WhatContains("t10k-images-idx3-ubyte") && WhatContains("npy:DIR"));
    CHECK_THROWS_MATCHES(load_dataset(dir.file("nope")), DataError,
                         WhatContains("dataset-fashion-mnist"));
  }
}
