// The CPU backend: OpenBLAS for the matrix products, plain loops (written so the compiler
// vectorizes them) for everything else. Memory is ordinary aligned host memory.
#pragma once

#include <functional>
#include <memory>

#include "kernels/backend.hpp"
#include "kernels/cpu/loop_pool.hpp"

namespace gossiptrain::kernels {

// Size of the BLAS library's thread pool (OpenBLAS), for every CPU backend of the process. False
// when the BLAS in use offers no such control.
bool set_blas_threads(int n);
int blas_threads();  // 0 when unknown

// ||a - b||^2 of n floats in host memory, on the calling thread, in independent double
// accumulators (vectorized without reassociating a single sum): each range of
// CpuBackend::sq_diff_norm, and the gossip layer's norm of a partner's fp32 vector against our
// snapshot's chunk messages where the backend's memory is not host memory (a GPU's).
double host_sq_diff_norm(const float* a, const float* b, std::size_t n);

class CpuBackend final : public Backend {
 public:
  CpuBackend();
  BackendKind kind() const override { return BackendKind::Cpu; }
  std::string device() const override { return device_; }
  bool host_memory() const override { return true; }
  void set_precision(Precision p) override;
  Precision precision() const override { return Precision::Fp32; }

  void* alloc(std::size_t bytes) override;
  void free(void* p) noexcept override;
  void upload(void* dst, const void* src_host, std::size_t bytes) override;
  void download(void* dst_host, const void* src, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void fill(float* x, std::size_t n, float v) override;
  void synchronize() override {}

  void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
            const float* B, float beta, float* C) override;
  void bias_act_forward(float* y, const float* b, int rows, int cols, Act act) override;
  void bias_act_backward(float* dy, const float* y, float* db, int rows, int cols,
                         Act act) override;
  float softmax_xent(const float* logits, const std::int32_t* labels, float* dlogits, int rows,
                     int cols) override;
  void eval_batch(const float* logits, const std::int32_t* labels, int rows, int cols,
                  std::int64_t* correct, double* loss_sum) override;
  void softmax_xent_acc(const float* logits, const std::int32_t* labels, float* dlogits, int rows,
                        int cols, double* loss_acc) override;
  void gather_batch(const float* x_src, const std::int32_t* y_src, const std::int32_t* idx,
                    int rows, int cols, float* x_dst, std::int32_t* y_dst) override;

  // kernels/cpu/conv.cpp
  void im2col(const float* x, int n, int h, int w, int c, int k, int stride, int pad,
              float* col) override;
  void col2im(const float* col, int n, int h, int w, int c, int k, int stride, int pad,
              float* dx) override;
  void maxpool_forward(const float* x, int n, int h, int w, int c, int k, float* y,
                       std::int32_t* idx) override;
  void maxpool_backward(const float* dy, const std::int32_t* idx, int n, int h, int w, int c, int k,
                        float* dx) override;

  void sgd_momentum(float* w, const float* g, float* v, std::size_t n, float lr, float momentum,
                    float weight_decay) override;
  void qgm(float* w, const float* g, float* m, float* xprev, std::size_t n, float lr,
           float inv_lr_prev, float beta, float mu, float weight_decay) override;
  void adam(float* w, const float* g, float* m, float* v, std::size_t n, float lr, float b1,
            float b2, float eps, float weight_decay, std::int64_t t) override;

  void mix(float* x, const float* r, const float* s, std::size_t n, float w) override;
  bool all_finite(const float* x, std::size_t n) override;
  double sq_diff_norm(const float* a, const float* b, std::size_t n) override;

  void encode(Wire w, const float* x, std::size_t n, void* out) override;
  void decode(Wire w, const void* in, std::size_t n, float* x) override;

 private:
  // Runs fn(part, lo, hi) over [0, n) on the loop pool with `workers` helpers (default helpers():
  // as many as BLAS has threads beyond this one).
  void parallel(std::size_t n, const std::function<void(std::size_t, std::size_t, std::size_t)>& fn,
                unsigned workers = helpers());
  static unsigned helpers();

  std::string device_;
  LoopPool pool_;
};

}  // namespace gossiptrain::kernels
