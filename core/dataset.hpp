// Datasets for training: IDX folders (Fashion-MNIST, MNIST, EMNIST; plain or gzip), NumPy .npy
// sets, and a small generated set for fast tests. Inputs are float32, row-major [n, features]
// (pixels in [0,1]); labels are int32 in [0, classes).
#pragma once

#include <cstdint>
#include <functional>
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
  // One row's dimensions as stored (an IDX file's after N, a .npy array's after N: {28, 28},
  // {28, 28, 1}, {784}); empty where not known (the generated set). A CNN's input is checked
  // against it.
  std::vector<std::uint64_t> row_shape;
  std::size_t size() const { return y.size(); }
};

// The default location of Debian's dataset-fashion-mnist package.
inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Reads an IDX file, plain or gzip-compressed (detected by the magic bytes, not the name). Checks
// the magic number, the dimensions against the file size, and refuses trailing or missing bytes.
std::vector<std::uint8_t> read_idx(const std::string& path, std::vector<std::uint32_t>* dims);

// Loads {train, test} from a Fashion-MNIST dir (train-images-idx3-ubyte.gz, ...): 28x28 images,
// labels 0..9, 10 classes. Throws DataError.
struct TrainTest {
  Dataset train;
  Dataset test;
};
TrainTest load_fashion_mnist(const std::string& dir);

// A small, learnable generated classification set (Gaussian class clusters), deterministic in seed.
TrainTest make_synthetic(std::size_t n_train, std::size_t n_test, int features, int classes,
                         std::uint64_t seed);

// Loads a data set spec (what --data takes):
//   synthetic   make_synthetic(6000, 1000, 784, 10, 1)
//   DIR         an IDX folder: train-images-idx3-ubyte, train-labels-idx1-ubyte,
//               t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (each plain or .gz), or else the
//               one EMNIST set emnist-SPLIT-{train,test}-{images-idx3,labels-idx1}-ubyte[.gz]
//               in it; "" is kDefaultFashionMnistDir
//   npy:X_TRAIN,Y_TRAIN,X_TEST,Y_TEST   four .npy files
//   npy:DIR     DIR/x_train.npy, DIR/y_train.npy, DIR/x_test.npy, DIR/y_test.npy
// Inputs: IDX unsigned bytes of any shape N x ..., .npy float32 ('<f4', as stored) or uint8
// ('|u1') of shape N x D or N x H x W x C, ...; bytes are scaled to [0,1]; features are the
// product of the dimensions after N. Labels: integers in 0..65535 (.npy: any integer dtype,
// shape N or N x 1); classes = the largest training label + 1, and no test label may exceed it.
// Bad, truncated or inconsistent files throw DataError naming the file and the problem.
TrainTest load_dataset(const std::string& spec);

// One peer's data: its shard of the training set (and nothing else of it) and the test set.
// pick(labels, classes) chooses the shard's rows of the training set, in order, from its labels;
// the inputs are then streamed from the file and only those rows are kept, so
// the whole training set is never in memory (60,000 images are 188 MB as floats). The rows and
// their order are exactly those of subset(load_dataset(spec).train, pick(...)).
struct ShardData {
  Dataset shard;
  Dataset test;
  std::size_t train_size = 0;  // rows of the whole training set
};
using PickRows =
    std::function<std::vector<std::size_t>(const std::vector<std::int32_t>& labels, int classes)>;
ShardData load_shard(const std::string& spec, const PickRows& pick);

// The training labels and the shape of a data set, without its images (what planning needs).
struct DatasetLabels {
  std::vector<std::int32_t> train;
  std::size_t test_rows = 0;
  int features = 0;
  int classes = 0;
};
DatasetLabels load_labels(const std::string& spec);

// Copies the rows with the given indices into a new dataset.
Dataset subset(const Dataset& d, const std::vector<std::size_t>& idx);

}  // namespace gossiptrain::core
