// Fuzz target: experiment files (TOML) through the experiment parser and the sweep expansion; nothing runs.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "mxlab/experiment/experiment.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // Relative input paths resolve inside the scratch folder, which holds no tensors.
  const std::string path = (mxlab::fuzz::scratch_dir() / "fuzz.toml").string();
  auto e = mxlab::experiment::parse_experiment(text, path);
  if (!e) {
    if (e.error().message.empty()) std::abort();
    return 0;
  }
  (void)mxlab::experiment::expand_points(*e);
  return 0;
}
