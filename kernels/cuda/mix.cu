// Elementwise arena kernels: fill and the gossip mix x += w * (r - s).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.cuh"

namespace gossiptrain::kernels::cuda {
namespace {

// x[n] = v
__global__ void fill_kernel(float* x, std::size_t n, float v) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    x[i] = v;
}

// x[n] += w * (r[n] - s[n]); s may be x itself (same index only)
__global__ void mix_kernel(float* x, const float* r, const float* s, std::size_t n, float w) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    x[i] += w * (r[i] - s[i]);
}

}  // namespace

void fill(float* x, std::size_t n, float v, cudaStream_t stream) {
  if (!n) return;
  fill_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(x, n, v);
  CUDA_CHECK(cudaGetLastError());
}

void mix(float* x, const float* r, const float* s, std::size_t n, float w, cudaStream_t stream) {
  if (!n) return;
  mix_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(x, r, s, n, w);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace gossiptrain::kernels::cuda
