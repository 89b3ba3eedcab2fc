// gossiptrain._core: gossip-peer's peer (apps::PeerNode: the encrypted transport, membership, the
// averaging exchange, catch-up) over a caller's float32 vector, for training loops in Python.
// python/gossiptrain/__init__.py wraps it (keyword options, buffer checks, PyTorch tensors).
#include <Python.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "apps/common/options.hpp"
#include "apps/common/peer_node.hpp"
#include "base/rng.hpp"
#include "base/short_id.hpp"
#include "core/checkpoint.hpp"
#include "core/metrics.hpp"
#include "core/model.hpp"
#include "kernels/backend.hpp"
#include "net/buffer_pool.hpp"
#include "net/secure/identity.hpp"

namespace nb = nanobind;
using namespace gossiptrain;

namespace {

// The gossip-peer flags a Python peer takes: the network, averaging and robust mixing, catch-up,
// metrics and checkpoints, tagged kPythonPeer in gossip-peer's table (apps/common/options.cpp).
// Not the training ones: the caller trains.
const std::set<std::string>& python_flags() {
  static const std::set<std::string> flags = [] {
    const std::vector<std::string> names = apps::peer_options().names(apps::kPythonPeer);
    return std::set<std::string>(names.begin(), names.end());
  }();
  return flags;
}

// gossip-peer's parse and validation of args ("--name=value"), refusing the flags a Python peer
// does not take. Throws apps::UsageError with gossip-peer's messages.
apps::PeerConfig parse_python_args(const std::vector<std::string>& args, bool* model_given) {
  *model_given = false;
  for (const auto& a : args) {
    const apps::Flag f = apps::split_flag(a);
    if (f.name == "model") *model_given = true;
    if (python_flags().count(f.name)) continue;
    if (apps::peer_options().find(f.name))
      throw apps::UsageError("--" + f.name +
                             " is a gossip-peer training flag: a Python peer does not train "
                             "(its caller does)");
    throw apps::UsageError("unknown flag '--" + f.name + "' (see help(gossiptrain.Peer))");
  }
  bool help = false;
  apps::PeerConfig cfg = apps::parse_peer_args(args, &help);
  // --catch-up-behind is gossip-peer's: the caller's loop trains, and nothing here fetches a
  // state mid-run.
  cfg.node.behind.behind = 0;
  return cfg;
}

// A bare vector's fingerprint: peers average when their vectors have the same length. With
// model= a peer takes that gossip-peer model's fingerprint instead (wire compatibility).
std::uint64_t flat_fingerprint(std::size_t n) {
  const std::uint64_t h = base::fnv1a(base::kFnvOffset, "flat", 4);
  const std::uint64_t n64 = n;
  return base::fnv1a(h, &n64, sizeof n64);
}

using Buffer = nb::ndarray<float, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// Runs fn (which polls stop) on another thread while this one, every 100 ms, gives Python the
// chance to run its signal handlers: Ctrl-C sets stop, fn returns soon after, and the
// KeyboardInterrupt propagates. Called with the GIL held.
template <class F>
void interruptible(std::atomic<bool>& stop, F fn) {
  std::exception_ptr err;
  std::atomic<bool> done{false};
  {
    nb::gil_scoped_release nogil;
    std::thread worker([&] {
      try {
        fn();
      } catch (...) {
        err = std::current_exception();
      }
      done = true;
    });
    bool interrupted = false;
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (interrupted) continue;
      nb::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) {
        stop = true;
        interrupted = true;  // the error stays set; raised once the worker is done
      }
    }
    worker.join();
  }
  if (PyErr_Occurred()) throw nb::python_error();
  if (err) std::rethrow_exception(err);
}

class BufferPeer final : public core::StateSource {
 public:
  BufferPeer(Buffer buf, const std::vector<std::string>& args) : buf_(std::move(buf)) {
    bool model_given = false;
    cfg_ = parse_python_args(args, &model_given);
    spdlog::set_level(spdlog::level::from_str(cfg_.log_level));
    spdlog::set_pattern("%H:%M:%S.%e %^%l%$ %v");
    run_id_ = cfg_.train.run_id;
    data_ = buf_.data();
    n_ = buf_.shape(0);
    if (n_ == 0) throw apps::UsageError("the buffer is empty: a peer averages at least one value");
    backend_ = kernels::make_backend("cpu");
    fingerprint_ = flat_fingerprint(n_);
    if (model_given) {
      const core::Model m(*backend_, cfg_.train.model, 1);
      if (m.num_params() != n_)
        throw apps::UsageError("--model " + cfg_.train.model + " has " +
                               std::to_string(m.num_params()) + " parameters; the buffer holds " +
                               std::to_string(n_));
      fingerprint_ = m.fingerprint();
    }
    resume();
    metrics_ = std::make_unique<core::Metrics>(cfg_.metrics, "local");
    {
      nb::gil_scoped_release nogil;
      // The received-buffer pool is sized for this vector as gossip-peer sizes it for its model.
      node_ = std::make_unique<apps::PeerNode>(cfg_, fingerprint_, n_, *backend_, *metrics_);
      metrics_->set_peer(node_->peer_id());
      // Where this process's t = 0 stands in wall time, and its shard: what
      // `gossip-launch --report` needs to put peers started by hand on one time axis.
      metrics_->emit("clock",
                     {{"unix_s", std::chrono::duration<double>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                         .count() -
                                     metrics_->seconds()},
                      {"shard", cfg_.shard},
                      {"num_shards", cfg_.num_shards},
                      {"model", model_given ? cfg_.train.model : "flat:" + std::to_string(n_)}});
      metrics_->emit("python_peer", {{"n_params", n_},
                                     {"fingerprint", std::to_string(fingerprint_)},
                                     {"resumed", resumed_},
                                     {"run_id", run_id_},
                                     {"step", step_}});
      // Before the node starts: a cohort's new peer may ask us as soon as it knows us.
      node_->gossip().set_carries_run(resumed_ && step_ > 0);
      node_->gossip().start(&give_up_);
    }
    last_save_ = std::chrono::steady_clock::now();
  }

  ~BufferPeer() override {
    try {
      close();
    } catch (const std::exception& e) {
      spdlog::error("gossiptrain: closing the peer: {}", e.what());
    }
  }

  // Start together (--min-peers), then catch up (--catch-up auto, with seeds, not resumed; in a
  // cohort, --min-peers above 1, only from a member that resumed its checkpoint: a run resized).
  // Returns the catch-up's outcome as a dict, or None when there was none (or, in a cohort,
  // every member asked started fresh too).
  nb::object join() {
    check_open();
    interruptible(stop_, [&] {
      node_->gossip().wait_for_members(cfg_.min_peers, cfg_.min_peers_timeout_s, stop_);
    });
    if (resumed_ || cfg_.catch_up != apps::CatchUpMode::Auto || cfg_.node.membership.seeds.empty())
      return nb::none();
    const bool cohort = cfg_.min_peers > 1;
    std::optional<gossip::CatchUpResult> r;
    gossip::CatchUpClientConfig cc;
    cc.fingerprint = fingerprint_;
    cc.n_params = n_;
    cc.n_opt_state = 0;
    cc.resumed_only = cohort;
    cc.deadline = std::chrono::milliseconds(std::int64_t(cfg_.catch_up_timeout_s * 1000));
    interruptible(stop_, [&] { r = node_->gossip().catch_up(cc, stop_); });
    if (!r) return nb::none();
    if (cohort && !r->ok && r->reason == "fresh") {
      spdlog::info("catch-up: the members asked start from their own initial weights too (a "
                   "first start): keeping the buffer as it is");
      return nb::none();
    }
    nb::dict d;
    d["ok"] = r->ok;
    d["ms"] = r->ms;
    d["attempts"] = r->attempts;
    if (r->ok) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        std::memcpy(data_, r->state.params.data(), n_ * sizeof(float));
        step_ = r->state.step;
        samples_ = r->state.samples;
      }
      spdlog::info("caught up with {}: step {} ({} bytes in {:.0f} ms)", base::short_id(r->from),
                   r->state.step, r->bytes, r->ms);
      metrics_->emit("catch_up", {{"ok", true},
                                  {"from", r->from},
                                  {"step", r->state.step},
                                  {"bytes", r->bytes},
                                  {"ms", r->ms},
                                  {"attempts", r->attempts}});
      d["from"] = r->from;
      d["step"] = r->state.step;
      node_->gossip().set_carries_run(step_ > 0);
    } else {
      spdlog::warn("catch-up failed ({}) after {:.0f} ms: keeping the buffer as it is", r->reason,
                   r->ms);
      metrics_->emit(
          "catch_up",
          {{"ok", false}, {"reason", r->reason}, {"ms", r->ms}, {"attempts", r->attempts}});
      d["reason"] = r->reason;
    }
    return d;
  }

  // The step hook of gossip-peer's trainer, between two of the caller's steps.
  void step() {
    check_open();
    {
      nb::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mu_);
      if (auto why = node_->gossip().join_refused())
        throw std::runtime_error("could not join the swarm: " + *why);
      core::StepContext ctx{*backend_, data_, n_, step_, samples_, 0, 0, false, this, 0};
      node_->gossip().hook().between_steps(ctx);
      ++step_;
      ++samples_;
      save_if_due();
    }
  }

  // Leaves the swarm (membership says goodbye), stops the transport, writes a last checkpoint.
  void close() {
    if (!node_) return;
    auto stop_all = [&] {
      std::lock_guard<std::mutex> lock(mu_);
      node_->stop();
      if (!cfg_.train.checkpoint_dir.empty()) save();
      const auto st = node_->gossip().stats();
      spdlog::info("exchanges: {} ok, {} failed, {:.1f} MB sent", st.ok, st.failed,
                   st.bytes_sent / 1e6);
      node_.reset();
    };
    if (PyGILState_Check()) {
      nb::gil_scoped_release nogil;
      stop_all();
    } else {
      stop_all();
    }
  }

  bool closed() const { return !node_; }
  std::string address() {
    check_open();
    return node_->listen_addr();
  }
  std::string peer_id() {
    check_open();
    return node_->peer_id();
  }
  std::size_t members() {
    check_open();
    return node_->gossip().live_count();
  }
  std::int64_t steps() const { return step_; }
  std::size_t size() const { return n_; }
  std::uint64_t fingerprint() const { return fingerprint_; }
  bool resumed() const { return resumed_; }

  nb::dict stats() {
    check_open();
    const auto st = node_->gossip().stats();
    nb::dict d;
    d["ok"] = st.ok;
    d["averaging"] = st.averaging;
    d["failed"] = st.failed;
    d["bytes_sent"] = st.bytes_sent;
    d["bytes_received"] = st.bytes_received;
    d["lag_waits"] = node_->gossip().lag_waits();
    d["lag_wait_s"] = node_->gossip().lag_wait_s();
    return d;
  }

  // Writes checkpoint_dir/checkpoint.bin now (the buffer and the counters).
  void save_checkpoint() {
    check_open();
    if (cfg_.train.checkpoint_dir.empty())
      throw apps::UsageError("save_checkpoint() needs checkpoint_dir");
    nb::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    save();
  }

  // A metric line of the caller's (eval, done, ...) in the peer's metrics file, on its clock.
  void metric(const std::string& event, const std::string& fields_json) {
    check_open();
    auto fields = nlohmann::json::parse(fields_json, nullptr, false);
    if (!fields.is_object())
      throw apps::UsageError("metric fields must be a JSON object, got " + fields_json);
    metrics_->emit(event, std::move(fields));
  }

  // core::StateSource: what a joining peer catches up with (training thread: inside step()).
  core::Checkpoint state() override {
    core::Checkpoint c;
    c.fingerprint = fingerprint_;
    c.step = step_;
    c.samples = samples_;
    c.params.assign(data_, data_ + n_);
    nlohmann::json meta{{"python", true}};
    if (!run_id_.empty()) meta["run_id"] = run_id_;
    c.meta = meta.dump();
    return c;
  }

 private:
  void check_open() const {
    if (!node_) throw std::runtime_error("this gossiptrain.Peer is closed");
  }

  // checkpoint_dir with a checkpoint of this vector in it: the buffer and the counters from it.
  void resume() {
    const std::string& dir = cfg_.train.checkpoint_dir;
    if (dir.empty() || !core::checkpoint_exists(dir)) return;
    core::Checkpoint c = core::load_checkpoint(dir);
    if (c.fingerprint != fingerprint_ || c.params.size() != n_)
      throw core::CheckpointError("checkpoint in " + dir + " holds another vector (" +
                                  std::to_string(c.params.size()) + " values, not " +
                                  std::to_string(n_) + ")");
    // The run it belongs to, as gossip-peer judges it: without run_id the checkpoint's carries on.
    run_id_ = core::resumed_run_id(
        "checkpoint in " + dir,
        core::checkpoint_run_id(nlohmann::json::parse(c.meta, nullptr, false)), run_id_,
        "run_id=", "checkpoint_dir");
    std::memcpy(data_, c.params.data(), n_ * sizeof(float));
    step_ = c.step;
    samples_ = c.samples;
    resumed_ = true;
    spdlog::info("resumed from {} at step {}", dir, step_);
  }

  void save() { core::save_checkpoint(cfg_.train.checkpoint_dir, state()); }

  void save_if_due() {
    if (cfg_.train.checkpoint_dir.empty()) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_save_ < std::chrono::seconds(cfg_.train.checkpoint_every_s)) return;
    last_save_ = now;
    save();
  }

  Buffer buf_;  // holds the caller's array: it cannot be freed or resized while the peer lives
  float* data_ = nullptr;
  std::size_t n_ = 0;
  apps::PeerConfig cfg_;
  std::uint64_t fingerprint_ = 0;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<core::Metrics> metrics_;
  std::unique_ptr<apps::PeerNode> node_;
  std::atomic<bool> give_up_{false};
  std::atomic<bool> stop_{false};
  std::mutex mu_;  // step(), close(), the catch-up's copy: one at a time
  std::int64_t step_ = 0;
  std::int64_t samples_ = 0;
  bool resumed_ = false;
  std::string run_id_;  // run_id=, or the resumed checkpoint's when none was given
  std::chrono::steady_clock::time_point last_save_;
};

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "gossiptrain's peer over a float32 vector (use the gossiptrain package, not this)";
  // The peer's log goes to stderr: a Python program's stdout is its own (gossip-peer's is its log).
  spdlog::set_default_logger(spdlog::stderr_color_mt("gossiptrain"));
  nb::exception<apps::UsageError>(m, "UsageError", PyExc_ValueError);
  nb::exception<net::ConfigError>(m, "ConfigError", PyExc_ValueError);
  nb::exception<core::CheckpointError>(m, "CheckpointError", PyExc_ValueError);
  nb::class_<BufferPeer>(m, "Peer")
      .def(nb::init<Buffer, const std::vector<std::string>&>(), nb::arg("buffer"), nb::arg("args"))
      .def("join", &BufferPeer::join)
      .def("step", &BufferPeer::step)
      .def("close", &BufferPeer::close)
      .def("stats", &BufferPeer::stats)
      .def("save_checkpoint", &BufferPeer::save_checkpoint)
      .def("metric", &BufferPeer::metric)
      .def_prop_ro("closed", &BufferPeer::closed)
      .def_prop_ro("address", &BufferPeer::address)
      .def_prop_ro("peer_id", &BufferPeer::peer_id)
      .def_prop_ro("members", &BufferPeer::members)
      .def_prop_ro("steps", &BufferPeer::steps)
      .def_prop_ro("size", &BufferPeer::size)
      .def_prop_ro("fingerprint", &BufferPeer::fingerprint)
      .def_prop_ro("resumed", &BufferPeer::resumed);
  m.def("peer_flags",
        [] { return std::vector<std::string>(python_flags().begin(), python_flags().end()); });
  m.def("flag_help", [](const std::string& name) -> std::string {
    const auto* o = apps::peer_options().find(name);
    return o ? o->help : std::string();
  });
}
