// Checks ops::read_weight_tensor and ops::analyze_weights on a capture folder built byte by byte: each tensor's
// analysis equals ops::analyze of the same values, progress runs over every selected tensor to their total,
// and cancellation stops the job.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mxlab/ops/requests.hpp"
#include "mxlab/ops/weight_tensors.hpp"

using namespace mxlab;

namespace {

namespace fs = std::filesystem;

struct Folder {
  fs::path dir = fs::temp_directory_path() / "mxlab_test_weight_tensors";
  std::vector<std::vector<float>> values;
  Folder() {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::string tensors;
    for (int k = 0; k < 2; ++k) {
      std::vector<float> v;
      for (int i = 0; i < 64 * (k + 1); ++i) v.push_back(static_cast<float>(std::sin(1.3 * i + k)) * (i % 32 == 3 ? 40.0f : 1.0f));
      const std::string file = "00000" + std::to_string(k) + ".f32";
      std::ofstream(dir / file, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
      tensors += std::string(k ? ", " : "") + R"({"name": "t)" + std::to_string(k) + R"(", "file": ")" + file +
                 R"(", "layer": "l", "role": "activation", "site": "input", "step": 0, "shape": [)" + std::to_string(2 * (k + 1)) +
                 R"(, 32], "dtype": "float32", "layout": "tokens x hidden"})";
      values.push_back(std::move(v));
    }
    std::ofstream(dir / "capture.json") << R"({"format": "mxlab-capture", "version": 1, "tensors": [)" << tensors << "]}";
  }
  ~Folder() { fs::remove_all(dir); }
};

}  // namespace

TEST_CASE("analyze_weights: each tensor's rows are ops::analyze of its values, blocks along hidden", "[ops][weights]") {
  Folder f;
  auto file = WeightFile::open(f.dir.string());
  REQUIRE(file.ok());
  auto t = ops::read_weight_tensor(*file, 1);
  REQUIRE(t.ok());
  CHECK(t->layout == "tokens x hidden: blocks along hidden");
  REQUIRE(t->source.tensor() != nullptr);
  CHECK(t->source.tensor()->data() == f.values[1]);
  CHECK(ops::read_weight_tensor(*file, 1, false)->layout == "last axis");

  const std::vector<BlockFormat> formats = {*ops::block_format("mxfp4", {}, {}), *ops::block_format("mxint8", {}, {})};
  auto all = NamePattern::parse("*");
  REQUIRE(all.ok());
  std::vector<Progress> seen;
  ops::Run run;
  run.reporter.on_progress = [&](const Progress& p) { seen.push_back(p); };
  auto results = ops::analyze_weights(formats, *file, *all, {}, run);
  REQUIRE(results.ok());
  REQUIRE(results->size() == 2);
  for (std::size_t k = 0; k < 2; ++k) {
    const auto& w = (*results)[k];
    CHECK(w.info.name == "t" + std::to_string(k));
    auto direct = ops::analyze(formats, ops::TensorSource::of(*Tensor::from_f32(w.info.shape, f.values[k])));
    REQUIRE(direct.ok());
    REQUIRE(w.formats.size() == 2);
    for (std::size_t i = 0; i < 2; ++i) {
      CHECK(w.formats[i].total.mse() == (*direct)[i].total.mse());
      CHECK(w.formats[i].total.max_abs_error == (*direct)[i].total.max_abs_error);
      CHECK(w.formats[i].total.count == (*direct)[i].total.count);
    }
  }
  REQUIRE_FALSE(seen.empty());
  CHECK(seen.back().done == 64 + 128);
  for (const auto& p : seen) CHECK(p.total == 64 + 128);

  auto one = NamePattern::parse("t1");
  CHECK(ops::analyze_weights(formats, *file, *one)->size() == 1);
  auto none = NamePattern::parse("x*");
  auto missing = ops::analyze_weights(formats, *file, *none);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error().message, Catch::Contains("no readable tensor matches 'x*'") && Catch::Contains("capture.json"));

  std::atomic<bool> cancel{true};
  ops::Run stopped;
  stopped.reporter.cancel = &cancel;
  auto c = ops::analyze_weights(formats, *file, *all, {}, stopped);
  REQUIRE_FALSE(c.ok());
  CHECK(c.error().message == ops::kCancelled);
}
