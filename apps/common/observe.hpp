// What a peer shows to the outside while it runs: the Prometheus endpoint and the TensorBoard
// event files, both fed by the metric lines, switched on by --prometheus and --tensorboard.
#pragma once

#include <memory>

#include "apps/common/options.hpp"
#include "core/metrics.hpp"
#include "core/prometheus_registry.hpp"
#include "core/tensorboard_writer.hpp"
#include "net/http_server.hpp"

namespace gossiptrain::apps {

class PeerObservers {
 public:
  // Starts what cfg asks for and hangs it on metrics. Throws std::runtime_error when the
  // endpoint cannot listen or the event file cannot be created (bad configuration).
  PeerObservers(const PeerConfig& cfg, core::Metrics& metrics);
  ~PeerObservers();  // unhooks from metrics, then stops the server
  PeerObservers(const PeerObservers&) = delete;
  PeerObservers& operator=(const PeerObservers&) = delete;

 private:
  core::Metrics& metrics_;
  std::unique_ptr<core::PrometheusRegistry> registry_;
  std::unique_ptr<net::HttpServer> http_;
  std::unique_ptr<core::TensorboardWriter> tensorboard_;
};

}  // namespace gossiptrain::apps
