// The direct_cast job: a trained model's weights (and activations) cast to formats at inference, next to FP32.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "experiment/experiment_support.hpp"
#include "support/train_data.hpp"

namespace fs = std::filesystem;
using mxlab_test::run_cli;
using mxlab_test::Scratch;

namespace {

using CsvRow = std::map<std::string, std::string>;

/// The cells of a CSV line (quoted cells may hold commas; "" is a quote).
std::vector<std::string> csv_cells(const std::string& line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') cells.back() += line[++i];
    else if (c == '"') quoted = !quoted;
    else if (c == ',' && !quoted) cells.emplace_back();
    else cells.back() += c;
  }
  return cells;
}

std::vector<CsvRow> read_csv(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> header = csv_cells(line);
  std::vector<CsvRow> rows;
  while (std::getline(in, line)) {
    const auto cells = csv_cells(line);
    CsvRow r;
    for (std::size_t i = 0; i < header.size(); ++i) r[header[i]] = i < cells.size() ? cells[i] : "";
    rows.push_back(r);
  }
  return rows;
}

const CsvRow& find_row(const std::vector<CsvRow>& rows, const std::string& format, const std::string& cast) {
  for (const auto& r : rows)
    if (r.at("format") == format && r.at("cast") == cast) return r;
  FAIL("no row " << format << " " << cast);
  return rows.front();
}

/// A number of summary.json: "KEY": {"loss": X, "accuracy": Y, ...}.
double json_field(const std::string& json, const std::string& object, const std::string& key) {
  const auto at = json.find("\"" + object + "\": {");
  REQUIRE(at != std::string::npos);
  const auto k = json.find("\"" + key + "\": ", at);
  REQUIRE(k != std::string::npos);
  return std::strtod(json.c_str() + k + key.size() + 4, nullptr);
}

/// Command lines that must exit 2 with one line naming the problem (the text after each).
using BadInputs = std::vector<std::pair<std::vector<std::string>, std::string>>;
void check_bad_input(const BadInputs& bad) {
  for (const auto& [args, message] : bad) {
    std::string o, e;
    CHECK(run_cli(args, &o, &e) == 2);
    CHECK_THAT(e, Catch::Contains(message));
    CHECK(std::count(e.begin(), e.end(), '\n') == 1);
  }
}

struct DigitsData {
  Scratch dir;
  DigitsData() {
    mxlab_test::write_digits(dir.dir / "data");
    ::setenv("MXLAB_DATA_DIR", (dir.dir / "data").c_str(), 1);
  }
  ~DigitsData() { ::unsetenv("MXLAB_DATA_DIR"); }
  /// DIR/run: the CNN trained for 6 steps in FP32 with its checkpoint kept.
  fs::path trained_cnn() const {
    const fs::path run = dir.dir / "run";
    std::string out, err;
    const int rc = run_cli({"train", "--model", "cnn", "--data", "digits", "--recipe", "fp32", "--steps", "6", "--batch",
                            "16", "--seed", "4", "--metrics-every", "0", "--out", run.string(), "--keep-checkpoint"},
                           &out, &err);
    INFO(err);
    REQUIRE(rc == 0);
    return run;
  }
};

}  // namespace

TEST_CASE("direct_cast of a checkpoint: FP32 gives the trainer's own evaluation, a lossless cast gives FP32",
          "[experiment][direct_cast]") {
  DigitsData d;
  const fs::path run = d.dir.dir / "run";
  std::string out, err;
  int rc = run_cli({"train", "--model", "mlp", "--data", "digits", "--recipe", "fp32", "--steps", "12", "--batch", "16",
                    "--hidden", "16,8", "--seed", "3", "--metrics-every", "0", "--out", run.string(), "--keep-checkpoint"},
                   &out, &err);
  INFO(err);
  REQUIRE(rc == 0);
  REQUIRE(fs::exists(run / "checkpoint.bin"));
  const std::string summary = mxlab_test::read_file(run / "summary.json");
  // A kept checkpoint holds a finished run: it is not resumed.
  rc = run_cli({"train", "--model", "mlp", "--data", "digits", "--recipe", "fp32", "--steps", "12", "--batch", "16",
                "--hidden", "16,8", "--seed", "3", "--metrics-every", "0", "--out", run.string(), "--resume"},
               &out, &err);
  CHECK(rc == 2);
  CHECK_THAT(err, Catch::Contains("finished run"));

  const std::string file = d.dir.put("cast.toml", "name = \"cast\"\njob = \"direct_cast\"\n"
                                                  "formats = [\"fp32\", \"e8m23\", \"mxint8\", \"mxfp4\"]\n"
                                                  "cast = [\"weights\", \"weights+activations\"]\n"
                                                  "[sweep]\ncheckpoint = \"run\"\n");
  rc = run_cli({"run", file, "--out", (d.dir.dir / "r").string(), "--quiet"}, &out, &err);
  INFO(err);
  REQUIRE(rc == 0);
  const auto rows = read_csv(d.dir.dir / "r" / "results" / "cast.csv");
  REQUIRE(rows.size() == 8);  // FP32 under both casts, three formats under both
  for (const char* cast : {"weights", "weights+activations"}) {
    const CsvRow& fp32 = find_row(rows, "fp32", cast);
    // summary.json prints 9 significant digits: the same accuracy (a count of 80 images) and loss.
    CHECK(std::abs(std::strtod(fp32.at("test_accuracy").c_str(), nullptr) - json_field(summary, "test", "accuracy")) < 1e-9);
    CHECK(std::abs(std::strtod(fp32.at("test_loss").c_str(), nullptr) - json_field(summary, "test", "loss")) < 1e-6);
    // float32 elements hold every float32 weight and activation: the cast changes nothing, to the last bit.
    const CsvRow& lossless = find_row(rows, "e8m23", cast);
    CHECK(lossless.at("test_accuracy") == fp32.at("test_accuracy"));
    CHECK(lossless.at("test_loss") == fp32.at("test_loss"));
    CHECK(lossless.at("delta") == "0");
    // MXFP4 changes the model's outputs.
    CHECK(find_row(rows, "mxfp4", cast).at("test_loss") != fp32.at("test_loss"));
  }
}

TEST_CASE("direct_cast trains its model when no checkpoint is given: FP32 equals the trainer's evaluation exactly",
          "[experiment][direct_cast]") {
  DigitsData d;
  const std::string file = d.dir.put("cast.toml", "name = \"cast\"\njob = \"direct_cast\"\n"
                                                  "formats = [\"mxint8\"]\n"
                                                  "[sweep]\nmodel = [\"mlp\", \"cnn\"]\ndata = \"digits\"\nsteps = 6\n"
                                                  "batch = 16\nhidden = 8\n"
                                                  "[[expect]]\nfrom = \"summary\"\nmetric = \"fp32_equals_trainer\"\n"
                                                  "equals = 1\n");
  std::string out, err;
  const int rc = run_cli({"check", file, "--out", (d.dir.dir / "r").string(), "--quiet"}, &out, &err);
  INFO(err << out);
  REQUIRE(rc == 0);
  const auto summary = read_csv(d.dir.dir / "r" / "results" / "summary.csv");
  REQUIRE(summary.size() == 2);
  for (const auto& s : summary) CHECK(s.at("fp32_test_accuracy") == s.at("trainer_test_accuracy"));
}

TEST_CASE("direct_cast refuses a missing checkpoint and an unknown format before anything runs", "[experiment][direct_cast]") {
  DigitsData d;
  std::string out, err;
  const std::string missing = d.dir.put("m.toml", "name = \"m\"\njob = \"direct_cast\"\nformats = [\"mxint8\"]\n"
                                                  "[sweep]\ncheckpoint = \"nowhere/checkpoint.bin\"\n");
  int rc = run_cli({"run", missing, "--out", (d.dir.dir / "m").string(), "--quiet"}, &out, &err);
  CHECK(rc == 2);
  CHECK_THAT(err, Catch::Contains("checkpoint") && Catch::Contains("nowhere/checkpoint.bin") &&
                      Catch::Contains("does not exist"));
  CHECK(!fs::exists(d.dir.dir / "m"));
  const std::string unknown = d.dir.put("u.toml", "name = \"u\"\njob = \"direct_cast\"\nformats = [\"mxint8\", \"mxfp9\"]\n"
                                                  "[sweep]\nmodel = \"mlp\"\ndata = \"digits\"\nsteps = 2\n");
  rc = run_cli({"run", unknown, "--out", (d.dir.dir / "u").string(), "--quiet"}, &out, &err);
  CHECK(rc == 2);
  CHECK_THAT(err, Catch::Contains("'mxfp9'"));
  CHECK(!fs::exists(d.dir.dir / "u"));
  const std::string cast = d.dir.put("c.toml", "name = \"c\"\njob = \"direct_cast\"\nformats = [\"mxint8\"]\n"
                                               "cast = [\"activations\"]\n[sweep]\nmodel = \"mlp\"\ndata = \"digits\"\n");
  rc = run_cli({"run", cast, "--out", (d.dir.dir / "c").string(), "--quiet"}, &out, &err);
  CHECK(rc == 2);
  CHECK_THAT(err, Catch::Contains("'activations'") && Catch::Contains("weights or weights+activations"));
  // A file that is not a checkpoint is named as such.
  const std::string junk = d.dir.put("junk.bin", "not a checkpoint\n");
  const std::string bad = d.dir.put("b.toml", "name = \"b\"\njob = \"direct_cast\"\nformats = [\"mxint8\"]\n"
                                              "[sweep]\ncheckpoint = \"junk.bin\"\n");
  rc = run_cli({"run", bad, "--out", (d.dir.dir / "b").string(), "--quiet"}, &out, &err);
  CHECK(rc != 0);
  CHECK_THAT(err, Catch::Contains("junk.bin") && Catch::Contains("not a training checkpoint"));
}

TEST_CASE("a train point counts its loss-scale growths and back-offs; hidden takes a list of widths, init_gain a gain",
          "[experiment][direct_cast]") {
  DigitsData d;
  const std::string file = d.dir.put("ls.toml", "name = \"ls\"\njob = \"train\"\n[sweep]\nmodel = \"mlp\"\ndata = \"digits\"\n"
                                                "steps = 40\nbatch = 16\nhidden = \"16,8,8\"\ninit_gain = 0.5\n"
                                                "recipe = \"fp16\"\nset = \"growth_interval=2;loss_scale=1e8\"\n");
  std::string out, err;
  const int rc = run_cli({"run", file, "--out", (d.dir.dir / "r").string(), "--quiet"}, &out, &err);
  INFO(err);
  REQUIRE(rc == 0);
  const auto steps = read_csv(d.dir.dir / "r" / "results" / "steps.csv");
  REQUIRE(steps.size() == 40);
  int growths = 0, backoffs = 0, skipped = 0;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    skipped += steps[i].at("skipped") == "1";
    if (i == 0) continue;
    const double a = std::strtod(steps[i - 1].at("loss_scale").c_str(), nullptr);
    const double b = std::strtod(steps[i].at("loss_scale").c_str(), nullptr);
    growths += b > a;
    backoffs += b < a;
  }
  const auto summary = read_csv(d.dir.dir / "r" / "results" / "summary.csv");
  REQUIRE(summary.size() == 1);
  const double final_scale = std::strtod(summary[0].at("final_loss_scale").c_str(), nullptr);
  const double last = std::strtod(steps.back().at("loss_scale").c_str(), nullptr);
  growths += final_scale > last;
  backoffs += final_scale < last;
  // A scale of 1e8 overflows FP16 gradients: it backs off (skipping those steps), then grows every 2 good steps.
  CHECK(backoffs > 0);
  CHECK(growths > 0);
  CHECK(skipped == backoffs);
  CHECK(summary[0].at("loss_scale_growths") == std::to_string(growths));
  CHECK(summary[0].at("loss_scale_backoffs") == std::to_string(backoffs));
  CHECK(summary[0].at("skipped_steps") == std::to_string(skipped));
  // Four GEMM layers: the three hidden widths and the head.
  const auto layers = read_csv(d.dir.dir / "r" / "results" / "layers.csv");
  bool fc4 = false;
  for (const auto& l : layers) fc4 |= l.at("layer") == "fc4";
  CHECK(fc4);
}

TEST_CASE("a train point's layer_evals follow each operand between evaluations; one stretch equals the run's layers",
          "[experiment][direct_cast]") {
  DigitsData d;
  auto run = [&](const std::string& name, const std::string& keys) {
    const std::string file = d.dir.put(name + ".toml", "name = \"" + name + "\"\njob = \"train\"\n[sweep]\nmodel = \"mlp\"\n"
                                       "data = \"digits\"\nsteps = 12\nbatch = 16\nhidden = 16\nrecipe = \"mxint8\"\n" + keys);
    std::string out, err;
    const int rc = run_cli({"run", file, "--out", (d.dir.dir / name).string(), "--quiet"}, &out, &err);
    INFO(err);
    REQUIRE(rc == 0);
  };
  run("one", "eval_every = 0\n");
  run("three", "eval_every = 4\nmetrics_every = 2\neval_limit = 50\n");
  run("none", "metrics_every = 0\n");
  const auto layers = read_csv(d.dir.dir / "one" / "results" / "layers.csv");
  const auto one = read_csv(d.dir.dir / "one" / "results" / "layer_evals.csv");
  // Three GEMM layers, each with its roles: one stretch (evaluation only after the last step) is the whole run.
  REQUIRE(!layers.empty());
  REQUIRE(one.size() == layers.size());
  for (std::size_t i = 0; i < one.size(); ++i) {
    CHECK(one[i].at("step") == "12");
    CHECK(one[i].at("layer") == layers[i].at("layer"));
    CHECK(one[i].at("role") == layers[i].at("role"));
    CHECK(one[i].at("underflow_ratio") == layers[i].at("underflow_ratio"));
    CHECK(one[i].at("mse") == layers[i].at("mse"));
    // 12 steps of 16 images: the epoch is the share of the training split seen.
    CHECK(std::strtod(one[i].at("epoch").c_str(), nullptr) > 0);
  }
  // Evaluations at steps 4, 8 and 12: three stretches per operand, each measured at its even steps.
  const auto three = read_csv(d.dir.dir / "three" / "results" / "layer_evals.csv");
  REQUIRE(three.size() == 3 * layers.size());
  std::map<std::string, int> per_step;
  for (const auto& r : three) ++per_step[r.at("step")];
  CHECK(per_step == std::map<std::string, int>{{"12", static_cast<int>(layers.size())},
                                               {"4", static_cast<int>(layers.size())},
                                               {"8", static_cast<int>(layers.size())}});
  const double e4 = std::strtod(three.front().at("epoch").c_str(), nullptr);
  const double e12 = std::strtod(three.back().at("epoch").c_str(), nullptr);
  CHECK(e4 > 0);
  CHECK(std::abs(e12 - 3 * e4) <= 0.002);  // each epoch is rounded to three decimals
  // Without metric steps there are no operand rows.
  CHECK(read_csv(d.dir.dir / "none" / "results" / "layer_evals.csv").empty());
}

TEST_CASE("mxlab direct-cast casts a checkpoint's model; bad input exits 2 with one message", "[experiment][direct_cast]") {
  DigitsData d;
  const fs::path run = d.trained_cnn();
  std::string out, err;
  int rc = 0;
  const std::string summary = mxlab_test::read_file(run / "summary.json");
  const fs::path csv = d.dir.dir / "cast.csv";
  rc = run_cli({"direct-cast", run.string(), "--formats", "fp32,e8m23,mxfp4", "--cast", "weights,weights+activations",
                "--csv", "--out", csv.string()},
               &out, &err);
  INFO(err);
  REQUIRE(rc == 0);
  const auto rows = read_csv(csv);
  REQUIRE(rows.size() == 5);  // FP32 once, then two formats under two casts
  const CsvRow& fp32 = find_row(rows, "fp32", "none");
  CHECK(std::abs(std::strtod(fp32.at("test_accuracy").c_str(), nullptr) - json_field(summary, "test", "accuracy")) < 1e-9);
  for (const char* cast : {"weights", "weights+activations"}) {
    CHECK(find_row(rows, "e8m23", cast).at("test_loss") == fp32.at("test_loss"));
    CHECK(find_row(rows, "mxfp4", cast).at("test_loss") != fp32.at("test_loss"));
  }
  CHECK(fs::exists(d.dir.dir / "cast.csv.provenance.json"));
  const BadInputs bad = {
      {{"direct-cast", (d.dir.dir / "none").string(), "--formats", "mxint8"}, "does not exist"},
      {{"direct-cast", run.string(), "--formats", "mxfp9"}, "'mxfp9'"},
      {{"direct-cast", run.string(), "--formats", "mxint8", "--cast", "activations"}, "'activations'"},
      {{"direct-cast", (run / "summary.json").string(), "--formats", "mxint8"}, "not a training checkpoint"},
      {{"direct-cast", run.string(), "--formats", "mxint8", "--data-dir", (d.dir.dir / "run").string()}, "the checkpoint's data: "},
      {{"direct-cast", run.string()}, "'--formats' is required"}};
  check_bad_input(bad);
}

TEST_CASE("mxlab gradients sets each recipe's gradient against FP32's and the batch noise; bad input exits 2",
          "[experiment][gradients]") {
  DigitsData d;
  const fs::path run = d.trained_cnn();
  std::string out, err;
  int rc = 0;
  const fs::path csv = d.dir.dir / "gradients.csv";
  rc = run_cli({"gradients", run.string(), "--recipes", "fp32,mxint8,mxfp4", "--batches", "2", "--csv", "--out",
                csv.string()},
               &out, &err);
  INFO(err);
  REQUIRE(rc == 0);
  const auto rows = read_csv(csv);
  // Per recipe: the four GEMM weights of the CNN (conv1, conv2, fc1, fc2) and the whole model.
  REQUIRE(rows.size() == 3 * 5);
  std::map<std::string, double> all;
  for (const auto& r : rows) {
    if (r.at("recipe") == "fp32") CHECK(r.at("rel_error") == "0");
    CHECK(std::strtod(r.at("batch_noise").c_str(), nullptr) > 0);
    if (r.at("param") == "(all)") all[r.at("recipe")] = std::strtod(r.at("rel_error").c_str(), nullptr);
  }
  CHECK(all.at("mxfp4") > all.at("mxint8"));
  CHECK(all.at("mxint8") > 0);
  CHECK(fs::exists(d.dir.dir / "gradients.csv.provenance.json"));
  const BadInputs bad = {
      {{"gradients", (d.dir.dir / "none").string(), "--recipes", "mxint8"}, "does not exist"},
      {{"gradients", run.string(), "--recipes", "mxfp9"}, "'mxfp9'"},
      {{"gradients", run.string(), "--recipes", "mxint8", "--batches", "0"}, "--batches"},
      {{"gradients", (run / "summary.json").string(), "--recipes", "mxint8"}, "not a training checkpoint"},
      {{"gradients", run.string(), "--recipes", "mxint8", "--data-dir", (d.dir.dir / "run").string()}, "the checkpoint's data: "},
      {{"gradients", run.string(), "--recipes", "mxint8", "--batch", "7"}, "odd"},
      {{"gradients", run.string()}, "'--recipes' is required"}};
  check_bad_input(bad);
}

TEST_CASE("the gradients job: the CLI's rows from a checkpoint or a model trained at the point, expectations on them",
          "[experiment][gradients]") {
  DigitsData d;
  const fs::path run = d.trained_cnn();
  std::string out, err;
  const fs::path csv = d.dir.dir / "cli.csv";
  REQUIRE(run_cli({"gradients", run.string(), "--recipes", "mxint8,mxfp4", "--batches", "2", "--csv", "--out", csv.string()},
                  &out, &err) == 0);
  const auto cli = read_csv(csv);
  // The same checkpoint through the job, and the same model trained at a point (the run's training keys).
  const std::string file = d.dir.put(
      "g.toml", "name = \"g\"\njob = \"gradients\"\nrecipes = [\"mxint8\", \"mxfp4\"]\nbatches = 2\n"
                "[[points]]\ncheckpoint = \"" + run.string() + "\"\n"
                "[[points]]\nmodel = \"cnn\"\ndata = \"digits\"\nrecipe = \"fp32\"\nsteps = 6\nbatch = 16\nseed = 4\n"
                "[[expect]]\nfrom = \"gradients\"\nwhere = { compared = \"mxint8\", param = \"(all)\" }\n"
                "metric = \"error_to_noise\"\nat_most = 100\n"
                "[[expect]]\nfrom = \"summary\"\nmetric = \"checkpoint_step\"\nequals = 6\n");
  const int rc = run_cli({"check", file, "--out", (d.dir.dir / "r").string(), "--quiet"}, &out, &err);
  INFO(err << out);
  REQUIRE(rc == 0);
  const auto rows = read_csv(d.dir.dir / "r" / "results" / "gradients.csv");
  REQUIRE(rows.size() == 2 * cli.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const CsvRow& c = cli[i % cli.size()];
    INFO(i << " " << c.at("recipe") << " " << c.at("param"));
    CHECK(rows[i].at("compared") == c.at("recipe"));
    CHECK(rows[i].at("param") == c.at("param"));
    // The CLI prints shortest decimals; the results hold the same doubles.
    CHECK(std::strtod(rows[i].at("rel_error").c_str(), nullptr) == std::strtod(c.at("rel_error").c_str(), nullptr));
    CHECK(std::strtod(rows[i].at("batch_noise").c_str(), nullptr) == std::strtod(c.at("batch_noise").c_str(), nullptr));
  }
  // A sweep's training keys (recipe among them) go into the points; they do not make the sweep a point of its own.
  const std::string keyed = d.dir.put("k.toml", "name = \"k\"\njob = \"gradients\"\nrecipes = [\"mxint8\"]\nbatches = 1\n"
                                                "[sweep]\ndata = \"digits\"\nrecipe = \"fp32\"\nsteps = 2\nbatch = 16\n"
                                                "[[points]]\nmodel = \"cnn\"\n");
  REQUIRE(run_cli({"run", keyed, "--out", (d.dir.dir / "k").string(), "--quiet"}, &out, &err) == 0);
  const auto keyed_summary = read_csv(d.dir.dir / "k" / "results" / "summary.csv");
  REQUIRE(keyed_summary.size() == 1);
  CHECK(keyed_summary[0].at("model") == "cnn");
  const std::string none = d.dir.put("n.toml", "name = \"n\"\njob = \"gradients\"\n[sweep]\nmodel = \"cnn\"\n");
  CHECK(run_cli({"run", none, "--out", (d.dir.dir / "n").string(), "--quiet"}, &out, &err) == 2);
  CHECK_THAT(err, Catch::Contains("needs recipes"));
  const std::string bad = d.dir.put("b.toml", "name = \"b\"\njob = \"gradients\"\nrecipes = [\"mxfp9\"]\n"
                                              "[sweep]\nmodel = \"cnn\"\ndata = \"digits\"\nsteps = 2\n");
  CHECK(run_cli({"run", bad, "--out", (d.dir.dir / "b").string(), "--quiet"}, &out, &err) == 2);
  CHECK_THAT(err, Catch::Contains("mxfp9"));
  CHECK(!fs::exists(d.dir.dir / "b"));
}
