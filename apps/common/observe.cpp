// The peer's observability sinks (see common_observe.hpp).
#include "apps/common/observe.hpp"

#include <spdlog/spdlog.h>

#include "net/socket/address.hpp"
#include "net/close_reason.hpp"

namespace gossiptrain::apps {

namespace {

// gossiptrain_connections_closed_total's label values: the typed close reasons, all of them.
std::vector<std::string> close_reason_names() {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < net::kCloseReasonCount; ++i)
    names.emplace_back(net::close_reason_name(static_cast<net::CloseReason>(i)));
  return names;
}

constexpr const char* kText = "text/plain; charset=utf-8";

std::string doing(const PeerHealth& h) {
  const auto seen = h.heartbeat.seen();
  std::string s = phase_name(h.phase.load());
  if (seen.beats > 0) s += ", step " + std::to_string(seen.step);
  return s;
}

}  // namespace

const char* phase_name(PeerHealth::Phase p) {
  switch (p) {
    case PeerHealth::Phase::Starting: return "starting";
    case PeerHealth::Phase::Joining: return "joining the swarm";
    case PeerHealth::Phase::Training: return "training";
    case PeerHealth::Phase::Lingering: return "lingering (training done, serving exchanges)";
    case PeerHealth::Phase::Stopping: return "stopping";
  }
  return "unknown";
}

net::HttpResponse PeerHealth::liveness() const {
  if (stalled.load())
    return {503, kText,
            "stalled: the training thread is stuck, " +
                core::Watchdog::describe(heartbeat.seen()) + "\n"};
  return {200, kText, "ok: " + doing(*this) + "\n"};
}

net::HttpResponse PeerHealth::readiness() const {
  if (stalled.load() || left_swarm.load())
    return {503, kText, "not ready: left the swarm after a stall of the training thread\n"};
  const Phase p = phase.load();
  if (p == Phase::Training || p == Phase::Lingering)
    return {200, kText, "ready: " + doing(*this) + "\n"};
  return {503, kText, std::string("not ready: ") + phase_name(p) + "\n"};
}

PeerObservers::PeerObservers(const PeerConfig& cfg, core::Metrics& metrics,
                             const PeerHealth& health)
    : metrics_(metrics) {
  if (!cfg.prometheus.empty()) {
    registry_ = std::make_unique<core::PrometheusRegistry>(cfg.train.batch, cfg.train.model,
                                                           close_reason_names());
    std::string host;
    std::uint16_t port = 0;
    net::split_host_port(cfg.prometheus, host, port);
    // The server thread reads the registry (its own lock, held for a copy); the training thread
    // never waits for a scrape.
    http_ = std::make_unique<
        net::HttpServer>(host, port, [reg = registry_.get(), &health](const std::string& path) {
      if (path == "/metrics")
        return net::HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", reg->render()};
      if (path == "/healthz") return health.liveness();
      if (path == "/readyz") return health.readiness();
      return net::HttpResponse{404, kText, "not found\n"};
    });
    metrics.add_sink(registry_.get());
    spdlog::info("prometheus: serving /metrics, /healthz and /readyz on {}:{}", host,
                 http_->port());
  }
  if (!cfg.tensorboard.empty()) {
    tensorboard_ = std::make_unique<core::TensorboardWriter>(cfg.tensorboard);
    metrics.add_sink(tensorboard_.get());
    spdlog::info("tensorboard: writing {}", tensorboard_->path());
  }
}

PeerObservers::~PeerObservers() {
  if (registry_) metrics_.remove_sink(registry_.get());
  if (tensorboard_) metrics_.remove_sink(tensorboard_.get());
  http_.reset();
}

}  // namespace gossiptrain::apps
