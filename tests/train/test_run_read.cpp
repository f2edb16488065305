// train::read_run against run folders written by hand in the format RunRecord writes (docs/training.md,
// "Metrics"): the values read are the file's, and each malformed folder is refused naming the file at fault.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "mxlab/train/run_record.hpp"

using namespace mxlab;

namespace {

const char* const kHeader = "step,loss,accuracy,bpc,lr,loss_scale,skipped,skipped_total,seconds,val_loss,val_accuracy,val_bpc,fc1.w.underflow,fc1.w.mse\n";
const char* const kRows = "1,2.5,0.125,,0.001,1,0,0,0.5,,,,0,1e-05\n2,2.25,0.25,,0.001,1,0,0,1,2.375,0.1875,,0,2e-05\n";
const char* const kSummary = R"({"model": "mlp", "data": "fashion-mnist", "recipe": "mxfp4", "recipe_text": "", "parameters": 10,
 "steps": 2, "cancelled": false, "skipped_steps": 0, "validation": {"loss": 2.375, "accuracy": 0.1875, "examples": 8},
 "test": {"loss": 2.5, "accuracy": 0.25, "examples": 8}, "operands": []})";

struct Folder {
  std::filesystem::path dir;
  explicit Folder(const std::string& name) : dir(std::filesystem::temp_directory_path() / ("mxlab_run_read_" + name)) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    write("metrics.csv", std::string(kHeader) + kRows);
    write("summary.json", kSummary);
    write("recipe.txt", "preset = \"mxfp4\"\n");
  }
  ~Folder() { std::filesystem::remove_all(dir); }
  void write(const std::string& file, const std::string& text) const { std::ofstream(dir / file) << text; }
  std::string error() const {
    auto r = train::read_run(dir.string());
    return r ? std::string() : r.error().message;
  }
};

}  // namespace

TEST_CASE("read_run: a run's folder read back as its files hold it", "[train]") {
  Folder f("ok");
  auto r = train::read_run(f.dir.string());
  REQUIRE(r.ok());
  CHECK(r->model == "mlp");
  CHECK(r->recipe == "mxfp4");
  CHECK(r->recipe_text == "preset = \"mxfp4\"\n");
  CHECK(!r->text);
  CHECK(r->step == std::vector<double>{1, 2});
  CHECK(r->loss == std::vector<double>{2.5, 2.25});
  CHECK(r->accuracy == std::vector<double>{0.125, 0.25});
  CHECK(r->val_step == std::vector<double>{2});
  CHECK(r->val_loss == std::vector<double>{2.375});
  CHECK(r->validation_loss == 2.375);
  CHECK(r->test_metric == 0.25);
}

TEST_CASE("read_run: malformed folders are refused naming the file and the problem", "[train]") {
  CHECK(train::read_run("/nonexistent/run").error().message == "run folder '/nonexistent/run': not a folder");
  {
    Folder f("missing");
    std::filesystem::remove(f.dir / "metrics.csv");
    CHECK_THAT(f.error(), Catch::Contains("metrics.csv"));
  }
  {
    Folder f("header");
    f.write("metrics.csv", std::string("step,loss\n") + kRows);
    CHECK_THAT(f.error(), Catch::Contains("metrics.csv does not begin with a run's header"));
  }
  {
    Folder f("order");
    f.write("metrics.csv", std::string(kHeader) + "2,2.5,0.125,,0.001,1,0,0,0.5,,,,0,1e-05\n");
    CHECK_THAT(f.error(), Catch::Contains("metrics.csv line 2: step '2', expected 1"));
  }
  {
    Folder f("short");
    f.write("metrics.csv", std::string(kHeader) + "1,2.5,0.125\n");
    CHECK_THAT(f.error(), Catch::Contains("metrics.csv line 2: 3 fields, the header has 14"));
  }
  {
    Folder f("number");
    f.write("metrics.csv", std::string(kHeader) + "1,x,0.125,,0.001,1,0,0,0.5,,,,0,1e-05\n");
    CHECK_THAT(f.error(), Catch::Contains("loss 'x' is not a number"));
  }
  {
    Folder f("json");
    f.write("summary.json", "{\"model\": ");
    CHECK_THAT(f.error(), Catch::Contains("summary.json"));
  }
  {
    Folder f("key");
    f.write("summary.json", R"({"model": "mlp", "data": "fashion-mnist", "steps": 2, "cancelled": false, "skipped_steps": 0})");
    CHECK_THAT(f.error(), Catch::Contains("summary.json has no \"recipe\""));
  }
  {
    Folder f("steps");
    f.write("metrics.csv", std::string(kHeader) + "1,2.5,0.125,,0.001,1,0,0,0.5,,,,0,1e-05\n");
    CHECK_THAT(f.error(), Catch::Contains("summary.json says 2 steps, metrics.csv has 1 rows"));
  }
  {
    Folder f("recipe");
    std::filesystem::remove(f.dir / "recipe.txt");
    CHECK_THAT(f.error(), Catch::Contains("recipe.txt"));
  }
}
