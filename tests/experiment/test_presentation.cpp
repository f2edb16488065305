// What an experiment makes of its results for a paper: column types of plots, tables with fixed decimals and a
// LaTeX table environment, the plot vocabulary, parameters never hidden by measurements, and `mxlab render`
// redrawing a results folder from its stored results.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <set>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/cli.hpp"
#include "cli/progress_bar.hpp"
#include "mxlab/experiment/experiment.hpp"
#include "mxlab/experiment/outputs.hpp"
#include "mxlab/experiment/runner.hpp"
#include "experiment/experiment_support.hpp"
#include "support/train_data.hpp"

namespace fs = std::filesystem;
using namespace mxlab;
using namespace mxlab::experiment;
using mxlab_test::run_cli;
using mxlab_test::Scratch;

namespace {

Experiment parse(const std::string& text) {
  auto e = parse_experiment(text, "p.toml");
  INFO((e ? "" : e.error().message));
  REQUIRE(e);
  return *e;
}

Row row(std::initializer_list<std::pair<std::string, Cell>> cells) {
  Row r;
  for (const auto& [k, v] : cells) r.add(k, v);
  return r;
}

const char* kHead = "name = \"p\"\njob = \"analyze\"\n[inputs.n]\nsource = \"gen:normal:0,1\"\nshape = \"256\"\n[sweep]\nformat = "
                    "[\"mxfp4\"]\ninput = \"n\"\n";

}  // namespace

TEST_CASE("a numeric column with empty cells is numeric; numbers mixed with text are an error naming the column",
          "[experiment]") {
  // val_loss exists on evaluation steps only: the other steps hold an empty cell.
  AllResults r;
  const double losses[] = {1.2814, 1.1, 1.0147};
  for (int step = 1; step <= 9; ++step)
    r["steps"].push_back(row({{"recipe", std::string("fp32")}, {"step", double(step)},
                              {"val_loss", step % 3 == 0 ? Cell(losses[step / 3 - 1]) : Cell(std::string(""))}}));
  const Experiment e = parse(std::string(kHead) + "[[plot]]\nname = \"v\"\nfrom = \"steps\"\nx = \"step\"\ny = \"val_loss\"\n");
  auto f = build_figure(e, e.plots[0], r);
  REQUIRE(f);
  CHECK(f->y.tick_labels.empty());  // numbers, not text categories
  CHECK(f->x.tick_labels.empty());
  REQUIRE(f->series.size() == 1);
  CHECK(f->series[0].x == std::vector<double>{3, 6, 9});  // the empty steps are left out, not drawn at ""
  CHECK(f->series[0].y == std::vector<double>{1.2814, 1.1, 1.0147});
  // In results/steps.csv the column is numeric too (its JSON holds numbers).
  const Table t = result_table(r["steps"]);
  CHECK(t.numeric[2]);

  r["steps"].push_back(row({{"recipe", std::string("fp32")}, {"step", 10.0}, {"val_loss", std::string("n/a")}}));
  auto mixed = build_figure(e, e.plots[0], r);
  REQUIRE(!mixed);
  CHECK_THAT(mixed.error().message, Catch::Contains("column 'val_loss' mixes numbers") && Catch::Contains("'n/a'") &&
                                        Catch::Contains("p.toml:"));
}

TEST_CASE("tables: fixed decimals per column, header names, a LaTeX table environment with caption and label",
          "[experiment]") {
  AllResults r;
  const double sqnr[] = {19.0, 18.6, 30.74, 41.6386};
  const char* formats[] = {"mxfp4", "nvfp4", "mxfp8_e4m3", "mxint8"};
  for (int i = 0; i < 4; ++i)
    r["metrics"].push_back(row({{"format", std::string(formats[i])}, {"sqnr_db", sqnr[i]}, {"mse", 1e-2 / (i * 100 + 1)},
                                {"blocks", double(32 * (i + 1))}}));
  const Experiment e = parse(std::string(kHead) +
                             "[[table]]\nname = \"t\"\nrows = [\"format\"]\nvalues = [\"sqnr_db\", \"mse\", \"blocks\"]\ndigits = 3\n"
                             "caption = \"SQNR (dB) & MSE\"\nheader = { format = \"Format\", sqnr_db = \"SQNR (dB)\" }\n"
                             "[[table]]\nname = \"u\"\nrows = [\"format\"]\nvalues = [\"sqnr_db\"]\ndecimals = { sqnr_db = 2 }\n"
                             "label = \"tab:sqnr\"\n");
  auto t = build_table(e, e.tables[0], r);
  REQUIRE(t);
  CHECK(t->columns == std::vector<std::string>{"Format", "SQNR (dB)", "mse", "blocks"});
  // One column, one number of decimals: 19.0 next to 18.6, never 19 next to 18.6.
  CHECK(t->rows[0][1] == "19.0");
  CHECK(t->rows[1][1] == "18.6");
  CHECK(t->rows[3][1] == "41.6");
  // A column over several decades: scientific notation with a fixed mantissa.
  CHECK(t->rows[0][2] == "1.00e-02");
  CHECK(t->rows[3][2] == "3.32e-05");
  CHECK(t->rows[2][3] == "96");  // whole numbers stay whole
  auto u = build_table(e, e.tables[1], r);
  REQUIRE(u);
  CHECK(u->rows[0][1] == "19.00");
  CHECK(u->rows[2][1] == "30.74");
  const std::string tex = table_latex(*t, e.tables[0]);
  CHECK(tex.rfind("\\begin{table}", 0) == 0);
  CHECK_THAT(tex, Catch::Contains("\\caption{SQNR (dB) \\& MSE}") && Catch::Contains("\\label{tab:t}") &&
                      Catch::Contains("Format & SQNR (dB)") && Catch::EndsWith("\\end{tabular}\n\\end{table}\n"));
  CHECK_THAT(table_latex(*u, e.tables[1]), Catch::Contains("\\label{tab:sqnr}"));
  // A header for a column the table does not have is named.
  const Experiment bad = parse(std::string(kHead) + "[[table]]\nname = \"t\"\nrows = [\"format\"]\nvalues = [\"sqnr_db\"]\n"
                                                    "header = { sqnr = \"SQNR\" }\n");
  auto b = build_table(bad, bad.tables[0], r);
  REQUIRE(!b);
  CHECK_THAT(b.error().message, Catch::Contains("header names no column 'sqnr'"));
}

TEST_CASE("plots: a scatter keeps several points at one x; labels, spread, smoothing, facets and size", "[experiment]") {
  AllResults r;
  for (int layer = 0; layer < 5; ++layer)
    for (const char* fmt : {"mxfp4", "nvfp4"})
      for (int seed = 0; seed < 3; ++seed)
        r["metrics"].push_back(row({{"format", std::string(fmt)}, {"layer", "l" + std::to_string(layer)}, {"seed", double(seed)},
                                    {"block", 32.0}, {"sqnr_db", 10.0 + layer + seed + (fmt[0] == 'n')}}));
  const Experiment e = parse(
      std::string(kHead) +
      "[[plot]]\nname = \"s\"\nkind = \"scatter\"\nx = \"block\"\ny = \"sqnr_db\"\nseries = \"format\"\n"
      "labels = { mxfp4 = \"MXFP4\", nvfp4 = \"NVFP4\" }\nwidth = 7\nheight = 3\nfont_size = 9\n"
      "[[plot]]\nname = \"e\"\nkind = \"line\"\nx = \"layer\"\ny = \"sqnr_db\"\nseries = \"format\"\nspread = \"minmax\"\n"
      "facet = \"format\"\n"
      "[[plot]]\nname = \"m\"\nkind = \"line\"\nx = \"seed\"\ny = \"sqnr_db\"\nseries = \"format\"\nwhere = { layer = \"l0\" }\n"
      "smooth = 3\n"
      "[[plot]]\nname = \"h\"\nkind = \"heatmap\"\nx = \"format\"\ny = \"layer\"\nvalue = \"sqnr_db\"\nwhere = { seed = 0 }\n"
      "value_label = \"SQNR (dB)\"\nlabels = { mxfp4 = \"MXFP4\" }\n");
  auto s = build_figure(e, e.plots[0], r);
  REQUIRE(s);
  REQUIRE(s->series.size() == 2);
  CHECK(s->series[0].name == "MXFP4");
  CHECK(s->series[0].x.size() == 15);  // every layer and seed at block 32
  CHECK(s->width_in == 7);
  CHECK(s->font_pt == 9);
  auto band = build_figure(e, e.plots[1], r);
  REQUIRE(band);
  CHECK(band->facets == std::vector<std::string>{"mxfp4", "nvfp4"});
  REQUIRE(band->series.size() == 2);
  CHECK(band->series[1].facet == 1);
  CHECK(band->series[0].y[0] == 11);  // the mean of seeds 0, 1, 2
  CHECK(band->series[0].lo[0] == 10);
  CHECK(band->series[0].hi[0] == 12);
  CHECK_THAT(figure_json(*band), Catch::Contains("\"lo\":[10,") && Catch::Contains("\"facets\":[\"mxfp4\",\"nvfp4\"]"));
  auto smooth = build_figure(e, e.plots[2], r);
  REQUIRE(smooth);
  CHECK(smooth->series[0].raw == std::vector<double>{10, 11, 12});
  CHECK(smooth->series[0].y == std::vector<double>{10.5, 11, 11.5});
  auto heat = build_figure(e, e.plots[3], r);
  REQUIRE(heat);
  CHECK(heat->heatmap.value_label == "SQNR (dB)");
  CHECK(heat->heatmap.x_labels == std::vector<std::string>{"MXFP4", "nvfp4"});
  // Keys checked as they are read.
  for (const auto& [key, message] : std::vector<std::pair<std::string, std::string>>{
           {"spread = \"sd\"", "expected std"}, {"width = 100", "from 1 to 20"}, {"smooth = 4\nkind = \"bar\"", "smooths lines only"}}) {
    auto bad = parse_experiment(std::string(kHead) + "[[plot]]\nname = \"b\"\nx = \"block\"\ny = \"sqnr_db\"\n" + key + "\n", "b.toml");
    REQUIRE(!bad);
    CHECK_THAT(bad.error().message, Catch::Contains(message) && Catch::Contains("b.toml:"));
  }
}

TEST_CASE("plots: where takes a list of values; markers of a series' rows ring its point at the crossover", "[experiment]") {
  AllResults r;
  for (const char* b : {"e4m3", "e5m2", "int8"})
    for (int gap = 0; gap < 4; ++gap)
      r["bounds"].push_back(row({{"a", std::string("e4m3")}, {"b", std::string(b)}, {"gap", double(gap)},
                                 {"max_rel_B", 0.1 * (gap + 1) * (b[1] == '5' ? 2 : 1)}}));
  r["pairs"].push_back(row({{"a", std::string("e4m3")}, {"b", std::string("e5m2")}, {"crossover_gaps", std::string("2")}}));
  r["pairs"].push_back(row({{"a", std::string("e4m3")}, {"b", std::string("int8")}, {"crossover_gaps", std::string("none")}}));
  const Experiment e = parse(std::string(kHead) +
                             "[[plot]]\nname = \"p\"\nfrom = \"bounds\"\nx = \"gap\"\ny = \"max_rel_B\"\nseries = \"b\"\n"
                             "where = { a = \"e4m3\", b = [\"e4m3\", \"e5m2\"] }\nmarkers = \"pairs.crossover_gaps\"\n"
                             "marker_label = \"crossover\"\nlabels = { e5m2 = \"E5M2\" }\n");
  auto f = build_figure(e, e.plots[0], r);
  INFO((f ? "" : f.error().message));
  REQUIRE(f);
  REQUIRE(f->series.size() == 2);  // int8 is not in the list
  CHECK(f->series[1].name == "E5M2");
  REQUIRE(f->markers.size() == 1);  // int8's row is not selected; "none" is no number
  CHECK(f->markers[0].x == 2);
  CHECK(f->markers[0].series == "E5M2");
  CHECK(f->markers[0].y == 0.1 * (2 + 1) * 2);  // e5m2 at gap 2, as the rows hold it
  CHECK(f->markers[0].label == "crossover");
  CHECK_THAT(figure_json(*f), Catch::Contains("\"series\":\"E5M2\""));
  auto bad = parse_experiment(std::string(kHead) + "[[plot]]\nname = \"b\"\nx = \"block\"\ny = \"sqnr_db\"\nwhere = { format = [] }\n", "b.toml");
  REQUIRE(!bad);
  CHECK_THAT(bad.error().message, Catch::Contains("selects no rows") && Catch::Contains("b.toml:"));
}

TEST_CASE("a swept parameter is never hidden by a measurement of the same name", "[experiment]") {
  Scratch f;
  mxlab_test::write_digits(f.dir / "data");
  ::setenv("MXLAB_DATA_DIR", (f.dir / "data").c_str(), 1);
  const std::string file = f.put("lr.toml", R"(name = "lr"
job = "train"
[sweep]
model = "mlp"
data = "digits"
steps = 4
batch = 16
hidden = 8
lr = [0.001, 0.003]
recipe = "fp32"
)");
  std::string out, err;
  const int rc = run_cli({"run", file, "--out", (f.dir / "r").string(), "--quiet"}, &out, &err);
  ::unsetenv("MXLAB_DATA_DIR");
  INFO(err);
  REQUIRE(rc == 0);
  std::ifstream csv(f.dir / "r" / "results" / "steps.csv");
  std::string header, line;
  std::getline(csv, header);
  CHECK_THAT(header, Catch::Contains("step_lr"));
  std::vector<std::string> names;
  std::stringstream hs(header);
  for (std::string c; std::getline(hs, c, ',');) names.push_back(c);
  CHECK(std::count(names.begin(), names.end(), "lr") == 1);
  // The lr column holds the swept values: one group per point, as pandas' groupby("lr") should see it.
  const auto col = static_cast<std::size_t>(std::find(names.begin(), names.end(), "lr") - names.begin());
  std::set<std::string> lrs;
  while (std::getline(csv, line)) {
    std::stringstream ls(line);
    std::string c;
    for (std::size_t i = 0; i <= col; ++i) std::getline(ls, c, ',');
    lrs.insert(c);
  }
  CHECK(lrs == std::set<std::string>{"0.001", "0.003"});
  PointResult twice;
  twice["steps"].push_back(row({{"lr", 0.001}, {"step", 1.0}, {"lr", 0.0005}}));
  CHECK(repeated_column(twice) == std::optional<std::string>("steps.lr"));
}

TEST_CASE("a training point inside mxlab run reports its steps: counts, rate and ETA within the run's points",
          "[experiment]") {
  Scratch f;
  mxlab_test::write_digits(f.dir / "data");
  ::setenv("MXLAB_DATA_DIR", (f.dir / "data").c_str(), 1);
  const Experiment e = parse("name = \"t\"\njob = \"train\"\n[sweep]\nmodel = \"mlp\"\ndata = \"digits\"\nsteps = 6\n"
                             "batch = 16\nhidden = 8\nrecipe = [\"fp32\", \"mxfp8\"]\n");
  RunOptions o;
  o.out_dir = (f.dir / "r").string();
  std::vector<Progress> seen;
  o.reporter.on_progress = [&](const Progress& p) { seen.push_back(p); };
  auto s = run_experiment(e, o);
  ::unsetenv("MXLAB_DATA_DIR");
  REQUIRE(s);
  std::set<std::string> parts;
  std::int64_t most = 0;
  for (const Progress& p : seen)
    if (p.part_total > 0) {
      CHECK(p.total == 2);  // the run's points around the point's steps
      CHECK(p.part_total == 6);
      parts.insert(p.part);
      most = std::max(most, p.part_done);
    }
  CHECK(parts == std::set<std::string>{"point 0 train", "point 1 train"});
  CHECK(most == 6);
  // Validation as in mxlab train: every steps/10 (here every step), not only after the last.
  std::ifstream csv(f.dir / "r" / "results" / "steps.csv");
  std::string header, line;
  std::getline(csv, header);
  std::vector<std::string> names;
  std::stringstream hs(header);
  for (std::string c; std::getline(hs, c, ',');) names.push_back(c);
  const auto col = static_cast<std::size_t>(std::find(names.begin(), names.end(), "val_loss") - names.begin());
  REQUIRE(col < names.size());
  std::size_t rows = 0, with_val = 0;
  while (std::getline(csv, line)) {
    std::stringstream ls(line);
    std::string c;
    for (std::size_t i = 0; i <= col; ++i) std::getline(ls, c, ',');
    ++rows;
    with_val += !c.empty();
  }
  CHECK(rows == 12);
  CHECK(with_val == 12);
  // The bar prints the point's steps after the run's count (a plain line when standard error is no terminal).
  std::ostringstream err;
  cli::ProgressBar bar(err, "points", false);
  Progress p;
  p.total = 2;
  p.stage = "points";
  p.part_done = 3;
  p.part_total = 6;
  p.part = "point 0 train";
  bar.update(p);
  CHECK_THAT(err.str(), Catch::StartsWith("progress: 0/2 points") && Catch::Contains("| point 0 train 3/6") &&
                            Catch::Contains("/s  ETA "));
}

TEST_CASE("check --update-golden writes the golden file; failures name row keys and the values that exist",
          "[experiment]") {
  Scratch f;
  const std::string file = f.put("g.toml", std::string(kHead) +
                                               "[[table]]\nname = \"t\"\nrows = [\"format\"]\nvalues = [\"sqnr_db\"]\ndecimals = 3\n"
                                               "[[expect]]\nname = \"golden\"\ngolden = \"golden/t.csv\"\ntable = \"t\"\n"
                                               "[[expect]]\nname = \"none\"\nwhere = { format = \"mxfp9\" }\nmetric = \"sqnr_db\"\n"
                                               "at_least = 0\n");
  const std::string out = (f.dir / "r").string(), golden = (f.dir / "golden" / "t.csv").string();
  std::string o1, e1;
  CHECK(run_cli({"check", file, "--out", out, "--quiet"}, &o1, &e1) == 1);
  CHECK_THAT(o1, Catch::Contains("--update-golden` writes it from the table"));
  // Nothing selected: the values the column holds are named.
  CHECK_THAT(o1, Catch::Contains("selects no result rows; format holds mxfp4"));
  std::string o2, e2;
  CHECK(run_cli({"check", file, "--out", out, "--quiet", "--update-golden"}, &o2, &e2) == 1);  // "none" still fails
  CHECK_THAT(o2, Catch::Contains("golden file " + golden + " written from table 't' (2 lines)") &&
                     Catch::Contains("expectation 'golden' passed"));
  const std::string written = mxlab_test::read_file(golden);
  CHECK_THAT(written, Catch::StartsWith("format,sqnr_db\nmxfp4,"));
  CHECK_FALSE(fs::exists(golden + ".tmp"));
  // A changed value is named by its row key and column, never by a line of the CSV.
  const std::string value = written.substr(written.rfind(',') + 1, written.size() - written.rfind(',') - 2);
  std::ofstream(golden) << "format,sqnr_db\nmxfp4,1.000\n";
  std::string o3, e3;
  CHECK(run_cli({"check", file, "--out", out, "--quiet"}, &o3, &e3) == 1);
  CHECK_THAT(o3, Catch::Contains("row format=mxfp4, column 'sqnr_db': " + value + ", golden 1.000") && !Catch::Contains("line 2"));
  std::ofstream(golden) << "format,sqnr_db\nmxfp6,1.000\n";
  std::string o4, e4;
  CHECK(run_cli({"check", file, "--out", out, "--quiet"}, &o4, &e4) == 1);
  CHECK_THAT(o4, Catch::Contains("row format=mxfp4: not in the golden file") &&
                     Catch::Contains("row format=mxfp6: in the golden file, not in the table"));
  std::string o5, e5;
  CHECK(run_cli({"check", file, "--out", out, "--quiet", "--update-golden"}, &o5, &e5) == 1);
  CHECK_THAT(o5, Catch::Contains("golden file " + golden + " updated"));
  CHECK(mxlab_test::read_file(golden) == written);
}

TEST_CASE("render rebuilds tables, plots and checks from the stored results; a changed computation is refused",
          "[experiment]") {
  Scratch f;
  const std::string body = std::string(kHead) +
                           "[[table]]\nname = \"t\"\nrows = [\"format\"]\nvalues = [\"sqnr_db\"]\ncaption = \"old\"\n"
                           "[[plot]]\nname = \"p\"\nkind = \"bar\"\nx = \"format\"\ny = \"sqnr_db\"\ntitle = \"old title\"\n";
  const std::string file = f.put("p.toml", body);
  const std::string out_dir = (f.dir / "r").string();
  REQUIRE(run_cli({"run", file, "--out", out_dir, "--quiet"}) == 0);
  std::ifstream db_in(f.dir / "r" / "results.sqlite", std::ios::binary);
  std::stringstream db_before;
  db_before << db_in.rdbuf();

  // Only the title and caption change: --resume points to render, and render redraws without running a point.
  std::string edited = body;
  edited.replace(edited.find("old title"), 9, "new title");
  edited.replace(edited.find("\"old\""), 5, "\"new\"");
  edited += "[[table]]\nname = \"extra\"\nrows = [\"format\"]\nvalues = [\"mse\"]\n";
  const std::string file2 = f.put("p2.toml", edited);
  std::string out, err;
  CHECK(run_cli({"run", file2, "--out", out_dir, "--resume", "--quiet"}, &out, &err) == 2);
  CHECK_THAT(err, Catch::Contains("mxlab render " + out_dir + " " + file2));
  REQUIRE(run_cli({"render", out_dir, file2}, &out, &err) == 0);
  CHECK_THAT(out, Catch::Contains("1 points: 0 run, 1 kept"));
  std::ifstream json(f.dir / "r" / "plots" / "p.json");
  std::stringstream js;
  js << json.rdbuf();
  CHECK_THAT(js.str(), Catch::Contains("\"title\":\"new title\""));
  CHECK(fs::exists(f.dir / "r" / "tables" / "extra.csv"));
  std::ifstream md(f.dir / "r" / "tables" / "t.md");
  std::string first;
  std::getline(md, first);
  CHECK(first == "new");
  std::ifstream db_after_in(f.dir / "r" / "results.sqlite", std::ios::binary);
  std::stringstream db_after;
  db_after << db_after_in.rdbuf();
  CHECK(db_after.str() == db_before.str());  // the results are left as they are

  // A file that computes something else is refused, naming the key; nothing is written.
  std::string other = body;
  other.replace(other.find("shape = \"256\""), 13, "shape = \"512\"");
  const std::string file3 = f.put("p3.toml", other);
  fs::remove(f.dir / "r" / "tables" / "t.csv");
  CHECK(run_cli({"render", out_dir, file3}, &out, &err) == 2);
  CHECK_THAT(err, Catch::Contains("inputs.n.shape") && Catch::Contains("mxlab run"));
  CHECK(!fs::exists(f.dir / "r" / "tables" / "t.csv"));
  // A folder without results, and no folder at all.
  CHECK(run_cli({"render", (f.dir / "none").string()}, &out, &err) == 2);
  CHECK_THAT(err, Catch::Contains("does not exist"));
  // With the stored file alone, the old presentation comes back.
  REQUIRE(run_cli({"render", out_dir}, &out, &err) == 0);
  std::ifstream json2(f.dir / "r" / "plots" / "p.json");
  std::stringstream js2;
  js2 << json2.rdbuf();
  CHECK_THAT(js2.str(), Catch::Contains("\"title\":\"old title\""));
}
