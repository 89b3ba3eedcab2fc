// The model out as safetensors (8-byte little-endian header length, a JSON header of dtype, shape
// and data_offsets per tensor plus __metadata__, then the raw little-endian data), with tensors
// named and shaped as PyTorch's nn.Linear / nn.Conv2d hold them.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/model.hpp"

namespace gossiptrain::core {

struct SafetensorsError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct NamedTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> data;  // row-major in shape's order
};

// The model's parameters (the flat arena, on the host) as PyTorch tensors, in layer order:
//   dense layer i (counted among dense layers): fc{i}.weight [out, in], fc{i}.bias [out]
//   conv layer i (counted among conv layers):   conv{i}.weight [out, in_c, k, k], conv{i}.bias
// The arena keeps a conv's W[out, (ky, kx, c)] (its im2col row) and a dense layer after a conv
// sees the NHWC flattening (h, w, c); PyTorch wants OIHW and the NCHW flattening (c, h, w), so
// both are permuted here. An input of H x W x C rows is then fed to PyTorch as [N, C, H, W].
std::vector<NamedTensor> model_tensors(const std::vector<Layer>& layers, const float* params,
                                       std::size_t n_params);

// Writes path atomically (temp file + rename), F32 tensors in the given order. Throws
// SafetensorsError naming the file.
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata);

// Reads a file written by write_safetensors (F32 only), checking the header's sizes and offsets.
std::vector<NamedTensor> read_safetensors(const std::string& path,
                                          std::map<std::string, std::string>* metadata = nullptr);

}  // namespace gossiptrain::core
