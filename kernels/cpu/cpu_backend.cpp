// CPU backend: cblas_sgemm for the matrix products; every other op is one pass of a plain loop.
// Hot loops process fixed blocks of kLanes elements with restrict pointers so that g++ -O2 (whose
// "very cheap" vectorizer refuses loops that would need a scalar epilogue or alias checks)
// vectorizes the block body, and a short scalar tail finishes the remainder.
#include "kernels/cpu/cpu_backend.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>
#include <string>

#include "kernels/cpu/denormals.hpp"
#include "kernels/float_convert.hpp"

namespace gossiptrain::kernels {
namespace {

constexpr std::size_t kLanes = 16;       // elements per vectorized block (1-4 SIMD registers)
constexpr std::size_t kAlignBytes = 64;  // cache line; also enough for any SIMD load

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) {
        auto s = line.substr(pos + 1);
        s.erase(0, s.find_first_not_of(' '));
        return s;
      }
    }
  }
  return "host cpu";
}

void check_dims(int rows, int cols, const char* what) {
  if (rows < 0 || cols < 0)
    throw BackendError(std::string("cpu ") + what + ": negative dimension");
}

// ---- elementwise kernels (restrict: the arrays are distinct or identical, never offset) ----

inline void relu_bias_row(float* __restrict y, const float* __restrict b, std::size_t n) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) {
      const float v = y[i + j] + b[i + j];
      y[i + j] = v > 0.0f ? v : 0.0f;
    }
  for (; i < n; ++i) {
    const float v = y[i] + b[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

inline void bias_row(float* __restrict y, const float* __restrict b, std::size_t n) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) y[i + j] += b[i + j];
  for (; i < n; ++i) y[i] += b[i];
}

// dy *= (y > 0); db += dy
inline void relu_grad_row(float* __restrict dy, const float* __restrict y, float* __restrict db,
                          std::size_t n) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) {
      const float g = y[i + j] > 0.0f ? dy[i + j] : 0.0f;
      dy[i + j] = g;
      db[i + j] += g;
    }
  for (; i < n; ++i) {
    const float g = y[i] > 0.0f ? dy[i] : 0.0f;
    dy[i] = g;
    db[i] += g;
  }
}

inline void accumulate_row(float* __restrict db, const float* __restrict dy, std::size_t n) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) db[i + j] += dy[i + j];
  for (; i < n; ++i) db[i] += dy[i];
}

inline void sgd_loop(float* __restrict w, const float* __restrict g, float* __restrict v,
                     std::size_t n, float lr, float mom, float wd) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) {
      const float vk = mom * v[i + j] + (g[i + j] + wd * w[i + j]);
      v[i + j] = vk;
      w[i + j] -= lr * vk;
    }
  for (; i < n; ++i) {
    const float vk = mom * v[i] + (g[i] + wd * w[i]);
    v[i] = vk;
    w[i] -= lr * vk;
  }
}

inline void qgm_loop(float* __restrict w, const float* __restrict g, float* __restrict m,
                     float* __restrict xp, std::size_t n, float lr, float inv_lr_prev, float beta,
                     float mu, float wd) {
  const float c = 1.0f - mu;
#define GT_QGM_BODY(k)                                               \
  do {                                                               \
    const float wk = w[k];                                           \
    const float mk = mu * m[k] + c * ((xp[k] - wk) * inv_lr_prev);   \
    m[k] = mk;                                                       \
    xp[k] = wk;                                                      \
    w[k] = wk - lr * (g[k] + wd * wk + beta * mk);                   \
  } while (0)
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) GT_QGM_BODY(i + j);
  for (; i < n; ++i) GT_QGM_BODY(i);
#undef GT_QGM_BODY
}

// sqrt vectorizes only without errno (kernels/CMakeLists.txt passes -fno-math-errno here).
inline void adam_loop(float* __restrict w, const float* __restrict g, float* __restrict m,
                      float* __restrict v, std::size_t n, float b1, float b2, float eps,
                      float step, float inv_sqrt_bc2, float decay) {
  const float c1 = 1.0f - b1, c2 = 1.0f - b2;
#define GT_ADAM_BODY(k)                                          \
  do {                                                           \
    const float gk = g[k];                                       \
    const float mk = b1 * m[k] + c1 * gk;                        \
    const float vk = b2 * v[k] + c2 * gk * gk;                   \
    m[k] = mk;                                                   \
    v[k] = vk;                                                   \
    const float denom = std::sqrt(vk) * inv_sqrt_bc2 + eps;      \
    w[k] = w[k] - decay * w[k] - step * mk / denom;              \
  } while (0)
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) GT_ADAM_BODY(i + j);
  for (; i < n; ++i) GT_ADAM_BODY(i);
#undef GT_ADAM_BODY
}

inline void mix_loop(float* __restrict x, const float* __restrict r, const float* __restrict s,
                     std::size_t n, float w) {
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) x[i + j] += w * (r[i + j] - s[i + j]);
  for (; i < n; ++i) x[i] += w * (r[i] - s[i]);
}

inline bool non_finite(float f) { return (f32_bits(f) & 0x7f800000u) == 0x7f800000u; }

}  // namespace

bool set_blas_threads(int n) {
#if defined(OPENBLAS_VERSION)
  if (n < 1) return false;
  openblas_set_num_threads(n);
  return true;
#else
  (void)n;
  return false;
#endif
}

int blas_threads() {
#if defined(OPENBLAS_VERSION)
  return openblas_get_num_threads();
#else
  return 0;
#endif
}

CpuBackend::CpuBackend() : device_(cpu_model_name()) {}

unsigned CpuBackend::helpers() {
  const int t = blas_threads();
  return t > 1 ? unsigned(t - 1) : 0u;
}

void CpuBackend::parallel(std::size_t n,
                          const std::function<void(std::size_t, std::size_t, std::size_t)>& fn,
                          unsigned workers) {
  pool_.run(n, kLanes, workers, fn);
}

void CpuBackend::set_precision(Precision p) {
  if (p != Precision::Fp32)
    throw BackendError("the cpu backend computes in fp32 only; --precision " +
                       std::string(precision_name(p)) + " needs --backend cuda");
}

// ---- memory ----

void* CpuBackend::alloc(std::size_t bytes) {
  const std::size_t rounded = std::max<std::size_t>(kAlignBytes, (bytes + kAlignBytes - 1) /
                                                                      kAlignBytes * kAlignBytes);
  void* p = std::aligned_alloc(kAlignBytes, rounded);
  if (!p) throw BackendError("cpu alloc: out of memory for " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, rounded);
  return p;
}

void CpuBackend::free(void* p) noexcept { std::free(p); }

void CpuBackend::upload(void* dst, const void* src_host, std::size_t bytes) {
  if (bytes) std::memcpy(dst, src_host, bytes);
}
void CpuBackend::download(void* dst_host, const void* src, std::size_t bytes) {
  if (bytes) std::memcpy(dst_host, src, bytes);
}
void CpuBackend::copy(void* dst, const void* src, std::size_t bytes) {
  if (!bytes || dst == src) return;
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (d < s + bytes && s < d + bytes) {  // overlapping: one memmove
    std::memmove(dst, src, bytes);
    return;
  }
  parallel(bytes, [&](std::size_t, std::size_t lo, std::size_t hi) {
    std::memcpy(d + lo, s + lo, hi - lo);
  });
}
void CpuBackend::fill(float* x, std::size_t n, float v) { std::fill(x, x + n, v); }

// ---- dense layers ----

void CpuBackend::gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                      const float* B, float beta, float* C) {
  if (M < 0 || N < 0 || K < 0) throw BackendError("cpu gemm: negative dimension");
  if (M == 0 || N == 0) return;
  if (K == 0) {  // C = beta * C; BLAS would reject lda = 0 through xerbla, which prints
    for (std::size_t i = 0, n = std::size_t(M) * N; i < n; ++i)
      C[i] = beta == 0.0f ? 0.0f : beta * C[i];
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, trans_a ? M : K, B,
              trans_b ? K : N, beta, C, N);
}

void CpuBackend::bias_act_forward(float* y, const float* b, int rows, int cols, Act act) {
  check_dims(rows, cols, "bias_act_forward");
  for (int r = 0; r < rows; ++r) {
    float* row = y + std::size_t(r) * cols;
    if (act == Act::Relu)
      relu_bias_row(row, b, cols);
    else
      bias_row(row, b, cols);
  }
}

void CpuBackend::bias_act_backward(float* dy, const float* y, float* db, int rows, int cols,
                                   Act act) {
  check_dims(rows, cols, "bias_act_backward");
  std::fill(db, db + cols, 0.0f);
  for (int r = 0; r < rows; ++r) {
    const std::size_t off = std::size_t(r) * cols;
    if (act == Act::Relu)
      relu_grad_row(dy + off, y + off, db, cols);
    else
      accumulate_row(db, dy + off, cols);
  }
}

// One pass over each row: max, then exp(x - max) written straight into dlogits while summing,
// then one scaling pass. The label's logit is read before anything is written, so dlogits may
// alias logits.
float CpuBackend::softmax_xent(const float* logits, const std::int32_t* labels, float* dlogits,
                               int rows, int cols) {
  check_dims(rows, cols, "softmax_xent");
  if (rows == 0) return 0.0f;
  if (cols == 0) throw BackendError("cpu softmax_xent: zero classes");
  const float inv_rows = 1.0f / static_cast<float>(rows);
  double loss = 0.0;
  for (int r = 0; r < rows; ++r) {
    const float* x = logits + std::size_t(r) * cols;
    float* d = dlogits + std::size_t(r) * cols;
    const int label = labels[r];
    if (label < 0 || label >= cols)
      throw BackendError("cpu softmax_xent: label " + std::to_string(label) + " out of range [0, " +
                         std::to_string(cols) + ")");
    float mx = x[0];
    for (int c = 1; c < cols; ++c) mx = x[c] > mx ? x[c] : mx;
    const float x_label = x[label];
    float sum = 0.0f;
    for (int c = 0; c < cols; ++c) {
      const float e = std::exp(x[c] - mx);
      d[c] = e;
      sum += e;
    }
    loss += static_cast<double>(std::log(sum) - (x_label - mx));
    const float scale = inv_rows / sum;
    for (int c = 0; c < cols; ++c) d[c] *= scale;
    d[label] -= inv_rows;
  }
  return static_cast<float>(loss / rows);
}

void CpuBackend::softmax_xent_acc(const float* logits, const std::int32_t* labels,
                                  float* dlogits, int rows, int cols, double* loss_acc) {
  // The same float mean as softmax_xent, added in double: exactly what the trainer summed before.
  *loss_acc += static_cast<double>(softmax_xent(logits, labels, dlogits, rows, cols));
}

void CpuBackend::gather_batch(const float* x_src, const std::int32_t* y_src,
                              const std::int32_t* idx, int rows, int cols, float* x_dst,
                              std::int32_t* y_dst) {
  check_dims(rows, cols, "gather_batch");
  for (int i = 0; i < rows; ++i) {
    std::copy_n(x_src + std::size_t(idx[i]) * cols, cols, x_dst + std::size_t(i) * cols);
    y_dst[i] = y_src[idx[i]];
  }
}

void CpuBackend::eval_batch(const float* logits, const std::int32_t* labels, int rows, int cols,
                            std::int64_t* correct, double* loss_sum) {
  check_dims(rows, cols, "eval_batch");
  if (rows > 0 && cols == 0) throw BackendError("cpu eval_batch: zero classes");
  std::int64_t hits = 0;
  double loss = 0.0;
  for (int r = 0; r < rows; ++r) {
    const float* x = logits + std::size_t(r) * cols;
    const int label = labels[r];
    if (label < 0 || label >= cols)
      throw BackendError("cpu eval_batch: label " + std::to_string(label) + " out of range");
    int arg = 0;
    float mx = x[0];
    for (int c = 1; c < cols; ++c)
      if (x[c] > mx) {  // first index wins ties, as on the GPU
        mx = x[c];
        arg = c;
      }
    float sum = 0.0f;
    for (int c = 0; c < cols; ++c) sum += std::exp(x[c] - mx);
    loss += static_cast<double>(std::log(sum) - (x[label] - mx));
    hits += arg == label;
  }
  *correct = hits;
  *loss_sum = loss;
}

// ---- optimizers ----

void CpuBackend::sgd_momentum(float* w, const float* g, float* v, std::size_t n, float lr,
                              float momentum, float weight_decay) {
  parallel(n, [&](std::size_t, std::size_t lo, std::size_t hi) {
    sgd_loop(w + lo, g + lo, v + lo, hi - lo, lr, momentum, weight_decay);
  });
}

void CpuBackend::qgm(float* w, const float* g, float* m, float* xprev, std::size_t n, float lr,
                     float inv_lr_prev, float beta, float mu, float weight_decay) {
  const FlushDenormals ftz;  // as in the loops of parallel()
  qgm_loop(w, g, m, xprev, n, lr, inv_lr_prev, beta, mu, weight_decay);
}

void CpuBackend::adam(float* w, const float* g, float* m, float* v, std::size_t n, float lr,
                      float b1, float b2, float eps, float weight_decay, std::int64_t t) {
  if (t < 1) throw BackendError("cpu adam: step t must be >= 1, got " + std::to_string(t));
  const double bc1 = 1.0 - std::pow(double(b1), double(t));
  const double bc2 = 1.0 - std::pow(double(b2), double(t));
  const float step = static_cast<float>(lr / bc1);
  const float inv = static_cast<float>(1.0 / std::sqrt(bc2));
  parallel(n, [&](std::size_t, std::size_t lo, std::size_t hi) {
    adam_loop(w + lo, g + lo, m + lo, v + lo, hi - lo, b1, b2, eps, step, inv, lr * weight_decay);
  });
}

// ---- averaging ----

void CpuBackend::mix(float* x, const float* r, const float* s, std::size_t n, float w) {
  parallel(n, [&](std::size_t, std::size_t lo, std::size_t hi) {
    mix_loop(x + lo, r + lo, s + lo, hi - lo, w);
  });
}

bool CpuBackend::all_finite(const float* x, std::size_t n) {
  // Exponent bits all set means inf or nan. Integer OR over lanes vectorizes; checking once per
  // chunk lets a bad vector stop early.
  constexpr std::size_t kChunk = 4096;
  std::size_t i = 0;
  while (i + kLanes <= n) {
    const std::size_t end = std::min(n, i + kChunk) / kLanes * kLanes;
    std::uint32_t bad[kLanes] = {};
    for (; i < end; i += kLanes)
      for (std::size_t j = 0; j < kLanes; ++j)
        bad[j] |= ~f32_bits(x[i + j]) & 0x7f800000u ? 0u : 1u;
    std::uint32_t any = 0;
    for (auto b : bad) any |= b;
    if (any) return false;
  }
  for (; i < n; ++i)
    if (non_finite(x[i])) return false;
  return true;
}

double CpuBackend::sq_diff_norm(const float* a, const float* b, std::size_t n) {
  // Partial sums of fixed ranges, added in order (the same for the same number of helpers).
  const unsigned workers = helpers();
  std::vector<double> part(LoopPool::parts(n, workers), 0.0);
  parallel(
      n,
      [&](std::size_t i, std::size_t lo, std::size_t hi) {
        part[i] = host_sq_diff_norm(a + lo, b + lo, hi - lo);
      },
      workers);
  double total = 0.0;
  for (double v : part) total += v;
  return total;
}

double host_sq_diff_norm(const float* a, const float* b, std::size_t n) {
  // kLanes independent double accumulators: vectorizes without reassociating a single sum.
  double acc[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) {
      const double d = double(a[i + j]) - double(b[i + j]);
      acc[j] += d * d;
    }
  double total = 0.0;
  for (; i < n; ++i) {
    const double d = double(a[i]) - double(b[i]);
    total += d * d;
  }
  for (double v : acc) total += v;
  return total;
}

// ---- wire encodings ----

namespace {

// The largest |x[i]| over [lo, hi): a block's scale comes from it (0 for an all-zero block).
float max_abs(const float* x, std::size_t lo, std::size_t hi) {
  float mx = 0.0f;
  for (std::size_t i = lo; i < hi; ++i) {
    const float a = std::fabs(x[i]);
    mx = a > mx ? a : mx;
  }
  return mx;
}

// int4 (kBits 4) and int2 (kBits 2): the fp32 block scales, then the packed codes
// (kernels/float_convert.hpp). A block of kInt8BlockSize values fills whole bytes.
template <int kBits>
void encode_lowbit(const float* x, std::size_t n, unsigned char* bytes) {
  constexpr int qmax = (1 << (kBits - 1)) - 1;
  constexpr std::size_t per_byte = 8 / kBits;
  static_assert(kInt8BlockSize % per_byte == 0);
  const std::size_t blocks = (n + kInt8BlockSize - 1) / kInt8BlockSize;
  unsigned char* codes = bytes + blocks * sizeof(float);
  std::memset(codes, 0, (n + per_byte - 1) / per_byte);
  for (std::size_t blk = 0; blk < blocks; ++blk) {
    const std::size_t lo = blk * kInt8BlockSize, hi = std::min(n, lo + kInt8BlockSize);
    const float scale = block_scale(max_abs(x, lo, hi), qmax);
    std::memcpy(bytes + blk * sizeof(float), &scale, sizeof scale);
    for (std::size_t i = lo; i < hi; ++i)
      codes[i / per_byte] |= static_cast<unsigned char>(
          lowbit_code<kBits>(block_quantize(x[i], scale, qmax)) << (kBits * (i % per_byte)));
  }
}

template <int kBits>
void decode_lowbit(const unsigned char* bytes, std::size_t n, float* x) {
  constexpr std::size_t per_byte = 8 / kBits;
  constexpr unsigned mask = (1u << kBits) - 1u;
  const std::size_t blocks = (n + kInt8BlockSize - 1) / kInt8BlockSize;
  const unsigned char* codes = bytes + blocks * sizeof(float);
  for (std::size_t blk = 0; blk < blocks; ++blk) {
    float scale;
    std::memcpy(&scale, bytes + blk * sizeof(float), sizeof scale);
    const std::size_t lo = blk * kInt8BlockSize, hi = std::min(n, lo + kInt8BlockSize);
    for (std::size_t i = lo; i < hi; ++i) {
      const unsigned code = (codes[i / per_byte] >> (kBits * (i % per_byte))) & mask;
      x[i] = static_cast<float>(lowbit_value<kBits>(code)) * scale;
    }
  }
}

}  // namespace

void CpuBackend::encode(Wire w, const float* x, std::size_t n, void* out) {
  switch (w) {
    case Wire::Fp32:
      copy(out, x, n * sizeof(float));
      return;
    case Wire::Fp16: {
      auto* o = static_cast<std::uint16_t*>(out);
      for (std::size_t i = 0; i < n; ++i) o[i] = f32_to_f16_bits(x[i]);
      return;
    }
    case Wire::Bf16: {
      auto* o = static_cast<std::uint16_t*>(out);
      for (std::size_t i = 0; i < n; ++i) o[i] = f32_to_bf16_bits(x[i]);
      return;
    }
    case Wire::Int8: {
      const std::size_t blocks = (n + kInt8BlockSize - 1) / kInt8BlockSize;
      auto* bytes = static_cast<unsigned char*>(out);
      auto* q = reinterpret_cast<std::int8_t*>(bytes + blocks * sizeof(float));
      for (std::size_t blk = 0; blk < blocks; ++blk) {
        const std::size_t lo = blk * kInt8BlockSize, hi = std::min(n, lo + kInt8BlockSize);
        const float scale = int8_scale(max_abs(x, lo, hi));
        std::memcpy(bytes + blk * sizeof(float), &scale, sizeof scale);  // unaligned-safe
        for (std::size_t i = lo; i < hi; ++i) q[i] = int8_quantize(x[i], scale);
      }
      return;
    }
    case Wire::Int4: return encode_lowbit<4>(x, n, static_cast<unsigned char*>(out));
    case Wire::Int2: return encode_lowbit<2>(x, n, static_cast<unsigned char*>(out));
  }
  throw BackendError("cpu encode: unknown wire encoding");
}

void CpuBackend::decode(Wire w, const void* in, std::size_t n, float* x) {
  switch (w) {
    case Wire::Fp32:
      copy(x, in, n * sizeof(float));
      return;
    case Wire::Fp16: {
      const auto* h = static_cast<const std::uint16_t*>(in);
      for (std::size_t i = 0; i < n; ++i) x[i] = f16_bits_to_f32(h[i]);
      return;
    }
    case Wire::Bf16: {
      const auto* h = static_cast<const std::uint16_t*>(in);
      for (std::size_t i = 0; i < n; ++i) x[i] = bf16_bits_to_f32(h[i]);
      return;
    }
    case Wire::Int8: {
      const std::size_t blocks = (n + kInt8BlockSize - 1) / kInt8BlockSize;
      const auto* bytes = static_cast<const unsigned char*>(in);
      const auto* q = reinterpret_cast<const std::int8_t*>(bytes + blocks * sizeof(float));
      for (std::size_t blk = 0; blk < blocks; ++blk) {
        float scale;
        std::memcpy(&scale, bytes + blk * sizeof(float), sizeof scale);
        const std::size_t lo = blk * kInt8BlockSize, hi = std::min(n, lo + kInt8BlockSize);
        for (std::size_t i = lo; i < hi; ++i) x[i] = static_cast<float>(q[i]) * scale;
      }
      return;
    }
    case Wire::Int4: return decode_lowbit<4>(static_cast<const unsigned char*>(in), n, x);
    case Wire::Int2: return decode_lowbit<2>(static_cast<const unsigned char*>(in), n, x);
  }
  throw BackendError("cpu decode: unknown wire encoding");
}

}  // namespace gossiptrain::kernels
