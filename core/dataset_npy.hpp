// NumPy .npy reading for the data sets (core/dataset.cpp): the header is parsed here (magic
// \x93NUMPY, versions 1.0 to 3.0, the dict of 'descr', 'fortran_order' and 'shape') and checked
// against the file size before anything is allocated. Every problem throws a DataError naming
// the file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gossiptrain::core::npy {

struct Header {
  std::string descr;  // as written, e.g. "<f4" or "|u1"
  char kind = 0;      // 'f' float, 'u' unsigned integer, 'i' signed integer
  int item_size = 0;  // bytes per element
  std::vector<std::uint64_t> shape;
  std::uint64_t data_offset = 0;  // where the elements start
  std::uint64_t count = 0;        // elements: the product of shape
};

// Reads and checks the header: C order only, little-endian (or single-byte) elements, and exactly
// the data bytes the shape describes (no more, no fewer) after it.
Header read_header(const std::string& path);

// Features per row of an input array (float32 or uint8, N x D or N x H x W x C, ...): the product
// of the dimensions after the first. Refuses other dtypes and arrays of fewer than 2 dimensions.
std::uint64_t row_features(const std::string& path, const Header& h);

// A label array: integers (any width), shape N or N x 1, every value in 0..max_classes-1.
std::vector<std::int32_t> read_labels(const std::string& path, int max_classes);

// Streams an input array row by row as floats (uint8 scaled to [0,1]): on_shape(rows, features,
// one row's dimensions) first, then on_row(index, values) for each row; only one row is held at
// a time.
using ShapeFn = std::function<void(std::uint64_t rows, std::uint64_t features,
                                   const std::vector<std::uint64_t>& row_shape)>;
void stream_rows(const std::string& path, const ShapeFn& on_shape,
                 const std::function<void(std::size_t, const float*)>& on_row);

}  // namespace gossiptrain::core::npy
