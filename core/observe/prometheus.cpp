// Metric lines -> Prometheus counters, gauges and a histogram (names after the Prometheus
// conventions: gossiptrain_ prefix, base units in the name, _total on counters).
#include "core/observe/prometheus.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace gossiptrain::core {

namespace {

double num(const nlohmann::json& f, const char* key, double fallback = 0) {
  auto it = f.find(key);
  return it != f.end() && it->is_number() ? it->get<double>() : fallback;
}

std::string str(const nlohmann::json& f, const char* key) {
  auto it = f.find(key);
  return it != f.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string fmt(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // The shortest text that reads back as v ("0.05", not "0.050000000000000003").
  char b[40];
  for (int prec = 6; prec <= 17; ++prec) {
    std::snprintf(b, sizeof b, "%.*g", prec, v);
    if (std::strtod(b, nullptr) == v) break;
  }
  return b;
}

class Out {
 public:
  void head(const std::string& name, const char* type, const char* help) {
    s_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const std::string& name, double v, const std::string& labels = "") {
    s_ += name;
    if (!labels.empty()) s_ += "{" + labels + "}";
    s_ += " " + fmt(v) + "\n";
  }
  void one(const std::string& name, const char* type, const char* help, double v) {
    head(name, type, help);
    sample(name, v);
  }
  std::string take() { return std::move(s_); }

 private:
  std::string s_;
};

std::string label(const char* k, const std::string& v) {
  return std::string(k) + "=\"" + prometheus_label_value(v) + "\"";
}

}  // namespace

std::string prometheus_label_value(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '\\') o += "\\\\";
    else if (c == '"') o += "\\\"";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

PrometheusRegistry::PrometheusRegistry(int batch, std::string model,
                                       std::vector<std::string> close_reasons)
    : batch_(batch), model_(std::move(model)) {
  for (auto& r : close_reasons) s_.closed[std::move(r)] = 0;
}

void PrometheusRegistry::on_metric(double t, const std::string& event, const nlohmann::json& f) {
  // What each metric line adds to the figures; lines of other events only move the clock.
  using Fold = void (*)(State&, const nlohmann::json&);
  static const std::map<std::string, Fold, std::less<>> kFolds = {
      {"step", &fold_step},
      {"eval", &fold_eval},
      {"exchange", &fold_exchange},
      {"member", &fold_member},
      {"ban", [](State& s, const nlohmann::json&) { s.bans += 1; }},
      {"catch_up",
       [](State& s, const nlohmann::json& f) {
         s.catch_ups[f.value("ok", false) ? "ok" : "failed"] += 1;
       }},
      {"catch_up_served",
       [](State& s, const nlohmann::json& f) {
         s.catch_ups_served[f.value("ok", false) ? "ok" : "failed"] += 1;
       }},
      {"checkpoint", [](State& s, const nlohmann::json&) { s.checkpoints += 1; }},
      {"exchange_alert",
       [](State& s, const nlohmann::json& f) {
         s.exchange_failing = str(f, "state") == "failing" ? 1 : 0;
       }},
      {"connection_closed",
       [](State& s, const nlohmann::json& f) {
         // Only the reasons the registry was given: a label never takes free text.
         if (auto it = s.closed.find(str(f, "reason")); it != s.closed.end()) it->second += 1;
       }},
      {"done", [](State& s, const nlohmann::json&) { s.done = true; }},
  };
  std::lock_guard<std::mutex> lock(mu_);
  s_.uptime_s = t;
  // Steps only rise: a counter that fell would read as a reset to Prometheus.
  if (f.contains("step")) s_.steps = std::max(s_.steps, num(f, "step"));
  if (const auto it = kFolds.find(event); it != kFolds.end()) it->second(s_, f);
}

void PrometheusRegistry::fold_step(State& s, const nlohmann::json& f) {
  s.steps_planned = num(f, "steps_total");
  s.epoch = num(f, "epoch");
  s.train_loss = num(f, "loss", -1);
  s.lr = num(f, "lr", -1);
  s.samples_per_s = num(f, "samples_per_s", -1);
}

void PrometheusRegistry::fold_eval(State& s, const nlohmann::json& f) {
  s.epoch = std::max(s.epoch, num(f, "epoch"));
  if (f.contains("train_loss")) s.train_loss = num(f, "train_loss", -1);
  s.test_acc = num(f, "test_acc", -1);
  s.test_loss = num(f, "test_loss", -1);
}

void PrometheusRegistry::fold_exchange(State& s, const nlohmann::json& f) {
  const bool ok = f.value("ok", false);
  const std::string reason = ok ? "ok" : str(f, "reason");
  s.exchanges[{ok ? "ok" : "failed", reason}] += 1;
  if (reason.rfind("refused:", 0) == 0) s.refusals[reason.substr(8)] += 1;
  s.bytes_sent += num(f, "bytes_sent");
  s.bytes_received += num(f, "bytes_received");
  const double d = num(f, "ms") / 1000.0;
  s.dur_count += 1;
  s.dur_sum += d;
  for (std::size_t i = 0; i < kDurationBucketsS.size(); ++i)
    if (d <= kDurationBucketsS[i]) {
      s.dur_buckets[i] += 1;
      break;
    }
  if (!ok) return;
  s.mix_weight = num(f, "w", -1);
  s.clip = num(f, "clip", -1);
  if (f.contains("diff_norm") && f["diff_norm"].is_number()) s.diff_norm = num(f, "diff_norm");
}

void PrometheusRegistry::fold_member(State& s, const nlohmann::json& f) {
  const std::string id = str(f, "member"), st = str(f, "state");
  auto it = s.members.find(id);
  const std::string before = it == s.members.end() ? "" : it->second;
  if (st == "suspect" && before != "suspect") s.suspicions += 1;
  // A suspected member heard alive again refuted the suspicion (a higher incarnation).
  if (st == "alive" && before == "suspect") s.refutations += 1;
  if (st == "dead" && before != "dead") s.deaths += 1;
  if (st == "left" && before != "left") s.leaves += 1;
  s.members[id] = st;
}

namespace {

// The three parts of the exposition (State is the registry's own; deduced, never named here).
template <class State>
void render_training(Out& o, const State& s, const std::string& model, std::int64_t batch) {
  o.head("gossiptrain_info", "gauge", "Constant 1, labelled with the model spec.");
  o.sample("gossiptrain_info", 1, label("model", model));
  o.one("gossiptrain_uptime_seconds", "gauge", "Seconds since the peer's metrics started.",
        s.uptime_s);
  o.one("gossiptrain_training_done", "gauge", "1 once training has ended.", s.done ? 1 : 0);
  o.one("gossiptrain_steps_total", "counter",
        "Optimizer steps taken (updated with the step lines, every 50 steps, and evaluations).",
        s.steps);
  o.one("gossiptrain_samples_total", "counter", "Training samples seen (steps x batch).",
        s.steps * batch);
  o.one("gossiptrain_steps_planned", "gauge", "Steps the whole run will take.", s.steps_planned);
  o.one("gossiptrain_epoch", "gauge", "Current epoch.", s.epoch);
  // Figures not measured yet are left out rather than shown as a number.
  if (s.train_loss >= 0)
    o.one("gossiptrain_train_loss", "gauge", "Mean training loss since the last step line.",
          s.train_loss);
  if (s.lr >= 0) o.one("gossiptrain_learning_rate", "gauge", "Current learning rate.", s.lr);
  if (s.samples_per_s >= 0)
    o.one("gossiptrain_samples_per_second", "gauge", "Training throughput this epoch.",
          s.samples_per_s);
  if (s.test_acc >= 0)
    o.one("gossiptrain_test_accuracy_ratio", "gauge", "Last test accuracy (0..1).", s.test_acc);
  if (s.test_loss >= 0) o.one("gossiptrain_test_loss", "gauge", "Last test loss.", s.test_loss);

}

template <class State>
void render_exchanges(Out& o, const State& s) {
  o.head("gossiptrain_exchanges_total", "counter",
         "Averaging exchanges by result (ok/failed) and reason.");
  for (const auto& [k, v] : s.exchanges)
    o.sample("gossiptrain_exchanges_total", v,
             label("result", k.first) + "," + label("reason", k.second));
  o.head("gossiptrain_exchange_refusals_total", "counter",
         "Exchanges refused (fingerprint, size, wire, weighting, banned).");
  for (const auto& [k, v] : s.refusals)
    o.sample("gossiptrain_exchange_refusals_total", v, label("reason", k));
  o.one("gossiptrain_exchange_sent_bytes_total", "counter", "Bytes sent in exchanges.",
        s.bytes_sent);
  o.one("gossiptrain_exchange_received_bytes_total", "counter", "Bytes received in exchanges.",
        s.bytes_received);
  o.head("gossiptrain_exchange_duration_seconds", "histogram",
         "Exchange duration, request to mix or failure.");
  double cum = 0;
  for (std::size_t i = 0; i < PrometheusRegistry::kDurationBucketsS.size(); ++i) {
    cum += s.dur_buckets[i];
    o.sample("gossiptrain_exchange_duration_seconds_bucket", cum,
             label("le", fmt(PrometheusRegistry::kDurationBucketsS[i])));
  }
  o.sample("gossiptrain_exchange_duration_seconds_bucket", s.dur_count, label("le", "+Inf"));
  o.sample("gossiptrain_exchange_duration_seconds_sum", s.dur_sum);
  o.sample("gossiptrain_exchange_duration_seconds_count", s.dur_count);
  if (s.diff_norm >= 0)
    o.one(
        "gossiptrain_exchange_diff_norm", "gauge",
        "||r - s|| agreed in the last exchange that measured it (consensus distance to a partner).",
        s.diff_norm);
  if (s.mix_weight >= 0)
    o.one("gossiptrain_exchange_mix_weight", "gauge", "Mixing weight w of the last exchange.",
          s.mix_weight);
  if (s.clip >= 0)
    o.one("gossiptrain_exchange_clip_factor", "gauge", "Clip factor c of the last exchange.",
          s.clip);
  o.one("gossiptrain_exchanges_failing", "gauge",
        "1 while exchanges keep failing (exchange_alert), else 0.", s.exchange_failing);

}

template <class State>
void render_members(Out& o, const State& s) {
  std::map<std::string, double> by_state = {{"alive", 0}, {"suspect", 0}, {"dead", 0}, {"left", 0}};
  for (const auto& [id, st] : s.members) by_state[st] += 1;
  o.head("gossiptrain_members", "gauge", "Other members known, by state.");
  for (const auto& [st, v] : by_state) o.sample("gossiptrain_members", v, label("state", st));
  o.one("gossiptrain_member_suspicions_total", "counter", "Members this peer saw become suspect.",
        s.suspicions);
  o.one("gossiptrain_member_refutations_total", "counter",
        "Suspected members seen alive again (refuted suspicions).", s.refutations);
  o.one("gossiptrain_member_deaths_total", "counter", "Members this peer saw declared dead.",
        s.deaths);
  o.one("gossiptrain_member_leaves_total", "counter", "Members this peer saw leave.", s.leaves);
  o.one("gossiptrain_bans_total", "counter", "Partners banned by this peer.", s.bans);
  o.head("gossiptrain_catch_ups_total", "counter", "Catch-ups this peer made, by result.");
  for (const auto& [k, v] : s.catch_ups)
    o.sample("gossiptrain_catch_ups_total", v, label("result", k));
  o.head("gossiptrain_catch_ups_served_total", "counter", "Catch-ups served to others, by result.");
  for (const auto& [k, v] : s.catch_ups_served)
    o.sample("gossiptrain_catch_ups_served_total", v, label("result", k));
  o.one("gossiptrain_checkpoints_total", "counter", "Checkpoints written.", s.checkpoints);
  if (s.closed.empty()) return;
  o.head("gossiptrain_connections_closed_total", "counter",
         "Established connections closed, by typed reason.");
  for (const auto& [k, v] : s.closed)
    o.sample("gossiptrain_connections_closed_total", v, label("reason", k));
}

}  // namespace

std::string PrometheusRegistry::render() const {
  State s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = s_;
  }
  Out o;
  render_training(o, s, model_, batch_);
  render_exchanges(o, s);
  render_members(o, s);
  return o.take();
}

}  // namespace gossiptrain::core
