// gossip-bench train: ms/step and samples/s of a real training step (batch gather, forward, loss,
// backward, optimizer) against the same matrix products alone (the floor), measured in one run:
// floor and step rounds interleaved, the fastest round of each taken, so that a load that comes and
// goes slows both or neither (a median taken at different moments read a step faster than its own
// floor under load). The model learns a task it can learn (labels a linear teacher gives), so the
// step timed is a step of a run that converges: the JSON reports the loss's first and last window.
// The step is the training loop's: the data resident on the device, a batch gathered there from a
// shuffled order, the loss read back every --loss-every steps. --data upload measures the old
// loop instead (the batch uploaded from host memory and the loss read back every step).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/bench/bench.hpp"
#include "apps/common/blas.hpp"
#include "apps/common/kernel_flags.hpp"
#include "apps/common/options.hpp"
#include "base/rng.hpp"
#include "core/model.hpp"
#include "kernels/backend.hpp"

namespace gossiptrain::apps {
namespace {

using Clock = std::chrono::steady_clock;

struct TrainBenchOptions {
  std::string backend = "auto", model = "mlp:784-256-256-10";
  kernels::Precision precision = kernels::Precision::Fp32;
  std::string data = "resident", blas_core = "auto";
  int batch = 128, steps = 100, rounds = 7, loss_every = 50, device = 0;
  bool json = false;
};

const OptionTable<TrainBenchOptions>& train_options() {
  using O = Options<TrainBenchOptions>;
  using T = TrainBenchOptions;
  static const auto table = bench_table<TrainBenchOptions>(
      "one line of JSON (default: indented)",
      {
          O::text("backend", "auto|cpu|cuda", "compute backend (default auto)", &T::backend),
          O::number("device", "N", "CUDA device (default 0)", &T::device, 0, 1023),
          O::text("model", "SPEC", "the model (default mlp:784-256-256-10)", &T::model),
          O::number("batch", "B", "minibatch size (default 128)", &T::batch, 1, 1 << 20),
          O::named<kernels::Precision>("precision", precision_values(),
                                       "arithmetic of the matrix products (default fp32)",
                                       &T::precision),
          O::choice(
              "data", {"resident", "upload"},
              "resident (default): the training loop's step, data on the device, loss read every "
              "K steps; upload: batch uploaded and loss read each step",
              &T::data),
          O::number("loss-every", "K",
                    "with resident data: read the loss every K steps (default 50)", &T::loss_every,
                    1, 1000000),
          O::number("steps", "N", "steps per round (default 100)", &T::steps, 1, 1000000),
          O::number("rounds", "R", "rounds (default 7)", &T::rounds, 1, 1000),
          {"blas-core", "auto|keep|CORE", kBlasCoreHelp,
           [](T& o, const std::string& v) { o.blas_core = to_blas_core("blas-core", v); }},
      });
  return table;
}

constexpr const char* kAbout =
    "Times R rounds of N training steps and of N passes of the same matrix products\n"
    "(in the same precision) alone, the floor, interleaved; reports the fastest round of\n"
    "each, their ratio step/floor, and the medians. The model learns labels a linear\n"
    "teacher gives (loss_first_window, last_loss: mean loss per step). resident (default): the training loop's step, data on the device,\n"
    "loss read every K steps (default 50); upload: batch uploaded and loss read each step.\n"
    "For a cnn model the floor is its convolutions' gemms on im2col rows (chunked as\n"
    "the model chunks them) and its dense layers' gemms; im2col, pooling, bias and\n"
    "activations are what the step adds.\n";

// One chunk's gemm of the floor: out[rows, out] = A[rows, in] * W[out, in]^T.
struct Gemm {
  int rows, out, in;
  int chunks;     // chunks of this shape per step
  int tail_rows;  // rows of the last chunk (== rows when it is full)
  std::size_t w_offset;
  bool first;
};

// The model's step and its floor on one backend, with their data.
class StepBench {
 public:
  StepBench(kernels::Backend& be, const TrainBenchOptions& o)
      : be_(be), o_(o), m_(be, o.model, o.batch) {
    m_.init(1);
    make_data();
    plan_floor();
  }

  void train_step() {
    const int batch = o_.batch, F = m_.input_dim();
    const std::size_t lo = std::size_t(step_ % (rows_ / batch)) * batch;
    if (o_.data == "upload") {
      be_.upload(x_.data(), xh_.data() + lo * F, std::size_t(batch) * F * sizeof(float));
      be_.upload(y_.data(), yh_.data() + lo, std::size_t(batch) * sizeof(std::int32_t));
      loss_read_ = m_.forward_backward(x_.data(), y_.data(), batch);  // waits for the loss
      if (first_loss_ < 0) first_loss_ = loss_read_;
    } else {
      be_.gather_batch(xs_.data(), ys_.data(), idx_.data() + lo, batch, F, x_.data(), y_.data());
      m_.forward_backward_acc(x_.data(), y_.data(), batch, loss_acc_.data());
      if ((step_ + 1) % o_.loss_every == 0) read_loss_window();
    }
    be_.sgd_momentum(m_.params(), m_.grads(), vel_.data(), m_.num_params(), kLr, 0.9f, 0.0f);
    ++step_;
  }

  // The same gemm shapes as forward + backward, chunked as the model chunks its convolutions.
  void floor_step() {
    for (const auto& g : gemms_)
      for (int c = 0; c < g.chunks; ++c) {
        const int rows = c + 1 == g.chunks ? g.tail_rows : g.rows;
        be_.gemm(false, true, rows, g.out, g.in, 1.f, fa_.data(), m_.params() + g.w_offset, 0.f,
                 fo_.data());
      }
    for (std::size_t i = gemms_.size(); i-- > 0;) {
      const auto& g = gemms_[i];
      for (int c = 0; c < g.chunks; ++c) {
        const int rows = c + 1 == g.chunks ? g.tail_rows : g.rows;
        be_.gemm(true, false, g.out, g.in, rows, 1.f, fo_.data(), fa_.data(), c ? 1.f : 0.f,
                 dw_.data() + g.w_offset);
        if (!g.first)
          be_.gemm(false, false, rows, g.in, g.out, 1.f, fo_.data(), m_.params() + g.w_offset, 0.f,
                   fa_.data());
      }
    }
  }

  // Milliseconds per call of fn over --steps calls.
  template <class Fn>
  double time_ms(Fn&& fn) {
    be_.synchronize();
    const auto t0 = Clock::now();
    for (int s = 0; s < o_.steps; ++s) fn();
    be_.synchronize();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / o_.steps;
  }

  std::size_t num_params() const { return m_.num_params(); }
  // Mean loss per step: of the last window read (every --loss-every steps; every step with
  // --data upload), and of the first.
  double last_loss() const { return loss_read_; }
  double first_loss() const { return first_loss_; }

 private:
  static constexpr float kLr = 0.01f;

  // The accumulated loss of the last --loss-every steps, as a mean per step; the sum starts again.
  void read_loss_window() {
    double sum = 0.0;
    be_.download(&sum, loss_acc_.data(), sizeof(double));
    loss_read_ = sum / o_.loss_every;
    const double zero = 0.0;
    be_.upload(loss_acc_.data(), &zero, sizeof zero);
    if (first_loss_ < 0) first_loss_ = loss_read_;
  }

  // A row's label: the class whose block of input features sums highest (a linear teacher, which
  // the model can learn; uniform random labels could not be learnt).
  static std::int32_t teacher(const float* x, int F, int C) {
    std::int32_t best = 0;
    double best_sum = -1.0;
    for (int c = 0; c < C; ++c) {
      double sum = 0.0;
      for (int j = c * F / C; j < (c + 1) * F / C; ++j) sum += x[j];
      if (sum > best_sum) best_sum = sum, best = c;
    }
    return best;
  }

  // A dataset of 8 batches (at least 8,192 rows), resident as the trainer keeps its shard, and a
  // shuffled order over it; the upload mode copies each batch from host memory instead.
  void make_data() {
    const int batch = o_.batch, F = m_.input_dim(), C = m_.num_classes();
    rows_ = std::max(8 * batch, 8192);
    xh_.resize(std::size_t(rows_) * F);
    yh_.resize(rows_);
    std::vector<std::int32_t> order(rows_);
    base::SplitMix64 r(1);
    for (auto& v : xh_) v = float(r.uniform());
    for (int i = 0; i < rows_; ++i) yh_[i] = teacher(xh_.data() + std::size_t(i) * F, F, C);
    for (int i = 0; i < rows_; ++i) order[i] = i;
    for (int i = rows_; i > 1; --i) std::swap(order[i - 1], order[r.below(i)]);
    xs_ = kernels::DeviceBuffer<float>(be_, xh_.size());
    x_ = kernels::DeviceBuffer<float>(be_, std::size_t(batch) * F);
    vel_ = kernels::DeviceBuffer<float>(be_, m_.num_params());
    ys_ = kernels::DeviceBuffer<std::int32_t>(be_, rows_);
    y_ = kernels::DeviceBuffer<std::int32_t>(be_, batch);
    idx_ = kernels::DeviceBuffer<std::int32_t>(be_, rows_);
    loss_acc_ = kernels::DeviceBuffer<double>(be_, 1);
    be_.upload(xs_.data(), xh_.data(), xh_.size() * sizeof(float));
    be_.upload(ys_.data(), yh_.data(), yh_.size() * sizeof(std::int32_t));
    be_.upload(idx_.data(), order.data(), order.size() * sizeof(std::int32_t));
  }

  // Scratch for the floor: the gemm shapes of every layer with parameters, chunked as the model
  // chunks its convolutions (their im2col rows). Pooling, im2col and the rest are left out.
  void plan_floor() {
    const int batch = o_.batch;
    std::size_t a_max = 0, o_max = 0;
    for (const auto& l : m_.layers()) {
      if (!l.has_params()) continue;
      const int per = l.positions();
      const int chunk = l.kind == core::LayerKind::Conv ? m_.conv_chunk(l, batch) : batch;
      const int chunks = (batch + chunk - 1) / chunk;
      gemms_.push_back({chunk * per, l.out, l.in, chunks, (batch - (chunks - 1) * chunk) * per,
                        l.w_offset, gemms_.empty()});
      a_max = std::max(a_max, std::size_t(chunk) * per * l.in);
      o_max = std::max(o_max, std::size_t(chunk) * per * l.out);
    }
    fa_ = kernels::DeviceBuffer<float>(be_, a_max);
    fo_ = kernels::DeviceBuffer<float>(be_, o_max);
    dw_ = kernels::DeviceBuffer<float>(be_, m_.num_params());
  }

  kernels::Backend& be_;
  const TrainBenchOptions& o_;
  core::Mlp m_;
  int rows_ = 0;
  std::vector<float> xh_;
  std::vector<std::int32_t> yh_;
  kernels::DeviceBuffer<float> xs_, x_, vel_, fa_, fo_, dw_;
  kernels::DeviceBuffer<std::int32_t> ys_, y_, idx_;
  kernels::DeviceBuffer<double> loss_acc_;
  std::vector<Gemm> gemms_;
  std::int64_t step_ = 0;
  double loss_read_ = 0.0;
  double first_loss_ = -1.0;
};

nlohmann::json report(const kernels::Backend& be, const TrainBenchOptions& o,
                      const StepBench& bench, const std::vector<double>& step_ms,
                      const std::vector<double>& floor_ms, const kernels::BlasCoreChoice& blas) {
  const double s = *std::min_element(step_ms.begin(), step_ms.end());
  const double f = *std::min_element(floor_ms.begin(), floor_ms.end());
  nlohmann::json j = {{"subject", "train"},
          {"backend", be.name()},
          {"device", be.device()},
          {"precision", kernels::precision_name(be.precision())},
          {"data", o.data},
          {"loss_read_every", o.data == "upload" ? 1 : o.loss_every},
          {"model", o.model},
          {"params", bench.num_params()},
          {"batch", o.batch},
          {"steps_per_round", o.steps},
          {"rounds", o.rounds},
          {"step_ms", s},
          {"samples_per_s", o.batch / (s / 1000.0)},
          {"floor_gemm_ms", f},
          {"ratio_step_over_floor", s / f},
          {"step_ms_median", median(step_ms)},
          {"floor_gemm_ms_median", median(floor_ms)},
          {"timing", "interleaved rounds, fastest of each"},
          {"loss_first_window", bench.first_loss()},
          {"last_loss", bench.last_loss()}};
  if (be.kind() == kernels::BackendKind::Cpu) j.update(blas_fields(blas));
  return j;
}

int run(const Args& args) {
  TrainBenchOptions o;
  if (auto rc = parse_bench_args("train", train_options(), args, o, kAbout)) return *rc;
  // May run this program again on another OpenBLAS core, before any product is timed.
  const kernels::BlasCoreChoice blas = settle_blas_core(o.blas_core);
  std::unique_ptr<kernels::Backend> be;
  try {
    be = kernels::make_backend(o.backend, o.device);
    be->set_precision(o.precision);
  } catch (const std::exception& e) {  // unknown names, no device, cpu with tf32/bf16
    std::fprintf(stderr, "gossip-bench train: %s\n", e.what());
    return 2;
  }
  StepBench bench(*be, o);
  for (int w = 0; w < 10; ++w) {  // warm-up: caches, BLAS threads, cuBLAS heuristics
    bench.train_step();
    bench.floor_step();
  }
  std::vector<double> step_ms, floor_ms;
  for (int k = 0; k < o.rounds; ++k) {
    step_ms.push_back(bench.time_ms([&] { bench.train_step(); }));
    floor_ms.push_back(bench.time_ms([&] { bench.floor_step(); }));
  }
  const nlohmann::json j = report(*be, o, bench, step_ms, floor_ms, blas);
  std::printf("%s\n", o.json ? j.dump().c_str() : j.dump(2).c_str());
  return 0;
}

}  // namespace

GT_BENCH_SUBJECT("train", "samples/s of a training step vs its matrix products alone", run);

}  // namespace gossiptrain::apps
