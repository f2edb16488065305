// Checks CSV and raw float32 files against C++ literals of the same decimal/hex text and hand-written IEEE 754 bytes.
#include <catch2/catch.hpp>

#include <clocale>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "io_test_support.hpp"
#include "mxlab/io/csv.hpp"
#include "mxlab/io/raw.hpp"

using namespace mxlab;
using mxlab::test::bytes;
using mxlab::test::get_bytes;
using mxlab::test::put_bytes;
using mxlab::test::TempDir;

TEST_CASE("csv numbers are the doubles nearest to their text", "[io][csv]") {
  // The compiler converts decimal literals to the nearest double (C++ [lex.fcon]), as strtod must.
  const std::string text =
      "\xEF\xBB\xBF# weights exported by hand\n"
      "0.1, 0.2,0.3\n"
      "\n"
      "  -1e-5\t2.5e10   # trailing comment\n"
      "0x1.8p-3,1e-400,4.9e-324\r\n"
      "inf,-inf,+7\n"
      "123456789012345678901234567890\n";
  auto t = parse_csv(text, "mem");
  REQUIRE(t.ok());
  CHECK(t->dtype() == DType::F64);
  const std::vector<double> want = {0.1, 0.2,      0.3,      -1e-5,     2.5e10, 0x1.8p-3,
                                    0.0, 4.9e-324, HUGE_VAL, -HUGE_VAL, 7.0,    123456789012345678901234567890.0};
  REQUIRE(t->shape() == std::vector<std::int64_t>{static_cast<std::int64_t>(want.size())});
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO(i);
    CHECK(t->f64_data()[i] == want[i]);
  }
  CHECK(t->f64_data()[7] == std::numeric_limits<double>::denorm_min());
  auto n = parse_csv("nan, -nan\n", "mem");
  REQUIRE(n.ok());
  CHECK(std::isnan(n->f64_data()[0]));
  CHECK(std::signbit(n->f64_data()[1]));
}

TEST_CASE("csv table layout gives rows x columns", "[io][csv]") {
  auto t = parse_csv("# header comment\n1,2,3\n4 5 6\n\n7,8,9 # last\n", "mem", CsvOptions{CsvLayout::Table});
  REQUIRE(t.ok());
  CHECK(t->shape() == std::vector<std::int64_t>{3, 3});
  CHECK(t->f64_data() == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto flat = parse_csv("1,2\n3\n", "mem");
  REQUIRE(flat.ok());
  CHECK(flat->shape() == std::vector<std::int64_t>{3});
}

TEST_CASE("csv does not depend on LC_NUMERIC", "[io][csv]") {
  const char* old = std::setlocale(LC_NUMERIC, nullptr);
  const std::string saved = old ? old : "C";
  bool switched = false;
  for (const char* name : {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "de_DE"})
    if (std::setlocale(LC_NUMERIC, name) != nullptr) {
      switched = true;
      break;
    }
  auto t = parse_csv("1.5,2.25\n", "mem");
  std::setlocale(LC_NUMERIC, saved.c_str());
  if (!switched) WARN("no comma-decimal locale installed; checked in the current locale only");
  REQUIRE(t.ok());
  CHECK(t->f64_data() == std::vector<double>{1.5, 2.25});
}

TEST_CASE("csv errors name the input, the line and the problem", "[io][csv][errors]") {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"1,2\n3,abc\n", "csv 'in.csv' line 2: value 2 'abc' is not a number"},
      {"1.2.3\n", "csv 'in.csv' line 1: value 1 '1.2.3' is not a number"},
      {"1e5x\n", "csv 'in.csv' line 1: value 1 '1e5x' is not a number"},
      {"1,,2\n", "csv 'in.csv' line 1: empty field after value 1"},
      {"\n\n,1\n", "csv 'in.csv' line 3: empty field before the first comma"},
      {"1,2,\n", "csv 'in.csv' line 1: empty field after the last comma"},
      {"# ok\n1e400\n", "csv 'in.csv' line 2: value 1 '1e400' is beyond the double range"},
      {"-1e999\n", "csv 'in.csv' line 1: value 1 '-1e999' is beyond the double range"},
      {"1;2\n", "csv 'in.csv' line 1: value 1 '1;2' is not a number"},
      {"", "csv 'in.csv': holds no numbers"},
      {"# only comments\n\n", "csv 'in.csv': holds no numbers"},
      // '#' inside a token is not a comment: these are not numbers (they used to read as 1 and 2).
      {"1.#INF\n", "csv 'in.csv' line 1: value 1 '1.#INF' is not a number"},
      {"1,2#x\n", "csv 'in.csv' line 1: value 2 '2#x' is not a number"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    auto t = parse_csv(c.text, "in.csv");
    REQUIRE_FALSE(t.ok());
    CHECK(t.error().message == c.message);
  }
  // A comment after a space or at the start of a line still ends the line.
  auto commented = parse_csv("1 # note\n2\t#note\n# 3\n", "in.csv");
  REQUIRE(commented.ok());
  CHECK(commented->f64_data() == std::vector<double>{1, 2});
  // A huge token is named by its start and length, not repeated whole.
  auto long_token = parse_csv(std::string(100000, '7') + "x\n", "in.csv");
  REQUIRE_FALSE(long_token.ok());
  CHECK_THAT(long_token.error().message, Catch::Contains("(100001 characters)"));
  CHECK(long_token.error().message.size() < 200);
  auto ragged = parse_csv("1,2,3\n4,5\n", "in.csv", CsvOptions{CsvLayout::Table});
  REQUIRE_FALSE(ragged.ok());
  CHECK(ragged.error().message ==
        "csv 'in.csv' line 2: 2 values, but line 1 has 3 (a table needs the same count on every line)");
}

TEST_CASE("csv files, compressed files and missing files", "[io][csv]") {
  TempDir dir;
  put_bytes(dir.file("a.csv"), "1,2\n3,4\n");
  auto t = read_csv(dir.file("a.csv"), CsvOptions{CsvLayout::Table});
  REQUIRE(t.ok());
  CHECK(t->shape() == std::vector<std::int64_t>{2, 2});
  put_bytes(dir.file("a.csv.gz"), test::gzip_stored("0.5\n0.25 x\n"));
  auto g = read_csv(dir.file("a.csv.gz"));
  REQUIRE_FALSE(g.ok());
  CHECK(g.error().message == "csv '" + dir.file("a.csv.gz") + "' line 2: value 2 'x' is not a number");
  auto m = read_csv(dir.file("none.csv"));
  REQUIRE_FALSE(m.ok());
  CHECK(m.error().message == "csv '" + dir.file("none.csv") + "': cannot open: No such file or directory");
}

TEST_CASE("raw float32 files are little-endian IEEE 754 binary32", "[io][raw]") {
  TempDir dir;
  // 1.0f = 0x3F800000, -2.0f = 0xC0000000, 0.1f = 0x3DCCCCCD, smallest subnormal = 0x00000001.
  const std::string file = bytes({0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0xC0, 0xCD, 0xCC, 0xCC, 0x3D, 1, 0, 0, 0});
  put_bytes(dir.file("a.f32"), file);
  auto t = read_raw_f32(dir.file("a.f32"));
  REQUIRE(t.ok());
  CHECK(t->shape() == std::vector<std::int64_t>{4});
  CHECK(t->data() == std::vector<float>{1.0f, -2.0f, 0.1f, std::numeric_limits<float>::denorm_min()});
  auto s = read_raw_f32(dir.file("a.f32"), std::vector<std::int64_t>{2, 2});
  REQUIRE(s.ok());
  CHECK(s->shape() == std::vector<std::int64_t>{2, 2});

  REQUIRE(write_raw_f32(dir.file("b.f32"), t->data()).ok());
  CHECK(get_bytes(dir.file("b.f32")) == file);

  put_bytes(dir.file("a.f32.gz"), test::gzip_stored(file));
  auto g = read_raw_f32(dir.file("a.f32.gz"), std::vector<std::int64_t>{4});
  REQUIRE(g.ok());
  CHECK(g->data() == t->data());
}

TEST_CASE("raw float32 errors name the file and the problem", "[io][raw][errors]") {
  TempDir dir;
  put_bytes(dir.file("odd.f32"), std::string(10, '\0'));
  auto odd = read_raw_f32(dir.file("odd.f32"));
  REQUIRE_FALSE(odd.ok());
  CHECK(odd.error().message ==
        "raw '" + dir.file("odd.f32") + "': holds 10 bytes, which is not a whole number of 4-byte float32 values");
  put_bytes(dir.file("three.f32"), std::string(12, '\0'));
  auto mismatch = read_raw_f32(dir.file("three.f32"), std::vector<std::int64_t>{2, 2});
  REQUIRE_FALSE(mismatch.ok());
  CHECK(mismatch.error().message ==
        "raw '" + dir.file("three.f32") + "': holds 12 bytes, but shape 2x2 needs 4 float32 values = 16 bytes");
  put_bytes(dir.file("three.f32.gz"), test::gzip_stored(std::string(12, '\0')));
  auto gz = read_raw_f32(dir.file("three.f32.gz"), std::vector<std::int64_t>{2, 2});
  REQUIRE_FALSE(gz.ok());
  CHECK(gz.error().message == "raw '" + dir.file("three.f32.gz") + "': holds 3 float32 values, but shape 2x2 needs 4");
  auto neg = read_raw_f32(dir.file("three.f32"), std::vector<std::int64_t>{-3});
  REQUIRE_FALSE(neg.ok());
  CHECK(neg.error().message == "raw '" + dir.file("three.f32") + "': dimension 1 is negative (-3)");
  auto missing = read_raw_f32(dir.file("none.f32"));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message == "raw '" + dir.file("none.f32") + "': cannot open: No such file or directory");
}
