// gossip-bench scrape: what a Prometheus scraper costs the training loop. Training steps that emit
// a metric line each (50 times the peer's rate, the worst case for the sink) into a Prometheus
// registry, timed in interleaved rounds without and with the /metrics endpoint scraped by a
// client thread every --scrape-ms; reports both step times and their ratio.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/bench/bench.hpp"
#include "base/rng.hpp"
#include "core/metrics.hpp"
#include "core/model.hpp"
#include "core/observe/prometheus.hpp"
#include "kernels/backend.hpp"
#include "net/http_server.hpp"

namespace gossiptrain::apps {
namespace {

using Clock = std::chrono::steady_clock;

struct ScrapeBenchOptions {
  std::string backend = "cpu", model = "mlp:784-256-256-10";
  int batch = 32, steps = 2000, rounds = 7, scrape_ms = 1000;
  bool json = false;
};

const OptionTable<ScrapeBenchOptions>& scrape_options() {
  using O = Options<ScrapeBenchOptions>;
  using T = ScrapeBenchOptions;
  static const auto table = bench_table<ScrapeBenchOptions>(
      "one line of JSON (default: indented)",
      {
          O::text("backend", "auto|cpu|cuda", "compute backend (default cpu)", &T::backend),
          O::text("model", "SPEC", "the model (default mlp:784-256-256-10)", &T::model),
          O::number("batch", "B", "minibatch size (default 32)", &T::batch, 1, 1 << 20),
          O::number("steps", "N", "steps per round (default 2000: scrapes land in every round)",
                    &T::steps, 1, 1000000),
          O::number("rounds", "R", "rounds of each kind (default 7)", &T::rounds, 1, 1000),
          O::number("scrape-ms", "MS", "scrape interval (default 1000, as a 1 s scrape_interval)",
                    &T::scrape_ms, 1, 600000),
      });
  return table;
}

// GET /metrics on 127.0.0.1:port; the bytes of the answer.
std::size_t scrape(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  std::size_t got = 0;
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) > 0) {
      char buf[8192];
      for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) got += std::size_t(n);
    }
  }
  if (fd >= 0) ::close(fd);
  return got;
}

// The fastest round of each (rounds interleaved): a load that comes and goes slows both or
// neither; a median could take them at different moments.
nlohmann::json report(const ScrapeBenchOptions& o, const std::string& backend,
                      std::uint64_t scrapes, std::uint64_t scrape_bytes,
                      const std::vector<double>& off, const std::vector<double>& on) {
  const double a = *std::min_element(off.begin(), off.end());
  const double b = *std::min_element(on.begin(), on.end());
  return {{"subject", "scrape"},
          {"backend", backend},
          {"model", o.model},
          {"batch", o.batch},
          {"steps_per_round", o.steps},
          {"rounds", o.rounds},
          {"scrape_ms", o.scrape_ms},
          {"scrapes", scrapes},
          {"bytes_per_scrape", scrapes ? scrape_bytes / scrapes : 0},
          {"step_ms_scraped", b},
          {"step_ms_unscraped", a},
          {"ratio_scraped_over_unscraped", b / a},
          {"step_ms_scraped_median", median(on)},
          {"step_ms_unscraped_median", median(off)},
          {"timing", "interleaved rounds, fastest of each"}};
}

int run(const Args& args) {
  ScrapeBenchOptions o;
  if (auto rc = parse_bench_args("scrape", scrape_options(), args, o,
                                 "Times R interleaved rounds of N training steps (one metric line "
                                 "each) without and with /metrics scraped every MS ms.\n"))
    return *rc;
  std::unique_ptr<kernels::Backend> be;
  try {
    be = kernels::make_backend(o.backend, 0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gossip-bench scrape: %s\n", e.what());
    return 2;
  }
  core::Model m(*be, o.model, o.batch);
  m.init(1);
  const int F = m.input_dim();
  std::vector<float> xh(std::size_t(o.batch) * F);
  std::vector<std::int32_t> yh(std::size_t(o.batch));
  base::SplitMix64 r(1);
  for (auto& v : xh) v = float(r.uniform());
  for (auto& v : yh) v = std::int32_t(r.below(std::uint64_t(m.num_classes())));
  kernels::DeviceBuffer<float> x(*be, xh.size()), vel(*be, m.num_params());
  kernels::DeviceBuffer<std::int32_t> y(*be, yh.size());
  be->upload(x.data(), xh.data(), xh.size() * sizeof(float));
  be->upload(y.data(), yh.data(), yh.size() * sizeof(std::int32_t));

  core::PrometheusRegistry reg(o.batch, o.model);
  core::Metrics metrics("", "bench");
  metrics.add_sink(&reg);
  net::HttpServer server("127.0.0.1", 0, [&reg](const std::string&) {
    return net::HttpResponse{200, "text/plain; version=0.0.4", reg.render()};
  });
  std::atomic<bool> scraping{false}, quit{false};
  std::atomic<std::uint64_t> scrapes{0}, scrape_bytes{0};
  std::thread scraper([&] {
    while (!quit.load()) {
      if (scraping.load()) {
        scrape_bytes += scrape(server.port());
        ++scrapes;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(o.scrape_ms));
    }
  });
  std::int64_t step = 0;
  auto round_ms = [&] {
    const auto t0 = Clock::now();
    for (int s = 0; s < o.steps; ++s, ++step) {
      const float loss = m.forward_backward(x.data(), y.data(), o.batch);
      be->sgd_momentum(m.params(), m.grads(), vel.data(), m.num_params(), 1e-4f, 0.9f, 0.0f);
      metrics.emit("step", {{"step", step}, {"epoch", 0}, {"loss", loss}, {"lr", 1e-4}});
    }
    be->synchronize();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / o.steps;
  };
  for (int w = 0; w < 20; ++w) round_ms();  // warm-up
  std::vector<double> off, on;
  for (int k = 0; k < o.rounds; ++k) {
    scraping = false;
    off.push_back(round_ms());
    scraping = true;
    on.push_back(round_ms());
  }
  quit = true;
  scraper.join();
  metrics.remove_sink(&reg);
  const nlohmann::json j = report(o, be->name(), scrapes.load(), scrape_bytes.load(), off, on);
  std::printf("%s\n", o.json ? j.dump().c_str() : j.dump(2).c_str());
  return 0;
}

}  // namespace

GT_BENCH_SUBJECT("scrape", "a training step's time with /metrics scraped vs without", run);

}  // namespace gossiptrain::apps
