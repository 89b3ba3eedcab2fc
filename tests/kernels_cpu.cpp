// Tests of the CPU backend: every op against a naive reference on random inputs, the wire
// encodings (round trips, error bounds, special values) and backend selection.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/float_convert.hpp"
#include "tests/kernels_util.hpp"

using namespace gossiptrain::kernels;
using namespace gossiptrain::kernels::test;

namespace {

float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

std::uint32_t float_to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace

TEST_CASE("cpu alloc is zero-filled and copies round trip", "[kernels]") {
  CpuBackend be;
  DeviceBuffer<float> a(be, 1000);
  std::vector<float> host(1000, 1.0f);
  be.download(host.data(), a.data(), a.bytes());
  for (float x : host) REQUIRE(x == 0.0f);

  auto src = random_floats(1000, 1);
  be.upload(a.data(), src.data(), a.bytes());
  DeviceBuffer<float> b(be, 1000);
  be.copy(b.data(), a.data(), a.bytes());
  REQUIRE(to_host(be, b) == src);
  be.fill(b.data(), b.size(), 2.5f);
  for (float x : to_host(be, b)) REQUIRE(x == 2.5f);
  REQUIRE(be.name() == "cpu");
  REQUIRE_FALSE(be.device().empty());
}

TEST_CASE("cpu gemm matches the naive reference for all transposes", "[kernels]") {
  CpuBackend be;
  struct Shape {
    int M, N, K;
  };
  for (Shape s : {Shape{7, 5, 9}, Shape{33, 17, 65}, Shape{128, 10, 256}}) {
    for (int t = 0; t < 4; ++t) {
      GemmCase g(s.M, s.N, s.K, t);
      const float alpha = 0.75f, beta = t == 3 ? 0.0f : 0.5f;
      auto ref = g.C;
      gemm_ref(g.ta, g.tb, g.M, g.N, g.K, alpha, g.A, g.B, beta, ref);
      be.gemm(g.ta, g.tb, g.M, g.N, g.K, alpha, g.A.data(), g.B.data(), beta, g.C.data());
      INFO(g);
      REQUIRE(max_rel_err(g.C, ref) < 1e-5);
    }
  }
}

TEST_CASE("cpu bias_act forward and backward match the reference", "[kernels]") {
  CpuBackend be;
  const int rows = 37, cols = 45;  // not multiples of the vector width: exercises the tails
  auto b = random_floats(cols, 2);
  for (Act act : {Act::Relu, Act::None}) {
    auto y = random_floats(std::size_t(rows) * cols, 3);
    auto ref = y;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        float v = ref[std::size_t(r) * cols + c] + b[c];
        ref[std::size_t(r) * cols + c] = act == Act::Relu ? std::max(v, 0.0f) : v;
      }
    be.bias_act_forward(y.data(), b.data(), rows, cols, act);
    REQUIRE(y == ref);

    auto dy = random_floats(y.size(), 4);
    auto dy_ref = dy;
    std::vector<double> db_ref(cols, 0.0);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        auto& g = dy_ref[std::size_t(r) * cols + c];
        if (act == Act::Relu && !(y[std::size_t(r) * cols + c] > 0.0f)) g = 0.0f;
        db_ref[c] += g;
      }
    std::vector<float> db(cols, 123.0f);  // overwritten, not accumulated
    be.bias_act_backward(dy.data(), y.data(), db.data(), rows, cols, act);
    REQUIRE(dy == dy_ref);
    for (int c = 0; c < cols; ++c) REQUIRE(db[c] == Approx(db_ref[c]).epsilon(1e-5).margin(1e-5));
  }
}

TEST_CASE("cpu softmax_xent loss and gradient match the reference", "[kernels]") {
  CpuBackend be;
  const int rows = 29, cols = 10;
  auto logits = random_floats(std::size_t(rows) * cols, 5, -4.0f, 4.0f);
  logits[3] = 80.0f;  // large logits must not overflow (max subtraction)
  auto labels = random_labels(rows, cols, 6);

  double loss_ref = 0.0;
  std::vector<float> grad_ref(logits.size());
  for (int r = 0; r < rows; ++r) {
    const float* x = &logits[std::size_t(r) * cols];
    double mx = x[0];
    for (int c = 1; c < cols; ++c) mx = std::max<double>(mx, x[c]);
    double sum = 0.0;
    for (int c = 0; c < cols; ++c) sum += std::exp(x[c] - mx);
    loss_ref += std::log(sum) - (x[labels[r]] - mx);
    for (int c = 0; c < cols; ++c)
      grad_ref[std::size_t(r) * cols + c] =
          float((std::exp(x[c] - mx) / sum - (c == labels[r] ? 1.0 : 0.0)) / rows);
  }
  loss_ref /= rows;

  std::vector<float> grad(logits.size());
  const float loss = be.softmax_xent(logits.data(), labels.data(), grad.data(), rows, cols);
  REQUIRE(loss == Approx(loss_ref).epsilon(1e-5));
  REQUIRE(max_rel_err(grad, grad_ref, 1e-3) < 1e-4);

  SECTION("dlogits may alias logits") {
    auto inplace = logits;
    const float loss2 = be.softmax_xent(inplace.data(), labels.data(), inplace.data(), rows, cols);
    REQUIRE(loss2 == loss);
    REQUIRE(inplace == grad);
  }
  SECTION("a label out of range is an error") {
    labels[0] = cols;
    REQUIRE_THROWS_AS(be.softmax_xent(logits.data(), labels.data(), grad.data(), rows, cols),
                      BackendError);
  }
}

TEST_CASE("cpu eval_batch counts argmax hits and sums the loss", "[kernels]") {
  CpuBackend be;
  const int rows = 50, cols = 7;
  auto logits = random_floats(std::size_t(rows) * cols, 7, -3.0f, 3.0f);
  auto labels = random_labels(rows, cols, 8);
  std::int64_t hits_ref = 0;
  double loss_ref = 0.0;
  for (int r = 0; r < rows; ++r) {
    const float* x = &logits[std::size_t(r) * cols];
    int arg = 0;
    for (int c = 1; c < cols; ++c)
      if (x[c] > x[arg]) arg = c;
    hits_ref += arg == labels[r];
    double sum = 0.0;
    for (int c = 0; c < cols; ++c) sum += std::exp(double(x[c]) - x[arg]);
    loss_ref += std::log(sum) - (x[labels[r]] - x[arg]);
  }
  REQUIRE(hits_ref > 0);  // the check below must be able to tell hits from misses
  REQUIRE(hits_ref < rows);
  std::int64_t hits = -1;
  double loss = -1.0;
  be.eval_batch(logits.data(), labels.data(), rows, cols, &hits, &loss);
  REQUIRE(hits == hits_ref);
  REQUIRE(loss == Approx(loss_ref).epsilon(1e-5));
}

TEST_CASE("cpu sgd_momentum matches the reference over several steps", "[kernels]") {
  CpuBackend be;
  const std::size_t n = 1003;
  auto w = random_floats(n, 9);
  std::vector<float> v(n, 0.0f);
  auto w_ref = std::vector<double>(w.begin(), w.end());
  std::vector<double> v_ref(n, 0.0);
  const float lr = 0.05f, mom = 0.9f, wd = 1e-3f;
  for (int step = 0; step < 3; ++step) {
    auto g = random_floats(n, 100 + step);
    for (std::size_t i = 0; i < n; ++i) {
      v_ref[i] = mom * v_ref[i] + (g[i] + wd * w_ref[i]);
      w_ref[i] -= lr * v_ref[i];
    }
    be.sgd_momentum(w.data(), g.data(), v.data(), n, lr, mom, wd);
  }
  for (std::size_t i = 0; i < n; ++i) {
    REQUIRE(w[i] == Approx(w_ref[i]).epsilon(1e-5).margin(1e-6));
    REQUIRE(v[i] == Approx(v_ref[i]).epsilon(1e-5).margin(1e-6));
  }
}

TEST_CASE("cpu optimizer steps flush denormal state to zero, and leave the caller's float mode",
          "[kernels]") {
#if !defined(__x86_64__)
  WARN("skipped: denormals are flushed on x86 only");
#else
  // A momentum with a zero gradient decays into the denormal range; rounded to nearest, 0.9 times
  // the smallest denormal is the smallest denormal again, so without a flush it never leaves.
  CpuBackend be;
  const float tiny = std::numeric_limits<float>::denorm_min();
  REQUIRE(0.9f * tiny == tiny);  // the trap, on this thread's default mode
  for (std::size_t n : {std::size_t(64), std::size_t(1) << 18}) {  // one thread; the pool
    INFO("n = " << n);
    std::vector<float> w(n, 1.0f), g(n, 0.0f), v(n, tiny);
    v[1] = 1e-30f;  // a normal value is untouched
    be.sgd_momentum(w.data(), g.data(), v.data(), n, 0.1f, 0.9f, 0.0f);
    CHECK(v[0] == 0.0f);
    CHECK(v[n - 1] == 0.0f);
    CHECK(v[1] == 0.9f * 1e-30f);
    std::vector<float> m(n, tiny), v2(n, 0.0f), w2(n, 1.0f);
    be.adam(w2.data(), g.data(), m.data(), v2.data(), n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
    CHECK(m[0] == 0.0f);
    CHECK(m[n - 1] == 0.0f);
  }
  // The caller's thread gets its own mode back: here, denormals as before.
  volatile float x = tiny;
  CHECK(x * 0.9f == tiny);
#endif
}

TEST_CASE("cpu adam matches the reference with bias correction and decoupled decay", "[kernels]") {
  CpuBackend be;
  const std::size_t n = 517;
  auto w = random_floats(n, 11);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  std::vector<double> w_ref(w.begin(), w.end()), m_ref(n, 0.0), v_ref(n, 0.0);
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
  for (std::int64_t t = 1; t <= 4; ++t) {
    auto g = random_floats(n, 200 + std::uint32_t(t));
    const double bc1 = 1.0 - std::pow(double(b1), double(t));
    const double bc2 = 1.0 - std::pow(double(b2), double(t));
    for (std::size_t i = 0; i < n; ++i) {
      m_ref[i] = b1 * m_ref[i] + (1.0 - b1) * g[i];
      v_ref[i] = b2 * v_ref[i] + (1.0 - b2) * double(g[i]) * g[i];
      const double upd = (m_ref[i] / bc1) / (std::sqrt(v_ref[i] / bc2) + eps);
      w_ref[i] = w_ref[i] - lr * wd * w_ref[i] - lr * upd;
    }
    be.adam(w.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, t);
  }
  for (std::size_t i = 0; i < n; ++i) REQUIRE(w[i] == Approx(w_ref[i]).epsilon(1e-5).margin(1e-6));
  REQUIRE_THROWS_AS(be.adam(w.data(), w.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, 0),
                    BackendError);
}

TEST_CASE("cpu mix, all_finite and sq_diff_norm", "[kernels]") {
  CpuBackend be;
  const std::size_t n = 4099;  // a whole number of chunks plus a tail
  auto x = random_floats(n, 12), r = random_floats(n, 13), s = random_floats(n, 14);

  SECTION("mix") {
    auto ref = x;
    for (std::size_t i = 0; i < n; ++i) ref[i] += 0.25f * (r[i] - s[i]);
    be.mix(x.data(), r.data(), s.data(), n, 0.25f);
    REQUIRE(x == ref);
    auto y = r;  // s aliasing x: x <- x + w (r - x)
    be.mix(y.data(), s.data(), y.data(), n, 0.5f);
    for (std::size_t i = 0; i < n; ++i)
      REQUIRE(y[i] == Approx(0.5 * (double(r[i]) + s[i])).margin(1e-6));
  }
  SECTION("all_finite") {
    REQUIRE(be.all_finite(x.data(), n));
    REQUIRE(be.all_finite(x.data(), 0));
    for (std::size_t pos : {std::size_t(0), std::size_t(17), std::size_t(4095), n - 1}) {
      for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()}) {
        auto y = x;
        y[pos] = bad;
        INFO("pos " << pos << " value " << bad);
        REQUIRE_FALSE(be.all_finite(y.data(), n));
      }
    }
    x[5] = std::numeric_limits<float>::max();
    x[6] = std::numeric_limits<float>::denorm_min();
    REQUIRE(be.all_finite(x.data(), n));
  }
  SECTION("sq_diff_norm") {
    double ref = 0.0;
    for (std::size_t i = 0; i < n; ++i) ref += (double(r[i]) - s[i]) * (double(r[i]) - s[i]);
    REQUIRE(be.sq_diff_norm(r.data(), s.data(), n) == Approx(ref).epsilon(1e-12));
    REQUIRE(be.sq_diff_norm(r.data(), r.data(), n) == 0.0);
    REQUIRE(be.sq_diff_norm(r.data(), s.data(), 0) == 0.0);
  }
}

// Reading the names back, int4-rel's with them: tests/gossip_wire_format.cpp.
TEST_CASE("wire names and encoded sizes", "[kernels]") {
  REQUIRE(wire_name(Wire::Fp32) == "fp32");
  REQUIRE(wire_name(Wire::Fp16) == "fp16");
  REQUIRE(wire_name(Wire::Bf16) == "bf16");
  REQUIRE(wire_name(Wire::Int8) == "int8");
  REQUIRE(wire_name(Wire::Int4) == "int4");
  REQUIRE(wire_name(Wire::Int2) == "int2");
  REQUIRE(wire_name(static_cast<Wire>(6)) == "unknown");
  REQUIRE(encoded_size(Wire::Fp32, 10) == 40);
  REQUIRE(encoded_size(Wire::Fp16, 10) == 20);
  REQUIRE(encoded_size(Wire::Bf16, 10) == 20);
  REQUIRE(encoded_size(Wire::Int8, 0) == 0);
  REQUIRE(encoded_size(Wire::Int8, 1) == 4 + 1);
  REQUIRE(encoded_size(Wire::Int8, 256) == 4 + 256);
  REQUIRE(encoded_size(Wire::Int8, 257) == 8 + 257);
  REQUIRE(encoded_size(Wire::Int8, 269322) == 1053 * 4 + 269322);
  // int4: the same scales, then two values a byte; int2: four. A tail block and a tail byte.
  REQUIRE(encoded_size(Wire::Int4, 0) == 0);
  REQUIRE(encoded_size(Wire::Int4, 1) == 4 + 1);
  REQUIRE(encoded_size(Wire::Int4, 256) == 4 + 128);
  REQUIRE(encoded_size(Wire::Int4, 257) == 8 + 129);
  REQUIRE(encoded_size(Wire::Int4, 258) == 8 + 129);
  REQUIRE(encoded_size(Wire::Int4, 269322) == 1053 * 4 + 134661);
  REQUIRE(encoded_size(Wire::Int2, 0) == 0);
  REQUIRE(encoded_size(Wire::Int2, 1) == 4 + 1);
  REQUIRE(encoded_size(Wire::Int2, 256) == 4 + 64);
  REQUIRE(encoded_size(Wire::Int2, 257) == 8 + 65);
  REQUIRE(encoded_size(Wire::Int2, 260) == 8 + 65);
  REQUIRE(encoded_size(Wire::Int2, 261) == 8 + 66);
  REQUIRE(encoded_size(Wire::Int2, 269322) == 1053 * 4 + 67331);  // 67,331 = ceil(269,322 / 4)
}

TEST_CASE("cpu wire round trips stay within each encoding's error bound", "[kernels]") {
  CpuBackend be;
  const std::size_t n = 1001;  // 3 full blocks and a partial one, a partial int4 and int2 byte
  auto x = random_floats(n, 15, -3.0f, 3.0f);
  for (Wire w : {Wire::Fp32, Wire::Fp16, Wire::Bf16, Wire::Int8, Wire::Int4, Wire::Int2}) {
    std::vector<unsigned char> enc(encoded_size(w, n));
    std::vector<float> y(n);
    be.encode(w, x.data(), n, enc.data());
    be.decode(w, enc.data(), n, y.data());
    INFO("wire " << wire_name(w));
    for (std::size_t i = 0; i < n; ++i) {
      const double err = std::fabs(double(y[i]) - x[i]);
      switch (w) {
        case Wire::Fp32: REQUIRE(y[i] == x[i]); break;
        // half a unit in the last place, relative: 2^-11 (fp16), 2^-8 (bf16); values >= 2^-14
        case Wire::Fp16: REQUIRE(err <= std::ldexp(std::fabs(x[i]), -11) + 1e-7); break;
        case Wire::Bf16: REQUIRE(err <= std::ldexp(std::fabs(x[i]), -8)); break;
        case Wire::Int8:
        case Wire::Int4:
        case Wire::Int2: {  // half a step: max |x| of the block / (127, 7 or 1) / 2
          const std::size_t lo = i / kInt8BlockSize * kInt8BlockSize;
          float mx = 0.0f;
          for (std::size_t k = lo; k < std::min(n, lo + kInt8BlockSize); ++k)
            mx = std::max(mx, std::fabs(x[k]));
          REQUIRE(err <= mx / float(wire_qmax(w)) * 0.5f * (1.0f + 1e-5f));
          break;
        }
      }
    }
  }
}

TEST_CASE("int8 encoding: layout, an all-zero block, exact integers", "[kernels]") {
  CpuBackend be;
  const std::size_t n = 600;
  std::vector<float> x(n, 0.0f);
  for (std::size_t i = 0; i < 256; ++i) x[i] = float(int(i % 255) - 127);  // max |x| = 127
  for (std::size_t i = 512; i < n; ++i) x[i] = (i % 2 ? 127.0f : 3.0f);    // partial last block
  x[512] = -63.5f;
  x[514] = 62.5f;
  std::vector<unsigned char> enc(encoded_size(Wire::Int8, n));
  be.encode(Wire::Int8, x.data(), n, enc.data());
  float scales[3];
  std::memcpy(scales, enc.data(), sizeof scales);
  REQUIRE(scales[0] == 1.0f);
  REQUIRE(scales[1] == 0.0f);  // the all-zero block
  REQUIRE(scales[2] == 1.0f);
  const auto* q = reinterpret_cast<const std::int8_t*>(enc.data() + 3 * sizeof(float));
  REQUIRE(q[0] == -127);
  REQUIRE(q[254] == 127);
  REQUIRE(q[513] == 127);
  REQUIRE(q[512] == -64);  // halves round to even
  REQUIRE(q[514] == 62);
  std::vector<float> y(n, 9.0f);
  be.decode(Wire::Int8, enc.data(), n, y.data());
  for (std::size_t i = 0; i < n; ++i)
    if (i != 512 && i != 514) REQUIRE(y[i] == x[i]);
}

TEST_CASE("int4 and int2 encodings: packed codes, an all-zero block, a tail byte", "[kernels]") {
  CpuBackend be;
  const std::size_t n = 515;  // two full blocks, then 3 values: half an int4 byte, 3/4 of an int2 one
  std::vector<float> x(n, 0.0f);
  for (std::size_t i = 0; i < 256; ++i) x[i] = float(int(i % 15) - 7);  // max |x| = 7
  x[512] = -7.0f;
  x[513] = 3.5f;  // halves round to even: int4 4, int2 (step 7) 0
  x[514] = 4.0f;
  for (Wire w : {Wire::Int4, Wire::Int2}) {
    INFO(wire_name(w));
    std::vector<unsigned char> enc(encoded_size(w, n), 0xAA);
    be.encode(w, x.data(), n, enc.data());
    float scales[3];
    std::memcpy(scales, enc.data(), sizeof scales);
    const float step = w == Wire::Int4 ? 1.0f : 7.0f;
    REQUIRE(scales[0] == step);
    REQUIRE(scales[1] == 0.0f);  // the all-zero block
    REQUIRE(scales[2] == step);
    const unsigned char* codes = enc.data() + 3 * sizeof(float);
    if (w == Wire::Int4) {
      REQUIRE(codes[0] == 0xA9u);          // -7 (0x9) in the low nibble, then -6 (0xA)
      REQUIRE(codes[256] == 0x49u);        // -7, then 3.5 -> 4
      REQUIRE(codes[257] == 0x04u);        // 4, and the unused high nibble is zero
    } else {
      REQUIRE(codes[0] == 0xFFu);          // -7, -6, -5, -4 -> all -1 (binary 11)
      REQUIRE(codes[128] == 0x13u);        // -7 -> -1 (11), 3.5 -> 0 (00), 4 -> 1 (01), then 00
    }
    std::vector<float> y(n, 9.0f);
    be.decode(w, enc.data(), n, y.data());
    for (std::size_t i = 256; i < 512; ++i) REQUIRE(y[i] == 0.0f);
    if (w == Wire::Int4)
      for (std::size_t i = 0; i < 256; ++i) REQUIRE(y[i] == x[i]);  // integers within +-7: exact
    REQUIRE(y[512] == -7.0f);
    REQUIRE(y[513] == (w == Wire::Int4 ? 4.0f : 0.0f));
    REQUIRE(y[514] == (w == Wire::Int4 ? 4.0f : 7.0f));
  }
}

TEST_CASE("fp16 conversion: special values and rounding", "[kernels]") {
  const float inf = std::numeric_limits<float>::infinity();
  REQUIRE(f32_to_f16_bits(0.0f) == 0x0000);
  REQUIRE(f32_to_f16_bits(-0.0f) == 0x8000);
  REQUIRE(f32_to_f16_bits(1.0f) == 0x3c00);
  REQUIRE(f32_to_f16_bits(-2.0f) == 0xc000);
  REQUIRE(f32_to_f16_bits(inf) == 0x7c00);
  REQUIRE(f32_to_f16_bits(-inf) == 0xfc00);
  const std::uint16_t nan = f32_to_f16_bits(std::numeric_limits<float>::quiet_NaN());
  REQUIRE((nan & 0x7c00) == 0x7c00);
  REQUIRE((nan & 0x03ff) != 0);
  REQUIRE((f32_to_f16_bits(bits_to_float(0x7f800001u)) & 0x3ff) != 0);  // sNaN stays a NaN
  REQUIRE(f32_to_f16_bits(65504.0f) == 0x7bff);                             // largest finite
  REQUIRE(f32_to_f16_bits(65519.0f) == 0x7bff);
  REQUIRE(f32_to_f16_bits(65520.0f) == 0x7c00);  // halfway to 65536: ties to even = inf
  REQUIRE(f32_to_f16_bits(1e10f) == 0x7c00);
  REQUIRE(f32_to_f16_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // tie -> even
  REQUIRE(f32_to_f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie -> even (up)
  REQUIRE(f32_to_f16_bits(std::ldexp(1.0f, -14)) == 0x0400);             // smallest normal
  REQUIRE(f32_to_f16_bits(std::ldexp(1.0f, -24)) == 0x0001);             // smallest subnormal
  REQUIRE(f32_to_f16_bits(std::ldexp(1.0f, -25)) == 0x0000);             // tie -> even (zero)
  REQUIRE(f32_to_f16_bits(std::ldexp(1.5f, -25)) == 0x0001);
  REQUIRE(f32_to_f16_bits(std::ldexp(3.0f, -25)) == 0x0002);             // 1.5 units: tie -> 2
  REQUIRE(f32_to_f16_bits(-std::ldexp(1023.0f, -24)) == 0x83ff);         // largest subnormal
  REQUIRE(f32_to_f16_bits(std::ldexp(2047.0f, -25)) == 0x0400);  // rounds up into the normals
  REQUIRE(f32_to_f16_bits(std::numeric_limits<float>::denorm_min()) == 0x0000);

  // Every fp16 value decodes exactly and re-encodes to itself (NaNs stay NaN).
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_bits_to_f32(std::uint16_t(h));
    const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    if (is_nan) {
      REQUIRE(std::isnan(f));
      continue;
    }
    REQUIRE(f32_to_f16_bits(f) == h);
  }
  REQUIRE(f16_bits_to_f32(0x0001) == std::ldexp(1.0f, -24));
  REQUIRE(f16_bits_to_f32(0x3555) == Approx(0.333251953125));
  REQUIRE(std::signbit(f16_bits_to_f32(0x8000)));

#if defined(__FLT16_MAX__)
  // The compiler's own _Float16 conversion (round to nearest even) as an independent reference.
  std::mt19937 rng(16);
  for (int i = 0; i < 200000; ++i) {
    const float f = bits_to_float(static_cast<std::uint32_t>(rng()));
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    std::uint16_t hb;
    std::memcpy(&hb, &h, sizeof hb);
    INFO("f32 bits " << float_to_bits(f));
    REQUIRE(f32_to_f16_bits(f) == hb);
  }
#endif
}

TEST_CASE("bf16 conversion: special values and rounding", "[kernels]") {
  const float inf = std::numeric_limits<float>::infinity();
  REQUIRE(f32_to_bf16_bits(1.0f) == 0x3f80);
  REQUIRE(f32_to_bf16_bits(-0.0f) == 0x8000);
  REQUIRE(f32_to_bf16_bits(inf) == 0x7f80);
  REQUIRE(f32_to_bf16_bits(-inf) == 0xff80);
  REQUIRE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(std::numeric_limits<float>::quiet_NaN()))));
  REQUIRE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(bits_to_float(0x7f800001u)))));  // sNaN
  REQUIRE(f32_to_bf16_bits(std::numeric_limits<float>::max()) == 0x7f80);  // rounds to inf
  REQUIRE(f32_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);        // tie -> even
  REQUIRE(f32_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);    // tie -> even (up)
  REQUIRE(f32_to_bf16_bits(1.0f + 1.5f * std::ldexp(1.0f, -8)) == 0x3f81); // above the tie
  REQUIRE(f32_to_bf16_bits(bits_to_float(0x00010000u)) == 0x0001);         // subnormal kept
  REQUIRE(f32_to_bf16_bits(bits_to_float(0x00008000u)) == 0x0000);         // tie -> even
  REQUIRE(f32_to_bf16_bits(bits_to_float(0x00018000u)) == 0x0002);
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bf16_bits_to_f32(std::uint16_t(b));
    if (std::isnan(f)) continue;
    REQUIRE(f32_to_bf16_bits(f) == b);
  }
}

TEST_CASE("backend selection", "[kernels]") {
  REQUIRE(make_backend("cpu")->name() == "cpu");
  REQUIRE_THROWS_AS(make_backend("tpu"), std::invalid_argument);
  auto chosen = make_backend("auto");
  REQUIRE(chosen->name() == (cuda_available() ? "cuda" : "cpu"));
  if (!cuda_available()) REQUIRE_THROWS_AS(make_backend("cuda"), BackendError);
  // The --backend setting as a type: the flag's spellings both ways, and a built backend's kind.
  for (const char* name : {"auto", "cpu", "cuda"}) {
    BackendKind k{};
    from_string(name, k);
    CHECK(to_string(k) == name);
  }
  BackendKind k = BackendKind::Auto;
  CHECK_THROWS_AS(from_string("tpu", k), std::invalid_argument);
  CHECK(k == BackendKind::Auto);
  CHECK(make_backend(BackendKind::Cpu)->kind() == BackendKind::Cpu);
  CHECK(chosen->kind() == (cuda_available() ? BackendKind::Cuda : BackendKind::Cpu));
}

TEST_CASE("precision names, and the cpu backend computes in fp32 only", "[kernels]") {
  REQUIRE(parse_precision("fp32") == Precision::Fp32);
  REQUIRE(parse_precision("tf32") == Precision::Tf32);
  REQUIRE(parse_precision("bf16") == Precision::Bf16);
  REQUIRE(precision_name(Precision::Bf16) == "bf16");
  REQUIRE_THROWS_AS(parse_precision("fp16"), std::invalid_argument);
  CpuBackend be;
  REQUIRE(be.precision() == Precision::Fp32);
  be.set_precision(Precision::Fp32);
  REQUIRE_THROWS_WITH(be.set_precision(Precision::Tf32),
                      Catch::Contains("fp32 only") && Catch::Contains("--backend cuda"));
  REQUIRE_THROWS_AS(be.set_precision(Precision::Bf16), BackendError);
  REQUIRE(be.precision() == Precision::Fp32);
}

TEST_CASE("cpu gather_batch copies the rows and labels an order names", "[kernels]") {
  CpuBackend be;
  const int n = 50, cols = 7;
  auto x = random_floats(std::size_t(n) * cols, 3);
  auto y = random_labels(n, 10, 4);
  const std::vector<std::int32_t> idx = {49, 0, 17, 17, 3};
  std::vector<float> got(idx.size() * cols, -1.0f);
  std::vector<std::int32_t> got_y(idx.size(), -1);
  be.gather_batch(x.data(), y.data(), idx.data(), int(idx.size()), cols, got.data(), got_y.data());
  for (std::size_t i = 0; i < idx.size(); ++i) {
    REQUIRE(got_y[i] == y[std::size_t(idx[i])]);
    for (int c = 0; c < cols; ++c)
      REQUIRE(got[i * cols + c] == x[std::size_t(idx[i]) * cols + c]);
  }
  REQUIRE_THROWS_AS(
      be.gather_batch(x.data(), y.data(), idx.data(), -1, cols, got.data(), got_y.data()),
      BackendError);
}

TEST_CASE("cpu softmax_xent_acc adds each batch's mean loss, as softmax_xent returns it",
          "[kernels]") {
  CpuBackend be;
  const int rows = 32, cols = 10;
  double acc = 0.25;  // accumulates onto what is there
  double want = 0.25;
  for (std::uint32_t seed = 1; seed <= 3; ++seed) {
    auto logits = random_floats(std::size_t(rows) * cols, seed, -3.0f, 3.0f);
    auto labels = random_labels(rows, cols, seed + 10);
    std::vector<float> g1(logits.size()), g2(logits.size());
    want += be.softmax_xent(logits.data(), labels.data(), g1.data(), rows, cols);
    be.softmax_xent_acc(logits.data(), labels.data(), g2.data(), rows, cols, &acc);
    REQUIRE(g1 == g2);
  }
  REQUIRE(acc == want);
}

TEST_CASE("backend device numbers are checked", "[kernels]") {
  REQUIRE_THROWS_AS(make_backend("cpu", -1), BackendError);
  REQUIRE(cuda_devices() >= 0);
  if (cuda_devices() == 0) {
    // A CUDA build that sees no device, and a build without the CUDA backend, refuse differently.
#if defined(GT_HAVE_CUDA)
    const std::string why = "no CUDA device";
#else
    const std::string why = "this build has no CUDA support";
#endif
    REQUIRE_THROWS_WITH(make_backend("cuda", 0), Catch::Contains(why));
  } else {
    REQUIRE_THROWS_WITH(make_backend("cuda", cuda_devices()),
                        Catch::Contains("visible") && Catch::Contains("requested"));
  }
}

TEST_CASE("loop pool: every element once, in fixed ranges, job after job", "[kernels]") {
  LoopPool pool;
  const std::size_t n = LoopPool::kMinParallel * 3 + 5;
  REQUIRE(LoopPool::parts(n, 0) == 1);
  REQUIRE(LoopPool::parts(LoopPool::kMinParallel - 1, 8) == 1);
  REQUIRE(LoopPool::parts(n, 3) == 4);
  std::vector<int> hits(n, 0);
  for (int job = 0; job < 300; ++job) {  // many short jobs: a late worker never runs a stale one
    std::vector<std::size_t> lo_of(4, n + 1);
    pool.run(n, 16, 3, [&](std::size_t part, std::size_t lo, std::size_t hi) {
      lo_of[part] = lo;
      for (std::size_t i = lo; i < hi; ++i) ++hits[i];
    });
    REQUIRE(lo_of[0] == 0);
    for (std::size_t p = 1; p < 4; ++p) REQUIRE(lo_of[p] % 16 == 0);
  }
  for (int h : hits) REQUIRE(h == 300);
}

// Callers at once: the training thread's optimizer and the network thread's checks of a received
// vector share one backend's pool. Each job must see all its own ranges once, whoever runs them.
TEST_CASE("loop pool: three threads calling at once each get every range of their own job once",
          "[kernels]") {
  LoopPool pool;
  const std::size_t n = LoopPool::kMinParallel * 2 + 7;  // 4 ranges with 3 helpers
  const unsigned p = LoopPool::parts(n, 3);
  REQUIRE(p == 4);
  // GT_POOL_STRESS_CALLS sets the count in all (10^6 for the figure); the suite runs
  // 3 x 100,000, which hung or gave wrong ranges within seconds while callers shared one job.
  const char* env = std::getenv("GT_POOL_STRESS_CALLS");
  const long calls = env && std::atol(env) > 0 ? std::atol(env) / 3 : 100000;
  std::atomic<long> bad{0}, done{0};
  auto caller = [&] {
    std::vector<std::size_t> lo_seen(p), hi_seen(p);
    std::vector<int> count(p);
    for (long c = 0; c < calls; ++c) {
      std::fill(count.begin(), count.end(), 0);
      pool.run(n, 16, 3, [&](std::size_t part, std::size_t lo, std::size_t hi) {
        ++count[part];
        lo_seen[part] = lo;
        hi_seen[part] = hi;
      });
      bool ok = lo_seen[0] == 0 && hi_seen[p - 1] == n;
      for (unsigned i = 0; i < p; ++i) ok = ok && count[i] == 1;
      for (unsigned i = 1; i < p; ++i) ok = ok && lo_seen[i] == hi_seen[i - 1];
      if (!ok) ++bad;
      ++done;
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 3; ++t) threads.emplace_back(caller);
  // A hang cannot be joined: say so and end the binary rather than wait for CTest's timeout.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (done.load() < 3 * calls) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "loop pool stress: hung after %ld of %ld calls\n", done.load(),
                   3 * calls);
      std::_Exit(3);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (auto& t : threads) t.join();
  REQUIRE(done.load() == 3 * calls);
  REQUIRE(bad.load() == 0);
}

TEST_CASE("cpu loops split over helper threads give the one-thread results", "[kernels]") {
  // blas threads > 1 makes the backend use helpers for long vectors; the element-wise results
  // must be bit-identical to one thread, and the norm equal within summation order.
  const int before = blas_threads();
  const std::size_t n = LoopPool::kMinParallel * 4 + 3;
  auto x0 = random_floats(n, 71), r = random_floats(n, 72), s = random_floats(n, 73);
  std::vector<std::vector<float>> mixed, sgd_w;
  std::vector<double> norms;
  for (int threads : {1, 4}) {
    if (!set_blas_threads(threads)) {
      WARN("this BLAS has no thread control: skipping");
      return;
    }
    CpuBackend be;
    auto x = x0;
    be.mix(x.data(), r.data(), s.data(), n, 0.375f);
    mixed.push_back(x);
    auto w = x0, v = s;
    be.sgd_momentum(w.data(), r.data(), v.data(), n, 0.1f, 0.9f, 1e-4f);
    sgd_w.push_back(w);
    norms.push_back(be.sq_diff_norm(r.data(), s.data(), n));
    std::vector<float> c(n);
    be.copy(c.data(), x0.data(), n * sizeof(float));
    REQUIRE(c == x0);
  }
  if (before > 0) set_blas_threads(before);
  REQUIRE(mixed[1] == mixed[0]);
  REQUIRE(sgd_w[1] == sgd_w[0]);
  REQUIRE(norms[1] == Approx(norms[0]).epsilon(1e-12));
}
