// Bad input to `mxlab train` (options, recipe files, checkpoints, the output folder) and to `mxlab golden
// --check` (its tables): exit code 2, one message naming the input, nothing written.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mxlab/core/folder_lock.hpp"
#include "mxlab/io/sha256.hpp"
#include "support/cli_run.hpp"
#include "support/train_data.hpp"

namespace fs = std::filesystem;

namespace {

void write_all(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

/// DIR/data: a small digits data set (mxlab_test::write_digits); DIR/text.txt: 2,000 characters.
void write_data(const fs::path& dir) {
  mxlab_test::write_digits(dir / "data");
  std::string text;
  while (text.size() < 2000) text += "the quick brown fox jumps over the lazy dog. ";
  write_all(dir / "text.txt", text.substr(0, 2000));
}

/// The options of the checkpointed run (a checkpoint every 7 steps of a run that does not end on its own).
std::vector<std::string> checkpointed_run(const fs::path& dir, const fs::path& out) {
  return {"train", "--model", "mlp", "--data", "digits", "--data-dir", (dir / "data").string(), "--recipe", "fp8_delayed",
          "--steps", "1000000", "--batch", "16", "--hidden", "32", "--seed", "3", "--eval-every", "50",
          "--metrics-every", "5", "--checkpoint-every", "7", "--no-timing", "--out", out.string()};
}

/// A real checkpoint: the run goes on in a child process until DIR/checkpoint.bin appears, then gets SIGKILL;
/// the temporary files it leaves are removed.
void make_checkpoint(const fs::path& dir, const fs::path& out) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    mxlab_test::run_cli(checkpointed_run(dir, out));
    ::_exit(0);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  int status = 0;
  while (!fs::exists(out / "checkpoint.bin") && std::chrono::steady_clock::now() < deadline &&
         ::waitpid(pid, &status, WNOHANG) == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  REQUIRE(fs::exists(out / "checkpoint.bin"));
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) fs::remove(e.path());
}

/// A checkpoint's sections (after the first line, before the checksum) and a copy with one section replaced and
/// the checksum recomputed: a checkpoint that is consistent with its checksum but not with itself.
std::string resealed(const std::string& bytes, const std::string& name, const std::string& replacement) {
  const auto magic_end = bytes.find('\n') + 1;
  std::string out = bytes.substr(0, magic_end);
  std::size_t at = magic_end;
  while (true) {
    const auto eol = bytes.find('\n', at);
    const auto space = bytes.find(' ', at);
    const std::string section = bytes.substr(at, space - at);
    if (section == "sha256") break;
    const auto length = static_cast<std::size_t>(std::stoull(bytes.substr(space + 1, eol - space - 1)));
    const std::string body = section == name ? replacement : bytes.substr(eol + 1, length);
    out += section + " " + std::to_string(body.size()) + "\n" + body;
    at = eol + 1 + length;
  }
  return out + "sha256 64\n" + mxlab::sha256_hex(out);
}

/// A section's bytes.
std::string section_of(const std::string& bytes, const std::string& name) {
  std::size_t at = bytes.find('\n') + 1;
  while (at < bytes.size()) {
    const auto eol = bytes.find('\n', at);
    const auto space = bytes.find(' ', at);
    const auto length = static_cast<std::size_t>(std::stoull(bytes.substr(space + 1, eol - space - 1)));
    if (bytes.substr(at, space - at) == name) return bytes.substr(eol + 1, length);
    at = eol + 1 + length;
  }
  return "";
}

/// MXLAB_MEMORY_BUDGET set for a scope.
struct BudgetScope {
  explicit BudgetScope(const char* value) { ::setenv("MXLAB_MEMORY_BUDGET", value, 1); }
  ~BudgetScope() { ::unsetenv("MXLAB_MEMORY_BUDGET"); }
};

}  // namespace

TEST_CASE("train: bad options, recipe files and output folders exit 2 naming them, and write nothing", "[cli][train]") {
  const auto dir = fs::temp_directory_path() / ("mxlab_test_bad_train_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  write_data(dir);
  const std::string d = dir.string();
  write_all(dir / "empty.recipe", "");
  write_all(dir / "accumulate.recipe", "preset = \"mxfp8\"\naccumulate = \"tensorcore-trunc99\"\n");
  write_all(dir / "comments.recipe", "# only a comment\n\n   # and another\n");
  fs::create_directories(dir / "folder.recipe");
  REQUIRE(::mkfifo((dir / "fifo.recipe").c_str(), 0600) == 0);
  fs::create_symlink("/dev/zero", dir / "zero.recipe");
  write_all(dir / "big.recipe", "");
  fs::resize_file(dir / "big.recipe", 2u << 20);  // sparse: nothing is stored
  fs::create_directories(dir / "taken" / "metrics.csv");  // an output name that is a folder
  const std::vector<std::string> mlp = {"train", "--model", "mlp", "--data", "digits", "--data-dir", d + "/data",
                                        "--out", d + "/out"};
  const std::vector<std::string> text = {"train", "--model", "transformer", "--data", "text:" + d + "/text.txt",
                                         "--recipe", "fp32", "--steps", "10", "--out", d + "/out"};
  std::string widths = "8";
  for (int i = 0; i < 64; ++i) widths += ",8";  // 65 hidden layers
  auto with = [](std::vector<std::string> base, std::initializer_list<std::string> more) {
    base.insert(base.end(), more);
    return base;
  };
  BudgetScope budget("1G");  // the memory rows refuse the same sizes on every machine
  const mxlab_test::BadInput cases[] = {
      // recipe files: empty, no settings, not regular files, too large
      {with(mlp, {"--steps", "10", "--recipe", d + "/empty.recipe"}), "empty.recipe' holds no settings"},
      {with(mlp, {"--steps", "10", "--recipe", d + "/accumulate.recipe"}),
       "accumulate.recipe:2: accumulate: model 'tensorcore-trunc99'"},
      {with(mlp, {"--steps", "10", "--recipe", d + "/comments.recipe"}), "comments.recipe' holds no settings"},
      {with(mlp, {"--steps", "10", "--recipe", d + "/folder.recipe"}), "folder.recipe': is a directory"},
      {with(mlp, {"--steps", "10", "--recipe", d + "/fifo.recipe"}), "fifo.recipe': is a FIFO"},
      {with(mlp, {"--steps", "10", "--recipe", d + "/zero.recipe"}), "zero.recipe': is a character device"},
      {with(mlp, {"--steps", "10", "--recipe", "/dev/zero"}), "'/dev/zero': is a character device"},
      {with(mlp, {"--steps", "10", "--recipe", d + "/big.recipe"}), "is 2 MB, more than the 1 MB"},
      // options that cannot be meant
      {with(mlp, {"--recipe", "fp32", "--steps", "0"}), "'--steps'"},
      {with(mlp, {"--steps", "10", "--recipe", "fp32", "--lr", "-0.001"}), "'--lr'"},
      {with(mlp, {"--steps", "10", "--recipe", "fp32", "--lr", "nan"}), "'--lr'"},
      {with(mlp, {"--steps", "10", "--recipe", "fp32", "--lr", "inf"}), "'--lr'"},
      {with(mlp, {"--steps", "10", "--recipe", "fp32", "--lr", "0"}), "'--lr'"},
      {with(mlp, {"--steps", "10", "--recipe", "fp32", "--weight-decay", "-1"}), "'--weight-decay'"},
      {with(mlp, {"--steps", "10", "--recipe", "fp32", "--hidden", ""}), "'--hidden'"},
      {with(mlp, {"--steps", "10", "--recipe", "fp32", "--hidden", "64,"}), "'--hidden'"},
      {with(mlp, {"--steps", "10", "--recipe", "fp32", "--hidden", "64,,32"}), "'--hidden'"},
      {with(mlp, {"--steps", "10", "--recipe", "fp32", "--hidden", widths}), "needs 1..64 widths"},
      {{"train", "--model", "cnn", "--data", "digits", "--data-dir", d + "/data", "--recipe", "fp32", "--steps", "10",
        "--out", d + "/out", "--hidden", "64"},
       "'--hidden' applies to --model mlp only"},
      {with(mlp, {"--steps", "10", "--recipe", "fp32", "--d-model", "64"}), "'--d-model' applies to --model transformer, vit or mixer only"},
      {with(mlp, {"--steps", "10", "--recipe", "fp32", "--context", "16"}), "'--context' applies to --model transformer only"},
      {{"train", "--model", "mixer", "--data", "digits", "--data-dir", d + "/data", "--recipe", "fp32", "--steps", "10",
        "--out", d + "/out", "--heads", "2"},
       "'--heads' applies to --model transformer or vit only, not mixer"},
      {with(text, {"--context", "1024"}), "option '--context 1024': the validation text"},
      {with(text, {"--context", "4096"}), "option '--context 4096': the training text"},
      // sizes past the memory budget, refused before anything is allocated
      {with(mlp, {"--steps", "10", "--recipe", "fp32", "--batch", "1048576", "--hidden", "65536,65536"}), "option '--batch 1048576'"},
      {with(mlp, {"--steps", "10", "--recipe", "fp32", "--hidden", "65536,65536"}), "option '--hidden 65536,65536'"},
      {with(mlp, {"--recipe", "fp32", "--steps", "100000000"}), "option '--steps 100000000'"},
      {with(text, {"--d-model", "4096", "--layers", "64", "--heads", "64", "--batch", "1"}), "option '--d-model 4096'"},
      // an output name taken by a folder
      {{"train", "--model", "mlp", "--data", "digits", "--data-dir", d + "/data", "--recipe", "fp32", "--steps", "10",
        "--out", d + "/taken"},
       "taken/metrics.csv' is not a regular file"},
  };
  mxlab_test::check_bad_inputs(dir, cases);
  // The memory rows' messages say what the budget is and how to set it.
  const auto big = mxlab_test::run_cli(with(mlp, {"--steps", "10", "--recipe", "fp32", "--hidden", "65536,65536"}));
  CHECK_THAT(big.err, Catch::Contains("memory budget of 1 GB") && Catch::Contains("MXLAB_MEMORY_BUDGET"));
  fs::remove_all(dir);
}

TEST_CASE("train --resume: damaged, foreign or inconsistent checkpoints and a taken folder exit 2 naming them",
          "[cli][train]") {
  const auto dir = fs::temp_directory_path() / ("mxlab_test_bad_resume_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  write_data(dir);
  make_checkpoint(dir, dir / "real");
  const std::string real = mxlab_test::read_file(dir / "real" / "checkpoint.bin");
  // Copies of the real run's folder with one thing changed each.
  auto variant = [&](const std::string& name) {
    fs::copy(dir / "real", dir / name, fs::copy_options::recursive);
    return dir / name;
  };
  {
    std::string flipped = real;
    const auto weights = flipped.find("mxlab-train-state-1\n") + 20 + 8 + 8 + 16;  // steps, tensors, rows x cols
    flipped[weights + 2] = static_cast<char>(flipped[weights + 2] ^ 0x10);
    write_all(variant("flipped") / "checkpoint.bin", flipped);
  }
  write_all(variant("cut") / "checkpoint.bin", real.substr(0, real.size() / 2));
  write_all(variant("format1") / "checkpoint.bin", "mxlab train checkpoint 1\nidentity 3\nx=1");
  fs::remove(variant("zero") / "checkpoint.bin");
  fs::create_symlink("/dev/zero", dir / "zero" / "checkpoint.bin");
  fs::resize_file(variant("huge") / "checkpoint.bin", std::uintmax_t{1} << 32);  // sparse, past the run's largest
  {
    std::string csv = section_of(real, "csv");
    csv.erase(csv.rfind('\n', csv.size() - 2) + 1);  // the last row gone: fewer rows than steps done
    write_all(variant("rows") / "checkpoint.bin", resealed(real, "csv", csv));
    write_all(variant("columns") / "checkpoint.bin", resealed(real, "columns", "fc1.a one two\n"));
    write_all(variant("state") / "checkpoint.bin", resealed(real, "state", section_of(real, "state").substr(0, 100)));
  }
  {
    // metrics.csv beside the checkpoint that a stopped run cannot have written: its rows differ.
    std::string csv = section_of(real, "csv");
    csv.replace(csv.find("\n1,") + 1, 2, "2,");
    write_all(variant("metrics") / "metrics.csv", csv);
  }
  variant("other");
  variant("locked");
  const auto held = mxlab::FolderLock::acquire((dir / "locked").string(), "a test");
  REQUIRE(held);
  auto resume = [&](const std::string& name, std::initializer_list<std::string> more = {}) {
    auto args = checkpointed_run(dir, dir / name);
    args.emplace_back("--resume");
    args.insert(args.end(), more);
    return args;
  };
  const std::string cp = "/checkpoint.bin";
  const mxlab_test::BadInput cases[] = {
      {resume("flipped"), "flipped" + cp + "' is damaged: its SHA-256 does not match"},
      {resume("cut"), "cut" + cp + "' is damaged"},
      {resume("format1"), "format1" + cp + "' has format 1, which carries no checksum"},
      {resume("zero"), "zero" + cp + "': is a character device"},
      {resume("huge"), "huge" + cp + "': is 4 GB, more than the"},
      {resume("rows"), "rows" + cp + "' does not hold together"},
      {resume("columns"), "columns" + cp + "' is damaged (its operand columns)"},
      {resume("state"), "state" + cp + "': checkpoint state is truncated"},
      {resume("metrics"), "metrics/metrics.csv' differs from the checkpoint's metrics at line 2"},
      {resume("other", {"--lr", "0.002"}), "other" + cp + "' belongs to a run with other options"},
      {resume("locked"), "is in use by process " + std::to_string(::getpid()) + " (a test)"},
  };
  mxlab_test::check_bad_inputs(dir, cases);
  fs::remove_all(dir);
}

TEST_CASE("golden --check: a table that is a device, a FIFO, a folder or too large exits 2 naming it", "[cli][golden]") {
  const auto dir = fs::temp_directory_path() / ("mxlab_test_bad_golden_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string table = "codepoints/float8_e4m3fn.csv";
  for (const char* kind : {"zero", "fifo", "folder", "big"}) fs::create_directories(dir / kind / "codepoints");
  fs::create_symlink("/dev/zero", dir / "zero" / table);
  REQUIRE(::mkfifo((dir / "fifo" / table).c_str(), 0600) == 0);
  fs::create_directories(dir / "folder" / table);
  write_all(dir / "big" / table, "");
  fs::resize_file(dir / "big" / table, std::uintmax_t{1} << 30);  // sparse
  const std::string d = dir.string();
  const mxlab_test::BadInput cases[] = {
      {{"golden", "--check", "--dir", d + "/zero"}, "float8_e4m3fn.csv': is a character device"},
      {{"golden", "--check", "--dir", d + "/fifo"}, "float8_e4m3fn.csv': is a FIFO"},
      {{"golden", "--check", "--dir", d + "/folder"}, "float8_e4m3fn.csv': is a directory"},
      {{"golden", "--check", "--dir", d + "/big"}, "is 1 GB, more than the 64 MB"},
  };
  mxlab_test::check_bad_inputs(dir, cases);
  fs::remove_all(dir);
}

TEST_CASE("train: TOML recipe files, bad ones refused by file and line; the old lines still train, with a warning",
          "[cli][train]") {
  const auto dir = fs::temp_directory_path() / ("mxlab_test_toml_recipe_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  write_data(dir);
  const std::string d = dir.string();
  write_all(dir / "type.toml", "name = \"t\"\nloss_scale = \"1024\"\n");
  write_all(dir / "layer.toml", "preset = \"mxfp8\"\n\n[[layer]]\nw = \"fp32\"\n");
  write_all(dir / "syntax.toml", "preset = \"mxfp8\n");
  auto run = [&](const std::string& recipe, const std::string& out) {
    return std::vector<std::string>{"train", "--model", "mlp", "--data", "digits", "--data-dir", d + "/data", "--recipe",
                                    recipe, "--steps", "2", "--batch", "8", "--hidden", "8", "--no-timing", "--out", out};
  };
  const mxlab_test::BadInput cases[] = {
      {run(d + "/type.toml", d + "/out"), "type.toml:2: key 'loss_scale' is a string, expected a number"},
      {run(d + "/layer.toml", d + "/out"), "layer.toml:3: [[layer]] needs a pattern"},
      {run(d + "/syntax.toml", d + "/out"), "syntax.toml:1: "},
  };
  mxlab_test::check_bad_inputs(dir, cases);
  // The same recipe in TOML and in the old lines: the same run, and a warning for the old lines only.
  write_all(dir / "new.toml", "preset = \"mxfp8\"\nname = \"r\"\n[[layer]]\npattern = \"fc1\"\nw = \"fp32\"\n");
  write_all(dir / "old.recipe", "preset = mxfp8\nname = r\nlayer fc1 w = fp32\n");
  const auto a = mxlab_test::run_cli(run(d + "/new.toml", d + "/new"));
  const auto b = mxlab_test::run_cli(run(d + "/old.recipe", d + "/old"));
  REQUIRE(a.code == 0);
  REQUIRE(b.code == 0);
  CHECK(a.err.find("warning") == std::string::npos);
  CHECK_THAT(b.err, Catch::Contains("mxlab train: warning: recipe file '" + d + "/old.recipe' is written in the old "
                                    "'key = value' lines") &&
                        Catch::Contains("write it in TOML (docs/training.md, \"Recipe files\")"));
  for (const char* file : {"metrics.csv", "recipe.txt"})
    CHECK(mxlab_test::read_file(dir / "new" / file) == mxlab_test::read_file(dir / "old" / file));
  CHECK_THAT(mxlab_test::read_file(dir / "new" / "recipe.txt"), Catch::Contains("[[layer]]\npattern = \"fc1\"\nw = \"fp32\"\n"));
  fs::remove_all(dir);
}
