// Checks `mxlab train` checkpoints against an uninterrupted run of the same options: a run killed with SIGKILL
// at seeded random moments and resumed each time must end with the same files, byte for byte.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mxlab/core/random.hpp"
#include "support/spawn.hpp"

namespace fs = std::filesystem;
using mxlab_test::run_mxlab;
using mxlab_test::spawn_mxlab;

namespace {

/// A scratch folder with a small digits data set: DIR/data/digits/digits.csv.gz holds 400 plain-text rows (the
/// reader takes a ".gz" that is not gzip data as it is) of 8x8 images, ten seeded class patterns plus noise.
struct Scratch {
  fs::path dir;
  Scratch() {
    dir = fs::temp_directory_path() / ("mxlab-train-resume-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir / "data" / "digits");
    mxlab::Rng rng(77);
    std::vector<int> pattern(10 * 64);
    for (auto& p : pattern) p = static_cast<int>(rng.next_u64() % 12);
    std::ofstream f(dir / "data" / "digits" / "digits.csv.gz");
    for (int i = 0; i < 400; ++i) {
      const int label = i % 10;
      for (int j = 0; j < 64; ++j) f << pattern[static_cast<std::size_t>(label * 64 + j)] + static_cast<int>(rng.next_u64() % 5) << ",";
      f << label << "\n";
    }
  }
  ~Scratch() { fs::remove_all(dir); }
};

/// Every file of a folder: name -> bytes.
std::map<std::string, std::string> files_of(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    out[e.path().filename().string()] = s.str();
  }
  return out;
}

std::vector<std::string> train_args(const Scratch& s, const fs::path& out, const std::string& recipe) {
  return {"train", "--model", "mlp", "--data", "digits", "--data-dir", (s.dir / "data").string(), "--recipe", recipe,
          "--steps", "300", "--batch", "16", "--hidden", "32", "--seed", "3", "--eval-every", "50",
          "--checkpoint-every", "7", "--no-timing", "--out", out.string()};
}

}  // namespace

TEST_CASE("mxlab train killed at random moments and resumed ends with an uninterrupted run's files", "[kill]") {
  Scratch s;
  const auto whole_dir = s.dir / "whole";
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(run_mxlab(train_args(s, whole_dir, "fp8_delayed")) == 0);
  const auto span = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
  const auto whole = files_of(whole_dir);
  REQUIRE(whole.size() == 3);  // metrics.csv, recipe.txt, summary.json: the finished run keeps no checkpoint
  REQUIRE(whole.count("metrics.csv") == 1);

  // Kill moments spread over the uninterrupted run's duration (seeded): some before the first checkpoint, some
  // while a checkpoint or the final files are written. Each attempt resumes from what the last one left.
  auto args = train_args(s, s.dir / "killed", "fp8_delayed");
  args.push_back("--resume");
  std::mt19937_64 rng(2026);
  std::uniform_int_distribution<std::int64_t> moment(span.count() / 20, span.count());
  int kills = 0;
  for (int attempt = 0; attempt < 60 && kills < 12; ++attempt) {
    bool killed = false;
    const int code = run_mxlab(args, std::chrono::microseconds(moment(rng)), &killed);
    if (killed) {
      ++kills;
      continue;
    }
    REQUIRE(code == 0);
    // Finished before the kill: start over, so that the later kills land inside a run again.
    fs::remove_all(s.dir / "killed");
  }
  CHECK(kills >= 10);
  REQUIRE(run_mxlab(args) == 0);
  const auto resumed = files_of(s.dir / "killed");
  CHECK(resumed.size() == whole.size());
  for (const auto& [name, bytes] : whole) {
    INFO(name);
    REQUIRE(resumed.count(name) == 1);
    CHECK(resumed.at(name) == bytes);
  }
}

TEST_CASE("mxlab train --resume: no checkpoint starts over; other options or a damaged checkpoint exit 2", "[train]") {
  Scratch s;
  const fs::path out = s.dir / "a";
  auto args = train_args(s, out, "fp32");
  args[10] = "20";  // --steps 20
  args.push_back("--resume");
  REQUIRE(run_mxlab(args) == 0);  // no checkpoint: a run from step 1, which leaves none behind
  CHECK_FALSE(fs::exists(out / "checkpoint.bin"));
  const auto first = files_of(out);
  {
    std::ofstream cp(out / "checkpoint.bin");
    cp << "mxlab train checkpoint 1\nidentity 3\nx=1";
  }
  CHECK(run_mxlab(args) == 2);  // damaged: no state section
  CHECK(files_of(out).at("metrics.csv") == first.at("metrics.csv"));
  // A long run stopped after its first checkpoint: resuming it under another learning rate is refused.
  auto longer = args;
  longer[10] = "1000000";
  longer.push_back("--metrics-every");
  longer.push_back("0");
  fs::remove(out / "checkpoint.bin");
  const pid_t pid = spawn_mxlab(longer);
  REQUIRE(pid > 0);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0 && !fs::exists(out / "checkpoint.bin"))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  REQUIRE(fs::exists(out / "checkpoint.bin"));
  const auto checkpoint = files_of(out).at("checkpoint.bin");
  auto other = longer;
  other.push_back("--lr");
  other.push_back("0.002");
  CHECK(run_mxlab(other) == 2);
  CHECK(files_of(out).at("checkpoint.bin") == checkpoint);
}
