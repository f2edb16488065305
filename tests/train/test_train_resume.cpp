// Checks `mxlab train` checkpoints against an uninterrupted run of the same options: a run killed with SIGKILL
// at seeded random moments and resumed each time must end with the same files, byte for byte.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mxlab/core/folder_lock.hpp"
#include "support/spawn.hpp"
#include "support/train_data.hpp"

namespace fs = std::filesystem;
using mxlab_test::run_mxlab;
using mxlab_test::spawn_mxlab;

namespace {

/// A scratch folder with a small digits data set in DIR/data (mxlab_test::write_digits).
struct Scratch {
  fs::path dir;
  Scratch() {
    dir = fs::temp_directory_path() / ("mxlab-train-resume-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    mxlab_test::write_digits(dir / "data");
  }
  ~Scratch() { fs::remove_all(dir); }
};

/// Every file of a folder but its lock file (which names the last process that held it): name -> bytes.
std::map<std::string, std::string> files_of(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename() != mxlab::FolderLock::kFileName)
      out[e.path().filename().string()] = mxlab_test::read_file(e.path());
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

namespace {

/// Starts a run that does not end on its own (a checkpoint every 7 steps) and waits until `ready` holds for its
/// folder; returns its pid.
template <class Ready>
pid_t start_long_run(const std::vector<std::string>& args, const fs::path& out, Ready ready) {
  const pid_t pid = spawn_mxlab(args);
  REQUIRE(pid > 0);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!ready(out) && std::chrono::steady_clock::now() < deadline && ::waitpid(pid, &status, WNOHANG) == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  REQUIRE(ready(out));
  return pid;
}

void stop(pid_t pid) {
  int status = 0;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
}

std::vector<std::string> temporary_files(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("a second mxlab train on the same --out exits 2 naming the first's PID and leaves its files alone",
          "[train]") {
  Scratch s;
  const fs::path out = s.dir / "shared";
  auto args = train_args(s, out, "fp32");
  args[10] = "1000000";  // --steps: the first run goes on until it is killed
  // The first run holds the folder once its temporary metrics file exists (created after the lock).
  const pid_t first = start_long_run(args, out, [](const fs::path& o) {
    return fs::exists(o) && !temporary_files(o).empty() && fs::exists(o / "checkpoint.bin");
  });
  const auto before = temporary_files(out);
  const auto err = s.dir / "second.err";
  const int code = mxlab_test::run_mxlab(args, {}, nullptr, mxlab_test::SpawnOptions{err.string(), {}});
  const std::string message = mxlab_test::read_file(err);
  const bool first_alive = ::waitpid(first, nullptr, WNOHANG) == 0;
  const auto after = temporary_files(out);
  stop(first);
  CHECK(first_alive);
  CHECK(code == 2);
  CHECK_THAT(message, Catch::Contains("'--out'") && Catch::Contains("in use by process " + std::to_string(first)));
  CHECK(std::count(message.begin(), message.end(), '\n') == 1);
  // The second run removed none of the first's temporary files (the checkpoint's may have been renamed since).
  for (const auto& name : before)
    if (name.rfind(".metrics.csv.tmp-", 0) == 0) CHECK(std::find(after.begin(), after.end(), name) != after.end());
  // Once the holder is gone the folder is free: a resumed run takes it.
  auto resume = args;
  resume.push_back("--resume");
  const pid_t next = start_long_run(resume, out, [&](const fs::path& o) {
    return mxlab_test::read_file(o / ".mxlab.lock").find("process " + std::to_string(first)) == std::string::npos;
  });
  stop(next);
}

TEST_CASE("a checkpoint with one byte of its weights flipped is refused on resume, naming the file", "[train]") {
  Scratch s;
  const fs::path out = s.dir / "flip";
  auto args = train_args(s, out, "fp8_delayed");
  args[10] = "1000000";
  stop(start_long_run(args, out, [](const fs::path& o) { return fs::exists(o / "checkpoint.bin"); }));
  std::string bytes = mxlab_test::read_file(out / "checkpoint.bin");
  // The trainer's state: its magic line, steps done, the tensor count, then fc1.weight's rows, columns, values.
  const auto state = bytes.find("mxlab-train-state-1\n");
  REQUIRE(state != std::string::npos);
  const auto weight = state + 20 + 8 + 8 + 16 + 7;
  bytes[weight] = static_cast<char>(bytes[weight] ^ 0x01);
  { std::ofstream(out / "checkpoint.bin", std::ios::binary) << bytes; }
  const auto listing = files_of(out);
  const auto err = s.dir / "resume.err";
  auto resume = args;
  resume.push_back("--resume");
  const int code = mxlab_test::run_mxlab(resume, {}, nullptr, mxlab_test::SpawnOptions{err.string(), {}});
  const std::string message = mxlab_test::read_file(err);
  CHECK(code == 2);
  CHECK_THAT(message, Catch::Contains("checkpoint '" + (out / "checkpoint.bin").string() + "' is damaged") &&
                          Catch::Contains("SHA-256"));
  CHECK(std::count(message.begin(), message.end(), '\n') == 1);
  CHECK(files_of(out) == listing);  // the checkpoint kept as it was, nothing written beside it
}
