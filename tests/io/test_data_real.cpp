// Checks the readers on the real registered files (when installed) against facts published with them:
// Fashion-MNIST's 60,000 + 10,000 balanced images, scikit-learn's 1,797 digits, GNU Backgammon's six
// nets, and the parameter counts of the pretrained tfjs models. Each file must also have its
// registered SHA-256. Absent data sets are skipped with a message naming `mxlab data fetch NAME`.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "mxlab/io/datasets.hpp"
#include "mxlab/io/sha256.hpp"
#include "mxlab/io/training_data.hpp"
#include "mxlab/io/weights.hpp"

using namespace mxlab;

namespace {

// The data folder of the tests: MXLAB_DATA_DIR, else data/external in the source tree.
std::string test_data_dir() {
  const char* env = std::getenv("MXLAB_DATA_DIR");
  if (env != nullptr && *env != '\0') return env;
  return std::string(MXLAB_SOURCE_DIR) + "/data/external";
}

// The paths of a data set's files if all are installed and have their registered digests; empty
// (with a warning naming the fetch command) if any is missing.
std::vector<std::string> installed(std::string_view name) {
  const DataSource* s = *find_data_source(name);
  std::vector<std::string> paths;
  for (const auto& f : s->files) {
    auto p = data_file(name, f.file, test_data_dir());
    if (!p) {
      WARN("skipped: " << p.error().message);
      return {};
    }
    INFO(*p);
    CHECK(*sha256_file(*p) == f.sha256);
    paths.push_back(*p);
  }
  return paths;
}

struct ModelFacts {
  const char* name;
  std::size_t tensors;
  std::uint64_t elements;        // all tensors, int32 constants included
  std::size_t float_tensors;
  std::uint64_t float_elements;  // the weights
  DType dtype;                   // of the float tensors
};

}  // namespace

TEST_CASE("Fashion-MNIST: 60,000 + 10,000 28x28 images, 6,000 and 1,000 per class", "[data][fashion-mnist]") {
  const auto p = installed("fashion-mnist");
  if (p.empty()) return;
  const auto train = read_idx_images(p[0], p[1]);
  REQUIRE(train.ok());
  const auto test = read_idx_images(p[2], p[3]);
  REQUIRE(test.ok());
  CHECK(train->count == 60000);
  CHECK(test->count == 10000);
  CHECK(train->rows == 28);
  CHECK(train->cols == 28);
  CHECK(train->pixels.size() == 60000U * 784U);
  std::vector<int> per_class(10), per_class_test(10);
  for (auto l : train->labels) ++per_class[l];
  for (auto l : test->labels) ++per_class_test[l];
  CHECK(per_class == std::vector<int>(10, 6000));
  CHECK(per_class_test == std::vector<int>(10, 1000));
}

TEST_CASE("scikit-learn digits: 1,797 8x8 images with 0..16 pixels", "[data][digits]") {
  const auto p = installed("digits");
  if (p.empty()) return;
  const auto d = read_digits_csv_gz(p[0]);
  REQUIRE(d.ok());
  CHECK(d->count == 1797);
  // Class sizes as sklearn.datasets.load_digits documents them (about 180 per class).
  std::vector<int> per_class(10);
  for (auto l : d->labels) ++per_class[l];
  CHECK(per_class == std::vector<int>{178, 182, 177, 183, 181, 182, 181, 179, 174, 180});
}

TEST_CASE("texts: the Gutenberg frame is removed from Sherlock Holmes; Tom Sawyer has none", "[data][texts]") {
  const auto p = installed("texts");
  if (p.empty()) return;
  const auto holmes = read_text(p[0]);
  REQUIRE(holmes.ok());
  // The body opens with the transcriber's credit and ends with the book's last sentence.
  CHECK(holmes->rfind("Produced by an anonymous Project Gutenberg volunteer", 0) == 0);
  const std::string last = "Walsall, where I believe that she has met with considerable success.\n";
  CHECK(holmes->compare(holmes->size() - last.size(), last.size(), last) == 0);
  CHECK(holmes->find("*** START") == std::string::npos);
  CHECK(holmes->find("End of the Project Gutenberg") == std::string::npos);
  CHECK(holmes->find('\r') == std::string::npos);
  const auto tom = read_text(p[1]);
  REQUIRE(tom.ok());
  CHECK(tom->rfind("Produced by David Widger.", 0) == 0);
  CHECK(tom->size() > 380000);
}

TEST_CASE("GNU Backgammon: 6 nets, 24 tensors, 101,966 float32 parameters", "[data][gnubg]") {
  const auto p = installed("gnubg");
  if (p.empty()) return;
  auto wf = WeightFile::open(p[0]);
  REQUIRE(wf.ok());
  REQUIRE(wf->weights().size() == 24);
  std::uint64_t params = 0;
  for (std::size_t i = 0; i < wf->weights().size(); ++i) {
    auto t = wf->read(i);
    REQUIRE(t.ok());
    params += t->size();
  }
  CHECK(params == 101966);
  CHECK(wf->weights()[0].name == "contact/hidden_weights");
  CHECK(wf->weights()[0].shape == std::vector<std::int64_t>{250, 128});
  CHECK(wf->weights()[4].shape == std::vector<std::int64_t>{214, 128});
  CHECK(wf->weights()[21].name == "prune_race/output_weights");
  CHECK(wf->weights()[21].shape == std::vector<std::int64_t>{5, 8});
}

TEST_CASE("pretrained tfjs models: every tensor listed, every float tensor read", "[data][tfjs]") {
  const ModelFacts facts[] = {
      {"mobilefacenet", 139, 1292994, 138, 1292993, DType::F32},
      {"faceres-deep", 128, 3489405, 127, 3489403, DType::F32},
      {"posenet", 62, 1258195, 62, 1258195, DType::F32},
      {"efficientpose", 217, 1412810, 167, 1412760, DType::F32},
      {"movenet-lightning", 180, 2325002, 149, 2324896, DType::F16},
  };
  for (const auto& m : facts) {
    INFO(m.name);
    const auto p = installed(m.name);
    if (p.empty()) continue;
    auto wf = WeightFile::open(p[0]);
    REQUIRE(wf.ok());
    std::size_t floats = 0, convs = 0;
    std::uint64_t elements = 0, values = 0;
    for (std::size_t i = 0; i < wf->weights().size(); ++i) {
      const WeightInfo& w = wf->weights()[i];
      elements += w.elements;
      if (w.layout != WeightLayout::Other) {
        ++convs;
        CHECK(reduction_axes(w.shape, w.layout).ok());
      }
      if (!w.readable()) continue;
      auto t = wf->read(i);
      REQUIRE(t.ok());
      CHECK(t->dtype() == m.dtype);
      ++floats;
      values += t->size();
    }
    CHECK(wf->weights().size() == m.tensors);
    CHECK(elements == m.elements);
    CHECK(floats == m.float_tensors);
    CHECK(values == m.float_elements);
    CHECK(convs > 0);
  }
}

TEST_CASE("fetch installs a Debian data set, keeps good files and replaces altered ones", "[data][fetch]") {
  const DataSource* s = *find_data_source("fashion-mnist");
  for (const auto& f : s->files)
    if (!std::filesystem::exists(std::string(f.package_path))) {
      WARN("skipped: the Debian package " << s->package << " is not installed");
      return;
    }
  const auto dir = std::filesystem::temp_directory_path() / ("mxlab_fetch_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::vector<std::string> lines;
  FetchOptions o;
  o.dir = dir.string();
  o.progress = [&](const std::string& line) { lines.push_back(line); };
  auto r = fetch_data({"fashion-mnist"}, o);
  REQUIRE(r.ok());
  CHECK(*r == 4);
  for (const auto& f : s->files) CHECK(*sha256_file((dir / "fashion-mnist" / std::string(f.file)).string()) == f.sha256);
  // Nothing but the installed files is left behind (no temporary folders).
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::recursive_directory_iterator(dir)) ++entries;
  CHECK(entries == 5);
  // A second run keeps them; an altered file is fetched again.
  r = fetch_data({"fashion-mnist"}, o);
  REQUIRE(r.ok());
  CHECK(*r == 0);
  const auto labels = dir / "fashion-mnist" / "t10k-labels-idx1-ubyte.gz";
  std::ofstream(labels, std::ios::binary | std::ios::app) << "x";
  lines.clear();
  r = fetch_data({"fashion-mnist"}, o);
  REQUIRE(r.ok());
  CHECK(*r == 1);
  CHECK(*sha256_file(labels.string()) == s->files[3].sha256);
  REQUIRE_FALSE(lines.empty());
  CHECK_THAT(lines.front(), Catch::Contains("differs from the registered digest"));
  std::filesystem::remove_all(dir);
}
