// Checks the weight-file readers against files built byte by byte from the format descriptions: the tfjs
// weight manifest (tfjs-converter: weightsManifest groups, shards concatenated, little-endian,
// float16 quantization), safetensors (8-byte little-endian header length, JSON header, data_offsets
// relative to the data) and GNU Backgammon's binary weights (neuralnet.c NeuralNetLoadBinary).
#include <catch2/catch.hpp>

#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "io_test_support.hpp"
#include "mxlab/io/weights.hpp"

using namespace mxlab;
using mxlab::test::f16_value;
using mxlab::test::get_bytes;
using mxlab::test::put_bytes;
using mxlab::test::TempDir;

namespace {

std::string le(std::uint64_t v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}
std::string f32(float f) { return le(std::bit_cast<std::uint32_t>(f), 4); }
std::string f64(double d) { return le(std::bit_cast<std::uint64_t>(d), 8); }
std::string i32(std::int32_t v) { return le(static_cast<std::uint32_t>(v), 4); }

// Float32 values 0.5 * (i + 1) * (-1)^i: exact in float32 and distinct.
std::string f32_run(int n, std::vector<float>* values) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    const float v = 0.5f * static_cast<float>(i + 1) * (i % 2 ? -1.0f : 1.0f);
    if (values) values->push_back(v);
    s += f32(v);
  }
  return s;
}

// A safetensors file: header length (u64 LE), header text, data.
std::string safetensors(const std::string& header, const std::string& data) {
  return le(header.size(), 8) + header + data;
}

// A gnubg net: cInput, cHidden, cOutput, nTrained, betaHidden, betaOutput, then the weights.
std::string gnubg_net(int in, int hid, int out, std::vector<float>* values) {
  std::string s = i32(in) + i32(hid) + i32(out) + i32(0) + f32(0.1f) + f32(1.0f);
  return s + f32_run(in * hid + out * hid + hid + out, values);
}
const std::string kGnubgHeader = f32(472.3782f) + f32(1.0f);

struct HostileCase {
  std::string name;
  std::string content;
  const char* problem;
};

// Writes each case's file into `dir` (under `sub` if given), opens it with `open`, and checks that it
// is refused without an exception, with a message that starts with "<label> '<path>': " and names the
// problem.
template <typename Open>
void check_refused(const TempDir& dir, const std::vector<HostileCase>& cases, const std::string& label, Open open) {
  for (const auto& c : cases) {
    INFO(c.name);
    const std::string path = dir.file(c.name);
    put_bytes(path, c.content);
    Result<WeightFile> wf = make_error("");
    CHECK_NOTHROW(wf = open(path));
    REQUIRE_FALSE(wf.ok());
    CHECK_THAT(wf.error().message, Catch::StartsWith(label + " '" + path + "': "));
    CHECK_THAT(wf.error().message, Catch::Contains(c.problem));
  }
}

Tensor read_ok(const WeightFile& wf, std::string_view name) {
  auto t = wf.read(name);
  INFO(name);
  if (!t) FAIL(t.error().message);
  return *t;
}

}  // namespace

TEST_CASE("tfjs manifests: shards concatenate in order, float16 storage, layouts from the graph", "[io][weights][tfjs]") {
  TempDir dir;
  // Group 0: conv [1,1,2,3] f32 (24 bytes), depthwise [3,3,2,1] f32 (72 bytes), dense [4,2] stored as
  // float16 (16 bytes), axes [2] int32 (8 bytes): 120 bytes in shards of 50 and 70 bytes, so the
  // depthwise kernel straddles the shard boundary. Group 1: bias [3] f32 in its own shard.
  std::vector<float> conv, dw, bias;
  std::string data0 = f32_run(6, &conv) + f32_run(18, &dw);
  const std::uint16_t halves[8] = {0x3C00, 0xC000, 0x0001, 0x7BFF, 0x8400, 0x3555, 0x0000, 0xFC00};
  for (std::uint16_t h : halves) data0 += le(h, 2);
  data0 += i32(7) + i32(-1);
  REQUIRE(data0.size() == 120);
  put_bytes(dir.file("group1-shard1of2.bin"), data0.substr(0, 50));
  put_bytes(dir.file("group1-shard2of2.bin"), data0.substr(50));
  put_bytes(dir.file("g2.bin"), f32_run(3, &bias));
  const std::string model = R"({
    "format": "graph-model",
    "modelTopology": {"node": [
      {"name": "x", "op": "Placeholder"},
      {"name": "c", "op": "_FusedConv2D", "input": ["x", "net/conv/kernel", "net/bias:0"]},
      {"name": "d", "op": "FusedDepthwiseConv2dNative", "input": ["c", "net/dw/depthwise_weights"]},
      {"name": "m", "op": "_FusedMatMul", "input": ["d", "net/dense/kernel"], "attr": {"transpose_b": {"b": true}}},
      {"name": "s", "op": "Sum", "input": ["m", "^net/axes"]}
    ]},
    "weightsManifest": [
      {"paths": ["group1-shard1of2.bin", "group1-shard2of2.bin"], "weights": [
        {"name": "net/conv/kernel", "shape": [1, 1, 2, 3], "dtype": "float32"},
        {"name": "net/dw/depthwise_weights", "shape": [3, 3, 2, 1], "dtype": "float32"},
        {"name": "net/dense/kernel", "shape": [4, 2], "dtype": "float32",
         "quantization": {"dtype": "float16", "original_dtype": "float32"}},
        {"name": "net/axes", "shape": [2], "dtype": "int32"}]},
      {"paths": ["g2.bin"], "weights": [{"name": "net/bias", "shape": [3], "dtype": "float32"}]}
    ]})";
  put_bytes(dir.file("model.json"), model);

  auto wf = WeightFile::open(dir.file("model.json"));
  REQUIRE(wf.ok());
  CHECK(wf->kind() == WeightFileKind::Tfjs);
  const auto& ws = wf->weights();
  REQUIRE(ws.size() == 5);
  struct Want {
    const char* name;
    std::vector<std::int64_t> shape;
    const char* dtype;
    std::uint64_t bytes;
    WeightLayout layout;
    const char* op;
  };
  const Want want[] = {
      {"net/conv/kernel", {1, 1, 2, 3}, "float32", 24, WeightLayout::ConvHWIO, "_FusedConv2D"},
      {"net/dw/depthwise_weights", {3, 3, 2, 1}, "float32", 72, WeightLayout::DepthwiseHWCM, "FusedDepthwiseConv2dNative"},
      {"net/dense/kernel", {4, 2}, "float16 of float32", 16, WeightLayout::DenseOI, "_FusedMatMul"},
      {"net/axes", {2}, "int32", 8, WeightLayout::Other, "Sum"},
      {"net/bias", {3}, "float32", 12, WeightLayout::Other, "_FusedConv2D"},
  };
  for (std::size_t i = 0; i < 5; ++i) {
    INFO(want[i].name);
    CHECK(ws[i].name == want[i].name);
    CHECK(ws[i].shape == want[i].shape);
    CHECK(ws[i].dtype == want[i].dtype);
    CHECK(ws[i].byte_size == want[i].bytes);
    CHECK(ws[i].layout == want[i].layout);
    CHECK(ws[i].op == want[i].op);
  }
  CHECK(ws[3].storage == WeightStorage::I32);
  CHECK_FALSE(ws[3].readable());

  const Tensor tc = read_ok(*wf, "net/conv/kernel");
  CHECK(tc.dtype() == DType::F32);
  CHECK(tc.shape() == std::vector<std::int64_t>{1, 1, 2, 3});
  CHECK(tc.data() == conv);
  const Tensor td = read_ok(*wf, "net/dw/depthwise_weights");
  CHECK(td.data() == dw);
  const Tensor th = read_ok(*wf, "net/dense/kernel");
  CHECK(th.dtype() == DType::F16);
  for (std::size_t i = 0; i < 8; ++i) {
    INFO(i);
    CHECK(static_cast<double>(th.data()[i]) == f16_value(halves[i]));
  }
  CHECK(std::signbit(th.data()[6]) == false);
  CHECK(read_ok(*wf, "net/bias").data() == bias);
  auto ti = wf->read("net/axes");
  REQUIRE_FALSE(ti.ok());
  CHECK_THAT(ti.error().message, Catch::Contains("'net/axes' is stored as int32") && Catch::Contains("not weights"));
  auto missing = wf->read("nope");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error().message, Catch::Contains("no tensor named 'nope'"));

  SECTION("without a graph, Keras names give the layout") {
    put_bytes(dir.file("layers.json"), R"({"format": "layers-model", "weightsManifest": [{"paths": ["g2.bin"],
      "weights": [{"name": "dense_1/kernel", "shape": [1, 3], "dtype": "float32"}]}]})");
    auto lw = WeightFile::open_tfjs(dir.file("layers.json"));
    REQUIRE(lw.ok());
    CHECK(lw->weights()[0].layout == WeightLayout::DenseIO);
    CHECK(lw->weights()[0].op.empty());
  }
}

TEST_CASE("safetensors: F32, F16, BF16, F64 read exactly; other dtypes listed and refused by name",
          "[io][weights][safetensors]") {
  TempDir dir;
  std::vector<float> a;
  std::string data = f32_run(6, &a);                                   // a: F32 [2,3] at 0..24
  data += le(0x3C00, 2) + le(0x8001, 2);                               // h: F16 [2] at 24..28
  data += le(0x3F80, 2) + le(0xC049, 2) + le(0x0001, 2);               // b: BF16 [3] at 28..34
  data += f64(0.1) + f64(-1e300);                                      // d: F64 [2] at 34..50
  data += le(5, 8);                                                    // n: I64 [1] at 50..58
  const std::string header =
      R"({"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},)"
      R"( "h": {"dtype": "F16", "shape": [2], "data_offsets": [24, 28]},)"
      R"( "b": {"dtype": "BF16", "shape": [3], "data_offsets": [28, 34]},)"
      R"( "d": {"dtype": "F64", "shape": [2], "data_offsets": [34, 50]},)"
      R"( "n": {"dtype": "I64", "shape": [], "data_offsets": [50, 58]}})";
  put_bytes(dir.file("m.safetensors"), safetensors(header + "   ", data));
  auto wf = WeightFile::open(dir.file("m.safetensors"));
  REQUIRE(wf.ok());
  CHECK(wf->kind() == WeightFileKind::Safetensors);
  REQUIRE(wf->weights().size() == 5);
  // Listed in data order.
  CHECK(wf->weights()[0].name == "a");
  CHECK(wf->weights()[0].layout == WeightLayout::DenseOI);
  CHECK(wf->weights()[4].name == "n");
  CHECK(wf->weights()[4].shape.empty());
  CHECK(wf->weights()[4].elements == 1);
  CHECK(read_ok(*wf, "a").data() == a);
  const Tensor h = read_ok(*wf, "h");
  CHECK(h.dtype() == DType::F16);
  CHECK(static_cast<double>(h.data()[0]) == 1.0);
  CHECK(static_cast<double>(h.data()[1]) == -std::ldexp(1.0, -24));
  const Tensor b = read_ok(*wf, "b");
  CHECK(b.dtype() == DType::BF16);
  CHECK(b.data()[0] == 1.0f);
  CHECK(b.data()[1] == std::bit_cast<float>(0xC0490000U));
  CHECK(b.data()[2] == std::bit_cast<float>(0x00010000U));
  const Tensor d = read_ok(*wf, "d");
  CHECK(d.dtype() == DType::F64);
  CHECK(d.f64_data() == std::vector<double>{0.1, -1e300});
  auto n = wf->read("n");
  REQUIRE_FALSE(n.ok());
  CHECK_THAT(n.error().message, Catch::Contains("'n' is stored as I64"));

  SECTION("files without the extension are recognised by their header") {
    std::filesystem::copy_file(dir.file("m.safetensors"), dir.file("model.bin"));
    auto again = WeightFile::open(dir.file("model.bin"));
    REQUIRE(again.ok());
    CHECK(again->kind() == WeightFileKind::Safetensors);
  }
}

TEST_CASE("gnubg weights: nets of hidden and output weights and thresholds", "[io][weights][gnubg]") {
  TempDir dir;
  std::vector<float> v0, v1;
  put_bytes(dir.file("g.wd"), kGnubgHeader + gnubg_net(3, 2, 1, &v0) + gnubg_net(2, 1, 2, &v1));
  auto wf = WeightFile::open(dir.file("g.wd"));
  REQUIRE(wf.ok());
  CHECK(wf->kind() == WeightFileKind::Gnubg);
  REQUIRE(wf->weights().size() == 8);
  CHECK(wf->weights()[0].name == "contact/hidden_weights");
  CHECK(wf->weights()[0].shape == std::vector<std::int64_t>{3, 2});
  CHECK(wf->weights()[0].layout == WeightLayout::DenseIO);
  CHECK(wf->weights()[1].name == "contact/output_weights");
  CHECK(wf->weights()[1].shape == std::vector<std::int64_t>{1, 2});
  CHECK(wf->weights()[1].layout == WeightLayout::DenseOI);
  CHECK(wf->weights()[2].name == "contact/hidden_thresholds");
  CHECK(wf->weights()[3].name == "contact/output_thresholds");
  CHECK(wf->weights()[4].name == "race/hidden_weights");
  // Values in file order: hidden weights, output weights, hidden thresholds, output thresholds.
  CHECK(read_ok(*wf, "contact/hidden_weights").data() == std::vector<float>(v0.begin(), v0.begin() + 6));
  CHECK(read_ok(*wf, "contact/output_weights").data() == std::vector<float>(v0.begin() + 6, v0.begin() + 8));
  CHECK(read_ok(*wf, "contact/output_thresholds").data() == std::vector<float>(v0.begin() + 10, v0.end()));
  CHECK(read_ok(*wf, "race/output_thresholds").data() == std::vector<float>(v1.end() - 2, v1.end()));
}

TEST_CASE("name patterns: globs and regular expressions match whole names", "[io][weights][pattern]") {
  struct Case {
    const char* pattern;
    const char* name;
    bool match;
  };
  const Case cases[] = {
      {"*conv*/kernel", "block1/conv2d/kernel", true},
      {"*conv*/kernel", "block1/conv2d/bias", false},
      {"*conv*/kernel", "a/b/conv/c/kernel", true},  // '*' crosses '/'
      {"*", "", true},
      {"*", "anything/at/all", true},
      {"dense", "dense_1", false},  // whole names only
      {"dense?1", "dense_1", true},
      {"dense[_-]1", "dense-1", true},
      {"dense[!_]1", "dense_1", false},
      {"conv[0-9]", "conv7", true},
      {"conv[0-9]", "convx", false},
      {"a\\*b", "a*b", true},
      {"a\\*b", "axb", false},
      {"*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaac", false},
      {"re:.*conv\\d+/kernel", "net/conv12/kernel", true},
      {"re:conv", "net/conv/kernel", false},  // a regex must match the whole name too
      {"re:(dense|conv).*", "dense/kernel", true},
  };
  for (const auto& c : cases) {
    INFO(c.pattern << " vs " << c.name);
    auto p = NamePattern::parse(c.pattern);
    REQUIRE(p.ok());
    CHECK(p->matches(c.name) == c.match);
  }
  for (const char* bad : {"conv[0-9", "trailing\\", "re:(unclosed"}) {
    INFO(bad);
    auto p = NamePattern::parse(bad);
    REQUIRE_FALSE(p.ok());
    CHECK_THAT(p.error().message, Catch::StartsWith(std::string("name pattern '") + bad + "'"));
  }
  // Regression: re: patterns ran on std::regex, which recurses per character: a long name or a deeply
  // nested pattern overflowed the stack (SIGSEGV) in every front end. Matching is now linear, never recursive.
  const std::string long_name(1 << 20, 'a');
  const std::pair<const char*, bool> long_cases[] = {
      {"re:.*", true}, {"re:(a|b)*", true}, {"re:(a*)*b", false}, {"re:(?:a?){30}a{30}", false}, {"*a*a*a*a*b", false}};
  for (const auto& [pattern, match] : long_cases) {
    INFO(pattern);
    auto p = NamePattern::parse(pattern);
    REQUIRE(p.ok());
    CHECK(p->matches(long_name) == match);
  }
  const std::string nested = "re:" + std::string(20000, '(') + "a" + std::string(20000, ')');
  auto deep = NamePattern::parse(nested);
  REQUIRE_FALSE(deep.ok());
  CHECK_THAT(deep.error().message, Catch::Contains("longer than 4096 characters"));
  const std::string nested_short = "re:" + std::string(2000, '(') + "a" + std::string(2000, ')');
  auto deep_short = NamePattern::parse(nested_short);  // RE2 walks its trees with explicit stacks
  REQUIRE(deep_short.ok());
  CHECK(deep_short->matches("a"));
  CHECK_FALSE(deep_short->matches(long_name));
  auto unclosed = NamePattern::parse("re:" + std::string(3000, '('));
  REQUIRE_FALSE(unclosed.ok());
  CHECK_THAT(unclosed.error().message, Catch::Contains("invalid regular expression"));
  CHECK(unclosed.error().message.size() < 200);  // the pattern is shown shortened
  auto huge = NamePattern::parse("re:((((a{100}){100}){100}){100})");
  REQUIRE_FALSE(huge.ok());
  CHECK_THAT(huge.error().message, Catch::Contains("invalid regular expression"));
  std::vector<WeightInfo> ws(3);
  ws[0].name = "a/conv/kernel";
  ws[1].name = "a/conv/bias";
  ws[2].name = "b/conv/kernel";
  auto sel = select_weights(ws, *NamePattern::parse("*/kernel"));
  REQUIRE(sel.size() == 2);
  CHECK(sel[0].name == "a/conv/kernel");
  CHECK(sel[1].name == "b/conv/kernel");
}

TEST_CASE("reduction axes follow the kernel layout", "[io][weights][layout]") {
  struct Case {
    WeightLayout layout;
    std::vector<std::int64_t> shape;
    std::vector<std::size_t> axes;
    const char* name;
  };
  const Case cases[] = {
      {WeightLayout::ConvHWIO, {3, 3, 16, 32}, {2}, "I"},
      {WeightLayout::DepthwiseHWCM, {3, 3, 16, 1}, {0, 1}, "HxW"},
      {WeightLayout::DenseIO, {128, 10}, {0}, "I"},
      {WeightLayout::DenseOI, {10, 128}, {1}, "I"},
      {WeightLayout::ConvOIHW, {32, 16, 3, 3}, {1}, "I"},
      {WeightLayout::ConvTransposeHWOI, {3, 3, 8, 16}, {3}, "I"},
  };
  for (const auto& c : cases) {
    INFO(weight_layout_name(c.layout));
    auto r = reduction_axes(c.shape, c.layout);
    REQUIRE(r.ok());
    CHECK(r->axes == c.axes);
    CHECK(r->name == c.name);
  }
  const std::vector<std::int64_t> vec = {16};
  CHECK_THAT(reduction_axes(vec, WeightLayout::Other).error().message, Catch::Contains("no reduction axis"));
  CHECK_THAT(reduction_axes(vec, WeightLayout::ConvHWIO).error().message, Catch::Contains("has 4 dimensions"));
}

TEST_CASE("hostile weight files are refused with a message naming the file and the problem", "[io][weights][errors]") {
  TempDir dir;
  put_bytes(dir.file("w8.bin"), std::string(8, '\0'));
  // tfjs manifests over the 8-byte shard w8.bin unless a case says otherwise.
  auto manifest = [](const std::string& paths, const std::string& weights) {
    return R"({"weightsManifest": [{"paths": )" + paths + R"(, "weights": )" + weights + "}]}";
  };
  const std::string two_f32 = R"([{"name": "w", "shape": [2], "dtype": "float32"}])";
  std::filesystem::create_directories(dir.file("outside"));
  put_bytes(dir.file("outside/secret.bin"), std::string(8, '\0'));
  std::filesystem::create_directories(dir.file("m"));
  put_bytes(dir.file("m/w8.bin"), std::string(8, '\0'));
  std::filesystem::create_symlink(dir.file("outside/secret.bin"), dir.file("m/link.bin"));

  const std::vector<HostileCase> tfjs = {
      {"parent.json", manifest(R"(["../outside/secret.bin"])", two_f32), "leaves or walks around the model's folder"},
      {"absolute.json", manifest("[\"" + dir.file("w8.bin") + "\"]", two_f32), "is not a plain relative path"},
      {"missing.json", manifest(R"(["nope.bin"])", two_f32), "the shard 'nope.bin' cannot be opened"},
      {"m/symlink.json", manifest(R"(["link.bin"])", two_f32), "outside the model's folder"},
      {"truncated.json", manifest(R"(["w8.bin"])", R"([{"name": "w", "shape": [3], "dtype": "float32"}])"),
       "needs 12 bytes at offset 0, but the group's shards hold 8 bytes"},
      {"leftover.json", manifest(R"(["w8.bin"])", R"([{"name": "w", "shape": [1], "dtype": "float32"}])"),
       "4 bytes belong to no weight"},
      {"overflow.json",
       manifest(R"(["w8.bin"])", R"([{"name": "w", "shape": [4294967296, 4294967296], "dtype": "float32"}])"),
       "more elements than 64 bits can count"},
      {"beyond.json", manifest(R"(["w8.bin"])", R"([{"name": "w", "shape": [1000000000, 1000], "dtype": "float32"}])"),
       "needs 4000000000000 bytes"},
      {"zero-huge.json",
       manifest(R"(["w8.bin"])", R"([{"name": "z", "shape": [0, 9223372036854775807], "dtype": "float32"},)"
                                 R"( {"name": "w", "shape": [2], "dtype": "float32"}])"),
       "far more than"},
      {"negative.json", manifest(R"(["w8.bin"])", R"([{"name": "w", "shape": [-2], "dtype": "float32"}])"),
       "dimension 1 of 'shape' is negative"},
      {"fraction.json", manifest(R"(["w8.bin"])", R"([{"name": "w", "shape": [2.5], "dtype": "float32"}])"),
       "expected a non-negative integer"},
      {"hugedim.json", manifest(R"(["w8.bin"])", R"([{"name": "w", "shape": [18446744073709551615], "dtype": "float32"}])"),
       "is too large"},
      {"rank.json", manifest(R"(["w8.bin"])", R"([{"name": "w", "shape": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,2], "dtype": "float32"}])"),
       "more than 16"},
      {"dtype.json", manifest(R"(["w8.bin"])", R"([{"name": "w", "shape": [1], "dtype": "float64"}])"),
       "unknown dtype 'float64'"},
      {"string.json", manifest(R"(["w8.bin"])", R"([{"name": "w", "shape": [1], "dtype": "string"}])"),
       "variable-length strings are not supported"},
      {"quant.json",
       manifest(R"(["w8.bin"])", R"([{"name": "w", "shape": [2], "dtype": "float32", "quantization": {"dtype": "int4"}}])"),
       "unknown quantization dtype 'int4'"},
      {"dupname.json",
       manifest(R"(["w8.bin"])", R"([{"name": "w", "shape": [1], "dtype": "float32"}, {"name": "w", "shape": [1], "dtype": "float32"}])"),
       "the name appears twice"},
      {"dupkey.json", R"({"weightsManifest": [], "weightsManifest": []})", "the key \"weightsManifest\" appears twice"},
      {"deep.json", std::string(100, '[') + std::string(100, ']'), "nesting deeper than 64 levels"},
      {"invalid.json", R"({"weightsManifest": [)", "invalid JSON"},
      {"nomanifest.json", R"({"format": "graph-model"})", "no 'weightsManifest'"},
      {"paths.json", R"({"weightsManifest": [{"paths": "w8.bin", "weights": []}]})", "lacks a 'paths' array"},
  };
  check_refused(dir, tfjs, "tfjs", [](const std::string& p) { return WeightFile::open_tfjs(p); });
  SECTION("JSON headers larger than the limit are refused before parsing") {
    const std::string path = dir.file("huge.json");
    put_bytes(path, "{" + std::string((std::size_t{16} << 20) + 1, ' ') + "}");
    auto wf = WeightFile::open_tfjs(path);
    REQUIRE_FALSE(wf.ok());
    CHECK_THAT(wf.error().message, Catch::Contains("more than the limit of 16777216"));
  }
  SECTION("JSON with too many values") {
    std::string many = "{\"weightsManifest\": [], \"x\": [";
    for (int i = 0; i < (1 << 18) + 1; ++i) many += "0,";
    many += "0]}";
    const std::string path = dir.file("many.json");
    put_bytes(path, many);
    auto wf = WeightFile::open_tfjs(path);
    REQUIRE_FALSE(wf.ok());
    CHECK_THAT(wf.error().message, Catch::Contains("more than 262144 values"));
  }

  const std::string f32x2 = R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
  const std::vector<HostileCase> st = {
      {"short.safetensors", "abc", "fewer than the 8-byte header length"},
      {"beyond.safetensors", le(1000, 8) + "{}", "the header length 1000 is beyond the file (10 bytes)"},
      {"huge-len.safetensors", le(~0ULL, 8) + "{}", "is beyond the file"},
      {"notobj.safetensors", safetensors("[1, 2]", ""), "does not start with '{'"},
      {"overlap.safetensors",
       safetensors(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                   std::string(8, '\0')),
       "tensors 'a' and 'b' overlap"},
      {"outside.safetensors", safetensors(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", std::string(8, '\0')),
       "point outside the data (8 bytes after the header)"},
      {"reversed.safetensors", safetensors(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}})", std::string(8, '\0')),
       "end before they begin"},
      {"gap.safetensors", safetensors(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", std::string(8, '\0')),
       "data bytes 0 to 4 belong to no tensor"},
      {"trailing.safetensors", safetensors(f32x2, std::string(12, '\0')), "4 bytes after the last tensor belong to no tensor"},
      {"size.safetensors", safetensors(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", std::string(8, '\0')),
       "needs 12 bytes, data_offsets [0, 8] span 8"},
      {"dtype.safetensors", safetensors(R"({"w": {"dtype": "Q4_K", "shape": [2], "data_offsets": [0, 8]}})", std::string(8, '\0')),
       "unsupported dtype 'Q4_K'"},
      {"overflow.safetensors",
       safetensors(R"({"w": {"dtype": "F64", "shape": [4294967296, 536870912], "data_offsets": [0, 8]}})", std::string(8, '\0')),
       "more elements than 64 bits can count"},
      {"key.safetensors", safetensors(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": 1}})", std::string(8, '\0')),
       "unexpected key 'x'"},
      {"meta.safetensors", safetensors(R"({"__metadata__": {"a": 1}})", ""), "expected a string"},
      {"dup.safetensors", safetensors(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", std::string(8, '\0')),
       "appears twice"},
      {"deep.safetensors", safetensors("{\"a\":" + std::string(80, '[') + std::string(80, ']') + "}", ""),
       "nesting deeper than 64"},
      {"offsets.safetensors", safetensors(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, -8]}})", std::string(8, '\0')),
       "'data_offsets' must be two non-negative integers"},
  };
  check_refused(dir, st, "safetensors", [](const std::string& p) { return WeightFile::open_safetensors(p); });

  std::vector<float> ignored;
  const std::vector<HostileCase> gnubg = {
      {"magic.wd", f32(1.0f) + f32(1.0f), "not a gnubg weights file"},
      {"version.wd", f32(472.3782f) + f32(0.0f), "is not the supported version 1.0"},
      {"empty.wd", kGnubgHeader, "holds no nets"},
      {"cutheader.wd", kGnubgHeader + i32(2) + i32(2), "a net header needs 24"},
      {"zero.wd", kGnubgHeader + i32(0) + i32(2) + i32(1) + i32(0) + f32(0.1f) + f32(1.0f), "cInput = 0"},
      {"wide.wd", kGnubgHeader + i32(2) + i32(2000000000) + i32(1) + i32(0) + f32(0.1f) + f32(1.0f), "cHidden = 2000000000"},
      {"beta.wd", kGnubgHeader + i32(1) + i32(1) + i32(1) + i32(0) + f32(0.0f) + f32(1.0f), "betas are not positive"},
      {"cutdata.wd", kGnubgHeader + gnubg_net(3, 2, 1, &ignored).substr(0, 40), "truncated data"},
  };
  check_refused(dir, gnubg, "gnubg", [](const std::string& p) { return WeightFile::open_gnubg(p); });

  SECTION("a shard that shrinks after opening is an error, not garbage") {
    put_bytes(dir.file("s.bin"), std::string(8, '\0'));
    put_bytes(dir.file("s.json"), manifest(R"(["s.bin"])", two_f32));
    auto wf = WeightFile::open_tfjs(dir.file("s.json"));
    REQUIRE(wf.ok());
    put_bytes(dir.file("s.bin"), std::string(4, '\0'));
    auto t = wf->read("w");
    REQUIRE_FALSE(t.ok());
    CHECK_THAT(t.error().message, Catch::Contains("it was longer when opened"));
  }
  SECTION("unknown kinds of file") {
    put_bytes(dir.file("x.dat"), "hello world");
    auto wf = WeightFile::open(dir.file("x.dat"));
    REQUIRE_FALSE(wf.ok());
    CHECK_THAT(wf.error().message, Catch::Contains("unknown kind of weight file"));
  }
}

TEST_CASE("sharded safetensors: the index's weight_map names each tensor's shard", "[io][weights][safetensors]") {
  TempDir dir;
  std::vector<float> a, b;
  const std::string da = f32_run(4, &a), db = f32_run(2, &b);
  put_bytes(dir.file("model-00001-of-00002.safetensors"),
            safetensors(R"({"x.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}})", da));
  put_bytes(dir.file("model-00002-of-00002.safetensors"),
            safetensors(R"({"y.bias": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                        R"( "z": {"dtype": "BF16", "shape": [1], "data_offsets": [8, 10]}})",
                        db + le(0x3F80, 2)));
  const std::string index = R"({"metadata": {"total_size": 26}, "weight_map": {"x.weight": "model-00001-of-00002.safetensors",)"
                            R"( "y.bias": "model-00002-of-00002.safetensors", "z": "model-00002-of-00002.safetensors"}})";
  put_bytes(dir.file("model.safetensors.index.json"), index);
  auto wf = WeightFile::open(dir.file("model.safetensors.index.json"));
  REQUIRE(wf.ok());
  CHECK(wf->kind() == WeightFileKind::Safetensors);
  REQUIRE(wf->weights().size() == 3);
  CHECK(wf->weights()[0].name == "x.weight");
  CHECK(wf->weights()[0].layout == WeightLayout::DenseOI);
  CHECK(read_ok(*wf, "x.weight").data() == a);
  CHECK(read_ok(*wf, "y.bias").data() == b);
  CHECK(read_ok(*wf, "z").data()[0] == 1.0f);

  SECTION("an index under another name is recognised by its weight_map") {
    put_bytes(dir.file("index.json"), index);
    auto again = WeightFile::open(dir.file("index.json"));
    REQUIRE(again.ok());
    CHECK(again->weights().size() == 3);
  }
  SECTION("hostile indexes are refused with the reason") {
    const std::vector<HostileCase> cases = {
        {"missing.safetensors.index.json", R"({"weight_map": {"w": "model-00001-of-00002.safetensors"}})",
         "tensor 'w' is not in its shard"},
        {"escape.safetensors.index.json", R"({"weight_map": {"x.weight": "../model-00001-of-00002.safetensors"}})",
         "leaves or walks around"},
        {"absent.safetensors.index.json", R"({"weight_map": {"x.weight": "nope.safetensors"}})", "cannot be opened"},
        {"nomap.safetensors.index.json", R"({"metadata": {}})", "lacks the object 'weight_map'"},
        {"number.safetensors.index.json", R"({"weight_map": {"x": 3}})", "expected a shard file name"},
        {"extra.safetensors.index.json", R"({"weight_map": {}, "other": 1})", "unexpected key 'other'"},
    };
    check_refused(dir, cases, "safetensors index", [](const std::string& p) { return WeightFile::open(p); });
  }
}

namespace {

// GGUF pieces (little-endian): a string, a tensor info (dims ne[0] first), a metadata key-value pair.
std::string gguf_string(const std::string& s) { return le(s.size(), 8) + s; }
std::string gguf_tensor(const std::string& name, const std::vector<std::uint64_t>& ne, std::uint32_t type,
                        std::uint64_t offset) {
  std::string s = gguf_string(name) + le(ne.size(), 4);
  for (auto d : ne) s += le(d, 8);
  return s + le(type, 4) + le(offset, 8);
}
// A GGUF v3 file: metadata (an architecture string, an array of strings, the alignment), tensor infos, padding
// to the alignment, data.
std::string gguf(const std::vector<std::string>& infos, const std::string& data, std::uint64_t alignment = 32) {
  std::string s = "GGUF" + le(3, 4) + le(infos.size(), 8) + le(3, 8);
  s += gguf_string("general.architecture") + le(8, 4) + gguf_string("llama");
  s += gguf_string("tokenizer.ggml.tokens") + le(9, 4) + le(8, 4) + le(2, 8) + gguf_string("a") + gguf_string("bc");
  s += gguf_string("general.alignment") + le(4, 4) + le(alignment, 4);
  for (const auto& i : infos) s += i;
  s += std::string((alignment - s.size() % alignment) % alignment, '\0');
  return s + data;
}

}  // namespace

TEST_CASE("GGUF: F32, F16 and BF16 tensors read in row-major shape; quantized types listed", "[io][weights][gguf]") {
  TempDir dir;
  std::vector<float> w;
  std::string data = f32_run(6, &w);                          // w: F32 ne [3, 2] -> shape [2, 3] at 0
  data += std::string(8, '\0');                               // padding to 32
  data += le(0x3C00, 2) + le(0xBC00, 2);                      // h: F16 [2] at 32
  data += std::string(28, '\0');
  data += le(0x4000, 2);                                      // b: BF16 [1] at 64
  data += std::string(30, '\0');
  data += std::string(18, '\x11');                            // q: Q4_0, one block of 32 at 96
  const std::string bytes = gguf({gguf_tensor("blk.0.w", {3, 2}, 0, 0), gguf_tensor("h", {2}, 1, 32),
                                  gguf_tensor("b", {1}, 30, 64), gguf_tensor("q", {32}, 2, 96)},
                                 data);
  put_bytes(dir.file("m.gguf"), bytes);
  auto wf = WeightFile::open(dir.file("m.gguf"));
  REQUIRE(wf.ok());
  CHECK(wf->kind() == WeightFileKind::Gguf);
  REQUIRE(wf->weights().size() == 4);
  CHECK(wf->weights()[0].shape == std::vector<std::int64_t>{2, 3});
  CHECK(wf->weights()[0].layout == WeightLayout::DenseOI);
  CHECK(read_ok(*wf, "blk.0.w").data() == w);
  const Tensor h = read_ok(*wf, "h");
  CHECK(h.dtype() == DType::F16);
  CHECK(h.data() == std::vector<float>{1.0f, -1.0f});
  CHECK(read_ok(*wf, "b").data()[0] == 2.0f);
  CHECK(wf->weights()[3].dtype == "Q4_0");
  CHECK(wf->weights()[3].byte_size == 18);
  CHECK_FALSE(wf->weights()[3].readable());
  auto q = wf->read("q");
  REQUIRE_FALSE(q.ok());
  CHECK_THAT(q.error().message, Catch::Contains("stored as Q4_0"));

  SECTION("files without the extension are recognised by the magic") {
    put_bytes(dir.file("model.bin"), bytes);
    auto again = WeightFile::open(dir.file("model.bin"));
    REQUIRE(again.ok());
    CHECK(again->kind() == WeightFileKind::Gguf);
  }
  SECTION("hostile files are refused with the reason") {
    const std::string head = "GGUF" + le(3, 4);
    const std::vector<HostileCase> cases = {
        {"magic.gguf", "GGUX" + std::string(40, '\0'), "magic 'GGUF'"},
        {"version.gguf", "GGUF" + le(1, 4) + std::string(40, '\0'), "GGUF version 1"},
        {"counts.gguf", head + le(~0ULL, 8) + le(0, 8) + std::string(16, '\0'), "cannot fit"},
        {"key.gguf", head + le(0, 8) + le(1, 8) + le(1000, 8) + "abc", "truncated or corrupt"},
        {"array.gguf", head + le(0, 8) + le(1, 8) + gguf_string("k") + le(9, 4) + le(6, 4) + le(~0ULL >> 4, 8),
         "reaches past the header"},
        {"type.gguf", head + le(0, 8) + le(1, 8) + gguf_string("k") + le(99, 4) + std::string(8, '\0'), "unknown type 99"},
        {"outside.gguf", gguf({gguf_tensor("w", {4}, 0, 0)}, std::string(8, '\0')), "lie outside it"},
        {"overlap.gguf", gguf({gguf_tensor("a", {8}, 0, 0), gguf_tensor("b", {8}, 0, 0)}, std::string(32, '\0')),
         "overlap"},
        {"aligned.gguf", gguf({gguf_tensor("w", {1}, 0, 4)}, std::string(32, '\0')), "not a multiple of the alignment"},
        {"blocks.gguf", gguf({gguf_tensor("q", {31}, 2, 0)}, std::string(32, '\0')), "not whole blocks of 32"},
        {"twice.gguf", gguf({gguf_tensor("w", {1}, 0, 0), gguf_tensor("w", {1}, 0, 32)}, std::string(64, '\0')),
         "appears twice"},
        {"rank.gguf", gguf({gguf_tensor("w", std::vector<std::uint64_t>(17, 1), 0, 0)}, std::string(32, '\0')),
         "17 dimensions"},
        {"alignment.gguf", gguf({}, "", 24), "not a power of two"},
    };
    check_refused(dir, cases, "gguf", [](const std::string& p) { return WeightFile::open_gguf(p); });
  }
}
