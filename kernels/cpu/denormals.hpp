// Denormal floats treated as zero while the CPU backend's element-wise loops run (x86 FTZ and DAZ,
// per thread). An SGD momentum or Adam moment whose gradient is exactly zero (a weight from a pixel
// that is 0 in every image) decays geometrically into the denormal range and, rounded to nearest,
// stays at the smallest denormal for ever; every later step then pays the CPU's ~100-cycle microcode
// assist on each such value. mlp:784-256-256-10 on Fashion-MNIST spent 63% of its step in the
// optimizer loop from epoch 2 on (19.8k against 31.7k samples/s in epoch 1). Only values below
// 1.2e-38 change; elsewhere the bits are the same. Other architectures: no change.
#pragma once

#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#define GT_HAVE_MXCSR 1
#endif

namespace gossiptrain::kernels {

// Sets FTZ and DAZ on the calling thread for its lifetime, then restores what was there.
class FlushDenormals {
 public:
#if defined(GT_HAVE_MXCSR)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtz | kDaz); }
  ~FlushDenormals() { _mm_setcsr(saved_); }
#else
  FlushDenormals() = default;
#endif
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
#if defined(GT_HAVE_MXCSR)
  static constexpr unsigned kFtz = 0x8000;  // results that would be denormal are 0
  static constexpr unsigned kDaz = 0x0040;  // denormal inputs read as 0
  unsigned saved_;
#endif
};

}  // namespace gossiptrain::kernels
