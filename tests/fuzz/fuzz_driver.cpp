// Seeded mutation driver for a fuzz target (net_fuzz.cpp, gossip_fuzz.cpp) where libFuzzer is not
// used: runs every input of the corpus files and folders it is given once (the libFuzzer corpus in
// tests/fuzz/corpus/, with the inputs of past findings), then mutates them and the target's
// well-formed seeds (gt_fuzz_seeds) (bit flips, byte sets, truncation, insertion, splicing) for a
// fixed number of iterations. The first byte of an input picks the target's mode and is never
// mutated. Registered as ctest tests; run under the asan preset too. --write-seeds DIR writes the
// seeds as files (seed-N), the start of a libFuzzer corpus (docs/testing.md, "Fuzzing").
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
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

// The files of a corpus: a file, or every file of a folder (in name order, so a run is repeatable).
bool read_corpus(const std::filesystem::path& at, std::vector<Input>& out) {
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  if (std::filesystem::is_directory(at, ec)) {
    for (const auto& e : std::filesystem::directory_iterator(at, ec))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
  } else if (std::filesystem::is_regular_file(at, ec)) {
    files.push_back(at);
  } else {
    return false;
  }
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = 20000;
  unsigned long long seed = 1;
  std::vector<Input> corpus;
  std::string write_seeds;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--iterations" && i + 1 < argc) {
      iterations = std::strtol(argv[++i], nullptr, 10);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--write-seeds" && i + 1 < argc) {
      write_seeds = argv[++i];
    } else if (!a.starts_with("-") && read_corpus(a, corpus)) {
    } else {
      std::fprintf(stderr,
                   "%s: bad argument '%s'\nusage: %s [--iterations N] [--seed S] [CORPUS_FILE_OR_DIR...]\n"
                   "       %s --write-seeds DIR [--seed S]\n",
                   argv[0], a.c_str(), argv[0], argv[0]);
      return 2;
    }
  }
  if (!write_seeds.empty()) {
    std::mt19937_64 rng(seed);
    const auto seeds = gt_fuzz_seeds(rng);
    for (std::size_t i = 0; i < seeds.size(); ++i) {
      const auto path = std::filesystem::path(write_seeds) / ("seed-" + std::to_string(i));
      std::ofstream out(path, std::ios::binary);
      out.write(reinterpret_cast<const char*>(seeds[i].data()), std::streamsize(seeds[i].size()));
      if (!out) {
        std::fprintf(stderr, "%s: cannot write %s\n", argv[0], path.c_str());
        return 2;
      }
    }
    std::printf("%s: %zu seeds written to %s\n", argv[0], seeds.size(), write_seeds.c_str());
    return 0;
  }
  for (auto& c : corpus) LLVMFuzzerTestOneInput(c.data(), c.size());
  std::mt19937_64 rng(seed);
  auto pool = gt_fuzz_seeds(rng);
  for (auto& s : pool) LLVMFuzzerTestOneInput(s.data(), s.size());
  for (auto& c : corpus)  // an empty input has no mode byte to keep: nothing to mutate
    if (!c.empty()) pool.push_back(std::move(c));
  for (long it = 0; it < iterations; ++it) {
    Input in = pool[rng() % pool.size()];
    mutate(in, rng, pool);
    LLVMFuzzerTestOneInput(in.data(), in.size());
    if (rng() % 64 == 0 && in.size() < 20000) pool.push_back(std::move(in));  // keep some mutants
  }
  std::printf("%s: %zu corpus inputs, %ld iterations, seed %llu, ok\n", argv[0], corpus.size(),
              iterations, seed);
  return 0;
}
