// Reductions over the arena for validating a received vector: any non-finite value, and
// sum (a - b)^2 in double (two stages, so the result does not depend on atomic ordering).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.cuh"

namespace gossiptrain::kernels::cuda {
namespace {

// flag = 1 if any x[n] is inf or nan (a plain store: every writer writes the same value)
__global__ void non_finite_kernel(const float* x, std::size_t n, int* flag) {
  bool bad = false;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    bad |= (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
  if (__any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) *flag = 1;
}

// partials[gridDim.x] = per-block sums of (a[n] - b[n])^2 in double
__global__ void sq_diff_partial_kernel(const float* a, const float* b, std::size_t n,
                                       double* partials) {
  __shared__ double warp_sums[kBlockSize / 32];
  double acc = 0.0;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const double d = double(a[i]) - double(b[i]);
    acc += d * d;
  }
  acc = warp_sum(acc);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    double v = threadIdx.x < blockDim.x / 32 ? warp_sums[threadIdx.x] : 0.0;
    v = warp_sum(v);
    if (threadIdx.x == 0) partials[blockIdx.x] = v;
  }
}

// out = sum of partials[count], one block
__global__ void sum_partials_kernel(const double* partials, int count, double* out) {
  __shared__ double warp_sums[kBlockSize / 32];
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = warp_sum(acc);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    double v = threadIdx.x < blockDim.x / 32 ? warp_sums[threadIdx.x] : 0.0;
    v = warp_sum(v);
    if (threadIdx.x == 0) *out = v;
  }
}

}  // namespace

void any_non_finite(const float* x, std::size_t n, int* flag, cudaStream_t stream) {
  if (!n) return;
  non_finite_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(x, n, flag);
  CUDA_CHECK(cudaGetLastError());
}

void sq_diff_norm(const float* a, const float* b, std::size_t n, double* partials, double* out,
                  cudaStream_t stream) {
  const unsigned blocks = grid_for(n) < unsigned(kMaxReduceBlocks) ? grid_for(n) : kMaxReduceBlocks;
  sq_diff_partial_kernel<<<blocks, kBlockSize, 0, stream>>>(a, b, n, partials);
  CUDA_CHECK(cudaGetLastError());
  sum_partials_kernel<<<1, kBlockSize, 0, stream>>>(partials, int(blocks), out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace gossiptrain::kernels::cuda
