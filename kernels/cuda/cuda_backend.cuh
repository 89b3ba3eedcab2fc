// The CUDA backend: cuBLAS for the matrix products, our kernels (kernels/cuda/*.cu) for the rest.
// One stream and one cuBLAS handle per backend object; parameters never leave the device.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "kernels/backend.hpp"

namespace gossiptrain::kernels::cuda {

// Device scalars the reductions write, mirrored in pinned host memory for the one read back.
struct Scratch {
  double loss_sum;
  double sq_norm;
  unsigned long long correct;
  int non_finite;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  BackendKind kind() const override { return BackendKind::Cuda; }
  std::string device() const override { return device_name_; }
  void set_precision(Precision p) override { precision_ = p; }
  Precision precision() const override { return precision_; }

  void* alloc(std::size_t bytes) override;
  void free(void* p) noexcept override;
  void upload(void* dst, const void* src_host, std::size_t bytes) override;
  void download(void* dst_host, const void* src, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void fill(float* x, std::size_t n, float v) override;
  void synchronize() override;

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

  // kernels/cuda/conv.cu
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
  // kernels/cuda/qgm.cu
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
  // Copies the device scratch into the pinned mirror and waits for the stream.
  const Scratch& read_scratch();
  // Makes this backend's device the calling thread's current one (the exchange calls the backend
  // from its own threads, and the CUDA runtime keeps the current device per thread).
  void bind() const;
  void release() noexcept;

  int device_id_ = 0;
  Precision precision_ = Precision::Fp32;
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  Scratch* scratch_ = nullptr;       // device
  Scratch* host_scratch_ = nullptr;  // pinned host mirror
  double* partials_ = nullptr;       // device, kMaxReduceBlocks doubles for sq_diff_norm
  // Device scratch that grows to the largest request and is kept: the bias gradient's per-chunk
  // sums, and the bf16 copies of a product's inputs (Precision::Bf16).
  struct Scratchpad {
    void* p = nullptr;
    std::size_t bytes = 0;
  };
  void* scratch(Scratchpad& s, std::size_t bytes);
  Scratchpad bias_partials_, bf16_a_, bf16_b_;
};

}  // namespace gossiptrain::kernels::cuda
