// Checks `mxlab analyze` and `mxlab data weights` on capture folders: the rows of each tensor equal those of the
// same float32 values read as a raw file, --select and --gaps, and bad folders, manifests and options against
// the CLI contract (exit code 2, one line naming the input and the problem, nothing written).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/cli_run.hpp"

namespace {

namespace fs = std::filesystem;
using mxlab_test::BadInput;
using mxlab_test::run_cli;
using mxlab_test::text_lines;

void write(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

/// Little-endian float32 bytes of v (the machines mxlab runs on are little-endian).
std::string floats(const std::vector<float>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)};
}

std::string tensor_json(const std::string& name, const std::string& file, const std::string& shape,
                        const std::string& layout = "tokens x hidden") {
  return R"({"name": ")" + name + R"(", "file": ")" + file + R"(", "layer": "fc1", "module": "Linear", "role": "activation",
             "site": "output", "step": 0, "shape": )" + shape + R"(, "dtype": "float32", "layout": ")" + layout + "\"}";
}

std::string manifest(const std::string& tensors) {
  return R"({"format": "mxlab-capture", "version": 1, "tensors": [)" + tensors + "]}";
}

/// A capture folder at dir/name with the given manifest text and the float32 file 000000.f32 of `values`.
std::string folder(const fs::path& dir, const std::string& name, const std::string& text, const std::vector<float>& values) {
  fs::create_directories(dir / name);
  write(dir / name / "000000.f32", floats(values));
  write(dir / name / "capture.json", text);
  return (dir / name).string();
}

/// Values with an outlier channel: hidden column 5 is 300 times the others.
std::vector<float> activations(int tokens, int hidden) {
  std::vector<float> v;
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < hidden; ++h)
      v.push_back(static_cast<float>(std::sin(0.37 * (t * hidden + h) + 1.0)) * (h == 5 ? 300.0f : 1.0f));
  return v;
}

}  // namespace

TEST_CASE("capture folders: analyze gives each tensor the rows of its values read as a raw file", "[cli][capture]") {
  const auto dir = fs::temp_directory_path() / "mxlab_test_capture_cli";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::vector<float> a = activations(4, 64), g = activations(2, 32);
  const std::string cap = folder(dir, "cap", manifest(tensor_json("fc1/activation/output/0", "000000.f32", "[4, 64]") + ", " +
                                                      tensor_json("fc1/gradient/output/0", "000001.f32", "[2, 32]")), a);
  write(fs::path(cap) / "000001.f32", floats(g));

  const auto rows = [](const mxlab_test::CliRun& r) {
    REQUIRE(r.code == 0);
    return text_lines(r.out);
  };
  const auto all = rows(run_cli({"analyze", "mxfp4", "mxint8", "--input", cap, "--csv"}));
  REQUIRE(all.size() == 5);
  CHECK(all[0].rfind("tensor,shape,layout,format,elements,", 0) == 0);
  // Each tensor's row after its three leading cells is the row of the raw float32 file of the same values.
  for (const auto& [file, shape, first] : {std::tuple<std::string, std::string, int>{"000000.f32", "4x64", 1},
                                           {"000001.f32", "2x32", 3}}) {
    const auto raw = rows(run_cli({"analyze", "mxfp4", "mxint8", "--input", cap + "/" + file, "--shape", shape, "--csv"}));
    REQUIRE(raw.size() == 3);
    for (int k = 0; k < 2; ++k) {
      const std::string& row = all[static_cast<std::size_t>(first + k)];
      const std::string lead = (first == 1 ? "fc1/activation/output/0," : "fc1/gradient/output/0,") + shape +
                               ",tokens x hidden: blocks along hidden,";
      REQUIRE(row.rfind(lead, 0) == 0);
      CHECK(row.substr(lead.size()) == raw[static_cast<std::size_t>(1 + k)]);
    }
  }
  const auto grads = rows(run_cli({"analyze", "mxfp4", cap, "--select", "*/gradient/*", "--csv"}));
  REQUIRE(grads.size() == 2);
  CHECK(grads[1].rfind("fc1/gradient/output/0,2x32,", 0) == 0);
  const auto gaps = rows(run_cli({"analyze", "mxfp4", "--input", cap, "--select", "re:.*activation.*", "--gaps", "--csv"}));
  const auto raw_gaps = rows(run_cli({"analyze", "mxfp4", "--input", cap + "/000000.f32", "--shape", "4x64", "--gaps", "--csv"}));
  REQUIRE(gaps.size() == raw_gaps.size());
  for (std::size_t k = 1; k < gaps.size(); ++k) CHECK(gaps[k].substr(gaps[k].find(",mxfp4,") + 1) == raw_gaps[k]);
  const auto listed = rows(run_cli({"data", "weights", cap, "--csv"}));
  REQUIRE(listed.size() == 3);
  CHECK(listed[1].rfind("fc1/activation/output/0,\"[4,64]\",float32,256,1024,tokens x hidden,hidden (axis 1),Linear", 0) == 0);
  fs::remove_all(dir);
}

TEST_CASE("weight files: analyze gives each tensor the rows of its values with blocks along its reduction axes",
          "[cli][capture]") {
  const auto dir = fs::temp_directory_path() / "mxlab_test_weights_cli";
  fs::remove_all(dir);
  fs::create_directories(dir);
  // A safetensors file (8-byte header length, JSON header, data) of a Linear weight [O, I] = [4, 64] and a
  // convolution weight [O, I, kh, kw] = [8, 32, 1, 2], whose blocks run along I.
  const std::vector<float> dense = activations(4, 64), conv = activations(8, 64);
  const std::string header = R"({"fc.weight": {"dtype": "F32", "shape": [4, 64], "data_offsets": [0, 1024]},)"
                             R"( "conv.weight": {"dtype": "F32", "shape": [8, 32, 1, 2], "data_offsets": [1024, 3072]}})";
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  write(dir / "model.safetensors", bytes + header + floats(dense) + floats(conv));
  write(dir / "dense.f32", floats(dense));
  write(dir / "conv.f32", floats(conv));
  const auto csv = [](std::vector<std::string> args) {
    args.push_back("--csv");
    const auto r = run_cli(args);
    REQUIRE(r.code == 0);
    return text_lines(r.out);
  };
  const auto rows = csv({"analyze", "mxfp4", "--input", (dir / "model.safetensors").string()});
  REQUIRE(rows.size() == 3);
  const auto raw_dense = csv({"analyze", "mxfp4", "--input", (dir / "dense.f32").string(), "--shape", "4x64"});
  const auto raw_conv = csv({"analyze", "mxfp4", "--input", (dir / "conv.f32").string(), "--shape", "8x32x1x2", "--layout", "oihw"});
  const std::string dense_lead = "fc.weight,4x64,dense OI: blocks along I,";
  const std::string conv_lead = "conv.weight,8x32x1x2,conv OIHW: blocks along I,";
  REQUIRE(rows[1].rfind(dense_lead, 0) == 0);
  REQUIRE(rows[2].rfind(conv_lead, 0) == 0);
  CHECK(rows[1].substr(dense_lead.size()) == raw_dense[1]);
  CHECK(rows[2].substr(conv_lead.size()) == raw_conv[1]);
  fs::remove_all(dir);
}

TEST_CASE("bad input: capture folders, manifests and options", "[cli][capture]") {
  const auto dir = fs::temp_directory_path() / "mxlab_test_capture_bad";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::vector<float> v = activations(2, 32);
  const std::string good = folder(dir, "good", manifest(tensor_json("t", "000000.f32", "[2, 32]")), v);
  const std::string missing = folder(dir, "missing", manifest(tensor_json("t", "gone.f32", "[2, 32]")), v);
  const std::string size = folder(dir, "size", manifest(tensor_json("t", "000000.f32", "[2, 33]")), v);
  const std::string json = folder(dir, "json", R"({"format": "mxlab-capture", "version": 1, "tensors": [)", v);
  const std::string layout = folder(dir, "layout", manifest(tensor_json("t", "000000.f32", "[2, 32]", "channels")), v);
  const std::string escape = folder(dir, "escape", manifest(tensor_json("t", "../good/000000.f32", "[2, 32]")), v);
  fs::create_directories(dir / "empty");
  const std::string npy = (dir / "x.f32").string();
  write(npy, floats(v));
  const BadInput cases[] = {
      {{"analyze", "mxfp4", "--input", missing}, "gone.f32"},
      {{"analyze", "mxfp4", "--input", size}, "holds 256 bytes; shape [2, 33] of float32 needs 264"},
      {{"analyze", "mxfp4", "--input", json}, "json/capture.json"},
      {{"analyze", "mxfp4", "--input", layout}, "unknown layout 'channels'"},
      {{"analyze", "mxfp4", "--input", escape}, "leaves or walks around"},
      {{"analyze", "mxfp4", "--input", (dir / "empty").string()}, "empty': a folder without capture.json"},
      {{"data", "weights", size}, "holds 256 bytes"},
      {{"analyze", "mxfp4", "--input", good, "--per-block"}, "option '--per-block' does not apply"},
      {{"analyze", "mxfp4", "--input", good, "--layout", "io"}, "option '--layout' does not apply"},
      {{"analyze", "mxfp4", "--input", good, "--shape", "64"}, "option '--shape' does not apply"},
      {{"analyze", "mxfp4", "--input", good, "--select", "nothing*"}, "no readable tensor matches 'nothing*'"},
      {{"analyze", "mxfp4", "--input", good, "--select", "[a"}, "'[' at position 1 is not closed"},
      {{"analyze", "mxfp4", "--input", npy, "--select", "*"}, "option '--select' takes a weight file or capture folder"},
      {{"analyze", "mxfp4", "--input", good, "--columns", "tensor,colour"}, "colour"},
      {{"analyze", "mxfp4", "--input", good, "--out", (dir / "good").string()}, "good"},
  };
  mxlab_test::check_bad_inputs(dir, cases);
  fs::remove_all(dir);
}
