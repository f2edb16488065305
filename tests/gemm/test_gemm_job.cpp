// The experiment job `gemm` (docs/experiments.md, docs/gemm.md): its points give the numbers of gemm::run on the
// same operands, every model setting is an axis, a model's layers (a safetensors file written here) are B, and
// bad points are refused with a message naming them.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "mxlab/core/random.hpp"
#include "mxlab/experiment/experiment.hpp"
#include "mxlab/experiment/results.hpp"
#include "mxlab/formats/parse.hpp"
#include "mxlab/gemm/gemm.hpp"
#include "mxlab/ops/requests.hpp"
#include "gemm_test_files.hpp"

namespace fs = std::filesystem;
using namespace mxlab;
using namespace mxlab::experiment;

namespace {

/// A folder of its own under the temporary directory, removed at the end.
struct Folder {
  fs::path path = fs::temp_directory_path() / ("mxlab_gemm_job_" + std::to_string(::getpid()));
  Folder() { fs::create_directories(path); }
  ~Folder() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

double number(const Row& r, const std::string& column) {
  const Cell* c = r.find(column);
  REQUIRE(c != nullptr);
  REQUIRE(std::holds_alternative<double>(*c));
  return std::get<double>(*c);
}

std::string text(const Row& r, const std::string& column) {
  const Cell* c = r.find(column);
  REQUIRE(c != nullptr);
  REQUIRE(std::holds_alternative<std::string>(*c));
  return std::get<std::string>(*c);
}

std::vector<float> normal_floats(Rng& rng, std::size_t n) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(static_cast<double>(rng.next_u32()) / 4294967296.0 - 0.5);
  return v;
}

}  // namespace

TEST_CASE("gemm job: a point is gemm::run on the same operands; model settings are axes", "[gemm][experiment]") {
  auto e = parse_experiment(R"(name = "g"
job = "gemm"
[sweep]
format = "mxfp8_e4m3"
model = "tensorcore-trunc14"
promote = [0, 128]
acc = ["aligned:14", "aligned:20:nearest"]
m = 3
k = 256
n = 5
data_seed = 7
)",
                            "/tmp/g.toml");
  REQUIRE(e.ok());
  auto points = expand_points(*e);
  REQUIRE(points.ok());
  REQUIRE(points->size() == 4);
  // The operands the job generates: A normal(0,1) of seed data_seed, B of data_seed + 1, as mxlab gemm's.
  gemm::GemmRequest r;
  r.format_a = r.format_b = *parse_block_format("mxfp8_e4m3");
  r.m = 3, r.k = 256, r.n = 5;
  ops::InputRequest in;
  in.input = "gen:normal:0,1";
  in.shape = "3x256";
  in.seed = 7;
  r.a = ops::load_tensor(in)->exact_values();
  in.shape = "256x5";
  in.seed = 8;
  r.b = ops::load_tensor(in)->exact_values();
  for (const Point& p : *points) {
    INFO(p.key());
    auto res = run_point(*e, p, PointRun{});
    REQUIRE(res.ok());
    REQUIRE(res->at("gemm").size() == 1);
    const Row& row = res->at("gemm").front();
    const std::string model = "tensorcore-trunc14,promote=" + *p.param("promote") + ",acc=" + *p.param("acc");
    r.models = {*gemm::parse_model(model)};
    auto want = gemm::run(r);
    REQUIRE(want.ok());
    CHECK(text(row, "definition") == gemm::describe(r.models[0]));
    CHECK(text(row, "shape") == "3x256x5");
    CHECK(number(row, "acc_sqnr_db") == want->models[0].vs_exact.sqnr_db);
    CHECK(number(row, "acc_max_rel_error") == want->models[0].vs_exact.max_rel_error);
    CHECK(number(row, "total_mean_rel_error") == want->models[0].vs_fp32.mean_rel_error);
    CHECK(number(row, "format_p99_rel_error") == want->exact_vs_fp32.p99_rel_error);
    CHECK(number(row, "count") == 15);
    const double acc = want->models[0].vs_exact.noise, fmt = want->exact_vs_fp32.noise;
    CHECK(acc > 0);
    CHECK(number(row, "acc_share") == acc / (acc + fmt));
  }
}

TEST_CASE("gemm job: the layers of a model are B (a safetensors file)", "[gemm][experiment]") {
  Folder dir;
  Rng rng(31);
  const auto w1 = normal_floats(rng, 6 * 64), w2 = normal_floats(rng, 4 * 96);
  gemm_test::write_safetensors(dir.path / "model.safetensors", {{"fc1.weight", 6, 64, w1}, {"fc2.weight", 4, 96, w2}});
  const std::string toml = "name = \"layers\"\njob = \"gemm\"\n[inputs.model]\nweights = \"model.safetensors\"\n"
                           "select = \"*.weight\"\nkernels = false\nlayout = \"last\"\n"
                           "[sweep]\nformat = \"mxfp4\"\nmodel = \"ocp-dot-fp32\"\nm = 2\ninput = \"model\"\n";
  auto e = parse_experiment(toml, (dir.path / "layers.toml").string());
  REQUIRE(e.ok());
  auto points = expand_points(*e);
  REQUIRE(points.ok());
  REQUIRE(points->size() == 2);
  for (const Point& p : *points) {
    const bool first = *p.param("layer") == "fc1.weight";
    INFO(p.key());
    REQUIRE(!check_point(*e, p));
    auto res = run_point(*e, p, PointRun{});
    REQUIRE(res.ok());
    const Row& row = res->at("gemm").front();
    CHECK(text(row, "shape") == (first ? "2x64x6" : "2x96x4"));
    // The same GEMM by hand: the layer [N, K] is B's transpose; A is normal(0,1) of seed 0.
    const auto& w = first ? w1 : w2;
    const std::int64_t n = first ? 6 : 4, k = first ? 64 : 96;
    gemm::GemmRequest r;
    r.format_a = r.format_b = *parse_block_format("mxfp4");
    r.models = {*gemm::parse_model("ocp-dot-fp32")};
    r.m = 2, r.k = k, r.n = n;
    ops::InputRequest in;
    in.input = "gen:normal:0,1";
    in.shape = "2x" + std::to_string(k);
    r.a = ops::load_tensor(in)->exact_values();
    r.b.resize(static_cast<std::size_t>(k * n));
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t q = 0; q < k; ++q)
        r.b[static_cast<std::size_t>(q * n + j)] = static_cast<double>(w[static_cast<std::size_t>(j * k + q)]);
    auto want = gemm::run(r);
    REQUIRE(want.ok());
    CHECK(number(row, "acc_sqnr_db") == want->models[0].vs_exact.sqnr_db);
    CHECK(number(row, "total_sqnr_db") == want->models[0].vs_fp32.sqnr_db);
  }
}

TEST_CASE("gemm job: bad points name the point and the problem", "[gemm][experiment]") {
  auto file = [](const std::string& sweep) {
    return parse_experiment("name = \"bad\"\njob = \"gemm\"\n[sweep]\nformat = \"mxfp4\"\n" + sweep, "/tmp/bad.toml");
  };
  // An axis the job does not have is refused with the file.
  auto unknown = file("m = 2\nk = 32\nn = 2\ncolour = \"red\"\n");
  REQUIRE(!unknown.ok());
  CHECK(unknown.error().message.find("colour") != std::string::npos);
  struct Case {
    std::string sweep, message;
  };
  auto first_point = [&](const std::string& sweep) {
    auto e = file(sweep);
    REQUIRE(e.ok());
    auto points = expand_points(*e);
    REQUIRE(points.ok());
    return std::make_pair(*e, points->front());
  };
  for (const Case& c : std::vector<Case>{{"m = 2\nk = 32\nn = 2\nmodel = \"nope\"\n", "not a preset"},
                                         {"m = 2\nk = 32\nn = 2\ngroup = 0\n", "group=0"},
                                         {"m = 2\nk = 32\nn = 2\nacc = \"aligned:40\"\n", "aligned:40"}}) {
    INFO(c.sweep);
    const auto [e, point] = first_point(c.sweep);
    auto err = check_point(e, point);
    REQUIRE(err);
    CHECK(err->message.find(c.message) != std::string::npos);
    CHECK(err->message.find("/tmp/bad.toml") != std::string::npos);
  }
  for (const Case& c : std::vector<Case>{{"k = 32\nn = 2\n", "needs m"},
                                         {"m = 2\nn = 2\n", "needs k and n"},
                                         {"m = 0\nk = 32\nn = 2\n", "m = '0'"},
                                         {"m = 2\nk = 33\nn = 2\noutput = \"e9m99\"\n", "output = 'e9m99'"},
                                         {"m = 2\nk = 32\nn = 2\na_input = \"none\"\n", "names no input"}}) {
    INFO(c.sweep);
    const auto [e, point] = first_point(c.sweep);
    auto res = run_point(e, point, PointRun{});
    REQUIRE(!res.ok());
    CHECK(res.error().message.find(c.message) != std::string::npos);
  }
}
