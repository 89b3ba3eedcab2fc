// The peer's observability sinks (see common_observe.hpp).
#include "apps/common/observe.hpp"

#include <spdlog/spdlog.h>

#include "net/address.hpp"
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

}  // namespace

PeerObservers::PeerObservers(const PeerConfig& cfg, core::Metrics& metrics) : metrics_(metrics) {
  if (!cfg.prometheus.empty()) {
    registry_ = std::make_unique<core::PrometheusRegistry>(cfg.train.batch, cfg.train.model,
                                                           close_reason_names());
    std::string host;
    std::uint16_t port = 0;
    net::split_host_port(cfg.prometheus, host, port);
    // The server thread reads the registry (its own lock, held for a copy); the training thread
    // never waits for a scrape.
    http_ = std::make_unique<
        net::HttpServer>(host, port, [reg = registry_.get()](const std::string& path) {
      if (path == "/metrics")
        return net::HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", reg->render()};
      if (path == "/healthz") return net::HttpResponse{200, "text/plain; charset=utf-8", "ok\n"};
      return net::HttpResponse{404, "text/plain; charset=utf-8", "not found\n"};
    });
    metrics.add_sink(registry_.get());
    spdlog::info("prometheus: serving /metrics and /healthz on {}:{}", host, http_->port());
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
