// Checks `mxlab gemm` in-process: its rows, files with provenance, and the bad-input contract of
// tests/support/cli_run.hpp (exit code 2, one line naming the input, nothing written); and the binary stopped by
// Ctrl-C (exit code 130, nothing written).
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "gemm_test_files.hpp"
#include "support/cli_run.hpp"
#include "support/spawn.hpp"

namespace fs = std::filesystem;
using namespace mxlab_test;

namespace {

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("mxlab gemm: a row per model and reference, CSV with provenance, JSON", "[gemm][cli]") {
  const auto dir = fs::temp_directory_path() / ("mxlab_test_gemm_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string csv = (dir / "c.csv").string();
  const CliRun r = run_cli({"gemm", "mxfp8_e4m3", "nvfp4", "--accumulate", "exact;tensorcore-trunc14,promote=64",
                            "--shape", "3x96x2", "--data-seed", "7", "--csv", "--out", csv});
  REQUIRE(r.code == 0);
  const auto lines = text_lines(read(csv));
  REQUIRE(lines.size() == 6);  // header, exact product / fp32, two rows per model
  CHECK(lines[0].rfind("model,reference,format_a,format_b,shape,count", 0) == 0);
  CHECK(lines[1].rfind("exact product,fp32,mxfp8_e4m3,nvfp4,3x96x2,6,", 0) == 0);
  CHECK(lines[2].rfind("exact,exact,", 0) == 0);
  CHECK(lines[4].rfind("\"tensorcore-trunc14,promote=64\",exact,", 0) == 0);
  const std::string prov = read(csv + ".provenance.json");
  CHECK_THAT(prov, Catch::Contains("tensorcore-trunc14,promote=64"));
  CHECK_THAT(prov, Catch::Contains("data-seed 8"));  // B's seed
  // The same seed gives the same table; JSON has the columns.
  const CliRun again = run_cli({"gemm", "mxfp8_e4m3", "nvfp4", "--accumulate", "exact;tensorcore-trunc14,promote=64",
                                "--shape", "3x96x2", "--data-seed", "7", "--csv"});
  REQUIRE(again.code == 0);
  CHECK(again.out.find(lines[4]) != std::string::npos);
  const CliRun json = run_cli({"gemm", "mxsf", "mxsf", "--accumulate", "safe-mac", "--shape", "2x64x2", "--json"});
  REQUIRE(json.code == 0);
  CHECK_THAT(json.out, Catch::Contains("\"sqnr_db\""));
  fs::remove_all(dir);
}

TEST_CASE("mxlab gemm: bad input", "[gemm][cli]") {
  const auto dir = fs::temp_directory_path() / ("mxlab_test_bad_gemm_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string out = (dir / "c.csv").string();
  {
    std::ofstream f(dir / "v.csv");
    f << "1,2,3\n4,5,6\n";
  }
  const std::string file = (dir / "v.csv").string();
  const std::vector<BadInput> rows = {
      {{"gemm", "mxfp8_e4m3", "--accumulate", "exact", "--shape", "2x32x2", "--out", out}, "two block formats"},
      {{"gemm", "mxfp9", "mxfp4", "--accumulate", "exact", "--shape", "2x32x2", "--out", out}, "mxfp9"},
      {{"gemm", "mxfp4", "mxfp4", "--shape", "2x32x2", "--out", out}, "--accumulate"},
      {{"gemm", "mxfp4", "mxfp4", "--accumulate", "tensorcore", "--shape", "2x32x2", "--out", out}, "not a preset"},
      {{"gemm", "mxfp4", "mxfp4", "--accumulate", "exact;", "--shape", "2x32x2", "--out", out}, "empty"},
      {{"gemm", "mxfp4", "mxfp4", "--accumulate", "acc=aligned:40", "--shape", "2x32x2", "--out", out}, "2 to 30"},
      {{"gemm", "mxfp4", "mxfp4", "--accumulate", "sum=int8", "--shape", "2x32x2", "--out", out}, "signed float"},
      {{"gemm", "mxfp4", "mxfp4", "--accumulate", "exact", "--out", out}, "--shape"},
      {{"gemm", "mxfp4", "mxfp4", "--accumulate", "exact", "--shape", "2x32", "--out", out}, "MxKxN"},
      {{"gemm", "mxfp4", "mxfp4", "--accumulate", "exact", "--shape", "2x0x2", "--out", out}, "MxKxN"},
      {{"gemm", "mxfp4", "mxfp4", "--accumulate", "exact", "--shape", "100000x100000x2", "--out", out}, "2^28"},
      {{"gemm", "mxfp4", "mxfp4", "--accumulate", "exact", "--shape", "2x32x2", "--output", "e9m1x", "--out", out},
       "--output"},
      {{"gemm", "mxfp4", "mxfp4", "--accumulate", "exact", "--shape", "2x32x2", "--data-seed", "-1", "--out", out},
       "--data-seed"},
      {{"gemm", "mxfp4", "mxfp4", "--accumulate", "exact", "--shape", "2x32x2", "--a", file, "--out", out}, "shape 2x3"},
      {{"gemm", "mxfp4", "mxfp4", "--accumulate", "exact", "--shape", "2x32x2", "--b", "gen:nope", "--out", out}, "--b"},
      {{"gemm", "e4m3:float32_t32", "e4m3:float32_t32", "--accumulate", "fp32-seq", "--shape", "2x32x2", "--out", out},
       "significant bits"},
      {{"gemm", "mxfp4", "mxfp4", "--accumulate", "exact", "--shape", "2x32x2", "--round", "sideways", "--out", out},
       "--round"},
      {{"gemm", "mxfp4", "mxfp4", "--accumulate", "exact", "--shape", "2x32x2", "--csv", "--json"}, "--csv"},
  };
  check_bad_inputs(dir, rows);
  fs::remove_all(dir);
}

TEST_CASE("mxlab gemm: a model's layer as B", "[gemm][cli]") {
  const auto dir = fs::temp_directory_path() / ("mxlab_test_gemm_layer_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // A Linear weight [N = 5, K = 64] and a bias; the same weight transposed (K x N) as a CSV file.
  std::vector<float> w(5 * 64);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(static_cast<double>((i * 37) % 101) / 50.0 - 1.0);
  gemm_test::write_safetensors(dir / "m.safetensors", {{"fc.weight", 5, 64, w}, {"fc.bias", 1, 5, std::vector<float>(5, 0.5f)}});
  {
    std::ofstream f(dir / "b.csv");
    for (int k = 0; k < 64; ++k)
      for (int n = 0; n < 5; ++n) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(w[static_cast<std::size_t>(n * 64 + k)]));
        f << buf << (n == 4 ? "\n" : ",");
      }
  }
  const std::string st = (dir / "m.safetensors").string();
  const CliRun layer = run_cli({"gemm", "mxfp4", "mxfp4", "--accumulate", "exact;fp32-seq", "--shape", "3", "--b", st,
                                "--b-layer", "fc.weight", "--csv"});
  REQUIRE(layer.code == 0);
  const CliRun file = run_cli({"gemm", "mxfp4", "mxfp4", "--accumulate", "exact;fp32-seq", "--shape", "3x64x5", "--b",
                               (dir / "b.csv").string(), "--csv"});
  REQUIRE(file.code == 0);
  CHECK_THAT(layer.out, Catch::Contains(",3x64x5,"));
  CHECK(layer.out == file.out);  // the layer is B's transpose
  const std::string out = (dir / "c.csv").string();
  const std::vector<BadInput> rows = {
      {{"gemm", "mxfp4", "mxfp4", "--accumulate", "exact", "--shape", "3", "--b-layer", "fc.weight", "--out", out}, "needs --b"},
      {{"gemm", "mxfp4", "mxfp4", "--accumulate", "exact", "--shape", "3", "--b", st, "--b-layer", "fc.nope", "--out", out},
       "fc.nope"},
      {{"gemm", "mxfp4", "mxfp4", "--accumulate", "exact", "--shape", "3x32x5", "--b", st, "--b-layer", "fc.weight", "--out", out},
       "not the K = 32"},
      {{"gemm", "mxfp4", "mxfp4", "--accumulate", "exact", "--shape", "3", "--out", out}, "MxKxN"},
  };
  check_bad_inputs(dir, rows);
  fs::remove_all(dir);
}

TEST_CASE("mxlab gemm: Ctrl-C stops it after its first progress line, exit 130, nothing written", "[gemm][cli]") {
  const auto dir = fs::temp_directory_path() / ("mxlab_test_gemm_interrupt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string csv = (dir / "c.csv").string(), err_file = (dir / "err.txt").string();
  // 2^31 multiply-accumulates per product, several products: far longer than the wait for the first line.
  const pid_t pid = spawn_mxlab({"gemm", "mxfp8_e4m3", "mxfp8_e4m3", "--accumulate", "fp32-seq;safe-mac", "--shape",
                                 "1024x2048x1024", "--threads", "1", "--csv", "--out", csv},
                                {err_file, {}});
  REQUIRE(pid > 0);
  // Standard error is a file, not a terminal: progress comes as lines, the first with the first report.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (read(err_file).find("progress: ") == std::string::npos && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE_THAT(read(err_file), Catch::Contains("entries of C"));
  REQUIRE(::kill(pid, SIGINT) == 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  CHECK_THAT(read(err_file), Catch::Contains("mxlab gemm: cancelled; nothing written\n"));
  // Neither the table nor its provenance, nor a temporary file beside them.
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  CHECK(left == std::vector<std::string>{"err.txt"});
  fs::remove_all(dir);
}
