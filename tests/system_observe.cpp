// The observability outputs read by the real tools: a real Prometheus server scraping the peers of
// a launch, TensorBoard's own reader during a run, the safetensors package and a NumPy forward
// pass over the exported model, and hostile clients against a training peer's endpoint.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/checkpoint.hpp"
#include "core/model.hpp"
#include "net/close_reason.hpp"
#include "tests/system_process.hpp"
#include "tests/test_util.hpp"

using namespace std::chrono_literals;
using gt_test::Process;
namespace fs = std::filesystem;

namespace {

const std::string kFashion = "/usr/share/datasets/fashion-mnist";

std::string venv_python() { return std::string(GT_OBS_VENV) + "/bin/python"; }
std::string obs_script() { return std::string(GT_SOURCE_DIR) + "/scripts/test/obs_check.py"; }

// The venv of scripts/test/obs-venv.sh with the packages, or an empty string and a warning.
bool have_venv() {
  if (::access(venv_python().c_str(), X_OK) == 0) return true;
  WARN("skipped: no " << venv_python() << " (run scripts/test/obs-venv.sh " << GT_OBS_VENV << ")");
  return false;
}

// Runs obs_check.py with args and returns the JSON object it prints (its last line).
nlohmann::json obs_check(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv{venv_python(), obs_script()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::filesystem::remove(log);
  Process p(argv, log);
  REQUIRE(p.wait_for(300s));
  const std::string out = gt_test::read_file(log);
  INFO(out.substr(out.size() > 4000 ? out.size() - 4000 : 0));
  REQUIRE(p.exit_code() == 0);
  std::string last;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') last = line;
  return nlohmann::json::parse(last);
}

// A plain HTTP GET to 127.0.0.1:port (status line and body); "" when it cannot connect.
std::string http_get(int port, const std::string& target) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(std::uint16_t(port));
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "";
  }
  const std::string req =
      "GET " + target + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";  // 1.0: never chunked
  [[maybe_unused]] auto n = ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[8192];
  for (;;) {
    const ssize_t k = ::recv(fd, buf, sizeof buf, 0);
    if (k <= 0) break;
    out.append(buf, std::size_t(k));
  }
  ::close(fd);
  return out;
}

std::string body_of(const std::string& resp) {
  const auto p = resp.find("\r\n\r\n");
  return p == std::string::npos ? "" : resp.substr(p + 4);
}

std::vector<nlohmann::json> lines_of(const std::string& metrics, const std::string& event) {
  std::vector<nlohmann::json> out;
  for (auto& j : gt_test::read_metrics(metrics))
    if (j["event"] == event) out.push_back(j);
  return out;
}

std::vector<std::string> peer_argv(const std::vector<std::string>& flags) {
  std::vector<std::string> a{gt_test::peer_bin()};
  a.insert(a.end(), flags.begin(), flags.end());
  return a;
}

// Trains one peer alone on a shard of Fashion-MNIST with --export, then checks the export with
// the safetensors package against its checkpoint, and a NumPy forward pass against its accuracy.
void check_export(const std::string& model, const std::string& shards, const std::string& name) {
  if (!fs::exists(kFashion)) {
    WARN("skipped: no Fashion-MNIST at " << kFashion);
    return;
  }
  if (!have_venv()) return;
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  gt_test::TempDir dir(name);
  const std::string st = dir / "model.safetensors", metrics = dir / "m.jsonl";
  Process p(
      peer_argv({"--data",       kFashion, "--backend",        "cpu",        "--model",  model,
                 "--epochs",     "1",      "--batch",          "32",         "--lr",     "0.05",
                 "--num-shards", shards,   "--shard",          "0",          "--seed",   "5",
                 "--metrics",    metrics,  "--checkpoint-dir", dir / "ckpt", "--export", st}),
      dir / "log.txt");
  REQUIRE(p.wait_for(400s));
  INFO(gt_test::read_file(dir / "log.txt"));
  REQUIRE(p.exit_code() == 0);
  const auto done = lines_of(metrics, "done");
  REQUIRE(done.size() == 1);
  const double reported = done[0]["final_test_acc"].get<double>();

  // The tensors, as the safetensors package reads them, against the checkpoint's arena.
  const auto t = obs_check({"tensors", st}, dir / "py.log");
  CHECK(t["metadata"]["model"] == model);
  const auto ckpt = gossiptrain::core::load_checkpoint(dir / "ckpt");
  const auto layers = gossiptrain::core::parse_model_layers(model);
  std::size_t n_values = 0;
  int fc = 0, conv = 0;
  bool after_map = false;  // the layer before was a conv or a pool: its input is permuted
  for (const auto& l : layers) {
    const bool permuted_input = after_map;
    after_map = l.kind != gossiptrain::core::LayerKind::Dense;
    if (!l.has_params()) continue;
    const bool is_conv = l.kind == gossiptrain::core::LayerKind::Conv;
    const std::string pre = is_conv ? "conv" + std::to_string(conv++) : "fc" + std::to_string(fc++);
    const auto& w = t["tensors"][pre + ".weight"];
    const auto& b = t["tensors"][pre + ".bias"];
    REQUIRE(w.is_object());
    CHECK(w["dtype"] == "float32");
    if (is_conv) CHECK(w["shape"] == nlohmann::json({l.out, l.in_c, l.k, l.k}));
    else CHECK(w["shape"] == nlohmann::json({l.out, l.in}));
    // Biases are stored as they are; weights as a permutation for convs: compare sorted values
    // there, and element by element for dense layers that follow no conv.
    for (int o = 0; o < l.out; ++o) CHECK(b["data"][o].get<float>() == ckpt.params[l.b_offset + o]);
    std::vector<float> got = w["data"].get<std::vector<float>>();
    std::vector<float> want(
        ckpt.params.begin() + std::ptrdiff_t(l.w_offset),
        ckpt.params.begin() + std::ptrdiff_t(l.w_offset + std::size_t(l.out) * l.in));
    if (is_conv || permuted_input) {
      std::sort(got.begin(), got.end());
      std::sort(want.begin(), want.end());
    }
    CHECK(got == want);
    n_values += got.size() + std::size_t(l.out);
  }
  CHECK(n_values == ckpt.params.size());

  // A NumPy forward pass (PyTorch layout) over the whole test set: the peer's accuracy.
  const auto f = obs_check({"forward", st, kFashion}, dir / "py.log");
  WARN(name << ": peer reported " << reported << ", NumPy forward pass " << f["acc"]);
  CHECK(f["rows"] == 10000);
  CHECK(std::abs(f["acc"].get<double>() - reported) <= 0.001);

  // The same model on demand from the checkpoint: the same accuracy, the same tensors.
  std::string out;
  const int rc = gt_test::run_app("gossip-peer",
                                  {"--export", dir / "again.safetensors", "--from-checkpoint",
                                   dir / "ckpt", "--data", kFashion, "--backend", "cpu"},
                                  dir / "export.log", &out, 300s);
  INFO(out);
  REQUIRE(rc == 0);
  nlohmann::json line;
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);)
    if (!l.empty() && l[0] == '{') line = nlohmann::json::parse(l);
  CHECK(line["model"] == model);
  CHECK(std::abs(line["test_acc"].get<double>() - reported) < 1e-9);
  const auto t2 = obs_check({"tensors", dir / "again.safetensors"}, dir / "py.log");
  CHECK(t2["tensors"] == t["tensors"]);
}

}  // namespace

TEST_CASE(
    "export: an MLP read by the safetensors package equals its checkpoint and scores the "
    "peer's accuracy in a NumPy forward pass",
    "[system][observe]") {
  check_export("mlp:784-64-32-10", "10", "gt-export-mlp");
}

TEST_CASE(
    "export: a CNN read by the safetensors package equals its checkpoint and scores the "
    "peer's accuracy in a NumPy forward pass (PyTorch layout)",
    "[system][observe]") {
  check_export("cnn:28x28x1-c4k3-p2-c8k3-p2-f32-10", "30", "gt-export-cnn");
}

TEST_CASE(
    "tensorboard: TensorBoard's reader sees a peer's curves during the run, equal to its "
    "metric lines",
    "[system][observe]") {
  if (!have_venv()) return;
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  gt_test::TempDir dir("gt-tb-run");
  const std::string metrics = dir / "m.jsonl", tb = dir / "tb";
  Process p(
      peer_argv({"--data", "synthetic", "--backend", "cpu", "--model", "mlp:784-32-10", "--epochs",
                 "100000", "--batch", "32", "--metrics", metrics, "--tensorboard", tb}),
      dir / "log.txt");
  // During the run: the reader sees at least three points of step/loss while the peer trains.
  nlohmann::json during;
  const bool seen = gt_test::eventually(120s, [&] {
    if (!fs::exists(tb)) return false;  // the peer loads its data first
    during = obs_check({"tb", tb}, dir / "py.log");
    return during.contains("step/loss") && during["step/loss"].size() >= 3;
  });
  CHECK(p.running());
  REQUIRE(seen);
  p.signal(SIGTERM);
  REQUIRE(p.wait_for(60s));
  const auto after = obs_check({"tb", tb}, dir / "py.log");
  // Every step line's loss and learning rate, and every evaluation, at its step, as float32.
  const auto steps = lines_of(metrics, "step");
  REQUIRE(steps.size() >= 3);
  REQUIRE(after["step/loss"].size() == steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    CHECK(after["step/loss"][i][0] == steps[i]["step"]);
    CHECK(after["step/loss"][i][1].get<float>() == steps[i]["loss"].get<float>());
    CHECK(after["step/lr"][i][1].get<float>() == steps[i]["lr"].get<float>());
  }
  const auto evals = lines_of(metrics, "eval");
  REQUIRE(after.contains("eval/test_acc") == !evals.empty());
  for (std::size_t i = 0; i < evals.size(); ++i)
    CHECK(after["eval/test_acc"][i][1].get<float>() == evals[i]["test_acc"].get<float>());
}

TEST_CASE("prometheus: a real Prometheus scrapes the 4 peers of a launch with its prometheus.yml",
          "[system][observe]") {
  const std::string prom = "/usr/bin/prometheus";
  if (::access(prom.c_str(), X_OK) != 0) {
    WARN("skipped: no " << prom << " (Debian package prometheus; scripts/setup.sh installs it)");
    return;
  }
  gt_test::TempDir dir("gt-prom");
  const int base = gt_test::free_port_block(4);  // 4 consecutive free ports
  const std::string run = dir / "run";
  Process launch(
      {gt_test::app_bin("gossip-launch"), "--peers", "4", "--out", run, "--prometheus-base-port",
       std::to_string(base), "--no-plots", "--data", "synthetic", "--backend", "cpu", "--model",
       "mlp:784-32-10", "--epochs", "100000", "--gossip-every", "2"},
      dir / "launch.log");
  REQUIRE(gt_test::eventually(60s, [&] { return fs::exists(run + "/prometheus.yml"); }));
  const std::string yml = gt_test::read_file(run + "/prometheus.yml");
  for (int i = 0; i < 4; ++i)
    CHECK_THAT(yml, Catch::Contains("127.0.0.1:" + std::to_string(base + i)));
  const int prom_port = gt_test::free_port();
  Process server(
      {prom, "--config.file=" + run + "/prometheus.yml", "--storage.tsdb.path=" + dir / "tsdb",
       "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
      dir / "prometheus.log");
  if (!gt_test::eventually(30s, [&] {
        return server.running() && http_get(prom_port, "/-/ready").rfind("HTTP/1.0 200", 0) == 0;
      })) {
    WARN("skipped: Prometheus did not start:\n" << gt_test::read_file(dir / "prometheus.log"));
    return;
  }
  auto query = [&](const std::string& q) {
    std::string enc;
    for (char c : q) {
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') enc += c;
      else {
        char b[4];
        std::snprintf(b, sizeof b, "%%%02X", static_cast<unsigned char>(c));
        enc += b;
      }
    }
    const auto j = nlohmann::json::parse(body_of(http_get(prom_port, "/api/v1/query?query=" + enc)),
                                         nullptr, false);
    return j.is_object() && j["status"] == "success" ? j["data"]["result"]
                                                     : nlohmann::json::array();
  };
  auto by_peer = [](const nlohmann::json& result) {
    std::map<std::string, double> m;
    for (const auto& r : result)
      m[r["metric"].value("peer", "")] = std::stod(r["value"][1].get<std::string>());
    return m;
  };
  // All four up, with steps counted and exchanges made.
  INFO(gt_test::read_file(dir / "launch.log"));
  CHECK(gt_test::eventually(90s, [&] {
    auto up = by_peer(query("up"));
    auto ex = by_peer(query("sum by (peer) (gossiptrain_exchanges_total{result=\"ok\"})"));
    auto steps = by_peer(query("gossiptrain_steps_total"));
    if (up.size() != 4 || ex.size() != 4 || steps.size() != 4) return false;
    for (const auto& [k, v] : up)
      if (v != 1 || steps[k] <= 0 || ex[k] <= 0) return false;
    return true;
  }));
  for (const char* name : {"gossiptrain_train_loss", "gossiptrain_exchange_duration_seconds_count",
                           "gossiptrain_exchange_sent_bytes_total", "gossiptrain_members",
                           "gossiptrain_samples_total"}) {
    INFO(name);
    CHECK(query(name).size() >= 4);
  }
  // Counters only rise: over the last 30 s of samples of every peer.
  std::this_thread::sleep_for(6s);  // a few more scrapes (every 2 s) to compare
  for (const char* name : {"gossiptrain_steps_total", "gossiptrain_exchange_sent_bytes_total"}) {
    const auto r = query(std::string(name) + "[30s]");
    REQUIRE(r.size() == 4);
    for (const auto& series : r) {
      double prev = -1;
      REQUIRE(series["values"].size() >= 2);
      for (const auto& v : series["values"]) {
        const double x = std::stod(v[1].get<std::string>());
        CHECK(x >= prev);
        prev = x;
      }
    }
  }
  // Closed connections by typed reason: every reason a series of every peer from the start (the
  // bounded set of net::CloseReason), no other label value.
  const auto closed = query("gossiptrain_connections_closed_total");
  CHECK(closed.size() == 4 * gossiptrain::net::kCloseReasonCount);
  for (const auto& series : closed) {
    const std::string reason = series["metric"].value("reason", "");
    INFO(reason);
    CHECK(reason.find_first_not_of("abcdefghijklmnopqrstuvwxyz_") == std::string::npos);
  }
  // Kill peer 3 for real: its target goes down, the others stay up.
  const auto cfg = nlohmann::json::parse(gt_test::read_file(run + "/config.json"));
  const int pid3 = cfg["peer_list"][3]["pid"].get<int>();
  REQUIRE(pid3 > 0);
  ::kill(pid3, SIGKILL);
  CHECK(gt_test::eventually(30s, [&] {
    auto up = by_peer(query("up"));
    return up.size() == 4 && up["peer3"] == 0 && up["peer0"] == 1 && up["peer1"] == 1 &&
           up["peer2"] == 1;
  }));
  // The survivors' connections to the killed peer closed: counted under a typed reason.
  CHECK(gt_test::eventually(30s, [&] {
    return !query("sum by (peer) (gossiptrain_connections_closed_total{peer!=\"peer3\","
                  "reason!=\"unspecified\"}) > 0")
                .empty();
  }));
  server.signal(SIGTERM);
  CHECK(server.wait_for(30s));
  launch.signal(SIGINT);
  CHECK(launch.wait_for(60s));
}

TEST_CASE(
    "prometheus endpoint under hostile clients: closed within the deadline, the peer goes "
    "on training and exchanging",
    "[system][observe]") {
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  gt_test::TempDir dir("gt-prom-hostile");
  const int p0 = gt_test::free_port(), p1 = gt_test::free_port(), http = gt_test::free_port();
  std::ofstream(dir / "net.key") << std::string(64, 'a') << "\n";
  const std::vector<std::string> common = {
      "--data",     "synthetic", "--backend",      "cpu", "--model",       "mlp:784-32-10",
      "--epochs",   "100000",    "--gossip-every", "2",   "--network-key", dir / "net.key",
      "--net-nice", "0",         "--train-nice",   "5"};
  auto flags0 = common, flags1 = common;
  flags0.insert(flags0.end(), {"--listen", "127.0.0.1:" + std::to_string(p0), "--identity",
                               dir / "id0", "--metrics", dir / "m0.jsonl", "--prometheus",
                               "127.0.0.1:" + std::to_string(http)});
  flags1.insert(flags1.end(),
                {"--listen", "127.0.0.1:" + std::to_string(p1), "--identity", dir / "id1",
                 "--metrics", dir / "m1.jsonl", "--seeds", "127.0.0.1:" + std::to_string(p0)});
  Process a(peer_argv(flags0), dir / "log0.txt");
  REQUIRE(gt_test::eventually(30s, [&] { return gt_test::port_open(p0); }));
  Process b(peer_argv(flags1), dir / "log1.txt");
  INFO(gt_test::read_file(dir / "log0.txt"));
  REQUIRE(
      gt_test::eventually(60s, [&] { return lines_of(dir / "m0.jsonl", "exchange").size() >= 2; }));
  CHECK_THAT(http_get(http, "/healthz"), Catch::StartsWith("HTTP/1.1 200"));
  // Joined (peer 1 averages with it) and training: ready.
  CHECK_THAT(body_of(http_get(http, "/readyz")), Catch::StartsWith("ready: training, step "));
  const auto steps_before = lines_of(dir / "m0.jsonl", "step").size();
  const auto ex_before = lines_of(dir / "m0.jsonl", "exchange").size();

  auto connect_raw = [&] {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons(std::uint16_t(http));
    timeval tv{15, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    return fd;
  };
  // Seconds until the server closes fd after sending what.
  auto time_to_close = [&](int fd, const std::string& what) {
    const auto t0 = std::chrono::steady_clock::now();
    std::size_t off = 0;
    while (off < what.size()) {
      const ssize_t n = ::send(fd, what.data() + off, what.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += std::size_t(n);
    }
    char buf[4096];
    while (::recv(fd, buf, sizeof buf, 0) > 0) {
    }
    ::close(fd);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // Garbage, a 1 MB request line, a slow client (the deadline is 5 s), 500 idle connections.
  CHECK(time_to_close(connect_raw(), std::string("\x00\x01\x02garbage\r\n\r\n", 14)) < 2.0);
  CHECK(time_to_close(connect_raw(), "GET /" + std::string(1 << 20, 'x') + " HTTP/1.1\r\n\r\n") <
        6.0);
  const double slow = time_to_close(connect_raw(), "GET /metrics HTTP/1.1\r\nUser-Agent: sl");
  CHECK(slow > 4.0);
  CHECK(slow < 8.0);
  std::vector<int> idle;
  for (int i = 0; i < 500; ++i) idle.push_back(connect_raw());
  const auto t0 = std::chrono::steady_clock::now();
  for (int fd : idle) time_to_close(fd, "");
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 8.0);
  // Still answering, still training and exchanging.
  const auto metrics = body_of(http_get(http, "/metrics"));
  CHECK_THAT(metrics, Catch::Contains("gossiptrain_steps_total"));
  CHECK(gt_test::eventually(60s, [&] {
    return lines_of(dir / "m0.jsonl", "step").size() > steps_before + 2 &&
           lines_of(dir / "m0.jsonl", "exchange").size() > ex_before + 2;
  }));
  const std::string log = gt_test::read_file(dir / "log0.txt");
  CHECK_THAT(log, Catch::Contains("http: closed"));
  CHECK_THAT(log, Catch::Contains("no complete request within 5000 ms"));
  CHECK(a.running());
  a.signal(SIGTERM);
  b.signal(SIGTERM);
  CHECK(a.wait_for(60s));
  CHECK(b.wait_for(60s));
}

TEST_CASE(
    "gossip-launch --export-model: the swarm model is the mean of the finished peers, "
    "evaluated and reported, --tensorboard gives each peer its run",
    "[system][observe]") {
  gt_test::TempDir dir("gt-swarm-export");
  const std::string run = dir / "run";
  std::string out;
  const int rc = gt_test::run_app(
      "gossip-launch",
      {"--peers", "3", "--out", run, "--no-plots", "--data", "synthetic", "--backend", "cpu",
       "--model", "mlp:784-32-10", "--epochs", "3", "--export-model", "--tensorboard"},
      dir / "launch.log", &out, 400s);
  INFO(out);
  REQUIRE(rc == 0);
  const auto summary = nlohmann::json::parse(gt_test::read_file(run + "/summary.json"));
  const auto& m = summary["swarm_model"];
  REQUIRE(m.contains("test_acc"));
  CHECK(m["peers"] == 3);
  CHECK(m["test_acc"].get<double>() > 0.0);
  CHECK_THAT(out, Catch::Contains("swarm model test acc"));
  // The exported tensors are the mean of the three final checkpoints (float32 sums in double).
  const auto layers = gossiptrain::core::parse_model_layers("mlp:784-32-10");
  std::vector<gossiptrain::core::Checkpoint> c;
  for (int i = 0; i < 3; ++i)
    c.push_back(gossiptrain::core::load_checkpoint(run + "/peer" + std::to_string(i) + "/ckpt"));
  if (have_venv()) {
    const auto t = obs_check({"tensors", run + "/swarm/model.safetensors"}, dir / "py.log");
    const auto w = t["tensors"]["fc1.weight"]["data"].get<std::vector<float>>();
    const auto& l = layers[1];
    REQUIRE(w.size() == std::size_t(l.out) * l.in);
    for (std::size_t k = 0; k < w.size(); ++k) {
      const std::size_t at = l.w_offset + k;
      const float mean = float((double(c[0].params[at]) + c[1].params[at] + c[2].params[at]) / 3.0);
      REQUIRE(w[k] == mean);
    }
  }
  for (int i = 0; i < 3; ++i) {
    bool found = false;
    for (const auto& e : fs::directory_iterator(run + "/tensorboard/peer" + std::to_string(i)))
      found |= e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
    CHECK(found);
  }
}

// Issue #44: /healthz answered "ok" whatever training did (it showed the HTTP thread alive), and
// nothing said whether a peer had joined. Now /healthz follows the watchdog, /readyz the join.
TEST_CASE(
    "/readyz says not ready while a peer waits for its cohort and /healthz says ok, and a stuck "
    "training thread turns /healthz and /readyz to 503",
    "[system][observe]") {
  gt_test::TempDir dir("gt-health");
  std::ofstream(dir / "net.key") << std::string(64, 'b') << "\n";
  const std::vector<std::string> common = {
      "--data",          "synthetic",  "--backend",   "cpu",       "--model", "mlp:784-32-10",
      "--epochs",        "100000",     "--network-key", dir / "net.key", "--linger", "0"};
  {
    // --min-peers 2 and nobody else: it waits to join, training has not started.
    const int port = gt_test::free_port(), http = gt_test::free_port();
    auto flags = common;
    flags.insert(flags.end(), {"--listen", "127.0.0.1:" + std::to_string(port), "--identity",
                               dir / "id0", "--min-peers", "2", "--min-peers-timeout", "60",
                               "--prometheus", "127.0.0.1:" + std::to_string(http)});
    Process p(peer_argv(flags), dir / "log0.txt");
    INFO(gt_test::read_file(dir / "log0.txt"));
    // The endpoint serves from the peer's start: "starting" until it waits for its cohort (a
    // loaded CI machine answered that first, 2026-11-30), then "joining the swarm"; 503 both.
    std::string ready;
    std::vector<std::string> bodies;
    const bool joining = gt_test::eventually(30s, [&] {
      ready = http_get(http, "/readyz");
      if (ready.empty()) return false;
      if (bodies.empty() || bodies.back() != body_of(ready)) bodies.push_back(body_of(ready));
      return body_of(ready) == "not ready: joining the swarm\n";
    });
    std::string seen;
    for (const auto& b : bodies) seen += b;
    INFO("/readyz said, in turn:\n" << seen);
    REQUIRE(joining);
    CHECK_THAT(ready, Catch::StartsWith("HTTP/1.1 503"));
    for (const auto& b : bodies)
      CHECK((b == "not ready: starting\n" || b == "not ready: joining the swarm\n"));
    const std::string live = http_get(http, "/healthz");
    CHECK_THAT(live, Catch::StartsWith("HTTP/1.1 200"));
    CHECK(body_of(live) == "ok: joining the swarm\n");
    p.signal(SIGTERM);
    REQUIRE(p.wait_for(30s));
  }
  {
    // Alone, training; its training thread hangs for good at step 200 (a test-only fault).
    const int port = gt_test::free_port(), http = gt_test::free_port();
    auto flags = common;
    flags.insert(flags.end(), {"--listen", "127.0.0.1:" + std::to_string(port), "--identity",
                               dir / "id1", "--stall-timeout", "3", "--stop-grace", "3",
                               "--prometheus", "127.0.0.1:" + std::to_string(http)});
    ::setenv("GT_TEST_STALL_AT_STEP", "200", 1);
    Process p(peer_argv(flags), dir / "log1.txt");
    ::unsetenv("GT_TEST_STALL_AT_STEP");
    INFO(gt_test::read_file(dir / "log1.txt"));
    std::string live;
    REQUIRE(gt_test::eventually(90s, [&] {
      live = http_get(http, "/healthz");
      return live.rfind("HTTP/1.1 503", 0) == 0;
    }));
    CHECK_THAT(body_of(live), Catch::StartsWith("stalled: the training thread is stuck"));
    CHECK_THAT(body_of(live), Catch::Contains("step 200"));
    const std::string ready = http_get(http, "/readyz");
    CHECK_THAT(ready, Catch::StartsWith("HTTP/1.1 503"));
    CHECK_THAT(body_of(ready), Catch::Contains("left the swarm"));
    p.signal(SIGTERM);
    REQUIRE(p.wait_for(15s));
  }
}
