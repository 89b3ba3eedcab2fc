// Datasets for training: the Fashion-MNIST IDX reader (gzip) and a small generated set for fast
// tests. Images are float32 in [0,1], row-major [n, features]; labels are int32 in [0, classes).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace gossiptrain::core {

// Bad, truncated or missing data files. The message names the file and what is wrong, and for a
// missing data set says how to install it.
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Dataset {
  std::vector<float> x;         // [n * features]
  std::vector<std::int32_t> y;  // [n]
  int features = 0;
  int classes = 0;
  std::size_t size() const { return y.size(); }
};

// The default location of Debian's dataset-fashion-mnist package.
inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Reads an IDX file, plain or gzip-compressed (detected by the magic bytes, not the name). Checks
// the magic number, the dimensions against the file size, and refuses trailing or missing bytes.
std::vector<std::uint8_t> read_idx(const std::string& path, std::vector<std::uint32_t>* dims);

// Loads {train, test} from dir (train-images-idx3-ubyte.gz, ...). Throws DataError.
struct TrainTest {
  Dataset train;
  Dataset test;
};
TrainTest load_fashion_mnist(const std::string& dir);

// A small, learnable generated classification set (Gaussian class clusters), deterministic in seed.
TrainTest make_synthetic(std::size_t n_train, std::size_t n_test, int features, int classes,
                         std::uint64_t seed);

// Loads "synthetic" (-> make_synthetic(6000, 1000, 784, 10, 1)) or a Fashion-MNIST directory.
TrainTest load_dataset(const std::string& spec);

// Copies the rows with the given indices into a new dataset.
Dataset subset(const Dataset& d, const std::vector<std::size_t>& idx);

}  // namespace gossiptrain::core
