// Runs a fuzz target without libFuzzer (the normal compiler's build and CI's sanitizer run): every file of the
// given corpus folders, then a fixed number of seeded mutations of each (bit flips, truncations, inserted and
// duplicated bytes). The same seed gives the same inputs on every machine.
//
// usage: TARGET_smoke [--mutations N] [--seed S] CORPUS_DIR_OR_FILE...
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

std::uint64_t next(std::uint64_t& state) {  // splitmix64
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

void run(const std::vector<std::uint8_t>& bytes) {
  // A copy of exactly the input's size, so AddressSanitizer sees a read one past its end.
  std::vector<std::uint8_t> copy(bytes);
  LLVMFuzzerTestOneInput(copy.empty() ? nullptr : copy.data(), copy.size());
}

std::vector<std::uint8_t> mutate(std::vector<std::uint8_t> b, std::uint64_t& rng) {
  const int edits = 1 + static_cast<int>(next(rng) % 4);
  for (int e = 0; e < edits; ++e) {
    const std::size_t at = b.empty() ? 0 : next(rng) % b.size();
    switch (next(rng) % 5) {
      case 0:  // flip a bit
        if (!b.empty()) b[at] = static_cast<std::uint8_t>(b[at] ^ (1u << (next(rng) % 8)));
        break;
      case 1:  // truncate
        b.resize(at);
        break;
      case 2:  // insert random bytes
        for (std::uint64_t k = next(rng) % 8 + 1; k > 0; --k)
          b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), static_cast<std::uint8_t>(next(rng)));
        break;
      case 3:  // set a byte to an interesting value
        if (!b.empty()) {
          const std::uint8_t values[] = {0x00, 0xff, 0x7f, 0x80, '0', '9', '-', '[', '{', '"', '\n'};
          b[at] = values[next(rng) % sizeof values];
        }
        break;
      default: {  // duplicate a stretch
        const std::size_t len = std::min<std::size_t>(b.size() - at, next(rng) % 64);
        std::vector<std::uint8_t> piece(b.begin() + static_cast<std::ptrdiff_t>(at),
                                        b.begin() + static_cast<std::ptrdiff_t>(at + len));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), piece.begin(), piece.end());
        break;
      }
    }
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t mutations = 100, seed = 1;
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--mutations" || a == "--seed") && i + 1 < argc) {
      (a == "--mutations" ? mutations : seed) = std::strtoull(argv[++i], nullptr, 10);
    } else if (std::filesystem::is_directory(a)) {
      for (const auto& e : std::filesystem::directory_iterator(a))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (std::filesystem::is_regular_file(a)) {
      files.emplace_back(a);
    } else {
      std::fprintf(stderr, "%s: '%s' is neither a corpus folder nor a file\n", argv[0], a.c_str());
      return 2;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s [--mutations N] [--seed S] CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  std::sort(files.begin(), files.end());
  std::uint64_t inputs = 0;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    run(bytes);
    ++inputs;
    std::uint64_t rng = seed ^ fnv1a(path.filename().string());
    for (std::uint64_t m = 0; m < mutations; ++m, ++inputs) run(mutate(bytes, rng));
  }
  std::printf("%llu inputs from %zu corpus files, no crash\n", static_cast<unsigned long long>(inputs), files.size());
  return 0;
}
