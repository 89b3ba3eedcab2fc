// Helpers shared by the kernels tests: seeded random data, naive references and buffer copies.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <random>
#include <vector>

#include "kernels/backend.hpp"

namespace gossiptrain::kernels::test {

inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline std::vector<std::int32_t> random_labels(std::size_t n, int classes, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, classes - 1);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Reference row-major C = alpha * op(A) op(B) + beta * C, accumulated in double.
inline void gemm_ref(bool ta, bool tb, int M, int N, int K, float alpha,
                     const std::vector<float>& A, const std::vector<float>& B, float beta,
                     std::vector<float>& C) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int k = 0; k < K; ++k) {
        const double a = ta ? A[std::size_t(k) * M + i] : A[std::size_t(i) * K + k];
        const double b = tb ? B[std::size_t(j) * K + k] : B[std::size_t(k) * N + j];
        acc += a * b;
      }
      auto& c = C[std::size_t(i) * N + j];
      c = static_cast<float>(alpha * acc + (beta == 0.0f ? 0.0 : double(beta) * c));
    }
}

// One gemm case, C = alpha * op(A) op(B) + beta * C with op(A) M x K and op(B) K x N: A is
// transposed when bit 0 of t is set, B when bit 1 is; A, B and C are seeded random (10 + t,
// 20 + t, 30 + t).
struct GemmCase {
  GemmCase(int m, int n, int k, int t)
      : M(m),
        N(n),
        K(k),
        ta(t & 1),
        tb(t & 2),
        A(random_floats(std::size_t(m) * k, 10 + t)),
        B(random_floats(std::size_t(k) * n, 20 + t)),
        C(random_floats(std::size_t(m) * n, 30 + t)) {}
  int M, N, K;
  bool ta, tb;
  std::vector<float> A, B, C;
};

inline std::ostream& operator<<(std::ostream& os, const GemmCase& g) {
  return os << "M=" << g.M << " N=" << g.N << " K=" << g.K << " ta=" << g.ta << " tb=" << g.tb;
}

// Largest |a - b| / max(|b|, floor) over the two vectors.
inline double max_rel_err(const std::vector<float>& a, const std::vector<float>& b,
                          double floor = 1.0) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d =
        std::fabs(double(a[i]) - double(b[i])) / std::fmax(std::fabs(double(b[i])), floor);
    if (!(d <= worst)) worst = d;  // a NaN difference wins
  }
  return worst;
}

// A CPU reference and the GPU under test, for the [cuda] parity tests.
struct Pair {
  std::unique_ptr<Backend> cpu = make_backend("cpu");
  std::unique_ptr<Backend> gpu = make_backend("cuda");
};

// First line of a [cuda] test: without a visible GPU it skips with a warning. CTest reports a
// test that prints "SKIPPED: no CUDA device" as skipped (SKIP_REGULAR_EXPRESSION, CMakeLists.txt).
#define GT_REQUIRE_GPU()                                    \
  do {                                                      \
    if (!::gossiptrain::kernels::cuda_available()) {        \
      WARN("SKIPPED: no CUDA device for this [cuda] test"); \
      return;                                               \
    }                                                       \
  } while (0)

// Host vector <-> backend buffer.
template <typename T>
DeviceBuffer<T> to_device(Backend& be, const std::vector<T>& v) {
  DeviceBuffer<T> buf(be, v.size());
  be.upload(buf.data(), v.data(), v.size() * sizeof(T));
  return buf;
}

template <typename T>
std::vector<T> to_host(Backend& be, const DeviceBuffer<T>& buf) {
  std::vector<T> v(buf.size());
  be.download(v.data(), buf.data(), buf.bytes());
  return v;
}

}  // namespace gossiptrain::kernels::test
