// The observability sinks and the model out, in process: CRC32C and the event encoding, the
// Prometheus exposition, safetensors round trips and the arena -> PyTorch layout.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>

#include "core/metrics.hpp"
#include "core/model.hpp"
#include "core/observe/prometheus.hpp"
#include "core/safetensors.hpp"
#include "core/observe/tensorboard.hpp"
#include "tests/test_util.hpp"

using namespace gossiptrain;

TEST_CASE("crc32c and TFRecord's mask match the published check values", "[core]") {
  // CRC-32C check value (RFC 3720 appendix, "123456789") and 32 zero bytes (iSCSI test vector).
  CHECK(core::crc32c("123456789", 9) == 0xE3069283u);
  const std::string zeros(32, '\0');
  CHECK(core::crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);
  const std::uint32_t c = core::crc32c("123456789", 9);
  CHECK(core::masked_crc32c("123456789", 9) == ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST_CASE("an event file is TFRecords whose lengths and checksums hold", "[core]") {
  gt_test::TempDir dir("gt-tb");
  std::string path;
  {
    core::TensorboardWriter w(dir.str());
    path = w.path();
    w.on_metric(1.0, "step", {{"step", 50}, {"loss", 1.5}, {"lr", 0.05}, {"steps_total", 500}});
    w.on_metric(2.0, "exchange", {{"ok", true}, {"ms", 12.5}, {"partner", "abc"}});
  }
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t pos = 0;
  int records = 0;
  std::vector<std::string> datas;
  while (pos < bytes.size()) {
    REQUIRE(pos + 12 <= bytes.size());
    std::uint64_t len = 0;
    std::memcpy(&len, bytes.data() + pos, 8);
    std::uint32_t lcrc, dcrc;
    std::memcpy(&lcrc, bytes.data() + pos + 8, 4);
    CHECK(lcrc == core::masked_crc32c(bytes.data() + pos, 8));
    REQUIRE(pos + 12 + len + 4 <= bytes.size());
    std::memcpy(&dcrc, bytes.data() + pos + 12 + len, 4);
    CHECK(dcrc == core::masked_crc32c(bytes.data() + pos + 12, len));
    datas.push_back(bytes.substr(pos + 12, len));
    pos += 12 + len + 4;
    ++records;
  }
  // file_version, then step/loss, step/lr (steps_total and step are not scalars), exchange/ms.
  CHECK(records == 4);
  CHECK(datas[0].find("brain.Event:2") != std::string::npos);
  CHECK(datas[1].find("step/loss") != std::string::npos);
  CHECK(datas[3].find("exchange/ms") != std::string::npos);
  CHECK(datas[3].find("partner") == std::string::npos);
}

TEST_CASE("the Prometheus registry counts the metric lines it reads", "[core]") {
  core::PrometheusRegistry reg(32, "mlp:784-32-10");
  core::Metrics m("", "local");
  m.add_sink(&reg);
  m.emit("step", {{"step", 50},
                  {"steps_total", 100},
                  {"epoch", 0},
                  {"loss", 2.25},
                  {"lr", 0.1},
                  {"samples_per_s", 1000.0}});
  m.emit("exchange", {{"ok", true},
                      {"reason", ""},
                      {"bytes_sent", 100},
                      {"bytes_received", 60},
                      {"ms", 30.0},
                      {"w", 0.5},
                      {"diff_norm", 1.25},
                      {"clip", 1.0}});
  m.emit("exchange", {{"ok", false},
                      {"reason", "refused:banned"},
                      {"bytes_sent", 10},
                      {"bytes_received", 0},
                      {"ms", 3000.0}});
  m.emit("member", {{"member", "a"}, {"state", "alive"}});
  m.emit("member", {{"member", "b"}, {"state", "suspect"}});
  m.emit("member", {{"member", "b"}, {"state", "alive"}});
  m.emit("member", {{"member", "c"}, {"state", "dead"}});
  m.emit("eval", {{"epoch", 1}, {"step", 100}, {"test_acc", 0.75}, {"test_loss", 0.5}});
  m.remove_sink(&reg);
  m.emit("ban", {{"partner", "x"}});  // after removal: not counted
  const std::string t = reg.render();
  CHECK_THAT(t, Catch::Contains("gossiptrain_steps_total 100\n"));
  CHECK_THAT(t, Catch::Contains("gossiptrain_samples_total 3200\n"));
  CHECK_THAT(t, Catch::Contains("gossiptrain_train_loss 2.25\n"));
  CHECK_THAT(t, Catch::Contains("gossiptrain_test_accuracy_ratio 0.75\n"));
  CHECK_THAT(t, Catch::Contains("gossiptrain_exchanges_total{result=\"ok\",reason=\"ok\"} 1\n"));
  CHECK_THAT(t,
             Catch::Contains(
                 "gossiptrain_exchanges_total{result=\"failed\",reason=\"refused:banned\"} 1\n"));
  CHECK_THAT(t, Catch::Contains("gossiptrain_exchange_refusals_total{reason=\"banned\"} 1\n"));
  CHECK_THAT(t, Catch::Contains("gossiptrain_exchange_sent_bytes_total 110\n"));
  CHECK_THAT(t, Catch::Contains("gossiptrain_exchange_duration_seconds_bucket{le=\"0.05\"} 1\n"));
  CHECK_THAT(t, Catch::Contains("gossiptrain_exchange_duration_seconds_bucket{le=\"2.5\"} 1\n"));
  CHECK_THAT(t, Catch::Contains("gossiptrain_exchange_duration_seconds_bucket{le=\"5\"} 2\n"));
  CHECK_THAT(t, Catch::Contains("gossiptrain_exchange_duration_seconds_count 2\n"));
  CHECK_THAT(t, Catch::Contains("gossiptrain_members{state=\"alive\"} 2\n"));
  CHECK_THAT(t, Catch::Contains("gossiptrain_members{state=\"dead\"} 1\n"));
  CHECK_THAT(t, Catch::Contains("gossiptrain_member_suspicions_total 1\n"));
  CHECK_THAT(t, Catch::Contains("gossiptrain_member_refutations_total 1\n"));
  CHECK_THAT(t, Catch::Contains("gossiptrain_member_deaths_total 1\n"));
  CHECK_THAT(t, Catch::Contains("gossiptrain_bans_total 0\n"));
  CHECK_THAT(t, Catch::Contains("gossiptrain_exchange_diff_norm 1.25\n"));
  CHECK(core::prometheus_label_value("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
}

TEST_CASE("the Prometheus registry counts closed connections by typed reason, never by free text",
          "[core]") {
  core::PrometheusRegistry reg(32, "mlp:784-32-10", {"io_error", "timeout", "unspecified"});
  core::Metrics m("", "local");
  m.add_sink(&reg);
  m.emit("connection_closed", {{"partner", "a"}, {"reason", "timeout"}});
  m.emit("connection_closed", {{"partner", "b"}, {"reason", "timeout"}});
  m.emit("connection_closed", {{"partner", "a"}, {"reason", "io_error"}});
  // Free text (a reason's detail, a name not in the set) is no label: not counted anywhere.
  m.emit("connection_closed", {{"partner", "c"}, {"reason", "timeout: idle for 30 s"}});
  m.emit("connection_closed", {{"partner", "c"}, {"reason", "evil\"} 1\nx{y=\""}});
  m.emit("connection_closed", {{"partner", "c"}});
  m.remove_sink(&reg);
  const std::string t = reg.render();
  CHECK_THAT(t, Catch::Contains("# TYPE gossiptrain_connections_closed_total counter\n"));
  CHECK_THAT(t, Catch::Contains("gossiptrain_connections_closed_total{reason=\"timeout\"} 2\n"));
  CHECK_THAT(t, Catch::Contains("gossiptrain_connections_closed_total{reason=\"io_error\"} 1\n"));
  // Every reason of the set is a series from the start, at 0 until one closes.
  CHECK_THAT(t,
             Catch::Contains("gossiptrain_connections_closed_total{reason=\"unspecified\"} 0\n"));
  std::size_t series = 0;
  for (std::size_t at = 0; (at = t.find("gossiptrain_connections_closed_total{", at)) !=
                           std::string::npos;
       ++at)
    ++series;
  CHECK(series == 3);
  CHECK(t.find("evil") == std::string::npos);
  CHECK(t.find("idle for") == std::string::npos);
  // A registry told no reasons (gossip-bench scrape) shows no such series.
  CHECK(core::PrometheusRegistry(1, "m").render().find("connections_closed") == std::string::npos);
}

TEST_CASE("model tensors: PyTorch names and shapes, conv weights OIHW, NCHW flattening", "[core]") {
  const std::string spec = "cnn:6x6x2-c3k3-p2-f4-5";
  const auto layers = core::parse_model_layers(spec);
  std::size_t n = 0;
  for (const auto& l : layers)
    if (l.has_params())
      n = std::max(
          n, std::max(l.w_offset + std::size_t(l.out) * l.in, l.b_offset + std::size_t(l.out)));
  std::vector<float> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = float(i);
  const auto t = core::model_tensors(layers, p.data(), n);
  REQUIRE(t.size() == 6);
  CHECK(t[0].name == "conv0.weight");
  CHECK(t[0].shape == std::vector<std::int64_t>{3, 2, 3, 3});
  CHECK(t[1].name == "conv0.bias");
  CHECK(t[2].name == "fc0.weight");
  CHECK(t[2].shape == std::vector<std::int64_t>{4, 3 * 3 * 3});
  CHECK(t[4].name == "fc1.weight");
  CHECK(t[4].shape == std::vector<std::int64_t>{5, 4});
  const auto& conv = layers[0];
  // conv0.weight[o=2, c=1, ky=0, kx=2] is the arena's W[2, (0*3 + 2)*2 + 1].
  CHECK(t[0].data[((2 * 2 + 1) * 3 + 0) * 3 + 2] ==
        p[conv.w_offset + 2 * conv.in + (0 * 3 + 2) * 2 + 1]);
  // fc0 sees a 3x3x3 map: PyTorch's column (c=2, y=1, x=0) is the arena's (y=1, x=0, c=2).
  const auto& fc = layers[2];
  CHECK(t[2].data[1 * 27 + (2 * 3 + 1) * 3 + 0] == p[fc.w_offset + 1 * 27 + (1 * 3 + 0) * 3 + 2]);
  // Nothing lost: the tensors hold every parameter once.
  std::size_t total = 0;
  double sum = 0, want = 0;
  for (const auto& x : t) {
    total += x.data.size();
    for (float v : x.data) sum += v;
  }
  for (float v : p) want += v;
  CHECK(total == n);
  CHECK(sum == want);
}

TEST_CASE("safetensors: written, read back, and a bad header refused", "[core]") {
  gt_test::TempDir dir("gt-st");
  const std::string path = dir / "m.safetensors";
  std::vector<core::NamedTensor> t = {{"fc0.weight", {2, 3}, {1, 2, 3, 4, 5, 6}},
                                      {"fc0.bias", {2}, {-1, 0.5f}}};
  core::write_safetensors(path, t, {{"model", "mlp:3-2"}});
  std::map<std::string, std::string> meta;
  const auto back = core::read_safetensors(path, &meta);
  REQUIRE(back.size() == 2);
  CHECK(back[0].name == "fc0.weight");
  CHECK(back[0].data == t[0].data);
  CHECK(back[1].data == t[1].data);
  CHECK(meta.at("model") == "mlp:3-2");
  {
    std::ifstream in(path, std::ios::binary);
    std::uint64_t hlen = 0;
    in.read(reinterpret_cast<char*>(&hlen), 8);
    CHECK((8 + hlen) % 8 == 0);
  }
  std::ofstream(dir / "bad.safetensors", std::ios::binary)
      << std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10);
  CHECK_THROWS_AS(core::read_safetensors(dir / "bad.safetensors"), core::SafetensorsError);
  CHECK_THROWS_AS(core::write_safetensors(dir / "x", {{"a", {3}, {1, 2}}}, {}),
                  core::SafetensorsError);
}
