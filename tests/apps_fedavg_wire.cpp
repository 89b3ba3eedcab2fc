// Tests for FedAvg's messages (round trips, every hostile input refused with a reason) and its
// aggregation.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "apps/fedavg/math.hpp"
#include "apps/fedavg/wire.hpp"

using namespace gossiptrain::apps::fedavg;

TEST_CASE("fedavg messages round-trip", "[apps]") {
  Task t{7, 3, 0, 0.01f, {1.0f, -2.5f, 3.25f}};
  std::string why;
  auto t2 = decode_task(encode(t), 3, &why);
  REQUIRE(t2);
  CHECK(t2->round == 7);
  CHECK(t2->local_epochs == 3);
  CHECK(t2->fedprox_mu == 0.01f);
  CHECK(t2->params == t.params);
  Update u{7, 600, {0.5f, 0.25f, -1.0f}};
  auto u2 = decode_update(encode(u), 3, &why);
  REQUIRE(u2);
  CHECK(u2->samples == 600);
  CHECK(u2->params == u.params);
  CHECK(params_fnv(u2->params) == params_fnv(u.params));
  auto h = decode_hello(encode(Hello{4, 1234}), &why);
  REQUIRE(h);
  CHECK(h->shard == 4);
  CHECK(h->samples == 1234);
}

TEST_CASE("fedavg decoders refuse wrong sizes, bad counts and values that are not finite",
          "[apps]") {
  std::string why;
  Update u{1, 10, {1.0f, 2.0f}};
  auto b = encode(u);
  CHECK_FALSE(decode_update(b, 3, &why));  // another model's size
  CHECK(why.find("expected") != std::string::npos);
  b.pop_back();  // a truncated upload is never applied
  CHECK_FALSE(decode_update(b, 2, &why));
  u.params[1] = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(decode_update(encode(u), 2, &why));
  CHECK(why.find("not finite") != std::string::npos);
  u.params[1] = 1.0f;
  u.samples = 0;
  CHECK_FALSE(decode_update(encode(u), 2, &why));
  CHECK_FALSE(decode_hello(encode(Hello{0, 0}), &why));
  CHECK_FALSE(decode_hello(std::vector<std::uint8_t>(5, 0), &why));
  Task t{0, 0, 0, 0.0f, {1.0f}};
  CHECK_FALSE(decode_task(encode(t), 1, &why));  // zero epochs
  t.local_epochs = 1;
  t.fedprox_mu = -1.0f;
  CHECK_FALSE(decode_task(encode(t), 1, &why));
  t.fedprox_mu = INFINITY;
  CHECK_FALSE(decode_task(encode(t), 1, &why));
}

TEST_CASE("a FedAvg transport's message limit holds one task and no more", "[apps]") {
  Task t{1, 1, 0, 0.0f, std::vector<float>(100000, 0.5f)};
  CHECK(encode(t).size() == max_message_bytes(100000));
  CHECK(encode(Update{1, 1, t.params}).size() <= max_message_bytes(100000));
  CHECK(max_message_bytes(10) == 64u << 10);  // the channel's floor
}

TEST_CASE("fedavg aggregation: sample-weighted mean, exact for one update, and FedAvgM", "[apps]") {
  const std::vector<float> a{1.0f, 2.0f}, b{5.0f, -2.0f};
  std::vector<float> g{0.0f, 0.0f}, v{0.0f, 0.0f};
  apply_round(g, v, {{1, &a}, {3, &b}}, 0.0);
  CHECK(g == std::vector<float>{4.0f, -1.0f});  // (1*a + 3*b) / 4
  CHECK(v == std::vector<float>{0.0f, 0.0f});
  // One update: its exact bits, whatever its sample count.
  const std::vector<float> odd{0.1f, 1e-30f};
  apply_round(g, v, {{600007, &odd}}, 0.0);
  CHECK(g == odd);
  // No update: nothing changes.
  apply_round(g, v, {}, 0.9);
  CHECK(g == odd);
  // FedAvgM, beta 0.5, from w = 1: the mean 0 is a change of 1; v = 1, w = 0; then the mean -1
  // again from 0: v = 0.5 * 1 + 1 = 1.5, w = -1.5.
  std::vector<float> w{1.0f}, vel{0.0f};
  const std::vector<float> zero{0.0f}, minus{-1.0f};
  apply_round(w, vel, {{10, &zero}}, 0.5);
  CHECK(w == std::vector<float>{0.0f});
  CHECK(vel == std::vector<float>{1.0f});
  apply_round(w, vel, {{10, &minus}}, 0.5);
  CHECK(vel == std::vector<float>{1.5f});
  CHECK(w == std::vector<float>{-1.5f});
}
