// fp32 <-> fp16 / bf16 bit conversions (round to nearest even) and the int8/int4/int2 per-block
// quantizer,
// shared by the CPU and CUDA backends so that both produce bit-identical wire encodings.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GT_HD __host__ __device__ __forceinline__
#else
#define GT_HD inline
#endif

namespace gossiptrain::kernels {

GT_HD std::uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

GT_HD float f32_from_bits(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Integer-only, so the host and the device agree bit for bit whatever the FP environment.
GT_HD std::uint16_t f32_to_f16_bits(float f) {
  const std::uint32_t x = f32_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  std::uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf stays inf; nan stays a (quiet) nan with its top payload bits
    if (ax == 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  if (ax >= 0x38800000u) {  // |f| >= 2^-14: fp16 normal, or overflow to inf through the carry
    if (ax >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520
    const std::uint32_t mant_odd = (ax >> 13) & 1u;
    ax += 0xc8000fffu + mant_odd;  // rebias the exponent (-112 << 23) and add the rounding bias
    return static_cast<std::uint16_t>(sign | (ax >> 13));
  }
  // fp16 subnormal or zero: the result counts units of 2^-24.
  const std::uint32_t e = ax >> 23;
  if (e < 102) return static_cast<std::uint16_t>(sign);  // below 2^-25: rounds to zero
  const std::uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - e;  // 14..24
  std::uint32_t q = m >> shift;
  const std::uint32_t rem = m & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // a carry into 0x400 is the smallest normal
  return static_cast<std::uint16_t>(sign | q);
}

GT_HD float f16_bits_to_f32(std::uint16_t h) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  std::uint32_t e = (h >> 10) & 0x1fu;
  std::uint32_t m = h & 0x3ffu;
  if (e == 31) return f32_from_bits(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return f32_from_bits(sign);
    e = 1;  // normalise the subnormal
    while (!(m & 0x400u)) {
      m <<= 1;
      --e;
    }
    m &= 0x3ffu;
    return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
  }
  return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

GT_HD std::uint16_t f32_to_bf16_bits(float f) {
  const std::uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  const std::uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);  // overflow rounds to inf
  return static_cast<std::uint16_t>(rounded >> 16);
}

GT_HD float bf16_bits_to_f32(std::uint16_t b) {
  return f32_from_bits(static_cast<std::uint32_t>(b) << 16);
}

// Blockwise wires (int8, int4, int2): one scale per kInt8BlockSize floats, scale = max|x| / qmax
// (qmax 127, 7 or 1; 0 for an all-zero block), values round(x / scale) in [-qmax, qmax].
GT_HD float block_scale(float max_abs, int qmax) { return max_abs / static_cast<float>(qmax); }
GT_HD float int8_scale(float max_abs) { return block_scale(max_abs, 127); }

// Rounds half to even like rintf; non-finite inputs (which validation rejects before any
// exchange) map to 0 or the clamp instead of undefined behaviour.
GT_HD int block_quantize(float x, float scale, int qmax) {
  if (!(scale > 0.0f)) return 0;
  float q = x / scale;
  if (!(q == q)) return 0;
  const float lim = static_cast<float>(qmax);
  q = q > lim ? lim : (q < -lim ? -lim : q);
#if defined(__CUDA_ARCH__)
  return __float2int_rn(q);
#else
  // 1.5 * 2^23 trick: exact round-half-even for |q| <= 127 without depending on libm's rint mode.
  const float r = (q + 12582912.0f) - 12582912.0f;
  return static_cast<int>(r);
#endif
}

GT_HD std::int8_t int8_quantize(float x, float scale) {
  return static_cast<std::int8_t>(block_quantize(x, scale, 127));
}

// int4 and int2 pack their values as two's complement codes of kBits bits, the value of index i
// in bits [kBits * (i % per_byte), ...) of byte i / per_byte (little end first). A code the
// encoder never makes (int4 -8, int2 -2) decodes like any other: finite, as the scale is checked.
template <int kBits>
GT_HD std::uint8_t lowbit_code(int q) {
  return static_cast<std::uint8_t>(static_cast<unsigned>(q) & ((1u << kBits) - 1u));
}
template <int kBits>
GT_HD int lowbit_value(unsigned code) {
  const int half = 1 << (kBits - 1);
  return static_cast<int>(code ^ static_cast<unsigned>(half)) - half;
}

}  // namespace gossiptrain::kernels
