// Checks bad input to packed files, name patterns and sizes against the CLI contract (exit code 2, one line
// naming the input and the problem, nothing written): rows of the bad-input table beyond test_cli's.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "support/cli_run.hpp"

namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

/// Copies the packed files BASE.* to NAME.* with `from` replaced by `to` in NAME.json.
void edited_copy(const std::string& d, const std::string& base, const std::string& name, const std::string& from,
                 const std::string& to) {
  for (const char* suffix : {".elements.npy", ".scales.npy", ".tensor_scale.npy"})
    if (fs::exists(d + "/" + base + suffix)) fs::copy_file(d + "/" + base + suffix, d + "/" + name + suffix);
  std::string json = slurp(d + "/" + base + ".json");
  const auto at = json.find(from);
  REQUIRE(at != std::string::npos);
  json.replace(at, from.size(), to);
  std::ofstream(d + "/" + name + ".json", std::ios::binary) << json;
}

}  // namespace

TEST_CASE("bad input: packed metadata that does not describe a layout mxlab writes", "[cli][quantize]") {
  const auto dir = fs::temp_directory_path() / "mxlab_test_bad_packed";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string d = dir.string();
  using mxlab_test::run_cli;
  REQUIRE(run_cli({"quantize", "mxfp4", "gen:normal:0,1", "--shape", "4x64", "--out", d + "/hi", "--packed",
                   "--nibble-order", "high-first"}).code == 0);
  REQUIRE(run_cli({"quantize", "mxint8", "gen:normal:0,1", "--shape", "4x64", "--out", d + "/sm", "--packed",
                   "--int-encoding", "sign-magnitude"}).code == 0);
  REQUIRE(run_cli({"quantize", "nvfp4", "gen:normal:0,1", "--shape", "4x64", "--out", d + "/nv", "--packed"}).code == 0);
  edited_copy(d, "hi", "nib", "\"high-first\"", "\"middle-first\"");
  edited_copy(d, "sm", "enc", "\"sign-magnitude\"", "\"ones-complement\"");
  edited_copy(d, "hi", "bits", "\"element_bits\": 4", "\"element_bits\": 5");
  edited_copy(d, "hi", "key", "\"format\"", "\"colour\": \"red\", \"format\"");
  edited_copy(d, "hi", "twice", "\"format\"", "\"nibble_order\": \"low-first\", \"format\"");
  edited_copy(d, "hi", "lay", "\"block grid, row-major\"", "\"column-major\"");
  edited_copy(d, "nv", "ts", "\"tensor_scale\": \"float32\"", "\"tensor_scale\": \"ue8m0\"");
  edited_copy(d, "hi", "axis", "\"block_axis\": -1", "\"block_axis\": 2");
  edited_copy(d, "hi", "sub", "\"subtile_bits\": 1", "\"subtile_bits\": 9");
  edited_copy(d, "hi", "str", "\"element_bits\": 4", "\"element_bits\": \"4\"");
  edited_copy(d, "hi", "gone", "\"nibble_order\": \"high-first\",", "");
  fs::copy_file(d + "/hi.elements.npy", d + "/zero.elements.npy");
  fs::copy_file(d + "/hi.scales.npy", d + "/zero.scales.npy");
  fs::create_symlink("/dev/zero", d + "/zero.json");
  fs::create_directories(d + "/dir.json");
  fs::copy_file(d + "/hi.json", d + "/fifo.json");
  fs::copy_file(d + "/hi.scales.npy", d + "/fifo.scales.npy");
  REQUIRE(::mkfifo((d + "/fifo.elements.npy").c_str(), 0600) == 0);
  fs::copy_file(d + "/hi.json", d + "/big.json");
  fs::copy_file(d + "/hi.scales.npy", d + "/big.scales.npy");
  std::ofstream(d + "/big.elements.npy", std::ios::binary) << std::string(1 << 20, 'x');
  const std::string out = d + "/v.npy";
  const mxlab_test::BadInput cases[] = {
      {{"dequantize", "mxfp4", d + "/nib", "--out", out}, "nib.json': \"nibble_order\": unknown nibble order"},
      {{"dequantize", "mxint8", d + "/enc", "--out", out}, "enc.json': \"int_encoding\": unknown integer encoding"},
      {{"dequantize", "mxfp4", d + "/bits", "--out", out}, "\"element_bits\" is 5, but float4_e2m1fn has 4 bits"},
      {{"dequantize", "mxfp4", d + "/str", "--out", out}, "\"element_bits\" is a string, expected an integer"},
      {{"dequantize", "mxfp4", d + "/key", "--out", out}, "unknown key \"colour\""},
      {{"dequantize", "mxfp4", d + "/twice", "--out", out}, "\"nibble_order\" appears twice"},
      {{"dequantize", "mxfp4", d + "/lay", "--out", out}, "\"scale_layout\" is \"column-major\""},
      {{"dequantize", "nvfp4", d + "/ts", "--out", out}, "(tensor scale ue8m0, the format has float32)"},
      {{"dequantize", "mxfp4", d + "/axis", "--out", out}, "\"block_axis\" 2 is outside the tensor's 2 axes"},
      {{"dequantize", "mxfp4", d + "/sub", "--out", out}, "\"subtile_bits\" is 9, expected 1..8"},
      {{"dequantize", "mxfp4", d + "/gone", "--out", out}, "no \"nibble_order\" field"},
      {{"dequantize", "mxfp4", d + "/hi", "--out", out, "--nibble-order", "low-first"}, "records nibble-order high-first"},
      {{"dequantize", "mxint8", d + "/sm", "--out", out, "--int-encoding", "twos-complement"},
       "records int-encoding sign-magnitude"},
      {{"dequantize", "mxfp4", d + "/hi", "--out", out, "--block-axis", "0"}, "records block-axis 1"},
      {{"dequantize", "mxfp4", d + "/zero", "--out", out}, "zero.json': is a character device"},
      {{"dequantize", "mxfp4", d + "/dir", "--out", out}, "dir.json': is a directory"},
      {{"dequantize", "mxfp4", d + "/fifo", "--out", out}, "fifo.elements.npy': is a FIFO"},
      {{"dequantize", "mxfp4", d + "/big", "--out", out}, "big.elements.npy': is 1 MB, more than"},
      {{"dequantize", "mxfp4", d + "/absent", "--out", out}, "absent.json': does not exist"},
  };
  mxlab_test::check_bad_inputs(dir, cases);
  fs::remove_all(dir);
}

namespace {

/// A safetensors file with one float32 tensor of two values under `name`.
std::string safetensors_with(const std::string& name) {
  const std::string header = "{\"" + name + "\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return bytes + header + std::string(8, '\0');
}

}  // namespace

// Regression: re: patterns ran on std::regex, which recurses: a long tensor name or a deeply nested pattern
// overflowed the stack (SIGSEGV) in data weights --select, experiment inputs, recipe files and the GUI.
TEST_CASE("bad input: name patterns in every front end are refused or matched, never a crash", "[cli]") {
  const auto dir = fs::temp_directory_path() / "mxlab_test_bad_patterns";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string d = dir.string();
  const std::string long_name(200000, 'w');
  std::ofstream(d + "/w.safetensors", std::ios::binary) << safetensors_with("layer/kernel");
  std::ofstream(d + "/long.safetensors", std::ios::binary) << safetensors_with(long_name);
  // A name that long matches (or not) in linear time: exit 0, no crash.
  for (const char* select : {"re:(w|x)*", "re:(w*)*v", "*w*w*w*v"}) {
    INFO(select);
    const auto r = mxlab_test::run_cli({"data", "weights", d + "/long.safetensors", "--select", select, "--csv"});
    CHECK(r.code == 0);
  }
  const std::string nested = "re:" + std::string(5000, '(') + "a" + std::string(5000, ')');
  const std::string unclosed = "re:" + std::string(3000, '(');
  auto experiment = [&](const std::string& name, const std::string& select) {
    std::ofstream(d + "/" + name + ".toml") << "name = \"" << name << "\"\n[inputs.w]\nweights = \"w.safetensors\"\n"
                                            << "select = '" << select << "'\nkernels = false\n[sweep]\nformat = [\"mxfp4\"]\n"
                                            << "input = [\"w\"]\n";
  };
  experiment("exp_unclosed", "re:(conv");
  experiment("exp_nested", nested);
  experiment("exp_glob", "conv[0-9");
  std::ofstream(d + "/recipe_unclosed.txt") << "preset = mxfp8\nlayer re:(fc w = fp32\n";
  std::ofstream(d + "/recipe_nested.txt") << "preset = mxfp8\nlayer " << nested << " w = fp32\n";
  const std::string out = d + "/out";
  const mxlab_test::BadInput cases[] = {
      {{"data", "weights", d + "/w.safetensors", "--select", "re:(conv"}, "name pattern 're:(conv': invalid regular expression (missing )"},
      {{"data", "weights", d + "/w.safetensors", "--select", nested}, "longer than 4096 characters"},
      {{"data", "weights", d + "/w.safetensors", "--select", unclosed}, "invalid regular expression"},
      {{"data", "weights", d + "/w.safetensors", "--select", "re:a{2000}{2000}"}, "invalid regular expression"},
      {{"data", "weights", d + "/w.safetensors", "--select", "conv[0-9"}, "'[' at position 5 is not closed"},
      {{"data", "weights", d + "/w.safetensors", "--select", "trailing\\"}, "ends with a lone"},
      {{"run", d + "/exp_unclosed.toml", "--out", out}, "invalid regular expression"},
      {{"run", d + "/exp_nested.toml", "--out", out}, "longer than 4096 characters"},
      {{"run", d + "/exp_glob.toml", "--out", out}, "is not closed"},
      {{"train", "--model", "mlp", "--data", "digits", "--recipe", d + "/recipe_unclosed.txt", "--steps", "1", "--out", out},
       "invalid regular expression"},
      {{"train", "--model", "mlp", "--data", "digits", "--recipe", d + "/recipe_nested.txt", "--steps", "1", "--out", out},
       "longer than 4096 characters"},
  };
  mxlab_test::check_bad_inputs(dir, cases);
  fs::remove_all(dir);
}

// Regression: analyze --per-block kept every block's figures and every row in memory (7.5 GB for 1 M
// elements in small blocks); --shape '' meant the default 65536.
TEST_CASE("analyze --per-block streams its CSV rows; larger tables are CSV only", "[cli]") {
  const auto dir = fs::temp_directory_path() / "mxlab_test_per_block_stream";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string d = dir.string();
  using mxlab_test::run_cli;
  // 9000 blocks: more than one piece of rows, one header.
  const std::vector<std::string> analyze = {"analyze", "mxfp4", "nvfp4", "gen:normal:0,1", "--shape", "96x1500",
                                            "--per-block", "--csv"};
  const auto to_stdout = run_cli(analyze);
  REQUIRE(to_stdout.code == 0);
  auto to_file = analyze;
  to_file.insert(to_file.end(), {"--out", d + "/blocks.csv"});
  REQUIRE(run_cli(to_file).code == 0);
  CHECK(slurp(d + "/blocks.csv") == to_stdout.out);
  CHECK(fs::exists(d + "/blocks.csv.provenance.json"));
  const auto rows = mxlab_test::text_lines(to_stdout.out);
  REQUIRE(rows.size() == 1 + 96 * 47 + 96 * 94);  // mxfp4: 47 blocks a row (32 each), nvfp4: 94 (16 each)
  CHECK(rows[0].rfind("format,block,amax,scale,", 0) == 0);
  CHECK(rows[1].rfind("mxfp4,0,", 0) == 0);
  CHECK(rows[96 * 47 + 1].rfind("nvfp4,0,", 0) == 0);
  // The same rows as the whole table for a tensor small enough for it (--md is the whole-table path).
  const auto small_csv = run_cli({"analyze", "mxfp4", "gen:normal:0,1", "--shape", "4x64", "--per-block", "--csv"});
  const auto small_md = run_cli({"analyze", "mxfp4", "gen:normal:0,1", "--shape", "4x64", "--per-block", "--md"});
  REQUIRE(small_csv.code == 0);
  REQUIRE(small_md.code == 0);
  const auto csv_rows = mxlab_test::text_lines(small_csv.out), md_rows = mxlab_test::text_lines(small_md.out);
  REQUIRE(csv_rows.size() == 9);
  for (std::size_t i = 1; i < csv_rows.size(); ++i) {
    std::string md = csv_rows[i];
    for (auto& c : md) c = c == ',' ? '|' : c;
    CHECK_THAT(small_md.out, Catch::Contains("| " + md.substr(0, md.find('|')) + " | " + std::to_string(i - 1) + " |"));
  }
  const mxlab_test::BadInput cases[] = {
      {{"analyze", "mxfp4@8", "gen:normal:0,1", "--shape", "1048576", "--per-block"},
       "--per-block gives 131072 rows here; more than 65536 are written as CSV only: add --csv"},
      {{"analyze", "mxfp4", "gen:normal:0,1", "--shape", "", "--per-block"}, "option '--shape': empty"},
      {{"quantize", "mxfp4", "gen:normal:0,1", "--shape", "", "--out", d + "/q.npy"}, "option '--shape': empty"},
      {{"analyze", "mxfp4", "gen:normal:0,1", "--per-block", "--csv", "--out", d + "/missing/b.csv"}, "missing/b.csv"},
  };
  mxlab_test::check_bad_inputs(dir, cases);
  fs::remove_all(dir);
}

// Regression: a tensor input that is a FIFO blocked for ever in open, and a link to /dev/zero named .csv was
// read without end; inputs are regular files.
TEST_CASE("bad input: tensor inputs that are not regular files", "[cli]") {
  const auto dir = fs::temp_directory_path() / "mxlab_test_bad_input_kinds";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string d = dir.string();
  REQUIRE(::mkfifo((d + "/fifo.npy").c_str(), 0600) == 0);
  REQUIRE(::mkfifo((d + "/fifo.csv").c_str(), 0600) == 0);
  for (const char* name : {"zero.csv", "zero.npy", "zero.csv.gz", "zero.f32", "zero.npy.gz"})
    fs::create_symlink("/dev/zero", d + "/" + name);
  fs::create_directories(d + "/folder.npy");
  const std::string out = d + "/q.npy";
  const mxlab_test::BadInput cases[] = {
      {{"analyze", "mxfp4", d + "/fifo.npy"}, "fifo.npy': is a FIFO, not a file"},
      {{"analyze", "mxfp4", d + "/fifo.csv"}, "fifo.csv': is a FIFO, not a file"},
      {{"analyze", "mxfp4", d + "/zero.csv"}, "zero.csv': is a device, not a file"},
      {{"analyze", "mxfp4", d + "/zero.csv.gz"}, "zero.csv.gz': is a device, not a file"},
      {{"analyze", "mxfp4", d + "/zero.npy"}, "zero.npy': is a device, not a file"},
      {{"analyze", "mxfp4", d + "/zero.npy.gz"}, "zero.npy.gz': is a device, not a file"},
      {{"quantize", "mxfp4", d + "/zero.f32", "--out", out}, "zero.f32"},
      {{"quantize", "mxfp4", d + "/fifo.npy", "--out", out}, "fifo.npy': is a FIFO, not a file"},
      {{"quantize", "mxfp4", d + "/folder.npy", "--out", out}, "folder.npy': is a directory"},
  };
  mxlab_test::check_bad_inputs(dir, cases);
  fs::remove_all(dir);
}
