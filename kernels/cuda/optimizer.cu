// Optimizer updates: one kernel over the whole parameter arena per step (SGD momentum, Adam).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.cuh"

namespace gossiptrain::kernels::cuda {
namespace {

// w, g, v [n]: v = momentum * v + (g + wd * w); w -= lr * v
__global__ void sgd_momentum_kernel(float* w, const float* g, float* v, std::size_t n, float lr,
                                    float momentum, float wd) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float vi = momentum * v[i] + (g[i] + wd * w[i]);
    v[i] = vi;
    w[i] -= lr * vi;
  }
}

// w, g, m, v [n]; step = lr / (1 - b1^t), inv_sqrt_bc2 = 1 / sqrt(1 - b2^t), decay = lr * wd
// (decoupled, AdamW); same formula as the CPU backend.
__global__ void adam_kernel(float* w, const float* g, float* m, float* v, std::size_t n, float b1,
                            float b2, float eps, float step, float inv_sqrt_bc2, float decay) {
  const float c1 = 1.0f - b1, c2 = 1.0f - b2;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float gi = g[i];
    const float mi = b1 * m[i] + c1 * gi;
    const float vi = b2 * v[i] + c2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) * inv_sqrt_bc2 + eps;
    const float wi = w[i];
    w[i] = wi - decay * wi - step * mi / denom;
  }
}

}  // namespace

void sgd_momentum(float* w, const float* g, float* v, std::size_t n, float lr, float momentum,
                  float weight_decay, cudaStream_t stream) {
  if (!n) return;
  sgd_momentum_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(w, g, v, n, lr, momentum,
                                                               weight_decay);
  CUDA_CHECK(cudaGetLastError());
}

void adam(float* w, const float* g, float* m, float* v, std::size_t n, float b1, float b2,
          float eps, float step, float inv_sqrt_bc2, float decay, cudaStream_t stream) {
  if (!n) return;
  adam_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(w, g, m, v, n, b1, b2, eps, step,
                                                       inv_sqrt_bc2, decay);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace gossiptrain::kernels::cuda
