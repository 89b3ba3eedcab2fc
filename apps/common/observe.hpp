// What a peer shows to the outside while it runs: the Prometheus endpoint and the TensorBoard
// event files, both fed by the metric lines, switched on by --prometheus and --tensorboard.
#pragma once

#include <atomic>
#include <memory>

#include "apps/common/options.hpp"
#include "core/metrics.hpp"
#include "core/watchdog.hpp"
#include "core/observe/prometheus.hpp"
#include "core/observe/tensorboard.hpp"
#include "net/http_server.hpp"

namespace gossiptrain::apps {

// What /healthz and /readyz say (docs/peer.md, "Observability"): set by the peer's main and
// watchdog threads, read by the HTTP thread; it must outlive the PeerObservers that serve it.
struct PeerHealth {
  enum class Phase : int { Starting, Joining, Training, Lingering, Stopping };
  core::Heartbeat heartbeat;                // beaten by the training thread
  std::atomic<Phase> phase{Phase::Starting};
  std::atomic<bool> stalled{false};         // the watchdog's verdict, now
  std::atomic<bool> left_swarm{false};      // withdrawn after a stall: trains alone

  // /healthz (liveness): 503 while the training thread is stuck, else 200 with what it does.
  net::HttpResponse liveness() const;
  // /readyz (readiness): 200 once the peer has joined the swarm (or started alone) and trains or
  // lingers in it; 503 while it starts, joins or catches up, stops, or after it left the swarm.
  net::HttpResponse readiness() const;
};
const char* phase_name(PeerHealth::Phase p);

class PeerObservers {
 public:
  // Starts what cfg asks for and hangs it on metrics; /healthz and /readyz answer from health.
  // Throws std::runtime_error when the endpoint cannot listen or the event file cannot be
  // created (bad configuration).
  PeerObservers(const PeerConfig& cfg, core::Metrics& metrics, const PeerHealth& health);
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
