// The model: a multilayer perceptron or a convolutional network whose parameters (and gradients)
// live in one flat arena on the backend's device, plus the model fingerprint that peers compare
// before averaging. Every numeric step goes through the Backend.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/backend.hpp"

namespace gossiptrain::core {

enum class LayerKind : std::int32_t { Dense = 0, Conv = 1, Pool = 2 };

// One layer. Images are NHWC; a dense layer sees its input flattened (in = in_h * in_w * in_c).
struct Layer {
  LayerKind kind = LayerKind::Dense;
  // The layer's matrix product: out[rows, out] = in[rows, in] * W[out, in]^T with rows = batch *
  // out_h * out_w. Dense: features in and out. Conv: in = k * k * in_c (one im2col row), out =
  // out channels. Pool: 0 and 0 (no parameters).
  int in = 0, out = 0;
  std::size_t w_offset = 0;  // W[out, in] in the arena
  std::size_t b_offset = 0;  // b[out] in the arena
  kernels::Act act = kernels::Act::Relu;
  int in_h = 1, in_w = 1, in_c = 0;     // input geometry
  int out_h = 1, out_w = 1, out_c = 0;  // output geometry (dense: 1 x 1 x out)
  int k = 0, stride = 1, pad = 0;       // conv and pool windows
  std::size_t in_size() const { return std::size_t(in_h) * in_w * in_c; }
  std::size_t out_size() const { return std::size_t(out_h) * out_w * out_c; }
  int positions() const { return out_h * out_w; }  // output positions per sample
  bool has_params() const { return kind != LayerKind::Pool; }
};
using LinearLayer = Layer;

// Floats of a model's im2col buffer at most: a convolution over a larger batch runs in chunks.
inline constexpr std::size_t kIm2colBudget = std::size_t(1) << 23;

// Model specs (throw std::invalid_argument with a clear message for anything else):
//   mlp:IN-HIDDEN-...-CLASSES             e.g. mlp:784-256-256-10 (dense layers, ReLU between)
//   cnn:HxWxC-LAYER-...-CLASSES           e.g. cnn:28x28x1-c32k5-p2-c64k5-p2-f512-10
// where each cnn LAYER is cOUTkK (K x K convolution to OUT channels, stride 1, zero padding
// (K-1)/2 so odd K keeps the size, ReLU), pP (P x P max-pooling with stride P), or fUNITS (dense
// layer with ReLU; no convolution or pooling after one); CLASSES is the output layer (dense, no
// activation). Inputs are rows of H*W*C values, channel last (NHWC).
constexpr const char* kModelSpecHelp =
    "mlp:IN-HIDDEN-...-CLASSES (e.g. mlp:784-256-256-10) or cnn:HxWxC-LAYER-...-CLASSES (e.g. "
    "cnn:28x28x1-c32k5-p2-c64k5-p2-f512-10) with LAYER one of cOUTkK (KxK convolution, OUT "
    "channels, stride 1, same padding, ReLU), pP (PxP max-pool, stride P), fUNITS (dense + ReLU)";

// Parses a spec into its layers (offsets in the arena filled in) and checks every size.
std::vector<Layer> parse_model_layers(std::string_view spec);
// The size of the input and of each layer's output, e.g. {784, 256, 256, 10} for
// "mlp:784-256-256-10"; {784, 25088, 6272, ...} for a cnn.
std::vector<int> parse_model_spec(std::string_view spec);
// The parameters (weights and biases) of layers from parse_model_layers: the model's arena.
std::size_t param_count(const std::vector<Layer>& layers);
// The parameters of the model a spec builds (Model::num_params of it, without building it): the
// one count for anything sized from a spec.
std::size_t model_param_count(std::string_view spec);

class Model {
 public:
  // max_batch bounds the activation buffers; forward/backward take any batch <= max_batch.
  Model(kernels::Backend& be, std::string_view spec, int max_batch);

  const std::string& spec() const { return spec_; }
  const std::vector<Layer>& layers() const { return layers_; }
  std::size_t num_params() const { return num_params_; }
  int input_dim() const { return int(layers_.front().in_size()); }
  int num_classes() const { return layers_.back().out; }
  int max_batch() const { return max_batch_; }
  bool convolutional() const { return conv_; }
  // Hash of the layer list and shapes (FNV-1a 64); peers with different fingerprints never average.
  std::uint64_t fingerprint() const { return fingerprint_; }

  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }

  // He-uniform weights, zero biases, from seed (computed on the host, identical on every backend).
  void init(std::uint64_t seed);

  // Forward pass of x[batch, input_dim] (device); returns the device pointer to logits[batch, C].
  const float* forward(const float* x, int batch);
  // Forward + softmax cross-entropy + backward: fills grads() and returns the mean loss.
  float forward_backward(const float* x, const std::int32_t* y, int batch);
  // The same without waiting for the device: adds the batch's mean loss to *loss_acc (a device
  // double), so a training loop reads the loss back only when it needs it.
  void forward_backward_acc(const float* x, const std::int32_t* y, int batch, double* loss_acc);

  // A per-class offset added to the logits in training only (forward_backward*), never in
  // forward(): training takes softmax(z + offset), evaluation softmax(z). num_classes() values
  // (host); empty clears it. See Trainer, TrainConfig::logit_adjust.
  void set_train_logit_offset(const std::vector<float>& offset);

  // Images per im2col pass of a convolution layer (its column buffer is bounded).
  int conv_chunk(const Layer& l, int batch) const;
  // At most this many images per im2col pass (tests use it to exercise the chunking); 0: no limit.
  void limit_conv_chunk(int images) { chunk_limit_ = images; }

 private:
  // Gradients from the dlogits left in the last activation buffer, for the input x.
  void backward(const float* x, int batch);
  void conv_forward(const Layer& l, const float* in, float* out, int batch);
  // dout holds the gradient w.r.t. the pre-activation output; din may be null (first layer).
  void conv_backward(const Layer& l, const float* in, const float* dout, float* din, int batch);
  void dense_backward(const Layer& l, const float* in, const float* dout, float* din, int batch);
  void ensure_deltas(int batch);

  kernels::Backend& be_;
  std::string spec_;
  std::vector<Layer> layers_;
  std::size_t num_params_ = 0;
  int max_batch_ = 0;
  bool conv_ = false;
  std::uint64_t fingerprint_ = 0;
  kernels::DeviceBuffer<float> params_, grads_;
  std::vector<kernels::DeviceBuffer<float>> acts_;    // output of each layer [max_batch, out_size]
  std::vector<kernels::DeviceBuffer<float>> deltas_;  // gradient w.r.t. each layer's output but
                                                      // the last, allocated on the first backward
  int chunk_limit_ = 0;
  int delta_batch_ = 0;                                        // batch the deltas hold
  std::vector<kernels::DeviceBuffer<std::int32_t>> pool_idx_;  // per layer (empty unless pool)
  kernels::DeviceBuffer<float> col_;                           // im2col buffer, shared by layers
  kernels::DeviceBuffer<float> logit_offset_;                  // training only; empty: none
  // The logits of the last forward() with the training offset added (forward_backward*).
  const float* train_logits(const float* x, int batch);
};

using Mlp = Model;  // the name before convolutions; the trainer and apps still use it

}  // namespace gossiptrain::core
