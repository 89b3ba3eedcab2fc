// Wire encodings on the device: fp32 <-> fp16 / bf16 (round to nearest even) and int8 with one
// fp32 scale per kInt8BlockSize floats. The bit conversions are the ones the CPU backend uses
// (kernels/float_convert.hpp), so both backends produce identical bytes.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.cuh"
#include "kernels/float_convert.hpp"

namespace gossiptrain::kernels::cuda {
namespace {

static_assert(kInt8BlockSize == 256, "int8 kernels use one 256-thread block per scale block");

// x[n] -> out[n] (fp16 or bf16 bits)
template <bool kBf16>
__global__ void encode_half_kernel(const float* x, std::size_t n, std::uint16_t* out) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    out[i] = kBf16 ? f32_to_bf16_bits(x[i]) : f32_to_f16_bits(x[i]);
}

// in[n] (fp16 or bf16 bits) -> x[n]
template <bool kBf16>
__global__ void decode_half_kernel(const std::uint16_t* in, std::size_t n, float* x) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    x[i] = kBf16 ? bf16_bits_to_f32(in[i]) : f16_bits_to_f32(in[i]);
}

// x[n] -> scales[CEIL_DIV(n,256)], q[n]; one block of 256 threads per scale block
__global__ void encode_int8_kernel(const float* x, std::size_t n, float* scales, std::int8_t* q) {
  __shared__ float warp_max_abs[kInt8BlockSize / 32];
  const std::size_t i = blockIdx.x * std::size_t(kInt8BlockSize) + threadIdx.x;
  const float v = i < n ? x[i] : 0.0f;
  const float m = warp_max(fabsf(v));  // fmaxf ignores NaN, like the CPU's a > mx ? a : mx
  if ((threadIdx.x & 31) == 0) warp_max_abs[threadIdx.x >> 5] = m;
  __syncthreads();
  float mx = 0.0f;
  for (int k = 0; k < kInt8BlockSize / 32; ++k) mx = fmaxf(mx, warp_max_abs[k]);
  const float scale = int8_scale(mx);
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
  if (i < n) q[i] = int8_quantize(v, scale);
}

// scales[CEIL_DIV(n,256)], q[n] -> x[n]
__global__ void decode_int8_kernel(const float* scales, const std::int8_t* q, std::size_t n,
                                   float* x) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    x[i] = float(q[i]) * scales[i / kInt8BlockSize];
}

}  // namespace

void encode(Wire w, const float* x, std::size_t n, void* out, cudaStream_t stream) {
  if (!n) return;
  switch (w) {
    case Wire::Fp32:
      CUDA_CHECK(cudaMemcpyAsync(out, x, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
      return;
    case Wire::Fp16:
      encode_half_kernel<false><<<grid_for(n), kBlockSize, 0, stream>>>(
          x, n, static_cast<std::uint16_t*>(out));
      CUDA_CHECK(cudaGetLastError());
      return;
    case Wire::Bf16:
      encode_half_kernel<true><<<grid_for(n), kBlockSize, 0, stream>>>(
          x, n, static_cast<std::uint16_t*>(out));
      CUDA_CHECK(cudaGetLastError());
      return;
    case Wire::Int8: {
      const std::size_t blocks = CEIL_DIV(n, kInt8BlockSize);
      auto* scales = static_cast<float*>(out);  // alloc() memory: aligned for the scales
      auto* q = reinterpret_cast<std::int8_t*>(scales + blocks);
      encode_int8_kernel<<<unsigned(blocks), kInt8BlockSize, 0, stream>>>(x, n, scales, q);
      CUDA_CHECK(cudaGetLastError());
      return;
    }
  }
  throw BackendError("cuda encode: unknown wire encoding");
}

void decode(Wire w, const void* in, std::size_t n, float* x, cudaStream_t stream) {
  if (!n) return;
  switch (w) {
    case Wire::Fp32:
      CUDA_CHECK(cudaMemcpyAsync(x, in, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
      return;
    case Wire::Fp16:
      decode_half_kernel<false><<<grid_for(n), kBlockSize, 0, stream>>>(
          static_cast<const std::uint16_t*>(in), n, x);
      CUDA_CHECK(cudaGetLastError());
      return;
    case Wire::Bf16:
      decode_half_kernel<true><<<grid_for(n), kBlockSize, 0, stream>>>(
          static_cast<const std::uint16_t*>(in), n, x);
      CUDA_CHECK(cudaGetLastError());
      return;
    case Wire::Int8: {
      const std::size_t blocks = CEIL_DIV(n, kInt8BlockSize);
      const auto* scales = static_cast<const float*>(in);
      const auto* q = reinterpret_cast<const std::int8_t*>(scales + blocks);
      decode_int8_kernel<<<grid_for(n), kBlockSize, 0, stream>>>(scales, q, n, x);
      CUDA_CHECK(cudaGetLastError());
      return;
    }
  }
  throw BackendError("cuda decode: unknown wire encoding");
}

}  // namespace gossiptrain::kernels::cuda
