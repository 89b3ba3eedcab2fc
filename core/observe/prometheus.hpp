// The peer's figures in the Prometheus text exposition format (version 0.0.4), fed by the metric
// lines (a MetricSink): each figure is emitted once by the peer and read here, by the JSONL file
// and by the TensorBoard writer alike.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/metrics.hpp"

namespace gossiptrain::core {

class PrometheusRegistry final : public MetricSink {
 public:
  // batch turns steps into samples; model goes into gossiptrain_info. close_reasons: the names
  // of the typed close reasons (net::close_reason_name), the only label values of
  // gossiptrain_connections_closed_total: each is shown from the start, a connection_closed line
  // naming anything else is not counted (a label never takes free text).
  PrometheusRegistry(int batch, std::string model, std::vector<std::string> close_reasons = {});

  void on_metric(double t, const std::string& event, const nlohmann::json& fields) override;
  // The whole exposition, rendered from a copy taken under the lock (the emitting threads wait
  // only for the copy, never for the formatting or the network).
  std::string render() const;

  // Upper bounds (seconds) of the exchange-duration histogram's buckets, +Inf besides.
  static constexpr std::array<double, 12> kDurationBucketsS = {
      0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0};

 private:
  struct State {
    std::string peer = "local";
    double uptime_s = 0;
    double steps = 0, steps_planned = 0, epoch = 0;
    double train_loss = -1, lr = -1, samples_per_s = -1;
    double test_acc = -1, test_loss = -1;
    std::map<std::pair<std::string, std::string>, double> exchanges;  // (result, reason)
    std::map<std::string, double> refusals;                           // reason after "refused:"
    double bytes_sent = 0, bytes_received = 0;
    std::array<double, kDurationBucketsS.size()> dur_buckets{};  // not cumulative
    double dur_count = 0, dur_sum = 0;
    double diff_norm = -1, mix_weight = -1, clip = -1;
    std::map<std::string, std::string> members;  // id -> state
    double suspicions = 0, refutations = 0, deaths = 0, leaves = 0;
    double bans = 0;
    std::map<std::string, double> catch_ups;         // result
    std::map<std::string, double> catch_ups_served;  // result
    double checkpoints = 0;
    double exchange_failing = 0;
    std::map<std::string, double> closed;  // connections closed, by typed reason
    bool done = false;
  };
  // What a step, eval, exchange and member line add to the figures.
  static void fold_step(State& s, const nlohmann::json& f);
  static void fold_eval(State& s, const nlohmann::json& f);
  static void fold_exchange(State& s, const nlohmann::json& f);
  static void fold_member(State& s, const nlohmann::json& f);

  int batch_;
  std::string model_;
  mutable std::mutex mu_;
  State s_;
};

// A label value escaped for the exposition format (backslash, double quote, newline).
std::string prometheus_label_value(const std::string& v);

}  // namespace gossiptrain::core
