// The training loop of one peer: minibatch SGD (momentum) or Adam over its local shard, a learning
// rate schedule, evaluation each epoch, checkpoints, metrics, and the one StepHook between steps.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <string_view>
#include <vector>

#include "core/dataset.hpp"
#include "core/metrics.hpp"
#include "core/model.hpp"
#include "core/step_hook.hpp"
#include "core/watchdog.hpp"

namespace gossiptrain::core {

enum class Optimizer { Sgd, Adam, Qgm };   // SGD with momentum, Adam, quasi-global momentum
enum class Schedule { Cosine, Constant };  // cosine decays to 0 over all steps
// The flag spellings ("sgd", "adam", "qgm"; "cosine", "constant"), also written in checkpoints.
std::string_view to_string(Optimizer o);
std::string_view to_string(Schedule s);
// Reads a flag spelling; std::invalid_argument naming the flag for any other text.
void from_string(std::string_view text, Optimizer& out);
void from_string(std::string_view text, Schedule& out);

struct TrainConfig {
  std::string model = "mlp:784-256-256-10";
  Optimizer optimizer = Optimizer::Sgd;
  Schedule schedule = Schedule::Cosine;
  float lr = 0.05f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;  // L2; 0 measured best for gossip (README, Results)
  // --logit-adjust: train on softmax(z + log p), p the shard's label frequencies (logit_prior()),
  // evaluate on softmax(z).
  bool logit_adjust = false;
  int epochs = 10;
  int batch = 32;
  std::uint64_t seed = 1;
  std::string checkpoint_dir;  // empty: no checkpoints
  // --run-id: written in every checkpoint; resume() refuses a checkpoint of another run id. Empty:
  // none given (any checkpoint of this model continues, as before run ids; one it finds keeps its
  // id). 1-64 characters of [A-Za-z0-9._-] (check_run_id).
  std::string run_id;
  // The swarm's shard count, written in checkpoints beside steps_per_epoch (what a resumed peer
  // maps its step from when the run restarts with another size).
  int num_shards = 1;
  // Steps in one epoch; 0: one pass over the shard. Peers of a swarm use an equal share of the
  // whole training set, so every peer takes the same number of steps whatever its shard's size.
  std::int64_t steps_per_epoch = 0;
  int checkpoint_every_s = 60;  // also at every epoch end and on stop
  // `step` metric lines. The loss is read back from the device only at these lines and at epoch
  // ends (every kLossReadSteps steps when 0), so a GPU step never waits for it.
  int log_every_steps = 50;
  // A progress line within an epoch (on_progress) at most this often, at a `step` line's loss
  // read: an epoch of a CNN on a CPU takes minutes. 0: none.
  double progress_every_s = 15.0;
  // Evaluate on the test set (the `eval` line) at each epoch end; a FedAvg client turns it off:
  // the server evaluates the global model once per round.
  bool eval_each_epoch = true;
};

// How far the open epoch is, for on_progress.
struct EpochStepProgress {
  int epoch = 0;  // 1-based: the epoch being trained
  std::int64_t step_in_epoch = 0, steps_in_epoch = 0;
  double loss = 0.0;  // mean since the previous `step` line
  double samples_per_s = 0.0;
  double seconds_left = 0.0;  // in this epoch, at this epoch's speed so far
};

// Validates ranges and names; throws std::invalid_argument with a message naming the flag.
void validate(const TrainConfig& c);
// Throws std::invalid_argument naming `what` unless id is 1-64 characters of [A-Za-z0-9._-].
void check_run_id(const std::string& id, const std::string& what = "--run-id");
// A checkpoint's step in a run of new_spe steps per epoch when it was written with old_spe: the
// same completed epochs and the same fraction through the open one, floor(within * new / old)
// (docs/cluster.md, "Another size").
std::int64_t map_step(std::int64_t step, std::int64_t epoch, std::int64_t old_spe,
                      std::int64_t new_spe);
// Throws std::invalid_argument unless the model takes rows of `features` values (what the trainer
// checks first; a caller may check a data set's header before loading it).
void check_input_features(const std::string& model, int features);
// Steps in one epoch of a swarm's peer: an equal share of the whole training set (train_rows over
// peers, rounded up), whatever its own shard's size, so that skewed splits do not leave the peers
// with big shards training alone at the end.
// The training offset of --logit-adjust: log max(p_k, 1/classes) for each class k, p_k its
// frequency in labels. Only the labels more frequent than a uniform share stand out (by up to
// log(classes)); on an IID shard every offset is about the same, which softmax ignores.
std::vector<float> logit_prior(const std::vector<std::int32_t>& labels, int classes);
std::int64_t share_steps_per_epoch(std::size_t train_rows, int peers, int batch);

struct TrainResult {
  std::int64_t steps = 0;
  int epochs_done = 0;
  // Empty when not measured: no evaluation in this run (stopped before its first epoch end), or
  // for best, a run resumed from a checkpoint that does not hold it (older builds).
  std::optional<double> final_test_acc;
  std::optional<double> best_test_acc;  // of the whole run, restarts included
  std::optional<double> final_test_loss;
  double seconds = 0.0;
  bool stopped = false;  // interrupted by the stop flag
  // The step hook asked for it (StepContext::hand_back): run() returned after that step, with
  // training not done; call run() again to go on.
  bool handed_back = false;
};

struct EvalResult {
  double acc = 0.0;
  double loss = 0.0;
};

class Trainer final : public StateSource {
 public:
  // shard and test must outlive the trainer. hook may be null (training alone).
  Trainer(kernels::Backend& be, TrainConfig cfg, const Dataset& shard, const Dataset& test,
          Metrics& metrics, StepHook* hook);

  Mlp& model() { return model_; }
  // Sets the step hook (null: none); before run().
  void set_hook(StepHook* hook) { hook_ = hook; }
  StepHook* hook() const { return hook_; }
  // Beats hb between steps, evaluation batches, checkpoints and lingering (null: none); hb must
  // outlive the trainer's use of it.
  void set_heartbeat(Heartbeat* hb) { heartbeat_ = hb; }
  // Restores from cfg.checkpoint_dir when a checkpoint is there; throws CheckpointError when it is
  // corrupt or belongs to another model, and CheckpointRunError when it belongs to another run
  // (its run id) or another --epochs. Returns true when something was restored.
  bool resume();
  // The current state: parameters, optimizer state, step, epoch, samples (StateSource).
  Checkpoint state() override;
  // Continues from c (a checkpoint, or a neighbour's state fetched at start) as if it had trained
  // to there: the learning-rate schedule goes on from c.step. Checks everything first and changes
  // nothing on failure; throws CheckpointError naming `where` (another model or optimizer, sizes,
  // and for our own checkpoint counters outside this run; CheckpointRunError for our own
  // checkpoint of another run id or --epochs). Our own checkpoint written with another number of
  // steps per epoch (the swarm restarted with another size) continues at the same completed
  // epochs and fraction of the open epoch (map_step).
  // own: c is this peer's own earlier state (its checkpoint), so its best accuracy carries over;
  // false for another peer's state (catch-up), whose history is not this peer's. Another peer's
  // state whose counters do not fit this run (a run with more epochs, another batch size) gives
  // its parameters and optimizer state only: this peer keeps its own step, epoch and samples, so
  // its schedule and its epoch count are its own (returns false then; true when the counters were
  // taken too).
  bool restore(const Checkpoint& c, const std::string& where, bool own = true);
  // Steps taken in this run so far (a resumed or caught-up state's included). Training thread, or
  // before run().
  std::int64_t step() const { return step_; }
  std::int64_t total_steps() const { return total_steps_; }  // of the whole run
  // Optimizer state vectors of n_params values each (sgd: velocity; adam: m, v; qgm: the
  // momentum and the parameters before the last step's update).
  std::size_t optimizer_state_count() const { return cfg_.optimizer == Optimizer::Sgd ? 1 : 2; }
  // Trains until cfg.epochs are done or stop becomes true; checkpoints at epoch ends and on stop.
  // Resumed with nothing left to train, it evaluates the model it loaded. Returns early, with
  // handed_back set, after a step whose hook asked for it (StepContext::hand_back).
  TrainResult run(const std::atomic<bool>& stop);
  // One step of run(), for a caller that drives the clock itself (gossip-sim): the next optimizer
  // step and the hook after it, then, after an epoch's last step, that epoch's evaluation and
  // checkpoint (res gets its figures). Returns false once every epoch is done (no step taken).
  bool train_step(TrainResult& res);
  // Calls the hook with this step's context outside a step (done: training is over); what a
  // caller driving train_step uses when the exchange asks for a step boundary.
  void call_hook(bool done);
  EvalResult evaluate(const Dataset& d);
  // Best test accuracy of the run, kept in its checkpoints: empty before the first evaluation, and
  // unknown (empty) after resuming from a checkpoint of an older build that did not keep it.
  std::optional<double> best_test_acc() const { return best_known_ ? best_acc_ : std::nullopt; }
  // Counts an evaluation of the current model towards best_test_acc.
  void note_test_acc(double acc);
  // Calls the hook with training_done = true until stop becomes true or linger_s pass, so the peer
  // keeps serving exchanges after its last step.
  void linger(const std::atomic<bool>& stop, double linger_s);
  void save_checkpoint_now();
  // FedProx's proximal term: from now on each step adds mu * (w - anchor) to the gradient before
  // the optimizer step (anchor: the round's global model, num_params values). mu 0: off.
  void set_proximal(const std::vector<float>& anchor, float mu);

  // Progress callback for the per-epoch line (the app prints it). loss and samples_per_s are empty
  // for an epoch without a step in this run (resumed at its very end).
  std::function<void(int epoch, std::optional<double> loss, const EvalResult& ev,
                     std::optional<double> samples_per_s)>
      on_epoch;
  // Progress within a long epoch (TrainConfig::progress_every_s).
  std::function<void(const EpochStepProgress&)> on_progress;

 private:
  // A dataset as the backend sees it: on a GPU, uploaded once (device copies owned here); on the
  // CPU, the host vectors themselves.
  struct Resident {
    const float* x = nullptr;
    const std::int32_t* y = nullptr;
    kernels::DeviceBuffer<float> x_dev;
    kernels::DeviceBuffer<std::int32_t> y_dev;
  };
  static constexpr int kLossReadSteps = 50;

  void make_resident(const Dataset& d, Resident& r);
  void check_image_shape() const;
  // Uploads epoch_'s shuffled order of the shard (depends only on seed and epoch).
  void upload_epoch_order();
  // Reads the summed loss of this epoch's steps so far (waits for the device); throws when it is
  // not finite (diverged).
  double read_loss_sum();
  float lr_at(std::int64_t step) const;
  void begin_epoch();
  void one_step();
  void end_epoch(TrainResult& res);
  void restore_best(const std::string& meta);
  // Evaluates on the test set, updates res and the best, and writes the `eval` metric line (the
  // training figures only when measured).
  EvalResult evaluate_and_report(TrainResult& res, std::optional<double> train_loss,
                                 std::optional<double> samples_per_s);

  kernels::Backend& be_;
  TrainConfig cfg_;
  const Dataset& shard_;
  const Dataset& test_;
  Metrics& metrics_;
  StepHook* hook_;
  Heartbeat* heartbeat_ = nullptr;
  bool hand_back_ = false;  // the hook asked run() to return (StepContext::hand_back)
  void beat(TrainPhase p) {
    if (heartbeat_) heartbeat_->beat(p, step_);
  }
  Mlp model_;
  void optimizer_step(float lr);
  kernels::DeviceBuffer<float> opt_a_, opt_b_;  // sgd: velocity; adam: m, v; qgm: m, x_prev
  kernels::DeviceBuffer<float> x_dev_;          // the batch being trained or evaluated
  kernels::DeviceBuffer<float> prox_anchor_;    // FedProx: the round's global model
  float prox_mu_ = 0.0f;
  kernels::DeviceBuffer<std::int32_t> y_dev_;
  Resident train_, test_res_;                      // shard and test set, resident on the device
  kernels::DeviceBuffer<std::int32_t> order_dev_;  // this epoch's sample order
  kernels::DeviceBuffer<double> loss_acc_;         // sum of this epoch's batch mean losses
  std::int64_t step_ = 0;
  std::int64_t samples_ = 0;
  int epoch_ = 0;
  std::int64_t steps_per_epoch_ = 0;
  std::size_t epoch_samples_ = 0;  // samples drawn per epoch
  std::int64_t total_steps_ = 0;
  std::optional<double> best_acc_;
  std::string run_id_;  // cfg.run_id, or the one of the checkpoint resumed when none was given
  bool best_known_ = true;  // false: resumed from a checkpoint without it
  // The epoch train_step is in: its loss sums (now, and at the last `step` line) and speed.
  struct EpochProgress {
    bool open = false;
    std::chrono::steady_clock::time_point start;
    double loss_read = 0.0;
    std::int64_t loss_n = 0, read_n = 0, samples = 0;
    std::chrono::steady_clock::time_point last_progress;  // on_progress's last call (or start)
  };
  EpochProgress ep_;
  std::chrono::steady_clock::time_point last_ckpt_ = std::chrono::steady_clock::now();
};

}  // namespace gossiptrain::core
