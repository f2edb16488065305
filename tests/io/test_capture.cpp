// Checks the capture-folder reader (WeightFile::open_capture) against folders built byte by byte from the
// layout docs/experiments.md describes: capture.json naming raw little-endian float32 files [tokens, hidden].
// Every bad folder or manifest is refused with one message naming the manifest and the problem.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "io_test_support.hpp"
#include "mxlab/io/weights.hpp"

using namespace mxlab;
using mxlab::test::put_bytes;
using mxlab::test::TempDir;

namespace {

std::string f32_bytes(const std::vector<float>& v) {
  std::string s;
  for (float f : v) {
    const auto u = std::bit_cast<std::uint32_t>(f);
    for (int i = 0; i < 4; ++i) s += static_cast<char>((u >> (8 * i)) & 0xFF);
  }
  return s;
}

/// One tensor entry of a manifest; `extra` is spliced in before the closing brace.
std::string entry(const std::string& name, const std::string& file, const std::string& shape,
                  const std::string& extra = "") {
  return R"({"name": ")" + name + R"(", "file": ")" + file + R"(", "layer": "fc1", "module": "Linear",
             "role": "activation", "site": "input", "index": 0, "step": 0, "shape": )" +
         shape + R"(, "dtype": "float32", "layout": "tokens x hidden", "source_shape": [2, 3, 4],
             "source_dtype": "float32", "hidden_axis": 2, "rows_of": 6, "sample": "all")" + extra + "}";
}

/// A manifest of one tensor with only the required keys, `key` set to the JSON `value` (left out when empty).
std::string bare(const std::string& key, const std::string& value) {
  const std::pair<std::string, std::string> fields[] = {
      {"name", R"("a")"}, {"file", R"("000000.f32")"}, {"layer", R"("l")"}, {"role", R"("gradient")"},
      {"site", R"("input")"}, {"step", "1"}, {"shape", "[2, 3]"}, {"dtype", R"("float32")"},
      {"layout", R"("tokens x hidden")"}};
  std::string t;
  bool set = false;
  for (const auto& [k, v] : fields) {
    const bool here = k == key;
    set = set || here;
    if (here && value.empty()) continue;
    t += (t.empty() ? "{" : ", ") + ("\"" + k + "\": ") + (here ? value : v);
  }
  if (!set) t += ", \"" + key + "\": " + value;
  return R"({"format": "mxlab-capture", "version": 1, "tensors": [)" + t + "}]}";
}

std::string manifest(const std::string& tensors) {
  return R"({"format": "mxlab-capture", "version": 1, "producer": "test", "seed": 0, "tensors": [)" + tensors + "]}";
}

}  // namespace

TEST_CASE("capture folders: tensors tokens x hidden read exactly, blocks along hidden", "[io][weights][capture]") {
  TempDir dir;
  // Values a float32 reader could get wrong: signed zero, subnormals, the extremes, infinities and a NaN.
  const std::vector<float> a = {1.5f, -0.0f, 0x1p-149f, -0x1p-126f, std::numeric_limits<float>::max(),
                                -std::numeric_limits<float>::infinity(), 3.0f, 0x1.fffffep-1f,
                                std::numeric_limits<float>::quiet_NaN(), 1e-30f, -7.25f, 65504.0f};
  const std::vector<float> g = {0.125f, -0.5f, 2.0f, 0.0f};
  put_bytes(dir.file("000000.f32"), f32_bytes(a));
  put_bytes(dir.file("000001.f32"), f32_bytes(g));
  put_bytes(dir.file("capture.json"),
            manifest(entry("fc1/activation/input/0", "000000.f32", "[3, 4]") + ", " +
                     R"({"name": "fc1/gradient/output/0", "file": "000001.f32", "layer": "fc1", "role": "gradient",
                         "site": "output", "step": 0, "shape": [1, 4], "dtype": "float32", "layout": "tokens x hidden"})"));
  for (const std::string& path : {dir.file(""), dir.file("capture.json")}) {
    auto w = WeightFile::open(path);
    REQUIRE(w.ok());
    CHECK(w->kind() == WeightFileKind::Capture);
    REQUIRE(w->weights().size() == 2);
    const WeightInfo& i0 = w->weights()[0];
    CHECK(i0.name == "fc1/activation/input/0");
    CHECK(i0.shape == std::vector<std::int64_t>{3, 4});
    CHECK(i0.dtype == "float32");
    CHECK(i0.elements == 12);
    CHECK(i0.byte_size == 48);
    CHECK(i0.layout == WeightLayout::TokensHidden);
    CHECK(i0.op == "Linear");
    CHECK(w->weights()[1].op.empty());
    auto t = w->read("fc1/activation/input/0");
    REQUIRE(t.ok());
    CHECK(t->dtype() == DType::F32);
    CHECK(t->shape() == std::vector<std::int64_t>{3, 4});
    for (std::size_t k = 0; k < a.size(); ++k) CHECK(std::bit_cast<std::uint32_t>(t->data()[k]) == std::bit_cast<std::uint32_t>(a[k]));
    auto t1 = w->read(1);
    REQUIRE(t1.ok());
    CHECK(t1->data() == g);
  }
  auto axes = reduction_axes(std::vector<std::int64_t>{3, 4}, WeightLayout::TokensHidden);
  REQUIRE(axes.ok());
  CHECK(axes->axes == std::vector<std::size_t>{1});
  CHECK(axes->name == "hidden");
  CHECK(weight_layout_name(WeightLayout::TokensHidden) == "tokens x hidden");
  CHECK(weight_file_kind_name(WeightFileKind::Capture) == "capture");
  CHECK_FALSE(reduction_axes(std::vector<std::int64_t>{2, 3, 4}, WeightLayout::TokensHidden).ok());
}

TEST_CASE("capture folders: an empty capture lists no tensors", "[io][weights][capture]") {
  TempDir dir;
  put_bytes(dir.file("capture.json"), manifest(""));
  auto w = WeightFile::open(dir.file(""));
  REQUIRE(w.ok());
  CHECK(w->weights().empty());
}

TEST_CASE("capture folders: the temporaries of unfinished captures beside a folder are noted, not read",
          "[io][weights][capture]") {
  // mxlab.torch.capture builds "cap" as ".cap.HEX.partial" beside it; a killed process leaves that behind.
  TempDir dir;
  std::filesystem::create_directories(dir.file("cap"));
  put_bytes(dir.file("cap/capture.json"), manifest(entry("t", "000000.f32", "[1, 2]")));
  put_bytes(dir.file("cap/000000.f32"), f32_bytes({1.5F, -2.0F}));
  auto clean = WeightFile::open(dir.file("cap"));
  REQUIRE(clean.ok());
  CHECK(clean->notes().empty());
  std::filesystem::create_directories(dir.file(".cap.0f3a.partial"));
  put_bytes(dir.file(".cap.0f3a.partial/000000.f32"), f32_bytes({7.0F}));
  std::filesystem::create_directories(dir.file(".cap.partial"));     // no HEX: not a capture's temporary
  std::filesystem::create_directories(dir.file(".other.9.partial"));  // another folder's
  for (const std::string& path : {dir.file("cap"), dir.file("cap/"), dir.file("cap/capture.json")}) {
    auto w = WeightFile::open(path);
    REQUIRE(w.ok());
    REQUIRE(w->weights().size() == 1);
    CHECK(w->read(0)->data() == std::vector<float>{1.5F, -2.0F});
    REQUIRE(w->notes().size() == 1);
    CHECK(w->notes()[0] ==
          "'.cap.0f3a.partial' beside 'cap' is a capture that did not finish (its process stopped while capturing): "
          "not read; delete it");
  }
  auto partial = WeightFile::open(dir.file(".cap.0f3a.partial"));
  REQUIRE_FALSE(partial.ok());
  CHECK_THAT(partial.error().message, Catch::Contains("the temporary folder of a capture that did not finish"));
}

TEST_CASE("capture folders: bad folders and manifests are refused naming the manifest and the problem",
          "[io][weights][capture][errors]") {
  TempDir dir;
  TempDir outside;
  put_bytes(dir.file("000000.f32"), f32_bytes({1, 2, 3, 4, 5, 6}));
  put_bytes(outside.file("secret.f32"), f32_bytes({1, 2, 3, 4, 5, 6}));
  std::filesystem::create_symlink(outside.file("secret.f32"), dir.file("link.f32"));
  std::filesystem::create_directories(dir.file("sub"));
  const std::string escape = std::filesystem::relative(outside.file("secret.f32"), dir.file("")).string();
  struct Case {
    std::string text;
    std::string needle;
  };
  const Case cases[] = {
      {"{", "capture.json"},
      {"[]", "the manifest is an array, expected an object"},
      {R"({"format": "mxlab-capture", "version": 1})", "lacks the array 'tensors'"},
      {R"({"format": "other", "version": 1, "tensors": []})", "not a capture manifest"},
      {R"({"format": "mxlab-capture", "version": 2, "tensors": []})", "'version' is not 1"},
      {R"({"format": "mxlab-capture", "version": 1, "tensors": [], "extra": 1})", "unexpected key 'extra'"},
      {R"({"format": "mxlab-capture", "version": 1, "tensors": {}})", "lacks the array 'tensors'"},
      {manifest("3"), "tensors[0] is an integer, expected an object"},
      {manifest(entry("a", "000000.f32", "[2, 3]", R"(, "colour": "red")")), "unexpected key 'colour'"},
      {manifest(entry("a", "missing.f32", "[2, 3]")), "missing.f32"},
      {manifest(entry("a", "000000.f32", "[2, 4]")), "holds 24 bytes; shape [2, 4] of float32 needs 32"},
      {manifest(entry("a", "000000.f32", "[1, 3]")), "holds 24 bytes; shape [1, 3] of float32 needs 12"},
      {manifest(entry("a", "000000.f32", "[6]")), "has 1 dimensions; a capture tensor is [tokens, hidden]"},
      {manifest(entry("a", "000000.f32", "[1, 2, 3]")), "has 3 dimensions"},
      {manifest(entry("a", "000000.f32", "[-2, 3]")), "negative"},
      {manifest(entry("a", "000000.f32", "[4294967296, 4294967296]")), "more elements than 64 bits can count"},
      {manifest(entry("a", "000000.f32", R"("2x3")")), "'shape' is a string"},
      {manifest(entry("a", "../" + std::filesystem::path(outside.file("secret.f32")).filename().string(), "[2, 3]")),
       "leaves or walks around"},
      {manifest(entry("a", escape, "[2, 3]")), "leaves or walks around"},
      {manifest(entry("a", outside.file("secret.f32"), "[2, 3]")), "not a plain relative path"},
      {manifest(entry("a", "link.f32", "[2, 3]")), "outside the model's folder"},
      {manifest(entry("a", "sub", "[2, 3]")), "is a directory"},
      {manifest(entry("a", "000000.f32", "[2, 3]") + ", " + entry("a", "000000.f32", "[2, 3]")), "appears twice"},
      {manifest(entry("a", "000000.f32", "[2, 3]") + ", " + entry("b", "./000000.f32", "[2, 3]")), "leaves or walks around"},
      {manifest(entry("a", "000000.f32", "[2, 3]") + ", " + entry("b", "sub/../000000.f32", "[2, 3]")), "leaves or walks around"},
      {manifest(entry("a", "000000.f32", "[2, 3]") + ", " + entry("b", "000000.f32", "[2, 3]")), "named by another tensor"},
      {bare("layout", R"("hidden x tokens")"), "unknown layout 'hidden x tokens'"},
      {bare("dtype", R"("float16")"), "dtype 'float16'"},
      {bare("role", R"("weight")"), "role 'weight'"},
      {bare("site", R"("middle")"), "site 'middle'"},
      {bare("step", "-1"), "non-negative integer 'step'"},
      {bare("step", "1.5"), "'step' is a non-integer number, expected an integer"},
      {bare("name", R"("")"), "'name' is a string, expected a non-empty string"},
      {bare("file", ""), "lacks 'file'"},
      {bare("shape", ""), "lacks 'shape'"},
      {bare("rows_of", R"("six")"), "'rows_of' is a string, expected an integer"},
      {manifest(entry("a", "000000.f32", "[2, 3]", R"(, "step": 1)")), "appears twice"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    put_bytes(dir.file("capture.json"), c.text);
    auto w = WeightFile::open(dir.file(""));
    REQUIRE_FALSE(w.ok());
    CHECK_THAT(w.error().message, Catch::Contains(dir.file("capture.json")));
    CHECK_THAT(w.error().message, Catch::Contains(c.needle));
    CHECK(w.error().message.find('\n') == std::string::npos);
  }
  // A folder without a manifest.
  TempDir empty;
  auto w = WeightFile::open(empty.file(""));
  REQUIRE_FALSE(w.ok());
  CHECK_THAT(w.error().message, Catch::Contains(empty.file("")) && Catch::Contains("a folder without capture.json"));
}
