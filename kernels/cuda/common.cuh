// Shared helpers of the CUDA kernels: error checks that throw BackendError naming the call site,
// CEIL_DIV, launch geometry and warp/block reductions.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "kernels/backend.hpp"

namespace gossiptrain::kernels::cuda {

// The function and line name the place, not __FILE__: that would put the source tree's path into
// the installed CUDA module (scripts/test/install-check.sh looks for it).
[[noreturn]] inline void throw_cuda_error(const char* what, const char* call, const char* func,
                                          int line) {
  throw BackendError(std::string(func) + ", line " + std::to_string(line) + ": " + call + ": " +
                     what);
}

inline void cuda_check(cudaError_t e, const char* call, const char* func, int line) {
  if (e != cudaSuccess) throw_cuda_error(cudaGetErrorString(e), call, func, line);
}

inline void cublas_check(cublasStatus_t s, const char* call, const char* func, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) throw_cuda_error(cublasGetStatusString(s), call, func, line);
}

}  // namespace gossiptrain::kernels::cuda

#define CUDA_CHECK(call) ::gossiptrain::kernels::cuda::cuda_check((call), #call, __func__, __LINE__)
#define CUBLAS_CHECK(call) \
  ::gossiptrain::kernels::cuda::cublas_check((call), #call, __func__, __LINE__)
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

namespace gossiptrain::kernels::cuda {

constexpr int kBlockSize = 256;              // threads per block of the elementwise kernels
constexpr unsigned kMaxGridBlocks = 1u << 16;  // grid-stride loops cover the rest
constexpr int kMaxReduceBlocks = 1024;       // partial sums of the two-stage reductions

inline unsigned grid_for(std::size_t n, int block = kBlockSize) {
  const std::size_t g = CEIL_DIV(n, static_cast<std::size_t>(block));
  return static_cast<unsigned>(g < kMaxGridBlocks ? (g ? g : 1) : kMaxGridBlocks);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace gossiptrain::kernels::cuda
