// Checks the mxlab CLI's outputs, exit codes and messages against the documented contract and the spec tables.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "cli/cli.hpp"
#include "cli/terminal_table.hpp"
#include "mxlab/formats/catalogue.hpp"
#include "mxlab/io/distributions.hpp"
#include "mxlab/io/npy.hpp"
#include "mxlab/ops/ops.hpp"
#include "mxlab/quantize/quantize.hpp"
#include "support/cli_run.hpp"

using namespace mxlab;

namespace {
using Run = mxlab_test::CliRun;

Run run(std::vector<std::string> args, const std::string& input = "") { return mxlab_test::run_cli(std::move(args), input); }

std::vector<std::string> lines(const std::string& s) { return mxlab_test::text_lines(s); }

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> cells;
  std::string cur;
  bool quoted = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      cells.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  cells.push_back(cur);
  return cells;
}

std::size_t column(const std::string& header, const std::string& name) {
  const auto cells = split_csv(header);
  for (std::size_t i = 0; i < cells.size(); ++i)
    if (cells[i] == name) return i;
  FAIL("no column " << name << " in " << header);
  return 0;
}
}  // namespace

TEST_CASE("every command has --help and exits 0", "[cli]") {
  for (const char* cmd : {"formats", "codepoints", "cast", "golden", "quantize", "dequantize", "analyze", "bounds"}) {
    INFO(cmd);
    const Run r = run({cmd, "--help"});
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("usage: mxlab"));
  }
  // The main help lists each command once, and each listed command has its own help.
  const Run main = run({"--help"});
  CHECK(main.code == 0);
  std::istringstream lines(main.out.substr(main.out.find("commands:\n") + 10));
  std::set<std::string> listed;
  for (std::string line; std::getline(lines, line) && line.rfind("  ", 0) == 0;) {
    const std::string name = line.substr(2, line.find(' ', 2) - 2);
    INFO(name);
    CHECK(listed.insert(name).second);
    const Run r = run({name, "--help"});
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("usage: mxlab " + name));
  }
  CHECK(listed.count("train") == 1);
  CHECK(listed.count("gradients") == 1);
  CHECK(run({}).code == 2);
}

TEST_CASE("formats lists every catalogue row with derived columns", "[cli]") {
  const Run r = run({"formats", "--csv"});
  REQUIRE(r.code == 0);
  const auto ls = lines(r.out);
  REQUIRE(ls.size() == catalogue_rows().size() + 1);
  for (const char* c : {"name", "aliases", "bits", "exponent_bits", "mantissa_bits", "bias", "emax", "max_finite",
                        "min_normal", "min_subnormal", "finite_codes", "has_inf", "has_nan"})
    CHECK_THAT(ls[0], Catch::Contains(c));
  const std::size_t name = column(ls[0], "name"), max = column(ls[0], "max_finite"), finite = column(ls[0], "finite_codes");
  bool seen = false;
  for (const auto& l : ls) {
    const auto cells = split_csv(l);
    if (cells[name] == "float8_e4m3fn") {
      CHECK(cells[max] == "448");
      CHECK(cells[finite] == "254");
      seen = true;
    }
  }
  CHECK(seen);
  const Run j = run({"formats", "--json"});
  CHECK(j.code == 0);
  CHECK_THAT(j.out, Catch::Contains("\"max_finite\": 57344"));
  CHECK(run({"formats", "--md"}).code == 0);
  CHECK(run({"formats", "--csv", "--json"}).code == 2);
}

TEST_CASE("codepoints: header, one row per code, exact values", "[cli]") {
  const Run r = run({"codepoints", "float8_e4m3fn", "--csv"});
  REQUIRE(r.code == 0);
  const auto ls = lines(r.out);
  REQUIRE(ls.size() == 257);
  const std::size_t code = column(ls[0], "code"), value = column(ls[0], "value"), exact = column(ls[0], "exact"),
                    cls = column(ls[0], "class"), gap = column(ls[0], "gap_up");
  const auto row7e = split_csv(ls[1 + 0x7E]);
  CHECK(row7e[code] == "126");
  CHECK(row7e[value] == "448");
  CHECK(row7e[exact] == "448");
  CHECK(row7e[gap] == "");  // the largest value has no next larger value
  const auto row1 = split_csv(ls[2]);
  CHECK(row1[exact] == "0.001953125");  // 2^-9
  CHECK(row1[cls] == "subnormal");
  CHECK(split_csv(ls[1 + 0x7F])[value] == "nan");
  CHECK(split_csv(ls[1 + 0x7F])[cls] == "nan");
}

TEST_CASE("codepoints: streamed rows equal the table's, byte for byte", "[cli]") {
  // Ranges of more than 65536 codes are written row by row without a table; windows of them through
  // codepoint_table (exact values from multiprecision) must give the same rows.
  auto rows = [](const std::string& csv) {  // after the comment lines and the header
    std::size_t at = 0;
    while (at < csv.size() && csv[at] == '#') at = csv.find('\n', at) + 1;
    const std::size_t header_end = csv.find('\n', at);
    REQUIRE(header_end != std::string::npos);
    return csv.substr(header_end + 1);
  };
  auto hex = [](std::uint64_t v) {
    std::ostringstream o;
    o << "0x" << std::hex << v;
    return o.str();
  };
  struct Case {
    const char* format;
    std::uint64_t first;
    std::vector<std::string> extra;
  };
  const std::vector<Case> cases = {
      {"float32", 0x00000000U, {}},  // zero and subnormals: decimals of up to 149 places
      {"float32", 0x80000000U, {}},  // their negatives
      {"float32", 0x3F7F8000U, {}},  // around 1
      {"float32", 0x4B7F8000U, {}},  // integers around 2^24
      {"float32", 0x7F7F8000U, {}},  // the largest values, Inf and NaN (in the middle window)
      {"float32", 0x7F7F8000U, {"--columns", "exact,value,gap_up,code"}},
      {"float32", 0xBF7F8000U, {}},  // around -1
      {"e11m20ieee", 0x00000000U, {}},  // down to 2^-1042: decimals of over a thousand places
      {"e11m20ieee", 0x7FEF8000U, {}},  // up to 2^1024 (1 - 2^-21), Inf, NaN: integers of 309 digits
      {"e11m20ieee", 0x800FF800U, {}},  // negative subnormals and normals around 2^-1022
  };
  for (const Case& c : cases) {
    INFO(c.format << " from " << hex(c.first));
    auto with = [&](std::uint64_t a, std::uint64_t b) {
      std::vector<std::string> args = {"codepoints", c.format, "--range", hex(a) + ":" + hex(b), "--csv"};
      args.insert(args.end(), c.extra.begin(), c.extra.end());
      const Run r = run(args);
      REQUIRE(r.code == 0);
      return lines(rows(r.out));
    };
    const std::vector<std::string> streamed = with(c.first, c.first + 0x10000);  // 65537 codes: streamed
    REQUIRE(streamed.size() == 0x10001);
    // Three windows of 4096 rows (the start, the middle, the end) through the table.
    for (const std::uint64_t at : {std::uint64_t{0}, std::uint64_t{0x7800}, std::uint64_t{0xF001}}) {
      const std::vector<std::string> table = with(c.first + at, c.first + at + 0xFFF);
      REQUIRE(table.size() == 0x1000);
      for (std::size_t i = 0; i < table.size(); ++i) {
        if (streamed[at + i] != table[i]) FAIL_CHECK("row " << at + i << ": " << streamed[at + i] << " vs " << table[i]);
      }
    }
  }
}

TEST_CASE("codepoints of float32 need a range", "[cli]") {
  const Run bad = run({"codepoints", "fp32"});
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Catch::Contains("--range"));
  const Run r = run({"codepoints", "fp32", "--range", "0x3F800000:0x3F800001", "--csv"});
  REQUIRE(r.code == 0);
  const auto ls = lines(r.out);
  REQUIRE(ls.size() == 3);
  CHECK(split_csv(ls[1])[column(ls[0], "value")] == "1");
  CHECK(split_csv(ls[2])[column(ls[0], "exact")] == "1.00000011920928955078125");
  CHECK(run({"codepoints", "fp32", "--range", "5:2"}).code == 2);
  CHECK(run({"codepoints", "fp32", "--range", "x"}).code == 2);
}

TEST_CASE("cast: codes, values and exact errors", "[cli]") {
  const Run r = run({"cast", "e4m3", "460", "0x1.8p+3", "-inf", "nan", "0.1", "--csv"});
  REQUIRE(r.code == 0);
  const auto ls = lines(r.out);
  REQUIRE(ls.size() == 6);
  const std::size_t in = column(ls[0], "input"), code = column(ls[0], "code"), value = column(ls[0], "value"),
                    err = column(ls[0], "error_exact"), flags = column(ls[0], "flags");
  CHECK(split_csv(ls[1])[value] == "448");
  CHECK(split_csv(ls[1])[err] == "-12");
  CHECK(split_csv(ls[2])[in] == "12");
  CHECK(split_csv(ls[2])[value] == "12");
  CHECK(split_csv(ls[3])[value] == "-448");  // saturate: the default for a format without inf
  CHECK_THAT(split_csv(ls[3])[flags], Catch::Contains("overflow"));
  CHECK(split_csv(ls[4])[code] == "127");
  CHECK(split_csv(ls[5])[value] == "0.1015625");
  // 0.1 as a double is 0.1000000000000000055511151231257827021181583404541015625.
  CHECK(split_csv(ls[5])[err] == "0.0015624999999999944488848768742172978818416595458984375");
}

TEST_CASE("cast reads standard input, one value per line", "[cli]") {
  const Run r = run({"cast", "e2m1", "--csv", "--round", "nearest-away"}, "# comment\n2.5\n\n-0.25\n");
  REQUIRE(r.code == 0);
  const auto ls = lines(r.out);
  REQUIRE(ls.size() == 3);
  CHECK(split_csv(ls[1])[column(ls[0], "value")] == "3");
  CHECK(split_csv(ls[2])[column(ls[0], "value")] == "-0.5");
}

TEST_CASE("cast --from rounds the literal to the source type first", "[cli]") {
  const Run r = run({"cast", "fp32", "0.1", "--from", "f16", "--csv"});
  REQUIRE(r.code == 0);
  const auto ls = lines(r.out);
  CHECK(split_csv(ls[1])[column(ls[0], "input")] == "0.0999755859375");
  CHECK(split_csv(ls[1])[column(ls[0], "input_rounded")] == "true");
}

TEST_CASE("stochastic casts are reproducible from the seed", "[cli]") {
  const Run a = run({"cast", "e2m1", "2.5", "2.5", "2.5", "2.5", "--round", "stochastic", "--seed", "7", "--csv"});
  const Run b = run({"cast", "e2m1", "2.5", "2.5", "2.5", "2.5", "--round", "stochastic", "--seed", "7", "--csv"});
  REQUIRE(a.code == 0);
  CHECK(a.out == b.out);
}

TEST_CASE("bad input: exit code 2 and one message naming the input", "[cli]") {
  const mxlab_test::BadInput cases[] = {
      {{"cast", "e4m33", "1"}, "format 'e4m33'"},
      {{"cast", "flaot8_e4m3fn", "1"}, "did you mean"},
      {{"cast", "e4m3", "1.2.3"}, "'1.2.3'"},
      {{"cast", "e4m3", "1", "--round", "sideways"}, "unknown rounding mode 'sideways'"},
      {{"cast", "e4m3", "1", "--overflow", "inf"}, "has no infinity"},
      {{"cast", "e4m3", "1", "--subnormals", "maybe"}, "'maybe'"},
      {{"cast", "e4m3", "1", "--seed", "-3"}, "--seed"},
      {{"cast", "e4m3", "1", "--random-bits", "40"}, "--random-bits"},
      {{"cast", "e4m3", "1", "--bogus"}, "unknown option '--bogus'"},
      {{"cast", "e4m3", "1", "--round"}, "needs a value"},
      {{"codepoints"}, "missing FORMAT"},
      {{"codepoints", "nope"}, "format 'nope'"},
      {{"frobnicate"}, "unknown command"},
      {{"formats", "extra"}, "unexpected argument"},
  };
  for (const auto& c : cases) {
    INFO(c.args[0] << " " << (c.args.size() > 1 ? c.args[1] : ""));
    const Run r = run(c.args);
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK_THAT(r.err, Catch::Contains(c.needle));
    CHECK(lines(r.err).size() == 1);
  }
  const Run stdin_bad = run({"cast", "e4m3"}, "1\n2\nbanana\n");
  CHECK(stdin_bad.code == 2);
  CHECK(stdin_bad.out.empty());
  CHECK_THAT(stdin_bad.err, Catch::Contains("line 3"));
}

TEST_CASE("--out - writes a table to standard output", "[cli]") {
  const Run to_stdout = run({"codepoints", "e2m1", "--csv", "--out", "-"});
  CHECK(to_stdout.code == 0);
  CHECK(to_stdout.out == run({"codepoints", "e2m1", "--csv"}).out);
  CHECK_FALSE(std::filesystem::exists("-"));
}

TEST_CASE("--out writes atomically and leaves nothing behind on failure", "[cli]") {
  const auto dir = std::filesystem::temp_directory_path() / "mxlab_test_cli_out";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto file = (dir / "e2m1.csv").string();
  const Run ok = run({"codepoints", "e2m1", "--csv", "--out", file});
  CHECK(ok.code == 0);
  std::ifstream in(file);
  std::string first;
  std::getline(in, first);
  CHECK_THAT(first, Catch::StartsWith("code,"));  // plain CSV: the header row first
  std::ifstream side(file + ".provenance.json");
  std::string prov;
  std::getline(side, prov);
  CHECK_THAT(prov, Catch::StartsWith("{\"version\": "));
  const Run bad = run({"codepoints", "e2m1", "--csv", "--out", (dir / "missing" / "x.csv").string()});
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Catch::Contains("missing/x.csv"));
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++files;
  CHECK(files == 2);  // e2m1.csv and its provenance, nothing of the failed write
  std::filesystem::remove_all(dir);
}

// Every CSV mxlab writes reads back with Python's csv module: one header, the same number of cells per row.
TEST_CASE("CSV files read back with a standard CSV reader", "[cli]") {
  if (std::system("python3 -c 'import csv' 2>/dev/null") != 0) {
    WARN("python3 is not installed: skipped");
    return;
  }
  const auto dir = std::filesystem::temp_directory_path() / "mxlab_test_cli_csv";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string d = dir.string();
  const std::vector<std::vector<std::string>> commands = {
      {"formats", "--csv", "--out", d + "/formats.csv"},
      {"codepoints", "e4m3", "--csv", "--out", d + "/codepoints.csv"},
      {"codepoints", "float32", "--range", "0x3f800000:0x3f81ffff", "--csv", "--out", d + "/codepoints_big.csv"},
      {"cast", "e2m1", "0.1", "2.5", "7", "--csv", "--out", d + "/cast.csv"},
      {"analyze", "mxfp4", "nvfp4", "--input", "gen:normal:0,1", "--shape", "4x64", "--csv", "--out", d + "/analyze.csv"},
      {"analyze", "mxfp4", "--input", "gen:normal:0,1", "--gaps", "--csv", "--out", d + "/gaps.csv"},
      {"bounds", "mxint8", "boost_e2m5", "--csv", "--out", d + "/bounds.csv"},
  };
  const std::string check =
      "import csv, sys\n"
      "rows = list(csv.reader(open(sys.argv[1], newline='')))\n"
      "assert len(rows) >= 2, 'no data rows'\n"
      "assert all(len(r) == len(rows[0]) for r in rows), 'ragged rows'\n"
      "assert not rows[0][0].startswith('#'), 'comment line'\n";
  {
    std::ofstream py(d + "/check.py");
    py << check;
  }
  for (const auto& c : commands) {
    INFO(c[0] << " " << c.back());
    const Run r = run(c);
    REQUIRE(r.code == 0);
    CHECK(std::system(("python3 " + d + "/check.py " + c.back()).c_str()) == 0);
    CHECK(std::filesystem::exists(c.back() + ".provenance.json"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("golden code point tables equal the live enumeration", "[cli][golden]") {
  const Run r = run({"golden", "--check", "--out", std::string(MXLAB_SOURCE_DIR) + "/data/golden"});
  INFO(r.out);
  CHECK(r.code == 0);
  std::size_t count = 0;
  for (const Format& f : catalogue_formats())
    if (f.bits() <= 16) {
      ++count;
      CHECK(std::filesystem::exists(std::string(MXLAB_SOURCE_DIR) + "/data/golden/codepoints/" + f.name() + ".csv"));
    }
  CHECK(count >= 20);
}

TEST_CASE("quantize writes fake-quant .npy equal to the engine's result", "[cli][quantize]") {
  const auto dir = std::filesystem::temp_directory_path() / "mxlab_test_cli_quantize";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string out = (dir / "q.npy").string();
  const Run r = run({"quantize", "mxfp4", "gen:normal:0,1", "--shape", "8x64", "--data-seed", "5", "--out", out});
  INFO(r.err);
  REQUIRE(r.code == 0);
  auto t = read_npy(out);
  REQUIRE(t.ok());
  CHECK(t->shape() == std::vector<std::int64_t>{8, 64});
  auto input = generate("normal:0,1", "8x64", 5, DType::F32);
  REQUIRE(input.ok());
  auto f = parse_block_format("mxfp4");
  const auto x = input->exact_values();
  auto q = quantize(*f, x, input->shape());
  REQUIRE(q.ok());
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(static_cast<double>(t->data()[i]) == q->values[i]);
  std::filesystem::remove_all(dir);
}

// Regression: dequantize ignored the nibble order and integer encoding BASE.json records and decoded with the
// defaults: 62 of 64 mxfp4 values (high-first) and 35 of 64 mxint8 values (sign-magnitude) wrong, exit 0.
TEST_CASE("dequantize decodes packed files in the packing they record, or refuses a contradicting option", "[cli][quantize]") {
  const auto dir = std::filesystem::temp_directory_path() / "mxlab_test_cli_packing";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  struct Case {
    std::string spec;
    std::vector<std::string> packing;
  };
  const Case cases[] = {
      {"mxfp4", {"--nibble-order", "high-first"}},
      {"mxfp6_e2m3", {"--nibble-order", "high-first"}},
      {"mxint8", {"--int-encoding", "sign-magnitude"}},
      {"mxint4", {"--int-encoding", "sign-magnitude", "--nibble-order", "high-first"}},
      {"mxfp4", {"--block-axis", "0"}},
      {"nvfp4", {"--scale-layout", "cublas", "--nibble-order", "high-first"}},
  };
  for (const auto& c : cases) {
    std::string label = c.spec;
    for (const auto& a : c.packing) label += " " + a;
    INFO(label);
    const std::string base = (dir / "q").string(), deq = (dir / "deq.npy").string(), fake = (dir / "fake.npy").string();
    std::vector<std::string> quantize = {"quantize", c.spec, "gen:laplace:0,1", "--shape", "8x64", "--data-seed", "5"};
    std::vector<std::string> packed = quantize;
    packed.insert(packed.end(), {"--out", base, "--packed"});
    packed.insert(packed.end(), c.packing.begin(), c.packing.end());
    const Run q = run(packed);
    INFO(q.err);
    REQUIRE(q.code == 0);
    const Run d = run({"dequantize", c.spec, base, "--out", deq});
    INFO(d.err);
    REQUIRE(d.code == 0);
    quantize.insert(quantize.end(), {"--out", fake});
    for (std::size_t i = 0; i + 1 < c.packing.size(); i += 2)
      if (c.packing[i] == "--block-axis") quantize.insert(quantize.end(), {c.packing[i], c.packing[i + 1]});
    REQUIRE(run(quantize).code == 0);
    auto a = read_npy(deq);
    auto b = read_npy(fake);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    REQUIRE(a->size() == 512);
    // The fake quantization is float32 (NVFP4's products can need more bits and are rounded to it).
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < a->size(); ++i) wrong += static_cast<float>(a->exact(i)) != b->data()[i];
    CHECK(wrong == 0);
  }
  // An option given to dequantize that contradicts the record is refused, naming both.
  const std::string base = (dir / "h").string();
  REQUIRE(run({"quantize", "mxfp4", "gen:laplace:0,1", "--shape", "8x64", "--out", base, "--packed", "--nibble-order",
               "high-first"}).code == 0);
  const Run agree = run({"dequantize", "mxfp4", base, "--out", (dir / "a.npy").string(), "--nibble-order", "high-first"});
  CHECK(agree.code == 0);
  const Run contradict = run({"dequantize", "mxfp4", base, "--out", (dir / "b.npy").string(), "--nibble-order", "low-first"});
  CHECK(contradict.code == 2);
  CHECK_THAT(contradict.err, Catch::Contains("'--nibble-order low-first'") && Catch::Contains("records nibble-order high-first"));
  CHECK_FALSE(std::filesystem::exists(dir / "b.npy"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("quantize --packed writes every part, and they unpack to the same values", "[cli][quantize]") {
  const auto dir = std::filesystem::temp_directory_path() / "mxlab_test_cli_packed";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string base = (dir / "w").string();
  const Run r = run({"quantize", "nvfp4", "gen:laplace:0,1", "--shape", "4x32", "--out", base, "--packed"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  for (const char* suffix : {".elements.npy", ".scales.npy", ".tensor_scale.npy", ".json"})
    CHECK(std::filesystem::exists(base + suffix));
  auto elements = read_npy_header(base + ".elements.npy");
  REQUIRE(elements.ok());
  // dequantize reads the packed files back; the values equal the fake quantization of the same input.
  const std::string deq = (dir / "deq.npy").string(), fake = (dir / "fake.npy").string();
  REQUIRE(run({"dequantize", "nvfp4", base, "--out", deq}).code == 0);
  REQUIRE(run({"quantize", "nvfp4", "gen:laplace:0,1", "--shape", "4x32", "--out", fake}).code == 0);
  auto a = read_npy(deq);
  auto b = read_npy(fake);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->shape() == b->shape());
  for (std::size_t i = 0; i < a->size(); ++i) CHECK(static_cast<float>(a->exact(i)) == b->data()[i]);
  // Subtile offsets travel too (MX9-style mxint8 with 2-element subtiles).
  const std::string mx9 = (dir / "mx9").string();
  REQUIRE(run({"quantize", "mxint8:e8m0_t16s2", "gen:normal:0,1", "--shape", "2x64", "--out", mx9, "--packed"}).code == 0);
  CHECK(std::filesystem::exists(mx9 + ".subtiles.npy"));
  REQUIRE(run({"dequantize", "mxint8:e8m0_t16s2", mx9, "--out", deq}).code == 0);
  REQUIRE(run({"quantize", "mxint8:e8m0_t16s2", "gen:normal:0,1", "--shape", "2x64", "--out", fake}).code == 0);
  auto c = read_npy(deq);
  auto d = read_npy(fake);
  REQUIRE(c.ok());
  REQUIRE(d.ok());
  for (std::size_t i = 0; i < c->size(); ++i) CHECK(c->exact(i) == static_cast<double>(d->data()[i]));
  CHECK(run({"dequantize", "mxfp4", base, "--out", deq}).code == 2);  // written for another element format
  const Run bad = run({"quantize", "nvfp5", "gen:laplace:0,1", "--out", (dir / "x").string(), "--packed"});
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Catch::Contains("did you mean 'nvfp4'"));
  const Run bad_input_file = run({"quantize", "mxfp4", (dir / "missing.npy").string(), "--out", (dir / "y.npy").string()});
  CHECK(bad_input_file.code == 2);
  CHECK_THAT(bad_input_file.err, Catch::Contains("missing.npy"));
  CHECK_FALSE(std::filesystem::exists(dir / "y.npy"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("analyze: one row per format, exact SSE beside the float64 metrics", "[cli][quantize]") {
  const Run r = run({"analyze", "mxfp4", "nvfp4", "mxfp8_e4m3", "--input", "gen:normal:0,1", "--shape", "4096", "--csv"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto ls = lines(r.out);
  REQUIRE(ls.size() == 4);
  for (const char* c : {"format", "mse", "rmse", "sqnr_db", "max_abs_error", "max_rel_error", "underflow_ratio",
                        "saturation_ratio", "nan_count", "bits_per_element", "sse_exact"})
    CHECK_THAT(ls[0], Catch::Contains(c));
  const std::size_t fmt = column(ls[0], "format"), bpe = column(ls[0], "bits_per_element"), sqnr = column(ls[0], "sqnr_db");
  CHECK(split_csv(ls[1])[fmt] == "mxfp4");
  CHECK(split_csv(ls[1])[bpe] == "4.25");
  CHECK(std::stod(split_csv(ls[3])[sqnr]) > std::stod(split_csv(ls[1])[sqnr]));  // MXFP8 beats MXFP4
  const Run g = run({"analyze", "mxsf", "--input", "gen:normal:0,1", "--gaps", "--csv"});
  REQUIRE(g.code == 0);
  CHECK_THAT(lines(g.out)[0], Catch::Contains("gap"));
  const Run bad = run({"analyze", "mxfp4", "--input", "gen:normal:0", "--round", "sideways"});
  CHECK(bad.code == 2);
  CHECK(run({"analyze", "mxfp4"}).code == 2);
}

TEST_CASE("analyze: with every output NaN the errors are NaN, not the perfect score", "[cli][quantize]") {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / "mxlab_test_cli_all_nan";
  fs::remove_all(dir);
  fs::create_directories(dir);
  // Two blocks of 32, each with one NaN: under block-nan (the default) every element decodes to NaN.
  std::string csv;
  for (int i = 0; i < 64; ++i) csv += (i % 32 == 5 ? std::string("nan") : std::to_string(i % 7 - 3.25)) + "\n";
  const std::string file = (dir / "x.csv").string();
  std::ofstream(file) << csv;
  // One format's CSV row of analyze, as column name -> cell.
  auto analyze = [&](const char* fmt, const std::string& specials) {
    const Run r = run({"analyze", fmt, "--input", file, "--specials", specials, "--csv", "--columns",
                       "format,mse,rmse,sqnr_db,nan_count"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    const auto ls = lines(r.out);
    REQUIRE(ls.size() == 2);
    const auto header = split_csv(ls[0]), cells = split_csv(ls[1]);
    REQUIRE(cells.size() == header.size());
    std::map<std::string, std::string> row;
    for (std::size_t i = 0; i < header.size(); ++i) row[header[i]] = cells[i];
    return row;
  };
  for (const char* fmt : {"mxfp4", "mxfp8_e4m3"}) {
    INFO(fmt);
    auto row = analyze(fmt, "block-nan");
    CHECK(row["mse"] == "nan");
    CHECK(row["rmse"] == "nan");
    CHECK(row["sqnr_db"] == "nan");
    CHECK(row["nan_count"] == "64");
  }
  // The same values with NaN cast elementwise: the 62 finite pairs give finite errors again. E2M1 has no NaN,
  // so the two NaN inputs become +0 (docs/casting.md) and are left out of the errors as non-finite inputs.
  auto row = analyze("mxfp4", "element");
  CHECK(std::isfinite(std::stod(row["mse"])));
  CHECK(std::isfinite(std::stod(row["sqnr_db"])));
  CHECK(row["nan_count"] == "0");
  fs::remove_all(dir);
}

TEST_CASE("cast keeps the sign of a negative NaN literal", "[cli]") {
  const Run r = run({"cast", "e4m3", "-nan", "--csv"});
  REQUIRE(r.code == 0);
  const auto ls = lines(r.out);
  CHECK(split_csv(ls[1])[column(ls[0], "code")] == "255");  // S.1111.111 with S = 1
}

TEST_CASE("verify-cast compares the SIMD cast with the reference over a range", "[cli][kernels]") {
  const Run r = run({"verify-cast", "e4m3", "--range", "0x3F000000:0x3F03FFFF", "--threads", "2", "--csv"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto ls = lines(r.out);
  REQUIRE(ls.size() == 2);
  CHECK(split_csv(ls[1])[column(ls[0], "checked")] == "262144");
  CHECK(split_csv(ls[1])[column(ls[0], "mismatches")] == "0");
  CHECK(run({"verify-cast", "e4m3", "--range", "5:1"}).code == 2);
  CHECK(run({"verify-cast", "e4m3", "--target", "NOPE"}).code == 2);
  CHECK(run({"verify-cast", "nf4"}).code == 2);  // codebooks have no SIMD cast
}

// Bad input over every command: options, format and spec strings, values, tensor files, experiment files and
// output paths that are directories, devices, symbolic links or unwritable. Each gives exit code 2, one line
// naming the input and the problem, nothing on standard output, and leaves no output or temporary file.
TEST_CASE("bad input over every command: exit code 2, one message, no file left", "[cli][quantize]") {
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / "mxlab_test_cli_bad_input";
  fs::remove_all(dir);
  fs::create_directories(dir / "outdir");
  const std::string d = dir.string();
  auto put = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(d + "/" + name, std::ios::binary) << bytes;
  };
  put("short.npy", npy_header("<f4", std::vector<std::int64_t>{1000}) + "abcd");
  put("zero_huge.npy", npy_header("<f4", std::vector<std::int64_t>{0, std::int64_t{1} << 50}));
  put("inf.csv", "1\n1.#INF\n");
  put("hash.csv", "1,2#x\n");
  put("deep.toml", "a = " + std::string(5000, '[') + std::string(5000, ']') + "\n");
  put("unknown.toml", "name = \"u\"\njob = \"analyze\"\nbogus = 1\n");
  put("neg.json", "{\n  \"format\": \"mxfp4\",\n  \"element\": \"float4_e2m1fn\",\n  \"shape\": [-3, 64],\n  \"scale\": \"ue8m0\",\n"
                  "  \"scale_grid\": [3, 2],\n  \"subtile_grid\": [],\n  \"scale_layout\": \"blocks\",\n  \"tensor_scale\": null,\n"
                  "  \"nibble_order\": \"low-first\",\n  \"int_encoding\": \"twos-complement\"\n}\n");
  put("neg.elements.npy", npy_header("|u1", std::vector<std::int64_t>{96}) + std::string(96, '\0'));
  put("neg.scales.npy", npy_header("|u1", std::vector<std::int64_t>{6}) + std::string(6, '\x7f'));
  fs::create_symlink(d + "/short.npy", d + "/link.npy");
  const std::string gen = "gen:normal:0,1";
  const std::string long_number = std::string(1000000, '7');
  const mxlab_test::BadInput cases[] = {
      // quantize: inputs, options, outputs
      {{"quantize", "mxfp4", "--out", d + "/q.npy"}, "missing INPUT"},
      {{"quantize", "mxfp4", gen, "--input", gen, "--out", d + "/q.npy"}, "given twice"},
      {{"quantize", "mxfp4", gen, "--out", d + "/q.npy", "--threads", "0"}, "--threads 0"},
      {{"quantize", "mxfp4", gen, "--out", d + "/q.npy", "--threads", "many"}, "--threads many"},
      {{"quantize", "mxfp4", gen, "--out", d + "/missing/q.npy"}, "missing/q.npy"},
      {{"quantize", "mxfp4", d + "/short.npy", "--out", d + "/q.npy"}, "short.npy"},
      {{"quantize", "mxfp4", gen, "--out", d + "/q.npy", "--block-axis", "2"}, "outside the tensor"},
      {{"quantize", "mxfp4", gen, "--out", d + "/q", "--packed", "--block-axis", "1"}, "outside the tensor"},
      {{"quantize", "mxfp4", gen, "--out", d + "/outdir"}, "outdir': is a directory"},
      {{"quantize", "mxfp4", gen, "--out", "/dev/null"}, "'/dev/null': is a device"},
      {{"quantize", "mxfp4", gen, "--out", "/dev/full"}, "'/dev/full': is a device"},
      {{"quantize", "mxfp4", gen, "--out", d + "/link.npy"}, "link.npy': is a symbolic link"},
      {{"quantize", "mxfp4", gen, "--out", "/proc/mxlab-q.npy"}, "/proc/mxlab-q.npy"},
      {{"quantize", "mxfp4", gen, "--out", "/proc/mxlab-q", "--packed"}, "/proc/mxlab-q.elements.npy"},
      {{"quantize", "mxfp4", gen, "--out", d + "/outdir", "--packed", "--threads", "0"}, "--threads 0"},
      {{"quantize", "mxfp4", gen, "--out", d + "/q.npy", "--profile", "nope"}, "nope"},
      {{"quantize", "mxfp4", gen, "--out", d + "/q.npy", "--shape", "30000x30000x30000"}, "memory budget"},
      {{"quantize", "nvfp4", gen, "--out", d + "/q.npy", "--tensor-scale-max", "0"}, "--tensor-scale-max"},
      {{"quantize", "mxfp4", gen, "--out", d + "/q.npy", "--tensor-scale-max", "448"}, "no tensor scale"},
      {{"quantize", "mxfp9", gen, "--out", d + "/q.npy"}, "mxfp9"},
      {{"quantize", "e2m1:nf4", gen, "--out", d + "/q.npy"}, "the codebook 'nf4' cannot be a scale"},
      // analyze: layouts, axes, tensor files
      {{"analyze", "mxfp4", "--input", d + "/nothing.npy"}, "nothing.npy"},
      {{"analyze", "mxfp4", "--input", gen, "--layout", "hwio"}, "needs a 4-D tensor"},
      {{"analyze", "mxfp4", "--input", gen, "--layout", "nchw"}, "--layout nchw"},
      {{"analyze", "mxfp4", "--input", gen, "--reduction-axes", "3"}, "outside the tensor"},
      {{"analyze", "mxfp4", "--input", gen, "--reduction-axes", "0,x"}, "--reduction-axes 0,x"},
      {{"analyze", "mxfp4", "--input", gen, "--reduction-axes", "0", "--layout", "io"}, "choose one"},
      {{"analyze", "mxfp4", "--input", gen, "--per-block", "--gaps"}, "choose one"},
      {{"analyze", "mxfp4", "--input", gen, "--block-axis", "-2"}, "outside the tensor"},
      {{"analyze", "mxfp4", "--input", gen, "--threads", "2000"}, "--threads 2000"},
      {{"analyze", "mxfp4", "nvfp4", "mxint8"}, "missing --input"},
      {{"analyze", "e2m1:e8m0_c9", "--input", gen}, "channel axis 9 is outside"},
      {{"analyze", "mxfp4", "--input", d + "/zero_huge.npy"}, "zero_huge.npy"},
      {{"analyze", "mxfp4", "--input", d + "/inf.csv"}, "'1.#INF' is not a number"},
      {{"analyze", "mxfp4", "--input", d + "/hash.csv"}, "'2#x' is not a number"},
      {{"analyze", "mxfp4", "--input", gen, "--shape", "0x5"}, "dimension 1 is 0"},
      {{"analyze", "mxfp4", "--input", gen, "--csv", "--out", d + "/outdir"}, "is a directory"},
      // dequantize
      {{"dequantize", "mxfp4", d + "/none", "--out", d + "/v.npy"}, "none.json"},
      {{"dequantize", "mxfp4", d + "/neg", "--out", d + "/v.npy"}, "'" + d + "/neg.json': \"shape\" holds a negative number"},
      {{"dequantize", "mxfp8_e4m3", d + "/neg", "--out", d + "/v.npy"}, "neg.json': was not written for the element format"},
      // cast, codepoints, formats, bounds, verify-cast
      {{"cast", "e4m3", long_number}, "more than 100000 digits"},
      {{"cast", "e4m3", "1", "--out", "/dev/full"}, "'/dev/full': is a device"},
      {{"cast", "e4m3", "1", "--out", "/dev/stdout"}, "'/dev/stdout': is a symbolic link"},
      {{"codepoints", "e2m1", "--out", "/dev/full"}, "'/dev/full': is a device"},
      {{"quantize", "mxfp4", gen, "--out", "-"}, "'-' (standard output) is not a file"},
      {{"codepoints", "e2m1", "--csv", "--out", d + "/outdir"}, "is a directory"},
      {{"codepoints", "float32", "--range", "5:3"}, "--range 5:3"},
      {{"formats", "--csv", "--json"}, "choose one"},
      {{"bounds", "mxint8", "nope"}, "'nope'"},
      {{"verify-cast", "e4m3", "--threads", "x"}, "--threads x"},
      // run and check: experiment files
      {{"run", d + "/deep.toml", "--out", d + "/runs"}, "deep.toml"},
      {{"run", d + "/unknown.toml", "--out", d + "/runs"}, "bogus"},
      {{"run", d + "/absent.toml", "--out", d + "/runs"}, "absent.toml"},
      {{"check", d + "/unknown.toml", "--out", d + "/runs"}, "bogus"},
      {{"run", d + "/unknown.toml", "--out", d + "/runs", "--jobs", "0"}, "--jobs"},
      // the other commands
      {{"train", "--model", "nope", "--data", "digits", "--recipe", "fp32", "--steps", "1", "--out", d + "/train"}, "'nope'"},
      {{"data", "fetch", "no-such-set", "--dir", d + "/data"}, "unknown data set 'no-such-set'"},
      {{"merge", d + "/runs"}, "missing --out DIR"},
      {{"golden", "extra"}, "unexpected argument 'extra'"},
      // paths the file system refuses to look at (names longer than 255 bytes): the reason, never an exception
      {{"golden", "--check", "--dir", d + "/" + std::string(300, 'g')}, "no golden tables found"},
      {{"merge", d + "/" + std::string(300, 'm'), "--out", d + "/merged"}, "File name too long"},
      {{"bench", "--max-mib", "x"}, "--max-mib"},
      // checked before measuring or analyzing (the bench would otherwise run for minutes first)
      {{"bench", "--columns", "name,nope"}, "unknown column 'nope'"},
      {{"bench", "--out", d + "/outdir"}, "is a directory"},
      {{"analyze", "mxfp4", gen, "--columns", "format,nope"}, "unknown column 'nope'"},
      {{"bounds", "mxint8", "boost_e2m5", "--max-gap", "-9"}, "--max-gap -9"},
  };
  mxlab_test::check_bad_inputs(dir, cases);
  CHECK(std::size(cases) >= 40);
  fs::remove_all(dir);
}

TEST_CASE("quantize and analyze take the input positionally or with --input, with any thread count", "[cli][quantize]") {
  const auto dir = std::filesystem::temp_directory_path() / "mxlab_test_cli_input_forms";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string a = (dir / "a.npy").string(), b = (dir / "b.npy").string();
  CHECK(run({"quantize", "nvfp4", "gen:laplace:0,1", "--shape", "40x100", "--out", a, "--threads", "1"}).code == 0);
  CHECK(run({"quantize", "nvfp4", "--input", "gen:laplace:0,1", "--shape", "40x100", "--out", b, "--threads", "3"})
            .code == 0);
  std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
  const std::string sa((std::istreambuf_iterator<char>(fa)), {}), sb((std::istreambuf_iterator<char>(fb)), {});
  CHECK(sa.size() > 4000 * 4);
  CHECK(sa == sb);
  const Run p = run({"analyze", "mxfp4", "gen:laplace:0,1", "--shape", "40x100", "--csv", "--threads", "1"});
  const Run q = run({"analyze", "mxfp4", "--input", "gen:laplace:0,1", "--shape", "40x100", "--csv", "--threads", "2"});
  CHECK(p.code == 0);
  CHECK(p.out == q.out);
  CHECK_THAT(p.out, Catch::Contains(",simd:"));
  std::filesystem::remove_all(dir);
}

// Regression: outside the repository `golden --check` reported every file as differing and `golden` wrote
// ./data/golden wherever it ran.
TEST_CASE("golden --check finds the tables or says where it looked, and never writes", "[cli][golden]") {
  const auto dir = std::filesystem::temp_directory_path() / "mxlab_test_golden_elsewhere";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto here = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  const Run ok = run({"golden", "--check"});
  const Run missing = run({"golden", "--check", "--dir", (dir / "none").string()});
  std::filesystem::current_path(here);
  CHECK(ok.code == 0);
  CHECK_THAT(ok.out, Catch::Contains("match the engine"));
  CHECK(missing.code == 2);
  CHECK_THAT(missing.err, Catch::Contains("none/codepoints"));
  CHECK(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);
}

TEST_CASE("one vocabulary: block format names in cast and codepoints mean their element format", "[cli]") {
  const Run blocks = run({"formats", "--blocks", "--csv"});
  CHECK(blocks.code == 0);
  CHECK_THAT(blocks.out, Catch::Contains("nvfp4,float4_e2m1fn,ue4m3,float32,16,amax,4.5"));
  CHECK_THAT(blocks.out, Catch::Contains("mxfp8_e4m3,float8_e4m3fn,float8_e8m0fnu,,32,floor,8.25"));
  const Run cast_block = run({"cast", "nvfp4", "2.6", "--csv"});
  const Run cast_element = run({"cast", "e2m1", "2.6", "--csv"});
  CHECK(cast_block.code == 0);
  CHECK(cast_block.out == cast_element.out);
  CHECK_THAT(cast_block.err, Catch::Contains("block format") && Catch::Contains("float4_e2m1fn"));
  const Run cp_block = run({"codepoints", "mxfp4", "--csv"});
  const Run cp_element = run({"codepoints", "float4_e2m1fn", "--csv"});
  CHECK(cp_block.out == cp_element.out);
  CHECK(cp_element.err.empty());
}

namespace {

/// Runs with the environment variable COLUMNS set to `columns` (unset after).
Run run_at_width(const std::string& columns, std::vector<std::string> args) {
  ::setenv("COLUMNS", columns.c_str(), 1);
  Run r = run(std::move(args));
  ::unsetenv("COLUMNS");
  return r;
}

std::vector<std::pair<std::size_t, std::string>> tokens(const std::string& line) {
  std::vector<std::pair<std::size_t, std::string>> v;
  for (std::size_t i = 0; i < line.size();) {
    if (line[i] == ' ') {
      ++i;
      continue;
    }
    const std::size_t end = std::min(line.find(' ', i), line.size());
    v.emplace_back(i, line.substr(i, end - i));
    i = end;
  }
  return v;
}

/// The column names of a terminal table whose header starts at line `first`, with names broken after an
/// underscore onto a second line joined again; *rows_at is the first line of the rows.
std::vector<std::string> header_names(const std::vector<std::string>& ls, std::size_t first, std::size_t* rows_at) {
  const auto top = tokens(ls.at(first));
  const bool two = std::all_of(top.begin(), top.end(), [](const auto& t) { return t.second.back() == '_'; });
  const auto bottom = two ? tokens(ls.at(first + 1)) : top;
  std::vector<std::string> names;
  for (const auto& [at, text] : bottom) {
    std::string name = text;
    if (two)
      for (const auto& [t_at, t_text] : top)
        if (t_at < at + text.size() && at < t_at + t_text.size()) name = t_text + text;
    names.push_back(name);
  }
  *rows_at = first + (two ? 2 : 1);
  return names;
}

/// The words of a line.
std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> v;
  for (const auto& t : tokens(line)) v.push_back(t.second);
  return v;
}

std::size_t widest(const std::vector<std::string>& ls) {
  std::size_t w = 0;
  for (const auto& l : ls) w = std::max(w, l.size());
  return w;
}

/// Significant digits of a number in engineering notation ("12.35e-6": 4).
std::size_t significant_digits(const std::string& cell) {
  std::string mantissa = cell.substr(0, cell.find('e'));
  std::size_t digits = 0;
  bool leading = true;
  for (char c : mantissa) {
    if (c < '0' || c > '9') continue;
    if (leading && c == '0') continue;
    leading = false;
    ++digits;
  }
  return digits;
}

}  // namespace

TEST_CASE("engineering notation: exponents a multiple of 3, a fixed number of significant digits", "[cli]") {
  CHECK(cli::engineering(0.0001220703125, 4) == "122.1e-6");  // 2^-13
  CHECK(cli::engineering(1.5, 4) == "1.500");
  CHECK(cli::engineering(448, 4) == "448.0");
  CHECK(cli::engineering(57344, 4) == "57.34e3");
  CHECK(cli::engineering(-0.75, 4) == "-750.0e-3");
  CHECK(cli::engineering(999.96, 4) == "1.000e3");  // rounding carries into the next power of 1000
  CHECK(cli::engineering(3.4028234663852886e+38, 4) == "340.3e36");
  CHECK(cli::engineering(1.4012984643248171e-45, 3) == "1.40e-45");
  CHECK(cli::engineering(0.0, 4) == "0");
  CHECK(cli::engineering(std::numeric_limits<double>::infinity(), 4) == "inf");
  CHECK(cli::engineering(-std::numeric_limits<double>::infinity(), 4) == "-inf");
  CHECK(cli::engineering(std::numeric_limits<double>::quiet_NaN(), 4) == "nan");
}

TEST_CASE("terminal tables fit the width: compact columns, header breaks, trailing columns left out", "[cli]") {
  const std::vector<std::string> analyze = {"analyze", "mxfp4", "mxfp8_e4m3", "gen:normal:0,1", "--shape", "4096"};
  const std::vector<std::string> compact = {"format", "mse", "sqnr_db", "max_abs_error", "underflow_ratio",
                                            "saturation_ratio", "bits_per_element", "engine"};
  const Run wide = run_at_width("200", analyze);
  INFO(wide.out << wide.err);
  REQUIRE(wide.code == 0);
  CHECK(wide.err.empty());
  std::size_t rows_at = 0;
  auto ls = lines(wide.out);
  CHECK(header_names(ls, 0, &rows_at) == compact);
  CHECK(ls.size() == rows_at + 2);
  CHECK(widest(ls) <= 200);
  const Run narrow = run_at_width("80", analyze);
  INFO(narrow.out << narrow.err);
  REQUIRE(narrow.code == 0);
  ls = lines(narrow.out);
  CHECK(widest(ls) <= 80);
  auto shown = header_names(ls, 0, &rows_at);
  CHECK(ls.size() == rows_at + 2);
  REQUIRE(shown.size() <= compact.size());
  CHECK(std::equal(shown.begin(), shown.end(), compact.begin()));  // the leading columns, in order
  if (shown.size() < compact.size()) {  // the rest is named on standard error, in one line
    CHECK(lines(narrow.err).size() == 1);
    for (std::size_t i = shown.size(); i < compact.size(); ++i) CHECK_THAT(narrow.err, Catch::Contains(compact[i]));
    CHECK_THAT(narrow.err, Catch::Contains("--columns"));
  } else {
    CHECK(narrow.err.empty());
  }
  // Every table command fits 80 characters; a table too wide for 30 keeps its first column and says what it left out.
  for (const std::vector<std::string>& c : std::vector<std::vector<std::string>>{
           {"formats"}, {"formats", "--blocks"}, {"bounds", "mxint8", "mxfp8_e4m3"}, {"codepoints", "fp8_e4m3"},
           {"cast", "e4m3", "460", "0.1", "-inf", "nan"},
           {"analyze", "mxfp4", "gen:normal:0,1", "--shape", "256", "--per-block"},
           {"analyze", "mxfp4", "gen:normal:0,1", "--shape", "4096", "--gaps"}}) {
    INFO(c[0] << " " << c.back());
    const Run r = run_at_width("80", c);
    CHECK(r.code == 0);
    CHECK(widest(lines(r.out)) <= 80);
    const Run tiny = run_at_width("30", c);
    CHECK(tiny.code == 0);
    CHECK_THAT(tiny.err, Catch::Contains("left out"));
  }
  // Without COLUMNS and a terminal: 100 characters.
  ::unsetenv("COLUMNS");
  const Run formats = run({"formats"});
  CHECK(widest(lines(formats.out)) <= cli::kDefaultTerminalWidth);
}

TEST_CASE("--columns chooses the columns of terminals and files; an unknown name is bad input", "[cli]") {
  const std::vector<std::string> analyze = {"analyze", "mxfp4", "nvfp4", "gen:normal:0,1", "--shape", "4096"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = analyze;
    a.insert(a.end(), extra.begin(), extra.end());
    return run_at_width("80", a);
  };
  std::size_t rows_at = 0;
  const Run two = with({"--columns", "sqnr_db,format"});
  REQUIRE(two.code == 0);
  auto ls = lines(two.out);
  CHECK(header_names(ls, 0, &rows_at) == std::vector<std::string>{"sqnr_db", "format"});
  CHECK(tokens(ls.at(rows_at)).back().second == "mxfp4");
  // Named columns are all shown, whatever the width.
  const Run all = with({"--columns", "all"});
  REQUIRE(all.code == 0);
  CHECK(all.err.empty());
  const Run csv = with({"--csv"});
  REQUIRE(csv.code == 0);
  const auto csv_lines = lines(csv.out);
  CHECK(header_names(lines(all.out), 0, &rows_at) == split_csv(csv_lines[0]));
  // Files honour --columns too, with every digit.
  const Run some = with({"--csv", "--columns", "format,sqnr_db"});
  REQUIRE(some.code == 0);
  const auto some_lines = lines(some.out);
  CHECK(some_lines[0] == "format,sqnr_db");
  CHECK(split_csv(some_lines[1])[1] == split_csv(csv_lines[1])[column(csv_lines[0], "sqnr_db")]);
  const Run json = with({"--json", "--columns", "mse"});
  CHECK_THAT(json.out, Catch::Contains("\"columns\": [\"mse\"]"));
  // One message naming the bad name and listing the valid ones, exit 2, nothing on standard output.
  for (const std::vector<std::string>& extra : std::vector<std::vector<std::string>>{
           {"--columns", "format,bogus"}, {"--columns", "format,,mse"}, {"--csv", "--columns", "bogus"}}) {
    const Run bad = with(extra);
    CHECK(bad.code == 2);
    CHECK(bad.out.empty());
    CHECK(lines(bad.err).size() == 1);
    CHECK_THAT(bad.err, Catch::Contains("--columns") && Catch::Contains("sqnr_db") && Catch::Contains("engine"));
  }
  CHECK_THAT(with({"--columns", "format,bogus"}).err, Catch::Contains("'bogus'"));
  const Run bounds_bad = run({"bounds", "mxint8", "mxfp8_e4m3", "--columns", "nope"});
  CHECK(bounds_bad.code == 2);
  CHECK(bounds_bad.out.empty());
  // The streamed code point CSV honours --columns.
  const Run big = run({"codepoints", "float32", "--range", "0x3f800000:0x3f81ffff", "--csv", "--columns", "hex,exact"});
  REQUIRE(big.code == 0);
  const auto big_lines = lines(big.out);
  CHECK(big_lines.size() == 0x20001);
  CHECK(big_lines[0] == "hex,exact");
  CHECK(big_lines[2] == "0x3F800001,1.00000011920928955078125");
  // Every table command documents --columns.
  for (const char* cmd : {"formats", "codepoints", "cast", "analyze", "bounds", "verify-cast", "data"}) {
    INFO(cmd);
    CHECK_THAT(run({cmd, "--help"}).out, Catch::Contains("--columns"));
  }
}

TEST_CASE("terminal numbers: engineering notation with the same significant digits per column", "[cli]") {
  const Run r = run_at_width("200", {"analyze", "mxfp4", "mxint8", "mxfp8_e4m3", "gen:normal:0,1", "--shape", "4096"});
  REQUIRE(r.code == 0);
  std::size_t rows_at = 0;
  const auto ls = lines(r.out);
  const auto names = header_names(ls, 0, &rows_at);
  for (const char* col : {"mse", "sqnr_db", "max_abs_error", "bits_per_element"}) {
    INFO(col);
    const auto at = static_cast<std::size_t>(std::find(names.begin(), names.end(), col) - names.begin());
    REQUIRE(at < names.size());
    for (std::size_t i = rows_at; i < ls.size(); ++i) {
      const std::string cell = tokens(ls[i]).at(at).second;
      INFO(cell);
      CHECK(significant_digits(cell) == static_cast<std::size_t>(cli::kTerminalDigits));
      const auto e = cell.find('e');
      if (e != std::string::npos) CHECK(std::stoi(cell.substr(e + 1)) % 3 == 0);
      const double mantissa = std::fabs(std::stod(cell.substr(0, e)));
      CHECK((mantissa >= 1 && mantissa < 1000));
    }
  }
  // Integers stay integers, inf and nan stay readable, empty cells stay empty.
  const Run cp = run_at_width("200", {"codepoints", "fp8_e4m3", "--columns", "code,value,gap_up"});
  REQUIRE(cp.code == 0);
  const auto cl = lines(cp.out);
  CHECK(words(cl.at(1 + 0x7E)) == words("126  448.0"));
  CHECK(words(cl.at(1 + 0x7F)) == words("127  nan"));
  CHECK(words(cl.at(1 + 0x01)) == words("1  1.953e-3  1.953e-3"));
  const Run cast = run_at_width("200", {"cast", "e5m2", "1e9", "--columns", "input_text,value"});
  CHECK(words(lines(cast.out).at(1)) == words("1e9  inf"));
}

TEST_CASE("CSV is the same at every terminal width, with every digit", "[cli]") {
  const std::vector<std::string> args = {"analyze", "mxfp4", "nvfp4", "gen:normal:0,1", "--shape", "4096", "--csv"};
  const Run a = run_at_width("80", args), b = run_at_width("200", args), c = run(args);
  REQUIRE(a.code == 0);
  CHECK(a.out == b.out);
  CHECK(a.out == c.out);
  CHECK(a.err.empty());
  const auto ls = lines(a.out);
  CHECK(split_csv(ls[0]).size() == 14);  // every column
  const std::string mse = split_csv(ls[1])[column(ls[0], "mse")];
  CHECK(mse.size() > 12);  // %.17g, not the terminal's 4 digits
  // The terminal shows the same figure rounded to its digits.
  const Run text =
      run_at_width("200", {"analyze", "mxfp4", "nvfp4", "gen:normal:0,1", "--shape", "4096", "--columns", "mse"});
  CHECK(lines(text.out).at(1) == cli::engineering(std::stod(mse), cli::kTerminalDigits));
  const Run codepoints = run_at_width("40", {"codepoints", "e2m1", "--csv"});
  CHECK(codepoints.out == run({"codepoints", "e2m1", "--csv"}).out);
  CHECK_THAT(codepoints.out, Catch::StartsWith("code,hex,bits,sign,exponent,mantissa,class,value,exact,gap_up\n"));
}

TEST_CASE("provenance names the SIMD target that ran, or the reference", "[cli][quantize]") {
  const auto dir = std::filesystem::temp_directory_path() / "mxlab_test_cli_provenance";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  const std::string target = ops::simd_target();
  INFO("simd target " << target);
  const std::string fake = (dir / "q.npy").string(), packed = (dir / "w").string();
  REQUIRE(run({"quantize", "mxfp4", "gen:normal:0,1", "--shape", "8x64", "--out", fake}).code == 0);
  const std::string fake_prov = slurp(fake + ".provenance.json");
  CHECK_THAT(fake_prov, Catch::Contains("\"simd_target\": \"" + target + "\""));
  CHECK_THAT(fake_prov, Catch::Contains("\"input\": ") && !Catch::Contains("scalar"));
  REQUIRE(run({"quantize", "mxfp4", "gen:normal:0,1", "--shape", "8x64", "--out", packed, "--packed"}).code == 0);
  CHECK_THAT(slurp(packed + ".json"), Catch::Contains("; simd " + target + ";"));
  // float64 values that float32 cannot hold go to the reference, and the provenance says so.
  const std::string f64 = (dir / "x64.npy").string();
  {
    const std::vector<double> v(64, 1.0 + 0x1p-40);
    REQUIRE(write_npy(f64, std::span<const double>(v), std::vector<std::int64_t>{64}).ok());
  }
  REQUIRE(run({"quantize", "mxfp4", f64, "--out", (dir / "r.npy").string()}).code == 0);
  CHECK_THAT(slurp((dir / "r.npy").string() + ".provenance.json"), Catch::Contains("\"simd_target\": \"reference\""));
  const Run a = run({"analyze", "mxfp4", "gen:normal:0,1", "--shape", "64", "--json"});
  CHECK_THAT(a.out, Catch::Contains("\"simd_target\": \"" + target + "\""));
  for (const std::vector<std::string>& c : std::vector<std::vector<std::string>>{
           {"cast", "e4m3", "1.1"}, {"codepoints", "e2m1"}, {"formats"}, {"bounds", "mxfp4", "mxint8"}}) {
    INFO(c[0]);
    std::vector<std::string> args = c;
    const std::string out = (dir / (c[0] + ".csv")).string();
    for (const char* extra : {"--csv", "--out"}) args.emplace_back(extra);
    args.push_back(out);
    REQUIRE(run(args).code == 0);
    CHECK_THAT(slurp(out + ".provenance.json"), Catch::Contains("\"simd_target\": \"reference\""));
  }
  std::filesystem::remove_all(dir);
}

// The report's structure only: which rows are unstable depends on the machine, never checked as a threshold.
TEST_CASE("bench repeats each kernel and GEMM row, reports median and spread, and marks ratios from unstable rows", "[cli][bench]") {
  const Run r = run({"bench", "--quick", "--kernels-only", "--max-mib", "1", "--repeats", "2", "--csv"});
  REQUIRE(r.code == 0);
  const auto ls = lines(r.out);
  REQUIRE(ls.size() > 10);
  const std::size_t name = column(ls[0], "name"), kernel = column(ls[0], "kernel"), size = column(ls[0], "input_bytes"),
                    note = column(ls[0], "note"), repeats = column(ls[0], "repeats"), spread = column(ls[0], "spread_pct"),
                    stable = column(ls[0], "stable"), ratio = column(ls[0], "ratio_to_copy");
  std::map<std::string, bool> copy_stable;  // by input size
  std::size_t measured = 0;
  for (std::size_t i = 1; i < ls.size(); ++i) {
    const auto c = split_csv(ls[i]);
    INFO(ls[i]);
    REQUIRE(c.size() == split_csv(ls[0]).size());
    CHECK_THAT(c[kernel], !Catch::Contains("gemm") && !Catch::Contains("train"));
    if (c[note].rfind("unsupported", 0) == 0) continue;
    ++measured;
    CHECK(c[repeats] == "2");
    const double s = std::stod(c[spread]);
    CHECK(s >= 0);
    // The CSV prints the spread to 0.1 point: a printed 20.0 may be a spread just above 20 (unstable) or at it.
    if (std::abs(s - 20) >= 0.05) CHECK(c[stable] == (s <= 20 ? "yes" : "no"));
    CHECK((c[stable] == "no") == (c[note].find("unstable: repeats span") != std::string::npos));
    if (c[kernel] == "copy") copy_stable[c[size]] = c[stable] == "yes";
    else if (c[name].rfind("e2e", 0) != 0 && !c[ratio].empty()) {
      // A ratio to an unstable copy, or of an unstable row, says so.
      const bool marked = c[note].find("ratio_to_copy from an unstable row") != std::string::npos;
      CHECK(marked == (!copy_stable.at(c[size]) || c[stable] == "no"));
    }
  }
  CHECK(measured > 10);
  CHECK(copy_stable.size() == 2);  // 256 KiB and 1 MiB
  // The GEMM rows too: each model's rate is the median of its repeats, its ratio to OpenBLAS's row marked when
  // that row is unstable.
  const Run g = run({"bench", "--quick", "--gemm-only", "--repeats", "2", "--csv"});
  REQUIRE(g.code == 0);
  const auto gl = lines(g.out);
  REQUIRE(gl.size() > 10);
  bool blas_stable = true;
  std::size_t gemm_rows = 0;
  for (std::size_t i = gl.size() - 1; i >= 1; --i) {  // OpenBLAS's row closes each shape's rows
    const auto c = split_csv(gl[i]);
    INFO(gl[i]);
    REQUIRE(c.size() == split_csv(gl[0]).size());
    CHECK(c[repeats] == "2");
    const double s = std::stod(c[spread]);
    // The CSV prints the spread to 0.1 point: a printed 20.0 may be a spread just above 20 (unstable) or at it.
    if (std::abs(s - 20) >= 0.05) CHECK(c[stable] == (s <= 20 ? "yes" : "no"));
    CHECK((c[stable] == "no") == (c[note].find("unstable: repeats span") != std::string::npos));
    if (c[name].rfind("openblas", 0) == 0) {
      blas_stable = c[stable] == "yes";
    } else {
      ++gemm_rows;
      CHECK_THAT(c[note], Catch::Contains("ratio_to_openblas_fp32="));
      CHECK((c[note].find("ratio from an unstable openblas row") != std::string::npos) == !blas_stable);
    }
  }
  CHECK(gemm_rows >= 13);  // the exact reference and six models on the kernel, six models' scalar definitions
  const Run both = run({"bench", "--gemm-only", "--kernels-only"});
  CHECK(both.code == 2);
  CHECK_THAT(both.err, Catch::Contains("exclude each other"));
}
