// The Backend interface: every numeric operation of a training step, of averaging and of the wire
// encodings goes through it. Two implementations: cpu (OpenBLAS + loops) and cuda (cuBLAS + ours).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gossiptrain::kernels {

// Thrown for any backend failure (CUDA error, unavailable device, bad argument); the message names
// the call site.
struct BackendError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Act { None, Relu };

// The backends' encodings of parameter vectors (docs/exchange.md, "Wire encodings"). What goes
// between peers is a gossip::WireFormat (gossip/exchange/wire_format.hpp): these, and int4-rel,
// which the averager encodes on the host.
enum class Wire { Fp32, Fp16, Bf16, Int8, Int4, Int2 };
// Floats per block of the blockwise wires (int8, int4, int2); each block has one fp32 scale.
constexpr std::size_t kInt8BlockSize = 256;
// The blockwise wires: their fp32 block scales come first, then the packed values.
constexpr bool is_blockwise(Wire w) {
  return w == Wire::Int8 || w == Wire::Int4 || w == Wire::Int2;
}
// The largest code of a blockwise wire: values are round(x / scale) in [-q, q], scale = max|x| / q.
constexpr int wire_qmax(Wire w) { return w == Wire::Int8 ? 127 : w == Wire::Int4 ? 7 : 1; }
// Values per byte of a blockwise wire: 1 (int8), 2 (int4), 4 (int2).
constexpr std::size_t wire_values_per_byte(Wire w) {
  return w == Wire::Int4 ? 2 : w == Wire::Int2 ? 4 : 1;
}

// Arithmetic of the matrix products (gemm). Parameters, gradients and optimizer state stay fp32
// whatever the precision: tf32 and bf16 only change how the products multiply (tensor cores,
// fp32 accumulation).
enum class Precision { Fp32, Tf32, Bf16 };
// Parses "fp32|tf32|bf16"; throws std::invalid_argument otherwise.
Precision parse_precision(std::string_view s);
std::string_view precision_name(Precision p);

// "fp32", "fp16", "bf16", "int8", "int4", "int2" (the --wire spellings).
std::string_view wire_name(Wire w);
// Bytes needed to encode n floats. Int8 layout: ceil(n/256) fp32 scales, then n int8 values;
// int4 and int2: the same scales, then ceil(n/2) or ceil(n/4) bytes of packed codes.
std::size_t encoded_size(Wire w, std::size_t n);
// Bytes of one value of an element-wise encoding: 4 (fp32), 2 (fp16, bf16); the blockwise ones
// (scales first, see is_blockwise): 1.
constexpr std::size_t wire_value_bytes(Wire w) {
  return w == Wire::Fp32 ? 4 : (w == Wire::Fp16 || w == Wire::Bf16) ? 2 : 1;
}

// The --backend setting: the backend make_backend builds (auto: cuda when a device is present,
// else cpu), and the kind of a built one (cpu or cuda).
enum class BackendKind { Auto, Cpu, Cuda };
// The flag spellings "auto", "cpu", "cuda".
std::string_view to_string(BackendKind k);
// Reads a flag spelling; std::invalid_argument for any other text.
void from_string(std::string_view text, BackendKind& out);

// All pointers passed to a Backend method are "device" pointers obtained from alloc() of that same
// backend (host memory for cpu), unless the name says host. Matrices are row-major.
// Methods may run asynchronously on the backend's stream; methods returning a value from the device
// (softmax_xent, count_correct, all_finite, sq_diff_norm) synchronize. download() synchronizes.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;                                // Cpu or Cuda
  std::string name() const { return std::string(to_string(kind())); }  // "cpu" or "cuda"
  virtual std::string device() const = 0;  // human-readable, e.g. "NVIDIA H100 80GB HBM3"
  // True when device pointers are host pointers (cpu): host memory may then be passed to any
  // method, which lets callers skip upload/download copies.
  virtual bool host_memory() const { return false; }
  // The arithmetic of gemm() from now on. Fp32 is the default everywhere; a backend that cannot
  // compute in p throws BackendError saying so (the cpu backend: fp32 only).
  virtual void set_precision(Precision p) = 0;
  virtual Precision precision() const = 0;

  // ---- memory ----
  virtual void* alloc(std::size_t bytes) = 0;  // zero-filled; throws BackendError on failure
  virtual void free(void* p) noexcept = 0;
  virtual void upload(void* dst, const void* src_host, std::size_t bytes) = 0;
  virtual void download(void* dst_host, const void* src, std::size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void fill(float* x, std::size_t n, float v) = 0;
  virtual void synchronize() = 0;

  // ---- dense layers ----
  // C[M,N] = alpha * op(A) * op(B) + beta * C, row-major; op(A) is [M,K], op(B) is [K,N].
  virtual void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                    const float* B, float beta, float* C) = 0;
  // y[rows,cols] = act(y + b[cols]) in place.
  virtual void bias_act_forward(float* y, const float* b, int rows, int cols, Act act) = 0;
  // Given dy (gradient w.r.t. the activated output y, which holds act(...)): dy <- dy * act'(y)
  // in place, and db[cols] = sum over rows of the result (overwritten, not accumulated).
  virtual void bias_act_backward(float* dy, const float* y, float* db, int rows, int cols,
                                 Act act) = 0;
  // Softmax cross-entropy over rows of logits[rows,cols] with integer labels (int32, device).
  // Writes dlogits = (softmax - onehot) / rows (may alias logits) and returns the mean loss.
  virtual float softmax_xent(const float* logits, const std::int32_t* labels, float* dlogits,
                             int rows, int cols) = 0;
  // Number of rows whose argmax equals the label, and the summed (not mean) cross-entropy loss.
  virtual void eval_batch(const float* logits, const std::int32_t* labels, int rows, int cols,
                          std::int64_t* correct, double* loss_sum) = 0;
  // As softmax_xent, without waiting: adds the batch's mean loss to *loss_acc (one device double),
  // which the caller reads back when it needs it. An out-of-range label makes *loss_acc NaN (cuda)
  // or throws (cpu).
  virtual void softmax_xent_acc(const float* logits, const std::int32_t* labels, float* dlogits,
                                int rows, int cols, double* loss_acc) = 0;

  // ---- data resident on the device ----
  // A batch from a resident dataset, in one pass: x_dst[i, :] = x_src[idx[i], :] (row-major, cols
  // floats a row) and y_dst[i] = y_src[idx[i]] for i < rows. idx holds valid row numbers of the
  // source (the caller's own shuffled order).
  virtual void gather_batch(const float* x_src, const std::int32_t* y_src, const std::int32_t* idx,
                            int rows, int cols, float* x_dst, std::int32_t* y_dst) = 0;

  // ---- convolution and pooling (images are NHWC: x[n][h][w][c], row-major) ----
  // Geometry of a 2-D convolution or pooling window; see conv_out().
  // im2col: col[n*oh*ow, k*k*c] with each row one output position's patch in (ky, kx, c) order;
  // positions outside the image (padding) are 0. A convolution is then one gemm with W[oc, k*k*c].
  virtual void im2col(const float* x, int n, int h, int w, int c, int k, int stride, int pad,
                      float* col) = 0;
  // The adjoint of im2col: dx[n,h,w,c] (overwritten) = the sum of every col entry that im2col
  // would have read from that pixel.
  virtual void col2im(const float* col, int n, int h, int w, int c, int k, int stride, int pad,
                      float* dx) = 0;
  // Max-pooling over k*k windows with stride k (floor: a partial window at the edge is dropped):
  // y[n, h/k, w/k, c]; idx (int32, same shape) holds where each max came from, as the index
  // (iy * w + ix) * c + ch within its image (the first in the window wins ties).
  virtual void maxpool_forward(const float* x, int n, int h, int w, int c, int k, float* y,
                               std::int32_t* idx) = 0;
  // dx[n,h,w,c] (overwritten) = dy routed to the positions in idx, 0 elsewhere.
  virtual void maxpool_backward(const float* dy, const std::int32_t* idx, int n, int h, int w,
                                int c, int k, float* dx) = 0;

  // ---- optimizers: one pass over the whole parameter arena ----
  // v = momentum * v + (g + wd * w); w -= lr * v
  virtual void sgd_momentum(float* w, const float* g, float* v, std::size_t n, float lr,
                            float momentum, float weight_decay) = 0;
  // Quasi-global momentum (Lin, Karimireddy, Stich, Jaggi, ICML 2021), one step:
  //   m  = mu * m + (1 - mu) * (xprev - w) * inv_lr_prev   (the model's change since the last
  //                                                          step, averaging included, per lr)
  //   xprev = w
  //   w -= lr * (g + wd * w + beta * m)
  // mu = 1 and inv_lr_prev = 0 leave m as it is (the first step, with no previous one).
  virtual void qgm(float* w, const float* g, float* m, float* xprev, std::size_t n, float lr,
                   float inv_lr_prev, float beta, float mu, float weight_decay) = 0;
  // Adam with bias correction at step t (1-based); decoupled weight decay (AdamW) when wd > 0.
  virtual void adam(float* w, const float* g, float* m, float* v, std::size_t n, float lr, float b1,
                    float b2, float eps, float weight_decay, std::int64_t t) = 0;

  // ---- averaging ----
  // x += w * (r - s)
  virtual void mix(float* x, const float* r, const float* s, std::size_t n, float w) = 0;
  virtual bool all_finite(const float* x, std::size_t n) = 0;
  // sum_i (a_i - b_i)^2, accumulated in double
  virtual double sq_diff_norm(const float* a, const float* b, std::size_t n) = 0;

  // ---- wire encodings (device buffers of encoded_size(w, n) bytes) ----
  virtual void encode(Wire w, const float* x, std::size_t n, void* out) = 0;
  virtual void decode(Wire w, const void* in, std::size_t n, float* x) = 0;
};

// Output size along one axis of a k-wide window with this stride and padding (0 if none fits).
constexpr int conv_out(int size, int k, int stride, int pad) {
  return size + 2 * pad < k ? 0 : (size + 2 * pad - k) / stride + 1;
}

// "cpu", "cuda" or "auto" (cuda when a device is present, else cpu; logs the choice).
// Throws BackendError for "cuda" without a device or a build without CUDA, std::invalid_argument
// for an unknown name.
// device: the CUDA device number (cuda and auto); a number past the last device throws
// BackendError naming how many there are.
std::unique_ptr<Backend> make_backend(BackendKind kind, int device = 0);
std::unique_ptr<Backend> make_backend(std::string_view name, int device = 0);  // by its spelling
bool cuda_available();  // built with CUDA and at least one device visible
int cuda_devices();     // devices visible (0 without CUDA)

// Owning device buffer of T, tied to one backend.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& be, std::size_t n) : be_(&be), n_(n) {
    if (n) p_ = static_cast<T*>(be.alloc(n * sizeof(T)));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    DeviceBuffer tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  ~DeviceBuffer() {
    if (p_) be_->free(p_);
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  std::size_t size() const { return n_; }
  std::size_t bytes() const { return n_ * sizeof(T); }

 private:
  void swap(DeviceBuffer& o) noexcept {
    std::swap(be_, o.be_);
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
  }
  Backend* be_ = nullptr;
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace gossiptrain::kernels
