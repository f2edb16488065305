// Experiment batches checked against the engine's entry points (ops::analyze, exact bounds) and against
// themselves: sweep expansion, tables, resume after SIGKILL, shards merged, malformed files.
#include <catch2/catch.hpp>

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include "cli/cli.hpp"
#include "mxlab/experiment/experiment.hpp"
#include "mxlab/experiment/outputs.hpp"
#include "mxlab/experiment/runner.hpp"
#include "mxlab/experiment/slurm.hpp"
#include "mxlab/io/datasets.hpp"
#include "mxlab/ops/ops.hpp"
#include "mxlab/ops/requests.hpp"
#include "experiment/experiment_support.hpp"
#include "support/spawn.hpp"

namespace fs = std::filesystem;
using namespace mxlab;
using namespace mxlab::experiment;
using mxlab_test::read;
using mxlab_test::run_cli;
using mxlab_test::Scratch;

namespace {


const char* kTiny = R"(name = "tiny"
job = "analyze"
gaps = true

[inputs.normal]
source = "gen:normal:0,1"
shape = "4096"
seed = 3

[inputs.laplace]
source = "gen:laplace:0,2"
shape = "64x64"
seed = 5

[sweep]
format = ["mxfp8_e4m3", "mxint8", "nvfp4"]
block = [16, 32]
input = ["normal", "laplace"]

[[table]]
name = "sqnr"
rows = ["format", "block"]
pivot = "input"
values = ["sqnr_db"]
digits = 17

[[plot]]
name = "mse"
x = "block"
y = "mse"
series = "format"
where = { input = "normal" }
x_scale = "log2"

[[expect]]
name = "bound"
from = "gaps"
metric = "max_rel_error"
at_most_column = "bound_max_rel"
)";

/// The CSV rows of a file as cells (no quoting in these files).
std::vector<std::vector<std::string>> csv_rows(const fs::path& p) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream is(read(p));
  std::string line;
  while (std::getline(is, line)) {
    std::vector<std::string> cells;
    std::string cell;
    std::istringstream ls(line);
    while (std::getline(ls, cell, ',')) cells.push_back(cell);
    rows.push_back(cells);
  }
  return rows;
}

/// Every file of a results folder but the database, its lock file and provenance, with its bytes.
std::map<std::string, std::string> outputs(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), dir).string();
    if (rel.find("results.sqlite") == 0 || rel == ".mxlab.lock" || rel == "provenance.json" || rel.ends_with(".png") || rel.ends_with(".pdf") ||
        rel.ends_with("results/metrics.json") || rel.ends_with("results/gaps.json"))
      continue;
    files[rel] = read(e.path());
  }
  return files;
}

}  // namespace

TEST_CASE("sweeps expand to the product of their axes, then explicit points crossed with the rest", "[experiment]") {
  auto e = parse_experiment(R"(name = "s"
job = "analyze"
[inputs.a]
source = "gen:normal:0,1"
[sweep]
format = ["mxfp4", "mxint8"]
block = [16, 32, 64]
input = "a"
[[points]]
format = "nvfp4"
block = 16
)", "s.toml");
  REQUIRE(e.ok());
  auto p = expand_points(*e);
  REQUIRE(p.ok());
  REQUIRE(p->size() == 7);
  // Axes in the order written: format outermost, block next.
  CHECK(p->at(0).key() == R"({"format":"mxfp4","block":"16","input":"a","layer":""})");
  CHECK(p->at(1).key() == R"({"format":"mxfp4","block":"32","input":"a","layer":""})");
  CHECK(p->at(3).key() == R"({"format":"mxint8","block":"16","input":"a","layer":""})");
  CHECK(p->at(6).key() == R"({"format":"nvfp4","block":"16","input":"a","layer":""})");
  for (std::size_t i = 0; i < p->size(); ++i) CHECK(p->at(i).index == i);
}

TEST_CASE("the numbers in the written tables are the engine's", "[experiment]") {
  Scratch s;
  const std::string file = s.put("tiny.toml", kTiny);
  std::string out, err;
  REQUIRE(run_cli({"run", file, "--out", (s.dir / "out").string(), "--quiet"}, &out, &err) == 0);
  const auto metrics = csv_rows(s.dir / "out/results/metrics.csv");
  REQUIRE(metrics.size() == 13);
  const auto& head = metrics[0];
  auto col = [&](const std::string& name) { return static_cast<std::size_t>(std::find(head.begin(), head.end(), name) - head.begin()); };
  for (std::size_t r = 1; r < metrics.size(); ++r) {
    const auto& row = metrics[r];
    const bool normal = row[col("input")] == "normal";
    ops::InputRequest req;
    req.input = normal ? "gen:normal:0,1" : "gen:laplace:0,2";
    req.shape = normal ? "4096" : "64x64";
    req.seed = normal ? 3 : 5;
    auto src = ops::open_tensor(req);
    REQUIRE(src.ok());
    auto f = ops::block_format(row[col("format")] + "@" + row[col("block")], {}, [](std::string_view n) { return std::string(n); });
    REQUIRE(f.ok());
    auto a = ops::analyze({*f}, *src, {}, {});
    REQUIRE(a.ok());
    const ErrorStats& st = a->front().total;
    CHECK(std::stod(row[col("mse")]) == st.mse());
    REQUIRE(col("sse") < head.size());
    CHECK(std::stod(row[col("sse")]) == st.sse.to_double());
    CHECK(std::stod(row[col("sqnr_db")]) == st.sqnr_db());
    CHECK(std::stod(row[col("max_abs_error")]) == st.max_abs_error);
    CHECK(std::stod(row[col("underflow_ratio")]) == st.underflow_ratio());
    CHECK(std::stod(row[col("bits_per_element")]) == a->front().bits_per_element);
  }
  // The pivot table holds the same SQNR (17 significant digits read back exactly).
  const auto table = csv_rows(s.dir / "out/tables/sqnr.csv");
  REQUIRE(table.size() == 7);
  CHECK(table[0] == std::vector<std::string>{"format", "block", "normal", "laplace"});
  for (std::size_t r = 1; r < table.size(); ++r)
    for (std::size_t m = 1; m < metrics.size(); ++m)
      if (metrics[m][col("format")] == table[r][0] && metrics[m][col("block")] == table[r][1])
        CHECK(std::stod(table[r][metrics[m][col("input")] == "normal" ? 2 : 3]) == std::stod(metrics[m][col("sqnr_db")]));
  // Markdown and LaTeX beside the CSV; the plot's description holds the MSE by block.
  CHECK(fs::exists(s.dir / "out/tables/sqnr.md"));
  CHECK(read(s.dir / "out/tables/sqnr.tex").find("\\toprule") != std::string::npos);
  CHECK(read(s.dir / "out/plots/mse.json").find("\"series\"") != std::string::npos);
  CHECK(read(s.dir / "out/checks.md").find("passed") != std::string::npos);
  CHECK(read(s.dir / "out/provenance.json").find("\"input.normal.seed\": \"3\"") != std::string::npos);
}

TEST_CASE("plots are drawn when TMPDIR names no folder and there is no runtime folder", "[experiment]") {
  // The plots' Qt application wants a private runtime folder; without XDG_RUNTIME_DIR one is made under the
  // temporary folder, and a TMPDIR that names nothing falls back to /tmp instead of failing the run. A child
  // process: the environment is read once, when the process's Qt application starts.
  Scratch s;
  const std::string file = s.put("tiny.toml", kTiny);
  const std::string err_file = (s.dir / "stderr.txt").string();
  const int code = mxlab_test::run_mxlab({"run", file, "--out", (s.dir / "out").string(), "--quiet"}, {}, nullptr,
                                         {err_file,
                                          {{"TMPDIR", (s.dir / "no/such/folder").string()},
                                           {"XDG_RUNTIME_DIR", std::nullopt},
                                           {"QT_QPA_PLATFORM", std::nullopt}}});
  INFO("stderr: " << read(err_file));
  CHECK(code == 0);
  CHECK(fs::file_size(s.dir / "out/plots/mse.png") > 1000);
  CHECK(fs::exists(s.dir / "out/tables/sqnr.csv"));
}

TEST_CASE("expectations fail with a report naming the row, and check exits 1", "[experiment]") {
  Scratch s;
  std::string text = kTiny;
  text += R"(
[[expect]]
name = "too_strict"
where = { format = "mxint8" }
metric = "sqnr_db"
at_least = 60
)";
  const std::string file = s.put("strict.toml", text);
  std::string out;
  CHECK(run_cli({"check", file, "--out", (s.dir / "out").string(), "--quiet"}, &out) == 1);
  CHECK_THAT(out, Catch::Contains("expectation 'too_strict' FAILED"));
  CHECK_THAT(out, Catch::Contains("format=mxint8"));
  CHECK_THAT(out, Catch::Contains("expectation 'bound' passed"));
  // The bound expectation really compares: the measured maximum sits on the bound at gap 0 for MXFP8 E4M3.
  CHECK_THAT(out, Catch::Contains("1 of 2 expectations hold"));
}

TEST_CASE("two shards merged give the tables of one run, byte for byte", "[experiment]") {
  Scratch s;
  const std::string file = s.put("tiny.toml", kTiny);
  REQUIRE(run_cli({"run", file, "--out", (s.dir / "one").string(), "--quiet"}) == 0);
  REQUIRE(run_cli({"run", file, "--out", (s.dir / "s0").string(), "--shard", "0/2", "--quiet"}) == 0);
  REQUIRE(run_cli({"run", file, "--out", (s.dir / "s1").string(), "--shard", "1/2", "--quiet", "--jobs", "2"}) == 0);
  CHECK_FALSE(fs::exists(s.dir / "s0/tables"));
  std::string err;
  // One shard alone is not complete.
  CHECK(run_cli({"merge", (s.dir / "s0").string(), "--out", (s.dir / "half").string()}, nullptr, &err) == 2);
  CHECK_THAT(err, Catch::Contains("6 of 12 points are missing"));
  // A folder that cannot be looked at (a name longer than the file system allows) is named with the reason.
  err.clear();
  CHECK(run_cli({"merge", (s.dir / std::string(300, 'm')).string(), "--out", (s.dir / "bad").string()}, nullptr, &err) == 2);
  CHECK_THAT(err, Catch::Contains("File name too long"));
  CHECK(err.find(std::string(300, 'm')) == std::string::npos);  // the folder's name is shortened, not repeated whole
  CHECK_FALSE(fs::exists(s.dir / "bad"));
  REQUIRE(run_cli({"merge", (s.dir / "s0").string(), (s.dir / "s1").string(), "--out", (s.dir / "merged").string()}) == 0);
  const auto a = outputs(s.dir / "one"), b = outputs(s.dir / "merged");
  CHECK(a.size() >= 8);
  CHECK(a == b);
}

TEST_CASE("the Slurm scripts quote paths for the shell and merge each experiment of a batch", "[experiment]") {
  CHECK(shell_quote("a b") == "'a b'");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  SlurmPlan plan;
  plan.mxlab = "/opt/mx lab/mxlab";
  plan.files = {"/e/batch.toml"};
  plan.out_dir = "/r/100%'s";
  plan.members = {"/a", "/b"};
  plan.work_dir = "/w";
  plan.name = "batch";
  plan.tasks = 5;
  plan.jobs = 2;
  const auto s = slurm_scripts(plan);
  CHECK_THAT(s.array, Catch::Contains("#SBATCH --array=0-4\n"));
  CHECK_THAT(s.array, Catch::Contains("exec '/opt/mx lab/mxlab' run '/e/batch.toml' --shard \"$task/5\" --out '/r/100%'\\''s'/shard-\"$task\" --jobs 2 --threads \"$threads\"\n"));
  CHECK_THAT(s.array, Catch::Contains("threads=$(( ${SLURM_CPUS_ON_NODE:-1} / 2 ))"));
  CHECK_THAT(s.merge, Catch::Contains("merge '/a'\nmerge '/b'\n"));
  CHECK_THAT(s.submit, Catch::Contains("logs='/r/100%%'\\''s/slurm/logs'\n"));  // '%' doubled in sbatch's patterns
  CHECK_THAT(s.submit, Catch::Contains("--dependency=afterok:\"$array\""));
  plan.threads = "3";
  plan.resume = true;
  CHECK_THAT(slurm_scripts(plan).array, Catch::Contains("--jobs 2 --threads '3' --resume\n"));
}

TEST_CASE("run --slurm writes a job array and its merge; their scripts run by hand give the tables of one run", "[experiment]") {
  Scratch s;
  const std::string file = s.put("tiny.toml", kTiny);
  REQUIRE(run_cli({"run", file, "--out", (s.dir / "one").string(), "--quiet"}) == 0);
  const fs::path out = s.dir / "on cluster's";
  // Bad values: one line naming the option, exit code 2, nothing written.
  for (const auto& bad : {std::vector<std::string>{"--slurm", "0"}, {"--slurm", "x"}, {"--slurm", "2", "--shard", "0/2"}}) {
    std::vector<std::string> args = {"run", file, "--out", out.string()};
    args.insert(args.end(), bad.begin(), bad.end());
    std::string err;
    CHECK(run_cli(args, nullptr, &err) == 2);
    CHECK_THAT(err, Catch::StartsWith("mxlab run: option '--slurm"));
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
    CHECK_FALSE(fs::exists(out));
  }
  // The real binary, as the scripts name the binary that wrote them.
  REQUIRE(mxlab_test::run_mxlab({"run", file, "--slurm", "3", "--out", out.string(), "--quiet"}) == 0);
  const std::string array = read(out / "slurm/array.sbatch");
  CHECK_THAT(array, Catch::Contains("#SBATCH --array=0-2\n"));
  CHECK_THAT(array, Catch::Contains(shell_quote(fs::canonical(MXLAB_BINARY).string()) + " run " + shell_quote(file)));
  CHECK_THAT(read(out / "submit.sh"), Catch::Contains("sbatch --parsable"));
  // What Slurm would do: each task with its SLURM_ARRAY_TASK_ID, from another folder, then the merge.
  for (int k = 0; k < 3; ++k) {
    const std::string task = "cd / && SLURM_ARRAY_TASK_ID=" + std::to_string(k) + " SLURM_CPUS_ON_NODE=2 sh " +
                             shell_quote((out / "slurm/array.sbatch").string()) + " >/dev/null";
    REQUIRE(std::system(task.c_str()) == 0);
  }
  REQUIRE(std::system(("cd / && sh " + shell_quote((out / "slurm/merge.sbatch").string()) + " >/dev/null").c_str()) == 0);
  auto a = outputs(s.dir / "one"), b = outputs(out);
  CHECK(a.size() >= 8);
  for (auto* files : {&a, &b})
    std::erase_if(*files, [](const auto& f) {
      return f.first.starts_with(".") || f.first.starts_with("shard-") || f.first.starts_with("slurm/") || f.first == "submit.sh";
    });
  CHECK(a == b);
}

TEST_CASE("a run killed at random moments and resumed gives the tables of an uninterrupted run", "[experiment][slow]") {
  Scratch s;
  // 40 points of about 2^18 elements each: long enough that kills land while points run.
  const std::string file = s.put("kill.toml", R"(name = "kill"
job = "analyze"
gaps = true
[inputs.n]
source = "gen:normal:0,1"
shape = "262144"
seed = 11
[inputs.t]
source = "gen:student_t:3"
shape = "262144"
seed = 12
[sweep]
format = ["mxfp8_e4m3", "mxfp6_e2m3", "mxfp4", "mxint8", "nvfp4"]
block = [8, 16, 32, 64]
input = ["n", "t"]
[[table]]
name = "sqnr"
rows = ["format", "block"]
pivot = "input"
values = ["sqnr_db", "max_rel_error"]
)");
  REQUIRE(run_cli({"run", file, "--out", (s.dir / "whole").string(), "--quiet"}) == 0);
  const std::string out = (s.dir / "killed").string();
  std::mt19937 rng(2024);
  std::uniform_int_distribution<int> delay_ms(5, 120);
  int kills = 0;
  for (int attempt = 0; attempt < 40 && kills < 12; ++attempt) {
    bool killed = false;
    const int code = mxlab_test::run_mxlab({"run", file, "--out", out, "--resume", "--quiet", "--threads", "1"},
                                           std::chrono::milliseconds(delay_ms(rng)), &killed);
    if (killed) ++kills;
    else if (code == 0) break;  // finished before the kill: the rest is checked below
  }
  CHECK(kills >= 10);
  REQUIRE(run_cli({"run", file, "--out", out, "--resume", "--quiet"}) == 0);
  const auto a = outputs(s.dir / "whole"), b = outputs(out);
  CHECK(a.size() >= 6);
  CHECK(a == b);
}

TEST_CASE("malformed experiment files: exit 2, the file, line and key named, nothing written", "[experiment]") {
  struct Case {
    std::string text;
    const char* message;
  };
  const std::string long_name(300, 'a');  // longer than a file name may be (255 bytes)
  const std::string inputs = "[inputs.a]\nsource = \"gen:normal:0,1\"\n";
  const Case cases[] = {
      {"name = \"x\"\njob = \"analyze\"\nformat = [\"mxfp4\"]\n", ":3: key 'format': unknown key"},
      {"name = \"x\"\n[sweep\nformat = 1\n", "bad.toml:2:"},
      {"job = \"analyze\"\n", "key 'name'"},
      {"name = \"x\"\njob = \"train-all\"\n", ":2: key 'job': expected analyze, catalogue, bounds, profiles, train, gemm, direct_cast or gradients"},
      {"name = \"x\"\n[sweep]\nformat = [\"mxfp4\"]\ninput = [\"missing\"]\n", "no input named 'missing'"},
      {"name = \"x\"\n[inputs.a]\nsource = \"gen:normal:0,1\"\n[sweep]\nformat = [\"mxfp99\"]\ninput = \"a\"\n", "mxfp99"},
      {"name = \"x\"\n[inputs.a]\nsource = \"gen:normal:0,1\"\n[sweep]\nformat = \"mxfp4\"\ninput = \"a\"\nround = \"sideways\"\n",
       "sweep key 'round'"},
      {"name = \"x\"\n[inputs.a]\nsource = \"gen:nope:1\"\n[sweep]\nformat = \"mxfp4\"\ninput = \"a\"\n", "input 'a'"},
      {"name = \"x\"\n[inputs.a]\nsource = \"no-such-file.npy\"\n[sweep]\nformat = \"mxfp4\"\ninput = \"a\"\n", "does not exist"},
      {"name = \"x\"\n[sweep]\nformat = \"mxfp4\"\ninput = \"a\"\nwidth = 3\n", ":5: key 'sweep.width': not an axis"},
      {"name = \"x\"\n[inputs.a]\nsource = \"gen:normal:0,1\"\n[sweep]\nformat = []\ninput = \"a\"\n", "empty list"},
      {"name = \"x\"\n[sweep]\nformat = \"mxfp4\"\n[[table]]\nname = \"t\"\nrows = [\"format\"]\n", "needs values"},
      {"name = \"x\"\n[sweep]\nformat = \"mxfp4\"\n[[plot]]\nname = \"p\"\nkind = \"pie\"\nx = \"a\"\ny = \"b\"\n", ":6: key 'plot.kind'"},
      {"name = \"x\"\n[sweep]\nformat = \"mxfp4\"\n[[expect]]\nmetric = \"mse\"\nequals = 1\ntolerance = 0.1\n",
       "a tolerance other than zero needs reason"},
      {"name = \"x\"\n[sweep]\nformat = \"mxfp4\"\nseed = -1\n[[plot]]\nx = 1\n", "key 'plot.x': expected a string"},
      {"name = \"x\"\n[inputs.a]\nsource = \"gen:normal:0,1\"\nlayout = \"auto\"\n", "apply to weights only"},
      {"name = \"../x\"\n", "key 'name'"},
      {"name = \"x\"\na = [[[[[[[[[[[1]]]]]]]]]]]\n", "nested deeper"},
      // Paths the file system refuses to look at (once an escaped std::filesystem_error): named, with the reason.
      {"name = \"x\"\n[inputs.w]\nweights = \"" + long_name + "\"\n[sweep]\nformat = \"mxfp4\"\ninput = \"w\"\n",
       "input 'w': weights 'aaaa"},
      {"name = \"x\"\n[inputs.w]\nweights = \"" + long_name + "\"\n[sweep]\nformat = \"mxfp4\"\ninput = \"w\"\n",
       "File name too long"},
      {"name = \"x\"\n[inputs.a]\nsource = \"" + long_name + ".npy\"\n[sweep]\nformat = \"mxfp4\"\ninput = \"a\"\n",
       "File name too long"},
  };
  for (const Case& c : cases) {
    Scratch s;
    const std::string file = s.put("bad.toml", c.text);
    std::string out, err;
    const fs::path dir = s.dir / "out";
    INFO(c.text);
    CHECK(run_cli({"run", file, "--out", dir.string(), "--quiet"}, &out, &err) == 2);
    CHECK_THAT(err, Catch::Contains(c.message));
    CHECK_THAT(err, Catch::Contains("bad.toml"));
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
    CHECK(err.find(long_name) == std::string::npos);  // inputs are quoted shortened, never whole
    CHECK_FALSE(fs::exists(dir));
  }
}

TEST_CASE("a job's own top-level keys: typed, checked, refused for other jobs, compared by value", "[experiment]") {
  const std::string head = "name = \"x\"\njob = \"direct_cast\"\n";
  const std::string sweep = "[sweep]\nmodel = \"mlp\"\n";
  const std::pair<std::string, const char*> bad[] = {
      {"name = \"x\"\nformats = [\"mxint8\"]\n[sweep]\nformat = \"mxfp4\"\n",
       "x.toml:2: key 'formats': applies to job 'direct_cast' only"},
      {head + "formats = []\n" + sweep, "x.toml:3: key 'formats': an empty list casts nothing"},
      {head + "formats = [\"mxint8\"]\ncast = []\n" + sweep, "x.toml:4: key 'cast': an empty list casts nothing"},
      {head + "formats = [\"mxint8\", \"mxfp4\", \"mxint8\"]\n" + sweep, "x.toml:3: key 'formats': 'mxint8' is listed twice"},
      {head + "formats = 3\n" + sweep, "x.toml:3: key 'formats': expected a string or an array of strings, found an integer"},
      {head + sweep, "x.toml: key 'formats': job 'direct_cast' needs formats = [...], the formats to cast the models to"},
      {head + "format = [\"mxint8\"]\n" + sweep,
       "x.toml:3: key 'format': unknown key (expected one of: name, description, job, inputs, sweep, points, metrics, gaps, "
       "histogram_bins, baseline_profile, max_gap, formats, cast, recipes, batches, table, plot, expect, batch)"},
  };
  for (const auto& [text, message] : bad) {
    INFO(text);
    auto e = parse_experiment(text, "x.toml");
    REQUIRE_FALSE(e);
    CHECK(e.error().message == message);
  }
  // A single string is a list of one; cast defaults to weights, so writing the default computes the same results.
  auto plain = parse_experiment(head + "formats = \"mxint8\"\n" + sweep, "x.toml");
  REQUIRE(plain);
  auto written = parse_experiment(head + "cast = \"weights\"\nformats = [\"mxint8\"]\n" + sweep, "x.toml");
  REQUIRE(written);
  CHECK_FALSE(computation_difference(*plain, *written));
  auto both = parse_experiment(head + "formats = [\"mxint8\"]\ncast = [\"weights\", \"weights+activations\"]\n" + sweep, "x.toml");
  REQUIRE(both);
  CHECK(computation_difference(*plain, *both) == std::optional<std::string>("cast"));
  CHECK(computation_difference(*both, *plain) == std::optional<std::string>("cast"));
  // The first key that differs is named: formats before cast.
  auto other = parse_experiment(head + "formats = [\"mxfp4\"]\ncast = [\"weights\", \"weights+activations\"]\n" + sweep, "x.toml");
  REQUIRE(other);
  CHECK(computation_difference(*plain, *other) == std::optional<std::string>("formats"));
  // The job reads them typed; a key it does not have, or another type, is a mistake in the code.
  CHECK(other->job_texts("formats") == std::vector<std::string>{"mxfp4"});
  CHECK(plain->job_texts("cast") == std::vector<std::string>{"weights"});
  CHECK_THROWS_AS(plain->job_text("formats"), std::logic_error);
  CHECK_THROWS_AS(plain->job_texts("max_gap"), std::logic_error);
}

TEST_CASE("a table that names an unknown column leaves no outputs", "[experiment]") {
  Scratch s;
  std::string text = kTiny;
  text += "\n[[table]]\nname = \"wrong\"\nrows = [\"format\"]\nvalues = [\"snr\"]\n";
  const std::string file = s.put("wrong.toml", text);
  std::string err;
  CHECK(run_cli({"run", file, "--out", (s.dir / "out").string(), "--quiet"}, nullptr, &err) == 2);
  CHECK_THAT(err, Catch::Contains("table 'wrong': no column 'snr'"));
  CHECK_FALSE(fs::exists(s.dir / "out/tables"));
  CHECK_FALSE(fs::exists(s.dir / "out/results"));
}

TEST_CASE("the bounds job agrees with the exact module; the catalogue lists every value", "[experiment]") {
  Scratch s;
  const std::string file = s.put("b.toml", R"(name = "b"
job = "bounds"
max_gap = 10
[sweep]
format = ["mxint8", "mxfp8_e4m3"]
[[points]]
a = "mxint8"
b = "mxsf"
[[expect]]
name = "agree"
from = "bounds"
metric = "agree"
equals = 1
)");
  std::string out;
  REQUIRE(run_cli({"check", file, "--out", (s.dir / "out").string(), "--quiet"}, &out) == 0);
  const auto rows = csv_rows(s.dir / "out/results/bounds.csv");
  CHECK(rows.size() > 20);
  const std::string cat = s.put("c.toml", "name = \"c\"\njob = \"catalogue\"\n[sweep]\nformat = [\"e2m1\", \"mxfp4\"]\n");
  REQUIRE(run_cli({"run", cat, "--out", (s.dir / "cat").string(), "--quiet"}) == 0);
  const auto values = csv_rows(s.dir / "cat/results/values.csv");
  // e2m1 has 7 positive values (0.5 ... 6); a block format's name stands for its element.
  CHECK(values.size() == 1 + 7 + 7);
}

TEST_CASE("a data set's images are an input: data:NAME:SPLIT", "[experiment][data]") {
  Scratch s;
  const fs::path data = fs::temp_directory_path() / "mxlab_experiment_test_data";
  FetchOptions o;
  o.dir = data.string();
  if (!fetch_data({"fashion-mnist"}, o).ok()) {
    WARN("skipped: the Debian package dataset-fashion-mnist is not installed");
    return;
  }
  const std::string file = s.put("d.toml", "name = \"d\"\n[inputs.images]\nsource = \"data:fashion-mnist:test\"\ndata_dir = \"" +
                                               data.string() + "\"\n[sweep]\nformat = \"mxfp8_e4m3\"\ninput = \"images\"\n");
  REQUIRE(run_cli({"run", file, "--out", (s.dir / "out").string(), "--quiet"}) == 0);
  const auto rows = csv_rows(s.dir / "out/results/metrics.csv");
  REQUIRE(rows.size() == 2);
  // 10,000 test images of 784 pixels, one row each.
  CHECK(std::find(rows[1].begin(), rows[1].end(), "10000x784") != rows[1].end());
  const std::string bad = s.put("e.toml", "name = \"e\"\n[inputs.images]\nsource = \"data:fashion-mnist:test\"\ndata_dir = \"" +
                                              (s.dir / "none").string() + "\"\n[sweep]\nformat = \"mxfp4\"\ninput = \"images\"\n");
  std::string err;
  CHECK(run_cli({"run", bad, "--out", (s.dir / "out2").string(), "--quiet"}, nullptr, &err) == 2);
  CHECK_THAT(err, Catch::Contains("mxlab data fetch fashion-mnist"));
}

namespace {

/// Runs SQL on a results database, as a person editing it by hand would.
void edit_database(const fs::path& db, const std::string& statement) {
  sqlite3* h = nullptr;
  REQUIRE(sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
  const int rc = sqlite3_exec(h, statement.c_str(), nullptr, nullptr, nullptr);
  const int changed = sqlite3_changes(h);
  sqlite3_close(h);
  REQUIRE(rc == SQLITE_OK);
  REQUIRE(changed == 1);
}

}  // namespace

TEST_CASE("merge takes every point exactly once: a missing or repeated point is refused and nothing is written", "[experiment]") {
  Scratch s;
  const std::string file = s.put("tiny.toml", kTiny);
  REQUIRE(run_cli({"run", file, "--out", (s.dir / "one").string(), "--quiet"}) == 0);
  for (int k = 0; k < 3; ++k)
    REQUIRE(run_cli({"run", file, "--out", (s.dir / ("s" + std::to_string(k))).string(), "--shard", std::to_string(k) + "/3", "--quiet"}) == 0);
  const std::string s0 = (s.dir / "s0").string(), s1 = (s.dir / "s1").string(), s2 = (s.dir / "s2").string();
  const std::string out = (s.dir / "merged").string();
  std::string err;
  // A shard left out: the first missing point and its shard are named.
  CHECK(run_cli({"merge", s0, s2, "--out", out}, nullptr, &err) == 2);
  CHECK_THAT(err, Catch::Contains("4 of 12 points are missing from '" + s0 + "' and the other folders, point 1 first (shard 1/3"));
  CHECK_FALSE(fs::exists(out));
  // A shard given twice: the point and both folders are named, even when every point is there.
  err.clear();
  CHECK(run_cli({"merge", s0, s1, s2, s1, "--out", out}, nullptr, &err) == 2);
  CHECK_THAT(err, Catch::Contains("point 1 is in both '" + s1 + "' and '" + s1 + "'"));
  CHECK_FALSE(fs::exists(out));
  // Rows of one shard moved into another's database by hand: refused, although the count is right.
  fs::copy(s.dir / "s1", s.dir / "s1_moved", fs::copy_options::recursive);
  edit_database(s.dir / "s1_moved/results.sqlite", "UPDATE points SET idx = 2 WHERE idx = 1");
  err.clear();
  CHECK(run_cli({"merge", s0, (s.dir / "s1_moved").string(), s2, "--out", out}, nullptr, &err) == 2);
  CHECK_THAT(err, Catch::Contains("s1_moved/results.sqlite': holds point 2, which is not in its shard 1/3"));
  CHECK_FALSE(fs::exists(out));
  // The three shards in any order: the tables of one run, byte for byte, and a database that resumes to them.
  REQUIRE(run_cli({"merge", s2, s0, s1, "--out", out}) == 0);
  CHECK(outputs(s.dir / "one") == outputs(out));
  std::string said;
  REQUIRE(run_cli({"run", file, "--out", out, "--resume", "--quiet"}, &said) == 0);
  CHECK_THAT(said, Catch::Contains("(12 points: 0 run, 12 kept)"));
  CHECK(outputs(s.dir / "one") == outputs(out));
}

TEST_CASE("a results database edited by hand is refused by --resume, and its tables are not republished", "[experiment]") {
  Scratch s;
  const std::string file = s.put("tiny.toml", kTiny);
  const std::string out = (s.dir / "out").string();
  REQUIRE(run_cli({"run", file, "--out", out, "--quiet"}) == 0);
  const auto before = outputs(out);
  // A better SQNR typed into point 3's stored result.
  edit_database(s.dir / "out/results.sqlite",
                "UPDATE points SET result = replace(result, '[\"sqnr_db\",', '[\"sqnr_db\",1') WHERE idx = 3");
  std::string out_text, err;
  CHECK(run_cli({"run", file, "--out", out, "--resume", "--quiet"}, &out_text, &err) == 2);
  CHECK(out_text.empty());
  CHECK_THAT(err, Catch::Contains("results database '" + out + "/results.sqlite': point 3 does not match its checksum"));
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  CHECK(outputs(out) == before);
  // Merging it is refused the same way; running it again without --resume recomputes every point.
  err.clear();
  CHECK(run_cli({"merge", out, "--out", (s.dir / "merged").string()}, nullptr, &err) == 2);
  CHECK_THAT(err, Catch::Contains("point 3 does not match its checksum"));
  REQUIRE(run_cli({"run", file, "--out", out, "--quiet"}) == 0);
  CHECK(outputs(out) == before);
}

TEST_CASE("two processes on one results folder: the second exits 2 naming the first's PID", "[experiment]") {
  Scratch s;
  // 24 points of 2^18 elements on one thread: the first process still runs when it is stopped below.
  const std::string file = s.put("long.toml", R"(name = "long"
[inputs.n]
source = "gen:normal:0,1"
shape = "262144"
[sweep]
format = ["mxfp8_e4m3", "mxfp6_e2m3", "mxfp4", "mxint8", "nvfp4", "mxfp6_e3m2"]
block = [8, 16, 32, 64]
input = "n"
[[table]]
name = "sqnr"
rows = ["format"]
pivot = "block"
values = ["sqnr_db"]
)");
  const std::string out = (s.dir / "out").string(), done = (s.dir / "done").string();
  REQUIRE(run_cli({"run", file, "--out", done, "--quiet"}) == 0);  // the reference, and a folder to merge
  const pid_t first = mxlab_test::spawn_mxlab({"run", file, "--out", out, "--quiet", "--threads", "1"});
  REQUIRE(first > 0);
  // The first holds the folder once its lock file names it.
  const std::string holder = "process " + std::to_string(first) + " (mxlab run)";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (read(s.dir / "out/.mxlab.lock").find(holder) == std::string::npos && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE_THAT(read(s.dir / "out/.mxlab.lock"), Catch::Contains(holder));
  // Stopped while it holds the folder (a stopped process keeps its lock), so the second always meets it.
  REQUIRE(::kill(first, SIGSTOP) == 0);
  int status = 0;
  REQUIRE(::waitpid(first, &status, WUNTRACED) == first);
  REQUIRE(WIFSTOPPED(status));
  // A second process: run, run --resume and a merge into the folder are refused, naming the first.
  for (const std::vector<std::string>& args : {std::vector<std::string>{"run", file, "--out", out, "--quiet"},
                                               {"run", file, "--out", out, "--resume", "--quiet"},
                                               {"merge", done, "--out", out}}) {
    const std::string err_file = (s.dir / "second.txt").string();
    const int code = mxlab_test::run_mxlab(args, {}, nullptr, {err_file, {}});
    const std::string err = read(err_file);
    INFO(args[0] << ": " << err);
    CHECK(code == 2);
    CHECK_THAT(err, Catch::Contains("'" + out + "' is in use by " + holder));
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  }
  // The first was not disturbed: killed now, its database resumes to the tables of an uninterrupted run.
  ::kill(first, SIGKILL);
  ::waitpid(first, &status, 0);
  REQUIRE(run_cli({"run", file, "--out", out, "--resume", "--quiet"}) == 0);
  CHECK(outputs(done) == outputs(out));
}
