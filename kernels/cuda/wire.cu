// Wire encodings on the device: fp32 <-> fp16 / bf16 (round to nearest even) and int8, int4 and
// int2 with one fp32 scale per kInt8BlockSize floats. The bit conversions are the ones the CPU backend uses
// (kernels/float_convert.hpp), so both backends produce identical bytes.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launchers.cuh"
#include "kernels/float_convert.hpp"

namespace gossiptrain::kernels::cuda {
namespace {

static_assert(kInt8BlockSize == 256, "blockwise kernels use one 256-thread block per scale block");

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

// x[n] -> scales[CEIL_DIV(n,256)], then CEIL_DIV(n, 8 / kBits) bytes of packed codes; one block
// of 256 threads per scale block, which fills 256 / (8 / kBits) whole bytes.
template <int kBits>
__global__ void encode_lowbit_kernel(const float* x, std::size_t n, float* scales,
                                     std::uint8_t* codes) {
  constexpr int kQmax = (1 << (kBits - 1)) - 1;
  constexpr int kPerByte = 8 / kBits;
  __shared__ float warp_max_abs[kInt8BlockSize / 32];
  __shared__ std::uint8_t code[kInt8BlockSize];
  const std::size_t i = blockIdx.x * std::size_t(kInt8BlockSize) + threadIdx.x;
  const float v = i < n ? x[i] : 0.0f;
  const float m = warp_max(fabsf(v));
  if ((threadIdx.x & 31) == 0) warp_max_abs[threadIdx.x >> 5] = m;
  __syncthreads();
  float mx = 0.0f;
  for (int k = 0; k < kInt8BlockSize / 32; ++k) mx = fmaxf(mx, warp_max_abs[k]);
  const float scale = block_scale(mx, kQmax);
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
  code[threadIdx.x] = i < n ? lowbit_code<kBits>(block_quantize(v, scale, kQmax)) : 0;
  __syncthreads();
  const std::size_t byte = blockIdx.x * std::size_t(kInt8BlockSize / kPerByte) + threadIdx.x;
  if (threadIdx.x < kInt8BlockSize / kPerByte && byte < CEIL_DIV(n, std::size_t(kPerByte))) {
    unsigned b = 0;
    for (int k = 0; k < kPerByte; ++k) b |= unsigned(code[threadIdx.x * kPerByte + k]) << (kBits * k);
    codes[byte] = std::uint8_t(b);
  }
}

// scales[CEIL_DIV(n,256)], packed codes -> x[n]
template <int kBits>
__global__ void decode_lowbit_kernel(const float* scales, const std::uint8_t* codes, std::size_t n,
                                     float* x) {
  constexpr int kPerByte = 8 / kBits;
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const unsigned c = (codes[i / kPerByte] >> (kBits * (i % kPerByte))) & ((1u << kBits) - 1u);
    x[i] = float(lowbit_value<kBits>(c)) * scales[i / kInt8BlockSize];
  }
}

template <int kBits>
void encode_lowbit(const float* x, std::size_t n, void* out, cudaStream_t stream) {
  const std::size_t blocks = CEIL_DIV(n, kInt8BlockSize);
  auto* scales = static_cast<float*>(out);  // alloc() memory: aligned for the scales
  auto* codes = reinterpret_cast<std::uint8_t*>(scales + blocks);
  encode_lowbit_kernel<kBits><<<unsigned(blocks), kInt8BlockSize, 0, stream>>>(x, n, scales, codes);
  CUDA_CHECK(cudaGetLastError());
}

template <int kBits>
void decode_lowbit(const void* in, std::size_t n, float* x, cudaStream_t stream) {
  const std::size_t blocks = CEIL_DIV(n, kInt8BlockSize);
  const auto* scales = static_cast<const float*>(in);
  const auto* codes = reinterpret_cast<const std::uint8_t*>(scales + blocks);
  decode_lowbit_kernel<kBits><<<grid_for(n), kBlockSize, 0, stream>>>(scales, codes, n, x);
  CUDA_CHECK(cudaGetLastError());
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
    case Wire::Int4: return encode_lowbit<4>(x, n, out, stream);
    case Wire::Int2: return encode_lowbit<2>(x, n, out, stream);
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
    case Wire::Int4: return decode_lowbit<4>(in, n, x, stream);
    case Wire::Int2: return decode_lowbit<2>(in, n, x, stream);
  }
  throw BackendError("cuda decode: unknown wire encoding");
}

}  // namespace gossiptrain::kernels::cuda
