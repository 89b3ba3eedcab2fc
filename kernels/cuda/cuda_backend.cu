// CudaBackend: owns the stream, the cuBLAS handle and the reduction scratch; every method queues
// work on its stream and only the methods that return a value wait for it.
#include "kernels/cuda/cuda_backend.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_factory.hpp"
#include "kernels/cuda/launchers.cuh"

namespace gossiptrain::kernels {

namespace cuda {

namespace {

// GT_CUDA_WAIT=spin|yield|block: how a thread waits for the GPU (cudaDeviceSchedule*). CUDA's own
// default spins while a process has fewer contexts than the machine has cores, which is every
// peer's case; many peers of one GPU on fewer cores then spin against each other. Unset or empty:
// CUDA's default. Set before the device's context exists; a refusal is said and ignored.
void apply_wait_policy(int device) {
  const char* v = std::getenv("GT_CUDA_WAIT");
  if (v == nullptr || *v == '\0') return;
  const std::string w(v);
  unsigned flags = 0;
  if (w == "spin") flags = cudaDeviceScheduleSpin;
  else if (w == "yield") flags = cudaDeviceScheduleYield;
  else if (w == "block") flags = cudaDeviceScheduleBlockingSync;
  else {
    std::fprintf(stderr, "GT_CUDA_WAIT=%s ignored: expected spin, yield or block\n", v);
    return;
  }
  const cudaError_t e = cudaSetDeviceFlags(flags);
  if (e != cudaSuccess)
    std::fprintf(stderr, "GT_CUDA_WAIT=%s not applied on device %d: %s\n", v, device,
                 cudaGetErrorString(e));
}

}  // namespace

CudaBackend::CudaBackend(int device) : device_id_(device) {
  try {
    CUDA_CHECK(cudaSetDevice(device_id_));
    apply_wait_policy(device_id_);
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device_id_));
    device_name_ = std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
                   std::to_string(prop.minor) + ", device " + std::to_string(device_id_) + ")";
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&blas_));
    CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    // Plain fp32 products (no TF32): the parity tests and the CPU backend expect fp32 accuracy.
    CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
    CUDA_CHECK(cudaMalloc(&scratch_, sizeof(Scratch)));
    CUDA_CHECK(cudaMalloc(&partials_, kMaxReduceBlocks * sizeof(double)));
    CUDA_CHECK(cudaMallocHost(&host_scratch_, sizeof(Scratch)));
  } catch (...) {
    release();
    throw;
  }
}

CudaBackend::~CudaBackend() { release(); }

void CudaBackend::bind() const {
  // One thread may serve several backends (tests); the runtime call is cheap, but skip it when the
  // thread is already on this device.
  thread_local int current = -1;
  if (current == device_id_) return;
  CUDA_CHECK(cudaSetDevice(device_id_));
  current = device_id_;
}

void* CudaBackend::scratch(Scratchpad& s, std::size_t bytes) {
  if (bytes <= s.bytes) return s.p;
  // The stream may still read the old buffer: cudaFree waits for the device first.
  if (s.p) CUDA_CHECK(cudaFree(s.p));
  s.p = nullptr;
  s.bytes = 0;
  CUDA_CHECK(cudaMalloc(&s.p, bytes));
  s.bytes = bytes;
  return s.p;
}

void CudaBackend::release() noexcept {
  if (stream_) (void)cudaSetDevice(device_id_);
  for (Scratchpad* s : {&bias_partials_, &bf16_a_, &bf16_b_})
    if (s->p) (void)cudaFree(s->p);
  // Errors are ignored: nothing useful can be done about them while tearing down.
  if (stream_) (void)cudaStreamSynchronize(stream_);
  if (host_scratch_) (void)cudaFreeHost(host_scratch_);
  if (partials_) (void)cudaFree(partials_);
  if (scratch_) (void)cudaFree(scratch_);
  if (blas_) (void)cublasDestroy(blas_);
  if (stream_) (void)cudaStreamDestroy(stream_);
  host_scratch_ = nullptr;
  partials_ = nullptr;
  scratch_ = nullptr;
  blas_ = nullptr;
  stream_ = nullptr;
}

const Scratch& CudaBackend::read_scratch() {
  CUDA_CHECK(cudaMemcpyAsync(host_scratch_, scratch_, sizeof(Scratch), cudaMemcpyDeviceToHost,
                             stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return *host_scratch_;
}

// ---- memory ----

void* CudaBackend::alloc(std::size_t bytes) {
  bind();
  void* p = nullptr;
  const std::size_t n = bytes ? bytes : 1;  // a distinct non-null pointer even for 0 bytes
  CUDA_CHECK(cudaMalloc(&p, n));
  try {
    // The stream is non-blocking, so zero on it: later work on the stream sees the zeros.
    CUDA_CHECK(cudaMemsetAsync(p, 0, n, stream_));
  } catch (...) {
    (void)cudaFree(p);
    throw;
  }
  return p;
}

void CudaBackend::free(void* p) noexcept {
  bind();
  // cudaFree waits for the device; an error here would also surface at the next checked call.
  if (p) (void)cudaFree(p);
}

void CudaBackend::upload(void* dst, const void* src_host, std::size_t bytes) {
  bind();
  if (!bytes) return;
  // From pageable memory this returns once the source has been staged, so the caller may reuse it.
  CUDA_CHECK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::download(void* dst_host, const void* src, std::size_t bytes) {
  bind();
  if (!bytes) return;
  CUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy(void* dst, const void* src, std::size_t bytes) {
  bind();
  if (!bytes || dst == src) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::fill(float* x, std::size_t n, float v) {
  bind();
  cuda::fill(x, n, v, stream_);
}

void CudaBackend::synchronize() {
  bind();
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// ---- dense layers ----

// Row-major C[M,N] = op(A) op(B) is column-major C^T[N,M] = op(B)^T op(A)^T: pass B first, with
// the row-major leading dimensions unchanged.
void CudaBackend::gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                       const float* A, const float* B, float beta, float* C) {
  bind();
  if (M < 0 || N < 0 || K < 0) throw BackendError("cuda gemm: negative dimension");
  if (M == 0 || N == 0) return;
  const int lda = std::max(trans_a ? M : K, 1);
  const int ldb = std::max(trans_b ? K : N, 1);
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (precision_ == Precision::Fp32) {  // exactly today's products: plain fp32, no tensor cores
    CUBLAS_CHECK(cublasSgemm(blas_, op_b, op_a, N, M, K, &alpha, B, ldb, A, lda, &beta, C, N));
    return;
  }
  if (precision_ == Precision::Tf32) {
    // Tensor cores on the fp32 matrices rounded to tf32 (10-bit mantissa), fp32 accumulation.
    CUBLAS_CHECK(cublasGemmEx(blas_, op_b, op_a, N, M, K, &alpha, B, CUDA_R_32F, ldb, A,
                              CUDA_R_32F, lda, &beta, C, CUDA_R_32F, N,
                              CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
    return;
  }
  // bf16: both inputs rounded to bf16 (8-bit mantissa, round to nearest even, as the bf16 wire
  // encoding) into scratch, then a bf16 x bf16 product accumulated and written in fp32. The
  // parameters, gradients and optimizer state stay fp32. (cuBLAS's FAST_16BF compute type on
  // fp32 inputs was measured to run the same kernels as tf32 here, so it is not used.)
  const std::size_t na = std::size_t(M) * K, nb = std::size_t(K) * N;
  void* a16 = scratch(bf16_a_, na * 2);
  void* b16 = scratch(bf16_b_, nb * 2);
  cuda::encode(Wire::Bf16, A, na, a16, stream_);
  cuda::encode(Wire::Bf16, B, nb, b16, stream_);
  CUBLAS_CHECK(cublasGemmEx(blas_, op_b, op_a, N, M, K, &alpha, b16, CUDA_R_16BF, ldb, a16,
                            CUDA_R_16BF, lda, &beta, C, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

void CudaBackend::bias_act_forward(float* y, const float* b, int rows, int cols, Act act) {
  bind();
  if (rows < 0 || cols < 0) throw BackendError("cuda bias_act_forward: negative dimension");
  cuda::bias_act_forward(y, b, rows, cols, act, stream_);
}

void CudaBackend::bias_act_backward(float* dy, const float* y, float* db, int rows, int cols,
                                    Act act) {
  bind();
  if (rows < 0 || cols < 0) throw BackendError("cuda bias_act_backward: negative dimension");
  float* partials = nullptr;
  if (const int chunks = cuda::bias_backward_chunks(rows); chunks > 1)
    partials = static_cast<float*>(
        scratch(bias_partials_, std::size_t(chunks) * std::size_t(cols) * sizeof(float)));
  cuda::bias_act_backward(dy, y, db, rows, cols, act, partials, stream_);
}

float CudaBackend::softmax_xent(const float* logits, const std::int32_t* labels, float* dlogits,
                                int rows, int cols) {
  bind();
  if (rows < 0 || cols < 0) throw BackendError("cuda softmax_xent: negative dimension");
  if (rows == 0) return 0.0f;
  if (cols == 0) throw BackendError("cuda softmax_xent: zero classes");
  CUDA_CHECK(cudaMemsetAsync(&scratch_->loss_sum, 0, sizeof(double), stream_));
  cuda::softmax_xent(logits, labels, dlogits, rows, cols, &scratch_->loss_sum, 1.0, stream_);
  return static_cast<float>(read_scratch().loss_sum / rows);
}

void CudaBackend::softmax_xent_acc(const float* logits, const std::int32_t* labels,
                                   float* dlogits, int rows, int cols, double* loss_acc) {
  bind();
  if (rows < 0 || cols < 0) throw BackendError("cuda softmax_xent_acc: negative dimension");
  if (rows == 0) return;
  if (cols == 0) throw BackendError("cuda softmax_xent_acc: zero classes");
  cuda::softmax_xent(logits, labels, dlogits, rows, cols, loss_acc, 1.0 / rows, stream_);
}

void CudaBackend::gather_batch(const float* x_src, const std::int32_t* y_src,
                               const std::int32_t* idx, int rows, int cols, float* x_dst,
                               std::int32_t* y_dst) {
  bind();
  if (rows < 0 || cols < 0) throw BackendError("cuda gather_batch: negative dimension");
  cuda::gather_batch(x_src, y_src, idx, rows, cols, x_dst, y_dst, stream_);
}

void CudaBackend::eval_batch(const float* logits, const std::int32_t* labels, int rows, int cols,
                             std::int64_t* correct, double* loss_sum) {
  bind();
  if (rows < 0 || cols < 0) throw BackendError("cuda eval_batch: negative dimension");
  if (rows > 0 && cols == 0) throw BackendError("cuda eval_batch: zero classes");
  CUDA_CHECK(cudaMemsetAsync(&scratch_->loss_sum, 0, sizeof(double), stream_));
  CUDA_CHECK(cudaMemsetAsync(&scratch_->correct, 0, sizeof(unsigned long long), stream_));
  cuda::eval_batch(logits, labels, rows, cols, &scratch_->correct, &scratch_->loss_sum, stream_);
  const Scratch& s = read_scratch();
  *correct = static_cast<std::int64_t>(s.correct);
  *loss_sum = s.loss_sum;
}

// ---- optimizers ----

void CudaBackend::sgd_momentum(float* w, const float* g, float* v, std::size_t n, float lr,
                               float momentum, float weight_decay) {
  bind();
  cuda::sgd_momentum(w, g, v, n, lr, momentum, weight_decay, stream_);
}

void CudaBackend::adam(float* w, const float* g, float* m, float* v, std::size_t n, float lr,
                       float b1, float b2, float eps, float weight_decay, std::int64_t t) {
  bind();
  if (t < 1) throw BackendError("cuda adam: step t must be >= 1, got " + std::to_string(t));
  const double bc1 = 1.0 - std::pow(double(b1), double(t));
  const double bc2 = 1.0 - std::pow(double(b2), double(t));
  cuda::adam(w, g, m, v, n, b1, b2, eps, static_cast<float>(lr / bc1),
             static_cast<float>(1.0 / std::sqrt(bc2)), lr * weight_decay, stream_);
}

// ---- averaging ----

void CudaBackend::mix(float* x, const float* r, const float* s, std::size_t n, float w) {
  bind();
  cuda::mix(x, r, s, n, w, stream_);
}

bool CudaBackend::all_finite(const float* x, std::size_t n) {
  bind();
  if (!n) return true;
  CUDA_CHECK(cudaMemsetAsync(&scratch_->non_finite, 0, sizeof(int), stream_));
  cuda::any_non_finite(x, n, &scratch_->non_finite, stream_);
  return read_scratch().non_finite == 0;
}

double CudaBackend::sq_diff_norm(const float* a, const float* b, std::size_t n) {
  bind();
  if (!n) return 0.0;
  cuda::sq_diff_norm(a, b, n, partials_, &scratch_->sq_norm, stream_);
  return read_scratch().sq_norm;
}

// ---- wire encodings ----

void CudaBackend::encode(Wire w, const float* x, std::size_t n, void* out) {
  bind();
  cuda::encode(w, x, n, out, stream_);
}

void CudaBackend::decode(Wire w, const void* in, std::size_t n, float* x) {
  bind();
  cuda::decode(w, in, n, x, stream_);
}

}  // namespace cuda
}  // namespace gossiptrain::kernels

extern "C" int gt_cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error so later calls do not trip over it
    return 0;
  }
  return n;
}

extern "C" gossiptrain::kernels::Backend* gt_cuda_make_backend(int device, char* err,
                                                                std::size_t err_len) {
  // Exceptions do not cross the module boundary: the caller rethrows the reason as its own
  // BackendError.
  try {
    return new gossiptrain::kernels::cuda::CudaBackend(device);
  } catch (const std::exception& e) {
    std::snprintf(err, err_len, "%s", e.what());
  } catch (...) {
    std::snprintf(err, err_len, "unknown error creating the CUDA backend");
  }
  return nullptr;
}
