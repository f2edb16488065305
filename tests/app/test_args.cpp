// Checks the argument reader's typed getters and its one message for a bad option value ("option '--NAME' needs
// WHAT, got '--NAME VALUE'"), and the bad-input rows of options given twice and of each command's number options.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <string_view>

#include "cli/args.hpp"
#include "support/cli_run.hpp"

using namespace mxlab;
using namespace mxlab::cli;

namespace {

Args parsed(std::vector<std::string> argv) {
  argv.insert(argv.begin(), "cmd");
  const std::vector<OptionSpec> specs = {
      {"n", true, "N", ""}, {"x", true, "X", ""}, {"pick", true, "P", ""}, {"quiet", false, "", ""}};
  auto a = parse_args(argv, 1, specs);
  REQUIRE(a);
  return *a;
}

enum class Fruit { Apple, Pear, Plum };
constexpr Named<Fruit> kFruits[] = {{"apple", Fruit::Apple}, {"pear", Fruit::Pear}, {"plum", Fruit::Plum}};

}  // namespace

TEST_CASE("integer: the value in range, the fallback when absent, else the standard message", "[cli][args]") {
  CHECK(*parsed({}).integer("n", 1, 10, 7) == 7);
  CHECK(*parsed({"--n", "10"}).integer("n", 1, 10, 7) == 10);
  CHECK(*parsed({"--n=0x0a"}).integer("n", 1, 10, 7) == 10);
  CHECK(*parsed({"--n", "-3"}).integer("n", -5, 5, 0) == -3);
  for (const char* bad : {"11", "0", "x", "", "1.0", " 3", "99999999999999999999"}) {
    INFO(bad);
    const auto r = parsed({"--n", bad}).integer("n", 1, 10, 7);
    REQUIRE_FALSE(r);
    CHECK(r.error().message == "option '--n' needs a whole number from 1 to 10, got '--n " + std::string(bad) + "'");
  }
}

TEST_CASE("unsigned_integer and size", "[cli][args]") {
  CHECK(*parsed({"--n", "18446744073709551615"}).unsigned_integer("n", 0) == UINT64_MAX);
  CHECK(*parsed({"--n", "0xFFFFFFFFFFFFFFFF"}).unsigned_integer("n", 0) == UINT64_MAX);
  CHECK(*parsed({}).unsigned_integer("n", 5) == 5);
  const auto neg = parsed({"--n", "-1"}).unsigned_integer("n", 0);
  REQUIRE_FALSE(neg);
  CHECK(neg.error().message == "option '--n' needs a whole number from 0 to 18446744073709551615, got '--n -1'");
  CHECK(*parsed({"--n", "256"}).size("n", 1, 256, 1) == 256);
  CHECK_FALSE(parsed({"--n", "257"}).size("n", 1, 256, 1));
}

TEST_CASE("real: finite, positive or non-negative", "[cli][args]") {
  CHECK(*parsed({"--x", "1e-3"}).real("x", true, 1) == 1e-3);
  CHECK(*parsed({"--x", "0"}).real("x", false, 1) == 0);
  CHECK(*parsed({}).real("x", true, 0.5) == 0.5);
  for (const char* bad : {"0", "-1", "inf", "nan", "1e400", "1,5"}) {
    INFO(bad);
    const auto r = parsed({"--x", bad}).real("x", true, 1);
    REQUIRE_FALSE(r);
    CHECK(r.error().message == "option '--x' needs a finite number above 0, got '--x " + std::string(bad) + "'");
  }
  CHECK(parsed({"--x", "-0.5"}).real("x", false, 1).error().message ==
        "option '--x' needs a finite number of at least 0, got '--x -0.5'");
}

TEST_CASE("choice: one of the table's names", "[cli][args]") {
  CHECK(*parsed({"--pick", "pear"}).choice<Fruit>("pick", kFruits, Fruit::Apple) == Fruit::Pear);
  CHECK(*parsed({}).choice<Fruit>("pick", kFruits, Fruit::Plum) == Fruit::Plum);
  const auto r = parsed({"--pick", "fig"}).choice<Fruit>("pick", kFruits, Fruit::Apple);
  REQUIRE_FALSE(r);
  CHECK(r.error().message == "option '--pick' needs apple, pear or plum, got '--pick fig'");
}

TEST_CASE("an option given twice is an error, a value or a flag", "[cli][args]") {
  const std::vector<OptionSpec> specs = {{"n", true, "N", ""}, {"quiet", false, "", ""}};
  auto twice = parse_args({"cmd", "--n", "1", "--n=2"}, 1, specs);
  REQUIRE_FALSE(twice);
  CHECK(twice.error().message == "option '--n' given twice ('--n 1', then '--n 2')");
  auto flags = parse_args({"cmd", "--quiet", "--quiet"}, 1, specs);
  REQUIRE_FALSE(flags);
  CHECK(flags.error().message == "option '--quiet' given twice");
}

TEST_CASE("bad number options and options given twice: exit code 2, one message", "[cli][args]") {
  const auto dir = std::filesystem::temp_directory_path() / "mxlab_test_cli_args";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string out = (dir / "out").string();
  const mxlab_test::BadInput cases[] = {
      {{"cast", "e4m3", "1", "--seed", "1", "--seed", "2"},
       "option '--seed' given twice ('--seed 1', then '--seed 2')"},
      {{"cast", "e4m3", "1", "--csv", "--csv"}, "option '--csv' given twice"},
      {{"cast", "e4m3", "1", "--random-bits", "0"},
       "option '--random-bits' needs a whole number from 1 to 32, got '--random-bits 0'"},
      {{"cast", "e4m3", "1", "--seed", "x"},
       "option '--seed' needs a whole number from 0 to 18446744073709551615, got '--seed x'"},
      {{"bounds", "mxint8", "boost_e2m5", "--max-gap", "x"}, "option '--max-gap' needs a whole number from 0 to"},
      {{"gemm", "mxfp8_e4m3", "mxfp8_e4m3", "--shape", "4x32x4", "--accumulate", "ocp-dot-fp32", "--data-seed", "-1"},
       "option '--data-seed' needs a whole number from 0"},
      {{"analyze", "mxfp4", "gen:normal:0,1", "--data-seed", "1.5"},
       "option '--data-seed' needs a whole number from 0"},
      {{"quantize", "mxfp4", "gen:normal:0,1", "--out", out + ".npy", "--threads", "1025"},
       "option '--threads' needs a whole number from 1 to 1024, got '--threads 1025'"},
      {{"verify-cast", "e4m3", "--examples", "100001"}, "option '--examples' needs a whole number from 0 to 100000"},
      {{"verify-cast", "e4m3", "--random-bits", "33"}, "option '--random-bits' needs a whole number from 1 to 32"},
      {{"run", "x.toml", "--out", out, "--jobs", "257"},
       "option '--jobs' needs a whole number from 1 to 256, got '--jobs 257'"},
      {{"run", "x.toml", "--out", out, "--slurm", "0"}, "option '--slurm' needs a whole number from 1 to 100000"},
      {{"train", "--model", "mlp", "--data", "digits", "--recipe", "fp32", "--steps", "10", "--out", out, "--batch",
        "0"},
       "option '--batch' needs a whole number from 1 to 1048576, got '--batch 0'"},
      {{"train", "--model", "mlp", "--data", "digits", "--recipe", "fp32", "--steps", "10", "--out", out, "--lr", "x"},
       "option '--lr' needs a finite number above 0, got '--lr x'"},
      {{"train", "--model", "mlp", "--data", "digits", "--recipe", "fp32", "--steps", "10", "--out", out, "--optimizer",
        "adam"},
       "option '--optimizer' needs adamw or sgd, got '--optimizer adam'"},
      {{"train", "--model", "mlp", "--data", "digits", "--recipe", "fp32", "--steps", "10", "--steps", "20", "--out",
        out},
       "option '--steps' given twice ('--steps 10', then '--steps 20')"},
  };
  mxlab_test::check_bad_inputs(dir, cases);
  std::filesystem::remove_all(dir);
}
