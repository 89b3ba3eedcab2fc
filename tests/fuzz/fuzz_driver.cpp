// Seeded mutation driver for a fuzz target (net_fuzz.cpp, gossip_fuzz.cpp) where libFuzzer is not
// used: takes the target's well-formed seeds (gt_fuzz_seeds), mutates them (bit flips, byte sets,
// truncation, insertion, splicing) for a fixed number of iterations. The first byte of an input
// picks the target's mode and is never mutated. Registered as ctest tests; run under the asan
// preset too.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
// The target's starting pool, one well-formed input per mode at least.
std::vector<std::vector<std::uint8_t>> gt_fuzz_seeds(std::mt19937_64& rng);

namespace {

using Input = std::vector<std::uint8_t>;

void mutate(Input& in, std::mt19937_64& rng, const std::vector<Input>& pool) {
  int n = 1 + int(rng() % 4);
  for (int k = 0; k < n; ++k) {
    switch (rng() % 6) {
      case 0:
        if (in.size() > 1) in[1 + rng() % (in.size() - 1)] ^= std::uint8_t(1u << (rng() % 8));
        break;
      case 1:
        if (in.size() > 1) in[1 + rng() % (in.size() - 1)] = std::uint8_t(rng());
        break;
      case 2:
        if (in.size() > 2) in.resize(1 + rng() % (in.size() - 1));
        break;
      case 3: {
        std::size_t at = 1 + rng() % in.size();
        Input extra(rng() % 16);
        for (auto& x : extra) x = std::uint8_t(rng());
        in.insert(in.begin() + std::ptrdiff_t(std::min(at, in.size())), extra.begin(), extra.end());
        break;
      }
      case 4: {  // splice the tail of another seed
        const Input& o = pool[rng() % pool.size()];
        if (o.size() > 2 && in.size() > 2) {
          std::size_t a = 1 + rng() % (in.size() - 1), b = 1 + rng() % (o.size() - 1);
          in.resize(a);
          in.insert(in.end(), o.begin() + std::ptrdiff_t(b), o.end());
        }
        break;
      }
      case 5:  // interesting length values in place
        if (in.size() > 4) {
          std::size_t at = 1 + rng() % (in.size() - 4);
          static const std::uint32_t kValues[] = {0, 1, 15, 16, 17, 4096, 4112, 4113, 0xffffffffu};
          std::uint32_t v = kValues[rng() % (sizeof kValues / sizeof kValues[0])];
          for (int i = 0; i < 4; ++i) in[at + std::size_t(i)] = std::uint8_t(v >> (8 * (3 - i)));
        }
        break;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = 20000;
  unsigned long long seed = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--iterations" && i + 1 < argc) {
      iterations = std::strtol(argv[++i], nullptr, 10);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: %s [--iterations N] [--seed S]\n", argv[0]);
      return 2;
    }
  }
  std::mt19937_64 rng(seed);
  auto pool = gt_fuzz_seeds(rng);
  for (auto& s : pool) LLVMFuzzerTestOneInput(s.data(), s.size());
  for (long it = 0; it < iterations; ++it) {
    Input in = pool[rng() % pool.size()];
    mutate(in, rng, pool);
    LLVMFuzzerTestOneInput(in.data(), in.size());
    if (rng() % 64 == 0 && in.size() < 20000) pool.push_back(std::move(in));  // keep some mutants
  }
  std::printf("%s: %ld iterations, seed %llu, ok\n", argv[0], iterations, seed);
  return 0;
}
