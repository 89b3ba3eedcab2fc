// The training loop: shuffled minibatches of the local shard, optimizer over the whole arena,
// per-epoch evaluation, checkpoints (epoch ends, periodic, on stop) and the StepHook between steps.
#include "core/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <thread>

#include <spdlog/spdlog.h>

#include "base/enum_names.hpp"
#include "base/rng.hpp"
#include "core/checkpoint.hpp"

namespace gossiptrain::core {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
constexpr int kEvalBatch = 500;
}  // namespace

namespace {
constexpr std::string_view kOptimizerNames[] = {"sgd", "adam", "qgm"};
static_assert(std::size(kOptimizerNames) == base::enum_count(Optimizer::Sgd, Optimizer::Qgm));
constexpr std::string_view kScheduleNames[] = {"cosine", "constant"};
static_assert(std::size(kScheduleNames) == base::enum_count(Schedule::Cosine, Schedule::Constant));
}  // namespace

std::string_view to_string(Optimizer o) {
  return base::enum_name(o, Optimizer::Sgd, kOptimizerNames);
}

std::string_view to_string(Schedule s) {
  return base::enum_name(s, Schedule::Cosine, kScheduleNames);
}

namespace {
// The value `text` names in the table; std::invalid_argument naming the flag and its values.
template <class E, std::size_t N>
E parse_named(std::string_view text, E first, const std::string_view (&names)[N],
              const std::string& flag) {
  if (auto v = base::enum_from_name(text, first, names)) return *v;
  std::string want;
  for (std::size_t i = 0; i < N; ++i)
    want += (i ? (i + 1 == N ? " or " : ", ") : "") + std::string(names[i]);
  throw std::invalid_argument("--" + flag + " must be " + want + ", got '" + std::string(text) +
                              "'");
}
}  // namespace

void from_string(std::string_view text, Optimizer& out) {
  out = parse_named(text, Optimizer::Sgd, kOptimizerNames, "optimizer");
}

void from_string(std::string_view text, Schedule& out) {
  out = parse_named(text, Schedule::Cosine, kScheduleNames, "schedule");
}

void validate(const TrainConfig& c) {
  parse_model_spec(c.model);
  if (!(c.lr > 0.0f && c.lr < 10.0f)) throw std::invalid_argument("--lr must be in (0, 10)");
  if (!(c.progress_every_s >= 0.0)) throw std::invalid_argument("--progress-every must be >= 0");
  if (!(c.momentum >= 0.0f && c.momentum < 1.0f))
    throw std::invalid_argument("--momentum must be in [0, 1)");
  if (!(c.weight_decay >= 0.0f && c.weight_decay < 1.0f))
    throw std::invalid_argument("--weight-decay must be in [0, 1)");
  if (c.epochs < 1 || c.epochs > 100000) throw std::invalid_argument("--epochs must be 1..100000");
  if (c.batch < 1 || c.batch > 65536) throw std::invalid_argument("--batch must be 1..65536");
  if (c.steps_per_epoch < 0) throw std::invalid_argument("steps per epoch must be >= 0");
  if (!c.run_id.empty()) check_run_id(c.run_id);
}

void check_run_id(const std::string& id, const std::string& what) {
  const bool ok = !id.empty() && id.size() <= 64 &&
                  std::all_of(id.begin(), id.end(), [](char ch) {
                    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                           (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
                  });
  if (!ok)
    throw std::invalid_argument(what + " must be 1-64 characters of A-Z a-z 0-9 . _ -, got '" +
                                id.substr(0, 80) + "'");
}

std::int64_t map_step(std::int64_t step, std::int64_t epoch, std::int64_t old_spe,
                      std::int64_t new_spe) {
  if (old_spe <= 0 || new_spe <= 0) return step;
  const std::int64_t within = std::clamp<std::int64_t>(step - epoch * old_spe, 0, old_spe);
  // within <= old_spe and new_spe are below 2^31 in any run that fits in memory: no overflow.
  return epoch * new_spe + within * new_spe / old_spe;
}

std::vector<float> logit_prior(const std::vector<std::int32_t>& labels, int classes) {
  std::vector<float> out(std::size_t(std::max(classes, 0)), 0.0f);
  if (labels.empty() || classes < 1) return out;
  std::vector<double> count(out.size(), 0.0);
  for (std::int32_t y : labels)
    if (y >= 0 && y < classes) count[std::size_t(y)] += 1.0;
  const double uniform = 1.0 / double(classes);
  for (std::size_t k = 0; k < count.size(); ++k)
    out[k] = float(std::log(std::max(count[k] / double(labels.size()), uniform)));
  return out;
}

std::int64_t share_steps_per_epoch(std::size_t train_rows, int peers, int batch) {
  const std::size_t share = (train_rows + std::size_t(peers) - 1) / std::size_t(peers);
  return std::int64_t((share + std::size_t(batch) - 1) / std::size_t(batch));
}

void check_input_features(const std::string& model, int features) {
  const int inputs = parse_model_spec(model).front();
  if (features != inputs)
    throw std::invalid_argument("model " + model + " takes " + std::to_string(inputs) +
                                " inputs but the data has " + std::to_string(features) +
                                " features");
}

Trainer::Trainer(kernels::Backend& be, TrainConfig cfg, const Dataset& shard, const Dataset& test,
                 Metrics& metrics, StepHook* hook)
    : be_(be),
      cfg_(std::move(cfg)),
      shard_(shard),
      test_(test),
      metrics_(metrics),
      hook_(hook),
      model_(be, cfg_.model, std::max(cfg_.batch, kEvalBatch)),
      run_id_(cfg_.run_id) {
  validate(cfg_);
  if (shard_.size() == 0) throw std::invalid_argument("the training shard is empty");
  check_input_features(cfg_.model, shard_.features);
  check_image_shape();
  if (shard_.classes > model_.num_classes())
    throw std::invalid_argument(
        "model " + cfg_.model + " has " + std::to_string(model_.num_classes()) +
        " outputs but the data has " + std::to_string(shard_.classes) + " classes");
  // Trains, but the extra outputs only learn never to fire: most likely the class count was left
  // off the spec (mlp:784-256 is a 256-class model).
  if (shard_.classes < model_.num_classes()) {
    std::string hint;
    if (cfg_.model.starts_with("mlp:"))
      hint = "; if the class count was left off, use " + cfg_.model + "-" +
             std::to_string(shard_.classes);
    spdlog::warn(
        "model {} has {} outputs but the data has only {} classes: the extra outputs are "
        "never a right answer{}",
        cfg_.model, model_.num_classes(), shard_.classes, hint);
  }
  model_.init(cfg_.seed);
  if (cfg_.logit_adjust) model_.set_train_logit_offset(logit_prior(shard_.y, model_.num_classes()));
  const std::size_t n = model_.num_params();
  opt_a_ = kernels::DeviceBuffer<float>(be_, n);
  if (optimizer_state_count() == 2) opt_b_ = kernels::DeviceBuffer<float>(be_, n);
  x_dev_ = kernels::DeviceBuffer<float>(be_, std::size_t(model_.max_batch()) * shard_.features);
  y_dev_ = kernels::DeviceBuffer<std::int32_t>(be_, model_.max_batch());
  make_resident(shard_, train_);
  make_resident(test_, test_res_);
  loss_acc_ = kernels::DeviceBuffer<double>(be_, 1);
  if (cfg_.steps_per_epoch > 0) {
    steps_per_epoch_ = cfg_.steps_per_epoch;
    epoch_samples_ = std::size_t(steps_per_epoch_) * cfg_.batch;
  } else {
    steps_per_epoch_ = std::int64_t((shard_.size() + cfg_.batch - 1) / cfg_.batch);
    epoch_samples_ = shard_.size();
  }
  total_steps_ = steps_per_epoch_ * cfg_.epochs;
  order_dev_ = kernels::DeviceBuffer<std::int32_t>(be_, epoch_samples_);
}

// A CNN's input geometry against the images as stored: H x W takes H x W (when C is 1) or
// H x W x C; data of flat rows (N x D) can only be checked by its feature count, done before.
void Trainer::check_image_shape() const {
  const auto& shape = shard_.row_shape;
  if (!model_.convolutional() || shape.size() < 2) return;
  const Layer& in = model_.layers().front();
  const std::vector<std::uint64_t> hw{std::uint64_t(in.in_h), std::uint64_t(in.in_w)};
  std::vector<std::uint64_t> hwc = hw;
  hwc.push_back(std::uint64_t(in.in_c));
  if (shape == hwc || (in.in_c == 1 && shape == hw)) return;
  std::string have;
  for (std::size_t i = 0; i < shape.size(); ++i) have += (i ? "x" : "") + std::to_string(shape[i]);
  throw std::invalid_argument("model " + cfg_.model + " takes " + std::to_string(in.in_h) + "x" +
                              std::to_string(in.in_w) + "x" + std::to_string(in.in_c) +
                              " images but the data's images are " + have);
}

void Trainer::make_resident(const Dataset& d, Resident& r) {
  if (d.size() > std::size_t(std::numeric_limits<std::int32_t>::max()))
    throw std::invalid_argument("a dataset of more than 2^31 samples is not supported");
  if (be_.host_memory()) {
    r.x = d.x.data();
    r.y = d.y.data();
    return;
  }
  r.x_dev = kernels::DeviceBuffer<float>(be_, d.x.size());
  r.y_dev = kernels::DeviceBuffer<std::int32_t>(be_, d.y.size());
  be_.upload(r.x_dev.data(), d.x.data(), d.x.size() * sizeof(float));
  be_.upload(r.y_dev.data(), d.y.data(), d.y.size() * sizeof(std::int32_t));
  r.x = r.x_dev.data();
  r.y = r.y_dev.data();
}

void Trainer::upload_epoch_order() {
  // The order of epoch e depends only on (seed, e), so a resumed run continues where it stopped.
  // An epoch longer than the shard concatenates fresh shuffles of it.
  std::vector<std::int32_t> order, perm(shard_.size());
  order.reserve(epoch_samples_);
  base::SplitMix64 rng(cfg_.seed * 0x9E3779B97F4A7C15ull + std::uint64_t(epoch_) + 1);
  while (order.size() < epoch_samples_) {
    for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = std::int32_t(i);
    base::shuffle(perm, rng);
    order.insert(order.end(), perm.begin(), perm.end());
  }
  order.resize(epoch_samples_);
  be_.upload(order_dev_.data(), order.data(), order.size() * sizeof(std::int32_t));
}

double Trainer::read_loss_sum() {
  double sum = 0.0;
  be_.download(&sum, loss_acc_.data(), sizeof(double));
  if (!std::isfinite(sum))
    throw std::runtime_error("training diverged: loss is " + std::to_string(sum) + " by step " +
                             std::to_string(step_) + " (try a smaller --lr)");
  return sum;
}

float Trainer::lr_at(std::int64_t step) const {
  if (cfg_.schedule == Schedule::Constant) return cfg_.lr;
  const double p = std::min(1.0, double(step) / double(std::max<std::int64_t>(1, total_steps_)));
  return float(cfg_.lr * 0.5 * (1.0 + std::cos(std::numbers::pi * p)));
}

void Trainer::call_hook(bool done) {
  beat(done ? TrainPhase::Linger : TrainPhase::Hook);
  if (!hook_) return;
  StepContext ctx{be_,
                  model_.params(),
                  model_.num_params(),
                  step_,
                  samples_,
                  std::int64_t(shard_.size()),
                  epoch_,
                  done,
                  this,
                  total_steps_};
  hook_->between_steps(ctx);
  if (ctx.hand_back && !done) hand_back_ = true;
  beat(done ? TrainPhase::Linger : TrainPhase::Step);
}

bool Trainer::resume() {
  if (cfg_.checkpoint_dir.empty() || !checkpoint_exists(cfg_.checkpoint_dir)) return false;
  const std::string where = "checkpoint in " + cfg_.checkpoint_dir;
  restore(load_checkpoint(cfg_.checkpoint_dir), where);
  spdlog::info("resumed from {}: epoch {}, step {}", where, epoch_, step_);
  return true;
}

namespace {
// meta[key] as an integer, if it is one.
std::optional<std::int64_t> meta_int(const nlohmann::json& meta, const char* key) {
  if (!meta.is_object() || !meta.contains(key) || !meta[key].is_number_integer())
    return std::nullopt;
  return meta[key].get<std::int64_t>();
}
}  // namespace

bool Trainer::restore(const Checkpoint& c, const std::string& where, bool own) {
  if (c.fingerprint != model_.fingerprint() || c.params.size() != model_.num_params())
    throw CheckpointError(where + " belongs to another model than " + cfg_.model);
  const std::size_t want_state = optimizer_state_count();
  const auto meta = nlohmann::json::parse(c.meta, nullptr, /*allow_exceptions=*/false);
  const bool other_opt = meta.is_object() && meta.contains("optimizer") &&
                         meta["optimizer"] != nlohmann::json(to_string(cfg_.optimizer));
  if (other_opt || c.opt_state.size() != want_state)
    throw CheckpointError(where + " was written with another optimizer than " +
                          std::string(to_string(cfg_.optimizer)));
  for (const auto& s : c.opt_state)
    if (s.size() != model_.num_params()) throw CheckpointError(where + ": optimizer state size");
  // The run it belongs to: its id (both given and different: another run), its --epochs.
  const std::string their_id = checkpoint_run_id(meta);
  const auto their_epochs = meta_int(meta, "epochs");
  if (own) resumed_run_id(where, their_id, cfg_.run_id);  // throws for another run's
  if (own && their_epochs && *their_epochs != cfg_.epochs)
    throw CheckpointRunError(
        where + " was written by a run of --epochs " + std::to_string(*their_epochs) +
        ", this one has --epochs " + std::to_string(cfg_.epochs) + ": to continue it pass --epochs " +
        std::to_string(*their_epochs) +
        "; to start a new run use an empty --checkpoint-dir (or remove that folder)");
  // Written with another number of steps per epoch (the swarm restarted with another size, or
  // another --batch): the same completed epochs and the same fraction of the open one. A state of
  // a run with other --epochs keeps its counters as they are (they will not fit, below).
  std::int64_t step = c.step;
  const auto their_spe = meta_int(meta, "steps_per_epoch");
  const bool same_epochs = !their_epochs || *their_epochs == cfg_.epochs;
  const bool remap = their_spe && *their_spe > 0 && *their_spe != steps_per_epoch_ && same_epochs &&
                     c.epoch >= 0 && c.epoch <= cfg_.epochs && c.step >= 0;
  if (remap) step = map_step(c.step, c.epoch, *their_spe, steps_per_epoch_);
  const bool fits = step >= 0 && c.epoch >= 0 && c.samples >= 0 && c.epoch <= cfg_.epochs &&
                    step <= total_steps_ && step >= c.epoch * steps_per_epoch_ &&
                    step <= (c.epoch + 1) * steps_per_epoch_;
  // Our own checkpoint from another run is a configuration error; a neighbour's state from a run
  // of another length (a joiner with fewer --epochs, another --batch) still carries the swarm's
  // model, which beats our random initial weights: we take it and keep our own schedule.
  if (!fits && own)
    throw CheckpointError(
        where + " has counters outside this run (step " + std::to_string(c.step) + ", epoch " +
        std::to_string(c.epoch) + "; this run has " + std::to_string(steps_per_epoch_) +
        " steps per epoch" +
        (their_spe ? std::string()
                   : ", and the checkpoint, written by an older build, does not say its own") +
        ")");
  be_.upload(model_.params(), c.params.data(), c.params.size() * sizeof(float));
  be_.upload(opt_a_.data(), c.opt_state[0].data(), opt_a_.bytes());
  if (want_state == 2) be_.upload(opt_b_.data(), c.opt_state[1].data(), opt_b_.bytes());
  if (fits) {
    step_ = step;
    epoch_ = int(c.epoch);
    samples_ = c.samples;
    ep_.open = false;  // the next step opens the restored epoch (its sample order)
    if (remap && own) {
      const auto their_shards = meta_int(meta, "num_shards");
      spdlog::info(
          "{} was written with {} shard(s), {} steps per epoch; this run has {} shard(s), {} "
          "steps per epoch: it continues at epoch {}, step {} (was {}), the same fraction of the "
          "epoch",
          where, their_shards ? std::to_string(*their_shards) : std::string("?"), *their_spe,
          cfg_.num_shards, steps_per_epoch_, c.epoch, step, c.step);
    }
  }
  if (own) {
    restore_best(c.meta);
    // No --run-id: the checkpoint's id, if any, stays with the run it continues.
    if (cfg_.run_id.empty()) run_id_ = their_id;
    else if (their_id.empty())
      spdlog::info("{} has no run id (an older build, or a run without --run-id): it continues "
                   "as run '{}'",
                   where, cfg_.run_id);
  } else {
    best_known_ = true;  // this peer has not evaluated anything yet
    best_acc_.reset();
  }
  return fits;
}

// meta's best_test_acc: a number, null (no evaluation yet) or absent (an older build: unknown).
void Trainer::restore_best(const std::string& meta) {
  best_acc_.reset();
  const auto j = nlohmann::json::parse(meta, nullptr, /*allow_exceptions=*/false);
  const bool has = j.is_object() && j.contains("best_test_acc");
  const nlohmann::json b = has ? j["best_test_acc"] : nlohmann::json();
  best_known_ = has && (b.is_number() || b.is_null());
  if (best_known_ && b.is_number()) best_acc_ = b.get<double>();
}

void Trainer::note_test_acc(double acc) {
  if (!best_acc_ || acc > *best_acc_) best_acc_ = acc;
}

Checkpoint Trainer::state() {
  Checkpoint c;
  c.fingerprint = model_.fingerprint();
  c.step = step_;
  c.epoch = epoch_;
  c.samples = samples_;
  c.params.resize(model_.num_params());
  be_.download(c.params.data(), model_.params(), c.params.size() * sizeof(float));
  c.opt_state.emplace_back(model_.num_params());
  be_.download(c.opt_state[0].data(), opt_a_.data(), opt_a_.bytes());
  if (opt_b_.size()) {
    c.opt_state.emplace_back(model_.num_params());
    be_.download(c.opt_state[1].data(), opt_b_.data(), opt_b_.bytes());
  }
  nlohmann::json meta{{"model", cfg_.model},
                      {"optimizer", to_string(cfg_.optimizer)},
                      {"epochs", cfg_.epochs},
                      {"steps_per_epoch", steps_per_epoch_},
                      {"num_shards", cfg_.num_shards}};
  if (!run_id_.empty()) meta["run_id"] = run_id_;
  if (best_known_)
    meta["best_test_acc"] = best_acc_ ? nlohmann::json(*best_acc_) : nlohmann::json();
  c.meta = meta.dump();
  return c;
}

void Trainer::save_checkpoint_now() {
  if (cfg_.checkpoint_dir.empty()) return;
  beat(TrainPhase::Checkpoint);
  save_checkpoint(cfg_.checkpoint_dir, state());
  metrics_.emit("checkpoint", {{"step", step_}, {"epoch", epoch_}, {"dir", cfg_.checkpoint_dir}});
}

EvalResult Trainer::evaluate(const Dataset& d) {
  std::int64_t correct = 0;
  double loss = 0.0;
  const int C = model_.num_classes();
  // The test set is resident; any other dataset is read from the host a batch at a time.
  const bool resident = &d == &test_ || be_.host_memory();
  for (std::size_t i = 0; i < d.size(); i += kEvalBatch) {
    beat(TrainPhase::Eval);
    const int b = int(std::min<std::size_t>(kEvalBatch, d.size() - i));
    const float* x = x_dev_.data();
    const std::int32_t* y = y_dev_.data();
    if (&d == &test_) {
      x = test_res_.x + i * d.features;
      y = test_res_.y + i;
    } else if (resident) {
      x = d.x.data() + i * d.features;
      y = d.y.data() + i;
    } else {
      be_.upload(x_dev_.data(), d.x.data() + i * d.features, std::size_t(b) * d.features * 4);
      be_.upload(y_dev_.data(), d.y.data() + i, std::size_t(b) * 4);
    }
    const float* logits = model_.forward(x, b);
    std::int64_t c = 0;
    double l = 0.0;
    be_.eval_batch(logits, y, b, C, &c, &l);
    correct += c;
    loss += l;
  }
  EvalResult r;
  if (d.size()) {
    r.acc = double(correct) / double(d.size());
    r.loss = loss / double(d.size());
  }
  return r;
}

EvalResult Trainer::evaluate_and_report(TrainResult& res, std::optional<double> train_loss,
                                        std::optional<double> samples_per_s) {
  const EvalResult ev = evaluate(test_);
  note_test_acc(ev.acc);
  res.final_test_acc = ev.acc;
  res.final_test_loss = ev.loss;
  nlohmann::json fields = {
      {"epoch", epoch_}, {"step", step_}, {"test_acc", ev.acc}, {"test_loss", ev.loss}};
  if (train_loss) fields["train_loss"] = *train_loss;
  if (samples_per_s) fields["samples_per_s"] = *samples_per_s;
  metrics_.emit("eval", std::move(fields));
  return ev;
}

// One update; step_ already counts it (adam's bias correction uses it 1-based).
void Trainer::optimizer_step(float lr) {
  if (cfg_.optimizer == Optimizer::Adam) {
    be_.adam(model_.params(), model_.grads(), opt_a_.data(), opt_b_.data(), model_.num_params(), lr,
             0.9f, 0.999f, 1e-8f, cfg_.weight_decay, step_);
  } else if (cfg_.optimizer == Optimizer::Qgm) {
    // The change since the previous step's x_prev (its update and every mix applied since) per
    // that step's lr feeds the momentum; the first step of the run has no previous one. A state
    // restored from a checkpoint or a neighbour brings its x_prev, so this holds across both.
    const float lr_prev = step_ >= 2 ? lr_at(step_ - 2) : 0.0f;
    const bool has_prev = lr_prev > 0.0f;
    be_.qgm(model_.params(), model_.grads(), opt_a_.data(), opt_b_.data(), model_.num_params(), lr,
            has_prev ? 1.0f / lr_prev : 0.0f, cfg_.momentum, has_prev ? cfg_.momentum : 1.0f,
            cfg_.weight_decay);
  } else {
    be_.sgd_momentum(model_.params(), model_.grads(), opt_a_.data(), model_.num_params(), lr,
                     cfg_.momentum, cfg_.weight_decay);
  }
}

void Trainer::begin_epoch() {
  upload_epoch_order();
  const double zero = 0.0;
  be_.upload(loss_acc_.data(), &zero, sizeof zero);
  ep_ = EpochProgress{};
  ep_.open = true;
  ep_.start = Clock::now();
  ep_.last_progress = ep_.start;
}

// One optimizer step of the open epoch, its `step` line every read_every steps, and the hook.
void Trainer::one_step() {
  const int read_every = cfg_.log_every_steps > 0 ? cfg_.log_every_steps : kLossReadSteps;
  const std::int64_t s = step_ - std::int64_t(epoch_) * steps_per_epoch_;
  const std::size_t lo = std::size_t(s) * cfg_.batch;
  const int b = int(std::min<std::size_t>(cfg_.batch, epoch_samples_ - lo));
  be_.gather_batch(train_.x, train_.y, order_dev_.data() + lo, b, shard_.features, x_dev_.data(),
                   y_dev_.data());
  model_.forward_backward_acc(x_dev_.data(), y_dev_.data(), b, loss_acc_.data());
  const float lr = lr_at(step_);
  ++step_;
  if (prox_mu_ > 0.0f)  // grads += mu * (w - anchor)
    be_.mix(model_.grads(), model_.params(), prox_anchor_.data(), model_.num_params(), prox_mu_);
  optimizer_step(lr);
  samples_ += b;
  ep_.samples += b;
  ++ep_.loss_n;
  if (step_ % read_every == 0) {
    const double loss_sum = read_loss_sum();
    const double loss = (loss_sum - ep_.loss_read) / double(ep_.loss_n - ep_.read_n);
    const double sps = double(ep_.samples) / since(ep_.start);
    if (cfg_.log_every_steps > 0)  // the mean loss of the steps since the last line
      metrics_.emit("step", {{"step", step_},
                             {"steps_total", total_steps_},
                             {"epoch", epoch_},
                             {"loss", loss},
                             {"lr", lr},
                             {"samples_per_s", sps}});
    if (on_progress && cfg_.progress_every_s > 0 &&
        since(ep_.last_progress) >= cfg_.progress_every_s) {
      ep_.last_progress = Clock::now();
      EpochStepProgress p;
      p.epoch = epoch_ + 1;
      p.step_in_epoch = step_ - std::int64_t(epoch_) * steps_per_epoch_;
      p.steps_in_epoch = steps_per_epoch_;
      p.loss = loss;
      p.samples_per_s = sps;
      p.seconds_left =
          since(ep_.start) * double(p.steps_in_epoch - p.step_in_epoch) / double(p.step_in_epoch);
      on_progress(p);
    }
    ep_.loss_read = loss_sum;
    ep_.read_n = ep_.loss_n;
  }
  call_hook(false);
}

// The epoch's end: its mean loss, the evaluation, the progress line and a checkpoint. Resumed from
// a checkpoint taken after the epoch's last step, this run trained none of it (no loss, no speed).
void Trainer::end_epoch(TrainResult& res) {
  std::optional<double> sps, mean_loss;
  if (ep_.loss_n) {
    mean_loss = read_loss_sum() / double(ep_.loss_n);
    sps = double(ep_.samples) / std::max(1e-9, since(ep_.start));
  }
  ep_.open = false;
  ++epoch_;
  if (cfg_.eval_each_epoch) {
    const EvalResult ev = evaluate_and_report(res, mean_loss, sps);
    if (on_epoch) on_epoch(epoch_, mean_loss, ev, sps);
  }
  save_checkpoint_now();
  last_ckpt_ = Clock::now();
}

bool Trainer::train_step(TrainResult& res) {
  if (epoch_ >= cfg_.epochs) return false;
  if (!ep_.open) begin_epoch();
  if (step_ < std::int64_t(epoch_ + 1) * steps_per_epoch_) {
    one_step();
    if (!cfg_.checkpoint_dir.empty() && since(last_ckpt_) > cfg_.checkpoint_every_s) {
      save_checkpoint_now();
      last_ckpt_ = Clock::now();
    }
  }
  if (step_ >= std::int64_t(epoch_ + 1) * steps_per_epoch_) end_epoch(res);
  res.steps = step_;
  res.epochs_done = epoch_;
  res.best_test_acc = best_test_acc();
  return epoch_ < cfg_.epochs;
}

TrainResult Trainer::run(const std::atomic<bool>& stop) {
  TrainResult res;
  // A checkpoint written after the last step: report the model it holds, not an empty result.
  if (epoch_ >= cfg_.epochs && !stop.load()) evaluate_and_report(res, std::nullopt, std::nullopt);
  const auto t_start = Clock::now();
  last_ckpt_ = Clock::now();
  while (!stop.load() && !hand_back_ && train_step(res)) {
  }
  res.handed_back = hand_back_ && !stop.load() && epoch_ < cfg_.epochs;
  hand_back_ = false;
  if (stop.load()) {
    res.stopped = true;
    save_checkpoint_now();
  }
  res.steps = step_;
  res.epochs_done = epoch_;
  res.best_test_acc = best_test_acc();
  res.seconds = since(t_start);
  return res;
}

void Trainer::set_proximal(const std::vector<float>& anchor, float mu) {
  if (mu <= 0.0f) {
    prox_mu_ = 0.0f;
    return;
  }
  if (anchor.size() != model_.num_params())
    throw std::invalid_argument("fedprox anchor has " + std::to_string(anchor.size()) +
                                " values, the model " + std::to_string(model_.num_params()));
  if (prox_anchor_.size() != anchor.size())
    prox_anchor_ = kernels::DeviceBuffer<float>(be_, anchor.size());
  be_.upload(prox_anchor_.data(), anchor.data(), anchor.size() * sizeof(float));
  prox_mu_ = mu;
}

void Trainer::linger(const std::atomic<bool>& stop, double linger_s) {
  if (!hook_) return;
  const auto t0 = Clock::now();
  while (!stop.load() && since(t0) < linger_s) {
    call_hook(true);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace gossiptrain::core
