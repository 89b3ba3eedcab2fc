// Parity of the CUDA backend with the CPU backend on random inputs (within 1e-4 relative error),
// and bit parity of the wire encodings. Every case skips with a warning when no GPU is present.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include <atomic>

#include "base/rng.hpp"
#include "core/metrics.hpp"
#include "core/trainer.hpp"
#include "kernels/backend.hpp"
#include "tests/kernels_util.hpp"

using namespace gossiptrain::kernels;
using namespace gossiptrain::kernels::test;

namespace {

constexpr double kRelTol = 1e-4;

}  // namespace

TEST_CASE("cuda backend basics: alloc zero-fills, copies round trip", "[cuda]") {
  GT_REQUIRE_GPU();
  Pair p;
  Backend& gpu = *p.gpu;
  REQUIRE(gpu.name() == "cuda");
  REQUIRE_FALSE(gpu.device().empty());
  DeviceBuffer<float> a(gpu, 3000);
  for (float x : to_host(gpu, a)) REQUIRE(x == 0.0f);
  auto src = random_floats(3000, 1);
  gpu.upload(a.data(), src.data(), a.bytes());
  DeviceBuffer<float> b(gpu, 3000);
  gpu.copy(b.data(), a.data(), a.bytes());
  REQUIRE(to_host(gpu, b) == src);
  gpu.fill(b.data(), b.size(), -1.5f);
  for (float x : to_host(gpu, b)) REQUIRE(x == -1.5f);
  REQUIRE_THROWS_AS(gpu.gemm(false, false, -1, 2, 2, 1.0f, a.data(), a.data(), 0.0f, b.data()),
                    BackendError);
}

TEST_CASE("cuda gemm matches the cpu backend for all transposes", "[cuda]") {
  GT_REQUIRE_GPU();
  Pair p;
  struct Shape {
    int M, N, K;
  };
  // The MLP's products (forward, dW, dX) and an odd shape.
  for (Shape s : {Shape{128, 256, 784}, Shape{256, 784, 128}, Shape{128, 10, 256},
                  Shape{33, 17, 65}}) {
    for (int t = 0; t < 4; ++t) {
      GemmCase g(s.M, s.N, s.K, t);
      const float alpha = 1.0f, beta = t == 1 ? 0.5f : 0.0f;
      auto dA = to_device(*p.gpu, g.A);
      auto dB = to_device(*p.gpu, g.B);
      auto dC = to_device(*p.gpu, g.C);
      p.cpu->gemm(g.ta, g.tb, g.M, g.N, g.K, alpha, g.A.data(), g.B.data(), beta, g.C.data());
      p.gpu->gemm(g.ta, g.tb, g.M, g.N, g.K, alpha, dA.data(), dB.data(), beta, dC.data());
      INFO(g);
      REQUIRE(max_rel_err(to_host(*p.gpu, dC), g.C) < kRelTol);
    }
  }
}

TEST_CASE("cuda bias_act forward and backward match the cpu backend", "[cuda]") {
  GT_REQUIRE_GPU();
  Pair p;
  // 128 rows: one chunk of the backward kernel; 1000 and 8192: several, summed in a second pass.
  struct Shape {
    int rows, cols;
  };
  for (Shape sh : {Shape{128, 256}, Shape{128, 10}, Shape{128, 45}, Shape{1000, 45},
                   Shape{8192, 256}, Shape{8192, 10}}) {
    const int rows = sh.rows, cols = sh.cols;
    auto b = random_floats(cols, 2);
    for (Act act : {Act::Relu, Act::None}) {
      auto y = random_floats(std::size_t(rows) * cols, 3);
      auto dy = to_device(*p.gpu, y);
      auto db_bias = to_device(*p.gpu, b);
      p.cpu->bias_act_forward(y.data(), b.data(), rows, cols, act);
      p.gpu->bias_act_forward(dy.data(), db_bias.data(), rows, cols, act);
      INFO("rows " << rows << " cols " << cols << " relu " << (act == Act::Relu));
      REQUIRE(max_rel_err(to_host(*p.gpu, dy), y) < kRelTol);

      auto g = random_floats(y.size(), 4);
      auto dg = to_device(*p.gpu, g);
      std::vector<float> db(cols);
      DeviceBuffer<float> ddb(*p.gpu, cols);
      p.gpu->fill(ddb.data(), cols, 7.0f);  // must be overwritten, not accumulated
      p.cpu->bias_act_backward(g.data(), y.data(), db.data(), rows, cols, act);
      p.gpu->bias_act_backward(dg.data(), dy.data(), ddb.data(), rows, cols, act);
      REQUIRE(max_rel_err(to_host(*p.gpu, dg), g) < kRelTol);
      // db sums `rows` floats in another order than the CPU: allow for n * eps of rounding.
      REQUIRE(max_rel_err(to_host(*p.gpu, ddb), db) < kRelTol * std::max(1.0, rows / 1000.0));
    }
  }
}

TEST_CASE("cuda softmax_xent and eval_batch match the cpu backend", "[cuda]") {
  GT_REQUIRE_GPU();
  Pair p;
  for (int cols : {10, 100}) {
    const int rows = 128;
    auto logits = random_floats(std::size_t(rows) * cols, 5, -5.0f, 5.0f);
    auto labels = random_labels(rows, cols, 6);
    auto dl = to_device(*p.gpu, logits);
    auto dlab = to_device(*p.gpu, labels);
    INFO("cols " << cols);

    std::int64_t hits_cpu = 0, hits_gpu = -1;
    double loss_cpu = 0.0, loss_gpu = 0.0;
    p.cpu->eval_batch(logits.data(), labels.data(), rows, cols, &hits_cpu, &loss_cpu);
    p.gpu->eval_batch(dl.data(), dlab.data(), rows, cols, &hits_gpu, &loss_gpu);
    REQUIRE(hits_gpu == hits_cpu);
    REQUIRE(loss_gpu == Approx(loss_cpu).epsilon(kRelTol));

    std::vector<float> grad(logits.size());
    const float l_cpu = p.cpu->softmax_xent(logits.data(), labels.data(), grad.data(), rows, cols);
    // In place on the device (dlogits aliasing logits), as the training step uses it.
    const float l_gpu = p.gpu->softmax_xent(dl.data(), dlab.data(), dl.data(), rows, cols);
    REQUIRE(l_gpu == Approx(l_cpu).epsilon(kRelTol));
    REQUIRE(max_rel_err(to_host(*p.gpu, dl), grad, 1e-3) < kRelTol);
  }
}

TEST_CASE("cuda optimizers match the cpu backend", "[cuda]") {
  GT_REQUIRE_GPU();
  Pair p;
  const std::size_t n = 269322;  // the mlp:784-256-256-10 arena
  auto w = random_floats(n, 9);
  auto dw = to_device(*p.gpu, w);

  SECTION("sgd momentum") {
    std::vector<float> v(n, 0.0f);
    DeviceBuffer<float> dv(*p.gpu, n);
    for (int step = 0; step < 3; ++step) {
      auto g = random_floats(n, 100 + step);
      auto dg = to_device(*p.gpu, g);
      p.cpu->sgd_momentum(w.data(), g.data(), v.data(), n, 0.02f, 0.9f, 5e-4f);
      p.gpu->sgd_momentum(dw.data(), dg.data(), dv.data(), n, 0.02f, 0.9f, 5e-4f);
    }
    REQUIRE(max_rel_err(to_host(*p.gpu, dw), w) < kRelTol);
    REQUIRE(max_rel_err(to_host(*p.gpu, dv), v) < kRelTol);
  }
  SECTION("adam") {
    std::vector<float> m(n, 0.0f), v(n, 0.0f);
    DeviceBuffer<float> dm(*p.gpu, n), dv(*p.gpu, n);
    for (std::int64_t t = 1; t <= 3; ++t) {
      auto g = random_floats(n, 200 + std::uint32_t(t));
      auto dg = to_device(*p.gpu, g);
      p.cpu->adam(w.data(), g.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, t);
      p.gpu->adam(dw.data(), dg.data(), dm.data(), dv.data(), n, 1e-3f, 0.9f, 0.999f, 1e-8f,
                  0.01f, t);
    }
    REQUIRE(max_rel_err(to_host(*p.gpu, dw), w) < kRelTol);
    REQUIRE(max_rel_err(to_host(*p.gpu, dm), m) < kRelTol);
    REQUIRE(max_rel_err(to_host(*p.gpu, dv), v, 1e-6) < kRelTol);
  }
}

TEST_CASE("cuda mix and reductions match the cpu backend", "[cuda]") {
  GT_REQUIRE_GPU();
  Pair p;
  const std::size_t n = 269322;
  auto x = random_floats(n, 12), r = random_floats(n, 13), s = random_floats(n, 14);
  auto dx = to_device(*p.gpu, x), dr = to_device(*p.gpu, r), ds = to_device(*p.gpu, s);

  p.cpu->mix(x.data(), r.data(), s.data(), n, 0.5f);
  p.gpu->mix(dx.data(), dr.data(), ds.data(), n, 0.5f);
  REQUIRE(max_rel_err(to_host(*p.gpu, dx), x) < kRelTol);

  const double sq_cpu = p.cpu->sq_diff_norm(r.data(), s.data(), n);
  const double sq_gpu = p.gpu->sq_diff_norm(dr.data(), ds.data(), n);
  REQUIRE(sq_gpu == Approx(sq_cpu).epsilon(1e-9));
  REQUIRE(p.gpu->sq_diff_norm(dr.data(), dr.data(), n) == 0.0);

  REQUIRE(p.gpu->all_finite(dx.data(), n));
  for (std::size_t pos : {std::size_t(0), n / 2, n - 1}) {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      auto y = x;
      y[pos] = bad;
      auto dy = to_device(*p.gpu, y);
      INFO("pos " << pos << " value " << bad);
      REQUIRE_FALSE(p.gpu->all_finite(dy.data(), n));
      REQUIRE(p.gpu->all_finite(dy.data(), pos));  // the prefix before it is clean
    }
  }
}

TEST_CASE("cuda wire encodings are bit-identical to the cpu backend's and round trip", "[cuda]") {
  GT_REQUIRE_GPU();
  Pair p;
  const std::size_t n = 269322;  // ends with a partial block (and a partial int2 byte)
  auto x = random_floats(n, 15, -3.0f, 3.0f);
  for (std::size_t i = 512; i < 768; ++i) x[i] = 0.0f;  // an all-zero int8 block
  // Special values: fp16 overflow, subnormals, rounding ties, signed zero, inf and nan.
  const float specials[] = {65504.0f, 65520.0f, 1e-7f, -6e-8f, 1.0f + 0x1p-11f, -0.0f,
                            std::numeric_limits<float>::infinity(), 3e38f,
                            std::numeric_limits<float>::quiet_NaN(), 0x1p-25f, 0x1.8p-25f};
  std::memcpy(x.data() + 2000, specials, sizeof specials);  // in an int8 block of its own
  auto dx = to_device(*p.gpu, x);

  for (Wire w : {Wire::Fp32, Wire::Fp16, Wire::Bf16, Wire::Int8, Wire::Int4, Wire::Int2}) {
    INFO("wire " << wire_name(w));
    const std::size_t bytes = encoded_size(w, n);
    std::vector<unsigned char> enc_cpu(bytes);
    p.cpu->encode(w, x.data(), n, enc_cpu.data());
    DeviceBuffer<unsigned char> enc_gpu(*p.gpu, bytes);
    p.gpu->encode(w, dx.data(), n, enc_gpu.data());
    REQUIRE(to_host(*p.gpu, enc_gpu) == enc_cpu);

    std::vector<float> dec_cpu(n);
    p.cpu->decode(w, enc_cpu.data(), n, dec_cpu.data());
    DeviceBuffer<float> dec_gpu(*p.gpu, n);
    p.gpu->decode(w, enc_gpu.data(), n, dec_gpu.data());
    auto back = to_host(*p.gpu, dec_gpu);
    // Bit for bit, except that a NaN made by arithmetic (int8: 0 * an inf scale) has the
    // platform's default bits (0xffc00000 on x86, 0x7fffffff on the GPU).
    for (std::size_t i = 0; i < n; ++i) {
      if (std::isnan(back[i]) && std::isnan(dec_cpu[i])) continue;
      INFO("index " << i);
      REQUIRE(std::memcmp(&back[i], &dec_cpu[i], sizeof(float)) == 0);
    }
    if (w == Wire::Fp32) REQUIRE(std::memcmp(back.data(), x.data(), n * sizeof(float)) == 0);
    // Round trip within the encoding's bound on the ordinary values.
    const double bound = w == Wire::Fp32 ? 0.0
                         : w == Wire::Fp16 ? 3.0 * 0x1p-11
                         : w == Wire::Bf16 ? 3.0 * 0x1p-8
                                           : 3.0 / wire_qmax(w) * 0.5 * (1.0 + 1e-5);
    for (std::size_t i = 0; i < 1792; ++i) REQUIRE(std::fabs(double(back[i]) - x[i]) <= bound);
  }
}

TEST_CASE("cuda gather and softmax_xent_acc match the cpu backend", "[cuda]") {
  GT_REQUIRE_GPU();
  Pair p;
  for (int cols : {784, 13}) {  // the float4 path and the scalar one
    const int n = 300, rows = 128;
    auto x = random_floats(std::size_t(n) * cols, 41);
    auto y = random_labels(n, 10, 42);
    std::vector<std::int32_t> idx(rows);
    for (int i = 0; i < rows; ++i) idx[i] = (i * 97 + 5) % n;
    auto dx = to_device(*p.gpu, x);
    auto dy = to_device(*p.gpu, y);
    auto didx = to_device(*p.gpu, idx);
    std::vector<float> want(std::size_t(rows) * cols);
    std::vector<std::int32_t> want_y(rows);
    p.cpu->gather_batch(x.data(), y.data(), idx.data(), rows, cols, want.data(), want_y.data());
    DeviceBuffer<float> gx(*p.gpu, want.size());
    DeviceBuffer<std::int32_t> gy(*p.gpu, rows);
    p.gpu->gather_batch(dx.data(), dy.data(), didx.data(), rows, cols, gx.data(), gy.data());
    INFO("cols " << cols);
    REQUIRE(to_host(*p.gpu, gx) == want);
    REQUIRE(to_host(*p.gpu, gy) == want_y);
  }
  const int rows = 64, cols = 10;
  double acc_cpu = 0.0;
  DeviceBuffer<double> acc_gpu(*p.gpu, 1);
  for (std::uint32_t seed = 1; seed <= 3; ++seed) {
    auto logits = random_floats(std::size_t(rows) * cols, seed, -4.0f, 4.0f);
    auto labels = random_labels(rows, cols, seed + 7);
    std::vector<float> grad(logits.size());
    auto dl = to_device(*p.gpu, logits);
    auto dlab = to_device(*p.gpu, labels);
    p.cpu->softmax_xent_acc(logits.data(), labels.data(), grad.data(), rows, cols, &acc_cpu);
    p.gpu->softmax_xent_acc(dl.data(), dlab.data(), dl.data(), rows, cols, acc_gpu.data());
    REQUIRE(max_rel_err(to_host(*p.gpu, dl), grad, 1e-3) < kRelTol);
  }
  REQUIRE(to_host(*p.gpu, acc_gpu)[0] == Approx(acc_cpu).epsilon(kRelTol));
}

TEST_CASE("cuda gemm in tf32 and bf16 stays within each precision's bound of fp32", "[cuda]") {
  GT_REQUIRE_GPU();
  Pair p;
  // Inputs rounded to a mantissa of p bits err by up to u = 2^-(p+1) each (tf32: p = 10,
  // u = 4.9e-4; bf16: p = 7, u = 3.9e-3). Over K = 784 products of random sign the result errs by
  // about sqrt(K) * u * E|ab| (0.25 here), against entries up to about 4 sqrt(K) / 3 = 37: a
  // normwise error near 1e-3 * (u / 3.9e-3) at the worst entry. The bounds below are about twice
  // that; measured on an H100: tf32 ~1e-3 of max|C| per entry relative, see the INFO line.
  struct Case {
    Precision prec;
    double tol;  // max |gpu - exact| / max |exact|
  };
  auto normwise = [](const std::vector<float>& got, const std::vector<float>& want) {
    double err = 0.0, top = 0.0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      err = std::max(err, std::fabs(double(got[i]) - double(want[i])));
      top = std::max(top, std::fabs(double(want[i])));
    }
    return err / top;
  };
  for (Case c : {Case{Precision::Tf32, 2e-3}, Case{Precision::Bf16, 1.5e-2}}) {
    p.gpu->set_precision(c.prec);
    REQUIRE(p.gpu->precision() == c.prec);
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const int M = 256, N = 256, K = 784;
      auto A = random_floats(std::size_t(M) * K, 50 + t);
      auto B = random_floats(std::size_t(K) * N, 60 + t);
      std::vector<float> C(std::size_t(M) * N, 0.0f);
      gemm_ref(ta, tb, M, N, K, 1.0f, A, B, 0.0f, C);
      auto dA = to_device(*p.gpu, A);
      auto dB = to_device(*p.gpu, B);
      DeviceBuffer<float> dC(*p.gpu, C.size());
      p.gpu->gemm(ta, tb, M, N, K, 1.0f, dA.data(), dB.data(), 0.0f, dC.data());
      const double err = normwise(to_host(*p.gpu, dC), C);
      INFO(precision_name(c.prec) << " ta=" << ta << " tb=" << tb << " normwise err " << err);
      REQUIRE(err < c.tol);
      // and it really is not fp32 (~1e-7 here): the rounding of the inputs shows
      CHECK(err > 1e-5);
    }
  }
  p.gpu->set_precision(Precision::Fp32);
}

namespace {

// Trains mlp:20-32-3 for 2 epochs on a small separable dataset; returns the final test loss.
double train_tiny(Backend& be) {
  gossiptrain::core::Dataset d;
  d.features = 20;
  d.classes = 3;
  gossiptrain::base::SplitMix64 r(11);
  for (int i = 0; i < 480; ++i) {
    const int c = i % 3;
    d.y.push_back(c);
    for (int f = 0; f < d.features; ++f)
      d.x.push_back(float(r.uniform() * 0.5 + (f % 3 == c ? 0.5 : 0.0)));
  }
  gossiptrain::core::TrainConfig cfg;
  cfg.model = "mlp:20-32-3";
  cfg.batch = 16;
  cfg.epochs = 2;
  cfg.lr = 0.05f;
  cfg.log_every_steps = 7;
  gossiptrain::core::Metrics metrics("", "test");
  gossiptrain::core::Trainer t(be, cfg, d, d, metrics, nullptr);
  std::atomic<bool> stop{false};
  const auto res = t.run(stop);
  REQUIRE(res.final_test_loss.has_value());
  return *res.final_test_loss;
}

}  // namespace

TEST_CASE("cuda training with resident data matches the cpu backend in every precision",
          "[cuda]") {
  GT_REQUIRE_GPU();
  Pair p;
  const double want = train_tiny(*p.cpu);
  // fp32 differs only by summation order; tf32 and bf16 round every product's inputs, and 60
  // steps compound that: the bounds are what each precision needs here, with a margin.
  struct Case {
    Precision prec;
    double tol;
  };
  for (Case c : {Case{Precision::Fp32, 1e-3}, Case{Precision::Tf32, 2e-2},
                 Case{Precision::Bf16, 6e-2}}) {
    p.gpu->set_precision(c.prec);
    const double got = train_tiny(*p.gpu);
    INFO(precision_name(c.prec) << ": cpu loss " << want << ", gpu " << got);
    REQUIRE(got == Approx(want).epsilon(c.tol));
  }
  p.gpu->set_precision(Precision::Fp32);
}
