// CudaBackend: owns the stream, the cuBLAS handle and the reduction scratch; every method queues
// work on its stream and only the methods that return a value wait for it.
#include "kernels/cuda/cuda_backend.cuh"

#include <cmath>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_factory.hpp"
#include "kernels/cuda/launchers.cuh"

namespace gossiptrain::kernels {

int cuda_device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error so later calls do not trip over it
    return 0;
  }
  return n;
}

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<cuda::CudaBackend>(); }

namespace cuda {

CudaBackend::CudaBackend() {
  try {
    CUDA_CHECK(cudaGetDevice(&device_id_));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device_id_));
    device_name_ = std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
                   std::to_string(prop.minor) + ")";
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

void CudaBackend::release() noexcept {
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
  // cudaFree waits for the device; an error here would also surface at the next checked call.
  if (p) (void)cudaFree(p);
}

void CudaBackend::upload(void* dst, const void* src_host, std::size_t bytes) {
  if (!bytes) return;
  // From pageable memory this returns once the source has been staged, so the caller may reuse it.
  CUDA_CHECK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::download(void* dst_host, const void* src, std::size_t bytes) {
  if (!bytes) return;
  CUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy(void* dst, const void* src, std::size_t bytes) {
  if (!bytes || dst == src) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::fill(float* x, std::size_t n, float v) { cuda::fill(x, n, v, stream_); }

void CudaBackend::synchronize() { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

// ---- dense layers ----

// Row-major C[M,N] = op(A) op(B) is column-major C^T[N,M] = op(B)^T op(A)^T: pass B first, with
// the row-major leading dimensions unchanged.
void CudaBackend::gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                       const float* A, const float* B, float beta, float* C) {
  if (M < 0 || N < 0 || K < 0) throw BackendError("cuda gemm: negative dimension");
  if (M == 0 || N == 0) return;
  const int lda = trans_a ? M : K;
  const int ldb = trans_b ? K : N;
  CUBLAS_CHECK(cublasSgemm(blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                           trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B,
                           ldb > 0 ? ldb : 1, A, lda > 0 ? lda : 1, &beta, C, N));
}

void CudaBackend::bias_act_forward(float* y, const float* b, int rows, int cols, Act act) {
  if (rows < 0 || cols < 0) throw BackendError("cuda bias_act_forward: negative dimension");
  cuda::bias_act_forward(y, b, rows, cols, act, stream_);
}

void CudaBackend::bias_act_backward(float* dy, const float* y, float* db, int rows, int cols,
                                    Act act) {
  if (rows < 0 || cols < 0) throw BackendError("cuda bias_act_backward: negative dimension");
  cuda::bias_act_backward(dy, y, db, rows, cols, act, stream_);
}

float CudaBackend::softmax_xent(const float* logits, const std::int32_t* labels, float* dlogits,
                                int rows, int cols) {
  if (rows < 0 || cols < 0) throw BackendError("cuda softmax_xent: negative dimension");
  if (rows == 0) return 0.0f;
  if (cols == 0) throw BackendError("cuda softmax_xent: zero classes");
  CUDA_CHECK(cudaMemsetAsync(&scratch_->loss_sum, 0, sizeof(double), stream_));
  cuda::softmax_xent(logits, labels, dlogits, rows, cols, &scratch_->loss_sum, stream_);
  return static_cast<float>(read_scratch().loss_sum / rows);
}

void CudaBackend::eval_batch(const float* logits, const std::int32_t* labels, int rows, int cols,
                             std::int64_t* correct, double* loss_sum) {
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
  cuda::sgd_momentum(w, g, v, n, lr, momentum, weight_decay, stream_);
}

void CudaBackend::adam(float* w, const float* g, float* m, float* v, std::size_t n, float lr,
                       float b1, float b2, float eps, float weight_decay, std::int64_t t) {
  if (t < 1) throw BackendError("cuda adam: step t must be >= 1, got " + std::to_string(t));
  const double bc1 = 1.0 - std::pow(double(b1), double(t));
  const double bc2 = 1.0 - std::pow(double(b2), double(t));
  cuda::adam(w, g, m, v, n, b1, b2, eps, static_cast<float>(lr / bc1),
             static_cast<float>(1.0 / std::sqrt(bc2)), lr * weight_decay, stream_);
}

// ---- averaging ----

void CudaBackend::mix(float* x, const float* r, const float* s, std::size_t n, float w) {
  cuda::mix(x, r, s, n, w, stream_);
}

bool CudaBackend::all_finite(const float* x, std::size_t n) {
  if (!n) return true;
  CUDA_CHECK(cudaMemsetAsync(&scratch_->non_finite, 0, sizeof(int), stream_));
  cuda::any_non_finite(x, n, &scratch_->non_finite, stream_);
  return read_scratch().non_finite == 0;
}

double CudaBackend::sq_diff_norm(const float* a, const float* b, std::size_t n) {
  if (!n) return 0.0;
  cuda::sq_diff_norm(a, b, n, partials_, &scratch_->sq_norm, stream_);
  return read_scratch().sq_norm;
}

// ---- wire encodings ----

void CudaBackend::encode(Wire w, const float* x, std::size_t n, void* out) {
  cuda::encode(w, x, n, out, stream_);
}

void CudaBackend::decode(Wire w, const void* in, std::size_t n, float* x) {
  cuda::decode(w, in, n, x, stream_);
}

}  // namespace cuda
}  // namespace gossiptrain::kernels
